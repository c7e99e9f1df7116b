// unlocked_check: Promela twin of models/unlocked_check.py
// config: producers=1 consumers=1 capacity=1 items=1
//
// One `atomic` per safeprefetch step, labelled with the step's label.
// Expected: an invalid end state (safeprefetch: lost_wakeup).

#define CAP    1
#define ITEMS  1
#define NT     2      /* threads: producer0, consumer0 (= _pid) */
#define FREE   255    /* mutex owner when free (safeprefetch: -1) */

byte count;           /* len(buf) */
byte nrecv;           /* len(received) */
bool took_none;       /* received holds a None: a take found nothing */
byte lock = FREE;
chan not_empty = [NT] of { byte };
chan not_full = [NT] of { byte };
bool woken[NT];
hidden byte w;

inline wait(cv, m) {
    atomic { assert(m == _pid); m = FREE; cv!_pid };
    atomic { woken[_pid] && m == FREE -> woken[_pid] = false; m = _pid }
}
inline notify_one(cv) {
    atomic { if :: nempty(cv) -> cv?w; woken[w] = true; w = 0 :: empty(cv) -> skip fi }
}

active proctype producer() {
    byte left = ITEMS;
lock_:
    atomic { lock == FREE -> lock = _pid };
check_full:
    if
    :: count == CAP -> goto wait_for_space
    :: else -> goto put
    fi;
wait_for_space:
    wait(not_full, lock);
    goto check_full;
put:
    atomic { count++; left--; assert(count <= CAP) };
notify_not_empty:
    notify_one(not_empty);
unlock:
    if
    :: atomic { left > 0 -> assert(lock == _pid); lock = FREE }; goto lock_
    :: atomic { left == 0 -> assert(lock == _pid); lock = FREE }; goto end_done
    fi;
end_done:
    (false)
}

active proctype consumer() {
    byte quota = ITEMS;
check_empty_no_lock:    /* the bug: the predicate is read without the lock... */
    if
    :: count == 0 -> goto lock_to_wait
    :: else -> goto lock_to_get
    fi;
lock_to_wait:
    atomic { lock == FREE -> lock = _pid };
wait_for_item:          /* ...and not read again once the lock is held */
    wait(not_empty, lock);
unlock_after_wait:
    atomic { assert(lock == _pid); lock = FREE };
    goto check_empty_no_lock;
lock_to_get:
    atomic { lock == FREE -> lock = _pid };
get:
    atomic { if :: count > 0 -> count--; nrecv++ :: else -> took_none = true fi; quota--;
             assert(!took_none) };      /* invariant: a take always finds an item */
notify_not_full:
    notify_one(not_full);
unlock:
    if
    :: atomic { quota > 0 -> assert(lock == _pid); lock = FREE }; goto check_empty_no_lock
    :: atomic { quota == 0 -> assert(lock == _pid); lock = FREE }; goto end_done
    fi;
end_done:
    (false)
}

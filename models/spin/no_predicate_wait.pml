// no_predicate_wait: Promela twin of models/no_predicate_wait.py
// config: producers=1 consumers=1 capacity=1 items=1
//
// One `atomic` per safeprefetch step, labelled with the step's label.
// Expected: an invalid end state (safeprefetch: lost_wakeup; SPIN has no
// notion of a lost wakeup, only of a process stuck outside an end state).

#define CAP    1
#define ITEMS  1
#define NT     2      /* threads: producer0, consumer0 (= _pid) */
#define FREE   255    /* mutex owner when free (safeprefetch: -1) */

byte count;
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
lock_:
    atomic { lock == FREE -> lock = _pid };
wait_for_item:      /* the bug: no `while count == 0` around the wait */
    wait(not_empty, lock);
get:
    atomic { assert(count > 0); count--; quota-- };
notify_not_full:
    notify_one(not_full);
unlock:
    if
    :: atomic { quota > 0 -> assert(lock == _pid); lock = FREE }; goto lock_
    :: atomic { quota == 0 -> assert(lock == _pid); lock = FREE }; goto end_done
    fi;
end_done:
    (false)
}

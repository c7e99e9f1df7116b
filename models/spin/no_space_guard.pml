// no_space_guard: Promela twin of models/no_space_guard.py
// config: producers=1 consumers=1 capacity=1 items=2
//
// One `atomic` per safeprefetch step, labelled with the step's label.
// Expected: an assertion violation (safeprefetch: overflow).

#define CAP    1
#define ITEMS  2
#define NT     2      /* threads: producer0, consumer0 (= _pid) */
#define FREE   255    /* mutex owner when free (safeprefetch: -1) */

byte count;
byte lock = FREE;
chan not_empty = [NT] of { byte };
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
put:                /* the bug: no capacity check before the put */
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
check_empty:
    if
    :: count == 0 -> goto wait_for_item
    :: else -> goto get
    fi;
wait_for_item:
    wait(not_empty, lock);
    goto check_empty;
get:
    atomic { assert(count > 0); count--; quota-- };
unlock:
    if
    :: atomic { quota > 0 -> assert(lock == _pid); lock = FREE }; goto lock_
    :: atomic { quota == 0 -> assert(lock == _pid); lock = FREE }; goto end_done
    fi;
end_done:
    (false)
}

// if_not_while: Promela twin of models/if_not_while.py
// config: producers=1 consumers=2 capacity=1 items=2
//
// One `atomic` per safeprefetch step, labelled with the step's label.
// With one producer the buffer and the received list are ranges of item ids,
// so two counters carry the same information as safeprefetch's tuples.
// Expected: an assertion violation (safeprefetch: underflow).

#define CAP    1
#define ITEMS  2
#define NT     3      /* threads: producer0, consumer0, consumer1 (= _pid) */
#define FREE   255    /* mutex owner when free (safeprefetch: -1) */

byte count;           /* len(buf) */
byte nrecv;           /* len(received) */
bool took_none;       /* received holds a None: a take found nothing */
byte lock = FREE;
chan cond = [NT] of { byte };
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
if_full:            /* the bug: `if`, not `while`; after the wait, straight to put */
    if
    :: count == CAP -> goto wait_
    :: else -> goto put
    fi;
wait_:
    wait(cond, lock);
put:
    atomic { count++; left--; assert(count <= CAP) };
signal:
    notify_one(cond);
unlock:
    if
    :: atomic { left > 0 -> assert(lock == _pid); lock = FREE }; goto lock_
    :: atomic { left == 0 -> assert(lock == _pid); lock = FREE }; goto end_done
    fi;
end_done:
    (false)
}

active [2] proctype consumer() {
    byte quota = 1;
lock_:
    atomic { lock == FREE -> lock = _pid };
if_empty:
    if
    :: count == 0 -> goto wait_
    :: else -> goto get
    fi;
wait_:
    wait(cond, lock);
get:
    atomic { if :: count > 0 -> count--; nrecv++ :: else -> took_none = true fi; quota--;
             assert(!took_none) };      /* invariant: a take always finds an item */
signal:
    notify_one(cond);
unlock:
    if
    :: atomic { quota > 0 -> assert(lock == _pid); lock = FREE }; goto lock_
    :: atomic { quota == 0 -> assert(lock == _pid); lock = FREE }; goto end_done
    fi;
end_done:
    (false)
}

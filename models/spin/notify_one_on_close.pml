// notify_one_on_close: Promela twin of models/notify_one_on_close.py
// config: producers=1 consumers=2 capacity=1 items=0
//
// One `atomic` per safeprefetch step, labelled with the step's label.
// Expected: an invalid end state (safeprefetch: shutdown_hang).

#define CAP    1
#define ITEMS  0
#define NT     3      /* threads: producer0, consumer0, consumer1 (= _pid) */
#define FREE   255    /* mutex owner when free (safeprefetch: -1) */

byte count;           /* len(buf) */
byte nrecv;           /* len(received) */
bool closed;
byte open_producers = 1;
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
    :: left == 0 -> goto set_closed
    :: left > 0 && count == CAP -> goto wait_for_space
    :: left > 0 && count < CAP -> goto put
    fi;
wait_for_space:
    wait(not_full, lock);
    goto check_full;
put:
    atomic { count++; left--; assert(count <= CAP) };
notify_not_empty:
    notify_one(not_empty);
unlock:
    atomic { assert(lock == _pid); lock = FREE };
    goto lock_;
set_closed:
    atomic { open_producers--; if :: open_producers == 0 -> closed = true :: else -> skip fi };
notify_one_consumer:    /* the bug: one waiter is woken where every waiter must re-test `closed` */
    notify_one(not_empty);
unlock_close:
    atomic { assert(lock == _pid); lock = FREE };
end_done:
    (false)
}

active [2] proctype consumer() {
lock_:
    atomic { lock == FREE -> lock = _pid };
check_empty:
    if
    :: count > 0 -> goto get
    :: count == 0 && closed -> goto unlock_end_of_stream
    :: count == 0 && !closed -> goto wait_for_item
    fi;
wait_for_item:
    wait(not_empty, lock);
    goto check_empty;
get:
    atomic { assert(count > 0); count--; nrecv++ };
notify_not_full:
    notify_one(not_full);
unlock:
    atomic { assert(lock == _pid); lock = FREE };
    goto lock_;
unlock_end_of_stream:
    atomic { assert(lock == _pid); lock = FREE };
end_done:
    (false)
}

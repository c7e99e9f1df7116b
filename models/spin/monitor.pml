// monitor: Promela twin of models/monitor.py
// config: producers=1 consumers=2 capacity=1 items=2 close=on error=on
//
// One `atomic` per safeprefetch step, labelled with the step's label.
// With one producer, `produced` is 0..nprod-1, `received` is 0..nrecv-1 and
// the buffer holds the rest, so two counters carry the model's three tuples.
// Expected: no errors (safeprefetch: ok).

#define CAP    1
#define ITEMS  2
#define NT     4      /* threads: producer0, consumer0, consumer1, closer (= _pid) */
#define FREE   255    /* mutex owner when free (safeprefetch: -1) */
#define NONE   255    /* safeprefetch's -1 */

#define OPEN      0
#define DRAINING  1
#define CLOSED    2
#define FAILED    3

byte mstate = OPEN;   /* the lifecycle: OPEN -> DRAINING -> CLOSED | FAILED */
byte writers = 1;     /* producers that have not finished */
bool failed;          /* a producer's error caused the close */
byte sealed = NONE;   /* len(produced) at close */
byte nprod, nrecv;    /* len(produced), len(received) */
byte error_seen = NONE;
bool close_requested;
byte lock = FREE;
chan not_full = [NT] of { byte };    /* notified after a get, and by close */
chan not_empty = [NT] of { byte };   /* notified after a put, and by close */
bool woken[NT];
hidden byte w;

#define COUNT   (nprod - nrecv)
/* The idempotent half of close (lock held). */
#define SHUT    if :: mstate == OPEN -> mstate = DRAINING; sealed = nprod :: else -> skip fi

inline wait(cv, m) {
    atomic { assert(m == _pid); m = FREE; cv!_pid };
    atomic { woken[_pid] && m == FREE -> woken[_pid] = false; m = _pid }
}
inline notify_one(cv) {
    atomic { if :: nempty(cv) -> cv?w; woken[w] = true; w = 0 :: empty(cv) -> skip fi }
}
inline notify_all(cv) {
    atomic { do :: nempty(cv) -> cv?w; woken[w] = true :: empty(cv) -> break od; w = 0 }
}
inline release(m) {
    atomic { assert(m == _pid); m = FREE }
}

active proctype producer() {
    byte left = ITEMS;
lock_:
    if
    :: atomic { lock == FREE && left > 0 -> lock = _pid }; goto check_space
    :: atomic { lock == FREE && left == 0 -> lock = _pid }; goto finish
    fi;
check_space:
    if
    :: mstate != OPEN -> goto finish                       /* put raises ShutDown */
    :: mstate == OPEN && COUNT == CAP -> goto wait_not_full
    :: mstate == OPEN && COUNT < CAP -> goto put
    fi;
wait_not_full:
    wait(not_full, lock);
    goto check_space;
put:                                                        /* branches ok | error */
    if
    :: atomic { nprod++; left--; assert(COUNT <= CAP); assert(sealed == NONE) }; goto notify_not_empty
    :: atomic { failed = true; writers--; SHUT }; goto close_wake_putters
    fi;
notify_not_empty:
    notify_one(not_empty);
unlock:
    release(lock);
    goto lock_;
finish:
    if
    :: atomic { writers == 1 && mstate == OPEN -> writers--; SHUT }; goto close_wake_putters
    :: atomic { !(writers == 1 && mstate == OPEN) -> writers-- }; goto unlock_and_return
    fi;
close_wake_putters:
    notify_all(not_full);
close_wake_getters:
    notify_all(not_empty);
unlock_and_return:
    release(lock);
end_done:
    (false)
}

active [2] proctype consumer() {
lock_:
    atomic { lock == FREE -> lock = _pid };
check_item:
    if
    :: COUNT > 0 -> goto get
    :: COUNT == 0 && mstate == OPEN -> goto wait_not_empty
    :: COUNT == 0 && mstate != OPEN -> goto end_of_stream
    fi;
wait_not_empty:
    wait(not_empty, lock);
    goto check_item;
get:
    atomic { nrecv++ };
notify_not_full:
    notify_one(not_full);
unlock:
    release(lock);
    goto lock_;
end_of_stream:
    atomic {
        if
        :: mstate == DRAINING && failed -> mstate = FAILED
        :: mstate == DRAINING && !failed -> mstate = CLOSED
        :: else -> skip
        fi;
        if :: mstate == FAILED && error_seen == NONE -> error_seen = nrecv :: else -> skip fi;
        /* at_end, checked where the stream ends: drained, and the error at its position */
        assert(nrecv == nprod && (mstate != FAILED || error_seen == sealed)) };
unlock_and_return:
    release(lock);
end_done:
    (false)
}

active proctype closer() {
lock_:
    atomic { lock == FREE -> lock = _pid };
close_:
    atomic { close_requested = true; SHUT };
close_wake_putters:
    notify_all(not_full);
close_wake_getters:
    notify_all(not_empty);
unlock:
    release(lock);
end_done:
    (false)
}

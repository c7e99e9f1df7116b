// close_without_wake: Promela twin of models/close_without_wake.py
// config: producers=1 consumers=1 capacity=1 items=2
//
// One `atomic` per safeprefetch step, labelled with the step's label.
// Expected: an invalid end state (safeprefetch: shutdown_hang, a hang after
// close was requested; SPIN sees only the stuck process).

#define CAP    1
#define ITEMS  2
#define NT     2      /* threads: producer0, consumer0 (= _pid) */
#define FREE   255    /* mutex owner when free (safeprefetch: -1) */

byte count;           /* len(buf) */
byte nrecv;           /* len(received) */
bool closed, eos, stopped_early;
byte running = 1;     /* producers still running */
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
inline notify_all(cv) {
    atomic { do :: nempty(cv) -> cv?w; woken[w] = true :: empty(cv) -> break od; w = 0 }
}

active proctype producer() {
    byte left = ITEMS;
lock_:
    atomic { lock == FREE -> lock = _pid };
check_closed_or_full:
    if
    :: closed -> goto unlock_and_exit
    :: !closed && left == 0 -> goto mark_end_of_stream
    :: !closed && left > 0 && count == CAP -> goto wait_for_space
    :: !closed && left > 0 && count < CAP -> goto put
    fi;
wait_for_space:
    wait(not_full, lock);
    goto check_closed_or_full;
put:
    atomic { count++; left--; assert(count <= CAP) };
notify_not_empty:
    notify_one(not_empty);
unlock:
    atomic { assert(lock == _pid); lock = FREE };
    goto lock_;
mark_end_of_stream:
    atomic { running--; if :: running == 0 -> eos = true :: else -> skip fi };
notify_all_not_empty:
    notify_all(not_empty);
unlock_and_return:
    atomic { assert(lock == _pid); lock = FREE };
    goto end_done;
unlock_and_exit:
    atomic { assert(lock == _pid); lock = FREE };
exit_:
    atomic { running-- };
end_done:
    (false)
}

active proctype consumer() {
next_batch_or_close:
    if
    :: atomic { true -> skip }; goto lock_                              /* next batch */
    :: atomic { true -> stopped_early = true }; goto lock_to_close      /* close */
    fi;
lock_:
    atomic { lock == FREE -> lock = _pid };
check_empty:
    if
    :: count > 0 -> goto get
    :: count == 0 && (eos || closed) -> goto unlock_end_of_stream
    :: count == 0 && !eos && !closed -> goto wait_for_item
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
    goto next_batch_or_close;
unlock_end_of_stream:
    atomic { assert(lock == _pid); lock = FREE };
lock_to_close:
    atomic { lock == FREE -> lock = _pid };
set_closed:         /* the bug: the flag is set, but nobody asleep hears of it */
    atomic { closed = true };
unlock_after_close:
    atomic { assert(lock == _pid); lock = FREE };
join_producers:     /* at_end: without an early close, every item arrived */
    atomic { running == 0 -> assert(stopped_early || nrecv == ITEMS) };
end_done:
    (false)
}

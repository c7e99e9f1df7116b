// polling_close: Promela twin of models/polling_close.py
// config: items=1
//
// One `atomic` per safeprefetch step, labelled with the step's label. The
// consumer's timed wait is the kernel's: release-and-enqueue, then either a
// notify's `woken` bit and re-acquire, or -- only while what it waits for is
// false -- a timeout, then a step that re-acquires and only then leaves the
// queue (`??eval(_pid)`: its own entry, wherever it is), as CPython's
// Condition.wait does: a notify in between is spent on the timed-out thread.
// Expected: an invalid end state (safeprefetch: lost_wakeup, masked by the timeout).

#define NT     3      /* threads: producer, consumer, closer (= _pid) */
#define FREE   255    /* mutex owner when free (safeprefetch: -1) */
#define ITEMS  1

byte count;
bool closed;
byte taken;
byte lock = FREE;
chan changed = [NT] of { byte };
bool woken[NT];
hidden byte w;

inline notify_all(cv) {
    atomic { do :: nempty(cv) -> cv?w; woken[w] = true :: empty(cv) -> break od; w = 0 }
}

active proctype producer() {
    byte left = ITEMS;
lock_:
    atomic { lock == FREE -> lock = _pid };
put:
    atomic { count++; left-- };
notify:
    notify_all(changed);
unlock:
    if
    :: atomic { left > 0 -> assert(lock == _pid); lock = FREE }; goto lock_
    :: atomic { left == 0 -> assert(lock == _pid); lock = FREE }; goto end_done
    fi;
end_done:
    (false)
}

active proctype consumer() {
lock_:
    atomic { lock == FREE -> lock = _pid };
check:
    if
    :: count > 0 -> goto take
    :: count == 0 && closed -> goto stop
    :: count == 0 && !closed -> goto wait_
    fi;
wait_:                /* cond.wait(0.5) in a while loop */
    atomic { assert(lock == _pid); lock = FREE; changed!_pid };
asleep:
    if
    :: atomic { woken[_pid] && lock == FREE -> woken[_pid] = false; lock = _pid }; goto check
    :: atomic { !woken[_pid] && !(count > 0 || closed) }; goto timed_out
    fi;
timed_out:
    atomic {
        lock == FREE -> lock = _pid;
        if :: changed??[eval(_pid)] -> changed??eval(_pid) :: else -> skip fi;
        woken[_pid] = false
    };
    goto check;
take:
    atomic { count--; taken++ };
unlock:
    atomic { assert(lock == _pid); lock = FREE };
    goto lock_;
stop:
    atomic { assert(lock == _pid); lock = FREE };
end_done:
    (false)
}

active proctype closer() {
lock_:
    atomic { lock == FREE -> lock = _pid };
close:                /* the bug: no notify_all(changed) */
    atomic { closed = true };
unlock:
    atomic { assert(lock == _pid); lock = FREE };
end_done:
    (false)
}

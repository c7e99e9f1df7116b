// one_cond_signal: Promela twin of models/one_cond_signal.py
// config: producers=1 consumers=2 capacity=1 items=2
//
// One `atomic` per safeprefetch step, labelled with the step's label.
// Expected: an invalid end state (safeprefetch: deadlock).

#define CAP    1
#define ITEMS  2
#define NT     3      /* threads: producer0, consumer0, consumer1 (= _pid) */
#define FREE   255    /* mutex owner when free (safeprefetch: -1) */

byte count;           /* items in the buffer */
byte produced;        /* items put so far */
byte received;        /* items taken so far (safeprefetch: a tuple of 1s) */
byte lock = FREE;     /* Mutex: the owner */
chan cond = [NT] of { byte };  /* CondVar: the FIFO wait queue */
bool woken[NT];       /* notified, not yet re-acquired: safeprefetch's "(woken)" pc */
hidden byte w;

/* Mesa wait: release the mutex and enqueue in one step; once woken, re-acquire in another. */
inline wait(cv, m) {
    atomic { assert(m == _pid); m = FREE; cv!_pid };
    atomic { woken[_pid] && m == FREE -> woken[_pid] = false; m = _pid }
}
/* notify_one, FIFO: wake the head of the queue, if any. */
inline notify_one(cv) {
    atomic { if :: nempty(cv) -> cv?w; woken[w] = true; w = 0 :: empty(cv) -> skip fi }
}

active proctype producer() {
    byte left = ITEMS;
lock_:
    atomic { lock == FREE -> lock = _pid };
check_full:
    if
    :: count == CAP -> goto wait_
    :: else -> goto put
    fi;
wait_:
    wait(cond, lock);
    goto check_full;
put:
    atomic { produced++; count++; left--; assert(count <= CAP) };
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
    byte quota = 1;   /* divmod(producers * items, consumers) */
lock_:
    atomic { lock == FREE -> lock = _pid };
check_empty:
    if
    :: count == 0 -> goto wait_
    :: else -> goto get
    fi;
wait_:
    wait(cond, lock);
    goto check_empty;
get:
    atomic { assert(count > 0); count--; received++; quota-- };
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

// trylock_flush: Promela twin of models/trylock_flush.py
// config: writers=2
//
// One `atomic` per safeprefetch step, labelled with the step's label. The
// try-lock is an `if` with two guarded branches: the lock is free (take it)
// or busy (leave). The model's end-of-run check is a process that waits for
// every writer to finish, then asserts the buffer is empty.
// Expected: an assertion violation (safeprefetch: lost_item).

#define NW     2
#define FREE   255    /* mutex owner when free (safeprefetch: -1) */

byte pending;
byte flushed;
byte finished;        /* writers done: the twin's way to run the end-of-run check */
byte flush_lock = FREE;

active [NW] proctype writer() {
append:
    atomic { pending++ };
try_lock:
    if
    :: atomic { flush_lock == FREE -> flush_lock = _pid }; goto flush
    :: atomic { flush_lock != FREE -> finished++ }; goto end_done   /* the bug: assume the holder flushes */
    fi;
flush:
    atomic { flushed = flushed + pending; pending = 0 };
unlock:
    atomic { assert(flush_lock == _pid); flush_lock = FREE; finished++ };
end_done:
    (false)
}

active proctype at_end() {
end_wait:
    atomic { finished == NW -> assert(pending == 0) }   /* lost_item: an appended item never flushed */
}

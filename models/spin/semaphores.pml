// semaphores: Promela twin of models/semaphores.py
// config: producers=1 consumers=2 capacity=1 items=2 close=on error=on
//
// One `atomic` per safeprefetch step, labelled with the step's label.
// A Semaphore is its count; a release past its bound is an assertion.
// With one producer, two counters carry the model's buffer/produced/received tuples.
// Expected: no errors (safeprefetch: ok).

#define CAP    1
#define ITEMS  2
#define NC     2      /* consumers */
#define NP     1      /* producers */
#define FREE   255    /* mutex owner when free (safeprefetch: -1) */
#define NONE   255    /* safeprefetch's -1 */

bool closed;
byte writers = NP;
bool failed;
byte sealed = NONE;
byte nprod, nrecv;    /* len(produced), len(received) */
byte error_seen = NONE;
bool close_requested;
byte mutex = FREE;
byte items = 0;       /* bound CAP + NC (the poison) */
byte spaces = CAP;    /* bound CAP + NP */

#define COUNT   (nprod - nrecv)

inline acquire(m) { atomic { m == FREE -> m = _pid } }
inline release(m) { atomic { assert(m == _pid); m = FREE } }
inline sem_acquire(s) { atomic { s > 0 -> s-- } }
inline sem_release(s, bound) { atomic { assert(s < bound); s++ } }

active proctype producer() {
    byte left = ITEMS;
next_item:
    if
    :: left > 0 -> goto spaces_acquire
    :: left == 0 -> goto mutex_acquire_to_finish
    fi;
spaces_acquire:
    sem_acquire(spaces);
mutex_acquire:
    acquire(mutex);
put:                                                /* branches ok | error */
    if
    :: closed -> goto unlock_and_stop               /* put raises: the stream is closed */
    :: atomic { !closed -> nprod++; left--; assert(COUNT <= CAP) }; goto unlock
    :: atomic { !closed -> failed = true; writers--; closed = true; sealed = nprod }; goto unlock_then_poison
    fi;
unlock:
    release(mutex);
items_release:
    sem_release(items, CAP + NC);
    goto next_item;
unlock_and_stop:
    release(mutex);
mutex_acquire_to_finish:
    acquire(mutex);
finish:
    if
    :: atomic { writers == 1 && !closed -> writers--; closed = true; sealed = nprod }; goto unlock_then_poison
    :: atomic { !(writers == 1 && !closed) -> writers-- }; goto unlock_and_return
    fi;
unlock_and_return:
    release(mutex);
    goto end_done;
unlock_then_poison:
    release(mutex);
poison_items_1:
    sem_release(items, CAP + NC);
poison_items_2:
    sem_release(items, CAP + NC);
poison_spaces_1:
    sem_release(spaces, CAP + NP);
end_done:
    (false)
}

active [2] proctype consumer() {
items_acquire:
    sem_acquire(items);
mutex_acquire:
    acquire(mutex);
get:
    if
    :: atomic { COUNT > 0 -> nrecv++ }; goto unlock
    :: atomic { COUNT == 0 -> assert(closed);         /* a permit with nothing to take: only the poison */
           if :: failed && error_seen == NONE -> error_seen = nrecv :: else -> skip fi;
           /* at_end, checked where the stream ends: drained, and the error at its position */
           assert(nrecv == nprod && (!failed || error_seen == sealed)) }; goto unlock_and_return
    fi;
unlock:
    release(mutex);
spaces_release:
    sem_release(spaces, CAP + NP);
    goto items_acquire;
unlock_and_return:
    release(mutex);
end_done:
    (false)
}

active proctype closer() {
mutex_acquire:
    acquire(mutex);
close_:
    if
    :: atomic { !closed -> close_requested = true; closed = true; sealed = nprod }; goto unlock_then_poison
    :: atomic { closed -> close_requested = true }; goto unlock_and_return
    fi;
unlock_and_return:
    release(mutex);
    goto end_done;
unlock_then_poison:
    release(mutex);
poison_items_1:
    sem_release(items, CAP + NC);
poison_items_2:
    sem_release(items, CAP + NC);
poison_spaces_1:
    sem_release(spaces, CAP + NP);
end_done:
    (false)
}

// prefetcher: Promela twin of models/prefetcher.py
// config: capacity=2 workers=2 items=3 ordered=on close=on error=on abandon=on
//
// One `atomic` per safeprefetch step (a guarded step blocks while its guard
// is false, as in the live runtime); labels follow the step labels.
// A slot is (state, index) as in the model; `received` is not stored
// because in ordered mode it is always 0..delivered-1.
// Expected: no errors (safeprefetch: ok).

#define CAP      2
#define LENGTH   3        /* items (sized source: the length never changes) */
#define NONE     255      /* safeprefetch's -1 */

#define FREE_ST  0
#define FILLING  1
#define READY    2
#define FAILED   3
#define LEASED   4

byte sst[CAP];                                /* slot state */
byte six[CAP] = NONE;                         /* slot index */
byte next_index, delivered;
byte alive = 2;                               /* workers not yet exited */
bool closing, closed, failed;
byte first_error = NONE, error_seen = NONE;
hidden byte tk;

/* The slot holding the index the consumer needs next (ordered mode). */
#define NEXT_AT(k)  ((sst[k] == READY || sst[k] == FAILED) && six[k] == delivered)
#define HAS_NEXT    (NEXT_AT(0) || NEXT_AT(1))
#define PICK_NEXT   if :: NEXT_AT(0) -> tk = 0 :: else -> tk = 1 fi
#define STOP        (closing || failed || next_index >= LENGTH)

active [2] proctype worker() {
    byte idx = NONE, slot = NONE;
claim_index_and_slot:
    if
    :: atomic { STOP -> alive-- }; goto end_done
    :: atomic { !STOP && (sst[0] == FREE_ST || sst[1] == FREE_ST) ->
           if :: sst[0] == FREE_ST -> slot = 0 :: else -> slot = 1 fi;
           idx = next_index; next_index++; sst[slot] = FILLING; six[slot] = idx }
    fi;
fetch_into_slot:            /* external step, branches ok | error */
    if
    :: atomic { assert(sst[slot] == FILLING && six[slot] == idx);
           if
           :: closing -> sst[slot] = FREE_ST; six[slot] = NONE   /* discard */
           :: else -> sst[slot] = READY
           fi;
           idx = NONE; slot = NONE }
    :: atomic { assert(sst[slot] == FILLING && six[slot] == idx);
           if
           :: closing -> sst[slot] = FREE_ST; six[slot] = NONE
           :: else -> sst[slot] = FAILED; failed = true;
                      if :: idx < first_error -> first_error = idx :: else -> skip fi
           fi;
           idx = NONE; slot = NONE }
    fi;
    goto claim_index_and_slot;
end_done:
    (false)
}

active proctype consumer() {
    byte lease = NONE;
take_next_batch:            /* branches take | abandon */
    if
    :: atomic { true -> closing = true }; goto join_workers              /* abandon */
    :: atomic { closing -> skip }; goto end_done                         /* get() raises Closed */
    :: atomic { !closing && !HAS_NEXT && delivered >= LENGTH ->
           assert(!failed) }; goto end_done                               /* end of stream */
    :: atomic { !closing && HAS_NEXT -> PICK_NEXT;
           if
           :: sst[tk] == FAILED ->                                        /* re-raise the error */
              error_seen = six[tk]; sst[tk] = FREE_ST; six[tk] = NONE; tk = 0; goto end_done
           :: else ->
              assert(sst[0] != LEASED && sst[1] != LEASED);
              sst[tk] = LEASED; delivered++; lease = tk; tk = 0
           fi }
    fi;
release_lease:
    atomic { assert(sst[lease] == LEASED); sst[lease] = FREE_ST; six[lease] = NONE; lease = NONE };
    goto take_next_batch;
join_workers:
    (alive == 0);
end_done:
    (false)
}

active proctype closer() {
close_:
    atomic { closing = true };
join_workers:
    atomic { alive == 0 -> closed = true;
             assert(sst[0] != FILLING && sst[1] != FILLING) };
end_done:
    (false)
}

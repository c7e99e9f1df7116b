// start_before_init: Promela twin of models/start_before_init.py
// config:
//
// One `atomic` per safeprefetch step, labelled with the step's label. The
// model's `spawn` step is Promela's `run`: the worker process exists only
// once `__init__` starts it.
// Expected: an assertion violation (safeprefetch: invariant).

bool queue_ready;     /* safeprefetch: queue is not None */

active proctype init_() {
start_worker:         /* the bug: start() before the assignments */
    atomic { run worker() };
create_queue:
    atomic { queue_ready = true };
end_done:
    (false)
}

proctype worker() {
get:
    atomic { assert(queue_ready) };   /* the worker reads self.queue */
end_done:
    (false)
}

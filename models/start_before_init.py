"""start_before_init: ``__init__`` starts the worker thread before it assigns the queue the worker reads.

Source: a classic of ``threading.Thread`` subclasses and of objects that own
a thread: ``self._thread.start()`` placed above the attribute assignments
in ``__init__`` (the worker's first ``self._queue.get()`` then raises
AttributeError, or reads a stale value, depending on timing). The worker is
declared with ``start=False`` and started by a ``spawn`` step, as
``Thread.start()`` starts it.

Minimal config: none.

Expected verdict: invariant. ``__init__`` starts the worker; the worker runs
before ``__init__`` assigns the queue.

Fix: assign everything the thread reads first, start it last (or start it
outside ``__init__``).
"""

from safeprefetch.model import DONE, Model, violate


class StartBeforeInit(Model):
    name = "start_before_init"
    expected = "invariant"
    params = {}

    def build(self, m):
        m.shared(queue=None)

        def create_queue(s, me):
            s.queue = ()

        def get(s, me):
            if s.queue is None:
                violate("invariant", "the worker read self.queue before __init__ assigned it (AttributeError)")

        init = m.program("init")
        init.spawn("start worker", "worker", next="create queue")  # the bug: start() before the assignments
        init.step("create queue", create_queue, next=DONE)
        worker = m.program("worker loop")
        worker.step("get", get, next=DONE)
        m.thread("main", init)
        m.thread("worker", worker, start=False)

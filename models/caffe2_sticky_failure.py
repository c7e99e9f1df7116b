"""caffe2_sticky_failure: Caffe2's PrefetchOperator keeps one ``prefetch_success_`` bool, so a failed prefetch is only logged, ``Run()`` returns false, and every later ``Run()`` fails without fetching again.

Source: Caffe2's ``PrefetchOperator`` (``caffe2/operators/prefetch_op.h``),
the design the seed crate describes: one mutex, two condvars
(``producer_``, ``consumer_``), a ``prefetched_`` flag, a
``prefetch_success_`` flag, and a worker that holds the mutex while it
prefetches. An exception in ``Prefetch()`` is caught and logged, and only
``prefetch_success_ = false`` survives it (passing the exception itself to
the caller is left as a TODO in the source). ``Run()`` then logs the failure
and returns false *without* clearing ``prefetched_``, so the worker is never
asked for another batch and every later ``Run()`` fails the same way until
``Finalize()``.

Minimal config: producers=1 consumers=1 capacity=1 items=2 (one ``Run()``
per item, then ``Finalize()``; items=1 already loses the error, the second
``Run()`` shows the failure sticking).

Expected verdict: error_lost. The worker's first ``Prefetch()`` raises; the
owner's two ``Run()`` calls both return false; ``Finalize()`` joins the
worker. The source's exception, with its type and traceback, never reached
the caller: it exists only in the log.

Fix: ``prefetcher``: publish the exception itself in the slot at its
position (an ``exception_ptr``, not a bool), and re-raise it from the
``Run()``/``get()`` that reaches that position; the stream ends there.
"""

from safeprefetch.model import DONE, Model, delivery_violation


class Caffe2StickyFailure(Model):
    name = "caffe2_sticky_failure"
    expected = "error_lost"
    fix = "prefetcher"
    #: The fix checked at the same shape: one worker, the same slots and items, errors on where relevant.
    fix_config = {"workers": 1, "capacity": 1, "items": 2, "error": True}
    params = {"producers": 1, "consumers": 1, "capacity": 1, "items": 2}

    def build(self, m, producers, consumers, capacity, items):
        if producers != 1 or consumers != 1 or capacity != 1:
            from safeprefetch.model import ModelError
            raise ModelError("caffe2_sticky_failure models Caffe2's design: producers=1, consumers=1, capacity=1")
        m.shared(
            prefetched=False,       # prefetched_
            success=False,          # prefetch_success_
            finalize=False,         # finalize_
            batch=-1,               # which batch the prefetched data is
            received=(),            # batches Run() copied out
            failed_runs=0,          # Run() calls that returned false
            first_error=-1,         # first batch whose Prefetch() raised
            error_seen=False,       # the caller got the exception itself
            running=1,              # the prefetch thread has not returned
        )
        m.mutex("prefetch_access_mutex")
        # std::condition_variable: Finalize() notifies producer_ after unlocking, which C++ allows.
        m.condvar("producer", notify_unlocked=True)
        m.condvar("consumer", notify_unlocked=True)
        mu = "prefetch_access_mutex"

        # -- PrefetchWorker() ----------------------------------------------

        def prefetch(s, me, outcome):
            s.batch = me.item
            if outcome == "ok":
                s.success = True
            else:
                # catch (const std::exception& e) { LOG(ERROR) << e.what(); prefetch_success_ = false; }
                s.success = False
                if s.first_error < 0:
                    s.first_error = me.item
            me.item += 1

        def set_prefetched(s, me):
            s.prefetched = True

        def worker_returns(s, me):
            s.running = 0

        w = m.program("worker", item=0)
        w.acquire("lock", mu, next="while (prefetched_)")
        w.step("while (prefetched_)",
               next=lambda s, me: "producer_.wait" if s.prefetched else "while (!finalize_)",
               to=["producer_.wait", "while (!finalize_)"])
        w.wait("producer_.wait", "producer", mu, next="while (prefetched_)",
               until=lambda s, me: not s.prefetched)
        w.step("while (!finalize_)", next=lambda s, me: "unlock and return" if s.finalize else "Prefetch()",
               to=["unlock and return", "Prefetch()"])
        # Caffe2's source never runs dry; a batch past `items` is one nobody asks for, so it does not fail.
        w.external("Prefetch()", "fetch", prefetch, next="prefetched_ = true", branches=("ok", "error"),
                   guard=lambda s, me, outcome: outcome == "ok" or me.item < items)
        w.step("prefetched_ = true", set_prefetched, next="consumer_.notify_one")
        w.notify_one("consumer_.notify_one", "consumer", next="while (prefetched_)")
        w.release("unlock and return", mu, next="return")
        w.step("return", worker_returns, next=DONE)

        # -- the owner: Run() `items` times, then Finalize() -----------------

        def check_success(s, me):
            me.runs -= 1
            if not s.success:
                # LOG(ERROR) << ...; return false;  (prefetched_ stays true)
                s.failed_runs += 1
                return "return false (unlock)"
            return "CopyPrefetched()"

        def copy(s, me):
            s.received += (s.batch,)
            s.prefetched = False

        def set_finalize(s, me):
            s.finalize = True
            s.prefetched = False

        def next_call(s, me):
            return "Run: lock" if me.runs else "Finalize: lock"

        o = m.program("owner", runs=items)
        o.acquire("Run: lock", mu, next="while (!prefetched_)")
        o.step("while (!prefetched_)",
               next=lambda s, me: "consumer_.wait" if not s.prefetched else "if (!prefetch_success_)",
               to=["consumer_.wait", "if (!prefetch_success_)"])
        o.wait("consumer_.wait", "consumer", mu, next="while (!prefetched_)", until=lambda s, me: s.prefetched)
        o.step("if (!prefetch_success_)", check_success, to=["return false (unlock)", "CopyPrefetched()"])
        o.release("return false (unlock)", mu, next=next_call, to=["Run: lock", "Finalize: lock"])
        o.step("CopyPrefetched()", copy, next="producer_.notify_one")
        o.notify_one("producer_.notify_one", "producer", next="return true (unlock)")
        o.release("return true (unlock)", mu, next=next_call, to=["Run: lock", "Finalize: lock"])
        o.acquire("Finalize: lock", mu, next="Finalize: while (!prefetched_)")
        o.step("Finalize: while (!prefetched_)",
               next=lambda s, me: "Finalize: consumer_.wait" if not s.prefetched else "finalize_ = true",
               to=["Finalize: consumer_.wait", "finalize_ = true"])
        o.wait("Finalize: consumer_.wait", "consumer", mu, next="Finalize: while (!prefetched_)",
               until=lambda s, me: s.prefetched)
        o.step("finalize_ = true", set_finalize, next="Finalize: unlock")
        o.release("Finalize: unlock", mu, next="Finalize: producer_.notify_one")
        o.notify_one("Finalize: producer_.notify_one", "producer", next="join worker")
        o.step("join worker", guard=lambda s, me: s.running == 0, next=DONE)

        m.thread("producer0", w)
        m.thread("consumer0", o)

        expected = tuple(range(items))

        def at_end(s):
            if 0 <= s.first_error < items:
                if not s.error_seen:
                    runs = "run() returned" if s.failed_runs == 1 else f"{s.failed_runs} run() calls returned"
                    return ("error_lost", f"Prefetch() of batch {s.first_error} raised; the error was only logged "
                            f"and {runs} false")
                return delivery_violation(expected[:s.first_error], s.received)
            return delivery_violation(expected, s.received)

        m.at_end(at_end)

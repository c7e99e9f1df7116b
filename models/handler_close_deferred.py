"""handler_close_deferred: a signal handler or GC finalizer that asks for close() only records the request, without blocking, and a reaper thread takes the kernel lock and carries the close out, so the interrupted thread never waits for itself.

Source: the resolution of python/cpython#59181 (bpo-14976): code that may
run inside a signal handler or ``__del__`` must not take a lock the
interrupted code can hold; it may only do reentrant, non-blocking work such
as ``queue.SimpleQueue.put``, added for exactly this use. safeprefetch's
runtime does this: close requests from handlers and finalizers are recorded
without blocking and a reaper thread carries them out.

Minimal config: workers=1 items=1 signal=True; proved over the ``sweep``
(1 or 2 workers, 0 to 3 items each, with and without the signal).

Expected verdict: ok. Wherever SIGTERM lands while ``main`` holds the
kernel lock, the handler returns at once; ``main`` finishes its step and
releases the lock; the reaper then closes, wakes ``main`` and the workers,
and everyone returns.

Why a protocol model cannot see it
----------------------------------
The broken twin, ``handler_close_holding_lock``, deadlocks only because the
handler runs *on a thread that is already inside a step*: a model of the
protocol alone runs close() as a thread of its own and finds nothing wrong.
Both models make that interleaving explicit: each step ``main`` runs under
the kernel lock has a ``SIGTERM`` branch that runs the handler on ``main``
itself and then resumes the interrupted step.

Design
------
The handler's whole body is one atomic, non-blocking step: ``requests.put
("close")`` (here ``close_requested = True``). It takes no lock, so it
cannot wait for the thread it interrupted, wherever it lands. The ``reaper``
blocks on the request queue (a guarded step: enabled once a request is
there), then takes the kernel lock like any other thread, sets ``closed``
and notifies all. ``close()`` called normally, at the end of the ``with``
block, goes through the same queue, so there is one path that closes and
it is idempotent. The checks: no hang, the close is always carried out,
every item arrives (in order, with one worker) unless the signal stopped
the stream early, and nothing arrives twice or from nowhere.
"""

from safeprefetch.model import DONE, Model, ModelError, delivery_violation


class HandlerCloseDeferred(Model):
    name = "handler_close_deferred"
    expected = "ok"
    params = {"workers": 1, "items": 1, "signal": True}
    sweep = {"workers": [1, 2], "items": [0, 1, 2, 3], "signal": [False, True]}

    def build(self, m, workers, items, signal):
        if workers < 1 or items < 0:
            raise ModelError(f"{self.name} needs workers >= 1 and items >= 0")
        m.shared(buf=(), received=(), running=workers, closed=False, signalled=False, close_requested=False)
        m.mutex("kernel")
        m.condvar("changed")  # notified (all) after every put, at a worker's end, and by close

        # -- worker: put its items, then finish; stop once closed ------------

        def put(s, me):
            if s.closed:
                s.running -= 1
                return "unlock and return"
            s.buf += (me.item,)
            me.item += 1
            me.left -= 1
            return "notify"

        def finish(s, me):
            s.running -= 1

        w = m.program("worker", left=items, item=0)
        w.acquire("lock", "kernel", next=lambda s, me: "put" if me.left else "finish", to=["put", "finish"])
        w.step("put", put, to=["unlock and return", "notify"])
        w.notify_all("notify", "changed", next="unlock")
        w.release("unlock", "kernel", next="lock")
        w.step("finish", finish, next="notify (end)")
        w.notify_all("notify (end)", "changed", next="unlock and return")
        w.release("unlock and return", "kernel", next=DONE)

        # -- main: next() until the end, then close(); SIGTERM may interrupt -

        def sigterm(s, me, here):
            """SIGTERM arrives before step ``here``: the handler runs on main, then main resumes ``here``."""
            me.signals -= 1
            s.signalled = True
            me.resume = here
            return "handler: request close"  # the fix: record the request, never block

        def check_item(s, me, branch="no signal"):
            if branch == "SIGTERM":
                return sigterm(s, me, "check item")
            if s.buf:
                return "get"
            if s.closed:
                return "unlock (closed)"
            return "unlock (end)" if s.running == 0 else "wait"

        def get(s, me, branch="no signal"):
            if branch == "SIGTERM":
                return sigterm(s, me, "get")
            s.received += (s.buf[0],)
            s.buf = s.buf[1:]
            return "unlock"

        def request_close(s, me):
            s.close_requested = True  # requests.put("close"): reentrant, takes no lock

        branches = ("no signal", "SIGTERM") if signal else None

        def may_signal(s, me, branch):
            return branch != "SIGTERM" or me.signals > 0

        c = m.program("main", signals=1 if signal else 0, resume=DONE)
        c.acquire("lock", "kernel", next="check item")
        c.step("check item", check_item, branches=branches, guard=may_signal if signal else None,
               to=["get", "unlock (closed)", "unlock (end)", "wait", "handler: request close"])
        c.wait("wait", "changed", "kernel", next="check item",
               until=lambda s, me: bool(s.buf) or s.closed or s.running == 0)
        c.step("get", get, branches=branches, guard=may_signal if signal else None,
               to=["unlock", "handler: request close"])
        c.release("unlock", "kernel", next="lock")
        c.release("unlock (closed)", "kernel", next="close(): request")  # next() raised PrefetcherClosed
        c.release("unlock (end)", "kernel", next="close(): request")     # the stream ended: `with` closes
        # The handler's body: one non-blocking step, then back to the interrupted step.
        c.step("handler: request close", request_close, next=lambda s, me: me.resume, to=["check item", "get"])
        # close() called normally goes through the same queue; the reaper does the work.
        c.step("close(): request", request_close, next=DONE)

        # -- reaper: carry out the close requests -----------------------------

        def close(s, me):
            s.closed = True

        r = m.program("reaper")
        r.step("requests.get()", guard=lambda s, me: s.close_requested, next="lock")
        r.acquire("lock", "kernel", next="close")
        r.step("close", close, next="notify_all")
        r.notify_all("notify_all", "changed", next="unlock")
        r.release("unlock", "kernel", next=DONE)

        m.thread("main", c)
        for i in range(workers):
            m.thread(f"worker{i}", w, item=i * items)
        m.thread("reaper", r)

        m.shutdown_when(lambda s: s.closed)
        everything = tuple(range(workers * items))

        def at_end(s):
            if not s.closed:
                return "invariant", "every thread finished but the prefetcher was never closed"
            return delivery_violation(everything, s.received, ordered=workers == 1, complete=not s.signalled)

        m.at_end(at_end)

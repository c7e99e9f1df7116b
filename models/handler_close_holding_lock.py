"""handler_close_holding_lock: a signal handler (or a GC finalizer) calls close() on a thread that already holds the non-reentrant kernel lock, so the thread waits for itself and every other thread waits behind it.

Source: python/cpython#59181 (bpo-14976), "queue.Queue() is not reentrant,
so signals and GC can cause deadlocks": a signal handler or ``__del__``
that takes a ``threading.Lock`` the interrupted code holds waits for
itself; the fix added the reentrant ``queue.SimpleQueue`` (Python 3.7).
getsentry/sentry-python#803 is the same bug from a GC finalizer on a worker
thread. It is also safeprefetch's own finding: ``close()`` from a SIGTERM
handler while ``next()`` held the kernel lock, and a GC finalizer running
``close()`` on a worker thread that held the kernel lock.

Minimal config: workers=1 items=1 signal=True.

Expected verdict: deadlock. ``main`` takes the kernel lock in ``next()``;
SIGTERM arrives before its next bytecode, and the handler's ``close()``
blocks acquiring the lock that ``main`` itself holds. ``main`` never gets
back to its ``release``, so ``worker0`` blocks on its next acquire too.

Fix: ``handler_close_deferred``: the handler never blocks. It records the
close request (one reentrant, non-blocking put) and returns, so the
interrupted thread finishes its step and releases the lock; a reaper thread
then takes the lock like any other thread and carries the close out. This
is what safeprefetch's runtime does with close requests from signal
handlers and GC finalizers.

Why a protocol model cannot see it
----------------------------------
In a model of the protocol alone, ``close()`` is a thread of its own: it
waits for the lock, the holder releases it, the close goes through. The bug
needs the interrupting code to run *on a thread that is already inside a
step*, between two of its bytecodes, and that thread cannot release the
lock until the handler returns. Here that interleaving is explicit: each
step ``main`` runs under the kernel lock has a ``SIGTERM`` branch that
enters ``close()`` on ``main`` itself and resumes the interrupted step
afterwards. (The points between ``main``'s last step and its ``release``
are left out: the handler's effects commute with that step, so the point
before it stands for them.)
"""

from safeprefetch.model import DONE, Model, ModelError, delivery_violation


class HandlerCloseHoldingLock(Model):
    name = "handler_close_holding_lock"
    expected = "deadlock"
    fix = "handler_close_deferred"
    params = {"workers": 1, "items": 1, "signal": True}

    def build(self, m, workers, items, signal):
        if workers < 1 or items < 0:
            raise ModelError(f"{self.name} needs workers >= 1 and items >= 0")
        m.shared(buf=(), received=(), running=workers, closed=False, signalled=False)
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
            return "close(): lock"  # the bug: the handler calls close(), which takes the kernel lock

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

        def set_closed(s, me):
            s.closed = True

        branches = ("no signal", "SIGTERM") if signal else None

        def may_signal(s, me, branch):
            return branch != "SIGTERM" or me.signals > 0

        c = m.program("main", signals=1 if signal else 0, resume=DONE)
        c.acquire("lock", "kernel", next="check item")
        c.step("check item", check_item, branches=branches, guard=may_signal if signal else None,
               to=["get", "unlock (closed)", "unlock (end)", "wait", "close(): lock"])
        c.wait("wait", "changed", "kernel", next="check item",
               until=lambda s, me: bool(s.buf) or s.closed or s.running == 0)
        c.step("get", get, branches=branches, guard=may_signal if signal else None, to=["unlock", "close(): lock"])
        c.release("unlock", "kernel", next="lock")
        c.release("unlock (closed)", "kernel", next="close(): lock")  # next() raised PrefetcherClosed
        c.release("unlock (end)", "kernel", next="close(): lock")     # the stream ended: `with` closes
        # close(): idempotent, but it takes the kernel lock like every other entry point.
        c.acquire("close(): lock", "kernel", next="close(): set closed")
        c.step("close(): set closed", set_closed, next="close(): notify_all")
        c.notify_all("close(): notify_all", "changed", next="close(): unlock")
        c.release("close(): unlock", "kernel", next=lambda s, me: me.resume,
                  to=[DONE, "check item", "get"])

        m.thread("main", c)
        for i in range(workers):
            m.thread(f"worker{i}", w, item=i * items)

        m.shutdown_when(lambda s: s.closed)
        everything = tuple(range(workers * items))

        def at_end(s):
            if not s.closed:
                return "invariant", "every thread finished but the prefetcher was never closed"
            return delivery_violation(everything, s.received, ordered=workers == 1, complete=not s.signalled)

        m.at_end(at_end)

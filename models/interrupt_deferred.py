"""interrupt_deferred: a KeyboardInterrupt that arrives while a thread is inside its lock-protected region is recorded and raised when the region ends, after the release, so the lock is never left held and the interrupt still reaches the thread.

Source: trio's KeyboardInterrupt protection (``trio.lowlevel.enable_ki_protection``;
N. J. Smith, "Control-C handling in Python and Trio"): the SIGINT handler
checks whether the interrupted code is protected and, if so, only records
the interrupt, which is delivered at the next safe point. safeprefetch's
runtime wraps its critical sections the same way.

Minimal config: workers=1 rounds=1 interrupt=True; proved over the ``sweep``
(1 or 2 workers, 1 or 2 rounds of ``main``, with and without SIGINT).

Expected verdict: ok. Wherever SIGINT lands, ``main`` releases the lock
before KeyboardInterrupt leaves it, the workers finish, and ``main`` ends
interrupted: the fix defers the interrupt, it does not drop it.

Why a protocol model cannot see it
----------------------------------
The broken twin, ``interrupt_after_acquire``, leaks the lock only because
the interpreter raises on a thread that is *already inside a step*,
between ``acquire()`` returning and the ``try:``; a model of the protocol
alone has no such point. Both models make those points explicit: every
step ``main`` runs Python code at has a ``SIGINT`` branch. Here the
branches inside the protected region record the interrupt instead of
raising, and the two outside it (``protect``, ``unprotect``) raise at once,
holding nothing.

Design
------
``protect`` opens the region before ``lock.acquire()`` and ``unprotect``
closes it after ``release()``; while it is open the handler sets
``pending`` and returns. ``unprotect`` raises KeyboardInterrupt if one is
pending, so the interrupt arrives at the first point where no lock is held.
The checks: no deadlock (the lock is always released) and no lost
interrupt (a SIGINT that arrived ends with ``main`` interrupted).
safeprefetch's runtime adds a second guard that this model does not need:
each critical section is also written so that an exception at any
interruption point leaves no lock held (the acquire is inside the region
whose exit releases it).
"""

from safeprefetch.model import DONE, Model, ModelError


class InterruptDeferred(Model):
    name = "interrupt_deferred"
    expected = "ok"
    params = {"workers": 1, "rounds": 1, "interrupt": True}
    sweep = {"workers": [1, 2], "rounds": [1, 2], "interrupt": [False, True]}

    def build(self, m, workers, rounds, interrupt):
        if workers < 1 or rounds < 1:
            raise ModelError(f"{self.name} needs workers >= 1 and rounds >= 1")
        m.shared(sent=False, interrupted=False)
        m.mutex("lock")

        # -- main: rounds of `protect; acquire; try: work; finally: release; unprotect`

        def protect(s, me, branch="no signal"):
            if branch == "SIGINT":  # not protected yet, and nothing is held: raise now
                me.signals -= 1
                s.sent = True
                return "raise KeyboardInterrupt"
            return "lock.acquire()"

        def check_signals(s, me, branch="no signal"):
            # CPython's eval breaker, right after the C call acquire() returns.
            if branch == "SIGINT":
                me.signals -= 1
                s.sent = True
                me.pending = True  # the fix: inside the region the handler only records it
            return "try: work"

        def work(s, me, branch="no signal"):
            if branch == "SIGINT":
                me.signals -= 1
                s.sent = True
                me.pending = True  # recorded; the work goes on to the release
            me.left -= 1
            return "finally: release()"

        def unprotect(s, me, branch="no signal"):
            if branch == "SIGINT":  # the region is closed: raise now
                me.signals -= 1
                s.sent = True
                return "raise KeyboardInterrupt"
            if me.pending:  # deliver the deferred interrupt, after the release
                return "raise KeyboardInterrupt"
            return "protect" if me.left else DONE

        def raise_ki(s, me):
            s.interrupted = True  # KeyboardInterrupt propagates out of main

        branches = ("no signal", "SIGINT") if interrupt else None

        def may_signal(s, me, branch):
            return branch != "SIGINT" or me.signals > 0

        guard = may_signal if interrupt else None
        mp = m.program("main", left=rounds, signals=1 if interrupt else 0, pending=False)
        mp.step("protect", protect, branches=branches, guard=guard,
                to=["raise KeyboardInterrupt", "lock.acquire()"])
        mp.acquire("lock.acquire()", "lock", next="check signals")
        mp.step("check signals", check_signals, branches=branches, guard=guard, to=["try: work"])
        mp.step("try: work", work, branches=branches, guard=guard, to=["finally: release()"])
        mp.release("finally: release()", "lock", next="unprotect")
        mp.step("unprotect", unprotect, branches=branches, guard=guard,
                to=["raise KeyboardInterrupt", "protect", DONE])
        mp.step("raise KeyboardInterrupt", raise_ki, next=DONE)

        # -- workers: the same critical section, never interrupted -----------

        def do_work(s, me):
            me.left -= 1

        w = m.program("worker", left=rounds)
        w.acquire("lock.acquire()", "lock", next="work")
        w.step("work", do_work, next="lock.release()")
        w.release("lock.release()", "lock", next=lambda s, me: "lock.acquire()" if me.left else DONE,
                  to=["lock.acquire()", DONE])

        m.thread("main", mp)
        for i in range(workers):
            m.thread(f"worker{i}", w)

        def at_end(s):
            if s.sent and not s.interrupted:
                return "error_lost", "SIGINT arrived but the KeyboardInterrupt never reached main"
            return None

        m.at_end(at_end)

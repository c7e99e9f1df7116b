"""interrupt_after_acquire: a KeyboardInterrupt lands after lock.acquire() has returned but before the try/finally that would release the lock, so the thread leaves holding it and every other thread blocks forever.

Source: CPython runs Python-level signal handlers, and so raises
KeyboardInterrupt, at the first check of the eval loop after a C call
returns, which can be between ``lock.acquire()`` and the ``try:`` that
guards it (python/cpython#74174, bpo-29988, "with statements are not
ensuring that __exit__ is called if __enter__ succeeds"; N. J. Smith,
"Control-C handling in Python and Trio", 2017). It is also safeprefetch's
own finding: Ctrl-C during ``next()`` could leave the kernel lock held and
hang the workers and ``close()``.

Minimal config: workers=1 rounds=1 interrupt=True.

Expected verdict: deadlock. ``main`` acquires the lock; SIGINT is checked
right after the acquire returns and raises KeyboardInterrupt before the
``try:`` is entered, so no ``finally`` runs. ``main`` unwinds and ends with
the lock held, and ``worker0`` waits for it forever.

Fix: ``interrupt_deferred``: while ``main`` is inside its protected region
(from before the acquire until after the release) the SIGINT handler only
records the interrupt; the region's exit raises it, after the release, so
the interrupt is delayed, never dropped. safeprefetch's runtime defers
KeyboardInterrupt this way with a SIGINT wrapper around its critical
sections, and also structures every critical section so that an exception
at any interruption point leaves no lock held.

Why a protocol model cannot see it
----------------------------------
In a model of the protocol alone, acquire-then-try is one atomic step, or
two steps with nothing between them that could leave: an exception is not
an event of the protocol. The interrupt is raised *by the interpreter on a
thread that is already inside a step*, at a point the source code does not
show. Here those points are explicit: each step ``main`` runs Python code
at (the eval-loop check right after ``acquire()`` returns, and the
critical section itself) has a ``SIGINT`` branch that raises
KeyboardInterrupt there, and the raise unwinds through exactly the
``finally`` blocks that have been entered.
"""

from safeprefetch.model import DONE, Model, ModelError


class InterruptAfterAcquire(Model):
    name = "interrupt_after_acquire"
    expected = "deadlock"
    fix = "interrupt_deferred"
    params = {"workers": 1, "rounds": 1, "interrupt": True}

    def build(self, m, workers, rounds, interrupt):
        if workers < 1 or rounds < 1:
            raise ModelError(f"{self.name} needs workers >= 1 and rounds >= 1")
        m.shared(sent=False, interrupted=False)
        m.mutex("lock")

        # -- main: rounds of `lock.acquire(); try: work; finally: release()` --

        def check_signals(s, me, branch="no signal"):
            # CPython's eval breaker, right after the C call acquire() returns.
            if branch == "SIGINT":
                me.signals -= 1
                s.sent = True
                return "raise KeyboardInterrupt"  # the bug: the try has not begun, no finally runs
            return "try: work"

        def work(s, me, branch="no signal"):
            if branch == "SIGINT":
                me.signals -= 1
                s.sent = True
                me.unwinding = True  # inside the try: the finally releases, then the raise goes on
                return "finally: release()"
            me.left -= 1
            return "finally: release()"

        def raise_ki(s, me):
            s.interrupted = True  # KeyboardInterrupt propagates out of main

        branches = ("no signal", "SIGINT") if interrupt else None

        def may_signal(s, me, branch):
            return branch != "SIGINT" or me.signals > 0

        guard = may_signal if interrupt else None
        mp = m.program("main", left=rounds, signals=1 if interrupt else 0, unwinding=False)
        mp.acquire("lock.acquire()", "lock", next="check signals")
        mp.step("check signals", check_signals, branches=branches, guard=guard,
                to=["raise KeyboardInterrupt", "try: work"])
        mp.step("try: work", work, branches=branches, guard=guard, to=["finally: release()"])
        mp.release("finally: release()", "lock",
                   next=lambda s, me: "raise KeyboardInterrupt" if me.unwinding else
                   ("lock.acquire()" if me.left else DONE), to=["raise KeyboardInterrupt", "lock.acquire()", DONE])
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

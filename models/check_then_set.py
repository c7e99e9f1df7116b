"""check_then_set: a "lock" made of a boolean, tested in one step and set in the next, lets two threads into the critical section together.

Source: the first failed attempt at a lock in OSTEP ch. 28 ("A Failed
Attempt: Just Using Loads/Stores") and the Deadlock Empire's "Boolean flags
are enough for everyone"; in Python, ``if not self.busy: self.busy = True``
without a ``Lock``. The property is about the threads themselves -- where
each one is -- so the invariant reads them: ``m.invariant(name, lambda s,
threads: ...)`` sees every thread's program counter and locals.

Minimal config: threads=2.

Expected verdict: invariant. Both threads test ``busy`` while it is False;
both set it and both enter: two threads are at "critical section" at once.

Fix: test and set in one atomic step -- take a real mutex (``acquire``), as
every monitor in the catalog does.
"""

from safeprefetch.model import DONE, Model


class CheckThenSet(Model):
    name = "check_then_set"
    expected = "invariant"
    params = {"threads": 2}

    def build(self, m, threads):
        m.shared(busy=False)

        def take(s, me):
            s.busy = True
            me.entries += 1

        def leave(s, me):
            s.busy = False

        p = m.program("worker", entries=0)
        p.step("check busy", next=lambda s, me: "check busy" if s.busy else "set busy",
               to=["check busy", "set busy"])
        p.step("set busy", take, next="critical section")  # the bug: not atomic with the check
        p.step("critical section", next="leave")
        p.step("leave", leave, next=DONE)
        for i in range(threads):
            m.thread(f"worker{i}", p)
        m.symmetric(*(f"worker{i}" for i in range(threads)))
        m.invariant("at most one thread in the critical section",
                    lambda s, threads: sum(t.pc == "critical section" for t in threads.values()) <= 1)
        m.at_end(lambda s, threads: None if all(t.entries == 1 for t in threads.values())
                 else ("invariant", "a worker entered more or less than once"))

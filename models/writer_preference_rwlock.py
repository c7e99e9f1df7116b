"""writer_preference_rwlock: a reader-writer lock on one monitor where readers also wait while a writer is waiting, so a stream of overlapping readers cannot starve a writer.

Source: the writer-preference solution to the second readers-writers problem
(Courtois, Heymans and Parnas, "Concurrent control with readers and
writers", CACM 1971), written the way Python code writes it: one
``threading.Condition``, ``while`` loops, ``notify_all`` when the last reader
leaves or the writer finishes. It fixes ``reader_preference_rwlock``.

Minimal config: readers=2 writers=1 fairness=strong; proved over the
``sweep`` (one to three readers), under every condvar semantics.

Expected verdict: ok under strong fairness, this model's setting. Every
thread loops forever; the progress step is ``write``: no writer starves.
(Readers may: a stream of writers keeps them waiting, the price of writer
preference; the model does not claim reader progress. Nor does it order
writers among themselves: with two, one may lose the lock to the other every
time round, even under strong fairness -- a queue of writers, a ticket lock,
is the next design, not this one.)

Under weak fairness the same design is reported as starving, and that is
the fairness notion's verdict, not the design's: before it announces
itself, the writer needs the monitor's lock, which reader 0 takes again
every time round its loop. The writer's ``acquire`` is enabled only while
the lock is free -- intermittently -- and weak fairness lets a scheduler
pass over an intermittently enabled step forever. Strong fairness (a step
enabled infinitely often is taken infinitely often) is the assumption
under which a lock fix can be verified; docs/semantics.md shows both.

Design
------
``waiting`` counts writers that have announced themselves. A reader enters
only while nobody writes *and* nobody waits to write; a writer enters once
the readers inside have left. So once a writer announces, the readers inside
drain, the last one notifies, and the writer enters before any new reader.
Spurious wakeups only re-run a ``while`` test, and are finite (see
docs/semantics.md), so they cannot starve the writer either.
"""

from safeprefetch.model import Model


class WriterPreferenceRWLock(Model):
    name = "writer_preference_rwlock"
    expected = "ok"
    params = {"readers": 2, "writers": 1}
    minimums = {"readers": 1, "writers": 1}
    sweep = {"readers": [1, 2, 3], "writers": [1]}
    # The fairness a lock's fix is verified under (see the docstring).
    settings = {"fairness": "strong"}
    #: Whether a reader also waits for announced writers (the fix); ``reader_preference_rwlock`` says no.
    readers_wait_for_writers = True

    def build(self, m, readers, writers):
        m.shared(readers=0, writing=False, waiting=0)
        m.mutex("lock")
        m.condvar("changed")
        polite = self.readers_wait_for_writers

        def may_read(s, me):
            return not s.writing and not (polite and s.waiting)

        def enter_read(s, me):
            s.readers += 1

        def leave_read(s, me):
            s.readers -= 1

        def announce(s, me):
            s.waiting += 1

        def enter_write(s, me):
            s.waiting -= 1
            s.writing = True

        def leave_write(s, me):
            s.writing = False

        r = m.program("reader")
        r.acquire("lock", "lock", next="check")
        r.step("check", next=lambda s, me: "enter" if may_read(s, me) else "wait", to=["enter", "wait"])
        r.wait("wait", "changed", "lock", next="check", until=may_read)
        r.step("enter", enter_read, next="unlock")
        r.release("unlock", "lock", next="read")
        r.step("read", next="relock")
        r.acquire("relock", "lock", next="leave")
        r.step("leave", leave_read, next=lambda s, me: "unlock after" if s.readers else "notify",
               to=["unlock after", "notify"])
        r.notify_all("notify", "changed", next="unlock after")
        r.release("unlock after", "lock", next="lock")

        w = m.program("writer")
        w.acquire("lock", "lock", next="announce")
        w.step("announce", announce, next="check")
        w.step("check", next=lambda s, me: "wait" if s.readers or s.writing else "enter", to=["wait", "enter"])
        w.wait("wait", "changed", "lock", next="check", until=lambda s, me: not s.readers and not s.writing)
        w.step("enter", enter_write, next="unlock")
        w.release("unlock", "lock", next="write")
        w.step("write", next="relock")
        w.acquire("relock", "lock", next="leave")
        w.step("leave", leave_write, next="notify")
        w.notify_all("notify", "changed", next="unlock after")
        w.release("unlock after", "lock", next="lock")

        for i in range(readers):
            m.thread(f"reader{i}", r)
        for i in range(writers):
            m.thread(f"writer{i}", w)
        m.symmetric(*(f"reader{i}" for i in range(readers)))
        m.symmetric(*(f"writer{i}" for i in range(writers)))
        m.invariant("no reader while a writer writes", lambda s: not (s.writing and s.readers))
        m.progress("write")

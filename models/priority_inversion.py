"""priority_inversion: a low-priority producer holds the buffer lock while a busy medium-priority thread runs, so under strict priorities the high-priority consumer never gets the lock.

Source: the seed's "priority inversion deadlocks" (the Mars Pathfinder
pattern): the prefetch worker runs at low priority and, like Caffe2's
PrefetchWorker, holds the buffer mutex across its whole publish; the
training thread runs at high priority; a medium-priority thread busy-waits
(spins) until the batch has been consumed, for example to log it.

Minimal config: 3 threads (producer0 low, monitor0 medium, consumer0 high),
one buffer slot.

Expected verdict: starvation. producer0 locks the buffer, fills it and sets
``ready`` while still holding the lock. consumer0 (high) sees ``ready`` and
blocks on the lock; monitor0 (medium) sees ``ready`` and spins until the
batch is taken. A strict-priority scheduler now always runs monitor0, never
producer0, so the lock is never released and consumer0 never takes the
batch: a cycle in which the high-priority consumer makes no progress.
The bug needs the strict-priority policy (``policy=priority``, this model's
default): under the weakly fair default scheduler producer0 eventually runs
and releases the lock. Without a starvation check the model explores as
"ok": every state has a move, so there is no deadlock to report.

Fix: ``prefetcher``: publish the batch in one atomic step and hold no lock
across steps (fetch outside the lock), so a preempted low-priority worker
holds nothing the consumer needs. Priority inheritance on the mutex would
also fix it.
"""

from safeprefetch.model import Model


class PriorityInversion(Model):
    name = "priority_inversion"
    expected = "starvation"
    fix = "prefetcher"
    #: The fix checked at the same shape: one worker, the same slots and items, errors on where relevant.
    fix_config = {"workers": 1, "capacity": 1, "items": 2}
    params = {}
    # The scheduling policy the bug needs (read by kernels that support the setting).
    settings = {"policy": "priority"}

    def build(self, m):
        m.shared(full=False, ready=False, logged=True)
        m.mutex("lock")
        m.condvar("not_full")

        def fill(s, me):
            s.full = True
            s.logged = False

        def announce(s, me):
            s.ready = True

        def take(s, me):
            s.full = False
            s.ready = False

        def log(s, me):
            s.logged = True

        # Low priority: the prefetch worker, publishing under the buffer lock.
        p = m.program("producer")
        p.acquire("lock", "lock", next="check full")
        p.step("check full", next=lambda s, me: "wait for space" if s.full else "fill batch",
               to=["wait for space", "fill batch"])
        p.wait("wait for space", "not_full", "lock", next="check full", until=lambda s, me: not s.full)
        p.step("fill batch", fill, next="set ready")
        p.step("set ready", announce, next="unlock")  # the bug: signalled while the lock is held
        p.release("unlock", "lock", next="lock")

        # Medium priority: wakes on `ready` and spins until the batch is taken.
        mon = m.program("monitor")
        mon.step("wait for ready", guard=lambda s, me: s.ready and not s.logged, next="spin until taken")
        mon.step("spin until taken", next=lambda s, me: "spin until taken" if s.full else "log batch",
                 to=["spin until taken", "log batch"])
        mon.step("log batch", log, next="wait for ready")

        # High priority: the training loop.
        c = m.program("consumer")
        c.step("wait for ready", guard=lambda s, me: s.ready, next="lock")
        c.acquire("lock", "lock", next="take batch")
        c.step("take batch", take, next="notify not_full")
        c.notify_one("notify not_full", "not_full", next="unlock")
        c.release("unlock", "lock", next="wait for ready")

        m.thread("producer0", p)
        m.thread("monitor0", mon)
        m.thread("consumer0", c)
        m.priority("producer0", 1)
        m.priority("monitor0", 2)
        m.priority("consumer0", 3)
        m.progress("fill batch", "take batch")

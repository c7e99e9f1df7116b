"""no_space_guard: the producer never checks for space, so it puts into a full buffer.

Source: the Little Book of Semaphores §4.1 without the ``spaces`` semaphore;
any bounded buffer whose producer lacks a ``while count == capacity: wait``.

Minimal config: producers=1 consumers=1 capacity=1 items=2.

Expected verdict: overflow. The producer puts its second item before the
consumer has taken the first.

Fix: wait on ``not_full`` while the buffer is full (the ``monitor`` reference
design), or acquire a ``spaces`` semaphore before each put (``semaphores``).
"""

from safeprefetch.model import DONE, Model


class NoSpaceGuard(Model):
    name = "no_space_guard"
    fix = "monitor"
    expected = "overflow"
    params = {"producers": 1, "consumers": 1, "capacity": 1, "items": 2}
    minimums = {"consumers": 1}

    def build(self, m, producers, consumers, capacity, items):
        m.shared(count=0)
        m.mutex("lock")
        m.condvar("not_empty")

        def put(s, me):
            s.count += 1
            me.left -= 1

        def get(s, me):
            s.count -= 1
            me.quota -= 1

        p = m.program("producer", left=items)
        p.acquire("lock", "lock", next="put")
        # The bug: no capacity check before the put.
        p.step("put", put, next="notify not_empty")
        p.notify_one("notify not_empty", "not_empty", next="unlock")
        p.release("unlock", "lock", next=lambda s, me: "lock" if me.left else DONE, to=["lock", DONE])

        c = m.program("consumer", quota=0)
        c.acquire("lock", "lock", next="check empty")
        c.step("check empty", next=lambda s, me: "wait for item" if s.count == 0 else "get",
               to=["wait for item", "get"])
        c.wait("wait for item", "not_empty", "lock", next="check empty", until=lambda s, me: s.count > 0)
        c.step("get", get, next="unlock")
        c.release("unlock", "lock", next=lambda s, me: "lock" if me.quota else DONE, to=["lock", DONE])

        for i in range(producers):
            m.thread(f"producer{i}", p)
        share, extra = divmod(producers * items, consumers)
        for i in range(consumers):
            m.thread(f"consumer{i}", c, quota=share + (1 if i < extra else 0))
        m.invariant("count <= capacity", lambda s: s.count <= capacity, "overflow")
        m.invariant("count >= 0", lambda s: s.count >= 0, "underflow")

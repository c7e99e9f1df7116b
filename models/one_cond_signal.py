"""one_cond_signal: ``while`` loops, but one condvar and ``notify_one``, so a consumer can wake a consumer and then everyone sleeps.

Source: OSTEP ch. 30 (Condition Variables), the producer/consumer "second
attempt": correct ``while`` re-checks, but producers and consumers share one
condition variable.

Minimal config: producers=1 consumers=2 capacity=1 items=2.

Expected verdict: deadlock. Consumer A takes the item and its ``notify_one``
wakes consumer B instead of the sleeping producer; B finds the buffer empty
and sleeps again. The wakeup was not lost, it went to the wrong thread.

Fix: two condvars, ``not_full`` for producers and ``not_empty`` for
consumers (the ``monitor`` reference design).
"""

from safeprefetch.model import DONE, Model


class OneCondSignal(Model):
    name = "one_cond_signal"
    fix = "monitor"
    expected = "deadlock"
    params = {"producers": 1, "consumers": 2, "capacity": 1, "items": 2}
    minimums = {"consumers": 1}

    def build(self, m, producers, consumers, capacity, items):
        total = producers * items
        m.shared(count=0, produced=0, received=())
        m.mutex("lock")
        m.condvar("cond")

        def put(s, me):
            s.produced += 1
            s.count += 1
            me.left -= 1

        def get(s, me):
            s.count -= 1
            s.received += (1,)
            me.quota -= 1

        p = m.program("producer", left=items)
        p.acquire("lock", "lock", next="check full")
        p.step("check full", next=lambda s, me: "wait" if s.count == capacity else "put", to=["wait", "put"])
        p.wait("wait", "cond", "lock", next="check full", until=lambda s, me: s.count < capacity)
        p.step("put", put, next="signal")
        p.notify_one("signal", "cond", next="unlock")
        p.release("unlock", "lock", next=lambda s, me: "lock" if me.left else DONE, to=["lock", DONE])

        c = m.program("consumer", quota=0)
        c.acquire("lock", "lock", next="check empty")
        c.step("check empty", next=lambda s, me: "wait" if s.count == 0 else "get", to=["wait", "get"])
        c.wait("wait", "cond", "lock", next="check empty", until=lambda s, me: s.count > 0)
        c.step("get", get, next="signal")
        c.notify_one("signal", "cond", next="unlock")
        c.release("unlock", "lock", next=lambda s, me: "lock" if me.quota else DONE, to=["lock", DONE])

        for i in range(producers):
            m.thread(f"producer{i}", p)
        share, extra = divmod(total, consumers)
        for i in range(consumers):
            m.thread(f"consumer{i}", c, quota=share + (1 if i < extra else 0))
        m.invariant("0 <= count <= capacity", lambda s: 0 <= s.count <= capacity, "overflow")

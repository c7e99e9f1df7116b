"""no_predicate_wait: the consumer waits without first testing the state, so a notify sent before it waits is lost.

Source: the classic missed-signal bug (OSTEP ch. 30, "always wait in a while
loop"; Deadlock Empire's condition-variable levels).

Minimal config: producers=1 consumers=1 capacity=1 items=1.

Expected verdict: lost_wakeup. The producer puts the item and notifies while
nobody is waiting; the consumer then sleeps although the item is there.

Fix: test the predicate under the lock and wait only while it is false
(``while count == 0: wait``), as the ``monitor`` reference design does.
"""

from safeprefetch.model import DONE, Model


class NoPredicateWait(Model):
    name = "no_predicate_wait"
    fix = "monitor"
    expected = "lost_wakeup"
    params = {"producers": 1, "consumers": 1, "capacity": 1, "items": 1}
    minimums = {"consumers": 1}

    def build(self, m, producers, consumers, capacity, items):
        m.shared(count=0)
        m.mutex("lock")
        m.condvar("not_empty")
        m.condvar("not_full")

        def put(s, me):
            s.count += 1
            me.left -= 1

        def get(s, me):
            s.count -= 1
            me.quota -= 1

        p = m.program("producer", left=items)
        p.acquire("lock", "lock", next="check full")
        p.step("check full", next=lambda s, me: "wait for space" if s.count == capacity else "put",
               to=["wait for space", "put"])
        p.wait("wait for space", "not_full", "lock", next="check full", until=lambda s, me: s.count < capacity)
        p.step("put", put, next="notify not_empty")
        p.notify_one("notify not_empty", "not_empty", next="unlock")
        p.release("unlock", "lock", next=lambda s, me: "lock" if me.left else DONE, to=["lock", DONE])

        c = m.program("consumer", quota=0)
        c.acquire("lock", "lock", next="wait for item")
        # The bug: no `while count == 0` around this wait.
        c.wait("wait for item", "not_empty", "lock", next="get", until=lambda s, me: s.count > 0)
        c.step("get", get, next="notify not_full")
        c.notify_one("notify not_full", "not_full", next="unlock")
        c.release("unlock", "lock", next=lambda s, me: "lock" if me.quota else DONE, to=["lock", DONE])

        for i in range(producers):
            m.thread(f"producer{i}", p)
        share, extra = divmod(producers * items, consumers)
        for i in range(consumers):
            m.thread(f"consumer{i}", c, quota=share + (1 if i < extra else 0))
        m.invariant("count >= 0", lambda s: s.count >= 0, "underflow")
        m.invariant("count <= capacity", lambda s: s.count <= capacity, "overflow")

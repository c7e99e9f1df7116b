"""join_before_drain: the owner joins the producer thread before consuming, so the producer blocks on a full buffer and the join never returns.

Source: "start the worker, ``worker.join()``, then read the queue": fine
while everything fits in the queue, a deadlock as soon as it does not.

Minimal config: producers=1 consumers=1 capacity=1 items=2.

Expected verdict: deadlock. The producer puts its first item and sleeps on
``not_full`` with the second; the consumer is still in ``join`` and will
take nothing until the producer has finished.

Fix: ``monitor``: consume until the end of the stream, and join in
``close()``, after draining (or after CLOSED has released the producer).
"""

from safeprefetch.model import DONE, Model, delivery_violation


class JoinBeforeDrain(Model):
    name = "join_before_drain"
    expected = "deadlock"
    fix = "monitor"
    params = {"producers": 1, "consumers": 1, "capacity": 1, "items": 2}
    minimums = {"consumers": 1}

    def build(self, m, producers, consumers, capacity, items):
        m.shared(buf=(), received=(), running=producers)
        m.mutex("lock")
        m.condvar("not_empty")
        m.condvar("not_full")

        def put(s, me):
            s.buf += (me.item,)
            me.item += 1
            me.left -= 1

        def finish(s, me):
            s.running -= 1

        def get(s, me):
            s.received += (s.buf[0],)
            s.buf = s.buf[1:]
            me.quota -= 1

        p = m.program("producer", left=items, item=0)
        p.acquire("lock", "lock", next="check full")
        p.step("check full", next=lambda s, me: "wait for space" if len(s.buf) == capacity else "put",
               to=["wait for space", "put"])
        p.wait("wait for space", "not_full", "lock", next="check full",
               until=lambda s, me: len(s.buf) < capacity)
        p.step("put", put, next="notify not_empty")
        p.notify_one("notify not_empty", "not_empty", next="unlock")
        p.release("unlock", "lock", next=lambda s, me: "lock" if me.left else "return", to=["lock", "return"])
        p.step("return", finish, next=DONE)

        c = m.program("consumer", quota=0)
        # The bug: the join comes first.
        c.step("join producers", guard=lambda s, me: s.running == 0,
               next=lambda s, me: "lock" if me.quota else DONE, to=["lock", DONE])
        c.acquire("lock", "lock", next="check empty")
        c.step("check empty", next=lambda s, me: "wait for item" if not s.buf else "get",
               to=["wait for item", "get"])
        c.wait("wait for item", "not_empty", "lock", next="check empty", until=lambda s, me: len(s.buf) > 0)
        c.step("get", get, next="notify not_full")
        c.notify_one("notify not_full", "not_full", next="unlock")
        c.release("unlock", "lock", next=lambda s, me: "lock" if me.quota else DONE, to=["lock", DONE])

        for i in range(producers):
            m.thread(f"producer{i}", p, item=i * items)
        share, extra = divmod(producers * items, consumers)
        for i in range(consumers):
            m.thread(f"consumer{i}", c, quota=share + (1 if i < extra else 0))

        m.invariant("count <= capacity", lambda s: len(s.buf) <= capacity, "overflow")
        expected = tuple(range(producers * items))
        m.at_end(lambda s: delivery_violation(expected, s.received, ordered=producers == 1))

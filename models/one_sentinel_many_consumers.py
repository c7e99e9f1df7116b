"""one_sentinel_many_consumers: the producer ends the stream with one end marker, but there are several consumers, so all but one wait forever.

Source: the common ``queue.put(None)`` shutdown idiom ("poison pill") used
with a pool of consumer threads; one pill stops one consumer.

Minimal config: producers=1 consumers=2 capacity=1 items=0.

Expected verdict: shutdown_hang. The producer, with nothing to produce,
puts its one end marker; consumer0 takes it and leaves; consumer1 sleeps on
``not_empty`` for an item or marker that never comes, after the stream was
closed.

Fix: ``monitor``: the end of the stream is a state, not an item: close sets
CLOSED under the lock and notifies all, and every ``get`` on an empty,
closed buffer reports the end of the stream to its caller.
"""

from safeprefetch.model import DONE, Model, delivery_violation

END = "END"


class OneSentinelManyConsumers(Model):
    name = "one_sentinel_many_consumers"
    expected = "shutdown_hang"
    fix = "monitor"
    params = {"producers": 1, "consumers": 2, "capacity": 1, "items": 0}

    def build(self, m, producers, consumers, capacity, items):
        m.shared(buf=(), received=(), closed=False)
        m.mutex("lock")
        m.condvar("not_empty")
        m.condvar("not_full")

        def put(s, me):
            s.buf += (me.item,)
            me.item += 1
            me.left -= 1

        def put_end(s, me):
            s.buf += (END,)
            s.closed = True
            me.sent_end = True

        def get(s, me):
            item, s.buf = s.buf[0], s.buf[1:]
            if item == END:
                me.finished = True
            else:
                s.received += (item,)

        p = m.program("producer", left=items, item=0, sent_end=False)
        p.acquire("lock", "lock", next="check full")
        p.step("check full", next=lambda s, me: "wait for space" if len(s.buf) == capacity
               else "put" if me.left else "put end marker", to=["wait for space", "put", "put end marker"])
        p.wait("wait for space", "not_full", "lock", next="check full",
               until=lambda s, me: len(s.buf) < capacity)
        p.step("put", put, next="notify not_empty")
        # close(): one end marker, whatever the number of consumers.
        p.step("put end marker", put_end, next="notify not_empty")
        p.notify_one("notify not_empty", "not_empty", next="unlock")
        p.release("unlock", "lock", next=lambda s, me: DONE if me.sent_end else "lock", to=[DONE, "lock"])

        c = m.program("consumer", finished=False)
        c.acquire("lock", "lock", next="check empty")
        c.step("check empty", next=lambda s, me: "wait for item" if not s.buf else "get",
               to=["wait for item", "get"])
        c.wait("wait for item", "not_empty", "lock", next="check empty", until=lambda s, me: len(s.buf) > 0)
        c.step("get", get, next="notify not_full")
        c.notify_one("notify not_full", "not_full", next="unlock")
        c.release("unlock", "lock", next=lambda s, me: DONE if me.finished else "lock", to=[DONE, "lock"])

        for i in range(producers):
            m.thread(f"producer{i}", p, item=i * items)
        for i in range(consumers):
            m.thread(f"consumer{i}", c)

        m.shutdown_when(lambda s: s.closed)
        m.invariant("count <= capacity", lambda s: len(s.buf) <= capacity, "overflow")
        expected = tuple(range(producers * items))
        m.at_end(lambda s: delivery_violation(expected, s.received, ordered=False))

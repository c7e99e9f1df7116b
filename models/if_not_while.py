"""if_not_while: one condvar and an ``if`` guard, so a woken consumer takes from a buffer another consumer has already emptied.

Source: OSTEP ch. 30 (Condition Variables), the producer/consumer "first
attempt": a single condition variable, and each side tests its condition
with ``if`` before waiting instead of re-testing it in a ``while`` loop.

Minimal config: producers=1 consumers=2 capacity=1 items=2.

Expected verdict: underflow. consumer0 sleeps on the empty buffer; the
producer puts an item and signals consumer0 awake, but consumer1 takes the
lock first and takes the item; consumer0 then re-acquires the lock and,
trusting its ``if``, takes from an empty buffer.

Fix: ``monitor``: re-test the condition in a ``while`` loop after every
wakeup, and give producers and consumers their own condvars (``not_full``,
``not_empty``). ``while`` alone is not enough: that is one_cond_signal,
which deadlocks.
"""

from safeprefetch.model import DONE, Model, ModelError, delivery_violation


class IfNotWhile(Model):
    name = "if_not_while"
    expected = "underflow"
    fix = "monitor"
    params = {"producers": 1, "consumers": 2, "capacity": 1, "items": 2}
    minimums = {"producers": 1, "consumers": 1, "items": 1}

    def build(self, m, producers, consumers, capacity, items):
        if consumers > producers * items:
            raise ModelError(f"{self.name} shares the producers*items items out among the consumers: "
                             f"needs consumers <= {producers * items}")
        m.shared(buf=(), received=())
        m.mutex("lock")
        m.condvar("cond")

        def put(s, me):
            s.buf += (me.item,)
            me.item += 1
            me.left -= 1

        def get(s, me):
            if s.buf:
                s.received += (s.buf[0],)
                s.buf = s.buf[1:]
            else:
                s.received += (None,)  # the `if` did not re-check: nothing to take
            me.quota -= 1

        p = m.program("producer", left=items, item=0)
        p.acquire("lock", "lock", next="if full")
        # The bug: `if`, not `while`: after the wait the thread goes straight to put.
        p.step("if full", next=lambda s, me: "wait" if len(s.buf) == capacity else "put", to=["wait", "put"])
        p.wait("wait", "cond", "lock", next="put", until=lambda s, me: len(s.buf) < capacity)
        p.step("put", put, next="signal")
        p.notify_one("signal", "cond", next="unlock")
        p.release("unlock", "lock", next=lambda s, me: "lock" if me.left else DONE, to=["lock", DONE])

        c = m.program("consumer", quota=0)
        c.acquire("lock", "lock", next="if empty")
        c.step("if empty", next=lambda s, me: "wait" if not s.buf else "get", to=["wait", "get"])
        c.wait("wait", "cond", "lock", next="get", until=lambda s, me: len(s.buf) > 0)
        c.step("get", get, next="signal")
        c.notify_one("signal", "cond", next="unlock")
        c.release("unlock", "lock", next=lambda s, me: "lock" if me.quota else DONE, to=["lock", DONE])

        for i in range(producers):
            m.thread(f"producer{i}", p, item=i * items)
        share, extra = divmod(producers * items, consumers)
        for i in range(consumers):
            m.thread(f"consumer{i}", c, quota=share + (1 if i < extra else 0))

        m.invariant("count <= capacity", lambda s: len(s.buf) <= capacity, "overflow")
        m.invariant("a take always finds an item", lambda s: None not in s.received, "underflow")

        expected = tuple(range(producers * items))
        m.at_end(lambda s: delivery_violation(expected, s.received, ordered=producers == 1))

"""notify_one_on_close: close sets the closed flag but wakes only one of the consumers blocked on an empty buffer, so the others sleep forever.

Source: a closable queue whose ``close()`` ends with ``not_empty.notify()``
where ``notify_all()`` was needed; with one consumer it looks correct.

Minimal config: producers=1 consumers=2 capacity=1 items=0.

Expected verdict: shutdown_hang. Both consumers sleep on ``not_empty``; the
producer, with nothing to produce, closes: it sets ``closed`` and notifies
one waiter. consumer0 wakes, sees the closed, empty buffer and returns;
consumer1 is never woken.

Fix: ``monitor``: close notifies all on both condvars.
"""

from safeprefetch.model import DONE, Model, delivery_violation


class NotifyOneOnClose(Model):
    name = "notify_one_on_close"
    expected = "shutdown_hang"
    fix = "monitor"
    params = {"producers": 1, "consumers": 2, "capacity": 1, "items": 0}

    def build(self, m, producers, consumers, capacity, items):
        m.shared(buf=(), received=(), closed=False, open_producers=producers)
        m.mutex("lock")
        m.condvar("not_empty")
        m.condvar("not_full")

        def check_space(s, me):
            if not me.left:
                return "set closed"
            return "wait for space" if len(s.buf) == capacity else "put"

        def put(s, me):
            s.buf += (me.item,)
            me.item += 1
            me.left -= 1

        def close(s, me):
            s.open_producers -= 1
            if s.open_producers == 0:
                s.closed = True

        def check_item(s, me):
            if s.buf:
                return "get"
            return "unlock (end of stream)" if s.closed else "wait for item"

        def get(s, me):
            s.received += (s.buf[0],)
            s.buf = s.buf[1:]

        p = m.program("producer", left=items, item=0)
        p.acquire("lock", "lock", next="check full")
        p.step("check full", check_space, to=["set closed", "wait for space", "put"])
        p.wait("wait for space", "not_full", "lock", next="check full",
               until=lambda s, me: len(s.buf) < capacity)
        p.step("put", put, next="notify not_empty")
        p.notify_one("notify not_empty", "not_empty", next="unlock")
        p.release("unlock", "lock", next="lock")
        # close(): the bug is notify_one where every waiter must re-test `closed`.
        p.step("set closed", close, next="notify one consumer")
        p.notify_one("notify one consumer", "not_empty", next="unlock (close)")
        p.release("unlock (close)", "lock", next=DONE)

        c = m.program("consumer")
        c.acquire("lock", "lock", next="check empty")
        c.step("check empty", check_item, to=["get", "unlock (end of stream)", "wait for item"])
        c.wait("wait for item", "not_empty", "lock", next="check empty",
               until=lambda s, me: bool(s.buf) or s.closed)
        c.step("get", get, next="notify not_full")
        c.notify_one("notify not_full", "not_full", next="unlock")
        c.release("unlock", "lock", next="lock")
        c.release("unlock (end of stream)", "lock", next=DONE)

        for i in range(producers):
            m.thread(f"producer{i}", p, item=i * items)
        for i in range(consumers):
            m.thread(f"consumer{i}", c)

        m.shutdown_when(lambda s: s.closed)
        m.invariant("count <= capacity", lambda s: len(s.buf) <= capacity, "overflow")
        expected = tuple(range(producers * items))
        m.at_end(lambda s: delivery_violation(expected, s.received, ordered=False))

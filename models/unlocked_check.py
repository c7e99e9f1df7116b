"""unlocked_check: the consumer tests for an item outside the lock, then locks and waits, so an item put in between is never announced to it.

Source: the classic check-then-wait race (OSTEP ch. 30: "hold the lock when
calling wait"; the lock must protect the test as well as the wait).

Minimal config: producers=1 consumers=1 capacity=1 items=1.

Expected verdict: lost_wakeup. The consumer reads ``count == 0`` without the
lock; the producer then puts its item and notifies while nobody waits; the
consumer takes the lock and sleeps on ``not_empty`` although the item is
there, and no notify will ever come.

Fix: ``monitor``: take the lock first and test the predicate under it
(``with lock: while count == 0: not_empty.wait()``), so the test and the
wait are one atomic decision.
"""

from safeprefetch.model import DONE, Model, ModelError, delivery_violation


class UnlockedCheck(Model):
    name = "unlocked_check"
    expected = "lost_wakeup"
    fix = "monitor"
    params = {"producers": 1, "consumers": 1, "capacity": 1, "items": 1}
    minimums = {"producers": 1, "consumers": 1, "items": 1}

    def build(self, m, producers, consumers, capacity, items):
        if consumers > producers * items:
            raise ModelError(f"{self.name} shares the producers*items items out among the consumers: "
                             f"needs consumers <= {producers * items}")
        m.shared(buf=(), received=())
        m.mutex("lock")
        m.condvar("not_empty")
        m.condvar("not_full")

        def put(s, me):
            s.buf += (me.item,)
            me.item += 1
            me.left -= 1

        def get(s, me):
            if s.buf:
                s.received += (s.buf[0],)
                s.buf = s.buf[1:]
            else:
                s.received += (None,)  # took from an empty buffer
            me.quota -= 1

        p = m.program("producer", left=items, item=0)
        p.acquire("lock", "lock", next="check full")
        p.step("check full", next=lambda s, me: "wait for space" if len(s.buf) == capacity else "put",
               to=["wait for space", "put"])
        p.wait("wait for space", "not_full", "lock", next="check full",
               until=lambda s, me: len(s.buf) < capacity)
        p.step("put", put, next="notify not_empty")
        p.notify_one("notify not_empty", "not_empty", next="unlock")
        p.release("unlock", "lock", next=lambda s, me: "lock" if me.left else DONE, to=["lock", DONE])

        c = m.program("consumer", quota=0)
        # The bug: `while count == 0:` is evaluated without the lock...
        c.step("check empty (no lock)", next=lambda s, me: "lock to wait" if not s.buf else "lock to get",
               to=["lock to wait", "lock to get"])
        # ...and the wait does not test it again once the lock is held.
        c.acquire("lock to wait", "lock", next="wait for item")
        c.wait("wait for item", "not_empty", "lock", next="unlock after wait",
               until=lambda s, me: len(s.buf) > 0)
        c.release("unlock after wait", "lock", next="check empty (no lock)")
        c.acquire("lock to get", "lock", next="get")
        c.step("get", get, next="notify not_full")
        c.notify_one("notify not_full", "not_full", next="unlock")
        c.release("unlock", "lock", next=lambda s, me: "check empty (no lock)" if me.quota else DONE,
                  to=["check empty (no lock)", DONE])

        for i in range(producers):
            m.thread(f"producer{i}", p, item=i * items)
        share, extra = divmod(producers * items, consumers)
        for i in range(consumers):
            m.thread(f"consumer{i}", c, quota=share + (1 if i < extra else 0))
        m.invariant("count <= capacity", lambda s: len(s.buf) <= capacity, "overflow")
        m.invariant("a take always finds an item", lambda s: None not in s.received, "underflow")

        expected = tuple(range(producers * items))
        m.at_end(lambda s: delivery_violation(expected, s.received, ordered=producers == 1))

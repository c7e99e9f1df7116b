"""dropped_sentinel: close puts the end marker with a non-blocking put and ignores "queue full", so the marker is dropped and the consumer waits forever.

Source: the ``try: q.put_nowait(SENTINEL) except queue.Full: pass`` close
found in thread-based prefetchers, written so that close can never block.

Minimal config: producers=1 consumers=1 capacity=1 items=1.

Expected verdict: shutdown_hang. The producer fills the buffer with its one
item, then closes: ``put_nowait`` of the end marker finds the buffer full
and the ``Full`` is swallowed. The consumer takes the item and sleeps on
``not_empty`` for a marker that was never stored.

Fix: ``monitor``: close sets CLOSED under the lock and notifies all; it
needs no buffer space, so it neither blocks nor gets lost, and a ``get`` on
an empty, closed buffer reports the end of the stream.
"""

from safeprefetch.model import DONE, Model, ModelError, delivery_violation

END = "END"


class DroppedSentinel(Model):
    name = "dropped_sentinel"
    expected = "shutdown_hang"
    fix = "monitor"
    params = {"producers": 1, "consumers": 1, "capacity": 1, "items": 1}

    def build(self, m, producers, consumers, capacity, items):
        if consumers != 1:
            raise ModelError(f"{self.name} has one consumer count the producers' end markers; "
                             "for several consumers see one_sentinel_many_consumers")
        m.shared(buf=(), received=(), closed=False, dropped=False)
        m.mutex("lock")
        m.condvar("not_empty")
        m.condvar("not_full")

        def put(s, me):
            s.buf += (me.item,)
            me.item += 1
            me.left -= 1

        def put_end_nowait(s, me):
            s.closed = True
            if len(s.buf) == capacity:
                s.dropped = True  # queue.Full, caught and ignored
                return "unlock (close)"
            s.buf += (END,)
            return "notify not_empty (close)"

        def get(s, me):
            item, s.buf = s.buf[0], s.buf[1:]
            if item == END:
                me.ends += 1
                me.finished = me.ends == producers
            else:
                s.received += (item,)

        p = m.program("producer", left=items, item=0)
        p.acquire("lock", "lock", next="check full")
        p.step("check full", next=lambda s, me: "put_nowait end marker" if not me.left
               else "wait for space" if len(s.buf) == capacity else "put",
               to=["put_nowait end marker", "wait for space", "put"])
        p.wait("wait for space", "not_full", "lock", next="check full",
               until=lambda s, me: len(s.buf) < capacity)
        p.step("put", put, next="notify not_empty")
        p.notify_one("notify not_empty", "not_empty", next="unlock")
        p.release("unlock", "lock", next="lock")
        # close(): put_nowait(END); `except Full: pass`.
        p.step("put_nowait end marker", put_end_nowait, to=["unlock (close)", "notify not_empty (close)"])
        p.notify_one("notify not_empty (close)", "not_empty", next="unlock (close)")
        p.release("unlock (close)", "lock", next=DONE)

        c = m.program("consumer", finished=False, ends=0)
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
        m.at_end(lambda s: delivery_violation(expected, s.received, ordered=producers == 1))

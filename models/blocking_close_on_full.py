"""blocking_close_on_full: the producer closes the stream with a blocking put of the end marker after the consumer has left, so close waits forever for space.

Source: the thread-backed generator/prefetcher whose worker ends with
``q.put(SENTINEL)``: when the consumer stops iterating early (``break``, an
exception, dropping the iterator) with the queue full, the worker never
finishes and joining it hangs.

Minimal config: producers=1 consumers=1 capacity=1 items=1.

Expected verdict: shutdown_hang. The consumer breaks out of its loop before
taking anything; the producer fills the buffer with its one item, then
closes by putting the end marker, which sleeps on ``not_full`` forever:
nobody will ever take from this buffer again.

Fix: ``monitor``: the end of the stream is a state set under the lock (it
needs no buffer space), and a consumer that leaves closes the monitor,
which notifies all and makes a blocked put return.
"""

from safeprefetch.model import DONE, Model, ModelError, delivery_violation

END = "END"


class BlockingCloseOnFull(Model):
    name = "blocking_close_on_full"
    expected = "shutdown_hang"
    fix = "monitor"
    params = {"producers": 1, "consumers": 1, "capacity": 1, "items": 1}

    def build(self, m, producers, consumers, capacity, items):
        if consumers != 1:
            raise ModelError(f"{self.name} has one consumer count the producers' end markers; "
                             "for several consumers see one_sentinel_many_consumers")
        m.shared(buf=(), received=(), left_early=False)
        m.mutex("lock")
        m.condvar("not_empty")
        m.condvar("not_full")

        def put(s, me):
            if me.left:
                s.buf += (me.item,)
                me.item += 1
                me.left -= 1
            else:
                s.buf += (END,)
                me.closed = True

        def leave(s, me, choice):
            if choice == "break":
                s.left_early = True  # the consumer just stops reading
                return DONE
            return "lock"

        def get(s, me):
            item, s.buf = s.buf[0], s.buf[1:]
            if item == END:
                me.ends += 1
                me.finished = me.ends == producers
            else:
                s.received += (item,)

        def after_check(s, me):
            full = len(s.buf) == capacity
            if me.left:
                return "wait for space" if full else "put"
            return "wait for space (close)" if full else "put end marker"

        p = m.program("producer", left=items, item=0, closed=False)
        p.acquire("lock", "lock", next="check full")
        p.step("check full", next=after_check,
               to=["wait for space", "put", "wait for space (close)", "put end marker"])
        p.wait("wait for space", "not_full", "lock", next="check full",
               until=lambda s, me: len(s.buf) < capacity)
        p.step("put", put, next="notify not_empty")
        # The bug: close() ends the stream with the same blocking put as the items.
        p.wait("wait for space (close)", "not_full", "lock", next="check full",
               until=lambda s, me: len(s.buf) < capacity)
        p.step("put end marker", put, next="notify not_empty")
        p.notify_one("notify not_empty", "not_empty", next="unlock")
        p.release("unlock", "lock", next=lambda s, me: DONE if me.closed else "lock", to=[DONE, "lock"])

        c = m.program("consumer", finished=False, ends=0)
        c.step("next batch or break", leave, branches=("next", "break"), to=[DONE, "lock"])
        c.acquire("lock", "lock", next="check empty")
        c.step("check empty", next=lambda s, me: "wait for item" if not s.buf else "get",
               to=["wait for item", "get"])
        c.wait("wait for item", "not_empty", "lock", next="check empty", until=lambda s, me: len(s.buf) > 0)
        c.step("get", get, next="notify not_full")
        c.notify_one("notify not_full", "not_full", next="unlock")
        c.release("unlock", "lock", next=lambda s, me: DONE if me.finished else "next batch or break",
                  to=[DONE, "next batch or break"])

        for i in range(producers):
            m.thread(f"producer{i}", p, item=i * items)
        for i in range(consumers):
            m.thread(f"consumer{i}", c)

        m.shutdown_when(lambda s: s.left_early)
        m.invariant("count <= capacity", lambda s: len(s.buf) <= capacity, "overflow")
        expected = tuple(range(producers * items))

        def at_end(s):
            return delivery_violation(expected, s.received, ordered=producers == 1,
                                      complete=not s.left_early)

        m.at_end(at_end)

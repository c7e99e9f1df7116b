"""swallowed_producer_error: the source raises in the worker thread, the worker dies without putting a terminal item, and the consumer waits forever.

Source: the plain ``threading.Thread(target=worker)`` prefetcher whose
``worker`` is ``for x in source: q.put(x)`` then ``q.put(END)``: an
exception in ``source`` ends the thread (``threading.excepthook`` prints
it), so neither the error nor the end marker ever reaches the queue.

Minimal config: producers=1 consumers=1 capacity=1 items=1.

Expected verdict: shutdown_hang. The worker's fetch raises and the thread
exits; the consumer sleeps on ``not_empty`` for an item or end marker that
will never come. (Had the consumer been able to finish, the verdict would be
error_lost: the error never reached it.)

Fix: ``monitor``: the worker catches the exception and calls ``fail(err)``,
which sets FAILED under the lock and notifies all; the consumer drains the
items before it and then re-raises the error at its position.
"""

from safeprefetch.model import DONE, Model, ModelError, delivery_violation

END = "END"


class SwallowedProducerError(Model):
    name = "swallowed_producer_error"
    expected = "shutdown_hang"
    fix = "monitor"
    params = {"producers": 1, "consumers": 1, "capacity": 1, "items": 1}

    def build(self, m, producers, consumers, capacity, items):
        if consumers != 1:
            raise ModelError(f"{self.name} has one consumer count the producers' end markers; "
                             "for several consumers see one_sentinel_many_consumers")
        m.shared(buf=(), received=(), failed=False, error_seen=False, first_error=-1)
        m.mutex("lock")
        m.condvar("not_empty")
        m.condvar("not_full")

        def fetched(s, me, outcome):
            if outcome == "exhausted":
                return "lock"  # StopIteration: go put the end marker
            if outcome == "error":
                # The exception propagates out of worker(): the thread is gone.
                s.failed = True
                if s.first_error < 0:
                    s.first_error = me.item
                return DONE
            return "lock"

        def check_space(s, me):
            if len(s.buf) == capacity:
                return "wait for space"
            return "put" if me.left else "put end marker"

        def put(s, me):
            if me.left:
                s.buf += (me.item,)
                me.item += 1
                me.left -= 1
            else:
                s.buf += (END,)
                me.ended = True

        def get(s, me):
            item, s.buf = s.buf[0], s.buf[1:]
            if item == END:
                me.ends += 1
                me.finished = me.ends == producers
            else:
                s.received += (item,)

        p = m.program("producer", left=items, item=0, ended=False)
        p.external("next(source)", "fetch", fetched, branches=("ok", "error", "exhausted"),
                   guard=lambda s, me, outcome: (outcome == "exhausted") == (me.left == 0), to=["lock", DONE])
        p.acquire("lock", "lock", next="check full")
        p.step("check full", check_space, to=["wait for space", "put", "put end marker"])
        p.wait("wait for space", "not_full", "lock", next="check full",
               until=lambda s, me: len(s.buf) < capacity)
        p.step("put", put, next="notify not_empty")
        p.step("put end marker", put, next="notify not_empty")
        p.notify_one("notify not_empty", "not_empty", next="unlock")
        p.release("unlock", "lock", next=lambda s, me: DONE if me.ended else "next(source)",
                  to=[DONE, "next(source)"])

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

        m.shutdown_when(lambda s: s.failed)
        m.invariant("count <= capacity", lambda s: len(s.buf) <= capacity, "overflow")
        expected = tuple(range(producers * items))

        def at_end(s):
            if s.failed:
                if not s.error_seen:
                    return "error_lost", f"the fetch of item {s.first_error} raised, but the consumer never saw it"
                return delivery_violation(expected, s.received, ordered=producers == 1, complete=False)
            return delivery_violation(expected, s.received, ordered=producers == 1)

        m.at_end(at_end)

"""close_without_wake: close sets the closed flag under the lock but notifies no one, so a producer asleep on a full buffer never sees it.

Source: a hand-written closable queue whose ``close()`` is ``with lock:
closed = True``; the waits do test ``closed``, but only when woken.

Minimal config: producers=1 consumers=1 capacity=1 items=2.

Expected verdict: shutdown_hang. The producer fills the buffer and sleeps
on ``not_full`` with its second item; the consumer stops early and closes,
setting ``closed`` without a notify, then joins the producer. The producer's
wait condition (``count < capacity or closed``) now holds, but it is never
woken to re-test it, and the join waits forever.

Fix: ``monitor``: close notifies all on both condvars (``not_full`` and
``not_empty``) after setting CLOSED.
"""

from safeprefetch.model import DONE, Model, delivery_violation


class CloseWithoutWake(Model):
    name = "close_without_wake"
    expected = "shutdown_hang"
    fix = "monitor"
    params = {"producers": 1, "consumers": 1, "capacity": 1, "items": 2}

    def build(self, m, producers, consumers, capacity, items):
        m.shared(buf=(), received=(), closed=False, eos=False, running=producers, stopped_early=False)
        m.mutex("lock")
        m.condvar("not_empty")
        m.condvar("not_full")

        def check_space(s, me):
            if s.closed:
                return "unlock and exit"  # put() raises Closed; the worker returns
            if not me.left:
                return "mark end of stream"
            return "wait for space" if len(s.buf) == capacity else "put"

        def put(s, me):
            s.buf += (me.item,)
            me.item += 1
            me.left -= 1

        def end_of_stream(s, me):
            s.running -= 1
            if s.running == 0:
                s.eos = True

        def exit_(s, me):
            s.running -= 1

        def choose(s, me, choice):
            if choice == "close":
                s.stopped_early = True
                return "lock to close"
            return "lock"

        def check_item(s, me):
            if s.buf:
                return "get"
            if s.eos or s.closed:
                return "unlock (end of stream)"
            return "wait for item"

        def get(s, me):
            s.received += (s.buf[0],)
            s.buf = s.buf[1:]

        def set_closed(s, me):
            s.closed = True

        p = m.program("producer", left=items, item=0)
        p.acquire("lock", "lock", next="check closed or full")
        p.step("check closed or full", check_space,
               to=["unlock and exit", "mark end of stream", "wait for space", "put"])
        p.wait("wait for space", "not_full", "lock", next="check closed or full",
               until=lambda s, me: len(s.buf) < capacity or s.closed)
        p.step("put", put, next="notify not_empty")
        p.notify_one("notify not_empty", "not_empty", next="unlock")
        p.release("unlock", "lock", next="lock")
        p.step("mark end of stream", end_of_stream, next="notify_all not_empty")
        p.notify_all("notify_all not_empty", "not_empty", next="unlock and return")
        p.release("unlock and return", "lock", next=DONE)
        p.release("unlock and exit", "lock", next="exit")
        p.step("exit", exit_, next=DONE)

        c = m.program("consumer")
        c.step("next batch or close", choose, branches=("next batch", "close"), to=["lock to close", "lock"])
        c.acquire("lock", "lock", next="check empty")
        c.step("check empty", check_item, to=["get", "unlock (end of stream)", "wait for item"])
        c.wait("wait for item", "not_empty", "lock", next="check empty",
               until=lambda s, me: bool(s.buf) or s.eos or s.closed)
        c.step("get", get, next="notify not_full")
        c.notify_one("notify not_full", "not_full", next="unlock")
        c.release("unlock", "lock", next="next batch or close")
        c.release("unlock (end of stream)", "lock", next="lock to close")
        # close(): the flag is set, but nobody sleeping on not_full/not_empty hears of it.
        c.acquire("lock to close", "lock", next="set closed")
        c.step("set closed", set_closed, next="unlock after close")
        c.release("unlock after close", "lock", next="join producers")
        c.step("join producers", guard=lambda s, me: s.running == 0, next=DONE)

        for i in range(producers):
            m.thread(f"producer{i}", p, item=i * items)
        for i in range(consumers):
            m.thread(f"consumer{i}", c)

        m.shutdown_when(lambda s: s.closed)
        m.invariant("count <= capacity", lambda s: len(s.buf) <= capacity, "overflow")
        expected = tuple(range(producers * items))
        m.at_end(lambda s: delivery_violation(expected, s.received, ordered=producers == 1,
                                              complete=not s.stopped_early))

"""shared_handle_close: producers share one send handle, and the first to finish closes the channel while the others still have items to send.

Source: trio's memory channels, used without ``clone()``: every producer
task gets the same ``send_channel`` and closes it (``async with
send_channel:``) when it is done.

Minimal config: producers=2 consumers=1 capacity=1 items=1.

Expected verdict: lost_item. producer0 sends its item and closes the
channel; producer1's send then fails with ``ClosedResourceError`` and its
item is dropped. The consumer drains producer0's item, sees the end of the
channel and finishes without producer1's.

Fix: ``channel``: give each producer its own ``clone()`` of the send handle;
the channel reports the end only when the last open clone is closed.
"""

from safeprefetch.model import DONE, Model, delivery_violation


class SharedHandleClose(Model):
    name = "shared_handle_close"
    expected = "lost_item"
    fix = "channel"
    params = {"producers": 2, "consumers": 1, "capacity": 1, "items": 1}

    def build(self, m, producers, consumers, capacity, items):
        m.shared(buf=(), received=(), closed=False, refused=())
        m.mutex("lock")
        m.condvar("not_empty")
        m.condvar("not_full")

        def check_send(s, me):
            if not me.left:
                return "close send channel"
            if s.closed:
                s.refused += (me.item,)
                return "unlock (send raised ClosedResourceError)"
            return "wait for space" if len(s.buf) == capacity else "send"

        def send(s, me):
            s.buf += (me.item,)
            me.item += 1
            me.left -= 1

        def close(s, me):
            # The bug: the handle is shared, so closing it closes everyone's.
            s.closed = True

        def check_receive(s, me):
            if s.buf:
                return "receive"
            return "unlock (end of channel)" if s.closed else "wait for item"

        def receive(s, me):
            s.received += (s.buf[0],)
            s.buf = s.buf[1:]

        p = m.program("producer", left=items, item=0)
        p.acquire("lock", "lock", next="check closed or full")
        p.step("check closed or full", check_send,
               to=["close send channel", "unlock (send raised ClosedResourceError)", "wait for space", "send"])
        p.wait("wait for space", "not_full", "lock", next="check closed or full",
               until=lambda s, me: len(s.buf) < capacity or s.closed)
        p.step("send", send, next="notify not_empty")
        p.notify_one("notify not_empty", "not_empty", next="unlock")
        p.release("unlock", "lock", next="lock")
        p.release("unlock (send raised ClosedResourceError)", "lock", next=DONE)
        p.step("close send channel", close, next="notify_all not_empty")
        p.notify_all("notify_all not_empty", "not_empty", next="notify_all not_full")
        p.notify_all("notify_all not_full", "not_full", next="unlock (close)")
        p.release("unlock (close)", "lock", next=DONE)

        c = m.program("consumer")
        c.acquire("lock", "lock", next="check empty")
        c.step("check empty", check_receive, to=["receive", "unlock (end of channel)", "wait for item"])
        c.wait("wait for item", "not_empty", "lock", next="check empty",
               until=lambda s, me: bool(s.buf) or s.closed)
        c.step("receive", receive, next="notify not_full")
        c.notify_one("notify not_full", "not_full", next="unlock")
        c.release("unlock", "lock", next="lock")
        c.release("unlock (end of channel)", "lock", next=DONE)

        for i in range(producers):
            m.thread(f"producer{i}", p, item=i * items)
        for i in range(consumers):
            m.thread(f"consumer{i}", c)

        m.shutdown_when(lambda s: s.closed)
        m.invariant("count <= capacity", lambda s: len(s.buf) <= capacity, "overflow")
        expected = tuple(range(producers * items))

        def at_end(s):
            found = delivery_violation(expected, s.received, ordered=False)
            if found and found[0] == "lost_item" and s.refused:
                return "lost_item", found[1] + f" (send of {s.refused[0]!r} raised: channel already closed)"
            return found

        m.at_end(at_end)

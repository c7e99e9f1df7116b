"""non_idempotent_close: closing the same send handle twice decrements the open-sender count twice, so the channel ends while another producer still sends.

Source: a reference-counted channel (trio-style cloned send handles) whose
``close()`` lacks the ``if self._closed: return`` guard, meeting the usual
double close: an explicit ``close()`` followed by the ``with`` block's exit.

Minimal config: producers=2 consumers=1 capacity=1 items=1.

Expected verdict: lost_item. Two clones are open (count 2). producer0 sends
its item and closes its clone twice: the count drops to 0 and the channel
ends. producer1's send on its own, still open clone then raises, and its
item never arrives.

Fix: ``channel``: each handle remembers that it is closed and a second
``close()`` returns at once, so only the last distinct clone ends the
channel.
"""

from safeprefetch.model import DONE, Model, delivery_violation


class NonIdempotentClose(Model):
    name = "non_idempotent_close"
    expected = "lost_item"
    fix = "channel"
    params = {"producers": 2, "consumers": 1, "capacity": 1, "items": 1}

    def build(self, m, producers, consumers, capacity, items):
        m.shared(buf=(), received=(), open_senders=producers, closed=False, refused=())
        m.mutex("lock")
        m.condvar("not_empty")
        m.condvar("not_full")

        def check_send(s, me):
            if s.closed:
                s.refused += (me.item,)
                return "unlock (send raised ClosedResourceError)"
            return "wait for space" if len(s.buf) == capacity else "send"

        def send(s, me):
            s.buf += (me.item,)
            me.item += 1
            me.left -= 1

        def close(s, me):
            # The bug: no `if me.handle_closed: return`.
            me.handle_closed = True
            me.closes -= 1
            s.open_senders -= 1
            if s.open_senders == 0:
                s.closed = True
                return "notify_all not_empty"
            return "unlock (close)"

        def check_receive(s, me):
            if s.buf:
                return "receive"
            return "unlock (end of channel)" if s.closed else "wait for item"

        def receive(s, me):
            s.received += (s.buf[0],)
            s.buf = s.buf[1:]

        p = m.program("producer", left=items, item=0, closes=2, handle_closed=False)
        p.step("next item", next=lambda s, me: "lock" if me.left else "lock (close)", to=["lock", "lock (close)"])
        p.acquire("lock", "lock", next="check closed or full")
        p.step("check closed or full", check_send,
               to=["unlock (send raised ClosedResourceError)", "wait for space", "send"])
        p.wait("wait for space", "not_full", "lock", next="check closed or full",
               until=lambda s, me: len(s.buf) < capacity or s.closed)
        p.step("send", send, next="notify not_empty")
        p.notify_one("notify not_empty", "not_empty", next="unlock")
        p.release("unlock", "lock", next="next item")
        p.release("unlock (send raised ClosedResourceError)", "lock", next=DONE)
        # close(), then the `with` block's exit closes the same handle again.
        p.acquire("lock (close)", "lock", next="open_senders -= 1")
        p.step("open_senders -= 1", close, to=["notify_all not_empty", "unlock (close)"])
        p.notify_all("notify_all not_empty", "not_empty", next="notify_all not_full")
        p.notify_all("notify_all not_full", "not_full", next="unlock (close)")
        p.release("unlock (close)", "lock", next=lambda s, me: "lock (close)" if me.closes else DONE,
                  to=["lock (close)", DONE])

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
                return "lost_item", found[1] + f" (send of {s.refused[0]!r} raised: channel already ended)"
            return found

        m.at_end(at_end)

"""channel: a bounded channel with trio-style cloned send and receive handles and reference counts, so the last sender's close ends the stream and the last receiver's close breaks it.

Source: trio's ``open_memory_channel`` (``trio/_channel.py``): every
producer owns its own clone of the send handle and every consumer its own
clone of the receive handle; ``close()`` on a handle is idempotent and only
decrements the count of open handles on its side. When the last send handle
closes, receivers get ``EndOfChannel`` once the buffer is empty; when the
last receive handle closes, the buffer is discarded and senders get
``BrokenResourceError``.

Minimal config: producers=1 consumers=1 capacity=1 items=1; proved over the
``sweep`` (up to 2 producers, 2 consumers, capacity 2, 2 items each, with
receivers that may abandon the channel at any receive and senders that close
twice), under every condvar semantics.

Expected verdict: ok.

Design
------
One lock and two condvars, like ``monitor``, but the lifecycle is two
reference counts rather than a state variable:

* ``open_senders`` -- send handles not yet closed. A receiver that finds the
  buffer empty waits while it is positive, and sees end of stream at zero.
* ``open_receivers`` -- receive handles not yet closed. A sender waits for
  space while it is positive, and sees the channel broken at zero.

Each handle keeps its own ``closed`` bit (here a tuple indexed by owner), and
``close`` returns at once when it is set: that is what makes a second
``close`` on the same clone harmless (``double_close=True`` closes every send
handle twice). Only the close that takes a count to zero notifies, and it
notifies *all* waiters on the other side.

Condvars: ``not_empty`` is notified (one) after a send and (all) when the
last sender closes; ``not_full`` is notified (one) after a receive and (all)
when the last receiver closes.

With ``abandon=True`` every receive may instead close that receiver's handle
(the consumer stops early). Other receivers keep draining; only when the last
receiver closes early does the stream break, and then the check is weaker:
what was received is a prefix of what was sent, with nothing duplicated.

One subtlety the checker found while this model was written: a receiver that
was woken by a send's ``notify_one`` and then abandons takes that wakeup with
it, and a second receiver sleeps next to a buffered item while the sender
waits for space. trio never meets this because a send hands its value
straight to a parked receiver; with condvars, a receiver that closes while
items remain buffered must pass the wakeup on (one more ``notify_one`` on
``not_empty``).
"""

from safeprefetch.model import DONE, Model, ModelError, delivery_violation


def _set(t, k, value):
    return t[:k] + (value,) + t[k + 1:]


class Channel(Model):
    name = "channel"
    expected = "ok"
    params = {"producers": 1, "consumers": 1, "capacity": 1, "items": 1, "abandon": False,
              "double_close": False}
    sweep = {"producers": [1, 2], "consumers": [1, 2], "capacity": [1, 2], "items": [0, 1, 2],
             "abandon": [False, True], "double_close": [False, True]}

    def build(self, m, producers, consumers, capacity, items, abandon, double_close):
        if producers < 1 or consumers < 1 or capacity < 1 or items < 0:
            raise ModelError("channel needs producers >= 1, consumers >= 1, capacity >= 1, items >= 0")
        m.shared(
            buf=(),                                # the buffer, oldest first (item ids)
            open_senders=producers,                # send handles not closed
            open_receivers=consumers,              # receive handles not closed
            sender_closed=(False,) * producers,    # per send clone: closed?
            receiver_closed=(False,) * consumers,  # per receive clone: closed?
            sent=(),                               # every item a send accepted, in order
            received=(),                           # every item a receive returned, in order
            broken=False,                          # the last receiver closed with the stream unfinished
        )
        m.mutex("lock")
        m.condvar("not_full")   # notified after a receive, and (all) when the last receiver closes
        m.condvar("not_empty")  # notified after a send, and (all) when the last sender closes

        # -- sender: send each item on its own clone, then close it ----------

        def check_send(s, me):
            if s.open_receivers == 0:
                return "close sender"  # send raises BrokenResourceError; the producer closes and leaves
            return "wait not_full" if len(s.buf) == capacity else "send"

        def send(s, me):
            item = me.who * items + (items - me.left)
            s.buf += (item,)
            s.sent += (item,)
            me.left -= 1

        def close_sender(s, me):
            me.closes += 1
            if s.sender_closed[me.who]:
                return "unlock and return"  # idempotent: this clone is already closed
            s.sender_closed = _set(s.sender_closed, me.who, True)
            s.open_senders -= 1
            return "wake receivers" if s.open_senders == 0 else "unlock and return"

        def after_close(s, me):
            return "lock to close" if double_close and me.closes < 2 else DONE

        p = m.program("sender", who=0, left=items, closes=0)
        p.acquire("lock", "lock", next=lambda s, me: "check" if me.left else "close sender",
                  to=["check", "close sender"])
        p.step("check", next=check_send, to=["close sender", "wait not_full", "send"])
        p.wait("wait not_full", "not_full", "lock", next="check",
               until=lambda s, me: len(s.buf) < capacity or s.open_receivers == 0)
        p.step("send", send, next="notify not_empty")
        p.notify_one("notify not_empty", "not_empty", next="unlock")
        p.release("unlock", "lock", next="lock")
        p.acquire("lock to close", "lock", next="close sender")
        p.step("close sender", close_sender, to=["unlock and return", "wake receivers"])
        p.notify_all("wake receivers", "not_empty", next="unlock and return")
        p.release("unlock and return", "lock", next=after_close, to=["lock to close", DONE])

        # -- receiver: receive until EndOfChannel (or abandon), then close ----

        def check_receive(s, me, choice):
            if choice == "abandon":
                return "close receiver"
            if s.buf:
                return "receive"
            return "wait not_empty" if s.open_senders else "close receiver"  # EndOfChannel

        def receive(s, me):
            s.received += (s.buf[0],)
            s.buf = s.buf[1:]

        def close_receiver(s, me):
            if s.receiver_closed[me.who]:
                return "unlock and return"
            s.receiver_closed = _set(s.receiver_closed, me.who, True)
            s.open_receivers -= 1
            if s.open_receivers == 0:
                if s.buf or s.open_senders:
                    s.broken = True
                s.buf = ()  # the last receiver discards what is buffered
                return "wake senders"
            # This receiver may have consumed the notify meant for an item still buffered: pass it on.
            return "pass the wakeup on" if s.buf else "unlock and return"

        c = m.program("receiver", who=0)
        c.acquire("lock", "lock", next="check")
        c.step("check", check_receive, branches=("receive", "abandon") if abandon else ("receive",),
               to=["close receiver", "receive", "wait not_empty"])
        c.wait("wait not_empty", "not_empty", "lock", next="check",
               until=lambda s, me: bool(s.buf) or s.open_senders == 0)
        c.step("receive", receive, next="notify not_full")
        c.notify_one("notify not_full", "not_full", next="unlock")
        c.release("unlock", "lock", next="lock")
        c.step("close receiver", close_receiver, to=["unlock and return", "wake senders", "pass the wakeup on"])
        c.notify_all("wake senders", "not_full", next="unlock and return")
        c.notify_one("pass the wakeup on", "not_empty", next="unlock and return")
        c.release("unlock and return", "lock", next=DONE)

        for i in range(producers):
            m.thread(f"sender{i}", p, who=i)
        for i in range(consumers):
            m.thread(f"receiver{i}", c, who=i)

        # -- checks ----------------------------------------------------------

        m.shutdown_when(lambda s: s.open_receivers < consumers)
        m.invariant("0 <= len(buf) <= capacity", lambda s: len(s.buf) <= capacity, "overflow")
        m.invariant("open_senders counts the open send handles",
                    lambda s: s.open_senders == s.sender_closed.count(False))
        m.invariant("open_receivers counts the open receive handles",
                    lambda s: s.open_receivers == s.receiver_closed.count(False))
        m.invariant("nothing is sent once the channel is broken",
                    lambda s: not (s.open_receivers == 0 and s.buf), "use_after_close")

        everything = tuple(p * items + j for p in range(producers) for j in range(items))

        def at_end(s):
            if s.broken:
                return delivery_violation(s.sent, s.received, ordered=True, complete=False)
            found = delivery_violation(s.sent, s.received, ordered=True)
            return found or delivery_violation(everything, s.received, ordered=False)

        m.at_end(at_end)

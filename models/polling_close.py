"""polling_close: close sets ``closed`` but notifies nobody, and the consumer still stops -- only because its wait times out every 0.5 s: a lost wakeup that the timeout masks.

Source: the polling loop of many Python workers, ``while not closed and not
items: cond.wait(0.5)`` (or ``queue.get(timeout=0.5)`` around a ``closed``
flag). Tests pass, because the timeout always comes; shutdown just takes up
to half a second per worker, and the missing ``notify_all`` stays hidden
until someone raises the timeout, or a worker stops polling.

Minimal config: items=1.

Expected verdict: lost_wakeup. The consumer takes the item and goes back to
waiting, with a timeout; the closer sets ``closed`` and releases the lock
without a notify. The consumer's timed wait may time out only while what it
waits for is false: once ``closed`` holds, a timeout is the masked wakeup
itself. So the consumer is stuck asleep with its predicate true and no
notify since: the checker reports what the timeout hid.

Fix: notify every waiter under the lock when closing, as the ``monitor``
reference design does; the timeout is then a fallback, never the mechanism.
"""

from safeprefetch.model import DONE, Model


class PollingClose(Model):
    name = "polling_close"
    expected = "lost_wakeup"
    fix = "monitor"
    #: The fix checked at the same shape: one producer and one consumer, with a closer.
    fix_config = {"close": True}
    params = {"items": 1}

    def build(self, m, items):
        m.shared(count=0, closed=False, taken=0)
        m.mutex("lock")
        m.condvar("changed")

        def put(s, me):
            s.count += 1
            me.left -= 1

        def take(s, me):
            s.count -= 1
            s.taken += 1

        def close(s, me):
            s.closed = True

        p = m.program("producer", left=items)
        p.acquire("lock", "lock", next="put")
        p.step("put", put, next="notify")
        p.notify_all("notify", "changed", next="unlock")
        p.release("unlock", "lock", next=lambda s, me: "lock" if me.left else DONE, to=["lock", DONE])

        c = m.program("consumer")
        c.acquire("lock", "lock", next="check")
        c.step("check", next=lambda s, me: "take" if s.count else "stop" if s.closed else "wait",
               to=["take", "stop", "wait"])
        # cond.wait(0.5) in a while loop: woken or timed out, it re-checks.
        c.wait("wait", "changed", "lock", next="check", until=lambda s, me: s.count > 0 or s.closed, timeout=True)
        c.step("take", take, next="unlock")
        c.release("unlock", "lock", next="lock")
        c.release("stop", "lock", next=DONE)

        closer = m.program("closer")
        closer.acquire("lock", "lock", next="close")
        closer.step("close", close, next="unlock")  # the bug: no notify_all("changed") before unlocking
        closer.release("unlock", "lock", next=DONE)

        m.thread("producer", p)
        m.thread("consumer", c)
        m.thread("closer", closer)

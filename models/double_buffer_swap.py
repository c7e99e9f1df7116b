"""double_buffer_swap: a two-buffer swap guarded by a single ready flag that the producer sets before the back buffer is full, so the consumer swaps in a buffer that holds no batch.

Source: the seed's double-buffering scheme ("the prefetching thread fills
the next buffer while the computation thread is processing the current
buffer"), with one ``ready`` flag announcing the back buffer as soon as the
producer starts on it.

Minimal config: producers=1 consumers=1 capacity=2 items=2 (two buffers;
the first batch is loaded before the threads start, so the first fill in
the background is batch 1).

Expected verdict: underflow. The consumer reads batch 0 from the front
buffer. The producer claims the back buffer for batch 1 and sets ``ready``
at once, then goes to fetch. The consumer sees ``ready``, swaps, and reads
the new front buffer, which the fetch has not filled yet.

Fix: ``prefetcher``: publish a slot as READY only when its fetch has
landed; here, set ``ready`` (and notify) after "fill back buffer", not
before it.
"""

from safeprefetch.model import DONE, Model, ModelError, delivery_violation


class DoubleBufferSwap(Model):
    name = "double_buffer_swap"
    expected = "underflow"
    fix = "prefetcher"
    #: The fix checked at the same shape: one worker, the same slots and items, errors on where relevant.
    fix_config = {"workers": 1, "capacity": 2, "items": 2}
    params = {"producers": 1, "consumers": 1, "capacity": 2, "items": 2}

    def build(self, m, producers, consumers, capacity, items):
        if producers != 1 or consumers != 1 or capacity != 2 or items < 1:
            raise ModelError("double_buffer_swap needs producers=1, consumers=1, capacity=2 (two buffers), items>=1")
        # Buffer 0 is primed with batch 0 before the threads start.
        m.shared(buffers=(0, None), front=0, back=1, ready=False, received=())
        m.mutex("lock")
        m.condvar("swapped")   # notified when the consumer has swapped
        m.condvar("filled")    # notified when the producer sets ready

        def announce(s, me):
            s.ready = True  # the bug: the back buffer is still empty
            me.target = s.back

        def fill(s, me, outcome):
            k = me.target
            s.buffers = s.buffers[:k] + (me.item,) + s.buffers[k + 1:]
            me.item += 1

        def swap(s, me):
            s.front, s.back = s.back, s.front
            s.ready = False

        def read_front(s, me, outcome):
            # None: the buffer holds no batch yet (the "underflow" invariant below).
            s.received += (s.buffers[s.front],)
            k = s.front
            s.buffers = s.buffers[:k] + (None,) + s.buffers[k + 1:]
            me.left -= 1

        p = m.program("producer", item=1, target=-1)
        p.acquire("lock", "lock", next="check ready")
        p.step("check ready", next=lambda s, me: "wait for swap" if s.ready else "set ready",
               to=["wait for swap", "set ready"])
        p.wait("wait for swap", "swapped", "lock", next="check ready", until=lambda s, me: not s.ready)
        p.step("set ready", announce, next="notify filled")
        p.notify_one("notify filled", "filled", next="unlock")
        p.release("unlock", "lock", next="fill back buffer")
        p.external("fill back buffer", "fetch", fill, next=lambda s, me: "lock" if me.item < items else DONE,
                   to=["lock", DONE])

        c = m.program("consumer", left=items)
        c.external("read front buffer", "compute", read_front,
                   next=lambda s, me: "lock" if me.left else DONE, to=["lock", DONE])
        c.acquire("lock", "lock", next="check ready")
        c.step("check ready", next=lambda s, me: "swap buffers" if s.ready else "wait for ready",
               to=["swap buffers", "wait for ready"])
        c.wait("wait for ready", "filled", "lock", next="check ready", until=lambda s, me: s.ready)
        c.step("swap buffers", swap, next="notify swapped")
        c.notify_one("notify swapped", "swapped", next="unlock")
        c.release("unlock", "lock", next="read front buffer")

        if items > 1:
            m.thread("producer0", p)
        m.thread("consumer0", c)

        m.invariant("the front buffer holds a batch when read", lambda s: None not in s.received, "underflow")

        expected = tuple(range(items))
        m.at_end(lambda s: delivery_violation(expected, s.received))

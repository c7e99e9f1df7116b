"""wait_holding_mutex: the consumer takes the mutex, then waits on the ``items`` semaphore while holding it, so the producer can never add an item.

Source: the Little Book of Semaphores §4.1, the broken consumer that puts
``items.wait()`` inside ``mutex.wait() ... mutex.signal()``.

Minimal config: producers=1 consumers=1 capacity=1 items=1.

Expected verdict: deadlock. The consumer locks the mutex and blocks on
``items`` (zero); the producer blocks on the mutex before it can add the
item and signal ``items``.

Fix: ``semaphores``: wait on ``items`` first and take the mutex only around
``buffer.get()``.
"""

from safeprefetch.model import DONE, Model, ModelError, delivery_violation


class WaitHoldingMutex(Model):
    name = "wait_holding_mutex"
    expected = "deadlock"
    fix = "semaphores"
    params = {"producers": 1, "consumers": 1, "capacity": 1, "items": 1}
    minimums = {"producers": 1, "consumers": 1, "items": 1}

    def build(self, m, producers, consumers, capacity, items):
        if consumers > producers * items:
            raise ModelError(f"{self.name} shares the producers*items items out among the consumers: "
                             f"needs consumers <= {producers * items}")
        m.shared(buf=(), received=())
        m.mutex("mutex")
        m.semaphore("spaces", capacity, bound=capacity)
        m.semaphore("items", 0, bound=capacity)

        def add(s, me):
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
        p.sem_acquire("spaces.wait", "spaces", next="mutex.wait")
        p.acquire("mutex.wait", "mutex", next="buffer.add")
        p.step("buffer.add", add, next="mutex.signal")
        p.release("mutex.signal", "mutex", next="items.signal")
        p.sem_release("items.signal", "items", next=lambda s, me: "spaces.wait" if me.left else DONE,
                      to=["spaces.wait", DONE])

        c = m.program("consumer", quota=0)
        c.acquire("mutex.wait", "mutex", next="items.wait")
        # The bug: blocking on `items` while holding the mutex the producer needs.
        c.sem_acquire("items.wait", "items", next="buffer.get")
        c.step("buffer.get", get, next="mutex.signal")
        c.release("mutex.signal", "mutex", next="spaces.signal")
        c.sem_release("spaces.signal", "spaces", next=lambda s, me: "mutex.wait" if me.quota else DONE,
                      to=["mutex.wait", DONE])

        for i in range(producers):
            m.thread(f"producer{i}", p, item=i * items)
        share, extra = divmod(producers * items, consumers)
        for i in range(consumers):
            m.thread(f"consumer{i}", c, quota=share + (1 if i < extra else 0))
        m.invariant("count <= capacity", lambda s: len(s.buf) <= capacity, "overflow")
        m.invariant("a take always finds an item", lambda s: None not in s.received, "underflow")

        expected = tuple(range(producers * items))
        m.at_end(lambda s: delivery_violation(expected, s.received, ordered=producers == 1))

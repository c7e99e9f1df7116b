"""signal_before_publish: the producer releases the ``items`` semaphore before it stores the item, so a consumer takes from an empty buffer.

Source: the Deadlock Empire's semaphore levels (the catalog's S2); the
Little Book of Semaphores §4.1 producer with ``items.signal()`` moved above
``buffer.add(event)``.

Minimal config: producers=1 consumers=1 capacity=1 items=1.

Expected verdict: underflow. The producer signals ``items`` first; the
consumer acquires it, takes the mutex and finds no item in the buffer.

Fix: ``semaphores``: signal ``items`` only after the item is in the buffer
and the mutex is released (wait spaces, lock, add, unlock, signal items).
"""

from safeprefetch.model import DONE, Model, ModelError, delivery_violation


class SignalBeforePublish(Model):
    name = "signal_before_publish"
    expected = "underflow"
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
                s.received += (None,)  # signalled an item, but the buffer is empty
            me.quota -= 1

        p = m.program("producer", left=items, item=0)
        p.sem_acquire("spaces.wait", "spaces", next="items.signal")
        # The bug: the item is announced before it exists.
        p.sem_release("items.signal", "items", next="mutex.wait")
        p.acquire("mutex.wait", "mutex", next="buffer.add")
        p.step("buffer.add", add, next="mutex.signal")
        p.release("mutex.signal", "mutex", next=lambda s, me: "spaces.wait" if me.left else DONE,
                  to=["spaces.wait", DONE])

        c = m.program("consumer", quota=0)
        c.sem_acquire("items.wait", "items", next="mutex.wait")
        c.acquire("mutex.wait", "mutex", next="buffer.get")
        c.step("buffer.get", get, next="mutex.signal")
        c.release("mutex.signal", "mutex", next="spaces.signal")
        c.sem_release("spaces.signal", "spaces", next=lambda s, me: "items.wait" if me.quota else DONE,
                      to=["items.wait", DONE])

        for i in range(producers):
            m.thread(f"producer{i}", p, item=i * items)
        share, extra = divmod(producers * items, consumers)
        for i in range(consumers):
            m.thread(f"consumer{i}", c, quota=share + (1 if i < extra else 0))
        m.invariant("count <= capacity", lambda s: len(s.buf) <= capacity, "overflow")
        m.invariant("a take always finds an item", lambda s: None not in s.received, "underflow")

        expected = tuple(range(producers * items))
        m.at_end(lambda s: delivery_violation(expected, s.received, ordered=producers == 1))

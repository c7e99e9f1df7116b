"""racy_counter: the slot index is read and advanced outside any lock, so two producers write the same slot and one item is overwritten.

Source: OSTEP ch. 31 (Semaphores), the bounded buffer guarded by ``empty``
and ``full`` semaphores but no mutex, run by more than one producer; the
Deadlock Empire's non-atomic ``a = a + 1`` lessons. The semaphores count
correctly; the shared ``fill`` index does not.

Minimal config: producers=2 consumers=1 capacity=2 items=1.

Expected verdict: lost_item. producer0 writes ``buffer[fill]`` but is
preempted before ``fill += 1``; producer1 writes the same slot, overwriting
producer0's item. Both then advance ``fill`` and release ``items``, so the
consumer reads two slots: producer1's item and a slot nobody wrote.
Producer0's item is never delivered.

Fix: ``semaphores``: hold the mutex around ``buffer[fill] = item;
fill += 1`` (and around the consumer's ``use``), as the reference design
does between its semaphore waits and signals.
"""

from safeprefetch.model import DONE, Model, ModelError, delivery_violation


class RacyCounter(Model):
    name = "racy_counter"
    expected = "lost_item"
    fix = "semaphores"
    params = {"producers": 2, "consumers": 1, "capacity": 2, "items": 1}
    minimums = {"producers": 1, "consumers": 1, "items": 1}

    def build(self, m, producers, consumers, capacity, items):
        if consumers > producers * items:
            raise ModelError(f"{self.name} shares the producers*items items out among the consumers: "
                             f"needs consumers <= {producers * items}")
        m.shared(buffer=(None,) * capacity, fill=0, use=0, received=())
        m.semaphore("spaces", capacity, bound=capacity)
        m.semaphore("items", 0, bound=capacity)

        def write(s, me):
            b = s.buffer
            s.buffer = b[:s.fill] + (me.item,) + b[s.fill + 1:]
            me.item += 1
            me.left -= 1

        def advance_fill(s, me):
            s.fill = (s.fill + 1) % capacity

        def read(s, me):
            # A slot nobody wrote reads as None (in C: whatever was there).
            s.received += (s.buffer[s.use],)
            me.quota -= 1

        def advance_use(s, me):
            s.use = (s.use + 1) % capacity

        p = m.program("producer", left=items, item=0)
        p.sem_acquire("acquire spaces", "spaces", next="buffer[fill] = item")
        # The bug: these two steps are not under a mutex shared by all producers.
        p.step("buffer[fill] = item", write, next="fill += 1")
        p.step("fill += 1", advance_fill, next="release items")
        p.sem_release("release items", "items", next=lambda s, me: "acquire spaces" if me.left else DONE,
                      to=["acquire spaces", DONE])

        c = m.program("consumer", quota=0)
        c.sem_acquire("acquire items", "items", next="item = buffer[use]")
        c.step("item = buffer[use]", read, next="use += 1")
        c.step("use += 1", advance_use, next="release spaces")
        c.sem_release("release spaces", "spaces", next=lambda s, me: "acquire items" if me.quota else DONE,
                      to=["acquire items", DONE])

        for i in range(producers):
            m.thread(f"producer{i}", p, item=i * items)
        share, extra = divmod(producers * items, consumers)
        for i in range(consumers):
            m.thread(f"consumer{i}", c, quota=share + (1 if i < extra else 0))

        expected = tuple(range(producers * items))

        def at_end(s):
            real = tuple(x for x in s.received if x is not None)
            found = delivery_violation(expected, real, ordered=False)
            if found:
                kind, msg = found
                blank = len(s.received) - len(real)
                if blank:
                    msg += f"; the consumer read {blank} slot(s) nobody wrote"
                return kind, msg
            if len(real) != len(s.received):
                return "duplicate_item", "the consumer read a slot nobody wrote"
            return None

        m.at_end(at_end)

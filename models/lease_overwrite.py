"""lease_overwrite: the consumer's take frees the slot although it still reads the batch there as a zero-copy lease, so the producer overwrites a slot that is leased.

Source: the seed's "buffer overflow race condition" ("the prefetching
thread ... may overwrite the data being processed by the computation
thread"), in its zero-copy form: a ring of preallocated slots where
``get()`` hands out a view of the slot, not a copy.

Minimal config: producers=1 consumers=1 capacity=2 items=3.

Expected verdict: invariant. The producer fills slots 0 and 1; the consumer
takes slot 0 as a lease, and the take counts the slot as free at once; the
producer, seeing a free slot, writes its third batch into slot 0 while the
consumer is still reading it ("slot written while leased").

Fix: ``prefetcher``: a slot returns to the pool only when the consumer
releases its lease (``release`` frees the slot and notifies ``not_full``),
so a leased slot is never free.
"""

from safeprefetch.model import DONE, Model, delivery_violation


class LeaseOverwrite(Model):
    name = "lease_overwrite"
    expected = "invariant"
    fix = "prefetcher"
    #: The fix checked at the same shape: one worker, the same slots and items, errors on where relevant.
    fix_config = {"workers": 1, "capacity": 2, "items": 3}
    params = {"producers": 1, "consumers": 1, "capacity": 2, "items": 3}

    def build(self, m, producers, consumers, capacity, items):
        if producers != 1 or consumers != 1:
            from safeprefetch.model import ModelError
            raise ModelError("lease_overwrite models one producer and one consumer")
        m.shared(
            slots=(None,) * capacity,  # the batch each slot holds
            free=capacity,             # slots the producer may write
            ready=0,                   # slots holding a batch not yet taken
            fill=0,                    # next slot to write
            use=0,                     # next slot to take
            lease=-1,                  # slot the consumer is reading, or -1
            lease_item=None,           # the batch it expects to read there
            received=(),
        )
        m.mutex("lock")
        m.condvar("not_empty")
        m.condvar("not_full")

        def write(s, me):
            k = s.fill
            s.slots = s.slots[:k] + (me.item,) + s.slots[k + 1:]
            s.fill = (k + 1) % capacity
            s.free -= 1
            s.ready += 1
            me.item += 1
            me.left -= 1

        def take(s, me):
            k = s.use
            s.lease, s.lease_item = k, s.slots[k]
            s.use = (k + 1) % capacity
            s.ready -= 1
            s.free += 1  # the bug: the slot is still leased
            me.quota -= 1

        def use_batch(s, me, outcome):
            s.received += (s.lease_item,)

        def release(s, me):
            s.lease, s.lease_item = -1, None

        p = m.program("producer", left=items, item=0)
        p.acquire("lock", "lock", next="check full")
        p.step("check full", next=lambda s, me: "wait for free slot" if s.free == 0 else "write slot",
               to=["wait for free slot", "write slot"])
        p.wait("wait for free slot", "not_full", "lock", next="check full", until=lambda s, me: s.free > 0)
        p.step("write slot", write, next="notify not_empty")
        p.notify_one("notify not_empty", "not_empty", next="unlock")
        p.release("unlock", "lock", next=lambda s, me: "lock" if me.left else DONE, to=["lock", DONE])

        c = m.program("consumer", quota=items)
        c.acquire("lock", "lock", next="check empty")
        c.step("check empty", next=lambda s, me: "wait for batch" if s.ready == 0 else "take lease",
               to=["wait for batch", "take lease"])
        c.wait("wait for batch", "not_empty", "lock", next="check empty", until=lambda s, me: s.ready > 0)
        c.step("take lease", take, next="notify not_full")
        c.notify_one("notify not_full", "not_full", next="unlock")
        c.release("unlock", "lock", next="use batch")
        c.external("use batch", "compute", use_batch, next="release lease")
        c.step("release lease", release, next=lambda s, me: "lock" if me.quota else DONE, to=["lock", DONE])

        m.thread("producer0", p)
        m.thread("consumer0", c)

        m.invariant("no slot written while leased",
                    lambda s: s.lease < 0 or s.slots[s.lease] == s.lease_item)
        m.invariant("0 <= ready <= capacity", lambda s: 0 <= s.ready <= capacity, "overflow")
        expected = tuple(range(items))
        m.at_end(lambda s: delivery_violation(expected, s.received))

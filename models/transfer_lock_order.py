"""transfer_lock_order: each transfer locks its source account, then its destination, so two opposite transfers each hold the lock the other needs.

Source: the bank-transfer deadlock (Coffman et al.'s circular wait; the
textbook ``transfer(a, b)`` that does ``with a.lock: with b.lock:``, e.g.
Goetz, *Java Concurrency in Practice*, 10.1.2 "Dynamic lock order
deadlocks"). Which lock is "first" depends on the call's arguments, so no
fixed order is visible in the code: the steps acquire a lock chosen by
expression (``acquire(label, lambda s, me: f"lock{me.src}")``).

Minimal config: transfers=2 (one from account 0 to 1, one from 1 to 0).

Expected verdict: deadlock. Transfer 0 locks account 0, transfer 1 locks
account 1; each now waits for the other's lock.

Fix: lock the two accounts in one global order, the lower number first
(``ordered_transfer``).
"""

from safeprefetch.model import DONE, Model


class TransferLockOrder(Model):
    name = "transfer_lock_order"
    expected = "deadlock"
    fix = "ordered_transfer"
    params = {"transfers": 2}
    #: Whether transfers lock the lower-numbered account first (the fix).
    ordered = False

    def build(self, m, transfers):
        m.shared(balances=(1, 1))
        m.mutex("lock0")
        m.mutex("lock1")

        def first(s, me):
            return f"lock{min(me.src, me.dst)}" if self.ordered else f"lock{me.src}"

        def second(s, me):
            return f"lock{max(me.src, me.dst)}" if self.ordered else f"lock{me.dst}"

        def move(s, me):
            balances = list(s.balances)
            balances[me.src] -= 1
            balances[me.dst] += 1
            s.balances = tuple(balances)

        t = m.program("transfer", src=0, dst=1)
        t.acquire("lock first", first, next="lock second")
        t.acquire("lock second", second, next="move")
        t.step("move", move, next="unlock second")
        t.release("unlock second", second, next="unlock first")
        t.release("unlock first", first, next=DONE)
        for i in range(transfers):
            m.thread(f"transfer{i}", t, src=i % 2, dst=1 - i % 2)
        m.invariant("money is conserved", lambda s: sum(s.balances) == 2)

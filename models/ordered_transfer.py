"""ordered_transfer: every transfer locks the lower-numbered account first, so opposite transfers can never hold each other's lock.

Source: the fix of ``transfer_lock_order``: a global lock order (Goetz,
*Java Concurrency in Practice*, 10.1.2, "induce a lock ordering"; Linux's
``lock_two_nondirectories`` orders by address for the same reason). The
lock is still chosen by expression, now ``min``/``max`` of the two accounts.

Minimal config: transfers=2; proved over the ``sweep`` (up to four
transfers, alternating direction), under every condvar semantics.

Expected verdict: ok. Every transfer takes lock0 before lock1, so there is
no cycle in the wait-for graph, and money is conserved.
"""

from safeprefetch.models.transfer_lock_order import TransferLockOrder


class OrderedTransfer(TransferLockOrder):
    name = "ordered_transfer"
    expected = "ok"
    fix = None
    sweep = {"transfers": [1, 2, 3, 4]}
    ordered = True

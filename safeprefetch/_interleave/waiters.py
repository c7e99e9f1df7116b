"""Waiter lists in arrival order: who a ``notify`` wakes, and how a woken thread takes its turn.

What it guarantees
------------------
CPython builds every blocking wait of ``threading`` and ``queue`` on
``Condition``: a thread that finds it cannot go on appends itself to the
condition's list of waiters and sleeps; ``notify(n)`` wakes the first ``n``
of that list, in the order they began to wait; a woken thread takes the lock
back and looks again. So a ``Semaphore.release`` wakes the thread that has
waited longest in ``acquire``, a ``Queue.put`` the longest-waiting ``get``,
and every other waiter sleeps on, *even while the semaphore's count or the
queue's items would let it through*: it has not been told. A checker that
let any of them through because the state allows it runs schedules CPython
cannot run, and reports their outcomes -- a ``join`` of the thread that was
to be woken, waiting forever behind one that was not, is a deadlock of its
own making (the twenty-first hardening round's review).

This module is that list, shared by the drop-ins that wait on one:
:class:`~.primitives.VCondition` keeps its waiters here, and so do
:mod:`.semaphores` and :mod:`.queues`, whose blocking calls wait exactly as
CPython's loop ``while not ready: cond.wait(remaining)`` does
(:func:`wait_turn`):

* the call looks first, and if it can go on it does, without waiting --
  a thread that arrives while a woken waiter is still on its way back takes
  the permit or the item first, as it may in CPython (a *barging* thread);
* otherwise it joins the end of the list, and is enabled only once a
  ``notify`` picks it, or its deadline passes;
* woken, it looks again: if it still cannot go on (a barging thread came
  first) it joins the end of the list once more, as CPython's ``wait``
  appends a new waiter; timed out, it gives up;
* a waiter that timed out stays listed until it has looked again, so a
  ``notify`` may still pick it and be spent on it, as in CPython.

Which waiter a ``notify`` of one picks is the first under ``notify="fifo"``
(CPython's rule) and a choice the search explores under ``notify="any"``
(:func:`notify_alts`), for a ``Condition`` as for a semaphore or a queue.
"""

from __future__ import annotations

from typing import Any, Callable

from .belonging import until
from .scheduler import Execution, VThread

__all__ = ["Waiter", "notify_alts", "wait_turn", "wake", "woken"]


class Waiter:
    """One thread's place in a waiter list."""

    __slots__ = ("vt", "notified", "in_time", "deadline")

    def __init__(self, vt: VThread, deadline: float | None = None):
        self.vt = vt
        self.notified = False
        #: Notified before its deadline. A waiter that timed out stays listed until it has its lock back, as
        #: in CPython, so a notify may still pick it: the notify is spent, and wait says False (timed out).
        self.in_time = False
        self.deadline = deadline


def woken(waiting: int, n: Any) -> int:
    """How many of ``waiting`` waiters ``notify(n)`` wakes by CPython's ``while waiters and n > 0: ...; n -= 1``:
    none for ``n <= 0``, two for 1.5; ``n`` is not compared at all (no TypeError for "x") when nobody waits."""
    count = 0
    while count < waiting and n > 0:
        count += 1
        n -= 1
    return count


def wake(ex: Execution, vt: VThread, waiters: list[Waiter], n: int, first: int = 0) -> None:
    """``vt`` wakes ``n`` of ``waiters`` (a count :func:`woken` made): the first ``n``, or the one at ``first``
    when ``n`` is 1 (a choice under ``notify="any"``). Each is taken off the list, and what it does next
    happens after ``vt``'s step; the step's note says whom it woke."""
    if n <= 0 or not waiters:
        return
    chosen = [waiters[first]] if n == 1 else waiters[:n]
    for w in chosen:
        w.notified = True
        w.in_time = w.deadline is None or ex.clock <= w.deadline  # at the deadline: a tie, either may win
        waiters.remove(w)
        ex.enabled_by(w.vt.index, vt.index)
    ex.events[-1].note = "woke " + ", ".join(w.vt.name for w in chosen)


def notify_alts(ex: Execution, waiters: list[Waiter], notifies: Callable[[], bool]) -> Callable[[], list] | None:
    """The alternatives of a step that may ``notify()`` one of ``waiters``: under ``notify="any"``, which of
    them it wakes, when ``notifies()`` says the step will notify (a release, a put that goes ahead) and more
    than one waits; None under ``notify="fifo"``, where it wakes the first."""
    if ex.settings.notify != "any":
        return None
    return lambda: list(range(len(waiters))) if len(waiters) > 1 and notifies() else [0]


def wait_turn(prim: Any, ex: Execution, vt: VThread, kind: str, waiters: list[Waiter], ready: Callable[[], bool],
              deadline: float | None, alts: Callable[[], list] | None = None) -> Any:
    """Wait in ``waiters`` as CPython's ``while not ready(): cond.wait(remaining)`` does, after the caller's own
    step looked once and found it could not go on: the step that then wakes ``vt`` is ``prim``'s ``kind``
    step (enabled once a notify picked it, or at ``deadline``). Returns that step's choice once ``ready()``
    holds when woken, None once the deadline has passed without it."""
    ex.events[-1].note = "waits"
    while True:
        w = Waiter(vt, deadline)
        waiters.append(w)
        try:
            choice = prim._point(ex, vt, kind, enabled=until(ex, lambda w=w: w.notified, deadline), deadline=deadline,
                                 alts=alts, depth=4)
        finally:
            if w in waiters:  # timed out, or an interrupt's exception: it leaves the list, as CPython's wait does
                waiters.remove(w)
        if ready():
            return choice
        if deadline is not None and ex.clock >= deadline:
            return None
        ex.events[-1].note = "waits again"

"""Deterministic drop-ins for ``threading.Semaphore`` and ``threading.BoundedSemaphore``.

What they guarantee
-------------------
The interface and semantics of CPython's classes, which are a counter and a
``Condition``, with each operation another thread could observe a
scheduling point of the controlled scheduler (:mod:`.scheduler`):

* ``acquire`` looks at the count once (one step): above zero, it takes one;
  at zero, without blocking or with a timeout that is not positive, it
  returns False; otherwise it waits in the semaphore's list of waiters, in
  arrival order (:func:`.waiters.wait_turn`), and is enabled only once a
  ``release`` wakes it or its timeout passes. Woken, it looks again: a
  thread that arrived meanwhile may have taken the count first, and the
  waiter then waits again, at the end of the list, as in CPython.
* ``release(n)`` adds ``n`` and wakes the first ``n`` waiters (CPython
  3.11's ``for i in range(n): notify()``, 3.12's ``notify(n)``: the same
  threads). Waiters it did not wake sleep on *even though the count would
  let them through*: that is the schedule CPython runs, and a program that
  relies on it (``release`` then ``join`` the longest waiter) is correct.
  Under ``notify="any"`` a ``release()`` of one wakes any waiter, a choice
  the search explores, as ``Condition.notify`` does; a ``release(n)`` of
  more wakes the first ``n``.
* ``BoundedSemaphore.release`` past the initial value raises CPython's
  ``ValueError`` and changes nothing.

Each argument is taken when, and as, CPython takes it (:mod:`.belonging`);
outside every execution a semaphore is a real one with its count.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from .belonging import Prim, context, loop_deadline, stand_in, unwaitable
from .scheduler import Op, VThread
from .waiters import Waiter, notify_alts, wait_turn, wake, woken

__all__ = ["VBoundedSemaphore", "VSemaphore"]

#: The real classes, as they are before any check patches them: what a semaphore becomes outside one.
_REAL = {name: getattr(threading, name) for name in ("Semaphore", "BoundedSemaphore")}
#: 3.11's ``Semaphore.release`` notifies ``for i in range(n)``; 3.12 on call ``notify(n)`` once.
_NOTIFY_IN_A_LOOP = sys.version_info < (3, 12)


class VSemaphore(Prim):
    """``threading.Semaphore``."""

    _ilv_kind = "semaphore"

    def __init__(self, value: int = 1) -> None:
        if value < 0:
            raise ValueError("semaphore initial value must be >= 0")
        super().__init__()
        self._value = value
        #: The threads asleep in ``acquire``, longest first (CPython's ``_cond._waiters``).
        self._ilv_waiters: list[Waiter] = []

    def _ilv_state(self) -> str:
        return str(self._value)

    def _ilv_blocked(self, vt: VThread, op: Op) -> str:
        if self._value:  # asleep, and not woken: a permit left by a waiter that was woken and went away
            return f"waits for {self._ilv_name} (count {self._value}, but no release woke it)"
        return f"waits for {self._ilv_name} (count 0)"

    def _ilv_busy(self) -> str:
        return "waited on by " + ", ".join(w.vt.name for w in self._ilv_waiters) if self._ilv_waiters else ""

    def _ilv_make_real(self) -> Any:
        return _REAL["Semaphore"](self._value)

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        if not blocking and timeout is not None:
            raise ValueError("can't specify timeout for non-blocking acquire")
        c = context(self)
        if c is None:
            return stand_in(self).acquire(blocking, timeout)
        ex, vt = c
        # CPython's ``while self._value == 0: endtime = _time() + timeout ...``: a bad timeout raises only then
        bad, blocks, deadline, too_long = False, False, None, False
        if blocking:
            try:
                blocks, deadline, too_long = loop_deadline(ex, timeout)
            except Exception:
                bad = True
        # A look at zero that will wait is, to an interrupt, a thread blocked in acquire.
        self._point(ex, vt, "acquire", blocks=lambda: blocks and self._value == 0)
        if self._value == 0:
            if bad:
                loop_deadline(ex, timeout)  # raises as it did above
            if too_long:
                unwaitable(timeout)
            if not blocks or wait_turn(self, ex, vt, "acquire", self._ilv_waiters, lambda: self._value != 0,
                                       deadline) is None:
                return False
        self._value -= 1
        return True

    __enter__ = acquire

    def release(self, n: int = 1) -> None:
        if n < 1:
            raise ValueError("n must be one or more")
        c = context(self)
        if c is None:
            return stand_in(self).release(n)
        ex, vt = c
        alts = notify_alts(ex, self._ilv_waiters, lambda: self._may_release(n)) if n == 1 else None
        choice = self._point(ex, vt, "release", alts=alts)
        self._release(n)
        wake(ex, vt, self._ilv_waiters, woken(len(self._ilv_waiters), n), max(choice.alt, 0))

    def _may_release(self, n: int) -> bool:
        return True

    def _release(self, n: int) -> None:
        self._value += n
        _NOTIFY_IN_A_LOOP and range(n)  # a float n is then a TypeError on 3.11, once counted

    def __exit__(self, *exc: Any) -> None:
        self.release()


class VBoundedSemaphore(VSemaphore):
    """``threading.BoundedSemaphore``: releasing past the initial value raises ``ValueError``."""

    _ilv_kind = "bounded_semaphore"

    def __init__(self, value: int = 1) -> None:
        super().__init__(value)
        self._initial_value = value

    def _ilv_make_real(self) -> Any:
        real = _REAL["BoundedSemaphore"](self._initial_value)
        real._value = self._value
        return real

    def _may_release(self, n: int) -> bool:
        return self._value + n <= self._initial_value

    def _release(self, n: int) -> None:
        if self._value + n > self._initial_value:
            raise ValueError("Semaphore released too many times")
        self._value += n
        _NOTIFY_IN_A_LOOP and range(n)

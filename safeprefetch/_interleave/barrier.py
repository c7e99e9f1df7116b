"""The deterministic drop-in for ``threading.Barrier``: ``parties`` threads meet, the last lets all go.

What it guarantees
------------------
The interface and semantics of ``threading.Barrier``, by CPython's own state
machine (``_state``: 0 filling, 1 draining, -1 resetting, -2 broken, and
``_count``, the threads inside ``wait``), with the arrival and the passing
each a scheduling point, as for the drop-ins of :mod:`.primitives`:

* the last of ``parties`` threads to arrive runs ``action`` and releases the
  others; until every released thread has left ``wait`` the barrier
  *drains*, and a thread arriving meanwhile waits for that before it counts
  (a ``reset`` then breaks only the new generation);
* ``wait(timeout)`` that times out, ``abort()`` and a failing ``action``
  break it for everyone; ``reset()`` breaks it for the threads waiting then,
  and makes it whole once they have left;
* a thread that leaves ``wait`` by an exception that is not the barrier's
  (a timeout that is no number, ``inf``, an interrupt) is uncounted, as
  CPython's ``finally`` does: the barrier stays whole;
* CPython runs ``action`` holding the barrier's lock: every other call on
  the barrier, and a waiter's wake-up, waits until it returns (the action's
  own call on it is a deadlock, as in CPython);
* the timeout follows CPython's ``wait_for`` loop (:func:`.belonging.loop_deadline`):
  one that is not positive is one look, NaN waits as ``None`` does;
* ``Barrier(0)`` is refused where this Python refuses it (CPython added the check in 2024, in 3.13
  and a 3.12 bugfix release; before, it builds a barrier that never fills), with its message.

The pass is enabled once the barrier leaves the filling state (released,
broken or reset), or its deadline comes. Outside every execution it is a
real ``Barrier`` (:mod:`.belonging`).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from .belonging import Prim, context, loop_deadline, stand_in, unwaitable
from .scheduler import Execution, Op, VThread

__all__ = ["VBarrier"]

_BrokenBarrierError = threading.BrokenBarrierError
#: The real class, as it is before any check patches it.
_REAL_BARRIER = threading.Barrier

FILLING, DRAINING, RESETTING, BROKEN = 0, 1, -1, -2  # CPython's values of ``Barrier._state``


def _parties_rule() -> str | None:
    """This Python's message for ``Barrier(0)``, or None where it accepts it (3.11, early 3.12s)."""
    try:
        _REAL_BARRIER(0)
    except ValueError as e:
        return str(e)
    return None


_PARTIES_REFUSED = _parties_rule()


class VBarrier(Prim):
    """``threading.Barrier``: ``parties`` threads meet; the last to arrive runs ``action`` and lets all go."""

    _ilv_kind = "barrier"

    def __init__(self, parties: int, action: Callable[[], Any] | None = None, timeout: float | None = None) -> None:
        if _PARTIES_REFUSED is not None and parties < 1:
            raise ValueError(_PARTIES_REFUSED)
        super().__init__()
        self._parties = parties
        self._action = action
        self._timeout = timeout
        self._state = FILLING
        self._count = 0
        #: The thread running ``action``, which holds the barrier's lock meanwhile.
        self._acting: VThread | None = None

    def _ilv_state(self) -> str:
        if self._state == BROKEN:
            return "broken"
        what = {FILLING: "waiting", DRAINING: "leaving", RESETTING: "leaving (reset)"}[self._state]
        return f"{self._count}/{self._parties} {what}"

    def _ilv_blocked(self, vt: VThread, op: Op) -> str:
        if self._acting is not None:
            who = "itself" if self._acting is vt else self._acting.name
            return f"waits for {self._ilv_name}'s lock (held by {who}, running the action)"
        if op.kind == "arrive":
            return f"waits at {self._ilv_name} for the previous generation to leave"
        return f"waits at {self._ilv_name} ({self._count}/{self._parties} arrived)"

    def _ilv_busy(self) -> str:
        return f"waited at by {self._count} thread(s)" if self._count else ""

    def _ilv_make_real(self) -> Any:
        real = _REAL_BARRIER(self._parties, self._action, self._timeout)
        if self._state == BROKEN:
            real.abort()
        return real

    def _unlocked(self) -> bool:
        return self._acting is None

    def wait(self, timeout: float | None = None) -> int:
        c = context(self)
        if c is None:
            return stand_in(self).wait(timeout)
        ex, vt = c
        if timeout is None:
            timeout = self._timeout
        # CPython's _enter: wait (without a timeout) while the barrier drains or resets.
        self._point(ex, vt, "arrive", enabled=lambda: self._unlocked() and self._state not in (DRAINING, RESETTING))
        if self._state == BROKEN:
            raise _BrokenBarrierError
        index = self._count
        self._count += 1
        try:
            if index + 1 == self._parties:
                self._release(vt)
            else:
                self._wait(ex, vt, timeout)
            return index
        finally:
            # CPython's finally and _exit: the last to leave ends the draining or the reset.
            self._count -= 1
            if self._count == 0 and self._state in (DRAINING, RESETTING):
                self._state = FILLING

    def _release(self, vt: VThread) -> None:
        try:
            if self._action:
                self._acting = vt
                try:
                    self._action()
                finally:
                    self._acting = None
            self._state = DRAINING
        except BaseException:
            self._state = BROKEN
            raise

    def _wait(self, ex: Execution, vt: VThread, timeout: float | None) -> None:
        # CPython: ``if not cond.wait_for(lambda: state != 0, timeout): break the barrier``. Its first look
        # finds the barrier filling (this thread holds the lock and is not the last), so the timeout is used
        # at once: a TypeError or an OverflowError propagates, and this thread is uncounted by the finally.
        blocks, deadline, too_long = loop_deadline(ex, timeout)
        if too_long:
            unwaitable(timeout)
        if not blocks:
            deadline = ex.clock  # a timeout that is not positive: one look, then the barrier breaks
        if deadline is None:
            enabled = lambda: self._unlocked() and self._state != FILLING  # noqa: E731
        else:
            enabled = lambda: self._unlocked() and (self._state != FILLING or ex.clock >= deadline)  # noqa: E731
        self._point(ex, vt, "pass", enabled=enabled, deadline=deadline)
        if self._state == FILLING:  # timed out: the barrier breaks for everyone
            self._state = BROKEN
            raise _BrokenBarrierError
        if self._state < 0:  # broken, or reset while this thread waited
            raise _BrokenBarrierError

    def reset(self) -> None:
        c = context(self)
        if c is None:
            return stand_in(self).reset()
        self._point(c[0], c[1], "reset", enabled=self._unlocked)
        if self._count > 0:
            if self._state in (FILLING, BROKEN):
                self._state = RESETTING  # the waiters leave broken; the last to leave makes it whole
        else:
            self._state = FILLING

    def abort(self) -> None:
        c = context(self)
        if c is None:
            return stand_in(self).abort()
        self._point(c[0], c[1], "abort", enabled=self._unlocked)
        self._state = BROKEN

    @property
    def parties(self) -> int:
        return self._parties

    # The two state reads are scheduling points (reads, without the lock, as CPython's): a plain read here made
    # the reduction take the first answer for the only one, and an abort racing it was never ordered first.

    @property
    def n_waiting(self) -> int:
        c = context(self)
        if c is None:
            return stand_in(self).n_waiting
        self._point(c[0], c[1], "n_waiting", write=False)
        return self._count if self._state == FILLING else 0  # CPython's: 0 unless the barrier is filling

    @property
    def broken(self) -> bool:
        c = context(self)
        if c is None:
            return stand_in(self).broken
        self._point(c[0], c[1], "broken", write=False)
        return self._state == BROKEN

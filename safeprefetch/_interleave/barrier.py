"""The deterministic drop-in for ``threading.Barrier``: ``parties`` threads meet, the last lets all go.

What it guarantees
------------------
The interface and semantics of ``threading.Barrier`` -- the last of
``parties`` threads to arrive runs ``action`` and releases the others;
``wait(timeout)`` that times out, ``abort()`` and a failing ``action`` break
it for everyone; ``reset()`` breaks it for the threads waiting then -- with
the arrival and the passing each a scheduling point, as for the drop-ins of
:mod:`.primitives`. The pass is enabled once the generation it waited for
has completed, or the barrier broke, or its deadline came. Outside every
execution it is a real ``Barrier`` (:mod:`.belonging`).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from .belonging import Prim, context, stand_in, until, unwaitable, wait_deadline
from .scheduler import Op, VThread

__all__ = ["VBarrier"]

_BrokenBarrierError = threading.BrokenBarrierError
#: The real class, as it is before any check patches it.
_REAL_BARRIER = threading.Barrier


class VBarrier(Prim):
    """``threading.Barrier``: ``parties`` threads meet; the last to arrive runs ``action`` and lets all go."""

    _ilv_kind = "barrier"

    def __init__(self, parties: int, action: Callable[[], Any] | None = None, timeout: float | None = None) -> None:
        if parties < 1:
            raise ValueError("parties must be >= 1")
        super().__init__()
        self._parties = parties
        self._action = action
        self._timeout = timeout
        self._count = 0
        self._gen = 0
        self._broken = False
        self._reset_gens: set[int] = set()

    def _ilv_state(self) -> str:
        return "broken" if self._broken else f"{self._count}/{self._parties} waiting"

    def _ilv_blocked(self, vt: VThread, op: Op) -> str:
        return f"waits at {self._ilv_name} ({self._count}/{self._parties} arrived)"

    def _ilv_busy(self) -> str:
        return f"waited at by {self._count} thread(s)" if self._count else ""

    def _ilv_make_real(self) -> Any:
        real = _REAL_BARRIER(self._parties, self._action, self._timeout)
        if self._broken:
            real.abort()
        return real

    def wait(self, timeout: float | None = None) -> int:
        c = context(self)
        if c is None:
            return stand_in(self).wait(timeout)
        ex, vt = c
        if timeout is None:
            timeout = self._timeout
        self._point(ex, vt, "arrive")
        if self._broken:
            raise _BrokenBarrierError
        index = self._count
        self._count += 1
        if self._count == self._parties:
            try:
                if self._action is not None:
                    self._action()
            except BaseException:
                self._broken = True
                raise
            self._count = 0
            self._gen += 1
            return index
        gen = self._gen
        blocks, deadline, too_long = wait_deadline(ex, timeout)
        if too_long:  # CPython raises it from the wait inside: this party leaves, the barrier stays whole
            self._count -= 1
            unwaitable(timeout)
        if not blocks:
            deadline = ex.clock  # a timeout that is not positive: one look, then the barrier breaks
        enabled = until(ex, lambda: self._gen != gen or self._broken, deadline)
        self._point(ex, vt, "pass", enabled=enabled, deadline=deadline)
        if self._broken or gen in self._reset_gens:
            raise _BrokenBarrierError
        if self._gen == gen:  # timed out: the barrier breaks for everyone
            self._broken = True
            raise _BrokenBarrierError
        return index

    def reset(self) -> None:
        c = context(self)
        if c is None:
            return stand_in(self).reset()
        self._point(c[0], c[1], "reset")
        if self._count:
            self._reset_gens.add(self._gen)
            self._gen += 1
        self._count = 0
        self._broken = False

    def abort(self) -> None:
        if self._step("abort"):
            self._broken = True

    @property
    def parties(self) -> int:
        return self._parties

    @property
    def n_waiting(self) -> int:
        if "_ilv_real" in self.__dict__:
            return stand_in(self).n_waiting
        return 0 if self._broken else self._count  # CPython's: 0 unless the barrier is filling

    @property
    def broken(self) -> bool:
        return self._broken if "_ilv_real" not in self.__dict__ else stand_in(self).broken

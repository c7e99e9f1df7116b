"""Reading a runtime from outside its steps, and refusing a caller in the wrong place.

:class:`Views` is a part of :class:`~.kernel.Runtime` (a base class), kept
apart because none of it takes a step. What it guarantees:

* Every reader here is a snapshot taken **without** the kernel lock, and is
  still exact for the moment it was read. The state is one immutable tuple
  replaced whole by a step (one attribute store), and a parked mark or the
  parked count is one list item or integer changed on the line that wakes or
  unparks the thread (``kernel.py``'s interrupt-safety notes), so a reader
  sees the value before a step or the one after it, never half of one. That
  is what lets tests wait on observable state (``is_parked``) instead of
  sleeping, and a watchdog read ``failure`` while a thread holds the lock.
* A thread number is an int naming one of the machine's threads, or a
  ``ValueError`` says so (a bool is refused: ``True`` is not thread 1).
* A call into the kernel from a thread already inside a step (a signal
  handler or a finalizer that interrupted it), or for a thread whose driver
  sleeps in the kernel, is refused with a ``RuntimeError`` that says what to
  do instead, before it touches anything: waiting for the lock there would
  wait for the interrupted step itself, and taking the sleeping thread's step
  would take the one wakeup its driver waits for.
"""

from __future__ import annotations

from typing import Any

from .._dsl.model import DONE
from .errors import LiveError

__all__ = ["Views"]


class Views:
    """The snapshot readers and the refusals of a Runtime (see the module doc); uses only its own fields."""

    machine: Any
    _lock: Any
    _state: tuple
    _pci: Any
    _n: int
    _parked: list
    _nparked: int
    _failure: LiveError | None

    @property
    def state(self) -> tuple:
        return self._state

    @property
    def failure(self) -> LiveError | None:
        return self._failure

    def is_done(self, thread: int) -> bool:
        return self._state[self._pci[thread]] == DONE

    def is_parked(self, thread: int) -> bool:
        """Whether ``thread`` is asleep in the kernel, its step disabled (a snapshot: tests wait on it)."""
        return self._parked[thread]

    @property
    def parked_count(self) -> int:
        """How many threads are asleep in the kernel right now."""
        return self._nparked

    def pc(self, thread: int) -> str:
        return self._state[self._pci[thread]]

    def owned_by_current_thread(self) -> bool:
        """Whether the calling thread is inside a kernel critical section (holds the kernel lock)."""
        return self._lock._is_owned()

    def _thread_index(self, t: Any) -> int:
        if isinstance(t, bool) or not hasattr(t, "__index__") or not 0 <= t.__index__() < self._n:
            raise ValueError(f"{t!r} is not a thread of {self.machine.name} (an int, 0..{self._n - 1})")
        return t.__index__()

    def _reentered(self, t: int) -> None:
        if self._lock._is_owned():
            raise RuntimeError(
                f"{self.machine.name}: re-entrant call into the live runtime from a thread already inside a step "
                "(a signal handler or a finalizer interrupted it); such code must not take steps -- record a "
                "request instead")
        # Its driver sleeps in the kernel: this is a handler that interrupted that sleep (the wait is where
        # handlers run), or a second OS thread driving it. Taking the step would take the one wakeup its
        # driver waits for, which then never returned.
        raise RuntimeError(
            f"{self.machine.name}: {self.machine.thread_names[t]} is waiting inside a step already (a signal "
            "handler or a finalizer interrupted that wait, or another OS thread drives it); a thread is driven "
            "by one caller at a time -- record a request instead")

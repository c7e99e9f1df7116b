"""Which execution a controlled primitive belongs to, and what it is outside every execution.

What it guarantees
------------------
A drop-in primitive (:mod:`.primitives`, :mod:`.queues`) is created by a
controlled thread and belongs to that thread's execution. Code keeps some
of them beyond it: a lock made lazily the first time the code runs
(logging's handler lock on the first ``logging.warning``, a module imported
inside the test body that makes a module-level ``Lock``). Such a primitive
is then used in three other ways, and each gets a defined behaviour:

* **By a later execution of the same process** (the counted runs after the
  warm-up that created it, or a later check): the execution *adopts* it --
  the primitive is part of the program's state that persists from run to
  run, as the lazily made lock persists in a real process. Adoption needs
  the primitive *at rest*: no thread of an ended run holds it or waits on
  it (a lock still held at the end of a run, by a thread that swallowed
  its unwinding, would make every later run start from another state);
  otherwise the use raises a ``RuntimeError`` that says so and what to do.
  Its other state (a semaphore's count, an event's flag, a queue's items)
  carries over as it was left: code that changes it from run to run is
  nondeterministic, as with any global, and the explorer says so when the
  runs diverge.
* **By a thread no check controls, once its execution is over** (the
  program after the check, a finalizer between runs): it behaves as the
  real ``threading``/``queue`` object. It makes one, lazily and once (a
  ``dict.setdefault`` decides between racing threads), from its state at
  that moment, and delegates every operation to it from then on -- for
  every thread, since its state now lives there: it has *gone real*. A
  controlled thread of a later check then uses it as the real object, like
  any object created before that check (one that blocks on it stops the
  check with :class:`~.scheduler.SchedulerStuck`).
* **By an uncontrolled thread while its execution runs** (a thread started
  with ``_thread``): an error, since neither behaviour would be right.
"""

from __future__ import annotations

import _thread
from typing import Any, Callable

from .ops import stored_name
from .scheduler import Execution, Op, VThread, current, where

__all__ = ["Prim", "context", "deadline_of", "loop_deadline", "queue_deadline", "stand_in", "until", "unwaitable",
           "wait_deadline"]


def context(obj: "Prim") -> tuple[Execution, VThread] | None:
    """The caller's execution and thread, once ``obj`` belongs to it; None when ``obj`` is to act as the
    real object (:func:`stand_in`)."""
    c = current()
    ex = obj._ilv_ex
    if c is not None and c[0] is ex:
        return c
    if "_ilv_real" in obj.__dict__:
        return None  # gone real, for everyone
    if c is None:
        if ex.over:
            return None
        raise RuntimeError(f"{type(obj).__name__} {obj._ilv_name!r} is used by a thread the scheduler does not "
                           "control while its check runs (a thread started with _thread?)")
    _adopt(obj, c[0])
    return c


def _adopt(obj: "Prim", ex: Execution) -> None:
    busy = obj._ilv_busy()
    if busy:
        raise RuntimeError(f"{type(obj).__name__} {obj._ilv_name!r} was created by an earlier schedule, which "
                           f"ended with it {busy}: a thread of that schedule kept it when the schedule was "
                           "unwound (it swallows the unwinding, or blocks outside the scheduler), so this schedule "
                           "cannot start from the same state; create the object inside the test body, or make "
                           "it anew for every schedule with patch_globals={(module, name): Fresh(factory)}")
    obj._ilv_ex = ex
    ex.name_object(obj, obj._ilv_kind, obj._ilv_line, obj._ilv_stored)


def stand_in(obj: "Prim") -> Any:
    """The real ``threading``/``queue`` object ``obj`` delegates to outside every execution, made once."""
    real = obj.__dict__.get("_ilv_real")
    if real is None:
        real = obj.__dict__.setdefault("_ilv_real", obj._ilv_make_real())
    return real


def until(ex: Execution, ready: Callable[[], bool], deadline: float | None) -> Callable[[], bool]:
    """Enabled when ``ready()``, or once virtual time reaches ``deadline``."""
    if deadline is None:
        return ready
    return lambda: ready() or ex.clock >= deadline


def deadline_of(ex: Execution, blocking: bool, timeout: float) -> tuple[bool, float | None]:
    """(blocks at all, deadline) by ``Lock.acquire``'s rules: -1 waits forever, 0 does not wait.

    The arguments are first given to a real lock (a free one, which takes
    them without waiting), so a bad one raises exactly what this Python's
    ``acquire`` raises: ValueError for a negative timeout or NaN,
    OverflowError past ``threading.TIMEOUT_MAX`` or for ``inf``, TypeError
    for ``None``, ValueError for a timeout with ``blocking=False`` (after
    the conversion: ``acquire(False, nan)`` is the NaN's ValueError,
    ``acquire(False, "x")`` a TypeError). A timeout the real lock reads as
    -1 s (``-0.9999999999`` rounds to it) waits forever, as -1 does.
    """
    _probe(blocking, timeout)
    if not blocking or timeout == 0:
        return False, None
    if timeout < 0:  # the probe refused every negative timeout but those that round to -1 s: forever
        return True, None
    return True, ex.clock + timeout


def _probe(blocking: bool, timeout: float) -> None:
    probe = _thread.allocate_lock()  # the real one: patching replaces threading's names, never _thread's
    if probe.acquire(blocking, timeout):
        probe.release()


def unwaitable(timeout: float) -> None:
    """Raise what a real blocking wait raises for a positive ``timeout`` it cannot wait (OverflowError)."""
    _probe(True, timeout)


def wait_deadline(ex: Execution, timeout: float | None) -> tuple[bool, float | None, bool]:
    """(blocks at all, deadline, too long) by the rules of ``Condition.wait`` and the waits built on it
    (``Event.wait``, ``Semaphore.acquire``, ``Barrier.wait``, ``Thread.join``, a queue's timed wait).

    ``None`` waits forever. A timeout that is not positive (-1 too, unlike
    ``Lock.acquire``) does not wait: ``cond.wait(deadline - now)`` past its
    deadline returns False at once. A timeout a real lock cannot wait
    (``inf``, past ``TIMEOUT_MAX``) is *too long*: the call does not block
    here, and raises :func:`unwaitable`'s OverflowError when, and only when,
    it would have waited, as CPython raises it from the lock wait inside.
    """
    if timeout is None:
        return True, None, False
    if not timeout > 0:  # NaN too: CPython's ``if timeout > 0`` sends it to a non-blocking acquire
        return False, None, False
    try:
        unwaitable(timeout)
    except OverflowError:
        return False, None, True
    return True, ex.clock + timeout, False


def loop_deadline(ex: Execution, timeout: float | None) -> tuple[bool, float | None, bool]:
    """(blocks at all, deadline, too long) by the rules of CPython's waits that loop on a condition until a
    deadline (``Semaphore.acquire``, ``Barrier.wait``, a ``Queue``'s timed ``get`` and ``put``):
    ``endtime = _time() + timeout``, then ``cond.wait(remaining)`` while ``remaining = endtime - _time()``
    is positive.

    ``None`` waits forever. The addition is CPython's, so a timeout that is
    no number raises its TypeError (``unsupported operand type(s) for +:
    'float' and 'str'``); the caller calls this only when the real call
    would get that far (when it has to wait). A NaN timeout also waits
    forever: ``remaining <= 0`` is never true and each ``wait(nan)`` returns
    at once, so CPython spins until the condition holds -- the same outcome,
    without a spin the search would follow forever. Otherwise
    :func:`wait_deadline`'s rules: not positive, one look; too long, the
    OverflowError when it would wait.
    """
    if timeout is None:
        return True, None, False
    endtime = ex.clock + timeout
    if endtime != endtime:
        return True, None, False
    return wait_deadline(ex, timeout)


def queue_deadline(ex: Execution, block: bool, timeout: float | None) -> tuple[bool, float | None, bool]:
    """``queue.Queue.get``'s rules (and a bounded queue's ``put``'s): the timeout counts only when blocking,
    and a negative one is refused; otherwise :func:`loop_deadline`'s (a NaN waits as ``None`` does)."""
    if not block:
        return False, None, False
    if timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")
    return loop_deadline(ex, timeout)


class Prim:
    """What every primitive shares: its execution, its name, its dependency key, its real stand-in."""

    _ilv_kind = "object"

    def __init__(self) -> None:
        c = current()
        if c is None:
            raise RuntimeError(f"a controlled {self._ilv_kind} can only be created by a controlled thread")
        self._ilv_ex = c[0]
        self._ilv_name = ""
        self._ilv_line = where(3)
        self._ilv_stored = stored_name(3)
        c[0].name_object(self, self._ilv_kind, self._ilv_line, self._ilv_stored)

    def _point(self, ex: Execution, vt: VThread, kind: str, *, enabled: Callable[[], bool] | None = None,
               deadline: float | None = None, write: bool = True, keys: tuple = (), alts: Any = None,
               by_holder: bool = True, depth: int = 3, blocks: Callable[[], bool] | None = None):
        return ex.point(vt, Op(kind, self, (id(self),) + keys, write=write, enabled=enabled, deadline=deadline,
                               alts=alts, where=where(depth), by_holder=by_holder, blocks=blocks))

    def _step(self, kind: str) -> bool:
        """``kind`` (a method without arguments or result) as a scheduling point: True when the caller is then
        to apply its effect; False when it was done on the real stand-in instead."""
        c = context(self)
        if c is None:
            getattr(stand_in(self), kind)()
            return False
        self._point(c[0], c[1], kind)
        return True

    def _ilv_busy(self) -> str:
        """What a thread of its execution still has of it ("held by w"), or "" when it is at rest."""
        return ""

    def _ilv_make_real(self) -> Any:
        """A real object in this one's state (see :func:`stand_in`)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<controlled {self._ilv_kind} {self._ilv_name} ({self._ilv_state()})>"

    def _ilv_state(self) -> str:
        return ""

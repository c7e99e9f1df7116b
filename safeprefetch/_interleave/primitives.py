"""Deterministic drop-ins for ``threading``'s synchronization primitives.

What they guarantee
-------------------
Each class here has the interface and the semantics of its ``threading``
namesake -- ``Lock``, ``RLock``, ``Condition`` (Mesa), ``Semaphore``,
``BoundedSemaphore``, ``Event``, ``Barrier`` -- with every operation that
another thread could observe made a *scheduling point* of the controlled
scheduler (:mod:`.scheduler`): the thread announces the operation, the
scheduler decides who goes next, and the operation takes effect only when
this thread is let go, on the state the decision was made on. An operation
that would block is simply not enabled until it can proceed (or, with a
timeout, until virtual time reaches its deadline), so "blocked" is a fact
the scheduler sees, and a deadlock is the state in which nothing is enabled.

Where each one differs from a real one, and why
-----------------------------------------------
* ``Condition.notify`` under ``notify="any"`` wakes *any* waiter: the choice
  is a scheduling alternative, explored like a thread choice. ``fifo`` wakes
  the longest waiter, as CPython does.
* ``spurious="on"`` lets a waiter wake without a notify (CPython never does
  this, POSIX and Java may): at most ``max_spurious`` times a run, so that a
  ``while`` loop around ``wait`` still terminates.
* Releasing a ``Lock`` from a thread that does not hold it is legal in
  Python, and is reported as ``non_owner_release`` unless the check says
  ``lock_release="any"`` (some code uses a ``Lock`` as a binary semaphore
  on purpose, as the runtime's park tokens do). Releasing an unheld lock, or
  an ``RLock`` one does not own, is always reported, and raises the
  ``RuntimeError`` CPython raises.
* A reentrant ``RLock.acquire`` by its owner, and the matching inner
  ``release``, are not scheduling points: no other thread can tell them
  apart from doing nothing.

A primitive belongs to the execution that created it. Used from a thread
the scheduler does not control, or by a later execution (a module-level
singleton created lazily during a check), it raises a clear
``RuntimeError``; once its execution is over, a thread the scheduler does not
control (the garbage collector, after the check) finds it inert.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from .scheduler import Aborted, Execution, Op, VThread, current, where

__all__ = ["VBarrier", "VBoundedSemaphore", "VCondition", "VEvent", "VLock", "VRLock", "VSemaphore", "context",
           "until"]

_BrokenBarrierError = threading.BrokenBarrierError


def context(obj: Any) -> tuple[Execution, VThread] | None:
    """The caller's execution and thread, checked against ``obj``'s; None when ``obj`` is inert."""
    c = current()
    ex = obj._ilv_ex
    if c is not None and c[0] is ex:
        return c
    if ex.over and c is None:
        return None
    if c is not None:
        raise RuntimeError(f"{type(obj).__name__} {obj._ilv_name!r} was created by an earlier schedule and is used "
                           "in this one: the code under test keeps synchronization objects across runs (a "
                           "module-level singleton?); create them inside the test body")
    raise RuntimeError(f"{type(obj).__name__} {obj._ilv_name!r} is used by a thread the scheduler does not control "
                       "(started with _thread, or outside the check)")


def until(ex: Execution, ready: Callable[[], bool], deadline: float | None) -> Callable[[], bool]:
    """Enabled when ``ready()``, or once virtual time reaches ``deadline``."""
    if deadline is None:
        return ready
    return lambda: ready() or ex.clock >= deadline


def deadline_of(ex: Execution, blocking: bool, timeout: float | None) -> tuple[bool, float | None]:
    """(blocks at all, deadline): ``threading``'s argument rules for ``acquire``/``wait``-like calls."""
    if timeout is not None and timeout < 0 and timeout != -1:
        raise ValueError("timeout value must be a non-negative number")
    if not blocking or timeout == 0:
        return False, None
    if timeout is None or timeout == -1:
        return True, None
    return True, ex.clock + timeout


class _Prim:
    """What every primitive shares: its execution, its name, its dependency key."""

    _ilv_kind = "object"

    def __init__(self) -> None:
        c = current()
        if c is None:
            raise RuntimeError(f"a controlled {self._ilv_kind} can only be created by a controlled thread")
        self._ilv_ex = c[0]
        self._ilv_name = ""
        c[0].name_object(self, self._ilv_kind, where(3))

    def _point(self, ex: Execution, vt: VThread, kind: str, *, enabled: Callable[[], bool] | None = None,
               deadline: float | None = None, write: bool = True, keys: tuple = (), alts: Any = None):
        return ex.point(vt, Op(kind, self, (id(self),) + keys, write=write, enabled=enabled, deadline=deadline,
                               alts=alts, where=where(3)))

    def __repr__(self) -> str:
        return f"<controlled {self._ilv_kind} {self._ilv_name} ({self._ilv_state()})>"

    def _ilv_state(self) -> str:
        return ""


class VLock(_Prim):
    """``threading.Lock``."""

    _ilv_kind = "lock"

    def __init__(self) -> None:
        super().__init__()
        self._held = False
        self._owner: VThread | None = None

    def _ilv_state(self) -> str:
        return f"held by {self._owner.name}" if self._held and self._owner is not None else (
            "held" if self._held else "free")

    def _ilv_blocked(self, vt: VThread, op: Op) -> str:
        who = self._owner.name if self._owner is not None else "?"
        return f"waits for {self._ilv_name} (held by {'itself' if self._owner is vt else who})"

    def lock_free_for(self, vt: VThread) -> bool:
        return not self._held

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        c = context(self)
        if c is None:
            return True
        ex, vt = c
        blocks, deadline = deadline_of(ex, blocking, timeout)
        enabled = until(ex, lambda: not self._held, deadline) if blocks else None
        self._point(ex, vt, "acquire", enabled=enabled, deadline=deadline)
        if self._held:
            return False
        self._held, self._owner = True, vt
        return True

    def release(self) -> None:
        c = context(self)
        if c is None:
            return
        ex, vt = c
        self._point(ex, vt, "release")
        if not self._held:
            ex.violation("non_owner_release", f"{vt.name} released {self._ilv_name}, which nobody holds", vt)
            raise RuntimeError("release unlocked lock")
        if self._owner is not vt and ex.settings.lock_release == "owner":
            owner = self._owner.name if self._owner is not None else "?"
            ex.violation("non_owner_release", f"{vt.name} released {self._ilv_name}, held by {owner}", vt)
        self._held, self._owner = False, None

    def locked(self) -> bool:
        c = context(self)
        if c is None:
            return self._held
        self._point(c[0], c[1], "locked", write=False)
        return self._held

    def _is_owned(self) -> bool:
        c = current()
        return self._held and c is not None and self._owner is c[1]

    # Condition's protocol: give the lock up entirely, and take it back.
    def _release_all(self, vt: VThread) -> Any:
        self._held, self._owner = False, None
        return None

    def _restore(self, vt: VThread, saved: Any) -> None:
        self._held, self._owner = True, vt

    __enter__ = acquire

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def acquire_lock(self, *a: Any, **k: Any) -> bool:  # the old _thread names
        return self.acquire(*a, **k)

    def release_lock(self) -> None:
        self.release()

    def locked_lock(self) -> bool:
        return self.locked()


class VRLock(VLock):
    """``threading.RLock``: reentrant; only the outermost acquire and release are scheduling points."""

    _ilv_kind = "rlock"

    def __init__(self) -> None:
        super().__init__()
        self._count = 0

    def lock_free_for(self, vt: VThread) -> bool:
        return not self._held or self._owner is vt

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        c = context(self)
        if c is None:
            return True
        ex, vt = c
        if self._held and self._owner is vt:
            self._count += 1
            return True
        blocks, deadline = deadline_of(ex, blocking, timeout)
        enabled = until(ex, lambda: not self._held, deadline) if blocks else None
        self._point(ex, vt, "acquire", enabled=enabled, deadline=deadline)
        if self._held:
            return False
        self._held, self._owner, self._count = True, vt, 1
        return True

    __enter__ = acquire

    def release(self) -> None:
        c = context(self)
        if c is None:
            return
        ex, vt = c
        if not self._held or self._owner is not vt:
            self._point(ex, vt, "release")
            owner = self._owner.name if self._held and self._owner is not None else "nobody"
            ex.violation("non_owner_release", f"{vt.name} released {self._ilv_name}, held by {owner}", vt)
            raise RuntimeError("cannot release un-acquired lock")
        if self._count > 1:
            self._count -= 1
            return
        self._point(ex, vt, "release")
        self._held, self._owner, self._count = False, None, 0

    def _release_all(self, vt: VThread) -> Any:
        n = self._count
        self._held, self._owner, self._count = False, None, 0
        return n

    def _restore(self, vt: VThread, saved: Any) -> None:
        self._held, self._owner, self._count = True, vt, saved

    # The names threading.Condition uses on a lock.
    def _release_save(self) -> Any:
        c = current()
        return self._release_all(c[1]) if c is not None else None

    def _acquire_restore(self, saved: Any) -> None:
        c = current()
        if c is not None:
            self._restore(c[1], saved)


class _Waiter:
    __slots__ = ("vt", "notified")

    def __init__(self, vt: VThread):
        self.vt = vt
        self.notified = False


class VCondition(_Prim):
    """``threading.Condition`` (Mesa): ``wait`` releases the lock and sleeps; woken, it takes the lock back."""

    _ilv_kind = "condition"

    def __init__(self, lock: Any = None) -> None:
        super().__init__()
        if lock is None:
            lock = VRLock()
        elif not isinstance(lock, VLock):
            raise TypeError(f"Condition({lock!r}): the lock was not created under the scheduler (create it inside "
                            "the test body, so it is a controlled lock)")
        self._lock = lock
        self._waiters: list[_Waiter] = []
        self.acquire = lock.acquire
        self.release = lock.release

    def _ilv_state(self) -> str:
        return "[" + ", ".join(w.vt.name for w in self._waiters) + "]"

    def _ilv_blocked(self, vt: VThread, op: Op) -> str:
        timed_out = op.deadline is not None and self._ilv_ex.clock >= op.deadline
        if any(w.vt is vt for w in self._waiters) and not timed_out:
            return f"asleep on {self._ilv_name}"
        return self._lock._ilv_blocked(vt, op)

    def lock_free_for(self, vt: VThread) -> bool:
        return self._lock.lock_free_for(vt)

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()

    def _is_owned(self) -> bool:
        return self._lock._is_owned()

    def wait(self, timeout: float | None = None) -> bool:
        c = context(self)
        if c is None:
            return True
        ex, vt = c
        if not self._lock._is_owned():
            raise RuntimeError("cannot wait on un-acquired lock")
        lkey = (id(self._lock),)
        self._point(ex, vt, "wait", keys=lkey)
        w = _Waiter(vt)
        self._waiters.append(w)
        saved = self._lock._release_all(vt)
        blocks, deadline = deadline_of(ex, True, timeout) if timeout is not None else (True, None)
        if not blocks:
            deadline = ex.clock
        lock = self._lock
        enabled = until(ex, lambda: w.notified, deadline)
        ready = (lambda: lock.lock_free_for(vt) and enabled())
        try:
            choice = ex.point(vt, Op("wake", self, (id(self),) + lkey, enabled=ready, deadline=deadline,
                                     where=where(2), label=f"wake from {self._ilv_name}"))
        except Aborted:
            raise
        finally:
            if w in self._waiters:
                self._waiters.remove(w)
        lock._restore(vt, saved)
        return w.notified or choice.alt == -1

    def wait_for(self, predicate: Callable[[], Any], timeout: float | None = None) -> Any:
        c = context(self)
        ex = c[0] if c is not None else None
        endtime = None
        waittime = timeout
        result = predicate()
        while not result:
            if waittime is not None and ex is not None:
                if endtime is None:
                    endtime = ex.clock + waittime
                else:
                    waittime = endtime - ex.clock
                    if waittime <= 0:
                        break
            self.wait(waittime)
            result = predicate()
        return result

    def notify(self, n: int = 1) -> None:
        c = context(self)
        if c is None:
            return
        ex, vt = c
        if not self._lock._is_owned():
            raise RuntimeError("cannot notify on un-acquired lock")
        alts = None
        if ex.settings.notify == "any" and n == 1:
            alts = lambda: list(range(len(self._waiters))) if len(self._waiters) > 1 else [0]  # noqa: E731
        choice = self._point(ex, vt, "notify" if n == 1 else "notify_all", alts=alts)
        self._wake(ex, vt, n, choice.alt if choice.alt > 0 else 0)

    def notify_all(self) -> None:
        c = context(self)
        if c is None:
            return
        ex, vt = c
        if not self._lock._is_owned():
            raise RuntimeError("cannot notify on un-acquired lock")
        self._point(ex, vt, "notify_all")
        self._wake(ex, vt, len(self._waiters), 0)

    notifyAll = notify_all

    def _wake(self, ex: Execution, vt: VThread, n: int, first: int) -> None:
        if not self._waiters:
            w = ex.events[-1].label if ex.events else "?"
            ex.lost_notifies[id(self)] = f"{vt.name}'s {w}"
            return
        chosen = [self._waiters[first]] if n == 1 else self._waiters[:n]
        for w in chosen:
            w.notified = True
            self._waiters.remove(w)
            ex.enabled_by(w.vt.index, vt.index)
        ex.events[-1].note = "woke " + ", ".join(w.vt.name for w in chosen)


class VSemaphore(_Prim):
    """``threading.Semaphore``."""

    _ilv_kind = "semaphore"

    def __init__(self, value: int = 1) -> None:
        if value < 0:
            raise ValueError("semaphore initial value must be >= 0")
        super().__init__()
        self._value = value

    def _ilv_state(self) -> str:
        return str(self._value)

    def _ilv_blocked(self, vt: VThread, op: Op) -> str:
        return f"waits for {self._ilv_name} (count 0)"

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        if not blocking and timeout is not None:
            raise ValueError("can't specify timeout for non-blocking acquire")
        c = context(self)
        if c is None:
            return True
        ex, vt = c
        blocks, deadline = deadline_of(ex, blocking, timeout)
        enabled = until(ex, lambda: self._value > 0, deadline) if blocks else None
        self._point(ex, vt, "acquire", enabled=enabled, deadline=deadline)
        if self._value <= 0:
            return False
        self._value -= 1
        return True

    __enter__ = acquire

    def release(self, n: int = 1) -> None:
        if n < 1:
            raise ValueError("n must be one or more")
        c = context(self)
        if c is None:
            return
        ex, vt = c
        self._point(ex, vt, "release")
        self._release(n)

    def _release(self, n: int) -> None:
        self._value += n

    def __exit__(self, *exc: Any) -> None:
        self.release()


class VBoundedSemaphore(VSemaphore):
    """``threading.BoundedSemaphore``: releasing past the initial value raises ``ValueError``."""

    _ilv_kind = "bounded_semaphore"

    def __init__(self, value: int = 1) -> None:
        super().__init__(value)
        self._initial_value = value

    def _release(self, n: int) -> None:
        if self._value + n > self._initial_value:
            raise ValueError("Semaphore released too many times")
        self._value += n


class VEvent(_Prim):
    """``threading.Event``."""

    _ilv_kind = "event"

    def __init__(self) -> None:
        super().__init__()
        self._flag = False

    def _ilv_state(self) -> str:
        return "set" if self._flag else "clear"

    def _ilv_blocked(self, vt: VThread, op: Op) -> str:
        return f"waits for {self._ilv_name} to be set"

    def is_set(self) -> bool:
        c = context(self)
        if c is None:
            return self._flag
        self._point(c[0], c[1], "is_set", write=False)
        return self._flag

    isSet = is_set

    def set(self) -> None:
        c = context(self)
        if c is None:
            self._flag = True
            return
        self._point(c[0], c[1], "set")
        self._flag = True

    def clear(self) -> None:
        c = context(self)
        if c is None:
            self._flag = False
            return
        self._point(c[0], c[1], "clear")
        self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        c = context(self)
        if c is None:
            return self._flag
        ex, vt = c
        blocks, deadline = deadline_of(ex, True, timeout) if timeout is not None else (True, None)
        if not blocks:
            enabled = None
        else:
            enabled = until(ex, lambda: self._flag, deadline)
        self._point(ex, vt, "wait", enabled=enabled, deadline=deadline, write=False)
        return self._flag


class VBarrier(_Prim):
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

    def wait(self, timeout: float | None = None) -> int:
        c = context(self)
        if c is None:
            raise _BrokenBarrierError
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
        _b, deadline = deadline_of(ex, True, timeout) if timeout is not None else (True, None)
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
            return
        self._point(c[0], c[1], "reset")
        if self._count:
            self._reset_gens.add(self._gen)
            self._gen += 1
        self._count = 0
        self._broken = False

    def abort(self) -> None:
        c = context(self)
        if c is None:
            return
        self._point(c[0], c[1], "abort")
        self._broken = True

    @property
    def parties(self) -> int:
        return self._parties

    @property
    def n_waiting(self) -> int:
        return self._count

    @property
    def broken(self) -> bool:
        return self._broken

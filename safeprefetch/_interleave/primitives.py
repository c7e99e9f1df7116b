"""Deterministic drop-ins for ``threading``'s synchronization primitives.

What they guarantee
-------------------
Each class here has the interface and the semantics of its ``threading``
namesake -- ``Lock``, ``RLock``, ``Condition`` (Mesa), ``Event`` (and, in
:mod:`.semaphores`, ``Semaphore`` and ``BoundedSemaphore``, in
:mod:`.barrier`, ``Barrier``) -- with every operation that
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
  the longest waiter, as CPython does (the list is :mod:`.waiters`', which
  the semaphores and queues wait in too).
* ``spurious="on"`` lets a waiter wake without a notify (CPython never does this, POSIX and Java may):
  at most ``max_spurious`` times a run, so that a ``while`` loop around ``wait`` still terminates.
* Releasing a ``Lock`` from a thread that does not hold it is legal in
  Python, and is reported as ``non_owner_release`` unless the check says
  ``lock_release="any"`` (some code uses a ``Lock`` as a binary semaphore
  on purpose, as the runtime's park tokens do). Releasing an unheld lock, or an
  ``RLock`` one does not own, raises CPython's ``RuntimeError``, reported too unless ``lock_release="any"``.
* A reentrant ``RLock.acquire`` by its owner, and the matching inner
  ``release``, are not scheduling points: no other thread can tell them
  apart from doing nothing.

A primitive belongs to the execution that created it; a later execution
adopts one left at rest, and outside every execution it acts as the real
object (:mod:`.belonging`).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from .belonging import Prim, context, deadline_of, stand_in, until, unwaitable, wait_deadline
from .scheduler import Aborted, Execution, Op, VThread, where
from .semaphores import VBoundedSemaphore, VSemaphore
from .waiters import Waiter, notify_alts, wake, woken

__all__ = ["VBoundedSemaphore", "VCondition", "VEvent", "VLock", "VRLock", "VSemaphore"]

#: The real classes, as they are before any check patches them: what a primitive becomes outside one.
_REAL = {name: getattr(threading, name) for name in ("Lock", "RLock", "Condition", "Event")}


class VLock(Prim):
    """``threading.Lock``."""

    _ilv_kind = "lock"
    #: CPython's Condition tests a Lock (no ``_is_owned``) with ``acquire(False)``: held by anyone is owned.
    _ilv_held_is_owned = True

    def __init__(self) -> None:
        super().__init__()
        self._held = False
        self._owner: VThread | None = None

    def _ilv_lock_keys(self) -> tuple:
        """What taking or leaving this lock touches, for the partial-order reduction."""
        return (id(self),)

    def _ilv_state(self) -> str:
        return f"held by {self._owner.name}" if self._held and self._owner is not None else (
            "held" if self._held else "free")

    def _ilv_blocked(self, vt: VThread, op: Op) -> str:
        who = self._owner.name if self._owner is not None else "?"
        return f"waits for {self._ilv_name} (held by {'itself' if self._owner is vt else who})"

    def lock_free_for(self, vt: VThread) -> bool:
        return not self._held

    def _ilv_busy(self) -> str:
        return f"held by {self._owner.name if self._owner is not None else '?'}" if self._held else ""

    def _ilv_make_real(self) -> Any:
        real = _REAL["Lock"]()
        if self._held:
            real.acquire()  # a Lock may be released by any thread: its holder's release still works
        return real

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        # deadline_of checks the arguments as the real acquire: timeout converted first, even if not blocking
        c = context(self)
        if c is None:
            return stand_in(self).acquire(blocking, timeout)
        ex, vt = c
        blocks, deadline = deadline_of(ex, blocking, timeout)
        enabled = until(ex, lambda: not self._held, deadline) if blocks else None
        self._point(ex, vt, "acquire", enabled=enabled, deadline=deadline)
        if self._held:
            return False
        self._held, self._owner = True, vt
        return True

    def release(self, _from_exit: bool = False) -> None:
        c = context(self)
        if c is None:
            return stand_in(self).release()
        ex, vt = c
        self._point(ex, vt, "release", by_holder=self._held and self._owner is vt, depth=4 if _from_exit else 3)
        if not self._held:
            if ex.settings.lock_release == "owner":
                ex.violation("non_owner_release", f"{vt.name} released {self._ilv_name}, which nobody holds", vt)
            raise RuntimeError("release unlocked lock")
        if self._owner is not vt and ex.settings.lock_release == "owner":
            owner = self._owner.name if self._owner is not None else "?"
            ex.violation("non_owner_release", f"{vt.name} released {self._ilv_name}, held by {owner}", vt)
        self._held, self._owner = False, None

    def locked(self) -> bool:
        c = context(self)
        if c is None:
            return stand_in(self).locked()
        self._point(c[0], c[1], "locked", write=False)
        return self._held

    def _is_owned(self) -> bool:
        c = context(self)
        if c is None:
            real = stand_in(self)
            if hasattr(real, "_is_owned"):
                return real._is_owned()
            if real.acquire(False):  # threading.Condition's own test, for a plain Lock
                real.release()
                return False
            return True
        return self._held and (self._ilv_held_is_owned or self._owner is c[1])

    def _at_fork_reinit(self) -> None:
        """After a fork, in the child: free, as the real locks' own hook leaves them."""
        self._held, self._owner = False, None
        real = self.__dict__.get("_ilv_real")
        if real is not None:
            real._at_fork_reinit()

    # Condition's protocol: give the lock up entirely, and take it back.
    def _release_all(self, vt: VThread) -> Any:
        self._held, self._owner = False, None
        return None

    def _restore(self, vt: VThread, saved: Any) -> None:
        self._held, self._owner = True, vt

    __enter__ = acquire

    def __exit__(self, *exc: Any) -> None:
        # An interrupt offered here stands for one in the with-block's body: its exception reaches this
        # exit, which releases the lock (in C, in CPython) before it propagates.
        try:
            self.release(_from_exit=True)
        except Aborted:
            raise
        except BaseException:
            c = context(self)
            if c is not None and self._held and self._owner is c[1]:
                self._let_go()
            raise

    def _let_go(self) -> None:
        self._held, self._owner = False, None

    def acquire_lock(self, *a: Any, **k: Any) -> bool:  # the old _thread names
        return self.acquire(*a, **k)

    def release_lock(self) -> None:
        self.release()

    def locked_lock(self) -> bool:
        return self.locked()


class VRLock(VLock):
    """``threading.RLock``: reentrant; only the outermost acquire and release are scheduling points."""

    _ilv_kind = "rlock"
    _ilv_held_is_owned = False  # the RLock's own _is_owned: held by the caller

    def __init__(self) -> None:
        super().__init__()
        self._count = 0

    def lock_free_for(self, vt: VThread) -> bool:
        return not self._held or self._owner is vt

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        # deadline_of checks the arguments as the real acquire: timeout converted first, even if not blocking
        c = context(self)
        if c is None:
            return stand_in(self).acquire(blocking, timeout)
        ex, vt = c
        blocks, deadline = deadline_of(ex, blocking, timeout)  # checked first, as CPython's RLock does
        if self._held and self._owner is vt:
            self._count += 1
            return True
        enabled = until(ex, lambda: not self._held, deadline) if blocks else None
        self._point(ex, vt, "acquire", enabled=enabled, deadline=deadline)
        if self._held:
            return False
        self._held, self._owner, self._count = True, vt, 1
        return True

    __enter__ = acquire

    def release(self, _from_exit: bool = False) -> None:
        c = context(self)
        if c is None:
            return stand_in(self).release()
        ex, vt = c
        if not self._held or self._owner is not vt:
            self._point(ex, vt, "release", by_holder=False, depth=4 if _from_exit else 3)
            owner = self._owner.name if self._held and self._owner is not None else "nobody"
            if ex.settings.lock_release == "owner":
                ex.violation("non_owner_release", f"{vt.name} released {self._ilv_name}, held by {owner}", vt)
            raise RuntimeError("cannot release un-acquired lock")
        if self._count > 1:
            self._count -= 1
            return
        self._point(ex, vt, "release", depth=4 if _from_exit else 3)
        self._held, self._owner, self._count = False, None, 0

    def _let_go(self) -> None:
        if self._count > 1:
            self._count -= 1
        else:
            self._held, self._owner, self._count = False, None, 0

    def _ilv_make_real(self) -> Any:
        return _REAL["RLock"]()  # its holder (a thread of the ended run) is gone: it starts free

    def _at_fork_reinit(self) -> None:
        super()._at_fork_reinit()
        self._count = 0

    def _release_all(self, vt: VThread) -> Any:
        n = self._count
        self._held, self._owner, self._count = False, None, 0
        return n

    def _restore(self, vt: VThread, saved: Any) -> None:
        self._held, self._owner, self._count = True, vt, saved

    # The names threading.Condition uses on a lock.
    def _release_save(self) -> Any:
        c = context(self)
        return self._release_all(c[1]) if c is not None else stand_in(self)._release_save()

    def _acquire_restore(self, saved: Any) -> None:
        c = context(self)
        if c is None:
            return stand_in(self)._acquire_restore(saved)
        self._restore(c[1], saved)


class VCondition(Prim):
    """``threading.Condition`` (Mesa): ``wait`` releases the lock and sleeps; woken, it takes the lock back."""

    _ilv_kind = "condition"

    def __init__(self, lock: Any = None) -> None:
        super().__init__()
        if lock is None:
            lock = VRLock()
        elif not isinstance(lock, VLock):
            lock.acquire, lock.release  # noqa: B018 - no lock at all: CPython's AttributeError, as it reads them
            raise TypeError(f"Condition({lock!r}): under the check a Condition takes a Lock or RLock made in the "
                            "check itself, not an object wrapping one or a Semaphore (docs/interleavings.md)")
        self._lock = lock
        self._waiters: list[Waiter] = []
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

    def _ilv_busy(self) -> str:
        if self._waiters:
            return "waited on by " + ", ".join(w.vt.name for w in self._waiters)
        # A lock the adopting execution already adopted has that execution's state, not a left-over one.
        return self._lock._ilv_busy() if self._lock._ilv_ex is self._ilv_ex else ""

    def _ilv_make_real(self) -> Any:
        return _REAL["Condition"](stand_in(self._lock))

    def _context(self) -> tuple[Execution, VThread] | None:
        if "_ilv_real" in self._lock.__dict__:
            return None  # its lock has gone real (belonging.py): so does the condition
        return context(self)

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()

    def _is_owned(self) -> bool:
        return self._lock._is_owned()

    def _owned(self, ex: Execution, vt: VThread) -> bool:
        """CPython's ``_is_owned()`` in wait and notify: held by the caller (not a scheduling point); for a plain
        Lock, else its ``acquire(False)`` test (a point: a read of the lock), which counts any holder."""
        lock = self._lock
        if (lock._held and lock._owner is vt) or not lock._ilv_held_is_owned:
            return lock._held and lock._owner is vt
        lock._point(ex, vt, "locked", write=False, depth=4)
        return lock._held

    def wait(self, timeout: float | None = None) -> bool:
        c = self._context()
        if c is None:
            return stand_in(self).wait(timeout)
        ex, vt = c
        if not self._owned(ex, vt):
            raise RuntimeError("cannot wait on un-acquired lock")
        # The lock's own keys: a queue's mutex also carries the queue's, as every call on that queue does, so
        # the wake-up that takes it back is ordered against them (DPOR ran one order of a get and the wake).
        lkey = self._lock._ilv_lock_keys()
        self._point(ex, vt, "wait", keys=lkey)
        if self._lock._owner is not vt and ex.settings.lock_release == "owner":
            holder = self._lock._owner.name if self._lock._owner is not None else "nobody"  # CPython releases it
            ex.violation("non_owner_release", f"{vt.name} waited on {self._ilv_name}, releasing "
                         f"{self._lock._ilv_name} held by {holder}", vt)
        blocks, deadline, too_long = wait_deadline(ex, timeout)
        if too_long:
            unwaitable(timeout)
        w = Waiter(vt)
        self._waiters.append(w)
        saved = self._lock._release_all(vt)
        if not blocks:
            deadline = ex.clock
        w.deadline = deadline
        lock = self._lock
        enabled = until(ex, lambda: w.notified, deadline)
        ready = (lambda: lock.lock_free_for(vt) and enabled())
        try:
            choice = ex.point(vt, Op("wake", self, (id(self),) + lkey, enabled=ready, deadline=deadline,
                                     where=where(2), label=f"wake from {self._ilv_name}"))
        except Aborted:
            raise
        except BaseException:
            # An interrupt's exception: CPython's wait takes its lock back in a ``finally`` before it
            # propagates, waiting for the lock if another thread holds it.
            if w in self._waiters:
                self._waiters.remove(w)
            ex.point(vt, Op("acquire", lock, lkey, enabled=lambda: lock.lock_free_for(vt), where=where(2),
                            label=f"take {lock._ilv_name} back"))
            lock._restore(vt, saved)
            raise
        finally:
            if w in self._waiters:
                self._waiters.remove(w)
        lock._restore(vt, saved)
        return w.in_time or choice.alt == -1

    def wait_for(self, predicate: Callable[[], Any], timeout: float | None = None) -> Any:
        c = self._context()
        if c is None:
            return stand_in(self).wait_for(predicate, timeout)
        ex = c[0]
        endtime = None
        waittime = timeout
        result = predicate()
        while not result:
            if waittime is not None:
                if endtime is None:
                    endtime = ex.clock + waittime
                    if endtime != endtime:
                        # NaN: CPython spins (``waittime <= 0`` never holds, wait(nan) returns at once) until the
                        # predicate holds; here it waits for a notify: the search would follow a spin forever.
                        waittime = endtime = None
                else:
                    waittime = endtime - ex.clock
                    if waittime <= 0:
                        break
            self.wait(waittime)
            result = predicate()
        return result

    def notify(self, n: int = 1) -> None:
        c = self._context()
        if c is None:
            return stand_in(self).notify(n)
        ex, vt = c
        if not self._owned(ex, vt):
            raise RuntimeError("cannot notify on un-acquired lock")
        alts = notify_alts(ex, self._waiters, lambda: True) if n == 1 else None
        choice = self._point(ex, vt, "notify" if n == 1 else "notify_all", alts=alts)
        self._wake(ex, vt, woken(len(self._waiters), n), choice.alt if choice.alt > 0 else 0)

    def notify_all(self) -> None:
        c = self._context()
        if c is None:
            return stand_in(self).notify_all()
        ex, vt = c
        if not self._owned(ex, vt):
            raise RuntimeError("cannot notify on un-acquired lock")
        self._point(ex, vt, "notify_all")
        self._wake(ex, vt, len(self._waiters), 0)

    notifyAll = notify_all

    def _wake(self, ex: Execution, vt: VThread, n: int, first: int) -> None:
        """Wake ``n`` waiters (a count :func:`.waiters.woken` made), from ``first`` when ``n`` is 1."""
        if not self._waiters:
            w = ex.events[-1].label if ex.events else "?"
            ex.lost_notifies[id(self)] = f"{vt.name}'s {w}"
            return
        if n <= 0:
            ex.events[-1].note = "woke nobody"
            return
        wake(ex, vt, self._waiters, n, first)


class VEvent(Prim):
    """``threading.Event``."""

    _ilv_kind = "event"

    def __init__(self) -> None:
        super().__init__()
        self._flag = False
        #: The virtual time of every set(): a thread already waiting is woken by any set() since it began
        #: to wait, even one a clear() has undone since (CPython's Event notifies its waiters).
        self._sets: list[float] = []

    def _ilv_state(self) -> str:
        return "set" if self._flag else "clear"

    def _ilv_blocked(self, vt: VThread, op: Op) -> str:
        return f"waits for {self._ilv_name} to be set"

    def _ilv_make_real(self) -> Any:
        real = _REAL["Event"]()
        if self._flag:
            real.set()
        return real

    def is_set(self) -> bool:
        c = context(self)
        if c is None:
            return stand_in(self).is_set()
        self._point(c[0], c[1], "is_set", write=False)
        return self._flag

    isSet = is_set

    def set(self) -> None:
        if self._step("set"):
            self._flag = True
            self._sets.append(self._ilv_ex.clock)

    def clear(self) -> None:
        if self._step("clear"):
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        c = context(self)
        if c is None:
            return stand_in(self).wait(timeout)
        ex, vt = c
        self._point(ex, vt, "wait", write=False)  # looks at the flag, and if it is clear, begins to wait
        if self._flag:
            return True  # CPython's Event.wait gives the timeout to Condition.wait only when the flag is clear
        blocks, deadline, too_long = wait_deadline(ex, timeout)
        if not blocks:
            if too_long:
                unwaitable(timeout)
            return False
        begun = len(self._sets)
        self._point(ex, vt, "wait", enabled=until(ex, lambda: len(self._sets) > begun, deadline), deadline=deadline,
                    write=False)
        return any(deadline is None or t <= deadline for t in self._sets[begun:])  # (a set at the deadline: a tie)

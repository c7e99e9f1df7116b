"""Putting the drop-ins in place for the duration of a check, and taking them out again.

What it guarantees
------------------
While a check runs, the code under test uses plain ``threading``, ``queue``
and ``time`` and gets the controlled versions:

* ``threading.Lock``, ``RLock``, ``Condition``, ``Semaphore``,
  ``BoundedSemaphore``, ``Event``, ``Barrier``; ``queue.Queue``,
  ``LifoQueue``, ``PriorityQueue``, ``SimpleQueue`` (with ``shutdown`` only
  where the real ``Queue`` has it, 3.13 on); ``time.sleep``, ``monotonic``, ``perf_counter``,
  ``time`` and their ``_ns`` forms are replaced in their modules;
* **names imported directly** (``from threading import Lock``, ``from time
  import monotonic as now``) are replaced too: every loaded module's globals
  are scanned for the original objects, and each binding found is swapped and
  put back afterwards;
* ``threading.Thread`` keeps its class (subclasses defined before the check
  still work), and its ``start``, ``join`` and ``is_alive`` are replaced by
  controlled versions: ``start`` runs the thread under the scheduler, with
  ``threading.current_thread()`` returning the Thread object as usual; the
  test body runs as the non-daemon thread ``main``. It is not
  ``threading.main_thread()``: it runs on another OS thread than the
  interpreter's main one, where ``signal.signal`` would fail, so code that
  does main-thread-only work must take its other path.

Every replacement checks who calls it. A thread the scheduler controls gets
the controlled behaviour; any other thread (pytest's, the garbage
collector's, a library's background thread) gets the original, untouched.
That is what makes patching process-wide names safe while other threads run.

What it cannot cover, and says so
---------------------------------
* An *instance* created before the check (a module-level ``_lock =
  threading.Lock()``) is a real lock: the scheduler cannot see it. If a
  controlled thread blocks on it, the check stops with
  :class:`~.scheduler.SchedulerStuck` naming the thread and its line.
  Create such objects inside the test body, or pass ``patch_globals`` to have
  them replaced.
* ``_thread``, ``os`` pipes, sockets and ``select`` are not controlled.
* A class that subclasses a real ``threading.Event`` or ``Condition`` before
  the check keeps the real behaviour.
* Default arguments and attributes that captured an original
  (``def f(sleep=time.sleep)``) keep it.

Only one check runs at a time in a process: a second one, from another
thread or nested inside a test body, raises ``RuntimeError``.
"""

from __future__ import annotations

import _thread
import concurrent.futures.thread as _pool
import gc
import logging
import operator
import os
import queue as _queue
import sys
import threading
import time as _time
from typing import Any, Callable

from .._dsl.violations import refusing_os_exit
from .barrier import VBarrier
from .belonging import until, unwaitable
from .ops import HOOK_AT_CHECK
from .primitives import VBoundedSemaphore, VCondition, VEvent, VLock, VRLock, VSemaphore
from .queues import VLifoQueue, VPriorityQueue, VQueue, VSimpleQueue
from .scheduler import _ACTIVE, Aborted, Execution, Op, VThread, current, mark_started, where

__all__ = ["MISSING", "controlled", "patched"]

_BUSY = _thread.allocate_lock()


class _Switch(type):
    """A drop-in class: controlled instances for controlled threads, the original for everyone else."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        real = cls.__dict__.get("_ilv_real")
        if real is not None and current() is None:
            return real(*args, **kwargs)
        return super().__call__(*args, **kwargs)

    def __instancecheck__(cls, obj: Any) -> bool:
        if type.__instancecheck__(cls, obj):
            return True
        real_type = cls.__dict__.get("_ilv_real_type")
        return real_type is not None and isinstance(obj, real_type)


def _switch(name: str, base: type, real: Any, real_type: Any = None) -> type:
    doc = f"Controlled ``{name}`` for controlled threads; the original otherwise."
    return _Switch(name, (base,), {"_ilv_real": real, "_ilv_real_type": real_type, "__doc__": doc,
                                   "__module__": __name__})


def _rlock_type() -> Any:
    return type(threading.RLock())


# -- time ------------------------------------------------------------------------

_MONO_BASE = 1000.0
_EPOCH_BASE = 1_700_000_000.0


def _timefunc(orig: Callable[[], Any], base: float, ns: bool) -> Callable[[], Any]:
    def now() -> Any:
        c = current()
        if c is None:
            return orig()
        t = base + c[0].clock
        return int(t * 1e9) if ns else t

    now.__name__ = getattr(orig, "__name__", "now")
    now.__doc__ = f"Virtual ``time.{now.__name__}`` for controlled threads."
    return now


def _make_sleep(orig: Callable[[float], None]) -> Callable[[float], None]:
    def sleep(secs: float) -> None:
        """Virtual ``time.sleep``: a scheduling point that is enabled once virtual time reaches its end."""
        c = current()
        if c is None:
            return orig(secs)
        if not isinstance(secs, float):
            secs = operator.index(secs)  # CPython's conversion: a float or an int-like (its TypeError for 'x')
        if secs < 0:
            raise ValueError("sleep length must be non-negative")
        if secs != 0:
            unwaitable(secs)  # inf, NaN and past TIMEOUT_MAX raise as the real sleep does
        ex, vt = c
        end = ex.clock + secs
        ex.point(vt, Op("sleep", None, (), enabled=lambda: ex.clock >= end, deadline=end if secs > 0 else None,
                        where=where(2), label=f"sleep {secs:g}"))

    return sleep


# -- Thread --------------------------------------------------------------------------

_ORIG_THREAD = {name: getattr(threading.Thread, name) for name in ("start", "join", "is_alive")}


def _thread_of(ex: Execution, obj: Any) -> VThread | None:
    return ex.thread_objs.get(id(obj))


def _not_started_yet(ex: Execution, vt: VThread, obj: threading.Thread, kind: str) -> VThread | None:
    """``obj``'s thread in this execution; for a Thread not started (yet), after a point that reads which threads
    there are: whether it is started by now races with every start (unannounced, the reduction took the
    first answer for the only one)."""
    target = _thread_of(ex, obj)
    if target is None and obj.ident is None:
        ex.point(vt, Op(kind, obj, (("threads",),), write=False, where=where(3), label=f"{kind} {obj.name}"))
        target = _thread_of(ex, obj)
    return target


def _start(self: threading.Thread) -> None:
    c = current()
    if c is None:
        return _ORIG_THREAD["start"](self)
    ex, vt = c
    if not getattr(self, "_initialized", False):
        raise RuntimeError("thread.__init__() not called")
    if _thread_of(ex, self) is not None:
        raise RuntimeError("threads can only be started once")
    index = len(ex.threads)
    name = ex.unique_name(self.name, self)  # the same in every schedule (threading's counter is not)
    # ("threads",): which threads there are, which enumerate() reads (a thread another starts races with it).
    ex.point(vt, Op("start", self, (("start", index), ("thread", index), ("threads",)), where=where(2),
                    label=f"start {name}"))
    mark_started(self)
    new = ex.add_thread(name, self.run, obj=self, daemon=self.daemon, named=True)
    ex.thread_objs[id(self)] = new
    ex.start_clock(new.index, vt.index)


def _join(self: threading.Thread, timeout: float | None = None) -> None:
    c = current()
    if c is None:
        return _ORIG_THREAD["join"](self, timeout)
    ex, vt = c
    target = _not_started_yet(ex, vt, self, "join")
    if target is None:
        if not getattr(self, "_started", None) or self.ident is None:
            raise RuntimeError("cannot join thread before it is started")
        return _ORIG_THREAD["join"](self, timeout)
    if target is vt:
        raise RuntimeError("cannot join current thread")
    # CPython: ``timeout = max(timeout, 0)`` (its TypeError for 'x'), then a lock wait with it, whose
    # conversion refuses NaN (ValueError) and inf or past TIMEOUT_MAX (OverflowError). 3.13's thread handle
    # converts it at once. Earlier ones wait on the thread's lock, which is dropped -- and the timeout never
    # looked at -- once the Thread has recorded its end (``stopped``); and when that wait raises while the
    # thread runs (a bad timeout, an interrupt), their ``except`` releases the running thread's lock and
    # records its end: from then on is_alive() is False and join() returns at once, though it still runs.
    blocks, deadline, bad = True, None, False
    if timeout is not None:
        timeout = max(timeout, 0)
        try:
            unwaitable(timeout)
        except (ValueError, OverflowError, TypeError):
            bad = True
        if bad and _THREAD_HANDLES:
            unwaitable(timeout)
        blocks = timeout > 0 and not bad
        deadline = ex.clock + timeout if blocks else None
    ended = lambda: target.finished or target.stopped  # noqa: E731
    ready = until(ex, ended, deadline) if blocks else None
    # A join that may record a running thread as ended changes what others' is_alive and join see: a write.
    marks = not _THREAD_HANDLES and (bad or (blocks and bool(ex.interrupts)))
    try:
        ex.point(vt, Op("join", self, (("thread", target.index),), enabled=ready, deadline=deadline, write=marks,
                        where=where(2), label=f"join {target.name}"))  # (its name in the trace: main#2)
    except Aborted:
        raise
    except BaseException:  # an interrupt's exception; one that lands while the join waits is in the lock wait
        if not _THREAD_HANDLES and blocks and not ended():
            target.stopped = True
        raise
    if bad and not target.stopped:
        if not _THREAD_HANDLES and not target.finished:
            target.stopped = True
        unwaitable(timeout)  # raises as it did above
    if target.finished:
        target.stopped = True


#: 3.13 joins through a thread handle, which converts the timeout first and never marks a running thread ended.
_THREAD_HANDLES = sys.version_info >= (3, 13)


def _is_alive(self: threading.Thread) -> bool:
    c = current()
    if c is None:
        return _ORIG_THREAD["is_alive"](self)
    ex, vt = c
    target = _thread_of(ex, self)
    if target is None:
        target = _not_started_yet(ex, vt, self, "is_alive")
        if target is None:
            return _ORIG_THREAD["is_alive"](self)
    ex.point(vt, Op("is_alive", self, (("thread", target.index),), write=False, where=where(2),
                    label=f"is_alive {target.name}"))
    if target.finished:
        target.stopped = True
    return not (target.finished or target.stopped)


#: Thread objects given a handle of their OS thread for a fork, and the handle each had (the parent's to put back).
_FORK_SAVED: list[tuple[threading.Thread, Any]] = []


def _before_fork() -> None:
    """3.13: a fork's child asserts that its current Thread object's handle is the OS thread's. A Thread the
    scheduler runs has the handle of a thread that never started: it gets its OS thread's for the fork."""
    ident = _thread.get_ident()
    obj = threading._active.get(ident)  # type: ignore[attr-defined]
    handle = getattr(obj, "_handle", None)
    if handle is not None and handle.ident != ident:
        _FORK_SAVED.append((obj, handle))
        obj._handle = _thread._make_thread_handle(ident)  # type: ignore[attr-defined,union-attr]


def _after_fork_in_parent() -> None:
    while _FORK_SAVED:
        obj, handle = _FORK_SAVED.pop()
        obj._handle = handle  # type: ignore[attr-defined]


if _THREAD_HANDLES and hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_FORK_SAVED.clear)


def _make_enumerate(orig: Callable[[], list], counting: bool) -> Callable[[], Any]:
    """``threading.enumerate`` (``counting``: ``active_count``) as the body would see it run for real.

    The body runs on an OS thread of its own as ``main``, beside the interpreter's main thread, and a
    finished thread's OS thread leaves ``threading``'s table when it gets round to it: the real
    answer would count one thread too many and depend on timing. Here it is the execution's own threads
    that are alive (``main`` first, then in start order), read at a scheduling point that races with
    their starts and ends.
    """

    def threads() -> Any:
        c = current()
        if c is None:
            return orig()
        ex, vt = c
        keys = (("threads",), *(("thread", t.index) for t in ex.threads))  # every start, and these ends
        ex.point(vt, Op(orig.__name__, None, keys, write=False, where=where(2), label=f"threading.{orig.__name__}"))
        alive = [t.obj for t in ex.threads if t.obj is not None and not (t.finished or t.stopped)]
        return len(alive) if counting else alive

    threads.__name__ = orig.__name__
    threads.__doc__ = f"Controlled ``threading.{orig.__name__}`` for controlled threads; the original otherwise."
    return threads


def _quiet_aborted(orig: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``logging.Logger.handle`` that drops a record about :class:`Aborted` from a controlled thread.

    The checker ends a run by raising ``Aborted`` in its threads, and no ``except`` can tell it from a
    real error: ``concurrent.futures``' worker loop logs "Exception in worker" for it, as does code that
    logs what its ``except BaseException`` caught. On correct code those would be false alarms.
    """

    def handle(self: Any, record: Any) -> Any:
        exc = record.exc_info
        if exc and isinstance(exc, tuple) and isinstance(exc[1], Aborted) and current() is not None:
            return None
        return orig(self, record)

    handle.__doc__ = _quiet_aborted.__doc__
    return handle


class _StartOrder(dict):
    """A ``ThreadPoolExecutor``'s set of threads, iterated in the order they were added: ``shutdown`` joins
    them in that order. A set iterates by identity hash, which differs between runs: the joins' order did,
    and a check with two pool threads stopped as nondeterministic instead of giving a verdict."""

    def add(self, thread: Any) -> None:
        self[thread] = None


def _ordered_pool(orig: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def _adjust_thread_count(self: Any) -> Any:
        if type(self._threads) is set:
            self._threads = _StartOrder.fromkeys(self._threads)
        return orig(self)

    return _adjust_thread_count


# -- the patch table -------------------------------------------------------------------

def _table() -> list[tuple[Any, str, Any]]:
    """(module, name, replacement) for every name the check replaces in its home module."""
    t = [
        # (Named as the type a real ``threading.Lock()`` returns, ``_thread.lock``: code may read its name.)
        (threading, "Lock", _switch("lock", VLock, threading.Lock, _thread.LockType)),
        (threading, "RLock", _switch("RLock", VRLock, threading.RLock, _rlock_type())),
        (threading, "Condition", _switch("Condition", VCondition, threading.Condition, threading.Condition)),
        (threading, "Semaphore", _switch("Semaphore", VSemaphore, threading.Semaphore, threading.Semaphore)),
        (threading, "BoundedSemaphore", _switch("BoundedSemaphore", VBoundedSemaphore, threading.BoundedSemaphore,
                                                threading.BoundedSemaphore)),
        (threading, "Event", _switch("Event", VEvent, threading.Event, threading.Event)),
        (threading, "Barrier", _switch("Barrier", VBarrier, threading.Barrier, threading.Barrier)),
        (_queue, "Queue", _switch("Queue", VQueue, _queue.Queue, _queue.Queue)),
        (_queue, "LifoQueue", _switch("LifoQueue", VLifoQueue, _queue.LifoQueue, _queue.LifoQueue)),
        (_queue, "PriorityQueue", _switch("PriorityQueue", VPriorityQueue, _queue.PriorityQueue,
                                          _queue.PriorityQueue)),
        (_queue, "SimpleQueue", _switch("SimpleQueue", VSimpleQueue, _queue.SimpleQueue, _queue.SimpleQueue)),
        (_time, "sleep", _make_sleep(_time.sleep)),
        (threading, "enumerate", _make_enumerate(threading.enumerate, False)),
        (threading, "active_count", _make_enumerate(threading.active_count, True)),
        # A controlled thread's os._exit would end the check's process with its status and no verdict.
        (os, "_exit", refusing_os_exit(lambda: current() is not None)),
    ]
    if hasattr(threading, "activeCount"):  # the deprecated alias, until 3.12
        t.append((threading, "activeCount", _make_enumerate(threading.activeCount, True)))
    for name, base, ns in (("monotonic", _MONO_BASE, False), ("monotonic_ns", _MONO_BASE, True),
                           ("perf_counter", _MONO_BASE, False), ("perf_counter_ns", _MONO_BASE, True),
                           ("time", _EPOCH_BASE, False), ("time_ns", _EPOCH_BASE, True)):
        t.append((_time, name, _timefunc(getattr(_time, name), base, ns)))
    # CPython's own Queue.get/put and Semaphore.acquire, run by a subclass made before the check (``class
    # JobQueue(queue.Queue)``: its base is the real class), wait on the controlled Condition in virtual time
    # but count their timeout on these module clocks: on the real one, a get(timeout=0.2) never timed out
    # (ok, where a real run raises Empty) and a get(timeout=5) ran virtual time out (a false hang).
    # Only for such an object whose condition is the controlled one: a real queue or semaphore made before the
    # check waits on a real condition, in real time, and its deadline must be real too (counted virtual, it
    # never came: the check died with SchedulerStuck).
    for module, name in ((_queue, "time"), (threading, "_time")):
        if getattr(module, name, None) is _time.monotonic:
            t.append((module, name, _owners_clock(_timefunc(_time.monotonic, _MONO_BASE, False), _time.monotonic)))
    return t


def _owners_clock(virtual: Callable[[], float], real: Callable[[], float]) -> Callable[[], float]:
    """``virtual`` for the calling method's object when its condition is a controlled one (CPython's own
    ``Queue.get``, ``Semaphore.acquire``, ``Condition.wait_for``, run on an object made from a subclass
    defined before the check); the real clock for a real object's."""
    def monotonic() -> float:
        owner = sys._getframe(1).f_locals.get("self")
        cond = next((c for c in (getattr(owner, "not_empty", None), getattr(owner, "_cond", None), owner)
                     if isinstance(c, VCondition)), None)
        return virtual() if cond is not None else real()  # (not _time.monotonic: the virtual one by then)

    monotonic.__name__ = "monotonic"
    return monotonic


#: Modules whose own bindings are not scanned: the patched modules themselves (their names are
#: replaced explicitly; their internals must keep the originals) and this package.
_SKIP = ("threading", "queue", "time", "_thread", "_queue", "sys", "builtins", "gc")


class patched:
    """Context manager: the drop-ins in place, the direct imports swapped, the cyclic GC paused.

    ``extra`` maps further ``(module, name)`` pairs to replacements (the
    ``patch_globals`` of a check). The garbage collector is paused so that no
    finalizer runs at a moment the schedule does not decide; it is resumed,
    and run once, when the check ends.
    """

    def __init__(self, extra: dict[tuple[Any, str], Any] | None = None):
        self.extra = extra or {}
        self.undo: list[tuple[Any, str, Any]] = []
        self.gc_was_enabled = False

    def __enter__(self) -> "patched":
        if _ACTIVE[0] is not None or not _BUSY.acquire(False):
            raise RuntimeError("a check is already running in this process (checks cannot run concurrently or "
                               "nested inside a test body)")
        try:
            table = _table()
            by_id: dict[int, tuple[Any, Any]] = {}
            for module, name, new in table:
                old = getattr(module, name)
                by_id[id(old)] = (old, new)
                self._set(vars(module), name, new)
            _SWAPS.update(by_id)
            for meth, fn in (("start", _start), ("join", _join), ("is_alive", _is_alive)):
                self._set_attr(threading.Thread, meth, fn)
            self._set_attr(logging.Logger, "handle", _quiet_aborted(logging.Logger.handle))
            pool = _pool.ThreadPoolExecutor
            self._set_attr(pool, "_adjust_thread_count", _ordered_pool(pool._adjust_thread_count))
            self._scan(by_id)
            for (module, name), new in self.extra.items():
                self._set(vars(module) if not isinstance(module, dict) else module, name, new)
            self.gc_was_enabled = gc.isenabled()
            gc.disable()
            HOOK_AT_CHECK[0] = threading.excepthook  # a hook the code installs from here on is consulted
        except BaseException:
            self._undo()
            _BUSY.release()
            raise
        return self

    def _scan(self, by_id: dict[int, tuple[Any, Any]]) -> None:
        here = __name__.rsplit(".", 1)[0]
        for modname, module in list(sys.modules.items()):
            if module is None or modname in _SKIP or modname.startswith(here):
                continue
            try:
                names = vars(module)
            except TypeError:
                continue
            if not isinstance(names, dict):
                continue
            for name, value in list(names.items()):
                hit = by_id.get(id(value))
                if hit is not None and hit[0] is value:
                    self._set(names, name, hit[1])

    def _set(self, names: dict, name: str, new: Any) -> None:
        self.undo.append((names, name, names.get(name, _MISSING)))
        if new is _MISSING:
            names.pop(name, None)  # a name that did not exist stays absent (a Fresh one's body sets it)
        else:
            names[name] = new

    def _set_attr(self, cls: type, name: str, new: Any) -> None:
        self.undo.append((cls, name, cls.__dict__[name]))
        setattr(cls, name, new)

    def _undo(self) -> None:
        for target, name, old in reversed(self.undo):
            if isinstance(target, dict):
                if old is _MISSING:
                    target.pop(name, None)
                else:
                    target[name] = old
            else:
                setattr(target, name, old)
        self.undo.clear()

    def __exit__(self, *exc: Any) -> None:
        self._undo()
        _SWAPS.clear()
        try:
            if self.gc_was_enabled:
                gc.enable()
            gc.collect()
        finally:
            _BUSY.release()


#: While a check runs: id(real original) -> (original, replacement), for :func:`controlled`.
_SWAPS: dict[int, tuple[Any, Any]] = {}


def controlled(obj: Any) -> Any:
    """The check's replacement for ``obj`` when it is one of the originals it swaps out (``threading.Lock``
    taken before the check began, as in ``Fresh(threading.Lock)``); otherwise ``obj`` itself."""
    hit = _SWAPS.get(id(obj))
    return hit[1] if hit is not None and hit[0] is obj else obj


#: Where a patched name did not exist: undone by removing it again.
MISSING = _MISSING = object()

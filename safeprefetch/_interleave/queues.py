"""Deterministic drop-ins for ``queue.Queue``, ``LifoQueue``, ``PriorityQueue`` and ``SimpleQueue``.

What they guarantee
-------------------
The interface and semantics of the standard library's queues, including
Python 3.13's ``shutdown(immediate=False)`` and :class:`ShutDown` where the
running Python has them (not before 3.13, as the real ones), with each method one scheduling point of the
controlled scheduler (and a blocked ``get`` or ``put`` one more for each
time it is woken). A queue is thread-safe by contract, so each call is
atomic at synchronization granularity: the scheduler decides *when* a
``put`` or ``get`` happens, never what a half-done one looks like. A
``put`` on a full queue or a ``get`` on an empty one waits, and is not
enabled until a notify wakes it (below), so a thread blocked on a queue is
blocked in the scheduler's eyes (a deadlock involving a queue is found like
one on a lock), and a timeout is a virtual deadline.

The storage hooks are the standard library's (``_init``, ``_qsize``,
``_put``, ``_get``), so a subclass that overrides them -- as ``LifoQueue``
and ``PriorityQueue`` do -- keeps working. Outside every execution a queue
is a real one of its kind, holding the items it held (:mod:`.belonging`).

A ``Queue``'s ``mutex``, ``not_empty``, ``not_full`` and ``all_tasks_done``
are there for code that reaches for them (``with q.mutex: q.queue.clear()``),
made the first time it does: from then on a call on the queue waits while a
thread holds ``mutex`` (forever if it is the caller: the real one is not
reentrant), and a ``put``, ``get``, ``task_done`` or ``shutdown`` notifies
them as the real one does, so code that waits on them directly is woken.

A ``get`` that finds the queue empty, or a ``put`` that finds it full, waits
as CPython's does (:func:`.waiters.wait_turn`): in the list of waiters of
``not_empty`` (``not_full``), in arrival order, the very list code that
waits on ``q.not_empty`` itself joins. A ``put`` wakes the first waiter of
``not_empty`` and a ``get`` the first of ``not_full`` (any one, a choice,
under ``notify="any"``); the others sleep on even while the queue holds an
item for them, as in CPython, and a thread arriving meanwhile may take the
item first (the woken one then waits again, at the end). So a program that
relies on the order (put, then join the consumer that waited longest) is
correct here as it is in CPython, and code that adds items behind the
queue's back without a notify leaves a getter asleep here too. ``join`` is
enabled once no task is left: the real ``task_done`` and ``shutdown`` then
wake every waiter (``notify_all``), so no order is lost.
"""

from __future__ import annotations

import heapq
import queue as _queue
import sys
from collections import deque
from typing import Any

from .belonging import Prim, context, queue_deadline, stand_in, until, unwaitable
from .primitives import VCondition, VLock
from .scheduler import Execution, Op, VThread
from .waiters import Waiter, notify_alts, wait_turn, wake

__all__ = ["ShutDown", "VLifoQueue", "VPriorityQueue", "VQueue", "VSimpleQueue"]

Empty = _queue.Empty
Full = _queue.Full


class _ShutDown(Exception):
    """Raised when put/get with shut-down queue (Python 3.13's ``queue.ShutDown``)."""


_ShutDown.__name__ = _ShutDown.__qualname__ = "ShutDown"  # as 3.13's reads in a traceback


#: The standard library's class where it exists (3.13+), so ``except queue.ShutDown`` catches ours.
ShutDown: type[Exception] = getattr(_queue, "ShutDown", _ShutDown)
#: The real classes, as they are before any check patches them: what a queue becomes outside one.
_REAL = {"queue": _queue.Queue, "lifo": _queue.LifoQueue, "priority": _queue.PriorityQueue,
         "simple": _queue.SimpleQueue}


#: The item types whose repr a trace shows: the interpreter's own, whose repr runs no code of the user's.
_PLAIN = (int, float, complex, str, bytes, bool, type(None))


def _item_text(x: Any) -> str:
    t = type(x)
    if t in _PLAIN or (t is tuple and len(x) <= 4 and all(type(v) in _PLAIN for v in x)):
        return repr(x)
    return f"<{t.__name__}>"


def _short(items: Any) -> str:
    """A queue's contents for a trace. An item's own repr is the user's code, and this runs inside the
    scheduler's bookkeeping: one that raised, or took the item's own lock (a thread-safe object's repr),
    crashed the check of a correct program (and with line mode on, a scheduling point in it broke the run).
    So only the interpreter's plain values show as themselves; any other item shows as its type."""
    try:
        seq = list(items)
    except TypeError:
        return "?"
    text = [_item_text(x) for x in seq[:4]]
    if len(seq) <= 4 and all(len(t) <= 12 for t in text):
        return "[" + ", ".join(text) + "]"
    return f"{len(seq)} items"


class _QueueMutex(VLock):
    """A queue's ``mutex``. Its acquire and release also touch the queue (the partial-order reduction's
    key), so they are ordered against the queue's calls, including those made before it existed."""

    _ilv_kind = "lock"

    def __init__(self, queue_key: int) -> None:
        super().__init__()
        self._ilv_queue_key = queue_key

    def _point(self, ex: Execution, vt: VThread, kind: str, *, keys: tuple = (), depth: int = 3, **kw: Any) -> Any:
        return super()._point(ex, vt, kind, keys=keys + (self._ilv_queue_key,), depth=depth + 1, **kw)

    def _ilv_lock_keys(self) -> tuple:
        return (id(self), self._ilv_queue_key)


class VQueue(Prim):
    """``queue.Queue``."""

    _ilv_kind = "queue"

    def __init__(self, maxsize: int = 0) -> None:
        super().__init__()
        self.maxsize = maxsize
        self._init(maxsize)
        self.unfinished_tasks = 0
        self.is_shutdown = False

    # The standard library's storage hooks.
    def _init(self, maxsize: int) -> None:
        self.queue: Any = deque()

    def _qsize(self) -> int:
        return len(self.queue)

    def _put(self, item: Any) -> None:
        self.queue.append(item)

    def _get(self) -> Any:
        return self.queue.popleft()

    def _ilv_state(self) -> str:
        return _short(self.queue) + (" (shut down)" if self.is_shutdown else "")

    def _ilv_blocked(self, vt: VThread, op: Op) -> str:
        sync = self.__dict__.get("_ilv_sync")
        if sync is not None and sync["mutex"]._held:
            return sync["mutex"]._ilv_blocked(vt, op)
        if op.kind == "put":
            return f"waits for space in {self._ilv_name} (full)"
        if op.kind == "join":
            return f"waits for {self._ilv_name}'s tasks to be done"
        return f"waits for an item in {self._ilv_name} (empty)"

    def _full(self) -> bool:
        return 0 < self.maxsize <= self._qsize()

    # -- the standard library's lock and conditions, made on first use ------------------

    def _sync(self, name: str) -> Any:
        if "_ilv_real" in self.__dict__:
            return getattr(stand_in(self), name)
        sync = self.__dict__.get("_ilv_sync")
        if sync is None:
            counts = dict(self._ilv_ex.names)  # named after the queue, not the line that made them
            lock = _QueueMutex(id(self))
            sync = {"mutex": lock, "not_empty": VCondition(lock), "not_full": VCondition(lock),
                    "all_tasks_done": VCondition(lock)}
            self._ilv_ex.names.clear()
            self._ilv_ex.names.update(counts)
            for attr, obj in sync.items():
                obj._ilv_name = f"{self._ilv_name}.{attr}"
                if attr != "mutex":  # one list: a blocked get and code waiting on not_empty itself, in order
                    obj._waiters = self._waitlist(attr)
            self._ilv_sync = sync
        return sync[name]

    mutex = property(lambda self: self._sync("mutex"), doc="The queue's lock (``queue.Queue.mutex``).")
    not_empty = property(lambda self: self._sync("not_empty"), doc="Notified by each put.")
    not_full = property(lambda self: self._sync("not_full"), doc="Notified by each get.")
    all_tasks_done = property(lambda self: self._sync("all_tasks_done"), doc="Notified when no task is left.")

    def _point(self, ex: Execution, vt: VThread, kind: str, *, enabled: Any = None, depth: int = 3,
               **kw: Any) -> Any:
        # Every call takes the mutex first, as the real one's ``with self.mutex`` does. Looked up when
        # the call is scheduled: another thread may make the mutex while this one is parked here.
        def gated() -> bool:
            sync = self.__dict__.get("_ilv_sync")
            if sync is not None and sync["mutex"]._held:
                return False
            return enabled is None or enabled()

        return super()._point(ex, vt, kind, enabled=gated, depth=depth + 1, **kw)

    def _waitlist(self, name: str) -> list[Waiter]:
        """The waiters of the condition ``name`` (``not_empty``...), longest first, made before the condition."""
        lists = self.__dict__.get("_ilv_waiting")
        if lists is None:
            lists = self.__dict__.setdefault("_ilv_waiting", {"not_empty": [], "not_full": [], "all_tasks_done": []})
        return lists[name]

    def _notify(self, ex: Execution, vt: VThread, *names: str, every: bool = False, first: int = 0) -> None:
        # the real queue notifies whether or not anyone waits: a notify of nobody is no lost wakeup here
        for name in names:
            waiters = self._waitlist(name)
            wake(ex, vt, waiters, len(waiters) if every else 1, first)

    _ilv_real_kind = "queue"

    def _ilv_make_real(self) -> Any:
        real = _REAL[self._ilv_real_kind](self.maxsize)
        for item in list(self.queue):  # a copy: racing makers must each see every item
            real._put(item)
        real.unfinished_tasks = self.unfinished_tasks
        if self.is_shutdown and hasattr(real, "shutdown"):  # before 3.13 a real queue cannot be shut down
            real.shutdown()
        return real

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        c = context(self)
        if c is None:
            return stand_in(self).put(item, block, timeout)
        ex, vt = c
        # CPython looks at block and timeout only for a bounded queue (``if self.maxsize > 0``): an unbounded
        # one's put(timeout=-1) is no error. 3.13 raises ShutDown before either: a bad one raises after that.
        try:
            bounded, bad = self.maxsize > 0, False
            blocks, deadline, too_long = queue_deadline(ex, block, timeout) if bounded else (False, None, False)
        except Exception:
            bounded, bad, blocks, deadline, too_long = False, True, False, None, False
        room = lambda: not self._full() or self.is_shutdown
        alts = notify_alts(ex, self._waitlist("not_empty"), lambda: not self._full() and not self.is_shutdown)
        choice = self._point(ex, vt, "put", blocks=lambda: blocks and not room(), alts=alts)
        if self.is_shutdown:
            raise ShutDown
        if bad and self.maxsize > 0:
            queue_deadline(ex, block, timeout)  # raises as it did above
        if bounded and self._qsize() >= self.maxsize:
            if too_long:
                unwaitable(timeout)
            if not blocks:
                raise Full
            choice = wait_turn(self, ex, vt, "put", self._waitlist("not_full"), room, deadline, alts)
            if self.is_shutdown:
                raise ShutDown
            if choice is None:
                raise Full
        self._put(item)
        self.unfinished_tasks += 1
        self._notify(ex, vt, "not_empty", first=max(choice.alt, 0))

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        c = context(self)
        if c is None:
            return stand_in(self).get(block, timeout)
        ex, vt = c
        try:  # 3.13 raises ShutDown (shut down and empty) before it looks at block and timeout
            blocks, deadline, too_long, bad = *queue_deadline(ex, block, timeout), False
        except Exception:
            blocks, deadline, too_long, bad = False, None, False, True
        ready = lambda: self._qsize() > 0 or self.is_shutdown
        alts = notify_alts(ex, self._waitlist("not_full"), lambda: self._qsize() > 0)
        choice = self._point(ex, vt, "get", blocks=lambda: blocks and not ready(), alts=alts)
        if self.is_shutdown and self._qsize() == 0:
            raise ShutDown
        if bad:
            queue_deadline(ex, block, timeout)  # raises as it did above
        if self._qsize() == 0:
            if too_long:
                unwaitable(timeout)
            if not blocks:
                raise Empty
            choice = wait_turn(self, ex, vt, "get", self._waitlist("not_empty"), ready, deadline, alts)
            if self.is_shutdown and self._qsize() == 0:
                raise ShutDown
            if choice is None:
                raise Empty
        item = self._get()
        self._notify(ex, vt, "not_full", first=max(choice.alt, 0))
        return item

    def put_nowait(self, item: Any) -> None:
        self.put(item, block=False)

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def task_done(self) -> None:
        c = context(self)
        if c is None:
            return stand_in(self).task_done()
        self._point(c[0], c[1], "task_done")
        if self.unfinished_tasks <= 0:
            raise ValueError("task_done() called too many times")
        self.unfinished_tasks -= 1
        if self.unfinished_tasks == 0:
            self._notify(c[0], c[1], "all_tasks_done", every=True)

    def join(self) -> None:
        c = context(self)
        if c is None:
            return stand_in(self).join()
        self._point(c[0], c[1], "join", enabled=lambda: self.unfinished_tasks == 0, write=False)

    def qsize(self) -> int:
        c = context(self)
        if c is None:
            return stand_in(self).qsize()
        self._point(c[0], c[1], "qsize", write=False)
        return self._qsize()

    def empty(self) -> bool:
        return self.qsize() == 0

    def full(self) -> bool:
        c = context(self)
        if c is None:
            return stand_in(self).full()
        self._point(c[0], c[1], "full", write=False)
        return self._full()

    def shutdown(self, immediate: bool = False) -> None:
        """Python 3.13's shutdown: puts raise ShutDown; gets drain what is left (all of it if ``immediate``)."""
        c = context(self)
        if c is None:
            return stand_in(self).shutdown(immediate)
        self._point(c[0], c[1], "shutdown")
        self.is_shutdown = True
        if immediate:
            while self._qsize():
                self._get()
                if self.unfinished_tasks > 0:
                    self.unfinished_tasks -= 1
            self._notify(c[0], c[1], "all_tasks_done", every=True)
        self._notify(c[0], c[1], "not_empty", "not_full", every=True)


# Where the real Queue has no shutdown (before 3.13), neither has the drop-in: code calling it would pass the
# check and fail for real.
if not hasattr(_REAL["queue"], "shutdown"):
    del VQueue.shutdown


class VLifoQueue(VQueue):
    """``queue.LifoQueue``."""

    _ilv_real_kind = "lifo"

    def _init(self, maxsize: int) -> None:
        self.queue = []

    def _get(self) -> Any:
        return self.queue.pop()


class VPriorityQueue(VQueue):
    """``queue.PriorityQueue``."""

    _ilv_real_kind = "priority"

    def _init(self, maxsize: int) -> None:
        self.queue = []

    def _put(self, item: Any) -> None:
        heapq.heappush(self.queue, item)

    def _get(self) -> Any:
        return heapq.heappop(self.queue)


class VSimpleQueue(Prim):
    """``queue.SimpleQueue``: unbounded, no task tracking; ``put`` never blocks."""

    _ilv_kind = "simple_queue"

    #: 3.13's C SimpleQueue hands a put's item straight to the getter that has waited longest (its parking
    #: lot), which no later getter can take; 3.11's and 3.12's lock wakes any getter, and any may take it.
    _HANDOFF = sys.version_info >= (3, 13)

    def __init__(self) -> None:
        super().__init__()
        self._queue: deque = deque()
        self._ilv_waiters: list[Waiter] = []  # (3.13) the getters asleep, longest first
        self._handed: dict[Waiter, Any] = {}  # (3.13) what a put handed to each

    def _ilv_state(self) -> str:
        return _short(self._queue)

    def _ilv_blocked(self, vt: VThread, op: Op) -> str:
        return f"waits for an item in {self._ilv_name} (empty)"

    def _ilv_make_real(self) -> Any:
        real = _REAL["simple"]()
        for item in list(self._queue):
            real.put(item)
        return real

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        c = context(self)
        if c is None:
            return stand_in(self).put(item, block, timeout)
        self._point(c[0], c[1], "put")
        if self._ilv_waiters:  # (3.13 only: nobody is listed before) the item goes to the first, woken
            self._handed[self._ilv_waiters[0]] = item
            wake(c[0], c[1], self._ilv_waiters, 1)
            return
        self._queue.append(item)

    put_nowait = put

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        c = context(self)
        if c is None:
            return stand_in(self).get(block, timeout)
        ex, vt = c
        deadline = None
        if block and timeout is not None:
            # The C SimpleQueue converts its timeout before it looks at the queue: a real one holding an item
            # raises what it raises (NaN, negative: ValueError; inf, past TIMEOUT_MAX: OverflowError), and
            # takes a timeout that rounds up to 0 (-1e-10) as 0.
            probe = _REAL["simple"]()
            probe.put(None)
            probe.get(True, timeout)
            block = timeout > 0
            deadline = ex.clock + timeout if block else None
        blocks = block
        if self._HANDOFF:
            return self._get_handed(ex, vt, blocks, deadline)
        enabled = until(ex, lambda: bool(self._queue), deadline) if blocks else None
        self._point(ex, vt, "get", enabled=enabled, deadline=deadline)
        if not self._queue:
            raise Empty
        return self._queue.popleft()

    def _get_handed(self, ex: Execution, vt: VThread, blocks: bool, deadline: float | None) -> Any:
        """3.13's get: an item there is taken; else the getter parks, last in line, until a put hands it one."""
        self._point(ex, vt, "get", blocks=lambda: blocks and not self._queue)
        if self._queue:
            return self._queue.popleft()
        if not blocks:
            raise Empty
        ex.events[-1].note = "waits"
        w = Waiter(vt, deadline)
        self._ilv_waiters.append(w)
        try:
            self._point(ex, vt, "get", enabled=until(ex, lambda: w.notified, deadline), deadline=deadline)
        finally:
            if w in self._ilv_waiters:  # timed out, or an interrupt's exception: it leaves the line
                self._ilv_waiters.remove(w)
        if w in self._handed:
            return self._handed.pop(w)
        raise Empty

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def empty(self) -> bool:
        return self.qsize() == 0

    def qsize(self) -> int:
        c = context(self)
        if c is None:
            return stand_in(self).qsize()
        self._point(c[0], c[1], "qsize", write=False)
        return len(self._queue)

"""Deterministic drop-ins for ``queue.Queue``, ``LifoQueue``, ``PriorityQueue`` and ``SimpleQueue``.

What they guarantee
-------------------
The interface and semantics of the standard library's queues, including
Python 3.13's ``shutdown(immediate=False)`` and :class:`ShutDown` (present
here on every Python version), with each method one scheduling point of the
controlled scheduler. A queue is thread-safe by contract, so each call is
atomic at synchronization granularity: the scheduler decides *when* a
``put`` or ``get`` happens, never what a half-done one looks like. A
``put`` on a full queue or a ``get`` on an empty one is not enabled until it
can proceed, so a thread blocked on a queue is blocked in the scheduler's
eyes (a deadlock involving a queue is found like one on a lock), and a
timeout is a virtual deadline.

The storage hooks are the standard library's (``_init``, ``_qsize``,
``_put``, ``_get``), so a subclass that overrides them -- as ``LifoQueue``
and ``PriorityQueue`` do -- keeps working. Outside every execution a queue
is a real one of its kind, holding the items it held (:mod:`.belonging`).
"""

from __future__ import annotations

import heapq
import queue as _queue
from collections import deque
from typing import Any

from .belonging import Prim, context, queue_deadline, stand_in, until, unwaitable
from .scheduler import Op, VThread

__all__ = ["ShutDown", "VLifoQueue", "VPriorityQueue", "VQueue", "VSimpleQueue"]

Empty = _queue.Empty
Full = _queue.Full


class _ShutDown(Exception):
    """Raised when put/get with shut-down queue (Python 3.13's ``queue.ShutDown``)."""


#: The standard library's class where it exists (3.13+), so ``except queue.ShutDown`` catches ours.
ShutDown: type[Exception] = getattr(_queue, "ShutDown", _ShutDown)
#: The real classes, as they are before any check patches them: what a queue becomes outside one.
_REAL = {"queue": _queue.Queue, "lifo": _queue.LifoQueue, "priority": _queue.PriorityQueue,
         "simple": _queue.SimpleQueue}


def _short(items: Any) -> str:
    try:
        seq = list(items)
    except TypeError:
        return "?"
    text = [repr(x) for x in seq[:4]]
    if len(seq) <= 4 and all(len(t) <= 12 for t in text):
        return "[" + ", ".join(text) + "]"
    return f"{len(seq)} items"


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
        if op.kind == "put":
            return f"waits for space in {self._ilv_name} (full)"
        if op.kind == "join":
            return f"waits for {self._ilv_name}'s tasks to be done"
        return f"waits for an item in {self._ilv_name} (empty)"

    def _full(self) -> bool:
        return 0 < self.maxsize <= self._qsize()

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
        blocks, deadline, too_long = queue_deadline(ex, block, timeout)
        enabled = until(ex, lambda: not self._full() or self.is_shutdown, deadline) if blocks else None
        self._point(ex, vt, "put", enabled=enabled, deadline=deadline)
        if self.is_shutdown:
            raise ShutDown
        if self._full():
            if too_long:
                unwaitable(timeout)
            raise Full
        self._put(item)
        self.unfinished_tasks += 1

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        c = context(self)
        if c is None:
            return stand_in(self).get(block, timeout)
        ex, vt = c
        blocks, deadline, too_long = queue_deadline(ex, block, timeout)
        enabled = until(ex, lambda: self._qsize() > 0 or self.is_shutdown, deadline) if blocks else None
        self._point(ex, vt, "get", enabled=enabled, deadline=deadline)
        if self._qsize() == 0:
            if self.is_shutdown:
                raise ShutDown
            if too_long:
                unwaitable(timeout)
            raise Empty
        return self._get()

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

    def __init__(self) -> None:
        super().__init__()
        self._queue: deque = deque()

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
        self._queue.append(item)

    put_nowait = put

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        c = context(self)
        if c is None:
            return stand_in(self).get(block, timeout)
        ex, vt = c
        blocks, deadline, too_long = queue_deadline(ex, block, timeout)
        if too_long:  # the C SimpleQueue converts its timeout before it looks at the queue
            unwaitable(timeout)
        enabled = until(ex, lambda: bool(self._queue), deadline) if blocks else None
        self._point(ex, vt, "get", enabled=enabled, deadline=deadline)
        if not self._queue:
            raise Empty
        return self._queue.popleft()

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

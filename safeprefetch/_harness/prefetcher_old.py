"""The Prefetcher's locking before the hardening (commit ``c24e732``), reduced to its locks, to be caught.

``prefetcher_code.py`` checks today's code under the controlled scheduler;
this is its control experiment. :class:`OldRuntime` and :class:`OldPrefetcher`
copy the pre-hardening pattern faithfully down to the order of the lock
operations -- ``safeprefetch/_live.py``'s ``Runtime.step``/``_park``/
``_wake_enabled`` with its one non-reentrant kernel lock, and
``safeprefetch/_prefetcher.py``'s consumer lock, ``close`` and ``_abandon``
-- over a stand-in protocol (a buffer of ``capacity`` batches and a closing
flag). Under the two interrupts of the hardening issue, a signal handler's
``close()`` on the consumer and the GC finalizer on a worker
(:func:`old_interrupts`), :func:`check_old` must find each deadlock; without
them (:func:`old_scenario` ``("none")``) the old code is fine, so the
deadlock is the interrupt's doing.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import numpy as np

from .._interleave import api
from .._interleave.check import Interrupt
from .._interleave.report import CodeCheckResult
from .prefetcher_code import MapSource, _current, _signal_close

__all__ = ["OldPrefetcher", "OldRuntime", "StepTimeoutOld", "check_old", "old_interrupts", "old_scenario"]


class StepTimeoutOld(Exception):
    """c24e732's StepTimeout."""


class OldRuntime:
    """c24e732 ``safeprefetch/_live.py`` ``Runtime``, reduced to its locking.

    One non-reentrant kernel lock (``threading.Lock``) guards the state; a
    thread applies its step under it, or parks: marks itself parked, releases
    the lock, and blocks on its own one-token lock; every step ends by waking
    the parked threads whose step became enabled. The protocol is a stand-in
    for the model (a buffer of ``capacity`` batches, a closing flag); the
    locks, the parking and the order of their operations are the old code's.
    """

    def __init__(self, workers: int, capacity: int, items: int):
        self._lock = threading.Lock()
        n = workers + 2  # workers, the consumer, the closer
        self._tokens = [threading.Lock() for _ in range(n)]
        for tok in self._tokens:
            tok.acquire()
        self._parked = [False] * n
        self.capacity, self.items = capacity, items
        self.next = 0          # the next index to claim
        self.ready: list[int] = []
        self.filling = 0
        self.delivered = 0
        self.closing = False

    def enabled(self, t: int, what: str) -> bool:
        if what == "claim":
            return self.closing or self.next >= self.items or len(self.ready) + self.filling < self.capacity
        if what == "take":
            return bool(self.ready) or self.closing or self.delivered >= self.items
        return True

    def apply(self, t: int, what: str, arg: Any = None) -> Any:
        if what == "claim":
            if self.closing or self.next >= self.items:
                return None
            self.filling += 1
            self.next += 1
            return self.next - 1
        if what == "publish":
            self.filling -= 1
            self.ready.append(arg)
            return None
        if what == "take":
            if self.ready:
                self.delivered += 1
                return self.ready.pop(0)
            return None
        self.closing = True  # "close"
        return None

    def step(self, t: int, what: str, arg: Any = None, timeout: float | None = None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while not self.enabled(t, what):
                self._park(t, deadline)
            out = self.apply(t, what, arg)
            self._wake_enabled()
            return out

    def _park(self, t: int, deadline: float | None) -> None:
        tok = self._tokens[t]
        tok.acquire(False)  # drop a stale token (a wakeup that raced a timeout): sleep for real
        self._parked[t] = True
        self._lock.release()
        try:
            if deadline is None:
                got = tok.acquire()
            else:
                remaining = deadline - time.monotonic()
                got = remaining > 0 and tok.acquire(True, remaining)
        finally:
            self._lock.acquire()
            self._parked[t] = False
        if not got:
            raise StepTimeoutOld

    def _wake_enabled(self) -> None:
        for u, parked in enumerate(self._parked):
            if parked:
                self._parked[u] = False
                self._tokens[u].release()


class OldPrefetcher:
    """c24e732 ``safeprefetch/_prefetcher.py`` ``_Core``: the consumer lock, the close lock, ``close``."""

    def __init__(self, source: Any, capacity: int, workers: int):
        self.rt = OldRuntime(workers, capacity, len(source))
        self.source = source
        self.consumer_lock = threading.Lock()
        self.close_lock = threading.Lock()
        self.closed = False
        self.consumer, self.closer = workers, workers + 1
        self.threads = [threading.Thread(target=self._worker_main, args=(w,), daemon=True, name=f"worker{w}")
                        for w in range(workers)]
        for th in self.threads:
            th.start()

    def _worker_main(self, w: int) -> None:
        rt = self.rt
        while True:
            i = rt.step(w, "claim")
            if i is None:
                return
            batch = np.array(self.source[i])  # the fetch, outside the kernel lock
            rt.step(w, "publish", int(batch[0]))

    def get(self) -> Any:
        with self.consumer_lock:
            x = self.rt.step(self.consumer, "take")
        if x is None:
            raise StopIteration
        return x

    def close(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        with self.close_lock:
            if self.closed:
                return
            me = threading.current_thread()
            self.rt.step(self.closer, "close")
            for th in self.threads:
                if th is not me:
                    th.join(max(0.0, deadline - time.monotonic()))
            self.closed = True


def _old_abandon(pf: OldPrefetcher) -> None:
    """c24e732's finalizer: close it (bounded; never raises)."""
    try:
        pf.close()
    except Exception:  # noqa: BLE001 - a finalizer must not raise
        pass


def old_scenario(interrupt: str, items: int = 2, capacity: int = 1, workers: int = 1) -> Callable[[], None]:
    """The old code's test body: drain, then close; the interrupt is given to ``check`` separately."""
    def body() -> None:
        pf = OldPrefetcher(MapSource(items), capacity, workers)
        _current[0] = pf
        try:
            while True:
                try:
                    pf.get()
                except StopIteration:
                    break
        finally:
            pf.close()
            _current[0] = None

    body.__qualname__ = f"old-prefetcher[{interrupt}]"
    return body


def old_interrupts(kind: str, workers: int = 1) -> tuple:
    if kind == "signal":
        return (Interrupt(_signal_close, threads="main", name="signal handler: close(timeout=1.0)"),)
    return (Interrupt(lambda: _old_abandon(_current[0]), threads=tuple(f"worker{w}" for w in range(workers)),
                                    name="finalizer: close the abandoned prefetcher"),)



def check_old(kind: str, **options: Any) -> CodeCheckResult:
    """Check the pre-hardening locking (c24e732) with the interrupt ``kind`` ("signal" or "finalizer")."""
    opts = dict(interrupts=old_interrupts(kind), lock_release="any", name=f"c24e732[{kind}]")
    opts.update(options)
    return api.check(old_scenario(kind), **opts)

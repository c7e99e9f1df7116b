"""Lifecycle: closing prefetchers from places that must not wait -- finalizers, signal handlers, fork, exit.

What it guarantees
------------------
* **A finalizer never blocks.** The garbage collector can run an abandoned
  prefetcher's finalizer on any thread, at any allocation -- including on one
  of that prefetcher's own workers while it holds the kernel lock. A close
  that waited for that lock there would wait for itself, inside a
  collection, and the process's cyclic GC would never run again. So the
  finalizer only *records* the request: a ``queue.SimpleQueue.put``, which
  CPython documents as reentrant (safe from ``__del__``, weakref callbacks
  and signal handlers), and the **reaper** thread carries the close out.
* **A close that cannot wait is deferred, not dropped.** ``close()`` called
  on a thread that is inside the prefetcher (a signal handler that
  interrupted ``next()``, a source that closes its own prefetcher from a
  worker) marks the prefetcher closed at once and hands the rest to the
  reaper, which waits for the lock the interrupted code will release as soon
  as the handler returns.
* **Fork.** ``os.register_at_fork`` marks every open prefetcher as belonging
  to the parent: in the child its threads do not exist and its locks may be
  held forever by threads that were not copied, so every call raises
  :class:`PrefetcherForked` at once, without touching a lock, and close is a
  no-op. The parent is unaffected.
* **Interpreter exit.** One ``atexit`` hook, registered when safeprefetch is
  imported, closes every prefetcher still open: all of them are told to
  close first, then all are joined against one shared deadline, so exit
  waits at most the largest ``close_timeout`` however many are stuck. atexit
  runs handlers last-registered-first, so handlers registered after
  ``import safeprefetch`` run before this hook and can still use an open
  prefetcher; handlers registered before the import run after it and find it
  closed.

The registry of open prefetchers is a dict keyed by weak references whose
callback removes them: every operation on it is one C call, safe under the
GIL from any thread and in a forked child.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import threading
import time
import weakref
from typing import Any

from .._runtime import interrupts as _interrupts
from .args import deadline_after

__all__ = ["CLOSER_THREAD", "REAPER_THREAD", "PrefetcherForked", "drop_sigint", "open_cores", "reaper", "register",
           "thread_count", "unregister", "want_sigint"]

#: The name of the process-wide reaper thread (started by the first Prefetcher, never joined).
REAPER_THREAD = "safeprefetch-reaper"
#: The threads the reaper closes its requests on (one per batch of requests; each ends when its closes do).
CLOSER_THREAD = "safeprefetch-closer"


class PrefetcherForked(RuntimeError):
    """The prefetcher was created in the parent of this forked process: its threads do not exist here.

    Create a new prefetcher in the child (for example in a
    ``multiprocessing`` worker's initializer), or use the ``spawn`` or
    ``forkserver`` start method.
    """


#: Open prefetchers' cores, keyed by a weak reference that removes itself when the core dies.
_open: dict[weakref.ref, None] = {}


def register(core: Any) -> None:
    _open[weakref.ref(core, _forget)] = None


def _forget(ref: weakref.ref) -> None:
    _open.pop(ref, None)


def unregister(core: Any) -> None:
    for ref in list(_open):
        if ref() is core:
            _open.pop(ref, None)


#: Orders a constructor's "install the SIGINT wrapper, and say so" against a close's "no open prefetcher asked
#: for it: remove it". Unordered, a close on another thread could decide between the install and the core saying
#: it asked, and leave the new prefetcher a wrapper that steps aside at the first SIGINT. An RLock: a signal
#: handler on the main thread may close a prefetcher inside it. Made anew in a forked child.
_sigint_lock = threading.RLock()


def want_sigint(core: Any) -> None:
    """Install the SIGINT wrapper for a registered ``core`` and record whether it is in place (``core.sigint``)."""
    with _sigint_lock:
        # Asked for before it is installed: a signal handler on this thread closing another prefetcher in
        # between (the RLock lets it in) found nobody asking, and removed the wrapper just installed.
        core.sigint = True
        core.sigint = _interrupts.install()


def drop_sigint(core: Any) -> None:
    """Unregister a closed ``core``; remove the SIGINT wrapper if it asked for it and no open prefetcher does.

    Off the main thread without the lock: a close there holds its close lock here, and waiting for this lock
    could wait for a signal handler on the main thread, inside a constructor's install, that is closing that
    same prefetcher and waits for that close lock (for ever with ``close_timeout=inf``). There removing the
    wrapper only marks it stale, and a stale wrapper asks again (``_wanted``) before it steps aside, so a
    constructor racing the decision keeps it. On the main thread, under the lock, as constructors install.
    """
    unregister(core)
    if not core.sigint:
        return
    if threading.current_thread() is not threading.main_thread():
        if not _wanted():
            _interrupts.uninstall()
        return
    with _sigint_lock:
        if not _wanted():
            _interrupts.uninstall()


def _wanted() -> bool:
    """Whether an open prefetcher asked for the SIGINT wrapper."""
    return any(c.sigint for c in open_cores())


def open_cores() -> list[Any]:
    """The cores of every prefetcher not yet closed (strong references, for the caller's use)."""
    out = []
    for ref in list(_open):
        core = ref()
        if core is not None:
            out.append(core)
    return out


class _Reaper:
    """One daemon thread per process that carries out close requests recorded where waiting was not allowed."""

    def __init__(self) -> None:
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def ensure_started(self) -> None:
        """Start the thread if it is not running. Only from an ordinary context (a constructor)."""
        th = self.thread
        if th is not None and th.is_alive():
            return
        with self._start_lock:
            th = self.thread
            if th is None or not th.is_alive():
                th = threading.Thread(target=self._run, name=REAPER_THREAD, daemon=True)
                th.start()
                self.thread = th

    def request(self, core: Any) -> None:
        """Ask for ``core`` to be closed. Never blocks; safe from finalizers and signal handlers."""
        self.requests.put(core)

    def _run(self) -> None:
        """Take the waiting requests and close them on a closer thread of their own, then wait for more.

        The joins are not waited for here: one prefetcher stuck in its source with ``close_timeout=inf``
        (or a long one) would otherwise keep every prefetcher abandoned after it open for as long.
        """
        requests = self.requests
        while True:
            batch = [requests.get()]
            while True:  # take every request already waiting, so their joins overlap
                try:
                    batch.append(requests.get_nowait())
                except queue.Empty:
                    break
            try:
                threading.Thread(target=_close_all, args=(batch,), name=CLOSER_THREAD, daemon=True).start()
            except BaseException:  # noqa: BLE001 - no thread to be had (or shutting down): close them here
                _close_all(batch)
            del batch  # hold no prefetcher while waiting for the next request

    def reset_after_fork(self) -> None:
        self.requests = queue.SimpleQueue()
        self.thread = None
        self._start_lock = threading.Lock()


reaper = _Reaper()
_interrupts.set_still_wanted(_wanted)


def _close_all(batch: list) -> None:
    """Close every core of ``batch``, each against its own close timeout."""
    _close_each(batch, [deadline_after(core.close_timeout) for core in batch])  # None: inf, no bound


def _close_each(cores: list, deadlines: list) -> None:
    """All begun first, then each finished against its deadline, so their joins overlap; one close's failure
    keeps none of the others open.

    Finished earliest deadline first (no bound last), and each let go of (``cores[i] = None``, in the caller's
    list) once finished: one prefetcher stuck with ``close_timeout=inf`` in a batch of abandoned ones kept the
    others after it unfinished, registered, and their slot pools allocated, for as long as it was stuck.
    """
    for i in range(len(cores)):  # (no loop variable left holding a core)
        try:
            cores[i].begin_close(deadlines[i])
        except BaseException:  # noqa: BLE001
            pass
    for i in sorted(range(len(cores)), key=lambda i: (deadlines[i] is None, deadlines[i] or 0.0)):
        _finish_and_let_go(cores, i, deadlines[i])


def _finish_and_let_go(cores: list, i: int, deadline: float | None) -> None:
    # A function of its own: in the loop, an except body falling through to the back-edge is where 3.12 catches
    # a Ctrl-C with that same handler again (lowlevel.escaping_back_edges).
    with contextlib.suppress(BaseException):  # one close's failure keeps none of the others open
        cores[i].finish_close(deadline)
    cores[i] = None


def thread_count() -> int:
    """Running threads, not counting the process-wide reaper: what a leak check should compare."""
    return sum(1 for th in threading.enumerate() if th.name != REAPER_THREAD)


def _after_fork_in_child() -> None:
    global _sigint_lock
    _sigint_lock = threading.RLock()  # a thread the child has not may have held it at the fork
    for core in open_cores():
        core.forked = True
    _open.clear()
    reaper.reset_after_fork()


def _close_all_at_exit() -> None:
    """Close every open prefetcher: tell all to stop, then join all against one deadline."""
    cores = [c for c in open_cores() if not c.forked and not c.closed]
    if not cores:
        return
    started = time.monotonic()
    # One shared start, so stuck prefetchers cost one close timeout in all; None (inf): no bound. Telling
    # them to stop is bounded too: another thread's close may hold a close lock for as long as it waits.
    _close_each(cores, [None if core.close_timeout is None else started + core.close_timeout for core in cores])


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all_at_exit)

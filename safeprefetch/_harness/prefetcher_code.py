"""The Prefetcher's own threaded code under the controlled scheduler.

What it checks, and why
-----------------------
The reference model is proved; the code that runs it -- the runtime's kernel
lock, its parking and footprint-skipped wakeups, and the Prefetcher's glue
around leases, close and finalizers -- is the trusted base, and that is where
the real deadlocks of the hardening issue were: ``close()`` from a signal
handler that interrupted ``next()``, and the GC finalizer run by a worker
that held the kernel lock. Here the real :class:`~safeprefetch.Prefetcher`
runs unmodified under :func:`safeprefetch.interleavings.check`, with its
runtime, workers, reaper and finalizer, and every schedule that matters is
explored (exhaustively, or within a stated preemption bound), with the
interrupts of the hardening issue injected at every scheduling point of the
thread they land on:

* :data:`SCENARIOS` (CI) and :data:`SLOW_SCENARIOS` -- map, iterable and
  ``fetch_into`` sources, capacity 1-2, workers 1-2, items 0-3, close from
  another thread, an abandoned prefetcher, a source error,
  ``get(timeout=)``, a signal handler's ``close()`` on the consumer and the
  finalizer on a worker; leases, ``copy_prefetched``, two consumer threads,
  autotune, an executor and a ``thread_safe=False`` source with two
  workers. Each must show no violation, exhaustively or within its stated
  preemption bound.
* ``prefetcher_old.py`` -- the pre-hardening locking pattern (commit
  ``c24e732``), copied faithfully down to the one non-reentrant kernel
  lock. The same two interrupts must each find a deadlock there.
* :data:`MUTATIONS` -- four edits of ``safeprefetch/_runtime/kernel.py`` (a
  skipped wakeup, a footprint missing a read, a park without its token, a
  close that does not wake), each written to a copy of the module and swapped
  in for the real one; each must be caught with a trace.

A fresh reaper is made for every schedule (the process-wide one holds a real
queue the scheduler cannot see): :func:`patches` swaps it in wherever the
Prefetcher's modules bound it. The runtime's park tokens are locks used as
binary semaphores (released by the waker, not the holder), so these checks
use Python's own rule for ``Lock`` (``lock_release="any"``).
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .._interleave import api
from .._interleave.check import Fresh, InterleavingWarning, Interrupt
from .._interleave.report import CodeCheckResult
from .._prefetcher import core as _core
from .._prefetcher import lifecycle as _lifecycle
from .._prefetcher.api import Prefetcher, _abandon
from .._prefetcher.errors import PrefetcherClosed, PrefetchTimeout

__all__ = ["ALLOW_ALIVE", "MUTATIONS", "SCENARIOS", "SLOW_SCENARIOS", "MapSource", "Mutation", "Scenario",
           "check_mutation", "check_scenario", "mutant_runtime", "patches"]

#: Threads that may outlive a test body: the per-schedule reaper waits for requests forever, and a closer
#: thread it started may still be finishing a close the body did not wait for (the reaper did that work
#: itself before, and was allowed to outlive the body just the same).
ALLOW_ALIVE = (_lifecycle.REAPER_THREAD, _lifecycle.CLOSER_THREAD)


def patches() -> dict:
    """A fresh reaper for every schedule, wherever a module of the Prefetcher bound the process-wide one."""
    fresh = Fresh(_lifecycle._Reaper)  # one value: every module gets the same reaper in a schedule
    return {(m, "reaper"): fresh for m in list(sys.modules.values())
            if m is not None and getattr(m, "reaper", None) is _lifecycle.reaper}


# -- sources --------------------------------------------------------------------------------------

class MapSource:
    def __init__(self, n: int, fail_at: int | None = None):
        self.n = n
        self.fail_at = fail_at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        if i == self.fail_at:
            raise OSError(f"item {i} unreadable")
        return np.full(2, i, dtype=np.int64)


class IntoSource(MapSource):
    def fetch_into(self, i: int, out: np.ndarray) -> None:
        if i == self.fail_at:
            raise OSError(f"item {i} unreadable")
        out[...] = i


def _iterable(n: int) -> Any:
    return (np.full(2, i, dtype=np.int64) for i in range(n))


def _source(kind: str, n: int, fail_at: int | None) -> Any:
    if kind == "iterable":
        return _iterable(n)
    if kind == "fetch_into":
        return IntoSource(n, fail_at)
    return MapSource(n, fail_at)


# -- the scenarios -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scenario:
    """One way of using a Prefetcher, checked under every schedule."""

    name: str
    source: str = "map"
    items: int = 2
    capacity: int = 1
    workers: int = 1
    #: "drain", "close_other" (close from another thread mid-stream), "abandon" (walk away, never close),
    #: "timeout" (get(timeout=0.5) then drain), "early_close" (close after one batch).
    mode: str = "drain"
    fail_at: int | None = None
    #: "signal" (a handler's close() on the consumer), "finalizer" (the finalizer on a worker), or
    #: "ctrl_c" (two KeyboardInterrupts raised while the consumer is blocked in a wait, as a SIGINT
    #: handler that raises does: the consumer carries on after each and must lose nothing).
    interrupt: str | None = None
    bound: int | None = None
    #: How the consumer takes batches: "iterate" (``for batch in pf``), "leases" (``pf.lease()``, released
    #: at once), "copy" (``copy_prefetched`` into one buffer); ``consumers=2``: two threads take at once.
    api: str = "iterate"
    consumers: int = 1
    #: More constructor arguments, as pairs: ``autotune``, ``thread_safe``, ``max_capacity``, and
    #: ``("executor", "thread")`` for a ThreadPoolExecutor of one thread made (and shut down) by the body.
    options: tuple[tuple[str, Any], ...] = ()

    def body(self) -> Callable[[], None]:
        def body() -> None:
            _run_scenario(self)

        body.__qualname__ = f"prefetcher[{self.name}]"
        return body


def _take(pf: Prefetcher, api: str, out: np.ndarray) -> int | None:
    """The next batch's first value, by the scenario's API; None at the end of the stream."""
    if api == "copy":
        return int(out[0]) if pf.copy_prefetched(out) else None
    try:
        if api == "leases":
            with pf.lease() as view:
                return int(view[0])
        return int(next(pf)[0])
    except StopIteration:
        return None


def _consume(pf: Prefetcher, api: str, got: list[int]) -> None:
    """Take batches until the end of the stream (``list.append`` is atomic: two consumers may share ``got``)."""
    out = np.empty(2, np.int64)
    while (x := _take(pf, api, out)) is not None:
        got.append(x)


def _run_scenario(sc: Scenario) -> None:
    options = dict(sc.options)
    pool = None
    if options.get("executor") == "thread":
        pool = options["executor"] = concurrent.futures.ThreadPoolExecutor(1)
    try:
        pf = Prefetcher(_source(sc.source, sc.items, sc.fail_at), capacity=sc.capacity, workers=sc.workers,
                        name="pf", close_timeout=5.0, **options)
        _run_with(sc, pf)
    finally:
        if pool is not None:
            pool.shutdown()


def _run_with(sc: Scenario, pf: Prefetcher) -> None:
    _current[0] = pf
    got: list[int] = []
    closer = None
    try:
        if sc.api != "iterate" or sc.consumers > 1:
            other = threading.Thread(target=_consume, args=(pf, sc.api, got), name="consumer2") \
                if sc.consumers > 1 else None
            if other is not None:
                other.start()
            try:
                _consume(pf, sc.api, got)
            finally:
                if other is not None:
                    other.join()
            got.sort()  # two consumers: each in order, interleaved
            assert got == list(range(sc.items)), f"received {got}"
            return
        if sc.interrupt == "ctrl_c":
            _consume_through_ctrl_c(pf, got)
            assert got == list(range(sc.items)), f"through Ctrl-C, received {got}"
            return
        if sc.mode == "close_other":
            closer = threading.Thread(target=pf.close, name="closer")
            closer.start()
        if sc.mode == "timeout":
            try:
                got.append(int(pf.get(timeout=0.5)[0]))
            except (PrefetchTimeout, StopIteration):
                pass
        if sc.mode == "abandon":
            if sc.items:
                got.append(int(next(pf)[0]))
            return  # never closed: the finalizer and the reaper must clean up
        for batch in pf:
            got.append(int(batch[0]))
            if sc.mode == "early_close":
                pf.close()
                break
    except PrefetcherClosed:
        assert sc.mode == "close_other" or sc.interrupt is not None, "closed by nobody"
    except OSError:
        assert sc.fail_at is not None, "a source error nobody raised"
        assert got == list(range(sc.fail_at)), f"before the error: {got}"
    finally:
        _current[0] = None  # first: an aborted schedule must not leave its prefetcher to the next one
        if sc.mode != "abandon":
            pf.close()
        else:
            core = pf._core
            del pf
            _abandon(core)  # what the finalizer does; the reaper carries the close out
            for th in list(core.threads):
                th.join()  # the reaper's close ends every worker
        if closer is not None:
            closer.join()
    complete = sc.mode == "drain" and sc.interrupt is None and sc.fail_at is None
    if complete:
        assert got == list(range(sc.items)), f"received {got}"
    assert got == sorted(set(got)), f"duplicated or reordered: {got}"


#: The prefetcher of the schedule running now, for the interrupts to act on.
_current: list[Any] = [None]
#: Whether the consumer is inside its loop, where a Ctrl-C is caught and the loop goes on.
_armed: list[bool] = [False]


def _consume_through_ctrl_c(pf: Prefetcher, got: list[int]) -> None:
    _armed[0] = True
    try:
        _drain_through_ctrl_c(pf, got)
    finally:
        _armed[0] = False


def _drain_through_ctrl_c(pf: Prefetcher, got: list[int]) -> None:
    ended = False
    while not ended:  # no enclosing try: a Ctrl-C on the back-edge could escape one (test_backedges)
        try:
            got.append(int(pf.get()[0]))
        except KeyboardInterrupt:
            pass  # the batch that call was handing out must come with the next one
        except StopIteration:
            ended = True


def _ctrl_c() -> None:
    """A SIGINT handler that raises (one installed after the prefetcher's, so layer 2 alone)."""
    if _armed[0]:
        raise KeyboardInterrupt


def _signal_close() -> None:
    """A SIGTERM handler's graceful shutdown: close(timeout=1.0) on whatever thread it interrupted."""
    pf = _current[0]
    if pf is not None:
        pf.close(timeout=1.0)


def _finalizer() -> None:
    """What the garbage collector runs for an abandoned prefetcher, on the thread it interrupted."""
    pf = _current[0]
    if pf is not None:
        _abandon(pf._core)


def _interrupts(kind: str | None, workers: int) -> tuple:
    if kind == "signal":
        return (Interrupt(_signal_close, threads="main", name="signal handler: close(timeout=1.0)"),)
    if kind == "ctrl_c":
        return (Interrupt(_ctrl_c, threads="main", times=2, when="blocked", name="Ctrl-C"),)
    if kind == "finalizer":
        names = tuple(f"safeprefetch-pf-worker{w}" for w in range(workers))
        return (Interrupt(_finalizer, threads=names, name="finalizer: close the abandoned prefetcher"),)
    return ()


#: The CI-sized sweep: each is exhaustive (``bound=None``: every schedule, with DPOR) or covers every
#: schedule within its preemption bound (plain DFS), in about a second each on one core.
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("map-c1-w1-i2"),
    Scenario("map-i0", items=0),
    Scenario("iterable-c1-i2", source="iterable"),
    Scenario("fetch_into-c1-i2", source="fetch_into"),
    Scenario("source-error", items=2, fail_at=1),
    Scenario("map-c1-w2-i2", workers=2, bound=0),
    Scenario("close-from-other-thread", mode="close_other", bound=0),
    Scenario("early-close", items=3, mode="early_close", bound=1),
    Scenario("abandon", mode="abandon", bound=1),
    Scenario("get-timeout", mode="timeout", items=1, bound=1),
    Scenario("signal-handler-close", interrupt="signal", bound=0),
    Scenario("finalizer-on-worker", interrupt="finalizer", bound=0),
    Scenario("ctrl-c-while-waiting", interrupt="ctrl_c", bound=1),
    Scenario("leases-c2-i3", items=3, capacity=2, api="leases", bound=1),
    Scenario("copy-c2-i3", items=3, capacity=2, api="copy", bound=1),
    Scenario("two-consumers", items=3, capacity=2, consumers=2, bound=0),
    Scenario("autotune", items=3, options=(("autotune", True), ("max_capacity", 2)), bound=1),
    Scenario("executor", options=(("executor", "thread"),), bound=1),
    Scenario("thread-unsafe-c2-w2-i3", items=3, capacity=2, workers=2, options=(("thread_safe", False),), bound=0),
)

#: The bigger sweep (``-m slow``, and the bench): more items, capacity 2, two workers, bound 1.
SLOW_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("map-c2-w1-i3", items=3, capacity=2),
    Scenario("fetch_into-c2-w1-i3", source="fetch_into", items=3, capacity=2),
    Scenario("abandon-exhaustive", mode="abandon"),
    Scenario("map-c1-w2-i2-b1", workers=2, bound=1),
    Scenario("close-from-other-thread-b1", mode="close_other", bound=1),
    Scenario("signal-handler-close-b1", interrupt="signal", bound=1),
    Scenario("finalizer-on-worker-b1", interrupt="finalizer", bound=1),
    Scenario("two-consumers-b1", items=3, capacity=2, consumers=2, bound=1),
    Scenario("thread-unsafe-c2-w2-i3-b1", items=3, capacity=2, workers=2, options=(("thread_safe", False),),
             bound=1),
)


def check_scenario(sc: Scenario, **options: Any) -> CodeCheckResult:
    """Check one scenario of today's Prefetcher under every schedule (within its bound)."""
    opts = dict(preemption_bound=sc.bound, reduce="none" if sc.bound is not None else "dpor",
                interrupts=_interrupts(sc.interrupt, sc.workers), allow_alive=ALLOW_ALIVE, lock_release="any",
                patch_globals=patches(), name=sc.name)
    opts.update(options)
    return checked(sc.body(), **opts)


def checked(body: Any, **opts: Any) -> CodeCheckResult:
    """``api.check`` without its warning of a first run that differs from the second: the Prefetcher's first
    construction compiles its model's shape into a cache (outside the protocol under check), every time."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InterleavingWarning)
        return api.check(body, **opts)


# -- mutations of the runtime -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Mutation:
    """An edit of the kernel's source that breaks it; ``old`` must occur exactly once in kernel.py."""

    name: str
    old: str
    new: str
    why: str = ""
    scenario: Scenario = field(default_factory=lambda: Scenario("mutant", items=2, capacity=1))


MUTATIONS: tuple[Mutation, ...] = (
    Mutation("skipped wakeup",
             "pcs and self._enabled(u, self._entries[u][pc], self._want[u]):\n"
             "                    parked[u] = False; self._nparked -= 1; self._tokens[u].release(); woke = True",
             "pcs and self._enabled(u, self._entries[u][pc], self._want[u]):\n"
             "                    parked[u] = False; self._nparked -= 1; woke = True",
             "a parked thread is marked awake but never given its token"),
    Mutation("footprint missing a read",
             "        self._check_invariants = check_invariants and bool(machine.invariants)\n",
             "        self._check_invariants = check_invariants and bool(machine.invariants)\n"
             "        _slots = machine.field_names.index('slots')\n"
             "        for _es in self._entries:\n"
             "            for _e in _es.values():\n"
             "                if _e.wake is not None:\n"
             "                    _e.wake = [tuple((u, pcs) for u, pcs in ws if not any(\n"
             "                        _slots in (self._entries[u][pc].reads or ()) for pc in pcs)) for ws in _e.wake]\n"
             "        for _es in self._entries:\n"
             "            for _e in _es.values():\n"
             "                if _e.reads:\n"
             "                    _e.reads = _e.reads - {machine.field_names.index('slots')}\n",
             "no step declares that it reads the slots (in the plain footprints and the generated wake sets), "
             "so a freed or filled slot wakes nobody"),
    Mutation("park without its token",
             "lock.release(); got = _wait(tok, remaining)",
             "lock.release(); tok = threading.Lock(); tok.acquire(); got = _wait(tok, remaining)",
             "the parked thread sleeps on a lock of its own, so the wakeup given to its token is lost"),
    Mutation("close that does not wake",
             "            woke = self._wake_set(e.wake[b])\n",
             "            woke = self._wake_set(e.wake[b]) if e.label != 'close' else False\n",
             "the closer's step wakes no parked worker or consumer",
             Scenario("mutant-close", items=3, capacity=1, mode="early_close")),
)


def mutant_runtime(mutation: Mutation, directory: str | Path) -> Any:
    """A copy of ``safeprefetch/_runtime/kernel.py`` with ``mutation`` applied, loaded as its own module."""
    from .._runtime import kernel

    text = Path(kernel.__file__).read_text()
    if text.count(mutation.old) != 1:
        raise AssertionError(f"mutation {mutation.name!r}: its target no longer occurs exactly once in kernel.py")
    path = Path(directory) / f"kernel_mutant_{abs(hash(mutation.name))}.py"
    path.write_text(text.replace(mutation.old, mutation.new))
    modname = f"safeprefetch._runtime.kernel_mutant_{abs(hash(mutation.name))}"
    spec = importlib.util.spec_from_file_location(modname, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(modname, None)
    return module


def check_mutation(mutation: Mutation, **options: Any) -> CodeCheckResult:
    """Check a scenario with the mutated kernel swapped in for the real one."""
    with tempfile.TemporaryDirectory() as d:
        mutant = mutant_runtime(mutation, d)
        sc = mutation.scenario

        def python_step(machine: Any, actions: Any, kernel: Any = None, **kw: Any) -> Any:
            # The mutant is kernel.py's Python step: without this, runtime="typed" would run the C step in its
            # place (ckernel.py), which the edit does not touch.
            return mutant.Runtime(machine, actions, **kw)

        opts = dict(allow_alive=ALLOW_ALIVE, lock_release="any", name=f"mutant[{mutation.name}]",
                    patch_globals={**patches(), (_core, "runtime_factory"): [python_step]})
        opts.update(options)
        return checked(sc.body(), **opts)

"""The Prefetcher under interrupts: an injection at every eval-breaker point of one call.

What is checked
---------------
Each *scenario* builds a real Prefetcher over real arrays, brings it to one
situation (a batch ready, a run of batches already held, the consumer about
to park, the end of the stream, a source error next, a lease held, close),
and makes one call there. The harness first records every point where
CPython could raise an asynchronous exception during that call
(``_inject.py``: function entries, returns from C calls, loop back-edges, in
safeprefetch's own files), then, for each point, builds the same situation
again and injects one *effect* at that point:

* ``raise``: a ``KeyboardInterrupt`` raised there directly -- what a SIGINT
  handler other than ours does (the structural layer alone);
* ``signal``: the installed SIGINT handler called there with that frame --
  what the interpreter does when Ctrl-C arrives (both layers);
* ``close``: a signal handler's graceful shutdown, ``pf.close(timeout=1)``,
  run there on the interrupted thread;
* ``finalize``: the abandoned prefetcher's finalizer run there, on a worker
  thread (the garbage collector can run it at any allocation).

After each run it asserts the contract: the call raised the interrupt (or,
for ``close``, finished with a batch or ``PrefetcherClosed``); no lock is
held (the kernel lock, the consumer gate and the close lock can each be
taken by another thread); no batch was lost, duplicated or reordered (the
rest of the stream is drained and compared with the source, ``copy``
into the caller's one buffer, which the caller overwrites once the call
under test is over: what the prefetcher keeps for the next call must not
live only in the caller's array); no wakeup was
lost (the drain does not time out); the prefetcher stays usable, closes
within its timeout without a stuck worker, and every thread it started is
gone.

The same contract under real signals, delivered by a kernel timer at random
moments rather than at chosen points, is the Ctrl-C soak
(``ctrl_c_soak.py``). This module's own frames are left out of the recorded
points (see ``_files``): the scenario's setup and checks are not the code
under test.
"""

from __future__ import annotations

import threading
import time
import warnings
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable, Iterable

import numpy as np

from .._runtime import inject as _inject
from .._prefetcher.lifecycle import thread_count
from .._prefetcher.api import Prefetcher
from .._prefetcher.consumer import COPY, GET
from .._prefetcher.errors import PrefetcherClosed, PrefetcherWarning, PrefetchTimeout

__all__ = ["EFFECTS", "Problem", "Scenario", "InjectionRun", "SweepReport", "default_scenarios", "points",
           "run_point", "sweep"]

SHAPE = (3,)
N = 6

#: The calls a scenario can make, and the situations it can make them in.
APIS = ("get", "next", "copy", "lease", "release", "close")
PHASES = ("ready", "held", "park", "end", "error")
EFFECTS = ("raise", "signal", "close", "finalize")

#: How many times each point is injected at when a call passes it more than once (the take's wake-up
#: loop and the release's are the same code): every pass up to this many. A consumer call takes at
#: most three kernel steps (give back, take, release), each passing the kernel's points once.
OCCURRENCES = 3

#: What the caller writes into its ``out`` buffer once the call under test is over, however it ended:
#: a caller reuses its buffer, so nothing the prefetcher keeps for a later call may live only there.
SCRIBBLE = 999.0


class _Boom(Exception):
    """The source error a scenario injects at one position."""


class _Source:
    """Map-style: item i is ``np.full(SHAPE, i)``; item ``fail_at`` raises; item ``gate_at`` waits for ``gate``."""

    def __init__(self, n: int, fail_at: int = -1, gate_at: int = -1):
        self.n, self.fail_at, self.gate_at = n, fail_at, gate_at
        self.gate = threading.Event()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        if i == self.gate_at:
            self.gate.wait(10)
        if i == self.fail_at:
            raise _Boom(i)
        return np.full(SHAPE, i, np.float32)


@dataclass(frozen=True)
class Scenario:
    """One call in one situation. ``then`` is the API that drains the rest (exercising hand-over between APIs)."""

    api: str
    phase: str
    then: str = "get"
    workers: int = 2
    capacity: int = 3
    #: Constructor options whose code runs inside a consumer call: the autotuner's resize after a take,
    #: the timeline's spans around it.
    autotune: bool = False
    timeline: bool = False
    #: Outcomes that interrupted calls put back before the call under test (``unreturn``: a Ctrl-C raised
    #: at their hand-out), which the call and the drain must hand out first, in order, once each. Two is
    #: two consumer threads interrupted one after the other: the second waits in ``returned`` behind the
    #: first, and the call under test moves both (``take_returned``: the stash, then the backlog); three,
    #: the backlog's order too.
    put_back: int = 0

    def __str__(self) -> str:
        return (f"{self.api}@{self.phase}" + (f"->{self.then}" if self.then != "get" else "")
                + (f" w={self.workers}" if self.workers != 2 else "")
                + (f" k={self.capacity}" if self.capacity != 3 else "")
                + (" autotune" if self.autotune else "") + (" timeline" if self.timeline else "")
                + (f" put_back={self.put_back}" if self.put_back else ""))


@dataclass(frozen=True)
class Problem:
    scenario: str
    effect: str
    point: str
    what: str


@dataclass(frozen=True)
class InjectionRun:
    """What one injected run did."""

    #: The point was reached and the effect performed.
    fired: bool
    #: How the call under test ended ("batch 3", "KeyboardInterrupt", "PrefetcherClosed", ...).
    outcome: str
    #: Contract violations seen (empty: the run was clean).
    problems: tuple[str, ...] = ()


# --------------------------------------------------------------------------
# Building a situation
# --------------------------------------------------------------------------


class _Setup:
    """A prefetcher brought to a scenario's situation, and what it has delivered so far."""

    def __init__(self, sc: Scenario):
        self.sc = sc
        self.baseline = thread_count()
        phase = sc.phase
        prefix = {"ready": 2, "held": 1, "park": 2, "end": N, "error": 2}[phase]
        self.expect_error_at = 2 if phase == "error" else -1
        # Held: item 3's fetch waits until the run is taken, so the run is exactly batches 1 and 2 and the call
        # under test hands out (or releases) its last batch and gives the run back. Left to timing, a third
        # batch was ready in time on 3.12's slower first traced run, and the sweep recorded 10 points, not the
        # kernel step's 37.
        gate_at = {"park": 2, "held": 3}.get(phase, -1)
        self.source = _Source(N, fail_at=self.expect_error_at, gate_at=gate_at)
        self.pf = Prefetcher(self.source, capacity=sc.capacity, workers=sc.workers, close_timeout=5.0,
                             autotune=sc.autotune, timeline=sc.timeline)
        self.core = self.pf._core
        self.got: list[int] = []
        self.error_seen = -1
        self.lease = None
        #: The caller's one buffer for ``copy_prefetched``: the call under test and the drain both use it.
        self.out = np.empty(SHAPE, np.float32)
        for _ in range(prefix):
            self.got.append(int(self.pf.get(timeout=5)[0]))
        if phase == "held":
            # A fast caller: the next take is a run of every ready batch (at least two).
            self._wait(lambda: self.core.ready_now() >= 2)
            self.core.runs.ewma, self.core.runs.last_call = 1e-7, None
            self.got.append(int(self.pf.get(timeout=5)[0]))
            self.source.gate.set()
            if len(self.core.run) != 2 or self.core.run_next != 1:
                raise AssertionError("setup: the take was not a run of two")
        elif phase in ("ready", "error"):
            self._wait(lambda: self.core.ready_now() >= 1)
        if sc.put_back:
            self._put_back(sc.put_back)
        if sc.api == "release":
            lease = self.pf.lease(timeout=5)
            self.got.append(int(lease.array[0]))
            self.lease = lease
        if phase != "park":
            # Quiescent: every worker parked (the buffer full) or finished, so the call under
            # test takes the same path every time and the recorded points are reached again.
            rt = self.core.rt
            self._wait(lambda: all(rt.is_parked(w) or rt.is_done(w) for w in self.core.worker_ids))
        if phase == "park":
            threading.Thread(target=self._release_when_parked, daemon=True).start()

    def _put_back(self, count: int) -> None:
        """``count`` outcomes taken by calls whose hand-out was interrupted, put back as ``handout`` puts them.

        The first is a ``copy_prefetched`` outcome (kept as a copy of the caller's buffer, which the caller
        then overwrites), the others ``get``'s. Their callers never saw them: they are not in ``got``.
        """
        core = self.core
        scratch = [np.empty(SHAPE, np.float32) for _ in range(count)]
        taken = [core.consume(COPY if k == 0 else GET, scratch[k], time.monotonic() + 5) for k in range(count)]
        for entry in taken:
            core.unreturn(entry)
        for buf in scratch:
            buf.fill(SCRIBBLE)
        if len(core.returned) != count:
            raise AssertionError("setup: the outcomes were not put back")

    def _wait(self, cond: Callable[[], bool], seconds: float = 5.0) -> None:
        deadline = time.monotonic() + seconds
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError("setup: the prefetcher did not reach the scenario's situation")
            time.sleep(0.0005)

    def _release_when_parked(self) -> None:
        rt, c = self.core.rt, self.core.consumer
        deadline = time.monotonic() + 5
        while not rt._parked[c] and not self.call_over and not self.pf.closed and time.monotonic() < deadline:
            time.sleep(0.0005)
        self.source.gate.set()

    call_over = False

    # -- the call under test ---------------------------------------------------

    def call(self) -> Any:
        api, pf = self.sc.api, self.pf
        if api == "get":
            return pf.get(timeout=5)
        if api == "next":
            return next(pf)
        if api == "copy":
            return self.out if pf.copy_prefetched(self.out, timeout=5) else False
        if api == "lease":
            return pf.lease(timeout=5)
        if api == "release":
            return self.lease.release()
        if api == "close":
            return pf.close(timeout=5)
        raise ValueError(api)

    def call_quietly(self) -> Any:
        """The call, with the outcomes a scenario expects (the end, the source error) recorded, not raised."""
        try:
            return self.record(self.call())
        except StopIteration:
            return "end"
        except _Boom:
            self.error_seen = len(self.got)
            return "source error"

    def take_one(self, api: str) -> int | None:
        """One batch through ``api``: its id, None at the end; records a source error."""
        pf = self.pf
        try:
            if api == "copy":
                out = self.out
                return int(out[0]) if pf.copy_prefetched(out, timeout=5) else None
            if api == "lease":
                lease = pf.lease(timeout=5)
                try:
                    return int(lease.array[0])
                finally:
                    lease.release()
            return int(pf.get(timeout=5)[0])
        except StopIteration:
            return None
        except _Boom as e:
            if self.error_seen >= 0:
                raise AssertionError("the source error was raised twice") from e
            self.error_seen = len(self.got)
            return -1

    def record(self, value: Any) -> str:
        """Account for what the call under test returned; describe it."""
        if isinstance(value, np.ndarray):
            self.got.append(int(value[0]))
            return f"batch {int(value[0])}"
        if value is False:
            return "end"
        if value is not None and type(value).__name__ == "Lease":
            self.got.append(int(value.array[0]))
            value.release()
            return f"lease {self.got[-1]}"
        return "returned"


# --------------------------------------------------------------------------
# Checking the contract after a run
# --------------------------------------------------------------------------


def _lock_free(lock: Any) -> bool:
    """Whether another thread can take ``lock`` within two seconds (a held-forever lock fails)."""
    ok: list[bool] = []

    def probe() -> None:
        if lock.acquire(timeout=2.0):
            lock.release()
            ok.append(True)

    th = threading.Thread(target=probe, daemon=True)
    th.start()
    th.join(3.0)
    return bool(ok)


def _check(setup: _Setup, closed_by_effect: bool) -> list[str]:
    problems: list[str] = []
    core, pf = setup.core, setup.pf
    for name in ("gate", "consumer_lock", "close_lock"):
        lock = getattr(core, name, None)
        if lock is not None and not _lock_free(lock):
            problems.append(f"{name} is held after the call")
    if not _lock_free(core.rt._lock):
        problems.append("the kernel lock is held after the call")
    if problems:
        return problems  # draining would hang
    if setup.lease is not None and not setup.lease.released:
        setup.lease.release()  # an interrupted release is finished by calling it again
    closed = closed_by_effect or pf.closed
    if not closed:
        try:
            while True:
                got = setup.take_one(setup.sc.then)
                if got is None:
                    break
                if got >= 0:
                    setup.got.append(got)
        except PrefetchTimeout:
            problems.append("the rest of the stream did not arrive (a lost wakeup, or a hang)")
        except BaseException as e:  # noqa: BLE001 - every other exception is a finding (LiveDeadlock, ...)
            problems.append(f"draining raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        expected = list(range(N))
        if setup.expect_error_at >= 0:
            expected = list(range(setup.expect_error_at))
            if setup.error_seen != setup.expect_error_at:
                problems.append(f"the source error was seen at {setup.error_seen}, not {setup.expect_error_at}")
        if setup.got != expected and not problems:
            problems.append(f"delivered {setup.got}, expected {expected}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.monotonic()
        try:
            pf.close(timeout=5)
        except BaseException as e:  # noqa: BLE001 - reported
            problems.append(f"close raised {type(e).__name__}: {e}")
        if time.monotonic() - t0 > 5.5:
            problems.append("close took longer than its timeout")
    if any(issubclass(w.category, PrefetcherWarning) for w in caught):
        problems.append("close reported a worker stuck in a fetch")
    deadline = time.monotonic() + 5
    while thread_count() > setup.baseline and time.monotonic() < deadline:
        time.sleep(0.001)
    if thread_count() > setup.baseline:
        problems.append(f"{thread_count() - setup.baseline} thread(s) left running after close")
    return problems


# --------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------


def _files() -> frozenset[str]:
    """safeprefetch's own files, less this harness and the injector."""
    import os

    import safeprefetch

    skip = {os.path.realpath(__file__), os.path.realpath(_inject.__file__)}
    return frozenset(f for f in _inject.package_files(safeprefetch) if f not in skip)


def _is_worker(th: threading.Thread) -> bool:
    return th.name.startswith("safeprefetch-") and "-worker" in th.name


def _with_worker_cycle(setup: _Setup, action: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``action`` (which frees a slot), then wait until a worker has refilled it."""
    def run() -> Any:
        before = setup.core.rt.steps
        try:
            return action()
        finally:
            deadline = time.monotonic() + 5
            while setup.core.rt.steps < before + 4 and not setup.pf.closed and time.monotonic() < deadline:
                time.sleep(0.0005)
    return run


def points(sc: Scenario, effect: str = "raise") -> list[_inject.InjectionPoint]:
    """The eval-breaker points the scenario's call executes (its workers' fetch cycle, for ``finalize``)."""
    held: list[_Setup] = []
    threads = effect == "finalize"

    def prepare() -> Callable[[], Any]:
        setup = _Setup(sc)
        held.append(setup)
        return _with_worker_cycle(setup, setup.call) if threads else setup.call

    try:
        return _inject.record_points(None, _files(), threads=threads, prepare=prepare,
                                     thread_filter=_is_worker if threads else None, occurrences=OCCURRENCES)
    finally:
        for setup in held:
            setup.call_over = True
            setup.source.gate.set()
            _check(setup, closed_by_effect=False)


def run_point(sc: Scenario, point: _inject.InjectionPoint, effect: str) -> InjectionRun:
    """Build the scenario again, run its call with ``effect`` injected at ``point``, and check the contract."""
    held: list[_Setup] = []
    close_seconds: list[float] = []
    threads = effect == "finalize"

    def handler_close(frame: FrameType) -> None:
        t0 = time.monotonic()
        held[0].pf.close(timeout=1.0)
        close_seconds.append(time.monotonic() - t0)

    def finalize(frame: FrameType) -> None:
        held[0].pf._finalizer()  # what the garbage collector would run: weakref.finalize's callback

    effects: dict[str, Callable[[FrameType], None]] = {
        "raise": _inject.raise_keyboard_interrupt, "signal": _inject.deliver_sigint,
        "close": handler_close, "finalize": finalize}

    def prepare() -> Callable[[], Any]:
        setup = _Setup(sc)
        held.append(setup)
        return _with_worker_cycle(setup, setup.call) if threads else setup.call

    problems: list[str] = []
    res = _inject.run_with_injection(None, point, effects[effect], _files(), threads=threads, prepare=prepare,
                                     thread_filter=_is_worker if threads else None)
    setup = held[0]
    try:
        setup.call_over = True
        fired = res.fired
        if not res.raised:
            outcome = setup.record(res.result)
        else:
            e = res.result
            outcome = type(e).__name__
            if isinstance(e, _Boom):
                outcome = "source error"
                setup.error_seen = len(setup.got)
            elif isinstance(e, StopIteration):
                outcome = "end"
            elif not isinstance(e, (KeyboardInterrupt, PrefetcherClosed)):
                problems.append(f"the call raised {type(e).__name__}: {e}")
        setup.out.fill(SCRIBBLE)  # the caller reuses its buffer
        if effect in ("raise", "signal") and fired and outcome != "KeyboardInterrupt":
            problems.append(f"the interrupt was not raised by the call (it ended with: {outcome})")
        if effect == "signal" and fired and sc.api == "release" and not setup.lease.released:
            # Deferred, a Ctrl-C in release() comes once the lease is released: a with-block's lease (no
            # reference left to release it again) would stay held otherwise.
            problems.append("the Ctrl-C was raised before the lease was released")
        if effect == "close":
            if close_seconds and close_seconds[0] > 2.0:
                problems.append(f"close() from the handler took {close_seconds[0]:.1f} s")
            if fired and not setup.pf.closed:
                problems.append("close() from the handler did not close the prefetcher")
        if effect == "finalize" and fired:
            deadline = time.monotonic() + 6
            while True:  # not ``while cond:``: its back-edge escapes the try on 3.13 (lowlevel.escaping_back_edges)
                if setup.core.closed or time.monotonic() >= deadline:
                    break
                time.sleep(0.001)
            if not setup.core.closed:
                problems.append("the finalizer's close did not finish (a worker is stuck)")
        problems += _check(setup, closed_by_effect=fired and effect in ("close", "finalize"))
    finally:
        setup.source.gate.set()
    return InjectionRun(fired, outcome, tuple(problems))


def default_scenarios(full: bool = False) -> list[tuple[Scenario, str]]:
    """(scenario, effect) pairs: a CI-sized set by default, every combination with ``full``."""
    if full:
        out = []
        for api in APIS:
            for phase in PHASES:
                if api == "release" and phase in ("end", "error", "park"):
                    continue
                for effect in ("raise", "signal", "close"):
                    out.append((Scenario(api, phase), effect))
        for then in ("copy", "lease"):
            for api in ("get", "copy", "lease"):
                out.append((Scenario(api, "ready", then=then), "raise"))
        for api in ("get", "copy", "lease"):
            for effect in ("raise", "signal"):
                out.append((Scenario(api, "ready", workers=1, capacity=1), effect))
        out.append((Scenario("get", "ready"), "finalize"))
        out.append((Scenario("get", "park"), "finalize"))
        out.append((Scenario("get", "ready", workers=1, capacity=1), "finalize"))
        for api in ("get", "copy", "lease"):
            for effect in ("raise", "signal"):
                out.append((Scenario(api, "ready", then="copy", autotune=True), effect))
                out.append((Scenario(api, "park", timeline=True), effect))
        for api in ("get", "copy", "lease"):
            for put_back in (1, 2, 3):
                for effect in ("raise", "signal", "close"):
                    out.append((Scenario(api, "ready", then="copy" if api == "copy" else "get", put_back=put_back),
                                effect))
        return out
    # The CI-sized set: every API and every situation at least once with a raw interrupt; the
    # SIGINT handler, a handler's close() and the finalizer where each matters most.
    return [
        (Scenario("get", "ready"), "raise"), (Scenario("get", "held"), "raise"), (Scenario("get", "park"), "raise"),
        (Scenario("get", "end"), "raise"), (Scenario("next", "error"), "raise"),
        (Scenario("copy", "ready", then="copy"), "raise"), (Scenario("copy", "held", then="lease"), "raise"),
        (Scenario("lease", "ready", then="copy"), "raise"), (Scenario("release", "held"), "raise"),
        (Scenario("close", "park"), "raise"),
        (Scenario("get", "ready", workers=1, capacity=1), "raise"),
        (Scenario("get", "park"), "signal"), (Scenario("lease", "held"), "signal"),
        (Scenario("release", "ready"), "signal"),
        (Scenario("copy", "ready", workers=1, capacity=1), "signal"),
        (Scenario("get", "park"), "close"), (Scenario("lease", "ready"), "close"), (Scenario("close", "ready"), "close"),
        (Scenario("get", "ready", workers=1, capacity=1), "finalize"),
        (Scenario("copy", "ready", then="copy", autotune=True), "raise"),
        (Scenario("get", "park", timeline=True), "signal"),
        (Scenario("get", "ready", put_back=1), "raise"), (Scenario("copy", "ready", then="copy", put_back=2), "raise"),
        (Scenario("lease", "ready", put_back=2), "signal"), (Scenario("get", "ready", put_back=3), "raise"),
    ]


@dataclass(frozen=True)
class SweepReport:
    """Every point of every scenario, injected once."""

    runs: int
    fired: int
    problems: tuple[Problem, ...]
    seconds: float
    per_scenario: tuple[tuple[str, str, int], ...] = field(default=())


def sweep(pairs: Iterable[tuple[Scenario, str]], progress: Callable[[str], None] | None = None,
          stop_at_first: bool = False) -> SweepReport:
    with _inject.python_sigint():  # a Ctrl-C to inject, even in a process started with SIGINT ignored
        return _sweep(pairs, progress, stop_at_first)


def _sweep(pairs: Iterable[tuple[Scenario, str]], progress: Callable[[str], None] | None,
           stop_at_first: bool) -> SweepReport:
    t0 = time.perf_counter()
    runs = fired = 0
    problems: list[Problem] = []
    per: list[tuple[str, str, int]] = []
    for sc, effect in pairs:
        pts = points(sc, effect)
        per.append((str(sc), effect, len(pts)))
        for p in pts:
            r = run_point(sc, p, effect)
            runs += 1
            fired += r.fired
            problems += [Problem(str(sc), effect, str(p), what) for what in r.problems]
            if stop_at_first and problems:
                break
        if progress is not None:
            progress(f"{sc} / {effect}: {len(pts)} points")
    return SweepReport(runs, fired, tuple(problems), time.perf_counter() - t0, tuple(per))

"""The OnDemandPrefetcher under interrupts: an injection at every eval-breaker point of one request.

The streaming sweep (``injection_sweep.py``) does this for the Prefetcher;
this module applies the same injector (``_runtime/inject.py``), the same
effects and the same contract to the on-demand object, whose consumer call
is a request for an index, not the next item of a stream.

Each *scenario* builds a real ``OnDemandPrefetcher`` over real arrays,
brings it to one situation, and makes one call there:

* ``hit``: the index asked for is ready in a slot (speculated earlier);
* ``miss``: no slot holds it: the caller fetches it itself, on its own
  thread (the source runs inside the call, in an interruptible frame);
* ``join``: a worker is fetching it: the call parks until that fetch lands
  (a helper thread lets the fetch finish once the caller is parked);
* ``error``: it was fetched on speculation and failed: the call raises it;
* ``close``: the call is ``close()`` itself.

For each point the call passes, the situation is built again and one effect
performed there: ``raise`` (a raw KeyboardInterrupt), ``signal`` (the
installed SIGINT handler, what Ctrl-C does), ``close`` (a signal handler's
``close(timeout=1)`` on the interrupted thread) or ``finalize`` (the
abandoned prefetcher's finalizer, on a worker). Then the contract: the
interrupt reached the caller; no lock is held (gate, kernel, close lock);
unless closed, the prefetcher still serves the asked-for index and others,
each with its own data (a request whose outcome was produced before the
interrupt returns it; none is lost, none answers with another index's
data, no wakeup is lost: the drain does not time out); close joins every
thread, none stuck.

What it does not cover: the caller's own demand fetch runs the source, which
is the caller's code, not ours, and is not injected into (its interruption
becomes that request's error, checked in tests/test_predict_live.py); a
second caller thread racing the first.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Iterable

import numpy as np

from .._prefetcher.consumer import GET
from .._prefetcher.errors import PrefetcherClosed, PrefetchTimeout
from .._prefetcher.lifecycle import thread_count
from .._prefetcher.ondemand import OnDemandPrefetcher
from .._prefetcher.predictors import Predictor
from .._runtime import inject as _inject
from .injection_sweep import InjectionRun, Problem, SweepReport, _is_worker, _lock_free
from .injection_sweep import _check as _streaming_check  # locks, then close: bounded, nothing stuck or left

__all__ = ["OnDemandScenario", "default_scenarios", "points", "run_point", "sweep"]

SHAPE = (3,)
N = 40
SITUATIONS = ("hit", "miss", "join", "error", "close")
#: The index each situation asks for (speculated by the harness's predictor where it must be).
ASKED = {"hit": 5, "miss": 30, "join": 7, "error": 9, "close": 5}
OCCURRENCES = 3


class _Boom(Exception):
    """The source error at index 9."""


class _Source:
    """Item i is ``[i, i, i]``; 9 raises; a worker's fetch of ``gate_at`` waits for ``gate``."""

    def __init__(self, gate_at: int = -1):
        self.gate_at = gate_at
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.reads: list[int] = []  # every index read, by anyone (list.append: atomic)

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> np.ndarray:
        self.reads.append(i)
        if i == self.gate_at and "worker" in threading.current_thread().name:
            self.entered.set()
            self.gate.wait(10)
        if i == 9:
            raise _Boom(i)
        return np.full(SHAPE, i, np.float32)


class _Fixed(Predictor):
    name = "fixed"

    def __init__(self, proposals: list[int]):
        super().__init__(N)
        self.proposals = proposals

    def predict(self, depth: int) -> list[int]:
        return self.proposals[:depth]


@dataclass(frozen=True)
class OnDemandScenario:
    situation: str
    api: str = "get"
    #: False: a ``thread_safe=False`` source with a request timeout, so a miss takes the source lock
    #: with a deadline (``waits.wait_gate``) and the sweep injects inside that wait too.
    thread_safe: bool = True
    #: The asked-for index's outcome was taken by a call whose hand-out was interrupted and put back
    #: (``unreturn``): the call under test moves it to the stash (``take_returned``) and returns it.
    put_back: bool = False

    def __str__(self) -> str:
        return (f"{self.api}@{self.situation}" + ("" if self.thread_safe else "-unsafe")
                + (" put_back" if self.put_back else ""))


class _Setup:
    """An OnDemandPrefetcher brought to a scenario's situation.

    With ``workers_fetch`` (the ``finalize`` effect, which lands on a worker),
    the call also has the predictor propose index 11, and waits until a
    worker has fetched it: the workers' fetch cycle is then part of the call.
    """

    def __init__(self, sc: OnDemandScenario, workers_fetch: bool = False):
        self.sc = sc
        self.baseline = thread_count()
        self.asked = ASKED[sc.situation]
        self.source = _Source(gate_at=self.asked if sc.situation == "join" else -1)
        speculate = [] if sc.situation == "miss" else [self.asked]
        self.predictor = _Fixed(speculate)
        self.pf = OnDemandPrefetcher(self.source, capacity=3, workers=2, predict=self.predictor, close_timeout=5.0,
                                     thread_safe=sc.thread_safe, timeout=None if sc.thread_safe else 30.0)
        self.core = self.pf._core
        self.call_over = False
        self.lease = None  # (the streaming contract check releases a lease left held; there are none here)
        self.pf.get(0)  # the predictor's proposal is speculated
        self.predictor.proposals = []
        want = {"hit": "READY", "error": "FAILED", "join": "FILLING"}.get(sc.situation)
        if want is not None:
            self._wait(lambda: (want, self.asked) in self.pf.slots())
        self.workers_fetch = workers_fetch
        rt = self.core.rt
        if sc.situation == "join":
            self._wait(self.source.entered.is_set)
            threading.Thread(target=self._release_when_parked, daemon=True).start()
        else:
            if sc.put_back:
                if sc.situation not in ("hit", "miss"):
                    raise ValueError(f"put_back needs a hit or a miss, not {sc.situation!r}")
                core = self.core
                core.unreturn(core.consume(GET, (self.asked, None), time.monotonic() + 5))
            self._wait(lambda: all(rt.is_parked(w) or rt.is_done(w) for w in self.core.worker_ids))

    def _wait(self, cond: Callable[[], bool], seconds: float = 5.0) -> None:
        deadline = time.monotonic() + seconds
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"setup: {self.sc} did not reach its situation")
            time.sleep(0.0005)

    def _release_when_parked(self) -> None:
        rt, c = self.core.rt, self.core.consumer
        deadline = time.monotonic() + 5
        while not rt.is_parked(c) and not self.call_over and not self.pf.closed and time.monotonic() < deadline:
            time.sleep(0.0005)
        self.source.gate.set()

    def call(self) -> Any:
        if not self.workers_fetch:
            return self._call()
        self.predictor.proposals = [11]
        try:
            return self._call()
        finally:
            deadline = time.monotonic() + 5
            while ("READY", 11) not in self.pf.slots() and not self.pf.closed and time.monotonic() < deadline:
                time.sleep(0.0005)

    def _call(self) -> Any:
        pf = self.pf
        if self.sc.situation == "close":
            return pf.close(timeout=5)
        if self.sc.api == "copy":
            out = np.empty(SHAPE, np.float32)
            pf.copy_into(self.asked, out, timeout=5)
            return out
        return pf.get(self.asked, timeout=5)


def _check(setup: _Setup, closed_by_effect: bool) -> list[str]:
    """The contract after a run: no lock held; unless closed, every index served with its own data; then the
    streaming sweep's close checks (bounded, nothing stuck, every thread gone)."""
    problems: list[str] = []
    core, pf = setup.core, setup.pf
    box_lock = pf._source_box.lock
    locks_free = all(_lock_free(lock) for lock in (core.gate, core.close_lock, core.rt._lock)
                     + (() if box_lock is None else (box_lock,)))
    if locks_free and not (closed_by_effect or pf.closed):
        # Another index first: whatever the interrupted call left behind must be settled, not handed to it.
        for i in (20, setup.asked, 1, 2, 9, setup.asked):
            try:
                got = pf.get(i, timeout=5)
                if i == 9 or not (got == i).all():
                    problems.append(f"get({i}) answered {got!r}")
            except _Boom:
                if i != 9:
                    problems.append(f"get({i}) raised the error of index 9")
            except PrefetchTimeout:
                problems.append(f"get({i}) timed out (a lost wakeup, or a hang)")
                break
            except BaseException as e:  # noqa: BLE001 - every other exception is a finding
                problems.append(f"get({i}) raised {type(e).__name__}: {e}")
                break
    return problems + _streaming_check(setup, closed_by_effect=True)


def _files() -> frozenset[str]:
    """safeprefetch's own files, less the harnesses and the injector."""
    import safeprefetch

    from . import injection_sweep

    skip = {os.path.realpath(p) for p in (__file__, injection_sweep.__file__, _inject.__file__)}
    return frozenset(f for f in _inject.package_files(safeprefetch) if f not in skip)


def points(sc: OnDemandScenario, effect: str = "raise") -> list[_inject.InjectionPoint]:
    """The eval-breaker points the scenario's call executes (its workers' fetch cycle, for ``finalize``)."""
    held: list[_Setup] = []
    threads = effect == "finalize"

    def prepare() -> Callable[[], Any]:
        setup = _Setup(sc, workers_fetch=threads)
        held.append(setup)
        return setup.call

    try:
        return _inject.record_points(None, _files(), threads=threads, prepare=prepare,
                                     thread_filter=_is_worker if threads else None, occurrences=OCCURRENCES)
    finally:
        for setup in held:
            setup.call_over = True
            setup.source.gate.set()
            _check(setup, closed_by_effect=False)


def run_point(sc: OnDemandScenario, point: _inject.InjectionPoint, effect: str) -> InjectionRun:
    """Build the scenario again, run its call with ``effect`` injected at ``point``, and check the contract."""
    held: list[_Setup] = []
    threads = effect == "finalize"

    def handler_close(frame: FrameType) -> None:
        held[0].pf.close(timeout=1.0)

    def finalize(frame: FrameType) -> None:
        held[0].pf._finalizer()  # what the garbage collector would run

    effects: dict[str, Callable[[FrameType], None]] = {
        "raise": _inject.raise_keyboard_interrupt, "signal": _inject.deliver_sigint,
        "close": handler_close, "finalize": finalize}

    def prepare() -> Callable[[], Any]:
        setup = _Setup(sc, workers_fetch=threads)
        held.append(setup)
        return setup.call

    res = _inject.run_with_injection(None, point, effects[effect], _files(), threads=threads, prepare=prepare,
                                     thread_filter=_is_worker if threads else None)
    setup = held[0]
    problems: list[str] = []
    try:
        setup.call_over = True
        outcome = _outcome(setup, res)
        if not outcome[1]:
            problems.append(outcome[0])
        if effect in ("raise", "signal") and res.fired and outcome[0] != "KeyboardInterrupt":
            problems.append(f"the interrupt was not raised by the call (it ended with: {outcome[0]})")
        if effect == "close" and res.fired and not setup.pf.closed:
            problems.append("close() from the handler did not close the prefetcher")
        if sc.put_back and res.raised and isinstance(res.result, KeyboardInterrupt) and not setup.pf.closed:
            problems += _put_back_kept(setup)
        if effect == "finalize" and res.fired:
            deadline = time.monotonic() + 6
            while True:  # not ``while cond:``: its back-edge escapes the try on 3.13 (lowlevel.escaping_back_edges)
                if setup.core.closed or time.monotonic() >= deadline:
                    break
                time.sleep(0.001)
            if not setup.core.closed:
                problems.append("the finalizer's close did not finish (a worker is stuck)")
        problems += _check(setup, closed_by_effect=res.fired and effect in ("close", "finalize"))
    finally:
        setup.source.gate.set()
    return InjectionRun(res.fired, outcome[0], tuple(problems))


def _put_back_kept(setup: _Setup) -> list[str]:
    """After an interrupted call under a put-back scenario: the outcome put back (and whatever the
    interrupted call made of it) is still there, so the next request for its index is answered without
    reading the source again. A request for another index first would drop it, by design: ask this one."""
    asked, reads = setup.asked, setup.source.reads
    before = reads.count(asked)
    try:
        got = setup.pf.get(asked, timeout=5)
    except BaseException as e:  # noqa: BLE001 - a finding
        return [f"get({asked}) after the interrupted call raised {type(e).__name__}: {e}"]
    problems = [] if (got == asked).all() else [f"get({asked}) answered {got!r}"]
    if reads.count(asked) != before:
        problems.append(f"the outcome put back for index {asked} was lost: the source was read for it again")
    return problems


def _outcome(setup: _Setup, res: _inject.InjectionOutcome) -> tuple[str, bool]:
    """How the call ended, and whether that is an allowed ending for it."""
    if not res.raised:
        value = res.result
        if isinstance(value, np.ndarray):
            ok = (value == setup.asked).all() and setup.asked != 9
            return f"batch {int(value[0])}", bool(ok)
        return "returned", setup.sc.situation == "close"
    e = res.result
    if isinstance(e, _Boom):
        return "source error", setup.asked == 9
    if isinstance(e, (KeyboardInterrupt, PrefetcherClosed)):
        return type(e).__name__, True
    return f"the call raised {type(e).__name__}: {e}", False


def default_scenarios(full: bool = False) -> list[tuple[OnDemandScenario, str]]:
    """(scenario, effect) pairs: a CI-sized set by default, every combination with ``full``."""
    if full:
        out = [(OnDemandScenario(s, api), effect) for s in SITUATIONS for api in ("get", "copy")
               for effect in ("raise", "signal", "close") if not (s == "close" and api == "copy")]
        out += [(OnDemandScenario(s, api, put_back=True), effect) for s in ("hit", "miss") for api in ("get", "copy")
                for effect in ("raise", "signal", "close")]
        return out + [(OnDemandScenario("hit"), "finalize"), (OnDemandScenario("join"), "finalize")]
    return [(OnDemandScenario("hit"), "raise"), (OnDemandScenario("miss"), "raise"),
            (OnDemandScenario("join"), "raise"), (OnDemandScenario("error", "copy"), "raise"),
            (OnDemandScenario("close"), "raise"), (OnDemandScenario("hit", "copy"), "signal"),
            (OnDemandScenario("join"), "signal"), (OnDemandScenario("miss"), "close"),
            (OnDemandScenario("miss", thread_safe=False), "raise"),
            (OnDemandScenario("hit"), "finalize"), (OnDemandScenario("hit", "copy", put_back=True), "raise")]


def sweep(pairs: Iterable[tuple[OnDemandScenario, str]], progress: Callable[[str], None] | None = None) -> SweepReport:
    with _inject.python_sigint():  # a Ctrl-C to inject, even in a process started with SIGINT ignored
        return _sweep(pairs, progress)


def _sweep(pairs: Iterable[tuple[OnDemandScenario, str]], progress: Callable[[str], None] | None) -> SweepReport:
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
        if progress is not None:
            progress(f"{sc} / {effect}: {len(pts)} points")
    return SweepReport(runs, fired, tuple(problems), time.perf_counter() - t0, tuple(per))


def main(argv: list[str] | None = None) -> int:
    """``python -m safeprefetch._harness.injection_ondemand [--full]``: the sweep, a line per scenario."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    report = sweep(default_scenarios(full="--full" in args), progress=print)
    print(f"{report.runs} injections, {report.fired} reached, {len(report.problems)} problems, "
          f"{report.seconds:.1f} s")
    for p in report.problems:
        print(f"  {p.scenario} / {p.effect} at {p.point}: {p.what}")
    return 1 if report.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

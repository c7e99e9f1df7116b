"""The OnDemandPrefetcher's own threaded code under the controlled scheduler.

What it checks, and why
-----------------------
``prefetcher_code.py`` runs the streaming Prefetcher's real code under
:func:`safeprefetch.interleavings.check`; this does the same for the
on-demand object, whose trusted base is larger: the caller's demand fetch
runs the source on the caller's own thread, workers fetch speculatively in
parallel, a ``thread_safe=False`` source is shared through a lock that a
miss waits for with its request's deadline, and a request for an index a
worker is fetching parks in the kernel until that fetch lands. The
injection sweep (``injection_ondemand.py``) puts an interrupt at every line
of one request, on one schedule; it cannot race a second caller against the
first, nor try the orders in which a worker's fetch, a miss and a close can
meet. Here every schedule within each scenario's preemption bound is
explored, with the real ``OnDemandPrefetcher``, its runtime, workers,
reaper and finalizer, unmodified:

* requests that hit a speculated slot, join a worker's fetch in flight, or
  miss; two caller threads at once; ``copy_into``;
* a source error on a speculative fetch (raised by the request for its
  index only) and on a demand fetch;
* ``thread_safe=False``: a miss behind a worker's speculative call that
  holds the source lock, with a timeout (``PrefetchTimeout`` at the
  deadline, the same request served once the call returns) and without;
* ``get(timeout=)`` while a worker's fetch is in flight;
* close from another thread, an abandoned prefetcher (the finalizer and the
  reaper), a signal handler's ``close()`` on the caller, the finalizer on a
  worker, and Ctrl-C (a SIGINT handler that raises, delivered while the
  caller is blocked in any wait) with the caller retrying the request.

Each body asserts what the docs promise: every request answers with its own
index's data, or with the documented exception for that request, and then
the same request succeeds; close ends every thread. A scenario passes when
no schedule within its bound shows a violation (deadlock, lost wakeup,
uncaught exception, failed assertion, leaked thread, hang). And the suite
can fail: :data:`REGRESSIONS` puts back two bugs, one at a time (the
thread-unsafe miss that waited past its timeout, which the fifth hardening
round fixed, and a join that ignores its timeout), and each must be a
deadlock with a trace.

Virtual time: the scheduler's clock moves only when no thread can, so a
worker that holds the source lock "for one second" (:class:`HeldSource`)
holds it across every step the other threads can take meanwhile.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .._interleave.check import Interrupt
from .._interleave.report import CodeCheckResult
from .._prefetcher.api import _abandon
from .._prefetcher.errors import PrefetcherClosed, PrefetchTimeout
from .._prefetcher.ondemand import OnDemandPrefetcher
from .._prefetcher.ondemand_core import OnDemandCore
from .._prefetcher.ondemand_serve import ServeSide
from .._prefetcher.waits import wait_gate
from ..models import _predictive_protocol as Q
from .injection_ondemand import _Fixed as Fixed  # proposes the same indices at every request
from .prefetcher_code import ALLOW_ALIVE, _armed, _ctrl_c, _current, _finalizer, _signal_close, checked, patches

__all__ = ["REGRESSIONS", "SCENARIOS", "SLOW_SCENARIOS", "CodeScenario", "HeldSource", "check_regression",
           "check_scenario", "run_suite"]

#: The source's length: indices 0..5.
N = 6


class SourceError(Exception):
    """The error a :class:`TileSource` raises for its failing indices."""


class TileSource:
    """Item ``i`` is ``[i, i]``; the indices in ``fail`` raise :class:`SourceError`."""

    def __init__(self, fail: tuple[int, ...] = ()):
        self.fail = fail

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> np.ndarray:
        if i in self.fail:
            raise SourceError(i)
        return np.full(2, i, np.int64)


class HeldSource(TileSource):
    """A worker's fetch of index 1 waits for ``go`` (at most ``hold`` seconds of virtual time; None: no limit)."""

    def __init__(self, hold: float | None = None):
        super().__init__()
        self.go = threading.Event()
        self.hold = hold

    def __getitem__(self, i: int) -> np.ndarray:
        if i == 1 and "worker" in threading.current_thread().name:
            self.go.wait(self.hold)
        return super().__getitem__(i)


def _open(source: Any = None, **options: Any) -> OnDemandPrefetcher:
    options.setdefault("capacity", 2)
    options.setdefault("workers", 1)
    options.setdefault("predict", "sequential")
    pf = OnDemandPrefetcher(TileSource() if source is None else source, shape=(2,), dtype=np.int64,
                            close_timeout=5.0, name="pf", **options)
    _current[0] = pf
    return pf


def _shut(pf: OnDemandPrefetcher) -> None:
    _current[0] = None  # first: an aborted schedule must not leave its prefetcher to the next one
    pf.close()


def _got(pf: OnDemandPrefetcher, i: int, **options: Any) -> None:
    """Request ``i``, which must answer with its own data."""
    a = pf.get(i, **options)
    assert a.shape == (2,) and int(a[0]) == i and int(a[1]) == i, f"get({i}) returned {a}"


# -- the bodies -----------------------------------------------------------------------------------

def hits_and_misses() -> None:
    """Sequential speculation: each request is a hit, a join of a fetch in flight, or a miss."""
    pf = _open()
    try:
        for i in (0, 1, 2):
            _got(pf, i)
    finally:
        _shut(pf)


def copy_into() -> None:
    pf = _open()
    out = np.empty(2, np.int64)
    try:
        for i in (0, 1, 3):
            pf.copy_into(i, out)
            assert int(out[0]) == i and int(out[1]) == i, f"copy_into({i}) gave {out}"
    finally:
        _shut(pf)


def two_callers() -> None:
    """Two threads request at once: the gate serializes them, each gets its own indices."""
    pf = _open()
    try:
        other = threading.Thread(target=lambda: [_got(pf, i) for i in (3, 4)], name="caller2")
        other.start()
        for i in (0, 1):
            _got(pf, i)
        other.join()
    finally:
        _shut(pf)


def _until_closed(pf: OnDemandPrefetcher) -> None:
    """Requests 0, 1 and 2, each served with its own data unless the prefetcher is closed meanwhile."""
    try:
        for i in (0, 1, 2):
            _got(pf, i)
    except PrefetcherClosed:
        pass


def close_from_another_thread() -> None:
    pf = _open()
    closer = threading.Thread(target=pf.close, name="closer")
    closer.start()
    try:
        _until_closed(pf)
    finally:
        _shut(pf)
        closer.join()


def _error_at(index: int, speculated: list[int]) -> Callable[[], None]:
    """A body whose fetch of ``index`` fails: the request for ``index`` raises the source's error (the same
    class), once; the requests around it are served."""
    def body() -> None:
        pf = _open(TileSource(fail=(index,)), predict=Fixed(speculated))
        try:
            _got(pf, 0)
            try:
                pf.get(index)
            except SourceError:
                pass
            else:
                raise AssertionError(f"the failed fetch of {index} was not raised by get({index})")
            _got(pf, 2)
        finally:
            _shut(pf)
    return body


#: A speculative fetch of 1 fails (raised by the request for 1 only); a miss's fetch of 3 fails.
speculative_error = _error_at(1, [1])
demand_error = _error_at(3, [1])


def join_with_timeout() -> None:
    """get(1, timeout=) while a worker's fetch of 1 waits: PrefetchTimeout, then the same request is served."""
    src = HeldSource()
    pf = _open(src, predict=Fixed([1]))
    try:
        _got(pf, 0)
        try:
            _got(pf, 1, timeout=0.5)
        except PrefetchTimeout:
            pass
        src.go.set()
        _got(pf, 1)
        _got(pf, 2)
    finally:
        src.go.set()
        _shut(pf)


def thread_unsafe_with_timeout() -> None:
    """thread_safe=False, timeout=0.5: a miss behind the worker's held speculative call may time out
    (the source lock's wait); once that call returns, the same request is served."""
    src = HeldSource()
    pf = _open(src, thread_safe=False, timeout=0.5, predict=Fixed([1]))
    try:
        for i in (0, 3):
            try:
                _got(pf, i)
            except PrefetchTimeout:
                src.go.set()
                _got(pf, i, timeout=None)
        src.go.set()
        _got(pf, 1)
    finally:
        src.go.set()
        _shut(pf)


def _retrying(pf: OnDemandPrefetcher, indices: tuple[int, ...]) -> None:
    """Request each index until it is served, through any KeyboardInterrupt."""
    _armed[0] = True
    try:
        for i in indices:
            done = False
            while not done:  # no enclosing try: a Ctrl-C on the back-edge could escape one (test_backedges)
                try:
                    _got(pf, i)
                    done = True
                except KeyboardInterrupt:
                    pass  # the same request again: it must be served
    finally:
        _armed[0] = False


def ctrl_c_while_waiting() -> None:
    pf = _open(predict=Fixed([1, 2]))
    try:
        _retrying(pf, (0, 1, 3))
    finally:
        _shut(pf)


def thread_unsafe_ctrl_c() -> None:
    """thread_safe=False, no timeout: the worker's speculative call holds the source lock for a second;
    Ctrl-C while a miss waits for that lock raises from the request, and the same request is then served."""
    pf = _open(HeldSource(hold=1.0), thread_safe=False, predict=Fixed([1]))
    try:
        _retrying(pf, (0, 3, 1))
    finally:
        _shut(pf)


def under_interrupts() -> None:
    """Requests while a signal handler or a finalizer may close the prefetcher at any point."""
    pf = _open(predict=Fixed([1, 2]))
    try:
        _until_closed(pf)
    finally:
        _shut(pf)


def abandoned() -> None:
    """Walked away from after one request: the finalizer asks the reaper, which closes it."""
    pf = _open(predict=Fixed([1, 2]))
    _got(pf, 0)
    core = pf._core
    _current[0] = None
    del pf
    _abandon(core)  # what the finalizer does
    for th in list(core.threads):
        th.join()  # the reaper's close ends every worker


# -- interrupts (the streaming harness's handlers, acting on the prefetcher in ``_current``) -------

def _interrupts(kind: str | None) -> tuple:
    if kind == "signal":
        return (Interrupt(_signal_close, threads="main", name="signal handler: close(timeout=1.0)"),)
    if kind == "ctrl_c":
        return (Interrupt(_ctrl_c, threads="main", times=2, when="blocked", name="Ctrl-C"),)
    if kind == "finalizer":
        return (Interrupt(_finalizer, threads=("safeprefetch-pf-worker0",),
                          name="finalizer: close the abandoned prefetcher"),)
    return ()


@dataclass(frozen=True)
class CodeScenario:
    """One way of using an OnDemandPrefetcher, checked under every schedule within ``bound`` preemptions."""

    name: str
    body: Callable[[], None]
    interrupt: str | None = None
    bound: int = 1


#: The CI-sized sweep: every schedule within one preemption, a few seconds each on one core.
SCENARIOS: tuple[CodeScenario, ...] = (
    CodeScenario("hits-and-misses", hits_and_misses),
    CodeScenario("copy-into", copy_into),
    CodeScenario("speculative-error", speculative_error),
    CodeScenario("demand-error", demand_error),
    CodeScenario("join-with-timeout", join_with_timeout),
    CodeScenario("thread-unsafe-with-timeout", thread_unsafe_with_timeout),
    CodeScenario("thread-unsafe-ctrl-c", thread_unsafe_ctrl_c, "ctrl_c"),
    CodeScenario("ctrl-c-while-waiting", ctrl_c_while_waiting, "ctrl_c"),
    CodeScenario("abandoned", abandoned),
    CodeScenario("two-callers", two_callers, bound=0),
    CodeScenario("close-from-another-thread", close_from_another_thread, bound=0),
    CodeScenario("signal-handler-close", under_interrupts, "signal", bound=0),
    CodeScenario("finalizer-on-worker", under_interrupts, "finalizer", bound=0),
)

#: The bigger sweep (``-m slow``): the scenarios with more threads at one preemption, and bound 2.
SLOW_SCENARIOS: tuple[CodeScenario, ...] = (
    CodeScenario("two-callers-b1", two_callers),
    CodeScenario("close-from-another-thread-b1", close_from_another_thread),
    CodeScenario("signal-handler-close-b1", under_interrupts, "signal"),
    CodeScenario("finalizer-on-worker-b1", under_interrupts, "finalizer"),
    CodeScenario("hits-and-misses-b2", hits_and_misses, bound=2),
    CodeScenario("thread-unsafe-with-timeout-b2", thread_unsafe_with_timeout, bound=2),
    CodeScenario("thread-unsafe-ctrl-c-b2", thread_unsafe_ctrl_c, "ctrl_c", bound=2),
    CodeScenario("ctrl-c-while-waiting-b2", ctrl_c_while_waiting, "ctrl_c", bound=2),
)


def check_scenario(sc: CodeScenario, **options: Any) -> CodeCheckResult:
    """Check one scenario of today's OnDemandPrefetcher under every schedule within its bound."""
    opts = dict(preemption_bound=sc.bound, reduce="none", interrupts=_interrupts(sc.interrupt),
                allow_alive=ALLOW_ALIVE, lock_release="any", patch_globals=patches(), name=sc.name)
    opts.update(options)
    return checked(sc.body, **opts)


# -- what can fail: two regressions, put back ------------------------------------------------------

def _fill_without_deadline(self: Any, box: Any, index: int, k: int, deadline: float | None = None,
                           speculative: bool = False) -> str:
    """The code before the fifth hardening round: a ``thread_safe=False`` miss took the source lock with
    no deadline, so its ``timeout=`` did not bound the wait for a worker's speculative call. (The eighth
    round's re-check of ``closing`` under the lock is kept: only the deadline is put back.)"""
    if box.lock is not None:
        wait_gate(box.lock, None, deliver_deferred=False)
        with box.lock:
            if speculative and self._closing():
                return Q.FETCH_OK
            return self._fill_unlocked(box, index, k)
    return self._fill_unlocked(box, index, k)


def _wait_in_flight_forever(self: Any, deadline: float | None) -> None:
    """A join of a worker's fetch in flight that ignores the request's timeout."""
    _REAL_WAIT_IN_FLIGHT(self, None)


_REAL_WAIT_IN_FLIGHT = ServeSide._wait_in_flight

#: (what, the class and method put back, its replacement, the scenario that must then fail).
REGRESSIONS: tuple[tuple[str, type, str, Callable[..., Any], str], ...] = (
    ("a thread-unsafe miss that waits past its timeout", OnDemandCore, "_fill", _fill_without_deadline,
     "thread-unsafe-with-timeout"),
    ("a join of a fetch in flight that ignores its timeout", ServeSide, "_wait_in_flight", _wait_in_flight_forever,
     "join-with-timeout"),
)


def check_regression(what: str) -> CodeCheckResult:
    """Check the scenario of regression ``what`` (see :data:`REGRESSIONS`) with that regression put back."""
    _what, cls, method, replacement, scenario = next(r for r in REGRESSIONS if r[0] == what)
    real = cls.__dict__[method]
    setattr(cls, method, replacement)
    try:
        return check_scenario(next(s for s in SCENARIOS if s.name == scenario))
    finally:
        setattr(cls, method, real)


def run_suite(scenarios: tuple[CodeScenario, ...] = SCENARIOS,
              regressions: tuple[tuple, ...] = REGRESSIONS) -> list[dict[str, Any]]:
    """Every scenario and every regression: one row each (for the docs and ``bench-code``)."""
    rows = []
    for sc in scenarios:
        r = check_scenario(sc)
        rows.append({"what": sc.name, "expect": "ok", "verdict": r.verdict, "schedules": r.states,
                     "bound": sc.bound, "covered": r.bound_covered, "seconds": r.seconds})
    for what, *_rest in regressions:
        r = check_regression(what)
        rows.append({"what": f"regression: {what}", "expect": "deadlock", "verdict": r.verdict,
                     "schedules": r.states, "bound": 1, "covered": r.bound_covered, "seconds": r.seconds,
                     "trace": len(r.trace)})
    return rows

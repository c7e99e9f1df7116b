"""Fault scenarios for the live Prefetcher: one generator, one runner, one verdict.

A :class:`~.soak_scenarios.Scenario` (``soak_scenarios.py``: the generator
and the sources that inject each fault) is a random configuration plus at
most one fault: a source error at a chosen stream position, a close (from
the consumer, or from another thread after a delay), an abandonment
mid-stream, a slow or bursty consumer, a slow source, small ``get``
timeouts. :func:`run_scenario` runs it on real threads with real arrays (and
real ``.npy`` files for the file sources) and checks what the contract
promises:

* no hang: a watchdog closes the prefetcher after ``HANG_SECONDS``; if it
  has to, the scenario hung;
* exactly-once delivery: every batch is filled with its source index, so a
  lost, duplicated, reordered or corrupted batch is visible in the data;
* the injected error reaches the consumer, as the same object, at its
  position (ordered), and the stream ends after it;
* use after close raises ``PrefetcherClosed``;
* every thread is joined: ``thread_count()`` is back to where it
  was, after close, and after an abandoned prefetcher is garbage-collected.

A run is four steps: build the prefetcher (a BaseException from its first
read is a verdict of its own), consume the stream as the scenario says
(:func:`_consume`, which records what arrived and how the stream ended),
stop it (close and check that it stays closed, or abandon it to its
finalizer), and judge (:func:`_verdict`). :func:`soak` runs many seeded
scenarios and counts every breach; the Hypothesis tests run the same
scenarios one by one, so the soak is the test suite at scale.
"""

from __future__ import annotations

import gc
import random
import threading
import time
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .._dsl.model import delivery_violation
from .._prefetcher.lifecycle import thread_count
from .._prefetcher.api import Prefetcher
from .._prefetcher.errors import LeaseHeld, PrefetcherClosed, PrefetchTimeout
from .soak_scenarios import (SHAPE, InjectedBaseError, InjectedError, Scenario, expected_plan, make_source,
                             random_scenario, scenario_files)

__all__ = ["HANG_SECONDS", "ScenarioResult", "SoakReport", "run_scenario", "soak"]

#: A scenario moves at most a dozen batches with millisecond delays and
#: normally finishes in well under 0.1 s; ten seconds of no progress is a hang
#: on any machine, even a loaded 2-core one.
HANG_SECONDS = 10.0


@dataclass(frozen=True)
class ScenarioResult:
    """What happened, and every way it broke the contract (all zero / False when it did not)."""

    scenario: Scenario
    #: Source indices delivered, in order.
    delivered: tuple[int, ...]
    seconds: float
    hang: bool = False
    lost: int = 0
    duplicate: int = 0
    out_of_order: int = 0
    corrupt: int = 0
    error_lost: bool = False
    error_wrong: bool = False
    use_after_close: bool = False
    leaked_threads: int = 0
    timeouts: int = 0
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems



# --------------------------------------------------------------------------
# The consumer side
# --------------------------------------------------------------------------

_END = object()


def _one(pf: Prefetcher, sc: Scenario, out: np.ndarray | None, timeout: float | None) -> Any:
    """One batch through the scenario's consumer API: returns (array copy) or _END."""
    if sc.consume == "iter":
        try:
            return next(pf)
        except StopIteration:
            return _END
    if sc.consume == "get":
        try:
            return pf.get(timeout=timeout)
        except StopIteration:
            return _END
    if sc.consume == "copy":
        if not pf.copy_prefetched(out, timeout=timeout):
            return _END
        return out.copy()
    try:
        lease = pf.lease(timeout=timeout)
    except StopIteration:
        return _END
    with lease as view:
        if view.flags.writeable:
            raise AssertionError("a lease gave a writeable view")
        return view.copy()


def _pace(sc: Scenario, n: int) -> None:
    if sc.pace == "slow" and sc.consumer_ms:
        time.sleep(sc.consumer_ms / 1000)
    elif sc.pace == "bursty" and sc.consumer_ms and n % 4 == 3:
        time.sleep(3 * sc.consumer_ms / 1000)


@dataclass
class _Seen:
    """What the consumer saw: the batches, the errors, and how the stream ended."""

    #: Source indices received, in order.
    received: list[int] = field(default_factory=list)
    corrupt: int = 0
    timeouts: int = 0
    #: Where the consumer caught the injected error (None: it did not).
    error_pos: int | None = None
    #: The caught error was the right one.
    error_ok: bool = True
    unexpected: str | None = None
    #: How the loop ended: the end of the stream, PrefetcherClosed, or the scenario's own stop.
    ended: bool = False
    closed_seen: bool = False
    stopped: bool = False
    #: A call after close did not raise PrefetcherClosed.
    use_after_close: bool = False


# --------------------------------------------------------------------------
# Running a scenario
# --------------------------------------------------------------------------


def run_scenario(sc: Scenario, workdir: str | Path | None = None) -> ScenarioResult:
    """Run one scenario on real threads and check the contract. Never raises for a contract breach."""
    files = scenario_files(workdir)
    baseline = thread_count()
    t0 = time.perf_counter()
    plan = expected_plan(sc)
    problems: list[str] = []
    source, fault_src = make_source(sc, files, plan)
    expect_base_in_ctor = (sc.error == "base" and sc.error_pos == 0 and not sc.explicit_shape)
    try:
        pf = Prefetcher(source, **_prefetcher_kwargs(sc))
    except InjectedBaseError as e:
        ok = expect_base_in_ctor and e is fault_src.raised
        fault_src.raised = None
        del e
        return _failed_in_constructor(sc, ok, baseline, t0)
    if expect_base_in_ctor:
        problems.append("a BaseException from the first read did not propagate from the constructor")
    if sc.source != "iter" and list(pf.indices) != plan:
        problems.append(f"index plan {list(pf.indices)} differs from {plan}")

    dog, fired = _start_watchdog(pf)
    closer = None
    if sc.stop == "thread":
        closer = threading.Thread(target=_close_later, args=(pf, sc.close_delay_ms / 1000), daemon=True)
        closer.start()
    out = np.empty(pf.shape or SHAPE, pf.dtype or sc.dtype) if sc.consume == "copy" else None
    timeout = sc.timeout_ms / 1000 if sc.timeout_ms else None
    seen = _consume(pf, sc, fault_src, out, timeout)
    if closer is not None:
        closer.join(HANG_SECONDS)
    if (seen.stopped and sc.stop == "close") or seen.closed_seen or seen.ended:
        seen.use_after_close = _usable_after_close(pf, sc, out, timeout)
    del pf  # the last reference: an abandoned prefetcher (or one an error left open) is closed by its finalizer
    dog.cancel()
    dog.join()
    leaked = _leaked(baseline)
    return _verdict(sc, plan, seen, problems, fired.is_set(), leaked, time.perf_counter() - t0)


def _prefetcher_kwargs(sc: Scenario) -> dict[str, Any]:
    """The Prefetcher's arguments for the scenario: sizes, ordering, shape and budget, index plan."""
    shape_kw: dict[str, Any] = {}
    if sc.explicit_shape:
        shape_kw = {"shape": SHAPE, "dtype": sc.dtype}
    if sc.memory_slots:
        shape_kw["memory_budget"] = sc.memory_slots * int(np.prod(SHAPE)) * np.dtype(sc.dtype).itemsize
    kwargs = dict(capacity=sc.capacity, workers=sc.workers, ordered=sc.ordered, **shape_kw)
    if sc.plan == "shard":
        kwargs.update(rank=sc.rank, world_size=sc.world_size)
    elif sc.plan == "shuffle":
        kwargs.update(shuffle=True, seed=sc.seed, epoch=sc.epoch)
    return kwargs


def _failed_in_constructor(sc: Scenario, ok: bool, baseline: int, t0: float) -> ScenarioResult:
    """The verdict when the constructor raised the source's BaseException (``ok``: it was the one expected)."""
    seconds = time.perf_counter() - t0
    leaked = _leaked(baseline)
    probs = ([] if ok else ["the constructor raised an unexpected BaseException"]) + (
        [f"{leaked} threads leaked"] if leaked else [])
    return ScenarioResult(sc, (), seconds, leaked_threads=leaked, error_wrong=not ok, problems=tuple(probs))


def _start_watchdog(pf: Prefetcher) -> tuple[threading.Timer, threading.Event]:
    """A timer that closes the prefetcher after ``HANG_SECONDS`` and sets the event (it holds only a weakref)."""
    ref = weakref.ref(pf)
    fired = threading.Event()

    def watchdog() -> None:
        p = ref()
        if p is not None:
            fired.set()
            p.close(timeout=1.0)
        del p

    dog = threading.Timer(HANG_SECONDS, watchdog)
    dog.daemon = True
    dog.start()
    return dog, fired


def _consume(pf: Prefetcher, sc: Scenario, fault_src: Any, out: np.ndarray | None,
             timeout: float | None) -> _Seen:
    """Read the stream through the scenario's API until it ends, fails twice, closes, or the scenario stops."""
    seen = _Seen()
    received = seen.received
    after_error = False
    while True:
        if sc.stop in ("close", "abandon") and len(received) == sc.stop_after and not after_error:
            seen.stopped = True
            break
        try:
            batch = _one(pf, sc, out, timeout)
        except PrefetchTimeout:
            seen.timeouts += 1
            continue
        except PrefetcherClosed:
            seen.closed_seen = True
            break
        except (InjectedError, InjectedBaseError) as e:
            if after_error or seen.error_pos is not None:
                seen.unexpected = f"a second error after the stream failed: {e!r}"
                break
            seen.error_pos = len(received)
            seen.error_ok = e is fault_src.raised and sc.error in ("exception", "base")
            fault_src.raised = None
            after_error = True
            del e
            continue
        except (ValueError, TypeError) as e:
            if after_error or seen.error_pos is not None:
                seen.unexpected = f"a second error after the stream failed: {e!r}"
                break
            seen.error_pos = len(received)
            want = {"shape": (ValueError, "expected shape"), "dtype": (ValueError, "dtype"),
                    "type": (TypeError, "expected a numpy array")}.get(sc.error)
            seen.error_ok = want is not None and isinstance(e, want[0]) and want[1] in str(e)
            after_error = True
            del e
            continue
        except LeaseHeld as e:
            seen.unexpected = f"LeaseHeld with no lease outstanding: {e}"
            del e
            break
        except Exception as e:  # noqa: BLE001 - a breach to report, not to crash the soak
            seen.unexpected = f"unexpected {type(e).__name__}: {e}"
            del e
            break
        if batch is _END:
            seen.ended = True
            break
        if after_error:
            seen.unexpected = "a batch arrived after the source error"
            break
        idx = int(batch.flat[0]) if batch.size else -1
        if batch.shape != SHAPE or str(batch.dtype) != sc.dtype or not (batch == idx).all():
            seen.corrupt += 1
        received.append(idx)
        del batch
        _pace(sc, len(received))
    return seen


def _usable_after_close(pf: Prefetcher, sc: Scenario, out: np.ndarray | None, timeout: float | None) -> bool:
    """Close the prefetcher; whether a call after that failed to raise PrefetcherClosed."""
    pf.close()
    try:
        _one(pf, sc, out, timeout)
        return True
    except PrefetcherClosed:
        return False


# --------------------------------------------------------------------------
# The verdict
# --------------------------------------------------------------------------


def _verdict(sc: Scenario, plan: list[int], seen: _Seen, problems: list[str], hang: bool, leaked: int,
             seconds: float) -> ScenarioResult:
    """Every way the run broke the contract, counted and described (``problems`` holds the setup's)."""
    if hang:
        problems.append("hang: the watchdog had to close the prefetcher")
    if seen.unexpected:
        problems.append(seen.unexpected)
    if seen.corrupt:
        problems.append(f"{seen.corrupt} batches with the wrong contents")
    if seen.use_after_close:
        problems.append("a call after close did not raise PrefetcherClosed")
    if leaked:
        problems.append(f"{leaked} threads leaked")
    error_lost, error_wrong = _error_verdict(sc, seen, problems)
    lost = duplicate = out_of_order = 0
    bad = _delivery_violation(sc, plan, seen)
    if bad:
        kind, message = bad
        problems.append(f"{kind}: {message}")
        lost = int(kind == "lost_item")
        duplicate = int(kind == "duplicate_item")
        out_of_order = int(kind == "out_of_order")
    return ScenarioResult(sc, tuple(seen.received), seconds, hang, lost, duplicate, out_of_order, seen.corrupt,
                          error_lost, error_wrong, seen.use_after_close, leaked, seen.timeouts, tuple(problems))


def _error_verdict(sc: Scenario, seen: _Seen, problems: list[str]) -> tuple[bool, bool]:
    """(error lost, error wrong): the injected error reached the consumer, the right one, at its position."""
    injected = sc.error != "none"
    if seen.error_pos is not None:
        if not injected:
            problems.append("an error was raised but none was injected")
            return False, True
        if not seen.error_ok:
            problems.append(f"the wrong error was raised for a {sc.error!r} fault")
            return False, True
        if sc.ordered and seen.error_pos != sc.error_pos:
            problems.append(f"the error arrived at position {seen.error_pos}, injected at {sc.error_pos}")
            return False, True
    elif injected and seen.ended:
        problems.append(f"the {sc.error!r} fault at position {sc.error_pos} never reached the consumer")
        return True, False
    return False, False


def _delivery_violation(sc: Scenario, plan: list[int], seen: _Seen) -> tuple[str, str] | None:
    """The first way the batches received break exactly-once (in-order) delivery, or None."""
    received = seen.received
    injected = sc.error != "none"
    fault = plan[sc.error_pos] if injected else None
    if injected and seen.error_pos is not None:
        want = plan[:sc.error_pos] if sc.ordered else [i for i in plan if i != fault]
        bad = delivery_violation(want, received, sc.ordered, complete=sc.ordered)
    elif seen.ended:
        bad = delivery_violation(plan, received, sc.ordered, complete=True)
    else:  # stopped, closed or hung: a prefix (ordered) or a subset, no duplicates
        bad = delivery_violation([i for i in plan if i != fault], received, sc.ordered, complete=False)
    if seen.stopped and len(received) != sc.stop_after:
        bad = bad or ("lost_item", f"stopped after {len(received)} batches, not {sc.stop_after}")
    return bad


def _close_later(pf: Prefetcher, delay: float) -> None:
    time.sleep(delay)
    pf.close()


def _leaked(baseline: int) -> int:
    """Threads above the baseline, after giving an abandoned prefetcher's finalizer its chance.

    An abandoned prefetcher is normally freed by reference counting the moment
    it is dropped; a full ``gc.collect()`` (slow with a big heap) is only needed,
    and only run, when something kept it alive in a reference cycle.
    """
    if thread_count() <= baseline:
        return 0
    gc.collect()
    deadline = time.monotonic() + 2.0
    while thread_count() > baseline and time.monotonic() < deadline:
        time.sleep(0.005)
    return max(0, thread_count() - baseline)


# --------------------------------------------------------------------------
# The soak: many scenarios, counted
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class SoakReport:
    """Counts over a soak run. ``ok`` when every failure count is zero."""

    scenarios: int
    hangs: int
    lost: int
    duplicate: int
    out_of_order: int
    corrupt: int
    errors_lost: int
    errors_wrong: int
    use_after_close: int
    leaked_threads: int
    failed: int
    errors_injected: int
    closes: int
    abandons: int
    timeouts_raised: int
    seconds: float
    seed: int
    #: The first few failing scenarios, with what went wrong.
    failures: tuple[dict, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def to_json(self) -> dict:
        d = asdict(self)
        d["ok"] = self.ok
        return d


def soak(scenarios: int, seed: int = 0, workdir: str | Path | None = None,
         progress: Callable[[int, int, float], None] | None = None) -> SoakReport:
    """Run ``scenarios`` random scenarios (seeded) and count every contract breach."""
    rng = random.Random(seed)
    counts = dict(hangs=0, lost=0, duplicate=0, out_of_order=0, corrupt=0, errors_lost=0, errors_wrong=0,
                  use_after_close=0, leaked_threads=0, failed=0, errors_injected=0, closes=0, abandons=0,
                  timeouts_raised=0)
    failures: list[dict] = []
    t0 = time.perf_counter()
    last = t0
    for n in range(scenarios):
        sc = random_scenario(rng)
        r = run_scenario(sc, workdir)
        counts["hangs"] += r.hang
        counts["lost"] += r.lost
        counts["duplicate"] += r.duplicate
        counts["out_of_order"] += r.out_of_order
        counts["corrupt"] += r.corrupt
        counts["errors_lost"] += r.error_lost
        counts["errors_wrong"] += r.error_wrong
        counts["use_after_close"] += r.use_after_close
        counts["leaked_threads"] += r.leaked_threads
        counts["errors_injected"] += sc.error != "none"
        counts["closes"] += sc.stop in ("close", "thread")
        counts["abandons"] += sc.stop == "abandon"
        counts["timeouts_raised"] += r.timeouts
        if not r.ok:
            counts["failed"] += 1
            if len(failures) < 10:
                failures.append({"scenario": asdict(sc), "problems": list(r.problems)})
        now = time.perf_counter()
        if progress is not None and now - last >= 1.0:
            progress(n + 1, scenarios, now - t0)
            last = now
    return SoakReport(scenarios=scenarios, seconds=time.perf_counter() - t0, seed=seed, failures=tuple(failures),
                      **counts)


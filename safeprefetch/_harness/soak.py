"""Fault scenarios for the live Prefetcher: one generator, one runner, one verdict.

A :class:`Scenario` is a random configuration (source kind, capacity,
workers, ordering, index plan, how the consumer reads) plus at most one
fault: a source error at a chosen stream position (an Exception, a
BaseException, a batch of the wrong shape or dtype, a non-array), a close
(from the consumer, or from another thread after a delay), an abandonment
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

The same :func:`generate` drives the Hypothesis tests (``pick`` draws from
Hypothesis) and ``python -m safeprefetch soak`` (``pick`` draws from a
seeded ``random.Random``), so the soak is the test suite at scale.
"""

from __future__ import annotations

import atexit
import gc
import random
import shutil
import tempfile
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

__all__ = ["HANG_SECONDS", "Scenario", "ScenarioResult", "SoakReport", "generate", "random_scenario",
           "run_scenario", "soak"]

#: A scenario moves at most a dozen batches with millisecond delays and
#: normally finishes in well under 0.1 s; ten seconds of no progress is a hang
#: on any machine, even a loaded 2-core one.
HANG_SECONDS = 10.0

SOURCES = ("list", "iter", "map", "fetch_into", "npy", "npy_into")
PLANS = ("seq", "shard", "shuffle")
CONSUMERS = ("iter", "get", "copy", "lease")
ERRORS = ("none", "exception", "base", "shape", "dtype", "type")
STOPS = ("none", "close", "thread", "abandon")
PACES = ("fast", "slow", "bursty")
SHAPE = (2, 3)
DTYPES = ("int64", "float32")


@dataclass(frozen=True)
class Scenario:
    """One random configuration and at most one fault. Every field is plain data (JSON-able)."""

    source: str = "list"
    items: int = 4
    capacity: int = 2
    workers: int = 1
    ordered: bool = True
    plan: str = "seq"
    rank: int = 0
    world_size: int = 1
    seed: int = 0
    epoch: int = 0
    dtype: str = "int64"
    explicit_shape: bool = False
    memory_slots: int = 0          # >0: memory_budget = this many batches
    consume: str = "iter"
    error: str = "none"
    error_pos: int = -1            # stream position of the fault
    stop: str = "none"
    stop_after: int = 0            # batches received before the consumer closes or abandons
    close_delay_ms: int = 0        # stop="thread": another thread closes after this delay
    fetch_ms: int = 0              # source latency per item
    pace: str = "fast"
    consumer_ms: int = 0
    timeout_ms: int = 0            # >0: get/copy/lease with this timeout, retried on PrefetchTimeout


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


class InjectedError(Exception):
    """The Exception a scenario's source raises at its fault position."""

    def __init__(self, index: int):
        super().__init__(f"injected failure at source index {index}")
        self.index = index


class InjectedBaseError(BaseException):
    """A BaseException (not an Exception) raised by the source, like SystemExit."""

    def __init__(self, index: int):
        super().__init__(f"injected BaseException at source index {index}")
        self.index = index


# --------------------------------------------------------------------------
# Generating scenarios
# --------------------------------------------------------------------------


def generate(pick: Callable[[int, int], int], **fixed: Any) -> Scenario:
    """Build a scenario from ``pick(lo, hi)`` (an int in [lo, hi]); ``fixed`` fields are not drawn."""

    def choose(name: str, options: tuple, lo: int = 0) -> Any:
        if name in fixed:
            return fixed[name]
        return options[pick(lo, len(options) - 1)]

    def number(name: str, lo: int, hi: int) -> int:
        if name in fixed:
            return fixed[name]
        return pick(lo, max(lo, hi))

    source = choose("source", SOURCES)
    items = number("items", 0, 12)
    capacity = number("capacity", 1, 4)
    workers = 1 if source == "iter" else number("workers", 1, 3)
    ordered = choose("ordered", (True, False))
    plan = "seq" if source == "iter" else choose("plan", PLANS)
    world_size = number("world_size", 2, 3) if plan == "shard" else 1
    rank = number("rank", 0, world_size - 1) if plan == "shard" else 0
    seed = number("seed", 0, 1000) if plan == "shuffle" else 0
    epoch = number("epoch", 0, 3) if plan == "shuffle" else 0
    positions = len(range(rank, items, world_size))
    dtype = choose("dtype", DTYPES)
    consume = choose("consume", CONSUMERS)
    # Half the scenarios have no fault, so complete clean streams stay common.
    if "error" in fixed:
        error = fixed["error"] if positions else "none"
    else:
        error = ERRORS[pick(1, len(ERRORS) - 1)] if positions and pick(0, 1) else "none"
    if source in ("fetch_into", "npy_into") and error in ("shape", "dtype", "type"):
        error = "exception"  # fetch_into writes into the slot: it cannot return a wrong array
    error_pos = number("error_pos", 0, positions - 1) if error != "none" else -1
    explicit_shape = bool(choose("explicit_shape", (False, True)))
    if source == "fetch_into" or (error in ("shape", "dtype") and error_pos == 0):
        explicit_shape = True  # no __getitem__; or: a wrong first batch would define the shape
    memory_slots = number("memory_slots", 0, 3)
    stop = fixed["stop"] if "stop" in fixed else (STOPS[pick(1, len(STOPS) - 1)] if pick(0, 1) else "none")
    stop_after = number("stop_after", 0, positions) if stop in ("close", "abandon") else 0
    close_delay_ms = number("close_delay_ms", 0, 20) if stop == "thread" else 0
    fetch_ms = number("fetch_ms", 0, 2)
    pace = choose("pace", PACES)
    consumer_ms = number("consumer_ms", 0, 2) if pace != "fast" else 0
    timeout_ms = number("timeout_ms", 0, 3) if consume != "iter" else 0
    return Scenario(source, items, capacity, workers, ordered, plan, rank, world_size, seed, epoch, dtype,
                    explicit_shape, memory_slots, consume, error, error_pos, stop, stop_after, close_delay_ms,
                    fetch_ms, pace, consumer_ms, timeout_ms)


def random_scenario(rng: random.Random, **fixed: Any) -> Scenario:
    return generate(rng.randint, **fixed)


# --------------------------------------------------------------------------
# Sources with a fault
# --------------------------------------------------------------------------


class _Files:
    """Real .npy files, one per (index, dtype), written on first use and shared by scenarios."""

    def __init__(self, root: Path):
        self.root = root
        self.lock = threading.Lock()

    def path(self, index: int, dtype: str, shape: tuple[int, ...] = SHAPE) -> Path:
        p = self.root / f"{dtype}-{'x'.join(map(str, shape))}-{index:04d}.npy"
        if not p.exists():
            with self.lock:
                if not p.exists():
                    tmp = p.with_suffix(f".tmp{threading.get_ident()}.npy")
                    np.save(tmp, np.full(shape, index, dtype=dtype))
                    tmp.replace(p)
        return p


_default_files: _Files | None = None


def _files(workdir: str | Path | None) -> _Files:
    global _default_files
    if workdir is not None:
        return _Files(Path(workdir))
    if _default_files is None:
        root = Path(tempfile.mkdtemp(prefix="safeprefetch-soak-"))
        atexit.register(shutil.rmtree, root, True)
        _default_files = _Files(root)
    return _default_files


class _Fault:
    """The shared part of every scenario source: latency, and the fault at one source index."""

    def __init__(self, sc: Scenario, files: _Files, fault_index: int):
        self.sc = sc
        self.files = files
        self.fault_index = fault_index
        self.raised: BaseException | None = None

    def item(self, index: int) -> Any:
        sc = self.sc
        if sc.fetch_ms:
            time.sleep(sc.fetch_ms / 1000)
        if index == self.fault_index:
            if sc.error == "exception":
                self.raised = InjectedError(index)
                raise self.raised
            if sc.error == "base":
                self.raised = InjectedBaseError(index)
                raise self.raised
            if sc.error == "shape":
                return np.full(SHAPE[::-1], index, dtype=sc.dtype)
            if sc.error == "dtype":
                return np.full(SHAPE, index, dtype="int32")
            if sc.error == "type":
                return np.full(SHAPE, index, dtype=sc.dtype).tolist()
        if sc.source in ("npy", "npy_into"):
            return np.load(self.files.path(index, sc.dtype))
        return np.full(SHAPE, index, dtype=sc.dtype)


class _MapSource(_Fault):
    def __init__(self, sc, files, fault_index):
        super().__init__(sc, files, fault_index)

    def __len__(self) -> int:
        return self.sc.items

    def __getitem__(self, index: int) -> Any:
        return self.item(index)


class _IntoSource(_Fault):
    """fetch_into only (no __getitem__): needs shape= and dtype=."""

    def __len__(self) -> int:
        return self.sc.items

    def fetch_into(self, index: int, out: np.ndarray) -> None:
        sc = self.sc
        if sc.source == "npy_into" and index != self.fault_index:
            if sc.fetch_ms:
                time.sleep(sc.fetch_ms / 1000)
            np.copyto(out, np.load(self.files.path(index, sc.dtype), mmap_mode="r"))
            return
        np.copyto(out, self.item(index))


class _NpyIntoSource(_IntoSource):
    """fetch_into, plus __getitem__ so the prefetcher can learn the shape from the first file."""

    def __getitem__(self, index: int) -> Any:
        return self.item(index)


def _make_source(sc: Scenario, files: _Files, plan: list[int]) -> Any:
    fault = plan[sc.error_pos] if sc.error != "none" else -1
    if sc.source in ("list", "iter"):
        src = _MapSource(sc, files, fault)
        if sc.source == "list":
            return src, src  # map-style, served by __getitem__

        def gen():
            for i in range(sc.items):
                yield src.item(i)
        return gen(), src
    if sc.source in ("map", "npy"):
        src = _MapSource(sc, files, fault)
        return src, src
    if sc.source == "fetch_into":
        src = _IntoSource(sc, files, fault)
        return src, src
    src = _NpyIntoSource(sc, files, fault)
    return src, src


def expected_plan(sc: Scenario) -> list[int]:
    """The source index at each stream position (an independent statement of the plan)."""
    if sc.source == "iter":
        return list(range(sc.items))
    order = list(range(sc.items))
    if sc.plan == "shuffle":
        order = [int(x) for x in np.random.default_rng([sc.seed, sc.epoch]).permutation(sc.items)]
    return order[sc.rank::sc.world_size]


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


def run_scenario(sc: Scenario, workdir: str | Path | None = None) -> ScenarioResult:
    """Run one scenario on real threads and check the contract. Never raises for a contract breach."""
    files = _files(workdir)
    baseline = thread_count()
    t0 = time.perf_counter()
    plan = expected_plan(sc)
    problems: list[str] = []
    source, fault_src = _make_source(sc, files, plan)
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

    received: list[int] = []
    corrupt = 0
    timeouts = 0
    hang = False
    error_pos: int | None = None     # where the consumer caught the injected error
    error_ok = True                  # the caught error was the right one
    unexpected: str | None = None
    ended = closed_seen = stopped = False
    use_after_close = False

    expect_base_in_ctor = (sc.error == "base" and sc.error_pos == 0 and not sc.explicit_shape)
    try:
        pf = Prefetcher(source, **kwargs)
    except InjectedBaseError as e:
        ok = expect_base_in_ctor and e is fault_src.raised
        fault_src.raised = None
        del e
        seconds = time.perf_counter() - t0
        leaked = _leaked(baseline)
        probs = ([] if ok else ["the constructor raised an unexpected BaseException"]) + (
            [f"{leaked} threads leaked"] if leaked else [])
        return ScenarioResult(sc, (), seconds, leaked_threads=leaked, error_wrong=not ok, problems=tuple(probs))
    if expect_base_in_ctor:
        problems.append("a BaseException from the first read did not propagate from the constructor")
    if sc.source != "iter" and list(pf.indices) != plan:
        problems.append(f"index plan {list(pf.indices)} differs from {plan}")

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
    closer = None
    if sc.stop == "thread":
        closer = threading.Thread(target=_close_later, args=(pf, sc.close_delay_ms / 1000), daemon=True)
        closer.start()

    out = np.empty(pf.shape or SHAPE, pf.dtype or sc.dtype) if sc.consume == "copy" else None
    timeout = sc.timeout_ms / 1000 if sc.timeout_ms else None
    after_error = False
    while True:
        if sc.stop in ("close", "abandon") and len(received) == sc.stop_after and not after_error:
            stopped = True
            break
        try:
            batch = _one(pf, sc, out, timeout)
        except PrefetchTimeout:
            timeouts += 1
            continue
        except PrefetcherClosed:
            closed_seen = True
            break
        except (InjectedError, InjectedBaseError) as e:
            if after_error or error_pos is not None:
                unexpected = f"a second error after the stream failed: {e!r}"
                break
            error_pos = len(received)
            error_ok = e is fault_src.raised and sc.error in ("exception", "base")
            fault_src.raised = None
            after_error = True
            del e
            continue
        except (ValueError, TypeError) as e:
            if after_error or error_pos is not None:
                unexpected = f"a second error after the stream failed: {e!r}"
                break
            error_pos = len(received)
            want = {"shape": (ValueError, "expected shape"), "dtype": (ValueError, "dtype"),
                    "type": (TypeError, "expected a numpy array")}.get(sc.error)
            error_ok = want is not None and isinstance(e, want[0]) and want[1] in str(e)
            after_error = True
            del e
            continue
        except LeaseHeld as e:
            unexpected = f"LeaseHeld with no lease outstanding: {e}"
            del e
            break
        except Exception as e:  # noqa: BLE001 - a breach to report, not to crash the soak
            unexpected = f"unexpected {type(e).__name__}: {e}"
            del e
            break
        if batch is _END:
            ended = True
            break
        if after_error:
            unexpected = "a batch arrived after the source error"
            break
        idx = int(batch.flat[0]) if batch.size else -1
        if batch.shape != SHAPE or str(batch.dtype) != sc.dtype or not (batch == idx).all():
            corrupt += 1
        received.append(idx)
        del batch
        _pace(sc, len(received))

    if stopped:
        if sc.stop == "close":
            pf.close()
            try:
                _one(pf, sc, out, timeout)
                use_after_close = True
            except PrefetcherClosed:
                pass
        else:
            del pf  # abandoned: the finalizer must close it
    if closer is not None:
        closer.join(HANG_SECONDS)
    if closed_seen or ended:
        pf.close()
        try:
            _one(pf, sc, out, timeout)
            use_after_close = True
        except PrefetcherClosed:
            pass
    if "pf" in locals():
        del pf
    dog.cancel()
    dog.join()
    hang = fired.is_set()
    leaked = _leaked(baseline)
    seconds = time.perf_counter() - t0

    # -- verdict --------------------------------------------------------------
    lost = duplicate = out_of_order = 0
    error_lost = error_wrong = False
    injected = sc.error != "none"
    if hang:
        problems.append("hang: the watchdog had to close the prefetcher")
    if unexpected:
        problems.append(unexpected)
    if corrupt:
        problems.append(f"{corrupt} batches with the wrong contents")
    if use_after_close:
        problems.append("a call after close did not raise PrefetcherClosed")
    if leaked:
        problems.append(f"{leaked} threads leaked")
    fault = plan[sc.error_pos] if injected else None
    if error_pos is not None:
        if not injected:
            error_wrong = True
            problems.append("an error was raised but none was injected")
        elif not error_ok:
            error_wrong = True
            problems.append(f"the wrong error was raised for a {sc.error!r} fault")
        elif sc.ordered and error_pos != sc.error_pos:
            error_wrong = True
            problems.append(f"the error arrived at position {error_pos}, injected at {sc.error_pos}")
    elif injected and ended:
        error_lost = True
        problems.append(f"the {sc.error!r} fault at position {sc.error_pos} never reached the consumer")

    if injected and error_pos is not None:
        want = plan[:sc.error_pos] if sc.ordered else [i for i in plan if i != fault]
        bad = delivery_violation(want, received, sc.ordered, complete=sc.ordered)
    elif ended:
        bad = delivery_violation(plan, received, sc.ordered, complete=True)
    else:  # stopped, closed or hung: a prefix (ordered) or a subset, no duplicates
        bad = delivery_violation([i for i in plan if i != fault], received, sc.ordered, complete=False)
    if stopped and len(received) != sc.stop_after:
        bad = bad or ("lost_item", f"stopped after {len(received)} batches, not {sc.stop_after}")
    if bad:
        kind, message = bad
        problems.append(f"{kind}: {message}")
        lost = int(kind == "lost_item")
        duplicate = int(kind == "duplicate_item")
        out_of_order = int(kind == "out_of_order")
    return ScenarioResult(sc, tuple(received), seconds, hang, lost, duplicate, out_of_order, corrupt, error_lost,
                          error_wrong, use_after_close, leaked, timeouts, tuple(problems))


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


"""``python -m safeprefetch bench live [--json] [--quick]``: does prefetching pay, and how close to the limit?

Every figure is measured in one run, side by side with baselines implemented
here, on the same data and the same machine, so each is a ratio that a noisy
shared machine cannot fake: both sides of a ratio saw the same neighbours.
Each figure is the median over repeats.

The baselines
-------------
* **queue.Queue** -- a plain prefetch thread: ``for i: q.put(source[i])`` into
  ``queue.Queue(depth)``, and ``q.get()`` in the loop.
* **BackgroundGenerator-style** -- the shape of ``prefetch_generator``'s
  ``BackgroundGenerator``: a daemon thread runs an iterator ahead into a
  ``Queue(max_prefetch)``, the consumer iterates. Written here from that
  description (its code is not copied).
* **torchdata** ``nodes.Prefetcher`` -- only when ``torchdata`` is importable;
  otherwise the figure says so.

The figures
-----------
* ``handoff`` -- per-item cost for trivial items (a 16-byte array) at depths
  1, 2 and 8: wall time, process CPU time and model steps per item. The
  Prefetcher runs its checked model (claim, fetch, take, release: four
  steps per item, fewer when the consumer takes runs) and hands the item
  over with ``copy_prefetched``; the queues pass a reference. Target: at
  most 1.5x queue.Queue.
* ``protocol_cpu`` -- the same model steps driven from one thread (no
  handoff at all), one batch per take and in consumer runs, against
  ``queue.Queue`` put + get in one thread: the protocol's CPU floor, which
  explains the handoff figures.
* ``overlap`` -- GIL-free producer and consumer work (``time.sleep``) of
  1-10 ms, with and without jitter in the producer's time (uniform in
  0.5x-1.5x its mean, seeded). Efficiency is the ideal time over the actual
  time, the ideal being ``max(sum of producer work, sum of consumer work)``
  as measured inside the work itself (so a sleep that overshoots is not
  counted against anyone). Default capacity (2). Target: at least 97%.
* ``copy_bandwidth`` -- ``copy_prefetched(out)`` against ``np.copyto(out, a)``
  on arrays of the same shape (the pool's), and against a queue.Queue
  prefetch thread with ``np.copyto`` in the loop. Target: at least 90%.
* ``memory`` -- peak traced memory (tracemalloc) of a prefetching run over
  ``(capacity + workers) x batch bytes``; and, in steady state with a
  ``fetch_into`` source, the growth of the traced peak and of
  ``sys.getallocatedblocks()`` per batch: zero batch-sized allocations means
  the peak does not grow by a batch, and nothing accumulates.
* ``file_io`` -- real reads of generated ``.npy`` shards, evicted from the
  page cache first (``posix_fadvise(DONTNEED)``) where the OS allows, with a
  GIL-free consumer step as long as a read: ``np.load`` in the loop against
  the Prefetcher's ``fetch_into`` (``NpyFiles``, 2 workers).
* ``autotune`` -- a slow, jittery source (mostly fast, sometimes 8x slower)
  against a steady consumer: the autotuned capacity's trajectory from 1, and
  the efficiency against fixed capacities 1 and 2.

Where a target is missed, docs/performance.md says why, measured.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import platform
import queue
import random
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from .._prefetcher.api import Prefetcher
from .._prefetcher.npy import NpyFiles

__all__ = ["Figure", "bench_live", "cmd_bench_live", "machine_info"]

TORCHDATA_SKIP = "skipped: torchdata not installed"


@dataclass
class Figure:
    """One measured figure: ours, the baselines, and the ratio to the main baseline."""

    #: Which figure ("handoff", "overlap", ...).
    figure: str
    #: What was varied (depth, work times, sizes).
    params: dict
    #: Unit of ``ours`` and the baselines.
    unit: str
    #: The Prefetcher's value (median over repeats).
    ours: float
    #: Name of the baseline the ratio is taken against.
    baseline: str
    #: Every baseline's value (a string when it was skipped).
    baselines: dict
    #: ``ours / baselines[baseline]`` (for efficiencies and bandwidths, higher is better).
    ratio: float
    #: The target, as text ("ratio <= 1.5"), or "" when there is none.
    target: str = ""
    #: Whether the target holds (None when there is none).
    met: bool | None = None
    #: Anything else measured alongside (CPU time, trajectories, raw repeats).
    extra: dict = field(default_factory=dict)


def machine_info() -> dict[str, Any]:
    """The CPU model, core count, Python and numpy versions."""
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "platform": platform.platform(),
            "switch_interval_s": sys.getswitchinterval()}


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


# --------------------------------------------------------------------------
# Baselines (written for this bench)
# --------------------------------------------------------------------------

_END = object()


def _queue_run(produce: Callable[[int], Any], n: int, depth: int, consume: Callable[[Any], None]) -> None:
    """The plain baseline: one producer thread putting ``produce(i)`` into Queue(depth)."""
    q: queue.Queue = queue.Queue(depth)

    def producer() -> None:
        for i in range(n):
            q.put(produce(i))
        q.put(_END)

    th = threading.Thread(target=producer, daemon=True)
    th.start()
    get = q.get
    while True:
        item = get()
        if item is _END:
            break
        consume(item)
    th.join()


class _Background:
    """BackgroundGenerator-style: a daemon thread runs ``iterable`` ahead into Queue(max_prefetch)."""

    def __init__(self, iterable: Any, max_prefetch: int):
        self._queue: queue.Queue = queue.Queue(max_prefetch)
        self._it = iter(iterable)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for item in self._it:
            self._queue.put(item)
        self._queue.put(_END)

    def __iter__(self) -> "_Background":
        return self

    def __next__(self) -> Any:
        item = self._queue.get()
        if item is _END:
            raise StopIteration
        return item


def _background_run(produce: Callable[[int], Any], n: int, depth: int, consume: Callable[[Any], None]) -> None:
    for item in _Background((produce(i) for i in range(n)), depth):
        consume(item)


def _torchdata_run(produce: Callable[[int], Any], n: int, depth: int, consume: Callable[[Any], None]) -> None:
    from torchdata.nodes import IterableWrapper, Loader
    from torchdata.nodes import Prefetcher as TDPrefetcher

    node = TDPrefetcher(IterableWrapper(produce(i) for i in range(n)), prefetch_factor=depth)
    for item in Loader(node):
        consume(item)


def _torchdata_available() -> bool:
    return importlib.util.find_spec("torchdata") is not None


BASELINES: dict[str, Callable] = {"queue.Queue": _queue_run, "BackgroundGenerator-style": _background_run}


# --------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------


class _Trivial:
    """n copies of one tiny array; ``fetch_into`` leaves the slot as it is (nothing to read)."""

    def __init__(self, n: int, shape: tuple[int, ...] = (4,), dtype: Any = np.float32):
        self.n = n
        self.item = np.zeros(shape, dtype)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        return self.item

    def fetch_into(self, i: int, out: np.ndarray) -> None:
        pass


class _Sleepy:
    """A source whose fetch of item i sleeps ``times[i]`` seconds (GIL-free) and records how long it took."""

    def __init__(self, times: list[float], shape: tuple[int, ...] = (16,)):
        self.times = times
        self.item = np.zeros(shape, np.float32)
        self.work = 0.0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.times)

    def _sleep(self, i: int) -> None:
        t0 = time.perf_counter()
        time.sleep(self.times[i])
        dt = time.perf_counter() - t0
        with self._lock:
            self.work += dt

    def __getitem__(self, i: int) -> np.ndarray:
        self._sleep(i)
        return self.item

    def fetch_into(self, i: int, out: np.ndarray) -> None:
        self._sleep(i)


# --------------------------------------------------------------------------
# handoff
# --------------------------------------------------------------------------


def _time_loop(run: Callable[[], None]) -> tuple[float, float]:
    """Wall and process-CPU seconds of ``run()``, with the cyclic GC paused (it is not what we measure)."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        run()
        return time.perf_counter() - t0, time.process_time() - c0
    finally:
        if was:
            gc.enable()


def _handoff_ours(n: int, depth: int, steps: list[int] | None = None) -> tuple[float, float]:
    src = _Trivial(n)
    out = np.empty_like(src.item)

    def run() -> None:
        with Prefetcher(src, capacity=depth, shape=src.item.shape, dtype=src.item.dtype) as pf:
            copy = pf.copy_prefetched
            while copy(out):
                pass
            if steps is not None:
                steps.append(pf._core.rt.steps)  # kernel steps the checked model took

    return _time_loop(run)


def _handoff_baseline(kind: str, n: int, depth: int) -> tuple[float, float]:
    src = _Trivial(n)
    runner = BASELINES[kind] if kind != "torchdata" else _torchdata_run

    def consume(item: Any) -> None:
        pass

    return _time_loop(lambda: runner(src.__getitem__, n, depth, consume))


def bench_handoff(n: int, repeats: int, depths: tuple[int, ...]) -> list[Figure]:
    figs = []
    _handoff_ours(min(n, 200), 2)  # warm-up: compile the machine, start-up paths
    for depth in depths:
        runs: dict[str, list[tuple[float, float]]] = {"ours": [], "queue.Queue": [],
                                                       "BackgroundGenerator-style": []}
        if _torchdata_available():
            runs["torchdata"] = []
        inflight: list[tuple[float, float]] = []
        steps: list[int] = []
        for _ in range(repeats):  # interleaved, so drift on the machine hits every side alike
            runs["ours"].append(_handoff_ours(n, depth, steps))
            for kind in runs:
                if kind != "ours":
                    runs[kind].append(_handoff_baseline(kind, n, depth))
            # queue.Queue(depth) holds depth batches plus the one its producer is blocked putting;
            # a Prefetcher slot counts every batch, so depth + 1 slots hold as many in flight.
            inflight.append(_handoff_ours(n, depth + 1))
        per = {k: _median([w for w, _c in v]) / n * 1e6 for k, v in runs.items()}
        cpu = {k: _median([c for _w, c in v]) / n * 1e6 for k, v in runs.items()}
        baselines: dict[str, Any] = {k: round(per[k], 2) for k in runs if k != "ours"}
        if "torchdata" not in runs:
            baselines["torchdata"] = TORCHDATA_SKIP
        ratio = per["ours"] / per["queue.Queue"]
        figs.append(Figure(
            "handoff", {"depth": depth, "items": n, "item": "float32[4]"}, "us/item", round(per["ours"], 2),
            "queue.Queue", baselines, round(ratio, 3), "ratio <= 1.5", ratio <= 1.5,
            {"cpu_us_per_item": {k: round(v, 2) for k, v in cpu.items()},
             "model_steps_per_item": round(_median([float(s) for s in steps]) / n, 3),
             "cpu_ratio": round(cpu["ours"] / cpu["queue.Queue"], 3),
             "ours_capacity_depth_plus_1_us_per_item": round(_median([w for w, _c in inflight]) / n * 1e6, 2),
             "ratio_capacity_depth_plus_1": round(_median([w for w, _c in inflight]) / n * 1e6 / per["queue.Queue"],
                                                  3),
             "repeats_us_per_item": {k: [round(w / n * 1e6, 2) for w, _c in v] for k, v in runs.items()}}))
    return figs


def bench_protocol_cpu(items: int, repeats: int, depth: int = 8) -> Figure:
    """The model's CPU cost per item with no thread handoff at all, against queue.Queue's put + get.

    One thread drives the Prefetcher's own compiled machine through the live
    runtime, as its threads do: a worker's "fetch into slot" (its fetch a
    no-op) chained with its next "claim index and slot", the consumer's
    "take next batch" and "release lease". Once a batch per take (four steps
    per item) and once in runs of ``depth`` (the "take up to" branch the live
    Prefetcher takes for a fast caller: two steps per item for the worker,
    two per run for the consumer). That is the protocol's floor: what the
    handoff figures cost beyond it is waking threads.
    """
    from .._runtime.kernel import Runtime
    from .._prefetcher.machine import machine_for as _machine

    m = _machine(depth, 1, items + 1, True, True, 0, depth)
    w, c = m.thread_names.index("worker0"), m.thread_names.index("consumer")

    def ours(run: int) -> float:
        take = f"take up to {run}"
        rt = Runtime(m, {"fetch": lambda ctx: "ok"})
        rt.step(w)  # the first claim
        t0 = time.perf_counter()
        for _ in range(items // run):
            for _ in range(run):
                rt.step(w, chain=True)  # fetch (a no-op) and publish, then claim the next slot
            rt.step(c, take)
            rt.step(c)  # release
        return time.perf_counter() - t0

    def base() -> float:
        q: queue.Queue = queue.Queue(depth)
        put, get = q.put, q.get
        t0 = time.perf_counter()
        for i in range(items):
            put(i)
            get()
        return time.perf_counter() - t0

    a = [ours(1) for _ in range(repeats)]
    r = [ours(depth - 1) for _ in range(repeats)]
    b = [base() for _ in range(repeats)]
    us, ur, ub = (_median(x) / items * 1e6 for x in (a, r, b))
    return Figure("protocol_cpu", {"items": items, "depth": depth, "threads": 1}, "us/item", round(us, 3),
                  "queue.Queue put + get", {"queue.Queue put + get": round(ub, 3)}, round(us / ub, 3), "", None,
                  {"model_steps_per_item": 4, "critical_sections_per_item": 3,
                   "runs": {"run": depth - 1, "us_per_item": round(ur, 3), "ratio": round(ur / ub, 3),
                            "model_steps_per_item": round(2 + 2 / (depth - 1), 3)}})


# --------------------------------------------------------------------------
# overlap
# --------------------------------------------------------------------------


def _work_times(n: int, mean: float, jitter: bool, seed: int) -> list[float]:
    if not jitter:
        return [mean] * n
    rng = random.Random(seed)
    return [mean * rng.uniform(0.5, 1.5) for _ in range(n)]


def _overlap_once(kind: str, ptimes: list[float], consumer: float, capacity: int) -> float:
    """Efficiency of one run: max(sum P, sum C) / wall, both sums measured inside the work."""
    src = _Sleepy(ptimes)
    n = len(ptimes)
    busy = [0.0]

    def compute() -> None:
        t0 = time.perf_counter()
        time.sleep(consumer)
        busy[0] += time.perf_counter() - t0

    t0 = time.perf_counter()
    if kind == "ours":
        out = np.empty_like(src.item)
        with Prefetcher(src, capacity=capacity, shape=src.item.shape, dtype=src.item.dtype) as pf:
            while pf.copy_prefetched(out):
                compute()
    else:
        runner = BASELINES[kind] if kind != "torchdata" else _torchdata_run
        runner(src.__getitem__, n, capacity, lambda item: compute())
    wall = time.perf_counter() - t0
    return max(src.work, busy[0]) / wall


def bench_overlap(n: int, repeats: int, pairs: list[tuple[float, float]], capacity: int = 2) -> list[Figure]:
    figs = []
    kinds = ["ours", "queue.Queue", "BackgroundGenerator-style"] + (["torchdata"] if _torchdata_available() else [])
    for k in kinds:  # warm-up, untimed: first-use costs (thread start-up paths, imports) are not overlap
        _overlap_once(k, [0.0005] * 8, 0.0005, capacity)
    for p_ms, c_ms in pairs:
        for jitter in (False, True):
            effs: dict[str, list[float]] = {k: [] for k in kinds}
            wider: list[float] = []
            for r in range(repeats):
                ptimes = _work_times(n, p_ms / 1000, jitter, seed=1000 * r + int(p_ms * 10))
                for k in kinds:
                    effs[k].append(_overlap_once(k, ptimes, c_ms / 1000, capacity))
                # queue.Queue(capacity) holds capacity batches plus the one its producer is putting;
                # a Prefetcher slot counts every batch, so capacity + 1 slots hold as many in flight.
                wider.append(_overlap_once("ours", ptimes, c_ms / 1000, capacity + 1))
            med = {k: _median(v) for k, v in effs.items()}
            baselines: dict[str, Any] = {k: round(100 * med[k], 2) for k in kinds if k != "ours"}
            if "torchdata" not in kinds:
                baselines["torchdata"] = TORCHDATA_SKIP
            figs.append(Figure(
                "overlap", {"producer_ms": p_ms, "consumer_ms": c_ms, "jitter": jitter, "capacity": capacity,
                            "items": n}, "% of ideal", round(100 * med["ours"], 2), "queue.Queue", baselines,
                round(med["ours"] / med["queue.Queue"], 3), "ours >= 97%", med["ours"] >= 0.97,
                {"repeats_percent": {k: [round(100 * x, 2) for x in v] for k, v in effs.items()},
                 "ours_capacity_plus_1_percent": round(100 * _median(wider), 2)}))
    return figs


# --------------------------------------------------------------------------
# copy_prefetched bandwidth
# --------------------------------------------------------------------------


class _TouchFirst(_Trivial):
    """Fills each slot once (the first ``capacity`` fetches), then leaves it: the copy is all that is measured.

    Filling once matters: an untouched ``np.empty`` slot reads as the kernel's shared zero
    page, which would make any copy out of it look faster than memory allows.
    """

    def __init__(self, n: int, shape: tuple[int, ...], capacity: int):
        super().__init__(n, shape)
        self.capacity = capacity

    def fetch_into(self, i: int, out: np.ndarray) -> None:
        if i < self.capacity:
            out.fill(1.0)


def bench_copy(sizes_mib: list[float], batches: int, repeats: int, capacity: int = 2) -> list[Figure]:
    """copy_prefetched against np.copyto, per batch size.

    The Prefetcher runs as usual (capacity 2): while the consumer copies out
    of one slot, a worker refills the other. Its source fills each slot once
    and then leaves it, so the copy is all there is to measure; the first
    ``capacity`` batches (the slots' first touch, i.e. page faults) are not
    timed. np.copyto copies from a pool of as many slots of the same shape,
    touched. A second baseline is what the usual way to prefetch gets on the
    same copies: a queue.Queue(capacity) prefetch thread handing those arrays
    over, the loop copying each out with np.copyto. Also in ``extra``: the
    fixed cost per call the difference implies, and the same with 16 batches
    already buffered (capacity 16, filled before the clock starts) against
    np.copyto over as many touched arrays (the same memory, so the same
    cache misses).
    """
    figs = []
    for mib in sizes_mib:
        count = int(mib * 2 ** 20) // 4
        shape = (count,)
        n = max(8, min(batches, int(512 // mib)))  # at most ~512 MiB of slots when all are buffered
        gb = n * count * 4 / 1e9
        # All buffered: as many batches as a large buffer holds (a step's cost grows with the
        # number of slots, which the state lists one by one).
        nb = min(n, 16)
        out = np.empty(shape, np.float32)
        pool = np.ones((capacity, *shape), np.float32)
        ours, base, queued, buffered, spread = [], [], [], [], []
        for _ in range(repeats):
            with Prefetcher(_TouchFirst(n + capacity, shape, capacity), capacity=capacity, shape=shape,
                            dtype=np.float32) as pf:
                for _ in range(capacity):
                    pf.copy_prefetched(out)
                t0 = time.perf_counter()
                while pf.copy_prefetched(out):
                    pass
                ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for i in range(n):
                np.copyto(out, pool[i % capacity])
            base.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            _queue_run(lambda i: pool[i % capacity], n, capacity, lambda a: np.copyto(out, a))
            queued.append(time.perf_counter() - t0)
            with Prefetcher(_TouchFirst(nb, shape, nb), capacity=nb, shape=shape, dtype=np.float32) as pf:
                deadline = time.monotonic() + 60
                while pf.ready < nb and time.monotonic() < deadline:
                    time.sleep(0.001)
                t0 = time.perf_counter()
                while pf.copy_prefetched(out):
                    pass
                buffered.append(time.perf_counter() - t0)
            big = np.ones((nb, *shape), np.float32)
            t0 = time.perf_counter()
            for i in range(nb):
                np.copyto(out, big[i])
            spread.append(time.perf_counter() - t0)
            del big
        del pool
        t_ours, t_base, t_queue = _median(ours), _median(base), _median(queued)
        t_buf, t_spread = _median(buffered), _median(spread)
        ratio = t_base / t_ours
        figs.append(Figure("copy_bandwidth", {"batch_mib": mib, "batches": n, "capacity": capacity},
                           "GB/s", round(gb / t_ours, 3), "np.copyto",
                           {"np.copyto": round(gb / t_base, 3), "queue.Queue + np.copyto": round(gb / t_queue, 3)},
                           round(ratio, 3), "ratio >= 0.9", ratio >= 0.9,
                           {"overhead_us_per_batch": round((t_ours - t_base) / n * 1e6, 1),
                            "queue_ratio": round(t_base / t_queue, 3),
                            "queue_overhead_us_per_batch": round((t_queue - t_base) / n * 1e6, 1),
                            "all_buffered_batches": nb,
                            "all_buffered_gb_s": round(gb * nb / n / t_buf, 3),
                            "all_buffered_ratio": round(t_spread / t_buf, 3)}))
    return figs


# --------------------------------------------------------------------------
# memory
# --------------------------------------------------------------------------


class _Fresh(_Trivial):
    """``__getitem__`` returns a new array each time (what most sources do); no ``fetch_into``."""

    fetch_into = None  # type: ignore[assignment]

    def __getitem__(self, i: int) -> np.ndarray:
        return np.full(self.item.shape, i, self.item.dtype)


class _Into(_Trivial):
    """Fills the slot in place: no allocation per batch."""

    def fetch_into(self, i: int, out: np.ndarray) -> None:
        out.fill(i)


def _traced(run: Callable[[], None]) -> int:
    """Peak traced bytes above what was live before ``run()``."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        run()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


#: Traced memory that is not batches: the run's Python objects (the model's state tuples,
#: which CPython keeps on a free list of up to 2000 per size after they die, frames, the
#: threads' bookkeeping). Measured at about 40-60 KiB here; the bound allows 128 KiB.
_OBJECT_SLACK = 128 * 1024


def bench_memory(batches: int, mib: float, capacity: int = 2, workers: int = 2) -> list[Figure]:
    count = int(mib * 2 ** 20) // 4
    shape = (count,)
    batch_bytes = count * 4
    bound = (capacity + workers) * batch_bytes
    figs = []
    for label, cls in (("__getitem__ (a new array per batch)", _Fresh), ("fetch_into", _Into)):
        src = cls(batches, shape)
        out = np.empty(shape, np.float32)

        def ours() -> None:
            with Prefetcher(src, capacity=capacity, workers=workers, shape=shape, dtype=np.float32) as pf:
                while pf.copy_prefetched(out):
                    pass

        def base() -> None:
            _queue_run(lambda i: np.full(shape, i, np.float32), batches, capacity, lambda item: None)

        ours()  # warm-up, untraced: compiles the model's machine for this shape once
        peak = _traced(ours)
        peak_q = _traced(base)
        # The out array and the first batch the constructor may read are the caller's, not the buffer's.
        figs.append(Figure(
            "memory", {"source": label, "capacity": capacity, "workers": workers, "batch_mib": mib,
                       "batches": batches}, "bytes (peak traced)", peak, "(capacity + workers) x batch bytes",
            {"(capacity + workers) x batch bytes": bound, "queue.Queue": peak_q}, round(peak / bound, 3),
            f"<= bound + {_OBJECT_SLACK // 1024} KiB", peak <= bound + _OBJECT_SLACK,
            {"peak_in_batches": round(peak / batch_bytes, 2), "queue_peak_in_batches": round(peak_q / batch_bytes, 2)}))
    # The steady-state check uses batches of at least 4 MiB: CPython keeps freed small tuples
    # (the model's states) on a free list of up to 2000 per size, which tracemalloc still
    # counts, so a few hundred KB of "growth" is that list filling up, not a batch.
    big = (max(count, 2 ** 20),)
    figs.append(_steady_state_allocations(batches, big, capacity, workers))
    return figs


def _steady_state_allocations(batches: int, shape: tuple[int, ...], capacity: int, workers: int) -> Figure:
    """With fetch_into, after warm-up: no batch-sized allocation, and nothing piles up.

    Transient Python objects (the model's state tuples, one per step) come and
    go; what must not happen is an array allocated per batch. Any such
    allocation lifts the traced peak by a whole batch, so the peak's growth
    over the steady state is compared with one batch; and the net change in
    ``sys.getallocatedblocks()`` must not grow with the number of batches.
    """
    batch_bytes = int(np.prod(shape)) * 4
    out = np.empty(shape, np.float32)
    warm = max(8, batches // 4)

    def measure(make_iter: Callable[[], Iterator[Callable[[], bool]]]) -> tuple[int, int, int]:
        gc.collect()
        tracemalloc.start()
        try:
            it = make_iter()
            step = next(it)
            for _ in range(warm):
                step()
            gc.collect()
            blocks0 = sys.getallocatedblocks()
            cur0 = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            k = 0
            while step():
                k += 1
            peak = tracemalloc.get_traced_memory()[1] - cur0
            gc.collect()
            blocks = sys.getallocatedblocks() - blocks0
            for _ in it:
                pass
            return peak, blocks, k
        finally:
            tracemalloc.stop()

    def ours() -> Iterator[Callable[[], bool]]:
        with Prefetcher(_Into(batches, shape), capacity=capacity, workers=workers, shape=shape,
                        dtype=np.float32) as pf:
            yield lambda: pf.copy_prefetched(out)

    def base() -> Iterator[Callable[[], bool]]:
        bg = _Background((np.full(shape, i, np.float32) for i in range(batches)), capacity)

        def step() -> bool:
            item = next(bg, None)
            if item is None:
                return False
            np.copyto(out, item)
            return True
        yield step

    peak_ours, blocks_ours, k = measure(ours)
    peak_base, blocks_base, _ = measure(base)
    # A batch-sized allocation would lift the peak by at least a batch; a per-batch leak
    # would add blocks in proportion to the batches (here at most a few dozen, whatever k is).
    met = peak_ours < batch_bytes and blocks_ours <= _BLOCK_SLACK
    return Figure("steady_state_allocations", {"source": "fetch_into", "batch_bytes": batch_bytes,
                                               "batches_measured": k, "warm_up": warm},
                  "bytes (traced peak growth over the steady state)", peak_ours, "BackgroundGenerator-style",
                  {"BackgroundGenerator-style": peak_base}, round(peak_ours / peak_base, 4) if peak_base else 0.0,
                  "growth < 1 batch, no net blocks", met,
                  {"peak_growth_in_batches": round(peak_ours / batch_bytes, 4),
                   "baseline_peak_growth_in_batches": round(peak_base / batch_bytes, 4),
                   "net_blocks": blocks_ours, "baseline_net_blocks": blocks_base})


#: Net allocated blocks tolerated across the steady state: caches warming up (a dict
#: resizing, an interned string) are not per-batch allocations.
_BLOCK_SLACK = 32


# --------------------------------------------------------------------------
# file I/O
# --------------------------------------------------------------------------


def _evict(paths: list[Path]) -> bool:
    """Drop the files from the page cache (no root needed for clean pages); False if the OS cannot."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def bench_file_io(directory: Path, shards: int, mib: float, repeats: int, workers: int = 2,
                  capacity: int = 4) -> list[Figure]:
    count = int(mib * 2 ** 20) // 4
    shape = (count,)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(shards):
        p = directory / f"shard{i:05d}.npy"
        np.save(p, rng.standard_normal(shape, dtype=np.float32))
        paths.append(p)
    # The consumer's step: GIL-free, about as long as a cold read (measured once).
    cold = _evict(paths)
    t0 = time.perf_counter()
    for p in paths[: max(1, shards // 4)]:
        np.load(p)
    read = (time.perf_counter() - t0) / max(1, shards // 4)
    step = read

    serial, ours, reads, reads_ours, effs = [], [], [], [], []
    out = np.empty(shape, np.float32)
    for _ in range(repeats):
        _evict(paths)
        t0 = time.perf_counter()
        for p in paths:
            x = np.load(p)
            time.sleep(step)
        serial.append(time.perf_counter() - t0)
        del x
        _evict(paths)
        busy = 0.0
        t0 = time.perf_counter()
        with Prefetcher(NpyFiles(paths), capacity=capacity, workers=workers, shape=shape,
                        dtype=np.float32) as pf:
            while True:
                a = time.perf_counter()
                if not pf.copy_prefetched(out):
                    break
                time.sleep(step)
                busy += time.perf_counter() - a  # the consumer's own time: its copy and its step
        wall = time.perf_counter() - t0
        ours.append(wall)
        # Overlap efficiency: the best any prefetcher could do with these reads and this loop.
        effs.append(max(pf.stats.worker_fetch_seconds / workers, busy) / wall)
        # Pure read throughput (no consumer step), both ways.
        _evict(paths)
        t0 = time.perf_counter()
        for p in paths:
            np.load(p)
        reads.append(time.perf_counter() - t0)
        _evict(paths)
        t0 = time.perf_counter()
        with Prefetcher(NpyFiles(paths), capacity=capacity, workers=workers, shape=shape,
                        dtype=np.float32) as pf:
            while pf.copy_prefetched(out):
                pass
        reads_ours.append(time.perf_counter() - t0)
    mb = shards * count * 4 / 1e6
    s, o = _median(serial), _median(ours)
    r, ro = _median(reads), _median(reads_ours)
    params = {"shards": shards, "shard_mib": mib, "workers": workers, "capacity": capacity,
              "page_cache_evicted": cold, "consumer_step_ms": round(step * 1000, 3)}
    return [
        Figure("file_io", {**params, "loop": "read + GIL-free step"}, "s per shard", round(o / shards, 6),
               "np.load in the loop", {"np.load in the loop": round(s / shards, 6)}, round(o / s, 3),
               "", None, {"speedup": round(s / o, 3),
                          "overlap_efficiency_percent": round(100 * _median(effs), 2)}),
        Figure("file_io", {**params, "loop": "read only"}, "MB/s", round(mb / ro, 1), "np.load in the loop",
               {"np.load in the loop": round(mb / r, 1)}, round(r / ro, 3), "", None),
    ]


# --------------------------------------------------------------------------
# autotune
# --------------------------------------------------------------------------


class _Jittery(_Sleepy):
    """Mostly fast, sometimes ``slow_factor`` times slower (seeded): the kind of source a buffer must absorb."""

    def __init__(self, n: int, mean_fast: float, slow_every: int, slow_factor: float, seed: int):
        rng = random.Random(seed)
        times = [mean_fast * (slow_factor if rng.random() < 1 / slow_every else rng.uniform(0.5, 1.5))
                 for _ in range(n)]
        super().__init__(times)


def bench_autotune(n: int, repeats: int, consumer_ms: float = 4.0, workers: int = 2) -> list[Figure]:
    # Two workers fetching 3 ms on average, one in eight fetches 8x slower: the source is fast
    # enough on average (about 2.4 ms per batch with two workers, against 4 ms of compute), but a
    # slow fetch stalls a small buffer.
    fast_ms, every, factor = 2.0, 8, 8.0
    results: dict[str, list[float]] = {"autotune": [], "capacity=1": [], "capacity=2": [], "capacity=8": []}
    finals, trajectories = [], []
    for r in range(repeats):
        for label in results:
            src = _Jittery(n, fast_ms / 1000, every, factor, seed=r)
            busy = 0.0
            out = np.empty_like(src.item)
            kw: dict[str, Any] = ({"capacity": 1, "autotune": True} if label == "autotune"
                                  else {"capacity": int(label.split("=")[1])})
            t0 = time.perf_counter()
            with Prefetcher(src, workers=workers, shape=src.item.shape, dtype=src.item.dtype, **kw) as pf:
                while pf.copy_prefetched(out):
                    a = time.perf_counter()
                    time.sleep(consumer_ms / 1000)
                    busy += time.perf_counter() - a
                final = pf.capacity
                history = pf.capacity_history
            wall = time.perf_counter() - t0
            results[label].append(max(src.work / workers, busy) / wall)
            if label == "autotune":
                finals.append(final)
                trajectories.append([(round(t, 3), d, c) for t, d, c in history])
    med = {k: _median(v) for k, v in results.items()}
    last = trajectories[len(trajectories) // 2] if trajectories else []
    settled = last[-1][1] if last else 0
    return [Figure(
        "autotune", {"items": n, "workers": workers, "consumer_ms": consumer_ms, "fetch_ms": fast_ms,
                     "slow_one_in": every, "slow_factor": factor, "start_capacity": 1},
        "% of ideal", round(100 * med["autotune"], 2), "capacity=2",
        {k: round(100 * v, 2) for k, v in med.items() if k != "autotune"},
        round(med["autotune"] / med["capacity=2"], 3), "", None,
        {"final_capacity": finals, "trajectory": last, "last_change_at_batch": settled,
         "trajectory_format": "(seconds, batches delivered, new capacity)"})]


# --------------------------------------------------------------------------
# The whole bench
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    handoff_items: int
    handoff_repeats: int
    overlap_items: int
    overlap_repeats: int
    overlap_pairs: tuple[tuple[float, float], ...]
    copy_sizes_mib: tuple[float, ...]
    copy_batches: int
    copy_repeats: int
    memory_batches: int
    memory_mib: float
    io_shards: int
    io_mib: float
    io_repeats: int
    autotune_items: int
    autotune_repeats: int

    @classmethod
    def full(cls) -> "Settings":
        return cls(3000, 7, 100, 3, ((1, 1), (5, 5), (10, 10), (2, 8), (8, 2)), (1.0, 16.0, 64.0), 60, 3,
                   64, 4.0, 48, 4.0, 3, 400, 3)

    @classmethod
    def quick(cls) -> "Settings":
        return cls(600, 3, 30, 1, ((1, 1), (5, 5)), (1.0, 8.0), 20, 2, 24, 1.0, 12, 1.0, 1, 120, 1)


def bench_live(quick: bool = False, progress: Callable[[str], None] | None = None,
               workdir: str | os.PathLike | None = None) -> dict[str, Any]:
    """Run every figure; returns ``{"machine", "settings", "torchdata", "figures"}`` (figures as dicts)."""
    from .demo import blas_threads

    with blas_threads(1):  # OpenBLAS's idle threads spin: on 2 cores they steal time from both sides
        return _bench_live(quick, progress, workdir)


def _bench_live(quick: bool, progress: Callable[[str], None] | None,
                workdir: str | os.PathLike | None) -> dict[str, Any]:
    s = Settings.quick() if quick else Settings.full()
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    figs: list[Figure] = []
    say("bench live: handoff")
    figs += bench_handoff(s.handoff_items, s.handoff_repeats, (1, 2, 8))
    figs.append(bench_protocol_cpu(5 * s.handoff_items, s.handoff_repeats))
    say("bench live: overlap")
    figs += bench_overlap(s.overlap_items, s.overlap_repeats, list(s.overlap_pairs))
    say("bench live: copy bandwidth")
    figs += bench_copy(list(s.copy_sizes_mib), s.copy_batches, s.copy_repeats)
    say("bench live: memory")
    figs += bench_memory(s.memory_batches, s.memory_mib)
    say("bench live: file I/O")
    with tempfile.TemporaryDirectory(prefix="safeprefetch-bench-", dir=workdir) as d:
        figs += bench_file_io(Path(d), s.io_shards, s.io_mib, s.io_repeats)
    say("bench live: autotune")
    figs += bench_autotune(s.autotune_items, s.autotune_repeats)
    return {"machine": machine_info(), "quick": quick, "settings": asdict(s),
            "torchdata": "measured" if _torchdata_available() else TORCHDATA_SKIP,
            "seconds": round(time.perf_counter() - t0, 2), "figures": [asdict(f) for f in figs]}


def _describe(f: dict) -> str:
    p = f["params"]
    if f["figure"] == "handoff":
        return f"handoff depth={p['depth']}"
    if f["figure"] == "overlap":
        return f"overlap P={p['producer_ms']:g}ms C={p['consumer_ms']:g}ms{' jitter' if p['jitter'] else ''}"
    if f["figure"] == "copy_bandwidth":
        return f"copy_prefetched {p['batch_mib']:g} MiB"
    if f["figure"] == "memory":
        return f"peak memory, {p['source'].split(' ')[0]}"
    if f["figure"] == "steady_state_allocations":
        return "steady-state allocations"
    if f["figure"] == "file_io":
        return f"file I/O, {p['loop']}"
    if f["figure"] == "protocol_cpu":
        return "protocol CPU, one thread"
    return f["figure"]


def format_report(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [f"bench live{' --quick' if result['quick'] else ''}: {m['cpu']}, {m['cores']} cores, "
             f"Python {m['python']}, numpy {m['numpy']} ({result['seconds']:.0f} s)",
             f"torchdata: {result['torchdata']}", "",
             f"{'figure':38} {'ours':>12} {'baseline':>12}  {'ratio':>7}  {'target':16} met"]
    for f in result["figures"]:
        base = f["baselines"].get(f["baseline"])
        base_s = f"{base:>12.6g}" if isinstance(base, (int, float)) else f"{str(base):>12}"
        met = {True: "yes", False: "NO", None: "-"}[f["met"]]
        lines.append(f"{_describe(f):38} {f['ours']:>12.6g} {base_s}  {f['ratio']:>7.3f}  {f['target'] or '-':16} "
                     f"{met}   [{f['unit']}; vs {f['baseline']}]")
        if f["figure"] == "handoff":
            cpu = f["extra"]["cpu_us_per_item"]
            lines.append(f"{'':38} CPU us/item: ours {cpu['ours']:.2f}, queue.Queue {cpu['queue.Queue']:.2f} "
                         f"(ratio {f['extra']['cpu_ratio']:.2f}); BackgroundGenerator-style "
                         f"{f['baselines']['BackgroundGenerator-style']} us/item")
        if f["figure"] == "autotune":
            e = f["extra"]
            lines.append(f"{'':38} final capacity {e['final_capacity']}; trajectory {e['trajectory']}")
    return "\n".join(lines)


def cmd_bench_live(args: Any) -> int:
    """The ``bench live`` command: ``args.json``, ``args.quick``."""
    quick = bool(getattr(args, "quick", False))
    result = bench_live(quick=quick, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    if getattr(args, "json", False):
        print(json.dumps(result, indent=2))
    else:
        print(format_report(result))
    return 0

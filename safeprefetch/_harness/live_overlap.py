"""The ``overlap`` and ``autotune`` figures: how much of the producer's and the consumer's work overlaps.

* ``overlap`` -- GIL-free producer and consumer work (``time.sleep``) of
  1-10 ms, with and without jitter in the producer's time (uniform in
  0.5x-1.5x its mean, seeded). Efficiency is the ideal time over the actual
  time, the ideal being ``max(sum of producer work, sum of consumer work)``
  as measured inside the work itself (so a sleep that overshoots is not
  counted against anyone). Default capacity (2). Target: at least 97%.
* ``autotune`` -- a slow, jittery source (mostly fast, sometimes 8x slower)
  against a steady consumer: the autotuned capacity's trajectory from 1, and
  the efficiency against fixed capacities 1, 2 and 8.

Both measure efficiency the same way: the busier side's measured work over
the wall time.
"""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np

from .._prefetcher.api import Prefetcher
from .live_bare import BARE, bare_run
from .live_common import (BASELINES, SLOT_POOL, TORCHDATA_SKIP, Figure, Sleepy, median, slot_pool_run,
                          torchdata_available, torchdata_run)

__all__ = ["bench_autotune", "bench_overlap"]


# --------------------------------------------------------------------------
# overlap
# --------------------------------------------------------------------------


def _work_times(n: int, mean: float, jitter: bool, seed: int) -> list[float]:
    if not jitter:
        return [mean] * n
    rng = random.Random(seed)
    return [mean * rng.uniform(0.5, 1.5) for _ in range(n)]


def _overlap_once(kind: str, ptimes: list[float], consumer: float, capacity: int, autotune: bool = False,
                  workers: int = 1) -> float:
    """Efficiency of one run: max(sum P / workers, sum C) / wall, both sums measured inside the work."""
    src = Sleepy(ptimes)
    n = len(ptimes)
    busy = [0.0]

    def compute() -> None:
        t0 = time.perf_counter()
        time.sleep(consumer)
        busy[0] += time.perf_counter() - t0

    t0 = time.perf_counter()
    if kind == "ours":
        out = np.empty_like(src.item)
        with Prefetcher(src, capacity=capacity, shape=src.item.shape, dtype=src.item.dtype, autotune=autotune,
                        workers=workers) as pf:
            while pf.copy_prefetched(out):
                compute()
    elif kind == BARE:  # the same model and copies with no runtime around them: one batch per take, as ours here
        bare_run(src.fetch_into, n, capacity, src.item.shape, src.item.dtype, lambda out: compute())
    elif kind == SLOT_POOL:  # the contract over C queues, with no model
        slot_pool_run(src.fetch_into, n, capacity, src.item.shape, src.item.dtype, lambda out: compute())
    else:
        runner = BASELINES[kind] if kind != "torchdata" else torchdata_run
        runner(src.__getitem__, n, capacity, lambda item: compute())
    wall = time.perf_counter() - t0
    return max(src.work / workers, busy[0]) / wall


def bench_overlap(n: int, repeats: int, pairs: list[tuple[float, float]], capacity: int = 2) -> list[Figure]:
    figs = []
    kinds = (["ours", "queue.Queue", "BackgroundGenerator-style", "SimpleQueue floor", SLOT_POOL, BARE]
             + (["torchdata"] if torchdata_available() else []))
    for k in kinds:  # warm-up, untimed: first-use costs (thread start-up paths, imports) are not overlap
        _overlap_once(k, [0.0005] * 8, 0.0005, capacity)
    _overlap_once("ours", [0.0005] * 8, 0.0005, capacity + 1)  # each shape's machine is compiled once
    _overlap_once("ours", [0.0005] * 8, 0.0005, capacity, autotune=True)
    _overlap_once("ours", [0.0005] * 8, 0.0005, capacity, workers=2)
    for p_ms, c_ms in pairs:
        for jitter in (False, True):
            effs: dict[str, list[float]] = {k: [] for k in kinds}
            wider: list[float] = []
            tuned: list[float] = []  # autotune=True from the same capacity
            # Two workers: the producer has headroom. At P = C with jitter the buffer level is a random walk
            # with no drift, whose excursions no buffer absorbs; a producer with spare throughput does.
            two: list[float] = []
            for r in range(repeats):
                ptimes = _work_times(n, p_ms / 1000, jitter, seed=1000 * r + int(p_ms * 10))
                for k in kinds:
                    effs[k].append(_overlap_once(k, ptimes, c_ms / 1000, capacity))
                # queue.Queue(capacity) holds capacity batches plus the one its producer is putting;
                # a Prefetcher slot counts every batch, so capacity + 1 slots hold as many in flight.
                wider.append(_overlap_once("ours", ptimes, c_ms / 1000, capacity + 1))
                tuned.append(_overlap_once("ours", ptimes, c_ms / 1000, capacity, autotune=True))
                two.append(_overlap_once("ours", ptimes, c_ms / 1000, capacity, workers=2))
            med = {k: median(v) for k, v in effs.items()}
            baselines: dict[str, Any] = {k: round(100 * med[k], 2) for k in kinds if k != "ours"}
            if "torchdata" not in kinds:
                baselines["torchdata"] = TORCHDATA_SKIP
            figs.append(Figure(
                "overlap", {"producer_ms": p_ms, "consumer_ms": c_ms, "jitter": jitter, "capacity": capacity,
                            "items": n}, "% of ideal", round(100 * med["ours"], 2), "queue.Queue", baselines,
                round(med["ours"] / med["queue.Queue"], 3), "ours >= 97%", med["ours"] >= 0.97,
                {"repeats_percent": {k: [round(100 * x, 2) for x in v] for k, v in effs.items()},
                 "ours_capacity_plus_1_percent": round(100 * median(wider), 2),
                 "ours_autotune_percent": round(100 * median(tuned), 2),
                 "ours_2_workers_percent": round(100 * median(two), 2)}))
    return figs


# --------------------------------------------------------------------------
# autotune
# --------------------------------------------------------------------------


class _Jittery(Sleepy):
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
    med = {k: median(v) for k, v in results.items()}
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

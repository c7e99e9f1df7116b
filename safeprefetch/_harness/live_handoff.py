"""The ``handoff`` and ``protocol_cpu`` figures: what one item costs to hand over, and the protocol's floor.

* ``handoff`` -- per-item cost for trivial items (a 16-byte array) at depths
  1, 2 and 8: wall time, process CPU time and model steps per item. The
  Prefetcher runs its checked model (claim, fetch, take, release: four
  steps per item, fewer when the consumer takes runs) and hands the item
  over with ``copy_prefetched``; the queues pass a reference. Target: at
  most 1.5x queue.Queue. The depths are matched by batches in flight: a
  ``queue.Queue(depth)`` holds one more batch than ``depth`` slots (the one
  its producer is blocked putting), so capacity ``depth + 1`` is measured too.
* ``protocol_cpu`` -- the same model steps driven from one thread (no
  handoff at all), one batch per take and in consumer runs, against
  ``queue.Queue`` put + get in one thread: the protocol's CPU floor, which
  explains the handoff figures.

The cyclic GC is paused while a loop is timed (:func:`_time_loop`): it is not
what is measured.
"""

from __future__ import annotations

import functools
import gc
import time
from typing import Any, Callable

import numpy as np

from .._prefetcher.api import Prefetcher
from .live_bare import BARE, bare_run
from .live_common import (BASELINES, SLOT_POOL, TORCHDATA_SKIP, Figure, Trivial, median, one_thread_queue_loops,
                          slot_pool_run, torchdata_available, torchdata_run)

__all__ = ["bench_handoff", "bench_protocol_cpu"]


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


def _handoff_ours(n: int, depth: int, steps: list[int] | None = None, runtime: str = "generated") -> tuple[float, float]:
    src = Trivial(n)
    out = np.empty_like(src.item)

    def run() -> None:
        with Prefetcher(src, capacity=depth, shape=src.item.shape, dtype=src.item.dtype, runtime=runtime) as pf:
            copy = pf.copy_prefetched
            while copy(out):
                pass
            if steps is not None:
                steps.append(pf._core.rt.steps)  # kernel steps the checked model took

    return _time_loop(run)


def _handoff_baseline(kind: str, n: int, depth: int) -> tuple[float, float]:
    src = Trivial(n)
    if kind == BARE:  # the model and the copies with no runtime around them, taking runs as ours does here
        return _time_loop(lambda: bare_run(src.fetch_into, n, depth, src.item.shape, src.item.dtype,
                                           lambda out: None, run=depth))
    if kind == SLOT_POOL:  # the contract (slots filled in place, copied out) over C queues, with no model
        return _time_loop(lambda: slot_pool_run(src.fetch_into, n, depth, src.item.shape, src.item.dtype,
                                                lambda out: None))
    runner = BASELINES[kind] if kind != "torchdata" else torchdata_run

    def consume(item: Any) -> None:
        pass

    return _time_loop(lambda: runner(src.__getitem__, n, depth, consume))


def _typed_ready(depths: tuple[int, ...]) -> str | None:
    """Build the typed transitions of every depth's shape before anything is timed; None, or why not."""
    from .._runtime.typed import CompileUnavailable

    try:
        for depth in depths:
            _handoff_ours(min(depth * 4, 40), depth, runtime="typed")
    except CompileUnavailable as e:
        return f"skipped: {e}"
    return None


def bench_handoff(n: int, repeats: int, depths: tuple[int, ...], typed: bool = True) -> list[Figure]:
    """The handoff figure per depth; ``typed``: also the typed runtime (a build of seconds per new shape)."""
    figs = []
    _handoff_ours(min(n, 200), 2)  # warm-up: compile the machine, start-up paths
    typed_skip = _typed_ready(depths) if typed else "skipped in --quick (a build of seconds per shape)"
    for depth in depths:
        runs: dict[str, list[tuple[float, float]]] = {"ours": [], "queue.Queue": [],
                                                       "BackgroundGenerator-style": [], "SimpleQueue floor": [],
                                                       SLOT_POOL: [], BARE: []}
        if torchdata_available():
            runs["torchdata"] = []
        inflight: list[tuple[float, float]] = []
        plain: list[tuple[float, float]] = []  # the same Prefetcher on the plain runtime (the model's own steps)
        typed_runs: list[tuple[float, float]] = []  # and on the typed transitions (C), where they can be built
        steps: list[int] = []
        for _ in range(repeats):  # interleaved, so drift on the machine hits every side alike
            runs["ours"].append(_handoff_ours(n, depth, steps))
            plain.append(_handoff_ours(n, depth, runtime="plain"))
            if typed_skip is None:
                typed_runs.append(_handoff_ours(n, depth, runtime="typed"))
            for kind in runs:
                if kind != "ours":
                    runs[kind].append(_handoff_baseline(kind, n, depth))
            # queue.Queue(depth) holds depth batches plus the one its producer is blocked putting;
            # a Prefetcher slot counts every batch, so depth + 1 slots hold as many in flight.
            inflight.append(_handoff_ours(n, depth + 1))
        per = {k: median([w for w, _c in v]) / n * 1e6 for k, v in runs.items()}
        cpu = {k: median([c for _w, c in v]) / n * 1e6 for k, v in runs.items()}
        baselines: dict[str, Any] = {k: round(per[k], 2) for k in runs if k != "ours"}
        if "torchdata" not in runs:
            baselines["torchdata"] = TORCHDATA_SKIP
        ratio = per["ours"] / per["queue.Queue"]
        figs.append(Figure(
            "handoff", {"depth": depth, "items": n, "item": "float32[4]"}, "us/item", round(per["ours"], 2),
            "queue.Queue", baselines, round(ratio, 3), "ratio <= 1.5", ratio <= 1.5,
            {"cpu_us_per_item": {k: round(v, 2) for k, v in cpu.items()},
             "model_steps_per_item": round(median([float(s) for s in steps]) / n, 3),
             "cpu_ratio": round(cpu["ours"] / cpu["queue.Queue"], 3),
             "plain_runtime_us_per_item": round(median([w for w, _c in plain]) / n * 1e6, 2),
             "plain_runtime_cpu_us_per_item": round(median([c for _w, c in plain]) / n * 1e6, 2),
             "plain_runtime_ratio": round(median([w for w, _c in plain]) / n * 1e6 / per["queue.Queue"], 3),
             "typed_runtime_us_per_item": typed_skip or round(median([w for w, _c in typed_runs]) / n * 1e6, 2),
             "typed_runtime_ratio": typed_skip or round(
                 median([w for w, _c in typed_runs]) / n * 1e6 / per["queue.Queue"], 3),
             "ours_capacity_depth_plus_1_us_per_item": round(median([w for w, _c in inflight]) / n * 1e6, 2),
             "ratio_capacity_depth_plus_1": round(median([w for w, _c in inflight]) / n * 1e6 / per["queue.Queue"],
                                                  3),
             "repeats_us_per_item": {k: [round(w / n * 1e6, 2) for w, _c in v] for k, v in runs.items()}}))
    return figs


def bench_protocol_cpu(items: int, repeats: int, depth: int = 8) -> Figure:
    """The model's CPU cost per item with no thread handoff at all, against queue.Queue's put + get.

    One thread drives the Prefetcher's own compiled machine through the live
    runtime, as its threads do (``live_profile.protocol_loop``): a worker's
    "fetch into slot" (its fetch a no-op) chained with its next "claim index
    and slot", the consumer's "take next batch" and "release lease". Once a
    batch per take (four steps per item) and once in runs of ``depth - 1``
    (the "take up to" branch the live Prefetcher takes for a fast caller:
    two steps per item for the worker, two per run for the consumer). Both
    runtimes, interleaved: the generated transitions (the default) and the
    plain one (the model's own step functions). That is the protocol's
    floor: what the handoff figures cost beyond it is waking threads.
    """
    from .._prefetcher.machine import transitions_for
    from .._runtime.kernel import Runtime
    from .live_profile import protocol_loop, timed_loop

    generated = functools.partial(Runtime, compiled=transitions_for(depth, 1, True, True, 0, depth))
    loops = {(rt, run): protocol_loop(factory, items, depth, run)
             for rt, factory in (("generated", generated), ("plain", Runtime)) for run in (1, depth - 1)}

    queues = one_thread_queue_loops(items, depth)

    times: dict[Any, list[float]] = {k: [] for k in loops}
    queued: dict[str, list[float]] = {k: [] for k in queues}
    for _ in range(repeats):  # interleaved
        for k, loop in loops.items():
            times[k].append(timed_loop(loop))
        for k, loop in queues.items():
            queued[k].append(timed_loop(loop))
    us = {k: median(v) / (items // k[1] * k[1]) * 1e6 for k, v in times.items()}
    ub = median(queued["queue.Queue put + get"]) / items * 1e6
    r = depth - 1
    return Figure("protocol_cpu", {"items": items, "depth": depth, "threads": 1}, "us/item",
                  round(us["generated", 1], 3), "queue.Queue put + get",
                  {"queue.Queue put + get": round(ub, 3),
                   "SimpleQueue floor, both sides": round(median(queued["SimpleQueue floor"]) / items * 1e6, 3)},
                  round(us["generated", 1] / ub, 3), "", None,
                  {"model_steps_per_item": 4, "critical_sections_per_item": 3,
                   "runs": {"run": r, "us_per_item": round(us["generated", r], 3),
                            "ratio": round(us["generated", r] / ub, 3), "model_steps_per_item": round(2 + 2 / r, 3)},
                   "plain_runtime": {"us_per_item": round(us["plain", 1], 3),
                                     "runs_us_per_item": round(us["plain", r], 3),
                                     "speedup": round(us["plain", 1] / us["generated", 1], 3),
                                     "runs_speedup": round(us["plain", r] / us["generated", r], 3)}})

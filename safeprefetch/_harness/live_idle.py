"""The ``call_after_idle`` figure: what a consumer call costs right after the consumer's own work.

In the ``overlap`` figure the consumer's work is GIL-free (``time.sleep``),
and everything the consumer does between two pieces of work is lost
throughput: its call for the next batch. That call runs right after the
thread was idle, and on this project's virtual machines Python runs
slower right after an idle (measured here, per run, as
``python_after_idle_slowdown``: a fixed bit of Python after a sleep of the
same length, against the same Python with no sleep; consistent with a
halted vCPU, cold caches or a lower clock, which were not told apart). The
handoff figures never show it, because their consumer never idles.

So this figure times such a call, in a simpler setup than the overlap
loop's: trivial items, capacity 2 (the overlap figure's), every batch
buffered before it is asked for (the source costs nothing, so the worker is
ahead; the figure counts the calls in which the consumer parked in the
kernel all the same, ``ours_calls_that_waited``): the time from the end of
one piece of consumer work to the start of the next, for the Prefetcher
(``copy_prefetched``), ``queue.Queue`` and the SimpleQueue floor (their
``get``), median over a run's calls after the first, then over runs. For
the Prefetcher it also says how much of that is the kernel (``rt.step``
timed from outside, in a separate run: the wrapper adds its own cost to
both parts) and how many kernel calls (``rt.step``) a call makes. No
target: it is measured beside the overlap figure, whose loss per item at
short work times it matches in size (docs/performance.md section 8).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .._prefetcher.api import Prefetcher
from .live_common import BASELINES, Figure, Trivial, median, python_slowdown_after

__all__ = ["bench_call_after_idle"]

#: The overlap figure's capacity.
_CAPACITY = 2


def count_waits(rt: Any, thread: int) -> list[int]:
    """A one-item list that counts the times ``thread`` parks in runtime ``rt`` from now on (until ``del
    rt._park``). A call that does not park does not pass through it: it costs nothing there."""
    park = rt._park
    waits = [0]

    def counted(t: int, *a: Any, **k: Any) -> None:
        if t == thread:
            waits[0] += 1
        return park(t, *a, **k)

    rt._park = counted  # an instance attribute: this runtime only
    return waits


def _ours(n: int, idle: float, split: bool) -> tuple[list[float], list[float], float, int]:
    """Each call's time after the idle (seconds); with ``split``, the kernel's part of each; kernel calls per
    call; and how many of the calls after an idle parked in the kernel (waited for a batch)."""
    src = Trivial(n)
    out = np.empty_like(src.item)
    gaps: list[float] = []
    kernel: list[float] = []
    clock = time.perf_counter
    waited = 0
    with Prefetcher(src, capacity=_CAPACITY, shape=src.item.shape, dtype=src.item.dtype) as pf:
        rt = pf._core.rt
        consumer = pf._core.consumer
        parks = count_waits(rt, consumer)
        inside = [0.0]
        count = [0]
        if split:
            step = rt.step

            def timed(t: int, *a: Any, **k: Any) -> str:
                t0 = clock()
                try:
                    return step(t, *a, **k)
                finally:
                    if t == consumer:
                        inside[0] += clock() - t0
                        count[0] += 1

            rt.step = timed  # an instance attribute: this runtime only
        copy = pf.copy_prefetched
        back = None
        steps = 0
        while True:
            inside[0] = 0.0
            count[0] = 0
            before = parks[0]
            ok = copy(out)
            if not ok:
                break
            if back is not None:  # the first call waits for the first batch: not a call after idle
                gaps.append(clock() - back)
                kernel.append(inside[0])
                steps += count[0]
                waited += parks[0] > before
            time.sleep(idle)
            back = clock()
        if split:
            del rt.step
        del rt._park
    return gaps, kernel, steps / max(len(gaps), 1), waited


def _queue(kind: str, n: int, idle: float) -> list[float]:
    src = Trivial(n)
    gaps: list[float] = []
    back: list[float | None] = [None]
    clock = time.perf_counter
    if kind not in BASELINES:
        raise ValueError(f"unknown baseline {kind!r} (known: {', '.join(BASELINES)})")
    runner = BASELINES[kind]

    def consume(item: Any) -> None:
        t = clock()
        if back[0] is not None:
            gaps.append(t - back[0])
        time.sleep(idle)
        back[0] = clock()

    runner(src.__getitem__, n, _CAPACITY, consume)
    return gaps


def bench_call_after_idle(n: int, repeats: int, idles_ms: tuple[float, ...]) -> list[Figure]:
    figs = []
    _ours(min(n, 20), 0.0005, split=False)  # warm-up: the capacity-2 machine is compiled once
    for idle_ms in idles_ms:
        idle = idle_ms / 1000
        per: dict[str, list[float]] = {"ours": [], "queue.Queue": [], "SimpleQueue floor": []}
        kernel_us: list[float] = []
        split_total_us: list[float] = []
        steps: list[float] = []
        waited = timed = 0
        for _ in range(repeats):
            gaps, _k, _s, w = _ours(n, idle, split=False)
            waited, timed = waited + w, timed + len(gaps)
            per["ours"].append(median(gaps))
            per["queue.Queue"].append(median(_queue("queue.Queue", n, idle)))
            per["SimpleQueue floor"].append(median(_queue("SimpleQueue floor", n, idle)))
            gaps, kern, per_call, _w = _ours(n, idle, split=True)
            split_total_us.append(1e6 * median(gaps))
            kernel_us.append(1e6 * median(kern))
            steps.append(per_call)
        med = {k: 1e6 * median(v) for k, v in per.items()}
        figs.append(Figure(
            "call_after_idle", {"idle_ms": idle_ms, "capacity": _CAPACITY, "items": n}, "us per call",
            round(med["ours"], 2), "queue.Queue",
            {"queue.Queue": round(med["queue.Queue"], 2), "SimpleQueue floor": round(med["SimpleQueue floor"], 2)},
            round(med["ours"] / med["queue.Queue"], 3), "", None,
            {"repeats_us": {k: [round(1e6 * x, 2) for x in v] for k, v in per.items()},
             "ours_kernel_us": round(median(kernel_us), 2),
             "ours_with_kernel_timed_us": round(median(split_total_us), 2),
             "ours_kernel_calls_per_call": round(median(steps), 2),
             "ours_calls_that_waited": waited, "ours_calls_timed": timed,
             "python_after_idle_slowdown": round(python_slowdown_after(lambda _i: time.sleep(idle),
                                                                        200 if n >= 100 else 40), 2)}))
    return figs

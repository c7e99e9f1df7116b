"""The ``copy_bandwidth`` figure: ``copy_prefetched(out)`` against a plain ``np.copyto``.

``copy_prefetched`` copies a buffered batch into the caller's array. The
figure compares that with ``np.copyto(out, a)`` on arrays of the same shape
(the pool's), and with a queue.Queue prefetch thread with ``np.copyto`` in
the loop. Target: at least 90% of ``np.copyto``'s bandwidth. The source fills
each slot once and then leaves it (:class:`_TouchFirst`), so the copy is all
that is measured; the details are in :func:`bench_copy`.

Beside them runs the **bare model** (``live_bare.py``): the same checked
transitions, the same slot pool and the same copy out, on two threads with
one ``threading.Condition`` and no runtime. It splits a miss into the
design's share (bare model against ``np.copyto``) and the runtime's (ours
against the bare model), as the handoff and overlap figures do.
"""

from __future__ import annotations

import time

import numpy as np

from .._prefetcher.api import Prefetcher
from .live_bare import BARE, bare_run
from .live_common import (SLOT_POOL, Figure, Trivial, median, python_slowdown_after, queue_run, simplequeue_run,
                          slot_pool_run)

__all__ = ["bench_copy"]


class _TouchFirst(Trivial):
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


def _leave(i: int, slot: np.ndarray) -> None:
    """The bare model's fetch: the slot already holds a batch (the pool np.copyto copies from, touched)."""


def _ignore(out: np.ndarray) -> None:
    """The bare model's caller does nothing with a batch, as the timed loops here."""


def bench_copy(sizes_mib: list[float], batches: int, repeats: int, capacity: int = 2) -> list[Figure]:
    """copy_prefetched against np.copyto, per batch size.

    The Prefetcher runs as usual (capacity 2): while the consumer copies out
    of one slot, a worker refills the other. Its source fills each slot once
    and then leaves it, so the copy is all there is to measure; the first
    ``capacity`` batches (the slots' first touch, i.e. page faults) are not
    timed. np.copyto copies from a pool of as many slots of the same shape,
    touched. A second baseline is what the usual way to prefetch gets on the
    same copies: a queue.Queue(capacity) prefetch thread handing those arrays
    over, the loop copying each out with np.copyto. A third: the bare model
    (the design with no runtime) over the same touched pool and ``out``. Also in ``extra``: the
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
        ours, base, queued, floor, pooled, bare, buffered, spread = [], [], [], [], [], [], [], []
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
            queue_run(lambda i: pool[i % capacity], n, capacity, lambda a: np.copyto(out, a))
            queued.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            simplequeue_run(lambda i: pool[i % capacity], n, capacity, lambda a: np.copyto(out, a))
            floor.append(time.perf_counter() - t0)
            t0 = time.perf_counter()  # the contract over C queues, over the same touched pool and out
            slot_pool_run(_leave, n, capacity, shape, np.float32, _ignore, pool=list(pool), out=out)
            pooled.append(time.perf_counter() - t0)
            t0 = time.perf_counter()  # over np.copyto's touched pool (its fetch leaves a slot as it is) and out
            bare_run(_leave, n, capacity, shape, np.float32, _ignore, pool=list(pool), out=out)
            bare.append(time.perf_counter() - t0)
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
        # The copy streams its source and destination through the caches and evicts the interpreter's
        # working set: whatever Python a prefetcher runs per batch then runs on cold caches.
        slowdown = python_slowdown_after(lambda i, src=pool: np.copyto(out, src[i % len(src)]), 400)
        del pool
        t_ours, t_base, t_queue, t_floor = median(ours), median(base), median(queued), median(floor)
        t_bare, t_pooled = median(bare), median(pooled)
        t_buf, t_spread = median(buffered), median(spread)
        ratio = t_base / t_ours
        figs.append(Figure("copy_bandwidth", {"batch_mib": mib, "batches": n, "capacity": capacity},
                           "GB/s", round(gb / t_ours, 3), "np.copyto",
                           {"np.copyto": round(gb / t_base, 3), "queue.Queue + np.copyto": round(gb / t_queue, 3),
                            "SimpleQueue floor + np.copyto": round(gb / t_floor, 3),
                            SLOT_POOL: round(gb / t_pooled, 3), BARE: round(gb / t_bare, 3)},
                           round(ratio, 3), "ratio >= 0.9", ratio >= 0.9,
                           {"overhead_us_per_batch": round((t_ours - t_base) / n * 1e6, 1),
                            "queue_ratio": round(t_base / t_queue, 3),
                            "queue_overhead_us_per_batch": round((t_queue - t_base) / n * 1e6, 1),
                            "floor_ratio": round(t_base / t_floor, 3),
                            "floor_overhead_us_per_batch": round((t_floor - t_base) / n * 1e6, 1),
                            "slot_pool_ratio": round(t_base / t_pooled, 3),
                            "bare_ratio": round(t_base / t_bare, 3),
                            "bare_overhead_us_per_batch": round((t_bare - t_base) / n * 1e6, 1),
                            "python_after_copy_slowdown": round(slowdown, 2),
                            "all_buffered_batches": nb,
                            "all_buffered_gb_s": round(gb * nb / n / t_buf, 3),
                            "all_buffered_ratio": round(t_spread / t_buf, 3)}))
    return figs

"""The ``memory`` and ``steady_state_allocations`` figures: the buffer's footprint, and no per-batch allocation.

* ``memory`` -- peak traced memory (tracemalloc) of a prefetching run over
  ``(capacity + workers) x batch bytes``, with a source that returns a new
  array per batch and with one that fills the slot in place, beside a
  queue.Queue prefetch thread.
* ``steady_state_allocations`` -- in steady state with a ``fetch_into``
  source, the growth of the traced peak and of ``sys.getallocatedblocks()``
  per batch: zero batch-sized allocations means the peak does not grow by a
  batch, and nothing accumulates.

What is not batches is allowed for, measured: the run's Python objects
(``_OBJECT_SLACK``) and caches warming up (``_BLOCK_SLACK``).
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from typing import Callable, Iterator

import numpy as np

from .._prefetcher.api import Prefetcher
from .live_common import Background, Figure, Trivial, queue_run

__all__ = ["bench_memory"]


class _Fresh(Trivial):
    """``__getitem__`` returns a new array each time (what most sources do); no ``fetch_into``."""

    fetch_into = None  # type: ignore[assignment]

    def __getitem__(self, i: int) -> np.ndarray:
        return np.full(self.item.shape, i, self.item.dtype)


class _Into(Trivial):
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
            queue_run(lambda i: np.full(shape, i, np.float32), batches, capacity, lambda item: None)

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
        bg = Background((np.full(shape, i, np.float32) for i in range(batches)), capacity)

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

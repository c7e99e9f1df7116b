"""The ``file_io`` figure: real reads of ``.npy`` shards, cold, with and without a consumer step.

The shards are generated, then evicted from the page cache before each pass
(``posix_fadvise(DONTNEED)``, where the OS allows; the figure records whether
it did). Two loops, each against ``np.load`` in the loop: one with a GIL-free
consumer step as long as a cold read (the Prefetcher's ``fetch_into`` through
``NpyFiles``, 2 workers: the speedup and the overlap efficiency), and one
that only reads (the read throughput, both ways).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from .._prefetcher.api import Prefetcher
from .._prefetcher.npy import NpyFiles
from .live_common import Figure, median

__all__ = ["bench_file_io"]


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
    s, o = median(serial), median(ours)
    r, ro = median(reads), median(reads_ours)
    params = {"shards": shards, "shard_mib": mib, "workers": workers, "capacity": capacity,
              "page_cache_evicted": cold, "consumer_step_ms": round(step * 1000, 3)}
    return [
        Figure("file_io", {**params, "loop": "read + GIL-free step"}, "s per shard", round(o / shards, 6),
               "np.load in the loop", {"np.load in the loop": round(s / shards, 6)}, round(o / s, 3),
               "", None, {"speedup": round(s / o, 3),
                          "overlap_efficiency_percent": round(100 * median(effs), 2)}),
        Figure("file_io", {**params, "loop": "read only"}, "MB/s", round(mb / ro, 1), "np.load in the loop",
               {"np.load in the loop": round(mb / r, 1)}, round(r / ro, 3), "", None),
    ]

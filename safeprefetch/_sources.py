"""Ready-made sources for the Prefetcher: batches stored as ``.npy`` files.

``NpyFiles(paths)`` is a map-style source (one ``.npy`` file per batch) with
``fetch_into``: the file is memory-mapped and copied straight into the
prefetcher's slot, so no batch-sized array is allocated per fetch. It holds
only the paths, so it pickles cheaply (process executors send it with every
fetch).

``write_npy_batches`` writes such files; tests, the soak runner and the demo
use it to put real data on disk.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["NpyFiles", "write_npy_batches"]


class NpyFiles:
    """A map-style source of ``.npy`` files, one batch per file.

    ``latency`` seconds are slept before each read, to stand for slow storage
    (a network file system, object storage) in demos and tests.
    """

    def __init__(self, paths: Sequence[str | os.PathLike], latency: float = 0.0):
        self.paths = [os.fspath(p) for p in paths]
        self.latency = float(latency)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> np.ndarray:
        if self.latency:
            time.sleep(self.latency)
        return np.load(self.paths[i])

    def fetch_into(self, i: int, out: np.ndarray) -> None:
        if self.latency:
            time.sleep(self.latency)
        data = np.load(self.paths[i], mmap_mode="r")
        if data.shape != out.shape or data.dtype != out.dtype:
            raise ValueError(f"{self.paths[i]}: expected shape {out.shape} dtype {out.dtype}, "
                             f"got shape {data.shape} dtype {data.dtype}")
        np.copyto(out, data, casting="no")

    def __repr__(self) -> str:
        return f"NpyFiles({len(self.paths)} files, latency={self.latency:g})"


def write_npy_batches(directory: str | os.PathLike, n: int, shape: Sequence[int], dtype: Any = np.float32,
                      fill: Callable[[int], Any] | None = None, prefix: str = "batch") -> list[Path]:
    """Write ``n`` batches as ``directory/{prefix}{i:06d}.npy``; batch ``i`` is filled with ``fill(i)`` (default ``i``).

    Returns the paths, in order.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        p = d / f"{prefix}{i:06d}.npy"
        np.save(p, np.full(tuple(shape), i if fill is None else fill(i), dtype=dtype))
        paths.append(p)
    return paths

"""Ready-made sources for the Prefetcher: batches stored as ``.npy`` files.

``NpyFiles(paths)`` is a map-style source (one ``.npy`` file per batch) with
``fetch_into``: the file's header is parsed and its data read with one
``readinto`` straight into the prefetcher's slot, so no batch-sized array is
allocated and no page mapped per fetch (docs/performance.md measures it
against ``np.load``). It holds
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
        """Read file ``i`` into ``out``: its header, then its data straight into ``out`` with one ``readinto``.

        No array is allocated and no page is mapped: the bytes go from the
        file into the slot. Falls back to a memory map and a copy when the
        layout needs one (Fortran order, a non-contiguous ``out``).
        """
        if self.latency:
            time.sleep(self.latency)
        path = self.paths[i]
        with open(path, "rb", buffering=0) as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                shape = fortran = dtype = None  # a newer format: let np.load read it
            if shape is not None and (tuple(shape) != out.shape or dtype != out.dtype):
                raise ValueError(f"{path}: expected shape {out.shape} dtype {out.dtype}, "
                                 f"got shape {tuple(shape)} dtype {dtype}")
            if shape is not None and not fortran and out.flags.c_contiguous and not dtype.hasobject:
                view = memoryview(out.reshape(-1).view(np.uint8))  # (memoryview(out) refuses datetime64)
                got = 0
                while True:  # not ``while got < ...:``, whose back-edge 3.13 leaves out of the with's cleanup
                    if got >= out.nbytes:
                        break
                    n = f.readinto(view[got:])
                    if not n:
                        raise ValueError(f"{path}: file ends after {got} of {out.nbytes} data bytes")
                    got += n
                return
        data = np.load(path, mmap_mode="r")
        if data.shape != out.shape or data.dtype != out.dtype:
            raise ValueError(f"{path}: expected shape {out.shape} dtype {out.dtype}, "
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

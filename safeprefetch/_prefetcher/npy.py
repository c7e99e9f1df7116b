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
import tokenize
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .args import as_seconds

__all__ = ["NpyFiles", "write_npy_batches"]


class NpyFiles:
    """A map-style source of ``.npy`` files, one batch per file.

    ``latency`` seconds are slept before each read, to stand for slow storage
    (a network file system, object storage) in demos and tests.
    """

    def __init__(self, paths: Sequence[str | os.PathLike], latency: float = 0.0):
        if isinstance(paths, (str, bytes, os.PathLike)):  # one path would be read as its characters' paths
            raise TypeError(f"paths must be a sequence of paths, not one {type(paths).__name__} ({paths!r}); "
                            "wrap it in a list")
        self.paths = [os.fspath(p) for p in paths]
        seconds = as_seconds("latency", latency)
        if seconds is None:  # (None and inf)
            raise ValueError(f"latency must be a finite number of seconds (0 for none), not {latency!r}")
        self.latency = seconds

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> np.ndarray:
        if self.latency:
            time.sleep(self.latency)
        path = self.paths[i]
        try:
            with open(path, "rb") as f:
                before = _identity(os.fstat(f.fileno()))
                data = _load_whole(path, f)
                _unchanged(path, before, os.fstat(f.fileno()))
                return data
        except _UNNAMED as e:
            named = _named(path, e)
            if named is None:
                raise
            raise named from e

    def fetch_into(self, i: int, out: np.ndarray) -> None:
        """Read file ``i`` into ``out``: its header, then its data straight into ``out`` with one ``readinto``.

        No array is allocated and no page is mapped: the bytes go from the
        file into the slot. Falls back to ``np.load`` and a copy when the
        layout needs one (Fortran order, a newer format, a non-contiguous ``out``).
        Every error names the file.
        """
        if self.latency:
            time.sleep(self.latency)
        path = self.paths[i]
        try:
            self._read_into(path, out)
        except _UNNAMED as e:
            named = _named(path, e)  # (numpy's own messages name no file)
            if named is None:
                raise
            raise named from e

    @staticmethod
    def _read_into(path: str, out: np.ndarray) -> None:
        with open(path, "rb", buffering=0) as f:
            before = _identity(os.fstat(f.fileno()))
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
            if shape is not None and not dtype.hasobject:  # (a pickled array's size is not its nbytes)
                extra = os.fstat(f.fileno()).st_size - f.tell() - out.nbytes
                if extra > 0:  # np.load ignores them; a file with more data than its header says is not this batch
                    raise ValueError(f"{path}: {extra} bytes after the {out.nbytes} data bytes its header declares")
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
                _unchanged(path, before, os.fstat(f.fileno()))
                return
            # Read, not memory-mapped: a mapped file that shrinks while it is copied (np.save over it truncates
            # it first) kills the process with SIGBUS; a read raises. From the file already open, not the path
            # again: a shard renamed into place meanwhile is another file, read whole either way.
            f.seek(0)
            data = _load_whole(path, f)
            _unchanged(path, before, os.fstat(f.fileno()))
        if data.shape != out.shape or data.dtype != out.dtype:
            raise ValueError(f"{path}: expected shape {out.shape} dtype {out.dtype}, "
                             f"got shape {data.shape} dtype {data.dtype}")
        np.copyto(out, data, casting="no")

    def __repr__(self) -> str:
        return f"NpyFiles({len(self.paths)} files, latency={self.latency:g})"


#: What reading a file raises without naming it: numpy's format errors (a header whose brackets do not close
#: reaches ``tokenize``'s error), and an OSError of a descriptor (a pipe given as a path cannot seek).
_UNNAMED = (ValueError, EOFError, SyntaxError, tokenize.TokenError, OSError)


def _named(path: str, e: BaseException) -> BaseException | None:
    """``e`` as an error naming ``path`` (an OSError keeps its class), or None when it names it already."""
    if isinstance(e, OSError):
        return None if e.filename is not None else type(e)(e.errno, f"{path}: {e.strerror or e}")
    return None if str(e).startswith(f"{path}: ") else ValueError(f"{path}: {e}")


def _load_whole(path: str, f: Any) -> np.ndarray:
    """``np.load`` of the open file ``f``, refused unless it is one array and the file holds nothing after it.

    ``np.load`` reads a ``.npz`` archive as a lazy ``NpzFile`` on the descriptor (not a batch: closed here,
    so an error kept does not keep the file open), and ignores bytes after an array's data in every format
    version: a file with more data than its header declares is not this batch (``fetch_into``'s own read
    refuses it too, so the probe for the slots' shape and the fetches agree)."""
    data = np.load(f, allow_pickle=False)
    if not isinstance(data, np.ndarray):
        close = getattr(data, "close", None)
        if close is not None:
            close()
        raise ValueError(f"{path}: holds a {type(data).__name__}, not one array (.npz archives hold several: "
                         "NpyFiles reads one .npy file per batch)")
    if not data.dtype.hasobject:  # (refused above by allow_pickle=False; a pickle's size is not its nbytes)
        extra = os.fstat(f.fileno()).st_size - f.tell()
        if extra > 0:
            raise ValueError(f"{path}: {extra} bytes after the {data.nbytes} data bytes its header declares")
    return data


def _identity(st: os.stat_result) -> tuple[int, ...]:
    """What changes when a file's data is written over: which file, its size, when its data changed. (Not
    its inode's change time: renaming a new shard into place, the way to replace one, changes the old
    file's, and so do chmod, a hard link and utime, none of which touch the data.)"""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _unchanged(path: str, before: tuple[int, ...], now: os.stat_result) -> None:
    """Refuse a batch read from a file that changed while it was read.

    ``np.save`` over a shard truncates it, then writes it: a read between the two got the new data under the
    old header (int32 bits delivered as float32), or half of each version stitched together, both silently.
    The file's size and data modification time are compared before and after the read, on the descriptor
    the read used. A rewrite within the file system's timestamp granularity (a clock tick) of the file's
    previous write, to the same size, cannot be seen this way: write shards under another name and rename
    them into place (a reader then reads the old file or the new one, whole).
    """
    if _identity(now) != before:
        raise ValueError(f"{path}: the file changed while it was read (written over by another process?); "
                         "write shards under another name and rename them into place")


def write_npy_batches(directory: str | os.PathLike, n: int, shape: Sequence[int], dtype: Any = np.float32,
                      fill: Callable[[int], Any] | None = None, prefix: str = "batch") -> list[Path]:
    """Write ``n`` batches as ``directory/{prefix}{i:06d}.npy``; batch ``i`` is filled with ``fill(i)`` (default ``i``).

    Returns the paths, in order. A value the dtype cannot hold exactly (1000 as int8, 0.7 as an int, 1e6 as
    float16) is an error naming it: ``np.full`` would store another value, silently.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an int >= 0, not {n!r}")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        p = d / f"{prefix}{i:06d}.npy"
        value = i if fill is None else fill(i)
        try:
            with np.errstate(all="ignore"):  # (what it would store is checked, and named, just below)
                batch = np.full(tuple(shape), value, dtype=dtype)
        except OverflowError as e:  # (numpy 2 refuses a Python int out of range itself)
            raise ValueError(f"batch {i}: fill value {value!r} does not fit dtype {np.dtype(dtype)}: {e}") from None
        _check_stored(batch, value, i)
        np.save(p, batch)
        paths.append(p)
    return paths


def _check_stored(batch: np.ndarray, value: Any, i: int) -> None:
    """Refuse ``batch`` unless it holds ``value``: exactly for integer, bool and time dtypes; for floating and
    complex ones, rounding is what they do, and only a finite value that became inf or NaN is refused."""
    src = np.broadcast_to(np.asarray(value), batch.shape)
    try:
        if batch.dtype.kind in "fc":
            bad = np.isfinite(src) & ~np.isfinite(batch)
        else:
            back = batch.astype(src.dtype)
            bad = ~((back == src) | ((back != back) & (src != src)) if src.dtype.kind in "fcmM" else (back == src))
    except (TypeError, ValueError):
        return  # values numpy cannot convert back (strings into numbers, say): numpy's own conversion stands
    bad = np.asarray(bad)
    if bad.any():
        at = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
        raise ValueError(f"batch {i}: fill value {src[at]!r} does not fit dtype {batch.dtype} "
                         f"(stored as {batch[at]!r})")

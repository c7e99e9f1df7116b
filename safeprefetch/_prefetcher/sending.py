"""What travels to and back from an executor's process: a memory-mapped source by its file, a fetched batch with
its dtype, a source's error that arrives.

A source goes to a process executor pickled with every fetch, and ``np.memmap`` pickles as its whole data: a
memory-mapped source (``np.load(path, mmap_mode="r")``) sent 16 MB with each 16 KB batch of a 16 MB file, and a
file larger than memory could not be sent at all. To a ``ProcessPoolExecutor`` (a process of this machine) a
memmap that maps its file's own pages (mode ``r``, ``r+`` or ``w+``, not a view) travels as its file's name,
offset, dtype, shape and order, and is mapped again there (:func:`by_file`). A copy-on-write one (mode ``c``),
whose changes are not in the file, and any to another kind of executor (dask's, whose workers may be on another
machine), travel as before.

A process executor sends the fetch's result back pickled, at the pickle protocol ``multiprocessing`` uses
(4 on CPython 3.11-3.13). At that protocol numpy pickles an array of a non-native byte order (``'>i4'`` on
a little-endian machine) as the native dtype: the batch arrived as ``'<i4'``. It sized the pool with the
wrong dtype, made every batch fail the dtype check when ``dtype='>i4'`` was given, and made ``NpyFiles``
refuse a big-endian file as if the file were wrong. So a batch of such a dtype travels as its raw bytes, its
dtype and its shape, and arrives as the same array (:func:`sendable`).

A source's exception travels back pickled too: one that pickles and does not unpickle (an ``__init__`` taking
other arguments than its ``args``) broke the caller's whole process pool (``BrokenProcessPool``), so it is
replaced before it leaves by a :class:`SourceErrorNotSent` that says what it was (:func:`must_travel`).
"""

from __future__ import annotations

import concurrent.futures
import mmap
import os
import pickle
import traceback
from typing import Any

import numpy as np

from .errors import SourceErrorNotSent

__all__ = ["MappedFile", "Unmapped", "by_file", "must_travel", "sendable"]

_PLAIN_ARRAYS = (np.ndarray, np.memmap)


class MappedFile:
    """A memory-mapped source on its way to a process pool: pickled, its file's name, offset, dtype, shape, order
    and identity (device, inode); unpickled, the file mapped again, read-only (``_remap``). In this process,
    ``array`` is the source."""

    __slots__ = ("array", "ident")

    def __init__(self, array: np.memmap, ident: tuple[int, int]):
        self.array, self.ident = array, ident

    def __reduce__(self) -> tuple:
        a = self.array
        order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
        return _remap, (a.filename, a.dtype, a.offset, a.shape, order, self.ident)


class Unmapped:
    """What a worker process has instead of the source when its file is no longer the one mapped here (replaced
    at its path, or unlinked, since): ``remote_item`` raises ``error`` at the item's position. (Raised while
    the call is unpickled, it would end the worker and break the caller's pool.)"""

    __slots__ = ("error",)

    def __init__(self, error: OSError):
        self.error = error


def _remap(filename: Any, dtype: np.dtype, offset: int, shape: tuple[int, ...], order: str,
           ident: tuple[int, int]) -> Any:
    try:
        with open(filename, "rb") as f:
            st = os.fstat(f.fileno())
            if (st.st_dev, st.st_ino) != ident:
                raise FileNotFoundError(f"the memory-mapped source's file {filename!r} was replaced since the "
                                        "Prefetcher sent it by name to a process pool; the worker cannot read it")
            return np.memmap(f, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)
    except OSError as e:
        return Unmapped(e)


def _mapped_file(a: np.memmap) -> tuple[int, int] | None:
    """(device, inode) of the file whose pages ``a``'s data is in, read from ``/proc/self/maps`` (None where that
    cannot be read: not Linux). Its name may since name another file, or none."""
    addr = a.__array_interface__["data"][0]
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:  # (outside the try: on 3.13 a Ctrl-C at a loop's back-edge inside it skips the handler)
        found = _maps_entry(line, addr)
        if found is not None:
            return found
    return None


def _maps_entry(line: str, addr: int) -> tuple[int, int] | None:
    """(device, inode) of a ``/proc/self/maps`` line whose address range holds ``addr``; None for any other
    line, or one it cannot read."""
    try:
        fields = line.split(None, 5)
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if not lo <= addr < hi:
            return None
        major, minor = (int(x, 16) for x in fields[3].split(":"))
        return os.makedev(major, minor), int(fields[4])
    except (ValueError, IndexError):
        return None


def by_file(source: Any, executor: Any) -> Any:
    """``source`` as it is to be sent to ``executor`` with each fetch: a :class:`MappedFile` for a memmap of its
    file's own pages going to a process pool, else itself (``remote_item`` takes ``array`` out again). Only while
    its name still names the file it maps: one replaced at that path, or unlinked, travels as its bytes."""
    if (type(source) is np.memmap and isinstance(executor, concurrent.futures.ProcessPoolExecutor)
            and isinstance(source.base, mmap.mmap) and source.mode in ("r", "r+", "w+")
            and source.filename is not None and source.size):
        try:
            st = os.stat(source.filename)
        except OSError:
            return source
        ident = (st.st_dev, st.st_ino)
        if _mapped_file(source) == ident:
            return MappedFile(source, ident)
    return source


class _Bytes:
    """A batch whose dtype pickle would not keep: unpickled, it is the array again (``_arrive``)."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array

    def __reduce__(self) -> tuple:
        a = self.array
        return _arrive, (a.tobytes(order="C"), a.dtype, a.shape)


def _arrive(data: bytes, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(bytearray(data), dtype).reshape(shape)  # (a bytearray: the batch is writable)


def sendable(item: Any) -> Any:
    """``item`` as it must leave an executor's process to arrive as itself: an array of a non-native byte order
    (an object dtype cannot be sent by its bytes, and keeps its dtype anyway) is wrapped. So is a memory-mapped
    one (``np.load(path, mmap_mode="r")[i]``), whose bytes are the batch; any other subclass travels as it is,
    for the worker to judge (a masked array's mask is not in its bytes)."""
    if type(item) in _PLAIN_ARRAYS and not item.dtype.isnative and not item.dtype.hasobject:
        return _Bytes(item)
    return item


def must_travel(e: BaseException) -> None:
    """Raise a :class:`SourceErrorNotSent` standing in for ``e`` if ``e`` would not survive the trip back."""
    try:
        pickle.loads(pickle.dumps(e))
    except Exception as why:  # noqa: BLE001 - whatever stops the round trip
        text = "".join(traceback.format_exception(e))
        raise SourceErrorNotSent(f"{type(e).__module__}.{type(e).__qualname__}: {e} (it cannot be sent back from "
                                 f"the executor's process: {type(why).__name__}: {why}); its traceback there:\n"
                                 f"{text}") from None

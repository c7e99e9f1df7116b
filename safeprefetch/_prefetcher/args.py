"""Argument checking: bad input gets a clear TypeError or ValueError, at construction or at the call."""

from __future__ import annotations

import math
import numbers
import time
from typing import Any

import numpy as np

__all__ = ["as_bool", "as_dtype", "as_int", "as_seconds", "as_shape", "check_batch_dtype", "check_out", "deadline_after",
           "overlaps_itself"]


def as_int(name: str, value: Any, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {type(value).__name__} ({value!r})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def as_bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__} ({value!r})")
    return bool(value)


def as_seconds(name: str, value: Any, *, positive: bool = False) -> float | None:
    """A timeout in seconds: any real number (numpy's too) >= 0, or > 0 with ``positive``.

    ``None`` and ``inf`` both mean "no timeout" and come back as ``None``; a
    finite value larger than the longest wait the platform supports is
    fine: waits are taken in pieces until the deadline.
    """
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds or None, not {type(value).__name__} ({value!r})")
    try:
        value = float(value)
    except OverflowError:  # an int (or Fraction) past float's range: a wait longer than any
        value = math.inf if value > 0 else -math.inf
    if value != value:
        raise ValueError(f"{name} must be a number of seconds, got nan")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'} seconds, got {value}")
    return None if value == math.inf else value


def deadline_after(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def as_shape(value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"shape must be a tuple of ints, not {type(value).__name__} ({value!r})")
    out = []
    for d in value:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise TypeError(f"shape must be a tuple of ints, got {value!r}")
        if d < 0:
            raise ValueError(f"shape must not have negative dimensions, got {tuple(value)!r}")
        out.append(int(d))
    return tuple(out)


def as_dtype(value: Any) -> np.dtype | None:
    if value is None:
        return None
    try:
        dt = np.dtype(value)
    except TypeError as e:
        raise TypeError(f"dtype {value!r} is not a numpy dtype: {e}") from None
    if dt.itemsize == 0 and dt.kind in "SUV":
        raise ValueError(f"dtype {value!r} has no size ({dt}): no batch could match it; give its length, "
                         f"e.g. {dt.kind}16")
    if dt.subdtype is not None:
        # numpy expands it into the array's shape: a pool of it holds batches of another shape and dtype
        raise ValueError(f"dtype {value!r} is a subarray dtype ({dt}): an array of it has dtype {dt.base} and "
                         f"{dt.shape} more dimensions; give them in shape= and dtype={dt.base}")
    check_batch_dtype(dt, "dtype=")
    return dt


def check_batch_dtype(dt: np.dtype, what: str) -> np.dtype:
    """Refuse a batch dtype that holds Python objects: a slot's copy of such a batch copies the references, so
    the batch handed out would share its objects with the source (one that reuses what it yields changes the
    batches the caller holds: "arrays you own" would not hold)."""
    if dt.hasobject and dt.kind != "T":  # (StringDType copies its strings: refused by the core for another reason)
        raise TypeError(f"{what} has dtype {dt}, which holds Python objects: the prefetcher copies batches into "
                        "preallocated slots, and a copy of references would share the source's objects with the "
                        "caller; yield numeric arrays (pad ragged batches, or yield their parts separately)")
    return dt


def check_out(out: Any, shape: tuple[int, ...] | None, dtype: Any, call: str) -> None:
    """Refuse an ``out`` array a copy of a batch cannot land in whole: checked before anything is consumed.

    ``shape`` None: the batch shape is not known (the first read failed), so only the kind of array is checked.
    On every ``copy_prefetched``: a plain contiguous array passes with a type test, two flag tests and the
    shape and dtype comparison.
    """
    if type(out) is not np.ndarray:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out must be a numpy array, not {type(out).__name__}")
        if isinstance(out, np.ma.MaskedArray) and np.ma.is_masked(out):
            raise TypeError("out is a numpy.ma.MaskedArray with masked elements: a copy into it keeps its mask, "
                            "which hides part of the batch; pass a plain array (out.data) or unmask it first")
    flags = out.flags
    if not flags.writeable:
        raise ValueError(f"out is read-only: {call} needs a writeable array")
    if shape is not None and (out.shape != shape or out.dtype != dtype):
        raise ValueError(f"out has shape {out.shape} dtype {out.dtype}; the batches have shape {shape} dtype {dtype}")
    if not flags.forc and overlaps_itself(out):  # contiguous (C or Fortran order): no element shares memory
        raise ValueError(f"out overlaps itself (strides {out.strides} for shape {out.shape}): a copy into it would "
                         "keep only part of the batch; pass an array whose elements are distinct memory")


def overlaps_itself(a: np.ndarray) -> bool:
    """Whether two elements of ``a`` may share memory (a stride of 0, or strides smaller than the dimensions
    inside them span: ``as_strided`` and broadcast views). Conservative: an exotic interleaved layout that
    does not overlap may be called overlapping; any layout numpy makes by slicing, transposing or reshaping
    is not."""
    dims = sorted((abs(st), n) for st, n in zip(a.strides, a.shape) if n != 1)
    if any(n == 0 for _st, n in dims):
        return False
    span = a.itemsize
    for st, n in dims:
        if st < span:
            return True
        span += st * (n - 1)
    return False

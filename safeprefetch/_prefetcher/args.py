"""Argument checking: bad input gets a clear TypeError or ValueError, at construction or at the call."""

from __future__ import annotations

import math
import numbers
import time
from typing import Any

import numpy as np

__all__ = ["as_bool", "as_dtype", "as_int", "as_seconds", "as_shape", "deadline_after"]


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
    return dt

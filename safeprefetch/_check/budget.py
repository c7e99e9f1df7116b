"""A memory budget for a search: stop early with a partial result, never die of ``MemoryError``.

What it guarantees
------------------
A search given ``memory=N`` bytes asks :meth:`MemoryBudget.exceeded` every
thousand or so states; it answers True once the process's resident set,
plus what the visited set will allocate when it next grows, would pass N.
The search then stops where it is and returns its result so far, marked
not exhaustive with ``stop_reason="memory"``. The check looks ahead because
the visited set grows in jumps: a Python dict, or the fingerprint table,
allocates its doubled table while the old one is still alive, so an
eight-gigabyte search can ask for several more in one step. Python cannot
recover from a failed allocation in the middle of that resize: checking
after it would be too late.

The resident set is read from ``/proc/self/statm`` (Linux); where that is
missing, the budget counts the visited set's own estimate only.
"""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from typing import Iterator

__all__ = ["BUILD_MEMORY", "DictGrowth", "MemoryBudget", "bounded_build", "format_bytes", "parse_memory",
           "resident_bytes"]

#: What building one model may add to the process's address space (the CLI's ``check``, ``replay``,
#: ``play`` and ``run``; ``explain`` tests its build under it first). A build is small -- every catalog model builds in a few MB -- but its size follows
#: its parameters, and ``--set capacity=1000000000`` makes the prefetcher model allocate an 8 GB
#: tuple before anything can look at it (a minute of swapping, or the OOM killer). 2 GiB is some
#: hundred times any real build, and fails such a build at once, with a MemoryError.
BUILD_MEMORY = 2 << 30

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_memory(text: str) -> int:
    """``"8G"``, ``"512M"``, ``"1.5GiB"``, ``"1000000"`` -> bytes. Raises ValueError on anything else."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:I?B)?\s*", text.upper())
    if not m:
        raise ValueError(f"cannot read {text!r} as an amount of memory (try 512M, 8G or a byte count)")
    n = int(float(m.group(1)) * _UNITS[m.group(2)])
    if n <= 0:
        raise ValueError(f"a memory budget must be positive, not {text!r}")
    return n


def resident_bytes() -> int:
    """This process's resident set in bytes (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@contextmanager
def bounded_build(what: str, extra: int = BUILD_MEMORY) -> Iterator[None]:
    """Run a model's build with at most ``extra`` more bytes of address space (``RLIMIT_AS``, Linux);
    a ``MemoryError`` inside becomes a ModelError naming ``what``. It lowers the soft limit only
    (never raises one the user set), and restores it after. Where the limit or /proc is missing it
    only translates the MemoryError. For a process of its own (the CLI): the limit is process-wide.
    """
    from .._dsl.violations import ModelError

    restore = None
    try:
        import resource

        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        want = size + extra
        if hard != resource.RLIM_INFINITY:
            want = min(want, hard)
        if soft == resource.RLIM_INFINITY or want < soft:
            resource.setrlimit(resource.RLIMIT_AS, (want, hard))
            restore = (resource, soft, hard)
    except (ImportError, OSError, ValueError, IndexError):
        restore = None
    try:
        yield
    except MemoryError:
        raise ModelError(f"{what} ran out of memory: it needed more than {format_bytes(extra)} "
                         "(is a parameter far too large?)") from None
    finally:
        if restore is not None:
            res, soft, hard = restore
            res.setrlimit(res.RLIMIT_AS, (soft, hard))


def format_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


class MemoryBudget:
    """``exceeded(states, next_growth)``: would the search pass ``limit`` bytes at its next growth?

    ``next_growth`` is what the visited set will allocate before the next
    check, 0 when it will not grow (see :class:`DictGrowth` and
    :meth:`~.fingerprint.FingerprintTable.growth_soon`).
    """

    def __init__(self, limit: int):
        if limit <= 0:
            raise ValueError("a memory budget must be positive")
        self.limit = limit
        self.start = resident_bytes()
        self.peak = self.start
        self.reason = ""

    def exceeded(self, states: int, next_growth: int) -> bool:
        """True (and ``reason`` set) when ``next_growth`` more bytes, or a 5% reserve, would not fit."""
        rss = resident_bytes()
        self.peak = max(self.peak, rss)
        if rss + max(next_growth, self.limit // 20) <= self.limit:
            return False
        self.reason = (f"stopped at {states:,} states: memory budget {format_bytes(self.limit)} "
                       f"(resident {format_bytes(rss)}, the next growth of the visited set needs about "
                       f"{format_bytes(next_growth)} more)")
        return True


class DictGrowth:
    """When a growing dict will next resize, and what that resize will allocate.

    CPython resizes a dict when its entries reach two thirds of its slots,
    to twice the slots; so the next resize comes at twice the entry count of
    the last one, and allocates twice the dict's current size while the old
    table is still alive. ``sys.getsizeof`` tells when a resize happened.
    """

    def __init__(self, d: dict):
        self.d = d
        self.size = sys.getsizeof(d)
        self.at = len(d)

    def soon(self, margin: int) -> int:
        """Bytes the dict will allocate if it resizes within ``margin`` more entries (else 0)."""
        size = sys.getsizeof(self.d)
        n = len(self.d)
        if size != self.size:
            self.size, self.at = size, n
        return 2 * size if n + margin >= 2 * self.at else 0

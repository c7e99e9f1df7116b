"""Fault scenarios for the live Prefetcher: the generator, and the sources that inject each fault.

A :class:`Scenario` is a random configuration (source kind, capacity,
workers, ordering, index plan, how the consumer reads) plus at most one
fault: a source error at a chosen stream position (an Exception, a
BaseException, a batch of the wrong shape or dtype, a non-array), a close
(from the consumer, or from another thread after a delay), an abandonment
mid-stream, a slow or bursty consumer, a slow source, small ``get``
timeouts. Every field is plain data: a failing scenario is reported as JSON
(the soak's ``failures``) and built again with ``Scenario(**fields)``.

The same :func:`generate` drives the Hypothesis tests (``pick`` draws from
Hypothesis) and ``python -m safeprefetch soak`` (``pick`` draws from a
seeded ``random.Random``), so the soak is the test suite at scale.

The sources fill every batch with its source index (real ``.npy`` files for
the file sources, written once and shared), so a lost, duplicated, reordered
or corrupted batch is visible in the data; at the fault's index they raise,
or return the wrong thing, and remember what they raised so the runner
(``soak.py``) can check that the consumer got the same object.
"""

from __future__ import annotations

import atexit
import random
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["CONSUMERS", "ERRORS", "PACES", "PLANS", "SOURCES", "STOPS", "InjectedBaseError", "InjectedError",
           "Scenario", "expected_plan", "generate", "make_source", "random_scenario", "scenario_files"]

SOURCES = ("list", "iter", "map", "fetch_into", "npy", "npy_into")
PLANS = ("seq", "shard", "shuffle")
CONSUMERS = ("iter", "get", "copy", "lease")
ERRORS = ("none", "exception", "base", "shape", "dtype", "type")
STOPS = ("none", "close", "thread", "abandon")
PACES = ("fast", "slow", "bursty")
SHAPE = (2, 3)
DTYPES = ("int64", "float32")


@dataclass(frozen=True)
class Scenario:
    """One random configuration and at most one fault. Every field is plain data (JSON-able)."""

    source: str = "list"
    items: int = 4
    capacity: int = 2
    workers: int = 1
    ordered: bool = True
    plan: str = "seq"
    rank: int = 0
    world_size: int = 1
    seed: int = 0
    epoch: int = 0
    dtype: str = "int64"
    explicit_shape: bool = False
    memory_slots: int = 0          # >0: memory_budget = this many batches
    consume: str = "iter"
    error: str = "none"
    error_pos: int = -1            # stream position of the fault
    stop: str = "none"
    stop_after: int = 0            # batches received before the consumer closes or abandons
    close_delay_ms: int = 0        # stop="thread": another thread closes after this delay
    fetch_ms: int = 0              # source latency per item
    pace: str = "fast"
    consumer_ms: int = 0
    timeout_ms: int = 0            # >0: get/copy/lease with this timeout, retried on PrefetchTimeout



class InjectedError(Exception):
    """The Exception a scenario's source raises at its fault position."""

    def __init__(self, index: int):
        super().__init__(f"injected failure at source index {index}")
        self.index = index


class InjectedBaseError(BaseException):
    """A BaseException (not an Exception) raised by the source, like SystemExit."""

    def __init__(self, index: int):
        super().__init__(f"injected BaseException at source index {index}")
        self.index = index


# --------------------------------------------------------------------------
# Generating scenarios
# --------------------------------------------------------------------------


def generate(pick: Callable[[int, int], int], **fixed: Any) -> Scenario:
    """Build a scenario from ``pick(lo, hi)`` (an int in [lo, hi]); ``fixed`` fields are not drawn."""

    def choose(name: str, options: tuple, lo: int = 0) -> Any:
        if name in fixed:
            return fixed[name]
        return options[pick(lo, len(options) - 1)]

    def number(name: str, lo: int, hi: int) -> int:
        if name in fixed:
            return fixed[name]
        return pick(lo, max(lo, hi))

    source = choose("source", SOURCES)
    items = number("items", 0, 12)
    capacity = number("capacity", 1, 4)
    workers = 1 if source == "iter" else number("workers", 1, 3)
    ordered = choose("ordered", (True, False))
    plan = "seq" if source == "iter" else choose("plan", PLANS)
    world_size = number("world_size", 2, 3) if plan == "shard" else 1
    rank = number("rank", 0, world_size - 1) if plan == "shard" else 0
    seed = number("seed", 0, 1000) if plan == "shuffle" else 0
    epoch = number("epoch", 0, 3) if plan == "shuffle" else 0
    positions = len(range(rank, items, world_size))
    dtype = choose("dtype", DTYPES)
    consume = choose("consume", CONSUMERS)
    # Half the scenarios have no fault, so complete clean streams stay common.
    if "error" in fixed:
        error = fixed["error"] if positions else "none"
    else:
        error = ERRORS[pick(1, len(ERRORS) - 1)] if positions and pick(0, 1) else "none"
    if source in ("fetch_into", "npy_into") and error in ("shape", "dtype", "type"):
        error = "exception"  # fetch_into writes into the slot: it cannot return a wrong array
    error_pos = number("error_pos", 0, positions - 1) if error != "none" else -1
    explicit_shape = bool(choose("explicit_shape", (False, True)))
    if source == "fetch_into" or (error in ("shape", "dtype") and error_pos == 0):
        explicit_shape = True  # no __getitem__; or: a wrong first batch would define the shape
    memory_slots = number("memory_slots", 0, 3)
    stop = fixed["stop"] if "stop" in fixed else (STOPS[pick(1, len(STOPS) - 1)] if pick(0, 1) else "none")
    stop_after = number("stop_after", 0, positions) if stop in ("close", "abandon") else 0
    close_delay_ms = number("close_delay_ms", 0, 20) if stop == "thread" else 0
    fetch_ms = number("fetch_ms", 0, 2)
    pace = choose("pace", PACES)
    consumer_ms = number("consumer_ms", 0, 2) if pace != "fast" else 0
    timeout_ms = number("timeout_ms", 0, 3) if consume != "iter" else 0
    return Scenario(source, items, capacity, workers, ordered, plan, rank, world_size, seed, epoch, dtype,
                    explicit_shape, memory_slots, consume, error, error_pos, stop, stop_after, close_delay_ms,
                    fetch_ms, pace, consumer_ms, timeout_ms)


def random_scenario(rng: random.Random, **fixed: Any) -> Scenario:
    return generate(rng.randint, **fixed)


# --------------------------------------------------------------------------
# Sources with a fault
# --------------------------------------------------------------------------


class _Files:
    """Real .npy files, one per (index, dtype), written on first use and shared by scenarios."""

    def __init__(self, root: Path):
        self.root = root
        self.lock = threading.Lock()

    def path(self, index: int, dtype: str, shape: tuple[int, ...] = SHAPE) -> Path:
        p = self.root / f"{dtype}-{'x'.join(map(str, shape))}-{index:04d}.npy"
        if not p.exists():
            with self.lock:
                if not p.exists():
                    tmp = p.with_suffix(f".tmp{threading.get_ident()}.npy")
                    np.save(tmp, np.full(shape, index, dtype=dtype))
                    tmp.replace(p)
        return p


_default_files: _Files | None = None


def scenario_files(workdir: str | Path | None) -> _Files:
    """The .npy files in ``workdir``; by default in a temporary directory shared by the process's scenarios."""
    global _default_files
    if workdir is not None:
        return _Files(Path(workdir))
    if _default_files is None:
        root = Path(tempfile.mkdtemp(prefix="safeprefetch-soak-"))
        atexit.register(shutil.rmtree, root, True)
        _default_files = _Files(root)
    return _default_files


class _Fault:
    """The shared part of every scenario source: latency, and the fault at one source index."""

    def __init__(self, sc: Scenario, files: _Files, fault_index: int):
        self.sc = sc
        self.files = files
        self.fault_index = fault_index
        self.raised: BaseException | None = None

    def item(self, index: int) -> Any:
        sc = self.sc
        if sc.fetch_ms:
            time.sleep(sc.fetch_ms / 1000)
        if index == self.fault_index:
            if sc.error == "exception":
                self.raised = InjectedError(index)
                raise self.raised
            if sc.error == "base":
                self.raised = InjectedBaseError(index)
                raise self.raised
            if sc.error == "shape":
                return np.full(SHAPE[::-1], index, dtype=sc.dtype)
            if sc.error == "dtype":
                return np.full(SHAPE, index, dtype="int32")
            if sc.error == "type":
                return np.full(SHAPE, index, dtype=sc.dtype).tolist()
        if sc.source in ("npy", "npy_into"):
            return np.load(self.files.path(index, sc.dtype))
        return np.full(SHAPE, index, dtype=sc.dtype)


class _MapSource(_Fault):
    def __init__(self, sc, files, fault_index):
        super().__init__(sc, files, fault_index)

    def __len__(self) -> int:
        return self.sc.items

    def __getitem__(self, index: int) -> Any:
        return self.item(index)


class _IntoSource(_Fault):
    """fetch_into only (no __getitem__): needs shape= and dtype=."""

    def __len__(self) -> int:
        return self.sc.items

    def fetch_into(self, index: int, out: np.ndarray) -> None:
        sc = self.sc
        if sc.source == "npy_into" and index != self.fault_index:
            if sc.fetch_ms:
                time.sleep(sc.fetch_ms / 1000)
            np.copyto(out, np.load(self.files.path(index, sc.dtype), mmap_mode="r"))
            return
        np.copyto(out, self.item(index))


class _NpyIntoSource(_IntoSource):
    """fetch_into, plus __getitem__ so the prefetcher can learn the shape from the first file."""

    def __getitem__(self, index: int) -> Any:
        return self.item(index)


def make_source(sc: Scenario, files: _Files, plan: list[int]) -> tuple[Any, _Fault]:
    """The source the Prefetcher reads, and the part that injects the fault (the same object unless a generator)."""
    fault = plan[sc.error_pos] if sc.error != "none" else -1
    if sc.source in ("list", "iter"):
        src = _MapSource(sc, files, fault)
        if sc.source == "list":
            return src, src  # map-style, served by __getitem__

        def gen():
            for i in range(sc.items):
                yield src.item(i)
        return gen(), src
    if sc.source in ("map", "npy"):
        src = _MapSource(sc, files, fault)
        return src, src
    if sc.source == "fetch_into":
        src = _IntoSource(sc, files, fault)
        return src, src
    src = _NpyIntoSource(sc, files, fault)
    return src, src


def expected_plan(sc: Scenario) -> list[int]:
    """The source index at each stream position (an independent statement of the plan)."""
    if sc.source == "iter":
        return list(range(sc.items))
    order = list(range(sc.items))
    if sc.plan == "shuffle":
        order = [int(x) for x in np.random.default_rng([sc.seed, sc.epoch]).permutation(sc.items)]
    return order[sc.rank::sc.world_size]


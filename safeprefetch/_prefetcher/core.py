"""The Prefetcher: the checked prefetcher model, run live over a numpy slot pool.

Theory of operation
-------------------
There is exactly one implementation of the prefetch protocol in this
project: the reference model in ``models/prefetcher.py``, which the checker
proves free of deadlocks, lost wakeups, lost, duplicated or reordered items,
swallowed errors and shutdown hangs, for every interleaving of every small
configuration. This module does not re-implement it. It compiles that model
with the real configuration (capacity, workers, number of items, ordered)
and hands it to the live runtime (``_live.py``), which applies the model's
own steps under one kernel lock. What this module adds is everything the
model deliberately leaves out -- arrays, time, users and the interpreter:

* **The slot pool.** The machine's state holds slot numbers, indices and
  flags, never arrays. The arrays live in one preallocated numpy block,
  ``pool[capacity, *batch_shape]``. A worker writes ``pool[k]`` only while
  the state says slot ``k`` is ``FILLING`` by that worker (between its
  "claim index and slot" step and its "fetch into slot" step); the consumer
  reads ``pool[k]`` only while the state says ``k`` is ``LEASED`` (between
  "take next batch" and "release lease"). The kernel lock orders those
  steps, so "no slot is written while it is read" is the model's checked
  property, not a hope. Leases are views of a read-only alias of the pool,
  so a caller cannot make one writeable.
* **Threads.** Each model worker runs on its own daemon ``threading.Thread``
  that drives its model thread with ``Runtime.step``; the model's external
  step "fetch into slot" runs the source outside the kernel lock. The model
  consumer is driven by the caller's ``get`` / ``__next__`` /
  ``copy_prefetched`` / ``lease``, one caller at a time (the *gate*); the
  model closer by ``close()``.
* **Sources.** Map-style sources (``__len__`` + ``__getitem__``, or
  ``fetch_into(i, out)``) are fetched in parallel; the model's indices
  0..n-1 are stream *positions*, mapped onto source indices by an index plan
  (sequential, strided shard, or seeded shuffle). An iterator source is read
  by one worker, in order; its end is the fetch outcome "end" (the model's
  ``sized=off`` mode, checked separately). Workers reach the source only
  through a weak reference to a box the Prefetcher owns, so a source that
  refers to its own Prefetcher (``self.pf = Prefetcher(self)``) does not
  keep it alive through the worker threads.
* **Errors** are values in the state: a failed fetch publishes its slot as
  ``FAILED`` at its index, and the exception object waits in a side table
  keyed by that index until the consumer's take reaches it. The consumer then
  re-raises the *same* object, so its type, message and traceback (which
  includes the worker's frames) are the original ones.

Where the proof ends: interrupts, finalizers, fork and exit
-----------------------------------------------------------
The model's steps are atomic; the interpreter can cut them. The rules this
module keeps (arguments in ``_interrupts.py`` and ``_lifecycle.py``):

* **Nothing that may run on a thread already inside a step waits for a
  lock that thread may hold.** ``close()`` checks first: if the calling
  thread holds the kernel lock or the close lock, or is one of the
  prefetcher's workers (a signal handler that interrupted ``next()``; a GC
  finalizer on a worker; a source closing its own prefetcher), it marks the
  prefetcher closed and leaves the rest to the reaper thread. The finalizer
  of an abandoned prefetcher always does that.
* **An interrupted consumer call loses no batch.** A call produces its
  outcome (a copied array, ``out`` filled, a Lease, the end, an error) into
  the *stash* under the gate, and takes it out of the stash on the line that
  returns it. A run of batches the model consumer holds is released only
  after the last batch of it is in the stash. So wherever a
  ``KeyboardInterrupt`` lands -- in the kernel, while copying, while
  releasing -- the next call finds either the run still held (and serves the
  next batch of it) or the outcome in the stash (and returns it), and a take
  whose caller never saw its result is recognised by the model consumer's
  own lease. With the SIGINT wrapper installed (``_interrupts.py``), a
  Ctrl-C inside a call is delivered at the blocking wait or just before the
  call returns, with the outcome kept for the next call; a ``queue.Queue``
  consumer loses the item it was handing out.
* **No lock leaks.** The gate and the kernel lock are ``RLock`` s used
  without re-entry (so a thread can ask whether it holds one), taken by
  ``with`` or, for timed waits, by a wait that releases what it took if it
  is interrupted before the ``with`` owns it.
* **Fork:** the child's copy raises :class:`PrefetcherForked`. **Exit:**
  open prefetchers are closed concurrently, within one ``close_timeout``.

Decisions, and why
------------------
* ``BaseException`` from a source (``SystemExit``, ``KeyboardInterrupt``
  raised by source code, ``GeneratorExit``) is delivered like any other
  error: the consumer re-raises the same object at its position. Calling the
  source inline would have raised it in the consumer, so that is what the
  prefetched stream does too; silently ending the stream (as
  ``prefetch_generator`` does) would hide it. A ``StopIteration`` raised by a
  map-style source is not an end of stream (there is no such thing for an
  indexed source): it is a ``RuntimeError`` at its position, as PEP 479
  makes it for generators.
* The first batch is read eagerly, in the constructor, unless both
  ``shape=`` and ``dtype=`` are given: the pool is allocated from its shape
  and dtype, and ``memory_budget`` needs the batch size to cap the capacity.
  An exception from that read is *not* raised by the constructor: it is
  delivered at position 0, like every other source error. With
  ``timeout=``, that read runs on a helper thread and the constructor raises
  :class:`PrefetchTimeout` when it does not finish in time.
* One lease at a time (the model's "at most one lease"): any other take
  while a lease is held raises :class:`LeaseHeld` instead of blocking.
* ``close()`` never hangs: joining is bounded by ``close_timeout``. A fetch
  that never returns is reported by a :class:`PrefetcherWarning` and its
  daemon thread is left behind; when the fetch returns at last, the model
  discards the result and the thread exits on its own.
* Sources are called from several worker threads at once when
  ``workers > 1``. A source that is not thread-safe says so with
  ``thread_safe=False``: its calls are then serialized by a lock (the workers
  still overlap the copy into the slots and the consumer's work).

* **Autotune** (``autotune=True``) is the model's own tuner thread: the
  pool is allocated at ``max_capacity`` slots and the model's ``target``
  says how many the workers may use; the consumer's calls take the tuner's
  "grow" and "shrink" steps when the policy in ``_Core._autotune`` says so.
  Every resize at every point is checked (tests/test_prefetcher_autotune.py).
* The hot path (measured in docs/performance.md): the compiled machine is
  shared per shape and only its initial stream length differs; workers take
  "fetch into slot" and the next claim in one critical section
  (``chain=True``), parking there when no slot is free.
* **Runs.** The model is compiled with ``run = min(capacity, 16)``: the
  consumer may take several ready batches in one step and hand them out one
  call at a time from ``_Core.run``, releasing them together after the
  last. The checker proves every run length safe; the policy here only
  picks one: as many batches as the caller uses in ``_RUN_BUDGET`` (100 µs)
  at its own pace between calls (a running average). A caller slower than
  that takes one batch per step, exactly as without runs; a fast one pays
  two kernel steps per run instead of per batch. A new ``Lease`` starts a
  run of one. Workers publish every batch as soon as it is fetched, before
  calling the source again: a source whose next item waits for the caller
  to receive the previous one (a request/response stream) would hang behind
  a worker holding fetched batches back.

Open questions: a signal landing in the few bytecodes between the gate's
``with`` exit and a consumer call's return is deferred and delivered by the
call, which puts its outcome back first; with two consumer threads racing,
that outcome may then be delivered after a batch another thread took in
between (never lost, never duplicated).
"""

from __future__ import annotations

import copy
import functools
import math
import numbers
import operator
import sys
import threading
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .._runtime import interrupts as _interrupts
from .._runtime.interrupts import deliver, guard, interruptible, interruptible_until_owned, outermost, protected
from .lifecycle import PrefetcherForked, open_cores, reaper, register, unregister
from .._runtime.kernel import LiveError, Runtime, StepTimeout
from .._dsl.model import DONE

__all__ = [
    "Lease",
    "LeaseHeld",
    "LeaseReleased",
    "PrefetchStats",
    "PrefetchTimeout",
    "Prefetcher",
    "PrefetcherClosed",
    "PrefetcherExhausted",
    "PrefetcherForked",
    "PrefetcherWarning",
]

#: Bound on how long ``close()`` waits for the workers by default. A fetch
#: normally returns within milliseconds once ``closing`` is set (blocked
#: workers are woken at once); five seconds leaves room for a slow disk or
#: network read in flight, and is still short enough that a stuck source does
#: not look like a hung program.
DEFAULT_CLOSE_TIMEOUT = 5.0

#: ``items`` for an iterator source: the model's upper bound on the length,
#: larger than any real stream. The true length is learned from the "end"
#: outcome of a fetch.
_UNBOUNDED = 2 ** 62

#: A consumer that waits for more than this fraction of the elapsed time is
#: starved: the source is the bottleneck (see PrefetchStats.bottleneck).
_STARVED = 0.1

# Slot states, as in models/prefetcher.py.
_READY, _FAILED = 2, 3
_FREE = (0, -1)

# The model's step labels this module drives (models/prefetcher.py).
_CLAIM = "claim index and slot"
_RELEASE = "release lease"
_CLOSE = "close"
_JOIN = "join workers"
_FETCH = "fetch into slot"

#: The longest run of ready batches the consumer may take in one model step. Runs
#: amortize the kernel's per-step cost over cheap batches; the model checks every
#: run length up to this (tests/test_prefetcher_runs.py).
_MAX_RUN = 16

#: How much of the caller's time one run may cover: the consumer takes as many
#: ready batches as its caller uses in this long. While it holds them, the
#: workers cannot refill their slots, so it is kept near the cost of one thread
#: handoff on a typical machine (tens of microseconds), where bundling pays; a
#: caller that takes longer than this per batch takes one per step, exactly as
#: without runs.
_RUN_BUDGET = 100e-6

#: Weight of the newest sample in the running averages that choose run lengths.
_EWMA = 0.25

#: Autotune's default ceiling on the pool, in batches, when ``max_capacity`` is not
#: given. A buffer absorbs the source's jitter; sixteen batches cover a stall of
#: sixteen consumer steps, far more than a healthy source shows, and a source
#: slower than that on average is a throughput problem no buffer fixes (autotune
#: then stops growing anyway). The pool is ``np.empty``: slots the target never
#: reaches are never touched, so the operating system never backs them with memory.
DEFAULT_AUTOTUNE_MAX = 16

#: Autotune shrinks after this many takes in a row found at least two batches ready.
#: Long enough that one lucky stretch does not shrink a buffer that jitter needs;
#: short enough that an over-grown buffer is given back within a second or so at
#: typical step rates. Each grow that follows a shrink doubles it, up to the max.
_SHRINK_WINDOW = 32
_SHRINK_WINDOW_MAX = 1024

_TIMEOUT_MAX = threading.TIMEOUT_MAX


class PrefetcherClosed(RuntimeError):
    """The prefetcher was closed (or abandoned); it cannot deliver any more batches."""


class PrefetchTimeout(TimeoutError):
    """``get(timeout=...)`` (or ``copy_prefetched`` / ``lease``, or the constructor's first read) found no batch in time.

    Nothing was consumed: calling again continues the stream where it was.
    """


class LeaseHeld(RuntimeError):
    """A batch was requested while a lease is still held.

    The reference model allows at most one lease; release it first
    (``lease.release()``, or leave its ``with`` block).
    """


class LeaseReleased(RuntimeError):
    """The Lease was released: its slot belongs to the workers again, and its array may be overwritten."""


class PrefetcherExhausted(RuntimeError):
    """A second pass over a Prefetcher whose stream has ended. A Prefetcher is one pass; make a new one."""


class PrefetcherWarning(RuntimeWarning):
    """``close()`` gave up waiting for a worker stuck inside a fetch; its daemon thread was left running."""


@dataclass(frozen=True)
class PrefetchStats:
    """Where the time went. Answers "is prefetching paying off?". ``str(stats)`` reads as a summary.

    Prefetching pays off when the consumer rarely waits
    (``consumer_wait_fraction`` near 0, ``prefetch_efficiency`` near 1). If
    the consumer waits a lot, the source is the bottleneck: add workers or a
    faster source. If instead the workers spend their time blocked on a full
    buffer, the consumer is the bottleneck and prefetching is already doing
    all it can.
    """

    #: Batches delivered to the consumer (errors not counted).
    batches: int
    #: Seconds since construction (frozen at close).
    elapsed_seconds: float
    #: ``batches / elapsed_seconds``.
    batches_per_second: float
    #: Seconds the consumer spent blocked waiting for a batch to be ready.
    consumer_wait_seconds: float
    #: ``consumer_wait_seconds / elapsed_seconds``: 0 means the loop never waited for data.
    consumer_wait_fraction: float
    #: Seconds the workers spent inside source fetches, summed over workers.
    worker_fetch_seconds: float
    #: Seconds the workers spent waiting for a free slot (the buffer was full), summed over workers.
    worker_blocked_seconds: float
    #: Fraction of the fetch time hidden from the consumer:
    #: ``1 - consumer_wait_seconds / worker_fetch_seconds``, clamped to [0, 1].
    #: 1.0 means every second of fetching overlapped the consumer's own work.
    prefetch_efficiency: float
    #: Mean number of ready batches in the buffer when the consumer asked for one.
    mean_occupancy: float
    #: Largest number of ready batches seen when the consumer asked for one.
    max_occupancy: int
    #: Slots the workers may fill at once: the pool size, or with ``autotune`` the current target.
    capacity: int
    #: Worker threads.
    workers: int
    #: ``"source"`` when the consumer waited more than 10% of the time, ``"consumer"`` otherwise,
    #: ``"none"`` before the first batch.
    bottleneck: str
    #: Slots in the preallocated pool (after ``memory_budget``); ``capacity`` never exceeds it.
    max_capacity: int = 0
    #: Times autotune changed the capacity (0 without autotune).
    capacity_changes: int = 0

    def summary(self) -> str:
        """A few human-readable lines (also what ``str(stats)`` and ``print(stats)`` show)."""
        return (f"{self.batches} batches in {self.elapsed_seconds:.3f} s ({self.batches_per_second:.1f}/s); "
                f"consumer waited {self.consumer_wait_seconds:.3f} s ({100 * self.consumer_wait_fraction:.1f}%)\n"
                f"workers: {self.workers}, fetching {self.worker_fetch_seconds:.3f} s, blocked on a full buffer "
                f"{self.worker_blocked_seconds:.3f} s; prefetch efficiency {100 * self.prefetch_efficiency:.1f}%\n"
                f"buffer: capacity {self.capacity}{self._tuned()}, occupancy mean {self.mean_occupancy:.2f} max "
                f"{self.max_occupancy}; bottleneck: {self.bottleneck}")

    def __str__(self) -> str:
        return self.summary()

    def _tuned(self) -> str:
        if not self.capacity_changes:
            return ""
        return f" (autotuned, {self.capacity_changes} changes, pool of {self.max_capacity})"


# --------------------------------------------------------------------------
# The compiled reference model, shared between prefetchers with one config.
# --------------------------------------------------------------------------


def _compile(capacity: int, workers: int, items: int, ordered: bool, sized: bool, target: int = 0, run: int = 1):
    """The reference prefetcher model compiled for one live configuration.

    ``error=on`` (any fetch may fail), ``close=on`` (the closer is driven by
    ``close()``), ``abandon=off`` (abandonment is a close from the finalizer),
    ``history=off`` (O(1) per step; see tests/test_prefetcher_model_modes.py).
    ``target > 0`` turns on ``autotune`` with that starting target: ``capacity``
    is then the physical pool, and the model's tuner thread (driven by the
    consumer's calls) resizes the target within it. ``run`` is the longest run
    of ready batches the consumer may take in one step.
    """
    from ..models.prefetcher import Prefetcher as Model

    config = {"capacity": capacity, "workers": workers, "items": items, "ordered": ordered,
              "error": True, "close": True, "abandon": False, "sized": sized, "history": False, "run": run}
    if target:
        config.update(autotune=True, target=target)
    return Model.compile(config)


@functools.lru_cache(maxsize=256)
def _template(capacity: int, workers: int, ordered: bool, sized: bool, target: int, run: int):
    return _compile(capacity, workers, 1, ordered, sized, target, run)


@functools.lru_cache(maxsize=1024)
def _machine(capacity: int, workers: int, items: int, ordered: bool, sized: bool, target: int = 0, run: int = 1):
    """``_compile(...)``, without compiling again for every stream length.

    Compiling specializes every step function (tens of milliseconds), and the
    stream length enters the reference model only as the initial value of its
    ``length`` variable: no step, guard or check reads the ``items`` parameter.
    So the machine for ``items=n`` is the one compiled for the same shape with
    that initial value set to ``n``; tests/test_live_perf.py compares the
    two. A compiled machine is immutable, so prefetchers with one config share it.
    """
    base = _template(capacity, workers, ordered, sized, target, run)
    i = base.shared_index["length"]
    m = copy.copy(base)  # shares the compiled tables and the specialized invariants
    m.init = base.init[:i] + (items,) + base.init[i + 1:]
    m.config = {**base.config, "items": items}
    return m


# --------------------------------------------------------------------------
# Argument checking
# --------------------------------------------------------------------------


def _int(name: str, value: Any, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {type(value).__name__} ({value!r})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__} ({value!r})")
    return bool(value)


def _seconds(name: str, value: Any, *, positive: bool = False) -> float | None:
    """A timeout in seconds: any real number (numpy's too) >= 0, or > 0 with ``positive``.

    ``None`` and ``inf`` both mean "no timeout" and come back as ``None``; a
    finite value larger than the longest wait the platform supports is
    fine: waits are taken in pieces until the deadline.
    """
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds or None, not {type(value).__name__} ({value!r})")
    value = float(value)
    if value != value:
        raise ValueError(f"{name} must be a number of seconds, got nan")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'} seconds, got {value}")
    return None if value == math.inf else value


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _shape(value: Any) -> tuple[int, ...] | None:
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


def _dtype(value: Any) -> np.dtype | None:
    if value is None:
        return None
    try:
        return np.dtype(value)
    except TypeError as e:
        raise TypeError(f"dtype {value!r} is not a numpy dtype: {e}") from None


def _plan(n: int, shuffle: bool, seed: int, epoch: int, rank: int, world_size: int, even: str | None) -> np.ndarray:
    """The stream positions' source indices: a seeded permutation (or 0..n-1), then rank's strided shard.

    ``even="pad"`` repeats the first indices of the order so every rank gets
    ``ceil(n / world_size)`` items; ``"drop"`` drops the tail so every rank
    gets ``n // world_size``; ``None`` lets the first ``n % world_size``
    ranks have one more (ranks in lockstep, as under DDP, then disagree on
    the number of steps).
    """
    order = np.arange(n, dtype=np.int64)
    if shuffle:
        order = np.random.default_rng([seed, epoch]).permutation(n)
    if even == "pad" and n:
        order = np.resize(order, -(-n // world_size) * world_size)  # repeats from the start
    elif even == "drop":
        order = order[:(n // world_size) * world_size]
    plan = order[rank::world_size].copy()
    plan.flags.writeable = False
    return plan


def _remote_item(source: Any, index: int, shape: tuple[int, ...] | None, dtype: np.dtype | None) -> Any:
    """What an executor runs: fetch one item and return it (the worker copies it into its slot)."""
    if hasattr(source, "__getitem__"):
        return source[index]
    out = np.empty(shape, dtype)
    source.fetch_into(index, out)
    return out


class _SourceBox:
    """Everything that reaches the user's source, owned by the Prefetcher and seen by workers weakly.

    A worker resolves the weak reference for the length of one fetch. A
    source that refers back to its Prefetcher therefore forms a cycle
    (Prefetcher -> box -> source -> Prefetcher) that no thread roots, and the
    garbage collector can collect it and run the finalizer.
    """

    __slots__ = ("getitem", "fetch_into", "iterator", "source", "preloaded", "errors", "lock", "__weakref__")

    def __init__(self, getitem: Any, fetch_into: Any, iterator: Any, source: Any,
                 preloaded: dict[int, tuple[str, Any]], thread_safe: bool):
        self.getitem, self.fetch_into, self.iterator, self.source = getitem, fetch_into, iterator, source
        #: The constructor's read of position 0, if it made one: ("item", array) or ("error", exception).
        self.preloaded = preloaded
        #: Source exceptions waiting for the consumer, by stream position.
        self.errors: dict[int, BaseException] = {}
        #: Serializes calls into a source that is not thread-safe (``thread_safe=False``).
        self.lock = None if thread_safe else threading.Lock()


def _stop_iteration(where: str, e: StopIteration) -> RuntimeError:
    err = RuntimeError(f"{where}: the source raised StopIteration; a map-style source has no end of stream, "
                       "so this is an error (as PEP 479 makes it for generators)")
    err.__cause__ = e
    return err


def _read_first(read: Callable[[], Any], timeout: float | None, name: str, map_style: bool) -> tuple[str, Any]:
    """The constructor's read of position 0: ("item", x), ("error", Exception) or ("end", None).

    A ``BaseException`` that is not an ``Exception`` propagates (Ctrl-C in the
    source). With a ``timeout`` the read runs on a helper thread, and
    :class:`PrefetchTimeout` is raised when it does not finish in time (the
    helper is left behind as a daemon thread; what it reads is discarded).
    """
    def attempt() -> tuple[str, Any]:
        try:
            return "item", read()
        except StopIteration as e:
            if map_style:
                return "error", _stop_iteration("item 0", e)
            return "end", None
        except Exception as e:  # noqa: BLE001 - delivered at position 0, like any source error
            return "error", e

    if timeout is None:
        return attempt()
    box: list[Any] = []
    done = threading.Event()

    def run() -> None:
        try:
            box.append(attempt())
        except BaseException as e:  # noqa: BLE001 - handed to the constructor
            box.append(("base", e))
        finally:
            done.set()

    th = threading.Thread(target=run, name=f"safeprefetch-{name}-first-read", daemon=True)
    th.start()
    if not _wait_event(done, timeout):
        raise PrefetchTimeout(f"the source did not return its first batch within {timeout:g} s "
                              f"(the constructor reads it to size the slot pool; give shape= and dtype= to skip it)")
    kind, value = box[0]
    if kind == "base":
        raise value
    return kind, value


@interruptible
def _wait_event(event: threading.Event, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return event.is_set()
        if event.wait(min(remaining, _TIMEOUT_MAX)):
            return True


@interruptible
def _join_threads(threads: list[threading.Thread], deadline: float | None, me: threading.Thread) -> None:
    """Join every thread but ``me`` before ``deadline`` (None: no limit). Ctrl-C may cut it short."""
    for th in threads:
        if th is me:
            continue
        while th.is_alive():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            th.join(None if remaining is None else min(remaining, _TIMEOUT_MAX))


@interruptible_until_owned("gate")
def _wait_gate(gate: Any, deadline: float | None) -> bool:
    """Take the consumer gate, waiting until ``deadline``; True once owned.

    Interruptible while waiting; once the gate is owned, an interrupt is
    deferred (SIGINT wrapper) or, raised anyway, releases it here before
    propagating: the caller's ``with`` has not taken charge of it yet.
    """
    # (No ``return gate.acquire()``: an interrupt at the end of that call is caught by the
    # ``except`` below, but the instruction after it, the return, lies outside the ``try``.)
    try:
        if deadline is None:
            if guard.deferred:
                deliver()
            got = gate.acquire()
            return got
        while True:
            remaining = deadline - time.monotonic()
            if gate.acquire(True, min(remaining, _TIMEOUT_MAX)) if remaining > 0 else gate.acquire(False):
                return True
            if time.monotonic() >= deadline:
                return False
    except BaseException:
        if gate._is_owned():
            gate.release()
        raise


class _Gate(threading.RLock().__class__):  # type: ignore[misc]
    """The consumer gate: an RLock whose ``with`` does not acquire (``_wait_gate`` did) but does release.

    ``__enter__`` is the C method ``_is_owned``: no Python frame, no
    interruption point between the wait that took the gate and the ``with``
    that will give it back.
    """

    __slots__ = ()
    __enter__ = threading.RLock().__class__._is_owned


class _NoGate:
    """What the consumer's ``with`` enters when the gate was not taken in time: it raises PrefetchTimeout."""

    __slots__ = ()

    def __enter__(self) -> None:
        raise PrefetchTimeout("no batch within the timeout (another thread is consuming)")

    def __exit__(self, *exc: Any) -> None:  # pragma: no cover - __enter__ always raises
        return None


_NO_GATE = _NoGate()


# --------------------------------------------------------------------------
# The core: everything the threads touch. It never references the Prefetcher.
# --------------------------------------------------------------------------

# What a consumer call hands out. A stash entry is (kind, value, position, data, lease ref):
# ``kind`` is the API that produced it (_GET: value is a new array; _COPY: value is
# True, data is ``out``; _LEASE: value is a Lease) or a terminal outcome (_END, or
# _ERROR / _CLOSED, whose value is the exception to raise); ``data`` is the array
# holding the batch, for handing the entry to another API; ``lease ref`` a weak reference
# to the Lease (made beforehand, so that handing it out calls nothing).
_GET, _COPY, _LEASE = "get", "copy", "lease"
_END, _ERROR, _CLOSED = "end", "error", "closed"
_TERMINAL = (_END, _ERROR, _CLOSED)


class _Core:
    def __init__(self, *, machine, pool, shape, dtype, plan, box, executor, workers, close_timeout, name,
                 timeline=False, timeout=None):
        self.machine = machine
        self.pool = pool
        # pool[k, ...] is a 0-d array (not a numpy scalar) when batches are 0-d.
        self.slot_views = [pool[k, ...] for k in range(pool.shape[0])] if pool is not None else []
        # Leases are views of a read-only alias of the pool: their writeable flag cannot be set.
        ro = as_strided(pool, writeable=False) if pool is not None else None
        self.ro_views = [ro[k, ...] for k in range(pool.shape[0])] if pool is not None else []
        self.shape, self.dtype = shape, dtype
        self.plan = plan
        self.source_ref = weakref.ref(box)
        self.executor = executor
        self.close_timeout = close_timeout  # None: no limit
        self.timeout = timeout              # default timeout of the consumer's calls
        self.name = name

        m = machine
        self.rt = Runtime(m, {"fetch": self._fetch}, check_invariants=True)
        names = m.thread_names
        self.worker_ids = [names.index(f"worker{w}") for w in range(workers)]
        self.consumer = names.index("consumer")
        self.closer = names.index("closer")
        si = m.shared_index
        self.i_slots, self.i_closing = si["slots"], si["closing"]
        self.i_delivered, self.i_length, self.i_error_seen = si["delivered"], si["length"], si["error_seen"]
        self.i_consumer_pc = m.pc_index[self.consumer]
        self.i_closer_pc = m.pc_index[self.closer]
        self.i_lease = m.local_index[self.consumer]["lease"]
        # Per worker's model thread: (worker number, index of its "idx" local, of its "slot" local).
        # The fetch action reads them straight from the step's state snapshot.
        self.worker_fields = {t: (w, m.local_index[t]["idx"], m.local_index[t]["slot"])
                              for w, t in enumerate(self.worker_ids)}
        self.worker_pcs = [m.pc_index[t] for t in self.worker_ids]
        # Runs: the model's "take up to r" branches (none when run=1).
        takes = m.infos[self.consumer]["take next batch"].branches
        self.take_branches: tuple[str, ...] = tuple(b for b in takes if b.startswith("take up to "))
        self.call_ewma: float | None = None   # seconds from a batch in the caller's hands to its next call
        self.last_call: float | None = None
        # Autotune: the model's tuner thread, driven from the consumer's calls (see _autotune).
        self.tuner = names.index("tuner") if "tuner" in names else None
        self.i_target = si["target"]  # the whole pool unless autotune moves it
        self.slots_total = len(m.init[self.i_slots])
        self.tune_full = 0                   # consecutive takes that found >= 2 batches ready
        self.tune_window = _SHRINK_WINDOW    # that many in a row shrink the target by one
        self.tune_last: str | None = None
        self.capacity_log: list[tuple[float, int, int]] = []  # (seconds, batches delivered, new capacity)
        # Timeline (timeline=True): per-thread spans (thread, kind, start, end) and buffer
        # occupancy samples (time, ready batches), all perf_counter seconds.
        self.spans: list[tuple[str, str, float, float]] | None = [] if timeline else None
        self.occupancy_log: list[tuple[float, int]] | None = [] if timeline else None
        self.consumer_back: float | None = None  # when the consumer's last call returned

        # -- the consumer's side (changed only by the gate's owner) --
        self.gate = _Gate()                     # serializes the callers that drive the model consumer
        self.run: tuple[tuple[int, int], ...] = ()  # (slot, position) per batch the model consumer holds
        self.run_next = 0                       # how many of them went into the stash
        self.stash: tuple | None = None         # an outcome produced, not yet returned
        self.backlog: tuple = ()                # outcomes returned to the stash by interrupted calls (rare)
        # The Lease handed out last, weakly: a Lease the caller dropped unreleased (a Ctrl-C right
        # after lease() returned, before ``with`` took it) is released by the next call.
        self.lease_out: weakref.ref | None = None
        self.error_raised = False               # the source error was raised (later calls: end of stream)
        self.ended_with: str | None = None      # the terminal outcome handed out, once the stream is over

        # -- closing --
        self.close_lock = threading.RLock()     # serializes the callers that drive the model closer
        self.waiters_lock = threading.Lock()
        self.waiters: set[threading.Event] = set()  # executor waits that close() must cut short
        self.close_started = False              # close requested: no more batches (user-visible "closed")
        self.closed = False                     # close finished (threads joined, or reported stuck)
        self.forked = False                     # this is a forked child's copy (set by _lifecycle)
        self.stuck: list[str] = []
        self.sigint = False                     # this prefetcher asked for the SIGINT wrapper

        self.t0 = time.perf_counter()
        self.t_end: float | None = None
        self.fetch_seconds = [0.0] * workers
        self.blocked_seconds = [0.0] * workers
        self.wait_seconds = 0.0
        self.delivered = 0
        self.occupancy_sum = 0
        self.occupancy_samples = 0
        self.occupancy_max = 0
        self.last_pos: int | None = None  # stream position of the batch delivered last
        self.threads: list[threading.Thread] = []
        self.worker_idents: set[int] = set()

    # -- workers ------------------------------------------------------------

    def start(self) -> None:
        for w, t in enumerate(self.worker_ids):
            th = threading.Thread(target=_worker_main, args=(self, w, t), daemon=True,
                                  name=f"safeprefetch-{self.name}-worker{w}")
            self.threads.append(th)
            th.start()
            self.worker_idents.add(th.ident)

    def _closing(self) -> bool:
        # A racy read is sound: ``closing`` only ever goes from False to True.
        return self.rt.state[self.i_closing]

    @property
    def last_index(self) -> int | None:
        pos = self.last_pos
        if pos is None or self.plan is None:
            return pos
        return int(self.plan[pos])

    def _fetch(self, ctx) -> str:
        """The model's external step "fetch into slot": fill the worker's ``slot`` with item ``idx``."""
        w, i_idx, i_slot = self.worker_fields[ctx.thread]
        state = ctx.state  # the snapshot taken when the step began: its idx and slot are this fetch's
        pos, k = state[i_idx], state[i_slot]
        if self._closing():
            return "ok"  # the model discards a fetch that lands after close
        box = self.source_ref()
        if box is None:
            return "ok"  # the Prefetcher was collected: its finalizer has asked for the close
        t0 = time.perf_counter()
        try:
            if box.lock is None:
                return self._fill(box, pos, k)
            with box.lock:
                return self._fill(box, pos, k)
        except StopIteration as e:
            if box.iterator is not None:  # an iterator's own end is handled in _fill; this is not it
                box.errors[pos] = e
            else:
                box.errors[pos] = _stop_iteration(self._where(pos), e)
            return "error"
        except BaseException as e:  # noqa: BLE001 - every error is delivered at its position
            box.errors[pos] = e
            return "error"
        finally:
            t1 = time.perf_counter()
            self.fetch_seconds[w] += t1 - t0
            if self.spans is not None:
                self.spans.append((f"worker{w}", "fetch", t0, t1))

    def _fill(self, box: _SourceBox, pos: int, k: int) -> str:
        pre = box.preloaded.pop(pos, None) if box.preloaded else None
        if pre is not None:
            kind, value = pre
            if kind == "error":
                box.errors[pos] = value  # the very object the constructor's read raised
                return "error"
            item = value
        elif box.iterator is not None:
            try:
                item = next(box.iterator)
            except StopIteration:
                return "end"
        else:
            index = int(self.plan[pos])
            if self.executor is not None:
                item = self._remote(box, index)
                if item is _CLOSING:
                    return "ok"
            elif box.fetch_into is not None:
                box.fetch_into(index, self.slot_views[k])
                return "ok"
            else:
                item = box.getitem(index)
        self._check(pos, item)
        np.copyto(self.slot_views[k], item, casting="no")
        return "ok"

    def _where(self, pos: int) -> str:
        if self.plan is None:
            return f"item {pos}"
        index = int(self.plan[pos])
        return f"item {pos}" if index == pos else f"item {pos} (source index {index})"

    def _check(self, pos: int, item: Any) -> None:
        if type(item) is not np.ndarray:
            if not isinstance(item, np.ndarray):
                raise TypeError(f"{self._where(pos)}: expected a numpy array, got {type(item).__name__}")
            if isinstance(item, np.ma.MaskedArray):
                raise TypeError(f"{self._where(pos)}: a numpy.ma.MaskedArray: its mask would be dropped; "
                                "yield item.filled(value), or the data and the mask as separate arrays")
            if isinstance(item, np.matrix):
                raise TypeError(f"{self._where(pos)}: a numpy.matrix would come back as a plain ndarray; "
                                "yield np.asarray(item)")
        if self.pool is None:  # only when the first read already failed; cannot happen past position 0
            raise TypeError(f"{self._where(pos)}: no slot pool")
        if item.shape != self.shape or item.dtype != self.dtype:
            raise ValueError(f"{self._where(pos)}: expected shape {self.shape} dtype {self.dtype}, "
                             f"got shape {item.shape} dtype {item.dtype}")

    def _remote(self, box: _SourceBox, index: int) -> Any:
        fut = self.executor.submit(_remote_item, box.source, index, self.shape, self.dtype)
        done = threading.Event()
        fut.add_done_callback(lambda _f: done.set())
        with self.waiters_lock:
            self.waiters.add(done)
        try:
            if not self._closing():  # checked after registering: close() sets every registered event
                done.wait()
        finally:
            with self.waiters_lock:
                self.waiters.discard(done)
        if not fut.done():
            fut.cancel()
            return _CLOSING
        return fut.result()

    # -- consumer -----------------------------------------------------------
    #
    # Every method below runs with the gate held, except ``consume`` itself,
    # which takes it. The outcome of a call goes into ``self.stash`` before
    # anything that could make it unrecoverable (releasing the run), and
    # comes out on the line that returns it: see the module essay.

    def deadline(self, timeout: Any) -> float | None:
        """The deadline for a consumer call given its ``timeout`` argument (``_DEFAULT``: the prefetcher's)."""
        t = self.timeout if timeout is _DEFAULT else _seconds("timeout", timeout)
        return None if t is None else time.monotonic() + t

    def take_branch(self, single: bool) -> str | None:
        """The run the consumer takes next: as many batches as its own calls use in ``_RUN_BUDGET`` (None: no runs)."""
        branches = self.take_branches
        if not branches:
            return None
        per = self.call_ewma
        if single or per is None:
            return branches[0]
        r = len(branches) if per <= 0 else int(_RUN_BUDGET / per)
        return branches[min(max(r, 1), len(branches)) - 1]

    def _reentered(self) -> None:
        raise RuntimeError(f"prefetcher {self.name!r}: a consumer call from a signal handler or finalizer that "
                           "interrupted another consumer call on this thread; only close() may be called there")

    @protected
    def consume(self, api: str, out: Any, deadline: float | None) -> tuple:
        """One consumer call: its outcome (a stash entry), taken out of the stash under the gate."""
        if self.forked:
            raise PrefetcherForked(f"prefetcher {self.name!r} belongs to the process that forked this one")
        gate = self.gate
        if gate._is_owned():
            self._reentered()
        committed = None
        try:
            with (gate if _wait_gate(gate, deadline) else _NO_GATE):
                entry = self.stash
                if entry is not None and self.close_started and entry[0] not in _TERMINAL:
                    entry = self.stash = None  # an interrupted call's batch: after close, nothing more is handed out
                    self.backlog = ()
                if entry is None:
                    if self.backlog:
                        entry = self.backlog[0]
                        self.stash, self.backlog = entry, self.backlog[1:]
                    else:
                        self._serve(api, out, deadline)
                        entry = self.stash
                if entry[0] not in _TERMINAL and (entry[0] is not api or (api is _COPY and entry[3] is not out)):
                    self._adapt(api, out)  # an interrupted call (of another API, or into another out) produced it
                    entry = self.stash
                # Handed out: no interruption point from here to the caller's return (see get()),
                # except the check after the gate's exit, which the ``except`` below covers.
                committed = entry; self.stash = None  # noqa: E702
                if entry[0] is _LEASE:
                    self.lease_out = entry[4]
                elif entry[0] is _ERROR:
                    self.error_raised = True
                return entry
        except BaseException:
            if committed is not None:  # interrupted at the gate's exit, after the hand-out
                self.unreturn(committed)
            raise

    @protected
    def handout(self, api: str, out: Any, timeout: Any) -> tuple[str, Any]:
        """A public consumer call's (kind, value), with a deferred SIGINT delivered first.

        If the deferred SIGINT raises, the outcome goes back to the stash for
        the next call. The caller (a public method, not itself protected)
        returns the value with no interruption point in between.
        """
        try:
            entry = self.consume(api, out, self.deadline(timeout))
        except BaseException:
            if guard.deferred and outermost(sys._getframe()):
                deliver()
            raise
        if guard.deferred and outermost(sys._getframe()):
            try:
                deliver()
            except BaseException:
                self.unreturn(entry)
                raise
        return entry[0], entry[1]

    @protected
    def unreturn(self, entry: tuple) -> None:
        """Put back an outcome whose call is raising a deferred Ctrl-C instead: the next call returns it."""
        gate = self.gate
        with (gate if _wait_gate(gate, None) else _NO_GATE):
            if entry[0] is _LEASE and self.lease_out is entry[4]:
                self.lease_out = None
            if self.stash is None:
                self.stash = entry
            else:
                self.backlog = (entry,) + self.backlog

    def _usable(self) -> None:
        if self.close_started:
            raise PrefetcherClosed(f"prefetcher {self.name!r} is closed")
        ref = self.lease_out
        if ref is not None:
            lo = ref()
            if lo is None:  # dropped unreleased: its run is released now (no one can read it any more)
                self.lease_out = None
                self._release_run()
            elif not lo._released:
                raise LeaseHeld("a lease is still held: release it (lease.release() or leave its with-block) "
                                "before asking for another batch")

    def _serve(self, api: str, out: Any, deadline: float | None) -> None:
        """Produce this call's outcome into the stash: the next batch of the run, taking a new run if needed."""
        if self.ended_with is not None:
            # The stream is over and its last word was said: a closed stream stays closed;
            # after the end or the source error, StopIteration.
            if self.ended_with is _CLOSED or self.close_started:
                self.stash = (_CLOSED, PrefetcherClosed(f"prefetcher {self.name!r} is closed"), -1, None, None)
            else:
                self.stash = (_END, None, -1, None, None)
            return
        self._usable()
        last = self.last_call
        if last is not None:
            # The caller's pace: from the previous batch in hand to this call, i.e. using the
            # batch and the caller's own work, without our waits. It decides the run length.
            per = time.perf_counter() - last
            ewma = self.call_ewma
            self.call_ewma = per if ewma is None else ewma + _EWMA * (per - ewma)
        if self.run_next >= len(self.run) or self._run_changed():
            if not self._take_run(deadline, single=api is _LEASE):
                return  # the stream ended: the stash holds how
        k, pos = self.run[self.run_next]
        if self.spans is not None:
            t0 = time.perf_counter()
        if api is _GET:
            data = np.array(self.slot_views[k])  # a copy: the caller owns it
            value = data
        elif api is _COPY:
            np.copyto(out, self.slot_views[k], casting="no")
            data, value = out, True
        else:
            data = self.ro_views[k].view()
            value = Lease(self, data, pos, int(self.plan[pos]) if self.plan is not None else pos)
        ref = weakref.ref(value) if api is _LEASE else None
        if self.spans is not None:
            self.spans.append(("consumer", "copy", t0, time.perf_counter()))
        # The outcome is stashed, and the run advanced past it, with no interruption point between.
        self.stash = (api, value, pos, data, ref); self.run_next += 1; self.delivered += 1; self.last_pos = pos  # noqa: E702,E501
        self.last_call = time.perf_counter()
        if api is not _LEASE and self.run_next >= len(self.run):
            self._release_run()
        if self.spans is not None:
            self.consumer_back = time.perf_counter()

    def _run_of(self, state: tuple) -> tuple[tuple[int, int], ...]:
        slots, lease = state[self.i_slots], state[self.i_lease]
        return tuple((k, slots[k][1]) for k in lease)

    def _run_changed(self) -> bool:
        """A take applied by the kernel whose call was interrupted before it recorded the run."""
        state = self.rt.state
        return state[self.i_consumer_pc] == _RELEASE and self._run_of(state) != self.run

    def _take_run(self, deadline: float | None, single: bool) -> bool:
        """Make ``self.run`` the run the model consumer holds, taking one if needed. False when the stream ended.

        Only the consumer changes its own pc, its lease, a LEASED slot,
        ``delivered`` and ``error_seen``, so reading them outside the kernel
        lock is exact.
        """
        rt, c = self.rt, self.consumer
        state = rt.state
        pc = state[self.i_consumer_pc]
        if pc == DONE:
            self._terminal(state)
            return False
        give_back = False
        if pc == _RELEASE:
            run = self._run_of(state)
            if run != self.run:
                self.run, self.run_next = run, 0  # a take whose caller was interrupted: serve it now
                return True
            give_back = True  # the whole run was handed out; its release was interrupted
        branch = self.take_branch(single)
        slots = state[self.i_slots]
        ready = 0
        for st, _ in slots:
            if st == _READY or st == _FAILED:
                ready += 1
        self.occupancy_sum += ready
        self.occupancy_samples += 1
        if ready > self.occupancy_max:
            self.occupancy_max = ready
        t0 = time.perf_counter()
        try:
            rt.step(c, None if give_back else branch,
                    timeout=None if deadline is None else max(0.0, deadline - time.monotonic()),
                    chain=give_back, then=branch)
        except StepTimeout:
            raise PrefetchTimeout("no batch within the timeout") from None
        finally:
            t1 = time.perf_counter()
            self.wait_seconds += t1 - t0
            if self.spans is not None:
                if self.consumer_back is not None:
                    self.spans.append(("consumer", "compute", self.consumer_back, t0))
                self.spans.append(("consumer", "wait", t0, t1))
                self.occupancy_log.append((t0, ready))
        after = rt.state
        if after[self.i_consumer_pc] == DONE:
            self._terminal(after)
            return False
        self.run, self.run_next = self._run_of(after), 0
        if self.tuner is not None:
            self._autotune(state, ready)
        return True

    def _terminal(self, state: tuple) -> None:
        """The model consumer is done: stash the end of stream, the source error, or PrefetcherClosed."""
        err = state[self.i_error_seen]
        box = self.source_ref()
        if err >= 0 and not self.error_raised and box is not None and err in box.errors:
            self.stash = (_ERROR, box.errors[err], err, None, None)
            self.ended_with = _ERROR
        elif err >= 0 or state[self.i_delivered] >= state[self.i_length]:
            self.stash = (_END, None, -1, None, None)
            self.ended_with = _END
        else:
            self.stash = (_CLOSED, PrefetcherClosed(f"prefetcher {self.name!r} was closed"), -1, None, None)
            self.ended_with = _CLOSED

    @protected
    def _release_run(self) -> None:
        """The model consumer's "release lease", once every batch of its run is handed out (never blocks).

        At once, not at the next call: a waiting worker then refills the slots
        while the caller is on its way back (measured: giving a run back at
        the next call, in one critical section with the next take, is slower
        at every depth).
        """
        rt = self.rt
        if rt.state[self.i_consumer_pc] == _RELEASE and self.run_next >= len(self.run):
            rt.step(self.consumer)

    def _adapt(self, api: str, out: Any) -> None:
        """Turn the stashed outcome of an interrupted call of another API into this call's outcome."""
        kind, value, pos, data, _ref = self.stash
        if api is _GET:
            copied = np.array(data)
            new = (api, copied, pos, copied, None)
        elif api is _COPY:
            if out is not data:
                np.copyto(out, data, casting="no")
            new = (api, True, pos, out, None)
        else:  # a Lease over a private read-only copy: no slot is held for it
            private = np.array(data)
            private.flags.writeable = False
            lease = Lease(self, private, pos, int(self.plan[pos]) if self.plan is not None else pos, private=True)
            new = (api, lease, pos, private, weakref.ref(lease))
        self.stash = new
        if kind is _LEASE:
            value._released = True; value._array = _RELEASED_ARRAY  # noqa: E702
            self._release_run()

    @protected
    def release_lease(self, lease: "Lease") -> None:
        if self.forked:
            lease._released = True; lease._array = _RELEASED_ARRAY  # noqa: E702
            return
        gate = self.gate
        if gate._is_owned():
            self._reentered()
        with (gate if _wait_gate(gate, None) else _NO_GATE):
            if lease._released:
                return
            if not lease._private and not self.closed:
                self._release_run()
            lease._released = True; lease._array = _RELEASED_ARRAY  # noqa: E702

    # -- autotune -----------------------------------------------------------

    @property
    def target(self) -> int:
        """Slots the workers may use at once: the tuned target, or the whole pool."""
        return self.rt.state[self.i_target]

    def _autotune(self, before: tuple, ready: int) -> None:
        """After a take: grow the target if the consumer was starved by it, shrink it if it was never needed.

        Drives the model's tuner thread, whose "grow" and "shrink" steps the
        checker has proved safe at every point (tests/test_prefetcher_autotune.py).
        The policy only decides *when* to take them:

        * **grow** when the batch the consumer asked for was not ready (it had to
          wait) while every slot the target allows was in use, so a worker was
          held back by the target, not busy fetching. When the source itself is
          the bottleneck (every worker fetching) a bigger buffer cannot help, so
          it does not grow: unlike tf.data's AUTOTUNE, memory is not spent for
          nothing.
        * **shrink** by one after ``tune_window`` takes in a row that each found at
          least two batches ready: the last slot was never needed. A grow that
          follows a shrink doubles the window, so the target settles instead of
          oscillating.
        """
        rt, m = self.rt, self.machine
        target = before[self.i_target]
        starved = not m.enabled(before, self.consumer)  # racy snapshot: a heuristic only
        if starved:
            self.tune_full = 0
            used = self.slots_total - before[self.i_slots].count(_FREE)
            if target < self.slots_total and used >= target:
                rt.step(self.tuner, "grow")
                if self.tune_last == "shrink":
                    self.tune_window = min(2 * self.tune_window, _SHRINK_WINDOW_MAX)
                self.tune_last = "grow"
                self.capacity_log.append((time.perf_counter() - self.t0, self.delivered, target + 1))
            return
        if ready >= 2:
            self.tune_full += 1
            if self.tune_full >= self.tune_window and target > 1:
                rt.step(self.tuner, "shrink")
                self.tune_full = 0
                self.tune_last = "shrink"
                self.capacity_log.append((time.perf_counter() - self.t0, self.delivered, target - 1))
        else:
            self.tune_full = 0

    # -- closer -------------------------------------------------------------

    def cannot_wait(self) -> bool:
        """Whether the calling thread is inside this prefetcher: holds the kernel or close lock, or is a worker.

        Such a caller is a signal handler or finalizer that interrupted us, or
        a source closing its own prefetcher; waiting for the lock there would
        wait for itself.
        """
        return (self.rt.owned_by_current_thread() or self.close_lock._is_owned()
                or threading.get_ident() in self.worker_idents)

    def request_close(self) -> None:
        """Close without waiting: marked closed now, carried out by the reaper. Safe from any context."""
        self.close_started = True
        if not self.forked and not self.closed:
            reaper.request(self)

    @protected
    def close(self, timeout: float | None) -> bool:
        """Close and wait (bounded) for the workers. False when a worker was stuck in a fetch and left behind."""
        if self.forked:
            self.close_started = True
            return True
        if self.cannot_wait():
            self.request_close()
            return True
        deadline = _deadline(self.close_timeout if timeout is _DEFAULT else timeout)
        self.close_started = True
        self.begin_close()
        return self.finish_close(deadline)

    @protected
    def begin_close(self) -> None:
        """Set the model's ``closing`` (waking every blocked step) and cut executor waits short."""
        self.close_started = True
        if self.forked or self.closed:
            return
        rt = self.rt
        with self.close_lock:
            try:
                if rt.state[self.i_closer_pc] == _CLOSE:
                    rt.step(self.closer)
            except LiveError:
                pass  # the runtime already failed; every parked thread has been told
            with self.waiters_lock:
                waiters = list(self.waiters)
            for ev in waiters:
                ev.set()

    @protected
    def finish_close(self, deadline: float | None, warn: bool = True) -> bool:
        """Wait until ``deadline`` for the workers to leave the model and their threads to end; then record it.

        Idempotent. A Ctrl-C during the wait leaves the prefetcher closed and
        its threads exiting; calling close() again finishes the join.
        """
        if self.forked:
            return True
        rt = self.rt
        with self.close_lock:
            if self.closed:
                self._after_close()  # idempotent: an interrupt may have cut the first one short
                return not self.stuck
            me = threading.current_thread()
            try:
                if rt.state[self.i_closer_pc] == _JOIN and me not in self.threads:
                    rt.step(self.closer, timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except StepTimeout:
                pass  # a worker is stuck in a fetch: reported below
            except LiveError:
                pass
            _join_threads(self.threads, deadline, me)
            # Still alive: a worker whose model thread is inside "fetch into slot" is stuck in the
            # source; the others have left the model and are only finishing their thread.
            state = rt.state
            self.stuck = [th.name for th, i in zip(self.threads, self.worker_pcs)
                          if th is not me and th.is_alive() and state[i] == _FETCH]
            self.t_end = time.perf_counter()
            box = self.source_ref()
            if box is not None:
                box.preloaded.clear()
            self.closed = True
            self._after_close()
        if self.stuck and warn:
            waited = "no time" if deadline is None else "the close timeout"
            warnings.warn(f"prefetcher {self.name!r}: {', '.join(self.stuck)} still inside a fetch after {waited}; "
                          "left running as daemon threads (the result will be discarded)",
                          PrefetcherWarning, stacklevel=4)
        return not self.stuck

    def _after_close(self) -> None:
        """Leave the registry of open prefetchers; remove the SIGINT wrapper if no open one asked for it."""
        unregister(self)
        if self.sigint and not any(c.sigint for c in open_cores()):
            _interrupts.uninstall()

    # -- stats --------------------------------------------------------------

    def stats(self) -> PrefetchStats:
        end = self.t_end if self.t_end is not None else time.perf_counter()
        elapsed = max(end - self.t0, 1e-12)
        fetch = sum(self.fetch_seconds)
        wait = self.wait_seconds
        n = self.delivered
        if fetch > 0:
            efficiency = min(1.0, max(0.0, 1.0 - wait / fetch))
        else:
            efficiency = 1.0 if n else 0.0
        samples = self.occupancy_samples
        return PrefetchStats(
            batches=n,
            elapsed_seconds=elapsed,
            batches_per_second=n / elapsed,
            consumer_wait_seconds=wait,
            consumer_wait_fraction=min(1.0, wait / elapsed),
            worker_fetch_seconds=fetch,
            worker_blocked_seconds=sum(self.blocked_seconds),
            prefetch_efficiency=efficiency,
            mean_occupancy=self.occupancy_sum / samples if samples else 0.0,
            max_occupancy=self.occupancy_max,
            capacity=self.target,
            workers=len(self.worker_ids),
            bottleneck="none" if n == 0 else ("source" if wait / elapsed > _STARVED else "consumer"),
            max_capacity=self.slots_total,
            capacity_changes=len(self.capacity_log),
        )

    def ready_now(self) -> int:
        """Batches ready in the buffer right now (a racy read of the immutable state: exact for that instant)."""
        n = 0
        for st, _ in self.rt.state[self.i_slots]:
            if st == _READY or st == _FAILED:
                n += 1
        return n


_DEFAULT: Any = type("_Default", (), {"__repr__": lambda self: "<the prefetcher's timeout>"})()
_CLOSING = object()


def _worker_main(core: _Core, w: int, t: int) -> None:
    """A worker thread: drive model thread ``t`` to completion. Holds the core, never the Prefetcher."""
    rt = core.rt
    blocked = core.blocked_seconds
    step, pc = rt.step, rt.pc
    clock = time.perf_counter
    fetched = core.fetch_seconds
    timeline = core.spans is not None
    try:
        while True:
            at = pc(t)
            if at == DONE:
                break
            if at == _CLAIM:  # blocks while no slot is free: timed
                t0 = clock()
                step(t)
                t1 = clock()
                blocked[w] += t1 - t0
                if timeline:
                    core.spans.append((f"worker{w}", "wait", t0, t1))
            elif timeline:
                # Recording a timeline: the fetch and the next claim as two steps, so the
                # buffer occupancy can be sampled between them and the wait drawn apart.
                step(t)
                core.occupancy_log.append((clock(), core.ready_now()))
            else:
                # "fetch into slot": the source runs outside the kernel lock; then, in the same
                # critical section, the next claim, parking there until a slot is free.
                t0, f0 = clock(), fetched[w]
                step(t, chain=True)
                blocked[w] += clock() - t0 - (fetched[w] - f0)
    except LiveError:
        pass  # the runtime has failed: the consumer and the closer raise it
    except BaseException as e:  # noqa: BLE001 - a bug here must not hang the consumer
        rt.fail(LiveError("error", f"{threading.current_thread().name} crashed: {type(e).__name__}: {e}"))


# --------------------------------------------------------------------------
# The public objects
# --------------------------------------------------------------------------


class _NotCopyable:
    """Pickling, copy and deepcopy raise a clear TypeError (they would otherwise fail deep inside, on a lock)."""

    __slots__ = ()

    def _refuse(self) -> Any:
        raise TypeError(f"a {type(self).__name__} cannot be pickled or copied: it owns running threads and a slot "
                        "pool shared with them; create a new one from the same source (and arguments) instead")

    def __reduce_ex__(self, protocol: Any) -> Any:
        return self._refuse()

    def __copy__(self) -> Any:
        return self._refuse()

    def __deepcopy__(self, memo: Any) -> Any:
        return self._refuse()


class _ReleasedArray:
    """What a released Lease holds instead of its array: entering it raises."""

    __slots__ = ()

    def __array__(self, *args: Any, **kw: Any) -> Any:
        raise LeaseReleased("this lease was released; its slot may hold another batch now")


_RELEASED_ARRAY = _ReleasedArray()


class Lease(_NotCopyable):
    """A zero-copy, read-only view of one prefetched batch, valid until released.

    Use it as a context manager (``with pf.lease() as batch:`` binds the
    array) or call :meth:`release`. Releasing twice is harmless. After
    release the slot is refilled by a worker: :attr:`array` then raises
    :class:`LeaseReleased` (an array bound earlier, e.g. by ``with``, cannot
    be revoked: do not keep it). The view's ``writeable`` flag cannot be set.
    """

    __slots__ = ("_core", "_array", "position", "index", "_released", "_private", "__weakref__")

    def __init__(self, core: _Core, array: np.ndarray, position: int, index: int | None, private: bool = False):
        self._core = core
        self._array = array
        #: Position in the stream (0, 1, 2, ...).
        self.position = position
        #: Index in the source (differs from ``position`` under a shard or shuffle plan).
        self.index = index
        self._released = False
        self._private = private  # a copy made for an interrupted call: no slot behind it

    @property
    def array(self) -> np.ndarray:
        """The batch: a read-only view into the slot pool. Raises :class:`LeaseReleased` after release."""
        if self._released:
            raise LeaseReleased(f"the lease of position {self.position} was released; its slot may hold "
                                "another batch now")
        return self._array  # type: ignore[return-value]

    @property
    def released(self) -> bool:
        return self._released

    @protected
    def release(self) -> None:
        """Give the slot back to the workers. Idempotent."""
        if not self._released:
            self._core.release_lease(self)
        if guard.deferred and outermost(sys._getframe()):
            deliver()

    #: ``with pf.lease() as view`` binds the array. A C-level chain (property -> attrgetter -> the
    #: array's ``__array__``, which returns the array itself), not a Python method: between
    #: ``lease()`` returning and ``view`` being bound there is then no point where Ctrl-C can land,
    #: so an interrupt cannot drop a handed-out lease on the floor. After release, ``_array`` is a
    #: marker whose ``__array__`` raises LeaseReleased.
    __enter__ = property(operator.attrgetter("_array.__array__"))

    @protected
    def __exit__(self, *exc: Any) -> None:
        # Protected: a Ctrl-C landing on entry is delivered once the lease is released.
        if not self._released:
            self._core.release_lease(self)
        if guard.deferred and outermost(sys._getframe()):
            deliver()

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        shape = "" if self._released else f" shape={self._array.shape}"  # type: ignore[union-attr]
        return f"<Lease position={self.position} index={self.index}{shape} {state}>"


class Prefetcher(_NotCopyable):
    """Prefetch numpy batches from ``source`` on background threads, into a preallocated slot pool.

    ``source`` is one of:

    * a map-style source (``__len__`` and ``__getitem__``), fetched in
      parallel by ``workers`` threads, in the order of the index plan;
    * a map-style source with ``fetch_into(i, out)``, which fills the slot
      array in place (no per-batch allocation); ``__getitem__`` is then only
      used to learn the batch shape, or not at all when ``shape=`` and
      ``dtype=`` are given;
    * any other iterable of arrays, read by one worker in order.

    With ``workers > 1`` a map-style source is called from several threads
    at once; pass ``thread_safe=False`` if it cannot take that (its calls are
    then serialized).

    Every batch must have the shape and dtype of the first one (or of
    ``shape=`` / ``dtype=``): a mismatch is a ValueError, a non-array a
    TypeError (so is a ``numpy.ma.MaskedArray`` or a ``numpy.matrix``, which
    a plain slot could not carry faithfully), delivered at that item's
    position like a source error. Unless both ``shape=`` and ``dtype=`` are
    given, the constructor reads the first batch itself, to size the pool; an
    Exception from that read is still raised at position 0 by the consumer (a
    BaseException such as KeyboardInterrupt propagates from the constructor at
    once).

    Parameters: ``capacity`` slots (default 2); ``workers`` fetch threads;
    ``ordered`` delivery (False: whichever batch is ready first);
    ``memory_budget`` in bytes caps the slot pool (capacity becomes at most
    ``memory_budget // batch_bytes``; arrays handed to the caller are the
    caller's own); the index plan ``rank`` / ``world_size`` (strided shard:
    positions ``rank, rank + world_size, ...``; ``even="pad"`` or ``"drop"``
    gives every rank the same length, as DDP needs), and ``shuffle`` /
    ``seed`` / ``epoch`` (the permutation ``np.random.default_rng([seed,
    epoch])`` draws: the same on every rank, different per epoch, taken before
    sharding); ``executor`` (any ``concurrent.futures.Executor``, including
    ``distributed.Client(...).get_executor(pure=False)``) runs the fetches,
    the source being pickled for process-based executors; ``timeout`` is the
    default for every consumer call and bounds the constructor's first read
    (``None`` or ``inf``: wait as long as it takes); ``close_timeout`` bounds
    ``close()`` (``inf``: no bound).

    ``autotune=True`` makes ``capacity`` the starting point: the pool is
    preallocated for ``max_capacity`` slots (default
    ``max(capacity, DEFAULT_AUTOTUNE_MAX)``, then capped by ``memory_budget``),
    and the capacity grows while the consumer waits on a buffer that is the
    limit, and shrinks while the buffer stays full. The resize steps are part
    of the checked model (its tuner thread). ``timeline=True`` records
    per-thread spans and buffer occupancy for :meth:`timeline`.

    Consume with ``for batch in pf`` (arrays you own), :meth:`get`,
    :meth:`copy_prefetched` (into your array, no allocation), :meth:`lease`
    or :meth:`leases` (zero-copy, read-only). A Prefetcher is one pass over
    its stream: iterating it again after the end raises
    :class:`PrefetcherExhausted`. All methods are thread-safe; consumer calls
    are serialized. A consumer call interrupted by Ctrl-C loses nothing: the
    batch it was handing out is returned by the next call. Always
    :meth:`close` (or use ``with``); an abandoned prefetcher is closed when it
    is garbage-collected, and every open one at interpreter exit. A
    Prefetcher cannot be pickled or copied, and raises
    :class:`PrefetcherForked` in a forked child.
    """

    def __init__(self, source: Any, capacity: int = 2, workers: int = 1, ordered: bool = True, *,
                 shape: Any = None, dtype: Any = None, memory_budget: int | None = None,
                 rank: int = 0, world_size: int = 1, even: str | None = None, shuffle: bool = False,
                 seed: int = 0, epoch: int = 0, executor: Any = None, timeout: float | None = None,
                 close_timeout: float = DEFAULT_CLOSE_TIMEOUT, thread_safe: bool = True,
                 name: str | None = None, autotune: bool = False, max_capacity: int | None = None,
                 timeline: bool = False):
        capacity = _int("capacity", capacity, 1)
        workers = _int("workers", workers, 1)
        ordered = _bool("ordered", ordered)
        autotune = _bool("autotune", autotune)
        timeline = _bool("timeline", timeline)
        thread_safe = _bool("thread_safe", thread_safe)
        if max_capacity is not None:
            max_capacity = _int("max_capacity", max_capacity, 1)
            if not autotune:
                raise ValueError("max_capacity is the ceiling for autotune: pass autotune=True, or set capacity")
            if max_capacity < capacity:
                raise ValueError(f"max_capacity ({max_capacity}) must be >= capacity ({capacity}), "
                                 "the starting capacity")
        # Slots in the pool: the capacity, or with autotune the ceiling it may grow to.
        slots = (max_capacity if max_capacity is not None else max(capacity, DEFAULT_AUTOTUNE_MAX)) \
            if autotune else capacity
        shape = _shape(shape)
        dtype = _dtype(dtype)
        if memory_budget is not None:
            memory_budget = _int("memory_budget", memory_budget, 1)
        world_size = _int("world_size", world_size, 1)
        rank = _int("rank", rank, 0)
        if rank >= world_size:
            raise ValueError(f"rank must be < world_size, got rank={rank} world_size={world_size}")
        if even is not None and even not in ("pad", "drop"):
            raise ValueError(f"even must be None, 'pad' or 'drop', got {even!r}")
        shuffle = _bool("shuffle", shuffle)
        seed = _int("seed", seed, 0)
        epoch = _int("epoch", epoch, 0)
        if executor is not None and not callable(getattr(executor, "submit", None)):
            raise TypeError(f"executor must be a concurrent.futures.Executor (with submit), "
                            f"not {type(executor).__name__}")
        timeout = _seconds("timeout", timeout)
        close_timeout = _seconds("close_timeout", close_timeout, positive=True)
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        name = name or f"{id(self):x}"

        if source is None:
            raise TypeError("source must be an iterable of arrays or a map-style source, not None")
        if isinstance(source, (str, bytes, bytearray)):
            raise TypeError(f"source must yield numpy arrays; a {type(source).__name__} yields characters")
        fetch_into = getattr(source, "fetch_into", None)
        fetch_into = fetch_into if callable(fetch_into) else None
        has_getitem = hasattr(source, "__getitem__")
        map_style = hasattr(source, "__len__") and (has_getitem or fetch_into is not None)
        if map_style and isinstance(source, np.ndarray) and source.ndim == 0:
            raise TypeError("source is a 0-d array: give an array of batches (at least 1-d) or an iterable")
        if not map_style and not hasattr(source, "__iter__"):
            raise TypeError(f"source must be an iterable of arrays or a map-style source "
                            f"(__len__ + __getitem__), not {type(source).__name__}")

        plan = None
        iterator = None
        preloaded: dict[int, tuple[str, Any]] = {}
        first: Any = None
        want_first = shape is None or dtype is None
        if map_style:
            try:
                n = len(source)
            except TypeError as e:
                raise TypeError(f"len(source) failed: {e}") from None
            plan = _plan(n, shuffle, seed, epoch, rank, world_size, even)
            items = len(plan)
            if want_first and items:
                if not has_getitem:
                    raise ValueError("a fetch_into source without __getitem__ needs shape= and dtype= "
                                     "(the slot pool cannot be sized otherwise)")
                index = int(plan[0])
                kind, first = _read_first(lambda: source[index], timeout, name, map_style=True)
                preloaded[0] = (kind, first)
            sized = True
        else:
            if workers != 1:
                raise ValueError(f"an iterable source is read by one worker, in order; workers={workers} needs "
                                 "a map-style source (__len__ + __getitem__)")
            if executor is not None:
                raise ValueError("executor= needs a map-style source (__len__ + __getitem__): an iterator "
                                 "cannot be read by another process")
            if shuffle or world_size != 1 or even is not None:
                raise ValueError("index plans (shuffle, rank, world_size, even) need a map-style source "
                                 "(__len__ + __getitem__)")
            try:
                iterator = iter(source)
            except TypeError as e:
                raise TypeError(f"iter(source) failed: {e}") from None
            items, sized = _UNBOUNDED, False
            if want_first:
                kind, first = _read_first(lambda: next(iterator), timeout, name, map_style=False)
                if kind == "end":
                    items, sized = 0, True
                else:
                    preloaded[0] = (kind, first)
                    if kind == "error":
                        items, sized = 1, True

        if want_first and preloaded.get(0, ("", None))[0] == "item":
            if isinstance(first, np.ndarray):
                shape = first.shape if shape is None else shape
                dtype = first.dtype if dtype is None else dtype
        if (shape is None or dtype is None) and items:
            items, sized = 1, True  # the first read failed, so no pool can be sized: the stream is that error
        pool = None
        if shape is not None and dtype is not None:
            batch_bytes = math.prod(shape) * dtype.itemsize
            if memory_budget is not None and batch_bytes:
                if batch_bytes > memory_budget:
                    raise ValueError(f"one batch of shape {shape} dtype {dtype} takes {batch_bytes} bytes, more "
                                     f"than memory_budget={memory_budget}")
                slots = max(1, min(slots, memory_budget // batch_bytes))
            pool = np.empty((slots, *shape), dtype)
        capacity = min(capacity, slots)
        if map_style:
            workers = min(workers, max(1, items))

        # The source, reachable from the worker threads only through a weak reference (see _SourceBox).
        self._source_box = box = _SourceBox(
            getitem=source.__getitem__ if map_style and has_getitem else None,
            fetch_into=fetch_into if map_style else None, iterator=iterator,
            source=source if executor is not None else None, preloaded=preloaded, thread_safe=thread_safe)
        self._core = core = _Core(
            machine=_machine(slots, workers, items, ordered, sized, capacity if autotune else 0,
                             min(slots, _MAX_RUN)), pool=pool,
            shape=shape, dtype=dtype, plan=plan, box=box, executor=executor, workers=workers,
            close_timeout=close_timeout, name=name, timeline=timeline, timeout=timeout)
        self._ordered = ordered
        self._length = items if sized else None
        reaper.ensure_started()
        register(core)
        core.sigint = _interrupts.install()
        # Abandonment: a close request from the finalizer, carried out by the reaper (never
        # blocking inside a garbage collection). Interpreter exit is _lifecycle's hook.
        self._finalizer = weakref.finalize(self, _abandon, core)
        self._finalizer.atexit = False
        try:
            core.start()
        except BaseException:
            core.close(_DEFAULT)
            raise

    # -- consuming ----------------------------------------------------------
    #
    # Each consumer method takes its outcome from ``_Core.handout`` and returns
    # it with no interruption point in between: the return from a Python
    # function is not one, and the dispatch on the kind calls nothing.

    def __iter__(self) -> "Prefetcher":
        core = self._core
        if core.ended_with is not None and core.stash is None and not core.close_started:
            how = "ended with the source's error" if core.ended_with is _ERROR else "was delivered to the end"
            raise PrefetcherExhausted(
                f"prefetcher {core.name!r}: its stream {how} ({core.delivered} batches); a Prefetcher is one "
                "pass over its source: create a new one for another pass (with epoch=... for a new shuffle)")
        return self

    def __next__(self) -> np.ndarray:
        kind, value = self._core.handout(_GET, None, _DEFAULT)
        if kind is _GET:
            return value
        if kind is _END:
            raise StopIteration
        try:
            raise value
        finally:
            del value

    def get(self, timeout: float | None = _DEFAULT) -> np.ndarray:
        """The next batch, as an array the caller owns.

        Raises StopIteration at the end of the stream (and after a source
        error was raised), the source's exception at its position,
        :class:`PrefetchTimeout` when ``timeout`` seconds pass with no batch
        (default: the prefetcher's ``timeout``; ``None`` or ``inf``: wait),
        :class:`PrefetcherClosed` after close, :class:`LeaseHeld` while a
        lease is held.
        """
        kind, value = self._core.handout(_GET, None, timeout)
        if kind is _GET:
            return value
        if kind is _END:
            raise StopIteration
        try:
            raise value
        finally:
            del value

    def copy_prefetched(self, out: np.ndarray, timeout: float | None = _DEFAULT) -> bool:
        """Copy the next batch into ``out`` (no allocation). Returns False at the end of the stream.

        ``out`` is checked before anything is consumed: it must be a writeable
        numpy array with the batch shape and dtype.
        """
        core = self._core
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out must be a numpy array, not {type(out).__name__}")
        if not out.flags.writeable:
            raise ValueError("out is read-only: copy_prefetched needs a writeable array")
        if core.pool is not None and (out.shape != core.shape or out.dtype != core.dtype):
            raise ValueError(f"out has shape {out.shape} dtype {out.dtype}; the batches have shape "
                             f"{core.shape} dtype {core.dtype}")
        kind, value = core.handout(_COPY, out, timeout)
        if kind is _COPY:
            return True
        if kind is _END:
            return False
        try:
            raise value
        finally:
            del value

    def lease(self, timeout: float | None = _DEFAULT) -> Lease:
        """The next batch as a zero-copy, read-only :class:`Lease`. StopIteration at the end of the stream.

        In a loop, :meth:`leases` is simpler (and ends cleanly inside a generator).
        """
        kind, value = self._core.handout(_LEASE, None, timeout)
        if kind is _LEASE:
            return value
        if kind is _END:
            raise StopIteration
        try:
            raise value
        finally:
            del value

    def leases(self, timeout: float | None = _DEFAULT) -> Iterator[Lease]:
        """Iterate the stream as Leases, each released when the loop moves on (or stops).

        ``for lease in pf.leases(): use(lease.array)``. Releasing a lease
        early (``with lease as view:``) is fine; keeping one past the next
        iteration is not: its slot is refilled.
        """
        lease = None
        try:
            while True:
                try:
                    lease = self.lease(timeout)
                except StopIteration:
                    return
                yield lease
                lease.release()
        finally:
            if lease is not None and not lease._released:
                lease.release()

    # -- closing ------------------------------------------------------------

    @protected
    def close(self, timeout: float | None = None) -> None:
        """Stop the workers and join their threads. Idempotent, callable from any thread, bounded.

        Waits at most ``timeout`` seconds (default: ``close_timeout``; ``inf``:
        no bound). A worker still inside a fetch after that is reported with a
        :class:`PrefetcherWarning` and left as a daemon thread; it exits by
        itself when its fetch returns. A consumer blocked in another thread
        wakes up with :class:`PrefetcherClosed`. An outstanding lease stays
        readable until released.

        Called where it must not wait -- from a signal handler or finalizer
        that interrupted a call of this prefetcher on the same thread, or from
        the source on a worker -- it marks the prefetcher closed at once and
        returns; the reaper thread finishes the close as soon as the
        interrupted call leaves the kernel.
        """
        t = _DEFAULT if timeout is None else _seconds("timeout", timeout)
        self._core.close(t)
        self._finalizer.detach()
        if guard.deferred and outermost(sys._getframe()):
            deliver()

    def __enter__(self) -> "Prefetcher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- inspection ---------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._core.close_started

    @property
    def stats(self) -> PrefetchStats:
        """A frozen snapshot of the timing and buffer statistics (``print(pf.stats)`` reads as a summary)."""
        return self._core.stats()

    @property
    def capacity(self) -> int:
        """Slots the workers may fill at once: the pool size (after ``memory_budget``), or with ``autotune``
        the current tuned capacity."""
        return self._core.target

    @property
    def ready(self) -> int:
        """Batches ready in the buffer right now (a snapshot: workers and the consumer keep changing it)."""
        return self._core.ready_now()

    @property
    def max_capacity(self) -> int:
        """Slots in the preallocated pool: the ceiling ``capacity`` can reach (equal to it without autotune)."""
        return self._core.slots_total

    @property
    def autotune(self) -> bool:
        return self._core.tuner is not None

    @property
    def capacity_history(self) -> list[tuple[float, int, int]]:
        """Every autotune resize: ``(seconds since construction, batches delivered, new capacity)``."""
        return list(self._core.capacity_log)

    def timeline(self) -> dict[str, Any]:
        """What ``timeline=True`` recorded, for drawing with :meth:`write_timeline` or ``safeprefetch.write_timeline``.

        ``spans``: ``(thread, kind, start, end)`` with kind ``fetch`` / ``wait``
        (workers), ``wait`` / ``copy`` / ``compute`` (consumer); ``occupancy``:
        ``(time, ready batches)``; times in seconds since construction.
        """
        c = self._core
        if c.spans is None:
            raise ValueError("this prefetcher was not created with timeline=True")
        t0 = c.t0
        return {"spans": [(th, kind, a - t0, b - t0) for th, kind, a, b in list(c.spans)],
                "occupancy": [(t - t0, n) for t, n in list(c.occupancy_log or [])],
                "capacity": [(t, n) for t, _d, n in c.capacity_log],
                "initial_capacity": c.machine.config.get("target", c.slots_total) if c.tuner is not None
                else c.slots_total,
                "workers": len(c.worker_ids)}

    def write_timeline(self, path: Any, title: str = "prefetcher timeline", subtitle: str = "") -> None:
        """Draw :meth:`timeline` to ``path``: ``.svg`` (no dependency) or ``.png`` (the ``plot`` extra)."""
        from .timeline import write_timeline

        write_timeline(path, self.timeline(), title=title, subtitle=subtitle)

    @property
    def workers(self) -> int:
        return len(self._core.worker_ids)

    @property
    def ordered(self) -> bool:
        return self._ordered

    @property
    def shape(self) -> tuple[int, ...] | None:
        """Shape of every batch (None for an empty stream with no ``shape=``)."""
        return self._core.shape

    @property
    def dtype(self) -> np.dtype | None:
        return self._core.dtype

    @property
    def length(self) -> int | None:
        """Items in the stream for a map-style source (after the plan); None for an iterator."""
        return self._length

    @property
    def indices(self) -> np.ndarray | None:
        """The index plan: source index of each stream position (read-only); None for an iterator."""
        return self._core.plan

    @property
    def last_index(self) -> int | None:
        """Source index of the batch delivered last (useful with ``ordered=False``)."""
        return self._core.last_index

    def __repr__(self) -> str:
        c = self._core
        state = "closed" if c.close_started else (c.ended_with or "open")
        return (f"<Prefetcher {c.name} capacity={self.capacity} workers={self.workers} ordered={self._ordered} "
                f"shape={c.shape} dtype={c.dtype} delivered={c.delivered} {state}>")


def _abandon(core: _Core) -> None:
    """The finalizer of an abandoned Prefetcher: ask the reaper to close it. Never blocks, never raises."""
    try:
        core.request_close()
    except BaseException:  # noqa: BLE001 - a finalizer must not raise
        pass

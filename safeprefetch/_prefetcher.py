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
model deliberately leaves out -- arrays, time and users:

* **The slot pool.** The machine's state holds slot numbers, indices and
  flags, never arrays. The arrays live in one preallocated numpy block,
  ``pool[capacity, *batch_shape]``. A worker writes ``pool[k]`` only while
  the state says slot ``k`` is ``FILLING`` by that worker (between its
  "claim index and slot" step and its "fetch into slot" step); the consumer
  reads ``pool[k]`` only while the state says ``k`` is ``LEASED`` (between
  "take next batch" and "release lease"). The kernel lock orders those
  steps, so "no slot is written while it is read" is the model's checked
  property, not a hope.
* **Threads.** Each model worker runs on its own daemon ``threading.Thread``
  that drives its model thread with ``Runtime.step``; the model's external
  step "fetch into slot" runs the source outside the kernel lock. The model
  consumer is driven by the caller's ``get`` / ``__next__`` /
  ``copy_prefetched`` / ``lease``; the model closer by ``close()``.
* **Sources.** Map-style sources (``__len__`` + ``__getitem__``, or
  ``fetch_into(i, out)``) are fetched in parallel; the model's indices
  0..n-1 are stream *positions*, mapped onto source indices by an index plan
  (sequential, strided shard, or seeded shuffle). An iterator source is read
  by one worker, in order; its end is the fetch outcome "end" (the model's
  ``sized=off`` mode, checked separately).
* **Errors** are values in the state: a failed fetch publishes its slot as
  ``FAILED`` at its index, and the exception object waits in a side table
  keyed by that index until the consumer's take reaches it. The consumer then
  re-raises the *same* object, so its type, message and traceback (which
  includes the worker's frames) are the original ones.

Decisions, and why
------------------
* ``BaseException`` from a source (``SystemExit``, ``KeyboardInterrupt``
  raised by source code, ``GeneratorExit``) is delivered like any other
  error: the consumer re-raises the same object at its position. Calling the
  source inline would have raised it in the consumer, so that is what the
  prefetched stream does too; silently ending the stream (as
  ``prefetch_generator`` does) would hide it.
* The first batch is read eagerly, in the constructor, unless both
  ``shape=`` and ``dtype=`` are given: the pool is allocated from its shape
  and dtype, and ``memory_budget`` needs the batch size to cap the capacity.
  An exception from that read is *not* raised by the constructor: it is
  delivered at position 0, like every other source error.
* One lease at a time (the model's "at most one lease"): any other take
  while a lease is held raises :class:`LeaseHeld` instead of blocking.
* ``close()`` never hangs: joining is bounded by ``close_timeout``. A fetch
  that never returns is reported by a :class:`PrefetcherWarning` and its
  daemon thread is left behind; when the fetch returns at last, the model
  discards the result and the thread exits on its own.
* Abandonment is a close from a ``weakref.finalize`` callback. Worker threads
  hold only the internal ``_Core``, never the ``Prefetcher``, so an abandoned
  prefetcher is collected and its threads are joined.
* Waits in the caller's thread are ``threading`` lock waits, which a signal
  interrupts: Ctrl-C raises ``KeyboardInterrupt`` out of a blocked ``get``
  and leaves the prefetcher usable (a batch, or a run of batches, already
  taken when the signal lands is dropped).

* **Autotune** (``autotune=True``) is the model's own tuner thread: the
  pool is allocated at ``max_capacity`` slots and the model's ``target``
  says how many the workers may use; the consumer's calls take the tuner's
  "grow" and "shrink" steps when the policy in ``_Core._autotune`` says so.
  Every resize at every point is checked (tests/test_prefetcher_autotune.py).
* The hot path (measured in docs/performance.md): the compiled machine is
  shared per shape and only its initial stream length differs; workers take
  "fetch into slot" and the next claim in one critical section
  (``chain=True``), parking there when no slot is free; the consumer's copy
  callbacks take their array as an argument (no partial per call).
* **Runs.** The model is compiled with ``run = min(capacity, 16)``: the
  consumer may take several ready batches in one step and hand them out one
  call at a time from ``_Core.held``, releasing them together after the
  last. The checker proves every run length safe; the policy here only
  picks one: as many batches as the caller uses in ``_RUN_BUDGET`` (100 µs)
  at its own pace between calls (a running average). A caller slower than
  that takes one batch per step, exactly as without runs; a fast one pays
  two kernel steps per run instead of per batch. A new ``Lease`` starts a
  run of one. Workers publish every batch as soon as it is fetched, before
  calling the source again: a source whose next item waits for the caller
  to receive the previous one (a request/response stream) would hang behind
  a worker holding fetched batches back.

Open questions: a ``KeyboardInterrupt`` can land between two bytecodes of the
runtime kernel's wake-up loop; a missed wake-up is repaired by the next step
that writes a field the parked thread's step reads (the kernel skips the
others), and close always takes one: it writes ``closing``, which every
blocking step of the model reads. And one landing exactly between a parking
thread's release of the kernel lock and the ``try`` that takes it back
(``Runtime._park``; ``threading.Condition.wait`` has the same window) comes
out as ``RuntimeError: release unlocked lock`` instead of
``KeyboardInterrupt`` (seen 3 times in about 7,000 randomized Ctrl-C runs in
review; not fixed: closing that window needs a lock that can say who holds
it, or signals masked around it). A take interrupted after
the kernel step that ended the stream is answered by the next call (the
error, the end or the close it found).
"""

from __future__ import annotations

import copy
import functools
import math
import threading
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ._live import LiveError, Runtime, StepTimeout
from ._model import DONE

__all__ = [
    "Lease",
    "LeaseHeld",
    "PrefetchStats",
    "PrefetchTimeout",
    "Prefetcher",
    "PrefetcherClosed",
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


class PrefetcherClosed(RuntimeError):
    """The prefetcher was closed (or abandoned); it cannot deliver any more batches."""


class PrefetchTimeout(TimeoutError):
    """``get(timeout=...)`` (or ``copy_prefetched`` / ``lease``) found no batch in time.

    Nothing was consumed: calling again continues the stream where it was.
    """


class LeaseHeld(RuntimeError):
    """A batch was requested while a lease is still held.

    The reference model allows at most one lease; release it first
    (``lease.release()``, or leave its ``with`` block).
    """


class PrefetcherWarning(RuntimeWarning):
    """``close()`` gave up waiting for a worker stuck inside a fetch; its daemon thread was left running."""


@dataclass(frozen=True)
class PrefetchStats:
    """Where the time went. Answers "is prefetching paying off?".

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
        """A few human-readable lines."""
        return (f"{self.batches} batches in {self.elapsed_seconds:.3f} s ({self.batches_per_second:.1f}/s); "
                f"consumer waited {self.consumer_wait_seconds:.3f} s ({100 * self.consumer_wait_fraction:.1f}%)\n"
                f"workers: {self.workers}, fetching {self.worker_fetch_seconds:.3f} s, blocked on a full buffer "
                f"{self.worker_blocked_seconds:.3f} s; prefetch efficiency {100 * self.prefetch_efficiency:.1f}%\n"
                f"buffer: capacity {self.capacity}{self._tuned()}, occupancy mean {self.mean_occupancy:.2f} max "
                f"{self.max_occupancy}; bottleneck: {self.bottleneck}")

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
    from .models.prefetcher import Prefetcher as Model

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


def _remote_item(source: Any, index: int, shape: tuple[int, ...] | None, dtype: np.dtype | None) -> Any:
    """What an executor runs: fetch one item and return it (the worker copies it into its slot)."""
    if hasattr(source, "__getitem__"):
        return source[index]
    out = np.empty(shape, dtype)
    source.fetch_into(index, out)
    return out


# --------------------------------------------------------------------------
# The core: everything the threads touch. It never references the Prefetcher.
# --------------------------------------------------------------------------


class _Core:
    def __init__(self, *, machine, pool, shape, dtype, plan, getitem, fetch_into, iterator, executor, source,
                 preloaded, workers, close_timeout, name, timeline=False):
        self.machine = machine
        self.pool = pool
        self.slot_views = [pool[k] for k in range(pool.shape[0])] if pool is not None else []
        self.shape, self.dtype = shape, dtype
        self.plan = plan
        self.getitem, self.fetch_into, self.iterator = getitem, fetch_into, iterator
        self.executor, self.source = executor, source
        self.preloaded: dict[int, tuple[str, Any]] = preloaded
        self.errors: dict[int, BaseException] = {}
        self.close_timeout = close_timeout
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
        self.i_lease = m.local_index[self.consumer]["lease"]
        # Per worker's model thread: (worker number, index of its "idx" local, of its "slot" local).
        # The fetch action reads them straight from the step's state snapshot.
        self.worker_fields = {t: (w, m.local_index[t]["idx"], m.local_index[t]["slot"])
                              for w, t in enumerate(self.worker_ids)}
        # Runs: the model's "take up to r" branches (none when run=1).
        takes = m.infos[self.consumer]["take next batch"].branches
        self.take_branches: tuple[str, ...] = tuple(b for b in takes if b.startswith("take up to "))
        self.call_ewma: float | None = None   # seconds from a batch in the caller's hands to its next call
        self.last_call: float | None = None
        self.held: tuple[tuple[int, int], ...] = ()  # the consumer's run: (slot, position) per leased batch
        self.served = 0                               # how many of them were handed out
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

        self.consumer_lock = threading.Lock()  # serializes the callers that drive the model consumer
        self.close_lock = threading.Lock()     # serializes the callers that drive the model closer
        self.waiters_lock = threading.Lock()
        self.waiters: set[threading.Event] = set()  # executor waits that close() must cut short
        self.lease_held = False
        self.ended: str | None = None  # "end", "error" or "closed", once the consumer is done
        self.close_started = False
        self.closed = False
        self.stuck: list[str] = []

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

    # -- workers ------------------------------------------------------------

    def start(self) -> None:
        for w, t in enumerate(self.worker_ids):
            th = threading.Thread(target=_worker_main, args=(self, w, t), daemon=True,
                                  name=f"safeprefetch-{self.name}-worker{w}")
            self.threads.append(th)
            th.start()

    def _closing(self) -> bool:
        # A racy read is sound: ``closing`` only ever goes from False to True.
        return self.rt.state[self.i_closing]

    @property
    def last_index(self) -> int | None:
        pos = self.last_pos
        if pos is None or self.plan is None:
            return pos
        return self.plan.item(pos)

    def _fetch(self, ctx) -> str:
        """The model's external step "fetch into slot": fill the worker's ``slot`` with item ``idx``."""
        w, i_idx, i_slot = self.worker_fields[ctx.thread]
        state = ctx.state  # the snapshot taken when the step began: its idx and slot are this fetch's
        pos, k = state[i_idx], state[i_slot]
        if self._closing():
            return "ok"  # the model discards a fetch that lands after close
        t0 = time.perf_counter()
        try:
            return self._fill(pos, k)
        except BaseException as e:  # noqa: BLE001 - every error is delivered at its position
            self.errors[pos] = e
            return "error"
        finally:
            t1 = time.perf_counter()
            self.fetch_seconds[w] += t1 - t0
            if self.spans is not None:
                self.spans.append((f"worker{w}", "fetch", t0, t1))

    def _fill(self, pos: int, k: int) -> str:
        pre = self.preloaded.pop(pos, None) if self.preloaded else None
        if pre is not None:
            kind, value = pre
            if kind == "error":
                self.errors[pos] = value  # the very object the constructor's read raised
                return "error"
            item = value
        elif self.iterator is not None:
            try:
                item = next(self.iterator)
            except StopIteration:
                return "end"
        else:
            index = self.plan.item(pos)
            if self.executor is not None:
                item = self._remote(index)
                if item is _CLOSING:
                    return "ok"
            elif self.fetch_into is not None:
                self.fetch_into(index, self.slot_views[k])
                return "ok"
            else:
                item = self.getitem(index)
        self._check(pos, item)
        np.copyto(self.slot_views[k], item, casting="no")
        return "ok"

    def _where(self, pos: int) -> str:
        if self.plan is None:
            return f"item {pos}"
        index = int(self.plan[pos])
        return f"item {pos}" if index == pos else f"item {pos} (source index {index})"

    def _check(self, pos: int, item: Any) -> None:
        if not isinstance(item, np.ndarray):
            raise TypeError(f"{self._where(pos)}: expected a numpy array, got {type(item).__name__}")
        if self.pool is None:  # only when the first read already failed; cannot happen past position 0
            raise TypeError(f"{self._where(pos)}: no slot pool")
        if item.shape != self.shape or item.dtype != self.dtype:
            raise ValueError(f"{self._where(pos)}: expected shape {self.shape} dtype {self.dtype}, "
                             f"got shape {item.shape} dtype {item.dtype}")

    def _remote(self, index: int) -> Any:
        fut = self.executor.submit(_remote_item, self.source, index, self.shape, self.dtype)
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

    def _lock(self, deadline: float | None) -> None:
        if deadline is None:
            self.consumer_lock.acquire()
        elif not self.consumer_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise PrefetchTimeout("no batch within the timeout (another thread is consuming)")

    def _usable(self) -> None:
        if self.close_started:
            raise PrefetcherClosed(f"prefetcher {self.name!r} is closed")
        if self.lease_held:
            raise LeaseHeld("a lease is still held: release it (lease.release() or leave its with-block) "
                            "before asking for another batch")

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

    def _take(self, deadline: float | None, single: bool = False) -> tuple[int, int] | None:
        """The next batch: (slot, position), or None at end of stream.

        From the run the consumer holds, if any is left; otherwise the model
        consumer's "take next batch" (a run of up to ``take_branch`` batches, or
        one batch with ``single``). Call with the consumer lock held. Raises
        the source error at its position, PrefetcherClosed after close,
        PrefetchTimeout.
        """
        self._usable()
        held = self.held
        if self.served < len(held):  # the run this consumer took: no kernel step
            got = held[self.served]
            self.served += 1
            self.delivered += 1
            self.last_pos = got[1]
            self.occupancy_sum += len(held) - self.served + 1
            self.occupancy_samples += 1
            return got
        rt, c = self.rt, self.consumer
        if self.ended is not None:
            if self.ended == "closed":
                raise PrefetcherClosed(f"prefetcher {self.name!r} is closed")
            return None
        if rt.state[self.i_consumer_pc] == DONE:
            # A take that ended the stream, whose caller was interrupted (Ctrl-C) before
            # it saw how: the error, the end or the close is still this call's answer.
            return self._finish(rt.state)
        # A take whose caller was interrupted (Ctrl-C) before it saw the batch: release
        # it (the batch is dropped), then take, in one critical section.
        give_back = rt.state[self.i_consumer_pc] == "release lease"
        self.held, self.served = (), 0
        branch = self.take_branch(single)
        before = rt.state
        slots = before[self.i_slots]
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
        # Only the consumer changes its own pc, its lease, a LEASED slot, ``delivered``
        # and ``error_seen``, so reading them after the step is exact.
        state = rt.state
        if state[self.i_consumer_pc] != DONE:
            slots, lease = state[self.i_slots], state[self.i_lease]
            k = lease[0]
            self.held = held = ((k, slots[k][1]),) if len(lease) == 1 else tuple((k, slots[k][1]) for k in lease)
            self.served = 1
            self.delivered += 1
            self.last_pos = held[0][1]
            if self.tuner is not None:
                self._autotune(before, ready)
            return held[0]
        return self._finish(state)

    def _finish(self, state: tuple) -> None:
        """The model consumer is done: end of stream (None), or raise the source error or PrefetcherClosed."""
        err = state[self.i_error_seen]
        if err >= 0:
            self.ended = "error"
            exc = self.errors.pop(err)
            try:
                raise exc
            finally:
                del exc
        if state[self.i_delivered] >= state[self.i_length]:
            self.ended = "end"
            return None
        self.ended = "closed"
        raise PrefetcherClosed(f"prefetcher {self.name!r} was closed")

    def _release(self) -> None:
        """After a batch is used: the model consumer's "release lease", once its whole run is used (never blocks).

        At once, not at the next call: a waiting worker then refills the slots
        while the caller is on its way back (measured: giving a run back at
        the next call, in one critical section with the next take, is slower
        at every depth).
        """
        if self.served >= len(self.held):
            self.held, self.served = (), 0
            self.rt.step(self.consumer)
        if self.spans is not None:
            self.consumer_back = time.perf_counter()

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

    def consume(self, use: Callable[[Any, np.ndarray], Any], arg: Any, deadline: float | None) -> Any:
        """Take a batch, call ``use(arg, slot_array)`` while leased, release. Returns _END at end of stream."""
        self._lock(deadline)
        last = self.last_call
        if last is not None:
            # The caller's pace: from the previous batch in hand to this call, i.e. using the
            # batch and the caller's own work, without our waits. It decides the run length.
            per = time.perf_counter() - last
            ewma = self.call_ewma
            self.call_ewma = per if ewma is None else ewma + _EWMA * (per - ewma)
        try:
            got = self._take(deadline)
            if got is None:
                return _END
            self.last_call = time.perf_counter()
            try:
                if self.spans is None:
                    return use(arg, self.slot_views[got[0]])
                t0 = time.perf_counter()
                try:
                    return use(arg, self.slot_views[got[0]])
                finally:
                    self.spans.append(("consumer", "copy", t0, time.perf_counter()))
            finally:
                self._release()
        finally:
            self.consumer_lock.release()

    def lease(self, deadline: float | None) -> "Lease | None":
        self._lock(deadline)
        try:
            got = self._take(deadline, single=True)  # one Lease at a time: no run to hold behind it
            if got is None:
                return None
            k, pos = got
            view = self.slot_views[k].view()
            view.flags.writeable = False
            self.lease_held = True
            return Lease(self, view, pos, self.last_index)
        finally:
            self.consumer_lock.release()

    def release_lease(self, lease: "Lease") -> None:
        with self.consumer_lock:
            if lease._released:
                return
            lease._released = True
            self.lease_held = False
            self._release()

    # -- closer -------------------------------------------------------------

    def close(self, timeout: float | None = None) -> bool:
        """Drive the model closer: set closing, wait (bounded) for the workers, join the threads.

        Returns False when a worker was stuck in a fetch and was left behind.
        """
        timeout = self.close_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self.close_lock:
            if self.closed:
                return not self.stuck
            self.close_started = True
            rt, cl = self.rt, self.closer
            me = threading.current_thread()
            in_worker = me in self.threads  # a finalizer run by a worker's garbage collection
            try:
                if rt.state[rt.machine.pc_index[cl]] == "close":
                    rt.step(cl)
                with self.waiters_lock:
                    waiters = list(self.waiters)
                for ev in waiters:
                    ev.set()
                if not in_worker and rt.state[rt.machine.pc_index[cl]] == "join workers":
                    rt.step(cl, timeout=max(0.0, deadline - time.monotonic()))
            except StepTimeout:
                pass  # a worker is stuck in a fetch: reported below
            except LiveError:
                pass  # the runtime already failed; every parked thread has been told
            for th in self.threads:
                if th is not me:
                    th.join(max(0.0, deadline - time.monotonic()))
            self.stuck = [th.name for th in self.threads if th is not me and th.is_alive()]
            self.closed = True
            self.t_end = time.perf_counter()
            self.preloaded.clear()
            self.errors.clear()
        if self.stuck:
            warnings.warn(f"prefetcher {self.name!r}: {', '.join(self.stuck)} still inside a fetch after "
                          f"{timeout:g} s; left running as daemon threads (the result will be discarded)",
                          PrefetcherWarning, stacklevel=3)
        return not self.stuck

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


_END = object()
_CLOSING = object()


def _copy_new(_unused: Any, slot: np.ndarray) -> np.ndarray:
    return np.array(slot)  # copies: the caller owns it


def _copy_into(out: np.ndarray, slot: np.ndarray) -> None:
    np.copyto(out, slot, casting="no")


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
            if at == "claim index and slot":  # blocks while no slot is free: timed
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


class Lease:
    """A zero-copy, read-only view of one prefetched batch, valid until released.

    Use it as a context manager (``with pf.lease() as batch:`` binds the
    array) or call :meth:`release`. Releasing twice is harmless. After
    release the slot is refilled by a worker: do not keep the array.
    """

    __slots__ = ("_core", "array", "position", "index", "_released", "__weakref__")

    def __init__(self, core: _Core, array: np.ndarray, position: int, index: int | None):
        self._core = core
        #: The batch: a read-only view into the slot pool.
        self.array = array
        #: Position in the stream (0, 1, 2, ...).
        self.position = position
        #: Index in the source (differs from ``position`` under a shard or shuffle plan).
        self.index = index
        self._released = False

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Give the slot back to the workers. Idempotent."""
        if not self._released:
            self._core.release_lease(self)

    def __enter__(self) -> np.ndarray:
        return self.array

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"<Lease position={self.position} index={self.index} shape={self.array.shape} {state}>"


class Prefetcher:
    """Prefetch numpy batches from ``source`` on background threads, into a preallocated slot pool.

    ``source`` is one of:

    * a map-style source (``__len__`` and ``__getitem__``), fetched in
      parallel by ``workers`` threads, in the order of the index plan;
    * a map-style source with ``fetch_into(i, out)``, which fills the slot
      array in place (no per-batch allocation); ``__getitem__`` is then only
      used to learn the batch shape, or not at all when ``shape=`` and
      ``dtype=`` are given;
    * any other iterable of arrays, read by one worker in order.

    Every batch must have the shape and dtype of the first one (or of
    ``shape=`` / ``dtype=``): a mismatch is a ValueError, a non-array a
    TypeError, delivered at that item's position like a source error. Unless
    both ``shape=`` and ``dtype=`` are given, the constructor reads the first
    batch itself, to size the pool; an Exception from that read is still
    raised at position 0 by the consumer (a BaseException such as
    KeyboardInterrupt propagates from the constructor at once).

    Parameters: ``capacity`` slots (default 2); ``workers`` fetch threads;
    ``ordered`` delivery (False: whichever batch is ready first);
    ``memory_budget`` in bytes caps the slot pool (capacity becomes at most
    ``memory_budget // batch_bytes``; arrays handed to the caller are the
    caller's own); the index plan ``rank`` /
    ``world_size`` (strided shard: positions ``rank, rank + world_size, ...``)
    and ``shuffle`` / ``seed`` / ``epoch`` (the permutation
    ``np.random.default_rng([seed, epoch])`` draws: the same on every rank,
    different per epoch, taken before sharding); ``executor`` (any
    ``concurrent.futures.Executor``, including ``distributed.Client(...)
    .get_executor(pure=False)``) runs the fetches, the source being pickled
    for process-based executors; ``close_timeout`` bounds ``close()``.

    ``autotune=True`` makes ``capacity`` the starting point: the pool is
    preallocated for ``max_capacity`` slots (default
    ``max(capacity, DEFAULT_AUTOTUNE_MAX)``, then capped by ``memory_budget``),
    and the capacity grows while the consumer waits on a buffer that is the
    limit, and shrinks while the buffer stays full. The resize steps are part
    of the checked model (its tuner thread). ``timeline=True`` records
    per-thread spans and buffer occupancy for :meth:`timeline`.

    Consume with ``for batch in pf`` (arrays you own), :meth:`get`,
    :meth:`copy_prefetched` (into your array, no allocation) or :meth:`lease`
    (zero-copy, read-only). All methods are thread-safe; consumer calls are
    serialized. Always :meth:`close` (or use ``with``); an abandoned
    prefetcher is closed when it is garbage-collected.
    """

    def __init__(self, source: Any, capacity: int = 2, workers: int = 1, ordered: bool = True, *,
                 shape: Any = None, dtype: Any = None, memory_budget: int | None = None,
                 rank: int = 0, world_size: int = 1, shuffle: bool = False, seed: int = 0,
                 epoch: int = 0, executor: Any = None, close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
                 name: str | None = None, autotune: bool = False, max_capacity: int | None = None,
                 timeline: bool = False):
        capacity = _int("capacity", capacity, 1)
        workers = _int("workers", workers, 1)
        ordered = _bool("ordered", ordered)
        autotune = _bool("autotune", autotune)
        timeline = _bool("timeline", timeline)
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
        shuffle = _bool("shuffle", shuffle)
        seed = _int("seed", seed, 0)
        epoch = _int("epoch", epoch, 0)
        if executor is not None and not callable(getattr(executor, "submit", None)):
            raise TypeError(f"executor must be a concurrent.futures.Executor (with submit), "
                            f"not {type(executor).__name__}")
        if isinstance(close_timeout, bool) or not isinstance(close_timeout, (int, float)):
            raise TypeError(f"close_timeout must be a number of seconds, not {type(close_timeout).__name__}")
        if not close_timeout > 0 or math.isinf(close_timeout):
            raise ValueError(f"close_timeout must be a positive, finite number of seconds, got {close_timeout}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")

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
            order = np.arange(n, dtype=np.int64)
            if shuffle:
                order = np.random.default_rng([seed, epoch]).permutation(n)
            plan = order[rank::world_size].copy()
            plan.flags.writeable = False
            items = len(plan)
            if want_first and items:
                if not has_getitem:
                    raise ValueError("a fetch_into source without __getitem__ needs shape= and dtype= "
                                     "(the slot pool cannot be sized otherwise)")
                try:
                    first = source[int(plan[0])]
                except Exception as e:  # noqa: BLE001 - delivered at position 0, like any source error
                    preloaded[0] = ("error", e)
                else:
                    preloaded[0] = ("item", first)
            sized = True
        else:
            if workers != 1:
                raise ValueError(f"an iterable source is read by one worker, in order; workers={workers} needs "
                                 "a map-style source (__len__ + __getitem__)")
            if executor is not None:
                raise ValueError("executor= needs a map-style source (__len__ + __getitem__): an iterator "
                                 "cannot be read by another process")
            if shuffle or world_size != 1:
                raise ValueError("index plans (shuffle, rank, world_size) need a map-style source "
                                 "(__len__ + __getitem__)")
            try:
                iterator = iter(source)
            except TypeError as e:
                raise TypeError(f"iter(source) failed: {e}") from None
            items, sized = _UNBOUNDED, False
            if want_first:
                try:
                    first = next(iterator)
                except StopIteration:
                    items, sized = 0, True
                except Exception as e:  # noqa: BLE001 - delivered at position 0
                    preloaded[0] = ("error", e)
                    items, sized = 1, True
                else:
                    preloaded[0] = ("item", first)

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

        self._core = core = _Core(
            machine=_machine(slots, workers, items, ordered, sized, capacity if autotune else 0,
                             min(slots, _MAX_RUN)), pool=pool,
            shape=shape, dtype=dtype,
            plan=plan, getitem=source.__getitem__ if map_style and has_getitem else None,
            fetch_into=fetch_into if map_style else None, iterator=iterator, executor=executor,
            source=source if executor is not None else None, preloaded=preloaded, workers=workers,
            close_timeout=float(close_timeout), name=name or f"{id(self):x}", timeline=timeline)
        self._ordered = ordered
        self._length = items if sized else None
        self._finalizer = weakref.finalize(self, _abandon, core)
        try:
            core.start()
        except BaseException:
            core.close()
            raise

    # -- consuming ----------------------------------------------------------

    def __iter__(self) -> "Prefetcher":
        return self

    def __next__(self) -> np.ndarray:
        out = self._core.consume(_copy_new, None, None)  # a copy of the slot: the caller owns it
        if out is _END:
            raise StopIteration
        return out

    def get(self, timeout: float | None = None) -> np.ndarray:
        """The next batch, as an array the caller owns.

        Raises StopIteration at the end of the stream (and after a source
        error was raised), the source's exception at its position,
        :class:`PrefetchTimeout` when ``timeout`` seconds pass with no batch,
        :class:`PrefetcherClosed` after close, :class:`LeaseHeld` while a
        lease is held.
        """
        out = self._core.consume(_copy_new, None, _deadline(timeout))
        if out is _END:
            raise StopIteration
        return out

    def copy_prefetched(self, out: np.ndarray, timeout: float | None = None) -> bool:
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
        got = core.consume(_copy_into, out, _deadline(timeout))
        return got is not _END

    def lease(self, timeout: float | None = None) -> Lease:
        """The next batch as a zero-copy, read-only :class:`Lease`. StopIteration at the end of the stream."""
        got = self._core.lease(_deadline(timeout))
        if got is None:
            raise StopIteration
        return got

    # -- closing ------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Stop the workers and join their threads. Idempotent, callable from any thread, bounded.

        Waits at most ``timeout`` seconds (default: ``close_timeout``). A
        worker still inside a fetch after that is reported with a
        :class:`PrefetcherWarning` and left as a daemon thread; it exits by
        itself when its fetch returns. A consumer blocked in another thread
        wakes up with :class:`PrefetcherClosed`. An outstanding lease stays
        readable until released.
        """
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
                raise ValueError(f"timeout must be a non-negative number of seconds, got {timeout!r}")
        self._core.close(timeout)
        self._finalizer.detach()

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
        """A frozen snapshot of the timing and buffer statistics."""
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
        """What ``timeline=True`` recorded, for drawing (see ``safeprefetch._timeline``).

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
        state = "closed" if c.close_started else (c.ended or "open")
        return (f"<Prefetcher {c.name} capacity={self.capacity} workers={self.workers} ordered={self._ordered} "
                f"shape={c.shape} dtype={c.dtype} delivered={c.delivered} {state}>")


def _deadline(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0 or timeout != timeout:
        raise ValueError(f"timeout must be None or a non-negative number of seconds, got {timeout!r}")
    return time.monotonic() + timeout


def _abandon(core: _Core) -> None:
    """The finalizer of an abandoned Prefetcher: close it (bounded; never raises)."""
    try:
        core.close()
    except Exception:  # noqa: BLE001 - a finalizer must not raise
        pass

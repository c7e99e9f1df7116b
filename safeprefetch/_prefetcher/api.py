"""The public objects: the Prefetcher, and what it checks before anything starts.

Construction checks every argument (a TypeError or ValueError names the bad
one), recognises the source (map-style, ``fetch_into``, or an iterable),
builds the index plan, reads the first batch if the pool needs its shape,
allocates the pool, compiles the reference model for this configuration and
starts the workers. The consumer methods are thin: each takes its outcome
from the core and returns it with no interruption point in between (the
return from a Python function is not one, and the dispatch on the outcome's
kind calls nothing).

Why long: ``copy_prefetched``, ``get`` and ``next`` each ask the C fast path
(``cconsumer.py``) inline, and take its outcome out of ``handing`` on the line
that returns it. A helper shared by the three would return the outcome
through a call, whose return is an interruption point after the hand-out.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._runtime.interrupts import deliver, guard, outermost, protected
from .args import as_bool, as_dtype, as_int, as_seconds, as_shape, check_out
from .cconsumer import fast_path_for
from .consumer import COPY, DEFAULT, END, GET, LEASE
from .core import Core
from .lease import Lease, Leases, NotCopyable
from .lifecycle import reaper, register, want_sigint
from .machine import RUNTIMES, default_runtime, machine_for, transitions_for, typed_for
from .policy import DEFAULT_AUTOTUNE_MAX, MAX_RUN
from .sources import (SourceBox, executor_reader, gate_of, index_plan, item_reader, plan_copy, read_first, read_under,
                      slot_pool)
from .sending import by_file
from .stats import PrefetchStats

__all__ = ["DEFAULT_CLOSE_TIMEOUT", "Prefetcher"]

#: Bound on how long ``close()`` waits for the workers by default. A fetch
#: normally returns within milliseconds once ``closing`` is set (blocked
#: workers are woken at once); five seconds leaves room for a slow disk or
#: network read in flight, and is still short enough that a stuck source does
#: not look like a hung program.
DEFAULT_CLOSE_TIMEOUT = 5.0

#: ``items`` for an iterator source: the model's upper bound on the length,
#: larger than any real stream. The true length is learned from the "end"
#: outcome of a fetch.
UNBOUNDED = 2 ** 62


class Prefetcher(NotCopyable):
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
    ``ordered`` delivery (False: whichever batch is ready first; a source
    error then ends the stream once no ready batch has an earlier position,
    and batches still being fetched, earlier ones too, are not delivered);
    ``memory_budget`` in bytes caps the slot pool (capacity becomes at most
    ``memory_budget // batch_bytes``; arrays handed to the caller are the
    caller's own); the index plan ``rank`` / ``world_size`` (strided shard:
    positions ``rank, rank + world_size, ...``; ``even="pad"`` or ``"drop"``
    gives every rank the same length, as DDP needs), and ``shuffle`` /
    ``seed`` / ``epoch`` (the permutation ``np.random.default_rng([seed,
    epoch])`` draws: the same on every rank, different per epoch, taken before
    sharding); ``executor`` (any ``concurrent.futures.Executor``, including
    ``distributed.Client(...).get_executor(pure=False)``) runs the fetches,
    the source being pickled for process-based executors (a memmap sent to a
    ``ProcessPoolExecutor`` as its file: ``sending.by_file``); ``timeout`` is the
    default for every consumer call and bounds the constructor's first read
    (``None`` or ``inf``: wait as long as it takes); ``close_timeout`` bounds
    ``close()`` (``inf``: no bound).

    ``autotune=True`` makes ``capacity`` the starting point: the pool is
    preallocated for ``max_capacity`` slots (default
    ``max(capacity, DEFAULT_AUTOTUNE_MAX)``, then capped by ``memory_budget``),
    and the capacity grows while the consumer waits on a buffer that is the
    limit, and shrinks while the buffer stays full. The resize steps are part
    of the checked model (its tuner thread). ``timeline=True`` records
    per-thread spans and buffer occupancy for :meth:`timeline` (the latest 100,000 of each).
    ``runtime`` chooses how the checked model runs: ``"generated"`` (the
    default; its transitions compiled to straight-line code, proved equal to
    the model state by state), ``"typed"`` (those transitions typed and
    compiled to C, validated the same way, and the kernel's step in C,
    checked against the Python one call for call; needs the ``speed`` extra and a
    C compiler, and the first Prefetcher of a shape builds them, for
    seconds) or ``"plain"`` (the model's own step functions, as the
    checker runs them); ``None`` reads ``SAFEPREFETCH_RUNTIME``.

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
                 timeline: bool = False, runtime: str | None = None):
        cfg = _Config.check(capacity=capacity, workers=workers, ordered=ordered, shape=shape, dtype=dtype,
                            memory_budget=memory_budget, rank=rank, world_size=world_size, even=even,
                            shuffle=shuffle, seed=seed, epoch=epoch, executor=executor, timeout=timeout,
                            close_timeout=close_timeout, thread_safe=thread_safe, autotune=autotune,
                            max_capacity=max_capacity, timeline=timeline, name=name or f"{id(self):x}",
                            runtime=default_runtime() if runtime is None else runtime)
        opened = _open(source, cfg)
        pool, slots = slot_pool(opened.shape, opened.dtype, opened.items if opened.sized else None, cfg.slots,
                                cfg.memory_budget, lost=opened.iterator is not None and bool(opened.preloaded))
        workers = min(cfg.workers, max(1, opened.items)) if opened.map_style else cfg.workers
        self._indices: np.ndarray | None = None  # what ``indices`` shows: a copy of the plan, made when asked
        # The source, reachable from the worker threads only through a weak reference (see SourceBox).
        self._source_box = box = SourceBox(
            getitem=item_reader(source) if opened.map_style and opened.has_getitem else None,
            fetch_into=opened.fetch_into if opened.map_style else None, iterator=opened.iterator,
            source=by_file(source, cfg.executor) if cfg.executor is not None else None, preloaded=opened.preloaded,
            thread_safe=cfg.thread_safe, executor=cfg.executor, owner=source)
        capacity = min(cfg.capacity, slots)
        shape = (slots, workers, cfg.ordered, opened.sized, capacity if cfg.autotune else 0, min(slots, MAX_RUN))
        typed = typed_for(*shape) if cfg.runtime == "typed" else None
        self._core = core = Core(
            machine=machine_for(shape[0], shape[1], opened.items, *shape[2:]),
            compiled=transitions_for(*shape) if cfg.runtime == "generated" else typed and typed.compiled,
            kernel=typed and typed.kernel,
            pool=pool, shape=opened.shape, dtype=opened.dtype, plan=opened.plan, box=box, workers=workers,
            close_timeout=cfg.close_timeout, name=cfg.name, timeline=cfg.timeline, timeout=cfg.timeout)
        core.serve_fast = fast_path_for(core, cfg.runtime)
        self._ordered = cfg.ordered
        self._length = opened.items if opened.sized else None
        reaper.ensure_started()
        core.plan_workers()  # before it is registered: a close from here on drives out the workers not started
        register(core)
        try:  # every statement from here is one a Ctrl-C may cut short: the core is closed then
            want_sigint(core)
            # Abandonment: a close request from the finalizer, carried out by the reaper (never
            # blocking inside a garbage collection). Interpreter exit is lifecycle's hook.
            self._finalizer = weakref.finalize(self, _abandon, core)
            self._finalizer.atexit = False
            core.start()
        except BaseException:
            _close_failed(core)
            raise

    # -- consuming ----------------------------------------------------------
    #
    # Each consumer method takes its outcome from ``Core.handout`` and returns
    # it with no interruption point in between: the return from a Python
    # function is not one, and the dispatch on the kind calls nothing.

    def __iter__(self) -> "Prefetcher":
        self._core.refuse_iteration()  # PrefetcherExhausted after the end; PrefetcherForked in a forked child
        return self

    def __next__(self) -> np.ndarray:
        core = self._core
        if core.serve_fast is not None:
            try:
                key = core.serve_fast(None, DEFAULT, False)
            except BaseException:
                core.unhand()  # interrupted as the C fast path returned: the next call returns its batch
                raise
            # ``key in``: a consumer call made at the return (a signal handler, a finalizer) may have taken the
            # outcome (``unhand``); then this call takes the Python path. No call from here to the return.
            if key and key in core.handing:
                entry = core.handing[key]; del core.handing[key]; core.last_seen.last_pos = entry[2]  # noqa: E702
                return entry[1]
        kind, value = core.handout(GET, None, DEFAULT)
        if kind is GET:
            return value
        if kind is END:
            raise StopIteration
        try:
            raise value
        finally:
            del value

    def get(self, timeout: float | None = DEFAULT) -> np.ndarray:
        """The next batch, as an array the caller owns.

        Raises StopIteration at the end of the stream (and after a source
        error was raised), the source's exception at its position,
        :class:`PrefetchTimeout` when ``timeout`` seconds pass with no batch
        (default: the prefetcher's ``timeout``; ``None`` or ``inf``: wait),
        :class:`PrefetcherClosed` after close, :class:`LeaseHeld` while a
        lease is held.
        """
        core = self._core
        if core.serve_fast is not None:
            try:
                key = core.serve_fast(None, timeout, False)
            except BaseException:
                core.unhand()  # interrupted as the C fast path returned: the next call returns its batch
                raise
            # ``key in``: a consumer call made at the return (a signal handler, a finalizer) may have taken the
            # outcome (``unhand``); then this call takes the Python path. No call from here to the return.
            if key and key in core.handing:
                entry = core.handing[key]; del core.handing[key]; core.last_seen.last_pos = entry[2]  # noqa: E702
                return entry[1]
        kind, value = core.handout(GET, None, timeout)
        if kind is GET:
            return value
        if kind is END:
            raise StopIteration
        try:
            raise value
        finally:
            del value

    def copy_prefetched(self, out: np.ndarray, timeout: float | None = DEFAULT) -> bool:
        """Copy the next batch into ``out`` (no allocation). Returns False at the end of the stream.

        ``out`` is checked before anything is consumed: it must be a writeable
        numpy array with the batch shape and dtype.
        """
        core = self._core
        if core.serve_fast is not None:
            try:
                key = core.serve_fast(out, timeout, True)
            except BaseException:
                core.unhand()  # interrupted as the C fast path returned: the next call returns its batch
                raise
            if key and key in core.handing:  # (see __next__)
                entry = core.handing[key]; del core.handing[key]; core.last_seen.last_pos = entry[2]  # noqa: E702
                return True
        check_out(out, core.shape if core.pool is not None else None, core.dtype, "copy_prefetched")
        kind, value = core.handout(COPY, out, timeout)
        if kind is COPY:
            return True
        if kind is END:
            return False
        try:
            raise value
        finally:
            del value

    def lease(self, timeout: float | None = DEFAULT) -> Lease:
        """The next batch as a zero-copy, read-only :class:`Lease`. StopIteration at the end of the stream.

        In a loop, :meth:`leases` is simpler (and ends cleanly inside a generator).
        """
        kind, value = self._core.handout(LEASE, None, timeout)
        if kind is LEASE:
            return value
        if kind is END:
            raise StopIteration
        try:
            raise value
        finally:
            del value

    def leases(self, timeout: float | None = DEFAULT) -> Leases:
        """Iterate the stream as Leases, each released when the loop moves on.

        ``for lease in pf.leases(): use(lease.array)``. Releasing a lease
        early (``with lease as view:``) is fine; keeping one past the next
        iteration is not: its slot is refilled. The last one is released
        when the loop stops (or the iterator's ``close()``). After an
        exception (Ctrl-C, a timeout) the same iterator, kept, goes on
        where it stopped.
        """
        return Leases(self.lease, timeout)

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
        the source on a worker or on an executor's thread running one of its
        fetches -- it marks the prefetcher closed at once and
        returns; the reaper thread finishes the close as soon as the
        interrupted call leaves the kernel.
        """
        t = DEFAULT if timeout is None else as_seconds("timeout", timeout)
        self._core.close(t)
        self._finalizer.detach()
        if guard.deferred and outermost(sys._getframe()):
            deliver()

    def __enter__(self) -> "Prefetcher":
        return self

    @protected
    def __exit__(self, *exc: Any) -> None:
        # Protected: a Ctrl-C landing on the way in is deferred until the close is done, so a with-block
        # never leaves the prefetcher open (close() delivers nothing inside this frame; it is done here).
        self.close()
        if guard.deferred and outermost(sys._getframe()):
            deliver()

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
        """Slots the workers may fill at once: the pool size (after ``memory_budget``, and no more than the
        stream's batches), or with ``autotune`` the current tuned capacity."""
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
        return self._core.autotuner is not None

    @property
    def capacity_history(self) -> list[tuple[float, int, int]]:
        """Every autotune resize, the latest 100,000 kept: ``(seconds since construction, batches delivered, new
        capacity)``. ``stats.capacity_changes`` counts them all."""
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
        t0 = c.counts.t0
        return {"spans": [(th, kind, a - t0, b - t0) for th, kind, a, b in list(c.spans)],
                "occupancy": [(t - t0, n) for t, n in list(c.occupancy_log or [])],
                "capacity": [(t, n) for t, _d, n in list(c.capacity_log)],  # (a copy: the consumer appends)
                "initial_capacity": c.machine.config.get("target", c.slots_total) if c.autotuner is not None
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
        """The index plan: source index of each stream position (a read-only copy); None for an iterator."""
        if self._indices is None:  # copied once: a loop may read it every step
            self._indices = plan_copy(self._core.plan)
        return self._indices

    @property
    def last_index(self) -> int | None:
        """Source index of the batch delivered last to the calling thread (useful with ``ordered=False``).

        Each consumer thread sees its own: another thread's later batch does not change it. None before the
        thread's first batch."""
        return self._core.last_index

    def __repr__(self) -> str:
        c = self._core
        state = "closed" if c.close_started else (c.ended_with or "open")
        return (f"<Prefetcher {c.name} capacity={self.capacity} workers={self.workers} ordered={self._ordered} "
                f"shape={c.shape} dtype={c.dtype} delivered={c.delivered()} {state}>")

@dataclass(frozen=True)
class _Config:
    """The constructor's arguments, checked: bad input is a TypeError or ValueError here, never later."""

    capacity: int
    workers: int
    ordered: bool
    shape: tuple[int, ...] | None
    dtype: np.dtype | None
    memory_budget: int | None
    rank: int
    world_size: int
    even: str | None
    shuffle: bool
    seed: int
    epoch: int
    executor: Any
    timeout: float | None
    close_timeout: float | None
    thread_safe: bool
    autotune: bool
    max_capacity: int | None
    timeline: bool
    name: str
    runtime: str

    @property
    def slots(self) -> int:
        """Slots in the pool: the capacity, or with autotune the ceiling it may grow to."""
        if not self.autotune:
            return self.capacity
        return self.max_capacity if self.max_capacity is not None else max(self.capacity, DEFAULT_AUTOTUNE_MAX)

    @classmethod
    def check(cls, **kw: Any) -> "_Config":
        capacity = as_int("capacity", kw["capacity"], 1)
        autotune = as_bool("autotune", kw["autotune"])
        max_capacity = kw["max_capacity"]
        if max_capacity is not None:
            max_capacity = as_int("max_capacity", max_capacity, 1)
            if not autotune:
                raise ValueError("max_capacity is the ceiling for autotune: pass autotune=True, or set capacity")
            if max_capacity < capacity:
                raise ValueError(f"max_capacity ({max_capacity}) must be >= capacity ({capacity}), "
                                 "the starting capacity")
        world_size = as_int("world_size", kw["world_size"], 1)
        rank = as_int("rank", kw["rank"], 0)
        if rank >= world_size:
            raise ValueError(f"rank must be < world_size, got rank={rank} world_size={world_size}")
        even = kw["even"]
        if even is not None and even not in ("pad", "drop"):
            raise ValueError(f"even must be None, 'pad' or 'drop', got {even!r}")
        executor = kw["executor"]
        if isinstance(executor, type):
            raise TypeError(f"executor must be an executor instance, not the class {executor.__name__} "
                            f"(e.g. {executor.__name__}(4))")
        if executor is not None and not callable(getattr(executor, "submit", None)):
            raise TypeError(f"executor must be a concurrent.futures.Executor (with submit), "
                            f"not {type(executor).__name__}")
        name = kw["name"]
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        budget = kw["memory_budget"]
        if kw["runtime"] not in RUNTIMES:
            raise ValueError(f"runtime must be one of {', '.join(map(repr, RUNTIMES))}, not {kw['runtime']!r}")
        return cls(
            capacity=capacity, workers=as_int("workers", kw["workers"], 1), ordered=as_bool("ordered", kw["ordered"]),
            shape=as_shape(kw["shape"]), dtype=as_dtype(kw["dtype"]),
            memory_budget=None if budget is None else as_int("memory_budget", budget, 1),
            rank=rank, world_size=world_size, even=even, shuffle=as_bool("shuffle", kw["shuffle"]),
            seed=as_int("seed", kw["seed"], 0), epoch=as_int("epoch", kw["epoch"], 0), executor=executor,
            timeout=as_seconds("timeout", kw["timeout"]),
            close_timeout=as_seconds("close_timeout", kw["close_timeout"], positive=True),
            thread_safe=as_bool("thread_safe", kw["thread_safe"]), autotune=autotune, max_capacity=max_capacity,
            timeline=as_bool("timeline", kw["timeline"]), name=name, runtime=kw["runtime"])


@dataclass
class _Opened:
    """What opening the source learned: its kind, the plan, the stream length, the first read."""

    map_style: bool
    has_getitem: bool = False
    fetch_into: Any = None
    iterator: Any = None
    plan: np.ndarray | None = None
    items: int = 0
    sized: bool = True
    preloaded: dict = field(default_factory=dict)
    shape: tuple[int, ...] | None = None
    dtype: np.dtype | None = None


def _open(source: Any, cfg: _Config) -> _Opened:
    """Recognise the source, build the index plan, and read the first batch if the pool needs its size."""
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
    opened = _Opened(map_style, has_getitem, fetch_into, shape=cfg.shape, dtype=cfg.dtype)
    want_first = cfg.shape is None or cfg.dtype is None
    if map_style:
        _open_map(source, cfg, opened, want_first)
    else:
        _open_iterator(source, cfg, opened, want_first)
    kind, first = opened.preloaded.get(0, ("", None))
    if want_first and kind == "item" and isinstance(first, (np.ndarray, np.generic)):  # a numpy scalar: 0-d
        opened.shape = first.shape if opened.shape is None else opened.shape
        opened.dtype = first.dtype if opened.dtype is None else opened.dtype
        if opened.map_style and opened.fetch_into is not None:
            # The read only sized the pool: a fetch_into source's batches are what fetch_into writes, batch 0
            # too (kept, it would be __getitem__'s, which need not agree).
            del opened.preloaded[0]
    if (opened.shape is None or opened.dtype is None) and opened.items:
        opened.items, opened.sized = 1, True  # the first read failed, so no pool can be sized: the stream is that error
    # The first read's error, raised later by the caller, has a traceback whose frames keep their callers' (this
    # one's, the constructor's and the caller's): a local here holding it made a cycle that kept the caller's
    # frame and locals, the prefetcher among them, alive past the call. Not kept in a local (here, _open_map's
    # and _open_iterator's).
    del first
    return opened


def _open_map(source: Any, cfg: _Config, opened: _Opened, want_first: bool) -> None:
    try:
        n = len(source)
    except TypeError as e:
        raise TypeError(f"len(source) failed: {e}") from None
    opened.plan = plan = index_plan(n, cfg.shuffle, cfg.seed, cfg.epoch, cfg.rank, cfg.world_size, cfg.even)
    opened.items = len(plan)
    if want_first and opened.items:
        if not opened.has_getitem:
            raise ValueError("a fetch_into source without __getitem__ needs shape= and dtype= to size the slot pool")
        index = int(plan[0])
        read = item_reader(source) if cfg.executor is None else executor_reader(cfg.executor, source)
        read = read_under(None if cfg.thread_safe else gate_of(source), read)  # another prefetcher's may be busy
        first = read_first(lambda: read(index), cfg.timeout, cfg.name, map_style=True)
        if first[0] == "item" and isinstance(first[1], np.ndarray) and opened.fetch_into is None:
            # (fetch_into: the first read only sizes the pool.) Later results are copied into their slot by the
            # thread that read them, before it reads again; this one only when a worker reaches position 0, and
            # a source handing out one buffer (per thread: the caller's thread is one, and it may read the
            # source again meanwhile, for a peek or another prefetcher) may have refilled it by then: batch 0
            # would hold another item, silently. Copied now, whatever thread_safe says.
            first = ("item", first[1].copy(order="K"))  # (a subclass stays one: its own check comes later)
        opened.preloaded[0] = first
        del first  # (see _open)


def _open_iterator(source: Any, cfg: _Config, opened: _Opened, want_first: bool) -> None:
    if cfg.workers != 1:
        raise ValueError(f"an iterable source is read by one worker, in order; workers={cfg.workers} needs "
                         "a map-style source (__len__ + __getitem__)")
    if cfg.executor is not None:
        raise ValueError("executor= needs a map-style source (__len__ + __getitem__): an iterator "
                         "cannot be read by another process")
    if cfg.shuffle or cfg.world_size != 1 or cfg.even is not None:
        raise ValueError("index plans (shuffle, rank, world_size, even) need a map-style source "
                         "(__len__ + __getitem__)")
    try:
        opened.iterator = iterator = iter(source)
    except TypeError as e:
        raise TypeError(f"iter(source) failed: {e}") from None
    opened.items, opened.sized = UNBOUNDED, False
    if want_first:
        kind, first = read_first(lambda: next(iterator), cfg.timeout, cfg.name, map_style=False)
        if kind == "end":
            opened.items, opened.sized = 0, True
        else:
            opened.preloaded[0] = (kind, first)
            if kind == "error":
                opened.items, opened.sized = 1, True
        del first  # (see _open)


def _close_failed(core: Any) -> None:
    """A constructor's cleanup once a statement after ``register`` raised: close the core, then deliver a
    Ctrl-C that landed in that close (deferred there): left pending, the next call of any prefetcher would
    raise it. The constructor raises its own exception after this, if nothing was delivered."""
    core.close(DEFAULT)
    if guard.deferred and outermost(sys._getframe(1)):
        deliver()


def _abandon(core: Core) -> None:
    """The finalizer of an abandoned Prefetcher: ask the reaper to close it. Never blocks, never raises."""
    try:
        core.request_close()
    except BaseException:  # noqa: BLE001 - a finalizer must not raise
        pass

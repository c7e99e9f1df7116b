"""OnDemandPrefetcher: items in an order only the caller knows, fetched ahead by a predictor.

The streaming :class:`~safeprefetch.Prefetcher` knows its order in advance
(an index plan). Many consumers do not: a sampler that decides each index at
run time, a curriculum, a seeking video decoder, a tile reader, a loop that
revisits hard examples. ``OnDemandPrefetcher(source, predict=...)`` serves
``pf.get(i)`` / ``pf.copy_into(i, out)`` for any index, in any order:

* a request whose batch is ready is a copy out of the slot;
* a request whose batch a worker is fetching waits for that fetch, never a
  second one;
* any other request (a *demand miss*) is fetched at once, on the caller's
  own thread, ahead of every speculative fetch: a slot is always free or
  held by a speculation it may evict, which the checker proves;
* at each request the predictor proposes the next indices, and workers
  fetch them into free slots, within ``capacity`` and ``memory_budget``.

The protocol is ``models/predictive_prefetcher.py``, run live by the same
runtime as the streaming Prefetcher, over the same kind of slot pool; close,
finalizers, fork and exit are the streaming machinery, unchanged. See
``ondemand_core.py`` (the core), ``ondemand_serve.py`` (the caller's side)
and ``ondemand_policy.py`` (predictions into speculation steps).

Decisions, and why
------------------
* **The demand fetch runs on the caller's thread.** A handoff to a worker
  costs a thread switch on every miss, and a miss would wait for a worker
  that is busy with speculation; the caller's own thread is always free.
  ``predict=None`` is then exactly a direct ``source[i]`` plus one copy.
  ``timeout=`` therefore bounds waits for other threads (the gate, a
  worker's fetch in flight, and with ``thread_safe=False`` the source lock
  a worker's call holds), not the source call a miss makes itself.
* **A source error answers that request only.** An on-demand source has no
  stream to end: the error is raised by the request for its index, as the
  same object, and the prefetcher stays usable. A speculative fetch that
  failed is raised only if its index is asked for; otherwise it is evicted
  with its slot.
* **The first read sizes the pool** (``source[0]``), unless ``shape=`` and
  ``dtype=`` are given; if it fails, the constructor raises (there is no
  pool to deliver the error from), with the source's exception chained.
* No ``executor=``, no iterator sources (an iterator cannot be indexed), no
  leases: copies only.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from .api import Prefetcher, _abandon, _close_failed  # _abandon: the finalizer, a close request for the reaper
from .args import as_bool, as_dtype, as_int, as_seconds, as_shape, check_batch_dtype, check_out
from .consumer import COPY, DEFAULT, GET
from .lease import NotCopyable
from .lifecycle import reaper, register, want_sigint
from .ondemand_core import OnDemandCore
from .ondemand_serve import ERROR
from .ondemand_stats import OnDemandStats
from .predictors import Predictor, label, make_predictor
from .sources import SourceBox, batch_problem, gate_of, item_reader, read_first, read_under

__all__ = ["DEFAULT_CAPACITY", "OnDemandPrefetcher"]

#: Slots by default: one for the request in hand and seven to fetch ahead into, enough depth to
#: hide a fetch several times slower than the caller's work per item, with two workers.
DEFAULT_CAPACITY = 8


class OnDemandPrefetcher(NotCopyable):
    """Serve ``get(i)`` for any index the caller chooses, fetching ahead what ``predict`` expects next.

    ``source`` is map-style: ``__len__`` and ``__getitem__`` (or
    ``fetch_into(i, out)``, which fills the slot in place). ``predict`` is
    ``None`` (no speculation), ``"sequential"``, ``"stride"``, ``"markov"``,
    ``"adaptive"`` (the default: follows whichever of the three is right,
    and stops speculating when none is), or a
    :class:`~safeprefetch.Predictor`. ``capacity`` slots (default 8; at
    most ``capacity - 1`` are fetched ahead, so one stays for the request in
    hand) are preallocated at the batch's shape and dtype (read from
    ``source[0]`` unless ``shape=`` and ``dtype=`` are given), capped by
    ``memory_budget`` bytes; ``workers`` threads fetch speculatively. A
    miss is fetched on the caller's thread while workers speculate, so the
    source is called from two threads at once even with ``workers=1``
    (``thread_safe=False`` serializes every call into the source).
    ``depth`` caps how many indices are fetched ahead (default ``capacity -
    1``). ``timeout`` is the default for every call (see the module doc for
    what it bounds); ``close_timeout`` bounds :meth:`close`.

    ``pf.stats`` answers whether prediction pays for itself here (accuracy,
    coverage, wasted bytes, time saved); ``print(pf.stats)`` says it in one
    line. Calls are thread-safe and serialized; Ctrl-C in a call loses
    nothing (the next call for the same index returns what it was handing
    out). ``close()`` is idempotent, bounded and callable from any thread, a
    signal handler or a finalizer included; an abandoned prefetcher is
    closed when collected, every open one at exit; in a forked child every
    call raises :class:`~safeprefetch.PrefetcherForked`.
    """

    def __init__(self, source: Any, capacity: int = DEFAULT_CAPACITY, workers: int = 2,
                 predict: str | Predictor | None = "adaptive", *, depth: int | None = None,
                 shape: Any = None, dtype: Any = None, memory_budget: int | None = None, thread_safe: bool = True,
                 timeout: float | None = None, close_timeout: float | None = 5.0, name: str = "ondemand"):
        capacity = as_int("capacity", capacity, 1)
        workers = as_int("workers", workers, 1)
        depth = None if depth is None else as_int("depth", depth, 0)
        shape, dtype = as_shape(shape), as_dtype(dtype)
        budget = None if memory_budget is None else as_int("memory_budget", memory_budget, 1)
        thread_safe = as_bool("thread_safe", thread_safe)
        timeout = as_seconds("timeout", timeout)
        close_timeout = as_seconds("close_timeout", close_timeout, positive=True)
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        length = _length(source)
        predictor = make_predictor(predict, length)
        if shape is None or dtype is None:
            shape, dtype = _first_shape(source, length, shape, dtype, timeout, name, thread_safe)
            check_batch_dtype(dtype, "source[0]")
        batch_bytes = math.prod(shape) * dtype.itemsize
        if budget is not None and batch_bytes:
            if batch_bytes > budget:
                raise ValueError(f"one batch of shape {shape} dtype {dtype} takes {batch_bytes} bytes, "
                                 f"more than memory_budget={budget}")
            capacity = max(1, min(capacity, budget // batch_bytes))
        capacity = min(capacity, max(1, length))  # no more slots than indices (capacity=10**5 for 4 took 2 s)
        fetch_into = getattr(source, "fetch_into", None)
        self._source_box = box = SourceBox(
            getitem=item_reader(source),
            fetch_into=fetch_into if callable(fetch_into) else None, iterator=None, source=None, preloaded={},
            thread_safe=thread_safe, owner=source)
        ahead = capacity - 1 if depth is None else min(depth, capacity - 1)
        self._core = core = OnDemandCore(
            pool=np.zeros((capacity, *shape), dtype), workers=workers, box=box, predictor=predictor, length=length,
            close_timeout=close_timeout, timeout=timeout, name=name, depth=ahead)
        reaper.ensure_started()
        core.plan_workers()  # before it is registered: a close from here on drives out the workers not started
        register(core)
        try:  # every statement from here is one a Ctrl-C may cut short: the core is closed then
            want_sigint(core)
            self._finalizer = weakref.finalize(self, _abandon, core)
            self._finalizer.atexit = False
            core.start()
        except BaseException:
            _close_failed(core)
            raise

    # -- requests -----------------------------------------------------------
    #
    # Each takes its outcome from ``handout`` and returns it with no interruption point in between.

    def get(self, index: int, timeout: float | None = DEFAULT) -> np.ndarray:
        """Item ``index``, as an array the caller owns.

        Raises the source's exception for that index (the same object),
        IndexError or TypeError for a bad index, :class:`PrefetchTimeout`
        when another thread's work does not finish within ``timeout``,
        :class:`PrefetcherClosed` after close.
        """
        kind, value = self._core.handout(GET, (self._check_index(index), None), timeout)
        if kind is GET:
            return value
        try:
            raise value.error if kind is ERROR else value
        finally:
            if kind is ERROR:
                value.error = None  # (taken out of the outcome: see ondemand_serve.Raised)
            del value

    __getitem__ = get

    def copy_into(self, index: int, out: np.ndarray, timeout: float | None = DEFAULT) -> None:
        """Copy item ``index`` into ``out`` (a writeable array of the batch shape and dtype; no allocation)."""
        core = self._core
        check_out(out, core.shape, core.dtype, "copy_into")
        kind, value = core.handout(COPY, (self._check_index(index), out), timeout)
        if kind is COPY:
            return
        try:
            raise value.error if kind is ERROR else value
        finally:
            if kind is ERROR:
                value.error = None
            del value

    def _check_index(self, index: Any) -> int:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"index must be an int, not {type(index).__name__} ({index!r})")
        n = self._core.length
        if not 0 <= index < n:
            raise IndexError(f"index {index} is out of range for a source of length {n}")
        return int(index)

    def __len__(self) -> int:
        return self._core.length

    # -- closing: the streaming Prefetcher's, as they are (they read ``_core`` and ``_finalizer``) --------

    close = Prefetcher.close
    __enter__ = Prefetcher.__enter__
    __exit__ = Prefetcher.__exit__
    closed = Prefetcher.closed

    # -- inspection ---------------------------------------------------------

    @property
    def stats(self) -> OnDemandStats:
        """Whether prediction pays for itself here: a frozen snapshot (``print(pf.stats)``: one line)."""
        return self._core.stats()

    @property
    def predictor(self) -> Predictor:
        return self._core.predictor

    @property
    def capacity(self) -> int:
        """Slots in the pool (after ``memory_budget``)."""
        return len(self._core.slot_views)

    @property
    def depth(self) -> int:
        """How many indices may be fetched ahead at once."""
        return self._core.depth

    @property
    def workers(self) -> int:
        return len(self._core.worker_ids)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._core.shape

    @property
    def dtype(self) -> np.dtype:
        return self._core.dtype

    def slots(self) -> list[tuple[str, int | None]]:
        """Each slot's state and the index it holds, right now (a snapshot: the workers keep changing it)."""
        return self._core.slot_states()

    def __repr__(self) -> str:
        c = self._core
        state = "closed" if c.close_started else "open"
        return (f"<OnDemandPrefetcher {c.name} capacity={self.capacity} workers={self.workers} "
                f"predict={label(c.predictor)} shape={c.shape} dtype={c.dtype} {state}>")


def _length(source: Any) -> int:
    if source is None or isinstance(source, (str, bytes, bytearray)):
        raise TypeError(f"source must be a map-style source of arrays, not {type(source).__name__}")
    fetch_into = getattr(source, "fetch_into", None)
    if not hasattr(source, "__len__") or not (hasattr(source, "__getitem__") or callable(fetch_into)):
        raise TypeError(f"an OnDemandPrefetcher needs a map-style source (__len__ and __getitem__ or fetch_into), "
                        f"not {type(source).__name__}: an iterator cannot be indexed")
    if isinstance(source, np.ndarray) and source.ndim == 0:
        raise TypeError("source is a 0-d array: give an array of batches (at least 1-d)")
    try:
        return int(len(source))
    except TypeError as e:
        raise TypeError(f"len(source) failed: {e}") from None


def _first_shape(source: Any, length: int, shape: Any, dtype: Any, timeout: float | None,
                 name: str, thread_safe: bool = True) -> tuple[tuple[int, ...], np.dtype]:
    """Read ``source[0]`` to size the pool (the shape and dtype not given)."""
    if not length:
        raise ValueError("the source is empty: give shape= and dtype= to size the pool")
    if not hasattr(source, "__getitem__"):
        raise ValueError("a fetch_into source without __getitem__ needs shape= and dtype= (the slot pool cannot "
                         "be sized otherwise)")
    read = read_under(None if thread_safe else gate_of(source), item_reader(source))
    kind, first = read_first(lambda: read(0), timeout, name, map_style=True)
    if kind == "error":
        # Its text is the cause's to show: str() of a source's exception may raise, and lose it.
        raise ValueError(f"reading source[0] to size the slot pool failed ({type(first).__name__}, the cause "
                         "above); give shape= and dtype= to skip that read") from first
    if isinstance(first, np.generic) and not isinstance(first, np.object_):
        first = np.asarray(first)  # a numpy scalar (an item of a 1-d array): a 0-d batch, as the workers take it
    bad = batch_problem(first, getattr(first, "shape", None), getattr(first, "dtype", None))
    if bad is not None:  # the workers' rule: a memmap or another subclass is a batch, a MaskedArray is not
        raise bad[0](f"source[0]: {bad[1]}")
    return (first.shape if shape is None else shape), (first.dtype if dtype is None else dtype)

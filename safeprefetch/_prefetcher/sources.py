"""Adapting the user's source: the index plan, the box the workers reach it through, and the first read.

* **The plan** maps the model's stream positions 0..n-1 onto source indices:
  sequential, a seeded permutation, then a rank's strided shard, padded or
  trimmed to equal lengths on request. It is read-only for good (its
  ``writeable`` flag cannot be set back): the caller sees it as
  ``Prefetcher.indices``.
* **The box** holds everything that reaches the source, and every other
  object of the caller's that the core uses (an executor, an on-demand
  predictor). The
  Prefetcher owns it; the workers see it through a weak reference, one
  fetch at a time, so a source (or predictor) that refers back to its own
  Prefetcher does not keep it alive through the worker threads (the garbage
  collector can collect the cycle).
* **An executor's thread** running a fetch (``remote_item``) is marked, in
  this process, as running that prefetcher's fetch (``EXECUTING``), so a
  source that calls its own prefetcher back from there is refused as it is
  from a worker: the consumer it would wait for is waiting for this fetch.
* **The first read** sizes the slot pool. A ``StopIteration`` from a
  map-style source is an error there, as everywhere: an indexed source has
  no end of stream.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import threading
import time
import weakref
from typing import Any, Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .args import check_batch_dtype
from .errors import PrefetchTimeout, from_source
from .filling import fill_into
from .sending import MappedFile, Unmapped, by_file, must_travel, sendable
from .waits import SOURCE_BUSY, Gate, HeldGate, new_gate, wait_event, wait_gate

__all__ = ["EXECUTING", "FILLED", "LocalSlot", "SourceBox", "batch_problem", "check_future", "executing",
           "executor_reader", "gate_of", "index_plan", "item_reader", "new_token", "plan_copy",
           "owned_copy", "read_first", "read_under", "remote_item", "slot_pool", "stop_iteration_error"]

#: The threads of this process inside an executor's fetch: thread ident -> the tokens of the prefetchers whose
#: fetches it runs, outermost first (an executor may run a fetch on a thread already inside another's). Only the
#: thread itself adds or removes its own key (one dict store: atomic under the GIL). A filter only: an entry a
#: Ctrl-C left behind (it lands between any two bytecodes of ``remote_item``, its ``finally`` too) is told from
#: a live one by the thread's frames (``executing``).
EXECUTING: dict[int, tuple[tuple[int, int], ...]] = {}
_TOKENS = itertools.count(1)
#: What ``remote_item`` returns when it copied the item into the worker's slot itself (an executor of this process).
FILLED: Any = type("_Filled", (), {"__repr__": lambda self: "<filled in place>"})()


class LocalSlot:
    """The worker's slot, sent with a remote fetch: the array itself to an executor of this process, and
    nothing to another process (it pickles as an empty ``LocalSlot``: a process pool is not sent a batch of
    zeros per fetch)."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray | None):
        self.array = array

    def __reduce__(self) -> tuple:
        return LocalSlot, (None,)


def batch_problem(item: Any, shape: tuple[int, ...] | None, dtype: np.dtype | None) -> tuple[type, str] | None:
    """Why ``item`` cannot be copied into a slot of ``shape`` and ``dtype`` as a batch: (exception type, message),
    or None when it can. A numpy scalar (an item of a 1-d array source) is a 0-d batch."""
    if type(item) is not np.ndarray:
        if isinstance(item, np.generic):
            pass
        elif not isinstance(item, np.ndarray):
            return TypeError, f"expected a numpy array, got {type(item).__name__}"
        if isinstance(item, np.ma.MaskedArray):
            return TypeError, ("a numpy.ma.MaskedArray: its mask would be dropped; yield item.filled(value), or "
                               "the data and the mask as separate arrays")
        if isinstance(item, np.matrix):
            return TypeError, "a numpy.matrix would come back as a plain ndarray; yield np.asarray(item)"
    if shape is None or dtype is None:  # only when the first read already failed; cannot happen past position 0
        return TypeError, "no slot pool"
    if item.shape != shape or item.dtype != dtype:
        return ValueError, (f"expected shape {shape} dtype {dtype}, got shape {item.shape} dtype {item.dtype}")
    return None


def slot_pool(shape: tuple[int, ...] | None, dtype: np.dtype | None, items: int | None, slots: int,
              memory_budget: int | None, lost: bool = False) -> tuple[np.ndarray | None, int]:
    """The preallocated slot pool (None when no batch shape is known) and its number of slots: ``slots`` asked
    for, no more than the ``items`` of a stream of known length, no more than ``memory_budget`` bytes hold.
    ``lost``: the first batch was read from an iterator to size it, and an error here loses it (said so)."""
    if items is not None and items < slots:
        # No more slots than batches: a stream of 4 never holds a fifth, and each slot costs memory and a
        # field of every model state (capacity=10**6 for 4 items took 364 MB and slow steps).
        slots = max(1, items)
    if shape is None or dtype is None:
        return None, slots
    try:
        batch_bytes = math.prod(shape) * check_batch_dtype(dtype, "the first batch").itemsize
        if memory_budget is not None and batch_bytes > memory_budget:
            raise ValueError(f"one batch of shape {shape} dtype {dtype} takes {batch_bytes} bytes, more than "
                             f"memory_budget={memory_budget}")
    except Exception as e:
        if lost:  # (a retry with the same iterator started at its second item, silently)
            e.add_note("the first batch was read from the iterator to size the slot pool, and is lost with this "
                       "error: the iterator has lost its first item, so do not hand it to a new prefetcher")
        raise
    if memory_budget is not None and batch_bytes:
        slots = max(1, min(slots, memory_budget // batch_bytes))
    # Zeros, not empty: a fetch_into that writes part of a slot leaves zeros, never another allocation's bytes.
    return np.zeros((slots, *shape), dtype), slots


def owned_copy(dtype: np.dtype | None) -> Callable[[np.ndarray], np.ndarray]:
    """How a batch handed to the caller is copied out of its slot: ``np.array``, or, for a dtype with bytes no
    field covers (an aligned struct's padding), a copy of the slot's raw bytes. ``np.array`` copies such a
    dtype field by field and leaves the holes as its allocation found them: another object's bytes, different
    every run, where the slot holds zeros (its ``tobytes()``, a hash of it, a shard written from it all
    differed from run to run)."""
    if dtype is None or not _has_holes(dtype):
        return np.array
    return _raw_copy


def _has_holes(dtype: np.dtype) -> bool:
    if dtype.fields is None and dtype.subdtype is None:
        return False
    covered = bytearray(dtype.itemsize)

    def cover(dt: np.dtype, at: int) -> None:
        if dt.fields is not None:
            for field in dt.fields.values():
                cover(field[0], at + field[1])
        elif dt.subdtype is not None:
            base, shape = dt.subdtype
            if base.fields is None and base.subdtype is None:
                covered[at:at + dt.itemsize] = b"\1" * dt.itemsize
            else:
                for j in range(math.prod(shape)):
                    cover(base, at + j * base.itemsize)
        else:
            covered[at:at + dt.itemsize] = b"\1" * dt.itemsize

    cover(dtype, 0)
    return 0 in covered


def _raw_copy(view: np.ndarray) -> np.ndarray:
    copied = np.empty(view.shape, view.dtype)
    copied.reshape(-1).view(np.uint8)[...] = np.ascontiguousarray(view).reshape(-1).view(np.uint8)
    return copied


def new_token() -> tuple[int, int]:
    """A prefetcher's token for ``EXECUTING``: picklable (it travels with the fetch to process executors) and
    unique across processes -- (pid, n): a spawned worker process counts its own prefetchers from 1, so a bare
    count sent from here named one of the worker's own, and a source there reading a prefetcher of its own was
    refused as calling its prefetcher back."""
    return os.getpid(), next(_TOKENS)


def executing(token: tuple[int, int]) -> bool:
    """Whether the calling thread runs, in ``remote_item``, a fetch of the prefetcher with ``token`` (at any
    depth of nesting)."""
    if token not in EXECUTING.get(threading.get_ident(), ()):
        return False
    code, f = remote_item.__code__, sys._getframe(1)
    while f is not None:  # the entry is live only while remote_item's frame is on this thread's stack
        if f.f_code is code and f.f_locals.get("token") == token:
            return True
        f = f.f_back
    return False


def index_plan(n: int, shuffle: bool, seed: int, epoch: int, rank: int, world_size: int, even: str | None) -> np.ndarray:
    """The stream positions' source indices: a seeded permutation (or 0..n-1), then rank's strided shard.

    ``even="pad"`` repeats the first indices of the order so every rank gets
    ``ceil(n / world_size)`` items; ``"drop"`` drops the tail so every rank
    gets ``n // world_size``; ``None`` lets the first ``n % world_size``
    ranks have one more (ranks in lockstep, as under DDP, then disagree on
    the number of steps).
    """
    if not shuffle:
        # The shard alone, without the whole order first (a rank of a 5e7-item dataset held all 5e7 indices,
        # 400 MB, to keep one eighth of them): the same plan as the path below (tests/test_hardening_review14.py).
        end = -(-n // world_size) * world_size if even == "pad" and n else (
            (n // world_size) * world_size if even == "drop" else n)
        shard = np.arange(rank, end, world_size, dtype=np.int64)
        if end > n:
            shard %= n  # "pad" repeats from the start
        return as_strided(shard, writeable=False)
    order = np.random.default_rng([seed, epoch]).permutation(n)
    if even == "pad" and n:
        order = np.resize(order, -(-n // world_size) * world_size)  # repeats from the start
    elif even == "drop":
        order = order[:(n // world_size) * world_size]
    # Read-only (a plain array's flag could be set back); the workers read this one for every fetch, and
    # ``Prefetcher.indices`` hands out a copy of it (:func:`plan_copy`): an alias of this array's memory
    # reached through ``.base`` is writeable, and writing it changed which items the stream held, silently.
    return as_strided(order[rank::world_size].copy(), writeable=False)


def plan_copy(plan: np.ndarray | None) -> np.ndarray | None:
    """The index plan as the caller may see it: a read-only copy, sharing no memory with the workers' plan."""
    return None if plan is None else as_strided(plan.copy(), writeable=False)


def item_reader(source: Any) -> Callable[[int], Any] | None:
    """How a worker reads item ``i`` of a map-style source: ``source[i]``, or None without ``__getitem__``.

    For a plain numpy array of strings or bytes it is ``source[i, ...]``, an array of the source's dtype:
    ``source[i]`` of a 1-d one is a numpy scalar whose dtype is sized to that one value (``<U1`` out of a
    ``<U2`` array), refused as a batch of the wrong dtype. Only there: an object array's ``source[i]`` is
    the object it holds (an array, a batch), and a subclass's ``__getitem__`` is its own.
    """
    if type(source) in (np.ndarray, np.memmap) and source.dtype.kind in "SU":  # a memmap's indexing is numpy's
        return lambda i: source[i, ...]
    return source.__getitem__ if hasattr(source, "__getitem__") else None


def remote_item(source: Any, index: int, shape: tuple[int, ...] | None, dtype: np.dtype | None,
                token: tuple[int, int] = (0, 0), slot: LocalSlot | None = None) -> Any:
    """What an executor runs: fetch one item and return it. The running thread is marked in ``EXECUTING``
    with the prefetcher's ``token`` while the source runs.

    On an executor of this process (a thread pool) the item is copied into the worker's ``slot`` here, before
    the executor's thread is free for the next fetch, and ``FILLED`` returned: a source that hands out one
    reused buffer per thread (thread-safe, and correct with the prefetcher's own workers) refilled it for the
    next fetch on that thread before the waiting worker had copied it, and the stream held wrong batches. An
    item that is not a batch of the slot's shape and dtype is returned, for the worker to refuse at its position.
    The constructor's first read (no slot yet: ``LocalSlot(None)``) returns a copy made here, for the same reason.
    """
    if type(source) is MappedFile:  # (not pickled: a thread pool of this process was given it)
        source = source.array
    me = threading.get_ident()
    outer = EXECUTING.get(me, ())  # an executor that runs the call on a thread already inside one (nested)
    try:
        EXECUTING[me] = (*outer, token)
        try:
            if type(source) is Unmapped:  # (a worker process: the file it was sent by name is gone)
                raise source.error
            if slot is not None and token[0] == os.getpid() and (slot.array is not None or shape is None):
                return _remote_fill(source, index, slot.array)
            # Another process, or this one through an executor that pickles what it runs (the slot came empty):
            # what it reads is its own, and from another process it travels back with its dtype (sending.py).
            item = _remote_read(source, index, shape, dtype)
            return sendable(item) if token[0] != os.getpid() else item
        except BaseException as e:
            if token[0] != os.getpid():  # in an executor's process: what it raises travels back pickled
                must_travel(e)
            raise
    finally:
        if outer:
            EXECUTING[me] = outer
        else:
            EXECUTING.pop(me, None)


def check_future(executor: Any, fut: Any) -> None:
    """Refuse what an executor's ``submit`` returned unless it is a future (used unchecked, it failed later as
    if the source had raised an AttributeError)."""
    if not all(callable(getattr(fut, name, None)) for name in ("add_done_callback", "done", "cancel", "result")):
        raise TypeError(f"executor {type(executor).__name__}: submit returned {type(fut).__name__}, not a "
                        "concurrent.futures.Future (add_done_callback, done, cancel, result)")


def executor_reader(executor: Any, source: Any) -> Callable[[int], Any]:
    """Item ``i`` read on ``executor``, as the workers' fetches are: the constructor's first read (to size the
    pool) too, so a source that runs only there (a dask worker's resources, a process's own state) works."""
    source = by_file(source, executor)  # (a memmap to a process pool: its file, not its bytes)

    def read(i: int) -> Any:
        # The token names this process; the empty slot asks a thread of this process for a copy of the item.
        fut = executor.submit(remote_item, source, i, None, None, (os.getpid(), 0), LocalSlot(None))
        check_future(executor, fut)
        return fut.result()
    return read


def _remote_read(source: Any, index: int, shape: tuple[int, ...] | None, dtype: np.dtype | None) -> Any:
    fetch_into = getattr(source, "fetch_into", None)
    if callable(fetch_into) and shape is not None and dtype is not None:  # the data path it declares
        out = np.zeros(shape, dtype)
        problem = fill_into(fetch_into, index, out)
        if problem is not None:
            raise TypeError(f"item at source index {index}: {problem}")
        return out
    return item_reader(source)(index)  # type: ignore[misc]


def _remote_fill(source: Any, index: int, slot: np.ndarray | None) -> Any:
    """``remote_item`` on an executor of this process: the item copied into ``slot`` (FILLED), or returned (a
    copy of it when there is no slot yet)."""
    if slot is None:
        item = item_reader(source)(index)  # type: ignore[misc]
        return item.copy(order="K") if isinstance(item, np.ndarray) else item
    fetch_into = getattr(source, "fetch_into", None)
    if callable(fetch_into):
        problem = fill_into(fetch_into, index, slot)
        if problem is not None:
            raise TypeError(f"item at source index {index}: {problem}")
        return FILLED
    item = item_reader(source)(index)  # type: ignore[misc]
    if batch_problem(item, slot.shape, slot.dtype) is not None:
        return item
    np.copyto(slot, item, casting="no")
    return FILLED


class SourceBox:
    """Everything that reaches the user's source, owned by the Prefetcher and seen by workers weakly.

    A worker resolves the weak reference for the length of one fetch. A
    source that refers back to its Prefetcher therefore forms a cycle
    (Prefetcher -> box -> source -> Prefetcher) that no thread roots, and the
    garbage collector can collect it and run the finalizer.
    """

    __slots__ = ("getitem", "fetch_into", "iterator", "source", "executor", "preloaded", "errors", "lock",
                 "predictor", "__weakref__")

    def __init__(self, getitem: Any, fetch_into: Any, iterator: Any, source: Any,
                 preloaded: dict[int, tuple[str, Any]], thread_safe: bool, executor: Any = None, owner: Any = None):
        self.getitem, self.fetch_into, self.iterator, self.source = getitem, fetch_into, iterator, source
        #: The ``executor=`` that runs the fetches (then ``source`` is the source itself, sent with each), or None.
        self.executor = executor
        #: The constructor's read of position 0, if it made one: ("item", array) or ("error", exception).
        self.preloaded = preloaded
        #: Source exceptions waiting for the consumer, by stream position.
        self.errors: dict[int, BaseException] = {}
        #: Serializes calls into a source that is not thread-safe (``thread_safe=False``): a gate, taken
        #: with ``waits.wait_gate`` so that an on-demand miss can wait for it with a deadline. One per source
        #: object (``owner``, the user's), shared by every prefetcher that calls it: :func:`gate_of`.
        self.lock = None if thread_safe else gate_of(owner)
        #: An OnDemandPrefetcher's predictor (None for the streaming one): the caller's object, like the source.
        self.predictor: Any = None


#: The ``thread_safe=False`` gates, one per source object: ``id -> (weak reference, gate)``.
_GATES: dict[int, tuple[Any, Any]] = {}
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_GATES.clear)


def gate_of(source: Any) -> Any:
    """The gate that serializes calls into ``source`` for every prefetcher that calls it.

    A gate per prefetcher let two prefetchers over one dataset object (train and validation, or the next
    epoch's beside this one's) call a source declared not thread-safe at once, and it tore batches (1,400
    of 2,000 in the review's run). Every source under ``safeprefetch.interleavings`` gets a gate of its own,
    per prefetcher: there a gate is the scheduler's lock of one run, and must not outlive it into the next.
    A forked child starts the table afresh: a gate a parent's thread held there has no owner in the child.
    """
    gate = new_gate()
    if source is None or type(gate) is not Gate:
        return gate
    key = id(source)
    try:
        ref = weakref.ref(source, lambda r: _GATES.pop(key, None) if _GATES.get(key, (None,))[0] is r else None)
    except TypeError:
        return _gate_while_used(source, key)
    held = _GATES.setdefault(key, (ref, gate))  # atomic: two prefetchers opened at once get one gate
    if held[0]() is source:
        return held[1]
    _GATES[key] = (ref, gate)  # an entry of a source gone whose id this one reuses, its callback not run yet
    return gate


def _gate_while_used(source: Any, key: int) -> Any:
    """``gate_of`` for a source that cannot be weakly referenced (``__slots__`` without ``__weakref__``, a Cython
    class, a list). A gate of its own per prefetcher, as it had, let two prefetchers declared
    ``thread_safe=False`` call it at once, tearing batches. The gate holds the source (a :class:`HeldGate`), so
    while it lives the id names no other object; the table holds the gate weakly, and its entry goes once no
    prefetcher holds the gate. (Held by the table, a source that refers back to its prefetcher would be rooted
    there, and an abandoned prefetcher never collected: in the gate, that is a cycle the collector frees.)"""
    gate = HeldGate()
    gate.source = source
    ref = weakref.ref(gate, lambda r: _GATES.pop(key, None) if _GATES.get(key, (None,))[0] is r else None)
    held = _GATES.setdefault(key, (ref, None))  # atomic, as above
    shared = held[0]() if held[1] is None else None
    if type(shared) is HeldGate and shared.source is source:
        return shared
    _GATES[key] = (ref, None)  # a gate gone, its callback not run yet (or an entry of a weakly kept source)
    return gate


def read_under(gate: Any, read: Callable[[int], Any]) -> Callable[[int], Any]:
    """``read``, each call holding ``gate`` (None: as it is): a constructor's first read of a shared source."""
    if gate is None:
        return read

    def locked(index: int) -> Any:
        with (gate if wait_gate(gate, None, deliver_deferred=False) else SOURCE_BUSY):
            return read(index)

    return locked


def stop_iteration_error(where: str, e: StopIteration) -> RuntimeError:
    err = RuntimeError(f"{where}: the source raised StopIteration; a map-style source has no end of stream, "
                       "so this is an error (as PEP 479 makes it for generators)")
    err.__cause__ = e
    return err


def read_first(read: Callable[[], Any], timeout: float | None, name: str, map_style: bool) -> tuple[str, Any]:
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
                return "error", stop_iteration_error("item 0", e)
            return "end", None
        except Exception as e:  # noqa: BLE001 - delivered at position 0, like any source error
            return "error", from_source("item 0", e)

    if timeout is None:
        return attempt()
    box: list[Any] = []
    done = threading.Event()

    def attempt_or_exception() -> Any:
        # Both branches return: an except body that falls through ends in a back-edge on 3.12, where
        # an interrupt is caught by this same clause again (lowlevel.escaping_back_edges).
        try:
            return attempt()
        except BaseException as e:  # noqa: BLE001 - handed to the constructor
            return ("base", e)

    def run() -> None:
        try:
            box.append(attempt_or_exception())
        finally:
            done.set()

    th = threading.Thread(target=run, name=f"safeprefetch-{name}-first-read", daemon=True)
    th.start()
    if not wait_event(done, time.monotonic() + timeout):
        lost = "" if map_style else (
            "; the read goes on in a background thread until the source returns, and the item it returns is "
            "discarded: this iterator has lost its next item, so do not hand it to a new prefetcher")
        raise PrefetchTimeout(f"the source did not return its first batch within {timeout:g} s "
                              f"(the constructor reads it to size the slot pool; give shape= and dtype= to skip "
                              f"it){lost}")
    kind, value = box.pop()  # (emptied: ``run``'s frame, in the traceback of an error read, holds the list)
    if kind == "base":
        raise value
    return kind, value

"""What every ``bench live`` figure shares: the Figure record, the baselines, the sources.

A figure is a ratio: the Prefetcher against a baseline measured in the same
run, on the same data and the same machine, so a noisy shared machine cannot
fake it (both sides saw the same neighbours). Each figure is the median over
repeats (:func:`median`).

The baselines, written here for the bench
------------------------------------------
* **queue.Queue** (:func:`queue_run`) -- a plain prefetch thread:
  ``for i: q.put(source[i])`` into ``queue.Queue(depth)``, and ``q.get()`` in
  the loop.
* **BackgroundGenerator-style** (:class:`Background`) -- the shape of
  ``prefetch_generator``'s ``BackgroundGenerator``: a daemon thread runs an
  iterator ahead into a ``Queue(max_prefetch)``, the consumer iterates.
  Written from that description (its code is not copied).
* **SimpleQueue floor** (:func:`simplequeue_run`) -- the physical floor of
  a bounded thread handoff: two ``queue.SimpleQueue`` (C, no
  ``threading.Condition``, no Python in ``put`` or ``get``), one carrying the
  items and one carrying ``depth`` credits back, so the producer stays at
  most ``depth`` items ahead as with ``queue.Queue(depth)``. What is left of
  its per-item cost is the interpreter and the machine: a call into C per
  side and waking the other thread.
* **slot-pool floor** (:func:`slot_pool_run`) -- the floor of the
  *contract*, not of a queue: ``capacity`` slots allocated once, the
  producer filling a free slot with ``fetch_into`` and the consumer copying
  it out with ``np.copyto`` before giving it back, as ``copy_prefetched``
  does, with the free and the filled slot numbers passed over two C
  ``SimpleQueue``s. No model, no lock of ours, no Python beyond the loop: a
  runtime of this contract written in C could reach it, none can go below
  it. It separates what the contract costs (slots, fetch into, copy out)
  from what stepping the checked model per item costs.
* **torchdata** ``nodes.Prefetcher`` (:func:`torchdata_run`) -- only when
  ``torchdata`` is importable; otherwise the figure says so
  (``TORCHDATA_SKIP``).

The sources: :class:`Trivial` (one tiny array, nothing to read: the handoff
alone) and :class:`Sleepy` (a GIL-free sleep per item that records how long
it really took, so an overshooting sleep is not counted against anyone).
"""

from __future__ import annotations

import importlib.util
import queue
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

__all__ = ["BASELINES", "SLOT_POOL", "TORCHDATA_SKIP", "Background", "Figure", "Sleepy", "Trivial", "background_run",
           "median", "one_thread_queue_loops", "python_slowdown_after", "queue_run", "simplequeue_run", "slot_pool_run",
           "slots_and_out", "torchdata_available", "torchdata_run"]

TORCHDATA_SKIP = "skipped: torchdata not installed"


@dataclass
class Figure:
    """One measured figure: ours, the baselines, and the ratio to the main baseline."""

    #: Which figure ("handoff", "overlap", ...).
    figure: str
    #: What was varied (depth, work times, sizes).
    params: dict
    #: Unit of ``ours`` and the baselines.
    unit: str
    #: The Prefetcher's value (median over repeats).
    ours: float
    #: Name of the baseline the ratio is taken against.
    baseline: str
    #: Every baseline's value (a string when it was skipped).
    baselines: dict
    #: ``ours / baselines[baseline]`` (for efficiencies and bandwidths, higher is better).
    ratio: float
    #: The target, as text ("ratio <= 1.5"), or "" when there is none.
    target: str = ""
    #: Whether the target holds (None when there is none).
    met: bool | None = None
    #: Anything else measured alongside (CPU time, trajectories, raw repeats).
    extra: dict = field(default_factory=dict)


def median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def python_slowdown_after(before: Callable[[int], Any], rounds: int) -> float:
    """How much slower a fixed bit of Python runs right after ``before(i)`` than with nothing before it.

    ``before`` is what a prefetcher's per-batch Python follows in a loop (a
    large copy, which evicts the interpreter's working set from the caches;
    the consumer's GIL-free work, which idles the vCPU). Median of
    ``rounds`` timings each way, one thread, no prefetcher involved.
    """
    def work() -> int:
        d: dict[int, int] = {}
        s = 0
        for i in range(40):
            d[i] = i
            s += d[i]
        return s

    def timed(first: bool) -> float:
        ts = []
        for i in range(rounds):
            if first:
                before(i)
            t0 = time.perf_counter()
            work()
            ts.append(time.perf_counter() - t0)
        return median(ts)

    timed(True)
    return timed(True) / timed(False)


# --------------------------------------------------------------------------
# Baselines (written for this bench)
# --------------------------------------------------------------------------

_END = object()


def queue_run(produce: Callable[[int], Any], n: int, depth: int, consume: Callable[[Any], None]) -> None:
    """The plain baseline: one producer thread putting ``produce(i)`` into Queue(depth)."""
    q: queue.Queue = queue.Queue(depth)

    def producer() -> None:
        for i in range(n):
            q.put(produce(i))
        q.put(_END)

    th = threading.Thread(target=producer, daemon=True)
    th.start()
    get = q.get
    while True:
        item = get()
        if item is _END:
            break
        consume(item)
    th.join()


def simplequeue_run(produce: Callable[[int], Any], n: int, depth: int, consume: Callable[[Any], None]) -> None:
    """The floor: items one way and ``depth`` credits the other, over two C ``SimpleQueue``s."""
    items: queue.SimpleQueue = queue.SimpleQueue()
    credits: queue.SimpleQueue = queue.SimpleQueue()
    for _ in range(depth):
        credits.put(None)

    def producer() -> None:
        take, put = credits.get, items.put
        for i in range(n):
            item = produce(i)
            take()
            put(item)
        put(_END)

    th = threading.Thread(target=producer, daemon=True)
    th.start()
    get, give = items.get, credits.put
    while True:
        item = get()
        if item is _END:
            break
        give(None)
        consume(item)
    th.join()


#: The figures' name for :func:`slot_pool_run`, beside the baselines.
SLOT_POOL = "slot-pool floor"


def slots_and_out(capacity: int, shape: tuple[int, ...], dtype: Any, pool: list[np.ndarray] | None,
                  out: np.ndarray | None) -> tuple[list[np.ndarray], np.ndarray]:
    """The slots and the ``out`` array a run copies through: new ones, or the given ones checked (a pool of
    ``capacity`` arrays of the batch's shape and dtype)."""
    if pool is None:
        pool = [np.empty(shape, dtype) for _ in range(capacity)]
    if len(pool) != capacity or any(a.shape != tuple(shape) or a.dtype != dtype for a in pool):
        raise ValueError(f"pool: {capacity} arrays of shape {shape} and dtype {dtype} expected")
    return pool, np.empty(shape, dtype) if out is None else out


def slot_pool_run(fetch_into: Callable[[int, np.ndarray], Any], n: int, capacity: int, shape: tuple[int, ...],
                  dtype: Any, consume: Callable[[np.ndarray], None], pool: list[np.ndarray] | None = None,
                  out: np.ndarray | None = None) -> None:
    """The contract's floor: ``capacity`` slots, filled in place and copied out, free and filled slot
    numbers over two C ``SimpleQueue``s. ``fetch_into(i, slot)`` fills a slot with item ``i`` on the
    producer thread; ``consume(out)`` sees each item copied into one ``out`` array, after its slot went
    back (as ``copy_prefetched`` gives a slot back before returning). ``pool`` and ``out`` as in
    ``bare_run``."""
    pool, out = slots_and_out(capacity, shape, dtype, pool, out)
    free: queue.SimpleQueue = queue.SimpleQueue()
    filled: queue.SimpleQueue = queue.SimpleQueue()
    for k in range(capacity):
        free.put(k)
    failure: list[BaseException] = []

    def producer() -> None:
        take, put = free.get, filled.put
        try:
            for i in range(n):
                if (k := take()) < 0:
                    return  # the consumer is gone
                fetch_into(i, pool[k])
                put(k)
        except BaseException as e:  # noqa: BLE001 - raised on the consumer's side
            failure.append(e)
        put(-1)

    th = threading.Thread(target=producer, name="slot-pool floor producer", daemon=True)
    th.start()
    get, give, copyto = filled.get, free.put, np.copyto
    try:
        while (k := get()) >= 0:
            copyto(out, pool[k], casting="no")
            give(k)
            consume(out)
    except BaseException:
        free.put(-1)  # let a producer waiting for a free slot go
        raise
    finally:
        th.join()
    if failure:
        raise failure[0]


def one_thread_queue_loops(items: int, depth: int) -> dict[str, Callable[[], None]]:
    """The queues' own cost with no thread handoff: ``items`` times, in one thread, queue.Queue(depth)'s
    put + get, and the SimpleQueue floor's credit taken, item put and got, credit given back."""
    q: queue.Queue = queue.Queue(depth)
    forward: queue.SimpleQueue = queue.SimpleQueue()
    back: queue.SimpleQueue = queue.SimpleQueue()
    back.put(None)

    def queue_put_get() -> None:
        put, get = q.put, q.get
        for i in range(items):
            put(i)
            get()

    def floor() -> None:
        put, get, give, take = forward.put, forward.get, back.put, back.get
        for i in range(items):
            take()
            put(i)
            get()
            give(None)

    return {"queue.Queue put + get": queue_put_get, "SimpleQueue floor": floor}


class Background:
    """BackgroundGenerator-style: a daemon thread runs ``iterable`` ahead into Queue(max_prefetch)."""

    def __init__(self, iterable: Any, max_prefetch: int):
        self._queue: queue.Queue = queue.Queue(max_prefetch)
        self._it = iter(iterable)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for item in self._it:
            self._queue.put(item)
        self._queue.put(_END)

    def __iter__(self) -> "Background":
        return self

    def __next__(self) -> Any:
        item = self._queue.get()
        if item is _END:
            raise StopIteration
        return item


def background_run(produce: Callable[[int], Any], n: int, depth: int, consume: Callable[[Any], None]) -> None:
    for item in Background((produce(i) for i in range(n)), depth):
        consume(item)


def torchdata_run(produce: Callable[[int], Any], n: int, depth: int, consume: Callable[[Any], None]) -> None:
    from torchdata.nodes import IterableWrapper, Loader
    from torchdata.nodes import Prefetcher as TDPrefetcher

    node = TDPrefetcher(IterableWrapper(produce(i) for i in range(n)), prefetch_factor=depth)
    for item in Loader(node):
        consume(item)


def torchdata_available() -> bool:
    return importlib.util.find_spec("torchdata") is not None


BASELINES: dict[str, Callable] = {"queue.Queue": queue_run, "BackgroundGenerator-style": background_run,
                                  "SimpleQueue floor": simplequeue_run}


# --------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------


class Trivial:
    """n copies of one tiny array; ``fetch_into`` leaves the slot as it is (nothing to read)."""

    def __init__(self, n: int, shape: tuple[int, ...] = (4,), dtype: Any = np.float32):
        self.n = n
        self.item = np.zeros(shape, dtype)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        return self.item

    def fetch_into(self, i: int, out: np.ndarray) -> None:
        pass


class Sleepy:
    """A source whose fetch of item i sleeps ``times[i]`` seconds (GIL-free) and records how long it took."""

    def __init__(self, times: list[float], shape: tuple[int, ...] = (16,)):
        self.times = times
        self.item = np.zeros(shape, np.float32)
        self.work = 0.0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.times)

    def _sleep(self, i: int) -> None:
        t0 = time.perf_counter()
        time.sleep(self.times[i])
        dt = time.perf_counter() - t0
        with self._lock:
            self.work += dt

    def __getitem__(self, i: int) -> np.ndarray:
        self._sleep(i)
        return self.item

    def fetch_into(self, i: int, out: np.ndarray) -> None:
        self._sleep(i)

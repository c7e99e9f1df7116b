"""Where the time went: the counters the threads update, and the frozen snapshot users read.

The counters are plain attributes updated without a lock: each is written by
one thread (a worker its own entry of the per-worker lists, the consumer the
rest), and a snapshot taken while they change is a snapshot, not a promise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["Counters", "PrefetchStats"]

#: A consumer that waits for more than this fraction of the elapsed time is
#: starved: the source is the bottleneck (see PrefetchStats.bottleneck).
_STARVED = 0.1


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
    #: Seconds the workers spent waiting for a ``thread_safe=False`` source's lock (another worker was
    #: inside the source), summed over workers: neither fetching nor blocked on a full buffer.
    worker_source_lock_seconds: float = 0.0

    def summary(self) -> str:
        """A few human-readable lines (also what ``str(stats)`` and ``print(stats)`` show)."""
        return (f"{self.batches} batches in {self.elapsed_seconds:.3f} s ({self.batches_per_second:.1f}/s); "
                f"consumer waited {self.consumer_wait_seconds:.3f} s ({100 * self.consumer_wait_fraction:.1f}%)\n"
                f"workers: {self.workers}, fetching {self.worker_fetch_seconds:.3f} s, blocked on a full buffer "
                f"{self.worker_blocked_seconds:.3f} s{self._source_lock()}; prefetch efficiency "
                f"{100 * self.prefetch_efficiency:.1f}%\n"
                f"buffer: capacity {self.capacity}{self._tuned()}, occupancy mean {self.mean_occupancy:.2f} max "
                f"{self.max_occupancy}; bottleneck: {self.bottleneck}")

    def __str__(self) -> str:
        return self.summary()

    def _source_lock(self) -> str:
        if not self.worker_source_lock_seconds:
            return ""
        return f", waiting for the source's lock {self.worker_source_lock_seconds:.3f} s"

    def _tuned(self) -> str:
        if not self.capacity_changes:
            return ""
        return f" (autotuned, {self.capacity_changes} changes, pool of {self.max_capacity})"


class Counters:
    """The running totals behind :class:`PrefetchStats`."""

    __slots__ = ("t0", "t_end", "fetch_seconds", "blocked_seconds", "lock_seconds", "wait_seconds", "delivered",
                 "occupancy_sum", "occupancy_samples", "occupancy_max")

    def __init__(self, workers: int):
        self.t0 = time.perf_counter()
        self.t_end: float | None = None           # frozen at close
        self.fetch_seconds = [0.0] * workers      # per worker: inside the source
        self.blocked_seconds = [0.0] * workers    # per worker: waiting for a free slot
        self.lock_seconds = [0.0] * workers       # per worker: waiting for a thread_safe=False source's lock
        self.wait_seconds = 0.0                   # the consumer, waiting for a batch
        self.delivered = 0                        # batches handed out
        self.occupancy_sum = 0                    # ready batches seen at each take, summed
        self.occupancy_samples = 0
        self.occupancy_max = 0

    def sample_occupancy(self, ready: int) -> None:
        self.occupancy_sum += ready
        self.occupancy_samples += 1
        if ready > self.occupancy_max:
            self.occupancy_max = ready

    def snapshot(self, capacity: int, workers: int, max_capacity: int, capacity_changes: int,
                 delivered: int | None = None) -> PrefetchStats:
        end = self.t_end if self.t_end is not None else time.perf_counter()
        elapsed = max(end - self.t0, 1e-12)
        fetch = sum(self.fetch_seconds)
        wait = self.wait_seconds
        n = self.delivered if delivered is None else delivered
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
            capacity=capacity,
            workers=workers,
            bottleneck="none" if n == 0 else ("source" if wait / elapsed > _STARVED else "consumer"),
            max_capacity=max_capacity,
            capacity_changes=capacity_changes,
            worker_source_lock_seconds=sum(self.lock_seconds),
        )

"""Is prediction paying for itself? The on-demand prefetcher's counters and their frozen snapshot.

The founding question of predictive prefetching is whether it is a boon or
a waste of bandwidth and memory on wrong guesses. The snapshot answers it
with four figures and a one-line verdict:

* **accuracy**: of the speculative fetches that are settled (used, or
  never to be used: evicted, cancelled in flight, discarded at close), the
  fraction a request used;
* **coverage**: of the requests, the fraction served by a speculative fetch
  (ready, or in flight when asked for) instead of the caller's own fetch;
* **wasted bytes**: settled-but-unused speculative fetches times the batch size;
* **time saved**: for each request served by speculation, the mean fetch
  time, less what the caller still waited for a fetch in flight (a late hit).

The counters are plain attributes updated without a lock: each is written by
one thread (a worker its own entries of the per-worker lists, the consumer
the rest), and a snapshot taken while they change is a snapshot, not a
promise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["OnDemandCounters", "OnDemandStats", "verdict"]

#: Below this accuracy, speculation wastes more fetches than it uses.
PAYING_ACCURACY = 0.5
#: Below this coverage, speculation hides too few requests to matter.
PAYING_COVERAGE = 0.25


@dataclass(frozen=True)
class OnDemandStats:
    """What prediction did for this workload. ``str(stats)`` is :meth:`summary`, one line."""

    #: The predictor (``none``, ``sequential``, ``stride``, ``markov``, ``adaptive``).
    predictor: str
    #: Requests answered (batches and errors).
    requests: int
    #: Requests whose batch (or its speculative fetch's error) was ready when asked for (no wait for a
    #: fetch). ``hits + late_hits + misses == requests``.
    hits: int
    #: Requests whose batch a worker was already fetching: the caller waited for the rest of it.
    late_hits: int
    #: Requests the caller fetched itself, on its own thread (a demand miss).
    misses: int
    #: Requests answered with the source's exception.
    errors: int
    #: Fetches the workers made on speculation.
    speculative_fetches: int
    #: Speculative fetches a request used.
    used: int
    #: Speculative fetches no request can use any more (evicted, cancelled in flight, discarded at close).
    wasted: int
    #: ``used / (used + wasted)``: 1.0 means every settled speculation was used (0 when none settled).
    accuracy: float
    #: ``(hits + late_hits) / requests``: the fraction of requests prediction served.
    coverage: float
    #: ``wasted`` times the bytes of one batch.
    wasted_bytes: int
    #: Seconds the caller spent inside its calls, in total (its own demand fetches included).
    wait_seconds: float
    #: Mean seconds of one fetch from the source (speculative and demand alike).
    mean_fetch_seconds: float
    #: Estimated seconds prediction took off the caller's waits: per request served by
    #: speculation, the mean fetch time less its wait for a fetch in flight (never below zero).
    time_saved_seconds: float
    #: Slots in the pool, and the worker threads.
    capacity: int
    workers: int

    @property
    def verdict(self) -> str:
        """``paying``, ``partly``, ``wasting``, ``idle`` (no speculation yet) or ``off`` (no predictor)."""
        return verdict(self)

    def summary(self) -> str:
        """One line: whether prediction pays for itself on this workload, and the figures that say so."""
        head = {"off": "prediction off", "idle": "prediction idle: nothing speculated",
                "paying": "prediction is paying for itself", "partly": "prediction pays a little",
                "wasting": "prediction is wasting bandwidth"}[self.verdict]
        return (f"{head} ({self.predictor}): {self.requests} requests, coverage {100 * self.coverage:.0f}% "
                f"({self.hits} ready + {self.late_hits} in flight, {self.misses} fetched on demand), accuracy "
                f"{100 * self.accuracy:.0f}% ({self.used} used, {self.wasted} wasted = {_bytes(self.wasted_bytes)}), "
                f"saved {self.time_saved_seconds:.3f} s")

    def __str__(self) -> str:
        return self.summary()


def verdict(s: OnDemandStats) -> str:
    if s.predictor == "none":
        return "off"
    if s.used + s.wasted == 0:
        return "idle"
    if s.accuracy < PAYING_ACCURACY:
        return "wasting"
    if s.coverage >= PAYING_COVERAGE and s.time_saved_seconds > 0:
        return "paying"
    return "partly"


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


class OnDemandCounters:
    """The running totals behind :class:`OnDemandStats`."""

    __slots__ = ("t0", "t_end", "requests", "hits", "late_hits", "misses", "errors", "used", "served_wait",
                 "wait_seconds", "demand_fetches", "demand_seconds", "spec_fetches", "spec_seconds")

    def __init__(self, workers: int):
        self.t0 = time.perf_counter()
        self.t_end: float | None = None           # frozen at close
        self.requests = self.hits = self.late_hits = self.misses = self.errors = self.used = 0
        self.served_wait = 0.0                    # waits of the requests speculation served
        self.wait_seconds = 0.0                   # every request's time inside its call
        self.demand_fetches = 0
        self.demand_seconds = 0.0
        self.spec_fetches = [0] * workers         # per worker
        self.spec_seconds = [0.0] * workers

    def snapshot(self, predictor: str, pending: int, closed: bool, batch_bytes: int, capacity: int) -> OnDemandStats:
        """``pending``: speculative fetches still usable (ready, failed, or in flight and not waited for)."""
        spec = sum(self.spec_fetches)
        fetches = spec + self.demand_fetches
        mean = (sum(self.spec_seconds) + self.demand_seconds) / fetches if fetches else 0.0
        wasted = max(0, spec - self.used - (0 if closed else pending))
        settled = self.used + wasted
        served = self.hits + self.late_hits
        return OnDemandStats(
            predictor=predictor, requests=self.requests, hits=self.hits, late_hits=self.late_hits,
            misses=self.misses, errors=self.errors, speculative_fetches=spec, used=self.used, wasted=wasted,
            accuracy=self.used / settled if settled else 0.0,
            coverage=served / self.requests if self.requests else 0.0,
            wasted_bytes=wasted * batch_bytes, wait_seconds=self.wait_seconds, mean_fetch_seconds=mean,
            time_saved_seconds=max(0.0, served * mean - self.served_wait),
            capacity=capacity, workers=len(self.spec_fetches))

"""Policies: when to take which step the checker has already proved safe at every point.

The model gives the consumer a choice of run lengths ("take up to 1" ..
"take up to r") and the tuner a choice of "grow", "shrink" or "stop". The
checker explores every choice at every moment, so nothing here can break the
protocol; these classes only decide which choice is worth taking.

* :class:`RunPolicy`: the consumer takes as many ready batches in one step as
  its caller uses in ``RUN_BUDGET`` at its own pace (a running average of the
  time from a batch in the caller's hands to its next call). A caller slower
  than that takes one batch per step, exactly as without runs.
* :class:`Autotuner`: grow the target when the consumer had to wait while
  the target held a worker back (more workers waiting to claim than the
  target leaves free slots for); shrink it after a long stretch of takes
  that each found two or more batches ready.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from ..models import _protocol as P

__all__ = ["DEFAULT_AUTOTUNE_MAX", "MAX_RUN", "Autotuner", "RunPolicy"]

#: The longest run of ready batches the consumer may take in one model step. Runs
#: amortize the kernel's per-step cost over cheap batches; the model checks every
#: run length up to this (tests/test_prefetcher_runs.py).
MAX_RUN = 16

#: How much of the caller's time one run may cover: the consumer takes as many
#: ready batches as its caller uses in this long. While it holds them, the
#: workers cannot refill their slots, so it is kept near the cost of one thread
#: handoff on a typical machine (tens of microseconds), where bundling pays; a
#: caller that takes longer than this per batch takes one per step, exactly as
#: without runs.
RUN_BUDGET = 100e-6

#: Weight of the newest sample in the running average that chooses run lengths.
EWMA = 0.25

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
SHRINK_WINDOW = 32
#: A consumer's wait grows the buffer when, since its last wait, the workers were blocked on a full buffer
#: for at least this fraction of their time (a fetch ahead they could have made). A source-bound pipeline
#: blocks its workers only for hand-offs, a few per cent at most.
GROW_IDLE_FRACTION = 0.1
SHRINK_WINDOW_MAX = 1024
#: How many resizes ``capacity_history`` keeps: the latest (a few MB). An autotune that settles oscillates by one
#: slot at most every SHRINK_WINDOW_MAX takes, so a months-long run would otherwise grow the log without bound.
RESIZE_RECORDS = 100_000


class RunPolicy:
    """The consumer's run length, from its caller's pace."""

    __slots__ = ("takes", "stream_ends", "ewma", "last_call")

    def __init__(self, run: int):
        #: The model's take branches: "take up to 1" .. "take up to r", or just "take" when r = 1.
        self.takes: tuple[str, ...] = (P.TAKE_ONE,) if run == 1 else tuple(P.take_up_to(r) for r in range(1, run + 1))
        #: The take's other outcomes, all of which end the stream.
        self.stream_ends = (P.ERROR, P.END, P.CLOSED)
        self.ewma: float | None = None      # seconds from a batch in the caller's hands to its next call
        self.last_call: float | None = None  # when the last batch was handed out

    def observe_call(self) -> None:
        """A call arrived: fold the caller's time since the last hand-out into the average."""
        last = self.last_call
        if last is not None:
            per = time.perf_counter() - last
            ewma = self.ewma
            self.ewma = per if ewma is None else ewma + EWMA * (per - ewma)

    def branches(self, single: bool) -> tuple[str, ...]:
        """What a take asks for: a run of the chosen length (one with ``single``), or any stream end."""
        takes = self.takes
        per = self.ewma
        if single or per is None or len(takes) == 1:
            return (takes[0],) + self.stream_ends
        r = len(takes) if per <= 0 else int(RUN_BUDGET / per)
        return (takes[min(max(r, 1), len(takes)) - 1],) + self.stream_ends


class Autotuner:
    """Drives the model's tuner thread from the consumer's takes.

    * **grow** when the batch the consumer asked for was not ready (it had to
      wait) while the target held a worker back: more workers were waiting to
      claim a slot than the target left free, so a worker was idle because
      of the target, not busy fetching. Or when, since the consumer last
      waited, the workers spent at least :data:`GROW_IDLE_FRACTION` of their
      time blocked on a full buffer: they were idle then, and a bigger buffer
      would have let them fetch ahead for the wait now (a bursty source
      with one worker: that worker is always mid-fetch when the consumer
      starves, so the first test alone never grew it). When the source itself
      is the bottleneck (every worker fetching all along) a bigger buffer
      cannot help, so it does not grow: unlike tf.data's AUTOTUNE, memory is
      not spent for nothing.
    * **shrink** by one after ``window`` takes in a row that each found at
      least two batches ready: the last slot was never needed. A grow that
      follows a shrink doubles the window, so the target settles instead of
      oscillating.
    """

    __slots__ = ("thread", "full", "window", "last", "log", "resizes", "since", "idle_since")

    def __init__(self, thread: int):
        self.thread = thread                 # the model's tuner thread
        self.since: float | None = None      # when the consumer last waited (None: not yet)
        self.idle_since = 0.0                # the workers' blocked seconds, summed, at that moment
        self.full = 0                        # consecutive takes that found >= 2 batches ready
        self.window = SHRINK_WINDOW          # that many in a row shrink the target by one
        self.last: str | None = None         # the last resize
        self.log: deque[tuple[float, int, int]] = deque(maxlen=RESIZE_RECORDS)  # (seconds, delivered, capacity)
        self.resizes = 0                     # every resize, counted (the log keeps the latest)

    @staticmethod
    def _held_back(core: Any, before: tuple, target: int) -> bool:
        """Whether the target holds a worker back in ``before``: more workers wait to claim (with items left
        to claim) than the target leaves slots for.

        Counting the slots in use is not enough: a fast caller's release frees
        a slot and wakes a worker, and its next take comes before that worker
        has claimed it, so its snapshot never shows the target full (with three
        workers and a target of one, two of them idle, it never grew). A
        worker at its claim step is either about to take a free slot or held
        back; more of them than free room means some are held back.
        """
        slots = before[core.i_slots]
        used = core.slots_total - slots.count(P.FREE)
        if before[core.i_consumer_pc] == P.RELEASE:  # this take gives its last run back first (one kernel call)
            used -= sum(1 for st, _ in slots if st == P.LEASED)
        claiming = sum(1 for i in core.worker_pcs if before[i] == P.CLAIM)
        left = before[core.i_length] - before[core.i_next_index]
        return min(claiming, left) > max(0, target - used)

    def _were_idle(self, core: Any) -> bool:
        """Whether the workers were blocked on a full buffer for :data:`GROW_IDLE_FRACTION` of their time since
        the consumer last waited (this wait starts the next span)."""
        now, idle = time.perf_counter(), sum(core.counts.blocked_seconds)
        since, idle_since = self.since, self.idle_since
        self.since, self.idle_since = now, idle
        if since is None:
            return False  # the first wait: the pipeline filling
        span = (now - since) * len(core.counts.blocked_seconds)
        return span > 0 and idle - idle_since >= GROW_IDLE_FRACTION * span

    def after_take(self, core: Any, before: tuple, ready: int) -> None:
        """Grow or shrink after a take whose state before was ``before`` with ``ready`` batches ready."""
        rt = core.rt
        target = before[core.i_target]
        starved = not core.machine.enabled(before, core.consumer)  # racy snapshot: a heuristic only
        if starved:
            self.full = 0
            idle = self._were_idle(core)  # (first: every wait starts the next span)
            if target < core.slots_total and (idle or self._held_back(core, before, target)):
                rt.step(self.thread, P.GROW)
                if self.last == P.SHRINK:
                    self.window = min(2 * self.window, SHRINK_WINDOW_MAX)
                self.last = P.GROW
                self.resizes += 1
                self.log.append((time.perf_counter() - core.counts.t0, core.counts.delivered, target + 1))
            return
        if ready >= 2:
            self.full += 1
            if self.full >= self.window and target > 1:
                rt.step(self.thread, P.SHRINK)
                self.full = 0
                self.last = P.SHRINK
                self.resizes += 1
                self.log.append((time.perf_counter() - core.counts.t0, core.counts.delivered, target - 1))
        else:
            self.full = 0

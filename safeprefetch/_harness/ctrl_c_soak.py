"""The Prefetcher under real Ctrl-C: a kernel timer fires SIGINT at random moments of a consumer loop.

What is checked
---------------
The injection sweep (``injection_sweep.py``) stops at every eval-breaker
point of one call and injects there. The soak (:func:`ctrl_c_soak`) is the
same contract under real signals: a kernel interval timer (``setitimer``)
fires SIGALRM at a random moment, and its handler hands the interpreter a
SIGINT on the spot, so the Ctrl-C lands wherever the main thread happens to
be -- inside a call, between calls, in the consumer's own code.

Each run drains a stream through a random mix of ``get``,
``copy_prefetched``, ``lease``, ``next`` and ``for``, doing a little work
between calls, and catches every ``KeyboardInterrupt`` and carries on. At the
end no lock may be held, no batch lost or duplicated, the stream must have
finished (no hang, no lost wakeup), close must succeed and every thread the
prefetcher started must be gone.

Why the consumer loop looks the way it does
-------------------------------------------
The loop (:meth:`_Run.consume`) must account for every batch that left the
prefetcher, whatever point the SIGINT lands at, so every point where CPython
can raise an asynchronous exception -- function entry, the return of a call
into C, a loop back-edge -- lies inside its ``try``: two nested loops (the
inner loop's back-edge is inside the ``try`` too), the timer armed inside the
``try`` (a timer that fires at once lands there), each batch recorded in the
same expression as the call that returns it (a Python call returns with no
interruption point before the caller's next instruction), and the ``try``,
the loop body and the handlers in one frame (where an interrupt was raised
is read from its traceback: in that frame, in a safeprefetch call, or in this
module's timer handler). The handlers arm nothing, so no signal can land
outside the ``try``. Only ``next(pf)`` has a window (``next`` is C, and the
check after it can drop the batch it returned); it is counted apart.

Everything the loop runs while the timer may fire lives in this module:
:func:`_landed_inside` tells a safeprefetch call from this harness by file.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable

import numpy as np

from .._prefetcher.lifecycle import thread_count
from .._prefetcher.api import Prefetcher
from .._prefetcher.errors import PrefetchTimeout
from .._runtime import inject as _inject
from .injection_sweep import SHAPE, _lock_free

__all__ = ["SoakResult", "ctrl_c_soak"]


@dataclass(frozen=True)
class SoakResult:
    """The Ctrl-C soak's figures."""

    #: Runs (one prefetcher, one stream, one Ctrl-C each; several with ``storm``).
    runs: int
    #: SIGINTs delivered by the kernel timer.
    interrupts: int
    #: Of those, how many surfaced as a KeyboardInterrupt raised inside a safeprefetch call.
    inside_calls: int
    #: ... how many landed in the consumer's own code, between calls.
    between_calls: int
    #: ... and how many landed right after ``next(pf)`` returned, before the caller stored its result
    #: (``next`` is a C function: the check after it can drop the value; excluded from ``lost``).
    after_return: int
    #: Runs that did not finish (a hang, caught by the per-run timeout).
    hangs: int
    #: Runs after which a lock was still held.
    leaked_locks: int
    #: Batches lost or duplicated, over all runs.
    lost: int
    duplicated: int
    #: Runs with any other contract violation (threads left, a bad close).
    other: int
    seconds: float
    problems: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        return not (self.hangs or self.leaked_locks or self.lost or self.duplicated or self.other)


def _raise_sigint_here(signum: int, frame: FrameType | None) -> None:
    # The kernel timer fired: hand the interpreter a SIGINT at this very point (signal.raise_signal
    # runs the SIGINT handler at the next eval-breaker check, right here).
    signal.raise_signal(signal.SIGINT)


def ctrl_c_soak(runs: int = 500, seed: int = 0, storm: int = 1, n: int = 40,
                progress: Callable[[str], None] | None = None) -> SoakResult:
    """Ctrl-C from a kernel interval timer at a random moment of each run; the stream must survive intact.

    Each run drains ``n`` batches through a random mix of ``get``,
    ``copy_prefetched``, ``lease`` and iteration, doing a little work between
    calls; ``storm`` SIGINTs per run arrive at random moments of it. Every
    KeyboardInterrupt is caught by the consumer loop, which carries on.
    Main thread only (signals are delivered there).
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("the Ctrl-C soak runs on the main thread (signals are delivered there)")
    rng = random.Random(seed)
    with _inject.python_sigint():  # a Ctrl-C to raise, even in a process started with SIGINT ignored
        return _soak(runs, rng, storm, n, progress)


def _soak(runs: int, rng: random.Random, storm: int, n: int, progress: Callable[[str], None] | None) -> SoakResult:
    t0 = time.perf_counter()
    interrupts = inside = between = after = hangs = leaked = lost = dup = other = 0
    problems: list[str] = []
    old_alrm = signal.signal(signal.SIGALRM, _raise_sigint_here)
    durations: dict = {}
    try:
        for r in range(runs):
            res = _soak_run(rng, storm, n, durations)
            interrupts += res["interrupts"]
            inside += res["inside"]
            between += res["between"]
            after += res["after_return"]
            hangs += res["hang"]
            leaked += res["leaked"]
            lost += res["lost"]
            dup += res["dup"]
            other += bool(res["other"])
            problems.extend(f"run {r}: {p}" for p in res["problems"])  # no inlined comprehension: see consume
            if progress is None or (r + 1) % 50:
                continue  # not a trailing ``if`` whose false branch is the back-edge: see consume
            progress(f"ctrl-c soak: {r + 1}/{runs} runs, {interrupts} interrupts")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_alrm)
    return SoakResult(runs, interrupts, inside, between, after, hangs, leaked, lost, dup, other,
                      time.perf_counter() - t0, tuple(problems[:50]))


def _soak_run(rng: random.Random, storm: int, n: int, durations: dict) -> dict[str, Any]:
    """One run: a random configuration, the consumer loop under the timer's SIGINTs, the checks."""
    run = _Run(rng, storm, n, durations)
    run.consume()
    run.finish()
    return run.res


class _Source:
    """Map-style: item i is ``np.full(SHAPE, i)``, after ``fetch`` seconds of sleep when ``fetch`` is set."""

    def __init__(self, n: int, fetch: float):
        self.n, self.fetch = n, fetch

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        if self.fetch:
            time.sleep(self.fetch)
        return np.full(SHAPE, i, np.float32)


class _Run:
    """One run of the soak: its configuration, what reached the consumer, and what was counted (``res``)."""

    def __init__(self, rng: random.Random, storm: int, n: int, durations: dict):
        """The configuration: workers, capacity, the consumer's work, the source's latency; when to fire."""
        self.baseline = thread_count()
        self.rng, self.storm, self.n, self.durations = rng, storm, n, durations
        workers = rng.choice((1, 2, 3))
        capacity = rng.choice((1, 2, 4))
        self.work = work = rng.choice((0.0, 0.00005, 0.0002))
        fetch = rng.choice((0.0, 0.0001))
        self.config = (workers, capacity, work, fetch)
        self.res: dict[str, Any] = {"interrupts": 0, "inside": 0, "between": 0, "after_return": 0, "hang": 0,
                                    "leaked": 0, "lost": 0, "dup": 0, "other": [], "problems": []}
        self.pf = Prefetcher(_Source(n, fetch), capacity=capacity, workers=workers, close_timeout=5.0)
        self.seen: list[Any] = []  # what reached the consumer: arrays, or ints read from ``out``
        self.out = np.empty(SHAPE, np.float32)
        # When to fire: uniformly within this configuration's measured stream duration (so most
        # interrupts land mid-stream); the first run of a configuration uses an estimate.
        expected_seconds = durations.get(self.config, n * (work + fetch / workers + 2e-5))
        self.fire_at = sorted(rng.uniform(0, expected_seconds) for _ in range(storm))
        self.fired = 0

    def consume(self) -> None:
        """Drain the stream under the timer's SIGINTs, catching each; then let a last pending one land.

        The ``try``, the loop body and the handlers share this frame, and the body calls nothing
        between a call that returns a batch and the code that records it (see the module's essay).

        The statement before the inner ``while`` is there for CPython 3.11: it looks up the handler of an
        exception raised at a loop's back-edge (a SIGINT at ``continue``) at the instruction *before*
        the jump's target, so a loop whose head is the try's first instruction lets that exception
        escape the try (seen: a KeyboardInterrupt raised at the ``continue`` below killed the test in 1
        run of 6, and in 2 of 30 before this session's changes). CPython 3.13 has its own gap: the
        back-edge that closes a ``while cond:`` loop's bottom test is in no exception-table entry, so
        an interrupt there escaped the try too (in all 8 seeds tried of the kernel-timer test on 3.13.0; none after); the
        loops here are ``while True:`` with the test in an ``if``, and a loop body does not end in an
        ``if`` (the same gap: its false branch is the back-edge). ``tests/test_backedges.py`` checks
        this function on the running interpreter (``safeprefetch.lowlevel.escaping_back_edges``).

        Why long: the ``try``, the loop body and the handlers must share one frame (a call out of it
        would add points outside the ``try``), so the body cannot be split into helpers.
        """
        rng, pf, seen, out, work, res = self.rng, self.pf, self.seen, self.out, self.work, self.res
        start = time.monotonic()
        arm: float | None = self.fire_at[0]  # armed inside the try: a timer firing at once lands there
        deadline = start + 20
        step = None
        pos = recorded = -1
        done = False
        # Two loops, so that every point where a SIGINT can land is inside the ``try``: the inner
        # loop's back-edge too. The handler itself arms nothing, so no signal can land outside.
        while True:
            try:
                off_the_try_start = None  # the inner loop's head must not open the try: see the docstring
                while True:  # not ``while not done:``, nor ``while cond:`` below: see the docstring
                    if done:
                        break
                    if arm is not None:
                        delay, arm = arm, None
                        signal.setitimer(signal.ITIMER_REAL, max(delay - (time.monotonic() - start), 1e-6))
                    if time.monotonic() > deadline:
                        res["hang"] = 1
                        res["problems"].append("the stream did not finish in 20 s")
                        break
                    # A call into a Python function returns with no interruption point before the caller's
                    # next instruction, so ``seen.append(pf.get())`` records every batch that left get().
                    # ``next(pf)`` is different: ``next`` is C, and the check after it can drop the batch it
                    # returned; ``step`` marks that window.
                    try:  # the end of the stream is handled here, inside the outer try
                        api = rng.random()
                        if api < 0.25:
                            seen.append(pf.get(timeout=10))
                        elif api < 0.45:
                            recorded, step = len(seen), "copy"
                            if not pf.copy_prefetched(out, timeout=10):
                                done = True
                            else:
                                seen.append(int(out[0]))
                        elif api < 0.65:
                            recorded = len(seen)  # before the lease: ``len`` is a C call, an interruption point
                            lease = pf.lease(timeout=10)  # a Python call: nothing can land before ``lease`` is bound
                            # Nothing can land from here to the ``with`` either: a slot read and stores (a call
                            # here, as ``len`` was, let a Ctrl-C leave the lease bound and unreleased: 3.12).
                            pos, step = lease.position, "lease"
                            with lease as view:
                                del lease  # as in ``with pf.lease() as view``: only the with holds the Lease
                                seen.append(int(view[0]))
                        elif api < 0.8:
                            step = "next"
                            seen.append(next(pf))
                        else:
                            for b in pf:  # FOR_ITER stores the batch with no interruption point
                                seen.append(b)
                                if rng.random() >= 0.2:
                                    continue  # not a trailing ``if ...: break``: see the docstring
                                break
                            else:
                                done = True
                    except StopIteration:
                        done = True
                        continue
                    step = None
                    if work:
                        t = time.perf_counter() + work
                        while True:  # the consumer's own work (a Ctrl-C may land here too)
                            if time.perf_counter() >= t:
                                break
                signal.setitimer(signal.ITIMER_REAL, 0)
                break
            except KeyboardInterrupt as e:
                self._account(e, step, pos, recorded)
                step = None
                if self.fired < self.storm:
                    arm = self.fire_at[self.fired]
            except PrefetchTimeout:
                res["hang"] = 1
                res["problems"].append("a call timed out: a lost wakeup or a hang")
                signal.setitimer(signal.ITIMER_REAL, 0)
                break
        took = time.monotonic() - start
        config, durations = self.config, self.durations
        durations[config] = took if config not in durations else 0.5 * (durations[config] + took)
        # A SIGINT the timer raised after the loop's last check may still be pending: let it land here.
        try:
            time.sleep(0)
        except KeyboardInterrupt:
            res["interrupts"] += 1
            res["between"] += 1

    def _account(self, e: KeyboardInterrupt, step: str | None, pos: int, recorded: int) -> None:
        """Count one KeyboardInterrupt by where it landed; record the batch it kept the loop from recording."""
        res, seen = self.res, self.seen
        self.fired += 1
        res["interrupts"] += 1
        if _landed_inside(e):
            res["inside"] += 1  # a call was interrupted: its batch comes with the next call
        elif step == "copy" and _raised_here(e):
            # In the consumer's own code, after copy_prefetched returned True (a Python call
            # returns with no check) and before it recorded the batch: the batch is in ``out``.
            res["between"] += 1
            if len(seen) == recorded:
                seen.append(int(self.out[0]))
        elif step == "lease" and _raised_here(e):
            # In the consumer's own code, inside ``with lease as view``, before it recorded the
            # batch: the batch was delivered (it is bound to ``view``); its position says which.
            res["between"] += 1
            if len(seen) == recorded:
                seen.append(pos)
        elif step == "next" and _raised_here(e):
            # next() had returned, and the check right after that C call raised before the
            # caller stored the result: the caller dropped that batch (with ``for`` there is
            # no such window).
            res["after_return"] += 1
            seen.append(None)  # position unknown: accounted below
        else:
            res["between"] += 1

    # -- the final checks (the timer is off) ------------------------------------

    def finish(self) -> None:
        """No lock held, every batch delivered once, close succeeds, every thread gone."""
        self._check_locks()
        if not self.res["hang"]:
            self._check_stream()
        res, pf = self.res, self.pf
        res["other"] += _close_problems(pf)
        deadline = time.monotonic() + 5
        while True:  # not ``while cond:`` (its back-edge escapes the try on 3.13: see consume)
            if thread_count() <= self.baseline or time.monotonic() >= deadline:
                break
            time.sleep(0.001)
        if thread_count() > self.baseline:
            res["other"].append("threads left")
        res["problems"] += res["other"]

    def _check_locks(self) -> None:
        res, core = self.res, self.pf._core
        for name in ("gate", "close_lock"):
            if not _lock_free(getattr(core, name)):
                res["leaked"] = 1
                res["problems"].append(f"{name} held after the run")
        if not _lock_free(core.rt._lock):
            res["leaked"] = 1
            res["problems"].append("kernel lock held after the run")

    def _check_stream(self) -> None:
        """Lost, duplicated and out-of-order batches; a batch ``next`` dropped on return is not lost."""
        res = self.res
        ids = [int(x[0]) if isinstance(x, np.ndarray) else x for x in self.seen]
        known = [i for i in ids if i is not None]
        dropped_by_caller = len(ids) - len(known)
        missing = sorted(set(range(self.n)) - set(known))
        res["dup"] = len(known) - len(set(known))
        res["lost"] = max(0, len(missing) - dropped_by_caller)
        if known != sorted(known):
            res["other"].append(f"out of order: {known[:12]}")
        if res["lost"] or res["dup"]:
            res["problems"].append(f"delivered {known[:12]}... ({len(known)}), missing {missing[:8]}, "
                                   f"{dropped_by_caller} dropped by the caller after return")


def _close_problems(pf: Prefetcher) -> list[str]:
    """Close, and say what went wrong (both branches return: an except body that falls through ends in
    a back-edge on 3.12, where an interrupt is caught by the same clause again)."""
    try:
        pf.close(timeout=5)
        return []
    except BaseException as e:  # noqa: BLE001 - reported
        return [f"close raised {type(e).__name__}"]


def _raised_here(e: BaseException) -> bool:
    """Whether the exception was raised in the frame that caught it (not inside a call it made).

    The timer's own handler frame (``_raise_sigint_here``), where the SIGINT handler runs, does not count.
    """
    from .._runtime import interrupts as _interrupts

    handlers = {_raise_sigint_here.__code__, _interrupts._on_sigint.__code__}
    tb = e.__traceback__
    if tb is None:
        return False
    tb = tb.tb_next
    while tb is not None:
        if tb.tb_frame.f_code not in handlers:
            return False
        tb = tb.tb_next
    return True


def _landed_inside(e: BaseException) -> bool:
    """Whether the KeyboardInterrupt was raised inside a safeprefetch call (not this harness's own frames)."""
    import os

    from .._runtime import interrupts

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the safeprefetch package
    harness = {os.path.abspath(__file__), os.path.abspath(interrupts.__file__)}  # the timer's and the wrapper's
    tb = e.__traceback__
    while tb is not None:
        f = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if f.startswith(root) and f not in harness:
            return True
        tb = tb.tb_next
    return False

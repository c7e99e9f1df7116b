"""Conformance: a live run checked against the model it ran, and a whole model run on real threads.

With ``record=True`` the runtime keeps every step it took as ``(thread,
branch, successor)``; :func:`verify_record` replays that record through the
model and checks that each step is a valid transition from the previous
state. :func:`run_live` runs every thread of a model on its own real thread
(random branches and small random delays, seeded; or a counterexample's exact
order with ``schedule=``) and reports the outcome, the schedule the threads
really took, and whether it conforms.
"""

from __future__ import annotations

import math
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .._check.result import Trace
from .._check.verdict import end_violation
from .._dsl.model import Machine, ModelError, StepViolation
from .kernel import LiveError, Runtime

__all__ = ["ConformanceReport", "LiveRunResult", "run_live", "verify_record"]


@dataclass(frozen=True)
class ConformanceReport:
    """Result of checking a live record against the model."""

    #: Steps checked.
    steps: int
    #: True when every recorded step is a valid transition of the model.
    ok: bool
    #: Index of the first step that is not, or None.
    first_mismatch: int | None = None
    #: Why it is not.
    message: str = ""


def _identical(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down: ``True`` is not the state's ``1`` (``True == 1``),
    in a tuple or in a frozenset (whose ``==`` would match ``{True}`` with ``{1}`` and ``{1.0}``)."""
    if type(a) is not type(b):
        return False
    if type(a) is tuple:
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b))
    if type(a) is frozenset:
        return len(a) == len(b) and frozenset(map(_typed, a)) == frozenset(map(_typed, b))
    return a == b or (a != a and b != b)  # NaN is NaN


def _typed(v: Any) -> Any:
    """``v`` with the type of every part beside it, so that equal means identical (a frozenset's elements)."""
    if type(v) is tuple:
        return tuple, tuple(map(_typed, v))
    if type(v) is frozenset:
        return frozenset, frozenset(map(_typed, v))
    return type(v), v


def verify_record(machine: Machine, record: Sequence[tuple[int, int, tuple]]) -> ConformanceReport:
    """Check that every recorded live step is a valid transition of the model from the previous state."""
    state = machine.init
    n = len(machine.thread_names)
    for i, (t, b, nxt) in enumerate(record):
        if type(t) is not int or not 0 <= t < n:
            return ConformanceReport(i, False, i, f"step {i}: {t!r} is not a thread of {machine.name} (0..{n - 1})")
        options = dict(machine.fire(state, t))
        if type(b) is not int or b not in options:
            return ConformanceReport(i, False, i, f"step {i}: {machine.thread_names[t]} had no branch {b} enabled")
        expected = options[b]
        if isinstance(nxt, StepViolation) or isinstance(expected, StepViolation):
            same = (isinstance(nxt, StepViolation) and isinstance(expected, StepViolation)
                    and nxt.kind == expected.kind and i == len(record) - 1)
            if not same:
                return ConformanceReport(i, False, i, f"step {i}: violation mismatch")
            return ConformanceReport(len(record), True)
        if not _identical(expected, nxt):
            return ConformanceReport(i, False, i, f"step {i}: {machine.thread_names[t]}'s recorded successor "
                                                  "differs from the model's")
        state = expected
    return ConformanceReport(len(record), True)


def _seconds(name: str, value: Any) -> None:
    """Refuse a duration that is not a number of seconds >= 0 (NaN, negative) before anything starts."""
    if value is None and name == "timeout":
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"run_live: {name} must be a number of seconds, not {value!r}")
    if not value >= 0:
        raise ValueError(f"run_live: {name} must be a number of seconds >= 0, not {value!r}")


# --------------------------------------------------------------------------
# Running a whole model live
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveRunResult:
    """The outcome of running a model on real threads."""

    #: The model's name.
    model: str
    #: "ok" when every thread finished, else the violation kind seen live.
    verdict: str
    #: Explanation and the state printout, for a violation.
    message: str
    #: Steps taken.
    steps: int
    #: Wall-clock seconds.
    seconds: float
    #: The schedule the threads actually took.
    trace: Trace
    #: Whether the recorded steps conform to the model.
    conforms: bool
    #: True when the order was forced from a trace.
    forced: bool
    #: Model threads whose OS thread was still running when the run returned (inside an action that did
    #: not return when the run timed out).
    left_running: tuple[str, ...] = ()


#: Seconds a stopped live run waits to take the kernel lock and fail the machine, before it reports the
#: threads left running without it.
STOP_WAIT = 2.0


def run_live(machine: Machine, *, actions: Mapping[str, Callable] | None = None, schedule: Trace | None = None,
             seed: int | None = None, jitter: float = 0.0005, timeout: float | None = 10.0) -> LiveRunResult:
    """Run every thread of ``machine`` on its own real thread, until all finish or the machine fails.

    ``timeout``: seconds for the whole run (None or inf: no limit), then ``verdict="timeout"``;
    ``jitter``: up to this many seconds of random delay before each step."""
    _seconds("timeout", timeout)
    _seconds("jitter", jitter)
    try:
        rt = Runtime(machine, actions, record=True, schedule=schedule)
    except ModelError as e:  # the first state's invariant check met a model bug: the verdict a step's would give
        return LiveRunResult(machine.name, "error", str(LiveError("error", f"{type(e).__name__}: {e}")), 0, 0.0,
                             Trace(()), True, schedule is not None)
    rng_master = random.Random(seed)
    errors: list[BaseException] = []

    def body(t: int, rng: random.Random) -> None:
        try:
            rt.run_thread(t, rng=rng, jitter=jitter if schedule is None else 0.0)
        except LiveError as e:
            errors.append(e)
        except BaseException as e:  # noqa: BLE001 - reported, not swallowed
            errors.append(e)
            rt.fail(LiveError("error", f"{type(e).__name__}: {e}"))

    t0 = time.perf_counter()
    stopped: LiveError | None = None
    threads = [threading.Thread(target=body, args=(t, random.Random(rng_master.random())),
                                name=f"safeprefetch-{machine.thread_names[t]}", daemon=True)
               for t in range(len(machine.thread_names))]
    try:
        for th in threads:
            th.start()
        deadline = None if timeout is None or timeout == math.inf else time.monotonic() + timeout
        for th in threads:
            th.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    finally:  # an interrupt, or the limit: stop the model's threads (parked ones raise, the others at their next step)
        if any(th.is_alive() for th in threads):
            stopped = LiveError("timeout", f"live run did not finish within {timeout} s")
            # From a thread of its own, waited for a while: a step that never returns (a model's effect
            # looping) holds the kernel lock, and fail() would wait for it for good.
            failing = threading.Thread(target=rt.fail, args=(stopped,), name="safeprefetch-stop", daemon=True)
            failing.start()
            failing.join(STOP_WAIT)
            for th in threads:
                th.join(1.0)
    seconds = time.perf_counter() - t0
    running = tuple(machine.thread_names[t] for t, th in enumerate(threads) if th.is_alive())
    failure = rt.failure if rt.failure is not None else stopped
    record = list(rt.record or [])
    report = verify_record(machine, record)
    trace = rt.trace()
    if failure is not None:
        left = f"\nleft running: {', '.join(running)} (inside an action that did not return)" if running else ""
        return LiveRunResult(machine.name, failure.kind, str(failure) + left, len(record), seconds, trace, report.ok,
                             schedule is not None, running)
    other = [e for e in errors if not isinstance(e, LiveError)]
    if other:
        return LiveRunResult(machine.name, "error", repr(other[0]), len(record), seconds, trace, report.ok,
                             schedule is not None)
    if machine.all_done(rt.state):
        bad = end_violation(machine, rt.state)
        if bad:
            return LiveRunResult(machine.name, bad[0], bad[1], len(record), seconds, trace, report.ok,
                                 schedule is not None)
    return LiveRunResult(machine.name, "ok", "every thread finished", len(record), seconds, trace, report.ok,
                         schedule is not None)


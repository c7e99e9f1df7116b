"""The live runtime: any model, run on real threads.

Theory of operation
-------------------
The checker and this runtime consume the *same* compiled :class:`Machine`.
Nothing here re-implements a protocol; it only decides *when* each thread
applies the step the model gives it.

* One kernel lock guards the state value ``self._state`` (an immutable
  tuple). A thread applies its own enabled step under that lock, by calling
  the step's pure ``fire`` function and storing the successor.
* A thread whose step is not enabled *parks* on its own
  ``threading.Condition`` (which shares the kernel lock, so checking the
  guard and going to sleep is atomic: no wakeup can slip in between).
* After every step, each parked thread whose step has become enabled is
  notified -- and only those. A lost-wakeup bug in a model therefore really
  hangs here, and a correct model really runs.
* Steps the model marks *external* (fetch a batch, copy into ``out``, user
  compute) run their bound action **outside** the lock. The model's view is a
  begin step (the one before) and an end step (the external step itself,
  whose branch -- "ok" or "error" -- is the action's outcome).
* Deadlock detection is exact, not a timer: when a thread parks and every
  thread is either done or parked (none running, none inside an external
  action, none merely idle between calls), no step can ever happen again.
  The runtime then fails every parked thread with :class:`LiveDeadlock`,
  classified exactly as the checker would (deadlock, lost_wakeup,
  shutdown_hang) and carrying the same state printout.
* A step that raises a model violation, or a state that breaks an invariant,
  fails the runtime with :class:`LiveViolation`.

Conformance: with ``record=True`` the runtime keeps every step it took as
``(thread, branch, successor)``. :func:`verify_record` replays that record
through the model and checks each step is a valid transition from the
previous state. With ``schedule=trace`` the runtime lets a thread step only
when it is that thread's turn in the trace, so a counterexample found by
the explorer can be replayed on real threads in exactly its order.

This is the only module (with the Prefetcher built on it) that imports
``threading``.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ._explore import Trace, choice_step, classify_hang
from ._model import DONE, Machine, StepViolation

__all__ = [
    "ConformanceReport",
    "LiveDeadlock",
    "LiveError",
    "LiveRunResult",
    "LiveViolation",
    "Runtime",
    "StepTimeout",
    "run_live",
    "verify_record",
]


class LiveError(Exception):
    """The live machine can make no further progress, or broke a property."""

    kind = "error"

    def __init__(self, kind: str, message: str, state: tuple = (), description: str = ""):
        super().__init__(f"{kind}: {message}" + (f"\n{description}" if description else ""))
        self.kind = kind
        self.message = message
        self.state = state
        self.description = description


class LiveDeadlock(LiveError):
    """Every thread is done or parked, and some are parked: nothing can ever step again."""


class LiveViolation(LiveError):
    """A step raised a model violation, or a state broke an invariant, on real threads."""


class StepTimeout(Exception):
    """A thread's step did not become enabled within its timeout."""


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


class ActionContext:
    """What an external action sees: its thread, and a snapshot of the thread's locals."""

    __slots__ = ("runtime", "thread", "name", "me", "label")

    def __init__(self, runtime: "Runtime", thread: int, me: Any, label: str):
        self.runtime = runtime
        self.thread = thread
        self.name = runtime.machine.thread_names[thread]
        self.me = me
        self.label = label


class Runtime:
    """Runs one compiled machine on real threads.

    ``actions`` maps an external step's action name to ``f(ctx) -> branch``
    (None means the first branch). An action runs outside the kernel lock.
    """

    def __init__(self, machine: Machine, actions: Mapping[str, Callable[[ActionContext], str | None]] | None = None,
                 *, record: bool = False, check_invariants: bool = True, schedule: Trace | None = None):
        self.machine = machine
        self.actions = dict(actions or {})
        n = len(machine.thread_names)
        self._lock = threading.Lock()
        self._state = machine.init
        self._conds = [threading.Condition(self._lock) for _ in range(n)]
        self._parked = [False] * n          # blocked in _park
        self._want: list[str | None] = [None] * n  # the branch a parked thread waits for
        self._failure: LiveError | None = None
        self._check_invariants = check_invariants and bool(machine.invariants)
        self.record: list[tuple[int, int, tuple]] | None = [] if record else None
        self._schedule = list(schedule.steps) if schedule is not None else None
        self._pos = 0
        self.steps = 0

    # -- inspection ----------------------------------------------------------

    @property
    def state(self) -> tuple:
        return self._state

    @property
    def failure(self) -> LiveError | None:
        return self._failure

    def snapshot(self) -> tuple:
        with self._lock:
            return self._state

    def is_done(self, thread: int) -> bool:
        return self._state[self.machine.pc_index[thread]] == DONE

    def pc(self, thread: int) -> str:
        return self._state[self.machine.pc_index[thread]]

    def trace(self) -> Trace:
        """The recorded steps as a trace (needs ``record=True``)."""
        if self.record is None:
            raise ValueError("this runtime does not record its steps")
        m = self.machine
        steps, state = [], m.init
        for t, b, nxt in self.record:
            steps.append(choice_step(m, state, (t, b)))
            if isinstance(nxt, tuple):
                state = nxt
        return Trace(tuple(steps))

    # -- the kernel (all under self._lock) -----------------------------------

    def _options(self, t: int, branch: str | None) -> list:
        """Enabled (branch index, successor) pairs of thread t, filtered by branch and schedule."""
        m = self.machine
        state = self._state
        if self._schedule is not None and self._pos < len(self._schedule):
            # Forced order: only the thread whose turn it is may step. Past the end of
            # the schedule every thread runs freely, so a hang there is a real hang.
            turn = self._schedule[self._pos]
            if turn.thread != m.thread_names[t]:
                return []
            branch = turn.branch
            info = m.step_info(state, t)
            if info is None or info.label != turn.step:
                here = info.label if info else m.pc(state, t)
                self._fail(LiveError("replay_divergence",
                                     f"step {self._pos}: {turn.thread} is at {here!r}, not {turn.step!r}"))
        opts = m.fire(state, t)
        if branch is not None and opts:
            opts = [(b, n) for b, n in opts if choice_step(m, state, (t, b)).branch == branch]
        return opts

    def _apply(self, t: int, b: int, nxt: Any) -> None:
        m = self.machine
        if self.record is not None:
            self.record.append((t, b, nxt))  # a violating step is recorded too: it is the last one
        if isinstance(nxt, StepViolation):
            self._fail(LiveViolation(nxt.kind, f"{m.thread_names[t]}: {nxt.message}", self._state,
                                     self._describe(self._state)))
        self._state = nxt
        try:
            self.steps += 1
            if self._schedule is not None:
                self._pos += 1
            if self._check_invariants:
                bad = m.invariant_violation(nxt)
                if bad:
                    self._fail(LiveViolation(bad[0], bad[1], nxt, self._describe(nxt)))
        finally:
            # Even if a signal (Ctrl-C) lands here, the wakeups this step owes must happen.
            woke = self._wake_enabled()
        if not woke and nxt[m.pc_index[t]] == DONE and any(self._parked):
            # The last runnable thread just finished and woke nobody: the parked ones may be
            # stuck for good. Fail them, but let this thread return normally.
            try:
                self._detect_deadlock()
            except LiveError:
                pass

    def _wake_enabled(self) -> bool:
        """Notify exactly the parked threads whose step is now enabled; True if any."""
        woke = False
        for u, parked in enumerate(self._parked):
            if parked and self._options(u, self._want[u]):
                # Count it as running from now: it has a wakeup pending, so the deadlock
                # detector must not mistake it for parked before it gets the lock back.
                self._parked[u] = False
                self._conds[u].notify()
                woke = True
        return woke

    def _describe(self, state: tuple) -> str:
        m = self.machine
        from ._trace import format_value

        lines = []
        for i, name in enumerate(m.field_names):
            lines.append(f"  {name} = {format_value(m, i, state[i])}")
        return "\n".join(lines)

    def _fail(self, error: LiveError) -> None:
        if self._failure is None:
            self._failure = error
        for c in self._conds:
            c.notify_all()
        raise self._failure

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _detect_deadlock(self) -> None:
        m = self.machine
        state = self._state
        for t, parked in enumerate(self._parked):
            if not parked and state[m.pc_index[t]] != DONE:
                return  # someone can still act
        if self._schedule is not None and self._pos < len(self._schedule):
            # The forced order is stuck: the trace asks for a step that is not enabled.
            turn = self._schedule[self._pos]
            self._fail(LiveError("replay_divergence", f"step {self._pos}: {turn.thread}'s {turn.step!r} "
                                 "is not enabled", state, self._describe(state)))
        if self.record is not None:
            path, choices = [m.init], []
            for t, b, nxt in self.record:
                if isinstance(nxt, tuple):
                    choices.append((t, b))
                    path.append(nxt)
            kind, msg = classify_hang(m, path, choices)
        else:
            kind, msg = classify_hang(m, [state], [])
        self._fail(LiveDeadlock(kind, msg, state, self._describe(state)))

    def _park(self, t: int, branch: str | None, deadline: float | None) -> None:
        self._parked[t] = True
        self._want[t] = branch
        try:
            self._detect_deadlock()
            if deadline is None:
                self._conds[t].wait()
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._conds[t].wait(remaining):
                    if not self._options(t, branch):
                        raise StepTimeout(f"{self.machine.thread_names[t]}: step not enabled in time")
        finally:
            self._parked[t] = False
            self._want[t] = None
        self._check()

    # -- driving a thread ----------------------------------------------------

    def step(self, t: int, branch: str | None = None, timeout: float | None = None) -> str:
        """Apply thread ``t``'s next step, parking until it is enabled. Returns the step label.

        For an external step, the bound action runs outside the lock and its
        result picks the branch. ``branch`` selects among a plain step's
        branches (default: the first enabled one).
        """
        m = self.machine
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._check()
            if self._state[m.pc_index[t]] == DONE:
                raise ValueError(f"{m.thread_names[t]} is done")
            info = m.step_info(self._state, t)
            if info.kind != "external":
                while not (opts := self._options(t, branch)):
                    self._park(t, branch, deadline)
                b, nxt = opts[0]
                self._apply(t, b, nxt)
                return info.label
            me = m.local_views[t](list(self._state))  # a snapshot: only t writes its own locals
        action = self.actions.get(info.action)
        outcome = action(ActionContext(self, t, me, info.label)) if action is not None else branch
        if outcome is not None and outcome not in info.branches:
            raise ValueError(f"action {info.action!r} returned unknown outcome {outcome!r}")
        with self._lock:
            self._check()
            while not (opts := self._options(t, outcome)):
                self._park(t, outcome, deadline)
            b, nxt = opts[0]
            self._apply(t, b, nxt)
            return info.label

    def run_until(self, t: int, stop: Callable[[str], bool], timeout: float | None = None) -> str:
        """Step thread ``t`` until its program counter satisfies ``stop`` (or it is done)."""
        while True:
            with self._lock:
                pc = self._state[self.machine.pc_index[t]]
            if pc == DONE or stop(pc):
                return pc
            self.step(t, timeout=timeout)

    def run_thread(self, t: int, *, rng: random.Random | None = None, jitter: float = 0.0) -> None:
        """Run thread ``t`` to completion (autonomous threads). Branches are chosen by ``rng`` if given."""
        m = self.machine
        while True:
            with self._lock:
                self._check()
                if self._state[m.pc_index[t]] == DONE:
                    return
                branch = None
                if rng is not None and self._schedule is None:
                    opts = m.fire(self._state, t)
                    info = m.step_info(self._state, t)
                    unbound = info.kind == "external" and info.action not in self.actions
                    if len(opts) > 1 and (info.kind != "external" or unbound):
                        branch = choice_step(m, self._state, (t, rng.choice(opts)[0])).branch
            if jitter and rng is not None:
                time.sleep(rng.random() * jitter)
            self.step(t, branch)

    def fail(self, error: LiveError) -> None:
        """Fail the machine from outside (a watchdog or a timeout); parked threads raise ``error``."""
        with self._lock:
            try:
                self._fail(error)
            except LiveError:
                pass


# --------------------------------------------------------------------------
# Conformance
# --------------------------------------------------------------------------


def verify_record(machine: Machine, record: Sequence[tuple[int, int, tuple]]) -> ConformanceReport:
    """Check that every recorded live step is a valid transition of the model from the previous state."""
    state = machine.init
    for i, (t, b, nxt) in enumerate(record):
        options = dict(machine.fire(state, t))
        if b not in options:
            return ConformanceReport(i, False, i, f"step {i}: {machine.thread_names[t]} had no branch {b} enabled")
        expected = options[b]
        if isinstance(nxt, StepViolation) or isinstance(expected, StepViolation):
            same = (isinstance(nxt, StepViolation) and isinstance(expected, StepViolation)
                    and nxt.kind == expected.kind and i == len(record) - 1)
            if not same:
                return ConformanceReport(i, False, i, f"step {i}: violation mismatch")
            return ConformanceReport(len(record), True)
        if expected != nxt:
            return ConformanceReport(i, False, i, f"step {i}: {machine.thread_names[t]}'s recorded successor "
                                                  "differs from the model's")
        state = nxt
    return ConformanceReport(len(record), True)


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


def run_live(machine: Machine, *, actions: Mapping[str, Callable] | None = None, schedule: Trace | None = None,
             seed: int | None = None, jitter: float = 0.0005, timeout: float = 10.0) -> LiveRunResult:
    """Run every thread of ``machine`` on its own real thread, until all finish or the machine fails."""
    rt = Runtime(machine, actions, record=True, schedule=schedule)
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
    threads = [threading.Thread(target=body, args=(t, random.Random(rng_master.random())),
                                name=f"safeprefetch-{machine.thread_names[t]}", daemon=True)
               for t in range(len(machine.thread_names))]
    for th in threads:
        th.start()
    deadline = time.monotonic() + timeout
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
    if any(th.is_alive() for th in threads):
        rt.fail(LiveError("timeout", f"live run did not finish within {timeout} s"))
        for th in threads:
            th.join(1.0)
    seconds = time.perf_counter() - t0
    failure = rt.failure
    record = list(rt.record or [])
    report = verify_record(machine, record)
    trace = rt.trace()
    if failure is not None:
        return LiveRunResult(machine.name, failure.kind, str(failure), len(record), seconds, trace, report.ok,
                             schedule is not None)
    other = [e for e in errors if not isinstance(e, LiveError)]
    if other:
        return LiveRunResult(machine.name, "error", repr(other[0]), len(record), seconds, trace, report.ok,
                             schedule is not None)
    if machine.all_done(rt.state):
        from ._explore import _end_violation

        bad = _end_violation(machine, rt.state)
        if bad:
            return LiveRunResult(machine.name, bad[0], bad[1], len(record), seconds, trace, report.ok,
                                 schedule is not None)
    return LiveRunResult(machine.name, "ok", "every thread finished", len(record), seconds, trace, report.ok,
                         schedule is not None)


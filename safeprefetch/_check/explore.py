"""The deterministic scheduler and the exhaustive explorer.

What it guarantees
------------------
*Determinism.* The enabled choices of a state are ``(thread, branch)`` pairs
in canonical order: threads by index, branches in the order the step
declares them. :meth:`Machine.successors` is pure, so a run is nothing but
its list of choices. A :class:`Trace` stores those choices by name (thread
name, step label, branch name), round-trips through JSON, and
:func:`replay` reproduces the same states; a recorded step that no longer
matches the model raises :class:`ReplayDivergence` rather than silently
running something else (compare Hypothesis's ``Flaky``).

*Shortest counterexamples.* The default search is level-synchronous BFS
over distinct states. A violation is found either *at* a state (a failed
invariant, a terminal state that is not a clean finish) or *on* a step (a
step that calls :func:`violate`). All states of depth ``d`` are processed
before any state of depth ``d + 1``; a violation on a step out of depth
``d`` has length ``d + 1``, so once one is seen the explorer still finishes
level ``d``, in case a terminal violation of length ``d`` is there. The
reported trace is therefore of minimal length, and the first such one in
canonical order. ``strategy="dfs"`` uses a stack instead: less frontier
memory, same verdict on exhaustive runs, traces not minimal.

*Honest bounds.* ``max_states`` caps the number of distinct states stored.
If the cap cuts the search short, the result says ``exhaustive=False``: an
``ok`` verdict then means only "no violation among the states seen".

Checks
------
Invariants (model-declared, plus the primitives' own: releasing a mutex one
does not own) run on every new state. A terminal state -- no thread can
step -- is classified:

* every thread done: the model's end-of-run checks run (lost, duplicate or
  out-of-order items, a swallowed error...);
* otherwise, if the model says close, error or abandon was requested:
  ``shutdown_hang``;
* otherwise, if a sleeping thread's declared predicate holds and no notify
  reached its condvar since that predicate became true (the wakeup went
  missing, it was not merely sent to someone else): ``lost_wakeup``;
* otherwise ``deadlock``.

The lost-wakeup test needs history, not just the final state; it walks the
counterexample path (which BFS keeps anyway) rather than widening every
state with bookkeeping bits.
"""

from __future__ import annotations

import gc
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from .._dsl.model import DONE, Machine, Model, ModelError, StepViolation

__all__ = [
    "CheckResult",
    "ReplayDivergence",
    "Trace",
    "TraceError",
    "TraceStep",
    "Violation",
    "check",
    "explore",
    "replay",
]

#: Default cap on stored states. A million states of a catalog model take
#: roughly 0.3-0.5 GB in CPython; this keeps a runaway config from eating the
#: machine while leaving every catalog default far below it.
DEFAULT_MAX_STATES = 2_000_000


class TraceError(ValueError):
    """A trace file or JSON value is malformed."""


class ReplayDivergence(Exception):
    """A recorded trace asks for a step the model does not offer at that point."""


@dataclass(frozen=True)
class TraceStep:
    """One step of a trace."""

    #: The name of the thread that stepped.
    thread: str
    #: The label of the step, verbatim from the model.
    step: str
    #: The branch taken, for nondeterministic steps; None otherwise.
    branch: str | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"thread": self.thread, "step": self.step}
        if self.branch is not None:
            d["branch"] = self.branch
        return d


@dataclass(frozen=True)
class Trace:
    """A schedule: the list of choices from the initial state."""

    steps: tuple[TraceStep, ...]

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self):
        return iter(self.steps)

    def to_json(self) -> list[dict[str, Any]]:
        return [s.to_json() for s in self.steps]

    def dumps(self) -> str:
        return json.dumps(self.to_json())

    @classmethod
    def from_json(cls, value: Any) -> "Trace":
        if isinstance(value, dict) and "trace" in value:
            value = value["trace"]
        if not isinstance(value, list):
            raise TraceError("a trace must be a JSON list of steps (or an object with a 'trace' list)")
        steps = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise TraceError(f"trace step {i} must be an object, not {type(item).__name__}")
            thread, step = item.get("thread"), item.get("step")
            if not isinstance(thread, str) or not isinstance(step, str):
                raise TraceError(f"trace step {i} needs string 'thread' and 'step' fields")
            branch = item.get("branch")
            if branch is not None and not isinstance(branch, str):
                raise TraceError(f"trace step {i}: 'branch' must be a string")
            steps.append(TraceStep(thread, step, branch))
        return cls(tuple(steps))

    @classmethod
    def loads(cls, text: str) -> "Trace":
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise TraceError(f"trace is not valid JSON: {e}") from None
        return cls.from_json(value)


@dataclass(frozen=True)
class Violation:
    """A bug found by the checker: what kind, why, and the schedule that shows it."""

    #: One of the stable kind names (``deadlock``, ``lost_wakeup``, ...).
    kind: str
    #: A one-line human explanation.
    message: str
    #: The shortest schedule (BFS) that reaches the violation.
    trace: Trace
    #: The state in which the violation holds (for a step violation, the state before the step).
    state: tuple = field(repr=False, default=())
    #: True when the violation is raised by the last step of the trace itself.
    on_step: bool = False
    #: For starvation (a lasso): the number of steps before the cycle that repeats forever.
    cycle_start: int | None = None


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check."""

    #: The model's name.
    model: str
    #: The full configuration, settings included.
    config: Mapping[str, Any]
    #: The search strategy ("bfs" or "dfs").
    strategy: str
    #: True when every reachable state was visited (or a violation was found).
    exhaustive: bool
    #: "ok" or a violation kind.
    verdict: str
    #: Distinct states stored.
    states: int
    #: Transitions (successor computations) taken.
    transitions: int
    #: Wall-clock seconds of the search.
    seconds: float
    #: The violation, if any.
    violation: Violation | None = None
    #: The declared expected verdict of the model, if known.
    expected: str | None = None
    #: Depth of the deepest state reached.
    max_depth: int = 0

    @property
    def ok(self) -> bool:
        return self.violation is None

    @property
    def trace(self) -> Trace:
        return self.violation.trace if self.violation else Trace(())

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "config": dict(self.config),
            "strategy": self.strategy,
            "exhaustive": self.exhaustive,
            "verdict": self.verdict,
            "expected": self.expected,
            "states": self.states,
            "transitions": self.transitions,
            "seconds": round(self.seconds, 6),
            "max_depth": self.max_depth,
            "message": self.violation.message if self.violation else None,
            "trace_length": len(self.trace),
            "trace": self.trace.to_json(),
        }


# --------------------------------------------------------------------------
# Choices <-> names
# --------------------------------------------------------------------------


def choice_step(machine: Machine, state: tuple, choice: tuple[int, int]) -> TraceStep:
    t, b = choice
    info = machine.step_info(state, t)
    if info is None:
        raise ReplayDivergence(f"{machine.thread_names[t]} has no step at {machine.pc(state, t)!r}")
    branch = info.branches[b] if info.branches else None
    if branch is None and info.kind == "notify_one" and machine.config.get("notify") == "any":
        queue = state[machine.cond_index[info.obj]]
        if queue:
            branch = f"wake {machine.thread_names[queue[b]]}"
    return TraceStep(machine.thread_names[t], info.label, branch)


def _resolve_choice(machine: Machine, state: tuple, step: TraceStep, index: int) -> tuple[tuple[int, int], Any]:
    try:
        t = machine.thread_names.index(step.thread)
    except ValueError:
        raise ReplayDivergence(f"step {index}: the model has no thread {step.thread!r}") from None
    info = machine.step_info(state, t)
    if info is None or info.label != step.step:
        here = info.label if info else machine.pc(state, t)
        raise ReplayDivergence(
            f"step {index}: {step.thread} is at {here!r}, not at {step.step!r}")
    options = machine.fire(state, t)
    if not options:
        raise ReplayDivergence(f"step {index}: {step.thread}'s step {step.step!r} is not enabled")
    for b, nxt in options:
        if choice_step(machine, state, (t, b)).branch == step.branch:
            return (t, b), nxt
    raise ReplayDivergence(f"step {index}: {step.thread}'s step {step.step!r} has no branch {step.branch!r}")


def replay_choices(machine: Machine, trace: Trace | Iterable[TraceStep]) -> tuple[list[Any], list[tuple[int, int]]]:
    """Like :func:`replay`, but also return the resolved ``(thread, branch)`` choices."""
    states: list[Any] = [machine.init]
    choices: list[tuple[int, int]] = []
    state = machine.init
    steps = list(trace)
    for i, step in enumerate(steps):
        choice, nxt = _resolve_choice(machine, state, step, i)
        choices.append(choice)
        if isinstance(nxt, StepViolation):
            if i != len(steps) - 1:
                raise ReplayDivergence(f"step {i} raises {nxt.kind} but the trace goes on")
            states.append(nxt)
            return states, choices
        state = nxt
        states.append(state)
    return states, choices


def final_verdict(machine: Machine, trace: Trace) -> tuple[str, str] | None:
    """The violation (kind, message) the checker sees at the end of ``trace``, or None."""
    states, choices = replay_choices(machine, trace)
    last = states[-1]
    if isinstance(last, StepViolation):
        return last.kind, last.message
    bad = machine.invariant_violation(last)
    if bad:
        return bad
    if machine.is_stuck(last, machine.successors(last)):
        if machine.all_done(last):
            return _end_violation(machine, last)
        return classify_hang(machine, states, choices)
    return None


def replay(machine: Machine, trace: Trace | Iterable[TraceStep]) -> list[tuple]:
    """Re-run ``trace`` from the initial state; return the states it visits (initial state first).

    If the last step raises a violation, the list ends with the state before
    it and the :class:`StepViolation` is appended as the final element.
    Raises :class:`ReplayDivergence` if the model does not offer a recorded step.
    """
    states: list[Any] = [machine.init]
    state = machine.init
    steps = list(trace)
    for i, step in enumerate(steps):
        _, nxt = _resolve_choice(machine, state, step, i)
        if isinstance(nxt, StepViolation):
            if i != len(steps) - 1:
                raise ReplayDivergence(f"step {i} raises {nxt.kind} but the trace goes on")
            states.append(nxt)
            return states
        state = nxt
        states.append(state)
    return states


# --------------------------------------------------------------------------
# Terminal-state classification
# --------------------------------------------------------------------------


def _blocked_threads(machine: Machine, state: tuple) -> list[int]:
    return [t for t in range(len(machine.thread_names)) if state[machine.pc_index[t]] != DONE]


def classify_hang(machine: Machine, path: Sequence[tuple], choices: Sequence[tuple[int, int]]) -> tuple[str, str]:
    """Classify a terminal state (``path[-1]``) in which some thread is not done."""
    state = path[-1]
    stuck = _blocked_threads(machine, state)
    names = ", ".join(f"{machine.thread_names[t]} at {machine.pc(state, t)!r}" for t in stuck)
    if machine.shutdown_pred is not None and machine.shutdown_pred(machine.view(state)):
        return "shutdown_hang", f"shutdown was requested but threads never return: {names}"
    for t in stuck:
        lost = _lost_wakeup(machine, path, choices, t)
        if lost:
            return "lost_wakeup", lost + f" (blocked: {names})"
    return "deadlock", f"all threads blocked: {names}"


def _lost_wakeup(machine: Machine, path: Sequence[tuple], choices: Sequence[tuple[int, int]], t: int) -> str | None:
    state = path[-1]
    pc = machine.pc(state, t)
    wait = machine.waits.get((t, pc))
    if wait is None:
        return None
    cond, until = wait
    if until is None:
        return None
    pred = lambda st: until(*machine.views(st, t))  # noqa: E731
    if not pred(state):
        return None
    # Find where the thread last went to sleep: the last step taken by t.
    slept = max(i for i, (ct, _) in enumerate(choices) if ct == t) + 1
    # Find since when the predicate has held without interruption.
    since = slept
    for i in range(len(path) - 1, slept - 1, -1):
        if not pred(path[i]):
            since = i + 1
            break
    ci = machine.cond_index[cond]
    for i in range(since, len(choices)):
        ct, _ = choices[i]
        info = machine.step_info(path[i], ct)
        if info.kind in ("notify_one", "notify_all") and info.obj == cond and path[i][ci]:
            return None  # a notify did arrive; it went to someone else
    who = machine.thread_names[t]
    return f"{who} sleeps on {cond} although what it waits for already holds, and no notify follows"


def _end_violation(machine: Machine, state: tuple) -> tuple[str, str] | None:
    if not machine.end_checks:
        return None
    s = machine.view(state)
    for check_fn in machine.end_checks:
        found = check_fn(s)
        if found:
            return found
    return None


# --------------------------------------------------------------------------
# The explorer
# --------------------------------------------------------------------------


class Explorer:
    """Exhaustive search over the distinct states of one machine.

    After :meth:`run`, ``parents`` maps every stored state to its BFS parent
    (``None`` for the initial state); tests use it as the reachable set.
    """

    def __init__(self, machine: Machine, *, strategy: str = "bfs", max_states: int = DEFAULT_MAX_STATES,
                 progress: Callable[[int, int, float], None] | None = None, stop_at_first: bool = True,
                 reduce: str = "none", progress_every: float = 3.0):
        from .reduce import Symmetry, ample_selector, check_reduce

        self.reduce = check_reduce(reduce)
        self.canon = (Symmetry(machine) if reduce in ("symmetry", "all") and any(len(g) > 1 for g in
                                                                                   machine.symmetry) else None)
        self.ample = ample_selector(machine) if reduce in ("por", "all") else None
        self.por_reduced = 0  # states where only an ample subset was explored
        #: Seconds between progress reports (TLC prints one about every minute; a few seconds
        #: is kinder to someone watching a check that takes half a minute).
        self.progress_every = progress_every
        if strategy not in ("bfs", "dfs"):
            raise ModelError(f"unknown strategy {strategy!r} (known: bfs, dfs)")
        if max_states < 1:
            raise ModelError("max_states must be at least 1")
        self.machine = machine
        self.strategy = strategy
        self.max_states = max_states
        self.progress = progress
        self.stop_at_first = stop_at_first
        self.parents: dict[tuple, tuple | None] = {}
        self.depth: dict[tuple, int] = {}
        self.transitions = 0
        self.violations: list[Violation] = []

    # -- path reconstruction ---------------------------------------------

    def path_to(self, state: tuple) -> tuple[list[tuple], list[tuple[int, int]]]:
        states = [state]
        parents = self.parents
        while (p := parents[states[-1]]) is not None:
            states.append(p)
        states.reverse()
        choices = []
        m = self.machine
        canon = self.canon.canon if self.canon is not None else (lambda x: x)
        # With symmetry the stored states are representatives; walk the real states alongside.
        real = [m.init]
        for b in states[1:]:
            a = real[-1]
            for ch, nxt in m.successors(a):
                if nxt.__class__ is tuple and canon(nxt) == b:
                    choices.append(ch)
                    real.append(nxt)
                    break
            else:  # pragma: no cover - would mean successors() is not pure
                raise RuntimeError("successor function is not deterministic")
        return real, choices

    def _trace(self, states: Sequence[tuple], choices: Sequence[tuple[int, int]]) -> Trace:
        m = self.machine
        return Trace(tuple(choice_step(m, s, c) for s, c in zip(states, choices)))

    def _violation_at(self, state: tuple, kind_msg: tuple[str, str] | None = None) -> Violation:
        states, choices = self.path_to(state)
        if kind_msg is None:
            kind_msg = classify_hang(self.machine, states, choices)
        elif self.canon is not None:
            kind_msg = (self.machine.invariant_violation(states[-1]) or _end_violation(self.machine, states[-1])
                        or kind_msg)
        kind, msg = kind_msg
        return Violation(kind, msg, self._trace(states, choices), states[-1], False)

    def _violation_on(self, state: tuple, choice: tuple[int, int], v: StepViolation) -> Violation:
        states, choices = self.path_to(state)
        real = states[-1]
        if self.canon is not None and real != state:
            _, order = self.canon.canon_with_order(real)
            choice = (order[choice[0]], choice[1])  # the representative's thread j is real thread order[j]
            for ch, nxt in self.machine.successors(real):
                if ch == choice and isinstance(nxt, StepViolation):
                    v = nxt
                    break
        trace = self._trace(states + [real], choices + [choice])
        return Violation(v.kind, v.message, trace, real, True)

    # -- search -------------------------------------------------------------

    def run(self) -> CheckResult:
        # States are tuples, which CPython's cyclic GC tracks; as the state dict grows, every
        # collection rescans all of them. They cannot form cycles, so pause the GC while searching.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if enabled:
                gc.enable()

    def _run(self) -> CheckResult:
        m = self.machine
        t0 = time.perf_counter()
        init = m.init
        self.parents = {init: None}
        found: list[tuple[int, Violation]] = []  # (length, violation)
        exhaustive = True
        bad = m.invariant_violation(init)
        if bad:
            found.append((0, self._violation_at(init, bad)))
        elif self.strategy == "bfs":
            reduced = self.canon is not None or self.ample is not None
            exhaustive = self._bfs_reduced(found) if reduced else self._bfs(found)
        else:
            exhaustive = self._dfs(found)
        if found and self.ample is not None and self.strategy == "bfs" and self.stop_at_first:
            # POR keeps the verdict but may lengthen the path: search again without it, which
            # stops at the first (shortest) violation, no deeper than the one just found.
            again = Explorer(m, strategy="bfs", max_states=self.max_states, progress=self.progress,
                             reduce="symmetry" if self.canon is not None else "none").run()
            if again.violation is not None:
                from dataclasses import replace

                return replace(again, seconds=time.perf_counter() - t0)
        if not found and exhaustive and m.progress_labels and not self.run_safety_only:
            from .liveness import find_starvation

            full = self
            if self.reduce != "none":
                # Cycle analysis needs the real graph, not a reduced one.
                full = Explorer(m, max_states=self.max_states, reduce="none", stop_at_first=False)
                full.run_safety_only = True
                full.run()
            lasso = find_starvation(m, full.parents, full.path_to)
            if lasso is not None:
                message, states, choices = lasso
                trace = full._trace(states, choices)
                start = int(message.rsplit("after step ", 1)[1])
                found.append((len(choices), Violation("starvation", message, trace, states[-1], False, start)))
        seconds = time.perf_counter() - t0
        violation = min(found, key=lambda x: x[0])[1] if found else None
        self.violations = [v for _, v in found]
        return CheckResult(
            model=m.name,
            config=dict(m.config),
            strategy=self.strategy,
            exhaustive=exhaustive or violation is not None,
            verdict=violation.kind if violation else "ok",
            states=len(self.parents),
            transitions=self.transitions,
            seconds=seconds,
            violation=violation,
            max_depth=self._max_depth,
        )

    _max_depth = 0
    run_safety_only = False

    def _bfs(self, found: list) -> bool:
        m = self.machine
        parents = self.parents
        tables = m.tables
        pcs = m.pc_index
        nthreads = len(tables)
        check_inv = m.invariant_violation if m.invariants else None
        level = [m.init]
        depth = 0
        max_states = self.max_states
        transitions = 0
        progress = self.progress
        next_report = time.perf_counter() + self.progress_every if progress else None
        stop = self.stop_at_first
        setdefault = parents.setdefault
        # (thread, pc field, step table, spurious-only pcs or None), hoisted out of the loop.
        threads = [(t, pcs[t], tables[t], m.spurious_pcs[t] or None) for t in range(nthreads)]
        counter = 0
        while level:
            nxt_level: list[tuple] = []
            append = nxt_level.append
            on_step_found = False
            for state in level:
                any_succ = False
                for t, pi, table, sp in threads:
                    fire = table.get(state[pi])
                    if fire is None:
                        continue
                    res = fire(state)
                    if not res:
                        continue
                    transitions += len(res)
                    if sp is None or state[pi] not in sp:
                        any_succ = True
                    for b, nxt in res:
                        if nxt.__class__ is not tuple:
                            if not on_step_found or not stop:
                                found.append((depth + 1, self._violation_on(state, (t, b), nxt)))
                                on_step_found = True
                            continue
                        # One hash per successor: setdefault inserts only if new.
                        n_before = len(parents)
                        setdefault(nxt, state)
                        if len(parents) == n_before:
                            continue
                        if n_before >= max_states:
                            del parents[nxt]
                            self.transitions = transitions
                            self._max_depth = depth
                            return False
                        if check_inv is not None:
                            bad = check_inv(nxt)
                            if bad:  # an error state: report it, never expand it
                                if not on_step_found or not stop:
                                    found.append((depth + 1, self._violation_at(nxt, bad)))
                                    on_step_found = True
                                continue
                        append(nxt)
                if not any_succ and self._terminal(state, depth, found) and stop:
                    self.transitions = transitions
                    self._max_depth = depth
                    return True
                counter += 1
                if next_report is not None and not counter & 1023 and time.perf_counter() >= next_report:
                    progress(len(parents), len(nxt_level) + len(level), transitions)
                    next_report = time.perf_counter() + self.progress_every
            self.transitions = transitions
            self._max_depth = depth
            if on_step_found and stop:
                return True
            level = nxt_level
            depth += 1
        self.transitions = transitions
        return True

    def _terminal(self, state: tuple, depth: int, found: list) -> bool:
        """Classify a state where no thread can move; record and return True if it is a violation.

        Every thread done: the end-of-run checks. Otherwise a hang (deadlock,
        lost wakeup or shutdown hang), classified along its path.
        """
        m = self.machine
        if m.all_done(state):
            bad = _end_violation(m, state)
            if not bad:
                return False
            found.append((depth, self._violation_at(state, bad)))
        else:
            found.append((depth, self._violation_at(state)))
        return True

    def _expand(self, state: tuple) -> tuple[list, bool]:
        """``(moves, stuck)`` of ``state`` under the active reductions.

        ``moves`` are ``(choice, successor)`` with successors canonical;
        ``stuck`` is computed on the full move set, so hangs are never hidden.
        """
        m = self.machine
        canon = self.canon.canon if self.canon is not None else None
        if self.ample is not None:
            picked = self.ample(state)
            if picked is not None:
                t, moves = picked
                out = [((t, b), canon(n) if canon is not None and n.__class__ is tuple else n) for b, n in moves]
                parents = self.parents
                # C3, the BFS way: if any ample successor is already known, expand fully.
                if not any(n.__class__ is tuple and n in parents for _, n in out):
                    self.por_reduced += 1
                    return out, False
        succ = m.successors(state)
        stuck = m.is_stuck(state, succ)
        if canon is not None:
            succ = [(c, canon(n) if n.__class__ is tuple else n) for c, n in succ]
        return succ, stuck

    def _bfs_reduced(self, found: list) -> bool:
        m = self.machine
        parents = self.parents
        check_inv = m.invariant_violation if m.invariants else None
        level = [m.init if self.canon is None else self.canon.canon(m.init)]
        if level[0] != m.init:
            parents.clear()
            parents[level[0]] = None
        depth = 0
        transitions = 0
        stop = self.stop_at_first
        progress = self.progress
        next_report = time.perf_counter() + self.progress_every if progress else None
        while level:
            nxt_level: list[tuple] = []
            on_step_found = False
            for state in level:
                moves, stuck = self._expand(state)
                transitions += len(moves)
                for ch, nxt in moves:
                    if nxt.__class__ is not tuple:
                        if not on_step_found or not stop:
                            found.append((depth + 1, self._violation_on(state, ch, nxt)))
                            on_step_found = True
                        continue
                    if nxt in parents:
                        continue
                    if len(parents) >= self.max_states:
                        self.transitions = transitions
                        self._max_depth = depth
                        return False
                    parents[nxt] = state
                    if check_inv is not None:
                        bad = check_inv(nxt)
                        if bad:
                            if not on_step_found or not stop:
                                found.append((depth + 1, self._violation_at(nxt, bad)))
                                on_step_found = True
                            continue
                    nxt_level.append(nxt)
                if stuck and self._terminal(state, depth, found) and stop:
                    self.transitions = transitions
                    self._max_depth = depth
                    return True
                if next_report is not None and time.perf_counter() >= next_report:
                    progress(len(parents), len(nxt_level) + len(level), transitions)
                    next_report = time.perf_counter() + self.progress_every
            self.transitions = transitions
            self._max_depth = depth
            if on_step_found and stop:
                return True
            level = nxt_level
            depth += 1
        self.transitions = transitions
        return True

    def _dfs(self, found: list) -> bool:
        m = self.machine
        parents = self.parents
        check_inv = m.invariant_violation if m.invariants else None
        root = m.init if self.canon is None else self.canon.canon(m.init)
        if root != m.init:
            parents.clear()
            parents[root] = None
        stack = [(root, 0)]
        transitions = 0
        max_states = self.max_states
        stop = self.stop_at_first
        max_depth = 0
        while stack:
            state, depth = stack.pop()
            max_depth = max(max_depth, depth)
            succ, stuck = self._expand(state)
            transitions += len(succ)
            if stuck:
                if m.all_done(state):
                    bad = _end_violation(m, state)
                    if bad:
                        found.append((depth, self._violation_at(state, bad)))
                else:
                    found.append((depth, self._violation_at(state)))
                if found and stop:
                    break
                if not succ:
                    continue
            hit = False
            for ch, nxt in reversed(succ):
                if nxt.__class__ is not tuple:
                    found.append((depth + 1, self._violation_on(state, ch, nxt)))
                    hit = True
                    continue
                if nxt in parents:
                    continue
                if len(parents) >= max_states:
                    self.transitions = transitions
                    self._max_depth = max_depth
                    return False
                parents[nxt] = state
                if check_inv is not None:
                    bad = check_inv(nxt)
                    if bad:
                        found.append((depth + 1, self._violation_at(nxt, bad)))
                        hit = True
                        continue
                stack.append((nxt, depth + 1))
            if hit and stop:
                break
        self.transitions = transitions
        self._max_depth = max_depth
        return True


#: Reductions are on by default: both preserve every verdict (the test suite checks each
#: catalog model under each setting), and symmetry also preserves trace lengths.
DEFAULT_REDUCE = "all"


def explore(machine: Machine, *, strategy: str = "bfs", max_states: int = DEFAULT_MAX_STATES,
            progress: Callable[[int, int, float], None] | None = None, reduce: str = DEFAULT_REDUCE,
            progress_every: float = 3.0) -> CheckResult:
    """Search every reachable state of ``machine``; return the verdict and the shortest trace."""
    return Explorer(machine, strategy=strategy, max_states=max_states, progress=progress, reduce=reduce,
                    progress_every=progress_every).run()


def check(model: type[Model] | Machine, config: Mapping[str, Any] | None = None, *, strategy: str = "bfs",
          max_states: int = DEFAULT_MAX_STATES,
          progress: Callable[[int, int, float], None] | None = None, reduce: str = DEFAULT_REDUCE,
          progress_every: float = 3.0) -> CheckResult:
    """Compile ``model`` at ``config`` (defaults updated with it) and explore it.

    This is the function to call from pytest::

        result = check(MyModel, {"capacity": 2})
        assert result.verdict == "ok" and result.exhaustive
    """
    if isinstance(model, Machine):
        if config:
            raise ModelError("config cannot be given with an already compiled machine")
        machine = model
        expected = None
    else:
        machine = model.compile(config)
        expected = model.expected if not config or _is_default(model, machine.config) else None
    result = explore(machine, strategy=strategy, max_states=max_states, progress=progress, reduce=reduce,
                     progress_every=progress_every)
    if expected is not None:
        result = _with_expected(result, expected)
    return result


def check_shutdown_bound(machine: Machine, bound: int, max_states: int = DEFAULT_MAX_STATES) -> Violation | None:
    """Bounded progress: after shutdown is requested, every thread returns within ``bound`` own steps.

    Returns a ``shutdown_hang`` violation whose trace leads to the state where the
    worst case starts, or None when every thread is within the bound.
    """
    from .liveness import shutdown_progress_detail

    e = Explorer(machine, reduce="none", max_states=max_states, stop_at_first=False)
    e.run()
    for name, (worst, where) in shutdown_progress_detail(machine, e.parents).items():
        if worst is None or worst > bound:
            states, choices = e.path_to(where)
            how = "may never return" if worst is None else f"may take {worst} of its own steps to return"
            return Violation("shutdown_hang", f"after shutdown was requested, {name} {how} (bound {bound})",
                             e._trace(states, choices), where, False)
    return None


def _is_default(model: type[Model], config: Mapping[str, Any]) -> bool:
    return dict(config) == model.configure({})


def _with_expected(result: CheckResult, expected: str) -> CheckResult:
    from dataclasses import replace

    return replace(result, expected=expected)

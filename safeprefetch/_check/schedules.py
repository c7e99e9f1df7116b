"""Running schedules: one run judged as the explorer judges a path, and the four ways to choose runs.

What it guarantees
------------------
Every run is judged exactly as the explorer judges a path, with the
explorer's own functions: the moves of a state come from the one expansion
(:class:`~.expand.Expander`, without reduction: a run is a real schedule);
the initial state and every new state are checked against the invariants; a
step that raises :class:`~.._dsl.model.StepViolation` is a violation *on*
that step; a state whose only moves are spurious wakeups (or none) is
terminal and is judged by the shared classifier
(:func:`.verdict.judge_terminal`): the end-of-run checks if every thread is
done, otherwise ``shutdown_hang``, ``lost_wakeup`` or ``deadlock`` from the
run's own history. So :func:`~.replay.final_verdict` on a reported trace
gives back the reported violation, and ``python -m safeprefetch replay``
re-runs it.

The :class:`Runner` holds those judgements, and both ways of walking
schedules use it: :meth:`Runner.run` follows one schedule to its end, asking
a *picker* for each choice (``random``, ``pct``, ``hypothesis``), and
:class:`_PreemptionBounded` walks the tree of schedules depth first
(``preempt``). Each takes a move with :meth:`Runner.take` and judges a stuck
state with :meth:`Runner.terminal`, so there is one loop body, not two.

Every chooser is deterministic given its seed: the enabled choices come in
the explorer's canonical order and all randomness flows from one
``random.Random``. :mod:`.strategies` documents what each strategy promises.
"""

from __future__ import annotations

import random as _random
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from .._dsl.model import Machine, ModelError, StepViolation
from .expand import Expander
from .replay import trace_of
from .result import Trace, Violation
from .verdict import HANG, classify_hang, judge_terminal

__all__ = ["SPURIOUS_RATE", "Clock", "Runner", "hypothesis_search", "pct", "preempt", "random_walk"]

#: Under ``random`` and ``pct``, the chance per step of taking a spurious
#: wakeup instead of a real move, when one is possible. Counted as one choice
#: among the others, sleepers wake so often that a walk rarely reaches the
#: state where every thread sleeps; under PCT's priorities a high-priority
#: sleeper would spin through wake/recheck/sleep until the step cap. Real
#: spurious wakeups are rare, and a bug that needs one needs it at one moment,
#: so a small rate that recurs every step is enough.
SPURIOUS_RATE = 0.05

#: Hypothesis draws schedule entries from ``0.._HYP_CHOICE_MAX`` and takes them
#: modulo the number of enabled choices. 255 is far above any catalog state's
#: choice count (threads times branches), so the modulo bias is small, and it
#: is small enough that the shrinker gets to 0 ("keep running") in a few steps.
_HYP_CHOICE_MAX = 255

#: Schedule entries from here up pick a spurious wakeup, when one is possible
#: (1/16 of the range, near :data:`SPURIOUS_RATE`); smaller entries pick a real
#: move, so shrinking toward 0 also removes needless spurious wakeups.
_HYP_SPURIOUS_FROM = 240

#: The preemption-bounded DFS looks at the clock every this many nodes.
_CLOCK_EVERY = 4096


@dataclass
class Run:
    """One schedule: the states it visited, the choices it took, and what it found."""

    states: list
    choices: list
    violation: Violation | None = None
    cut: bool = False


class Runner:
    """Runs schedules on one machine, judging them exactly as the explorer does."""

    def __init__(self, machine: Machine, max_steps: int):
        if max_steps < 1:
            raise ModelError("max_steps must be at least 1")
        self.m = machine
        self.max_steps = max_steps
        self.expander = Expander(machine)  # no reduction: a run is a real schedule
        #: Hashes of the distinct states seen (hashes, not states: a sampler may
        #: visit millions, and it only reports how many).
        self.seen: set[int] = {hash(machine.init)}
        self.transitions = 0
        self.max_depth = 0
        self.schedules = 0
        self.truncated = 0
        self.init_bad = machine.invariant_violation(machine.init)

    def trace(self, states: Sequence[tuple], choices: Sequence[tuple[int, int]]) -> Trace:
        return trace_of(self.m, states, choices)

    def at(self, states: list, choices: list, found: Any = HANG) -> Violation:
        """A violation holding in ``states[-1]`` (a hang is classified from this run's history)."""
        if found is HANG:
            found = classify_hang(self.m, states, choices)
        kind, msg = found
        trace = self.trace(states, choices)
        return Violation(kind, msg, trace, states[-1], on_step=False, step=len(trace))

    def on(self, states: list, choices: list, choice: tuple[int, int], v: StepViolation) -> Violation:
        trace = self.trace(states, choices + [choice])
        return Violation(v.kind, v.message, trace, states[-1], on_step=True, step=len(trace))

    def expand(self, state: tuple) -> tuple[list, bool]:
        """``(successors, stuck)`` of ``state``, counted as transitions."""
        succ, stuck = self.expander.successors(state)
        self.transitions += len(succ)
        return succ, stuck

    def terminal(self, states: list, choices: list) -> Violation | None:
        """Judge a state with no (non-spurious) move: the end checks, or a hang."""
        found = judge_terminal(self.m, states, choices)
        return self.at(states, choices, found) if found else None

    def take(self, states: list, choices: list, choice: tuple[int, int], nxt: Any) -> Violation | None:
        """Take ``choice`` to ``nxt``: the violation on that step, or extend the run and check the new state."""
        if nxt.__class__ is not tuple:
            return self.on(states, choices, choice, nxt)
        choices.append(choice)
        states.append(nxt)
        self.seen.add(hash(nxt))
        check_inv = self.expander.invariant
        if check_inv is not None:
            bad = check_inv(nxt)
            if bad:
                return self.at(states, choices, bad)
        return None

    def run(self, pick: Callable[[tuple, list, list], int]) -> Run:
        """Run one schedule from the initial state; ``pick(state, successors, choices)`` chooses."""
        states = [self.m.init]
        choices: list[tuple[int, int]] = []
        self.schedules += 1
        try:
            if self.init_bad:
                return Run(states, choices, self.at(states, choices, self.init_bad))
            for step in range(self.max_steps + 1):
                state = states[-1]
                succ, stuck = self.expand(state)
                if stuck:
                    return Run(states, choices, self.terminal(states, choices))
                if step == self.max_steps:
                    self.truncated += 1
                    return Run(states, choices, None, cut=True)
                ch, nxt = succ[pick(state, succ, choices)]
                v = self.take(states, choices, ch, nxt)
                if v is None:
                    continue  # no trailing ``if``: 3.13 leaves its back-edge out of the ``finally``
                return Run(states, choices, v)
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            self.max_depth = max(self.max_depth, len(choices))


def _runnable(machine: Machine, state: tuple, succ: list) -> tuple[list[int], list[int]]:
    """Indices into ``succ`` of real moves and of spurious wakeups."""
    real, spurious = [], []
    for i, ((t, b), _n) in enumerate(succ):
        (spurious if machine.spurious_move(state, t, b) else real).append(i)
    return real, spurious


class Clock:
    def __init__(self, time_limit: float | None):
        self.t0 = time.perf_counter()
        self.deadline = None if time_limit is None else self.t0 + time_limit

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def out(self) -> bool:
        return self.deadline is not None and time.perf_counter() >= self.deadline


def _uniform(m: Machine, rng: _random.Random) -> Callable[[tuple, list, list], int]:
    """The random walk's chooser: uniform over the moves, spurious wakeups at :data:`SPURIOUS_RATE`."""
    if not any(m.spurious_pcs):
        return lambda state, succ, choices: rng.randrange(len(succ))

    def pick(state, succ, choices):
        real, spurious = _runnable(m, state, succ)
        if spurious:
            if rng.random() < SPURIOUS_RATE:
                return spurious[rng.randrange(len(spurious))]
            return real[rng.randrange(len(real))]
        return rng.randrange(len(succ))
    return pick


def random_walk(runner: Runner, rng: _random.Random, budget: int, clock: Clock) -> dict[str, Any]:
    pick = _uniform(runner.m, rng)

    for _ in range(budget):
        r = runner.run(pick)
        if r.violation is not None:
            return {"run": r, "to_bug": runner.schedules, "t_bug": clock.elapsed()}
        if clock.out():
            break
    return {"run": None}


def pct(runner: Runner, rng: _random.Random, seed: int, budget: int, d: int, k: int | None,
         clock: Clock) -> dict[str, Any]:
    m = runner.m
    n = len(m.thread_names)
    found: dict[str, Any] = {"run": None}
    if k is None:
        # Estimate k from one uniform random run; it counts as a schedule, and may find the bug.
        est = _random.Random(f"pct-k/{seed}")
        first = runner.run(_uniform(m, est))
        k = max(1, len(first.choices))
        if first.violation is not None:
            found = {"run": first, "to_bug": 1, "t_bug": clock.elapsed()}
            return {**found, "k": k}
    while runner.schedules < budget and found["run"] is None and not clock.out():
        prio = rng.sample(range(d, d + n), n)
        change = {}
        if d > 1:
            points = rng.sample(range(1, k + 1), d - 1) if k >= d - 1 else list(range(1, d))
            change = {step: j for j, step in enumerate(points, start=1)}

        def pick(state, succ, choices, prio=prio, change=change):
            real, spurious = _runnable(m, state, succ)
            if spurious and rng.random() < SPURIOUS_RATE:
                return spurious[rng.randrange(len(spurious))]
            threads = {succ[i][0][0] for i in real}
            t = max(threads, key=prio.__getitem__)
            j = change.get(len(choices) + 1)
            if j is not None:
                prio[t] = j
                t = max(threads, key=prio.__getitem__)
            mine = [i for i in real if succ[i][0][0] == t]
            return mine[0] if len(mine) == 1 else mine[rng.randrange(len(mine))]

        r = runner.run(pick)
        k = max(k, len(r.choices))
        if r.violation is not None:
            found = {"run": r, "to_bug": runner.schedules, "t_bug": clock.elapsed()}
    return {**found, "k": k}


def _run_until_failed(test: Any, failed: type[Exception]) -> None:
    """Run Hypothesis's test; it ends by raising ``failed`` when a run found a bug (both branches
    return: an ``except`` body that falls through ends in a back-edge on 3.12, where a Ctrl-C is
    looked up in the same clause)."""
    try:
        test()
    except failed:
        return


def hypothesis_search(runner: Runner, seed: int, budget: int, clock: Clock) -> dict[str, Any]:
    try:
        import hypothesis
        from hypothesis import strategies as st
    except ImportError:  # pragma: no cover - depends on the environment
        raise ModelError("--strategy hypothesis needs the 'hypothesis' package "
                         "(pip install hypothesis, or the 'test' extra)") from None
    m = runner.m
    n = len(m.thread_names)
    spurious_on = any(m.spurious_pcs)
    first: dict[str, Any] = {}
    last: dict[str, Any] = {}

    class _Failed(Exception):
        pass

    def schedule(xs: list[int]):
        pos = 0

        def pick(state, succ, choices):
            nonlocal pos
            if len(succ) == 1:
                return 0
            x = xs[pos] if pos < len(xs) else 0
            pos += 1
            real, spurious = _runnable(m, state, succ) if spurious_on else (range(len(succ)), ())
            if spurious and x >= _HYP_SPURIOUS_FROM:
                return spurious[x % len(spurious)]
            prev = choices[-1][0] if choices else 0
            order = sorted(real, key=lambda i: ((succ[i][0][0] - prev) % n, succ[i][0][1]))
            return order[x % len(order)]

        if not first and clock.out():
            return  # out of time: let Hypothesis run out its examples without work
        r = runner.run(pick)
        v = r.violation
        if v is None:
            return
        if not first:
            first.update(run=r, to_bug=runner.schedules, t_bug=clock.elapsed(), kind=v.kind, length=len(v.trace))
        # The property shrunk: "fails like the first failure, with a trace no longer than it".
        if v.kind == first["kind"] and len(v.trace) <= first["length"]:
            last["run"] = r
            raise _Failed

    test = hypothesis.given(st.lists(st.integers(0, _HYP_CHOICE_MAX), max_size=runner.max_steps))(schedule)
    test = hypothesis.settings(
        database=None,
        max_examples=budget,
        deadline=None,
        derandomize=False,
        phases=[hypothesis.Phase.generate, hypothesis.Phase.shrink],
        suppress_health_check=list(hypothesis.HealthCheck),
        report_multiple_bugs=False,
        verbosity=hypothesis.Verbosity.quiet,
        print_blob=False,
    )(test)
    test = hypothesis.seed(seed)(test)
    _run_until_failed(test, _Failed)
    if not first:
        return {"run": None}
    return {"run": last.get("run", first["run"]), "to_bug": first["to_bug"], "t_bug": first["t_bug"],
            "shrunk_from": first["length"]}


def preempt(runner: Runner, bound: int, max_nodes: int, clock: Clock) -> dict[str, Any]:
    """Iterative preemption bounding: DFS with bound 0, 1, ..., ``bound``."""
    out: dict[str, Any] = {"run": None, "covered": False, "complete": False, "searched": -1}
    for b in range(bound + 1):
        found, pruned, cut = _PreemptionBounded(runner, b, max_nodes, clock).run()
        out["searched"] = b
        if found is not None:
            out.update(run=found, to_bug=runner.schedules, t_bug=clock.elapsed(), bound_used=b)
            return out
        if cut:
            return out
        if not pruned:
            # No schedule needed more than b preemptions: every schedule was covered.
            out.update(covered=True, complete=True)
            return out
    out["covered"] = True
    return out


class _PreemptionBounded:
    """One DFS over the schedules within ``bound`` preemptions, caching ``(state, last thread)`` nodes."""

    def __init__(self, runner: Runner, bound: int, max_nodes: int, clock: Clock):
        self.runner, self.bound, self.max_nodes, self.clock = runner, bound, max_nodes, clock
        #: Fewest preemptions with which each ``(state, last thread)`` node was reached.
        self.best: dict[tuple, int] = {}
        #: Whether the bound kept some move out.
        self.pruned = False
        self.states: list[tuple] = []
        self.choices: list[tuple[int, int]] = []
        #: Each frame: (children iterator, preemptions used at this node).
        self.stack: list[tuple[Iterable, int]] = []

    def run(self) -> tuple[Run | None, bool, bool]:
        """Returns (failing run, bound pruned a move, search was cut)."""
        runner = self.runner
        init = runner.m.init
        if runner.init_bad:
            runner.schedules += 1
            return Run([init], [], runner.at([init], [], runner.init_bad)), False, False
        states, choices, stack = self.states, self.choices, self.stack
        states.append(init)
        found, _leaf = self.enter(init, -1, 0)
        if found:
            return found, self.pruned, False
        check_every = 0
        while stack:
            children, _used = stack[-1]
            nxt_item = next(children, None)
            if nxt_item is None:
                stack.pop()
                if choices:
                    choices.pop()
                    states.pop()
                continue
            ch, nxt, used = nxt_item
            v = runner.take(states, choices, ch, nxt)
            if v is not None:
                runner.schedules += 1
                return Run(list(states), list(choices), v), self.pruned, False
            found, leaf = self.enter(nxt, ch[0], used)
            if found:
                return found, self.pruned, False
            if leaf:
                states.pop()
                choices.pop()
            if len(self.best) >= self.max_nodes:
                return None, self.pruned, True
            check_every += 1
            if check_every >= _CLOCK_EVERY:
                check_every = 0
                if self.clock.out():
                    return None, self.pruned, True
        return None, self.pruned, False

    def enter(self, state: tuple, last: int, used: int) -> tuple[Run | None, bool]:
        """Visit a node (the run's last state); return (violation run, whether it is a leaf)."""
        runner = self.runner
        key = (state, last)
        prev = self.best.get(key)
        if prev is not None and prev <= used:
            runner.schedules += 1
            return None, True
        self.best[key] = used
        states, choices = self.states, self.choices
        succ, stuck = runner.expand(state)
        runner.max_depth = max(runner.max_depth, len(choices))
        if stuck:
            runner.schedules += 1
            v = runner.terminal(states, choices)
            return (Run(list(states), list(choices), v) if v else None), True
        if len(choices) >= runner.max_steps:
            runner.schedules += 1
            runner.truncated += 1
            return None, True
        sp, pcs = runner.m.spurious_pcs, runner.m.pc_index
        last_runs = last >= 0 and any(t == last and state[pcs[t]] not in sp[t] for (t, _b), _n in succ)
        free, costly = [], []
        for ch, nxt in succ:
            if not last_runs or ch[0] == last:
                free.append((ch, nxt, used))
            elif used < self.bound:
                costly.append((ch, nxt, used + 1))
            else:
                self.pruned = True
        self.stack.append((iter(free + costly), used))
        return None, False

"""Choices and names: turning a schedule into a :class:`~.result.Trace` and back.

What it guarantees
------------------
*Determinism.* The enabled choices of a state are ``(thread, branch)`` pairs
in canonical order: threads by index, branches in the order the step
declares them. The step functions are pure, so a run is nothing but its list
of choices. A trace stores those choices by name (thread name, step label,
branch name); :func:`replay` resolves each name against the model again and
reproduces the same states. A recorded step that no longer matches the model
raises :class:`~.result.ReplayDivergence` rather than silently running
something else (compare Hypothesis's ``Flaky``).

*The same verdict.* :func:`final_verdict` judges the end of a replayed trace
with the searches' own rules -- a step violation, an invariant, then the
expansion's "stuck" and the shared terminal classifier of :mod:`.verdict` --
so a trace any strategy reports gives back the violation it was reported
with.

Naming a ``notify_one`` under ``notify=any``: the branch is the woken
thread (``wake consumer1``), so the trace says who was woken, not a queue
position.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from .._dsl.graph import did_you_mean
from .._dsl.model import Machine, StepViolation
from .expand import Expander
from .result import ReplayDivergence, Trace, TraceStep
from .verdict import judge_terminal

__all__ = ["choice_step", "final_verdict", "replay", "replay_choices", "trace_of"]


def choice_step(machine: Machine, state: tuple, choice: tuple[int, int]) -> TraceStep:
    """The name of ``choice`` (a ``(thread, branch)`` pair) taken in ``state``."""
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


def trace_of(machine: Machine, states: Sequence[tuple], choices: Sequence[tuple[int, int]]) -> Trace:
    """The trace of ``choices``, each taken in the state of ``states`` at the same position."""
    return Trace(tuple(choice_step(machine, s, c) for s, c in zip(states, choices)))


def _resolve_choice(machine: Machine, state: tuple, step: TraceStep, index: int) -> tuple[tuple[int, int], Any]:
    try:
        t = machine.thread_names.index(step.thread)
    except ValueError:
        raise ReplayDivergence(f"step {index}: the model has no thread {step.thread!r}"
                               + did_you_mean(step.thread, machine.thread_names)) from None
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
        choice, nxt = _resolve_choice(machine, state, step, i + 1)  # steps are numbered from 1, as in tables
        choices.append(choice)
        if isinstance(nxt, StepViolation):
            if i != len(steps) - 1:
                raise ReplayDivergence(f"step {i + 1} raises {nxt.kind} but the trace goes on")
            states.append(nxt)
            return states, choices
        state = nxt
        states.append(state)
    return states, choices


def replay(machine: Machine, trace: Trace | Iterable[TraceStep]) -> list[tuple]:
    """Re-run ``trace`` from the initial state; return the states it visits (initial state first).

    If the last step raises a violation, the list ends with the state before
    it and the :class:`StepViolation` is appended as the final element.
    Raises :class:`ReplayDivergence` if the model does not offer a recorded step.
    """
    return replay_choices(machine, trace)[0]


def final_verdict(machine: Machine, trace: Trace) -> tuple[str, str] | None:
    """The violation (kind, message) the checker sees at the end of ``trace``, or None."""
    states, choices = replay_choices(machine, trace)
    last = states[-1]
    if isinstance(last, StepViolation):
        return last.kind, last.message
    bad = machine.invariant_violation(last)
    if bad:
        return bad
    _moves, stuck = Expander(machine).expand(last)
    if stuck:
        return judge_terminal(machine, states, choices)
    return None

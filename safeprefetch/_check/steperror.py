"""The schedule that reached a step whose own code raised.

What it guarantees
------------------
When a step's effect, guard or ``next`` function raises, the compiled step
raises a :class:`~.._dsl.model.StepError` naming the thread, the label and
the user's ``file:line`` (``_dsl/usererror.py``); an invariant or end check
that raises, a ``CheckError`` naming it. Neither can know the path that led
there, because no search hands its path to a step or a check.
:func:`step_error_with_trace` finds it: a plain breadth-first search of the
same machine that stops at the first state whose expansion raises. It is
run only once an error has happened, so no search pays for it; breadth
first, the schedule is a shortest one; and it expands and checks what the
explorer does (never expanding a state that breaks an invariant), so it
meets the same error, or one just as near the initial state.
"""

from __future__ import annotations

from collections import deque

from .._dsl.model import Machine, StepError
from .expand import Expander
from .replay import trace_of
from .verdict import end_violation

__all__ = ["path_from_parents", "step_error_with_trace"]


def step_error_with_trace(machine: Machine, error: StepError, max_states: int) -> StepError:
    """``error`` (or the same kind of error met sooner), with the shortest schedule that reaches it."""
    from .trace import format_table

    expand = Expander(machine).expand
    check_inv = machine.invariant_violation if machine.invariants else None
    parents: dict[tuple, tuple | None] = {machine.init: None}
    queue = deque([machine.init])
    at = machine.init  # where the error, if any, is raised
    try:
        if check_inv is not None and check_inv(at):
            return error
        while queue and len(parents) <= max_states:
            at = state = queue.popleft()
            moves, _stuck = expand(state)
            if not moves and machine.all_done(state):
                end_violation(machine, state)  # an end check that raises
            for t, res in moves:
                for b, nxt in res:
                    if nxt.__class__ is tuple and nxt not in parents:
                        parents[nxt] = (state, (t, b))
                        at = nxt
                        if check_inv is None or not check_inv(nxt):
                            queue.append(nxt)
                at = state
    except StepError as e:
        states, choices = path_from_parents(parents, at)
        trace = trace_of(machine, states, choices)
        return e.with_trace(trace, format_table(machine, trace) if choices else "")
    return error  # not met again within the bound: report it without a schedule


def path_from_parents(parents: dict, state: tuple) -> tuple[list[tuple], list[tuple[int, int]]]:
    """The states and choices from the root to ``state`` in a map ``state -> (parent, choice)`` (root: None)."""
    states, choices = [state], []
    while parents[states[-1]] is not None:
        prev, choice = parents[states[-1]]
        states.append(prev)
        choices.append(choice)
    states.reverse()
    choices.reverse()
    return states, choices

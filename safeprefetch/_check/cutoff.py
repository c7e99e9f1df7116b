"""A breadth-first search cut short still reports its shortest violation.

A state cap or a memory budget can stop the search in the middle of a
level. Everything shallower is judged by then: a state at depth ``d`` is
checked against the invariants when it is generated, while level ``d - 1``
is expanded, and judged stuck or not when it is expanded itself. So a
violation found at depth ``d`` or less is a shortest one. But a violation
found one step deeper (an invariant broken by a successor, a step that
raised) is not, while some states of the level are still unexpanded: one of
them may be stuck, a violation at depth ``d``. Reporting the deeper one as
the shortest trace, as the search did, made the verdict and its length
depend on where the cap fell (and on the store, whose chunks fall
differently).

:func:`cut_short` closes that gap without storing anything: it expands the
rest of the level only to judge its stuck states, exactly as the search
would have. The cost is one expansion per state already stored, and no
memory: the cap and the budget still bound what is kept.

Where a shortest trace cannot be had, the result says so. Partial-order
reduction keeps verdicts but may lengthen traces, so a violation it finds is
searched for again without it; when the cap cuts that second search before
it meets the violation, :func:`not_shortest` keeps the reduced trace and
marks the result not exhaustive, with both searches' reasons.
"""

from __future__ import annotations

from typing import Any, Iterable

#: Why a violation's trace is not known to be a shortest one (the result is then not exhaustive): the search
#: again without partial-order reduction, which may lengthen traces, was itself cut short before it found one.
NOT_SHORTEST = ("the trace is the partial-order-reduced search's and may not be a shortest one: the search again "
                "without the reduction, for a shortest trace, stopped before it found the violation")


def not_shortest(explorer: Any, again: Any) -> bool:
    """The search again without partial-order reduction (``again``, a result) stopped before it met the
    violation: keep the reduced trace, and say that it may not be a shortest one. Returns False: the search
    is not exhaustive (the caller's ``exhaustive``)."""
    explorer.stop_reason, explorer.longer = again.stop_reason, True
    explorer.stop_detail = f"{NOT_SHORTEST} ({again.stop_message})"
    return False


def cut_short(explorer: Any, rest: Iterable[tuple], depth: int, transitions: int, found: list) -> bool:
    """Stop the search cut at level ``depth`` (False: not every state was visited), judging first, when every
    violation in ``found`` lies deeper than ``depth``, the stuck states among ``rest`` (the level's unexpanded
    states), as the search does (``explorer._terminal``) and stopping at the first when it would have."""
    if found and min(d for d, _ in found) > depth:
        expand = explorer.expander.expand
        for state in rest:
            _, stuck = expand(state)
            if stuck and explorer._terminal(state, depth, found) and explorer.stop_at_first:
                break
    return explorer._stopped(depth, transitions, False)

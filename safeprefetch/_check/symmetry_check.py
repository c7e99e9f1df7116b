"""Checking a symmetry declaration before trusting it.

What it guarantees
------------------
``m.symmetric("worker0", "worker1")`` lets the explorer store one state per
permutation of those threads (``reduce.py``). That is sound only if the
threads really are interchangeable: swapping them in a state must swap
everything that can happen next. A model that keeps a thread's index in a
shared variable (``s.owner = me.index``), or branches on ``me.name``, breaks
that, and the reduced search then silently explores the wrong graph -- or
fails deep inside, unable to walk a stored path back.

:func:`symmetry_error` tests the declaration directly: over the states a
plain breadth-first search reaches (up to a bound), for each pair of
neighbouring threads of a group, it swaps them -- their program counters and
locals, and their indices in mutex owners and condvar queues; a shared
variable is left alone, which is the point -- and compares the successors of
the swapped state with the swapped successors, and the invariants' (and,
at a terminal state, the end checks') judgement of the two states. The
first difference is a
:class:`SymmetryError` that names the threads, the step, the fields that
differ and the schedule that reached the state.

The explorer runs it on the first :data:`SYMMETRY_PROBE` states before every
search with symmetry reduction, and on everything it stored when a reduced
search fails to walk a path back, so a wrong declaration is named, not
reported as "successor function is not deterministic".

The first states alone left deep asymmetry unseen: a model whose threads
differ only after a thousand steps of something else passed the probe, and
the reduced search then said "ok, exhaustive" where the plain one found the
violation. Past the first states the walk goes on as a beam, at most
:data:`SYMMETRY_BEAM` new states per level, up to :data:`SYMMETRY_DEEP` more
states, so every depth the model reaches within that budget is sampled.
Still a check, not a proof (as in TLC, whose symmetry sets are not checked
at all): asymmetry confined to states off the beam goes unseen.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from .._dsl.model import Machine, ModelError
from .replay import trace_of
from .steperror import path_from_parents
from .verdict import end_violation

__all__ = ["SYMMETRY_BEAM", "SYMMETRY_DEEP", "SYMMETRY_PROBE", "SymmetryError", "symmetry_error"]

#: States checked before every search with symmetry reduction. A wrong declaration shows within a
#: few steps in every model we have seen (the threads differ as soon as one of them moves); a
#: thousand states cost a few milliseconds, against a search that is about to store many more.
SYMMETRY_PROBE = 1_000
#: Past the probe's first states: new states checked per level, and in all.
SYMMETRY_BEAM = 4
SYMMETRY_DEEP = 5_000


class SymmetryError(ModelError):
    """Threads declared symmetric are not interchangeable."""

    def __init__(self, message: str, threads: tuple[str, str], trace: Any, table: str):
        super().__init__(message)
        #: The two threads whose swap changes what happens next.
        self.threads = threads
        #: The schedule that reached the state where the swap shows.
        self.trace = trace
        #: ``trace`` as a table, for people.
        self.table = table


def symmetry_error(machine: Machine, max_states: int) -> SymmetryError | None:
    """The first place where a declared symmetry fails, within ``max_states`` states; None if none does."""
    swaps = [(g[i], g[i + 1]) for g in machine.symmetry if len(g) > 1 for i in range(len(g) - 1)]
    if not swaps:
        return None
    parents: dict[tuple, Any] = {machine.init: None}
    queue = deque([(machine.init, 0)])
    per_level: dict[int, int] = {}
    while queue:
        state, depth = queue.popleft()
        succ = machine.successors(state)
        for a, b in swaps:
            bad = _mismatch(machine, state, succ, a, b)
            if bad is not None:
                return _error(machine, parents, state, a, b, *bad)
            judged = _judged_apart(machine, state, not succ, a, b)
            if judged is not None:
                return _judgement_error(machine, parents, state, a, b, judged)
        for (t, br), nxt in succ:
            if nxt.__class__ is not tuple or nxt in parents:
                continue
            held = per_level.get(depth + 1, 0)
            if len(parents) < max_states or (held < SYMMETRY_BEAM and len(parents) < max_states + SYMMETRY_DEEP):
                parents[nxt] = (state, (t, br))
                queue.append((nxt, depth + 1))
                per_level[depth + 1] = held + 1
    return None


def _swap(machine: Machine, state: tuple, a: int, b: int) -> tuple:
    """``state`` with threads ``a`` and ``b`` exchanged (shared variables untouched)."""
    s = list(state)
    pa, pb = machine.pc_index[a], machine.pc_index[b]
    n = 1 + len(machine.local_index[a])
    s[pa:pa + n], s[pb:pb + n] = state[pb:pb + n], state[pa:pa + n]
    other = {a: b, b: a}
    for i in machine.mutex_index.values():
        s[i] = other.get(s[i], s[i])
    for i in machine.cond_index.values():
        s[i] = tuple(other.get(x, x) for x in s[i])
    return tuple(s)


def _outcome(nxt: Any) -> Any:
    """A successor as compared: a state, or a step violation by its kind (its message names threads)."""
    return nxt if nxt.__class__ is tuple else ("violation", nxt.kind)


def _mismatch(machine: Machine, state: tuple, succ: list, a: int, b: int) -> tuple | None:
    """``(choice, expected, got)`` for the first move that the swap does not carry over, or None."""
    other = {a: b, b: a}
    theirs = {c: _outcome(n) for c, n in machine.successors(_swap(machine, state, a, b))}
    # What the swapped state should offer: each move of `state`, made by the other thread, swapped.
    mine = {(other.get(t, t), br): _outcome(_swap(machine, n, a, b) if n.__class__ is tuple else n)
            for (t, br), n in succ}
    for c in sorted(set(mine) | set(theirs)):
        if mine.get(c) != theirs.get(c):
            return (other.get(c[0], c[0]), c[1]), mine.get(c), theirs.get(c)
    return None


def _judged_apart(machine: Machine, state: tuple, stuck: bool, a: int, b: int) -> str | None:
    """Which check -- an invariant, or at a terminal state the end checks -- judges ``state`` and its swap
    differently (one fails, the other not, or they fail differently), or None.

    The reduced search judges only the representative of each class of states, so a check that names
    one of the threads (``threads["w1"].x``) would pass or fail depending on which member was stored."""
    swapped = _swap(machine, state, a, b)
    mine, theirs = machine.invariant_violation(state), machine.invariant_violation(swapped)
    # Whether each fails, and with what kind: one invariant per thread ("w1 below 2", "w2 below 2") is
    # symmetric as a whole, though the swap fails the other thread's.
    if (mine is None) != (theirs is None) or (mine is not None and theirs is not None and mine[0] != theirs[0]):
        return (mine or theirs)[1].replace(" fails", "")  # "invariant 'name'"
    if stuck and machine.all_done(state):
        mine, theirs = end_violation(machine, state), end_violation(machine, swapped)
        if (mine is None) != (theirs is None) or (mine is not None and theirs is not None and mine[0] != theirs[0]):
            return "an end check"
    return None


def _where(machine: Machine, parents: dict, state: tuple, a: int, b: int) -> tuple[Any, str, str]:
    """The trace to ``state``, the declared group as written, and "N steps"."""
    trace = trace_of(machine, *path_from_parents(parents, state))
    group = next(g for g in machine.symmetry if a in g and b in g)
    steps = f"{len(trace)} step{'' if len(trace) == 1 else 's'}"
    return trace, ", ".join(machine.thread_names[t] for t in group), steps


def _judgement_error(machine: Machine, parents: dict, state: tuple, a: int, b: int, check: str) -> SymmetryError:
    from .trace import format_table

    trace, declared, steps = _where(machine, parents, state, a, b)
    names = machine.thread_names
    message = (f"symmetric({declared}) is wrong: {check} judges the state after {steps} and the same state "
               f"with {names[a]} and {names[b]} swapped differently, so the reduced search, which judges one of "
               f"the two, could miss its violation. A check that names one of the threads (threads[{names[b]!r}]) "
               f"breaks symmetry; state it for every thread of the group, or remove the declaration")
    return SymmetryError(message, (names[a], names[b]), trace, format_table(machine, trace))


def _error(machine: Machine, parents: dict, state: tuple, a: int, b: int, choice: tuple, want: Any,
           got: Any) -> SymmetryError:
    from .trace import format_table

    trace, declared, steps = _where(machine, parents, state, a, b)
    names = machine.thread_names
    info = machine.step_info(state, choice[0])
    label = info.label if info is not None else machine.pc(state, choice[0])
    if isinstance(want, tuple) and isinstance(got, tuple) and len(want) == len(got) and want[:1] != ("violation",):
        fields = [machine.field_names[i] for i, (x, y) in enumerate(zip(want, got)) if x != y]
        what = "the swapped state differs in " + ", ".join(fields)
    else:
        what = "the step is enabled in one and not the other" if None in (want, got) else "the outcomes differ"
    message = (f"symmetric({declared}) is wrong: {names[a]} and {names[b]} are not interchangeable. After "
               f"{steps}, {names[choice[0]]}'s step {label!r} does not carry over when the two "
               f"are swapped ({what}). A shared variable holding a thread's index or name, or a step that "
               f"reads me.index or me.name, breaks symmetry; remove the declaration or the dependence")
    return SymmetryError(message, (names[a], names[b]), trace, format_table(machine, trace))


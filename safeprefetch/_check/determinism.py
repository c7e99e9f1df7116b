"""Checking that the model is a function of its state, before a search trusts it.

What it guarantees
------------------
Every search stores a state once and expands it once: it assumes that the
same state always has the same successors. A step, guard or helper that
reads anything else -- ``random``, the clock, ``id()``, a module global it
changes -- breaks that, and a search then explores some graph other than the
model's: a seeded ``random.randint`` in a step made a model with a reachable
violation come out "ok, exhaustive" (the adversarial review's repro), or the
search failed at the end, unable to walk its own path back.

:func:`probe` expands each of the first states a breadth-first search
reaches twice and compares the two expansions; :func:`differs` does it for
one state (the explorer samples one in every 1024 states it expands
plainly; the generated engines' own audit, ``generated.agrees``, compares
against the machine on the same schedule). A difference is a
:class:`NondeterministicModel` that names the thread, the step and the
schedule to the state. That is a check, not a proof: a step that changes
its mind rarely, or only in states past the sample, goes unseen.

The same expansions also catch a step that changes the state it was given
in place (``s.box.v += 1`` on a mutable object in a field, where the step
should have stored a new value): the step's private copy of the state is
shallow, so the object it mutates is the parent state's, and the stored
parent silently becomes another state. Both expansions then see the same
corrupted object and agree, so comparing them cannot tell; comparing the
state with itself before and after can. Each probed or sampled state's
hash and field reprs are taken before its expansions and compared after; a
change is a :class:`NondeterministicModel` naming the field.

:func:`check_before_search` is what every search entry point calls before
it trusts the model -- ``explore``, the cluster search, the strategies'
``search``: the symmetry declaration (``symmetry_check``) where the search
applies it, then :func:`probe`. Each entry point used to call the two
itself, and two forgot: ``--cluster`` passed a model with a wrong
``m.symmetric`` declaration, and ``--cluster`` and ``--strategy preempt``
passed a model whose step read a module counter, as "ok, exhaustive", where
the one-process search refused both.
"""

from __future__ import annotations

from collections import deque
from typing import Any, NamedTuple

from .._dsl.model import Machine, ModelError
from .replay import trace_of
from .steperror import path_from_parents
from .symmetry_check import SYMMETRY_PROBE, symmetry_error

__all__ = ["DETERMINISM_PROBE", "Mutated", "NondeterministicModel", "check_before_search", "differs", "probe"]

#: States expanded twice before every search: a few milliseconds, and random draws show at once.
DETERMINISM_PROBE = 256


class NondeterministicModel(ModelError):
    """The same state gave different successors on two expansions."""

    def __init__(self, message: str, trace: Any = None):
        super().__init__(message)
        #: The schedule that reached the state (None when it is not known).
        self.trace = trace


def _outcomes(succ: list) -> dict:
    # A violation by its type and kind: its message may print an object's address, new on every call.
    return {c: (n if n.__class__ is tuple else (type(n).__name__, getattr(n, "kind", None))) for c, n in succ}


def differs(machine: Machine, state: tuple) -> tuple[int, str] | None:
    """``(thread, branch)`` of the first move whose outcome differs between two expansions of ``state``."""
    return _expanded_twice(machine, state)[0]


class Mutated(NamedTuple):
    """A field whose value the expansion of the state changed in place: its repr before and after."""

    field: str
    before: str
    after: str


def _expanded_twice(machine: Machine, state: tuple) -> tuple[tuple[int, str] | Mutated | None, list]:
    """:func:`differs`, and the first expansion (for a caller that goes on to use the successors)."""
    hashed, shown = [hash(v) for v in state], [repr(v) for v in state]
    succ = machine.successors(state)
    first, again = _outcomes(succ), _outcomes(machine.successors(state))
    if [hash(v) for v in state] != hashed or [repr(v) for v in state] != shown:
        names = machine.field_names or tuple(f"field {i}" for i in range(len(state)))
        i = next(i for i, v in enumerate(state) if repr(v) != shown[i] or hash(v) != hashed[i])
        after = repr(state[i])
        if after == shown[i]:  # the repr hides the change: say what did change
            after += f" (the same repr, but its hash changed from {hashed[i]} to {hash(state[i])})"
        return Mutated(names[i], shown[i], after), succ
    for c in sorted(set(first) | set(again), key=repr):
        if first.get(c) != again.get(c):
            return c, succ
    return None, succ


def error(machine: Machine, choice: tuple[int, Any] | Mutated | None, trace: Any = None,
          state: tuple | None = None) -> NondeterministicModel:
    """The error for a model whose successors changed (``choice``: the move where they did, in ``state``)."""
    if isinstance(choice, Mutated):
        at = "" if trace is None else f" (after {len(trace)} step{'' if len(trace) == 1 else 's'})"
        return NondeterministicModel(
            f"a step changed the state it was given in place{at}: field {choice.field!r} was {choice.before} "
            f"before the state's successors were computed and {choice.after} after. A step must store a new "
            "value in a field (s.field = ...), not change the object the field holds: the state is shared with "
            "every state stored before it. Keep fields immutable (ints, strings, tuples, frozensets, frozen "
            "dataclasses)", trace)
    where = ""
    if choice is not None:
        info = machine.step_info(state, choice[0]) if state is not None else None
        step = f"'s step {info.label!r}" if info is not None else ""
        where = f" ({machine.thread_names[choice[0]]}{step}"
        if trace is not None:
            steps = len(trace)
            where += ", in the initial state" if not steps else f", after {steps} step{'' if steps == 1 else 's'}"
        where += ")"
    return NondeterministicModel(
        f"the model is not deterministic: one state gave different successors on two expansions{where}. Steps, "
        "guards and helpers must be functions of the state alone (no random, clock, id() or module state they "
        "change); a choice the model makes belongs in branches=, where the search tries every one", trace)


def probe(machine: Machine, max_states: int = DETERMINISM_PROBE) -> NondeterministicModel | None:
    """Expand each of the first ``max_states`` states of a BFS twice; the first difference, or None."""
    parents: dict[tuple, Any] = {machine.init: None}
    queue = deque([machine.init])
    seen = 0
    while queue and seen < max_states:
        state = queue.popleft()
        seen += 1
        try:
            if machine.invariant_violation(state):
                continue  # an error state: the search reports it and never expands it
            choice, succ = _expanded_twice(machine, state)
        except (Exception, SystemExit):  # noqa: BLE001 - a step or check that raises: the search reports it, with its trace
            return None
        if isinstance(choice, Mutated):  # the states stored so far may be corrupted: no path back to trust
            return error(machine, choice, None, state)
        if choice is not None:
            return error(machine, choice, trace_of(machine, *path_from_parents(parents, state)), state)
        for c, nxt in succ:
            if nxt.__class__ is tuple and nxt not in parents:
                parents[nxt] = (state, c)
                queue.append(nxt)
    return None


def check_before_search(machine: Machine, reduce: str, max_states: int) -> None:
    """Raise the first reason not to trust ``machine`` that a probe finds; every search calls this first.

    A symmetry declaration is tested where ``reduce`` applies it (``symmetry``, ``all``): a
    :class:`~.symmetry_check.SymmetryError`; then determinism, over the first states of a BFS (at most
    ``max_states``): a :class:`NondeterministicModel`.
    """
    if machine.symmetry and reduce in ("symmetry", "all"):
        wrong = symmetry_error(machine, SYMMETRY_PROBE)
        if wrong is not None:
            raise wrong
    changing = probe(machine, min(DETERMINISM_PROBE, max_states))
    if changing is not None:
        raise changing

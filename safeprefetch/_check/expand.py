"""Expanding a state: the one place that says what a state's moves are.

What it guarantees
------------------
:meth:`Expander.expand` turns a state into ``(moves, stuck)``, and every
search consumes exactly that: the explorer's BFS and DFS (plain or reduced),
the distributed workers, the sampling strategies (through
:meth:`Expander.successors`) and the oracle in :mod:`safeprefetch.testing`.

* ``moves`` lists, for each thread that can step, in thread order,
  ``(thread, [(branch, successor), ...])`` with branches in the order the
  step declares them: the scheduler's canonical order, so the choice of a
  successor is ``(thread, branch)``. The groups are the lists the compiled
  step functions return, so the plain expansion allocates one small list per
  state and nothing per transition.
* A successor is a state tuple, or a :class:`~.._dsl.model.StepViolation`
  when taking the step exposes a bug: a search tests ``nxt.__class__ is
  tuple`` and reports the other kind as a violation *on* that step
  (length: the state's depth plus one).
* Under symmetry reduction every successor state is the canonical
  representative of its orbit. Under partial-order reduction ``moves`` may be
  one thread's moves only (an ample set), unless one of them is already
  known -- the cycle proviso C3, the BFS way (see :mod:`.reduce`).
* ``stuck`` is true when no thread has a move other than a spurious wakeup.
  It is computed on the full move set, so a reduction never hides a hang;
  a stuck state is judged by :func:`.verdict.terminal`.

The expander also carries the other per-state judgement a search makes:
:attr:`Expander.invariant`, the model's invariants (and the primitives'
own), or None when there are none, to run on every *new* state; a state that
fails one is an error state, reported and never expanded.

Counting transitions
--------------------
``transitions`` is the number of successors computed. A search that the
state cap cuts inside a state's successor list counts what
:func:`counted_at_cut` says: the plain BFS (and the distributed workers,
which reproduce it) counts thread by thread as it stores, so it counts the
groups up to the one it stopped in; a reduced search counts the whole state
when it expands it. The rule predates the shared expansion and is kept so
that counts stay what they were; keeping it in one function is what lets
the distributed search report the sequential count exactly.

Decisions, and why
------------------
*A call per state, not per transition.* The plain expansion is a closure
over the hoisted per-thread tables, and hands back the step functions' own
result lists. The call and the grouping cost the plain BFS about 5% of its
time (1.04 s against 1.10 s CPU for 288,500 states of the reference
prefetcher, the 5-item config of docs/parallel.md); a second, inlined copy
of the expansion in the explorer would win that back, and is exactly the
duplication this module exists to remove.

*Two variants of one rule.* Without spurious wakeups a state is stuck
exactly when nothing can move, so that case skips the per-thread spurious
test; with reductions the plain expansion runs first where the ample set
does not apply, and successors are canonicalised after it.
"""

from __future__ import annotations

import operator

from typing import Any, Callable, Container

from .._dsl.model import Machine, ModelError
from .reduce import Symmetry, ample_selector, check_reduce

__all__ = ["Expander", "Moves", "counted_at_cut"]

#: ``[(thread, [(branch, successor), ...]), ...]``: a state's moves, grouped by thread.
Moves = list[tuple[int, list[tuple[int, Any]]]]


class Expander:
    """The moves of a state under one machine and one reduction setting.

    ``reduce`` is ``none``, ``symmetry``, ``por`` or ``all``. ``known`` is the
    set of states the search has stored, which partial-order reduction's
    cycle proviso consults; the search assigns it (its ``parents`` dict)
    before it starts.
    """

    def __init__(self, machine: Machine, reduce: str = "none"):
        check_reduce(reduce)
        self.machine = machine
        self.symmetry = (Symmetry(machine) if reduce in ("symmetry", "all")
                         and any(len(g) > 1 for g in machine.symmetry) else None)
        self.canon: Callable[[tuple], tuple] | None = self.symmetry.canon if self.symmetry is not None else None
        self.ample = ample_selector(machine) if reduce in ("por", "all") else None
        #: True when a reduction is active (the search then counts transitions state by state).
        self.reduced = self.canon is not None or self.ample is not None
        #: States where only an ample subset was explored.
        self.por_reduced = 0
        self.known: Container = ()
        #: The invariant check for a new state, or None when the model declares none.
        self.invariant = machine.invariant_violation if machine.invariants else None
        pcs = machine.pc_index
        # (thread, pc field, step table, spurious-only pcs or None), hoisted out of every expansion.
        self.threads = [(t, pcs[t], machine.tables[t], machine.spurious_pcs[t] or None)
                        for t in range(len(machine.tables))]
        self._plain = self._plain_expand()
        self.expand: Callable[[tuple], tuple[Moves, bool]] = self._reduced if self.reduced else self._plain

    def root(self) -> tuple:
        """The initial state as the search stores it (its representative, under symmetry)."""
        init = self.machine.init
        return self.canon(init) if self.canon is not None else init

    def _plain_expand(self) -> Callable[[tuple], tuple[Moves, bool]]:
        """The expansion without reduction, as a closure over the hoisted table (one call per state).

        Without spurious wakeups a state is stuck exactly when no thread can move, so that
        common case skips the per-thread spurious test; both variants apply the same rule.
        """
        threads = self.threads
        if not any(sp for _t, _pi, _table, sp in threads):
            plain = tuple((t, pi, table) for t, pi, table, _sp in threads)

            def expand(state: tuple) -> tuple[Moves, bool]:
                moves = []
                for t, pi, table in plain:
                    fire = table.get(state[pi])
                    if fire is not None:
                        res = fire(state)
                        if res:
                            moves.append((t, res))
                return moves, not moves
            return expand

        def expand_spurious(state: tuple) -> tuple[Moves, bool]:
            moves = []
            stuck = True
            for t, pi, table, sp in threads:
                fire = table.get(state[pi])
                if fire is None:
                    continue
                res = fire(state)
                if not res:
                    continue
                if stuck and (sp is None or state[pi] not in sp):
                    stuck = False
                moves.append((t, res))
            return moves, stuck
        return expand_spurious

    def _reduced(self, state: tuple) -> tuple[Moves, bool]:
        canon = self.canon
        if self.ample is not None:
            picked = self.ample(state)
            if picked is not None:
                t, res = picked
                if canon is not None:
                    res = [(b, canon(n) if n.__class__ is tuple else n) for b, n in res]
                known = self.known
                # C3, the BFS way: if any ample successor is already known, expand fully.
                if not any(n.__class__ is tuple and n in known for _, n in res):
                    self.por_reduced += 1
                    return [(t, res)], False
        moves, stuck = self._plain(state)
        if canon is not None:
            moves = [(t, [(b, canon(n) if n.__class__ is tuple else n) for b, n in res]) for t, res in moves]
        return moves, stuck

    def successors(self, state: tuple) -> tuple[list[tuple[tuple[int, int], Any]], bool]:
        """``(successors, stuck)``: the moves flattened to ``((thread, branch), successor)``, in order."""
        moves, stuck = self.expand(state)
        return [((t, b), n) for t, res in moves for b, n in res], stuck


def counted_at_cut(moves: Moves, position: int, reduced: bool) -> int:
    """Transitions a search counts for a state whose successor number ``position`` the state cap cut.

    A reduced search counts every move of the state; the plain one counts the
    groups up to and including the one that holds successor ``position``.
    """
    if reduced:
        return sum(len(res) for _, res in moves)
    counted = 0
    for _t, res in moves:
        counted += len(res)
        if counted > position:
            break
    return counted


def check_max_states(max_states: int) -> int:
    # An int, not any number: NaN compares false with every count, so max_states=nan disabled the
    # cap without a word, and True or 1.5 passed for a count.
    try:
        if isinstance(max_states, bool):
            raise TypeError
        max_states = operator.index(max_states)  # an int, or numpy's
    except TypeError:
        raise ModelError(f"max_states must be an int, not {max_states!r}") from None
    if max_states < 1:
        raise ModelError("max_states must be at least 1")
    return max_states

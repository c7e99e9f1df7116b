"""State-space reductions that preserve verdicts: symmetry and partial-order reduction.

What is preserved: whether a violation is reachable, and the length of the shortest one. Not which one:
where shortest violations of different kinds exist, a reduced search meets them in another order than the
unreduced one (a representative's threads are renamed), and may report another of them, as real and as
short.

Symmetry
--------
A model may declare threads interchangeable (``m.symmetric("worker0",
"worker1", ...)``): same program, same initial locals, and nothing in the
model that depends on which of them is which. Permuting such threads maps
reachable states to reachable states and violations to violations, so the
explorer may store one representative per orbit. The representative
(:meth:`Symmetry.canon`) sorts the threads of each group by their block
(program counter and locals) and by where they appear in primitive state
(which mutex they own, where they sit in each condvar queue); thread
indices stored in mutexes and condvar queues are renamed to match. Two
threads with equal keys are indistinguishable, so the sort is canonical.
Distances are preserved, so BFS traces stay shortest; the explorer turns a
path of representatives back into a real schedule before reporting it.

Partial-order reduction
-----------------------
Each compiled step carries its footprint: the shared fields it reads and
writes (primitives know theirs; user steps get theirs from the rewriter in
``_fast.py``; a step that hands ``s`` to other code has an unknown
footprint and is never reduced). At a state, if some thread's current step
is *globally independent* -- nothing any other thread can ever do writes
what it reads, or touches what it writes -- and *invisible* (it writes
nothing an invariant reads), then exploring only that thread's enabled
moves is an ample set in the sense of Peled / Godefroid: conditions C0 (non
empty iff something is enabled), C1 (independence, here checked statically
against every step of every other thread) and C2 (invisibility) hold by
construction, and C3 (no move postponed forever around a cycle) is ensured
the BFS way: if any ample successor was already stored, the state is fully
expanded. Terminal states, invariant violations and step violations are
preserved; the test suite checks every catalog verdict under every setting.
"""

from __future__ import annotations

from typing import Callable

from .._dsl.model import Machine, ModelError

__all__ = ["REDUCTIONS", "Symmetry", "ample_selector"]

REDUCTIONS = ("none", "symmetry", "por", "all")


class Symmetry:
    """Canonical representatives for the declared groups of interchangeable threads."""

    def __init__(self, machine: Machine):
        self.groups = [g for g in machine.symmetry if len(g) > 1]
        m = machine
        n = len(m.thread_names)
        starts = list(m.pc_index) + [len(m.init)]
        self.blocks = [(m.pc_index[t], m.pc_index[t] + 1 + len(m.local_index[t])) for t in range(n)]
        for t in range(n):
            assert self.blocks[t][1] <= starts[t + 1]
        self.mutexes = sorted(m.mutex_index.values())
        self.conds = sorted(m.cond_index.values())
        self.groups_blocks = [[self.blocks[t] for t in g] for g in self.groups]
        self.fast_blocks = True if not self.mutexes and not self.conds else None

    def _key(self, state: tuple, t: int):
        a, b = self.blocks[t]
        owned = tuple(state[i] == t for i in self.mutexes)
        queued = tuple(state[i].index(t) if t in state[i] else -1 for i in self.conds)
        return state[a:b], owned, queued

    def canon_with_order(self, state: tuple) -> tuple[tuple, list[int]]:
        """``(representative, order)``: thread ``j`` of the representative is thread ``order[j]`` of ``state``."""
        n = len(self.blocks)
        order = list(range(n))
        changed = False
        for group in self.groups:
            try:
                ranked = sorted(group, key=lambda t: self._key(state, t))
            except TypeError:
                ranked = sorted(group, key=lambda t: repr(self._key(state, t)))
            for j, t in zip(group, ranked):
                if order[j] != t:
                    order[j] = t
                    changed = True
        if not changed:
            return state, order
        new_index = [0] * n
        for j, t in enumerate(order):
            new_index[t] = j
        s = list(state)
        for j, t in enumerate(order):
            if j != t:
                a, b = self.blocks[j]
                c, d = self.blocks[t]
                s[a:b] = state[c:d]
        for i in self.mutexes:
            if s[i] != -1:
                s[i] = new_index[s[i]]
        for i in self.conds:
            if s[i]:
                s[i] = tuple(new_index[x] for x in s[i])
        return tuple(s), order

    def canon(self, state: tuple) -> tuple:
        if self.fast_blocks is not None:
            # No mutex or condvar names threads: blocks alone decide, and equal blocks are
            # interchangeable outright, so sorting the blocks is the whole job.
            for group in self.groups_blocks:
                blocks = [state[a:b] for a, b in group]
                try:
                    ordered = sorted(blocks)
                except TypeError:
                    return self.canon_with_order(state)[0]
                if ordered != blocks:
                    s = list(state)
                    for (a, b), blk in zip(group, ordered):
                        s[a:b] = blk
                    state = tuple(s)
            return state
        return self.canon_with_order(state)[0]


def ample_selector(machine: Machine) -> Callable | None:
    """A function state -> ``(thread, moves)`` forming an ample set there, or None (expand fully).

    Returns None altogether when no step of the model can ever be reduced.
    """
    n = len(machine.thread_names)
    everything = frozenset(range(len(machine.init)))
    # Union of footprints of all steps of each thread; unknown means everything.
    reads_of: list[frozenset[int]] = []
    writes_of: list[frozenset[int]] = []
    for t in range(n):
        r: set[int] = set()
        w: set[int] = set()
        for info in machine.infos[t].values():
            if info.kind == "asleep":
                continue
            fp = info.footprint
            if fp is None:
                r |= everything
                w |= everything
            else:
                r |= fp[0]
                w |= fp[1]
        reads_of.append(frozenset(r))
        writes_of.append(frozenset(w))
    visible: set[int] = set()
    for _name, _kind, pred, raw in machine._fast_invariants:
        fp = getattr(pred, "__footprint__", None)
        if fp is None:
            visible = set(everything)
            break
        visible |= fp[0]
    safe: list[frozenset[str]] = []
    for t in range(n):
        others_r = frozenset().union(*(reads_of[u] for u in range(n) if u != t))
        others_w = frozenset().union(*(writes_of[u] for u in range(n) if u != t))
        ok = set()
        for pc, info in machine.infos[t].items():
            if info.kind in ("asleep", "spurious") or info.footprint is None:
                continue
            r, w = info.footprint
            if w & (others_r | others_w) or r & others_w or w & visible:
                continue
            ok.add(pc)
        safe.append(frozenset(ok))
    if not any(safe):
        return None
    pcs = machine.pc_index
    tables = machine.tables

    def select(state: tuple):
        """``(thread, moves)`` of the first thread whose current step is safe and enabled, or None."""
        for t in range(n):
            pc = state[pcs[t]]
            if pc in safe[t]:
                moves = tables[t][pc](state)
                if moves:
                    return t, moves
        return None

    return select


def check_reduce(name: str) -> str:
    if name not in REDUCTIONS:
        raise ModelError(f"unknown reduction {name!r} (known: {', '.join(REDUCTIONS)})")
    return name

"""The explorer over fingerprints: the same BFS, the same verdicts and traces, a fraction of the memory.

:class:`FingerprintExplorer` is :class:`~.explore.Explorer` with its visited
set replaced by a :class:`~.fingerprint.FingerprintTable` and its frontier by
a :class:`~.fingerprint.Frontier`. It expands a level in chunks: each
state's moves are taken from the shared expansion in canonical order, the
successors' fingerprints are deduplicated against the table in one
vectorized batch (first occurrence wins, as ``dict.setdefault`` makes it win
in the full explorer), and then the chunk is replayed in encounter order:
a step violation, a new state that breaks an invariant, a new state for the
next level. So the first violation of the shortest length, the state count
and the transition count are the full explorer's (tests/test_fingerprint.py
compares them on the whole catalog). Only the state cap cuts differently:
at a chunk's end, never inside a state; the result is then non-exhaustive
either way.

Paths are rebuilt from the parent fingerprints (:meth:`path_to`).
"""

from __future__ import annotations

import itertools
import time
from marshal import dumps
from typing import Any

import numpy as np

from .._dsl.model import Machine
from .cutoff import cut_short, not_shortest
from .explorer import DEFAULT_MAX_STATES, Explorer
from .fingerprint import FingerprintTable, Frontier, collision_probability, fingerprinter
from .liveness import STARVATION_CAPPED, bounded_starvation
from .result import CheckResult
from .verdict import terminal

__all__ = ["FingerprintExplorer", "DEFAULT_FRONTIER_STATES"]

#: States kept in memory per BFS level before the level spills to disk. A state is a few hundred
#: bytes as a tuple; a million of them is a few hundred MB, small next to what a search that needs
#: fingerprints stores, and large enough that most models never touch the disk.
DEFAULT_FRONTIER_STATES = 1_000_000

#: Expanded states per vectorized batch: large enough that numpy's per-call cost is amortized,
#: small enough that the batch's successor tuples stay a few MB.
_CHUNK = 4096
#: New states one chunk may add, at most, for the memory budget's look-ahead.
_MARGIN = 16 * _CHUNK


class _Known:
    """The visited set as partial-order reduction's cycle proviso asks it: ``state in known``.

    The full explorer stores a successor the moment it is generated; here the
    chunk's successors are stored at its end, so those generated so far in the
    chunk (``pending``) count as known too, and the proviso answers as there.
    """

    def __init__(self, table: FingerprintTable, fingerprint: Any):
        self.table = table
        self.fingerprint = fingerprint
        self.pending: dict[tuple, int] = {}

    def __contains__(self, state: tuple) -> bool:
        return state in self.pending or self.fingerprint(state) in self.table


class FingerprintExplorer(Explorer):
    """BFS over 64-bit fingerprints (strategy ``bfs`` only). ``frontier_states`` bounds a level in memory."""

    def __init__(self, machine: Machine, *, max_states: int = DEFAULT_MAX_STATES,
                 frontier_states: int | None = None, **kw: Any):
        super().__init__(machine, strategy="bfs", max_states=max_states, **kw)
        if frontier_states is None:
            # With a budget, the two levels in memory may take an eighth of it, at a generous
            # 400 bytes a state tuple; the table and the interpreter have the rest.
            frontier_states = DEFAULT_FRONTIER_STATES if self.memory is None else \
                max(1_000, min(DEFAULT_FRONTIER_STATES, self.memory // 8 // 400))
        self.frontier_states = frontier_states
        self.table = FingerprintTable()
        self.fingerprint = fingerprinter(machine.init)
        self.spilled = 0
        self.peak_frontier = 0

    # -- paths ----------------------------------------------------------------

    def path_to(self, state: tuple) -> tuple[list[tuple], list[tuple[int, int]]]:
        """The real path to ``state``: its chain of parent fingerprints, replayed from the initial state."""
        chain = [self.fingerprint(state)]
        while (p := self.table.parent(chain[-1])) != 0:
            chain.append(p)
        chain.reverse()
        return self.walk(chain[1:], self.fingerprint)

    # -- search -------------------------------------------------------------------

    def _run(self) -> CheckResult:
        m = self.machine
        t0 = time.perf_counter()
        self._root = self.expander.root()
        self.table.add_root(self.fingerprint(self._root))
        self.known = self.expander.known = _Known(self.table, self.fingerprint)
        found: list[tuple[int, Any]] = []
        exhaustive = True
        bad = m.invariant_violation(m.init)
        if bad:
            found.append((0, self.violation_at(self._root, bad)))
        else:
            exhaustive = self._bfs(found)
        if found and self.ample is not None and self.stop_at_first:
            again = FingerprintExplorer(m, max_states=self.max_states, frontier_states=self.frontier_states,
                                        reduce="symmetry" if self.canon is not None else "none",
                                        memory=self.memory).run()
            if again.violation is not None:
                return again
            exhaustive = not_shortest(self, again)  # as Explorer does
        if not found and exhaustive and m.progress_labels:
            lasso, exhaustive = bounded_starvation(m, self.max_states)  # the policy's own graph, as in Explorer
            if not exhaustive:
                self.stop_detail = STARVATION_CAPPED
            if lasso is not None:
                found.append((len(lasso.trace), lasso))
        violation = min(found, key=lambda x: x[0])[1] if found else None
        self.violations = [v for _, v in found]
        n = len(self.table)
        certain = exhaustive or (violation is not None and not self.longer)
        return CheckResult(
            model=m.name, config=dict(m.config), strategy="bfs", exhaustive=certain,
            verdict=violation.kind if violation else "ok", states=n, transitions=self.transitions,
            seconds=time.perf_counter() - t0, violation=violation, max_depth=self._max_depth,
            store="fingerprint", collision_probability=collision_probability(n, self.transitions + 1),
            **self._stop_fields(certain))

    def _bfs(self, found: list) -> bool:
        expand, check_inv = self.expander.expand, self.expander.invariant
        stop, report, table = self.stop_at_first, self._reporter(), self.table
        level = nxt_level = Frontier(self.frontier_states)
        level.append(self._root, self.fingerprint(self._root))
        depth = transitions = 0
        # The loops end in no ``if`` and test no ``while`` condition: on 3.13 a Ctrl-C at such a
        # back-edge skips the ``finally`` that removes the spilled levels (lowlevel.escaping_back_edges).
        try:
            while True:
                if not len(level):
                    break
                nxt_level = Frontier(self.frontier_states)
                self.on_step_found = False
                chunk: list[tuple[tuple, int]] = []
                items = iter(level)
                for item in items:
                    chunk.append(item)
                    if len(chunk) < _CHUNK:
                        continue
                    if self.budget is not None and self._over_budget(len(table), table.growth_soon(_MARGIN)):
                        return cut_short(self, _states(chunk, items), depth, transitions, found)
                    transitions, done = self._chunk(chunk, depth, transitions, nxt_level, found, check_inv,
                                                    expand)
                    chunk = []
                    if done is False:  # cut by the cap: this chunk is judged, the rest of the level is not
                        return cut_short(self, _states((), items), depth, transitions, found)
                    if done is not None:
                        return done
                    if report is None:
                        continue
                    report(len(table), len(nxt_level) + len(level), transitions)
                if chunk:
                    if self.budget is not None and self._over_budget(len(table), table.growth_soon(_MARGIN)):
                        return cut_short(self, _states(chunk, ()), depth, transitions, found)
                    transitions, done = self._chunk(chunk, depth, transitions, nxt_level, found, check_inv, expand)
                    if done is not None:
                        return done
                self.spilled += nxt_level.spilled
                self.peak_frontier = max(self.peak_frontier, len(level) + len(nxt_level))
                self._stopped(depth, transitions, True)
                if self.on_step_found and stop:
                    return True
                level.close()
                level = nxt_level
                depth += 1
            self.transitions = transitions
            return True
        finally:
            level.close()
            nxt_level.close()

    def _chunk(self, chunk: list[tuple[tuple, int]], depth: int, transitions: int, nxt_level: Frontier,
               found: list, check_inv: Any, expand: Any) -> tuple[int, bool | None]:
        """Expand ``chunk`` (states of one level with their fingerprints, in order); returns
        (transitions, None or the search's result)."""
        stop = self.stop_at_first
        # The chunk's distinct successors, in encounter order, each with the index in ``chunk`` of
        # the first state that reached it. A later duplicate can never be new, so only these are
        # fingerprinted; the dict compares states by ==, exactly.
        seen: dict[tuple, int] = {}
        setdefault = seen.setdefault
        # Step violations and stuck states, rare, with the number of distinct successors met
        # before them: the replay below puts them back in encounter order.
        specials: list[tuple] = []
        machine = self.machine
        if self.ample is not None:
            self.known.pending = seen  # the cycle proviso asks about these before they are stored
        for k, (state, _) in enumerate(chunk):
            moves, stuck = expand(state)
            for t, res in moves:
                transitions += len(res)
                for b, nxt in res:
                    if nxt.__class__ is not tuple:
                        specials.append((len(seen), state, (t, b), nxt))
                        continue
                    setdefault(nxt, k)
            if stuck:
                specials.append((len(seen), state, None, None))
                if stop and terminal(machine, state) is not None:
                    break  # the full explorer stops right after this state: so does the chunk
        succ = list(seen)
        fps = fingerprints(succ, self.fingerprint)
        parents = np.fromiter((chunk[k][1] for k in seen.values()), np.uint64, len(succ))
        room = self.max_states - len(self.table)
        limit = room if len(succ) > room else None
        new = self.table.add_new(fps, parents, limit)
        # Cut only when a new state found no room, as the full explorer does: a chunk that fills
        # the table exactly, or meets only known states once it is full, is not cut.
        cut = self.table.refused > 0
        if check_inv is None and not specials:
            idx = np.flatnonzero(new)
            nxt_level.extend([succ[i] for i in idx.tolist()], fps[idx].tolist())
        else:
            specials.append((len(succ), None, None, None))
            at = 0
            for upto, state, choice, v in specials:
                for i in np.flatnonzero(new[at:upto]).tolist():
                    nxt = succ[at + i]
                    if check_inv is not None:
                        bad = check_inv(nxt)
                        if bad:
                            if not self.on_step_found or not stop:
                                found.append((depth + 1, self.violation_at(nxt, bad)))
                                self.on_step_found = True
                            continue
                    nxt_level.append(nxt, int(fps[at + i]))
                at = upto
                if state is None:
                    break
                if choice is not None:
                    if not self.on_step_found or not stop:
                        found.append((depth + 1, self.violation_on(state, choice, v)))
                        self.on_step_found = True
                elif self._terminal(state, depth, found) and stop:
                    return transitions, self._stopped(depth, transitions, True)
        if cut:
            return transitions, self._stopped(depth, transitions, False)
        return transitions, None


def _states(chunk: Any, items: Any) -> Any:
    """The states of a level's unexpanded rest: ``chunk``'s, then those ``items`` has not yet yielded."""
    return (state for state, _ in itertools.chain(chunk, items))


def fingerprints(states: list[tuple], fingerprint: Any) -> np.ndarray:
    """The fingerprints of ``states`` as ``uint64``, computed in one pass."""
    if getattr(fingerprint, "marshal_first", False):
        try:  # the common case inlined: no Python call per state
            raw = [hash(dumps(s, 2)) for s in states]
        except ValueError:
            raw = [fingerprint(s) for s in states]
    else:
        raw = [fingerprint(s) for s in states]
    arr = np.array(raw, np.int64).view(np.uint64) if raw and min(raw) < 0 else np.array(raw, np.uint64)
    arr[arr == 0] = 1
    return arr

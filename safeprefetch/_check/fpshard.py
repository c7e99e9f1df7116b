"""One worker of the distributed search in fingerprint mode: its shard of the visited set as 64-bit fingerprints.

What it guarantees
------------------
:class:`FingerprintWorker` is :class:`~.shard.Worker` with the visited set
swapped: instead of a dict from state to discovery key, with every state
kept, it holds a :class:`~.fingerprint.FingerprintTable` from each owned
state's fingerprint to its BFS parent's fingerprint -- TLC's layout, about
24 bytes a state -- and only the states of the level being expanded are
kept whole. Everything else is the full worker's: the same expansion in
serial order, the same discovery keys, the same key-order insertion (first
occurrence of a fingerprint, in key order, is the parent sequential BFS
keeps), the same ranks, cap and invariant checks. So the states, the
transitions, the depth, the verdict and the trace are the sequential
search's, unless two states share a fingerprint: then the second is taken
for the first, as in :class:`~.fpsearch.FingerprintExplorer`, and the result
carries TLC's estimate of the chance of that.

The fingerprint is :func:`~.fingerprint.stable_fingerprint` (BLAKE2b over
the marshal bytes), which every process computes alike, and it is also the
route: the owner of a state is its fingerprint modulo P. So the fingerprint
a sender computes to route a state is the one its owner stores, and a
parent's owner is known from its fingerprint alone: a counterexample is
rebuilt by asking the owner of each fingerprint for its parent
(:meth:`parent_of`), from the violating state back to the root, and the
coordinator replays the chain as :meth:`~.fpsearch.FingerprintExplorer.path_to`
does.

The state cap: the table is filled before ranks are known, so a level the
cap cuts leaves the fingerprints past the cap in the table. They are never
asked for (the search stops at the cut, and no violation past it is
reported), and the state count is the coordinator's sum of kept states, not
the table's size.
"""

from __future__ import annotations

import pickle
import numpy as np

from .._dsl.model import Machine
from .fingerprint import FingerprintTable
from .shard import RADIX, Link, Stamp, Worker, clock

__all__ = ["FingerprintWorker"]


class FingerprintWorker(Worker):
    """One shard over fingerprints: the table, and the serials and fingerprints of the last level's states."""

    def __init__(self, me: int, nproc: int, machine: Machine, reduce: str, link: Link):
        super().__init__(me, nproc, machine, reduce, link)
        self.table = FingerprintTable()
        #: The serials (ascending) and fingerprints of the states stored in the last level: the
        #: parents of the next level's successors.
        self.level_serials = np.zeros(0, np.int64)
        self.level_fps = np.zeros(0, np.uint64)
        self._new_fps = np.zeros(0, np.uint64)

    def seed(self, init: tuple) -> bool:
        fp = self.route(init)
        if self.nproc > 1 and fp % self.nproc != self.me:
            return False
        self.table.add_root(fp)
        self.level_serials = np.zeros(1, np.int64)
        self.level_fps = np.array([fp], np.uint64)
        self.frontier = [(0, init)]
        return True

    def _fingerprints(self, states: list[tuple]) -> np.ndarray:
        return np.fromiter(map(self.route, states), np.uint64, len(states))

    def _exchange(self, successors: dict[tuple, int]) -> tuple[list[tuple], list[int], Stamp, Stamp]:
        """Route successors by fingerprint, with their keys and parents' fingerprints; keep the new ones.

        ``successors`` iterates in key order (each state was inserted at its smallest key), so
        with one worker there is nothing to sort.
        """
        states = list(successors)
        keys = np.fromiter(successors.values(), np.int64, len(states))
        successors.clear()
        fps = self._fingerprints(states)
        parents = self.level_fps[np.searchsorted(self.level_serials, keys // RADIX)]
        routed = received = clock()
        if self.nproc > 1:
            states, keys, fps, parents, routed, received = self._route(states, keys, fps, parents)
        new = np.flatnonzero(self.table.add_new(fps, parents))
        self._new_fps = fps[new]
        return [states[i] for i in new.tolist()], keys[new].tolist(), routed, received

    def _route(self, states: list[tuple], keys: np.ndarray, fps: np.ndarray,
               parents: np.ndarray) -> tuple[list[tuple], np.ndarray, np.ndarray, np.ndarray, Stamp, Stamp]:
        """Send each successor to the owner of its fingerprint; return ours and the received, in key order."""
        nproc = self.nproc
        owners = (fps % np.uint64(nproc)).astype(np.intp)
        parts = [np.flatnonzero(owners == w) for w in range(nproc)]
        self._send_all("batch", lambda w: ([states[i] for i in parts[w].tolist()], keys[parts[w]].tobytes(),
                                           fps[parts[w]].tobytes(), parents[parts[w]].tobytes()))
        mine = parts[self.me]
        all_states = [states[i] for i in mine.tolist()]
        all_keys, all_fps, all_parents = [keys[mine]], [fps[mine]], [parents[mine]]
        routed = clock()
        got = self._recv("batch", nproc - 1)
        received = clock()
        for _, _, blob in got:
            their_states, k, f, p = pickle.loads(blob)
            all_states += their_states
            all_keys.append(np.frombuffer(k, np.int64))
            all_fps.append(np.frombuffer(f, np.uint64))
            all_parents.append(np.frombuffer(p, np.uint64))
        keys = np.concatenate(all_keys)
        order = np.argsort(keys, kind="stable")
        states = [all_states[i] for i in order.tolist()]
        return (states, keys[order], np.concatenate(all_fps)[order], np.concatenate(all_parents)[order],
                routed, received)

    def _store(self, new: list[tuple], kept: int, serials: list[int]) -> None:
        # The table already holds them (see the module essay); what the next level needs are the
        # kept states' serials and fingerprints, to name its successors' parents.
        self.level_serials = np.array(serials, np.int64)
        self.level_fps = self._new_fps[:kept]

    def parent_of(self, fp: int) -> int | None:
        """The parent fingerprint of ``fp`` (0 for the root), or None if this worker does not hold it."""
        try:
            return self.table.parent(fp)
        except KeyError:
            return None

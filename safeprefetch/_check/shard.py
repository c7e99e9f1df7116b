"""One worker of the distributed search: it owns one shard of the visited set.

What it guarantees
------------------
A :class:`Worker` stores exactly the states ``s`` with ``h(s) % P == me``
and expands exactly those, in the order sequential BFS would (ascending
*serial*, the state's index in the sequential ``parents`` dict). Every
discovery gets a *key*, ``serial(parent) * RADIX + position``, where
``position`` counts the parent's successors -- step violations included --
in the canonical order of the shared expansion
(:class:`~.expand.Expander`). Inserting discoveries in key order keeps the
parent sequential BFS keeps; ranking keys across workers gives every new
state its global serial. :mod:`.distributed` has the whole argument, and
the coordinator's side.

The worker judges states with the same functions as the explorer: the
expansion (with symmetry, when asked), the invariants of a new state, and
the shared terminal classifier (:func:`.verdict.terminal`). What it cannot
judge alone -- a hang's kind, which needs the path -- it reports as
:data:`~.verdict.HANG` with the state's serial, and the coordinator
classifies it along the rebuilt path.

The worker does not know how messages travel. It is handed a *link* with
two methods: ``send_all({worker: message})``, which hands one message to
each peer without waiting for it to arrive, and ``receive()``, which blocks
for the next message addressed to it. No level ends before every worker has
received the messages addressed to it, so the coordinator's barrier also
covers delivery. The cluster search (:mod:`.cluster`) implements them with
dask actors calling each other; a test can implement them with lists. A
message is ``(kind, sender, payload)`` with a pickled payload, so the bytes
on the wire are this module's to count.

States go to their owner by :func:`~.fingerprint.stable_fingerprint`
(modulo P), which every process computes alike: dask workers do not share
a hash secret, so ``hash(state)`` would send one state to two owners.

One level has six phases, timed for the benchmark (``timing``): expand
this worker's slice into a per-level dict of successors (dropping the many
duplicates one level produces); route each distinct successor to its owner
and receive the others' (``route``, ``wait``); insert in key order
(``merge``); exchange the sorted keys of the new states to rank them
(``rank``); then keep what the state cap allows and check invariants
(``commit``). Each phase is timed twice: wall-clock seconds (``"expand"``),
which include waiting for peers and, on a shared machine, for a core; and
this thread's CPU seconds (``"expand cpu"``), the work itself.
"""

from __future__ import annotations

import gc
import pickle
import time
from array import array
from bisect import bisect_left
from typing import Any, Iterable, Protocol

from .._dsl.model import Machine, ModelError
from .expand import Expander, counted_at_cut
from .fingerprint import stable_fingerprinter
from .verdict import terminal

__all__ = ["RADIX", "Link", "Worker", "clock"]

#: Radix of discovery keys: ``key = serial(parent) * RADIX + position of the successor``.
#: 2**16 leaves room for 65,535 successors of one state (catalog models have fewer than
#: 20) while keys stay below 2**63 for up to 2**47 states, so they fit int64 arrays.
RADIX = 1 << 16

_PICKLE = pickle.HIGHEST_PROTOCOL


#: A moment, as :func:`clock` gives it.
Stamp = tuple[float, float]


def clock() -> Stamp:
    """Wall-clock and this thread's CPU seconds: a phase's time, and its work on a shared machine."""
    return time.perf_counter(), time.thread_time()


class Link(Protocol):
    """How a worker reaches its peers (see the module essay)."""

    def send_all(self, messages: dict[int, tuple]) -> None: ...

    def receive(self) -> tuple: ...


class Worker:
    """One shard: its states, their discovery keys and serials, and its part of the frontier."""

    def __init__(self, me: int, nproc: int, machine: Machine, reduce: str, link: Link):
        self.me = me
        self.nproc = nproc
        self.machine = machine
        self.expander = Expander(machine, reduce)
        assert self.expander.ample is None, "partial-order reduction is not distributed"
        #: The owner of state ``s`` is ``route(s) % nproc``: the same in every process.
        self.route = stable_fingerprinter(self.expander.root())
        self.link = link
        #: Bytes this worker sent to its peers (pickled batches and keys), for the benchmark.
        self.sent_bytes = 0
        #: state -> discovery key (``serial(parent) * RADIX + position``; -1 for the initial state).
        self.parents: dict[tuple, int] = {}
        #: The serials of this worker's states, ascending, and the states themselves, in step.
        self.serials = array("q")
        self.states: list[tuple] = []
        #: This worker's part of the current level: (serial, state), ascending serial.
        self.frontier: list[tuple[int, tuple]] = []
        self.expanded: list[tuple[int, tuple]] = []  # the last level expanded, for upto()
        self.new_keys: list[int] = []  # the keys of the last level's new states, ascending
        self.pending: list[tuple] = []  # messages from peers that belong to a later phase

    # -- messages between workers ---------------------------------------------

    def _recv(self, kind: str, count: int) -> list[tuple]:
        got = [m for m in self.pending if m[0] == kind]
        self.pending = [m for m in self.pending if m[0] != kind]
        while len(got) < count:
            msg = self.link.receive()
            (got if msg[0] == kind else self.pending).append(msg)
        return got

    def _send_all(self, kind: str, payloads) -> None:
        messages = {}
        for w in range(self.nproc):
            if w != self.me:
                blob = pickle.dumps(payloads(w), _PICKLE)
                self.sent_bytes += len(blob)
                messages[w] = (kind, self.me, blob)
        self.link.send_all(messages)

    # -- commands from the coordinator ------------------------------------------

    def seed(self, init: tuple) -> bool:
        if self.nproc > 1 and self.route(init) % self.nproc != self.me:
            return False
        self.parents[init] = -1
        self.serials.append(0)
        self.states.append(init)
        self.frontier = [(0, init)]
        return True

    def level(self, stored: int, remaining: int) -> dict[str, Any]:
        """Expand this worker's part of one level; exchange; number and keep the new states."""
        c0, t0, sent0 = time.process_time(), clock(), self.sent_bytes
        successors, transitions, term, step = self._expand_slice()
        t1 = clock()
        new, self.new_keys, t_routed, t_received = self._exchange(successors)
        t3 = clock()
        ranks = self._ranks(self.new_keys)
        t4 = clock()
        kept, cut, inv = self._commit(new, ranks, stored, remaining)
        first = min((c for c in (step, inv) if c is not None), key=lambda c: c[1], default=None)
        t5 = clock()
        # The immutable states stored so far need no more cyclic-GC scans: freezing them keeps
        # full collections from rescanning the whole visited set (about 9% faster at 300k states).
        gc.freeze()
        timing = {"cpu": time.process_time() - c0, "bytes sent": self.sent_bytes - sent0}
        marks = (("expand", t0), ("route", t1), ("wait", t_routed), ("merge", t_received), ("rank", t3),
                 ("commit", t4), ("", t5))
        for (phase, (w0, c0)), (_, (w1, c1)) in zip(marks, marks[1:]):
            timing[phase], timing[f"{phase} cpu"] = w1 - w0, c1 - c0
        return {"new": kept, "transitions": transitions, "frontier": len(self.frontier), "term": term,
                "on": first, "cut": cut, "timing": timing}

    def _expand_slice(self) -> tuple[dict[tuple, int], int, tuple | None, tuple | None]:
        """Expand this worker's frontier in serial order.

        Returns ``(successors, transitions, term, step)``: every distinct successor state with
        its smallest discovery key (in key order); the transitions taken; the first terminal
        violation ``(serial, state, verdict)``, after which nothing later in the slice can
        matter; the first step violation ``("step", key, serial, state, choice)``.
        """
        expand = self.expander.expand
        machine = self.machine
        successors: dict[tuple, int] = {}
        add = successors.setdefault
        transitions = 0
        term = step = None
        self.expanded = self.frontier
        for serial, state in self.frontier:
            key = base = serial * RADIX - 1  # the key of the successor last seen
            moves, stuck = expand(state)
            for t, res in moves:
                transitions += len(res)
                for b, nxt in res:
                    key += 1
                    if nxt.__class__ is not tuple:
                        if step is None:
                            step = ("step", key, serial, state, (t, b))
                        continue
                    add(nxt, key)
            if key - base >= RADIX:
                raise ModelError(f"a state has {key - base} successors; "
                                 f"the distributed search handles at most {RADIX - 1}")
            if stuck:
                verdict = terminal(machine, state)
                if verdict is not None:
                    term = (serial, state, verdict)
                    break
        return successors, transitions, term, step

    def _exchange(self, successors: dict[tuple, int]) -> tuple[list[tuple], list[int], Stamp, Stamp]:
        """Route successors to their owners, receive ours, and insert them in key order.

        Returns this level's new states and their keys (ascending), and when routing and
        receiving ended. With one worker the successors are ours and already in key order.
        """
        if self.nproc == 1:
            now = clock()
            return (*self._insert(successors.items()), now, now)
        import numpy as np

        nproc, h = self.nproc, self.route
        out_states: list[list[tuple]] = [[] for _ in range(nproc)]
        out_keys = [array("q") for _ in range(nproc)]
        for nxt, key in successors.items():
            w = h(nxt) % nproc
            out_states[w].append(nxt)
            out_keys[w].append(key)
        successors.clear()
        self._send_all("batch", lambda w: (out_states[w], out_keys[w].tobytes()))
        states, keys = out_states[self.me], out_keys[self.me]
        out_states = out_keys = []
        routed = clock()
        # Unpickling and merging build nothing but tuples, which cannot form reference
        # cycles: no need for the cyclic GC to watch them being made.
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            got = self._recv("batch", nproc - 1)
            received = clock()
            for _, _, blob in got:
                their_states, their_keys = pickle.loads(blob)
                states += their_states
                keys.frombytes(their_keys)
            del got
            # Every part is in key order. Inserting the union in key order makes the first
            # insertion of a state its earliest discovery (the parent sequential BFS keeps),
            # and leaves this level's new states sorted by key. Keys are unique, so any sort
            # will do; timsort merges the P ascending runs in linear time.
            order = np.argsort(np.frombuffer(keys, dtype=np.int64), kind="stable")
            in_order = np.frombuffer(keys, dtype=np.int64)[order].tolist()
            new, new_keys = self._insert((states[j], k) for j, k in zip(order.tolist(), in_order))
        finally:
            if gc_was_on:
                gc.enable()
        return new, new_keys, routed, received

    def _insert(self, discoveries: Iterable[tuple[tuple, int]]) -> tuple[list[tuple], list[int]]:
        """Store each ``(state, key)`` not stored yet; return the new states and their keys."""
        parents = self.parents
        setdefault = parents.setdefault
        new: list[tuple] = []
        new_keys: list[int] = []
        for nxt, key in discoveries:
            n = len(parents)
            setdefault(nxt, key)  # one hash: inserts only if new
            if len(parents) != n:
                new.append(nxt)
                new_keys.append(key)
        return new, new_keys

    def _commit(self, new: list[tuple], ranks, stored: int,
                remaining: int) -> tuple[int, int | None, tuple | None]:
        """Number the new states, keep those within the cap, check invariants; the next frontier.

        Returns ``(kept, cut, inv)``: how many were kept, the key of the first state the cap
        refused (None if none), and the first invariant violation ``("inv", key, serial, state,
        (kind, message))``.
        """
        # Ranks ascend with keys, so the states within the cap are a prefix: sequential BFS stops
        # before storing the state of global rank ``remaining``, held by whoever holds that rank.
        kept = bisect_left(ranks, remaining)
        cut = self.new_keys[kept] if kept < len(ranks) and ranks[kept] == remaining else None
        serials = [stored + r for r in ranks[:kept]]
        self._store(new, kept, serials)
        check_inv = self.expander.invariant
        if check_inv is None:
            self.frontier = list(zip(serials, new[:kept]))
            return kept, cut, None
        frontier: list[tuple[int, tuple]] = []
        inv = None
        for key, x, serial in zip(self.new_keys, new[:kept], serials):
            bad = check_inv(x)
            if bad:  # an error state: stored and reported, never expanded
                if inv is None:
                    inv = ("inv", key, serial, x, bad)
                continue
            frontier.append((serial, x))
        self.frontier = frontier
        return kept, cut, inv

    def _store(self, new: list[tuple], kept: int, serials: list[int]) -> None:
        """Keep the first ``kept`` new states (numbered ``serials``); forget the others (over the cap)."""
        parents = self.parents
        for x in new[kept:]:
            del parents[x]
        self.serials.extend(serials)
        self.states.extend(new[:kept])

    def _ranks(self, keys: list[int]) -> Any:
        """Global rank of each of this worker's new keys (sorted) among every worker's new keys."""
        if self.nproc == 1:
            return list(range(len(keys)))
        import numpy as np

        mine = np.array(keys, dtype=np.int64)
        self._send_all("keys", lambda w, b=mine.tobytes(): b)
        ranks = np.arange(len(keys), dtype=np.int64)
        for _, _, blob in self._recv("keys", self.nproc - 1):
            ranks += np.searchsorted(np.frombuffer(pickle.loads(blob), dtype=np.int64), mine)
        return ranks.tolist()

    def upto(self, key: int) -> tuple[int, int]:
        """(new states, transitions) of the last level that sequential BFS had when it reached ``key``.

        ``key % RADIX == RADIX - 1`` means "after expanding state ``key // RADIX`` entirely";
        otherwise sequential BFS stopped on that successor and counted what
        :func:`~.expand.counted_at_cut` says. Called once, when a search stops inside a level;
        it re-expands that level's states up to ``key``, which this worker has all expanded (it
        stops early only at a terminal violation, and then the coordinator never asks past it).
        """
        last, position = divmod(key, RADIX)
        expand, reduced = self.expander.expand, self.expander.reduced
        transitions = 0
        for serial, state in self.expanded:
            if serial > last:
                break
            moves, _stuck = expand(state)
            if serial == last and position != RADIX - 1:
                transitions += counted_at_cut(moves, position, reduced)
            else:
                transitions += sum(len(res) for _, res in moves)
        return bisect_left(self.new_keys, key + 1), transitions

    def chain(self, serial: int) -> tuple[list[tuple], int] | None:
        """States from serial ``serial`` back through its parents while they are ours; then the next serial."""
        serials = self.serials
        j = bisect_left(serials, serial)
        if j == len(serials) or serials[j] != serial:
            return None
        out = []
        while True:
            s = self.states[j]
            out.append(s)
            key = self.parents[s]
            if key < 0:
                return out, -1
            ps = key // RADIX
            j = bisect_left(serials, ps)
            if j == len(serials) or serials[j] != ps:
                return out, ps


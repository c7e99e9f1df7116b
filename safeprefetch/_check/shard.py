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

One level has four phases, timed for the benchmark (``timing``): expand
this worker's slice into a per-level dict of successors (dropping the many
duplicates one level produces); route each distinct successor to its owner
and receive the others' (``route``, ``wait``); insert in key order
(``merge``); exchange the sorted keys of the new states to rank them
(``rank``); then keep what the state cap allows and check invariants
(``commit``).
"""

from __future__ import annotations

import gc
import os
import pickle
import queue
import signal
import time
import traceback
import zlib
from array import array
from bisect import bisect_left
from typing import Any, Iterable, Mapping

from .._dsl.model import Machine, ModelError
from .expand import Expander, counted_at_cut
from .modelref import ModelRef
from .verdict import terminal

__all__ = ["PARTITIONS", "RADIX", "Worker", "crc_hash", "worker_main"]

#: Radix of discovery keys: ``key = serial(parent) * RADIX + position of the successor``.
#: 2**16 leaves room for 65,535 successors of one state (catalog models have fewer than
#: 20) while keys stay below 2**63 for up to 2**47 states, so they fit int64 arrays.
RADIX = 1 << 16

#: How the owner of a state is computed: ``"hash"`` (Python's hash; needs ``fork``, so that
#: every worker shares the hash secret) or ``"crc32"`` (of ``repr(state)``; works anywhere).
PARTITIONS = ("hash", "crc32")

#: Seconds between liveness checks while a process waits on a queue: how quickly a worker
#: notices that its coordinator is gone, and the coordinator that a worker died.
POLL = 0.5


def crc_hash(state: tuple) -> int:
    """The deterministic partition hash: stable across processes and machines."""
    return zlib.crc32(repr(state).encode())


class Worker:
    """One shard: its states, their discovery keys and serials, and its part of the frontier."""

    def __init__(self, me: int, nproc: int, machine: Machine, reduce: str, partition: str,
                 inboxes: list, parent_pid: int):
        self.me = me
        self.nproc = nproc
        self.machine = machine
        self.expander = Expander(machine, reduce)
        assert self.expander.ample is None, "partial-order reduction is not distributed"
        self.hash = hash if partition == "hash" else crc_hash
        self.inboxes = inboxes
        self.parent_pid = parent_pid
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

    def get(self, q) -> Any:
        while True:
            try:
                return q.get(timeout=POLL)
            except queue.Empty:
                if os.getppid() != self.parent_pid:
                    raise SystemExit(0)  # the coordinator is gone: so are we

    def _recv(self, kind: str, count: int) -> list[tuple]:
        got = [m for m in self.pending if m[0] == kind]
        self.pending = [m for m in self.pending if m[0] != kind]
        inbox = self.inboxes[self.me]
        while len(got) < count:
            msg = self.get(inbox)
            (got if msg[0] == kind else self.pending).append(msg)
        return got

    def _send_all(self, kind: str, payloads) -> None:
        for w in range(self.nproc):
            if w != self.me:
                self.inboxes[w].put((kind, self.me, payloads(w)))

    # -- commands from the coordinator ------------------------------------------

    def seed(self, init: tuple) -> bool:
        if self.nproc > 1 and self.hash(init) % self.nproc != self.me:
            return False
        self.parents[init] = -1
        self.serials.append(0)
        self.states.append(init)
        self.frontier = [(0, init)]
        return True

    def level(self, stored: int, remaining: int) -> dict[str, Any]:
        """Expand this worker's part of one level; exchange; number and keep the new states."""
        c0, t0 = time.process_time(), time.perf_counter()
        successors, transitions, term, step = self._expand_slice()
        t1 = time.perf_counter()
        new, self.new_keys, t_routed, t_received = self._exchange(successors)
        t3 = time.perf_counter()
        ranks = self._ranks(self.new_keys)
        t4 = time.perf_counter()
        kept, cut, inv = self._commit(new, ranks, stored, remaining)
        first = min((c for c in (step, inv) if c is not None), key=lambda c: c[1], default=None)
        t5 = time.perf_counter()
        # The immutable states stored so far need no more cyclic-GC scans: freezing them keeps
        # full collections from rescanning the whole visited set (about 9% faster at 300k states).
        gc.freeze()
        timing = {"expand": t1 - t0, "route": t_routed - t1, "wait": t_received - t_routed,
                  "merge": t3 - t_received, "rank": t4 - t3, "commit": t5 - t4, "cpu": time.process_time() - c0}
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
                                 f"the parallel explorer handles at most {RADIX - 1}")
            if stuck:
                verdict = terminal(machine, state)
                if verdict is not None:
                    term = (serial, state, verdict)
                    break
        return successors, transitions, term, step

    def _exchange(self, successors: dict[tuple, int]) -> tuple[list[tuple], list[int], float, float]:
        """Route successors to their owners, receive ours, and insert them in key order.

        Returns this level's new states and their keys (ascending), and when routing and
        receiving ended. With one worker the successors are ours and already in key order.
        """
        if self.nproc == 1:
            now = time.perf_counter()
            return (*self._insert(successors.items()), now, now)
        import numpy as np

        nproc, h = self.nproc, self.hash
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
        routed = time.perf_counter()
        # Unpickling and merging build nothing but tuples, which cannot form reference
        # cycles: no need for the cyclic GC to watch them being made.
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            got = self._recv("batch", nproc - 1)
            received = time.perf_counter()
            for _, _, (their_states, their_keys) in got:
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
        check_inv = self.expander.invariant
        parents = self.parents
        frontier: list[tuple[int, tuple]] = []
        kept = 0
        cut = inv = None
        for key, x, rank in zip(self.new_keys, new, ranks):
            if rank >= remaining:  # over the state cap: sequential BFS stops before storing x
                if rank == remaining:
                    cut = key
                del parents[x]
                continue
            serial = stored + rank
            kept += 1
            self.serials.append(serial)
            self.states.append(x)
            if check_inv is not None:
                bad = check_inv(x)
                if bad:  # an error state: reported, never expanded
                    if inv is None:
                        inv = ("inv", key, serial, x, bad)
                    continue
            frontier.append((serial, x))
        self.frontier = frontier
        return kept, cut, inv

    def _ranks(self, keys: list[int]) -> Any:
        """Global rank of each of this worker's new keys (sorted) among every worker's new keys."""
        if self.nproc == 1:
            return range(len(keys))
        import numpy as np

        mine = np.array(keys, dtype=np.int64)
        self._send_all("keys", lambda w, b=mine.tobytes(): b)
        ranks = np.arange(len(keys), dtype=np.int64)
        for _, _, buf in self._recv("keys", self.nproc - 1):
            ranks += np.searchsorted(np.frombuffer(buf, dtype=np.int64), mine)
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


def worker_main(me: int, nproc: int, ref: ModelRef, config: Mapping[str, Any], reduce: str, partition: str,
                ctrl, inboxes: list, results, parent_pid: int) -> None:
    """A worker process: get the model back, compile it, and serve the coordinator's commands."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    except ValueError:  # pragma: no cover - not the main thread
        pass
    for q in inboxes:
        q.cancel_join_thread()  # never block exit on a batch a dead peer will not read
    try:
        machine = ref.resolve().compile(config)
        worker = Worker(me, nproc, machine, reduce, partition, inboxes, parent_pid)
        while True:
            cmd = worker.get(ctrl)
            if cmd[0] == "stop":
                return
            results.put((me, "ok", getattr(worker, cmd[0])(*cmd[1:])))
    except SystemExit:
        return
    except BaseException as e:  # report anything, including model errors, to the coordinator
        text = traceback.format_exc()
        try:
            payload = pickle.dumps(e)
        except Exception:
            payload = None
        results.put((me, "error", (payload, f"{type(e).__name__}: {e}", text)))

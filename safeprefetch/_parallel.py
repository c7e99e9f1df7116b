"""Parallel exploration: the BFS frontier partitioned by state hash across processes.

What it guarantees
------------------
:func:`explore_parallel` returns what ``Explorer(machine, reduce="none").run()``
returns -- the same distinct-state count, the same verdict and *the same
counterexample*, step for step -- for any number of processes. It is the
sequential level-synchronous BFS, cut into pieces by who owns which state;
nothing about the search order depends on the partition.

Theory of operation
-------------------
*Ownership.* There are P worker processes. State ``s`` belongs to worker
``owner(s) = h(s) % P``, and only the owner stores ``s``: each worker holds
one slice of the visited set (its own ``parents`` dict). A worker that
generates a successor owned by someone else does not look it up; it puts it
in that owner's outgoing batch.

*One BFS level, with no state passing through the coordinator:*

1. every worker expands its own slice of the frontier (the states of depth
   ``d`` it owns), in order. A successor it owns goes straight into its dict;
   a successor owned by worker ``w`` goes into ``batch[w]`` (deduplicated
   within the batch);
2. every worker sends one batch to every other worker's inbox, then reads the
   P - 1 batches addressed to it and keeps the successors it has never seen;
3. the workers exchange the (sorted) discovery keys of their new states, so
   each can number its own states globally (below);
4. each reports to the coordinator: how many new states, how many
   transitions, the first violation of each kind it saw, and whether the
   state cap cut the level. The coordinator is the barrier: it adds up the
   reports, decides stop or continue, and starts the next level.

*The sequential order, rebuilt.* Sequential BFS stores states in a precise
order: level by level, and inside level ``d + 1`` in the order their first
discoverer in level ``d`` was expanded, then by the position of the
successor in that state's (canonical) successor list. So every state gets a
*serial number*, its index in the sequential ``parents`` dict, and every
discovery the *key* ``serial(parent) * RADIX + position``. The owner keeps,
for each new state, the discovery with the smallest key -- exactly the parent
sequential BFS keeps. After step 2 each worker sorts its new states by key;
the global rank of a key is its rank among its own keys plus, for every
other worker, the number of that worker's keys below it (one binary search
per worker, over arrays of int64 -- step 3 moves 8 bytes per state, not the
states). ``serial = states stored before this level + rank``. With serials,
"the first violation in BFS order" is the one with the smallest key, and a
state cap keeps exactly the states with rank below what is left of the
budget -- the same states sequential BFS would keep.

*Shortest first.* Within a level, a terminal violation (a hang or a failed
end check at depth ``d``) beats a step or invariant violation found while
expanding it (length ``d + 1``), so workers finish the level and the
coordinator decides after the barrier: the smallest terminal serial if any,
else the smallest step/invariant key. A worker that hits a terminal
violation stops expanding its slice (nothing after it in its slice can beat
it) but still takes part in the exchange.

*Counterexamples.* Parents stay where they are. ``parents[s]`` holds the key
of ``s``'s discovery, so ``key // RADIX`` is the parent's serial. To build a
trace the coordinator asks "who holds serial n?"; the holder walks the chain
back as far as the states are its own, and hands over the list and the next
serial it does not hold. The coordinator then rebuilds the choices by
matching successors, with the same code :class:`Explorer` uses
(``path_to``, ``_violation_at``, ``_violation_on``); lost wakeups are
classified on that path.

*Which hash.* With the ``fork`` start method every worker inherits the
coordinator's string-hash secret (``PYTHONHASHSEED``), so Python's own
``hash(state)`` partitions consistently and costs nothing extra to compute
beyond the hash itself. Processes that do not share that secret (``spawn``,
other machines) must agree on a deterministic hash instead:
``partition="crc32"`` uses ``zlib.crc32(repr(state))``. ``repr`` is stable for
the values states are made of (ints, bools, strings, None, nested tuples); it
would not be for sets, whose order follows the hash secret. The numbers for
both are in ``docs/parallel.md``: ``repr`` costs about twelve times what
``hash`` does, which on this machine eats most of the gain.

Reductions
----------
Symmetry is applied by the workers (successors are canonicalised before they
are routed), so ``reduce="symmetry"`` reproduces ``Explorer(reduce="symmetry")``.
Partial-order reduction is not: its cycle proviso (C3) asks "is any ample
successor already stored anywhere?", a global question a partitioned search
can only answer with a round trip per state. ``reduce="all"`` therefore runs
symmetry only, and ``reduce="por"`` runs the full graph; verdicts and trace
lengths are the same as sequential ``reduce="all"``/``"por"`` (which re-search
without POR to get shortest traces anyway), the state counts are larger.

Liveness (starvation) is checked afterwards in the coordinator by
:func:`safeprefetch._liveness.find_starvation`, which runs its own sequential
search of the policy graph; only models that declare progress steps pay it.

Processes and shutdown
----------------------
Workers ignore SIGINT: Ctrl-C reaches the coordinator, which stops them. Any
way out of :func:`explore_parallel` -- a result, an exception in the
coordinator, a worker's exception, KeyboardInterrupt -- goes through one
``finally`` that asks the workers to stop, joins with a timeout, then
terminates and finally kills what is left, so no process outlives the call.
A worker polls for its parent and exits if the coordinator has gone away.
An exception raised by model code in a worker is re-raised in the
coordinator (as the same type when it can be unpickled) with the worker's
traceback attached as a note.

Open questions: the exchange is one batch per destination per level, so a
worker cannot start deduplicating before its peers finish expanding;
streaming batches in chunks would overlap the two on more than two cores.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import signal
import time
import traceback
import zlib
from array import array
from bisect import bisect_left, bisect_right
from typing import Any, Callable, Mapping

from ._catalog import load_model
from ._explore import DEFAULT_MAX_STATES, CheckResult, Explorer, Violation, _end_violation, _is_default
from ._model import Machine, ModelError
from ._reduce import check_reduce

__all__ = ["PARTITIONS", "explore_parallel"]

#: Radix of discovery keys: ``key = serial(parent) * RADIX + position of the successor``.
#: 2**16 leaves room for 65,535 successors of one state (catalog models have fewer than
#: 20) while keys stay below 2**63 for up to 2**47 states, so they fit int64 arrays.
RADIX = 1 << 16

#: How the owner of a state is computed: ``"hash"`` (Python's hash; needs ``fork``, so that
#: every worker shares the hash secret) or ``"crc32"`` (of ``repr(state)``; works anywhere).
PARTITIONS = ("hash", "crc32")

#: Seconds between liveness checks while a process waits on a queue: how quickly a worker
#: notices that its coordinator is gone, and the coordinator that a worker died.
_POLL = 0.5

#: Seconds a worker is given to stop on request before it is terminated, then killed.
_JOIN_TIMEOUT = 5.0

#: Reduction actually applied by the workers for each requested setting (see the essay).
_EFFECTIVE_REDUCE = {"none": "none", "symmetry": "symmetry", "por": "none", "all": "symmetry"}


def _crc_hash(state: tuple) -> int:
    return zlib.crc32(repr(state).encode())


class _WorkerError(Exception):
    """A worker process failed in a way that cannot be re-raised as the original exception."""


# --------------------------------------------------------------------------
# The worker: owns one slice of the visited set.
# --------------------------------------------------------------------------


class _Worker:
    def __init__(self, me: int, nproc: int, machine: Machine, reduce: str, partition: str,
                 inboxes: list, parent_pid: int):
        self.me = me
        self.nproc = nproc
        self.machine = machine
        sym = Explorer(machine, reduce=reduce).canon
        self.canon = sym.canon if sym is not None else None
        self.hash = hash if partition == "hash" else _crc_hash
        self.inboxes = inboxes
        self.parent_pid = parent_pid
        #: state -> discovery key (``serial(parent) * RADIX + position``; -1 for the initial state).
        self.parents: dict[tuple, int] = {}
        #: The serials of this worker's states, ascending, and the states themselves, in step.
        self.serials = array("q")
        self.states: list[tuple] = []
        #: This worker's part of the current level: (serial, state), ascending serial.
        self.frontier: list[tuple[int, tuple]] = []
        self.pending: list[tuple] = []  # messages from peers that belong to a later phase
        pcs = machine.pc_index
        self.threads = [(t, pcs[t], machine.tables[t], machine.spurious_pcs[t] or None)
                        for t in range(len(machine.tables))]

    # -- messages between workers ---------------------------------------------

    def _get(self, q) -> Any:
        while True:
            try:
                return q.get(timeout=_POLL)
            except queue.Empty:
                if os.getppid() != self.parent_pid:
                    raise SystemExit(0)  # the coordinator is gone: so are we

    def _recv(self, kind: str, count: int) -> list[tuple]:
        got = [m for m in self.pending if m[0] == kind]
        self.pending = [m for m in self.pending if m[0] != kind]
        inbox = self.inboxes[self.me]
        while len(got) < count:
            msg = self._get(inbox)
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

    def level(self, level_start: int, stored: int, remaining: int) -> dict[str, Any]:
        """Expand this worker's part of one level; exchange; number and keep the new states."""
        m = self.machine
        me, nproc = self.me, self.nproc
        parents = self.parents
        setdefault = parents.setdefault
        canon = self.canon
        h = self.hash
        batches: list[dict] = [{} for _ in range(nproc)]
        new: list[tuple] = []
        append = new.append
        transitions = 0
        term = step = None
        # Transitions taken up to each expanded state, for "where would sequential BFS have stopped?".
        self.expanded, self.expanded_transitions = expanded, expanded_tr = array("q"), array("q")
        self.expanded_states = self.frontier
        for serial, state in self.frontier:
            base = serial * RADIX
            i = 0
            any_succ = False
            for t, pi, table, sp in self.threads:
                fire = table.get(state[pi])
                if fire is None:
                    continue
                res = fire(state)
                if not res:
                    continue
                transitions += len(res)
                if sp is None or state[pi] not in sp:
                    any_succ = True
                for b, nxt in res:
                    key = base + i
                    i += 1
                    if nxt.__class__ is not tuple:
                        if step is None:
                            step = ("step", key, serial, state, (t, b))
                        continue
                    if canon is not None:
                        nxt = canon(nxt)
                    if nproc > 1:
                        w = h(nxt) % nproc
                        if w != me:
                            batches[w].setdefault(nxt, key)  # the first discovery has the smallest key
                            continue
                    n = len(parents)
                    setdefault(nxt, key)
                    if len(parents) != n:
                        append(nxt)
            expanded.append(serial)
            expanded_tr.append(transitions)
            if i >= RADIX:
                raise ModelError(f"a state has {i} successors; the parallel explorer handles at most {RADIX - 1}")
            if not any_succ:
                if m.all_done(state):
                    bad = _end_violation(m, state)
                    if bad:
                        term = (serial, state, bad)
                        break
                else:
                    term = (serial, state, None)
                    break
        level_base = level_start * RADIX  # keys of this level's discoveries are at least this
        if nproc > 1:
            self._send_all("batch", batches.__getitem__)
            batches = []
            for _, _, batch in self._recv("batch", nproc - 1):
                for nxt, key in batch.items():
                    n = len(parents)
                    old = setdefault(nxt, key)
                    if len(parents) != n:
                        append(nxt)
                    elif level_base <= key < old:  # found this level too, by an earlier parent
                        parents[nxt] = key
        pairs = sorted(zip([parents[x] for x in new], new))
        keys = self.new_keys = [k for k, _ in pairs]
        ranks = self._ranks(keys)
        cut = None
        inv = None
        check_inv = m.invariant_violation if m.invariants else None
        frontier: list[tuple[int, tuple]] = []
        kept = 0
        for (key, x), rank in zip(pairs, ranks):
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
        first = min((c for c in (step, inv) if c is not None), key=lambda c: c[1], default=None)
        return {"new": kept, "transitions": transitions, "frontier": len(frontier), "term": term,
                "on": first, "cut": cut}

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
        otherwise sequential BFS stopped on that successor, having counted the moves of
        its thread and of the threads before it.
        """
        serial, position = divmod(key, RADIX)
        j = bisect_left(self.expanded, serial)
        transitions = self.expanded_transitions[j - 1] if j else 0
        if j < len(self.expanded) and self.expanded[j] == serial:
            if position == RADIX - 1:
                transitions = self.expanded_transitions[j]
            else:
                state = self.expanded_states[j][1]
                for _t, pi, table, _sp in self.threads:
                    fire = table.get(state[pi])
                    res = fire(state) if fire is not None else None
                    if res:
                        transitions += len(res)
                        position -= len(res)
                        if position < 0:
                            break
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


def _worker_main(me: int, nproc: int, spec: str, config: Mapping[str, Any], reduce: str, partition: str,
                 ctrl, inboxes: list, results, parent_pid: int) -> None:
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    except ValueError:  # pragma: no cover - not the main thread
        pass
    for q in inboxes:
        q.cancel_join_thread()  # never block exit on a batch a dead peer will not read
    try:
        machine = load_model(spec).compile(config)
        worker = _Worker(me, nproc, machine, reduce, partition, inboxes, parent_pid)
        while True:
            cmd = worker._get(ctrl)
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


# --------------------------------------------------------------------------
# The coordinator.
# --------------------------------------------------------------------------


class _Pool:
    """The worker processes and their queues; :meth:`close` always leaves no process behind."""

    def __init__(self, nproc: int, spec: str, config: Mapping[str, Any], reduce: str, partition: str,
                 method: str):
        ctx = mp.get_context(method)
        self.nproc = nproc
        self.inboxes = [ctx.Queue() for _ in range(nproc)]
        self.ctrl = [ctx.Queue() for _ in range(nproc)]
        self.results = ctx.Queue()
        self.procs: list = []
        self.closed = False
        try:
            for w in range(nproc):
                p = ctx.Process(target=_worker_main, name=f"safeprefetch-explore-{w}", daemon=True,
                                args=(w, nproc, spec, dict(config), reduce, partition, self.ctrl[w], self.inboxes,
                                      self.results, os.getpid()))
                p.start()
                self.procs.append(p)
        except BaseException:
            self.close(graceful=False)
            raise

    def broadcast(self, *cmd: Any) -> list[Any]:
        """Send ``cmd`` to every worker; return their replies, by worker."""
        for q in self.ctrl:
            q.put(cmd)
        replies: list[Any] = [None] * self.nproc
        got = 0
        while got < self.nproc:
            try:
                me, status, payload = self.results.get(timeout=_POLL)
            except queue.Empty:
                self._check_alive()
                continue
            if status == "error":
                raise _remote_error(me, payload)
            replies[me] = payload
            got += 1
        return replies

    def _check_alive(self) -> None:
        dead = [(w, p.exitcode) for w, p in enumerate(self.procs) if p.exitcode is not None]
        if not dead:
            return
        try:  # a worker that failed cleanly said why before exiting
            me, status, payload = self.results.get(timeout=_POLL)
            if status == "error":
                raise _remote_error(me, payload)
        except queue.Empty:
            pass
        w, code = dead[0]
        raise _WorkerError(f"parallel explorer: worker {w} died (exit code {code})")

    def close(self, graceful: bool = True) -> None:
        if self.closed:
            return
        self.closed = True
        if graceful:
            for w, p in enumerate(self.procs):
                if p.is_alive():
                    try:
                        self.ctrl[w].put(("stop",))
                    except Exception:  # pragma: no cover - a broken queue; terminate below
                        pass
            deadline = time.monotonic() + _JOIN_TIMEOUT
            for p in self.procs:
                p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(timeout=_JOIN_TIMEOUT)
            if p.is_alive():  # pragma: no cover - SIGTERM ignored
                p.kill()
                p.join(timeout=_JOIN_TIMEOUT)
        for q in [*self.ctrl, *self.inboxes, self.results]:
            q.cancel_join_thread()
            q.close()
        for p in self.procs:
            try:
                p.close()
            except ValueError:  # pragma: no cover - still running after kill
                pass


def _remote_error(me: int, payload: tuple) -> BaseException:
    blob, summary, text = payload
    err: BaseException | None = None
    if blob is not None:
        try:
            err = pickle.loads(blob)
        except Exception:
            err = None
    if not isinstance(err, BaseException):
        err = _WorkerError(f"parallel explorer: worker {me} failed: {summary}")
    err.add_note(f"raised in parallel explorer worker {me}:\n{text}")
    return err


def _start_method(partition: str | None) -> tuple[str, str]:
    methods = mp.get_all_start_methods()
    if partition is None:
        partition = "hash" if "fork" in methods else "crc32"
    if partition not in PARTITIONS:
        raise ModelError(f"unknown partition {partition!r} (known: {', '.join(PARTITIONS)})")
    if "fork" in methods:
        return "fork", partition
    if partition == "hash":
        raise ModelError("partition='hash' needs the fork start method (shared hash secret); use 'crc32'")
    return "spawn", partition


def explore_parallel(model_spec: str, config: Mapping[str, Any] | None = None, processes: int = 2,
                     max_states: int = DEFAULT_MAX_STATES, reduce: str = "none", *,
                     partition: str | None = None,
                     progress: Callable[[int, int, int], None] | None = None) -> CheckResult:
    """Explore ``model_spec`` (a catalog name or a ``.py`` path) at ``config`` with ``processes`` workers.

    The result equals ``Explorer(machine, reduce=reduce).run()`` for ``reduce`` in
    ``none``/``symmetry``: same states, transitions, verdict and trace. ``reduce="all"``
    applies symmetry only and ``"por"`` nothing (see the module essay). ``partition`` is
    ``"hash"`` (default where ``fork`` exists) or ``"crc32"``. ``progress(states, frontier,
    transitions)`` is called between levels, at most every three seconds.
    """
    if processes < 1:
        raise ModelError("processes must be at least 1")
    if max_states < 1:
        raise ModelError("max_states must be at least 1")
    effective = _EFFECTIVE_REDUCE[check_reduce(reduce)]
    method, partition = _start_method(partition)
    config = dict(config or {})
    model = load_model(model_spec)
    machine = model.compile(config)  # config errors surface here, before any process starts
    expected = model.expected if not config or _is_default(model, machine.config) else None

    t0 = time.perf_counter()
    explorer = Explorer(machine, reduce=effective)  # builds traces from the chains workers send
    canon = explorer.canon
    init = canon.canon(machine.init) if canon is not None else machine.init
    stored, transitions, depth = 1, 0, 0
    exhaustive = True
    violation: Violation | None = None
    bad = machine.invariant_violation(machine.init)
    if bad:
        explorer.parents = {init: None}
        violation = explorer._violation_at(init, bad)
    else:
        pool: _Pool | None = None
        graceful = False
        try:
            pool = _Pool(processes, model_spec, config, effective, partition, method)
            pool.broadcast("seed", init)
            level_start = 0
            next_report = time.perf_counter() + 3.0
            while True:
                reports = pool.broadcast("level", level_start, stored, max_states - stored)
                level_start, stored = stored, stored + sum(r["new"] for r in reports)
                before = transitions
                transitions += sum(r["transitions"] for r in reports)
                frontier = sum(r["frontier"] for r in reports)
                cut = next((r["cut"] for r in reports if r["cut"] is not None), None)
                terms = [r["term"] for r in reports if r["term"] is not None
                         and (cut is None or r["term"][0] < cut // RADIX)]
                ons = [r["on"] for r in reports if r["on"] is not None and (cut is None or r["on"][1] < cut)]
                if terms:
                    serial, state, kind_msg = min(terms, key=lambda c: c[0])
                    # Sequential BFS stops right after this state: count what it had seen by then.
                    counts = pool.broadcast("upto", serial * RADIX + RADIX - 1)
                    stored = level_start + sum(n for n, _ in counts)
                    transitions = before + sum(t for _, t in counts)
                    explorer.parents = _chain(pool, serial)
                    violation = explorer._violation_at(state, kind_msg)
                elif ons:
                    kind, _key, serial, state, extra = min(ons, key=lambda c: c[1])
                    explorer.parents = _chain(pool, serial)
                    if kind == "inv":
                        violation = explorer._violation_at(state, extra)
                    else:
                        v = next(n for c, n in machine.successors(state) if c == extra)
                        violation = explorer._violation_on(state, extra, v)
                if cut is not None and not terms:
                    # Sequential BFS stopped on the successor numbered ``cut``: count its transitions.
                    transitions = before + sum(t for _, t in pool.broadcast("upto", cut))
                    exhaustive = False
                if violation is not None or cut is not None or frontier == 0:
                    break
                depth += 1
                if progress is not None and time.perf_counter() >= next_report:
                    progress(stored, frontier, transitions)
                    next_report = time.perf_counter() + 3.0
            graceful = True
        finally:
            if pool is not None:
                pool.close(graceful)
    if violation is None and exhaustive and machine.progress_labels:
        from ._liveness import find_starvation

        lasso = find_starvation(machine, (), None)  # it searches the policy's own graph
        if lasso is not None:
            message, states, choices = lasso
            violation = Violation("starvation", message, explorer._trace(states, choices), states[-1], False)
    return CheckResult(
        model=machine.name,
        config=dict(machine.config),
        strategy="bfs",
        exhaustive=exhaustive or violation is not None,
        verdict=violation.kind if violation else "ok",
        states=stored,
        transitions=transitions,
        seconds=time.perf_counter() - t0,
        violation=violation,
        expected=expected,
        max_depth=depth,
    )


def _chain(pool: _Pool, serial: int) -> dict[tuple, tuple | None]:
    """The parent chain of the state numbered ``serial``, as a ``parents`` dict from the initial state."""
    path: list[tuple] = []
    while serial >= 0:
        replies = [r for r in pool.broadcast("chain", serial) if r is not None]
        if len(replies) != 1:  # pragma: no cover - would mean two owners, or none
            raise _WorkerError(f"parallel explorer: serial {serial} held by {len(replies)} workers")
        states, serial = replies[0]
        path.extend(states)
    path.reverse()
    return {s: (path[i - 1] if i else None) for i, s in enumerate(path)}

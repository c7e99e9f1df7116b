"""Parallel exploration: the BFS frontier partitioned by state hash across processes.

What it guarantees
------------------
:func:`explore_parallel` returns what ``Explorer(machine, reduce=...).run()``
returns for ``reduce="none"`` or ``"symmetry"`` -- the same distinct-state and
transition counts, depth, verdict and *the same counterexample*, step for
step -- for any number of processes, and also when ``max_states`` cuts the
search (the same states are kept). It is the sequential level-synchronous
BFS cut into pieces by who owns which state; nothing about the search order
depends on the partition. ``tests/test_parallel.py`` compares every field on
every catalog model.

Theory of operation
-------------------
*Ownership.* There are P worker processes. State ``s`` belongs to worker
``h(s) % P``, and only the owner stores ``s``: each worker holds one slice of
the visited set (its own ``parents`` dict) and expands only the states it
owns.

*One BFS level; no state passes through the coordinator:*

1. every worker expands its slice of the frontier, in serial order (below).
   Its successors go into a dict for this level, which drops the many
   duplicates that one level produces (interleavings that commute meet again
   at the same depth: at the reference prefetcher config there are 3.4
   transitions per distinct successor, and 99% of the duplicates are within
   the level). Then each distinct successor is hashed once and put in the
   batch of its owner;
2. every worker sends one batch (states, plus their keys as an int64 array)
   straight to every other worker's inbox, reads the P - 1 batches addressed
   to it, and inserts its own part and the received parts into ``parents``
   in key order, keeping only states it has never seen;
3. the workers exchange the sorted keys of their new states (8 bytes per
   state, not the states), so each can number its own states globally;
4. each reports to the coordinator: new states, transitions, the first
   violation of each kind it saw, and whether the state cap cut the level.
   The coordinator is the barrier: it adds up the reports, decides stop or
   continue, and starts the next level.

With one worker, steps 2 and 3 vanish and successors go straight into
``parents``, as in :class:`Explorer`.

*The sequential order, rebuilt.* Sequential BFS stores states in a precise
order: level by level, and inside level ``d + 1`` in the order their first
discoverer in level ``d`` was expanded, then by the position of the
successor in that state's (canonical) successor list. So every state gets a
*serial number*, its index in the sequential ``parents`` dict, and every
discovery a *key*, ``serial(parent) * RADIX + position``. Keys are unique
and ordered as sequential BFS meets them. Inserting in key order (step 2)
makes the first insertion of a state its smallest-key discovery: the parent
sequential BFS keeps. The global rank of a new key is its rank among the
worker's own new keys plus, for every other worker, the number of that
worker's new keys below it (step 3, one binary search per worker); ``serial
= states stored before the level + rank``. With serials, "the first
violation in BFS order" is the one with the smallest key, and the state cap
keeps exactly the states of rank below what is left of the budget.

*Shortest first.* A terminal violation at depth ``d`` (a hang, a failed end
check) beats a step or invariant violation found while expanding depth ``d``
(length ``d + 1``), so workers finish the level and the coordinator decides
after the barrier: the smallest terminal serial if there is one, else the
smallest step/invariant key. A worker that meets a terminal violation stops
expanding (nothing later in its slice can beat it) but still takes part in
the exchange. Sequential BFS stops *inside* the level; the coordinator asks
the workers how many states and transitions it had seen by then (``upto``),
so even the counts agree.

*Counterexamples.* Parents stay where they are: ``parents[s]`` holds the key
of ``s``'s discovery, so ``key // RADIX`` is the parent's serial. To build a
trace the coordinator asks all workers "who holds serial n?"; the holder
walks the chain back as far as the states are its own and returns them with
the first serial it does not hold. The coordinator then rebuilds the
choices by matching successors, with the code :class:`Explorer` uses
(``path_to``, ``_violation_at``, ``_violation_on``), which also classifies
lost wakeups on that path.

*Which hash.* Under the ``fork`` start method every worker inherits the
coordinator's string-hash secret (``PYTHONHASHSEED``) -- and, in Python
3.11, the address of ``None``, from which ``hash(None)`` is derived -- so the
builtin ``hash(state)`` partitions consistently. Processes that do not share them
(``spawn``, other machines) need a deterministic hash: ``partition="crc32"``
is ``zlib.crc32(repr(state))``, stable for the ints, bools, strings, None
and nested tuples states are made of (it would not be for sets, whose order
follows the hash secret). ``docs/parallel.md`` has the cost of each.

*Garbage collection.* Stored states are immutable tuples; after each level a
worker freezes the objects it holds (``gc.freeze``) so that full collections
stop rescanning the whole visited set, and unpickling and merging, which
build nothing but such tuples, run with the cyclic GC paused.

Reductions
----------
Symmetry is applied by the workers (successors are canonicalised before they
are routed), so ``reduce="symmetry"`` reproduces ``Explorer(reduce="symmetry")``.
Partial-order reduction is not: its cycle proviso (C3) asks "is any ample
successor already stored?", a global question a partitioned search could only
answer with a round trip per state. ``reduce="all"`` therefore runs symmetry
only, and ``reduce="por"`` the full graph: the verdict and the trace length
are those of sequential ``reduce="all"``/``"por"`` (which re-searches without
POR for a shortest trace anyway), the state count is larger.

Liveness (starvation) is checked afterwards, in the coordinator, by
:func:`safeprefetch._check.liveness.find_starvation`, which runs its own sequential
search of the scheduling policy's graph; only models that declare progress
steps pay for it.

Processes and shutdown
----------------------
Workers re-load the model by name (or path) and compile it themselves;
nothing but names, configs, states and numbers crosses a process boundary.
Workers ignore SIGINT: Ctrl-C reaches the coordinator, which stops them. Any
way out of :func:`explore_parallel` -- a result, an exception in the
coordinator, a worker's exception, KeyboardInterrupt -- goes through one
``finally`` that asks the workers to stop, joins with a timeout, then
terminates and kills what is left, so no process outlives the call. A worker
exits by itself if its coordinator disappears, and the coordinator notices a
worker that died. An exception raised by model code in a worker is re-raised
in the coordinator (as the same type when it unpickles) with the worker's
traceback attached as a note.

Open question: each level has three synchronisation points (batches, keys,
coordinator), and every one waits for the slowest worker. Overlapping the
exchange with expansion (streaming batches in chunks) would shorten the tail
of each level; on two cores it would not add CPU, only hide waiting.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import pickle
import queue
import signal
import time
import traceback
import zlib
from array import array
from bisect import bisect_left
from typing import Any, Callable, Mapping

from .._tools.catalog import load_model
from .explore import DEFAULT_MAX_STATES, CheckResult, Explorer, Violation, _end_violation, _is_default
from .._dsl.model import Machine, ModelError
from .reduce import check_reduce

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


class _WorkerError(RuntimeError):
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

    def level(self, stored: int, remaining: int) -> dict[str, Any]:
        """Expand this worker's part of one level; exchange; number and keep the new states."""
        m = self.machine
        me, nproc = self.me, self.nproc
        parents = self.parents
        setdefault = parents.setdefault
        canon = self.canon
        h = self.hash
        # With several workers, successors are first deduplicated within the level (most duplicate
        # successors are diamonds of the same level), then routed to their owners: one hash per
        # transition, two per distinct successor. The first discovery has the smallest key.
        level_succ: dict[tuple, int] = {}
        routed = level_succ.setdefault if nproc > 1 else None
        new: list[tuple] = []  # this level's new states, and in step their discovery keys
        new_keys: list[int] = []
        append, kappend = new.append, new_keys.append
        transitions = 0
        c0, t0 = time.process_time(), time.perf_counter()
        term = step = None
        threads = self.threads
        self.expanded = self.frontier  # kept for upto()
        for serial, state in self.frontier:
            key = base = serial * RADIX - 1  # the key of the successor last seen
            any_succ = False
            for t, pi, table, sp in threads:
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
                    key += 1
                    if nxt.__class__ is not tuple:
                        if step is None:
                            step = ("step", key, serial, state, (t, b))
                        continue
                    if canon is not None:
                        nxt = canon(nxt)
                    if routed is not None:
                        routed(nxt, key)
                        continue
                    n = len(parents)
                    setdefault(nxt, key)
                    if len(parents) != n:
                        append(nxt)
                        kappend(key)
            if key - base >= RADIX:
                raise ModelError(f"a state has {key - base} successors; "
                                 f"the parallel explorer handles at most {RADIX - 1}")
            if not any_succ:
                if m.all_done(state):
                    bad = _end_violation(m, state)
                    if bad:
                        term = (serial, state, bad)
                        break
                else:
                    term = (serial, state, None)
                    break
        t1 = time.perf_counter()
        if nproc > 1:
            import numpy as np

            out_states: list[list[tuple]] = [[] for _ in range(nproc)]
            out_keys = [array("q") for _ in range(nproc)]
            for nxt, key in level_succ.items():
                w = h(nxt) % nproc
                out_states[w].append(nxt)
                out_keys[w].append(key)
            level_succ.clear()
            self._send_all("batch", lambda w: (out_states[w], out_keys[w].tobytes()))
            states, keys = out_states[me], out_keys[me]
            out_states = out_keys = []
            t1r = time.perf_counter()
            # Unpickling and merging build nothing but tuples, which cannot form reference
            # cycles: no need for the cyclic GC to watch them being made.
            gc_was_on = gc.isenabled()
            gc.disable()
            try:
                got = self._recv("batch", nproc - 1)
                t2 = time.perf_counter()
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
                for j, key in zip(order.tolist(), in_order):
                    nxt = states[j]
                    n = len(parents)
                    setdefault(nxt, key)
                    if len(parents) != n:
                        append(nxt)
                        kappend(key)
                del states, keys, order, in_order
            finally:
                if gc_was_on:
                    gc.enable()
        else:
            t1r = t2 = t1  # one worker discovers in key order already
        t3 = time.perf_counter()
        self.new_keys = new_keys
        ranks = self._ranks(new_keys)
        t4 = time.perf_counter()
        cut = None
        inv = None
        check_inv = m.invariant_violation if m.invariants else None
        frontier: list[tuple[int, tuple]] = []
        kept = 0
        for key, x, rank in zip(new_keys, new, ranks):
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
        t5 = time.perf_counter()
        # The immutable states stored so far need no more cyclic-GC scans: freezing them keeps
        # full collections from rescanning the whole visited set (about 9% faster at 300k states).
        gc.freeze()
        timing = {"expand": t1 - t0, "route": t1r - t1, "wait": t2 - t1r, "merge": t3 - t2, "rank": t4 - t3,
                  "commit": t5 - t4, "cpu": time.process_time() - c0}
        return {"new": kept, "transitions": transitions, "frontier": len(frontier), "term": term,
                "on": first, "cut": cut, "timing": timing}

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
        otherwise sequential BFS stopped on that successor, having counted the moves of its
        thread and of the threads before it (the symmetry-reduced search counts whole states).
        Called once, when a search stops inside a level; it re-fires that level's states up to
        ``key``, which this worker has all expanded (it stops early only at a terminal
        violation, and then the coordinator never asks past it).
        """
        last, position = divmod(key, RADIX)
        partial = position != RADIX - 1 and self.canon is None
        transitions = 0
        for serial, state in self.expanded:
            if serial > last:
                break
            for _t, pi, table, _sp in self.threads:
                fire = table.get(state[pi])
                res = fire(state) if fire is not None else None
                if res:
                    transitions += len(res)
                    if partial and serial == last:
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


def _start_method(partition: str | None, method: str | None = None) -> tuple[str, str]:
    """The multiprocessing start method and the partition function to use."""
    methods = mp.get_all_start_methods()
    if method is None:
        method = "fork" if "fork" in methods else "spawn"
    if method not in methods:
        raise ModelError(f"start method {method!r} is not available here (known: {', '.join(methods)})")
    if partition is None:
        partition = "hash" if method == "fork" else "crc32"
    if partition not in PARTITIONS:
        raise ModelError(f"unknown partition {partition!r} (known: {', '.join(PARTITIONS)})")
    if partition == "hash" and method != "fork":
        raise ModelError("partition='hash' needs the fork start method (a shared hash secret); use 'crc32'")
    return method, partition


def explore_parallel(model_spec: str, config: Mapping[str, Any] | None = None, processes: int = 2,
                     max_states: int = DEFAULT_MAX_STATES, reduce: str = "none", *,
                     partition: str | None = None,
                     progress: Callable[[int, int, int], None] | None = None,
                     progress_every: float = 3.0) -> CheckResult:
    """Explore ``model_spec`` (a catalog name or a ``.py`` path) at ``config`` with ``processes`` workers.

    The result equals ``Explorer(machine, reduce=reduce).run()`` for ``reduce`` in
    ``none``/``symmetry``: same states, transitions, verdict and trace. ``reduce="all"``
    applies symmetry only and ``"por"`` nothing (see the module essay). ``partition`` is
    ``"hash"`` (default where ``fork`` exists) or ``"crc32"``. ``progress(states, frontier,
    transitions)`` is called between levels, at most every ``progress_every`` seconds.
    """
    return _explore_parallel(model_spec, config, processes, max_states, reduce, partition, progress,
                             progress_every=progress_every)[0]


def _explore_parallel(model_spec: str, config: Mapping[str, Any] | None, processes: int, max_states: int,
                      reduce: str, partition: str | None,
                      progress: Callable[[int, int, int], None] | None,
                      method: str | None = None, progress_every: float = 3.0) -> tuple[CheckResult, list[dict]]:
    """:func:`explore_parallel`, plus per-worker seconds spent in each phase of a level (for the benchmark)."""
    if processes < 1:
        raise ModelError("processes must be at least 1")
    if max_states < 1:
        raise ModelError("max_states must be at least 1")
    effective = _EFFECTIVE_REDUCE[check_reduce(reduce)]
    method, partition = _start_method(partition, method)
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
    timing: list[dict[str, float]] = [{} for _ in range(processes)]
    bad = machine.invariant_violation(machine.init)
    if bad:
        explorer.parents = {init: None}
        violation = explorer._violation_at(init, bad)
    else:
        pool: _Pool | None = None
        graceful = False
        try:
            if processes > 1:
                import numpy  # noqa: F401 - imported once here, inherited by forked workers

            pool = _Pool(processes, model_spec, config, effective, partition, method)
            pool.broadcast("seed", init)
            next_report = time.perf_counter() + progress_every
            while True:
                reports = pool.broadcast("level", stored, max_states - stored)
                for w, r in enumerate(reports):
                    for phase, sec in r["timing"].items():
                        timing[w][phase] = timing[w].get(phase, 0.0) + sec
                stored_before, transitions_before = stored, transitions
                stored += sum(r["new"] for r in reports)
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
                    stored = stored_before + sum(n for n, _ in counts)
                    transitions = transitions_before + sum(t for _, t in counts)
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
                    transitions = transitions_before + sum(t for _, t in pool.broadcast("upto", cut))
                    exhaustive = False
                if violation is not None or cut is not None or frontier == 0:
                    break
                depth += 1
                if progress is not None and time.perf_counter() >= next_report:
                    progress(stored, frontier, transitions)
                    next_report = time.perf_counter() + progress_every
            graceful = True
        finally:
            if pool is not None:
                pool.close(graceful)
    if violation is None and exhaustive and machine.progress_labels:
        from .liveness import find_starvation

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
    ), timing


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


# --------------------------------------------------------------------------
# The benchmark behind docs/parallel.md.
# --------------------------------------------------------------------------


class _Contention:
    """CPU seconds that *other* processes used while a measurement ran (Linux ``/proc/stat``).

    The benchmark shares two cores with whatever else runs; a run during which others
    took a noticeable share of the cores is reported, but kept apart from the clean ones.
    """

    HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    @classmethod
    def busy(cls) -> float:
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except OSError:  # pragma: no cover - not Linux: contention unknown, counted as none
            return 0.0
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return (sum(fields[:8]) - idle) / cls.HZ

    @staticmethod
    def own() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def __enter__(self) -> "_Contention":
        self.b0, self.o0, self.t0 = self.busy(), self.own(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.t0
        self.foreign = max(0.0, (self.busy() - self.b0) - (self.own() - self.o0))

    @property
    def clean(self) -> bool:
        #: Others took under a tenth of one core on average.
        return self.foreign < 0.1 * self.wall

    @classmethod
    def wait_quiet(cls, limit: float) -> None:
        """Wait (up to ``limit`` seconds) for a second in which the machine is nearly idle."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            b0 = cls.busy()
            time.sleep(1.0)
            if cls.busy() - b0 < 0.1:
                return


def _bench(argv: list[str] | None = None) -> int:
    """``python -m safeprefetch._check.distributed [MODEL] [--set K=V]... [--repeat N] [--processes 1,2] [--partition P]``

    Interleaves, N times, the sequential explorer (``check(..., reduce="none")``,
    compilation included) with :func:`explore_parallel` at each process count
    (compilation and process start-up included), checks that every run agrees with
    the sequential one, and prints a Markdown table row of medians: over every
    repetition, and over the *clean* ones, in which other processes used less than a
    tenth of a core during each run. Before each repetition it waits (``--wait``
    seconds at most) for the machine to be idle. Then every sample, and the seconds
    each worker spent in each phase of the last run.

    ``--ceiling`` measures instead what two cores give two *independent* sequential
    searches, the most a two-process search could gain here; ``--hash-cost`` the cost
    of each partition function per state.
    """
    import argparse
    import statistics

    from .explore import check

    p = argparse.ArgumentParser(prog="python -m safeprefetch._check.distributed")
    p.add_argument("model", nargs="?", default="prefetcher")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--processes", default="1,2")
    p.add_argument("--partition", default="hash")
    p.add_argument("--wait", type=float, default=60.0)
    p.add_argument("--ceiling", action="store_true")
    p.add_argument("--hash-cost", action="store_true")
    args = p.parse_args(argv)
    config = dict(item.split("=", 1) for item in args.set)
    model = load_model(args.model)
    if args.ceiling:
        return _ceiling(model, config, args.repeat, args.wait)
    if args.hash_cost:
        return _hash_cost(model, config)
    counts = [int(n) for n in args.processes.split(",")]
    names = ["seq"] + [f"P={n}" for n in counts]
    samples: list[dict[str, _Contention]] = []
    states = 0
    phases: dict[int, list[dict[str, float]]] = {}
    for _ in range(args.repeat):
        _Contention.wait_quiet(args.wait)
        rep: dict[str, _Contention] = {}
        with _Contention() as rep["seq"]:
            ref = check(model, config, reduce="none")
        states = ref.states
        for n in counts:
            with _Contention() as rep[f"P={n}"]:
                got, phases[n] = _explore_parallel(args.model, config, n, DEFAULT_MAX_STATES, "none",
                                                   args.partition, None)
            if (got.verdict, got.states, got.transitions, got.trace) != (ref.verdict, ref.states, ref.transitions,
                                                                          ref.trace):
                raise SystemExit(f"P={n} disagrees with the sequential explorer")
        samples.append(rep)

    def row(reps: list[dict[str, _Contention]]) -> str:
        if not reps:
            return "| - " * (1 + 2 * len(counts))
        med = {k: statistics.median(r[k].wall for r in reps) for k in names}
        cols = [f"{med['seq']:.2f} s ({states / med['seq'] / 1000:,.0f}k/s)"]
        for k in names[1:]:
            cols.append(f"{med[k]:.2f} s ({states / med[k] / 1000:,.0f}k/s) | x{med['seq'] / med[k]:.2f}")
        return "| " + " | ".join(cols) + f" | {len(reps)} "

    clean = [r for r in samples if all(c.clean for c in r.values())]
    label = " ".join(args.set) or "defaults"
    print(f"| {label} | {states:,} | all {row(samples)}|")
    print(f"| {label} | {states:,} | clean {row(clean)}|")
    for k in names:
        print(f"  {k}: " + " ".join(f"{r[k].wall:.2f}{'' if r[k].clean else '*'}" for r in samples))
    print("  (* = others used more than a tenth of a core meanwhile; foreign CPU s: "
          + " ".join(f"{max(c.foreign for c in r.values()):.1f}" for r in samples) + ")")
    for n, per_worker in phases.items():
        for w, tm in enumerate(per_worker):
            print(f"  P={n} worker {w}: " + " ".join(f"{k} {v:.2f}" for k, v in tm.items()))
    return 0


def _ceiling(model, config: dict, repeat: int, wait: float) -> int:
    """Throughput of two concurrent independent sequential searches over one alone."""
    import statistics

    ctx = mp.get_context("fork")

    def one(q) -> None:
        from .explore import check

        check(model, config, reduce="none")
        q.put(None)

    alone, pair = [], []
    for _ in range(repeat):
        _Contention.wait_quiet(wait)
        q = ctx.Queue()
        for n, out in ((1, alone), (2, pair)):
            with _Contention() as c:
                ps = [ctx.Process(target=one, args=(q,)) for _ in range(n)]
                for proc in ps:
                    proc.start()
                for proc in ps:
                    q.get()
                    proc.join()
            out.append(c)
    marks = lambda cs: " ".join(f"{c.wall:.2f}{'' if c.clean else '*'}" for c in cs)  # noqa: E731
    a = statistics.median(c.wall for c in alone)
    b = statistics.median(c.wall for c in pair)
    print(f"one search alone {a:.2f} s; two at once {b:.2f} s; two-core throughput gain x{2 * a / b:.2f}")
    print(f"  alone: {marks(alone)}\n  two: {marks(pair)}")
    return 0


def _hash_cost(model, config: dict) -> int:
    """Nanoseconds per state of each partition function, over every state of the config."""
    machine = model.compile(config)
    explorer = Explorer(machine, reduce="none")
    explorer.run()
    states = list(explorer.parents)
    for name, fn in (("hash", hash), ("crc32", _crc_hash)):
        t = time.perf_counter()
        for s in states:
            fn(s) % 2
        print(f"{name}: {(time.perf_counter() - t) / len(states) * 1e9:,.0f} ns per state")
    return 0


if __name__ == "__main__":  # pragma: no cover - the benchmark entry point
    raise SystemExit(_bench())

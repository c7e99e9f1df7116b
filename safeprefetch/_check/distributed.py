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
(``path_to``, ``violation_at``, ``violation_on``), which also classifies
hangs (deadlock, lost wakeup, shutdown hang) on that path with the shared
classifier of :mod:`.verdict`.

*One expansion.* Workers expand states with the explorer's own expansion
function (:class:`~.expand.Expander`) and judge terminal states with its
classifier (:func:`.verdict.terminal`), so the successors, their order,
"stuck" and the transition counts are the sequential search's by
construction, not by a second implementation kept in step. The worker is in
:mod:`.shard`; this module is the coordinator.

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
:func:`.liveness.starvation` -- the call :class:`Explorer` makes, so the lasso
and its ``cycle_start`` are the same -- which runs its own sequential search
of the scheduling policy's graph; only models that declare progress steps
pay for it.

Processes and shutdown
----------------------
The caller passes a Model class (names are resolved above this layer, by
the catalog). Workers get the class back from a :class:`~.modelref.ModelRef`
-- its module and qualified name, or the ``.py`` file it was loaded from --
and compile it themselves; nothing but names, configs, states and numbers
crosses a process boundary.
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

The benchmark behind ``docs/parallel.md`` is harness code, in
``safeprefetch._harness.bench_parallel``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import time
from typing import Any, Callable, Mapping

from .._dsl.model import Model, ModelError
from .expand import check_max_states
from .explore import DEFAULT_MAX_STATES, CheckResult, Explorer, Violation, _is_default
from .liveness import starvation
from .modelref import ModelRef
from .reduce import check_reduce
from .shard import PARTITIONS, POLL, RADIX, worker_main

__all__ = ["PARTITIONS", "explore_parallel", "explore_parallel_timed"]

#: Seconds a worker is given to stop on request before it is terminated, then killed.
_JOIN_TIMEOUT = 5.0

#: Reduction actually applied by the workers for each requested setting (see the essay).
_EFFECTIVE_REDUCE = {"none": "none", "symmetry": "symmetry", "por": "none", "all": "symmetry"}


class _WorkerError(RuntimeError):
    """A worker process failed in a way that cannot be re-raised as the original exception."""


class _Pool:
    """The worker processes and their queues; :meth:`close` always leaves no process behind."""

    def __init__(self, nproc: int, ref: ModelRef, config: Mapping[str, Any], reduce: str, partition: str,
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
                p = ctx.Process(target=worker_main, name=f"safeprefetch-explore-{w}", daemon=True,
                                args=(w, nproc, ref, dict(config), reduce, partition, self.ctrl[w], self.inboxes,
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
                me, status, payload = self.results.get(timeout=POLL)
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
            me, status, payload = self.results.get(timeout=POLL)
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


def explore_parallel(model: type[Model], config: Mapping[str, Any] | None = None, processes: int = 2,
                     max_states: int = DEFAULT_MAX_STATES, reduce: str = "none", *,
                     partition: str | None = None,
                     progress: Callable[[int, int, int], None] | None = None,
                     progress_every: float = 3.0) -> CheckResult:
    """Explore the Model class ``model`` at ``config`` with ``processes`` workers.

    The result equals ``Explorer(machine, reduce=reduce).run()`` for ``reduce`` in
    ``none``/``symmetry``: same states, transitions, verdict and trace. ``reduce="all"``
    applies symmetry only and ``"por"`` nothing (see the module essay). ``partition`` is
    ``"hash"`` (default where ``fork`` exists) or ``"crc32"``. ``progress(states, frontier,
    transitions)`` is called between levels, at most every ``progress_every`` seconds. A
    catalog name or a ``.py`` path is resolved by the caller (``safeprefetch.load_model``).
    """
    return explore_parallel_timed(model, config, processes, max_states, reduce, partition, progress,
                                  progress_every=progress_every)[0]


def explore_parallel_timed(model: type[Model], config: Mapping[str, Any] | None, processes: int,
                           max_states: int, reduce: str, partition: str | None,
                           progress: Callable[[int, int, int], None] | None, method: str | None = None,
                           progress_every: float = 3.0) -> tuple[CheckResult, list[dict[str, float]]]:
    """:func:`explore_parallel`, plus per-worker seconds spent in each phase of a level (for the benchmark)."""
    if processes < 1:
        raise ModelError("processes must be at least 1")
    check_max_states(max_states)
    effective = _EFFECTIVE_REDUCE[check_reduce(reduce)]
    method, partition = _start_method(partition, method)
    ref = ModelRef.of(model)
    config = dict(config or {})
    machine = model.compile(config)  # config errors surface here, before any process starts
    expected = model.expected if not config or _is_default(model, machine.config) else None

    t0 = time.perf_counter()
    levels = _Levels(Explorer(machine, reduce=effective), max_states, processes)
    bad = machine.invariant_violation(machine.init)
    if bad:
        levels.fail_at_root(bad)
    else:
        if processes > 1:
            import numpy  # noqa: F401 - imported once here, inherited by forked workers
        levels.search(_Pool(processes, ref, config, effective, partition, method), progress, progress_every)
    violation = levels.violation
    if violation is None and levels.exhaustive and machine.progress_labels:
        violation = starvation(machine)  # it searches the scheduling policy's own graph
    return CheckResult(
        model=machine.name,
        config=dict(machine.config),
        strategy="bfs",
        exhaustive=levels.exhaustive or violation is not None,
        verdict=violation.kind if violation else "ok",
        states=levels.stored,
        transitions=levels.transitions,
        seconds=time.perf_counter() - t0,
        violation=violation,
        expected=expected,
        max_depth=levels.depth,
    ), levels.timing


class _Levels:
    """The coordinator's side of the search: the barrier after each level, the counts, the verdict."""

    def __init__(self, explorer: Explorer, max_states: int, nproc: int):
        #: Builds traces from the chains workers send (its ``parents`` is one chain at a time).
        self.explorer = explorer
        self.max_states = max_states
        self.stored, self.transitions, self.depth = 1, 0, 0
        self.exhaustive = True
        self.violation: Violation | None = None
        #: Per worker, seconds per phase, summed over the levels.
        self.timing: list[dict[str, float]] = [{} for _ in range(nproc)]

    def fail_at_root(self, bad: tuple[str, str]) -> None:
        root = self.explorer.expander.root()
        self.explorer.parents = {root: None}
        self.violation = self.explorer.violation_at(root, bad)

    def search(self, pool: "_Pool", progress: Callable[[int, int, int], None] | None, every: float) -> None:
        """Run levels until a violation, the state cap, or an empty frontier; always close ``pool``."""
        graceful = False
        try:
            pool.broadcast("seed", self.explorer.expander.root())
            next_report = time.perf_counter() + every
            while True:
                reports = pool.broadcast("level", self.stored, self.max_states - self.stored)
                frontier, cut = self._settle(pool, reports)
                if self.violation is not None or cut or frontier == 0:
                    break
                self.depth += 1
                if progress is not None and time.perf_counter() >= next_report:
                    progress(self.stored, frontier, self.transitions)
                    next_report = time.perf_counter() + every
            graceful = True
        finally:
            pool.close(graceful)

    def _settle(self, pool: "_Pool", reports: list[dict]) -> tuple[int, bool]:
        """Add up one level's reports and decide what sequential BFS reports there.

        A terminal violation at this depth beats a step or invariant violation of the next
        length; among each, the smallest serial or key is the first in BFS order. Where the
        search stops inside the level, the workers count what sequential BFS had seen by
        then (``upto``). Returns the next frontier's size and whether the state cap cut.
        """
        for w, r in enumerate(reports):
            for phase, sec in r["timing"].items():
                self.timing[w][phase] = self.timing[w].get(phase, 0.0) + sec
        stored_before, transitions_before = self.stored, self.transitions
        self.stored += sum(r["new"] for r in reports)
        self.transitions += sum(r["transitions"] for r in reports)
        cut = next((r["cut"] for r in reports if r["cut"] is not None), None)
        terms = [r["term"] for r in reports if r["term"] is not None
                 and (cut is None or r["term"][0] < cut // RADIX)]
        ons = [r["on"] for r in reports if r["on"] is not None and (cut is None or r["on"][1] < cut)]
        explorer = self.explorer
        if terms:
            serial, state, verdict = min(terms, key=lambda c: c[0])
            # Sequential BFS stops right after this state: count what it had seen by then.
            counts = pool.broadcast("upto", serial * RADIX + RADIX - 1)
            self.stored = stored_before + sum(n for n, _ in counts)
            self.transitions = transitions_before + sum(t for _, t in counts)
            explorer.parents = _chain(pool, serial)
            self.violation = explorer.violation_at(state, verdict)
        elif ons:
            kind, _key, serial, state, extra = min(ons, key=lambda c: c[1])
            explorer.parents = _chain(pool, serial)
            if kind == "inv":
                self.violation = explorer.violation_at(state, extra)
            else:
                v = next(n for c, n in explorer.machine.successors(state) if c == extra)
                self.violation = explorer.violation_on(state, extra, v)
        if cut is not None and not terms:
            # Sequential BFS stopped on the successor numbered ``cut``: count its transitions.
            self.transitions = transitions_before + sum(t for _, t in pool.broadcast("upto", cut))
            self.exhaustive = False
        return sum(r["frontier"] for r in reports), cut is not None


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

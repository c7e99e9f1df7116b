"""Distributed exploration on dask.distributed: the BFS frontier partitioned by state hash across actors.

What it guarantees
------------------
:func:`explore_cluster` returns what ``Explorer(machine, reduce=...).run()``
returns for ``reduce="none"`` or ``"symmetry"`` -- the same distinct-state and
transition counts, depth, verdict and *the same counterexample*, step for
step -- on any number of dask workers, and also when ``max_states`` cuts the
search (the same states are kept). It is the sequential level-synchronous
BFS cut into pieces by who owns which state; nothing about the search order
depends on the partition. With ``store="fingerprint"`` each worker keeps
64-bit fingerprints instead of states (TLC's design, :mod:`.fpshard`), and
the result is the same unless two states share a fingerprint, which the
result's ``collision_probability`` estimates. ``tests/test_parallel.py``
compares every field on every catalog model, on a real LocalCluster.

Theory of operation
-------------------
*Ownership.* There are P dask workers, each holding one actor
(:mod:`.cluster`), each actor one shard (:class:`~.shard.Worker`). State
``s`` belongs to shard ``f(s) % P``, where ``f`` is
:func:`~.fingerprint.stable_fingerprint`, the same in every process (dask
workers do not share a string-hash secret, so ``hash`` would not do). Only
the owner stores ``s``: each shard holds one slice of the visited set and
expands only the states it owns.

*One BFS level is one call per actor; no state passes through the client:*

1. every shard expands its slice of the frontier, in serial order (below).
   Its successors go into a dict for this level, which drops the many
   duplicates that one level produces (interleavings that commute meet again
   at the same depth: at the reference prefetcher config there are 3.4
   transitions per distinct successor, and 99% of the duplicates are within
   the level). Then each distinct successor is hashed once and put in the
   batch of its owner;
2. every shard sends one batch (states, plus their keys as an int64 array)
   straight to every other shard -- actor to actor, worker to worker -- reads
   the P - 1 batches addressed to it, and inserts its own part and the
   received parts in key order, keeping only states it has never seen;
3. the shards exchange the sorted keys of their new states (8 bytes per
   state, not the states), so each can number its own states globally;
4. each returns its report to the client: new states, transitions, the
   first violation of each kind it saw, and whether the state cap cut the
   level. The client is the barrier: it adds up the reports, decides stop or
   continue, and starts the next level.

With one worker, steps 2 and 3 vanish and successors go straight into
the visited set, as in :class:`Explorer`.

*The sequential order, rebuilt.* Sequential BFS stores states in a precise
order: level by level, and inside level ``d + 1`` in the order their first
discoverer in level ``d`` was expanded, then by the position of the
successor in that state's (canonical) successor list. So every state gets a
*serial number*, its index in the sequential ``parents`` dict, and every
discovery a *key*, ``serial(parent) * RADIX + position``. Keys are unique
and ordered as sequential BFS meets them. Inserting in key order (step 2)
makes the first insertion of a state its smallest-key discovery: the parent
sequential BFS keeps. The global rank of a new key is its rank among the
shard's own new keys plus, for every other shard, the number of that
shard's new keys below it (step 3, one binary search per shard); ``serial
= states stored before the level + rank``. With serials, "the first
violation in BFS order" is the one with the smallest key, and the state cap
keeps exactly the states of rank below what is left of the budget.

*Shortest first.* A terminal violation at depth ``d`` (a hang, a failed end
check) beats a step or invariant violation found while expanding depth ``d``
(length ``d + 1``), so shards finish the level and the client decides
after the barrier: the smallest terminal serial if there is one, else the
smallest step/invariant key. A shard that meets a terminal violation stops
expanding (nothing later in its slice can beat it) but still takes part in
the exchange. Sequential BFS stops *inside* the level; the client asks
the shards how many states and transitions it had seen by then (``upto``),
so even the counts agree.

*Counterexamples.* Parents stay where they are. In full mode a shard keeps
each state's discovery key, so ``key // RADIX`` is the parent's serial: the
client asks every shard "who holds serial n?", and the holder walks the
chain back as far as the states are its own and returns them with the first
serial it does not hold. In fingerprint mode a shard keeps each
fingerprint's parent fingerprint, and the owner of a fingerprint is known
from it, so the client asks the owner of each link for the next. Either
way the client then rebuilds the choices by matching successors, with the
code :class:`Explorer` uses (``walk``, ``violation_at``, ``violation_on``),
which also classifies hangs (deadlock, lost wakeup, shutdown hang) on that
path with the shared classifier of :mod:`.verdict`.

*One expansion.* Shards expand states with the explorer's own expansion
function (:class:`~.expand.Expander`) and judge terminal states with its
classifier (:func:`.verdict.terminal`), so the successors, their order,
"stuck" and the transition counts are the sequential search's by
construction, not by a second implementation kept in step. The shard is in
:mod:`.shard` (and :mod:`.fpshard`); the dask side in :mod:`.cluster`; this
module is the coordinator.

*Garbage collection.* Stored states are immutable tuples; after each level a
shard freezes the objects it holds (``gc.freeze``) so that full collections
stop rescanning the whole visited set, and unpickling and merging, which
build nothing but such tuples, run with the cyclic GC paused.

Reductions
----------
Symmetry is applied by the shards (successors are canonicalised before they
are routed), so ``reduce="symmetry"`` reproduces ``Explorer(reduce="symmetry")``.
Partial-order reduction is not: its cycle proviso (C3) asks "is any ample
successor already stored?", a global question a partitioned search could only
answer with a round trip per state. ``reduce="all"`` therefore runs symmetry
only, and ``reduce="por"`` the full graph: the verdict and the trace length
are those of sequential ``reduce="all"``/``"por"`` (which re-searches without
POR for a shortest trace anyway), the state count is larger.

Liveness (starvation) is checked afterwards, in the client, by
:func:`.liveness.starvation` -- the call :class:`Explorer` makes, so the lasso
and its ``cycle_start`` are the same -- which runs its own sequential search
of the scheduling policy's graph; only models that declare progress steps
pay for it.

The cluster, and what crosses it
--------------------------------
The caller passes a Model class (names are resolved above this layer, by
the catalog). Actors get the class back from a :class:`~.modelref.ModelRef`
-- its module and qualified name, or the ``.py`` file it was loaded from --
and compile it themselves; nothing but names, configs, pickled states and
numbers crosses a process boundary, so every dask worker needs the package
(and a user's model file at the same path). Any way out of
:func:`explore_cluster` -- a result, an exception, KeyboardInterrupt -- goes
through one ``finally`` that aborts and releases the actors and, for
``cluster="local:N"``, closes the cluster it started (:mod:`.cluster`).

Open question: each level has three synchronisation points (batches, keys,
client), and every one waits for the slowest shard. Overlapping the
exchange with expansion (streaming batches in chunks) would shorten the tail
of each level. The frontier of a level is held in memory, whole, by its
owners: a fingerprint-mode search on a cluster does not spill it to disk as
the single-process one does.

The benchmark behind ``docs/parallel.md`` is harness code, in
``safeprefetch._harness.bench_parallel``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .._dsl.model import Model, ModelError
from .cluster import ActorPool, ClusterError, open_cluster, prepare
from .determinism import check_before_search
from .expand import check_max_states
from .explore import DEFAULT_MAX_STATES, CheckResult, Explorer, Violation
from .fingerprint import collision_probability, stable_fingerprinter
from .liveness import STARVATION_CAPPED, bounded_starvation
from .reduce import check_reduce
from .shard import RADIX

__all__ = ["ClusterError", "ClusterStats", "STORES", "explore_cluster", "explore_cluster_timed"]

#: How a cluster search may keep its visited states (bitstate is depth first: not partitioned).
STORES = ("full", "fingerprint")

#: Reduction actually applied by the shards for each requested setting (see the essay).
_EFFECTIVE_REDUCE = {"none": "none", "symmetry": "symmetry", "por": "none", "all": "symmetry"}


@dataclass(frozen=True)
class ClusterStats:
    """Where a cluster search spent its time and memory (for the benchmark and docs/parallel.md)."""

    #: Dask workers, one shard each.
    workers: int
    #: BFS levels run (client barriers).
    levels: int
    #: Seconds to start the actors (each compiles the model) and connect them.
    setup_seconds: float
    #: Per shard, seconds per phase of a level, summed over the levels ("cpu" is the shard's CPU
    #: time), and "bytes sent": the pickled batches and keys it sent to its peers.
    phases: tuple[Mapping[str, float], ...] = ()
    #: Per shard, the worker process's resident bytes at the end of the search.
    rss: tuple[int, ...] = ()
    #: Per shard, the bytes of its fingerprint table (fingerprint mode; 0 in full mode).
    table_bytes: tuple[int, ...] = field(default=())


def explore_cluster(model: type[Model], config: Mapping[str, Any] | None = None, *, cluster: Any = "local:2",
                    max_states: int = DEFAULT_MAX_STATES, reduce: str = "none", store: str = "full",
                    progress: Callable[[int, int, int], None] | None = None,
                    progress_every: float = 3.0) -> CheckResult:
    """Explore the Model class ``model`` at ``config`` on a dask cluster, one shard per worker.

    ``cluster`` is ``"local:N"`` (a LocalCluster of N single-threaded worker processes,
    started for this call and closed after it), a scheduler address (``"tcp://HOST:PORT"``)
    or a ``distributed.Client``. The result equals ``Explorer(machine, reduce=reduce).run()``
    for ``reduce`` in ``none``/``symmetry``: same states, transitions, verdict and trace;
    ``reduce="all"`` applies symmetry only and ``"por"`` nothing (see the module essay).
    ``store="fingerprint"`` keeps 64-bit fingerprints instead of states on the workers.
    ``progress(states, frontier, transitions)`` is called between levels, at most every
    ``progress_every`` seconds. A catalog name or a ``.py`` path is resolved by the caller
    (``safeprefetch.load_model``). Needs the ``distributed`` extra.
    """
    return explore_cluster_timed(model, config, cluster=cluster, max_states=max_states, reduce=reduce,
                                 store=store, progress=progress, progress_every=progress_every)[0]


def explore_cluster_timed(model: type[Model], config: Mapping[str, Any] | None = None, *, cluster: Any = "local:2",
                          max_states: int = DEFAULT_MAX_STATES, reduce: str = "none", store: str = "full",
                          progress: Callable[[int, int, int], None] | None = None,
                          progress_every: float = 3.0) -> tuple[CheckResult, ClusterStats]:
    """:func:`explore_cluster`, plus where the time and memory went (:class:`ClusterStats`)."""
    check_max_states(max_states)
    effective = _EFFECTIVE_REDUCE[check_reduce(reduce)]
    if store not in STORES:
        raise ModelError(f"unknown store {store!r} for a cluster search (known: {', '.join(STORES)})")
    ref, config, machine, expected = prepare(model, config)
    check_before_search(machine, effective, max_states)  # (what the one-process search checks first)

    t0 = time.perf_counter()
    levels = _Levels(Explorer(machine, reduce=effective), max_states, store)
    bad = machine.invariant_violation(machine.init)
    stats = ClusterStats(workers=0, levels=0, setup_seconds=0.0)
    if bad:
        levels.fail_at_root(bad)
    else:
        with open_cluster(cluster) as client:
            t_setup = time.perf_counter()
            pool = ActorPool(client, ref, config, effective, store)
            setup = time.perf_counter() - t_setup
            levels.search(pool, progress, progress_every)
            stats = ClusterStats(workers=pool.nproc, levels=levels.count, setup_seconds=setup,
                                 phases=tuple(levels.timing), rss=tuple(m["rss"] for m in levels.memory),
                                 table_bytes=tuple(m["table"] for m in levels.memory))
    violation = levels.violation
    done, why = levels.exhaustive, f"stopped at the state cap, max_states={max_states:,}"
    if violation is None and levels.exhaustive and machine.progress_labels:
        violation, done = bounded_starvation(machine, max_states)  # the scheduling policy's own graph
        why = why if done else f"{STARVATION_CAPPED}, max_states={max_states:,}"
    fingerprints = store == "fingerprint"
    return CheckResult(
        model=machine.name,
        config=dict(machine.config),
        strategy="bfs",
        exhaustive=done or violation is not None,
        verdict=violation.kind if violation else "ok",
        states=levels.stored,
        transitions=levels.transitions,
        seconds=time.perf_counter() - t0,
        violation=violation,
        expected=expected,
        max_depth=levels.depth,
        store=store,
        collision_probability=collision_probability(levels.stored, levels.transitions + 1) if fingerprints else None,
        stop_reason=None if done or violation is not None else "max_states",
        stop_message="" if done or violation is not None else why,
    ), stats


class _Levels:
    """The client's side of the search: the barrier after each level, the counts, the verdict."""

    def __init__(self, explorer: Explorer, max_states: int, store: str):
        #: Builds traces from the chains shards send (its ``parents`` is one chain at a time).
        self.explorer = explorer
        self.max_states = max_states
        self.fingerprints = store == "fingerprint"
        self.stored, self.transitions, self.depth, self.count = 1, 0, 0, 0
        self.exhaustive = True
        self.violation: Violation | None = None
        #: Per shard, seconds per phase (and bytes sent), summed over the levels; memory at the end.
        self.timing: list[dict[str, float]] = []
        self.memory: list[dict[str, int]] = []

    def fail_at_root(self, bad: tuple[str, str]) -> None:
        root = self.explorer.expander.root()
        self.explorer.parents = {root: None}
        self.violation = self.explorer.violation_at(root, bad)

    def search(self, pool: ActorPool, progress: Callable[[int, int, int], None] | None, every: float) -> None:
        """Run levels until a violation, the state cap, or an empty frontier; always close ``pool``."""
        graceful = False
        self.timing = [{} for _ in range(pool.nproc)]
        try:
            pool.broadcast("seed", self.explorer.expander.root())
            next_report = time.perf_counter() + every
            while True:
                reports = pool.broadcast("level", self.stored, self.max_states - self.stored)
                self.count += 1
                frontier, cut = self._settle(pool, reports)
                if self.violation is not None or cut or frontier == 0:
                    break
                self.depth += 1
                if progress is not None and time.perf_counter() >= next_report:
                    progress(self.stored, frontier, self.transitions)
                    next_report = time.perf_counter() + every
            self.memory = pool.memory()
            graceful = True
        finally:
            pool.close(graceful)

    def _settle(self, pool: ActorPool, reports: list[dict]) -> tuple[int, bool]:
        """Add up one level's reports and decide what sequential BFS reports there.

        A terminal violation at this depth beats a step or invariant violation of the next
        length; among each, the smallest serial or key is the first in BFS order. Where the
        search stops inside the level, the shards count what sequential BFS had seen by
        then (``upto``). Returns the next frontier's size and whether the state cap cut.
        """
        for w, r in enumerate(reports):
            for phase, sec in r["timing"].items():
                self.timing[w][phase] = self.timing[w].get(phase, 0.0) + sec
        stored_before, transitions_before = self.stored, self.transitions
        self.stored += sum(r["new"] for r in reports)
        self.transitions += sum(r["transitions"] for r in reports)
        cut = next((r["cut"] for r in reports if r["cut"] is not None), None)
        stuck = [r["term"] for r in reports if r["term"] is not None]
        terms = [t for t in stuck if cut is None or t[0] < cut // RADIX]
        ons = [r["on"] for r in reports if r["on"] is not None and (cut is None or r["on"][1] < cut)]
        # Cut inside the level with only a deeper violation found: sequential BFS judges the rest of the
        # level's stuck states before it stops (.cutoff), and the shards expanded all of it anyway.
        late = stuck if cut is not None and ons and not terms else []
        explorer = self.explorer
        if late:
            serial, state, verdict = min(late, key=lambda c: c[0])
            explorer.parents = self._chain(pool, serial, state)
            self.violation = explorer.violation_at(state, verdict)
        elif terms:
            serial, state, verdict = min(terms, key=lambda c: c[0])
            # Sequential BFS stops right after this state: count what it had seen by then.
            counts = pool.broadcast("upto", serial * RADIX + RADIX - 1)
            self.stored = stored_before + sum(n for n, _ in counts)
            self.transitions = transitions_before + sum(t for _, t in counts)
            explorer.parents = self._chain(pool, serial, state)
            self.violation = explorer.violation_at(state, verdict)
        elif ons:
            kind, _key, serial, state, extra = min(ons, key=lambda c: c[1])
            explorer.parents = self._chain(pool, serial, state)
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

    def _chain(self, pool: ActorPool, serial: int, state: tuple) -> dict[tuple, tuple | None]:
        """The parent chain of ``state`` (numbered ``serial``), as a ``parents`` dict from the initial state."""
        if self.fingerprints:
            return self._fingerprint_chain(pool, state)
        path: list[tuple] = []
        while serial >= 0:
            replies = [r for r in pool.broadcast("chain", serial) if r is not None]
            if len(replies) != 1:  # pragma: no cover - would mean two owners, or none
                raise ClusterError(f"cluster search: serial {serial} held by {len(replies)} shards")
            states, serial = replies[0]
            path.extend(states)
        path.reverse()
        return {s: (path[i - 1] if i else None) for i, s in enumerate(path)}

    def _fingerprint_chain(self, pool: ActorPool, state: tuple) -> dict[tuple, tuple | None]:
        """The chain of parent fingerprints from the owners, replayed into states from the initial state."""
        explorer = self.explorer
        fingerprint = stable_fingerprinter(explorer.expander.root())
        chain = [fingerprint(state)]
        while True:
            parent = pool.call(chain[-1] % pool.nproc, "parent_of", chain[-1])
            if parent is None:  # pragma: no cover - would mean a fingerprint without an owner
                raise ClusterError(f"cluster search: no shard holds fingerprint {chain[-1]:#x}")
            if parent == 0:
                break
            chain.append(parent)
        chain.reverse()
        real, _choices = explorer.walk(chain[1:], fingerprint)
        canon = explorer.expander.canon or (lambda x: x)
        path = [canon(s) for s in real]
        return {s: (path[i - 1] if i else None) for i, s in enumerate(path)}

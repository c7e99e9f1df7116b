"""Swarm search: K independent randomized searches, with different seeds, as tasks on a dask cluster.

What it guarantees
------------------
:func:`swarm_search` runs K sampling searches (:func:`~.strategies.search`
with ``random`` or ``pct``, seeds ``seed``, ``seed + 1``, ...), each a dask
task on the cluster, and reports

* the violation of the lowest-numbered run that found one, with its trace:
  a real schedule, judged by the explorer's own expansion and classifier,
  that ``replay`` re-runs, and that the same run (same strategy and seed)
  finds again on any machine;
* each run's coverage: schedules run, distinct states seen, transitions,
  seconds, and when it hit the bug.

Runs are independent and every random choice comes from the run's seed, so
the result does not depend on the number of workers or which finished
first: "first" is in run order, not in time. Nothing is exhaustive: a swarm
that finds nothing proves nothing, and says so (``exhaustive=False``).

Why a swarm
-----------
Holzmann, Joshi and Groce ("Swarm Verification Techniques", IEEE TSE 2011)
observed that for models too big to exhaust, many small searches that differ
in their randomness cover more distinct behaviour than one big search of the
same total cost, and that they parallelize perfectly: no shared state, no
barrier, no message but the result. Here each run samples schedules as
:mod:`.strategies` describes; mixing ``random`` (uniform walks) with
``pct`` (PCT's priority schedules, with a probabilistic guarantee per bug
depth) diversifies further. It is the answer for configurations whose state
space does not fit even a cluster's memory; the exhaustive search
(:mod:`.distributed`) is the answer when it does.

The cluster is the same as the exhaustive search's (:func:`~.cluster.open_cluster`):
``"local:N"`` is started for the call and closed after it. Any way out
cancels the runs still queued or running.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .._dsl.model import Model, ModelError
from .cluster import open_cluster, prepare
from .modelref import ModelRef
from .result import CheckResult
from .strategies import DEFAULT_MAX_STEPS, search

__all__ = ["SWARM_STRATEGIES", "SwarmResult", "SwarmRun", "swarm_search"]

#: The sampling strategies a swarm mixes (the others are systematic, or need Hypothesis' database).
SWARM_STRATEGIES = ("random", "pct")


@dataclass(frozen=True)
class SwarmRun:
    """One run of a swarm: what it searched and what it found."""

    #: The run's number, from 0.
    index: int
    #: ``random`` or ``pct``.
    strategy: str
    #: The seed of every random choice of the run: ``search(model, strategy, seed=seed)`` repeats it.
    seed: int
    #: "ok" or the kind of the violation it found.
    verdict: str
    #: Schedules run (the run stops at its first failing schedule).
    schedules: int
    #: Distinct states the run saw, over all its schedules.
    states: int
    #: Transitions taken.
    transitions: int
    #: Seconds the run took on its worker.
    seconds: float
    #: The number of the first failing schedule, or None.
    schedules_to_bug: int | None = None
    #: Steps of the trace it found (0 if none).
    trace_length: int = 0
    #: The dask worker that ran it.
    worker: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "strategy": self.strategy, "seed": self.seed, "verdict": self.verdict,
                "schedules": self.schedules, "states": self.states, "transitions": self.transitions,
                "seconds": round(self.seconds, 6), "schedules_to_bug": self.schedules_to_bug,
                "trace_length": self.trace_length, "worker": self.worker}


@dataclass(frozen=True)
class SwarmResult(CheckResult):
    """A :class:`CheckResult` for a swarm: the first violation in run order, and every run's coverage.

    ``states`` and ``transitions`` are summed over the runs (a state two runs saw counts twice);
    ``seconds`` is the wall-clock time of the whole swarm.
    """

    #: Every run, in run order.
    runs: tuple[SwarmRun, ...] = ()
    #: The index of the run whose violation is reported, or None.
    found_by: int | None = None
    #: Dask workers the swarm ran on.
    workers: int = 0
    #: One line per run, for people (the text output prints it).
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        d = super().to_json()
        d["swarm"] = {"found_by": self.found_by, "workers": self.workers, "runs": [r.to_json() for r in self.runs]}
        return d


def swarm_search(model: type[Model], config: Mapping[str, Any] | None = None, *, cluster: Any = "local:2",
                 runs: int = 8, strategies: str | Sequence[str] = SWARM_STRATEGIES, seed: int = 0,
                 budget: int = 1000, depth: int = 3, max_steps: int = DEFAULT_MAX_STEPS,
                 time_limit: float | None = None) -> SwarmResult:
    """Run ``runs`` independent sampling searches of ``model`` on ``cluster``; see the module essay.

    Run ``i`` uses ``strategies[i % len(strategies)]`` (a single name: all runs use it) and seed
    ``seed + i``; ``budget``, ``depth``, ``max_steps`` and ``time_limit`` are each run's, as in
    :func:`~safeprefetch.lowlevel.search`. ``cluster`` is as for ``explore_cluster``.
    """
    names = (strategies,) if isinstance(strategies, str) else tuple(strategies)
    if not names or any(s not in SWARM_STRATEGIES for s in names):
        raise ModelError(f"a swarm runs {' and '.join(SWARM_STRATEGIES)} searches, not {strategies!r}")
    if runs < 1:
        raise ModelError("a swarm needs at least one run")
    if budget < 1:
        raise ModelError("budget must be at least 1")
    ref, config, machine, expected = prepare(model, config)
    t0 = time.perf_counter()
    plan = [(i, names[i % len(names)], seed + i) for i in range(runs)]
    tag = uuid.uuid4().hex[:12]
    with open_cluster(cluster) as client:
        workers = len(client.scheduler_info(n_workers=-1)["workers"])
        futures = [client.submit(_one_run, ref, config, strategy, s, budget, depth, max_steps, time_limit,
                                 pure=False, key=f"safeprefetch-swarm-{tag}-{i}")
                   for i, strategy, s in plan]
        try:
            outcomes = client.gather(futures)
        finally:
            client.cancel(futures)
    done = [_summary(i, strategy, s, *outcome) for (i, strategy, s), outcome in zip(plan, outcomes)]
    first = next((i for i, (r, _) in enumerate(outcomes) if r.violation is not None), None)
    violation = outcomes[first][0].violation if first is not None else None
    note = "\n".join(_line(r) for r in done)
    if first is None:
        note += "\nno violation in any run (sampling proves nothing)"
    return SwarmResult(
        model=machine.name, config=dict(machine.config), strategy="swarm", exhaustive=violation is not None,
        verdict=violation.kind if violation else "ok", states=sum(r.states for r in done),
        transitions=sum(r.transitions for r in done), seconds=time.perf_counter() - t0, violation=violation,
        expected=expected, max_depth=max(r.max_depth for r, _ in outcomes), runs=tuple(done), found_by=first,
        workers=workers, note=note)


def _one_run(ref: ModelRef, config: Mapping[str, Any], strategy: str, seed: int, budget: int, depth: int,
             max_steps: int, time_limit: float | None) -> tuple[CheckResult, str]:
    """A dask task: one sampling search on this worker; its result and the worker's address."""
    from distributed import get_worker

    result = search(ref.resolve(), strategy, seed=seed, budget=budget, depth=depth, max_steps=max_steps,
                    time_limit=time_limit, config=config)
    return result, get_worker().address


def _summary(index: int, strategy: str, seed: int, result: Any, worker: str) -> SwarmRun:
    return SwarmRun(index=index, strategy=strategy, seed=seed, verdict=result.verdict, schedules=result.schedules,
                    states=result.states, transitions=result.transitions, seconds=result.seconds,
                    schedules_to_bug=result.schedules_to_bug, trace_length=len(result.trace), worker=worker)


def _line(r: SwarmRun) -> str:
    found = f"{r.verdict} at schedule {r.schedules_to_bug} ({r.trace_length} steps)" if r.verdict != "ok" else "ok"
    return (f"run {r.index}: {r.strategy} seed {r.seed}: {r.schedules:,} schedules, {r.states:,} distinct states, "
            f"{r.seconds:.2f} s: {found}")

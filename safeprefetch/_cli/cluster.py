"""``check MODEL --cluster SPEC [--swarm K]``: the search on a dask cluster, from the command line.

``--cluster local:N`` starts a LocalCluster of N single-threaded worker
processes for the run and closes it after; ``--cluster tcp://HOST:PORT``
uses a running scheduler. Alone, ``--cluster`` runs the exhaustive
breadth-first search partitioned across the workers (``--store full`` or
``fingerprint``), whose result equals the single-process one. With
``--swarm K`` it runs K independent sampling searches instead (``--strategy
random`` or ``pct``; left at its default, the runs alternate the two), seeds
``--seed``, ``--seed + 1``, ..., and reports the first violation in run order
and every run's coverage.

The options that make no sense there are refused in one line (exit 2):
``--memory`` (each dask worker has its own memory limit), ``--store
bitstate`` (depth first, not partitioned), a ``--strategy`` other than bfs
without ``--swarm``. Without dask installed the check layer's message says
which extra to install.
"""

from __future__ import annotations

from typing import Any, Callable

from .._check.result import CheckResult
from .._tools.cliargs import UsageError

__all__ = ["add_arguments", "check_on_cluster"]


def add_arguments(ck: Any) -> None:
    """Add ``--cluster`` and ``--swarm`` to the ``check`` parser."""
    ck.add_argument("--cluster", metavar="SPEC",
                    help="search on a dask cluster: local:N (a LocalCluster of N worker processes, started for "
                         "the run) or tcp://HOST:PORT (a running scheduler); needs the distributed extra")
    ck.add_argument("--swarm", type=int, metavar="K",
                    help="with --cluster: K independent random/pct searches with seeds S, S+1, ... "
                         "(first violation in run order, and each run's coverage)")


def check_on_cluster(args: Any, model: Any, overrides: dict[str, str],
                     progress: Callable[[int, int, int], None]) -> CheckResult:
    """Run the search ``args`` asks for on ``args.cluster``."""
    if args.cluster is None:
        raise UsageError("--swarm runs on a cluster: add --cluster local:N or --cluster tcp://HOST:PORT")
    if args.memory is not None:
        raise UsageError("--memory applies to a single-process search; on a cluster each dask worker has its "
                         "own memory limit")
    if args.engine not in (None, "auto", "plain"):  # (accepted, and not used: each worker expands states itself)
        raise UsageError(f"--engine {args.engine} expands a single-process search, not one on a cluster")
    if args.swarm is not None and args.store != "full":
        raise UsageError(f"--swarm runs sampling searches, which store no states: drop --store {args.store}")
    if args.swarm is not None:
        from .._check.swarm import SWARM_STRATEGIES, swarm_search

        if args.swarm < 1:
            raise UsageError("--swarm needs at least 1 run")
        if args.strategy == "bfs":
            strategies: Any = SWARM_STRATEGIES
        elif args.strategy in SWARM_STRATEGIES:
            strategies = args.strategy
        else:
            raise UsageError(f"--swarm runs {' or '.join(SWARM_STRATEGIES)} searches, not --strategy {args.strategy}")
        return swarm_search(model, overrides, cluster=args.cluster, runs=args.swarm, strategies=strategies,
                            seed=args.seed, budget=args.budget, depth=args.depth)
    if args.strategy != "bfs":
        raise UsageError("--cluster searches breadth first: drop --strategy, or sample with --swarm K")
    if args.store == "bitstate":
        raise UsageError("--store bitstate searches depth first and is not partitioned: use full or fingerprint")
    from .._check.distributed import explore_cluster

    return explore_cluster(model, overrides, cluster=args.cluster, max_states=args.max_states, reduce=args.reduce,
                           store=args.store, progress=progress, progress_every=args.progress_seconds)

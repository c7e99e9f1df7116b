"""The comparison behind docs/strategies.md: every strategy against BFS, to the first bug.

What it measures, and why this way
----------------------------------
:func:`compare` runs each sampling strategy of
:func:`safeprefetch._check.strategies.search` with several seeds, and BFS
(with the default reductions) under a state cap, on broken catalog models at
configurations far beyond their defaults, and reports per (model, method) how
many seeds found a bug and the median schedules, seconds and states to the
first one. ``preempt`` and BFS are deterministic and run once.
:func:`format_comparison` renders the rows as the Markdown table of the
page; ``python -m safeprefetch._harness.strategies_table`` regenerates it
(``--json`` for the raw rows). Times are indicative only: the machines this
runs on are shared.

This is harness code: it names catalog models, so it sits above the catalog
and is not part of the checking layer.
"""

from __future__ import annotations

import statistics
import sys
from typing import Any, Callable, Iterable, Mapping, Sequence

from .._check.explore import DEFAULT_REDUCE, explore
from .._check.strategies import search
from .._tools.catalog import load_model
from .._tools.jsonout import emit_json

__all__ = ["BENCH_CASES", "BENCH_STRATEGIES", "compare", "format_comparison", "main"]

#: The rows of the table in docs/strategies.md: broken catalog models at
#: configurations whose state spaces are far beyond the catalog defaults.
BENCH_CASES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("one_cond_signal", {"producers": 2, "consumers": 4, "capacity": 1, "items": 4}),
    ("no_predicate_wait", {"producers": 4, "consumers": 4, "capacity": 3, "items": 3}),
    ("no_space_guard", {"producers": 4, "consumers": 4, "capacity": 8, "items": 9}),
    ("racy_counter", {"producers": 4, "consumers": 2, "capacity": 2, "items": 3}),
    ("close_without_wake", {"producers": 3, "consumers": 3, "capacity": 1, "items": 3}),
    ("notify_one_on_close", {"producers": 3, "consumers": 4, "capacity": 1, "items": 2}),
    ("shared_handle_close", {"producers": 4, "consumers": 3, "capacity": 2, "items": 2}),
    ("non_idempotent_close", {"producers": 4, "consumers": 3, "capacity": 2, "items": 2}),
    ("if_not_while", {"producers": 4, "consumers": 4, "capacity": 3, "items": 3}),
    ("unlocked_check", {"producers": 5, "consumers": 5, "capacity": 4, "items": 3}),
    # Small, but the bug window is one step wide: where the strategies differ most.
    ("double_buffer_swap", {}),
)

#: The strategies compared, with the parameters used for each.
BENCH_STRATEGIES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("random", {}),
    ("pct", {"depth": 2}),
    ("pct", {"depth": 3}),
    ("preempt", {"preemptions": 2}),
    ("hypothesis", {}),
)


def compare(models_and_configs: Iterable[tuple[Any, Mapping[str, Any]]], budget: int = 1000,
            seeds: Sequence[int] = (0, 1, 2), *, strategies: Sequence[tuple[str, Mapping[str, Any]]] = BENCH_STRATEGIES,
            bfs_cap: int = 200_000, time_limit: float | None = 60.0,
            log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Time every strategy (and BFS under ``bfs_cap`` states) to the first bug.

    ``models_and_configs`` holds ``(model, config)`` pairs, the model as a
    catalog name or a :class:`Model` class. Returns one row per (model,
    method): how many seeds found a bug, and the median schedules and seconds
    to the first bug over those seeds. ``preempt`` and BFS are deterministic
    and run once.
    """
    reduce = DEFAULT_REDUCE  # what `check` does by default
    rows: list[dict[str, Any]] = []
    for model, config in models_and_configs:
        cls = load_model(model) if isinstance(model, str) else model
        machine = cls.compile(config)
        bfs = explore(machine, max_states=bfs_cap)
        base = {"model": machine.name, "config": dict(config), "threads": len(machine.thread_names)}
        rows.append({**base, "method": f"bfs, reduce={reduce} (cap {bfs_cap:,} states)",
                     "found": int(bfs.violation is not None), "runs": 1, "verdict": bfs.verdict, "schedules": None, "seconds": bfs.seconds,
                     "states": bfs.states, "exhaustive": bfs.exhaustive,
                     "trace": len(bfs.trace) if bfs.violation else None})
        if log:
            log(f"{machine.name}: bfs {bfs.verdict} {bfs.states} states {bfs.seconds:.2f}s")
        for name, params in strategies:
            label = name + "".join(f" {'d' if p == 'depth' else p}={v}" for p, v in params.items())
            results = []
            for s in (seeds[:1] if name == "preempt" else seeds):
                r = search(machine, name, seed=s, budget=budget, time_limit=time_limit, **params)
                results.append(r)
                if log:
                    log(f"{machine.name}: {label} seed {s}: {r.verdict} after {r.schedules_to_bug} schedules "
                        f"{r.seconds:.2f}s")
            hits = [r for r in results if r.violation is not None]
            rows.append({
                **base, "method": label, "found": len(hits), "runs": len(results),
                "verdict": ", ".join(sorted({r.verdict for r in hits})) or "ok",
                "schedules": statistics.median(r.schedules_to_bug for r in hits) if hits else None,
                "seconds": statistics.median(r.seconds_to_bug for r in hits) if hits else
                statistics.median(r.seconds for r in results),
                "states": statistics.median(r.states for r in results),
                "exhaustive": False,
                "trace": statistics.median(len(r.trace) for r in hits) if hits else None,
            })
    return rows


def _duration(seconds: float) -> str:
    if seconds < 1.0:
        return f"{seconds * 1000:.2g} ms" if seconds < 0.01 else f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s"


def format_comparison(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows of :func:`compare` as a Markdown table."""
    head = ("| model (config) | method | found | schedules to bug | time to bug | states seen | trace |\n"
            "|---|---|---|---:|---:|---:|---:|")
    lines = [head]
    for r in rows:
        cfg = " ".join(f"{k}={v}" for k, v in r["config"].items()) or "defaults"
        found = f"{r['found']}/{r['runs']} {r['verdict']}" if r["found"] else f"0/{r['runs']}"
        sched = "" if r["schedules"] is None else f"{r['schedules']:g}"
        secs = _duration(r["seconds"]) if r["found"] else f"none in {_duration(r['seconds'])}"
        trace = "" if r["trace"] is None else f"{r['trace']:g}"
        lines.append(f"| {r['model']} ({cfg}) | {r['method']} | {found} | {sched} | {secs} | "
                     f"{r['states']:,.0f} | {trace} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:  # pragma: no cover - a documentation helper
    import argparse

    p = argparse.ArgumentParser(prog="python -m safeprefetch._harness.strategies_table",
                                description="Regenerate the strategy comparison table of docs/strategies.md.")
    p.add_argument("--budget", type=int, default=1000)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--bfs-cap", type=int, default=200_000)
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--case", action="append", metavar="MODEL:NAME=V,NAME=V",
                   help="a model and config to add (default: BENCH_CASES)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    cases: list[tuple[str, dict[str, Any]]] = list(BENCH_CASES)
    if args.case:
        cases = []
        for c in args.case:
            name, _, rest = c.partition(":")
            cfg = dict(item.split("=", 1) for item in rest.split(",") if item)
            cases.append((name, cfg))
    rows = compare(cases, args.budget, tuple(range(args.seeds)), bfs_cap=args.bfs_cap,
                   time_limit=args.time_limit, log=lambda s: print(s, file=sys.stderr, flush=True))
    if args.json:
        emit_json(rows)
    else:
        print(format_comparison(rows))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

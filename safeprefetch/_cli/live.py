"""Live commands: run a catalog model on real threads; soak and demo the Prefetcher.

``run MODEL`` first lets the model's threads race freely (with small random
delays between steps, seeded), several times. A correct model finishes every
time, and each run's recorded steps are checked against the model. A broken
model usually shows its bug this way; if it does not within the attempts,
the checker's shortest counterexample is replayed on real threads in its
exact order, so the bug is shown to be real either way. The output says
which of the two happened.

``soak --scenarios N`` runs N random fault scenarios against the live
Prefetcher (the reliability suite's generator, seeded) and counts every
breach; exit 0 iff there were none. ``demo`` times a training-like numpy
loop over generated ``.npy`` shards without and with prefetching.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .._tools.jsonout import emit_json

__all__ = ["register"]


def _cmd_run(args) -> int:
    from .._tools.catalog import load_model
    from .._tools.cliargs import UsageError, parse_sets
    from .._check.budget import bounded_build
    from .._check.explore import check
    from .._runtime.conformance import run_live
    from .._check.trace import format_table

    if args.attempts < 0:
        raise UsageError("--attempts must be >= 0")
    if args.max_rows < 1:
        raise UsageError("--max-rows must be at least 1")
    if not args.timeout > 0:  # nan, 0 (a correct model "timed out"), a negative
        raise UsageError(f"--timeout must be a positive number of seconds, not {args.timeout}")
    if args.timeout > 1e9:  # past what the clocks' arithmetic takes: no limit at all
        args.timeout = math.inf
    model = load_model(args.model)
    with bounded_build(f"building model {model.name!r}"):
        machine = model.compile(parse_sets(args.set or []))
    runs = []
    live = None
    for k in range(args.attempts):
        live = run_live(machine, seed=args.seed + k, timeout=args.timeout)
        runs.append(live)
        if live.verdict != "ok" or not live.conforms:
            break
    forced = False
    if (live is None or live.verdict == "ok") and args.force != "never":
        result = check(machine)
        if result.violation is not None:
            live = run_live(machine, schedule=result.trace, timeout=args.timeout)
            runs.append(live)
            forced = True
    assert live is not None or args.attempts == 0
    if live is None:
        raise UsageError("nothing ran: give --attempts >= 1 or allow --force")
    out: dict[str, Any] = {
        "model": machine.name,
        "config": dict(machine.config),
        "verdict": live.verdict,
        "forced": forced,
        "free_runs": len(runs) - (1 if forced else 0),
        "conforms": all(r.conforms for r in runs),
        "steps": live.steps,
        "seconds": round(live.seconds, 6),
        "message": live.message,
        "trace": live.trace.to_json(),
    }
    if args.json:
        emit_json(out)
    else:
        how = ("by forcing the checker's counterexample order" if forced
               else f"in free run {out['free_runs']} of {args.attempts}")
        print(f"live run of {machine.name}: {live.verdict} ({how}); {live.steps} steps, {live.seconds:.3f} s; "
              f"recorded steps {'conform to' if out['conforms'] else 'DO NOT conform to'} the model")
        if live.verdict != "ok":
            print(cap_table(format_table(machine, live.trace), args.max_rows))
            print(f"<== live {live.verdict}: {live.message}")
    if not out["conforms"]:
        return 1
    # As check's codes: a model that raised is the model's error (2), and a run that did not finish within
    # --timeout is no verdict (3: a slow correct model, or a starvation, which a live run cannot show).
    return {"ok": 0, "error": 2, "timeout": 3}.get(live.verdict, 1)


#: Steps of a live run's table that ``run`` prints by default: a model that never ends runs until its
#: timeout and records tens of thousands of steps; the first and last thirty tell the story.
MAX_ROWS = 60


def cap_table(table: str, max_rows: int) -> str:
    """A trace table with at most ``max_rows`` step rows: the first and the last halves, and a line saying
    how many steps were left out in between."""
    lines = table.split("\n")
    head, rows = lines[:2], lines[2:]
    if max_rows < 1 or len(rows) <= max_rows:
        return table
    first, last = (max_rows + 1) // 2, max_rows // 2
    omitted = len(rows) - first - last
    return "\n".join(head + rows[:first] + [f"... {omitted} steps omitted (--max-rows {max_rows}) ..."]
                     + (rows[-last:] if last else []))


def register(sub) -> dict:
    run = sub.add_parser("run", help="run a model live on real threads")
    run.add_argument("model")
    run.add_argument("--set", action="append", metavar="NAME=VALUE")
    run.add_argument("--attempts", type=int, default=20, help="free runs before forcing the counterexample")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--timeout", type=float, default=10.0, help="seconds per live run")
    run.add_argument("--force", choices=["auto", "never"], default="auto",
                     help="replay the checker's counterexample on real threads if free runs show no bug")
    run.add_argument("--json", action="store_true")
    run.add_argument("--max-rows", type=int, default=MAX_ROWS, metavar="N",
                     help=f"print at most N steps of the trace table, the first and the last (default {MAX_ROWS})")
    sk = sub.add_parser("soak", help="run random fault scenarios against the live Prefetcher")
    sk.add_argument("--scenarios", type=int, default=1000)
    sk.add_argument("--seed", type=int, default=0)
    sk.add_argument("--dir", help="directory for the scenarios' .npy files (default: a temporary one)")
    sk.add_argument("--ctrl-c", type=int, metavar="RUNS",
                    help="instead: the Ctrl-C soak, RUNS streams each hit by a SIGINT from a kernel timer")
    sk.add_argument("--storm", type=int, help="with --ctrl-c: SIGINTs per run (default 1)")
    sk.add_argument("--json", action="store_true")
    inj = sub.add_parser("inject", help="inject Ctrl-C, a handler's close() and the finalizer at every point "
                                        "where CPython can raise an asynchronous exception, and check the contract")
    inj.add_argument("--full", action="store_true", help="every scenario and effect (default: the CI-sized set)")
    inj.add_argument("--json", action="store_true")
    dm = sub.add_parser("demo", help="a training-like loop over .npy shards, without and with prefetching")
    dm.add_argument("--dir", help="where to write the shards (default: a temporary directory)")
    dm.add_argument("--batches", type=int, help="number of batches (default 200, or 100 with --small)")
    dm.add_argument("--small", action="store_true", help="a run of a few seconds")
    dm.add_argument("--workers", type=int, help="prefetch workers (default 2)")
    dm.add_argument("--capacity", type=int, help="prefetch slots (default 4)")
    dm.add_argument("--latency-ms", type=float, help="simulated storage latency per shard")
    dm.add_argument("--blas-threads", type=int, help="BLAS threads during the demo (0: library default; default 1)")
    dm.add_argument("--json", action="store_true")
    dm.add_argument("--timeline", metavar="FILE.svg|FILE.png",
                    help="draw the prefetching loop per thread (fetch / wait / compute) and its buffer occupancy; "
                         "PNG needs the plot extra (matplotlib)")
    return {"run": _cmd_run, "soak": _cmd_soak, "demo": _cmd_demo, "inject": _cmd_inject}


def _progress_line(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


def _cmd_inject(args) -> int:
    from dataclasses import asdict

    from .._harness.injection_sweep import default_scenarios, sweep

    report = sweep(default_scenarios(full=args.full), progress=_progress_line)
    c_step, c_failed = _c_step_sweep()
    if args.json:
        emit_json({"runs": report.runs, "reached": report.fired, "seconds": report.seconds,
                          "problems": [asdict(p) for p in report.problems],
                          "scenarios": [{"scenario": sc, "effect": eff, "points": n}
                                        for sc, eff, n in report.per_scenario], "c_step": c_step})
    else:
        print(f"inject: {len(report.per_scenario)} scenarios, {report.runs} injections ({report.fired} reached) "
              f"in {report.seconds:.1f} s: {len(report.problems)} problems")
        for p in report.problems:
            print(f"  {p.scenario} / {p.effect} at {p.point}: {p.what}")
        if c_step is not None:
            print(_c_step_line(c_step))
    return 0 if not report.problems and not c_failed else 1


def _c_step_sweep() -> tuple[dict | None, bool]:
    """Under ``SAFEPREFETCH_RUNTIME=typed``, the C step's own points too (``_harness/injection_ckernel.py``):
    its summary (None: another runtime) and whether it failed (a problem, or a site never raised at)."""
    from .._prefetcher.machine import default_runtime
    from .._runtime.typed import CompileUnavailable

    if default_runtime() != "typed":
        return None, False
    from .._harness.injection_ckernel import sweep_c_step

    try:
        r = sweep_c_step(progress=_progress_line)
    except CompileUnavailable as e:
        return {"skipped": str(e)}, False
    return ({"runs": r.runs, "reached": r.fired, "seconds": r.seconds, "sites": sorted(r.raised_at),
             "missed_sites": sorted(r.missed), "problems": [list(p) for p in r.problems]},
            bool(r.problems or r.missed))


def _c_step_line(c: dict) -> str:
    if "skipped" in c:
        return f"inject: C step skipped: {c['skipped']}"
    lines = [f"inject: C step, {c['runs']} injections ({c['reached']} reached) at {len(c['sites'])} sites "
             f"in {c['seconds']:.1f} s: {len(c['problems'])} problems"]
    lines += [f"  {api} capacity {cap}, call {k} ({site}): {what}" for api, cap, k, site, what in c["problems"]]
    if c["missed_sites"]:
        lines.append(f"  never raised at: {', '.join(c['missed_sites'])}")
    return "\n".join(lines)


def _cmd_ctrl_c(args) -> int:
    from dataclasses import asdict

    from .._tools.cliargs import UsageError
    from .._harness.ctrl_c_soak import ctrl_c_soak

    storm = 1 if args.storm is None else args.storm
    if args.ctrl_c < 1 or storm < 1:
        raise UsageError("--ctrl-c and --storm must be at least 1")
    if args.dir is not None:
        raise UsageError("--dir is for the fault scenarios' files; --ctrl-c writes none")
    r = ctrl_c_soak(args.ctrl_c, seed=args.seed, storm=storm, progress=_progress_line)
    if args.json:
        emit_json({**asdict(r), "clean": r.clean})
    else:
        print(f"ctrl-c soak: {r.runs} runs (seed {args.seed}, {storm} SIGINT per run) in {r.seconds:.1f} s")
        print(f"  interrupts {r.interrupts}: {r.inside_calls} inside a call, {r.between_calls} in the consumer's "
              f"own code, {r.after_return} right after a call returned")
        for name in ("hangs", "leaked_locks", "lost", "duplicated", "other"):
            print(f"  {name.replace('_', '-'):14} {getattr(r, name)}")
        for p in r.problems:
            print(f"  PROBLEM {p}")
    return 0 if r.clean else 1


def _cmd_soak(args) -> int:
    from .._tools.cliargs import UsageError
    from .._harness.soak import soak

    if args.ctrl_c is not None:
        return _cmd_ctrl_c(args)
    if args.scenarios < 1:
        raise UsageError("--scenarios must be at least 1")
    if args.storm is not None:
        raise UsageError("--storm is the number of SIGINTs per run of --ctrl-c; without --ctrl-c there are none")
    if args.dir is not None and not Path(args.dir).is_dir():
        # Else every scenario failed to write its files, reported as the Prefetcher's failures (exit 1).
        raise UsageError(f"--dir {args.dir}: not a directory")
    report = soak(args.scenarios, seed=args.seed, workdir=args.dir,
                  progress=lambda n, total, s: _progress_line(f"soak: {n}/{total} scenarios, {s:.0f} s"))
    if args.json:
        emit_json(report.to_json())
    else:
        print(f"soak: {report.scenarios} scenarios (seed {report.seed}) in {report.seconds:.1f} s")
        print(f"  injected: {report.errors_injected} source errors, {report.closes} closes, "
              f"{report.abandons} abandons; {report.timeouts_raised} timeouts raised")
        for name in ("hangs", "lost", "duplicate", "out_of_order", "corrupt", "errors_lost", "errors_wrong",
                     "use_after_close", "leaked_threads"):
            print(f"  {name.replace('_', '-'):16} {getattr(report, name)}")
        print(f"  {'failed':16} {report.failed}")
        for f in report.failures:
            print(f"  FAILED {f['scenario']}: {'; '.join(f['problems'])}")
    return 0 if report.ok else 1


def _cmd_demo(args) -> int:
    from dataclasses import replace

    from .._tools.cliargs import UsageError
    from .._harness.demo import DemoConfig, format_result, run_demo

    cfg = DemoConfig.small() if args.small else DemoConfig()
    changes = {"batches": args.batches, "workers": args.workers, "capacity": args.capacity,
               "latency_ms": args.latency_ms, "blas_threads": args.blas_threads}
    cfg = replace(cfg, **{k: v for k, v in changes.items() if v is not None})
    for name in ("batches", "workers", "capacity"):
        if getattr(cfg, name) < 1:
            raise UsageError(f"--{name} must be at least 1")
    if cfg.latency_ms < 0 or cfg.blas_threads < 0:
        raise UsageError("--latency-ms and --blas-threads must not be negative")
    timeline = args.timeline
    if timeline:
        # Checked before the demo runs, not after it.
        from pathlib import Path

        suffix = Path(timeline).suffix.lower()
        if suffix not in (".svg", ".png"):
            raise UsageError(f"--timeline {timeline}: the timeline is drawn as SVG or PNG; "
                             "give a .svg or .png file name")
        if suffix == ".png":
            from .._prefetcher.timeline import PlotUnavailable, require_matplotlib

            try:
                require_matplotlib()
            except PlotUnavailable as e:
                raise UsageError(f"--timeline {timeline}: {e}") from None
    result = run_demo(cfg, args.dir, progress=_progress_line, timeline=bool(timeline))
    if timeline:
        from .._prefetcher.timeline import write_timeline

        write_timeline(timeline, result.timeline, "safeprefetch demo: the prefetching loop",
                       f"{cfg.batches} batches, workers={cfg.workers}, capacity={cfg.capacity}, "
                       f"overlap efficiency {100 * result.overlap_efficiency:.1f}%")
        _progress_line(f"demo: timeline written to {timeline}")
    if args.json:
        emit_json(result.to_json())
    else:
        print(format_result(result))
    return 0

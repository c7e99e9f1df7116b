"""Live commands: run a catalog model on real threads.

``run MODEL`` first lets the model's threads race freely (with small random
delays between steps, seeded), several times. A correct model finishes every
time, and each run's recorded steps are checked against the model. A broken
model usually shows its bug this way; if it does not within the attempts,
the checker's shortest counterexample is replayed on real threads in its
exact order, so the bug is shown to be real either way. The output says
which of the two happened.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["register"]


def _cmd_run(args) -> int:
    from ._catalog import load_model
    from ._cli import UsageError, parse_sets
    from ._explore import check
    from ._live import run_live
    from ._trace import format_table

    if args.attempts < 0:
        raise UsageError("--attempts must be >= 0")
    model = load_model(args.model)
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
        print(json.dumps(out, indent=2))
    else:
        how = ("by forcing the checker's counterexample order" if forced
               else f"in free run {out['free_runs']} of {args.attempts}")
        print(f"live run of {machine.name}: {live.verdict} ({how}); {live.steps} steps, {live.seconds:.3f} s; "
              f"recorded steps {'conform to' if out['conforms'] else 'DO NOT conform to'} the model")
        if live.verdict != "ok":
            print(format_table(machine, live.trace))
            print(f"<== live {live.verdict}: {live.message}")
    if not out["conforms"]:
        return 1
    return 0 if live.verdict == "ok" else 1


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
    return {"run": _cmd_run}

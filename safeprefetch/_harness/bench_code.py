"""The code checker, measured: ``python -m safeprefetch bench-code [--quick] [--json]``.

What it measures, and against what
----------------------------------
* **Proofs.** The correct two-condition bounded buffer
  (:func:`~.code_twins.bounded_buffer`) at the shapes the issue names --
  1 producer/1 consumer/capacity 1/2 items, 2P2C cap 2 with 1 item, and with
  2 items -- within 0, 1 and 2 preemptions (plain DFS: every schedule within
  the bound), and over every schedule with DPOR (which covers every bound).
  Schedules and seconds for each, and, measured in the same run, plain DFS
  without a bound as the baseline DPOR must beat (``--quick`` skips it where
  it would run for minutes).
* **Bugs.** Time and schedules to the first failing schedule, and the length
  of the minimized trace, on the bugs the issue shares with interleave-test
  (one condvar, if-not-while, a lost wakeup, close without wake).
* **The Prefetcher suite.** Every CI scenario, the pre-hardening deadlocks
  and the kernel mutations: verdict, schedules, seconds
  (:func:`prefetcher_suite`); and the OnDemandPrefetcher's CI
  scenarios with its two regressions put back
  (:func:`~.ondemand_code.run_suite`).
* **interleave-test**, run in the same process when it is importable; it
  needs Python >= 3.12, so on older interpreters the row says "skipped" and
  why. Its figures from the project's anchors (remeasured on this machine
  class with interleave-test 0.1.0, opcode granularity) are printed next to
  ours, labelled as recorded, never as measured here.

Speed figures are printed, never asserted: the machines are shared and noisy.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from .._interleave.api import check
from .._tools.jsonout import emit_json
from .code_twins import REFERENCES, TWINS

__all__ = ["INTERLEAVE_TEST", "ProofRow", "bench_bugs", "bench_proofs", "interleave_test_status", "register"]

#: interleave-test 0.1.0 on the correct two-condvar buffer, from the project's anchors (seconds and
#: schedules per preemption bound; None: not finished in 600 s). Recorded, not measured here.
INTERLEAVE_TEST = {
    "1P1C cap1 items2": {0: (0.1, 4), 1: (6.8, 1104), 2: None},
    "2P2C cap2 items1": {0: (3.7, 539), 1: None},
    "2P2C cap2 items2": {0: (16.4, 1400)},
}
#: interleave-test's deadlock traces, from the anchors: about 200 bytecode steps; its small bugs took
#: 0.01-0.7 s to find.
INTERLEAVE_TEST_TRACE = 200

SHAPES = {
    "1P1C cap1 items2": dict(producers=1, consumers=1, capacity=1, items=2),
    "2P2C cap2 items1": dict(producers=2, consumers=2, capacity=2, items=1),
    "2P2C cap2 items2": dict(producers=2, consumers=2, capacity=2, items=2),
}
SHARED_BUGS = ("one_cond_signal", "if_not_while", "no_predicate_wait", "close_without_wake")


@dataclass(frozen=True)
class ProofRow:
    """One proof of the bounded buffer."""

    #: The shape's name (``SHAPES``).
    shape: str
    #: The preemption bound, or None for every schedule (DPOR).
    bound: int | None
    #: "dpor" or "none" (plain DFS).
    reduce: str
    verdict: str
    #: Every schedule (within the bound) was run.
    covered: bool
    schedules: int
    seconds: float
    #: interleave-test's recorded (seconds, schedules) at this shape and bound; None if it did not
    #: finish in 600 s; absent (not recorded) otherwise.
    recorded: tuple[float, int] | None = None
    recorded_known: bool = False


def bench_proofs(quick: bool = False) -> list[ProofRow]:
    """The bounded buffer at each shape: bounds 0-2 (plain DFS), every schedule (DPOR), and plain DFS
    without a bound where it finishes in reasonable time."""
    rows = []
    # Plain DFS grows fast with the bound: 2P2C at bound 2 (and items2 at bound 1) would run for hours.
    plan = [("1P1C cap1 items2", (0, 1, 2), True), ("2P2C cap2 items1", (0,) if quick else (0, 1), False),
            ("2P2C cap2 items2", () if quick else (0,), False)]
    for shape, bounds, plain in plan:
        body = REFERENCES["bounded_buffer"].at(**SHAPES[shape])
        runs = [(b, "none") for b in bounds] + ([(None, "dpor")] if bounds else [])
        if plain:
            runs.append((None, "none"))
        for bound, reduce in runs:
            r = check(body, preemption_bound=bound, reduce=reduce, name=f"bounded_buffer {shape}")
            known = bound in INTERLEAVE_TEST.get(shape, {})
            rows.append(ProofRow(shape, bound, reduce, r.verdict, r.exhaustive or r.bound_covered, r.states,
                                 r.seconds, INTERLEAVE_TEST.get(shape, {}).get(bound) if known else None, known))
    return rows


def bench_bugs() -> list[dict[str, Any]]:
    """Time and schedules to the first bug, and the minimized trace, on the shared bugs."""
    out = []
    for name in SHARED_BUGS:
        t = TWINS[name]
        t0 = time.perf_counter()
        r = check(t.at(), **t.options)
        out.append({"bug": name, "verdict": r.verdict, "schedules_to_bug": r.schedules_to_bug,
                    "seconds_to_bug": r.seconds_to_bug, "seconds_with_minimizing": time.perf_counter() - t0,
                    "trace": len(r.trace), "first_trace": r.shrunk_from, "preemptions": r.preemptions})
    return out


def interleave_test_status() -> str:
    """"available" when interleave-test can be imported here, else why it is skipped."""
    if importlib.util.find_spec("interleave_test") is None:
        if sys.version_info < (3, 12):
            return (f"skipped: interleave-test needs Python >= 3.12 (this is {sys.version.split()[0]}); "
                    "its figures below are the anchors' recorded ones")
        return "skipped: interleave-test is not installed (pip install interleave-test)"
    return "available (not driven by this bench yet: compare by hand with the recorded figures)"


def _fmt_recorded(row: ProofRow) -> str:
    if not row.recorded_known:
        return "-"
    if row.recorded is None:
        return "not finished in 600 s"
    s, n = row.recorded
    return f"{s:g} s, {n:,} schedules ({s / max(row.seconds, 1e-9):,.0f}x)"


def _print(proofs: list[ProofRow], bugs: list[dict[str, Any]], suite: list[dict[str, Any]], status: str,
           on_demand: list[dict[str, Any]] = ()) -> None:
    print(f"interleave-test: {status}\n")
    print("proofs: the correct two-condvar bounded buffer")
    print(f"{'shape':18} {'search':22} {'verdict':8} {'schedules':>9} {'seconds':>8}  interleave-test (recorded)")
    for r in proofs:
        search = f"bound {r.bound}, plain DFS" if r.bound is not None else (
            "every schedule, DPOR" if r.reduce == "dpor" else "every schedule, plain")
        print(f"{r.shape:18} {search:22} {r.verdict + ('' if r.covered else '*'):8} {r.schedules:>9,} "
              f"{r.seconds:>8.2f}  {_fmt_recorded(r)}")
    print("\nbugs: first failing schedule, and the minimized trace (interleave-test: ~"
          f"{INTERLEAVE_TEST_TRACE} bytecode steps, 0.01-0.7 s, recorded)")
    for b in bugs:
        print(f"{b['bug']:22} {b['verdict']:18} schedule {b['schedules_to_bug']:>3}  {b['seconds_to_bug']:.3f} s  "
              f"trace {b['trace']:>3} steps (first {b['first_trace']}), {b['preemptions']} preemption(s)  "
              f"{INTERLEAVE_TEST_TRACE / max(b['trace'], 1):.0f}x shorter")
    for title, rows in (("the Prefetcher's code", suite), ("the OnDemandPrefetcher's code", on_demand)):
        if not rows:
            continue
        print(f"\n{title}")
        for row in rows:
            bound = "every schedule" if row["bound"] is None else f"bound {row['bound']}"
            print(f"{row['what']:36} expect {row['expect']:10} {row['verdict']:16} {row['schedules']:>7,} schedules "
                  f"{row['seconds']:>7.2f} s  {bound}")


def prefetcher_suite() -> list[dict[str, Any]]:
    """Every CI scenario of the Prefetcher's code, the old code's two deadlocks and the kernel mutations: one row
    each (for the docs and this bench)."""
    from .prefetcher_code import MUTATIONS, SCENARIOS, check_mutation, check_scenario
    from .prefetcher_old import check_old

    rows = []
    for sc in SCENARIOS:
        r = check_scenario(sc)
        rows.append({"what": sc.name, "expect": "ok", "verdict": r.verdict, "schedules": r.states,
                     "bound": sc.bound, "covered": r.exhaustive or r.bound_covered, "seconds": r.seconds})
    for kind in ("signal", "finalizer"):
        r = check_old(kind)
        rows.append({"what": f"c24e732 + {kind}", "expect": "deadlock", "verdict": r.verdict, "schedules": r.states,
                     "bound": None, "covered": True, "seconds": r.seconds, "trace": len(r.trace)})
    for m in MUTATIONS:
        r = check_mutation(m)
        rows.append({"what": f"mutant: {m.name}", "expect": "violation", "verdict": r.verdict, "schedules": r.states,
                     "bound": None, "covered": r.exhaustive, "seconds": r.seconds, "trace": len(r.trace)})
    return rows


def register(sub: Any) -> dict[str, Any]:
    p = sub.add_parser("bench-code", help="the code checker: proofs, bugs and the Prefetcher suite, against "
                       "interleave-test's recorded figures (docs/interleavings.md)")
    p.add_argument("--quick", action="store_true", help="small settings (seconds)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-prefetcher", action="store_true",
                   help="skip the Prefetcher and OnDemandPrefetcher suites")
    return {"bench-code": _cmd}


def _cmd(args: Any) -> int:
    from .ondemand_code import run_suite as run_on_demand_suite

    status = interleave_test_status()
    proofs = bench_proofs(args.quick)
    bugs = bench_bugs()
    suite = [] if args.no_prefetcher else prefetcher_suite()
    on_demand = [] if args.no_prefetcher else run_on_demand_suite()
    if args.json:
        emit_json({"interleave_test": status, "proofs": [asdict(r) for r in proofs], "bugs": bugs,
                   "prefetcher": suite, "on_demand": on_demand})
    else:
        _print(proofs, bugs, suite, status, on_demand)
    return 0

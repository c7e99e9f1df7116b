"""Benchmarks: ``python -m safeprefetch bench explore [--json]``.

Speed claims are ratios measured in one run, never absolute numbers checked
in a test: the machines this runs on are shared and noisy.

``bench explore`` measures

* the explorer's rate, in distinct states stored per second of CPU time
  (``time.process_time``, so a busy neighbour on the machine costs less), on
  the reference prefetcher at a configuration with over a million states,
  with no reduction (every state is stored), and again with the default
  reductions;
* the memory each stored state costs: the growth of the process's resident
  set across the search, divided by the states stored (it includes the
  parent map, the state tuples and what they share);
* the same search with ``store="fingerprint"`` (TLC's 64-bit fingerprints):
  its resident-set growth per state, the table's own bytes per state, and
  its rate over the full store's, measured back to back;
* the same search on each engine (``check --engine``): the generated
  expansion as Python, and compiled by Cython where it is installed, each
  against the plain engine in the same run;
* SPIN's rate, in the same run, on the prefetcher's Promela twin scaled up
  to a comparable state space (``models/spin/prefetcher.pml`` with its
  ``LENGTH`` raised), in CPU time as ours is, over repeated pan runs until
  a second of CPU is measured, less pan's start-up, next to safeprefetch on
  exactly that configuration, on each engine -- and the ratios. pan's
  compilation is not timed, nor is the Cython build of ours (done first,
  cached); writing our expansion is timed and taken off, as pan's start-up
  is.

Two more benchmarks of the checker live next to this one and are run as
modules, since each regenerates a table of the docs:
``python -m safeprefetch._harness.bench_parallel`` (the cluster search on
a dask LocalCluster against the sequential one, docs/parallel.md) and
``python -m safeprefetch._harness.strategies_table`` (each sampling strategy
against BFS to the first bug, docs/strategies.md).
"""

from __future__ import annotations

import argparse

import os
import re
import resource
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from .._tools.jsonout import emit_json

__all__ = ["ExploreBench", "bench_explore", "register"]

#: Over a million distinct states without reduction (1,053,887 with this model).
BIG = {"capacity": 3, "workers": 3, "items": 6, "close": True, "error": True, "abandon": True, "ordered": False}
#: A quick setting for tests and --quick: the same model, ~70k states.
QUICK = {"capacity": 3, "workers": 3, "items": 4, "close": True, "error": True, "abandon": True, "ordered": False}


@dataclass(frozen=True)
class ExploreRun:
    """One measured search."""

    #: What was searched.
    label: str
    #: The configuration.
    config: dict
    #: Reduction setting.
    reduce: str
    #: Distinct states stored.
    states: int
    #: Transitions computed.
    transitions: int
    #: CPU seconds of the search.
    cpu_seconds: float
    #: Wall-clock seconds of the search.
    wall_seconds: float
    #: Distinct states per CPU second.
    states_per_second: float
    #: Resident-set growth per stored state, in bytes (approximate).
    bytes_per_state: float | None
    #: How visited states were kept: "full" or "fingerprint".
    store: str = "full"
    #: Fingerprint store only: the table's own bytes per stored state (its two uint64 arrays).
    table_bytes_per_state: float | None = None
    #: Fingerprint store only: the collision estimate the result reports.
    collision_probability: float | None = None
    #: What expanded the states: "plain", "generated" or "compiled" (``check --engine``).
    engine: str = "plain"
    #: Seconds of the run spent writing the generated expansion (its Cython build, done before the run,
    #: is not counted, as pan's compilation is not): excluded from ``states_per_second``, as pan's
    #: start-up is excluded from SPIN's rate.
    setup_seconds: float = 0.0


@dataclass(frozen=True)
class ExploreBench:
    """Everything ``bench explore`` measured."""

    runs: tuple[ExploreRun, ...]
    #: SPIN's pan on the scaled twin, or None when spin/gcc are missing.
    spin: dict | None
    #: safeprefetch's rate over SPIN's on the same configuration: the fastest engine's (each engine's is in
    #: ``ratio_to_spin_by_engine``; before the engines existed this was the plain explorer's).
    ratio_to_spin: float | None
    #: The fingerprint store's rate over the full store's, on the same model, in this run.
    fingerprint_speed_ratio: float | None = None
    #: safeprefetch's rate over SPIN's on the twin configuration, per engine (the ratio above is the
    #: fastest engine's).
    ratio_to_spin_by_engine: dict | None = None
    #: Each engine's rate over the plain engine's, on the big configuration, in this run.
    engine_speedup: dict | None = None
    #: Seconds the Cython build of each compiled expansion took (once per configuration, then cached).
    build_seconds: dict | None = None


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux
        return 0


def _measure(label: str, config: dict, reduce: str, store: str = "full", engine: str = "plain") -> ExploreRun:
    from .._tools.catalog import load_model
    from .._check.explore import Explorer
    from .._check.fpsearch import FingerprintExplorer

    machine = load_model("prefetcher").compile(config)
    import gc

    gc.collect()
    rss0 = _rss()
    if store == "fingerprint":
        e: Any = FingerprintExplorer(machine, reduce=reduce, max_states=50_000_000)
    else:
        e = Explorer(machine, reduce=reduce, max_states=50_000_000, engine=engine)
    w0, c0 = time.perf_counter(), time.process_time()
    r = e.run()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    rss1 = _rss()
    if r.verdict != "ok" or not r.exhaustive:
        raise RuntimeError(f"benchmark model is not ok: {r.verdict}")
    if store == "full" and r.engine != engine:
        raise RuntimeError(f"the {engine} engine did not run ({e.engine_note})")
    # Writing the expansion is timed by the wall clock; it is one CPU-bound thread, so that is its CPU too.
    setup = e.fast.seconds if store == "full" and e.fast is not None else 0.0
    # Resident-set growth is only meaningful for a search big enough to dwarf allocator noise.
    per = (rss1 - rss0) / r.states if rss0 and rss1 > rss0 and r.states >= 100_000 else None
    table = e.table.nbytes / r.states if store == "fingerprint" else None
    del e
    return ExploreRun(label, config, reduce, r.states, r.transitions, cpu, wall,
                      r.states / max(cpu - setup, 1e-9), per, store, table, r.collision_probability, engine, setup)


def _engines() -> list[str]:
    """The engines this run measures: plain and generated always, compiled where Cython is here (each
    compiled expansion is built, or found in the cache, before its search is timed)."""
    from .._check.generated import cython_available

    return ["plain", "generated", "compiled"] if cython_available() else ["plain", "generated"]


def _prebuild(config: dict, reduce: str) -> float:
    """Build the compiled expansion of the prefetcher at ``config`` (once; cached): its build seconds."""
    from .._check.explorer import Explorer
    from .._check.generated import expansion
    from .._tools.catalog import load_model

    machine = load_model("prefetcher").compile(config)
    canon = Explorer(machine, reduce=reduce, engine="plain").expander.canon
    x = expansion(machine, "compiled", canon=canon)
    if x is None:
        return 0.0
    x.release()
    return x.build_seconds


def _pan_cpu(work: Path, twin_source: str, items: int, tools: tuple[str, str],
             hash_bits: int, budget: float = 1.0) -> tuple[str, float, int, float]:
    """Build pan for the twin at LENGTH=items in ``work`` and time it by CPU (getrusage of the children,
    the clock our side uses too), repeating the search until ``budget`` CPU seconds have been measured:
    pan's own "elapsed time" is wall-clock, and a fraction of a second is noise on a shared machine.
    ``hash_bits`` is pan's -w. Returns (pan's output, CPU seconds per run, runs, the fewest CPU
    seconds one run took)."""
    from .._tools.spin import _run

    spin, gcc = tools
    source, n = re.subn(r"#define LENGTH\s+\d+", f"#define LENGTH   {items}", twin_source)
    if n != 1:
        raise RuntimeError("cannot scale the prefetcher twin: no LENGTH define")
    (work / "prefetcher.pml").write_text(source)
    _run([spin, "-o1", "-o2", "-a", "prefetcher.pml"], work, "spin -a")
    _run([gcc, "-O2", "-DSAFETY", "-DNOREDUCE", "-o", "pan", "pan.c"], work, "gcc pan.c")
    runs, cpu, out, fewest = 0, 0.0, "", float("inf")
    while (cpu < budget or runs == 0) and runs < 200:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = _run(["./pan", "-m100000", f"-w{hash_bits}", "-c0"], work, "pan", check_rc=False)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        took = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        cpu += took
        fewest = min(fewest, took)
        runs += 1
    return out, cpu / runs, runs, fewest


def _pan_hash_bits(work: Path, twin_source: str, items: int, tools: tuple[str, str]) -> int:
    """pan's -w for the twin at LENGTH=items: the smallest table with two slots a stored state.

    A fixed -w24 (2**24 slots, 128 MiB of pointers) made pan's start-up 0.12-0.25 s of page faults,
    varying run to run by more than the whole --quick search (16 ms): the start-up-corrected
    search time came out at or below zero and the SPIN ratio was lost. One probe run counts the
    states; the table it sizes is the same for the LENGTH=1 start-up runs, so the difference is
    the search alone."""
    from .._tools.spin import parse_pan_output

    out, _, _, _ = _pan_cpu(work, twin_source, items, tools, 24, budget=0.0)
    stored = parse_pan_output(out).stored
    return max(10, (2 * max(stored, 1) - 1).bit_length())


def _spin_run(items: int) -> tuple[dict, dict] | None:
    """pan on the prefetcher twin with LENGTH=items; returns (pan figures, matching safeprefetch config).

    pan's fixed cost (allocating its 2**24-slot hash table and its stack) is measured on the twin
    at LENGTH=1 and taken off, so the rate is the search's, as ours is."""
    from .._tools.spin import SpinUnavailable, _tools, find_twins, parse_pan_output

    try:
        tools = _tools()
    except SpinUnavailable:
        return None
    twin = find_twins(["prefetcher"])[0]
    config = dict(twin.config)
    config["items"] = str(items)
    with tempfile.TemporaryDirectory(prefix="safeprefetch-bench-") as tmp:
        bits = _pan_hash_bits(Path(tmp), twin.source, items, tools)
        _, startup, _, startup_fewest = _pan_cpu(Path(tmp), twin.source, 1, tools, bits)
        out, per_run, runs, fewest = _pan_cpu(Path(tmp), twin.source, items, tools, bits)
    res = parse_pan_output(out)
    elapsed = re.search(r"pan: elapsed time ([0-9.eE+-]+) seconds", out)
    # The search's CPU is the difference of the fastest runs: a neighbour's load only ever adds CPU
    # time, and on a small twin (--quick) the difference of means can come out at or below zero.
    search = fewest - startup_fewest
    pan = {"stored": res.stored, "transitions": res.transitions, "errors": res.errors, "runs": runs,
           "hash_bits": bits,
           "elapsed_seconds": float(elapsed.group(1)) if elapsed else None,
           "cpu_seconds_per_run": per_run, "startup_cpu_seconds": startup, "search_cpu_seconds": search,
           "fastest_run_cpu_seconds": fewest, "fastest_startup_cpu_seconds": startup_fewest,
           "states_per_second": res.stored / search if search > 0 else None}
    return pan, config


def bench_explore(quick: bool = False, spin_items: int | None = None) -> ExploreBench:
    big = QUICK if quick else BIG
    engines, builds = _engines(), {}
    # The fingerprint run goes first: RSS never shrinks back, so a search measured after a bigger
    # one would show no growth.
    fp = _measure("prefetcher, no reduction, fingerprints", big, "none", "fingerprint")
    plain = _measure("prefetcher, no reduction", big, "none")
    runs = [plain, fp]
    speedup = {}
    for engine in engines[1:]:
        if engine == "compiled":
            builds["big"] = _prebuild(big, "none")
        run = _measure(f"prefetcher, no reduction, {engine}", big, "none", engine=engine)
        runs.append(run)
        speedup[engine] = run.states_per_second / plain.states_per_second
    runs.append(_measure("prefetcher, default reductions", big, "all"))
    fp_ratio = fp.states_per_second / plain.states_per_second
    spin = None
    ratio = None
    by_engine: dict[str, float] = {}
    # The twin's state space grows linearly with its LENGTH; its counters are Promela bytes
    # (255 means "none"), so LENGTH must stay below 255.
    # --quick: 40 items, a 16 ms search against pan's 67 ms start-up (8 items gave 4 ms, lost in the noise).
    items = (40 if quick else 200) if spin_items is None else spin_items  # (0 is refused, not the default)
    if not 0 < items < 255:
        raise ValueError("--spin-items must be between 1 and 254 (the twin counts in bytes)")
    got = _spin_run(items)
    if got is not None:
        pan, twin_config = got
        from .._tools.catalog import load_model

        cfg = load_model("prefetcher").configure(twin_config)
        cfg = {k: v for k, v in cfg.items() if k not in ("notify", "spurious", "policy")}
        # The twin does not store the received history (in ordered mode it is 0..delivered-1,
        # a function of the state); history=off keeps exactly the same states without it.
        cfg["history"] = False
        spin = {"config": cfg, **pan}
        for engine in engines:
            if engine == "compiled":
                builds["twin"] = _prebuild(cfg, "none")
            # The fastest of three, as pan's rate is its fastest run's: a neighbour only ever adds time.
            ours = max((_measure(f"prefetcher twin config, {engine}", cfg, "none", engine=engine) for _ in range(3)),
                       key=lambda r: r.states_per_second)
            runs.append(ours)
            if pan["states_per_second"]:
                by_engine[engine] = ours.states_per_second / pan["states_per_second"]
        ratio = max(by_engine.values()) if by_engine else None
    return ExploreBench(tuple(runs), spin, ratio, fp_ratio, by_engine or None, speedup, builds)


def _cmd_bench(args) -> int:
    from .._tools.cliargs import UsageError

    if args.what == "explore":
        result = bench_explore(quick=args.quick, spin_items=args.spin_items)
        if args.json:
            emit_json(asdict(result))
            return 0
        for r in result.runs:
            mem = f"{r.bytes_per_state:.0f} B/state" if r.bytes_per_state else "n/a"
            if r.table_bytes_per_state:
                mem += f" (table {r.table_bytes_per_state:.0f})"
            setup = f" (less {r.setup_seconds:.2f} s writing the expansion)" if r.setup_seconds else ""
            print(f"{r.label:46} {r.states:>10,} states  {r.cpu_seconds:7.2f} s CPU  "
                  f"{r.states_per_second:>10,.0f} states/s  {mem}{setup}")
        print(f"fingerprint store / full store rate: {result.fingerprint_speed_ratio:.2f}")
        for engine, x in (result.engine_speedup or {}).items():
            print(f"{engine} engine / plain engine rate: {x:.2f}")
        for where, secs in (result.build_seconds or {}).items():
            print(f"Cython build of the compiled expansion ({where}): {secs:.1f} s (0 when cached)")
        if result.spin is None:
            print("spin/gcc not found: no SPIN comparison")
        else:
            s = result.spin
            rate = f"{s['states_per_second']:,.0f}" if s["states_per_second"] else "n/a"
            print(f"{'SPIN pan -DNOREDUCE, same twin config':46} {s['stored']:>10,} states  "
                  f"{s['search_cpu_seconds']:7.2f} s CPU  {rate:>10} states/s  (fastest of {s['runs']} runs, "
                  f"less pan's fastest start-up, {s['fastest_startup_cpu_seconds']:.3f} s)")
            for engine, x in (result.ratio_to_spin_by_engine or {}).items():
                print(f"safeprefetch ({engine}) / SPIN rate on the same model: {x:.3f} (SPIN is {1 / x:.1f}x faster)")
        return 0
    if args.what == "live":
        from .bench_live import cmd_bench_live

        return cmd_bench_live(args)
    if args.what == "predict":
        from .bench_predict import cmd_bench_predict

        return cmd_bench_predict(args)
    if args.what == "parallel":
        from .bench_parallel import main

        return main(args.rest)
    if args.what == "strategies":
        from .strategies_table import main

        return main(args.rest)
    raise UsageError(f"unknown benchmark {args.what!r}")


def register(sub) -> dict[str, Any]:
    p = sub.add_parser("bench", help="benchmarks with baselines measured in the same run")
    which = p.add_subparsers(dest="what", required=True)
    for name, text in (("explore", "explorer speed and memory, and SPIN's rate on the same model"),
                       ("live", "the live Prefetcher against queue.Queue & co. (docs/performance.md)"),
                       ("predict", "on-demand prefetching with each predictor against none (docs/predictive.md)")):
        b = which.add_parser(name, help=text)
        b.add_argument("--json", action="store_true")
        b.add_argument("--quick", action="store_true", help="small settings (seconds, for tests)")
        if name == "explore":
            b.add_argument("--spin-items", type=int, default=None, help="items in the scaled SPIN twin")
        if name == "predict":
            b.add_argument("--requests", type=int, default=None, help="requests per trace")
            b.add_argument("--repeats", type=int, default=None, help="repeats per figure (the median is reported)")
    for name, text in (("parallel", "the cluster search (dask) against the sequential one (docs/parallel.md)"),
                       ("strategies", "the sampling strategies on big broken models (docs/strategies.md)")):
        b = which.add_parser(name, help=f"{text}; the arguments after it go to that benchmark")
        b.add_argument("rest", nargs=argparse.REMAINDER)
    which.choices["live"].add_argument(
        "--profile", action="store_true",
        help="where the protocol's CPU and copy_prefetched's cost go, function by function")
    which.choices["live"].add_argument(
        "--instructions", action="store_true",
        help="instructions per item under valgrind's callgrind, one thread, against queue.Queue (noise-free)")
    return {"bench": _cmd_bench}

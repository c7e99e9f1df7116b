"""The benchmark behind docs/parallel.md: the distributed explorer against the sequential one.

What it measures, and why this way
----------------------------------
``python -m safeprefetch._harness.bench_parallel [MODEL] [--set K=V]...``
interleaves, N times, the sequential explorer (``check(..., reduce="none")``,
compilation included) with :func:`~safeprefetch._check.distributed.explore_parallel`
at each process count (compilation and process start-up included), checks
that every run agrees with the sequential one (states, transitions, verdict,
trace), and prints medians: over every repetition, and over the *clean*
ones. The machines this runs on are shared and noisy, so each run records
how much CPU *other* processes used meanwhile (Linux ``/proc/stat``), and a
repetition waits for an idle second before it starts. ``--ceiling`` measures
what two cores give two independent sequential searches (the most a
two-process search could gain here); ``--hash-cost`` the cost per state of
each partition function.

This is harness code: it measures the checking layer from above and is not
part of it (the layering test keeps ``_check`` free of it).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time

from .._check.distributed import explore_parallel_timed
from .._check.explore import DEFAULT_MAX_STATES, Explorer, check
from .._check.shard import crc_hash
from .._tools.catalog import load_model

__all__ = ["main"]


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


def main(argv: list[str] | None = None) -> int:
    """``python -m safeprefetch._harness.bench_parallel [MODEL] [--set K=V]... [--repeat N] [--processes 1,2] [--partition P]``

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

    p = argparse.ArgumentParser(prog="python -m safeprefetch._harness.bench_parallel")
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
                got, phases[n] = explore_parallel_timed(model, config, n, DEFAULT_MAX_STATES, "none",
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
    for name, fn in (("hash", hash), ("crc32", crc_hash)):
        t = time.perf_counter()
        for s in states:
            fn(s) % 2
        print(f"{name}: {(time.perf_counter() - t) / len(states) * 1e9:,.0f} ns per state")
    return 0


if __name__ == "__main__":  # pragma: no cover - the benchmark entry point
    raise SystemExit(main())

"""The benchmark behind docs/parallel.md: the cluster search on a dask LocalCluster against the sequential one.

What it measures, and why this way
----------------------------------
``python -m safeprefetch bench parallel [MODEL] [--set K=V]...`` starts one
LocalCluster per worker count (``--workers 1,2``: single-threaded worker
processes; start-up is reported, not timed into the search), then
interleaves, N times, the sequential explorer (``check(..., reduce="none")``,
compilation included) with
:func:`~safeprefetch._check.distributed.explore_cluster_timed` on each
cluster (actor start-up and the model's compilation on every worker
included), checks that every run agrees with the sequential one (states,
transitions, verdict, trace), and prints medians: over every repetition,
and over the *clean* ones. The machines this runs on are shared and noisy,
so each run records how much CPU *other* processes used meanwhile (Linux
``/proc/stat`` against this process tree's own CPU, dask workers
included), and a repetition waits for an idle second before it starts.
Then the per-state costs derived from the last run's per-worker phases, and
the bytes each worker sent.

``--costs`` measures the cluster's own prices: the client barrier (one call
to every actor and back, what each BFS level pays once), an actor-to-actor
message one at a time (latency), and pipelined 1 MB messages (bandwidth).
``--ceiling`` measures what two cores give two independent sequential
searches (the most a two-worker search could gain here); ``--hash-cost``
the cost per state of each candidate partition function.

This is harness code: it measures the checking layer from above and is not
part of it (the layering test keeps ``_check`` free of it).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import multiprocessing as mp
import os
import statistics
import threading
import time
import zlib
from typing import Any

from .._check.cluster import open_cluster
from .._check.distributed import explore_cluster_timed
from .._check.explore import Explorer, check
from .._check.fingerprint import fingerprinter, stable_fingerprinter
from .._tools.catalog import load_model

__all__ = ["main"]


class _Contention:
    """CPU seconds that *other* processes used while a measurement ran (Linux ``/proc/stat``).

    The benchmark shares two cores with whatever else runs; a run during which others
    took a noticeable share of the cores is reported, but kept apart from the clean ones.
    "Own" CPU is this process's and all its descendants' (the LocalClusters' workers).
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
        import psutil  # a dependency of distributed

        me = psutil.Process()
        total = 0.0
        for p in [me, *me.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    def __enter__(self) -> "_Contention":
        self.b0, self.o0, self.t0 = self.busy(), self.own(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.t0
        self.cpu = self.own() - self.o0
        self.foreign = max(0.0, (self.busy() - self.b0) - self.cpu)

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
    """``python -m safeprefetch bench parallel [MODEL] [--set K=V]... [--repeat N] [--workers 1,2] [--store S]``

    Interleaves, N times, the sequential explorer with the cluster search at each
    worker count and prints a Markdown table row of medians (all repetitions, and the
    clean ones), every sample, each worker's seconds per phase in the last run, and the
    per-state costs derived from them. ``--costs``, ``--ceiling`` and ``--hash-cost``
    measure the cluster's message prices, the two-core ceiling, and the partition
    functions instead (see the module essay).
    """
    import argparse

    p = argparse.ArgumentParser(prog="python -m safeprefetch bench parallel")
    p.add_argument("model", nargs="?", default="prefetcher")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--store", default="full", choices=["full", "fingerprint"])
    p.add_argument("--wait", type=float, default=60.0)
    p.add_argument("--ceiling", action="store_true")
    p.add_argument("--hash-cost", action="store_true")
    p.add_argument("--costs", action="store_true")
    args = p.parse_args(argv)
    config = dict(item.split("=", 1) for item in args.set)
    model = load_model(args.model)
    if args.ceiling:
        return _ceiling(model, config, args.repeat, args.wait)
    if args.hash_cost:
        return _hash_cost(model, config)
    counts = [int(n) for n in args.workers.split(",")]
    if args.costs:
        return _costs(max(2, max(counts)), args.repeat)
    return _speedup(model, config, args, counts)


def _speedup(model: Any, config: dict, args: Any, counts: list[int]) -> int:
    names = ["seq"] + [f"W={n}" for n in counts]
    samples: list[dict[str, _Contention]] = []
    stats: dict[int, Any] = {}
    with contextlib.ExitStack() as stack:
        clients = {}
        for n in counts:
            t = time.perf_counter()
            clients[n] = stack.enter_context(open_cluster(f"local:{n}"))
            print(f"LocalCluster with {n} worker(s) started in {time.perf_counter() - t:.2f} s (not timed below)")
        for _ in range(args.repeat):
            _Contention.wait_quiet(args.wait)
            rep: dict[str, _Contention] = {}
            with _Contention() as rep["seq"]:
                ref = check(model, config, reduce="none")
            for n in counts:
                with _Contention() as rep[f"W={n}"]:
                    got, stats[n] = explore_cluster_timed(model, config, cluster=clients[n], store=args.store)
                if (got.verdict, got.states, got.transitions, got.trace) != (ref.verdict, ref.states,
                                                                           ref.transitions, ref.trace):
                    raise AssertionError(f"W={n} disagrees with the sequential search: {got} vs {ref}")
            samples.append(rep)
    states = ref.states

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
    print(f"store {args.store}; columns: states, seq, then per worker count: time, speed-up; repetitions")
    print(f"| {label} | {states:,} | all {row(samples)}|")
    print(f"| {label} | {states:,} | clean {row(clean)}|")
    for k in names:
        print(f"  {k}: " + " ".join(f"{r[k].wall:.2f}{'' if r[k].clean else '*'}" for r in samples)
              + "   CPU s: " + " ".join(f"{r[k].cpu:.2f}" for r in samples))
    print("  (* = others used more than a tenth of a core meanwhile; foreign CPU s: "
          + " ".join(f"{max(c.foreign for c in r.values()):.1f}" for r in samples) + ")")
    seq_us = statistics.median(r["seq"].wall for r in samples) / states * 1e6
    print(f"  sequential: {seq_us:.1f} us per state")
    for n, st in stats.items():
        _print_stats(n, st, states)
    return 0


PHASES = ("expand", "route", "wait", "merge", "rank", "commit")


def _print_stats(n: int, st: Any, states: int) -> None:
    """One worker count's last run: phases per worker, then per-state costs from CPU time.

    Wall-clock phases include waiting for peers and, on a shared machine, for a core; the CPU
    seconds of the shard's thread per phase are the work itself, and the worker process's CPU
    beyond them is dask's (receiving and sending messages, heartbeats).
    """
    print(f"  W={n}: {st.levels} levels, actors started in {st.setup_seconds:.2f} s")
    for w, tm in enumerate(st.phases):
        table = f", table {st.table_bytes[w] / 2**20:,.1f} MB" if st.table_bytes[w] else ""
        print(f"    worker {w}: wall s " + " ".join(f"{k} {tm.get(k, 0.0):.2f}" for k in PHASES)
              + "; CPU s " + " ".join(f"{k} {tm.get(k + ' cpu', 0.0):.2f}" for k in PHASES if k != "wait")
              + f", process {tm.get('cpu', 0.0):.2f}; sent {tm.get('bytes sent', 0):,.0f} B; "
              f"rss {st.rss[w] / 2**20:,.0f} MB{table}")
    total = {k: sum(tm.get(k, 0.0) for tm in st.phases) for k in ("cpu", "bytes sent", *(p + " cpu" for p in PHASES))}
    shard = sum(total[p + " cpu"] for p in PHASES)
    print(f"    per state, CPU summed over workers: {total['cpu'] / states * 1e6:.1f} us in the worker processes = "
          + " + ".join(f"{p} {total[p + ' cpu'] / states * 1e6:.2f}" for p in PHASES if p != "wait")
          + f" + dask {(total['cpu'] - shard) / states * 1e6:.2f} us; {total['bytes sent'] / states:,.0f} bytes sent"
          + f"; {st.levels} barriers")
    if st.table_bytes and any(st.table_bytes):
        print(f"    fingerprint tables: {sum(st.table_bytes) / states:.1f} bytes per state")


# -- the cluster's own prices ---------------------------------------------------------------


class _Probe:
    """A dask actor for ``--costs``: answers pings, counts messages, sends them to a peer."""

    def __init__(self) -> None:
        self.got = 0
        self.cond = threading.Condition()
        self.peer: Any = None

    async def connect(self, peer: Any) -> None:
        self.peer = peer

    async def ping(self) -> None:
        return None

    async def take(self, blob: bytes) -> None:
        with self.cond:
            self.got += 1
            self.cond.notify_all()

    async def send(self, count: int, size: int, pipelined: bool) -> float:
        """Send ``count`` messages of ``size`` bytes to the peer; seconds until it holds them all."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(None, context.run, self._send, count, size, pipelined)

    def _send(self, count: int, size: int, pipelined: bool) -> float:
        blob = bytes(size)
        t = time.perf_counter()
        if pipelined:
            for f in [self.peer.take(blob) for _ in range(count)]:
                f.result()
        else:
            for _ in range(count):
                self.peer.take(blob).result()
        return time.perf_counter() - t


def _costs(n: int, repeat: int) -> int:
    """The client barrier, actor-to-actor latency and bandwidth on a LocalCluster of ``n`` workers."""
    with open_cluster(f"local:{n}") as client:
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        futures = [client.submit(_Probe, actor=True, workers=[w], allow_other_workers=False, pure=False)
                   for w in workers]
        probes = [f.result() for f in futures]
        for a, b in zip(probes, probes[1:] + probes[:1]):
            a.connect(b).result()
        rounds = 200
        barrier = []
        for _ in range(max(1, repeat)):
            t = time.perf_counter()
            for _ in range(rounds):
                for f in [p.ping() for p in probes]:
                    f.result()
            barrier.append((time.perf_counter() - t) / rounds)
        latency = [probes[0].send(rounds, 100, False).result() / rounds for _ in range(max(1, repeat))]
        size, count = 1 << 20, 50
        bandwidth = [size * count / probes[0].send(count, size, True).result() for _ in range(max(1, repeat))]
        for f in futures:
            f.release()
    print(f"LocalCluster, {n} single-threaded workers; medians of {max(1, repeat)} measurements")
    print(f"  client barrier (one call to each of {n} actors and back): {statistics.median(barrier) * 1e3:.2f} ms")
    print(f"  actor-to-actor message, 100 bytes, one at a time: {statistics.median(latency) * 1e3:.2f} ms")
    print(f"  actor-to-actor, 1 MB messages, pipelined: {statistics.median(bandwidth) / 2**20:,.0f} MB/s")
    return 0


def _ceiling(model: Any, config: dict, repeat: int, wait: float) -> int:
    """Throughput of two concurrent independent sequential searches over one alone."""
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


def _hash_cost(model: Any, config: dict) -> int:
    """Nanoseconds per state of each partition candidate, over every state of the config."""
    machine = model.compile(config)
    explorer = Explorer(machine, reduce="none")
    explorer.run()
    states = list(explorer.parents)
    candidates = (("hash (per process: unusable across processes)", hash),
                  ("SipHash fingerprint (per process)", fingerprinter(machine.init)),
                  ("crc32 of repr", lambda s: zlib.crc32(repr(s).encode())),
                  ("stable fingerprint (BLAKE2b, the route)", stable_fingerprinter(machine.init)))
    for name, fn in candidates:
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for s in states:
                fn(s) % 2
            best = min(best, time.perf_counter() - t)
        print(f"{name}: {best / len(states) * 1e9:,.0f} ns per state")
    return 0


if __name__ == "__main__":  # pragma: no cover - the benchmark entry point
    raise SystemExit(main())

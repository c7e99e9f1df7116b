"""``python -m safeprefetch bench predict [--json] [--quick]``: does predictive prefetching pay, or say when not.

Every figure is measured in one run, against no prefetching measured in the
same run on the same source, so each is a ratio a noisy shared machine
cannot fake; each is the median over ``--repeats`` repeats (3; 1 with
``--quick``), each repeat with its own no-prefetch baseline.

The setting
-----------
A map-style source of ``(64, 64)`` float32 items whose every fetch costs
``fetch_ms`` of GIL-free latency (a ``time.sleep``: storage or network
latency, the case prefetching exists for) plus a real copy, and a caller
that does ``compute_ms`` of GIL-free work per item (a GPU step). The
caller asks for the items of a trace one at a time with
``pf.copy_into(i, out)`` (no per-item allocation), through an
``OnDemandPrefetcher(capacity=8, workers=2)`` with each predictor, and,
for the baseline, calls ``source[i]`` itself (*none*: no threads, no pool).
``off`` is the prefetcher with ``predict=None``: what the machinery costs
when it predicts nothing.

The traces
----------
* ``sequential`` -- 0, 1, 2, ...
* ``strided`` -- two interleaved streams, stride 3 from 0 and stride 7 from
  the middle of the source.
* ``markov`` -- a walk on a random Markov chain over 24 states (each a random
  index of the source), each state with three successors of probabilities
  0.7, 0.2 and 0.1. ``oracle`` is a predictor that knows the chain: its hit
  rate is what the chain allows.
* ``random`` -- uniform over 100,000 indices: the adversarial case.
* ``crops`` -- recorded from a real pattern: random 3-d crops over a
  memory-mapped ``.npy`` volume stored as tiles; each crop reads the tiles
  it overlaps (z, then y, then x), and the trace is the tile reads the crop
  reader really made (each crop is checked against the volume itself). The
  items are the tiles, read from the memory map.

The figures, per trace and predictor
------------------------------------
hit rate (ready when asked), coverage (ready or in flight), p50 and p99 of
the caller's wait per request and the share of the no-prefetch wait hidden
at each, wasted fetches (as a fraction of all fetches, and the extra
bandwidth against no prefetching: fetches over requests, less one), peak
traced memory (tracemalloc, which numpy reports its arrays to), and the
stats' one-line verdict. The targets are checked and reported: hit rate at
least 95% on the sequential and strided traces (by the predictor made for
each, and by adaptive), at least 80% of the oracle's on the Markov trace,
and at most 10% extra bandwidth for adaptive on the random trace.
"""

from __future__ import annotations

import math
import tempfile
import time
import tracemalloc
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .._prefetcher.ondemand import OnDemandPrefetcher
from .._prefetcher.ondemand_core import compile_predictive
from .._prefetcher.predictors import Predictor, best_first
from .._tools.jsonout import emit_json

__all__ = ["PredictBench", "PredictRun", "bench_predict", "cmd_bench_predict", "crop_trace", "markov_chain",
           "traces"]

SHAPE = (64, 64)
PREDICTORS = ("none", "off", "sequential", "stride", "markov", "adaptive")
#: The prefetcher's settings in every run: the default capacity, two workers (this machine has two cores).
CAPACITY, WORKERS = 8, 2


@dataclass(frozen=True)
class PredictRun:
    """One trace through one predictor (or none)."""

    trace: str
    predictor: str
    requests: int
    #: Requests whose batch was ready when asked for.
    hit_rate: float
    #: Requests served by a speculative fetch, ready or in flight.
    coverage: float
    #: The caller's wait per request, in milliseconds.
    p50_ms: float
    p99_ms: float
    #: ``1 - wait / no-prefetch wait`` at the median and at p99 (1.0: all hidden; negative: slower).
    hidden_p50: float
    hidden_p99: float
    #: Fetches whose data no request used, over all fetches.
    wasted_fraction: float
    #: Fetches over requests, less one: the bandwidth spent beyond no prefetching.
    extra_bandwidth: float
    #: Peak traced memory during the run (bytes), and the slot pool's share of it.
    peak_bytes: int
    pool_bytes: int
    seconds: float
    #: The stats' one-line verdict ("" for none).
    summary: str


@dataclass(frozen=True)
class PredictBench:
    settings: dict
    runs: tuple[PredictRun, ...]
    #: ``(what, value, target, met)``.
    targets: tuple[tuple[str, float, str, bool], ...]


# -- the source and the traces --------------------------------------------------------------------


class LatencySource:
    """Item i is a ``(64, 64)`` float32 array of i, after ``latency`` seconds of GIL-free waiting."""

    def __init__(self, n: int, latency: float, read: Callable[[int], np.ndarray] | None = None):
        self.n, self.latency, self.read = n, latency, read
        self.calls: list[int] = []  # appended by every thread that fetches (list.append is atomic)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        self.calls.append(i)
        time.sleep(self.latency)
        if self.read is not None:
            return self.read(i)
        return np.full(SHAPE, i, np.float32)


def markov_chain(states: int, n: int, seed: int) -> dict[int, list[tuple[float, int]]]:
    """A random chain over ``states`` random indices of ``0..n-1``: each has successors of probability .7, .2, .1."""
    rng = np.random.default_rng(seed)
    nodes = [int(x) for x in rng.choice(n, states, replace=False)]
    chain = {}
    for a in nodes:
        succ = rng.choice([b for b in nodes if b != a], 3, replace=False)
        chain[a] = [(0.7, int(succ[0])), (0.2, int(succ[1])), (0.1, int(succ[2]))]
    return chain


def _walk(chain: dict[int, list[tuple[float, int]]], length: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    at = next(iter(chain))
    out = []
    for _ in range(length):
        out.append(at)
        probs, succ = zip(*chain[at])
        at = succ[int(rng.choice(len(succ), p=probs))]
    return out


class ChainOracle(Predictor):
    """Knows the Markov chain: predicts as the Markov predictor would with the true probabilities."""

    name = "oracle"

    def __init__(self, chain: dict[int, list[tuple[float, int]]]):
        super().__init__(None)
        self.chain, self.last = chain, None

    def observe(self, index: int) -> None:
        self.last = index

    def predict(self, depth: int) -> list[int]:
        if self.last is None:
            return []
        return best_first(self.last, lambda j: self.chain.get(j, []), depth, 0.05, self._keep)


VOLUME, TILE, CROP = (64, 256, 256), (8, 64, 64), (12, 96, 96)


def crop_trace(path: Path, crops: int, seed: int) -> tuple[list[int], Callable[[int], np.ndarray], int]:
    """Random crops over a memory-mapped ``.npy`` volume stored as tiles: the tile reads, the tile reader, tiles.

    The crop reader asks for every tile a crop overlaps, assembles the crop
    from them, and the crop is compared with the volume sliced directly.
    """
    rng = np.random.default_rng(seed)
    np.save(path, rng.random(VOLUME, dtype=np.float32))
    vol = np.load(path, mmap_mode="r")
    grid = [v // t for v, t in zip(VOLUME, TILE)]

    def tile(k: int) -> np.ndarray:
        z, rest = divmod(k, grid[1] * grid[2])
        y, x = divmod(rest, grid[2])
        return np.array(vol[z * TILE[0]:(z + 1) * TILE[0], y * TILE[1]:(y + 1) * TILE[1], x * TILE[2]:(x + 1) * TILE[2]])

    trace: list[int] = []
    for _ in range(crops):
        lo = [int(rng.integers(0, v - c + 1)) for v, c in zip(VOLUME, CROP)]
        ranges = [range(a // t, (a + c - 1) // t + 1) for a, c, t in zip(lo, CROP, TILE)]
        crop = np.empty(CROP, np.float32)
        for z in ranges[0]:
            for y in ranges[1]:
                for x in ranges[2]:
                    k = (z * grid[1] + y) * grid[2] + x
                    trace.append(k)
                    t = tile(k)
                    src = [slice(max(a, i * s) - i * s, min(a + c, (i + 1) * s) - i * s)
                           for a, c, s, i in zip(lo, CROP, TILE, (z, y, x))]
                    dst = [slice(max(a, i * s) - a, min(a + c, (i + 1) * s) - a)
                           for a, c, s, i in zip(lo, CROP, TILE, (z, y, x))]
                    crop[tuple(dst)] = t[tuple(src)]
        if not np.array_equal(crop, vol[lo[0]:lo[0] + CROP[0], lo[1]:lo[1] + CROP[1], lo[2]:lo[2] + CROP[2]]):
            raise AssertionError("the crop reader assembled a crop that differs from the volume")
    return trace, tile, math.prod(grid)


def traces(requests: int, workdir: Path) -> dict[str, tuple[list[int], LatencySource, dict]]:
    """Every trace: (indices, its source without latency set, extras such as the chain)."""
    n = 100_000
    a = list(range(0, 3 * requests, 3))
    b = list(range(n // 2, n // 2 + 7 * requests, 7))
    strided = [x for pair in zip(a, b) for x in pair][:requests]
    chain = markov_chain(24, n, seed=7)
    crops, tile, tiles = crop_trace(workdir / "volume.npy", crops=max(4, requests // 12), seed=3)
    return {
        "sequential": (list(range(requests)), LatencySource(n, 0.0), {}),
        "strided": (strided, LatencySource(n, 0.0), {}),
        "markov": (_walk(chain, requests, seed=11), LatencySource(n, 0.0), {"chain": chain}),
        "random": ([int(x) for x in np.random.default_rng(5).integers(0, n, requests)], LatencySource(n, 0.0), {}),
        "crops": (crops[:requests], LatencySource(tiles, 0.0, read=tile), {}),
    }


# -- one run ----------------------------------------------------------------------------------------


def _run(trace: list[int], source: LatencySource, predict: Any, fetch: float, compute: float) -> dict:
    """The caller's loop over ``trace``: per-request waits, and what the prefetcher says it did."""
    source.latency, source.calls = fetch, []
    first = source.read(0) if source.read is not None else np.full(SHAPE, 0, np.float32)
    out = np.empty_like(first)
    waits = []
    tracemalloc.start()
    tracemalloc.reset_peak()
    t0 = time.perf_counter()
    stats, pool = None, 0
    if predict == "none":
        for i in trace:
            w0 = time.perf_counter()
            np.copyto(out, source[i])
            waits.append(time.perf_counter() - w0)
            time.sleep(compute)
    else:
        with OnDemandPrefetcher(source, capacity=CAPACITY, workers=WORKERS, shape=first.shape, dtype=first.dtype,
                                predict=None if predict == "off" else predict) as pf:
            pool = pf.capacity * first.nbytes
            for i in trace:
                w0 = time.perf_counter()
                pf.copy_into(i, out)
                waits.append(time.perf_counter() - w0)
                time.sleep(compute)
        stats = pf.stats
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"waits": waits, "stats": stats, "fetches": len(source.calls), "peak": peak, "pool": pool,
            "seconds": seconds}


def _figures(name: str, predictor: str, got: dict, base: dict, n: int) -> PredictRun:
    waits, stats = np.array(got["waits"]), got["stats"]
    p50, p99 = float(np.percentile(waits, 50)), float(np.percentile(waits, 99))
    b50, b99 = float(np.percentile(base["waits"], 50)), float(np.percentile(base["waits"], 99))
    fetches = got["fetches"]
    wasted = stats.wasted if stats is not None else 0
    return PredictRun(
        trace=name, predictor=predictor, requests=n,
        hit_rate=stats.hits / n if stats is not None else 0.0,
        coverage=stats.coverage if stats is not None else 0.0,
        p50_ms=1e3 * p50, p99_ms=1e3 * p99, hidden_p50=1 - p50 / b50, hidden_p99=1 - p99 / b99,
        wasted_fraction=wasted / fetches if fetches else 0.0, extra_bandwidth=fetches / n - 1,
        peak_bytes=int(got["peak"]), pool_bytes=int(got["pool"]), seconds=got["seconds"],
        summary=stats.summary() if stats is not None else "")


def bench_predict(quick: bool = False, requests: int | None = None, repeats: int | None = None,
                  fetch_ms: float = 1.0, compute_ms: float = 1.0,
                  progress: Callable[[str], None] | None = None) -> PredictBench:
    """Every trace through every predictor and none; each figure the median over ``repeats`` runs."""
    n = requests or (120 if quick else 600)
    repeats = repeats or (1 if quick else 3)
    fetch, compute = fetch_ms / 1e3, compute_ms / 1e3
    compile_predictive(CAPACITY, WORKERS)  # compiled once, before any peak memory is traced
    runs: list[PredictRun] = []
    with tempfile.TemporaryDirectory(prefix="safeprefetch-predict-") as tmp:
        for name, (trace, source, extra) in traces(n, Path(tmp)).items():
            names = PREDICTORS + (("oracle",) if "chain" in extra else ())
            measured: dict[str, list[PredictRun]] = {p: [] for p in names}
            for _ in range(repeats):  # each repeat measures its own baseline, next to the runs it is compared with
                base = _run(trace, source, "none", fetch, compute)
                for predictor in names:
                    predict: Any = ChainOracle(extra["chain"]) if predictor == "oracle" else predictor
                    got = base if predictor == "none" else _run(trace, source, predict, fetch, compute)
                    measured[predictor].append(_figures(name, predictor, got, base, len(trace)))
            for predictor in names:
                runs.append(_median_run(measured[predictor]))
                if progress is not None:
                    progress(_line(runs[-1]))
    settings = {"requests": n, "repeats": repeats, "fetch_ms": fetch_ms, "compute_ms": compute_ms,
                "capacity": CAPACITY, "workers": WORKERS, "item_bytes": int(np.prod(SHAPE)) * 4,
                "crop_tile_bytes": int(np.prod(TILE)) * 4}
    return PredictBench(settings, tuple(runs), _targets(runs))


def _median_run(runs: list[PredictRun]) -> PredictRun:
    """Each numeric figure's median over the repeats; the summary of the repeat with the median p50 wait."""
    fields = {}
    for f in ("hit_rate", "coverage", "p50_ms", "p99_ms", "hidden_p50", "hidden_p99", "wasted_fraction",
              "extra_bandwidth", "peak_bytes", "pool_bytes", "seconds"):
        value = float(np.median([getattr(r, f) for r in runs]))
        fields[f] = int(value) if f.endswith("bytes") else value
    middle = sorted(runs, key=lambda r: r.p50_ms)[len(runs) // 2]
    return PredictRun(trace=middle.trace, predictor=middle.predictor, requests=middle.requests,
                      summary=middle.summary, **fields)


def _targets(runs: list[PredictRun]) -> tuple[tuple[str, float, str, bool], ...]:
    by = {(r.trace, r.predictor): r for r in runs}
    out = []
    for trace, predictor in (("sequential", "sequential"), ("sequential", "adaptive"), ("strided", "stride"),
                             ("strided", "adaptive")):
        hit = by[trace, predictor].hit_rate
        out.append((f"hit rate, {trace} trace, {predictor}", hit, ">= 0.95", hit >= 0.95))
    oracle = by["markov", "oracle"].hit_rate
    for predictor in ("markov", "adaptive"):
        ratio = by["markov", predictor].hit_rate / oracle if oracle else 0.0
        out.append((f"hit rate / the chain's (oracle), markov trace, {predictor}", ratio, ">= 0.80", ratio >= 0.8))
    extra = by["random", "adaptive"].extra_bandwidth
    out.append(("extra bandwidth against no prefetch, random trace, adaptive", extra, "<= 0.10", extra <= 0.10))
    return tuple(out)


def _line(r: PredictRun) -> str:
    return (f"{r.trace:10} {r.predictor:10} hit {100 * r.hit_rate:5.1f}%  cover {100 * r.coverage:5.1f}%  "
            f"wait p50 {r.p50_ms:6.3f} ms p99 {r.p99_ms:6.3f} ms  hidden {100 * r.hidden_p50:6.1f}% / "
            f"{100 * r.hidden_p99:6.1f}%  wasted {100 * r.wasted_fraction:5.1f}%  extra bw "
            f"{100 * r.extra_bandwidth:6.1f}%  peak {r.peak_bytes / 1024:7.0f} KiB")


def cmd_bench_predict(args: Any) -> int:
    import sys

    from .._tools.cliargs import UsageError

    for name in ("requests", "repeats"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} must be at least 1, not {value}")
    result = bench_predict(quick=args.quick, requests=args.requests, repeats=args.repeats,
                           progress=None if args.json else (lambda line: print(line, flush=True)))
    if args.json:
        emit_json(asdict(result))
        return 0
    print(f"settings: {result.settings}", file=sys.stdout)
    for what, value, target, met in result.targets:
        print(f"{'met ' if met else 'MISS'}  {what}: {value:.3f} (target {target})")
    return 0

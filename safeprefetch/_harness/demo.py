"""The demo: a training-like numpy loop over .npy shards, without and with prefetching.

The loop is what a small model's training step looks like to the CPU: a
two-layer forward pass and the matching gradient products, all large
matrix multiplies, which numpy runs with the GIL released. The data are
``.npy`` shards on disk, one batch per file. Reading a shard is one read
straight into a preallocated array, and ``latency_ms`` of sleep per
shard stands for the storage a real job reads from (a network file system,
object storage), which a local page cache would otherwise hide.

Without prefetching each step waits for its read: time ~ N * (P + C). With
the Prefetcher (a ``fetch_into`` source, so the reads allocate nothing) the
reads overlap the compute: time ~ N * max(P / workers, C). The overlap
efficiency is that ideal over the measured time.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from .._prefetcher.api import Prefetcher
from .._prefetcher.stats import PrefetchStats
from .._prefetcher.npy import NpyFiles

__all__ = ["DemoConfig", "DemoResult", "make_shards", "run_demo"]


@dataclass(frozen=True)
class DemoConfig:
    batches: int = 200
    batch_size: int = 256
    features: int = 512
    hidden: int = 512
    #: Simulated storage latency per shard, in milliseconds.
    latency_ms: float = 15.0
    workers: int = 2
    capacity: int = 4
    seed: int = 0
    #: BLAS threads during the demo (0: leave the library's default).
    blas_threads: int = 1

    @classmethod
    def small(cls) -> "DemoConfig":
        """A few seconds in all: the README's main command runs this."""
        return cls(batches=100, batch_size=128, features=384, hidden=384, latency_ms=6.0)


@dataclass(frozen=True)
class DemoResult:
    config: DemoConfig
    directory: str
    #: Seconds for the loop without prefetching (read, then compute, per batch).
    serial_seconds: float
    #: Seconds for the same loop with the Prefetcher.
    prefetch_seconds: float
    #: Seconds spent reading shards in the serial loop (P * N).
    load_seconds: float
    #: Seconds spent computing in the serial loop (C * N).
    compute_seconds: float
    #: Seconds spent computing in the prefetching loop (the loop body without the waits).
    prefetch_compute_seconds: float
    #: ``serial_seconds / prefetch_seconds``.
    speedup: float
    #: ``max(load_seconds / workers, prefetch_compute_seconds)``: the best any prefetcher could do.
    ideal_seconds: float
    #: ``ideal_seconds / prefetch_seconds``.
    overlap_efficiency: float
    #: Both loops computed the same losses.
    same_result: bool
    stats: PrefetchStats
    #: What the prefetching loop's ``Prefetcher.timeline()`` recorded (``run_demo(..., timeline=True)``).
    timeline: dict | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("timeline")  # large; drawn by ``demo --timeline FILE.svg`` instead
        return out


def make_shards(directory: Path, cfg: DemoConfig) -> list[Path]:
    """Write ``cfg.batches`` float32 shards of shape (batch_size, features), reusing matching ones."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(cfg.seed)
    paths = []
    for i in range(cfg.batches):
        p = directory / f"shard{i:05d}.npy"
        if _whole_shard(p, (cfg.batch_size, cfg.features)):
            paths.append(p)
            continue
        np.save(p, rng.standard_normal((cfg.batch_size, cfg.features), dtype=np.float32))
        paths.append(p)
    return paths


def _whole_shard(path: Path, shape: tuple[int, int]) -> bool:
    """Whether ``path`` is a whole float32 shard of ``shape`` to reuse (a truncated one is written again)."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            got, fortran, dtype = read[version](f)
            return (tuple(got) == shape and dtype == np.float32 and not fortran
                    and os.fstat(f.fileno()).st_size == f.tell() + 4 * shape[0] * shape[1])
    except (OSError, ValueError, KeyError):
        return False


class _Model:
    """A two-layer MLP trained by plain SGD: forward and backward are matrix multiplies."""

    def __init__(self, cfg: DemoConfig):
        rng = np.random.default_rng(cfg.seed + 1)
        self.w1 = (rng.standard_normal((cfg.features, cfg.hidden)) / np.sqrt(cfg.features)).astype(np.float32)
        self.w2 = (rng.standard_normal((cfg.hidden, cfg.features)) / np.sqrt(cfg.hidden)).astype(np.float32)

    def step(self, x: np.ndarray, lr: float = 1e-3) -> float:
        h = np.maximum(x @ self.w1, 0)           # (B, H)
        y = h @ self.w2                           # (B, F): reconstruct the input
        err = y - x
        g2 = h.T @ err                            # (H, F)
        gh = (err @ self.w2.T) * (h > 0)          # (B, H)
        g1 = x.T @ gh                             # (F, H)
        self.w1 -= lr / len(x) * g1
        self.w2 -= lr / len(x) * g2
        return float(np.mean(err * err))


@contextlib.contextmanager
def blas_threads(n: int) -> Iterator[bool]:
    """Limit OpenBLAS to ``n`` threads while the block runs; yields whether that was possible.

    Why: OpenBLAS's worker threads spin while they wait for each other. On a
    small shared machine (2 cores, other jobs running) a multi-threaded
    matrix multiply then varies by 10x from one call to the next, and the
    demo would measure the scheduler rather than the overlap. One BLAS thread
    keeps the compute time steady, and leaves a core for the loader.
    Uses threadpoolctl when installed, else the OpenBLAS library already
    loaded by numpy (Linux); otherwise does nothing.
    """
    if n <= 0:
        yield False
        return
    try:
        import threadpoolctl  # type: ignore[import-not-found]
    except ImportError:
        threadpoolctl = None
    if threadpoolctl is not None:
        with threadpoolctl.threadpool_limits(n, user_api="blas"):
            yield True
        return
    setter = getter = None
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({w for w in f.read().split() if "openblas" in w and ".so" in w})
        for path in libs:
            lib = ctypes.CDLL(path)
            for prefix in ("scipy_openblas_", "openblas_"):
                for suffix in ("64_", ""):
                    if hasattr(lib, f"{prefix}set_num_threads{suffix}"):
                        setter = getattr(lib, f"{prefix}set_num_threads{suffix}")
                        getter = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
                        break
                if setter:
                    break
            if setter:
                break
    except OSError:
        setter = None
    if setter is None:
        yield False
        return
    before = getter() if getter is not None else None
    setter(n)
    try:
        yield True
    finally:
        if before:
            setter(before)


def run_demo(cfg: DemoConfig, directory: str | Path | None = None,
             progress: Callable[[str], None] | None = None, timeline: bool = False) -> DemoResult:
    """Run both loops. ``timeline=True`` also records the prefetching loop's timeline."""
    with blas_threads(cfg.blas_threads):
        return _run_demo(cfg, directory, progress, timeline)


def _run_demo(cfg: DemoConfig, directory: str | Path | None,
              progress: Callable[[str], None] | None, timeline: bool = False) -> DemoResult:
    tmp = None
    if directory is None:
        tmp = tempfile.TemporaryDirectory(prefix="safeprefetch-demo-")
        directory = tmp.name
    try:
        d = Path(directory)
        paths = make_shards(d, cfg)
        source = NpyFiles(paths, latency=cfg.latency_ms / 1000)
        shape = (cfg.batch_size, cfg.features)
        last = [time.perf_counter()]

        def tick(label: str, n: int, t0: float) -> None:
            now = time.perf_counter()
            if progress is not None and now - last[0] >= 1.0:
                progress(f"{label}: {n}/{cfg.batches} batches, {now - t0:.1f} s")
                last[0] = now

        # Warm-up: page cache, BLAS threads, the compiled prefetcher machine.
        warm = np.empty(shape, np.float32)
        source.fetch_into(0, warm)
        _Model(cfg).step(warm)
        with Prefetcher(source, cfg.capacity, cfg.workers, shape=shape, dtype=np.float32) as pf:
            pf.copy_prefetched(warm)

        # Without prefetching: read, then compute.
        model = _Model(cfg)
        x = np.empty(shape, np.float32)
        load = compute = 0.0
        losses_serial = []
        t0 = time.perf_counter()
        for i in range(cfg.batches):
            a = time.perf_counter()
            source.fetch_into(i, x)
            b = time.perf_counter()
            losses_serial.append(model.step(x))
            c = time.perf_counter()
            load += b - a
            compute += c - b
            tick("without prefetching", i + 1, t0)
        serial = time.perf_counter() - t0

        # With prefetching: the same loop, reading through the Prefetcher.
        model = _Model(cfg)
        losses = []
        busy = 0.0
        t0 = time.perf_counter()
        with Prefetcher(source, cfg.capacity, cfg.workers, shape=shape, dtype=np.float32,
                        timeline=timeline) as pf:
            n = 0
            while pf.copy_prefetched(x):
                a = time.perf_counter()
                losses.append(model.step(x))
                busy += time.perf_counter() - a
                n += 1
                tick("with prefetching", n, t0)
            prefetched = time.perf_counter() - t0
            recorded = pf.timeline() if timeline else None
        stats = pf.stats
        # The compute is measured again in this loop: the machine may be busier or idler
        # than during the serial loop, and the ideal must describe this run.
        ideal = max(load / cfg.workers, busy)
        return DemoResult(cfg, str(d), serial, prefetched, load, compute, busy, serial / prefetched, ideal,
                          ideal / prefetched, bool(np.allclose(losses, losses_serial)), stats, recorded)
    finally:
        if tmp is not None:
            tmp.cleanup()


def format_result(r: DemoResult) -> str:
    c = r.config
    lines = [
        f"demo: {c.batches} batches of {c.batch_size}x{c.features} float32 from .npy shards "
        f"({c.latency_ms:g} ms simulated storage latency), 2-layer MLP with hidden {c.hidden}",
        f"  without prefetching: {r.serial_seconds:7.3f} s  (reading {r.load_seconds:.3f} s + computing "
        f"{r.compute_seconds:.3f} s)",
        f"  with prefetching:    {r.prefetch_seconds:7.3f} s  (workers={c.workers}, capacity={c.capacity}; "
        f"computing {r.prefetch_compute_seconds:.3f} s)",
        f"  speed-up:            {r.speedup:7.2f}x",
        f"  overlap efficiency:  {100 * r.overlap_efficiency:6.1f}%  (ideal max(reading/workers, computing) = "
        f"{r.ideal_seconds:.3f} s)",
        f"  same losses in both loops: {'yes' if r.same_result else 'NO'}",
        "  prefetcher stats:",
    ]
    lines += ["    " + line for line in r.stats.summary().splitlines()]
    return "\n".join(lines)

"""``python -m safeprefetch bench live [--json] [--quick] [--profile]``: does prefetching pay, and how close to the limit?

Every figure is measured in one run, side by side with baselines implemented
here, on the same data and the same machine, so each is a ratio that a noisy
shared machine cannot fake: both sides of a ratio saw the same neighbours.
Each figure is the median over repeats.

The baselines
-------------
* **queue.Queue** -- a plain prefetch thread: ``for i: q.put(source[i])`` into
  ``queue.Queue(depth)``, and ``q.get()`` in the loop.
* **BackgroundGenerator-style** -- the shape of ``prefetch_generator``'s
  ``BackgroundGenerator``: a daemon thread runs an iterator ahead into a
  ``Queue(max_prefetch)``, the consumer iterates. Written here from that
  description (its code is not copied).
* **SimpleQueue floor** -- the physical floor of a bounded thread handoff:
  items over one C ``queue.SimpleQueue``, ``depth`` credits back over
  another; no Python runs inside a put or a get, so what it costs is the
  interpreter's calls and the machine waking threads.
* **slot-pool floor** -- the floor of the contract: ``depth`` slots filled in
  place by ``fetch_into`` and copied out with ``np.copyto``, the free and the
  filled slot numbers over two C ``SimpleQueue``s, no model. What a runtime
  of this contract written in C could reach. In the ``handoff``, ``overlap``
  and ``copy_bandwidth`` figures.
* **bare model** (``live_bare.py``) -- not a baseline but ours stripped: the
  same checked model's generated transitions and the same copies, on two
  threads with one ``threading.Condition`` and nothing else (no interrupt
  safety, deadlock detection, record, statistics or consumer gate). It splits
  a gap to ``queue.Queue`` into the design's share and the runtime's. In the
  ``handoff`` and ``overlap`` figures.
* **torchdata** ``nodes.Prefetcher`` -- only when ``torchdata`` is importable;
  otherwise the figure says so.

The figures
-----------
* ``handoff`` -- per-item cost for trivial items (a 16-byte array) at depths
  1, 2 and 8: wall time, process CPU time and model steps per item. The
  Prefetcher runs its checked model (claim, fetch, take, release: four
  steps per item, fewer when the consumer takes runs) and hands the item
  over with ``copy_prefetched``; the queues pass a reference. Target: at
  most 1.5x queue.Queue.
* ``protocol_cpu`` -- the same model steps driven from one thread (no
  handoff at all), one batch per take and in consumer runs, against
  ``queue.Queue`` put + get in one thread: the protocol's CPU floor, which
  explains the handoff figures.
* ``overlap`` -- GIL-free producer and consumer work (``time.sleep``) of
  1-10 ms, with and without jitter in the producer's time (uniform in
  0.5x-1.5x its mean, seeded). Efficiency is the ideal time over the actual
  time, the ideal being ``max(sum of producer work, sum of consumer work)``
  as measured inside the work itself (so a sleep that overshoots is not
  counted against anyone). Default capacity (2); also measured at one more
  slot, with ``autotune=True`` from the same capacity, and with two workers
  (the efficiency then counts the producers' work divided between them).
  Target: at least 97%.
* ``copy_bandwidth`` -- ``copy_prefetched(out)`` against ``np.copyto(out, a)``
  on arrays of the same shape (the pool's), and against a queue.Queue
  prefetch thread with ``np.copyto`` in the loop (and the SimpleQueue
  floor's). Also: how much slower a fixed bit of Python runs right after a
  copy of that size (the copy evicts the interpreter's working set, and
  every prefetcher's per-batch Python then runs on cold caches). Target: at
  least 90%.
* ``memory`` -- peak traced memory (tracemalloc) of a prefetching run over
  ``(capacity + workers) x batch bytes``; and, in steady state with a
  ``fetch_into`` source, the growth of the traced peak and of
  ``sys.getallocatedblocks()`` per batch: zero batch-sized allocations means
  the peak does not grow by a batch, and nothing accumulates.
* ``call_after_idle`` -- how long a consumer call takes right after 1 and
  5 ms of GIL-free consumer work (a sleep, which idles the vCPU), every
  batch buffered, against ``queue.Queue``'s and the SimpleQueue floor's
  ``get``, with the kernel's share of it and how much slower plain Python
  runs after the same idle. No target: measured beside the overlap figure,
  whose loss per item at short work times it matches in size.
* ``file_io`` -- real reads of generated ``.npy`` shards, evicted from the
  page cache first (``posix_fadvise(DONTNEED)``) where the OS allows, with a
  GIL-free consumer step as long as a read: ``np.load`` in the loop against
  the Prefetcher's ``fetch_into`` (``NpyFiles``, 2 workers).
* ``autotune`` -- a slow, jittery source (mostly fast, sometimes 8x slower)
  against a steady consumer: the autotuned capacity's trajectory from 1, and
  the efficiency against fixed capacities 1 and 2.

Where a target is missed, docs/performance.md says why, measured: ``--profile``
prints, instead of the figures, where the protocol's CPU per item and a
``copy_prefetched`` call's time go, function by function, for both runtimes
(``live_profile.py``), and what compiling the transitions and the kernel
would remove from it, measured (``live_ceiling.py``). ``--instructions``
prints the hot path's cost in instructions per item, counted by valgrind's
callgrind in one thread against ``queue.Queue``'s (``live_instructions.py``):
exact where the times move by 2x between runs.

The code, by figure family: ``live_common.py`` (the Figure record, the
baselines, the sources), ``live_handoff.py`` (handoff, protocol_cpu),
``live_overlap.py`` (overlap, autotune), ``live_idle.py`` (call_after_idle), ``live_copy.py`` (copy_bandwidth),
``live_memory.py`` (memory, steady-state allocations), ``live_file_io.py``
(file_io). This module runs them all, with its settings, and reports.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .._tools.jsonout import emit_json
from .live_common import TORCHDATA_SKIP, Figure, torchdata_available
from .live_copy import bench_copy
from .live_file_io import bench_file_io
from .live_handoff import bench_handoff, bench_protocol_cpu
from .live_idle import bench_call_after_idle
from .live_memory import bench_memory
from .live_overlap import bench_autotune, bench_overlap

__all__ = ["Figure", "bench_live", "cmd_bench_live", "format_report", "machine_info"]


def machine_info() -> dict[str, Any]:
    """The CPU model, core count, Python and numpy versions."""
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "platform": platform.platform(),
            "switch_interval_s": sys.getswitchinterval()}


# --------------------------------------------------------------------------
# The whole bench
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    handoff_items: int
    handoff_repeats: int
    overlap_items: int
    overlap_repeats: int
    overlap_pairs: tuple[tuple[float, float], ...]
    copy_sizes_mib: tuple[float, ...]
    copy_batches: int
    copy_repeats: int
    memory_batches: int
    memory_mib: float
    io_shards: int
    io_mib: float
    io_repeats: int
    autotune_items: int
    autotune_repeats: int
    idle_items: int
    idle_repeats: int
    idle_ms: tuple[float, ...]

    @classmethod
    def full(cls) -> "Settings":
        return cls(3000, 7, 100, 3, ((1, 1), (5, 5), (10, 10), (2, 8), (8, 2)), (1.0, 16.0, 64.0), 60, 3,
                   64, 4.0, 48, 4.0, 3, 400, 3, 200, 3, (1.0, 5.0))

    @classmethod
    def quick(cls) -> "Settings":
        return cls(600, 3, 30, 1, ((1, 1), (5, 5)), (1.0, 8.0), 20, 2, 24, 1.0, 12, 1.0, 1, 120, 1, 30, 1, (1.0,))


def bench_live(quick: bool = False, progress: Callable[[str], None] | None = None,
               workdir: str | os.PathLike | None = None) -> dict[str, Any]:
    """Run every figure; returns ``{"machine", "settings", "torchdata", "figures"}`` (figures as dicts)."""
    from .demo import blas_threads

    with blas_threads(1):  # OpenBLAS's idle threads spin: on 2 cores they steal time from both sides
        return _bench_live(quick, progress, workdir)


def _bench_live(quick: bool, progress: Callable[[str], None] | None,
                workdir: str | os.PathLike | None) -> dict[str, Any]:
    s = Settings.quick() if quick else Settings.full()
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    figs: list[Figure] = []
    say("bench live: handoff")
    figs += bench_handoff(s.handoff_items, s.handoff_repeats, (1, 2, 8), typed=not quick)
    figs.append(bench_protocol_cpu(5 * s.handoff_items, s.handoff_repeats))
    say("bench live: overlap")
    figs += bench_overlap(s.overlap_items, s.overlap_repeats, list(s.overlap_pairs))
    say("bench live: call after idle")
    figs += bench_call_after_idle(s.idle_items, s.idle_repeats, s.idle_ms)
    say("bench live: copy bandwidth")
    figs += bench_copy(list(s.copy_sizes_mib), s.copy_batches, s.copy_repeats)
    say("bench live: memory")
    figs += bench_memory(s.memory_batches, s.memory_mib)
    say("bench live: file I/O")
    with tempfile.TemporaryDirectory(prefix="safeprefetch-bench-", dir=workdir) as d:
        figs += bench_file_io(Path(d), s.io_shards, s.io_mib, s.io_repeats)
    say("bench live: autotune")
    figs += bench_autotune(s.autotune_items, s.autotune_repeats)
    return {"machine": machine_info(), "quick": quick, "settings": asdict(s),
            "torchdata": "measured" if torchdata_available() else TORCHDATA_SKIP,
            "seconds": round(time.perf_counter() - t0, 2), "figures": [asdict(f) for f in figs]}


def _describe(f: dict) -> str:
    p = f["params"]
    if f["figure"] == "handoff":
        return f"handoff depth={p['depth']}"
    if f["figure"] == "overlap":
        return f"overlap P={p['producer_ms']:g}ms C={p['consumer_ms']:g}ms{' jitter' if p['jitter'] else ''}"
    if f["figure"] == "copy_bandwidth":
        return f"copy_prefetched {p['batch_mib']:g} MiB"
    if f["figure"] == "memory":
        return f"peak memory, {p['source'].split(' ')[0]}"
    if f["figure"] == "steady_state_allocations":
        return "steady-state allocations"
    if f["figure"] == "file_io":
        return f"file I/O, {p['loop']}"
    if f["figure"] == "protocol_cpu":
        return "protocol CPU, one thread"
    if f["figure"] == "call_after_idle":
        return f"consumer call after {p['idle_ms']:g} ms idle"
    return f["figure"]


def format_report(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [f"bench live{' --quick' if result['quick'] else ''}: {m['cpu']}, {m['cores']} cores, "
             f"Python {m['python']}, numpy {m['numpy']} ({result['seconds']:.0f} s)",
             f"torchdata: {result['torchdata']}", "",
             f"{'figure':38} {'ours':>12} {'baseline':>12}  {'ratio':>7}  {'target':16} met"]
    for f in result["figures"]:
        base = f["baselines"].get(f["baseline"])
        base_s = f"{base:>12.6g}" if isinstance(base, (int, float)) else f"{str(base):>12}"
        met = {True: "yes", False: "NO", None: "-"}[f["met"]]
        lines.append(f"{_describe(f):38} {f['ours']:>12.6g} {base_s}  {f['ratio']:>7.3f}  {f['target'] or '-':16} "
                     f"{met}   [{f['unit']}; vs {f['baseline']}]")
        if f["figure"] == "handoff":
            cpu = f["extra"]["cpu_us_per_item"]
            lines.append(f"{'':38} CPU us/item: ours {cpu['ours']:.2f}, queue.Queue {cpu['queue.Queue']:.2f} "
                         f"(ratio {f['extra']['cpu_ratio']:.2f}); BackgroundGenerator-style "
                         f"{f['baselines']['BackgroundGenerator-style']} us/item; SimpleQueue floor "
                         f"{f['baselines']['SimpleQueue floor']} us/item; slot-pool floor "
                         f"{f['baselines'].get('slot-pool floor', '-')} us/item; bare model "
                         f"{f['baselines'].get('bare model', '-')} us/item")
        if f["figure"] == "overlap" and "ours_autotune_percent" in f["extra"]:
            e = f["extra"]
            lines.append(f"{'':38} ours at capacity+1 {e['ours_capacity_plus_1_percent']}%, autotune "
                         f"{e['ours_autotune_percent']}%, 2 workers {e['ours_2_workers_percent']}%; SimpleQueue floor "
                         f"{f['baselines']['SimpleQueue floor']}%; slot-pool floor "
                         f"{f['baselines'].get('slot-pool floor', '-')}%; bare model "
                         f"{f['baselines'].get('bare model', '-')}%")
        if f["figure"] == "copy_bandwidth" and "python_after_copy_slowdown" in f["extra"]:
            e = f["extra"]
            lines.append(f"{'':38} fixed cost us/batch: ours {e['overhead_us_per_batch']}, queue.Queue "
                         f"{e['queue_overhead_us_per_batch']}, SimpleQueue floor {e['floor_overhead_us_per_batch']}, "
                         f"slot-pool floor ratio {e.get('slot_pool_ratio', '-')}, "
                         f"bare model {e.get('bare_overhead_us_per_batch', '-')} (ratio {e.get('bare_ratio', '-')}); "
                         f"Python after the copy runs {e['python_after_copy_slowdown']}x slower")
        if f["figure"] == "call_after_idle":
            e = f["extra"]
            lines.append(f"{'':38} SimpleQueue floor {f['baselines']['SimpleQueue floor']} us; ours: kernel "
                         f"{e['ours_kernel_us']} of {e['ours_with_kernel_timed_us']} us timed, "
                         f"{e['ours_kernel_calls_per_call']} kernel calls per call, "
                         f"{e['ours_calls_that_waited']} of {e['ours_calls_timed']} calls waited for a batch; "
                         f"Python after the idle runs {e['python_after_idle_slowdown']}x slower")
        if f["figure"] == "autotune":
            e = f["extra"]
            lines.append(f"{'':38} final capacity {e['final_capacity']}; trajectory {e['trajectory']}")
    return "\n".join(lines)


def cmd_bench_live(args: Any) -> int:
    """The ``bench live`` command: ``args.json``, ``args.quick``."""
    quick = bool(getattr(args, "quick", False))
    if getattr(args, "profile", False):
        from .live_profile import format_profile, profile_report

        from .live_ceiling import ceiling_report, format_ceiling

        tables = profile_report(quick)
        ceiling = ceiling_report(quick)
        if getattr(args, "json", False):
            emit_json({"machine": machine_info(), "quick": quick, "profiles": [asdict(t) for t in tables],
                       "ceiling": ceiling})
        else:
            print("\n\n".join([*(format_profile(t) for t in tables), format_ceiling(ceiling)]))
        return 0
    if getattr(args, "instructions", False):
        from .live_instructions import format_instructions, instructions_report

        report = instructions_report(quick)
        if getattr(args, "json", False):
            emit_json({"machine": machine_info(), "quick": quick, "instructions": report})
        else:
            print(format_instructions(report))
        return 0 if "skipped" not in report else 2
    result = bench_live(quick=quick, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    if getattr(args, "json", False):
        emit_json(result)
    else:
        print(format_report(result))
    return 0

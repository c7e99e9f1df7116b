"""The ``profile`` figures: where the protocol's CPU per item and ``copy_prefetched``'s fixed cost go.

A benchmark says how slow; this says why, function by function, so that
every change to the hot path can name the line of the profile it removes.

Method
------
* **Protocol CPU per item** (:func:`profile_protocol`): one thread drives the
  Prefetcher's own machine through the live runtime exactly as
  ``bench live``'s ``protocol_cpu`` figure does (a worker's "fetch into
  slot", its fetch a no-op, chained with its next claim; the consumer's
  take and release), under ``cProfile``. Each function's *own* time
  (``tottime``) becomes a row; the rows are then scaled so that they add up
  to the loop's per-item time measured without the profiler in the same run
  (the profiler's own cost per call is spread over the rows in proportion,
  which overstates functions called very often by a little). The rows are
  grouped into *lines* (:data:`LINES`): the generic DSL step path, the
  model's guards, effects and helpers, the kernel's entry, dispatch, apply
  and wake-up code, the external action.
* **copy_prefetched's cost per call** (:func:`profile_copy`): the consumer
  thread alone is profiled (cProfile is per thread) while a worker refills
  the other slot, as in ``bench live``'s ``copy_bandwidth`` figure, with the
  wall clock: the time inside ``numpy.copyto`` (the copy, plus waiting for
  the GIL back from the worker that ran meanwhile: both measured against
  ``np.copyto`` alone), inside the parked thread's ``acquire`` (waiting for
  the worker's publish) and in each Python function of the call. Measured
  twice: with the worker refilling (capacity 2), and with every batch
  already buffered (no worker running): the Python of the call alone.

Each row is microseconds per item (or per call), with its calls per item.
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .live_common import Trivial, median

__all__ = ["COPY_LINES", "LINES", "ProfileRow", "ProfileTable", "format_profile", "profile_copy", "profile_protocol",
           "profile_report", "protocol_loop", "timed_loop"]


#: Profile lines: a name, and the functions (``file:function`` suffixes) whose own time it sums.
#: Functions that match no line are listed under their own name.
LINES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("P1 kernel entry: Runtime.step (lock, interrupt checks, external-step dispatch)",
     ("kernel.py:step", "{method '_is_owned' of '_thread.RLock' objects}",
      "{method '__exit__' of '_thread.RLock' objects}", "{built-in method sys._getframe}",
      "interrupts.py:outermost")),
    ("P2 kernel dispatch: _begin, _take_locked, _take, _chain (entry lookup, branch choice)",
     ("kernel.py:_begin", "kernel.py:_take_locked", "kernel.py:_take", "kernel.py:_chain",
      "{method 'get' of 'dict' objects}")),
    ("P3 kernel apply: _apply (store, record, invariants), _wake_enabled",
     ("kernel.py:_apply", "kernel.py:_wake_enabled", "{method 'append' of 'list' objects}",
      "kernel.py:_settle")),
    ("P4 invariant predicates (specialized, called per step)", ("prefetcher.py:<lambda>",)),
    ("P5 generic DSL step path: user_steps.attempt (list copy, view, next label, tuple), fire.branch",
     ("user_steps.py:attempt", "user_steps.py:<lambda>", "user_steps.py:enabled")),
    ("P6 model guards: may_claim, may_take, fetch_outcome",
     ("prefetcher.py:may_claim", "prefetcher.py:may_take", "prefetcher.py:fetch_outcome")),
    ("P7 model effects: claim, fetched, take, release",
     ("prefetcher.py:claim", "prefetcher.py:fetched", "prefetcher.py:take", "prefetcher.py:release",
      "prefetcher.py:step")),
    ("P8 model helpers: _set, next_slot, holds_lease, tuple.count/index",
     ("prefetcher.py:_set", "prefetcher.py:next_slot", "prefetcher.py:holds_lease",
      "{method 'count' of 'tuple' objects}", "{method 'index' of 'tuple' objects}")),
    ("G1 generated transitions (codegen.py): guards, effects, helpers and invariants inlined",
     ("codegen.py:*", "entries.py:choose", "entries.py:enabled", "entries.py:<lambda>", "kernel.py:_wake_set",
      "kernel.py:_enabled")),
    ("L the driving loop itself (the bench's, not the Prefetcher's)", ("live_profile.py:loop",)),
    ("P9 external step: ActionContext, the fetch action", ("entries.py:__init__", "live_profile.py:<lambda>",
                                                            "fetching.py:_fetch")),
)


@dataclass(frozen=True)
class ProfileRow:
    """One line of a profile."""

    #: The line's name (a :data:`LINES` entry, or ``file:function`` for a function outside them).
    line: str
    #: Microseconds per item (per call for copy_prefetched), scaled to the unprofiled time.
    us: float
    #: Calls per item of the functions in the line.
    calls: float
    #: The functions summed, with their own microseconds each.
    functions: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ProfileTable:
    """A profile: its rows, the unprofiled total they add up to, and how it was measured."""

    #: What was profiled.
    what: str
    #: Microseconds per item (or per call) measured without the profiler: the rows add up to it.
    total_us: float
    #: The rows, largest first.
    rows: tuple[ProfileRow, ...]
    #: Anything else measured alongside.
    extra: dict = field(default_factory=dict)


def _key(fn: tuple) -> str:
    path, _line, name = fn
    if path == "~":  # a built-in, named as pstats prints it
        return "{" + name[1:-1] + "}" if name.startswith("<") else name
    # The specializer's functions carry their source line in the file name (``<... prefetcher.py:141>``).
    return re.sub(r":\d+>?$", "", path.rsplit("/", 1)[-1]) + ":" + name


def _rows(stats: pstats.Stats, items: int, total_us: float, lines=LINES) -> tuple[ProfileRow, ...]:
    own: dict[str, tuple[float, int]] = {}
    for fn, (_cc, nc, tt, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        k = _key(fn)
        t, c = own.get(k, (0.0, 0))
        own[k] = (t + tt, c + nc)
    whole = sum(t for t, _c in own.values()) or 1.0
    us = total_us / whole  # profiled own seconds -> unprofiled microseconds per item
    rows, used = [], set()
    for name, members in lines:
        fns = {k: v for k, v in own.items()
               if any(k == m or k.endswith("/" + m) or (m.endswith("*") and k.startswith(m[:-1])) for m in members)}
        used |= set(fns)
        if fns:
            rows.append(ProfileRow(name, round(sum(t for t, _ in fns.values()) * us, 3),
                                   round(sum(c for _, c in fns.values()) / items, 2),
                                   {k: round(t * us, 3) for k, (t, _c) in fns.items()}))
    for k, (t, c) in own.items():
        if k not in used and t * us >= 0.005:
            rows.append(ProfileRow(k, round(t * us, 3), round(c / items, 2)))
    return tuple(sorted(rows, key=lambda r: -r.us))


def timed_loop(run: Callable[[], Any]) -> float:
    """Wall seconds of ``run()``, with the cyclic GC paused (it is not what is measured)."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter()
        run()
        return time.perf_counter() - t0
    finally:
        if was:
            gc.enable()


def protocol_loop(runtime: Callable[..., Any], items: int, depth: int = 8, run: int = 1) -> Callable[[], None]:
    """The one-thread protocol loop of ``bench live``'s ``protocol_cpu`` figure, on a runtime class."""
    from .._prefetcher.machine import machine_for

    if not 1 <= run < depth:  # one thread: a worker with no free slot left would park for good
        raise ValueError(f"run must be in 1..{depth - 1} for depth {depth}, not {run}")
    m = machine_for(depth, 1, items + 1, True, True, 0, depth)
    w, c = m.thread_names.index("worker0"), m.thread_names.index("consumer")
    take = f"take up to {run}"

    def loop() -> None:
        rt = runtime(m, {"fetch": lambda ctx: "ok"})
        rt.step(w)  # the first claim
        step = rt.step
        for _ in range(items // run):
            for _ in range(run):
                step(w, chain=True)  # fetch (a no-op) and publish, then claim the next slot
            step(c, take)
            step(c)  # release
    return loop


def profile_protocol(runtime: Callable[..., Any], items: int = 20000, repeats: int = 5, run: int = 1,
                     lines=LINES, label: str = "") -> ProfileTable:
    """Where the protocol's CPU per item goes, one thread, ``run`` batches per take (see the module doc)."""
    loop = protocol_loop(runtime, items, run=run)
    n = items // run * run
    loop()  # warm-up
    total = median([timed_loop(loop) for _ in range(repeats)]) / n * 1e6
    prof = cProfile.Profile()
    gc.collect()
    prof.enable()
    loop()
    prof.disable()
    stats = pstats.Stats(prof)
    rows = _rows(stats, n, total, lines)
    return ProfileTable(f"protocol CPU per item, one thread, runs of {run}", round(total, 3), rows,
                        {"items": n, "runtime": label or getattr(runtime, "__name__", "?")})


#: copy_prefetched lines: the wait for the worker, the copy, and the Python of the call.
COPY_LINES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("C1 numpy.copyto (the copy, and waiting for the GIL back from the worker)",
     # (The direct copy is a C built-in: cProfile books it apart from its wrapper, under numpy 2's or 1's name.)
     ("live_profile.py:copyto", "live_profile.py:copyto_plain",
      "{built-in method numpy._core._multiarray_umath.copyto}",
      "{built-in method numpy.core._multiarray_umath.copyto}")),
    ("C2 parked in the kernel: waiting for the worker's publish (lock acquire)",
     ("kernel.py:_wait", "{method 'acquire' of '_thread.lock' objects}", "kernel.py:_park")),
    ("C3 kernel steps: take and release (Runtime.step and below)",
     ("kernel.py:step", "kernel.py:_begin", "kernel.py:_take_locked", "kernel.py:_take", "kernel.py:_chain",
      "kernel.py:_apply", "kernel.py:_wake_enabled", "kernel.py:_settle", "stuck.py:detect",
      "kernel.py:_options", "entries.py:_any_branch", "{method 'isdisjoint' of 'frozenset' objects}",
      "{method 'release' of '_thread.lock' objects}", "{method '_is_owned' of '_thread.RLock' objects}",
      "{method '__exit__' of '_thread.RLock' objects}", "{method 'append' of 'list' objects}",
      "{method 'get' of 'dict' objects}", "interrupts.py:outermost", "{built-in method sys._getframe}")),
    ("C4 the model's take and release (generic DSL path, guards, effects, helpers, invariants)",
     ("user_steps.py:attempt", "user_steps.py:<lambda>", "user_steps.py:enabled", "prefetcher.py:may_take",
      "prefetcher.py:take", "prefetcher.py:release", "prefetcher.py:_set", "prefetcher.py:next_slot",
      "prefetcher.py:holds_lease", "prefetcher.py:<lambda>", "prefetcher.py:step", "prefetcher.py:may_claim",
      "{method 'count' of 'tuple' objects}", "{method 'index' of 'tuple' objects}")),
    ("C6 generated transitions (codegen.py) and their wake sets",
     ("codegen.py:*", "entries.py:choose", "entries.py:enabled", "entries.py:<lambda>", "kernel.py:_wake_set",
      "kernel.py:_enabled")),
    ("L the timing loop itself (the bench's, not the Prefetcher's)", ("live_profile.py:one",)),
    ("C5 the Prefetcher's call: copy_prefetched, handout, consume, _serve, _take_run, _release_run, policy",
     ("api.py:copy_prefetched", "consumer.py:handout", "consumer.py:consume", "consumer.py:_serve",
      "consumer.py:_take_run", "consumer.py:_release_run", "consumer.py:_run_changed", "consumer.py:_run_of",
      "consumer.py:deadline", "consumer.py:_usable", "waits.py:wait_gate", "policy.py:observe_call",
      "policy.py:branches", "stats.py:sample_occupancy", "{method 'acquire' of '_thread.RLock' objects}",
      "{built-in method time.perf_counter}", "{built-in method time.monotonic}",
      "{built-in method builtins.isinstance}", "{built-in method builtins.len}",
      "{built-in method builtins.max}", "{built-in method builtins.min}", "consumer.py:<genexpr>",
      "consumer.py:<listcomp>",
      "kernel.py:state", "{built-in method builtins.max}")),
)


class _FillOnce(Trivial):
    """Fills each slot the first time (so the pool is resident), then leaves it: the copy is what is measured."""

    def __init__(self, n: int, shape: tuple[int, ...], first: int):
        super().__init__(n, shape)
        self.first = first

    def fetch_into(self, i: int, out: np.ndarray) -> None:
        if i < self.first:
            out.fill(1.0)


def _copyto_seen_by_the_profiler() -> Callable[[], None]:
    """Wrap ``numpy.copyto``, and the consumer's direct copy for a plain ``out`` (numpy's C copy without the
    dispatch: ``consumer._copyto_plain``), in Python functions for the profiled run; return the undo.

    numpy 2's ``copyto`` is an array-function dispatcher, not a built-in, so
    cProfile does not see it as a call of its own and charges its time to
    the caller; the wrapper's own time is then the copy's. The direct copy
    is a built-in, booked as a call of its own under the wrapper: C1 takes
    both.
    """
    from .._prefetcher import consumer

    real, real_plain = np.copyto, consumer._copyto_plain

    def copyto(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **kwargs)

    def copyto_plain(*args: Any, **kwargs: Any) -> Any:
        return real_plain(*args, **kwargs)

    np.copyto = copyto  # type: ignore[assignment]
    consumer._copyto_plain = copyto_plain

    def undo() -> None:
        np.copyto = real  # type: ignore[assignment]
        consumer._copyto_plain = real_plain
    return undo


def profile_copy(prefetcher: Callable[..., Any], mib: float = 1.0, batches: int = 400, buffered: bool = False,
                 repeats: int = 3) -> ProfileTable:
    """Where a ``copy_prefetched`` call's time goes beyond ``np.copyto`` (see the module doc).

    ``prefetcher`` builds the Prefetcher (``Prefetcher`` or a partial of it).
    ``buffered``: every batch is ready before the clock starts (capacity =
    batches, no worker runs while the consumer copies). Per-call times are
    medians over every call of ``repeats`` runs: on a shared machine a mean
    is the neighbours' as much as ours.
    """
    count = int(mib * 2 ** 20) // 4
    shape = (count,)
    n = min(batches, 16) if buffered else batches
    capacity = n if buffered else 2
    out = np.empty(shape, np.float32)

    def one(prof: cProfile.Profile | None) -> list[float]:
        # Buffered: every slot is filled (first touched) by a worker before the clock starts, and nothing
        # is consumed before it. Else the first ``capacity`` copies touch the pool, untimed.
        warm = 0 if buffered else capacity
        with prefetcher(_FillOnce(n + warm, shape, n + warm if buffered else capacity), capacity=capacity,
                        shape=shape, dtype=np.float32) as pf:
            for _ in range(warm):
                pf.copy_prefetched(out)
            deadline = time.monotonic() + 60
            while buffered and pf.ready < n and time.monotonic() < deadline:
                time.sleep(0.001)
            copy, clock, times = pf.copy_prefetched, time.perf_counter, []
            if prof is not None:
                prof.enable()
            for _ in range(n):
                t0 = clock()
                copy(out)
                times.append(clock() - t0)
            if prof is not None:
                prof.disable()
            return times

    pool = np.ones((capacity, *shape), np.float32)

    def plain() -> list[float]:
        clock, times = time.perf_counter, []
        for i in range(n):
            t0 = clock()
            np.copyto(out, pool[i % capacity])
            times.append(clock() - t0)
        return times

    one(None)  # warm-up
    ours, base = [], []
    for _ in range(repeats):  # interleaved
        ours += one(None)
        base += plain()
    per_call, copyto = median(ours) * 1e6, median(base) * 1e6
    prof = cProfile.Profile()
    undo = _copyto_seen_by_the_profiler()
    try:
        one(prof)
    finally:
        undo()
    rows = _rows(pstats.Stats(prof), n, per_call, COPY_LINES)
    return ProfileTable(f"copy_prefetched per call, {mib:g} MiB, " + ("all buffered" if buffered else "capacity 2"),
                        round(per_call, 2), rows,
                        {"np.copyto_us": round(copyto, 2), "fixed_cost_us": round(per_call - copyto, 2),
                         "batches": n})


def format_profile(t: ProfileTable) -> str:
    """The profile as text lines: the total, then one row per line with its functions."""
    out = [f"{t.what}: {t.total_us:.2f} us" + "".join(f", {k} {v}" for k, v in t.extra.items())]
    for r in t.rows:
        out.append(f"  {r.us:8.3f} us  {r.calls:6.2f} calls  {r.line}")
    return "\n".join(out)


def profile_report(quick: bool = False) -> list[ProfileTable]:
    """Every profile of ``bench live --profile``, the generated runtime (the default) beside the plain one.

    The protocol loop at depth 8, one batch per take and in runs of 7; then
    ``copy_prefetched`` of 1 MiB batches, all buffered (the call's own
    Python) and with a worker refilling (capacity 2).
    """
    import functools

    from .._prefetcher.api import Prefetcher
    from .._prefetcher.machine import transitions_for
    from .._runtime.kernel import Runtime

    items, batches, repeats = (2000, 100, 2) if quick else (20000, 400, 5)
    generated = functools.partial(Runtime, compiled=transitions_for(8, 1, True, True, 0, 8))
    out = []
    for run in (1, 7):
        for label, factory in (("generated", generated), ("plain", Runtime)):
            out.append(profile_protocol(factory, items, repeats, run=run, label=label))
    for buffered in (True, False):
        for label in ("generated", "plain"):
            t = profile_copy(functools.partial(Prefetcher, runtime=label), batches=batches, buffered=buffered,
                             repeats=min(repeats, 3))
            out.append(ProfileTable(t.what, t.total_us, t.rows, {**t.extra, "runtime": label}))
    return out

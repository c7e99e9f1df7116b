"""Checking code: run the test body under many schedules, judge each run, minimize what fails.

What it guarantees
------------------
:func:`check_code` returns a frozen :class:`~.report.CodeCheckResult` whose
verdict is ``ok`` only if no schedule the strategy ran showed a violation,
and whose ``exhaustive`` is True only if that covers every schedule: a
``dfs`` that ran to completion with no preemption bound cutting anything
(with DPOR, every schedule up to its equivalence, which is exact only for
race-free code: plain data shared under two different locks, or none, can
hide a lost update DPOR never runs; ``reduce="none"`` runs them all). A
bounded ``dfs`` that ran to completion says ``bound_covered``: every
schedule with at most that many preemptions was run. Sampling strategies
(``random``, ``pct``, ``hypothesis``) are never exhaustive, and neither is a
result with a violation: every search stops at the first one it meets.

A violation is reported with a **minimized** trace: first the fewest
preemptions -- a preemption-bounded ``dfs`` with bounds 0, 1, ... up to the
found trace's count, stopping at the first bound that shows a violation of
the same kind (iterative context bounding, so that count is the least any
schedule needs) -- then the fewest steps among the violations of that kind
met within :data:`SHRINK_SCHEDULES` further schedules at that bound. The
result says how long the first failing run was (``shrunk_from``).
Each bound is a plain search (no DPOR under a bound), which grows with every
thread that can interleave: a bug found in two schedules could take hours
to minimize when it lay one bound up past a 0-preemption space of millions.
So minimizing stops after :data:`MINIMIZE_SCHEDULES` runs (or the
``time_budget``) and keeps the best trace found; ``minimized`` says whether
it finished, and the rendered result says when it did not.

Every result can be replayed (:func:`replay_code`) from its trace, and a
sampled one is also reproduced by its seed.
"""

from __future__ import annotations

import inspect
import math

import random as _random
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .._check.result import Trace, TraceStep, Violation
from . import arguments
from .arguments import whole
from .explore import DFS, PCT, Nondeterministic, RandomWalk, Replay, Scripted, alt_text
from .patching import MISSING, controlled, patched
from .report import DPOR_SCOPE, CodeCheckResult, StepDetail
from .runner import run_once
from .scheduler import Execution, Settings, VThread, current

__all__ = ["DEFAULT_SAMPLES", "Fresh", "Interrupt", "MINIMIZE_SCHEDULES", "SHRINK_SCHEDULES", "STRATEGIES",
           "check_code", "fingerprint", "outcomes", "recorded_settings", "replay_code", "settings_of", "warm_up"]

STRATEGIES = ("dfs", "pct", "random", "hypothesis")
#: Runs a sampling strategy makes when ``max_schedules`` is not given.
DEFAULT_SAMPLES = 1000
#: Extra schedules the minimizer runs, at the least preemption bound, looking for a shorter trace:
#: enough to try the reorderings near the first one found, few enough to stay well under a second
#: for the catalog's twins.
SHRINK_SCHEDULES = 300
#: Runs the minimizer makes in all, over every bound: seconds, whatever the body (the catalog's twins
#: need at most 542).
MINIMIZE_SCHEDULES = 2_000


@dataclass(frozen=True)
class Fresh:
    """A ``patch_globals`` value made anew for every schedule: ``factory()`` runs on the test body's
    thread before the body, so what it creates (a process-wide singleton with its own lock or queue)
    is controlled and belongs to that schedule alone."""

    factory: Callable[[], Any]


#: Where an :class:`Interrupt` may land: before an operation it could perform, while blocked, or both.
INTERRUPT_WHEN = ("running", "blocked", "both")


@dataclass(frozen=True)
class Interrupt:
    """A callback the explorer may run on a thread at one of its scheduling points.

    As CPython runs a signal handler or a GC finalizer between two bytecodes
    of whatever thread it interrupts, the explorer may run ``callback()`` on
    a thread of ``threads`` (names, each matching every thread given it; ``"*"`` for any), right before that thread
    performs its next synchronization operation, at most ``times`` times a
    run. Every such point is a scheduling choice, explored like the others.
    An exception the callback raises propagates into the interrupted code
    there (a ``KeyboardInterrupt`` landing at that line).

    ``when`` says at which points: ``"running"`` (the default) right before
    the thread's next synchronization operation, as above; ``"blocked"``
    only while the thread is blocked in a wait (a lock, a condition, an
    event, a semaphore, a barrier, a queue, a join, a sleep), as CPython runs
    a signal handler on the main thread whose lock wait a signal
    interrupted -- a Ctrl-C while the program waits; ``"both"``. An
    exception raised while blocked leaves the wait undone (a lock not taken,
    an item not got; a condition's wait takes its lock back first). A GC
    finalizer runs only between bytecodes: ``"running"``. ``"blocked"`` is
    also the exact one for code written against CPython's eval-breaker
    points (which come after a C call returns, not before it): ``"running"``
    lands an interrupt before a ``release()`` or ``put()`` that the real
    interpreter never interrupts there. A deadlock is still one: an
    interrupt that could break it is not counted as a way on.
    """

    callback: Callable[[], Any]
    threads: str | tuple[str, ...] = "main"
    times: int = 1
    name: str = ""
    when: str = "running"

    def __post_init__(self) -> None:
        if not callable(self.callback):
            raise TypeError(f"Interrupt needs a callable, not {self.callback!r}")
        whole("Interrupt.times", self.times, 1)
        arguments.choice("Interrupt.when", self.when, INTERRUPT_WHEN)
        if not isinstance(self.threads, str):
            object.__setattr__(self, "threads", arguments.names("Interrupt.threads", self.threads))
        if not self.name:
            object.__setattr__(self, "name", getattr(self.callback, "__name__", "interrupt"))

    def applies(self, vt: VThread) -> bool:
        if self.threads == "*":
            return True
        # A name matches each of several threads given it (told apart as ``name#2``...): the second "worker"
        # was never interrupted, and a Ctrl-C bug in it passed. By the name the thread was given (its Thread's,
        # read without running a subclass's property), so a thread named "worker#2" by its code is not one.
        names = (self.threads,) if isinstance(self.threads, str) else self.threads
        return vt.name in names or getattr(vt.obj, "_name", None) in names


def settings_of(notify: str = "fifo", spurious: str = "off", lines: bool = False, lock_release: str = "owner",
                allow_alive: Sequence[str] = (), max_steps: int = 20_000, time_limit: float = 3600.0,
                wall_timeout: float = 20.0) -> Settings:
    """Checked :class:`Settings` (a ``ValueError`` or ``TypeError`` names the bad argument)."""
    arguments.choice("notify", notify, ("fifo", "any"))
    arguments.choice("spurious", spurious, ("off", "on"))
    arguments.choice("lock_release", lock_release, ("owner", "any"))
    arguments.flag("lines", lines)
    whole("max_steps", max_steps, 1)
    arguments.seconds("time_limit", time_limit)
    arguments.seconds("wall_timeout", wall_timeout)
    allow_alive = arguments.names("allow_alive", allow_alive)
    return Settings(notify=notify, spurious=spurious, lines=lines, lock_release=lock_release,
                    allow_alive=tuple(allow_alive), max_steps=max_steps, time_limit=time_limit,
                    wall_timeout=wall_timeout)


class _Stats:
    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.schedules = 0
        self.pruned = 0
        self.transitions = 0
        self.depth = 0
        self.first: Execution | None = None
        self.to_bug: int | None = None
        self.t_bug: float | None = None

    def add(self, ex: Execution) -> bool:
        """Count a run; True when it failed (the first failure is kept)."""
        self.schedules += 1
        self.transitions += len(ex.events)
        self.depth = max(self.depth, len(ex.events))
        if ex.outcome == "pruned":
            self.pruned += 1
        if ex.outcome in ("ok", "pruned"):
            return False
        if self.first is None:
            self.first = ex
            self.to_bug = self.schedules
            self.t_bug = time.perf_counter() - self.t0
        return True

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


def check_code(fn: Callable[[], Any], *, strategy: str = "dfs", preemption_bound: int | None = None,
               max_schedules: int | None = None, seed: int = 0, interrupts: Sequence[Interrupt] = (),
               settings: Settings | None = None, reduce: str = "dpor", depth: int = 3,
               time_budget: float | None = None, minimize: bool = True, name: str | None = None,
               patch_globals: dict | None = None) -> CodeCheckResult:
    """Run ``fn`` under the schedules of ``strategy`` and judge every run (see the module essay)."""
    arguments.body(fn)
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    whole("preemption_bound", preemption_bound, 0, optional=True)
    if preemption_bound is not None and strategy != "dfs":
        raise ValueError(f"preemption_bound bounds the exhaustive 'dfs' search; strategy={strategy!r} samples "
                         "schedules and cannot keep to a bound (leave preemption_bound out, or use 'dfs')")
    whole("max_schedules", max_schedules, 1, optional=True)
    whole("depth", depth, 1)
    whole("seed", seed, None)
    arguments.choice("reduce", reduce, ("dpor", "none"))
    arguments.seconds("time_budget", time_budget, optional=True)
    arguments.flag("minimize", minimize)
    arguments.patch_table(patch_globals)
    settings = settings or Settings()
    interrupts = _interrupts(interrupts)
    name = name or getattr(fn, "__qualname__", None) or repr(fn)
    stats = _Stats()
    record = recorded_settings(settings, interrupts, patch_globals)
    fn, patch_globals = _with_fresh(fn, patch_globals)
    fn = _runs_when_called(fn)
    with patched(patch_globals):
        warm_up(fn, settings, interrupts, name)
        covered = _search(fn, strategy, preemption_bound, max_schedules, seed, interrupts, settings, reduce, depth,
                          time_budget, stats)
        found = stats.first
        shrunk_from, minimized = None, None
        if found is not None and minimize:
            shrunk_from = len(found.events)
            found, minimized = _minimize(fn, found, interrupts, settings, reduce, time_budget)
    return _result(name, fn, strategy, preemption_bound, seed, settings, reduce, stats, found, covered,
                   (shrunk_from, minimized), record)


def _json_seconds(value: Any) -> Any:
    """Seconds as strict JSON holds them: an infinity (or NaN) as the string Python prints (``"inf"``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


def recorded_settings(settings: Settings, interrupts: Sequence[Interrupt], patch_globals: dict | None) -> dict:
    """What a replay of this check needs, as JSON: the run settings, and the names of the ``patch_globals``
    and interrupts it must be given again (their values are code)."""
    return {"notify": settings.notify, "spurious": settings.spurious, "lines": settings.lines,
            "lock_release": settings.lock_release, "allow_alive": list(settings.allow_alive),
            "max_steps": settings.max_steps, "time_limit": _json_seconds(settings.time_limit),
            "wall_timeout": _json_seconds(settings.wall_timeout), "interrupts": [i.name for i in interrupts],
            "patch_globals": sorted(f"{getattr(m, '__name__', 'globals')}.{a}" for m, a in (patch_globals or {}))}


def _interrupts(interrupts: Any) -> tuple[Interrupt, ...]:
    if isinstance(interrupts, Interrupt):
        raise TypeError("interrupts must be a sequence of Interrupt values: write interrupts=(Interrupt(...),)")
    try:
        out = tuple(interrupts)
    except TypeError:
        raise TypeError(f"interrupts must be a sequence of Interrupt values, not {interrupts!r}") from None
    for i in out:
        if not isinstance(i, Interrupt):
            raise TypeError(f"interrupts must be Interrupt values, not {i!r}")
    return out


def _with_fresh(fn: Callable[[], Any], extra: dict | None) -> tuple[Callable[[], Any], dict | None]:
    """``fn`` preceded by making every :class:`Fresh` global anew; the static globals for ``patched``."""
    if not extra:
        return fn, extra
    fresh = {k: v for k, v in extra.items() if isinstance(v, Fresh)}
    if not fresh:
        return fn, extra
    static = {k: v for k, v in extra.items() if not isinstance(v, Fresh)}

    def namespace(module: Any) -> dict:
        return module if isinstance(module, dict) else vars(module)

    for module, name in fresh:  # recorded, so the check puts it back (or removes a name that was not there)
        static[(module, name)] = namespace(module).get(name, MISSING)

    def body() -> Any:
        made: dict[int, Any] = {}  # one object per Fresh value, however many names it is bound to
        for (module, name), f in fresh.items():
            if id(f) not in made:  # Fresh(threading.Lock) names the real class: the controlled one is meant
                made[id(f)] = controlled(f.factory)()
            namespace(module)[name] = made[id(f)]
        return fn()

    body.__qualname__ = getattr(fn, "__qualname__", "body")
    return body, static


def warm_up(fn: Callable[[], Any], settings: Settings, interrupts: tuple, name: str | None = None) -> None:
    """Run ``fn`` once, under the schedule that always lets the running thread go on, and forget it.

    Real code initializes things lazily the first time it runs -- a compiled
    machine in an ``lru_cache``, a regular expression, a module imported
    inside a function -- and that first run can reach more synchronization
    operations than every later one. A search that started with it would
    see the second run offer other choices and stop with
    :class:`Nondeterministic`; so would a replay in a fresh process. One
    uncounted run first puts every later one on the same footing. With the check's ``name``, a second one
    is compared with it, and an :class:`InterleavingWarning` says when they differ.
    """
    first = run_once(fn, Scripted(()), settings, interrupts)
    _pass_test_outcome(first)
    if name is None:
        return
    second = run_once(fn, Scripted(()), settings, interrupts)
    if _steps(first) != _steps(second):
        # The first run did work no later one does: a race in it (a lazy singleton's check-then-act, double-
        # checked locking) is never explored, and nothing said so.
        warnings.warn(f"{name}: the first run of the body took other steps than "
                      "the second (lazy initialization?); that first run is not checked, so a race in that "
                      "initialization is not found: reset the state it builds at the start of the body",
                      InterleavingWarning, stacklevel=4)


def _steps(ex: Execution) -> list[tuple[int, str, Any]]:
    """A run's steps as the warm-up compares them: thread, kind and source line (not the label, which names
    objects and threads: a body naming its threads from a per-run counter is no lazy initialization)."""
    return [(e.t, e.op.kind, e.op.where) for e in ex.events]


class InterleavingWarning(UserWarning):
    """A check's verdict holds for less than the code: the first run, not checked, did work no later run does."""


def _pass_test_outcome(ex: Execution) -> None:
    """Raise pytest's skip/xfail/fail that the body raised: the test's outcome, not a finding of the check
    (``pytest.importorskip`` in an ``@interleavings.test`` body failed the test with "uncaught_exception");
    and a body that ran nothing (:func:`_runs_when_called`), as the usage error it is."""
    e = ex.exception
    if e is None or not ex.message.startswith("the test body "):
        return
    if isinstance(e, _RanNothing):
        raise TypeError(str(e)) from None
    if any(base.__module__ == "_pytest.outcomes" for base in type(e).__mro__):  # (Skipped says "builtins")
        raise e


class _RanNothing(TypeError):
    pass


def _runs_when_called(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn``, refusing what it returns when that is a coroutine or a generator and it reached no scheduling
    point: the body's code never ran (``check(lambda: my_async_test())`` was "ok, exhaustive" of an
    ``assert False``)."""
    def body() -> Any:
        here = current()
        steps = len(here[0].events) if here is not None else 0
        out = fn()
        ran = here is not None and len(here[0].events) > steps  # (work done, then a lazy result returned: fine)
        if not ran and (inspect.iscoroutine(out) or inspect.isgenerator(out) or inspect.isasyncgen(out)):
            if not inspect.isasyncgen(out):
                out.close()  # (no "never awaited" warning)
            raise _RanNothing(f"the body returned a {type(out).__name__} ({getattr(out, '__qualname__', out)}): "
                              "its code never runs; check a plain function (run the coroutine to completion "
                              "in it, or iterate the generator)")
        return out

    return body


def _search(fn: Callable[[], Any], strategy: str, bound: int | None, max_schedules: int | None, seed: int,
            interrupts: tuple, settings: Settings, reduce: str, depth: int, budget: float | None,
            stats: _Stats) -> tuple[bool, bool]:
    """Run schedules until a failure, the end of the search, or a limit: (complete, cut by the bound)."""
    def out_of_time() -> bool:
        return budget is not None and stats.elapsed() > budget

    if strategy == "dfs":
        dfs = DFS(reduce, bound)
        while True:
            if stats.add(run_once(fn, dfs, settings, interrupts)):
                return True, dfs.bound_cut
            if not dfs.next_schedule():
                return True, dfs.bound_cut
            if (max_schedules is not None and stats.schedules >= max_schedules) or out_of_time():
                return False, dfs.bound_cut
    rng = _random.Random(seed)
    runs = max_schedules or DEFAULT_SAMPLES
    if strategy == "hypothesis":
        _hypothesis(fn, settings, interrupts, seed, runs, stats, out_of_time)
        return False, False
    k = 0
    for n in range(runs):
        if strategy == "random" or n == 0:
            ctrl: Any = RandomWalk(_random.Random(rng.random()))
        else:
            ctrl = PCT(_random.Random(rng.random()), depth, k)
        ex = run_once(fn, ctrl, settings, interrupts)
        k = max(k, len(ex.events))
        if stats.add(ex) or out_of_time():
            break
    return False, False


def _hypothesis(fn: Callable[[], Any], settings: Settings, interrupts: tuple, seed: int, runs: int,
                stats: _Stats, out_of_time: Callable[[], bool]) -> None:
    try:
        import hypothesis
        from hypothesis import strategies as st
    except ImportError:  # pragma: no cover - depends on the environment
        raise ValueError("strategy 'hypothesis' needs the 'hypothesis' package "
                         "(pip install hypothesis, or the 'test' extra)") from None
    kind: list[str] = []

    class _Failed(Exception):
        pass

    def schedule(xs: list[int]) -> None:
        if out_of_time() and stats.first is None:
            return
        ex = run_once(fn, Scripted(xs), settings, interrupts)
        failed = stats.add(ex)
        if failed and (not kind or ex.outcome == kind[0]):
            kind.append(ex.outcome)
            raise _Failed

    test = hypothesis.given(st.lists(st.integers(0, 7), max_size=200))(schedule)
    test = hypothesis.settings(database=None, max_examples=runs, deadline=None,
                               phases=[hypothesis.Phase.generate, hypothesis.Phase.shrink],
                               suppress_health_check=list(hypothesis.HealthCheck), report_multiple_bugs=False,
                               verbosity=hypothesis.Verbosity.quiet, print_blob=False)(test)
    test = hypothesis.seed(seed)(test)
    try:
        test()
    except _Failed:
        pass


def _minimize(fn: Callable[[], Any], found: Execution, interrupts: tuple, settings: Settings, reduce: str,
              budget: float | None) -> tuple[Execution, bool]:
    """Fewest preemptions (iterative bounding), then fewest steps within SHRINK_SCHEDULES more runs; and
    whether that finished (False: MINIMIZE_SCHEDULES runs or the time budget ran out first)."""
    kind = found.outcome
    best = found
    used = sum(1 for e in found.events if e.preempt)
    t0 = time.perf_counter()
    runs = 0
    for bound in range(0, used + 1):
        dfs = DFS(reduce, bound)
        hit = None
        extra = 0
        while True:
            ex = run_once(fn, dfs, settings, interrupts)
            runs += 1
            if ex.outcome == kind:
                if hit is None or len(ex.events) < len(hit.events):
                    hit = ex
            if hit is not None:
                extra += 1
                if extra > SHRINK_SCHEDULES:
                    break
            if not dfs.next_schedule():
                break
            if runs >= MINIMIZE_SCHEDULES or (budget is not None and time.perf_counter() - t0 > budget):
                # A hit at this bound: every lower one was searched to its end, so its preemptions are the least.
                return _better(best, hit, used), hit is not None
        if hit is not None:
            return _better(best, hit, used), True
    return best, True


def _better(best: Execution, hit: Execution | None, used: int) -> Execution:
    """``hit`` (a violation met while minimizing) if it has fewer preemptions than ``used``, or no more steps."""
    if hit is not None and (sum(1 for e in hit.events if e.preempt) < used or len(hit.events) <= len(best.events)):
        return hit
    return best


def _trace_of(ex: Execution) -> tuple[Trace, tuple[StepDetail, ...]]:
    steps, details = [], []
    for e in ex.events:
        steps.append(TraceStep(ex.threads[e.t].name, e.label, alt_text(ex, e.choice)))
        w = e.op.where if e.choice.interrupt is None else None
        details.append(StepDetail(w[0] if w else None, w[1] if w else None, tuple(e.changes), e.note))
    return Trace(tuple(steps)), tuple(details)


def _result(name: str, fn: Any, strategy: str, bound: int | None, seed: int, settings: Settings, reduce: str,
            stats: _Stats, found: Execution | None, covered: tuple[bool, bool],
            shrunk: tuple[int | None, bool | None], record: dict) -> CodeCheckResult:
    complete, cut = covered
    shrunk_from, minimized = shrunk
    reduce = reduce if bound is None else "none"  # a bounded search is plain DFS (explore.py)
    config = {"strategy": strategy, "preemption_bound": bound, "reduce": reduce, "notify": settings.notify,
              "spurious": settings.spurious, "lines": settings.lines, "interrupts": len(record["interrupts"])}
    if found is None:
        exhaustive = strategy == "dfs" and complete and not cut
        bound_covered = strategy == "dfs" and complete
        what = ((DPOR_SCOPE if reduce == "dpor" else "every schedule") if exhaustive
                else f"every schedule within {bound} preemption(s)" if bound_covered
                else f"{stats.schedules:,} schedule(s), not all")
        note = f"{strategy}: {what}; no violation"
        return CodeCheckResult(model=name, config=config, strategy=strategy, exhaustive=exhaustive, verdict="ok",
                               states=stats.schedules, transitions=stats.transitions, seconds=stats.elapsed(),
                               max_depth=stats.depth, pruned=stats.pruned,
                               seed=None if strategy == "dfs" else seed, preemption_bound=bound,
                               bound_covered=bound_covered, note=note, settings=record)
    trace, details = _trace_of(found)
    violation = Violation(found.outcome, found.message, trace)
    exc = None
    if found.exception is not None:
        exc = f"{type(found.exception).__name__}: {found.exception}"
    return CodeCheckResult(
        model=name, config=config, strategy=strategy, exhaustive=False, verdict=found.outcome,
        states=stats.schedules, transitions=stats.transitions, seconds=stats.elapsed(), violation=violation,
        max_depth=stats.depth, pruned=stats.pruned, seed=None if strategy == "dfs" else seed,
        preemption_bound=bound, bound_covered=False, preemptions=sum(1 for e in found.events if e.preempt),
        schedules_to_bug=stats.to_bug, seconds_to_bug=stats.t_bug, shrunk_from=shrunk_from, minimized=minimized,
        details=details,
        threads=tuple(vt.name for vt in found.threads), stuck=tuple(found.stuck), exception=exc,
        note=f"{strategy}: {found.outcome} in schedule {stats.to_bug:,}", settings=record)


def replay_code(fn: Callable[[], Any], trace: Trace | Any, *, interrupts: Sequence[Interrupt] = (),
                settings: Settings | None = None, name: str | None = None,
                patch_globals: dict | None = None) -> CodeCheckResult:
    """Run ``fn`` once under the schedule ``trace`` (a Trace, its JSON, or a result's JSON)."""
    arguments.body(fn)
    arguments.patch_table(patch_globals)
    interrupts = _interrupts(interrupts)
    if not isinstance(trace, Trace):
        trace = Trace.from_json(trace)
    settings = settings or Settings()
    stats = _Stats()
    record = recorded_settings(settings, interrupts, patch_globals)
    fn, patch_globals = _with_fresh(fn, patch_globals)
    with patched(patch_globals):
        warm_up(fn, settings, tuple(interrupts))
        ex = run_once(fn, Replay(trace), settings, tuple(interrupts))
    if len(ex.events) < len(trace.steps):  # a run that ended early reproduced a prefix, not the trace
        rest = trace.steps[len(ex.events)]
        raise Nondeterministic(f"the run ended ({ex.outcome}) after {len(ex.events)} of the schedule's "
                               f"{len(trace.steps)} steps: step {len(ex.events) + 1} ({rest.thread}, {rest.step}) "
                               f"never ran")
    stats.add(ex)
    found = ex if ex.outcome not in ("ok", "pruned") else None
    return _result(name or getattr(fn, "__qualname__", repr(fn)), fn, "replay", None, 0, settings, "none", stats,
                   found, (False, False), (None, None), record)


def fingerprint(ex: Execution) -> tuple:
    """The run's Mazurkiewicz trace, canonically: per object, the order of the transitions that touch
    it (each named by thread and its own count), consecutive reads as a set; and how the run ended.

    Two schedules that differ only in the order of independent transitions get the same fingerprint,
    so the set of fingerprints is what partial-order reduction must preserve (the differential test).
    A run cut short by a violation raised in a step (an exception, a failed assertion, a leak) is not
    a maximal run: only its kind counts, since which independent transitions happened before it
    varies with the order explored."""
    if ex.outcome not in ("ok", "deadlock", "lost_wakeup", "hang"):
        return (ex.outcome,)
    count: dict[int, int] = {}
    per_key: dict[Any, list] = {}
    stars: list = []
    for e in ex.events:
        n = count.get(e.t, 0)
        count[e.t] = n + 1
        me = (ex.threads[e.t].name, n, e.choice.alt)
        keys = list(per_key) + ["*"] if e.star else list(e.keys)
        if e.star:
            stars.append(me)
        for k in keys:
            seq = per_key.setdefault(k, [])
            if not e.write and not e.star and seq and isinstance(seq[-1], frozenset):
                seq[-1] = seq[-1] | {me}
            else:
                seq.append(frozenset([me]) if not e.write and not e.star else me)
    named = sorted((repr(k), tuple(v)) for k, v in per_key.items() if not isinstance(k, int))
    anon = sorted(tuple(v) for k, v in per_key.items() if isinstance(k, int))
    return ex.outcome, tuple(named), tuple(anon), tuple(stars), tuple(sorted(count.items()))


def outcomes(fn: Callable[[], Any], *, reduce: str = "dpor", preemption_bound: int | None = None,
             settings: Settings | None = None, interrupts: Sequence[Interrupt] = (),
             max_schedules: int = 200_000) -> tuple[set, int]:
    """(fingerprints of every complete run, schedules run): the differential test's view of a search."""
    settings = settings or Settings()
    dfs = DFS(reduce, preemption_bound)
    seen: set = set()
    n = 0
    with patched():
        warm_up(fn, settings, tuple(interrupts))
        while True:  # no ``while cond:``: 3.13 leaves its back-edge out of the with (backedges.py)
            if n >= max_schedules:
                break
            ex = run_once(fn, dfs, settings, tuple(interrupts))
            n += 1
            if ex.outcome != "pruned":
                seen.add(fingerprint(ex))
            if not dfs.next_schedule():
                break
    return seen, n

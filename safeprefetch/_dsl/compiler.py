"""The compiler: a built model -> a :class:`Machine` of fire functions over constant indices.

What it guarantees
------------------
:func:`compile_model` turns what ``build`` declared on a :class:`Builder`
into one Machine, or refuses with a :class:`ModelError` that names what is
wrong. In order:

1. the program graph of every program a thread runs is read and checked
   (``graph.py``: labels, declared targets);
2. the state layout is fixed (``layout.py``): every field at a constant
   index, the initial state, the views;
3. every step of every thread is compiled by the one function for its kind:
   :func:`~.user_steps.compile_user_step` for ``step`` and ``external``, the
   :data:`~.primitives.PRIMITIVES` table for the rest. Each gives the
   step's program counters, fire functions and static :class:`StepInfo`;
4. symmetry groups and priorities are checked against the threads.

The result is pure data and pure functions: compiling the same model at the
same config twice gives machines that explore identically, and so does
compiling with specialization on or off (``specialize.ENABLED``).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any, Callable

from .builder import Builder, reads_threads
from .graph import GraphStep, did_you_mean, program_graph
from .layout import WAITS, Layout, Site
from .machine import Machine, StepInfo
from .primitives import PRIMITIVES
from .program import ASLEEP, NOT_STARTED
from .views import make_threads_view
from .user_steps import compile_user_step
from .violations import ModelError, truth

__all__ = ["STEP_KINDS", "builder_graph", "compile_model"]

#: Every step kind a Program creates -> the function that compiles it.
STEP_KINDS: dict[str, Callable[[Layout, Site], list]] = {
    "step": compile_user_step,
    "external": compile_user_step,
    **PRIMITIVES,
}


def builder_graph(b: Builder, strict: bool = True) -> dict[str, dict[str, GraphStep]]:
    """The graph of every program some thread runs, by role, in the order threads first use them."""
    graph: dict[str, dict[str, GraphStep]] = {}
    for t in b.threads:
        if t.program.role not in graph:
            graph[t.program.role] = program_graph(t.program, strict)
    return graph


def compile_model(name: str, config: dict[str, Any], b: Builder, strict: bool = True) -> Machine:
    """Compile ``b`` (built at ``config``); ``strict=False`` tolerates undeclared computed steps."""
    if not b.threads:
        raise ModelError(f"model {name!r} declares no threads")
    graph = builder_graph(b, strict)
    lay = Layout(b)
    tables: list[dict[str, Callable]] = []
    infos: list[dict[str, StepInfo]] = []
    waits: dict[tuple[int, str], tuple[str, Callable | None]] = {}
    for ti, t in enumerate(b.threads):
        table: dict[str, Callable] = {}
        info: dict[str, StepInfo] = {}
        steps = graph[t.program.role]
        for spec in t.program.specs.values():
            kind = STEP_KINDS.get(spec.kind)
            if kind is None:  # pragma: no cover - Program only creates the kinds above
                raise ModelError(f"unknown step kind {spec.kind!r}")
            for pc, fire, si in kind(lay, Site(lay, ti, spec, steps[spec.label])):
                if fire is not None:
                    table[pc] = fire
                info[pc] = si
            if spec.kind in WAITS:
                waits[(ti, spec.label + ASLEEP)] = (spec.obj, None if spec.until is None else _checked_until(
                    spec.until, f"the until of thread {t.name!r}'s wait {spec.label!r}"))
        if not t.start:  # no move of its own until a spawn starts it
            info[NOT_STARTED] = StepInfo(ti, NOT_STARTED, NOT_STARTED, "asleep")
        tables.append(table)
        infos.append(info)
    symmetry, priorities = _symmetry(b), _priorities(b)
    threads_view = make_threads_view([t.name for t in b.threads], lay.pc_index, lay.local_index)
    invariants = tuple((n, k, _with_threads(pred, threads_view)) for n, k, pred in b.invariants)
    if any(reads_threads(pred) for _n, _k, pred in b.invariants):
        _own_fields_are_visible(lay, infos)
    return Machine(
        name=name,
        config=config,
        init=tuple(lay.init),
        thread_names=tuple(t.name for t in b.threads),
        pc_index=tuple(lay.pc_index),
        tables=tuple(tables),
        infos=tuple(infos),
        shared_index=lay.shared_index,
        local_index=tuple(lay.local_index),
        cond_index=lay.cond_index,
        mutex_index=lay.mutex_index,
        invariants=invariants,
        end_checks=tuple(_with_threads(check, threads_view) for check in b.end_checks),
        shutdown_pred=None if b.shutdown_pred is None else _shutdown_pred(b.shutdown_pred),
        waits=waits,
        view=lay.view,
        local_views=lay.local_views,
        progress_labels=_progress(b),
        priorities=priorities,
        field_names=tuple(lay.fields),
        spurious_pcs=tuple(frozenset(pc for pc, si in info.items() if si.kind == "spurious") for info in infos),
        timed_sleep_pcs=tuple(frozenset(pc for pc, si in info.items()
                                        if si.kind == "timed_wait" and pc.endswith(ASLEEP)) for info in infos),
        event_branches=tuple(frozenset(move for pc, si in info.items() for move in _events(pc, si)) for info in infos),
        symmetry=symmetry,
        graph=graph,
        thread_roles=tuple(t.program.role for t in b.threads),
    )


def _events(pc: str, si: StepInfo) -> list[tuple[str, int]]:
    """The moves of step ``si`` at ``pc`` that happen to a blocked thread (:attr:`Machine.event_branches`):
    a spurious wakeup, a timed condvar sleep's timeout and spurious wakeup, another primitive's timeout."""
    if si.kind == "spurious" or (si.kind == "timed_wait" and pc.endswith(ASLEEP)):
        return [(pc, b) for b in range(max(1, len(si.branches)))]
    # (A user's own step's or external action's branch named "timed out" is a move of a running thread: taken
    # for a timeout, it let strict priority's victim run "by event", and a starving thread read "ok".)
    return [(pc, b) for b, name in enumerate(si.branches)
            if name == "timed out" and si.kind not in ("step", "external")]


def _with_threads(check: Callable, threads_view: Callable) -> Callable:
    """``check`` as a function of the shared view alone: a check that reads threads gets them built from it."""
    if not reads_threads(check):
        return check
    return partial(_call_with_threads, check, threads_view)


def _call_with_threads(check: Callable, threads_view: Callable, s: Any) -> Any:
    return check(s, threads_view(s))


def _own_fields_are_visible(lay: Layout, infos: list[dict[str, StepInfo]]) -> None:
    """An invariant reads threads: every step writes what it may see (the thread's pc and locals).

    Footprints name the shared fields a step touches and leave out the
    thread's own block, which no other *step* reads; an invariant that reads
    threads does, so partial-order reduction must not call such a step
    invisible.
    """
    for ti, info in enumerate(infos):
        own = frozenset(range(lay.pc_index[ti], lay.pc_index[ti] + 1 + len(lay.local_index[ti])))
        for pc, si in info.items():
            if si.footprint is not None:
                info[pc] = replace(si, footprint=(si.footprint[0], si.footprint[1] | own))


def _symmetry(b: Builder) -> tuple[tuple[int, ...], ...]:
    """The declared groups of interchangeable threads, as sorted thread indices (checked)."""
    names = [t.name for t in b.threads]
    out = []
    for group in b.symmetry:
        unknown = [g for g in group if g not in names]
        if unknown:
            raise ModelError(f"symmetric: unknown threads {unknown}" + did_you_mean(unknown[0], names))
        idx = tuple(sorted(names.index(g) for g in group))
        first = b.threads[idx[0]]
        for i in idx[1:]:
            th = b.threads[i]
            if th.program is not first.program or th.locals != first.locals:
                raise ModelError(f"symmetric: {th.name} and {first.name} differ in program or initial locals")
        out.append(idx)
    return tuple(out)


def _priorities(b: Builder) -> tuple[int, ...]:
    names = [t.name for t in b.threads]
    unknown = sorted(set(b.priorities) - set(names))
    if unknown:
        raise ModelError(f"priority for unknown threads {unknown}" + did_you_mean(unknown[0], names))
    return tuple(b.priorities.get(t.name, 0) for t in b.threads)


def _progress(b: Builder) -> frozenset[str]:
    """The declared progress labels (checked: a label no program has would silently disable the starvation
    check for the thread it was meant for)."""
    labels = {label for t in b.threads for label in t.program.specs}
    for label in sorted(b.progress_labels):
        if label not in labels:
            raise ModelError(f"progress: no program has a step {label!r}" + did_you_mean(label, sorted(labels)))
    return frozenset(b.progress_labels)


def _shutdown_pred(pred: Callable) -> Callable:
    """``shutdown_when``'s predicate, its result's truth checked (``violations.truth``)."""
    def shutdown_requested(s: Any) -> bool:
        return truth(pred(s), "shutdown_when's predicate")
    return shutdown_requested


def _checked_until(until: Callable, what: str) -> Callable:
    """A wait's ``until`` as the verdict (is a hang a lost wakeup?) and the playground read it: checked."""
    def holds(s: Any, me: Any) -> bool:
        return truth(until(s, me), what)
    return holds

"""A code check's result, and its counterexample drawn by the checker's own renderers.

What it guarantees
------------------
:class:`CodeCheckResult` is a :class:`~safeprefetch.CheckResult` (frozen,
``to_json`` as for a model) with the facts of a search over schedules of real
code added as fields: schedules run and pruned, the preemption bound and
whether every schedule within it was covered, the preemptions and steps of
the reported trace, and, per step, the source line and what the step changed.
The trace is a :class:`~safeprefetch.Trace` whose steps name the thread, the
operation, the object and the source line (``acquire lock @buffer.py:14``)
and whose ``branch`` is the data choice taken (``waiter 1``, ``spurious``,
``interrupt 0``), so ``replay`` can force it again.

Drawing it reuses the model checker's text table and SVG swimlanes rather
than a second renderer: :func:`trace_model` turns the counterexample into a
tiny model -- one straight-line program per thread, one step per transition,
one shared variable per object holding what the transition left in it, and
for each blocked thread a last step that is never enabled -- so the table's
"changes" column and the SVG's final "stuck" row say exactly what the
execution did.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._check.result import CheckResult, Trace, TraceStep, Violation
from .._check.trace import format_table

__all__ = ["DPOR_SCOPE", "CodeCheckResult", "StepDetail", "render_text", "svg_text", "trace_model", "write_svg"]

#: What an exhaustive DPOR search covered: its dependence sees synchronization objects only, so it is every
#: schedule only for code whose shared plain data is always accessed under one common lock (docs/interleavings.md,
#: "What DPOR assumes"; the same data under two different locks can hide a lost update it never runs).
DPOR_SCOPE = "every schedule up to DPOR's equivalence, for race-free code"


@dataclass(frozen=True)
class StepDetail:
    """What one step of a code trace did, beyond its thread and label."""

    #: The source file and line of the operation (the innermost frame of the code under test).
    file: str | None
    line: int | None
    #: ``name=state`` of the objects the step changed, as the step left them.
    changes: tuple[str, ...] = ()
    #: What else happened (``woke consumer``).
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "changes": list(self.changes), "note": self.note}


@dataclass(frozen=True)
class CodeCheckResult(CheckResult):
    """A :class:`CheckResult` from checking code: ``model`` is the test's name, ``states`` the schedules run.

    For a code check ``states`` counts complete schedules (there is no stored
    state), ``transitions`` the scheduling decisions taken over all of them,
    and ``max_depth`` the longest schedule. ``exhaustive`` means every schedule
    was run -- with ``reduce="dpor"`` (``config["reduce"]``), :data:`DPOR_SCOPE` --
    so it is False for a result with a violation (the search stopped
    there), unlike a model's result, where it also covers a violation found.
    """

    #: Runs cut short because every choice left had been explored elsewhere (sleep sets).
    pruned: int = 0
    #: The seed of a sampling strategy (None for ``dfs``).
    seed: int | None = None
    #: The preemption bound searched (None: unbounded).
    preemption_bound: int | None = None
    #: True when every schedule within the bound was run (a ``dfs`` that was not cut short).
    bound_covered: bool = False
    #: Preemptions the reported trace uses.
    preemptions: int | None = None
    #: The 1-based number of the run that first failed, and the seconds to it.
    schedules_to_bug: int | None = None
    seconds_to_bug: float | None = None
    #: Steps of the first failing run, before minimization.
    shrunk_from: int | None = None
    #: Whether minimizing finished (then ``preemptions`` is the least any schedule needs): False when it
    #: stopped at ``MINIMIZE_SCHEDULES`` runs or the time budget, keeping the best trace met; None: not asked.
    minimized: bool | None = None
    #: Per step of ``trace``: source line, changes and notes.
    details: tuple[StepDetail, ...] = ()
    #: Threads of the failing run, in the order they were created.
    threads: tuple[str, ...] = ()
    #: For a hang: each blocked thread and why it is blocked.
    stuck: tuple[tuple[str, str], ...] = ()
    #: The exception the code raised, as text (type, message, where), for those violations.
    exception: str | None = None
    #: One line on what was searched and what that means.
    note: str = ""
    #: The run settings a replay needs (``notify``, ``time_limit``, ...), and the ``patch_globals`` names
    #: and interrupts it must be given again (their values are code, not JSON).
    settings: dict = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = super().to_json()
        d["search"] = {
            "kind": "code",
            "schedules": self.states,
            "pruned": self.pruned,
            "seed": self.seed,
            "preemption_bound": self.preemption_bound,
            "bound_covered": self.bound_covered,
            "preemptions": self.preemptions,
            "schedules_to_bug": self.schedules_to_bug,
            "seconds_to_bug": None if self.seconds_to_bug is None else round(self.seconds_to_bug, 6),
            "shrunk_from": self.shrunk_from,
            "minimized": self.minimized,
            "note": self.note,
        }
        for entry, det in zip(d["trace"], self.details):
            entry.update(det.to_json())
        d["settings"] = dict(self.settings)
        d["threads"] = list(self.threads)
        d["stuck"] = [{"thread": t, "reason": r} for t, r in self.stuck]
        return d


# -- the counterexample as a model ---------------------------------------------------------

_IDENT = re.compile(r"[^0-9A-Za-z_]")


def _var(name: str) -> str:
    v = _IDENT.sub("_", name) or "obj"
    return v if not v[0].isdigit() else "o_" + v


def trace_model(result: CodeCheckResult) -> tuple[Any, Trace, Violation | None]:
    """(machine, trace, violation) for the checker's renderers: the counterexample as a straight-line model."""
    from .._dsl.model import DONE, Model

    steps = list(result.trace.steps)
    details = list(result.details) + [StepDetail(None, None)] * (len(steps) - len(result.details))
    threads = list(result.threads) or sorted({s.thread for s in steps})
    stuck = dict(result.stuck)
    fields: dict[str, str] = {}
    for det in details:
        for ch in det.changes:
            fields.setdefault(_var(ch.split("=", 1)[0]), "-")
    per_thread: dict[str, list[tuple[str, dict[str, str]]]] = {t: [] for t in threads}
    labels: list[str] = []
    seen: dict[tuple[str, str], int] = {}
    for s, det in zip(steps, details):
        label = s.step if s.branch is None else f"{s.step} [{s.branch}]"
        n = seen.get((s.thread, label), 0) + 1
        seen[(s.thread, label)] = n
        if n > 1:
            label = f"{label} ({n})"
        sets = {}
        for ch in det.changes:
            k, _, v = ch.partition("=")
            sets[_var(k)] = v
        per_thread.setdefault(s.thread, []).append((label, sets))
        labels.append(label)
    finished = {s.thread for s in steps if s.step.startswith("exit ")}

    class _TraceModel(Model):
        name = result.model
        graph_checked = False

        def build(self, m: Any) -> None:
            if fields:
                m.shared(**fields)
            for t in threads:
                mine = per_thread.get(t, [])
                p = m.program(t)
                tail = "blocked: " + stuck[t] if t in stuck else "(not run further)"
                for j, (label, sets) in enumerate(mine):
                    nxt = mine[j + 1][0] if j + 1 < len(mine) else (DONE if t in finished else tail)
                    p.step(label, _setter(sets), next=nxt)
                if t not in finished:
                    p.step(tail, guard=lambda s, me: False, next=DONE)
                m.thread(t, p)

    machine = _TraceModel.compile({})
    trace = Trace(tuple(TraceStep(s.thread, lab) for s, lab in zip(steps, labels)))
    v = result.violation
    violation = Violation(v.kind, v.message, trace) if v is not None else None
    return machine, trace, violation


def _setter(sets: dict[str, str]) -> Any:
    def effect(s: Any, me: Any) -> None:
        for k, v in sets.items():
            setattr(s, k, v)
    return effect


def render_text(result: CodeCheckResult) -> str:
    """The verdict, what was searched, and the counterexample as the checker's trace table."""
    cfg = " ".join(f"{k}={v}" for k, v in result.config.items())
    lines = [f"code {result.model} ({cfg})"]
    if result.violation is not None:
        scope = "stopped at this violation"
    elif result.exhaustive:
        scope = f"exhaustive ({DPOR_SCOPE})" if result.config.get("reduce") == "dpor" else "exhaustive"
    else:
        scope = (f"every schedule within {result.preemption_bound} preemption(s)" if result.bound_covered
                 else "NOT exhaustive")
    lines.append(f"verdict: {result.verdict}; {result.states:,} schedules ({result.pruned:,} pruned), "
                 f"{result.transitions:,} transitions, {result.seconds:.3f} s, {scope}")
    if result.note:
        lines.append(result.note)
    if result.violation is not None:
        shrunk = ""
        if result.shrunk_from and result.minimized is False:
            shrunk = (f" (minimizing stopped before it finished, from {result.shrunk_from} steps: a schedule "
                      "with fewer preemptions may exist)")
        elif result.shrunk_from:
            shrunk = f" (minimized from {result.shrunk_from} steps)"
        lines.append(f"trace: {len(result.trace)} steps, {result.preemptions} preemption(s){shrunk}")
        machine, trace, violation = trace_model(result)
        width = min(44, max([len(s.step) for s in trace.steps] + [len(n) for n in machine.thread_names] + [8]))
        lines.append(format_table(machine, trace, violation, width=width))
    return "\n".join(lines)


def svg_text(result: CodeCheckResult) -> str:
    """The counterexample as the checker's SVG swimlane diagram."""
    from .._tools.svg import svg_for

    machine, trace, violation = trace_model(result)
    return svg_for(machine, trace, violation)


def write_svg(result: CodeCheckResult, path: str | Path) -> None:
    Path(path).write_text(svg_text(result), encoding="utf-8")

"""Rendering traces for people: an OSTEP-style table, one column per thread.

Each row is one step. The stepping thread's column holds the step label (and
branch); the last column lists what the step changed, by name: shared
variables, primitive state (a mutex's owner, a condvar's queue) and the
thread's own locals. The step that exposes the violation, or the state in
which it holds, is marked with ``<==``.

The table is computed by replaying the trace through the model, so what you
read is what the model does, never a second account of it.
"""

from __future__ import annotations

from typing import Any, Sequence

from .replay import replay
from .result import CheckResult, Trace, Violation
from .._dsl.model import DONE, Machine, StepViolation

__all__ = ["changes", "format_table", "format_value", "render_result"]


def format_value(machine: Machine, index: int, value: Any) -> str:
    names = machine.thread_names
    if index in machine.mutex_index.values():
        return "-" if value == -1 else names[value]
    if index in machine.cond_index.values():
        return "[" + ", ".join(names[t] for t in value) + "]"
    if isinstance(value, str):
        return value
    return printable(value)


def printable(value: Any) -> str:
    """``repr(value)``, or what the value is where it cannot be printed: an int past Python's digit limit
    (``sys.set_int_max_str_digits``), or an object whose ``__repr__`` raises. A trace table must not fail
    where the model did not."""
    try:
        return repr(value)
    except Exception as e:  # noqa: BLE001 - anything a repr raises: say what the value is instead
        if isinstance(value, int):
            return f"<int of {value.bit_length()} bits>"
        if type(value) is tuple:
            inner = ", ".join(printable(v) for v in value)
            return f"({inner}{',' if len(value) == 1 else ''})"
        if isinstance(value, frozenset):
            return "frozenset({" + ", ".join(sorted(printable(v) for v in value)) + "})"
        return f"<{type(value).__name__} whose repr raised {type(e).__name__}>"


def changes(machine: Machine, before: Sequence, after: Sequence, thread: int | None = None) -> list[str]:
    """``name=value`` for every field that differs, skipping the stepping thread's own pc."""
    out = []
    own_pc = machine.pc_index[thread] if thread is not None else None
    for i, (a, b) in enumerate(zip(before, after)):
        if a != b and i != own_pc:
            name = machine.field_names[i]
            if thread is not None and name.startswith(machine.thread_names[thread] + "."):
                name = name.split(".", 1)[1]
            out.append(f"{name}={format_value(machine, i, b)}")
    return out


def format_table(machine: Machine, trace: Trace, violation: Violation | None = None,
                 width: int = 26) -> str:
    states = replay(machine, trace)
    names = machine.thread_names
    head = ["#".rjust(3)] + [n[:width].ljust(width) for n in names] + ["changes"]
    lines = ["  ".join(head), "  ".join(["-" * 3] + ["-" * width] * len(names) + ["-" * 7])]
    for k, step in enumerate(trace.steps):
        t = names.index(step.thread)
        label = step.step if step.branch is None else f"{step.step} [{step.branch}]"
        cells = [""] * len(names)
        cells[t] = label
        before, after = states[k], states[k + 1]
        if isinstance(after, StepViolation):
            what = f"<== {after.kind}: {after.message}"
        else:
            what = ", ".join(changes(machine, before, after, t))
            if isinstance(after, tuple) and machine.pc(after, t) == DONE:
                what = (what + ", " if what else "") + "(done)"
        row = [str(k + 1).rjust(3)]
        for c in cells:
            if len(c) > width:
                c = c[: width - 1] + "~"
            row.append(c.ljust(width))
        row.append(what)
        lines.append("  ".join(row).rstrip())
    if violation is not None and not violation.on_step:
        lines.append(f"<== {violation.kind}: {violation.message}")
    return "\n".join(lines)


def render_result(result: CheckResult, machine: Machine) -> str:
    cfg = " ".join(f"{k}={v}" for k, v in result.config.items())
    lines = [f"model {result.model} ({cfg})"]
    sampled = result.strategy not in ("bfs", "dfs")
    if sampled:
        scope = f"sampled by --strategy {result.strategy}" + (", NOT exhaustive" if result.ok else "")
        if result.ok and result.exhaustive:  # (preempt, when no schedule needed more preemptions than allowed)
            scope = f"exhaustive (--strategy {result.strategy} covered every schedule)"
    elif result.exhaustive:
        scope = "exhaustive"
    else:
        scope = "NOT exhaustive (" + (result.stop_message or "state bound reached") + ")"
    lines.append(f"verdict: {result.verdict}"
                 + (f" (expected {result.expected})" if result.expected is not None else "")
                 + f"; {result.states} states, {result.transitions} transitions, "
                 f"{result.seconds:.3f} s, {scope}"
                 + (f", {result.engine} engine" if result.engine != "plain" else ""))
    if result.engine_note:
        lines.append(f"engine: {result.engine}, because {result.engine_note}")
    if result.store == "fingerprint" and result.collision_probability is not None:
        lines.append(f"probabilistic: states stored as fingerprints; estimated chance that a collision "
                     f"hid a state: {result.collision_probability:.2g}")
    elif result.store == "bitstate" and result.hash_factor is not None:
        lines.append(f"bitstate (not a proof): hash factor {result.hash_factor:,.1f} (SPIN: best if > 100); "
                     f"chance a new state was taken for a visited one at the end: "
                     f"{result.collision_probability:.2g}")
    note = getattr(result, "note", None)
    if note:
        lines.append(note)
    if result.violation is not None:
        what = "shortest trace" if result.strategy == "bfs" and result.exhaustive else "trace"
        lines.append(f"{what}: {len(result.trace)} steps")
        lines.append(format_table(machine, result.trace, result.violation))
    return "\n".join(lines)

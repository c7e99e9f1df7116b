"""The terminal's views of a model: prose re-wrapped, its config, its programs, a trace table.

``explain`` and ``play`` print to a terminal, and the docs generator puts
the same text in fenced blocks, so the three share one way of writing a
model down: docstring prose re-wrapped to :data:`WRAP` columns (lists,
indented blocks and tables kept as written), the configuration on one line,
each program's graph drawn from its ``to=`` declarations (never by running
it), and the OSTEP-style trace table with columns as wide as its longest
label.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any, Mapping, Sequence

from .._check.result import Trace
from .._check.trace import format_table
from .._dsl.graph import format_graph
from .._dsl.model import Machine
from .._dsl.program import ASLEEP

__all__ = ["WRAP", "blocked_reason", "config_text", "programs_text", "reflow", "sentence", "trace_table"]

#: Width the terminal prose is wrapped to; the trace table is as wide as it needs.
WRAP = 88


def _rst_to_plain(text: str) -> str:
    return text.replace("``", "`")


def sentence(text: str) -> str:
    """Capitalise the first letter (docstring paragraphs after ``Key:`` often start in lower case)."""
    return text[:1].upper() + text[1:] if text[:1].islower() else text


def reflow(text: str, indent: str = "  ", width: int = WRAP) -> str:
    """Re-wrap plain paragraphs; keep lists, indented blocks and tables as written."""
    out = []
    for para in re.split(r"\n[ \t]*\n", _rst_to_plain(text).strip()):
        lines = para.splitlines()
        if any(line.startswith((" ", "\t", "* ", "- ", "|")) for line in lines) or any(
                re.match(r"^\s*([*-]|\d+\.)\s", line) for line in lines[1:]):
            out.append("\n".join(indent + line for line in lines))
        else:
            out.append(textwrap.fill(" ".join(line.strip() for line in lines), width,
                                     initial_indent=indent, subsequent_indent=indent))
    return "\n\n".join(out)


def trace_table(machine: Machine, trace: Trace, violation: Any = None) -> str:
    """:func:`format_table` with columns as wide as the longest label (so none is cut), within reason."""
    longest = max([len(s.step) + (len(s.branch) + 3 if s.branch else 0) for s in trace.steps]
                  + [len(n) for n in machine.thread_names] + [8])
    return format_table(machine, trace, violation, width=min(longest, 44))


def config_text(config: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def programs_text(machine: Machine, indent: str = "") -> str:
    """Each program's graph, from its declarations (``label  kind  -> targets``), with the threads that run it."""
    return format_graph(machine.graph, {role: machine.threads_of(role) for role in machine.graph}, indent)


def blocked_reason(machine: Machine, state: Sequence, t: int) -> str:
    """Why thread ``t`` cannot take its next step in ``state``, in a few words.

    Only meaningful for a thread that is not done and has no enabled step
    (or only a spurious wakeup).
    """
    pc = machine.pc(state, t)
    info = machine.step_info(state, t)
    if pc.endswith(ASLEEP):
        cond = info.obj if info is not None else "?"
        return f"asleep on {cond}"
    if info is None:
        return f"blocked at {pc!r}"
    if info.kind in ("acquire", "wake"):
        mutex = info.obj if info.kind == "acquire" else info.label.rsplit("reacquire ", 1)[-1]
        if mutex in machine.mutex_index:
            owner = state[machine.mutex_index[mutex]]
            if owner != -1:
                return f"waits for {mutex} (held by {machine.thread_names[owner]})"
    if info.kind == "sem_acquire":
        return f"waits for semaphore {info.obj} (count 0)"
    if info.kind == "wait_flag":
        return f"waits for flag {info.obj}"
    return f"waits at {info.label!r}: not enabled yet"

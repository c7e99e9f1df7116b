"""``explain MODEL``: the story of one catalog model, checked as it is told.

A counterexample is only useful if a person can follow it. The checker
already finds the shortest one; ``explain`` puts it in front of a reader
with the story around it: the bug in one sentence (from the model's own
docstring, see :mod:`.modeldoc`), where it comes from, the shortest trace
as the OSTEP-style table, each program's graph (every step and the labels
it declares it may go to, drawn from the ``to=`` declarations, never by
running it), and the fix -- the docstring's description of it, and the
verdict of the fixed design re-checked at the same configuration (see
:mod:`.fix`), so the claim "this fixes it" is itself checked. ``--diff``
adds a unified diff of the two model classes.

A reference design gets the same treatment turned around: what it
guarantees (its docstring's headed sections), the sweep it is proved ok
over, and the broken models it is the fix of.
"""

from __future__ import annotations

from typing import Any, Mapping

from .catalog import catalog
from .fix import fix_name, fix_report, source_diff, source_file
from .modeldoc import ModelDoc, model_doc
from .plaintext import config_text, programs_text, reflow, sentence, trace_table
from .._check.explore import check
from .._check.result import CheckResult
from .._dsl.model import Machine, Model

__all__ = ["explain"]


def _result_line(result: CheckResult) -> str:
    scope = "exhaustive" if result.exhaustive else "NOT exhaustive (state bound reached)"
    text = f"{result.verdict}, {result.states} states, {scope}"
    if result.violation is not None:
        text += f", shortest trace {len(result.trace)} steps"
    return text


def _reference_lines(model: type[Model], doc: ModelDoc) -> list[str]:
    """What a reference design adds: the sweep it is proved over, the broken models it fixes."""
    out: list[str] = []
    if model.sweep:
        sweep = ", ".join(f"{k} in {list(v)}" for k, v in model.sweep.items())
        out += ["", "Proved ok exhaustively over the sweep", reflow(sweep)]
    fixes = [n for n, m in catalog().items() if m.expected != "ok" and fix_name(m) == doc.name]
    if fixes:
        out += ["", "It is the fix of", reflow(", ".join(fixes))]
    return out


def _fix_lines(model: type[Model], doc: ModelDoc, machine: Machine, diff: bool) -> list[str]:
    """What a broken model adds: its fix, in its words, and the fixed design checked at the same config."""
    out = ["", "The fix"]
    out.append(reflow(sentence(doc.fix)) if doc.fix else "  (the model does not describe a fix)")
    name = fix_name(model)
    report = fix_report(model, machine.config) if name else None
    if name and report is None:
        out.append(f"  The fix names {name!r}, which is not in the catalog.")
    elif report is not None:
        out.append("")
        out.append(f"  {report.fix.name} at {config_text(report.config)}:")
        out.append(f"    {_result_line(report.result)}")
        if report.dropped:
            out.append(f"    ({report.fix.name} has no parameter {', '.join(report.dropped)}; left at its default)")
        if diff:
            out += ["", f"Source diff: {source_file(model)} -> {source_file(report.fix)}",
                    source_diff(model, report.fix).rstrip("\n")]
        else:
            out.append(f"  (add --diff to see the source diff against {report.fix.name})")
    return out


def explain(model: type[Model], overrides: Mapping[str, Any] | None = None, *, diff: bool = False,
            spec: str | None = None) -> str:
    """The text ``explain`` prints: the bug, its source, the shortest trace and the fix.

    ``spec`` is how the user named the model (a catalog name, or the path of their file): the
    closing ``play`` suggestion repeats it, so it works for a model that is not in the catalog.
    """
    doc = model_doc(model)
    machine = model.compile(overrides)
    result = check(machine)
    default = machine.config == model.configure({})
    # A model that declares no verdict (a user's) inherits the base class's "ok": it is judged by what the
    # checker found, not called a reference design that "declares 'ok'" while the checker finds a deadlock.
    declared = any("expected" in vars(c) for c in model.__mro__ if c is not Model)
    reference = model.expected == "ok" if declared else result.ok
    out: list[str] = []
    kind = "reference design" if reference else "broken model"
    out.append(f"{doc.name}: {kind} " + (f"(expected verdict: {model.expected})" if declared
                                         else f"(it declares no expected verdict; the checker says {result.verdict})"))
    out.append("")
    out.append("The design" if reference else "The bug")
    out.append(reflow(sentence(doc.summary)))
    if doc.source:
        out += ["", "Source", reflow(sentence(doc.source))]
    out += ["", "Checked", f"  config: {config_text(machine.config)}"
            + ("" if default else " (not the model's default)")]
    out.append(f"  verdict: {_result_line(result)}")
    if declared and result.verdict != model.expected:
        out.append(f"  NOTE: the model declares {model.expected!r}; the checker says {result.verdict!r}"
                   + ("" if default else " at this configuration"))
    if doc.expected_detail and declared:
        # The story is told of the declared verdict: under another one it must not read as what was found.
        told = "" if result.verdict == model.expected else f"At its declared configuration ({model.expected}): "
        out += ["", reflow(told + doc.expected_detail)]
    if result.violation is not None:
        out += ["", f"Shortest trace ({len(result.trace)} steps)",
                trace_table(machine, result.trace, result.violation)]
    out += ["", "The programs (each step, its kind, and the labels it declares it may go to)",
            programs_text(machine, indent="  ")]
    for title, text in doc.sections:
        out += ["", title, reflow(text)]
    out += _reference_lines(model, doc) if reference else _fix_lines(model, doc, machine, diff)
    out += ["", f"Be the scheduler yourself: python -m safeprefetch play {spec or doc.name}"]
    return "\n".join(out) + "\n"

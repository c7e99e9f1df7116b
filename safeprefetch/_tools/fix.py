"""The fix of a broken model: the design it names, re-checked at the same configuration.

A broken model's docstring says how to fix it; ``explain`` does not take
its word for it. The fix is a catalog reference design, named by the
model's ``fix`` attribute (or, failing that, by the first reference design
its Fix paragraph names in double backticks), and :func:`fix_report`
checks that design at the configuration where the broken one fails, so the
claim "this fixes it" is itself checked. :func:`source_diff` shows what
changed between the two classes, verbatim.
"""

from __future__ import annotations

import difflib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .catalog import catalog
from .modeldoc import model_doc
from .._check.explore import check
from .._check.result import CheckResult
from .._dsl.model import Model

__all__ = ["FixReport", "fix_model", "fix_name", "fix_report", "source_diff", "source_file"]


@dataclass(frozen=True)
class FixReport:
    """The fixed design checked where the broken one fails."""

    #: The broken model.
    model: type[Model]
    #: The design named by the broken model's ``fix`` attribute.
    fix: type[Model]
    #: The configuration the fix was checked at.
    config: Mapping[str, Any]
    #: Parameters of the broken model's config that the fix does not take.
    dropped: tuple[str, ...]
    #: The fix's check result there.
    result: CheckResult


def fix_name(model: type[Model]) -> str | None:
    """The design that fixes ``model``: its ``fix`` attribute.

    A model without one gets the first catalog reference design its Fix
    paragraph names in double backticks.
    """
    name = getattr(model, "fix", None)
    if name:
        return name
    text = model_doc(model).fix or ""
    refs = {n for n, m in catalog().items() if m.expected == "ok"}
    named = [n for n in re.findall(r"``(\w+)``", text) if n in refs]
    return named[0] if named else None


def fix_model(model: type[Model]) -> type[Model] | None:
    """The catalog model named by :func:`fix_name`, or None."""
    name = fix_name(model)
    if not name:
        return None
    return catalog().get(name)


def fix_report(model: type[Model], config: Mapping[str, Any]) -> FixReport | None:
    """Check ``model``'s fix at ``config``: the parameters both models share (the semantics settings
    among them), updated with the model's optional ``fix_config``."""
    fix = fix_model(model)
    if fix is None:
        return None
    known = fix.defaults()
    overrides = {k: v for k, v in config.items() if k in known}
    dropped = tuple(k for k in config if k not in known)
    # A model may say how its config maps onto its fix's (e.g. producers -> workers):
    # ``fix_config`` is a dict of overrides, or a function of the broken model's config.
    extra = getattr(model, "fix_config", None)
    if callable(extra):
        extra = extra(dict(config))
    if extra:
        overrides.update(extra)
    machine = fix.compile(overrides)
    result = check(machine)
    return FixReport(model, fix, machine.config, dropped, result)


def source_file(model: type[Model]) -> str:
    """Where ``model``'s class is written, as a reader finds it (``models/NAME.py`` for the catalog)."""
    try:
        path = Path(inspect.getsourcefile(model) or "")
    except TypeError:
        return model.__name__
    return f"models/{path.name}" if path.parent.name == "models" else path.name


def source_diff(model: type[Model], fix: type[Model], context: int = 3) -> str:
    """A unified diff from ``model``'s class to ``fix``'s class (their source, verbatim)."""
    a = inspect.getsource(model).splitlines(keepends=True)
    b = inspect.getsource(fix).splitlines(keepends=True)
    lines = difflib.unified_diff(a, b, source_file(model), source_file(fix), n=context)
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)

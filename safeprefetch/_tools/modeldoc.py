"""A catalog model's own words: its docstring, parsed into the parts ``explain`` tells.

The teaching commands never paraphrase a model: the bug in one sentence,
where it comes from, what the checker should say and how to fix it are all
read from the model's docstring, so the model and its story cannot drift
apart. This module is that reading.

The docstring convention
------------------------
Every catalog module's docstring opens with ``NAME: one sentence``, then
paragraphs that start with ``Source:``, ``Minimal config:``, ``Expected
verdict:`` and (for broken models) ``Fix:``; paragraphs that follow one of
them without a key of their own continue it. Reference designs add headed
sections (a title underlined with dashes, e.g. ``Design``): those state
what the design guarantees. :func:`model_doc` parses exactly this, and
tolerates models that follow none of it.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

from .._dsl.model import Model

__all__ = ["ModelDoc", "model_doc"]

_KEYS = {"source": "source", "minimal config": "minimal_config", "expected verdict": "expected",
         "fix": "fix"}
_KEY_RE = re.compile(r"^([A-Z][A-Za-z ]{1,30}):\s+(.*)$", re.S)
_HEADING_RE = re.compile(r"^[-=~]{3,}$")


@dataclass(frozen=True)
class ModelDoc:
    """The parts of a catalog model's docstring."""

    #: The catalog name.
    name: str
    #: The bug (or the design) in one sentence, without the ``NAME:`` prefix.
    summary: str
    #: Where the bug or design comes from.
    source: str | None = None
    #: The smallest configuration that shows it, as the docstring states it.
    minimal_config: str | None = None
    #: The "Expected verdict" paragraph(s), starting with the verdict.
    expected: str | None = None
    #: How to fix it (broken models).
    fix: str | None = None
    #: Every other section, ``(title, text)``, in docstring order (e.g. "Design").
    sections: tuple[tuple[str, str], ...] = ()

    @property
    def expected_detail(self) -> str:
        """The Expected verdict paragraph without its leading ``verdict.`` word."""
        text = self.expected or ""
        m = re.match(r"^[\w ,()]+?\.\s*", text)
        return text[m.end():] if m else ""


def model_doc(model: type[Model]) -> ModelDoc:
    """Parse ``model``'s docstring (see the module docstring for the convention)."""
    text = inspect.cleandoc(model.__doc__ or "")
    paragraphs = [p.strip("\n") for p in re.split(r"\n[ \t]*\n", text) if p.strip()]
    name = model.name or model.__name__
    if not paragraphs:
        return ModelDoc(name, "(this model has no docstring)")
    summary = " ".join(line.strip() for line in paragraphs[0].splitlines())
    if summary.startswith(name + ":"):
        summary = summary[len(name) + 1:].strip()
    fields: dict[str, list[str]] = {}
    sections: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for para in paragraphs[1:]:
        lines = para.splitlines()
        if len(lines) >= 2 and _HEADING_RE.match(lines[1].strip()):
            current = ["\n".join(lines[2:])] if lines[2:] else []
            sections.append((lines[0].strip(), current))
            continue
        m = _KEY_RE.match(para)
        if m and m.group(1).lower() in _KEYS:
            current = [m.group(2)]
            fields[_KEYS[m.group(1).lower()]] = current
            continue
        if current is None:
            current = []
            sections.append(("About", current))
        current.append(para)
    joined = {k: "\n\n".join(v) for k, v in fields.items()}
    return ModelDoc(name, summary, joined.get("source"), joined.get("minimal_config"), joined.get("expected"),
                    joined.get("fix"), tuple((t, "\n\n".join(v)) for t, v in sections))

"""What every command shares: the usage error (exit code 2, one line) and ``--set NAME=VALUE`` parsing.

It sits low (the tools layer) so that the modules that add commands -- in
tools and harnesses -- never import the CLI that registers them.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["UsageError", "parse_sets"]


class UsageError(Exception):
    """A bad command line: reported in one line, exit code 2."""


def parse_sets(items: Sequence[str]) -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--set expects NAME=VALUE, got {item!r}")
        name = name.strip()
        if name in out and out[name] != value.strip():  # the first would be silently dropped
            raise UsageError(f"--set {name} given twice ({out[name]!r}, then {value.strip()!r}): give it once")
        out[name] = value.strip()
    return out

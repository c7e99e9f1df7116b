"""What every command shares: the usage error (exit code 2, one line), ``--set NAME=VALUE`` parsing, and
reading a JSON file a user names (a trace): every way that can fail is the file's, said in one line.

It sits low (the tools layer) so that the modules that add commands -- in
tools and harnesses -- never import the CLI that registers them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

__all__ = ["JSON_FILE_LIMIT", "UsageError", "parse_sets", "read_json_file"]

#: The largest JSON file a command reads (a trace of millions of steps is far smaller): at most this many
#: bytes of ``/dev/zero`` or a wrong file are read before it is refused. (Parsing what is read takes more:
#: a ``MemoryError`` there is the file's error too.)
JSON_FILE_LIMIT = 256 * 2 ** 20

#: How much one read takes.
_CHUNK = 2 ** 20


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


def read_json_file(path: str | Path, what: str, error: type = UsageError) -> Any:
    """The JSON value in the file at ``path``, or an error in one line naming ``what`` and the path: a
    :class:`UsageError` for a file that cannot be read, ``error`` for one that is not text, is larger than
    ``JSON_FILE_LIMIT``, is not JSON, or nests too deep."""
    shown = str(path)
    try:
        with open(path, "rb") as f:
            data = _read_at_most(f, JSON_FILE_LIMIT + 1)
    except OSError as e:
        raise UsageError(f"cannot read {what} {shown!r}: {e.strerror or e}") from None
    if len(data) > JSON_FILE_LIMIT:
        raise error(f"{what} {shown!r} is larger than {JSON_FILE_LIMIT // 2 ** 20} MiB: not a file this command "
                    f"wrote")
    try:
        return json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise error(f"{what} {shown!r} is not UTF-8 text: not a file this command wrote") from None
    except json.JSONDecodeError as e:
        raise error(f"{what} {shown!r} is not valid JSON: {e}") from None
    except RecursionError:
        raise error(f"{what} {shown!r} nests too deep to be a trace") from None
    except MemoryError:
        raise error(f"{what} {shown!r} is too large to parse: not a file this command wrote") from None


def _read_at_most(f: Any, limit: int) -> bytes:
    """About ``limit`` bytes of ``f`` at most, read in pieces: one read of ``limit`` would reserve all of it
    first, whatever the file's size. (Its own function: no loop inside the caller's ``try``.)"""
    chunks: list[bytes] = []
    total = 0
    while total < limit and (chunk := f.read(_CHUNK)):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)

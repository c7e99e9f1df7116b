"""``--json``: the document alone on standard output, whatever the code under check prints.

A command with ``--json`` runs the user's code -- a model's steps and build, a checked test's body, a
module's import -- and a ``print`` there, or a write to file descriptor 1 from C, landed in the middle of
the document: a pipeline reading it got invalid JSON with exit status 0. While such a command runs,
:func:`json_stdout` sends ``sys.stdout`` and descriptor 1 to standard error, and :func:`emit_json` writes
the document to where standard output was. Human output (tables, traces) is not redirected: a model's
prints there are the user's own business, in order.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any, Iterator, TextIO

__all__ = ["emit_json", "emitted", "json_stdout"]

#: Where :func:`emit_json` writes while :func:`json_stdout` is in force (None: ``sys.stdout``).
_document: TextIO | None = None

#: How many documents :func:`emit_json` has written in this process.
_emitted = 0


def emitted() -> int:
    """How many documents :func:`emit_json` has written so far (a command's error path writes its error
    document only when the command wrote none: two documents in a row are not JSON)."""
    return _emitted


@contextlib.contextmanager
def json_stdout(active: bool) -> Iterator[None]:
    """While in force (``active``), everything but :func:`emit_json`'s document goes to standard error.

    Where ``sys.stdout`` is the process's descriptor 1, that descriptor is redirected too (a C extension's or
    ``os.write(1, ...)``'s output), and the document goes to a duplicate of the original; where it is not
    (a test's capture), only ``sys.stdout`` is replaced, and the document goes to it.
    """
    global _document
    out = sys.stdout
    if not active or _document is not None or out is None or sys.stderr is None:
        yield  # (no standard output at all, descriptor 1 closed: nothing to keep apart)
        return
    try:
        whole_fd = out.fileno() == 1
    except (AttributeError, OSError, ValueError):
        whole_fd = False
    out.flush()
    saved = None
    if whole_fd:
        try:
            saved = os.dup(1)
            os.dup2(2, 1)
        except OSError:  # descriptor 2 closed, say: keep to sys.stdout alone
            if saved is not None:
                os.close(saved)
            saved = None
    if saved is not None:
        _document = os.fdopen(saved, "w", encoding=out.encoding, errors=getattr(out, "errors", None), closefd=False)
    else:
        _document = out
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        sys.stdout = out
        document, _document = _document, None
        if saved is not None:
            with contextlib.suppress(Exception):
                document.flush()
            os.dup2(saved, 1)
            os.close(saved)


def emit_json(value: Any) -> None:
    """Print ``value`` as indented JSON to standard output, past :func:`json_stdout`'s redirection."""
    global _emitted
    target = _document if _document is not None else sys.stdout
    _emitted += 1
    print(json.dumps(value, indent=2), file=target, flush=True)

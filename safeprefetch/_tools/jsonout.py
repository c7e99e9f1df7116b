"""``--json``: the document alone on standard output, whatever the code under check prints.

A command with ``--json`` runs the user's code -- a model's steps and build, a checked test's body, a
module's import -- and a ``print`` there, or a write to file descriptor 1 from C, landed in the middle of
the document: a pipeline reading it got invalid JSON with exit status 0. While such a command runs,
:func:`json_stdout` sends ``sys.stdout`` and descriptor 1 to standard error, and :func:`emit_json` writes
the document to where standard output was. Human output (tables, traces) is not redirected: a model's
prints there are the user's own business, in order.

A command's exit code is its verdict, and a reader that stops reading does not change it:
:func:`guarded_stdout` keeps ``check M | head`` (or ``| grep -q``) exiting 1 for a violation. A write to
a pipe whose reader has left sends the rest of the output to ``/dev/null`` and the command goes on to its
verdict; it used to end the command with status 0, a pass under ``set -o pipefail`` for a search that
found a deadlock. Any other failure to write (a full disk) is an :class:`OutputError`, reported as such
(it was "the model raised OSError"). :func:`guarded_stderr` does the same for standard error, around the
whole command and its error report: ``check nosuchmodel 2>&1 | true`` exited 1, a violation's code, where
the error's is 2, because the report's print raised BrokenPipeError past every handler.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any, Iterator, TextIO

__all__ = ["OutputError", "emit_json", "emitted", "guarded_stderr", "guarded_stdout", "json_stdout"]

#: Where :func:`emit_json` writes while :func:`json_stdout` is in force (None: ``sys.stdout``).
_document: TextIO | None = None

#: How many documents :func:`emit_json` has written in this process.
_emitted = 0


class OutputError(Exception):
    """Standard output (or error) could not be written, for another reason than a reader that left (a full
    disk)."""


class _Guarded:
    """A text stream whose writes survive a reader that left, and say so when they fail otherwise."""

    def __init__(self, stream: TextIO, name: str = "standard output"):
        self._stream = stream
        self._name = name

    def _failed(self, e: OSError) -> None:
        # What is still to be written goes nowhere, and so does the buffer's flush at exit (which would print
        # "Exception ignored" and end the process with status 120, whatever the verdict).
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        if not isinstance(e, BrokenPipeError):  # (the reader left: the command goes on to its verdict)
            raise OutputError(f"cannot write {self._name}: {e}") from None

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as e:
            self._failed(e)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            self._failed(e)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guarded_stdout() -> contextlib.AbstractContextManager[None]:
    """While in force, ``sys.stdout`` (and :func:`emit_json`'s document) survive a reader that left."""
    return _guarded("stdout", "standard output")


def guarded_stderr() -> contextlib.AbstractContextManager[None]:
    """While in force, ``sys.stderr`` survives a reader that left (its writes go nowhere, the exit code stays)."""
    return _guarded("stderr", "standard error")


@contextlib.contextmanager
def _guarded(attr: str, name: str) -> Iterator[None]:
    """``sys.<attr>`` wrapped in a :class:`_Guarded` while in force, flushed on the way out."""
    out = getattr(sys, attr)
    if out is None or isinstance(out, _Guarded):
        yield
        return
    guarded = _Guarded(out, name)
    setattr(sys, attr, guarded)
    try:
        yield
    finally:
        try:
            guarded.flush()  # (here, not at exit: a failure to write is the command's)
        finally:
            setattr(sys, attr, out)


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
        if isinstance(out, _Guarded):
            _document = _Guarded(_document)  # type: ignore[assignment]
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

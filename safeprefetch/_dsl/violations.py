"""What a model can report, and how a malformed model is refused.

Two kinds of error leave a model, and they must never be confused:

* :class:`StepViolation` -- the *design* is wrong. A step found a bug while
  it ran (a take from an empty buffer, a release of a mutex it does not
  hold). It carries one of the stable :data:`VIOLATION_KINDS`, and the
  explorer turns it into a violation whose trace ends at that step.
* :class:`ModelError` -- the *model* is wrong: an unknown label, a step that
  goes somewhere it did not declare, a bad setting or config. The checker
  cannot say anything about such a model, so this is an exception the CLI
  reports in one line with exit code 2, never a verdict.

:func:`delivery_violation` is the end-of-run check most catalog models share:
what the consumer received against what was produced.

This module is a leaf: every other DSL module imports it, it imports none.
"""

from __future__ import annotations

import os
import pickle
import sys
import types
from collections.abc import AsyncIterator, Awaitable
from collections.abc import Iterator as _Iterator
from contextlib import contextmanager

from typing import Any, Callable, Iterator, Sequence

__all__ = ["CheckError", "ModelError", "ProcessExit", "StepError", "StepViolation", "USER_ERRORS", "VIOLATION_KINDS",
           "delivery_violation", "exit_call", "refusing_fork", "refusing_os_exit", "truth", "users_file",
           "violate"]

#: Stable names of every violation kind (part of the CLI contract).
VIOLATION_KINDS = (
    "deadlock",
    "lost_wakeup",
    "overflow",
    "underflow",
    "lost_item",
    "duplicate_item",
    "out_of_order",
    "use_after_close",
    "shutdown_hang",
    "error_lost",
    "starvation",
    "invariant",
)


#: What the model's own code (a step, a guard, a check, its build, its module) may raise that the
#: checker reports as the model's error, exit 2, never as a verdict. ``SystemExit`` is among them:
#: a step that calls ``sys.exit(0)`` would otherwise end the checker with the model's code, 0 --
#: a pass for a search that never ran. ``KeyboardInterrupt`` (the user's Ctrl-C) and
#: ``GeneratorExit`` are not: they are not the model's to raise, and must stop the checker.
USER_ERRORS = (Exception, SystemExit)


class ModelError(Exception):
    """A model is malformed: an unknown label, an undeclared target, a bad setting, a bad config."""


class StepError(ModelError):
    """A step's own code raised: the model's bug, reported where the user wrote it.

    Not a verdict (the design is not shown wrong, the model cannot run), so a
    :class:`ModelError`: the CLI exits 2. The search that met it fills in
    ``trace`` (the schedule that reached the state where the step ran) and
    ``table`` (that trace as a table); ``str()`` is one line.
    """

    def __init__(self, thread: str, label: str, error: BaseException, where: str | None, state: tuple,
                 detail: str = ""):
        self.thread, self.label, self.error, self.where, self.state = thread, label, error, where, state
        self.detail = detail or f"{type(error).__name__}: {error}"
        #: The schedule that reached ``state`` (a Trace), once a search has rebuilt it; None before.
        self.trace: Any = None
        #: ``trace`` as a text table, for people.
        self.table: str | None = None
        super().__init__(self._line())

    def _line(self) -> str:
        return f"{self.thread}, step {self.label!r}: {self.detail}{self._suffix()}"

    def _suffix(self) -> str:
        at = f" at {self.where}" if self.where else ""
        n = None if self.trace is None else len(self.trace)
        after = "" if n is None else ", in the initial state" if n == 0 else f", after {n} step{'' if n == 1 else 's'}"
        return at + after

    def with_trace(self, trace: Any, table: str) -> "StepError":
        """This error, with the schedule that reached it."""
        self.trace, self.table = trace, table
        self.args = (self._line(),)
        return self

    def __reduce__(self):
        # Pickled whole (a worker process reports it to the coordinator); an original error that
        # cannot be pickled travels as its text, which the message already carries.
        error = self.error
        try:
            pickle.dumps(error)
        except Exception:  # noqa: BLE001 - whatever pickling raises, the text is enough
            error = RuntimeError(f"{type(error).__name__}: {error}")
        return (_step_error, (type(self), self.thread, self.label, error, self.where, self.state, self.detail,
                              self.trace, self.table))


class CheckError(StepError):
    """An invariant or an end check of the model raised (``thread`` is None; ``label`` names the check)."""

    def _line(self) -> str:
        return f"{self.label}: {self.detail}{self._suffix()}"


def _step_error(cls, thread, label, error, where, state, detail, trace, table) -> StepError:
    e = cls(thread, label, error, where, state, detail)
    return e.with_trace(trace, table) if trace is not None else e


class StepViolation(Exception):
    """Raised inside a step to report a bug found while taking that step."""

    def __init__(self, kind: str, message: str):
        if kind not in VIOLATION_KINDS:
            raise ModelError(f"unknown violation kind {kind!r}")
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class ProcessExit(SystemExit):
    """``os._exit(code)`` called by a model or checked code inside the checker's process, stopped there.

    ``os._exit`` ends the process at once, with the code's status and no output: ``os._exit(0)`` in a
    step or a test body read as a pass. The command line (and a code check, for the threads it runs)
    puts :func:`refusing_os_exit`'s stand-in in its place, which raises this instead; as a
    ``SystemExit`` it takes the path a ``sys.exit`` does, and is reported as the model's error or a
    violation. A forked child (``multiprocessing``, dask) still ends by the real one.
    """

    where = ""  # " at FILE:LINE" of the call

    def __str__(self) -> str:
        return f"os._exit({self.code!r}) was called: the process would have ended there, with no verdict"


def exit_call(e: SystemExit) -> str:
    """``sys.exit(0)`` or ``os._exit(0)``: what the code called that raised ``e``."""
    return f"{'os._exit' if isinstance(e, ProcessExit) else 'sys.exit'}({e.code!r})"


def refusing_os_exit(raises: Callable[[], bool] = lambda: True) -> Callable[[int], None]:
    """A stand-in for ``os._exit``: in this process, where ``raises()`` is true, it raises
    :class:`ProcessExit`; elsewhere (a forked child, a thread ``raises`` excludes) it is the real one."""
    real, pid = os._exit, os.getpid()

    def _exit(code: int) -> None:
        if os.getpid() == pid and raises():
            e = ProcessExit(code)
            caller = sys._getframe(1)
            e.where = f" at {os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno}"
            raise e
        real(code)

    return _exit


def refusing_fork(real: Callable) -> Callable:
    """A stand-in for ``real`` (``os.fork`` or ``os.forkpty``) that refuses a fork made for a model's code in
    this process.

    The child of a fork in a step went on running the search from that step, and forked again: thousands of
    checkers, each printing a verdict. A fork is the model's when the first frame up the stack that is not
    the standard library's or an installed package's is the model's (``pty.fork()`` in a step is the model's
    too); it is not when ``multiprocessing`` starts a process on the way there (its children end by
    ``os._exit``), nor when the library forks for itself, nor in another process.
    """
    pid = os.getpid()

    def fork() -> Any:
        where = _forking_user(sys._getframe(1))
        if os.getpid() == pid and where is not None:
            raise ModelError(f"the model called os.{real.__name__}() ({where}): its child would go on running the "
                             "checker; a model describes threads, it may not fork (multiprocessing in a model's "
                             "build is allowed: its children end by os._exit)")
        return real()

    return fork


#: The package's own folder: a file under it is the library's, but for its catalog models.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _libraries() -> tuple[str, ...]:
    import sysconfig

    return tuple(sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib"))


def users_file(filename: str) -> bool:
    """Whether code in ``filename`` is a model's or the user's: not generated (``<...>``), not the standard
    library's or an installed package's, not the package's own (but for its catalog models)."""
    if filename.startswith(("<", *_libraries())):
        return False
    return not filename.startswith(_PACKAGE + os.sep) or filename.startswith(os.path.join(_PACKAGE, "models"))


def _forking_user(frame: Any) -> str | None:
    """``FILE:LINE`` of the model's frame a fork is made for, or None (see :func:`refusing_fork`)."""
    lib = _libraries()
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(lib) and f"{os.sep}multiprocessing{os.sep}" in name:
            return None  # a process started by multiprocessing: its child ends by os._exit
        if users_file(name):
            return f"{os.path.basename(name)}:{frame.f_lineno}"
        if not name.startswith(("<", *lib)):
            return None  # the library forks for itself
        frame = frame.f_back
    return None


@contextmanager
def exited(who: str) -> Iterator[None]:
    """Turn a ``SystemExit`` raised inside the block (model code called ``sys.exit`` or ``os._exit``) into a
    :class:`ModelError` naming ``who``; any other exception passes unchanged."""
    try:
        yield
    except SystemExit as e:
        raise ModelError(f"{who} called {exit_call(e)}{getattr(e, 'where', '')}, which a model's code may not do") from None


#: What a predicate may not return: each is true whatever it would produce, so a guard of this kind is
#: always enabled and an invariant of it never fails (``lambda s: (v < 2 for v in s.vals)`` written for
#: ``all(...)``, a ``map(...)``, an ``async def`` guard).
_LAZY = (_Iterator, AsyncIterator, Awaitable)


def truth(value: Any, what: str) -> bool:
    """``bool(value)`` for what a guard, an invariant, an ``until`` or a ``shutdown_when`` returned.

    An iterator or an awaitable is refused with a :class:`ModelError` naming ``what``: its truth says
    nothing, and taking it would make the check pass in every state.
    """
    if value is True:
        return True
    if isinstance(value, _LAZY):
        if isinstance(value, (types.GeneratorType, types.CoroutineType)):
            value.close()  # a coroutine never awaited would warn about it at its collection
        kind = "an awaitable (a predicate cannot be async)" if isinstance(value, Awaitable) else \
            "an iterator (did you mean all(...) or any(...)?)"
        raise ModelError(f"{what} returned {type(value).__name__!r}, {kind}: it is true whatever it would produce; "
                         f"a predicate must return a bool")
    return bool(value)


def violate(kind: str, message: str) -> None:
    """Report a violation from inside a step (for example a take from an empty buffer)."""
    raise StepViolation(kind, message)


def delivery_violation(expected: Sequence[Any], received: Sequence[Any], ordered: bool = True,
                       complete: bool = True) -> tuple[str, str] | None:
    """Compare what a consumer received with what was produced.

    Returns ``("duplicate_item" | "lost_item" | "out_of_order", message)`` or
    None. With ``complete=False`` (the consumer left early), only duplicates,
    items never produced, and order are checked: ``received`` must be a
    prefix of ``expected`` when ordered, a subset otherwise.
    """
    seen: set[Any] = set()
    for item in received:
        if item in seen:
            return "duplicate_item", f"item {item!r} was delivered twice"
        seen.add(item)
    unknown = [x for x in received if x not in set(expected)]
    if unknown:
        return "duplicate_item", f"item {unknown[0]!r} was delivered but never produced"
    if complete:
        missing = [x for x in expected if x not in seen]
        if missing:
            return "lost_item", f"item {missing[0]!r} was produced but never delivered"
    if ordered:
        order = {x: i for i, x in enumerate(expected)}
        pos = [order[x] for x in received]
        if pos != sorted(pos):
            return "out_of_order", f"items arrived as {list(received)!r}, expected {list(expected)[:len(pos)]!r}"
        if not complete and pos != list(range(len(pos))):
            gap = next(expected[i] for i, p in enumerate(pos) if p != i)
            return "lost_item", f"item {gap!r} was skipped in an ordered stream"
    return None

"""The vocabulary of one controlled execution: operations, choices, steps, settings, source lines.

What it guarantees
------------------
These are plain values with no behaviour of their own: an :class:`Op` is
what a thread announces at a scheduling point (what it touches, whether it
is enabled, its deadline), a :class:`Choice` is what the scheduler decided,
a :class:`Step` is one transition as it happened (with the vector clock
partial-order reduction needs), and :class:`Settings` are the knobs every
schedule of a check shares. They live apart from :mod:`.scheduler` so that
the drop-ins, the explorer and line mode can name them without importing the
scheduler's machinery, and the package stays free of import cycles.

:func:`where` finds the line of the code under test that made an operation:
the innermost frame outside this package and ``threading``. The one thing
here that runs the code's own Python is :func:`call_codes_hook`: a thread's
uncaught exception, ``SystemExit`` included, given to a
``threading.excepthook`` the code installed, as CPython gives it
(:func:`handled_by_hook`, :func:`exit_finding` say what that makes of it).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .._dsl.violations import ProcessExit, exit_call

__all__ = ["Aborted", "Choice", "Op", "SchedulerStuck", "Settings", "Step", "call_codes_hook", "exit_finding",
           "handled_by_hook", "join_clock", "may_outlive", "name_from_line", "raised_at", "stored_name", "where"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_THREADING_FILE = os.path.abspath(sys.modules["threading"].__file__ or "")


class Aborted(BaseException):
    """Raised in a thread of an execution that has ended, to unwind it. Not an error of the code under test."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(args or ("the interleaving checker ended this run; not an error of the code under test",)))


class SchedulerStuck(RuntimeError):
    """A thread ran past ``wall_timeout`` without reaching a scheduling point."""


@dataclass(frozen=True)
class Settings:
    """The knobs of one execution (every schedule of a check shares them)."""

    #: ``notify_one`` wakes the longest waiter (``fifo``) or any waiter (``any``: a choice).
    notify: str = "fifo"
    #: ``on``: a condition waiter may also wake without a notify (at most ``max_spurious`` times a run).
    spurious: str = "off"
    max_spurious: int = 1
    #: Transitions one execution may take before it is a ``hang``.
    max_steps: int = 20_000
    #: Virtual seconds one execution may last before it is a ``hang``.
    time_limit: float = 3600.0
    #: Wall-clock seconds a thread may run without reaching a point before :class:`SchedulerStuck`.
    wall_timeout: float = 20.0
    #: ``owner``: releasing a ``Lock`` its releaser does not hold is a violation; ``any``: Python's
    #: own rule for ``Lock`` (any thread may release it; ``RLock`` is always owner-only).
    lock_release: str = "owner"
    #: Thread names that may still be alive when the test body returns (not a leak).
    allow_alive: tuple[str, ...] = ()
    #: Scheduling points at line events and before stores and deletes, in the files under test.
    lines: bool = False


class Op:
    """An operation a thread announces at a scheduling point.

    ``keys`` name what it touches, for partial-order reduction: two
    operations of different threads are independent when they share no key,
    or share only keys both merely read. ``star`` operations (interrupts,
    timed waits, line steps) depend on everything. ``blocks`` says when an
    enabled operation will only begin to wait (a semaphore's acquire at 0, a
    get on an empty queue: it looks, then sleeps in a later step): an
    interrupt offered before it is one while blocked, not between bytecodes.
    """

    __slots__ = ("kind", "obj", "keys", "write", "star", "enabled", "deadline", "where", "alts", "label", "by_holder",
                 "blocks")

    def __init__(self, kind: str, obj: Any, keys: Iterable[Any], *, write: bool = True,
                 enabled: Callable[[], bool] | None = None, deadline: float | None = None,
                 star: bool = False, alts: Callable[[], list] | None = None, where: tuple[str, int] | None = None,
                 label: str | None = None, by_holder: bool = True, blocks: Callable[[], bool] | None = None):
        self.kind = kind
        self.blocks = blocks
        #: A release: whether its thread held the lock when it announced it (a release by anyone else can
        #: run while the lock is free, so it races with a blocking acquire).
        self.by_holder = by_holder
        self.obj = obj
        self.keys = frozenset(keys)
        self.write = write
        self.enabled = enabled
        self.deadline = deadline
        self.star = star or deadline is not None
        self.alts = alts
        self.where = where
        self.label = label

    def running(self) -> bool:
        """Enabled, and not about to begin a wait (``blocks``): where an interrupt comes between bytecodes."""
        return (self.enabled is None or self.enabled()) and not (self.blocks is not None and self.blocks())

    def describe(self) -> str:
        if self.label is None:
            name = getattr(self.obj, "_ilv_name", None) or ""
            self.label = f"{self.kind} {name}".rstrip()
        if self.where is not None:
            return f"{self.label} @{os.path.basename(self.where[0])}:{self.where[1]}"
        return self.label


@dataclass(frozen=True, order=True)
class Choice:
    """What the scheduler decided: thread ``t`` goes on, with alternative ``alt``.

    ``alt`` is ``0`` for the announced operation as such; a waiter's index
    for a ``notify_one`` under ``notify=any``; ``-1`` for a spurious wakeup;
    ``-(2 + i)`` to run interrupt ``i`` on the thread first.
    """

    t: int
    alt: int = 0

    @property
    def interrupt(self) -> int | None:
        return -2 - self.alt if self.alt <= -2 else None


@dataclass
class Step:
    """One transition of an execution, as it happened."""

    t: int
    choice: Choice
    op: Op
    label: str
    keys: frozenset
    write: bool
    star: bool
    clock: list[int]
    #: A switch away from a thread that could have gone on.
    preempt: bool = False
    #: ``name=state`` of what the transition changed, filled in at the next decision.
    changes: list[str] = field(default_factory=list)
    note: str = ""


def where(depth: int = 2) -> tuple[str, int] | None:
    """The file and line of the innermost caller outside this package and ``threading``."""
    f = sys._getframe(depth)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_HERE) and fn != _THREADING_FILE:
            return fn, f.f_lineno
        f = f.f_back
    return None


def join_clock(into: list[int], other: Iterable[int]) -> None:
    for i, v in enumerate(other):
        if i < len(into):
            if v > into[i]:
                into[i] = v
        else:
            into.append(v)


def stored_name(depth: int = 2) -> str | None:
    """The name the result of the running call is stored to, in the innermost frame :func:`where` finds:
    ``b`` for the second call in ``a = Lock(); b = Lock()`` (the line alone names both ``a``), ``not_full`` in
    ``self.not_full = Condition(...)``. None when the call's result is not stored at once (an argument of
    another call, a tuple): the line decides then (:func:`name_from_line`)."""
    f = sys._getframe(depth)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_HERE) and fn != _THREADING_FILE:
            return _target_after(f.f_code, f.f_lasti)
        f = f.f_back
    return None


_STORES = ("STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST")


def _target_after(code: Any, lasti: int) -> str | None:
    import dis

    ins = _INSTRUCTIONS.get(code)
    if ins is None:
        ins = _INSTRUCTIONS[code] = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "NOP")]
    at = next((k for k, i in enumerate(ins) if i.offset == lasti), None)
    if at is None or not ins[at].opname.startswith("CALL"):
        return None
    k = at + 1
    if k < len(ins) and ins[k].opname in _STORES:
        name = ins[k].argval
        return name[0] if isinstance(name, tuple) else name
    while k < len(ins) and ins[k].opname.startswith("LOAD_"):  # ``self.x = ...``: the object, then the store
        k += 1
    return ins[k].argval if k < len(ins) and k > at + 1 and ins[k].opname == "STORE_ATTR" else None


_INSTRUCTIONS: dict[Any, list] = {}


def name_from_line(line: tuple[str, int] | None) -> str | None:
    """``not_full`` from ``self.not_full = threading.Condition(...)``: the target of the assignment."""
    if line is None:
        return None
    import linecache
    import re

    text = linecache.getline(line[0], line[1]).strip()
    m = re.match(r"(?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)", text)
    if m is None:
        return None
    return m.group(1)


def raised_at(e: BaseException) -> str:
    tb = e.__traceback__
    last = None
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(_HERE):
            last = tb
        tb = tb.tb_next
    if last is None:
        return ""
    return f" at {os.path.basename(last.tb_frame.f_code.co_filename)}:{last.tb_lineno}"


#: ``threading.excepthook`` when the check began (set by ``patching.patched``): pytest's, or the default.
HOOK_AT_CHECK: list[Any] = [None]


def handled_by_hook(e: BaseException, thread: Any) -> bool:
    """Whether the code's own ``threading.excepthook`` handled ``e``, raised in ``thread`` (a Thread).

    CPython gives a thread's uncaught exception to the hook current when it
    is raised. One the code under test installed (another than the one in
    place when the check began, pytest's or the default, and other than the
    default) is called, in the thread, as CPython calls it; if it returns,
    the exception was handled and is no finding. One that raises handled
    nothing (CPython prints both), but for a ``SystemExit`` (CPython ends
    the thread silently) -- :func:`call_codes_hook`.
    """
    return call_codes_hook(e, thread) is True


def call_codes_hook(e: BaseException, thread: Any) -> bool | BaseException | None:
    """Give ``e`` to the code's own ``threading.excepthook`` as CPython would: None when the code installed none
    (or ``thread`` is the test body), True when its hook returned, else what it raised.

    ``SystemExit`` too: CPython's default hook ignores it silently, but a hook of the code's own is called with
    it (a program whose hook wakes a waiter for any ended thread would hang under the checker otherwise). A
    ``SystemExit`` out of the hook is True: CPython's C thread start clears it with no output, whatever the
    thread raised; ``os._exit`` there (``ProcessExit``) is what it raised: the process ends.
    """
    import threading

    hook = threading.excepthook
    # (The default hook only prints the traceback: the exception is as lost as with no hook of the code's.)
    if thread is None or hook is HOOK_AT_CHECK[0] or hook is threading.__excepthook__:
        return None
    try:
        hook(threading.ExceptHookArgs((type(e), e, e.__traceback__, thread)))
    except Aborted:
        raise
    except BaseException as x:  # noqa: BLE001 - the hook failed: the thread's own exception stays the finding
        return True if isinstance(x, SystemExit) and not isinstance(x, ProcessExit) else x
    return True


def exit_finding(e: SystemExit, who: str, thread: Any = None) -> str | None:
    """What a ``SystemExit`` that ends a thread's run is as a finding, or None: a thread's ``sys.exit`` ends
    that thread (as with real threads), once the code's own ``threading.excepthook``, if it installed one, was
    given it (``thread``: the Thread; CPython calls such a hook with ``SystemExit`` too, where its default hook
    ignores it); a hook that raises there is a finding. The default hook ignores ``SystemExit`` itself only:
    a subclass of the code's own is printed, a finding. The test body's, and ``os._exit`` anywhere (it ends
    the process), are uncaught."""
    if isinstance(e, ProcessExit):
        return f"{who} called {exit_call(e)}: the process would have ended there{e.where}"
    if who == "the test body":
        return f"{who} raised SystemExit"
    raised, hooked = f"{who} raised {type(e).__name__}", call_codes_hook(e, thread)
    if hooked is None and thread is not None and type(e) is not SystemExit:
        return f"{raised}: {e}{raised_at(e)}" if str(e) else f"{raised}{raised_at(e)}"
    if isinstance(hooked, ProcessExit):
        return (f"{raised}{raised_at(e)}, and the code's threading.excepthook called {exit_call(hooked)}: the process "
                f"would have ended there{hooked.where}")
    if isinstance(hooked, BaseException):
        return f"{raised}{raised_at(e)}, and the code's threading.excepthook raised while handling it"
    return None


#: The suffix that tells apart threads given the same name (``closer#2``).
_SAME_NAME = re.compile(r"#\d+$")


def may_outlive(name: str, allow_alive: tuple[str, ...]) -> bool:
    """Whether the thread ``name`` may outlive the test body: an ``allow_alive`` name matches each of several
    threads given that name (the checker tells them apart as ``name#2``...), and a name of the user's own
    that ends that way (``conn#1``) matches itself."""
    return name in allow_alive or _SAME_NAME.sub("", name) in allow_alive

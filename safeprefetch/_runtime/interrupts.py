"""Interrupt safety: what Ctrl-C may do to a thread that is inside a step.

The model checker proves the protocol; it cannot see the interpreter. In
CPython a ``KeyboardInterrupt`` is raised by the SIGINT handler, and the
handler runs on the main thread at the interpreter's *eval-breaker* points:
on entry to a Python function, right after a call into C returns, and on a
loop's back-edge (CPython 3.11 ``ceval.c``: ``RESUME``, ``CALL``,
``JUMP_BACKWARD``), and inside the blocking C calls that check for signals
(``lock.acquire``, ``time.sleep``). Any of those points inside the runtime's
kernel or the Prefetcher's glue is a place where the model's atomic step is
cut in half: a lock just acquired and not yet inside its ``try``, a state
stored and its wakeups not yet given, a batch taken and not yet returned.

Design, and why
---------------
Two layers, each sufficient against one interrupt, together against storms.

1. **Deferral** (after trio's KeyboardInterrupt protection). Code objects are
   marked :func:`protected` (critical sections: the kernel, the consumer's
   bookkeeping, close) or :func:`interruptible` (blocking waits, where the
   caller must be able to press Ctrl-C). While a Prefetcher is open and the
   SIGINT handler is a Python callable, it is wrapped by :func:`_on_sigint`,
   which walks the interrupted frame's stack: the innermost *marked* frame
   decides. In a protected frame the signal is recorded and the handler
   returns; the interrupt is delivered at the next interruptible point or when
   a protected frame is about to return to code that is not protected (the
   outermost one, or one the caller's own code called from inside an
   interruptible frame: :func:`outermost`, :func:`deliver`). A
   frame marked :func:`interruptible_until_owned` is interruptible until it
   owns the lock it waits for, then protected: that closes the window between
   a timed ``acquire`` returning and the ``with`` that releases it, which no
   arrangement of Python statements can close. Outside our frames the wrapped
   handler runs as it would have. Nothing is checked on the hot path: the
   walk happens only when a signal arrives.

   The wrapper is installed only when the handler is a Python callable (the
   default ``default_int_handler``, or a user's), only from the main thread,
   and only while a Prefetcher is open; it is removed when the last one
   closes if it is still the installed handler (a last close off the main
   thread, where no handler can be changed, leaves it stale: it steps aside
   at the next SIGINT or the next install or uninstall on the main thread,
   and until then only passes SIGINT on). (``asyncio.run`` installs its
   own handler only when it finds the default one: a prefetcher opened before
   ``asyncio.run`` keeps asyncio from doing so.)

2. **Structure.** Deferral cannot help when someone installs another SIGINT
   handler while a prefetcher is open, or a source raises ``BaseException``
   into a call. So every critical section is also written to survive one
   exception at any eval-breaker point: locks are released by ``with`` (whose
   exit the interpreter runs from its exception table, not at a point where a
   signal can land), a state change and the wakeups it owes are recorded on
   one line and the debt is paid by whoever enters next, a parked thread's
   marks are cleared on the line that wakes it, and a batch taken from the
   pool stays in the consumer's stash until the line that returns it. The
   details live next to the code, in ``_live.py`` and ``_prefetcher.py``.

CPython's own precedent for the second layer is ``queue.SimpleQueue``: its
``put`` is reentrant (a finalizer or a signal handler may call it while the
same thread is inside ``put`` or ``get``), so code that may run on a thread
already inside us *records* a request there instead of taking a lock. The
reaper in ``_lifecycle.py`` is built on that.

Both layers are checked by ``safeprefetch.testing.interrupts``: an injection
harness that, with ``sys.settrace`` opcode events, stops at every
eval-breaker point the consumer, lease, copy, close and finalizer paths
execute, and there raises ``KeyboardInterrupt`` directly (layer 2 alone), or
calls the installed SIGINT handler as the interpreter would (both layers),
or runs a signal handler's ``close()``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import CodeType, FrameType
from typing import Any, Callable, TypeVar

__all__ = [
    "deliver",
    "deliver_if_outermost",
    "install",
    "installed",
    "interruptible",
    "interruptible_until_owned",
    "is_marked",
    "is_protected",
    "outermost",
    "pending",
    "protected",
    "retake",
    "rewrap",
    "uninstall",
    "wrapped",
]

F = TypeVar("F", bound=Callable[..., Any])

#: Code objects of critical sections: an interrupt landing in one is deferred.
_PROTECTED: set[CodeType] = set()
#: Code objects of blocking waits: an interrupt landing in one is raised there.
_INTERRUPTIBLE: set[CodeType] = set()
#: Code objects of lock waits: interruptible until the frame's local ``name`` is an owned lock.
_UNTIL_OWNED: dict[CodeType, str] = {}


def protected(f: F) -> F:
    """Mark ``f`` a critical section: a SIGINT landing while it runs is deferred to its end."""
    _PROTECTED.add(f.__code__)
    return f


def interruptible(f: F) -> F:
    """Mark ``f`` a blocking wait: a SIGINT landing while it runs is raised there."""
    _INTERRUPTIBLE.add(f.__code__)
    return f


def interruptible_until_owned(local: str) -> Callable[[F], F]:
    """Mark ``f`` a lock wait: interruptible until its local ``local`` (an RLock) is owned, then protected."""
    def mark(f: F) -> F:
        _UNTIL_OWNED[f.__code__] = local
        return f
    return mark


def is_marked(code: CodeType) -> bool:
    """Whether ``code`` is marked protected or interruptible (it decides for itself what a SIGINT does)."""
    return code in _PROTECTED or code in _INTERRUPTIBLE or code in _UNTIL_OWNED


def _decide(frame: FrameType | None) -> str:
    """"defer" or "raise": what a SIGINT landing in ``frame`` does; the innermost marked frame decides."""
    while frame is not None:
        code = frame.f_code
        if code in _PROTECTED:
            return "defer"
        if code in _INTERRUPTIBLE:
            return "raise"
        name = _UNTIL_OWNED.get(code)
        if name is not None:
            lock = frame.f_locals.get(name)
            return "defer" if lock is not None and lock._is_owned() else "raise"
        frame = frame.f_back
    return "raise"


def is_protected(frame: FrameType | None) -> bool:
    """Whether a signal landing in ``frame`` is deferred: the innermost marked frame decides."""
    return _decide(frame) == "defer"


class _Guard:
    """The process's SIGINT wrapper state (one per process; touched only on the main thread)."""

    __slots__ = ("previous", "deferred", "stale")

    def __init__(self) -> None:
        #: The handler we wrapped, called for every SIGINT we do not defer.
        self.previous: Callable[[int, FrameType | None], Any] | None = None
        #: A SIGINT arrived inside a protected frame and has not been delivered yet.
        self.deferred = False
        #: Nothing needs the wrapper any more, but it was let go off the main thread, where a handler
        #: cannot be changed: it restores the wrapped handler at its next chance on the main thread.
        self.stale = False


_guard = _Guard()


#: Whether an open prefetcher asks for the wrapper (set by the prefetcher layer). A stale mark is made off the
#: main thread without a lock (a close there must not wait: docs/hardening.md, fifteenth round, 25), so it
#: can race a constructor that asked meanwhile: it is asked again before the wrapper steps aside.
_still_wanted: list[Callable[[], bool]] = [lambda: False]


def set_still_wanted(fn: Callable[[], bool]) -> None:
    _still_wanted[0] = fn


def _step_aside() -> bool:
    """Whether a stale wrapper steps aside now; a mark that a prefetcher opened since made wrong is cleared."""
    if _still_wanted[0]():
        _guard.stale = False
        return False
    return True


def _on_sigint(signum: int, frame: FrameType | None) -> Any:
    if _guard.stale and _step_aside():  # let go off the main thread: step aside now (a handler runs on main)
        uninstall()
        previous = _guard.previous
        if previous is None:
            raise KeyboardInterrupt
        if previous is _SIG_IGN or previous is _SIG_DFL:
            return _disposition(previous)
        return previous(signum, frame)
    decision = _decide(frame)
    if decision == "defer":
        _guard.deferred = True
        return None
    _guard.deferred = False
    previous = _guard.previous
    if previous is None:  # uninstalled under us: behave as the default handler
        raise KeyboardInterrupt
    if previous is _SIG_IGN or previous is _SIG_DFL:
        return _disposition(previous)
    return previous(signum, frame)


# The paths above that run a handler gain no Python call for the non-handler dispositions: written as one
# more function around the handler call, the Ctrl-C soak (storms of 5 SIGINTs per run, on a loaded machine)
# lost 12 batches in 720 runs, and none with the same seeds as it is (how a second SIGINT landing in that
# frame loses a batch was not pinned down).
_SIG_IGN, _SIG_DFL = signal.SIG_IGN, signal.SIG_DFL


def _disposition(previous: Any) -> None:
    """A SIGINT for a wrapped disposition that is not a handler (only after :func:`rewrap`): ``SIG_IGN``
    ignores it; ``SIG_DFL`` takes the OS's default action."""
    if previous is _SIG_DFL:
        signal.signal(signal.SIGINT, _SIG_DFL)
        signal.raise_signal(signal.SIGINT)
    return None


def rewrap(old: Any, new: Any) -> None:
    """If the wrapper is installed around ``old``, make it wrap ``new`` (a handler, ``SIG_IGN`` or ``SIG_DFL``)
    instead: what it runs for a SIGINT it does not defer, and what it restores when it steps aside.

    ``lowlevel.python_sigint`` installs Python's handler for a process whose SIGINT is ignored; a
    prefetcher opened within wraps that handler, and one still open when the block ends would otherwise
    restore Python's handler, not the ignored disposition, when it is closed.
    """
    if threading.current_thread() is threading.main_thread() and installed() and _guard.previous is old:
        _guard.previous = new


def wrapped() -> Any:
    """The disposition the wrapper runs for a SIGINT it does not defer (None when it wraps none)."""
    return _guard.previous


def installed() -> bool:
    """Whether the deferring wrapper is the current SIGINT handler."""
    try:
        return signal.getsignal(signal.SIGINT) is _on_sigint
    except (ValueError, AttributeError):  # pragma: no cover - no SIGINT on this platform
        return False


def install() -> bool:
    """Install the deferring SIGINT wrapper (main thread only). True when it is in place."""
    if threading.current_thread() is not threading.main_thread():
        if installed():
            _guard.stale = False  # wanted again before it could step aside
            return True
        return False
    current = signal.getsignal(signal.SIGINT)
    if current is _on_sigint:
        _guard.stale = False
        return True
    if not callable(current):  # SIG_IGN, SIG_DFL, or set from C: not ours to wrap
        return False
    # A stale mark belongs to the wrapper the caller's own handler replaced: left set, this wrapper stepped
    # aside at its first SIGINT, inside a protected frame too, and uninstalled itself with a prefetcher open.
    _guard.previous = current; _guard.stale = False  # noqa: E702
    signal.signal(signal.SIGINT, _on_sigint)
    return True


def uninstall() -> None:
    """Restore the wrapped handler, if the wrapper is still the installed one (main thread only).

    The caller decides when nothing needs the wrapper any more (no open
    prefetcher asked for it): that is a question about the registry of open
    prefetchers, which is recomputed, not a count that an interrupt could
    leave wrong. Off the main thread, where Python cannot change a signal
    handler, the wrapper is marked stale instead: it restores the wrapped
    handler itself at the next SIGINT (and passes that SIGINT on), or at
    the next :func:`install` or :func:`uninstall` on the main thread.
    Until then ``signal.getsignal`` still shows it.
    """
    if threading.current_thread() is not threading.main_thread():
        if installed():
            _guard.stale = True
        return
    _guard.stale = False
    if signal.getsignal(signal.SIGINT) is _on_sigint and _guard.previous is not None:
        signal.signal(signal.SIGINT, _guard.previous)


def deliver() -> None:
    """Run a deferred SIGINT now (it usually raises KeyboardInterrupt). Called at interruptible points."""
    if not _guard.deferred or threading.current_thread() is not threading.main_thread():
        return
    _guard.deferred = False
    previous = _guard.previous
    if previous is None:
        raise KeyboardInterrupt
    if previous is _SIG_IGN or previous is _SIG_DFL:
        return _disposition(previous)
    previous(signal.SIGINT, sys._getframe(1))


def outermost(frame: FrameType) -> bool:
    """Whether ``frame``'s function is the entry that must deliver: what it returns to is not protected.

    The innermost marked frame above it decides, as for a signal landing there: a protected one
    delivers when it returns; an interruptible one (the caller's own code running inside a call of
    ours, such as an on-demand source that reads another prefetcher) or none means now, or the
    interrupt would wait for all of that code.
    """
    return _decide(frame.f_back) == "raise"


def deliver_if_outermost() -> None:
    """Deliver a deferred SIGINT if the caller returns to code that is not protected (:func:`outermost`)."""
    if _guard.deferred and outermost(sys._getframe(1)):
        deliver()


def pending() -> bool:
    """Whether a deferred SIGINT waits for delivery."""
    return _guard.deferred


#: The guard itself, for hot paths that test ``guard.deferred`` inline.
guard = _guard


def _reset_after_fork() -> None:
    _guard.deferred = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def retake(lock: Any) -> None:
    """Hold the kernel lock again, on a thread leaving the kernel's ``_park`` by an exception (its
    caller's ``with`` releases it next).

    On the main thread the wait for it is itself interruptible: a second
    Ctrl-C while the first unwinds, with a SIGINT handler that raises (one
    installed after the prefetcher), raised out of ``acquire`` and left
    the ``with`` to release a lock another thread held. Such an exception
    is dropped here: the one already propagating carries the interrupt.
    """
    while not lock._is_owned():
        try:
            lock.acquire()
        except BaseException:  # noqa: BLE001 - see above; the loop takes the lock before anything else runs
            pass

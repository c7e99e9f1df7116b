"""Asynchronous-exception injection: stop at every point where CPython can raise one, and raise it there.

Why these points, and not every line
------------------------------------
A ``KeyboardInterrupt`` is raised by the SIGINT handler, and CPython runs
signal handlers (and raises exceptions set with
``PyThreadState_SetAsyncExc``) only at its *eval-breaker* checks. In CPython
3.11 those are: entering a Python function (``RESUME``), right after a call
into C returns (the end of ``CALL``), and a loop's back-edge
(``JUMP_BACKWARD``); and inside the blocking C calls that check for signals,
where an interrupted call fails without effect (a lock not taken, a sleep cut
short) -- the same as the exception arriving right before the call. A call
from Python to a Python function is not followed by a check: the callee's
``RESUME`` is the check.

So this harness injects at exactly those points, which is every place an
interrupt can really land. Raising at every *line* instead is both too weak
(a line can hold several calls, each followed by a check) and too strong: a
``with`` statement's exit is attributed to the ``with`` line, and raising
there skips the exit, which the interpreter never does (the exit runs from
the exception table). Code made "safe" against line injection can still
leak under a real Ctrl-C, and correct code fails line injection.

How
---
``sys.settrace`` with opcode events (``frame.f_trace_opcodes``) on the
frames of the target files: :func:`record_points` runs an action once and
lists the points it executed, in order; :func:`run_with_injection` runs it
again and performs an *effect* at the first time one chosen point is
reached (raise an exception, call the installed SIGINT handler as the
interpreter would, or run any callable, e.g. a signal handler's
``close()``). On which threads: the main thread by default (signals land
there); ``threads=True`` traces the threads started inside the action too,
for finalizers and other code that runs on any thread.

A generator resumed by ``next`` or ``send`` runs its RESUME (a point); one
entered by ``throw`` or ``close`` does not (the exception is raised into the
frame at its YIELD_VALUE), so its call event is not a point.

A call's callee is known to be Python when the 'call' event of a new frame
arrives from the calling frame before its next instruction; such a call is
taken to be inlined (no check after it) unless the frame is a generator's or
a coroutine's (resumed by ``next`` or ``send``, through C), or the callee is
``__init__``, ``__new__`` or ``__call__`` and the call site does not name it
(reached through C, ``type.__call__``; ``Base.__init__(self)`` and
``super().__init__()`` are straight calls), or a second frame is entered
before the caller's next instruction (C calling back, as ``sorted(key=f)``
does): those calls are followed by a check. The trace hook cannot see the
callable itself, so two cases stay wrong: a Python function called through a
C object that calls it once (``functools.partial(f)()``) is taken for
inlined, and its point after the call is missed; and calling a generator
function (which runs no frame the hook sees) is taken for a C call, with a
point after it that no interrupt reaches.

A back-edge's exception is looked up, on 3.11 and 3.12, at the code unit
before the jump's target (``backedges.py``). Where that lookup's handler
differs from the jump's own and agrees with the target's (3.12 leaves the
jump closing a ``while cond:`` out of the table, inside a ``with`` or a
``try``), the point is performed at the target's event, not the jump's.

A point at the end of a ``try`` or ``with`` body (``boundary``) is performed
at the end of the call, as the real check is; the next instruction's trace
event is outside the handler, and an exception raised there skipped the
``finally`` or the ``with``'s exit. From 3.12 the end of the call is
``sys.monitoring``'s ``C_RETURN`` (``call_returns.py``), sent for every call
into C. On 3.11 it is a profile hook's ``c_return``, which a C function
sends; a class called there sends none, and its Python ``__init__``'s return
is used instead; a C type (``list(xs)``) sends nothing, and on 3.11 its
point is still raised at the next instruction.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any, Callable, Iterable, Iterator

from . import interrupts as _interrupts
from .call_returns import MONITORED, call_returns
from .inject_code import (_CALL_OPS, _COND_LOOP_OPS, _LOOP_OPS, _REINSTRUMENT, _RETURN_OPS, _THROUGH_C, _code_key,
                          _handler, _inlined, _lines, _ops, _raised_at_target)

__all__ = ["InjectionOutcome", "InjectionPoint", "SigintUnavailable", "deliver_sigint", "package_files",
           "python_sigint", "raise_keyboard_interrupt", "record_points", "run_with_injection"]


@dataclass(frozen=True, order=True)
class InjectionPoint:
    """One place an asynchronous exception can land: before the instruction at ``offset`` of ``code``."""

    #: The function's file, qualified name and the line of the instruction.
    file: str
    function: str
    line: int
    #: Bytecode offset of the instruction the exception is raised before (-1: function entry).
    offset: int
    #: ``"entry"`` (function entry or generator resume), ``"after call"``, or ``"loop"`` (back-edge).
    kind: str
    code: CodeType = field(compare=False, repr=False, hash=False)
    #: Which time the point is reached in the run (1: the first), for points a run passes more than once.
    occurrence: int = 1
    #: For "after call": the CALL's offset, and whether the CALL and the next instruction are covered by
    #: different exception handlers (the end of a ``try`` or ``with`` body). There an exception raised by
    #: the trace hook before the next instruction would escape the handler the real one (raised at the
    #: end of the CALL) would reach; :func:`run_with_injection` raises it at the end of the CALL instead
    #: (on 3.11; see the module's last paragraph).
    call_offset: int = field(default=-1, compare=False)
    boundary: bool = field(default=False, compare=False)
    #: Which code object of that name and line (two lambdas on one line, a comprehension pair): a digest of
    #: its instructions' source positions, the same for the same code compiled again.
    code_key: int = field(default=0, repr=False)

    def __str__(self) -> str:
        nth = f", #{self.occurrence}" if self.occurrence > 1 else ""
        return f"{os.path.basename(self.file)}:{self.line} {self.function} ({self.kind}, @{self.offset}{nth})"

    def nth(self, k: int) -> "InjectionPoint":
        """The same place, reached for the k-th time."""
        return InjectionPoint(self.file, self.function, self.line, self.offset, self.kind, self.code,
                              occurrence=k, call_offset=self.call_offset, boundary=self.boundary,
                              code_key=self.code_key)


def package_files(*modules: Any) -> frozenset[str]:
    """The source files of ``modules`` (module objects, or packages: every .py file beneath)."""
    out: set[str] = set()
    for mod in modules:
        path = getattr(mod, "__file__", None)
        if path is None:
            continue
        if os.path.basename(path) == "__init__.py":
            root = os.path.dirname(path)
            for dirpath, _dirs, files in os.walk(root):
                out.update(os.path.join(dirpath, f) for f in files if f.endswith(".py"))
        else:
            out.add(path)
    return frozenset(os.path.realpath(p) for p in out)


class _FrameState:
    __slots__ = ("prev", "python_callee", "entered")

    def __init__(self) -> None:
        self.prev = -1               # offset of the previous instruction traced in this frame
        self.python_callee = False   # the previous instruction (a CALL) entered a Python function inline
        self.entered = False         # ... entered a Python frame at all (a second one: C calls back)


class _Tracer:
    """Walks the target frames' eval-breaker points; ``visit(frame, point)`` is called at each."""

    def __init__(self, files: frozenset[str], visit: Callable[[FrameType, InjectionPoint], None]):
        self.files = files
        self._visit = visit
        self.active = True
        self.states: dict[FrameType, _FrameState] = {}
        self.instrumented: set[CodeType] = set()  # code objects whose opcode events 3.12 was told of
        self._file_ok: dict[str, bool] = {}

    def visit(self, frame: FrameType, point: InjectionPoint) -> None:
        if self.active:
            self._visit(frame, point)

    def _target(self, code: CodeType) -> bool:
        ok = self._file_ok.get(code.co_filename)
        if ok is None:
            ok = os.path.realpath(code.co_filename) in self.files
            self._file_ok[code.co_filename] = ok
        return ok

    def _point(self, frame: FrameType, offset: int, kind: str, call: int = -1) -> InjectionPoint:
        code = frame.f_code
        line = _lines(code).get(offset, code.co_firstlineno) if offset >= 0 else code.co_firstlineno
        boundary = call >= 0 and _handler(code, call) != _handler(code, offset)
        return InjectionPoint(code.co_filename, code.co_qualname, line, offset, kind, code, call_offset=call,
                              boundary=boundary, code_key=_code_key(code))

    def global_trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        caller = frame.f_back
        if caller is not None:
            st = self.states.get(caller)
            if st is not None and st.prev >= 0 and _ops(caller.f_code).get(st.prev) in _CALL_OPS:
                # A second frame entered by one CALL is C calling back (``sorted(key=f)``, ``map``): the
                # CALL was to C, and C's return is followed by a check.
                st.python_callee = not st.entered and _inlined(caller.f_code, st.prev, frame.f_code)
                st.entered = True
        if not self._target(frame.f_code):
            return None
        frame.f_trace_opcodes = True
        frame.f_trace = self.local_trace
        if _REINSTRUMENT and frame.f_code not in self.instrumented:
            # 3.12 (seen on 3.12.1) sends no opcode events for f_trace_opcodes set while the trace function
            # is installed, only once sys.settrace is called again: without this no "after call" or "loop"
            # point was seen there (22 of predictors.py's 77 points, all entries). Once per code object.
            self.instrumented.add(frame.f_code)
            sys.settrace(sys.gettrace())
        self.states[frame] = _FrameState()
        # The check is RESUME's. A generator entered by ``throw`` or ``close`` (GeneratorExit, as when
        # ``any()`` drops its generator early) runs none: its call event stops at the YIELD_VALUE instead.
        if _ops(frame.f_code).get(frame.f_lasti) == "RESUME":
            self.visit(frame, self._point(frame, -1, "entry"))
        return self.local_trace

    def local_trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        st = self.states.get(frame)
        if st is None:
            st = self.states[frame] = _FrameState()
        if event == "opcode":
            off = frame.f_lasti
            ops = _ops(frame.f_code)
            prev = st.prev
            if prev >= 0 and ops.get(prev) in _CALL_OPS and not st.python_callee:
                self.visit(frame, self._point(frame, off, "after call", prev))
            if ops.get(off) in _LOOP_OPS:
                if not _raised_at_target(frame.f_code, off):
                    self.visit(frame, self._point(frame, off, "loop"))
            elif prev >= 0 and off <= prev and (ops.get(prev) in _COND_LOOP_OPS or ops.get(prev) in _LOOP_OPS
                                                and _raised_at_target(frame.f_code, prev)):
                self.visit(frame, self._point(frame, prev, "loop"))
            st.prev, st.python_callee, st.entered = off, False, False
        elif event in ("return", "exception"):
            if event == "return":
                self.states.pop(frame, None)
            else:
                st.prev, st.python_callee, st.entered = -1, False, False
        return self.local_trace


def _run_traced(action: Callable[[], Any], tracer: _Tracer, threads: bool,
                prepare: Callable[[], Callable[[], Any]] | None = None) -> Any:
    """Run ``action`` traced. ``prepare`` (if given) runs first, traced but not visited, and returns the action.

    With ``threads``, threads started from here on are traced too; they keep
    their tracer for life (it stops visiting once this returns).
    """
    old = sys.gettrace()
    if threads:
        threading.settrace(tracer.global_trace)
    sys.settrace(tracer.global_trace)
    try:
        if prepare is not None:
            tracer.active = False
            action = prepare()
            tracer.active = True
        return action()
    finally:
        tracer.active = False
        sys.settrace(old)
        if threads:
            threading.settrace(None)  # type: ignore[arg-type]


def record_points(action: Callable[[], Any] | None, files: Iterable[str], *, threads: bool = False,
                  only: Callable[[InjectionPoint], bool] | None = None,
                  thread_filter: Callable[[threading.Thread], bool] | None = None,
                  prepare: Callable[[], Callable[[], Any]] | None = None,
                  occurrences: int = 1) -> list[InjectionPoint]:
    """Run ``action`` once and list the distinct eval-breaker points it executed in ``files``, in first-hit order.

    With ``threads=True``, threads started during ``prepare`` or the action
    are traced too (``threading.settrace``); by default only the calling
    thread is. ``prepare`` builds the situation and returns the action:
    threads it starts are traced, but nothing is recorded before the action.
    Exceptions from the action are swallowed (the points it reached count).
    """
    files = frozenset(os.path.realpath(f) for f in files)
    seen: dict[InjectionPoint, None] = {}
    counts: dict[InjectionPoint, int] = {}
    lock = threading.Lock()

    def visit(frame: FrameType, point: InjectionPoint) -> None:
        if thread_filter is not None and not thread_filter(threading.current_thread()):
            return
        if only is None or only(point):
            with lock:
                k = counts[point] = counts.get(point, 0) + 1
                if k <= occurrences:
                    seen.setdefault(point.nth(k) if k > 1 else point, None)

    def quietly() -> None:
        try:
            real()
        except BaseException:  # noqa: BLE001 - the points reached are what counts
            pass

    if prepare is not None:
        def prepared() -> Callable[[], Any]:
            nonlocal real
            real = prepare()
            return quietly
        real: Callable[[], Any] = lambda: None  # noqa: E731
        _run_traced(quietly, _Tracer(files, visit), threads, prepared)
    else:
        real = action  # type: ignore[assignment]
        _run_traced(quietly, _Tracer(files, visit), threads)
    return list(seen)


def raise_keyboard_interrupt(frame: FrameType) -> None:
    """Effect: a KeyboardInterrupt at this point, bypassing any SIGINT handler (as a foreign handler would)."""
    raise KeyboardInterrupt


class SigintUnavailable(RuntimeError):
    """SIGINT has no Python handler here, so an injected Ctrl-C would test nothing."""


def deliver_sigint(frame: FrameType) -> None:
    """Effect: what the interpreter does when SIGINT arrives here: call the installed handler with this frame.

    With SIGINT ignored or left to the OS (no Python handler: a process a
    shell started in the background, with ``&`` and no job control, inherits
    SIGINT ignored) a real Ctrl-C would do nothing, and neither would this:
    a sweep would then "pass" points it never interrupted, or fail them for
    not raising. It raises :class:`SigintUnavailable` instead; run the sweep
    inside :func:`python_sigint`.
    """
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):
        raise SigintUnavailable(f"SIGINT's handler is {handler!r}, not a Python callable, so there is no Ctrl-C "
                                "to deliver; run inside python_sigint() (the process may have been started in "
                                "the background with SIGINT ignored)")
    handler(signal.SIGINT, frame)


@contextlib.contextmanager
def python_sigint() -> Iterator[None]:
    """Within: SIGINT has a Python handler, as in an interpreter started from a terminal.

    If the process's SIGINT is ignored or left to the OS -- a shell without
    job control starts background jobs with SIGINT ignored, and CPython then
    installs no handler -- ``signal.default_int_handler`` is installed for the
    duration and the previous disposition restored after (by a prefetcher
    opened within that is still open at the end, when it closes). A Python
    handler already in place is left alone. Main thread only (elsewhere: a
    no-op).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGINT)
    inner = _interrupts.wrapped() if _interrupts.installed() else None
    if inner is signal.SIG_IGN or inner is signal.SIG_DFL:
        # A prefetcher still open from an earlier such block wraps the process's disposition: within this
        # one it wraps Python's handler instead, and the disposition again after.
        _interrupts.rewrap(inner, signal.default_int_handler)
        try:
            yield
        finally:
            if _interrupts.installed():
                _interrupts.rewrap(signal.default_int_handler, inner)
            elif signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # it closed within
                signal.signal(signal.SIGINT, inner)
        return
    if callable(before) or before is None:  # None: set from C, not ours to replace
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, before)
        else:  # a prefetcher opened within and still open wraps the handler: it restores ``before`` at its close
            _interrupts.rewrap(signal.default_int_handler, before)


@dataclass
class InjectionOutcome:
    """What :func:`run_with_injection` saw."""

    #: The point was reached and the effect performed.
    fired: bool = False
    #: What the action returned, or the exception it raised (then ``raised`` is True).
    result: Any = None
    raised: bool = False


def run_with_injection(action: Callable[[], Any] | None, point: InjectionPoint, effect: Callable[[FrameType], None],
                       files: Iterable[str], *, threads: bool = False,
                       thread_filter: Callable[[threading.Thread], bool] | None = None,
                       prepare: Callable[[], Callable[[], Any]] | None = None) -> InjectionOutcome:
    """Run ``action``, performing ``effect(frame)`` the ``point.occurrence``-th time ``point`` is reached.

    An exception ``effect`` raises propagates into the traced frame, exactly
    where the point is (tracing then stops for that thread); the action's own
    result or exception is returned in the outcome. ``prepare`` as in
    :func:`record_points`.
    """
    files = frozenset(os.path.realpath(f) for f in files)
    outcome = InjectionOutcome()
    fired = threading.Event()
    lock = threading.Lock()
    hits = [0]
    target = point.nth(1)

    # A point at the end of a ``try`` or ``with`` body (``boundary``): the trace hook's next event is the next
    # instruction's, outside the handler, where raising skipped the ``finally`` or the ``with``'s exit that a
    # real interrupt, raised at the end of the CALL, runs; it is performed at the end of the call instead.
    at_return: dict[FrameType, int] = {}
    over = [False]  # (a thread started in the run keeps the hook for life: it does nothing after)

    def ended(frame: FrameType, call: int) -> None:
        # Only where the trace hook would see the point itself: a traced frame (not an untraced thread's, nor
        # one run by ``prepare``), at a call it did not take for an inlined Python call.
        st = tracer.states.get(frame)
        if (over[0] or not tracer.active or call != target.call_offset or st is None or st.prev != call
                or st.python_callee):
            return
        nxt = at_return[frame] = _next_offset(frame.f_code, call)
        if nxt == target.offset:
            visit(frame, target, returning=True)

    def visit(frame: FrameType, p: InjectionPoint, returning: bool = False) -> None:
        if fired.is_set() or p != target:
            return
        if not returning and target.boundary and at_return.pop(frame, None) == target.offset:
            return  # counted (and performed, if it was its turn) at the call's return
        if thread_filter is not None and not thread_filter(threading.current_thread()):
            return
        with lock:
            if fired.is_set():
                return
            hits[0] += 1
            if hits[0] < point.occurrence:
                return
            fired.set()
        outcome.fired = True
        effect(frame)

    def run(act: Callable[[], Any]) -> None:
        try:
            outcome.result = act()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            outcome.result, outcome.raised = e, True

    boundary = target.kind == "after call" and target.boundary
    tracer = _Tracer(files, visit)
    try:
        with _call_ends(target.code, ended, threads) if boundary else contextlib.nullcontext():
            if prepare is not None:
                _run_traced(lambda: None, tracer, threads, lambda: (lambda act=prepare(): run(act)))
            else:
                _run_traced(lambda: run(action), tracer, threads)  # type: ignore[arg-type]
    finally:
        over[0] = True
    outcome.fired = fired.is_set()
    return outcome


def _next_offset(code: CodeType, offset: int) -> int:
    """The offset of the instruction after the one at ``offset`` (past its inline caches)."""
    later = [o for o in _ops(code) if o > offset]
    return min(later) if later else -1


@contextlib.contextmanager
def _call_ends(code: CodeType, ended: Callable[[FrameType, int], None], threads: bool) -> Iterator[None]:
    """Within: ``ended(frame, call offset)`` at the end of each call ``code`` makes that the check follows.

    From 3.12, ``sys.monitoring``'s ``C_RETURN`` (``call_returns.py``). On 3.11, a profile hook's
    ``c_return`` (a C function called), or a Python ``__init__`` returning through ``type.__call__`` (a
    class called); a C type called sends neither. Not under a profiler already in place (cProfile's, say):
    it could not be put back from Python.
    """
    if MONITORED:
        with call_returns(code, ended):
            yield
        return
    if sys.getprofile() is not None or (threads and threading.getprofile() is not None):
        yield
        return

    def returned(frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_return":
            caller = frame
        elif event == "return" and frame.f_code.co_name in _THROUGH_C:
            # A class called (``Item(x)``): its Python ``__init__`` returns through ``type.__call__``, whose
            # return is the check. Not when the ``__init__`` is leaving by an exception (its frame is not at
            # its return), nor when the call site named it (a straight call, inlined: no check).
            caller = frame.f_back
            if (caller is None or _ops(frame.f_code).get(frame.f_lasti) not in _RETURN_OPS
                    or _inlined(caller.f_code, caller.f_lasti, frame.f_code)):
                return
        else:
            return
        if caller.f_code is code:
            ended(caller, caller.f_lasti)

    if threads:
        threading.setprofile(returned)  # type: ignore[arg-type]
    sys.setprofile(returned)  # type: ignore[arg-type]
    try:
        yield
    finally:
        sys.setprofile(None)  # (none was in place)
        if threads:
            threading.setprofile(None)  # type: ignore[arg-type]

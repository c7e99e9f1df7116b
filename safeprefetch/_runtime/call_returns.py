"""The end of a CALL, seen from Python 3.12 on: where a boundary injection point is performed.

An interrupt that arrives during a call is raised by CPython's eval-breaker
check at the end of the ``CALL`` instruction, so it is the call's exception
and the handler covering the call catches it: ``with lock: return len(xs)``
releases the lock. The trace hook cannot raise there. Its next event is for the
next instruction, which is past the end of the ``with`` body. An exception
raised from it skipped the exit that a real Ctrl-C runs, and correct code was
reported as leaking its lock.

From 3.12, ``sys.monitoring`` sends ``C_RETURN`` at the end of every call
to a callable that is not a Python function. That covers a builtin (``len``),
a C type (``list(xs)``), a Python class (``Item(x)``, whose ``__init__`` is
reached through ``type.__call__``) and a C wrapper of a Python function
(``functools.partial(f)()``): every call that the check follows. An exception
raised from that callback leaves the ``CALL`` as the call's own. Tests on
3.12.1 and 3.13.0 show that the handler runs and that later traces of the
code still get their opcode events. (Raising from a legacy profile hook turned
those events off for good, which is why 3.11's profile-hook path is not used
here.)

:func:`call_returns` enables the event for one code object only, under a
``sys.monitoring`` tool id of its own. That id is the first one no other tool
holds, so a coverage tool or a profiler is left alone. If every id is taken,
it yields False and the caller falls back to the trace hook's next event.
"""

from __future__ import annotations

import contextlib
import sys
from types import CodeType, FrameType
from typing import Any, Callable, Iterator

__all__ = ["MONITORED", "call_returns"]

#: Whether this Python has ``sys.monitoring`` (3.12 on).
MONITORED = hasattr(sys, "monitoring")
#: The ids tried, in order: the two no standard tool claims, then the others.
_IDS = (3, 4, 0, 1, 2, 5)


@contextlib.contextmanager
def call_returns(code: CodeType, hook: Callable[[FrameType, int], None]) -> Iterator[bool]:
    """Within: ``hook(frame, call_offset)`` at the end of each call into C made by ``code``, on any thread.

    Yields whether the event could be enabled (False before 3.12, or when no
    tool id is free).
    """
    mon = getattr(sys, "monitoring", None)
    tool = None if mon is None else next((i for i in _IDS if mon.get_tool(i) is None), None)
    if tool is None:
        yield False
        return

    def returned(at: CodeType, offset: int, _callable: Any, _arg0: Any) -> Any:
        if at is code:
            hook(sys._getframe(1), offset)
        return None

    mon.use_tool_id(tool, "safeprefetch.lowlevel")
    try:
        mon.register_callback(tool, mon.events.C_RETURN, returned)
        mon.set_local_events(tool, code, mon.events.CALL)  # CALL carries C_RETURN and C_RAISE
        yield True
    finally:
        mon.set_local_events(tool, code, 0)
        mon.register_callback(tool, mon.events.C_RETURN, None)
        mon.free_tool_id(tool)

"""Running the test body once, under one controller, and getting every thread back.

What it guarantees
------------------
:func:`run_once` starts the test body as the controlled thread ``main``,
lets the controller make every scheduling decision, and returns the ended
:class:`~.scheduler.Execution` with every thread unwound -- or raises
:class:`~.scheduler.SchedulerStuck` when a thread runs for ``wall_timeout``
seconds without reaching a scheduling point (it is blocked in something the
scheduler does not control, or spins on a plain attribute). It never waits
forever: the wait for the execution is bounded by that progress watchdog,
and the unwind of each thread by :data:`UNWIND_SECONDS`.
"""

from __future__ import annotations

import concurrent.futures.thread as _pool
import gc
import os
import sys
import threading
from typing import Any, Callable

from .lines import trace_current_thread
from .ops import _HERE
from .scheduler import _ACTIVE, Execution, SchedulerStuck, Settings, retire

__all__ = ["UNWIND_SECONDS", "run_once"]

#: Wall-clock seconds to wait for one aborted thread to unwind; one that takes longer (it
#: swallows ``Aborted`` and blocks in something uncontrolled) is left behind, parked.
UNWIND_SECONDS = 2.0


def run_once(fn: Callable[[], Any], controller: Any, settings: Settings, interrupts: tuple = ()) -> Execution:
    """One execution of ``fn`` under ``controller``; the drop-ins must already be in place."""
    ex = Execution(controller, settings, interrupts, tracer=trace_current_thread)
    # Never started: the identity of the test body's thread, non-daemon as a main thread is, so that the
    # threads the body creates are non-daemon unless asked (Thread inherits its creator's flag).
    root_obj = threading.Thread(name="main")
    _ACTIVE[0] = ex
    try:
        root = ex.add_thread("main", fn, obj=root_obj)
        ex.thread_objs[id(root_obj)] = root
        first = ex._decide(root)
        if first is not None:
            first.baton.release()
        _wait(ex, settings.wall_timeout)
        finished = getattr(controller, "finished", None)
        if finished is not None:
            finished(ex)
    finally:
        ex.left_behind = ex.abort_all(UNWIND_SECONDS)
        _ACTIVE[0] = None
        for vt in ex.threads[1:]:
            if vt.obj is not None:
                retire(vt.obj)
        _forget_pool_threads(ex)
        # The run's garbage goes now, on this uncontrolled thread, where its objects act as real ones: a
        # finalizer of this run must not fire inside the next one, at a point no schedule chose. The
        # collector is paused during a check (patching.py), so nothing was promoted past generation 1
        # since the last run: collecting the young generations is enough, and cheap.
        gc.collect(1)
    if ex.controller_error is not None:
        raise ex.controller_error
    return ex


def _forget_pool_threads(ex: Execution) -> None:
    """Take this run's threads out of ``concurrent.futures``' table of pool threads (joined at exit).

    Its keys are weak, but the value is the pool's work queue, here a drop-in that belongs to this run and
    so holds it, threads and all: every run of a body that used a ``ThreadPoolExecutor`` stayed in memory,
    and each later run and check was slower (30,000 runs: a one-thread check took 15 s instead of 0.02 s).
    """
    table = _pool._threads_queues  # type: ignore[attr-defined]
    mine = {id(vt.obj) for vt in ex.threads if vt.obj is not None}
    for thread in list(table):
        if id(thread) in mine:
            table.pop(thread, None)


def _wait(ex: Execution, wall: float) -> None:
    last = -1
    bound = wall if wall < threading.TIMEOUT_MAX else -1  # wall_timeout=inf: wait for good, as asked
    while not ex.done.acquire(True, bound):
        if ex.steps == last:
            message = _stuck_message(ex, wall)
            ex.end("stuck", message)
            raise SchedulerStuck(message)
        last = ex.steps


def _stuck_message(ex: Execution, wall: float) -> str:
    vt = ex.threads[ex.last] if ex.last is not None else ex.threads[0]
    frame = sys._current_frames().get(vt.ident or -1)
    at = "?"
    while frame is not None:
        fn = frame.f_code.co_filename
        if not fn.startswith(_HERE):
            at = f"{os.path.basename(fn)}:{frame.f_lineno} in {frame.f_code.co_name}"
            break
        frame = frame.f_back
    return (f"thread {vt.name} ran {wall:g} s without reaching a scheduling point, at {at}: it is blocked in "
            "something the scheduler does not control (a lock or queue created before the check, _thread, I/O) "
            "or it spins on a plain attribute (lines=True makes such a loop visible)")

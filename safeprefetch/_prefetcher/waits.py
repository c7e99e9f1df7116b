"""The Prefetcher's waits outside the kernel: where Ctrl-C may land, and what it leaves behind.

Each wait is marked for the SIGINT wrapper (``_runtime/interrupts.py``):
joining threads and waiting for the first batch are interruptible; the
consumer gate's wait is interruptible until the gate is owned, then
protected, and releases the gate itself if an exception arrives before the
caller's ``with`` owns it. A lease's release takes the gate protected
(``hold_gate``): a Ctrl-C then comes once the lease is released, as
a with-block's exit must have it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable

from .._runtime.interrupts import deliver, guard, interruptible, interruptible_until_owned, protected
from .errors import PrefetchTimeout

__all__ = ["Gate", "HeldGate", "NOT_TAKEN", "NO_GATE", "SOURCE_BUSY", "STOP_SLICE", "SourceBusy", "first_driver", "hold_gate",
           "join_threads", "left", "start_threads", "wait_event", "wait_gate"]

_TIMEOUT_MAX = threading.TIMEOUT_MAX


def start_threads(core: Any, workers: list[tuple[str, Callable[..., None], tuple]]) -> None:
    """Start one daemon thread per ``(name, target, args)`` in turn; any start may raise (no more threads:
    RuntimeError; Ctrl-C).

    A worker whose start raised, and every one after it, stays in
    ``core.unstarted`` as its ``(target, args)``: nothing drives its model
    worker, whose exit the closer's "join workers" waits for, so ``close()``
    calls the target itself, on its own thread (``_retire_unstarted``). A
    start that raised after the thread did start leaves two candidate
    drivers; :func:`first_driver` lets exactly one of them drive.
    """
    core.unstarted = [(target, args) for _name, target, args in workers]  # planned already: the same list
    for name, target, args in workers:
        th = threading.Thread(target=target, args=args, daemon=True, name=name)
        core.threads.append(th)
        th.start()
        core.unstarted.remove((target, args))


def first_driver(core: Any, t: int) -> bool:
    """Whether the calling thread is the one to drive model thread ``t`` (the first to ask; atomic).

    The driving worker thread records itself in ``core.worker_idents`` here, before its first fetch, and
    :func:`left` takes it out when it ends: a thread id is reused once its thread has ended, and a consumer
    thread started later with a finished worker's id was refused as the prefetcher's own worker. (Its starter
    used to record it too, once ``start`` returned: possibly after the worker had ended.)
    """
    me = threading.get_ident()
    if core.drivers.setdefault(t, me) != me:
        return False
    if threading.current_thread() in core.threads:  # a worker's own thread, not close() driving it out
        core.worker_idents.add(me)
    return True


def left(core: Any) -> None:
    """A worker thread's last act (in its ``finally``): its id is no longer this prefetcher's."""
    if threading.current_thread() in core.threads:
        core.worker_idents.discard(threading.get_ident())


@interruptible
def wait_event(event: threading.Event, deadline: float | None) -> bool:
    """Wait for ``event`` until ``deadline`` (a ``time.monotonic()`` value; None: no limit); whether it is set.
    Ctrl-C may cut it short."""
    while not event.is_set():
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return False
        event.wait(None if remaining is None else min(remaining, _TIMEOUT_MAX))
    return True


@interruptible
def join_threads(threads: list[threading.Thread], deadline: float | None, me: threading.Thread) -> None:
    """Join every thread but ``me`` before ``deadline`` (None: no limit). Ctrl-C may cut it short."""
    for th in threads:
        if th is me:
            continue
        while th.is_alive():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            th.join(None if remaining is None else min(remaining, _TIMEOUT_MAX))


@interruptible_until_owned("gate")
def wait_gate(gate: Any, deadline: float | None, deliver_deferred: bool = True,
              stop: Callable[[], bool] | None = None) -> bool:
    """Take the consumer gate, waiting until ``deadline``; True once owned; False past the deadline, or as
    soon as ``stop()`` (checked every :data:`STOP_SLICE` seconds while waiting) turns true.

    Interruptible while waiting; once the gate is owned, an interrupt is
    deferred (SIGINT wrapper) or, raised anyway, releases it here before
    propagating: the caller's ``with`` has not taken charge of it yet.
    A Ctrl-C deferred earlier in the call is delivered first, unless
    ``deliver_deferred=False``: the waits that finish work the interrupted
    call owes (putting an outcome back, releasing a lease, setting
    ``closing``) pass it, and so does a ``thread_safe=False`` source's lock
    (workers take it, and an on-demand miss waits for a worker's speculative
    call with its request's deadline).
    """
    # (No ``return gate.acquire()``: an interrupt at the end of that call is caught by the
    # ``except`` below, but the instruction after it, the return, lies outside the ``try``.)
    try:
        if deadline is None and stop is None:
            if deliver_deferred and guard.deferred:
                deliver()
            got = gate.acquire()
            return got
        while True:
            remaining = _TIMEOUT_MAX if deadline is None else deadline - time.monotonic()
            if stop is not None:
                remaining = min(remaining, STOP_SLICE)
            if gate.acquire(True, min(remaining, _TIMEOUT_MAX)) if remaining > 0 else gate.acquire(False):
                return True
            if stop is not None and stop():
                return False
            if deadline is not None and time.monotonic() >= deadline:
                return False
    except BaseException:
        if gate._is_owned():
            gate.release()
        raise


@protected
def hold_gate(gate: Any) -> bool:
    """Take ``gate`` for work a call must finish once begun (releasing a lease): not interruptible.

    A Ctrl-C while waiting is deferred to the end of the call, after that work, so this is only for
    a gate that nobody holds for long (while a lease is out, every other consumer call raises
    LeaseHeld at once). An exception raised anyway releases the gate here, as in :func:`wait_gate`.
    """
    try:
        got = gate.acquire()
        return got
    except BaseException:
        if gate._is_owned():
            gate.release()
        raise


class Gate(threading.RLock().__class__):  # type: ignore[misc]
    """The consumer gate: an RLock whose ``with`` does not acquire (``wait_gate`` did) but does release.

    ``__enter__`` is the C method ``_is_owned``: no Python frame, no
    interruption point between the wait that took the gate and the ``with``
    that will give it back.
    """

    __slots__ = ()
    __enter__ = threading.RLock().__class__._is_owned


class HeldGate(Gate):
    """A :class:`Gate` that holds the source it serializes (``source``): the gate of a source that cannot be
    weakly referenced, so that while the gate lives the source's id names no other object (``sources.gate_of``)."""

    __slots__ = ("source",)


_REAL_RLOCK = threading.RLock().__class__


def new_gate() -> Any:
    """A :class:`Gate`, or under ``safeprefetch.interleavings`` (whose ``threading.RLock`` is the scheduler's)
    the same behaviour over the scheduler's RLock, so that a thread waiting for a gate is a thread the
    scheduler sees waiting, not one blocked in a lock it cannot see."""
    base = threading.RLock().__class__
    if base is _REAL_RLOCK:
        return Gate()
    return type("Gate", (base,), {"__enter__": base._is_owned, "__doc__": Gate.__doc__})()


class _NoGate:
    """What the consumer's ``with`` enters when the gate was not taken in time: it raises PrefetchTimeout."""

    __slots__ = ()

    def __enter__(self) -> None:
        raise PrefetchTimeout("no batch within the timeout (another thread is consuming)")

    def __exit__(self, *exc: Any) -> None:  # pragma: no cover - __enter__ always raises
        return None


NO_GATE = _NoGate()


class SourceBusy(PrefetchTimeout):
    """An on-demand miss's deadline passed while another thread's call held a ``thread_safe=False`` source."""


class _SourceBusy:
    """What a miss's ``with`` enters when the source lock was not taken in time: it raises SourceBusy."""

    __slots__ = ()

    def __enter__(self) -> None:
        raise SourceBusy("the source is busy: another thread's call into it (thread_safe=False) did not finish "
                         "within the timeout")

    def __exit__(self, *exc: Any) -> None:  # pragma: no cover - __enter__ always raises
        return None


SOURCE_BUSY = _SourceBusy()

#: How often a worker waiting for a ``thread_safe=False`` source's lock, held by another prefetcher's call (or
#: an on-demand caller's), looks whether its own prefetcher is closing: a close waited for such workers as if
#: they were inside a fetch -- for ever with ``close_timeout=None`` while the other call was stuck.
STOP_SLICE = 0.02

#: What a worker's ``with`` enters when its wait for the source lock was cut short by close: nothing to take
#: or give back (the body sees ``closing`` and calls nothing).
NOT_TAKEN = contextlib.nullcontext()


class CloseBusy(Exception):
    """Another thread's close held the close lock past this caller's deadline (it finishes the close)."""


class _Busy:
    """What a closer's ``with`` enters when the close lock was not taken in time: it raises CloseBusy."""

    __slots__ = ()

    def __enter__(self) -> None:
        raise CloseBusy

    def __exit__(self, *exc: Any) -> None:  # pragma: no cover - __enter__ always raises
        return None


CLOSE_BUSY = _Busy()

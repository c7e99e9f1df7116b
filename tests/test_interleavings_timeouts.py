"""Timeout arguments under interleavings behave as in real Python, call by call (a differential test).

Each case is one call on a primitive in a state where it cannot go on at once (a held lock, a clear
event, an empty queue, an alive thread), with a timeout that a real call answers without waiting:
negative, zero, NaN, ``inf``, past ``threading.TIMEOUT_MAX``. The same call is made on the real
primitive and inside a check; the outcome (value, or exception type and message) must be the same.

Before this, every wait followed ``Lock.acquire``'s rule that -1 means forever: ``cond.wait(-1)``,
``event.wait(-1)``, ``sem.acquire(timeout=-1)``, ``join(-1)`` and ``barrier.wait(-1)`` were reported
as deadlocks where real Python returns at once; ``Queue.get(timeout=-1)`` was accepted where real
Python raises ValueError; and ``wait(inf)`` waited where real Python raises OverflowError.
"""

from __future__ import annotations

import math
import queue
import threading
import time

import pytest

from safeprefetch import interleavings
from _threads import outcome

INF, HUGE, NAN = math.inf, 1e12, math.nan


def _held_lock(kind, t):
    lock = getattr(threading, kind)()
    if kind == "Lock":
        lock.acquire()
    return lambda: lock.acquire(timeout=t)


def _free_rlock(t):
    lock = threading.RLock()
    return lambda: lock.acquire(timeout=t)


def _cond_wait(t):
    cond = threading.Condition()

    def call():
        with cond:
            return cond.wait(t)
    return call


def _cond_wait_for(t):
    cond = threading.Condition()

    def call():
        with cond:
            return cond.wait_for(lambda: False, t)
    return call


def _event_wait(t, flag=False):
    ev = threading.Event()
    if flag:
        ev.set()
    return lambda: ev.wait(t)


def _sem_acquire(t, value=0):
    sem = threading.Semaphore(value)
    return lambda: sem.acquire(timeout=t)


def _barrier_wait(t, parties=2):
    barrier = threading.Barrier(parties)
    return lambda: barrier.wait(t)


def _join_alive(t):
    go = threading.Event()
    th = threading.Thread(target=go.wait)
    th.start()

    def call():
        try:
            return (th.join(t), th.is_alive())
        finally:
            go.set()
            th.join()
    return call


def _queue_get(t, items=0, block=True):
    q = queue.Queue()
    for i in range(items):
        q.put(i)
    return lambda: q.get(block, t)


def _queue_put(t):
    q = queue.Queue(1)
    q.put(0)
    return lambda: q.put(1, timeout=t)


def _simple_get(t, items=0):
    q = queue.SimpleQueue()
    for i in range(items):
        q.put(i)
    return lambda: q.get(timeout=t)


def _sleep(t):
    return lambda: time.sleep(t)


_NO_WAIT = (-1, -2, -0.5, 0, INF, HUGE)  # NaN too where a real call answers it at once (not all do)
CASES = (
    [(f"Lock held, acquire(timeout={t})", lambda t=t: _held_lock("Lock", t)) for t in (-2, 0, NAN, INF, HUGE, None)]
    + [(f"RLock free, acquire(timeout={t})", lambda t=t: _free_rlock(t)) for t in (-1, -2, 0, NAN, INF, HUGE, None)]
    + [(f"Condition.wait({t})", lambda t=t: _cond_wait(t)) for t in (*_NO_WAIT, NAN)]
    + [(f"Condition.wait_for(false, {t})", lambda t=t: _cond_wait_for(t)) for t in _NO_WAIT]
    + [(f"Event clear, wait({t})", lambda t=t: _event_wait(t)) for t in (*_NO_WAIT, NAN)]
    + [(f"Event set, wait({t})", lambda t=t: _event_wait(t, flag=True)) for t in (-1, INF, HUGE)]
    + [(f"Semaphore(0).acquire(timeout={t})", lambda t=t: _sem_acquire(t)) for t in _NO_WAIT]
    + [(f"Semaphore(1).acquire(timeout={t})", lambda t=t: _sem_acquire(t, 1)) for t in (-1, INF)]
    + [(f"Barrier(2).wait({t})", lambda t=t: _barrier_wait(t)) for t in (-1, -2, 0, INF, HUGE)]
    + [(f"Barrier(1).wait({t})", lambda t=t: _barrier_wait(t, 1)) for t in (-1, INF)]
    + [(f"Thread alive, join({t})", lambda t=t: _join_alive(t)) for t in (-1, -2, 0)]
    + [(f"Queue empty, get(timeout={t})", lambda t=t: _queue_get(t)) for t in (-1, -2, 0, INF, HUGE)]
    + [(f"Queue empty, get(False, {t})", lambda t=t: _queue_get(t, block=False)) for t in (-1, INF)]
    + [(f"Queue one item, get(timeout={t})", lambda t=t: _queue_get(t, items=1)) for t in (INF, HUGE)]
    + [(f"Queue full, put(timeout={t})", lambda t=t: _queue_put(t)) for t in (-1, 0, INF, HUGE)]
    + [(f"SimpleQueue empty, get(timeout={t})", lambda t=t: _simple_get(t)) for t in (-1, 0, INF, HUGE)]
    + [(f"SimpleQueue one item, get(timeout={t})", lambda t=t: _simple_get(t, 1)) for t in (-1, INF)]
    + [(f"time.sleep({t})", lambda t=t: _sleep(t)) for t in (-1, 0, NAN, INF, HUGE)]
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make", [m for _, m in CASES], ids=[n for n, _ in CASES])
def test_a_timeout_a_real_call_answers_at_once_gets_the_same_answer_under_interleavings(make):
    real = outcome(make())
    seen = []

    def body():
        seen.append(outcome(make()))

    result = interleavings.check(body)
    assert result.verdict == "ok", result
    assert set(seen) == {real}


@pytest.mark.timeout(60)
def test_a_barrier_wait_that_cannot_wait_leaves_the_barrier_whole_and_one_that_times_out_breaks_it():
    def states():
        out = []
        for t in (INF, -1):
            barrier = threading.Barrier(2)
            out.append((outcome(lambda: barrier.wait(t))[0], barrier.broken, barrier.n_waiting))
        return out

    real = states()
    seen = []
    assert interleavings.check(lambda: seen.append(tuple(states()))).verdict == "ok"
    assert real == [("OverflowError", False, 0), ("BrokenBarrierError", True, 0)]
    assert set(seen) == {tuple(real)}


@pytest.mark.timeout(60)
def test_a_wait_until_a_deadline_already_past_is_not_a_deadlock():
    """The shape that made the bug matter: ``cond.wait(deadline - now)`` once the deadline has passed."""
    cond = threading.Condition()
    state = {"ready": False}

    def body():
        state["ready"] = False
        deadline = time.monotonic() + 0.01

        def waiter():
            with cond:
                while not state["ready"]:
                    if not cond.wait(deadline - time.monotonic() - 1.0):  # past its deadline: False at once
                        return

        th = threading.Thread(target=waiter)
        th.start()
        th.join()

    result = interleavings.check(body)
    assert result.verdict == "ok", result

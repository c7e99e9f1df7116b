"""Every argument of every drop-in behaves as in real CPython (a differential test).

The controlled ``Lock``, ``RLock``, ``Condition``, ``Semaphore``,
``BoundedSemaphore``, ``Event``, ``Barrier``, queues, ``Thread.join`` and
``time.sleep`` promise to be the standard library's, argument for argument:
code checked under the scheduler is the code that runs. Each case below is a
small scenario -- one call with an edge-case argument, or a few threads
ordered by the primitives themselves (never by sleeping) -- that is run twice:
on real ``threading`` in this process, and as the body of a check, where
every schedule must give the same outcome (each call's value, or its
exception's type and message) and the verdict must be ``ok``.

Scenarios whose real outcome depends on the schedule are not here: each
real run must be deterministic. Where CPython differs between versions, the
running interpreter is the reference, since the comparison is with it.

Adding a case is one line in ``CASES``: a name and a zero-argument scenario
that returns something hashable. ``calls(make, *ops)`` makes an object and
records the outcome of each ``op(obj)`` in turn; ``threaded(...)`` helpers
start threads inside the scenario.
"""

from __future__ import annotations

import math
import queue
import sys
import threading
import time
from fractions import Fraction

import pytest

from safeprefetch import interleavings
from _threads import outcome

pytestmark = pytest.mark.timeout(60)

NAN, INF, HUGE = math.nan, math.inf, 1e300


def calls(make, *ops):
    """A scenario: ``obj = make()``, then each ``op(obj)``, recording each outcome."""
    def scenario():
        obj = make()
        return tuple(outcome(lambda op=op: op(obj)) for op in ops)
    return scenario


# The constructors, looked up when called (a check patches the module attributes in).
def Lock(): return threading.Lock()                                # noqa: E302,E704
def RLock(): return threading.RLock()                              # noqa: E302,E704
def Event(): return threading.Event()                              # noqa: E302,E704
def Cond(): return threading.Condition()                           # noqa: E302,E704
def Sem(n=1): return lambda: threading.Semaphore(n)                # noqa: E302,E704
def BSem(n=1): return lambda: threading.BoundedSemaphore(n)        # noqa: E302,E704
def Barrier(n, **kw): return lambda: threading.Barrier(n, **kw)    # noqa: E302,E704
def Queue(n=0, kind="Queue"): return lambda: getattr(queue, kind)(n)  # noqa: E302,E704
def SimpleQueue(): return queue.SimpleQueue()                      # noqa: E302,E704


def types_only(scenario):
    """The scenario with each exception reduced to its type: for a message that names the implementation
    (``acquire() takes at most 2 arguments`` from C, ``VLock.acquire() takes ...`` from Python)."""
    def reduced():
        return tuple(o[0] if isinstance(o, tuple) else o for o in scenario())
    return reduced


def held(make):
    def held_one():
        lock = make()
        lock.acquire()
        return lock
    return held_one


def filled(make, *items):
    def filled_one():
        q = make()
        for item in items:
            q.put(item)
        return q
    return filled_one


def with_lock(cond, call):
    with cond:
        return call(cond)


def start(target, *args, name=None):
    t = threading.Thread(target=target, args=args, name=name)
    t.start()
    return t


#: A thread that may outlive its scenario: before 3.13 a join that raises records the running thread as
#: ended, and every later join returns at once (test_a_ctrl_c_in_join_leaves_the_thread_as_this_python_does).
LATE = "may-end-late"


def _other_thread(call):
    """The outcome of ``call()`` made on another thread (for an RLock that thread does not own)."""
    out = []
    start(lambda: out.append(outcome(call))).join()
    return out[0]


# -- scenarios with threads, each deterministic in real Python -------------------------------------

def sem_acquire_released_by_another(timeout):
    """``Semaphore(0).acquire(timeout=t)`` while another thread releases it: with a NaN timeout CPython's
    loop (``endtime - now <= 0`` is never true) waits until the release comes."""
    sem = threading.Semaphore(0)
    t = start(sem.release)
    got = outcome(lambda: sem.acquire(timeout=timeout))
    t.join()
    return got


def acquire_released_by_another(make, timeout):
    """``acquire(timeout=t)`` on another thread while ``main`` holds the lock, then releases it."""
    lock = make()
    lock.acquire()
    out = []
    t = start(lambda: out.append(outcome(lambda: lock.acquire(timeout=timeout))))
    lock.release()
    t.join()
    return out[0]


def queue_get_put_by_another(timeout, kind="Queue"):
    q = getattr(queue, kind)()
    t = start(q.put, 1)
    got = outcome(lambda: q.get(timeout=timeout))
    t.join()
    return got


def queue_put_freed_by_another(timeout):
    q = queue.Queue(1)
    q.put(0)
    t = start(q.get)
    got = outcome(lambda: q.put(1, timeout=timeout))
    t.join()
    return got, q.qsize()


def cond_wait_for_notified(timeout):
    """``wait_for(pred, t)`` while another thread makes ``pred`` true and notifies."""
    cond = threading.Condition()
    box = []

    def setter():
        with cond:
            box.append(1)
            cond.notify()

    t = start(setter)
    with cond:
        got = outcome(lambda: cond.wait_for(lambda: bool(box), timeout))
    t.join()
    return got


def notify_while_another_holds(kind, call):
    """``call(cond)`` by ``main`` without the lock, while another thread holds it: for a Condition over a
    plain Lock, CPython's ownership test (``acquire(False)`` fails) lets it go ahead; over an RLock it
    raises RuntimeError."""
    cond = threading.Condition(getattr(threading, kind)())
    held, done = threading.Event(), threading.Event()

    def holder():
        with cond:
            held.set()
            done.wait()

    t = start(holder)
    held.wait()
    got = outcome(lambda: call(cond))
    done.set()
    t.join()
    return got


def notify_n(n, waiters=3):
    """``notify(n)`` with ``waiters`` threads asleep on the condition: how many it leaves waiting (the
    condition's waiter list, which CPython's and the drop-in's both keep), then ``notify_all``."""
    cond = threading.Condition()
    asleep = threading.Semaphore(0)

    def waiter():
        with cond:
            asleep.release()
            cond.wait()

    threads = [start(waiter) for _ in range(waiters)]
    for _ in threads:
        asleep.acquire()
    with cond:  # each waiter is inside wait() once it has given the lock back
        got = outcome(lambda: cond.notify(n))
        left = len(cond._waiters)
        cond.notify_all()
    for t in threads:
        t.join()
    return got, left


def barrier_parties(n, timeout=None, action=None, *, arrivals=None, default=None):
    """``n`` threads (``arrivals``, default ``n``) meet at ``Barrier(n, action)``; each arrival's outcome,
    sorted (which thread gets which index depends on the schedule), then ``broken`` and ``n_waiting``
    once they are all back."""
    barrier = threading.Barrier(n, action=action, timeout=default)
    out = []
    threads = [start(lambda: out.append(outcome(lambda: barrier.wait(timeout)))) for _ in range(arrivals or n)]
    for t in threads:
        t.join()
    return tuple(sorted(out)), barrier.broken, barrier.n_waiting


def _raise():
    raise ZeroDivisionError("the action failed")


def barrier_action_fails_then_reset():
    """The action raises (the first time): its thread gets the exception, the other BrokenBarrierError;
    after ``reset`` the barrier is whole again and the next two meet."""
    calls = []

    def fails_once():
        calls.append(1)
        if len(calls) == 1:
            _raise()

    barrier = threading.Barrier(2, action=fails_once)
    out = []
    threads = [start(lambda: out.append(outcome(barrier.wait))) for _ in range(2)]
    for t in threads:
        t.join()
    broken = (barrier.broken, barrier.n_waiting)
    barrier.reset()
    state = (barrier.broken, barrier.n_waiting)
    more = []
    threads = [start(lambda: more.append(outcome(barrier.wait))) for _ in range(2)]
    for t in threads:
        t.join()
    return tuple(sorted(out)), broken, state, tuple(sorted(more))


def barrier_bad_timeout_leaves_it_whole(timeout):
    """A wait whose timeout the real one cannot use raises, and leaves the barrier whole: the next two
    parties still meet."""
    barrier = threading.Barrier(2)
    first = outcome(lambda: barrier.wait(timeout))
    state = (barrier.broken, barrier.n_waiting)
    out = []
    threads = [start(lambda: out.append(outcome(barrier.wait))) for _ in range(2)]
    for t in threads:
        t.join()
    return first, state, tuple(sorted(out))


def barrier_rewait_while_the_other_leaves():
    """Two meet; ``main`` at once waits again with timeout 0. It counts in the next generation only once the
    other has left (CPython's barrier drains first), so its timeout breaks the next generation, never the
    other's passing."""
    barrier = threading.Barrier(2)
    out = []
    t = start(lambda: out.append(outcome(barrier.wait)))
    first = outcome(barrier.wait)
    again = outcome(lambda: barrier.wait(0))
    t.join()
    return tuple(sorted([first, out[0]])), again, barrier.broken


def barrier_action_aborts_it():
    """The action calls ``abort()``: CPython runs the action holding the barrier's (non-reentrant) lock, so
    the abort waits for it forever. Not run on real threads (it hangs); the check must call it a deadlock."""
    barrier = threading.Barrier(1, action=lambda: barrier.abort())
    barrier.wait()


def barrier_waiter_then_abort():
    """An abort before or after the other thread arrives: either way its wait raises BrokenBarrierError."""
    barrier = threading.Barrier(2)
    out = []
    t = start(lambda: out.append(outcome(barrier.wait)))
    barrier.abort()
    t.join()
    return out[0], barrier.broken, barrier.n_waiting, outcome(barrier.wait)


def barrier_waiter_then_reset():
    """A reset with a thread waiting breaks its wait; the barrier is then whole for the next two."""
    barrier = threading.Barrier(2)
    out = []
    t = start(lambda: out.append(outcome(barrier.wait)))
    while barrier.n_waiting == 0:  # a poll on the barrier's state (under a check, time moves only when
        time.sleep(0.001)          # no thread can: the waiter is then waiting)
    barrier.reset()
    t.join()
    more = []
    threads = [start(lambda: more.append(outcome(barrier.wait))) for _ in range(2)]
    for t in threads:
        t.join()
    return out[0], barrier.broken, tuple(sorted(more))


def join_alive(timeout):
    go = threading.Event()
    t = start(go.wait, name=LATE)
    got = outcome(lambda: t.join(timeout))
    alive = t.is_alive()
    go.set()
    t.join()
    return got, alive


def join_ended(timeout):
    """``join(t)`` of a thread that has ended but that no join or is_alive has seen end."""
    done = threading.Event()
    t = start(done.set, name=LATE)
    done.wait()
    got = outcome(lambda: t.join(timeout))
    t.join()
    return got


def join_finished(timeout):
    t = start(lambda: None)
    t.join()
    return outcome(lambda: t.join(timeout))


CASES = {
    # Lock
    "Lock acquire(False, 1.0)": calls(Lock, lambda l: l.acquire(False, 1.0)),
    "Lock acquire(blocking=False, timeout=0)": calls(Lock, lambda l: l.acquire(blocking=False, timeout=0)),
    "Lock acquire(False, -1)": calls(Lock, lambda l: l.acquire(False, -1), lambda l: l.locked()),
    "Lock acquire(False, -1.0)": calls(Lock, lambda l: l.acquire(False, -1.0)),
    "Lock acquire(timeout=-2)": calls(Lock, lambda l: l.acquire(timeout=-2)),
    "Lock acquire(timeout=nan)": calls(Lock, lambda l: l.acquire(timeout=NAN)),
    "Lock acquire(timeout=1e300)": calls(Lock, lambda l: l.acquire(timeout=HUGE)),
    "Lock acquire(timeout=inf)": calls(Lock, lambda l: l.acquire(timeout=INF)),
    "Lock acquire(timeout=None)": calls(Lock, lambda l: l.acquire(timeout=None)),
    "Lock acquire(timeout='x')": calls(Lock, lambda l: l.acquire(timeout="x")),
    "Lock acquire(False, nan)": calls(Lock, lambda l: l.acquire(False, NAN)),
    "Lock acquire(False, 'x')": calls(Lock, lambda l: l.acquire(False, "x")),
    "Lock acquire(False, None)": calls(Lock, lambda l: l.acquire(False, None)),
    "Lock held, acquire(timeout=-0.9999999999) by another": lambda: acquire_released_by_another(Lock, -0.9999999999),
    "Lock held, acquire(timeout=-1) by another": lambda: acquire_released_by_another(Lock, -1),
    "Lock acquire(1, 2, 3)": types_only(calls(Lock, lambda l: l.acquire(1, 2, 3))),
    "Lock acquire(blocking=None)": calls(Lock, lambda l: l.acquire(None), lambda l: l.acquire(None)),
    "Lock held, acquire(timeout=0)": calls(held(Lock), lambda l: l.acquire(timeout=0)),
    "Lock held, acquire(False)": calls(held(Lock), lambda l: l.acquire(False)),
    "Lock held, acquire(timeout=0.05)": calls(held(Lock), lambda l: l.acquire(timeout=0.05)),
    "Lock held, acquire(timeout=-1.0000000001)": calls(held(Lock), lambda l: l.acquire(timeout=-1.0000000001)),
    "Lock with": calls(Lock, lambda l: l.__enter__(), lambda l: l.locked(), lambda l: l.__exit__(None, None, None),
                       lambda l: l.locked()),
    # RLock
    "RLock acquire(blocking=False, timeout=5)": calls(RLock, lambda l: l.acquire(blocking=False, timeout=5)),
    "RLock acquire(False, nan)": calls(RLock, lambda l: l.acquire(False, NAN)),
    "RLock acquire(False, 'x')": calls(RLock, lambda l: l.acquire(False, "x")),
    "RLock owned, acquire(False, 5)": calls(held(RLock), lambda l: l.acquire(False, 5), lambda l: l.release(),
                                            lambda l: l._is_owned()),
    "RLock owned, acquire(False, nan)": calls(held(RLock), lambda l: l.acquire(False, NAN), lambda l: l.release()),
    "RLock held by another, acquire(timeout=-0.9999999999)": lambda: acquire_released_by_another(
        RLock, -0.9999999999),
    "RLock acquire(timeout=-2)": calls(RLock, lambda l: l.acquire(timeout=-2)),
    "RLock acquire(timeout=1e300)": calls(RLock, lambda l: l.acquire(timeout=HUGE)),
    "RLock owned, acquire(timeout=-2)": calls(held(RLock), lambda l: l.acquire(timeout=-2)),
    "RLock owned twice, release thrice": calls(held(RLock), lambda l: l.acquire(), lambda l: l.release(),
                                               lambda l: l.release()),
    "RLock acquire(timeout=nan)": calls(RLock, lambda l: l.acquire(timeout=NAN)),
    # Condition
    "Condition('x')": lambda: outcome(lambda: threading.Condition("x")),
    "Condition(None) notify": calls(lambda: threading.Condition(None), lambda c: c.notify()),
    "Condition(RLock) held twice, wait(0)": calls(Cond, lambda c: c.acquire(), lambda c: c.acquire(),
                                                  lambda c: c.wait(0), lambda c: c.release(), lambda c: c._is_owned(),
                                                  lambda c: c.release(), lambda c: c._is_owned()),
    "Condition notify without the lock": calls(Cond, lambda c: c.notify()),
    "Condition notify_all without the lock": calls(Cond, lambda c: c.notify_all()),
    "Condition wait without the lock": calls(Cond, lambda c: c.wait(0)),
    "Condition wait_for without the lock": calls(Cond, lambda c: c.wait_for(lambda: True, 0)),
    "Condition wait_for true, no lock": calls(Cond, lambda c: c.wait_for(lambda: 5)),
    "Condition(Lock) held by another, notify": lambda: notify_while_another_holds("Lock", lambda c: c.notify()),
    "Condition(Lock) held by another, notify_all": lambda: notify_while_another_holds(
        "Lock", lambda c: c.notify_all()),
    "Condition(RLock) held by another, notify": lambda: notify_while_another_holds("RLock", lambda c: c.notify()),
    "Condition(RLock) held by another, wait": lambda: notify_while_another_holds("RLock", lambda c: c.wait(0)),
    "Condition(Lock) free, notify": calls(lambda: threading.Condition(threading.Lock()), lambda c: c.notify()),
    "Condition(Lock) free, wait": calls(lambda: threading.Condition(threading.Lock()), lambda c: c.wait(0)),
    "Condition notify(-1), nobody waits": calls(Cond, lambda c: with_lock(c, lambda c: c.notify(-1))),
    "Condition notify(0), nobody waits": calls(Cond, lambda c: with_lock(c, lambda c: c.notify(0))),
    "Condition wait(nan)": calls(Cond, lambda c: with_lock(c, lambda c: c.wait(NAN))),
    "Condition wait('x')": calls(Cond, lambda c: with_lock(c, lambda c: c.wait("x"))),
    "Condition wait_for(false, -1)": calls(Cond, lambda c: with_lock(c, lambda c: c.wait_for(lambda: 0, -1))),
    "Condition wait_for(false, 0)": calls(Cond, lambda c: with_lock(c, lambda c: c.wait_for(lambda: [], 0))),
    "Condition wait_for(false, 0.05)": calls(Cond, lambda c: with_lock(c, lambda c: c.wait_for(lambda: "", 0.05))),
    "Condition wait_for(false, inf)": calls(Cond, lambda c: with_lock(c, lambda c: c.wait_for(lambda: 0, INF))),
    "Condition wait_for(false, 'x')": calls(Cond, lambda c: with_lock(c, lambda c: c.wait_for(lambda: 0, "x"))),
    "Condition wait_for(true, 'x')": calls(Cond, lambda c: with_lock(c, lambda c: c.wait_for(lambda: 7, "x"))),
    "Condition wait_for notified, timeout=None": lambda: cond_wait_for_notified(None),
    "Condition wait_for notified, timeout=nan": lambda: cond_wait_for_notified(NAN),
    "Condition wait_for notified, timeout=5": lambda: cond_wait_for_notified(5),
    "Condition notify(1) of 3 waiters": lambda: notify_n(1),
    "Condition notify(2) of 3 waiters": lambda: notify_n(2),
    "Condition notify(0) of 3 waiters": lambda: notify_n(0),
    "Condition notify(5) of 3 waiters": lambda: notify_n(5),
    "Condition notify(-1) of 3 waiters": lambda: notify_n(-1),
    "Condition notify(1.5) of 3 waiters": lambda: notify_n(1.5),
    "Condition notify(0.5) of 3 waiters": lambda: notify_n(0.5),
    "Condition notify('x') of 3 waiters": lambda: notify_n("x"),
    "Condition notify('x'), nobody waits": calls(Cond, lambda c: with_lock(c, lambda c: c.notify("x"))),
    # Semaphore, BoundedSemaphore
    "Semaphore(-1)": lambda: outcome(lambda: threading.Semaphore(-1)),
    "Semaphore('x')": lambda: outcome(lambda: threading.Semaphore("x"))[0],
    "Semaphore(0) release(0)": calls(Sem(0), lambda s: s.release(0), lambda s: s.acquire(False)),
    "Semaphore(0) release(-1)": calls(Sem(0), lambda s: s.release(-1)),
    "Semaphore(0) release(2)": calls(Sem(0), lambda s: s.release(2), lambda s: s.acquire(False),
                                     lambda s: s.acquire(False), lambda s: s.acquire(False)),
    "Semaphore acquire(False, 1)": calls(Sem(1), lambda s: s.acquire(False, 1)),
    "Semaphore acquire(False, None)": calls(Sem(1), lambda s: s.acquire(False, None)),
    "Semaphore(1) acquire(timeout=nan)": calls(Sem(1), lambda s: s.acquire(timeout=NAN)),
    "Semaphore(0) acquire(timeout=-1)": calls(Sem(0), lambda s: s.acquire(timeout=-1)),
    "Semaphore(0) acquire(timeout=inf)": calls(Sem(0), lambda s: s.acquire(timeout=INF)),
    "Semaphore(0) acquire(timeout=0.05)": calls(Sem(0), lambda s: s.acquire(timeout=0.05)),
    "Semaphore(1) acquire(timeout='x')": calls(Sem(1), lambda s: s.acquire(timeout="x")),
    "Semaphore(0) acquire(timeout='x')": calls(Sem(0), lambda s: s.acquire(timeout="x")),
    "Semaphore(0) released by another, acquire(timeout=nan)": lambda: sem_acquire_released_by_another(NAN),
    "Semaphore(0.5) acquire thrice": calls(Sem(0.5), lambda s: s.acquire(False), lambda s: s.acquire(False),
                                           lambda s: s.acquire(False)),
    "Semaphore(0) release(1.5)": calls(Sem(0), lambda s: s.release(1.5), lambda s: s.acquire(False),
                                       lambda s: s.acquire(False)),
    "BoundedSemaphore(3) release(1.5)": calls(BSem(3), lambda s: s.acquire(), lambda s: s.acquire(),
                                              lambda s: s.release(1.5), lambda s: s.acquire(False)),
    "Semaphore(0) released by another, acquire(timeout=5)": lambda: sem_acquire_released_by_another(5),
    "BoundedSemaphore over-release": calls(BSem(1), lambda s: s.release(), lambda s: s.acquire(False)),
    "BoundedSemaphore(2) release(2) after 1": calls(BSem(2), lambda s: s.acquire(), lambda s: s.release(2),
                                                    lambda s: s.release(1), lambda s: s.acquire(False)),
    "BoundedSemaphore release(0)": calls(BSem(1), lambda s: s.release(0)),
    "BoundedSemaphore(-1)": lambda: outcome(lambda: threading.BoundedSemaphore(-1))[0],
    # Event
    "Event clear, wait(nan)": calls(Event, lambda e: e.wait(NAN)),
    "Event clear, wait('x')": calls(Event, lambda e: e.wait("x")),
    "Event set, wait('x')": calls(Event, lambda e: e.set(), lambda e: e.wait("x")),
    "Event set, wait(nan)": calls(Event, lambda e: e.set(), lambda e: e.wait(NAN)),
    "Event set, wait(-1)": calls(Event, lambda e: e.set(), lambda e: e.wait(-1)),
    "Event clear, wait(0.05)": calls(Event, lambda e: e.wait(0.05), lambda e: e.is_set()),
    # Barrier
    "Barrier(0)": lambda: outcome(lambda: threading.Barrier(0).parties),
    "Barrier(-1)": lambda: outcome(lambda: threading.Barrier(-1).parties),
    "Barrier('x')": lambda: outcome(lambda: threading.Barrier("x").parties),
    "Barrier(0) wait(0)": lambda: outcome(lambda: threading.Barrier(0).wait(0)),
    "Barrier(1) wait": calls(Barrier(1), lambda b: b.wait(), lambda b: b.wait(), lambda b: b.n_waiting),
    "Barrier(1) action": lambda: barrier_parties(1, action=lambda: None),
    "Barrier(1) action raises": lambda: barrier_parties(1, action=_raise),
    "Barrier(1) wait('x')": calls(Barrier(1), lambda b: b.wait("x")),
    "Barrier(2) wait(0)": calls(Barrier(2), lambda b: b.wait(0), lambda b: b.broken, lambda b: b.n_waiting,
                                lambda b: b.wait()),
    "Barrier(2) wait(-1)": calls(Barrier(2), lambda b: b.wait(-1), lambda b: b.broken),
    "Barrier(2) wait(0.05)": calls(Barrier(2), lambda b: b.wait(0.05), lambda b: b.broken, lambda b: b.n_waiting),
    "Barrier(2, timeout=0.05) wait": calls(Barrier(2, timeout=0.05), lambda b: b.wait(), lambda b: b.broken),
    "Barrier(2) abort, wait": calls(Barrier(2), lambda b: b.abort(), lambda b: b.wait(), lambda b: b.broken,
                                    lambda b: b.n_waiting),
    "Barrier(2) abort, reset, state": calls(Barrier(2), lambda b: b.abort(), lambda b: b.reset(),
                                            lambda b: (b.broken, b.n_waiting, b.parties)),
    "Barrier(2) two parties": lambda: barrier_parties(2),
    "Barrier(2) two parties, wait(nan)": lambda: barrier_parties(2, NAN),
    "Barrier(2, timeout=nan) two parties": lambda: barrier_parties(2, timeout=None, default=NAN),
    "Barrier(2) two parties, wait(5)": lambda: barrier_parties(2, 5),
    "Barrier(3) three parties, action": lambda: barrier_parties(3, action=lambda: None),
    "Barrier(2) action raises": lambda: barrier_parties(2, action=_raise),
    "Barrier(2) action raises, reset, reused": barrier_action_fails_then_reset,
    "Barrier(2) wait('x') leaves it whole": lambda: barrier_bad_timeout_leaves_it_whole("x"),
    "Barrier(2) wait(inf) leaves it whole": lambda: barrier_bad_timeout_leaves_it_whole(INF),
    "Barrier(2) a waiter, abort": barrier_waiter_then_abort,
    "Barrier(2) a party waits again, timeout 0": barrier_rewait_while_the_other_leaves,
    "Barrier(2) a waiter, reset": barrier_waiter_then_reset,
    # Queue
    "Queue(-1) unbounded": calls(Queue(-1), lambda q: [q.put(i, block=False) for i in range(3)], lambda q: q.full(),
                                 lambda q: q.qsize()),
    "Queue(0) unbounded": calls(Queue(0), lambda q: q.put(1, False), lambda q: q.full(), lambda q: q.maxsize),
    "Queue unbounded, put(timeout=nan)": calls(Queue(0), lambda q: q.put(1, timeout=NAN), lambda q: q.qsize()),
    "Queue unbounded, put(timeout=-1)": calls(Queue(0), lambda q: q.put(1, timeout=-1), lambda q: q.qsize()),
    "Queue unbounded, put(timeout='x')": calls(Queue(0), lambda q: q.put(1, timeout="x"), lambda q: q.qsize()),
    "Queue(-1) put(timeout=-1)": calls(Queue(-1), lambda q: q.put(1, timeout=-1), lambda q: q.qsize()),
    "Queue(1) full, put(timeout=nan), freed": lambda: queue_put_freed_by_another(NAN),
    "Queue empty, get(timeout=nan), put by another": lambda: queue_get_put_by_another(NAN),
    "LifoQueue empty, get(timeout=nan), put by another": lambda: queue_get_put_by_another(NAN, "LifoQueue"),
    "PriorityQueue empty, get(timeout=nan), put by another": lambda: queue_get_put_by_another(NAN, "PriorityQueue"),
    "Queue('x') put": calls(Queue("x"), lambda q: q.put(1)),
    "Queue(2) not full, put(timeout=-1)": calls(Queue(2), lambda q: q.put(1, timeout=-1), lambda q: q.qsize()),
    "Queue(2) not full, put(timeout=nan)": calls(Queue(2), lambda q: q.put(1, timeout=NAN), lambda q: q.qsize()),
    "Queue(1) full, put(False, -1)": calls(filled(Queue(1), 0), lambda q: q.put(1, False, -1)),
    "Queue(1) full, put_nowait": calls(filled(Queue(1), 0), lambda q: q.put_nowait(1)),
    "Queue(1) full, put(timeout=0.05)": calls(filled(Queue(1), 0), lambda q: q.put(1, timeout=0.05)),
    "Queue(1) full, put(timeout=5), freed": lambda: queue_put_freed_by_another(5),
    "Queue one item, get(timeout=-1)": calls(filled(Queue(), 1), lambda q: q.get(timeout=-1)),
    "Queue one item, get(timeout=nan)": calls(filled(Queue(), 1), lambda q: q.get(timeout=NAN)),
    "Queue one item, get(timeout='x')": calls(filled(Queue(), 1), lambda q: q.get(timeout="x")),
    "Queue one item, get(False, 'x')": calls(filled(Queue(), 1), lambda q: q.get(False, "x")),
    "Queue empty, get(False, -1)": calls(Queue(), lambda q: q.get(False, -1)),
    "Queue empty, get_nowait": calls(Queue(), lambda q: q.get_nowait()),
    "Queue empty, get(timeout=0.05)": calls(Queue(), lambda q: q.get(timeout=0.05)),
    "Queue empty, get(timeout=5), put by another": lambda: queue_get_put_by_another(5),
    "Queue task_done too many": calls(filled(Queue(), 1), lambda q: q.get(), lambda q: q.task_done(),
                                      lambda q: q.task_done(), lambda q: q.join(), lambda q: q.unfinished_tasks),
    "Queue task_done on empty": calls(Queue(), lambda q: q.task_done()),
    "Queue join with nothing put": calls(Queue(), lambda q: q.join()),
    "Queue(2.5) three put_nowait": calls(Queue(2.5), lambda q: [q.put_nowait(i) for i in range(2)],
                                         lambda q: q.put_nowait(2), lambda q: q.full()),
    "Queue('x') full()": calls(Queue("x"), lambda q: q.full()),
    "PriorityQueue uncomparable": calls(Queue(0, "PriorityQueue"), lambda q: q.put(1), lambda q: q.put("a"),
                                        lambda q: q.qsize(), lambda q: q.unfinished_tasks),
    "PriorityQueue order": calls(filled(Queue(0, "PriorityQueue"), 3, 1, 2), lambda q: [q.get() for _ in range(3)]),
    "LifoQueue order": calls(filled(Queue(0, "LifoQueue"), 3, 1, 2), lambda q: [q.get() for _ in range(3)]),
    "SimpleQueue one item, get(timeout=nan)": calls(filled(SimpleQueue, 1), lambda q: q.get(timeout=NAN)),
    "SimpleQueue one item, get(timeout='x')": calls(filled(SimpleQueue, 1), lambda q: q.get(timeout="x")),
    "SimpleQueue one item, get(timeout=-1e-10)": calls(filled(SimpleQueue, 1), lambda q: q.get(timeout=-1e-10)),
    "SimpleQueue empty, get(timeout=-1e-10)": calls(SimpleQueue, lambda q: q.get(timeout=-1e-10)),
    "SimpleQueue empty, get(timeout=nan)": calls(SimpleQueue, lambda q: q.get(timeout=NAN)),
    "SimpleQueue empty, get(timeout=nan), put by another": lambda: queue_get_put_by_another(NAN, "SimpleQueue"),
    "SimpleQueue empty, get(False, 'x')": calls(SimpleQueue, lambda q: q.get(False, "x")),
    "SimpleQueue put(block=False, timeout=-1)": calls(SimpleQueue, lambda q: q.put(1, False, -1), lambda q: q.get()),
    # Thread.join
    "join alive thread, nan": lambda: join_alive(NAN),
    "join alive thread, 'x'": lambda: join_alive("x"),
    "join alive thread, inf": lambda: join_alive(INF),
    "join ended thread, nan": lambda: join_ended(NAN),
    "join ended thread, inf": lambda: join_ended(INF),
    "join ended thread, 0": lambda: join_ended(0),
    "join finished thread, 'x'": lambda: join_finished("x"),
    "join alive thread, -1": lambda: join_alive(-1),
    "join alive thread, 0.05": lambda: join_alive(0.05),
    "join finished thread, nan": lambda: join_finished(NAN),
    "join finished thread, inf": lambda: join_finished(INF),
    # time.sleep
    "sleep(-1)": lambda: outcome(lambda: time.sleep(-1)),
    "sleep(-1e-10)": lambda: outcome(lambda: time.sleep(-1e-10)),
    "sleep(nan)": lambda: outcome(lambda: time.sleep(NAN)),
    "sleep('x')": lambda: outcome(lambda: time.sleep("x")),
    "sleep(None)": lambda: outcome(lambda: time.sleep(None)),
    "sleep(inf)": lambda: outcome(lambda: time.sleep(INF)),
    "sleep(1e300)": lambda: outcome(lambda: time.sleep(HUGE)),
    "sleep(0)": lambda: outcome(lambda: time.sleep(0)),
    "sleep(-0.0)": lambda: outcome(lambda: time.sleep(-0.0)),
    "sleep(Fraction(1, 2))": lambda: outcome(lambda: time.sleep(Fraction(1, 2))),
    "sleep(2**70)": lambda: outcome(lambda: time.sleep(2**70))[0],
    "sleep(False)": lambda: outcome(lambda: time.sleep(False)),
    "Lock held, acquire(timeout=False)": calls(held(Lock), lambda l: l.acquire(timeout=False)),
    "sleep(1, 2)": lambda: outcome(lambda: time.sleep(1, 2))[0],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_call_behaves_as_the_real_one_under_interleavings(name):
    scenario = CASES[name]
    real = scenario()
    seen = set()
    # A scenario is a few dozen steps: a spin (a false hang) shows within 2,000, and is not minimized.
    result = interleavings.check(lambda: seen.add(scenario()), max_steps=2_000, minimize=False, allow_alive=(LATE,))
    assert result.verdict == "ok", interleavings.render(result)
    assert seen == {real}, f"real: {real!r}; under interleavings: {seen!r}"


def test_a_barrier_action_that_calls_the_barrier_is_a_deadlock_as_in_cpython():
    result = interleavings.check(barrier_action_aborts_it, minimize=False)
    assert result.verdict == "deadlock", interleavings.render(result)
    assert "running the action" in interleavings.render(result)


_ARMED = [False]


def _ctrl_c_in_the_join():
    if _ARMED[0]:
        _ARMED[0] = False
        raise KeyboardInterrupt


def test_a_ctrl_c_in_join_leaves_the_thread_as_this_python_does():
    """Before 3.13, CPython's join (``_wait_for_tstate_lock``) catches an exception from its lock wait,
    releases the *running* thread's lock and records the thread as ended: after a Ctrl-C in ``join()``,
    ``is_alive()`` is False and a second ``join()`` returns at once, while the thread still runs (measured
    on 3.11 with a real SIGINT; the bad-timeout cases above take the same path). 3.13's thread handle
    does not."""
    seen = set()

    def body():
        go = threading.Event()
        t = threading.Thread(target=go.wait, name=LATE)
        t.start()
        helper = threading.Thread(target=go.set, name="helper")
        helper.start()
        _ARMED[0] = True
        try:
            t.join()
        except KeyboardInterrupt:
            seen.add(("interrupted", t.is_alive()))
            t.join()
            seen.add(("joined again", t.is_alive()))
        _ARMED[0] = False
        helper.join()

    interrupt = interleavings.Interrupt(_ctrl_c_in_the_join, threads="main", when="blocked")
    result = interleavings.check(body, interrupts=[interrupt], minimize=False, allow_alive=(LATE,))
    assert result.verdict == "ok", interleavings.render(result)
    if sys.version_info < (3, 13):
        assert seen == {("interrupted", False), ("joined again", False)}
    else:
        assert ("joined again", False) in seen


def test_a_wait_on_a_condition_whose_lock_another_thread_holds_goes_ahead_as_in_cpython():
    """CPython's Condition over a plain Lock counts the lock held by anyone as owned: ``wait`` by a thread
    that does not hold it releases the holder's lock (a Lock may be released by any thread), times out, and
    takes the lock. With ``lock_release="any"`` that is what the check does; by default the release of
    another thread's lock is reported, as for ``Lock.release``."""
    def scenario():
        cond = threading.Condition(threading.Lock())
        held, done = threading.Event(), threading.Event()

        def holder():
            cond.acquire()
            held.set()
            done.wait()

        t = start(holder)
        held.wait()
        got = outcome(lambda: cond.wait(0))
        mine = outcome(lambda: cond.acquire(False))  # main holds it now
        cond.release()
        done.set()
        t.join()
        return got, mine

    real = scenario()
    seen = set()
    result = interleavings.check(lambda: seen.add(scenario()), lock_release="any", minimize=False)
    assert result.verdict == "ok", interleavings.render(result)
    assert seen == {real} == {(("returned", "False"), ("returned", "False"))}
    result = interleavings.check(scenario, minimize=False)
    assert result.verdict == "non_owner_release", interleavings.render(result)


def test_a_ctrl_c_in_a_barrier_wait_leaves_the_barrier_whole_as_in_cpython():
    """CPython's Barrier.wait uncounts its thread in a ``finally``: a KeyboardInterrupt while it waits
    neither breaks the barrier nor leaves a phantom party (a wait that times out does break it)."""
    seen = set()

    def body():
        barrier = threading.Barrier(2)
        other = start(threading.Event().set)  # a thread to move while main waits: the interrupt's moment
        _ARMED[0] = True
        got = outcome(lambda: barrier.wait(5))
        _ARMED[0] = False
        other.join()
        seen.add((got, barrier.broken, barrier.n_waiting))

    interrupt = interleavings.Interrupt(_ctrl_c_in_the_join, threads="main", when="blocked")
    result = interleavings.check(body, interrupts=[interrupt], minimize=False)
    assert result.verdict == "ok", interleavings.render(result)
    assert seen == {(("KeyboardInterrupt", ""), False, 0), (("BrokenBarrierError", ""), True, 0)}


def test_dpor_orders_a_failing_join_against_another_threads_is_alive():
    """A join that raises records the running thread as ended (before 3.13): it changes what another
    thread's is_alive() says, so DPOR must try both orders, as plain DFS does."""
    def outcomes_of(reduce):
        seen = set()

        def body():
            go = threading.Event()
            t = start(go.wait, name=LATE)
            said = []
            looker = start(lambda: said.append(t.is_alive()))
            failed = outcome(lambda: t.join(NAN))
            looker.join()
            go.set()
            seen.add((failed[0], said[0]))

        result = interleavings.check(body, reduce=reduce, minimize=False, allow_alive=(LATE,))
        assert result.verdict == "ok", interleavings.render(result)
        return seen

    plain = outcomes_of("none")
    assert outcomes_of("dpor") == plain
    if sys.version_info < (3, 13):
        assert plain == {("ValueError", True), ("ValueError", False)}


SHUT_DOWN = {  # a shut-down queue, then a call whose arguments are bad too: 3.13 raises ShutDown first
    "get(timeout=-1), empty": (0, lambda q: q.get(timeout=-1)),
    "get(timeout='x'), empty": (0, lambda q: q.get(timeout="x")),
    "put(1, timeout=-1), bounded": (1, lambda q: q.put(1, timeout=-1)),
    "put(1), maxsize 'x'": ("x", lambda q: q.put(1)),
}


@pytest.mark.skipif(not hasattr(queue.Queue, "shutdown"), reason="Queue.shutdown is new in Python 3.13")
@pytest.mark.parametrize("name", sorted(SHUT_DOWN))
def test_a_shut_down_queue_raises_shutdown_before_it_looks_at_the_arguments(name):
    """Python 3.13's Queue.get/put check ``is_shutdown`` first; the drop-in follows 3.13's source (compared
    with the real one)."""
    maxsize, call = SHUT_DOWN[name]

    def scenario():
        q = queue.Queue(maxsize)
        q.shutdown()
        return outcome(lambda: call(q))[0]

    seen = set()
    result = interleavings.check(lambda: seen.add(scenario()), minimize=False)
    assert result.verdict == "ok", interleavings.render(result)
    assert seen == {"ShutDown"}
    assert scenario() == "ShutDown"

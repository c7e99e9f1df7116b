"""Compiling primitive steps: one small function per kind, one path through them all.

Theory of operation
-------------------
A primitive step is a guard, an effect and a next label, like a user step,
but the DSL knows all three. Each kind in :data:`PRIMITIVES` says only what
is particular to it, over constant field indices:

* ``blocked(state)``  -- not enabled (an ``acquire`` of a held mutex);
* ``fault(state)``    -- taking it is a bug: the StepViolation it reports
  (a ``release`` of a mutex the thread does not hold);
* ``apply(s, state)`` -- the change, on a private list copy of the state.

:func:`_single` is the one path that composes them: blocked? -> fault? ->
apply -> next label (the fixed ``next``, or the ``next`` function's, checked
against the declared targets by :class:`Site`). ``notify_one`` under
``notify=any`` branches over the waiters, and ``wait`` is three program
counters; both are spelled out below, as are the kinds with two outcomes:
``try_acquire`` (``acquired`` or ``busy``), and ``wait_flag`` and
``sem_acquire`` with a timeout (``set`` or ``acquired``, or ``timed out``).

Condition variables are Mesa-style. ``wait`` releases the mutex and enqueues
the thread in one atomic step; the thread then sleeps (pc ``"L (asleep)"``)
until a notify removes it from the queue and moves it to ``"L (woken)"``; a
separate step re-acquires the mutex and goes to ``next``. ``notify_one``
wakes the head of the queue (``notify=fifo``) or branches over every waiter
(``notify=any``); ``notify_all`` wakes everyone. With ``spurious=on`` a
sleeping thread may also wake on its own. These are *settings* of every
model, so condvar semantics are a search dimension.

The waits real code uses:

* a timed wait (``wait(..., timeout=...)``) adds a ``timed out`` branch to
  the sleep, enabled only while the wait's ``until`` is false (a timeout
  once the predicate holds would mask a lost wakeup), and a fourth program
  counter, ``"L (timed out)"``, that re-acquires the mutex;
* a mutex named by a function ``(s, me) -> name`` (``acquire``,
  ``try_acquire``, ``release``) is looked up when the step runs
  (:func:`_mutex`);
* ``spawn`` moves a thread declared ``start=False`` from ``"(not started)"``
  to its first label; starting it twice is a violation, like
  ``Thread.start()``.

A function of the model that raises (a ``next``, a chooser, an ``until``)
becomes a StepError naming the thread, the step and the user's line
(``usererror.py``).

Decisions, and why
------------------
* Footprints (fields read and written) are exact for primitives: a notify
  also writes the pc of every thread that may wait on its condvar, so
  partial-order reduction never reorders a notify with a wait.
* A thread asleep without ``spurious=on`` has no fire function at all (its
  pc maps to None): only a notify can move it. Nor does a thread not started.
* A chosen mutex's footprint is every mutex plus what the chooser reads:
  which one a step takes is known only when it runs.
* A timeout is a real move, not a spurious one: time passes. A thread that
  can time out is not stuck, and fairness counts it; so a timed wait's
  spurious wakeup is a branch of the same sleep, enabled like the timeout.
"""

from __future__ import annotations

from typing import Any, Callable

from .layout import Layout, Site
from .machine import StepInfo
from .graph import did_you_mean
from .program import ASLEEP, NOT_STARTED, TIMED_OUT, WOKEN
from .violations import USER_ERRORS, ModelError, StepViolation, truth

__all__ = ["PRIMITIVES"]


def _single(site: Site, blocked: Callable | None = None, fault: Callable | None = None,
            apply: Callable | None = None, next_pc: str | None = None) -> Callable:
    """The one path of a primitive step: blocked? -> fault? -> apply -> next. One successor, branch 0."""
    my_pc = site.my_pc
    nxt = next_pc or site.static_next
    goto = None if nxt is not None else site.goto()

    def fire(state):
        try:
            if blocked is not None and blocked(state):
                return []
            if fault is not None:
                bad = fault(state)
                if bad is not None:
                    return [(0, bad)]
            s = list(state)
            if apply is not None:
                apply(s, state)
            s[my_pc] = nxt if goto is None else goto(s)
        except ModelError:
            raise
        except USER_ERRORS as e:  # a next function or a mutex chooser of the model raised
            raise site.user_error(e, state) from e
        return [(0, tuple(s))]
    return fire


def _mutex(lay: Layout, site: Site) -> tuple[Callable[[tuple], int], frozenset[int] | None]:
    """``state -> field`` of the step's mutex, and the fields it may read to choose (None: unknown).

    A fixed name is one field. A mutex chosen by expression (``acquire(label,
    lambda s, me: me.first)``) is looked up when the step runs; its footprint
    is every mutex plus what the chooser reads.
    """
    obj = site.spec.obj
    if not callable(obj):
        mi = lay.index("mutex", obj, site.label)
        return (lambda state: mi), frozenset((mi,))
    choose, fp = lay.evaluator(site.ti, obj)
    label, known = site.label, lay.mutex_index

    def which(state: tuple) -> int:
        name = choose(state)
        try:
            return known[name]
        except (KeyError, TypeError):
            raise ModelError(f"step {label!r} chose undeclared mutex {name!r}" + did_you_mean(name, known)) from None
    return which, None if fp is None else fp[0] | frozenset(known.values())


def _mutex_fp(site: Site, fields: frozenset[int] | None) -> Any:
    if fields is None:
        return None
    return site.prim_fp(*fields)


def _acquire(lay: Layout, site: Site) -> list:
    which, fields = _mutex(lay, site)
    ti = site.ti

    def apply(s, state):
        s[which(state)] = ti
    fire = _single(site, blocked=lambda state: state[which(state)] != -1, apply=apply)
    return [(site.label, fire, site.info(fp=_mutex_fp(site, fields)))]


def _try_acquire(lay: Layout, site: Site) -> list:
    """``acquire(blocking=False)``: branch 0 ``acquired`` (the mutex was free), branch 1 ``busy`` (go to ``busy``)."""
    which, fields = _mutex(lay, site)
    ti, my_pc, busy = site.ti, site.my_pc, site.spec.alt
    taken = _single(site, apply=lambda s, state: s.__setitem__(which(state), ti))

    def fire(state):
        try:
            free = state[which(state)] == -1
        except ModelError:
            raise
        except USER_ERRORS as e:  # the mutex chooser raised
            raise site.user_error(e, state) from e
        if free:
            return taken(state)
        s = list(state)
        s[my_pc] = busy
        return [(1, tuple(s))]
    return [(site.label, fire, site.info(branches=("acquired", "busy"), fp=_mutex_fp(site, fields)))]


def _release(lay: Layout, site: Site) -> list:
    which, fields = _mutex(lay, site)
    ti, thread = site.ti, site.thread_name
    names = {i: n for n, i in lay.mutex_index.items()}

    def fault(state):
        mi = which(state)
        if state[mi] != ti:
            return StepViolation("invariant", f"{thread} releases {names[mi]} it does not hold")
        return None

    def apply(s, state):
        s[which(state)] = -1
    fire = _single(site, fault=fault, apply=apply)
    return [(site.label, fire, site.info(fp=_mutex_fp(site, fields)))]


def _wait(lay: Layout, site: Site) -> list:
    """Three program counters: the wait itself, asleep (spurious wakeup or nothing), woken (re-acquire).

    A timed wait (``timeout=``) has a fourth, ``timed out`` (re-acquire, then
    the timeout's label), and its asleep counter is :func:`_timed_sleep`.
    """
    spec, label, ti = site.spec, site.label, site.ti
    ci = lay.index("condvar", spec.obj, label)
    mi = lay.index("mutex", spec.obj2, label)
    asleep, woken = label + ASLEEP, label + WOKEN
    message = f"{site.thread_name} waits on {spec.obj} without holding {spec.obj2}"

    def release_and_enqueue(s, state):
        s[mi] = -1
        s[ci] = state[ci] + (ti,)

    def reacquire(s, state):
        s[mi] = ti

    def reacquire_and_leave(s, state):  # a timed-out waiter leaves the queue only once it holds the mutex
        s[mi] = ti
        if ti in state[ci]:
            s[ci] = tuple(x for x in state[ci] if x != ti)

    both = frozenset((mi, ci))
    out = [(label, _single(site, fault=lambda state: StepViolation("invariant", message) if state[mi] != ti
                           else None, apply=release_and_enqueue, next_pc=asleep),
            site.info(fp=(both, both)))]
    if spec.kind == "timed_wait":
        out.append(_timed_sleep(lay, site, ci))
        timed_out = label + TIMED_OUT
        out.append((timed_out, _single(site, blocked=lambda state: state[mi] != -1, apply=reacquire_and_leave,
                                       next_pc=spec.alt),
                    StepInfo(ti, timed_out, f"{label}: timed out, reacquire {spec.obj2}", "wake", (), spec.obj, None,
                             site.prim_fp(mi, ci))))
    elif lay.spurious:
        out.append((asleep, _single(site, apply=_leave_queue(ci, ti), next_pc=woken),
                    StepInfo(ti, asleep, f"{label}: spurious wakeup", "spurious", (), spec.obj, None,
                             (frozenset((ci,)), frozenset((ci,))))))
    else:
        out.append((asleep, None, StepInfo(ti, asleep, f"{label}: asleep", "asleep", (), spec.obj)))
    out.append((woken, _single(site, blocked=lambda state: state[mi] != -1, apply=reacquire),
                StepInfo(ti, woken, f"{label}: woken, reacquire {spec.obj2}", "wake", (), spec.obj, None,
                         site.prim_fp(mi))))
    return out


def _leave_queue(ci: int, ti: int) -> Callable:
    """A spurious wakeup's effect: the thread is out of the condvar's queue at once."""
    def leave_queue(s, state):
        s[ci] = tuple(x for x in state[ci] if x != ti)
    return leave_queue


def _timed_sleep(lay: Layout, site: Site, ci: int) -> tuple:
    """The asleep counter of a timed wait: branch ``timed out`` (and ``spurious wakeup`` with ``spurious=on``).

    A timed-out thread stays in the queue until it holds the mutex again, as
    in ``threading.Condition.wait``: its waiter lock timed out, but it leaves
    ``_waiters`` only after it retakes the lock. A notify meanwhile goes to
    it if it is first (``notify`` releases and removes the head) and is
    spent there: the thread still returns from its timeout. So a design
    whose waiter gives up on a timeout while another waits can lose a
    wakeup, as it does in CPython. A spurious wakeup leaves the queue.

    Both branches happen without a notify, and both are enabled only while the
    wait's ``until`` is false: once what the thread waits for holds, a
    timeout would only hide a lost wakeup, so then only a notify moves it. A
    timeout is a real move (time passes), not a spurious one: a thread that
    can time out is not stuck, and fairness counts it.
    """
    spec, label, ti, my_pc = site.spec, site.label, site.ti, site.my_pc
    asleep = label + ASLEEP
    leave = _leave_queue(ci, ti)
    targets = [(0, label + TIMED_OUT)] + ([(1, label + WOKEN)] if lay.spurious else [])
    if spec.until is not None:
        holds, fp = lay.evaluator(ti, spec.until)
    else:
        holds, fp = (lambda state: False), (frozenset(), frozenset())

    what = f"the until of thread {site.thread_name!r}'s wait {label!r}"

    def fire(state):
        try:
            if (h := holds(state)) is True or (h is not False and truth(h, what)):
                return []
        except ModelError:
            raise
        except USER_ERRORS as e:  # the wait's until raised
            raise site.user_error(e, state) from e
        out = []
        for b, pc in targets:
            s = list(state)
            if b:  # a spurious wakeup leaves the queue; a timeout leaves it when it retakes the mutex
                leave(s, state)
            s[my_pc] = pc
            out.append((b, tuple(s)))
        return out
    branches = ("timed out", "spurious wakeup")[:len(targets)]
    info_fp = None if fp is None else (fp[0] | {ci}, frozenset((ci,)))
    return asleep, fire, StepInfo(ti, asleep, f"{label}: asleep", "timed_wait", branches, spec.obj, None, info_fp)


def _notify(lay: Layout, site: Site) -> list:
    """``notify_all`` wakes the whole queue; ``notify_one`` its head (fifo) or, with ``notify=any``, any waiter."""
    spec, pcs, woken_pc = site.spec, lay.pc_index, lay.woken_pc
    ci = lay.index("condvar", spec.obj, site.label)

    def wake(s, who):
        p = pcs[who]
        s[p] = woken_pc[s[p]]

    def wake_all(s, state):
        for who in state[ci]:
            wake(s, who)
        s[ci] = ()

    def wake_head(s, state):
        q = state[ci]
        if q:
            wake(s, q[0])
            s[ci] = q[1:]

    fault = _unheld_notify(lay, site)
    if spec.kind == "notify_all":
        fire = _single(site, fault=fault, apply=wake_all)
    elif not lay.notify_any:
        fire = _single(site, fault=fault, apply=wake_head)
    else:
        fire = _notify_any(site, ci, wake, fault)
    info = site.info(fp=site.prim_fp(ci, writes_also=lay.waiter_pcs(spec.obj)))
    return [(site.label, fire, info)]


def _unheld_notify(lay: Layout, site: Site) -> Callable | None:
    """The fault of a notify by a thread that does not hold its condvar's mutex (None: nothing to check).

    ``threading.Condition.notify`` raises ``RuntimeError`` there, so such a
    design cannot run. Whether the thread holds the mutex is decided by the
    path taken (a computed ``next`` may skip the acquire), so it is a
    violation the search finds, with its shortest trace, as a wait without
    the mutex is. No footprint change: only the thread's own steps make it
    hold the mutex or not (another's acquire takes a free mutex, its release
    frees its own), so partial-order reduction may still reorder the notify.
    """
    cond = site.spec.obj
    mutex = lay.cond_mutex.get(cond)
    if mutex is None or cond in lay.b.unlocked_notify:
        return None
    mi, ti = lay.mutex_index[mutex], site.ti
    message = (f"{site.thread_name} notifies {cond} without holding {mutex} "
               "(Condition.notify raises RuntimeError: cannot notify on un-acquired lock)")
    return lambda state: StepViolation("invariant", message) if state[mi] != ti else None


def _notify_any(site: Site, ci: int, wake: Callable, fault: Callable | None) -> Callable:
    """``notify_one`` under ``notify=any``: branch k wakes the k-th waiter; an empty queue is one move."""
    one = _single(site, fault=fault)
    my_pc = site.my_pc
    nxt = site.static_next
    goto = None if nxt is not None else site.goto()

    def fire(state):
        q = state[ci]
        if not q or (fault is not None and fault(state) is not None):
            return one(state)
        out = []
        try:
            for k, who in enumerate(q):
                s = list(state)
                wake(s, who)
                s[ci] = q[:k] + q[k + 1:]
                s[my_pc] = nxt if goto is None else goto(s)
                out.append((k, tuple(s)))
        except ModelError:
            raise
        except USER_ERRORS as e:  # the step's next function raised
            raise site.user_error(e, state) from e
        return out
    return fire


def _or_time_out(site: Site, available: Callable[[tuple], bool], take: Callable) -> Callable:
    """A wait with a timeout: branch 0, ``take``, while ``available(state)``; else branch 1, go to the timeout's
    label. Timing out is possible only while the wait could not succeed (see ``wait``'s ``timeout``)."""
    my_pc, timed_out = site.my_pc, site.spec.alt

    def fire(state):
        if available(state):
            return take(state)
        s = list(state)
        s[my_pc] = timed_out
        return [(1, tuple(s))]
    return fire


def _sem_acquire(lay: Layout, site: Site) -> list:
    si = lay.index("semaphore", site.spec.obj, site.label)

    def apply(s, state):
        s[si] -= 1
    fire = _single(site, blocked=lambda state: state[si] <= 0, apply=apply)
    if site.spec.alt is None:
        return [(site.label, fire, site.info(fp=site.prim_fp(si)))]
    # ``queue.get(timeout=)``, ``Semaphore.acquire(timeout=)``: ``acquired``, or ``timed out`` while at zero.
    fire = _or_time_out(site, lambda state: state[si] > 0, fire)
    return [(site.label, fire, site.info(branches=("acquired", "timed out"), fp=site.prim_fp(si)))]


def _sem_release(lay: Layout, site: Site) -> list:
    sname = site.spec.obj
    si = lay.index("semaphore", sname, site.label)
    bound = lay.b.semaphores[sname][1]
    message = f"semaphore {sname} released past its bound {bound}"

    def apply(s, state):
        s[si] += 1
    over = None if bound is None else (lambda state: StepViolation("overflow", message) if state[si] >= bound
                                       else None)
    return [(site.label, _single(site, fault=over, apply=apply), site.info(fp=site.prim_fp(si)))]


def _set_flag(lay: Layout, site: Site) -> list:
    fi = lay.index("flag", site.spec.obj, site.label)

    def apply(s, state):
        s[fi] = True
    return [(site.label, _single(site, apply=apply), site.info(fp=site.prim_fp(fi)))]


def _wait_flag(lay: Layout, site: Site) -> list:
    fi = lay.index("flag", site.spec.obj, site.label)
    fp = None if site.next_fp is None else (site.next_fp[0] | {fi}, frozenset())
    if site.spec.alt is None:
        fire = _single(site, blocked=lambda state: not state[fi])
        return [(site.label, fire, site.info(fp=fp))]
    # ``Event.wait(timeout)``: branch 0 ``set``, branch 1 ``timed out`` (only while the flag is clear).
    fire = _or_time_out(site, lambda state: state[fi], _single(site))
    return [(site.label, fire, site.info(branches=("set", "timed out"), fp=fp))]


def _spawn(lay: Layout, site: Site) -> list:
    """``Thread.start()``: the named thread, declared with ``start=False``, moves to its first label."""
    name = site.spec.obj
    u = lay.thread_index(name, site.label)
    thread = lay.b.threads[u]
    if thread.start:
        raise ModelError(f"step {site.label!r} spawns {name!r}, which already starts at the beginning; "
                         f"declare it with m.thread({name!r}, ..., start=False)")
    pu, first = lay.pc_index[u], next(iter(thread.program.specs))
    message = f"{site.thread_name} starts {name} a second time (a thread can only be started once)"

    def apply(s, state):
        s[pu] = first
    fire = _single(site, fault=lambda state: StepViolation("invariant", message) if state[pu] != NOT_STARTED
                   else None, apply=apply)
    return [(site.label, fire, site.info(fp=site.prim_fp(pu)))]


#: Kind -> ``(layout, site) -> [(pc, fire or None, StepInfo)]``. ``Program`` creates exactly these kinds
#: (plus "step" and "external", compiled by user_steps.py).
PRIMITIVES: dict[str, Callable[[Layout, Site], list]] = {
    "acquire": _acquire,
    "try_acquire": _try_acquire,
    "release": _release,
    "wait": _wait,
    "timed_wait": _wait,
    "spawn": _spawn,
    "notify_one": _notify,
    "notify_all": _notify,
    "sem_acquire": _sem_acquire,
    "sem_release": _sem_release,
    "set_flag": _set_flag,
    "wait_flag": _wait_flag,
}

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
``notify=any`` is the one primitive with several successors (one per
waiter), and ``wait`` is three program counters; both are spelled out below.

Condition variables are Mesa-style. ``wait`` releases the mutex and enqueues
the thread in one atomic step; the thread then sleeps (pc ``"L (asleep)"``)
until a notify removes it from the queue and moves it to ``"L (woken)"``; a
separate step re-acquires the mutex and goes to ``next``. ``notify_one``
wakes the head of the queue (``notify=fifo``) or branches over every waiter
(``notify=any``); ``notify_all`` wakes everyone. With ``spurious=on`` a
sleeping thread may also wake on its own. These are *settings* of every
model, so condvar semantics are a search dimension.

Decisions, and why
------------------
* Footprints (fields read and written) are exact for primitives: a notify
  also writes the pc of every thread that may wait on its condvar, so
  partial-order reduction never reorders a notify with a wait.
* A thread asleep without ``spurious=on`` has no fire function at all (its
  pc maps to None): only a notify can move it.
"""

from __future__ import annotations

from typing import Callable

from .layout import Layout, Site
from .machine import StepInfo
from .program import ASLEEP, WOKEN
from .violations import StepViolation

__all__ = ["PRIMITIVES"]


def _single(site: Site, blocked: Callable | None = None, fault: Callable | None = None,
            apply: Callable | None = None, next_pc: str | None = None) -> Callable:
    """The one path of a primitive step: blocked? -> fault? -> apply -> next. One successor, branch 0."""
    my_pc = site.my_pc
    nxt = next_pc or site.static_next
    goto = None if nxt is not None else site.goto()

    def fire(state):
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
        return [(0, tuple(s))]
    return fire


def _acquire(lay: Layout, site: Site) -> list:
    mi, ti = lay.index("mutex", site.spec.obj, site.label), site.ti

    def apply(s, state):
        s[mi] = ti
    fire = _single(site, blocked=lambda state: state[mi] != -1, apply=apply)
    return [(site.label, fire, site.info(fp=site.prim_fp(mi)))]


def _release(lay: Layout, site: Site) -> list:
    mname = site.spec.obj
    mi, ti = lay.index("mutex", mname, site.label), site.ti
    message = f"{site.thread_name} releases {mname} it does not hold"

    def apply(s, state):
        s[mi] = -1
    fire = _single(site, fault=lambda state: StepViolation("invariant", message) if state[mi] != ti else None,
                   apply=apply)
    return [(site.label, fire, site.info(fp=site.prim_fp(mi)))]


def _wait(lay: Layout, site: Site) -> list:
    """Three program counters: the wait itself, asleep (spurious wakeup or nothing), woken (re-acquire)."""
    spec, label, ti = site.spec, site.label, site.ti
    ci = lay.index("condvar", spec.obj, label)
    mi = lay.index("mutex", spec.obj2, label)
    asleep, woken = label + ASLEEP, label + WOKEN
    message = f"{site.thread_name} waits on {spec.obj} without holding {spec.obj2}"

    def release_and_enqueue(s, state):
        s[mi] = -1
        s[ci] = state[ci] + (ti,)

    def leave_queue(s, state):
        s[ci] = tuple(x for x in state[ci] if x != ti)

    def reacquire(s, state):
        s[mi] = ti

    both = frozenset((mi, ci))
    out = [(label, _single(site, fault=lambda state: StepViolation("invariant", message) if state[mi] != ti
                           else None, apply=release_and_enqueue, next_pc=asleep),
            site.info(fp=(both, both)))]
    if lay.spurious:
        out.append((asleep, _single(site, apply=leave_queue, next_pc=woken),
                    StepInfo(ti, asleep, f"{label}: spurious wakeup", "spurious", (), spec.obj, None,
                             (frozenset((ci,)), frozenset((ci,))))))
    else:
        out.append((asleep, None, StepInfo(ti, asleep, f"{label}: asleep", "asleep", (), spec.obj)))
    out.append((woken, _single(site, blocked=lambda state: state[mi] != -1, apply=reacquire),
                StepInfo(ti, woken, f"{label}: woken, reacquire {spec.obj2}", "wake", (), spec.obj, None,
                         site.prim_fp(mi))))
    return out


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

    if spec.kind == "notify_all":
        fire = _single(site, apply=wake_all)
    elif not lay.notify_any:
        fire = _single(site, apply=wake_head)
    else:
        fire = _notify_any(site, ci, wake)
    info = site.info(fp=site.prim_fp(ci, writes_also=lay.waiter_pcs(spec.obj)))
    return [(site.label, fire, info)]


def _notify_any(site: Site, ci: int, wake: Callable) -> Callable:
    """``notify_one`` under ``notify=any``: branch k wakes the k-th waiter; an empty queue is one move."""
    one = _single(site)
    my_pc = site.my_pc
    nxt = site.static_next
    goto = None if nxt is not None else site.goto()

    def fire(state):
        q = state[ci]
        if not q:
            return one(state)
        out = []
        for k, who in enumerate(q):
            s = list(state)
            wake(s, who)
            s[ci] = q[:k] + q[k + 1:]
            s[my_pc] = nxt if goto is None else goto(s)
            out.append((k, tuple(s)))
        return out
    return fire


def _sem_acquire(lay: Layout, site: Site) -> list:
    si = lay.index("semaphore", site.spec.obj, site.label)

    def apply(s, state):
        s[si] -= 1
    fire = _single(site, blocked=lambda state: state[si] <= 0, apply=apply)
    return [(site.label, fire, site.info(fp=site.prim_fp(si)))]


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
    fire = _single(site, blocked=lambda state: not state[fi])
    fp = None if site.next_fp is None else (site.next_fp[0] | {fi}, frozenset())
    return [(site.label, fire, site.info(fp=fp))]


#: Kind -> ``(layout, site) -> [(pc, fire or None, StepInfo)]``. ``Program`` creates exactly these kinds
#: (plus "step" and "external", compiled by user_steps.py).
PRIMITIVES: dict[str, Callable[[Layout, Site], list]] = {
    "acquire": _acquire,
    "release": _release,
    "wait": _wait,
    "notify_one": _notify,
    "notify_all": _notify,
    "sem_acquire": _sem_acquire,
    "sem_release": _sem_release,
    "set_flag": _set_flag,
    "wait_flag": _wait_flag,
}

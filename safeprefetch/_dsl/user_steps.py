"""Compiling a user step (``step`` and ``external``): guard -> effect -> next, written once.

What it guarantees
------------------
A user step's meaning is one path, :func:`_attempt`: for one branch (or for
the step itself when it has no branches),

1. the guard decides whether the step is enabled (not enabled: no successor);
2. the effect runs on a private copy of the state; a :class:`StepViolation`
   it raises becomes the successor, so the trace ends at this step;
3. the next label is the one the effect returned, else ``next`` (the label,
   or what the ``next`` function returns). A label the step computed is
   checked against its declared targets (:class:`ModelError` otherwise).

Every function the drivers call is that path or its guard alone:
``fire(state)`` maps it over the branches, ``fire.branch(state, bi)`` takes
one, ``fire.enabled`` / ``fire.enabled_branch`` run step 1 only. So the
shortcuts cannot drift from ``fire`` (and tests/test_model_fire_parts.py
checks that they do not).

Decisions, and why
------------------
* Functions are specialized (``specialize.py``) to index the state list
  directly; when all of a step's functions are, the step builds no view at
  all, and its footprint (fields read and written) is known, which
  partial-order reduction and the live runtime's wakeups use.
* A guard that only reads, and needs no ``me``, is tested on the state tuple
  itself, before any copy: most steps of a blocked thread cost one call.
* The check of a computed label is one frozenset membership test, paid only
  when the label is computed; a fixed ``next`` was checked at compile time.
* An exception from the model's own functions (not a StepViolation, not a
  ModelError) becomes a StepError naming the thread, the label and the
  user's line (``usererror.py``). The ``try`` costs nothing until something
  raises (CPython 3.11's zero-cost exceptions).
"""

from __future__ import annotations

from functools import partial
from typing import Callable

from .layout import Layout, Site, union_fp
from .violations import USER_ERRORS, ModelError, StepViolation, truth

__all__ = ["compile_user_step"]


class _Parts:
    """A user step's specialized functions and how to call them."""

    def __init__(self, lay: Layout, site: Site):
        spec = site.spec
        self.fn, need_fn = lay.fast(site.ti, spec.fn)
        self.guard, need_guard = lay.fast(site.ti, spec.guard)
        self.need_me = need_fn or need_guard or site.need_next_me
        self.fp = union_fp([f for f in (self.fn, self.guard, site.next_fn) if f is not None])
        # Fully specialized steps index a plain list; others need the named view.
        self.mk = list if self.fp is not None else lay.view
        self.lview = lay.local_views[site.ti]
        # A guard that only reads can be tested on the state tuple itself, before any copy.
        self.raw_guard = (self.guard is not None and self.fp is not None and not need_guard
                          and not self.guard.__writes__)


def _attempt(site: Site, p: _Parts) -> Callable:
    """The one path: ``attempt(choices, state)`` -> ``[(bi, successor), ...]`` for the enabled choices.

    ``choices`` is a tuple of ``(b, bi)``: the branch name and its index, or
    ``((None, 0),)`` for a step without branches (then the user functions
    take ``(s, me)``, else ``(s, me, b)``). A successor is a state tuple, or
    the StepViolation the step raised. The loop is inside, not around, so a
    step costs one call however many branches it has.
    """
    fn, guard, mk, lview, need_me, raw_guard = p.fn, p.guard, p.mk, p.lview, p.need_me, p.raw_guard
    checked_guard = guard is not None and not raw_guard
    my_pc, static_next, allowed = site.my_pc, site.static_next, site.allowed
    resolve = site.resolver()
    what = _guard_what(site)

    def attempt(choices, state):
        out = []
        try:
            for b, bi in choices:
                if raw_guard and (ok := guard(state, None) if b is None else guard(state, None, b)) is not True \
                        and (ok is False or not truth(ok, what)):
                    continue
                s = mk(state)
                me = lview(s) if need_me else None
                if checked_guard and (ok := guard(s, me) if b is None else guard(s, me, b)) is not True \
                        and (ok is False or not truth(ok, what)):
                    continue
                try:
                    ret = None if fn is None else fn(s, me) if b is None else fn(s, me, b)
                    if ret is None:
                        s[my_pc] = static_next if static_next is not None else resolve(s, me)
                    elif ret in allowed:
                        s[my_pc] = ret
                    else:
                        raise site.elsewhere(ret)
                except StepViolation as v:
                    # Kept without its traceback: the frames (the searcher's among them) would
                    # otherwise live as long as the violation does, and keep its searcher alive.
                    out.append((bi, v.with_traceback(None)))
                    continue
                out.append((bi, tuple(s)))
        except ModelError:
            raise
        except USER_ERRORS as e:  # the model's own code raised (or called sys.exit): point at it
            raise site.user_error(e, state) from e
        return out
    return attempt


def _enabled(site: Site, p: _Parts) -> Callable:
    """``enabled(b, state)``: step 1 of the path alone (the guard), with no successor built."""
    guard, mk, lview, need_me, raw_guard = p.guard, p.mk, p.lview, p.need_me, p.raw_guard
    what = _guard_what(site)

    def enabled(b, state):
        if guard is None:
            return True
        # The truth test stays outside the ``try``: the interrupt-injection harness can only be exact
        # where no C call ends a handler's body (tests/test_interrupts.py).
        try:
            if raw_guard:
                ok = guard(state, None) if b is None else guard(state, None, b)
            else:
                s = mk(state)
                me = lview(s) if need_me else None
                ok = guard(s, me) if b is None else guard(s, me, b)
        except ModelError:
            raise
        except USER_ERRORS as e:  # the model's own guard raised: point at it
            raise site.user_error(e, state) from e
        return ok is True or (ok is not False and truth(ok, what))
    return enabled


def _guard_what(site: Site) -> str:
    """How an error names this step's guard."""
    return f"the guard of thread {site.thread_name!r}'s step {site.label!r}"


def compile_user_step(lay: Layout, site: Site) -> list:
    """``[(pc, fire, info)]`` of a ``step`` or ``external`` (see the module doc)."""
    spec = site.spec
    p = _Parts(lay, site)
    attempt, test = _attempt(site, p), _enabled(site, p)
    names = spec.branches
    if names is None:
        fire = partial(attempt, ((None, 0),))  # a C-level call: the explorer's hottest path
        fire.enabled = partial(test, None)
        return [(site.label, fire, site.info(fp=p.fp))]
    fire = partial(attempt, tuple((b, bi) for bi, b in enumerate(names)))
    # One branch at a time, for a driver that already knows which branch it takes (the live
    # runtime applying an external step's outcome): exactly ``[x for x in fire(state) if x[0] == bi]``.
    singles = [((b, bi),) for bi, b in enumerate(names)]
    fire.branch = lambda state, bi: attempt(singles[bi], state)
    fire.enabled_branch = lambda state, bi: test(names[bi], state)
    fire.enabled = lambda state: any(test(b, state) for b in names)
    return [(site.label, fire, site.info(branches=names, action=spec.action, fp=p.fp))]

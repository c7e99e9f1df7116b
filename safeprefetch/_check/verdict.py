"""Verdicts of terminal states: the one classifier every search uses.

What it guarantees
------------------
A state is *terminal* when no thread can step, or when the only moves left
are spurious wakeups (allowed, never guaranteed: a system that can only wake
spuriously may sit still forever). Every driver that meets such a state --
the explorer's BFS and DFS, the reduced search, the distributed workers, the
sampling strategies, the oracle in :mod:`safeprefetch.testing`, and
:func:`~.replay.final_verdict` on a recorded trace -- names it with the
functions here, so they cannot disagree on what a terminal state means:

* every thread done (or never started: a thread declared ``start=False``
  that no step spawned has nothing left to do): the model's end-of-run checks run (lost, duplicate or
  out-of-order items, a swallowed error...); the first that fails is the
  verdict, and none failing is a clean finish;
* otherwise, if the model says close, error or abandon was requested:
  ``shutdown_hang``;
* otherwise, if a sleeping thread's declared predicate holds and no notify
  reached its condvar since that predicate became true (the wakeup went
  missing, it was not merely sent to someone else): ``lost_wakeup``;
* otherwise ``deadlock``.

Decisions, and why
------------------
*Two stages.* The first three facts depend on the state alone; telling a
lost wakeup from a deadlock needs history. :func:`terminal` decides what the
state decides and answers :data:`HANG` for the rest; :func:`classify_hang`
then walks the path. A search keeps paths implicitly (a parent map, a
distributed chain of serials) and rebuilds one only for the violation it
reports, so it calls :func:`terminal` on every terminal state and
:func:`classify_hang` once. A driver that holds its path anyway calls
:func:`judge_terminal`, which is the two in a row.

*History, not bookkeeping bits.* The lost-wakeup test walks the
counterexample path (which BFS keeps anyway) rather than widening every
state with "notified since" flags, which would multiply the state space.
"""

from __future__ import annotations

from typing import Any, Sequence

from .._dsl.graph import did_you_mean
from .._dsl.model import DONE, VIOLATION_KINDS, Machine, ModelError
from .._dsl.violations import USER_ERRORS
from .._dsl.usererror import check_error
from .._dsl.program import NOT_STARTED

__all__ = ["HANG", "classify_hang", "end_violation", "judge_terminal", "terminal", "woke_a_sleeper"]


class _Hang:
    """The answer of :func:`terminal` for a state where some thread is stuck: name it from its path."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "HANG"

    def __reduce__(self) -> str:
        return "HANG"  # pickles as this module's singleton, so a worker process can send it


#: A terminal state in which some thread is not done: deadlock, lost wakeup or shutdown hang,
#: which :func:`classify_hang` tells apart from the path that led there.
HANG = _Hang()


def end_violation(machine: Machine, state: tuple) -> tuple[str, str] | None:
    """The first failing end-of-run check of a state where every thread is done, or None."""
    if not machine.end_checks:
        return None
    s = machine.view(state)
    for k, check_fn in enumerate(machine.end_checks):
        try:
            found = check_fn(s)
        except ModelError:
            raise
        except USER_ERRORS as e:  # the model's own end check raised: name it
            which = f" {k + 1} of {len(machine.end_checks)}" if len(machine.end_checks) > 1 else ""
            raise check_error(f"end check{which}", e, state, machine.shared_index) from e
        if found:
            return _as_end_verdict(machine, k, found)
    return None


def _as_end_verdict(machine: Machine, k: int, found: Any) -> tuple[str, str]:
    """An end check's ``(kind, message)``, checked as ``violate`` checks its kind: a typo in a kind, or a bare
    message, is the model's mistake, named here rather than reported as a verdict nobody knows."""
    which = f" {k + 1} of {len(machine.end_checks)}" if len(machine.end_checks) > 1 else ""
    if not (isinstance(found, tuple) and len(found) == 2 and isinstance(found[1], str)):
        raise ModelError(f"end check{which} returned {found!r}: it must return None (ok) or (kind, message), "
                         f"a kind from {', '.join(sorted(VIOLATION_KINDS))}")
    if found[0] not in VIOLATION_KINDS:
        raise ModelError(f"end check{which} returned the kind {found[0]!r}: not a verdict kind "
                         f"(known: {', '.join(sorted(VIOLATION_KINDS))})" + did_you_mean(str(found[0]), VIOLATION_KINDS))
    return found


def terminal(machine: Machine, state: tuple) -> tuple[str, str] | _Hang | None:
    """The verdict of a terminal ``state`` as far as the state decides it.

    None: a clean finish. ``(kind, message)``: a failed end-of-run check.
    :data:`HANG`: some thread is stuck; :func:`classify_hang` names it.
    """
    if machine.all_done(state):
        return end_violation(machine, state)
    return HANG


def judge_terminal(machine: Machine, path: Sequence[tuple],
                   choices: Sequence[tuple[int, int]]) -> tuple[str, str] | None:
    """The verdict of the terminal state ``path[-1]``, reached by ``choices``: None or ``(kind, message)``."""
    found = terminal(machine, path[-1])
    return classify_hang(machine, path, choices) if found is HANG else found


def classify_hang(machine: Machine, path: Sequence[tuple], choices: Sequence[tuple[int, int]]) -> tuple[str, str]:
    """Classify a terminal state (``path[-1]``) in which some thread is not done."""
    state = path[-1]
    stuck = [t for t in range(len(machine.thread_names)) if state[machine.pc_index[t]] not in (DONE, NOT_STARTED)]
    names = ", ".join(f"{machine.thread_names[t]} at {machine.pc(state, t)!r}" for t in stuck)
    if machine.shutdown_pred is not None and machine.shutdown_pred(machine.view(state)):
        return "shutdown_hang", f"shutdown was requested but threads never return: {names}"
    for t in stuck:
        lost = _lost_wakeup(machine, path, choices, t)
        if lost:
            return "lost_wakeup", lost + f" (blocked: {names})"
    return "deadlock", f"all threads blocked: {names}"


def woke_a_sleeper(machine: Machine, before: tuple, after: Any, cond: str) -> bool:
    """Whether a notify of ``cond`` from ``before`` to ``after`` woke a sleeping thread. A notify that reached only
    threads whose timed wait had already timed out (queued until they retake the mutex) woke nobody: it was spent
    on them, as CPython's is, and is no evidence that the wakeup went to someone else."""
    if after.__class__ is not tuple:
        return False
    pcs = machine.pc_index
    return any(after[pcs[w]] != before[pcs[w]] for w in before[machine.cond_index[cond]])


def _lost_wakeup(machine: Machine, path: Sequence[tuple], choices: Sequence[tuple[int, int]], t: int) -> str | None:
    state = path[-1]
    pc = machine.pc(state, t)
    wait = machine.waits.get((t, pc))
    if wait is None:
        return None
    cond, until = wait
    if until is None:
        return None
    pred = lambda st: until(*machine.views(st, t))  # noqa: E731
    if not pred(state):
        return None
    # Find where the thread last went to sleep: the last step taken by t.
    slept = max(i for i, (ct, _) in enumerate(choices) if ct == t) + 1
    # Find since when the predicate has held without interruption.
    since = slept
    for i in range(len(path) - 1, slept - 1, -1):
        if not pred(path[i]):
            since = i + 1
            break
    spent = False
    for i in range(since, len(choices)):
        ct, _ = choices[i]
        info = machine.step_info(path[i], ct)
        if info.kind in ("notify_one", "notify_all") and info.obj == cond:
            if woke_a_sleeper(machine, path[i], path[i + 1], cond):
                return None  # a notify did arrive; it went to someone else
            spent = spent or bool(path[i][machine.cond_index[cond]])
    who = machine.thread_names[t]
    if spent:
        return (f"{who} sleeps on {cond} although what it waits for already holds: the notify that follows is spent "
                "on a waiter whose wait had timed out")
    return f"{who} sleeps on {cond} although what it waits for already holds, and no notify follows"

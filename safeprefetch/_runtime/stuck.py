"""When no thread of a live run can ever move again, and what the runtime says then.

The kernel asks :func:`detect` when a thread parks, when the last running
thread finishes, and when a thread arrives where its only move is a
spurious wakeup. It answers from the state and the parked marks alone, all
under the kernel lock, so the answer is exact, not a timer:

* A thread that runs (not parked, not done) may still act: nothing is stuck.
  So may a parked thread with a deadline whose step has another branch
  enabled: it comes back when the deadline passes, and its driver may then
  ask for that one. (With nothing enabled, it could only ask again.)
* A thread whose only move is a spurious wakeup counts as stuck, parked or
  not, as the checker counts it (``Machine.is_stuck``): a spurious wakeup
  is allowed, never guaranteed. Without this rule a waiter under
  ``spurious=on`` spins on wakeups for ever and hides the deadlock. (Not
  while a replayed trace forces the order: its next step may be that very
  wakeup, the others parked only because it is not their turn.)
* When every thread is stuck and one of them waits for a *branch* that is
  not enabled while its step has others that are, the model is not stuck:
  its driver is. That is ``blocked_branch`` (a caller insisting on one
  outcome, an action returning one the model does not allow there), not
  the model's deadlock, which would contradict a checker that proved it free
  of one.
* Otherwise the hang is classified exactly as the checker would (deadlock,
  lost_wakeup, shutdown_hang), on the recorded path when there is one.

:func:`check_branch` turns a branch name a step does not have into a
``ValueError`` before the thread would wait for it: such a wait can only end
in a timeout or a hang.
"""

from __future__ import annotations

from typing import Any

from .._check.replay import choice_step
from .._check.verdict import classify_hang
from .._dsl.model import DONE
from .errors import LiveDeadlock, LiveError
from .interrupts import protected

__all__ = ["check_branch", "describe", "detect", "names_at_run_time"]


def describe(rt: Any, state: tuple) -> str:
    """Every named field of ``state``, one per line, as traces print them."""
    from .._check.trace import format_value

    m = rt.machine
    return "\n".join(f"  {name} = {format_value(m, i, state[i])}" for i, name in enumerate(m.field_names))


@protected
def detect(rt: Any) -> None:
    """Fail the run with :class:`LiveDeadlock` if no thread can ever move again (see the module doc)."""
    m = rt.machine
    state, pci, spurious = rt._state, rt._pci, m.spurious_pcs
    forced = rt._schedule is not None and rt._pos < len(rt._schedule)
    timed = False
    for t, parked in enumerate(rt._parked):
        if parked:
            # Back at its deadline, its driver may ask for another branch: only if one is enabled.
            timed = timed or (rt._timed[t] and bool(_moves(rt, t, state)))
        else:
            pc = state[pci[t]]
            # (A forced order parks the others while it is not their turn: a spurious wakeup may be the next.)
            if pc != DONE and (pc not in spurious[t] or forced):
                return  # someone can still act
    if m.all_done(state) and not forced:  # the parked are threads nobody spawned (nor can):
        rt._ended = True  # NeverStarted, counted finished
        rt._wake_enabled(None)
        return
    if timed:
        return
    if forced:
        # The forced order is stuck: the trace asks for a step that is not enabled.
        turn = rt._schedule[rt._pos]
        rt._fail(LiveError("replay_divergence", f"step {rt._pos}: {turn.thread}'s {turn.step!r} "
                           "is not enabled", state, describe(rt, state)))
    for t, parked in enumerate(rt._parked):
        want = rt._want[t]
        moves = _moves(rt, t, state) if parked and want is not None else []
        if moves:
            enabled = [choice_step(m, state, (t, b)).branch for b, _ in moves]
            what = f"branch {want!r}" if type(want) is not tuple else f"one of branches {_names(want)}"
            label = rt._entries[t][state[pci[t]]].label
            rt._fail(LiveDeadlock(
                "blocked_branch", f"{m.thread_names[t]} waits for {what} of step {label!r}, which is not "
                f"enabled, and no other thread can move; the model can (enabled: {_names(enabled)})",
                state, describe(rt, state)))
    if rt.record is not None:
        path, choices = [m.init], []
        for t, b, nxt in rt.record:
            if isinstance(nxt, tuple):
                choices.append((t, b))
                path.append(nxt)
        kind, msg = classify_hang(m, path, choices)
    else:
        kind, msg = classify_hang(m, [state], [])
    rt._fail(LiveDeadlock(kind, msg, state, describe(rt, state)))


def _moves(rt: Any, t: int, state: tuple) -> list:
    """Thread ``t``'s enabled moves ``(branch, successor)``, unless its step is only a spurious wakeup."""
    pc = state[rt._pci[t]]
    e = rt._entries[t].get(pc)
    return e.fire(state) if e is not None and e.fire is not None and pc not in rt.machine.spurious_pcs[t] else []


def _names(names: Any) -> str:
    return ", ".join(repr(n) for n in names)


def names_at_run_time(m: Any, info: Any) -> bool:
    """Whether the step ``info`` names its branches at run time: a notify under notify=any ("wake X")."""
    return info.kind == "notify_one" and m.config.get("notify") == "any"


def check_branch(rt: Any, t: int, e: Any, branch: Any) -> None:
    """Raise ValueError if thread ``t``'s current step (entry ``e``) has no branch named ``branch`` (or one of a
    tuple's). Called on the kernel's generic path only, by the thread itself, before it would wait. A notify under
    notify=any names its branches at run time ("wake X"); in a tuple of those, None takes any (nobody waits)."""
    m = rt.machine
    info = m.infos[t].get(rt._state[rt._pci[t]])
    if info is None:
        return
    notify_any = names_at_run_time(m, info)
    if branch == ():
        raise ValueError(f"{m.thread_names[t]}: branch=() names no branch of step {info.label!r}")
    for name in branch if type(branch) is tuple else (branch,):
        if name in e.bindex or (notify_any and (name is None and type(branch) is tuple  # any, as a last resort
                                                or type(name) is str and name.startswith("wake ")
                                                and name[5:] in m.thread_names)):
            continue
        has = f"its branches: {_names(info.branches)}" if info.branches else "it has no named branches"
        raise ValueError(f"{m.thread_names[t]}'s step {info.label!r} has no branch {name!r} ({has})")

"""Holding a saved counterexample to the check that found it: what ``replay`` re-verifies.

What it guarantees
------------------
A counterexample saved by ``check --json`` says what it shows: its
``verdict``, and for a lasso its ``cycle_start``, for a bounded-progress
check its ``progress_bound``. :func:`saved_verdict` re-runs the trace and
re-establishes *that* claim with the rule of the check that made it, so a
file that was edited -- a step dropped, a verdict renamed, a cycle moved --
is told apart from one that still shows the bug:

* a safety violation (deadlock, an invariant, a lost item, ...): the end of
  the trace is judged by :func:`~.replay.final_verdict`, the searches' own
  rules, and must give the saved kind;
* ``starvation``: the trace must be a lasso -- it ends in the state where
  its cycle starts -- whose cycle the scheduling policy allows, takes no
  spurious wakeup, is fair under the model's ``fairness`` setting, and
  starves some thread: one that is running throughout and never takes a
  progress step (the definitions of :mod:`.liveness` and :mod:`.lasso`).
  The end of such a trace is an ordinary state, so the safety judge would
  call it "no violation" -- a wrong verdict for a real bug;
* ``shutdown_hang`` found by ``--progress-bound K``: from the end of the
  trace, some thread must be able to take more than K of its own steps
  after shutdown was requested, or never return. That needs the states
  reachable from there, searched up to a cap; past the cap the answer is
  unknown, and says so.

Decisions, and why
------------------
* *Refuse, do not reinterpret.* A saved verdict that does not come back is
  :class:`NotReproduced` (the CLI's exit 2, one line), never a different
  verdict reported as if it were the saved one, nor "no violation".
* *A bare list of steps* (no saved verdict) is judged as before, by the
  safety rules alone: it claims nothing else.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Mapping

from .._dsl.model import VIOLATION_KINDS, Machine
from .expand import Expander
from .lasso import by_priority, idle
from .replay import final_verdict, replay_choices
from .result import Trace, TraceError

__all__ = ["NotReproduced", "ReverifyIncomplete", "latest_starving_visit", "saved_claim", "saved_verdict"]


class NotReproduced(TraceError):
    """The trace no longer shows the verdict it was saved with."""


class ReverifyIncomplete(Exception):
    """Re-checking the saved claim needs more states than the cap allows: nothing is known."""


def saved_claim(value: Any, steps: int) -> dict[str, Any]:
    """The claim of a saved counterexample (``verdict``, ``cycle_start``, ``progress_bound``), checked for
    shape; empty for a bare list of steps. ``steps`` is the trace's length."""
    if not isinstance(value, dict) or "verdict" not in value:
        return {}
    verdict, cycle, bound = value.get("verdict"), value.get("cycle_start"), value.get("progress_bound")
    if not isinstance(verdict, str) or verdict not in ("ok", *VIOLATION_KINDS):
        raise TraceError(f"the saved verdict {verdict!r} is not 'ok' nor a violation kind")
    if verdict == "ok":
        raise TraceError("the saved verdict is 'ok': a trace with steps is a counterexample, and has a kind")
    if cycle is not None:
        if verdict != "starvation":
            raise TraceError(f"a cycle_start belongs to a starvation lasso, not to a {verdict}")
        if not isinstance(cycle, int) or isinstance(cycle, bool) or not 0 <= cycle < steps:
            raise TraceError(f"cycle_start must be a step count from 0 to {steps - 1}, not {cycle!r}")
    # (A starvation with no cycle_start is a step's, an invariant's or an end check's own report of that kind
    # -- violate("starvation", ...) -- judged by the safety rules like any other; a lasso whose cycle_start was
    # dropped is refused there, its end being no violation. It was refused outright, a valid trace included.)
    if bound is not None and (not isinstance(bound, int) or isinstance(bound, bool) or bound < 0):
        raise TraceError(f"progress_bound must be a number of steps, at least 0, not {bound!r}")
    return {"verdict": verdict, "cycle_start": cycle, "progress_bound": bound}


def saved_verdict(machine: Machine, trace: Trace, claim: Mapping[str, Any],
                  max_states: int) -> tuple[str, str] | None:
    """``(kind, message)`` that ``trace`` shows under the rules of the check that saved it (``claim``, from
    :func:`saved_claim`; empty: the safety rules, and None when the end of the trace is no violation).

    Raises :class:`NotReproduced` when the claim does not hold, and :class:`ReverifyIncomplete`
    when re-checking a progress bound would pass ``max_states``.
    """
    if not claim:
        return final_verdict(machine, trace)
    kind = claim["verdict"]
    if claim["cycle_start"] is not None:
        found = _lasso(machine, trace, claim["cycle_start"])
    else:
        found = final_verdict(machine, trace)
        if found is None and kind == "shutdown_hang" and claim["progress_bound"] is not None:
            found = _late(machine, trace, claim["progress_bound"], max_states)
    if found is None:
        why = (f"every thread returns within {claim['progress_bound']} of its own steps after shutdown"
               if kind == "shutdown_hang" and claim["progress_bound"] is not None else "its end is no violation")
        raise NotReproduced(f"the trace does not reproduce its saved verdict {kind!r}: {why}")
    if found[0] != kind:
        raise NotReproduced(f"the trace does not reproduce its saved verdict {kind!r}: it shows {found[0]}: "
                            f"{found[1]}")
    return found


def starving_lasso(machine: Machine, trace: Trace, cycle_start: int) -> str | None:
    """The starvation message when ``trace`` ends in a fair cycle from step ``cycle_start`` that starves a
    thread, by the search's own rules (policy, fairness, no spurious wakeup repeated); None when it does not."""
    try:
        found = _lasso(machine, trace, cycle_start)
    except NotReproduced:
        return None
    return None if found is None else found[1]


def _lasso(machine: Machine, trace: Trace, cycle_start: int) -> tuple[str, str] | None:
    """``("starvation", message)`` when ``trace`` is a fair lasso that starves a thread; raises NotReproduced
    saying which condition fails."""
    states, choices = replay_choices(machine, trace)
    if len(states) != len(choices) + 1 or not isinstance(states[-1], tuple):
        raise NotReproduced("the lasso's last step raises a violation: a cycle cannot go through it")
    if states[-1] != states[cycle_start]:
        raise NotReproduced(f"the trace does not reproduce its saved verdict 'starvation': it does not end in "
                            f"the state after step {cycle_start}, where its cycle starts, so nothing repeats")
    pcs = machine.pc_index
    priority = machine.config.get("policy") == "priority"
    fairness = machine.config.get("fairness", "weak")
    successors = Expander(machine).successors
    always = (1 << len(machine.thread_names)) - 1  # threads enabled (not spuriously) in every cycle state
    enabled_steps: set[tuple[int, Any]] = set()
    taken: set[tuple[int, Any]] = set()
    moved = 0
    for i, (state, (t, b)) in enumerate(zip(states, choices)):
        succ = [c for c, n in successors(state)[0] if n.__class__ is tuple]
        if priority and succ:
            succ = [c for c, _n in by_priority(machine, state, [(c, None) for c in succ])]
            if (t, b) not in succ:
                raise NotReproduced(f"step {i + 1}: {machine.thread_names[t]} may not run under strict priority "
                                    "(a thread of higher priority is enabled)")
        if i < cycle_start:
            continue
        if machine.spurious_move(state, t, b):
            raise NotReproduced(f"step {i + 1}, in the cycle, is a spurious wakeup: no fair run repeats one "
                                "forever")
        fair = {u for u, ub in succ if not machine.spurious_move(state, u, ub)}
        always &= sum(1 << u for u in fair)
        enabled_steps |= {(u, state[pcs[u]]) for u in fair}
        taken.add((t, state[pcs[t]]))
        moved |= 1 << t
    names = machine.thread_names
    if fairness == "strong":
        unpaid = sorted(enabled_steps - taken, key=str)
        if unpaid:
            u, pc = unpaid[0]
            raise NotReproduced(f"the cycle is not strongly fair: {names[u]}'s step at {pc!r} is enabled in it "
                                "and never taken")
    else:
        lazy = always & ~moved
        if lazy:
            u = (lazy & -lazy).bit_length() - 1
            raise NotReproduced(f"the cycle is not weakly fair: {names[u]} is enabled throughout it and never runs")
    cycle = range(cycle_start, len(choices))
    for v in _victims(machine, priority):
        if any(idle(states[i][pcs[v]]) for i in cycle):
            continue
        if any(choices[i][0] == v and _progress(machine, states[i], v) for i in cycle):
            continue
        return "starvation", (f"{names[v]} never makes progress: the cycle of {len(cycle)} steps after step "
                              f"{cycle_start} repeats forever, fairly")
    raise NotReproduced("the trace does not reproduce its saved verdict 'starvation': every thread running "
                        "in the cycle makes progress in it")


def _victims(machine: Machine, priority: bool) -> list[int]:
    """The threads a lasso may starve, in the order the search names them: a thread with no progress step
    cannot be said to starve; under strict priority the most important victim comes first."""
    order = [v for v in range(len(machine.thread_names))
             if any(pc in machine.progress_labels or info.label in machine.progress_labels
                    for pc, info in machine.infos[v].items())]
    if priority:
        order.sort(key=lambda v: -machine.priorities[v])
    return order


def latest_starving_visit(machine: Machine, states: list, choices: list) -> tuple[int, str] | None:
    """``(k, message)`` for the latest earlier visit ``k`` of the path's last state from which the path ends
    in a starving fair lasso: what :func:`starving_lasso` says of the first such ``k`` tried latest first,
    in one pass over the path instead of one replay per visit (``play`` asks after every step, and a long
    session that keeps returning to a state made that quadratic: 4.9 s a step after 2,006 steps).

    Everything the lasso rule asks of a cycle is a fold over its steps -- the threads fairly enabled
    throughout, those that ran, the steps enabled and taken, the threads idle or making progress somewhere,
    a spurious wakeup anywhere -- so the cycles from every visit are the suffixes of one backward scan.
    ``states`` are the path's states (all ordinary), ``choices`` its ``len(states) - 1`` moves.
    """
    names, pcs = machine.thread_names, machine.pc_index
    priority = machine.config.get("policy") == "priority"
    strong = machine.config.get("fairness", "weak") == "strong"
    successors = Expander(machine).successors
    fair_after: list[list[tuple[int, Any]]] = []
    for state, move in zip(states, choices):
        succ = [c for c, n in successors(state)[0] if n.__class__ is tuple]
        if priority and succ:
            succ = [c for c, _n in by_priority(machine, state, [(c, None) for c in succ])]
            if move not in succ:
                return None  # a step strict priority does not allow: no lasso of this path is a run
        fair_after.append(succ)
    last, victims = states[-1], _victims(machine, priority)
    always, moved, idle_ones, progressed = (1 << len(names)) - 1, 0, 0, 0
    enabled_steps: set[tuple[int, Any]] = set()
    taken: set[tuple[int, Any]] = set()
    for k in range(len(choices) - 1, -1, -1):
        state, (t, b) = states[k], choices[k]
        if machine.spurious_move(state, t, b):
            return None  # every cycle from here back contains it
        fair = {u for u, ub in fair_after[k] if not machine.spurious_move(state, u, ub)}
        always &= sum(1 << u for u in fair)
        enabled_steps |= {(u, state[pcs[u]]) for u in fair}
        taken.add((t, state[pcs[t]]))
        moved |= 1 << t
        idle_ones |= sum(1 << v for v in victims if idle(state[pcs[v]]))
        if _progress(machine, state, t):
            progressed |= 1 << t
        if state != last or (enabled_steps - taken if strong else always & ~moved):
            continue
        for v in victims:
            if not (idle_ones | progressed) >> v & 1:
                return k, (f"{names[v]} never makes progress: the cycle of {len(choices) - k} steps after step "
                           f"{k} repeats forever, fairly")
    return None


def _progress(machine: Machine, state: tuple, thread: int) -> bool:
    info = machine.step_info(state, thread)
    return info is not None and (info.pc in machine.progress_labels or info.label in machine.progress_labels)


def _late(machine: Machine, trace: Trace, bound: int, max_states: int) -> tuple[str, str] | None:
    """``("shutdown_hang", message)`` when, from the end of ``trace``, a thread may take more than ``bound`` of
    its own steps after shutdown was requested (or never return); None when every one is within it."""
    from .liveness import shutdown_progress_detail

    if machine.shutdown_pred is None:
        raise NotReproduced("the model declares no shutdown, so a progress bound cannot be checked")
    states, _choices = replay_choices(machine, trace)
    start = states[-1]
    if not isinstance(start, tuple):
        return None
    if not machine.shutdown_pred(machine.view(start)):
        # The check's trace ends where shutdown was requested and the worst case starts; from a state before
        # that, some later state reaches any worst case at all, so a prefix would "reproduce" it.
        raise NotReproduced("the trace does not reproduce its saved verdict 'shutdown_hang': at its end "
                            "shutdown was not requested (the worst case is counted from there)")
    successors = Expander(machine).successors
    seen = {start}
    queue = deque([start])
    while queue:
        for _c, n in successors(queue.popleft())[0]:
            if n.__class__ is tuple and n not in seen:
                if len(seen) >= max_states:
                    raise ReverifyIncomplete(f"re-checking the progress bound from the end of the trace passed "
                                             f"the state cap, max_states={max_states:,}")
                seen.add(n)
                queue.append(n)
    for name, (worst, _where) in shutdown_progress_detail(machine, seen).items():
        if worst is None or worst > bound:
            how = "may never return" if worst is None else f"may take {worst} of its own steps to return"
            return "shutdown_hang", f"after shutdown was requested, {name} {how} (bound {bound})"
    return None

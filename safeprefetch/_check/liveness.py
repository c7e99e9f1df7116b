"""Liveness: starvation under a scheduling policy and a fairness notion, and progress after shutdown.

Starvation
----------
A model opts in by naming its *progress* steps (``m.progress("get", ...)``).
Thread T starves when the scheduler may run the system forever, fairly, while
T is not done and never takes a progress step. "Forever" in a finite state
graph means a cycle, so the check looks for a reachable cycle that

* the scheduling policy allows: by default every interleaving (``policy=fair``);
  with ``policy=priority``, in each state only the enabled threads of highest
  priority (``m.priority(thread, level)``) may step -- a strict-priority
  scheduler, under which priority inversion becomes visible;
* is fair under the ``fairness`` setting: ``weak`` (the default) -- a thread
  enabled in every state of the cycle takes a step in it; ``strong`` -- a
  step enabled in some state of the cycle is taken in it, so a thread
  enabled only intermittently (a lock others keep re-taking) still runs;
* takes no spurious wakeup (they are finite: a design need not survive a
  waiter that wakes spuriously forever), and no progress step of T.

The counterexample is a lasso -- a stem into the cycle, then the cycle,
ending where it began -- with the fewest steps, stem plus cycle, over every
victim (:mod:`.lasso` says how, and why it is exact). The violation's
``cycle_start`` field says at which step the cycle starts (the message says
it too, for people); :func:`starvation` is what every search calls, so the
sequential and the distributed explorer report the same lasso.

Progress after shutdown
-----------------------
:func:`shutdown_progress` measures, for every thread, the most steps of its
own it can take between the first state where shutdown was requested and its
return (or None if it can loop or hang). It is the bounded-progress check:
"after close, every blocked thread returns within k of its own steps".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .._dsl.model import DONE, Machine
from .expand import Expander
from .lasso import GraphCapped, PolicyGraph, shortest_lasso
from .replay import trace_of
from .result import Violation

__all__ = ["STARVATION_CAPPED", "Lasso", "bounded_starvation", "find_starvation", "shutdown_progress", "starvation"]


@dataclass(frozen=True)
class Lasso:
    """A path into a cycle the scheduler may repeat forever while ``thread`` never progresses."""

    #: The starved thread's name.
    thread: str
    #: One line for people.
    message: str
    #: The states of the whole lasso, initial state first; the last equals ``states[cycle_start]``.
    states: list
    #: The ``(thread, branch)`` choices between them.
    choices: list
    #: The number of steps before the cycle.
    cycle_start: int
    #: True when no lasso of any victim has fewer steps (False only past the search's budget).
    shortest: bool = True


def starvation(machine: Machine, max_states: int | None = None) -> Violation | None:
    """The ``starvation`` violation of ``machine`` (a lasso), or None. Only models with progress steps pay.

    It walks the policy's own, unreduced graph, which can be far larger than the reduced one the
    safety search stored: past ``max_states`` states it raises :class:`~.lasso.GraphCapped`, and the
    search that called it is not exhaustive (see :func:`bounded_starvation`).
    """
    lasso = find_starvation(machine, max_states)
    if lasso is None:
        return None
    trace = trace_of(machine, lasso.states, lasso.choices)
    return Violation("starvation", lasso.message, trace, lasso.states[-1], on_step=False,
                     cycle_start=lasso.cycle_start, step=len(trace))


def _is_progress(machine: Machine, state: tuple, thread: int) -> bool:
    info = machine.step_info(state, thread)
    return info is not None and (info.pc in machine.progress_labels or info.label in machine.progress_labels)


def bounded_starvation(machine: Machine, max_states: int | None) -> tuple[Violation | None, bool]:
    """``(violation or None, complete)``: :func:`starvation` within ``max_states``; ``complete`` is False
    when the policy's graph passed the cap (then nothing is known, and the violation is None)."""
    try:
        return starvation(machine, max_states), True
    except GraphCapped:
        return None, False


#: Why a search whose safety part finished is still not exhaustive, when the starvation search was cut.
STARVATION_CAPPED = "the starvation search, over the scheduling policy's unreduced graph, passed the state cap"


def find_starvation(machine: Machine, max_states: int | None = None) -> Lasso | None:
    """The shortest fair cycle in which some thread never progresses, as a :class:`Lasso`; or None.

    The search walks the states the scheduling policy can reach from the
    initial state itself: only those count, and paths into a cycle must obey
    the policy too, so the explorer's (policy-free, maybe reduced) graph
    would not do.
    """
    if not machine.progress_labels:
        return None
    priority = machine.config.get("policy") == "priority"
    order = list(range(len(machine.thread_names)))
    if priority:
        order.sort(key=lambda t: -machine.priorities[t])  # ties: report the most important victim
    # A thread with no progress step cannot be said to starve.
    victims = [t for t in order if any(pc in machine.progress_labels or info.label in machine.progress_labels
                                       for pc, info in machine.infos[t].items())]
    if not victims:
        return None
    fairness = machine.config.get("fairness", "weak")
    found = shortest_lasso(PolicyGraph(machine, max_states), victims, fairness,
                           lambda state, t: _is_progress(machine, state, t))
    if found is None:
        return None
    who = machine.thread_names[found.victim]
    scheduler = ("strict priority, " if priority else "") + f"{fairness}ly fair"
    cycle = len(found.choices) - found.cycle_start
    message = (f"{who} never makes progress: the scheduler ({scheduler}) can repeat a cycle of {cycle} steps "
               f"forever; the cycle starts after step {found.cycle_start}"
               + ("" if found.shortest else " (the search for a shorter lasso ran out of budget)"))
    return Lasso(who, message, found.states, found.choices, found.cycle_start, found.shortest)


def shutdown_progress(machine: Machine, states: Iterable[tuple]) -> dict[str, int | None]:
    """Per thread, the most own steps it can take after shutdown is requested before it is done.

    None means unbounded: the thread can loop forever, or hang, after shutdown.
    """
    return {name: bound for name, (bound, _where) in shutdown_progress_detail(machine, states).items()}


def shutdown_progress_detail(machine: Machine, states: Iterable[tuple]) -> dict[str, tuple[int | None, Any]]:
    """Like :func:`shutdown_progress`, with a state from which each thread's worst case starts."""
    pred = machine.shutdown_pred
    if pred is None:
        return {}
    n = len(machine.thread_names)
    pcs = machine.pc_index
    after = [s for s in states if pred(machine.view(s))]
    successors = Expander(machine).successors
    succ = {s: [(c, nx) for c, nx in successors(s)[0] if nx.__class__ is tuple] for s in after}
    result: dict[str, tuple[int | None, Any]] = {}
    for t in range(n):
        memo: dict[tuple, int | None] = {}
        visiting: set[tuple] = set()

        def longest(s):
            # iterative DFS computing the longest count of t-steps to t's DONE
            stack = [(s, 0)]
            while stack:
                v, phase = stack.pop()
                if phase == 0:
                    if v in memo:
                        continue
                    if v[pcs[t]] == DONE:
                        memo[v] = 0
                        continue
                    if v in visiting:
                        continue  # a back edge: the parent sees v unfinished and counts it unbounded
                    visiting.add(v)
                    stack.append((v, 1))
                    for _c, w in succ.get(v, ()):
                        if w not in memo:
                            stack.append((w, 0))
                else:
                    visiting.discard(v)
                    nexts = succ.get(v, ())
                    if not nexts:
                        memo[v] = None  # stuck before returning
                        continue
                    best: int | None = 0
                    for (ct, _b), w in nexts:
                        sub = memo.get(w)  # missing means still on the DFS stack: a cycle
                        if sub is None:
                            best = None
                            break
                        best = max(best, sub + (1 if ct == t else 0))
                    memo[v] = best
            return memo.get(s)

        worst: int | None = 0
        where = None
        for s in after:
            v = longest(s)
            if v is None:
                worst, where = None, s
                break
            if where is None or v > worst:
                worst, where = v, s
        result[machine.thread_names[t]] = (worst, where)
    return result

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
  scheduler, under which priority inversion becomes visible (a blocked
  thread's timeout or spurious wakeup happens whatever the priorities);
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
from .._dsl.program import NOT_STARTED
from .expand import Expander
from .lasso import GraphCapped, PolicyGraph, components, shortest_lasso
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
    """Like :func:`shutdown_progress`, with a state from which each thread's worst case starts.

    The count starts at every state of ``states`` where shutdown is requested and follows every move from
    there, whether or not the predicate still holds (a request that is acknowledged turns it false again).
    A thread is unbounded (None) when, after the request and before it returns, it can repeat a step of its
    own, or be kept waiting forever by the other threads under the ``fairness`` setting: a cycle in which
    it is not enabled throughout (``weak``), or never enabled (``strong``). A cycle of the others while it
    is always ready to step is not a fair run, and counts nothing against it. A thread never started
    counts as finished where nothing can move any more.
    """
    pred = machine.shutdown_pred
    if pred is None:
        return {}
    after = [s for s in states if pred(machine.view(s))]
    nodes, moves = _after_graph(machine, after)
    fairness = machine.config.get("fairness", "weak")
    index = {s: i for i, s in enumerate(nodes)}
    result: dict[str, tuple[int | None, Any]] = {}
    for t, name in enumerate(machine.thread_names):
        bounds = _own_step_bounds(machine, nodes, moves, t, fairness)
        worst: int | None = 0
        where = None
        for s in after:
            v = bounds[index[s]]
            if v is None:
                worst, where = None, s
                break
            if where is None or v > worst:
                worst, where = v, s
        result[name] = (worst, where)
    return result


def _after_graph(machine: Machine, after: list[tuple]) -> tuple[list[tuple], list[list[tuple[int, bool, int]]]]:
    """Every state reachable from ``after`` (itself first), and per state its moves ``(thread, spurious,
    target index)`` to states (a step that raises a violation leads nowhere here)."""
    successors = Expander(machine).successors
    nodes = list(dict.fromkeys(after))
    index = {s: i for i, s in enumerate(nodes)}
    moves: list[list[tuple[int, bool, int]]] = []
    i = 0
    while i < len(nodes):
        state = nodes[i]
        out = []
        for (t, b), nxt in successors(state)[0]:
            if nxt.__class__ is not tuple:
                continue
            j = index.get(nxt)
            if j is None:
                j = index[nxt] = len(nodes)
                nodes.append(nxt)
            out.append((t, machine.spurious_move(state, t, b), j))
        moves.append(out)
        i += 1
    return nodes, moves


def _own_step_bounds(machine: Machine, nodes: list[tuple], moves: list, t: int, fairness: str) -> list[int | None]:
    """Per state, the most steps of its own thread ``t`` can take before it is done (None: unbounded).

    Over the components of the graph of states where ``t`` is not done, sinks first (Tarjan emits them in
    that order), so each component's exits are known when it is reached.
    """
    pc = machine.pc_index[t]
    running = [s[pc] != DONE for s in nodes]
    enabled = [any(u == t and not spurious for u, spurious, _j in out) for out in moves]
    waiting = [running[i] and nodes[i][pc] != NOT_STARTED and not enabled[i] for i in range(len(nodes))]
    ready = [sum({1 << u for u, spurious, _j in out if not spurious}) for out in moves]
    edges = [[j for _u, _sp, j in out if running[j]] if running[i] else [] for i, out in enumerate(moves)]
    bound: list[int | None] = [0] * len(nodes)
    for comp in components([i for i in range(len(nodes)) if running[i]], edges):
        inside = set(comp)
        internal = [(u, i) for i in comp for u, _sp, j in moves[i] if j in inside]
        value: int | None = 0
        if any(u == t for u, _i in internal):
            value = None  # t repeats a step of its own
        elif internal and _kept_waiting(comp, moves, waiting, ready, fairness):
            value = None  # the others can run forever, fairly, while t waits
        else:
            exits = [(u, j) for i in comp for u, _sp, j in moves[i] if j not in inside]
            if not exits and not internal and (nodes[comp[0]][pc] != NOT_STARTED):
                value = None  # nothing can move, and t has not returned
            for u, j in exits:
                sub = bound[j] if running[j] else 0
                if sub is None:
                    value = None
                    break
                value = max(value, sub + (u == t))
        for i in comp:
            bound[i] = value
    return bound


def _kept_waiting(comp: list[int], moves: list, waiting: list[bool], enabled: list[int], fairness: str) -> bool:
    """Whether the others can cycle forever inside ``comp`` (a component with a cycle and no step of t's),
    while t is ``waiting`` (started, not done, not enabled) in some state of the cycle (``weak``) or in all
    of them (``strong``): a cycle of real moves (spurious wakeups are finite) that is weakly fair to every
    thread, each one enabled throughout it stepping in it (``enabled``: per state, the threads with a real
    move, as bits). A cycle unfair to another thread is no run, and must not name t as the one that hangs.
    Under ``strong`` this is a necessary condition, not the exact one: it only decides whom the violation
    names (a cycle always leaves some thread with a step of its own repeated, and that one is unbounded)."""
    keep = [i for i in comp if waiting[i]] if fairness == "strong" else comp
    within = set(keep)
    real = {i: [(u, j) for u, spurious, j in moves[i] if not spurious and j in within] for i in keep}
    for sub in components(keep, {i: [j for _u, j in out] for i, out in real.items()}):
        members = set(sub)
        steppers, always, cycle = 0, -1, False
        for i in sub:
            always &= enabled[i]
            for u, j in real[i]:
                if j in members:
                    steppers |= 1 << u
                    cycle = True
        if cycle and any(waiting[i] for i in sub) and always & ~steppers == 0:
            return True
    return False

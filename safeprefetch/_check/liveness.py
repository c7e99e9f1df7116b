"""Liveness: starvation under a scheduling policy, and progress after shutdown.

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
* is *weakly fair*: a thread enabled in every state of the cycle takes a step
  in it (the standard assumption: an always-ready thread eventually runs);
* contains no progress step of T.

For a strongly connected component C of the graph without T's progress
edges, a fair cycle exists inside C iff every thread that is enabled in all
of C's states has at least one edge inside C (a closed walk through every
edge of C is then fair; conversely a thread always enabled in C but never
stepping in C makes every cycle of C unfair). So the check is one SCC
decomposition per thread (iterative Tarjan), then that test per component.
The counterexample is a lasso: the BFS-shortest path into the component,
then a cycle through it that lets every always-enabled thread step, ending
where it began. The violation's ``cycle_start`` field says at which step the
cycle starts (the message says it too, for people); :func:`starvation` is
what every search calls, so the sequential and the distributed explorer
report the same lasso, built the same way.

Spurious wakeups are moves the scheduler *may* make, never must; a thread
whose only enabled move is a spurious wakeup does not count as enabled for
fairness.

Progress after shutdown
-----------------------
:func:`shutdown_progress` measures, for every thread, the most steps of its
own it can take between the first state where shutdown was requested and its
return (or None if it can loop or hang). It is the bounded-progress check:
"after close, every blocked thread returns within k of its own steps".
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable

from .._dsl.model import DONE, Machine
from .expand import Expander
from .replay import trace_of
from .result import Violation

__all__ = ["Lasso", "find_starvation", "shutdown_progress", "starvation"]


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


def starvation(machine: Machine) -> Violation | None:
    """The ``starvation`` violation of ``machine`` (a lasso), or None. Only models with progress steps pay."""
    lasso = find_starvation(machine)
    if lasso is None:
        return None
    trace = trace_of(machine, lasso.states, lasso.choices)
    return Violation("starvation", lasso.message, trace, lasso.states[-1], on_step=False,
                     cycle_start=lasso.cycle_start, step=len(trace))


def _policy_moves(machine: Machine, expander: Expander, state: tuple) -> list[tuple[tuple[int, int], tuple]]:
    succ = [(c, n) for c, n in expander.successors(state)[0] if n.__class__ is tuple]
    if machine.config.get("policy") == "priority" and succ:
        prio = machine.priorities
        top = max(prio[t] for (t, _), _ in succ)
        succ = [(c, n) for c, n in succ if prio[c[0]] == top]
    return succ


def _is_progress(machine: Machine, state: tuple, thread: int) -> bool:
    info = machine.step_info(state, thread)
    return info is not None and (info.pc in machine.progress_labels or info.label in machine.progress_labels)


def _enabled_for_fairness(machine: Machine, state: tuple, moves) -> set[int]:
    sp, pcs = machine.spurious_pcs, machine.pc_index
    return {t for (t, _), _ in moves if state[pcs[t]] not in sp[t]}


def _sccs(nodes: list[tuple], edges: dict[tuple, list]) -> Iterable[list[tuple]]:
    """Tarjan's algorithm, iterative. Yields components with at least one internal edge."""
    index: dict[tuple, int] = {}
    low: dict[tuple, int] = {}
    on_stack: set[tuple] = set()
    stack: list[tuple] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(edges.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for _choice, w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(edges.get(w, ()))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or any(w == v for _, w in edges.get(v, ())):
                    yield comp


def find_starvation(machine: Machine) -> Lasso | None:
    """Look for a fair cycle in which some thread never progresses; return its :class:`Lasso`, or None.

    The search walks the states the scheduling policy can reach from the
    initial state itself: only those count, and paths into a cycle must obey
    the policy too, so the explorer's (policy-free, maybe reduced) graph
    would not do.
    """
    if not machine.progress_labels:
        return None
    # Only what the scheduling policy can reach counts, and paths into a cycle must obey it too.
    expander = Expander(machine)  # the explorer's expansion, without reduction
    parent: dict[tuple, Any] = {machine.init: None}
    moves: dict[tuple, list] = {}
    queue = deque([machine.init])
    while queue:
        s = queue.popleft()
        ms = moves[s] = _policy_moves(machine, expander, s)
        for c, nx in ms:
            if nx not in parent:
                parent[nx] = (s, c)
                queue.append(nx)
    nodes = list(moves)

    def path_to(target):
        states_, choices_ = [target], []
        while parent[states_[-1]] is not None:
            prev, c = parent[states_[-1]]
            states_.append(prev)
            choices_.append(c)
        states_.reverse()
        choices_.reverse()
        return states_, choices_

    n = len(machine.thread_names)
    pcs = machine.pc_index
    order = list(range(n))
    if machine.config.get("policy") == "priority":
        order.sort(key=lambda t: -machine.priorities[t])  # report the most important victim
    for victim in order:
        if not any(pc in machine.progress_labels or info.label in machine.progress_labels
                   for pc, info in machine.infos[victim].items()):
            continue  # a thread with no progress steps cannot be said to starve
        edges = {s: [(c, nx) for c, nx in ms if not (c[0] == victim and _is_progress(machine, s, victim))]
                 for s, ms in moves.items()}
        for comp in _sccs(nodes, edges):
            members = set(comp)
            if all(s[pcs[victim]] == DONE for s in comp):
                continue
            if any(s[pcs[victim]] == DONE for s in comp):
                continue  # the victim finishes inside the cycle: not starved
            internal = [(s, c, nx) for s in comp for c, nx in edges[s] if nx in members]
            if not internal:
                continue
            always = set(range(n))
            for s in comp:
                always &= _enabled_for_fairness(machine, s, moves[s])
            steppers = {c[0] for _, c, _ in internal}
            if not always <= steppers:
                continue
            lasso = _lasso(machine, comp, members, internal, always, path_to)
            if lasso is None:
                continue
            prefix_states, prefix_choices, cycle_choices, cycle_states = lasso
            who = machine.thread_names[victim]
            message = (f"{who} never makes progress: the scheduler "
                       f"({'strict priority' if machine.config.get('policy') == 'priority' else 'weakly fair'}) "
                       f"can repeat a cycle of {len(cycle_choices)} steps forever; the cycle starts after step "
                       f"{len(prefix_choices)}")
            return Lasso(who, message, prefix_states + cycle_states, prefix_choices + cycle_choices,
                         len(prefix_choices))
    return None


def _lasso(machine, comp, members, internal, always, path_to):
    # Enter the component at the member closest to the initial state.
    best = None
    for s in comp:
        states, choices = path_to(s)
        if best is None or len(choices) < len(best[1]):
            best = (states, choices)
    prefix_states, prefix_choices = best
    start = prefix_states[-1]
    adj: dict[tuple, list] = {}
    for s, c, nx in internal:
        adj.setdefault(s, []).append((c, nx))

    def bfs(src, goal) -> list | None:
        """Shortest internal path src -> a state satisfying goal(state, choice, next); returns [(choice, next)]."""
        prev: dict[tuple, Any] = {src: None}
        q = deque([src])
        while q:
            v = q.popleft()
            for c, w in adj.get(v, ()):
                if goal(v, c, w):
                    out = [(c, w)]
                    while prev[v] is not None:
                        pv, pc = prev[v]
                        out.append((pc, v))
                        v = pv
                    out.reverse()
                    return out
                if w not in prev:
                    prev[w] = (v, c)
                    q.append(w)
        return None

    cycle: list = []
    cur = start
    for t in sorted(always):
        leg = bfs(cur, lambda v, c, w, t=t: c[0] == t)
        if leg is None:
            return None
        cycle += leg
        cur = cycle[-1][1]
    if not cycle or cur != start:
        leg = bfs(cur, lambda v, c, w: w == start)
        if leg is None:
            return None
        cycle += leg
    return prefix_states, prefix_choices, [c for c, _ in cycle], [w for _, w in cycle]


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

"""Shortest fair lassos: the starvation counterexample, with the fewest steps.

What it guarantees
------------------
A starvation counterexample is a *lasso*: a stem from the initial state to a
state ``s``, then a cycle from ``s`` back to ``s`` that the scheduler may
repeat forever, fairly, while the victim thread never takes a progress step.
:func:`shortest_lasso` returns one with the fewest steps, stem plus cycle,
over every victim and every fair cycle of the scheduling policy's graph: the
README promises shortest counterexamples, and a lasso is one too.

Fairness, the ``fairness`` setting:

* ``weak`` (the default): a thread enabled in *every* state of the cycle
  takes a step in it -- an always-ready thread eventually runs;
* ``strong``: a step (a thread at a program counter) enabled in *some* state
  of the cycle is taken in it -- a step enabled infinitely often is taken
  infinitely often. This is what verifies a fix whose victim is enabled only
  intermittently (a lock others keep re-taking).

Spurious wakeups are finite. A spurious wakeup is a move the scheduler may
make, never must; and a run that wakes spuriously forever is not one a
correct design has to survive (POSIX allows each wakeup, not an endless
supply of them). So a spurious wakeup never counts as "enabled" for fairness,
and the cycle of a lasso takes none: the stem may wake spuriously as often as
it likes, the part repeated forever may not. Without this, a waiter could
wake spuriously forever and make every correct design that waits look
starving.

Theory of operation
-------------------
1. :class:`PolicyGraph`: every state the policy reaches from the initial state
   (``policy=priority``: only the enabled threads of highest priority step;
   a sleeper's timeout or spurious wakeup happens whatever the priorities),
   with BFS distances and parents, so a stem is a shortest path.
2. Per victim, the cycle graph drops the victim's progress moves and every
   spurious wakeup, and keeps only states where the victim is still running.
   Its strongly connected components (iterative Tarjan) are filtered by a
   necessary condition: weak -- every thread enabled throughout the
   component steps in it; strong -- every step enabled somewhere in it is
   taken in it, else the states enabling an unpaid step are removed and the
   rest decomposed again (the Streett refinement of Emerson and Lei).
3. Within a component the shortest fair cycle through ``s`` is a BFS over
   ``(state, obligations)``: the threads already discharged (weak: stepped,
   or disabled somewhere on the walk), or the steps owed and paid (strong).
   It is exact; its cost is the component times the obligation sets met,
   small for the models that declare progress steps. Candidates ``s`` are
   tried nearest first, and a search stops at the best total found so far.

Decisions, and why
------------------
* *Exact, with a budget.* The product search is bounded by
  :data:`PRODUCT_LIMIT` nodes; past it the lasso is built the cheap way (the
  nearest state of a fair component, then a walk that lets every required
  thread step) and says ``shortest=False``. No catalog model comes near it.
* *Global minimum over victims.* Ties go to the victim met first: under
  ``policy=priority`` the most important thread, else thread order.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from .._dsl.model import DONE, Machine
from .._dsl.program import NOT_STARTED
from .expand import Expander

__all__ = ["FAIRNESS", "PRODUCT_LIMIT", "GraphCapped", "LassoPath", "PolicyGraph", "by_priority", "components", "idle",
           "shortest_lasso"]

#: The ``fairness`` setting's values.
FAIRNESS = ("weak", "strong")

#: Nodes the exact cycle search may visit, all victims together, before it settles for a lasso
#: that is fair but maybe not shortest. Each node is a small tuple in a dict: two million cost
#: a few hundred MB at worst, and the catalog's liveness models need a few thousand.
PRODUCT_LIMIT = 2_000_000

def idle(pc: Any) -> bool:
    """Whether a thread at program counter ``pc`` is not running: finished, or not started yet. (Exactly those
    two: a user's label that merely ends in "(not started)" made its thread idle, and its starvation "ok".)"""
    return pc == DONE or pc == NOT_STARTED


@dataclass(frozen=True)
class LassoPath:
    """A stem and a cycle, as states and ``(thread, branch)`` choices."""

    victim: int
    #: States of the whole lasso, initial state first; the last equals ``states[cycle_start]``.
    states: list
    choices: list
    cycle_start: int
    #: False when the exact search ran out of budget (the lasso is fair, maybe not shortest).
    shortest: bool = True


class PolicyGraph:
    """The states the scheduling policy reaches from the initial state, with their moves.

    Moves are ``(thread, branch, target index, spurious)``. ``fair[i]`` is the
    bit set of threads with a move at state ``i`` that is not a spurious
    wakeup; ``steps[i]`` the bit set of their steps (a thread at a program
    counter), numbered as met.
    """

    def __init__(self, machine: Machine, max_states: int | None = None):
        self.machine = machine
        expander = Expander(machine)  # no reduction: the policy's own graph
        priority = machine.config.get("policy") == "priority"
        pcs = machine.pc_index
        self.states: list[tuple] = [machine.init]
        self.index: dict[tuple, int] = {machine.init: 0}
        self.parent: list[tuple[int, tuple[int, int]] | None] = [None]
        self.dist: list[int] = [0]
        self.moves: list[list[tuple[int, int, int, bool]]] = []
        self.fair: list[int] = []
        self.steps: list[int] = []
        self.step_ids: dict[tuple[int, Any], int] = {}
        i = 0
        while i < len(self.states):
            state = self.states[i]
            succ = [(c, n) for c, n in expander.successors(state)[0] if n.__class__ is tuple]
            if priority and succ:
                succ = by_priority(machine, state, succ)
            moves, fair, steps = [], 0, 0
            for (t, b), nxt in succ:
                j = self.index.get(nxt)
                if j is None:
                    if max_states is not None and len(self.states) >= max_states:
                        raise GraphCapped(max_states)
                    j = self.index[nxt] = len(self.states)
                    self.states.append(nxt)
                    self.parent.append((i, (t, b)))
                    self.dist.append(self.dist[i] + 1)
                spurious = machine.spurious_move(state, t, b)
                moves.append((t, b, j, spurious))
                if not spurious:
                    fair |= 1 << t
                    steps |= 1 << self.step_id(t, state[pcs[t]])
            self.moves.append(moves)
            self.fair.append(fair)
            self.steps.append(steps)
            i += 1

    def step_id(self, t: int, pc: Any) -> int:
        return self.step_ids.setdefault((t, pc), len(self.step_ids))

    def stem(self, i: int) -> tuple[list[tuple], list[tuple[int, int]]]:
        """A shortest path from the initial state to state ``i``: its states and choices."""
        states, choices = [i], []
        while self.parent[states[-1]] is not None:
            prev, c = self.parent[states[-1]]
            states.append(prev)
            choices.append(c)
        states.reverse()
        choices.reverse()
        return [self.states[k] for k in states], choices


def by_priority(machine: Machine, state: tuple, succ: list) -> list:
    """The moves of ``succ`` (``((thread, branch), next)``) a strict-priority scheduler allows from ``state``.

    It runs the highest-priority threads that can run. A blocked thread's timeout (of any timed wait, a
    semaphore's or an event's too) or spurious wakeup is no thread running: it happens to the sleeper
    whatever the scheduler does, so it neither sets the top priority nor is held back by it. (Counting it
    let a high thread blocked in a timed wait, or one that may wake spuriously, hold every lower thread
    still: a starving design read "ok".)
    """
    prio = machine.priorities
    events = [machine.event_move(state, t, b) for (t, b), _n in succ]
    ran = [prio[t] for ((t, _b), _n), event in zip(succ, events) if not event]
    if not ran:
        return succ
    top = max(ran)
    return [move for move, event in zip(succ, events) if event or prio[move[0][0]] == top]


class GraphCapped(Exception):
    """The policy's graph has more states than the search's cap: its liveness verdict is unknown."""


class _Budget(Exception):
    """The exact cycle search visited PRODUCT_LIMIT nodes."""


def shortest_lasso(graph: PolicyGraph, victims: Iterable[int], fairness: str,
                   is_progress: Callable[[tuple, int], bool]) -> LassoPath | None:
    """The lasso with the fewest steps over ``victims`` (in tie-break order), or None (see the module doc)."""
    budget = [PRODUCT_LIMIT]
    best: LassoPath | None = None
    for victim in victims:
        edges = _cycle_edges(graph, victim, is_progress)
        comps = list(_fair_components(graph, edges, fairness))
        if not comps:
            continue
        bound = len(best.choices) if best is not None else None
        found = _nearest(graph, victim, comps, edges, fairness, bound, budget)
        if found is not None and (best is None or len(found.choices) < len(best.choices)):
            best = found
    return best


def _cycle_edges(graph: PolicyGraph, victim: int, is_progress: Callable) -> list[list[tuple[int, int, int]]]:
    """Per state, the moves a cycle may take: no progress of the victim, no spurious wakeup, victim running."""
    pc = graph.machine.pc_index[victim]
    running = [not idle(s[pc]) for s in graph.states]
    out = []
    for i, s in enumerate(graph.states):
        if not running[i]:
            out.append([])
            continue
        progress = is_progress(s, victim)
        out.append([(t, b, j) for t, b, j, spurious in graph.moves[i]
                    if not spurious and running[j] and not (t == victim and progress)])
    return out


def _fair_components(graph: PolicyGraph, edges: list, fairness: str) -> Iterator[set[int]]:
    """Components of the cycle graph that hold a fair cycle (a necessary condition, and sufficient for the
    whole component's closed walk)."""
    nodes = [i for i, out in enumerate(edges) if out]
    for comp in _sccs(nodes, edges, None):
        yield from (_weak(graph, edges, comp) if fairness == "weak" else _strong(graph, edges, comp))


def _weak(graph: PolicyGraph, edges: list, comp: set[int]) -> Iterator[set[int]]:
    always = -1
    steppers = 0
    for i in comp:
        always &= graph.fair[i]
        for t, _b, j in edges[i]:
            if j in comp:
                steppers |= 1 << t
    if always & ~steppers == 0:
        yield comp


def _strong(graph: PolicyGraph, edges: list, comp: set[int]) -> Iterator[set[int]]:
    owed = paid = 0
    pcs = graph.machine.pc_index
    for i in comp:
        owed |= graph.steps[i]
        for t, _b, j in edges[i]:
            if j in comp:
                paid |= 1 << graph.step_id(t, graph.states[i][pcs[t]])
    unpaid = owed & ~paid
    if not unpaid:
        yield comp
        return
    keep = [i for i in comp if not graph.steps[i] & unpaid]
    for sub in _sccs(keep, edges, set(keep)):
        yield from _strong(graph, edges, sub)


def _sccs(nodes: list[int], edges: list, within: set[int] | None) -> Iterator[set[int]]:
    """The strongly connected components of ``nodes`` over ``edges`` (per state, ``(thread, branch, target)``;
    edges leaving ``within`` ignored). Only components with an internal edge."""
    targets = _Targets(edges, within)
    for comp in components(nodes, targets):
        if len(comp) > 1 or comp[0] in targets[comp[0]]:
            yield set(comp)


class _Targets:
    """``edges[v]`` as the states a component search follows from ``v`` (only those ``within``, if given)."""

    def __init__(self, edges: list, within: set[int] | None):
        self.edges, self.within = edges, within

    def __getitem__(self, v: int) -> list[int]:
        within = self.within
        return [j for _t, _b, j in self.edges[v] if within is None or j in within]


def components(nodes: list[int], edges: Any) -> list[list[int]]:
    """The strongly connected components of ``nodes`` (Tarjan's algorithm, iterative; ``edges[i]``, a list or
    a mapping, holds the nodes ``i`` leads to), every one, sinks first: a component comes after every
    component it reaches."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    found: list[list[int]] = []
    for root in nodes:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(edges[root]))]
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(edges[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
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
                    found.append(comp)
    return found


def _nearest(graph: PolicyGraph, victim: int, comps: list[set[int]], edges: list, fairness: str,
             bound: int | None, budget: list[int]) -> LassoPath | None:
    """The shortest lasso of ``victim`` through the fair components, shorter than ``bound`` if given."""
    owner = {i: comp for comp in comps for i in comp}
    best: tuple[int, int, list] | None = None  # (total, start, cycle)
    limit = bound
    try:
        for s in sorted(owner, key=lambda i: graph.dist[i]):
            if limit is not None and graph.dist[s] + 1 >= limit:
                break
            longest = None if limit is None else limit - graph.dist[s] - 1
            cycle = _shortest_cycle(graph, s, owner[s], edges, fairness, longest, budget)
            if cycle is not None:
                total = graph.dist[s] + len(cycle)
                best = (total, s, cycle)
                limit = total
    except _Budget:
        if best is None:
            s = min(owner, key=lambda i: graph.dist[i])
            return _lasso(graph, victim, s, _covering_cycle(graph, s, owner[s], edges, fairness), False)
        return _lasso(graph, victim, best[1], best[2], False)
    return None if best is None else _lasso(graph, victim, best[1], best[2], True)


def _lasso(graph: PolicyGraph, victim: int, s: int, cycle: list, shortest: bool) -> LassoPath:
    states, choices = graph.stem(s)
    start = len(choices)
    for t, b, j in cycle:
        choices.append((t, b))
        states.append(graph.states[j])
    return LassoPath(victim, states, choices, start, shortest)


def _shortest_cycle(graph: PolicyGraph, s: int, comp: set[int], edges: list, fairness: str,
                    longest: int | None, budget: list[int]) -> list | None:
    """The shortest fair closed walk from ``s`` inside ``comp`` (at most ``longest`` steps), as
    ``[(thread, branch, target)]``, or None.

    BFS over ``(state, obligations)``. Weak: the bit set of threads discharged
    so far (stepped, or disabled for fairness at a state of the walk); the
    walk is fair when all are. Strong: the steps owed (enabled somewhere on
    the walk) and paid (taken); fair when every owed step is paid.
    """
    pcs = graph.machine.pc_index
    if fairness == "weak":
        full = (1 << len(pcs)) - 1
        start: tuple = (s, full & ~graph.fair[s])

        def advance(key: tuple, t: int, j: int) -> tuple:
            return j, key[1] | (1 << t) | (full & ~graph.fair[j])

        def done(key: tuple) -> bool:
            return key[1] == full
    else:
        start = (s, graph.steps[s], 0)

        def advance(key: tuple, t: int, j: int) -> tuple:
            v, owed, paid = key
            return j, owed | graph.steps[j], paid | (1 << graph.step_id(t, graph.states[v][pcs[t]]))

        def done(key: tuple) -> bool:
            return key[1] & ~key[2] == 0
    parent: dict[tuple, Any] = {start: None}
    level = [start]
    depth = 0
    while level and (longest is None or depth < longest):
        depth += 1
        nxt_level = []
        for key in level:
            for t, b, j in edges[key[0]]:
                if j not in comp:
                    continue
                new = advance(key, t, j)
                if j == s and done(new):
                    return _unwind(parent, key, (t, b, j))
                if new not in parent:
                    parent[new] = (key, (t, b, j))
                    nxt_level.append(new)
        budget[0] -= len(nxt_level)
        if budget[0] < 0:
            raise _Budget
        level = nxt_level
    return None


def _unwind(parent: dict, key: tuple, last: tuple) -> list:
    out = [last]
    while parent[key] is not None:
        key, move = parent[key]
        out.append(move)
    out.reverse()
    return out


def _covering_cycle(graph: PolicyGraph, s: int, comp: set[int], edges: list, fairness: str) -> list:
    """A fair closed walk from ``s`` found cheaply: visit every edge of ``comp`` that a fairness obligation
    needs, by shortest legs (used only past the budget)."""
    pcs = graph.machine.pc_index
    if fairness == "weak":
        # Each thread steps, or the walk passes a state where it is disabled.
        wanted = [lambda i, t, j, u=u: t == u or not graph.fair[j] >> u & 1
                  for u in range(len(pcs)) if graph.fair[s] >> u & 1]
    else:
        owed = 0
        for i in comp:
            owed |= graph.steps[i]
        wanted = [lambda i, t, j, k=k: graph.step_id(t, graph.states[i][pcs[t]]) == k
                  for k in range(len(graph.step_ids)) if owed >> k & 1]
    cycle: list = []
    cur = s
    for goal in wanted + [lambda i, t, j: j == s]:
        leg = _leg(edges, comp, cur, goal)
        cycle += leg
        cur = leg[-1][2]
    return cycle


def _leg(edges: list, comp: set[int], src: int, goal: Callable) -> list:
    """A shortest path inside ``comp`` from ``src`` whose last move satisfies ``goal(state, thread, target)``."""
    prev: dict[int, Any] = {src: None}
    queue = deque([src])
    while queue:
        v = queue.popleft()
        for t, b, j in edges[v]:
            if j not in comp:
                continue
            if goal(v, t, j):
                return _unwind(prev, v, (t, b, j))
            if j not in prev:
                prev[j] = (v, (t, b, j))
                queue.append(j)
    raise AssertionError("a fair component has a walk through every required edge")  # pragma: no cover

"""Choosing schedules: stateless DFS with dynamic partial-order reduction, and the samplers.

Theory of operation
-------------------
Real code cannot be snapshotted, so the search is *stateless* (Godefroid's
VeriSoft, CHESS, loom): every schedule runs the test body from the start,
replaying a prefix of choices and then choosing anew. The choices of the
current schedule are a stack of :class:`Node` objects -- one per scheduling
decision -- that survives from one run to the next; each node remembers
which choices were enabled there, which are still to be explored
(``backtrack``) and which have been (``done``). When a run ends, the deepest
node with an unexplored backtrack choice is where the next run diverges.

**Which choices must be explored.** Without reduction (``reduce="none"``)
every enabled choice of every node is (plain DFS). With ``reduce="dpor"``
only those that can lead to a different outcome are, by dynamic
partial-order reduction with sleep sets -- Flanagan and Godefroid,
"Dynamic Partial-Order Reduction for Model Checking Software" (POPL 2005),
the algorithm loom implements:

* Two operations are *dependent* when they are of different threads and
  touch a common object (a lock, a condition, a queue, a thread's lifetime),
  unless both only read it; interrupts, timed waits and line steps depend on
  everything. Swapping two adjacent independent transitions changes nothing,
  so exploring one order suffices.
* Each new state checks, for every thread ``p``, the last transition ``i``
  that is dependent with ``p``'s announced operation, could have been enabled
  together with it, and does not happen before ``p`` (vector clocks over the
  dependencies). ``p`` must then also be tried at the node before ``i``, or,
  when ``p`` was not enabled there, a thread whose later transitions lead to
  ``p`` (a persistent set built on the fly); failing both, every enabled
  thread. The check is incremental: only the thread that just moved is
  scanned back through the whole run; the others are checked against the
  newest transition alone, since their last conflict before it was already
  handled at the state before.
* **Sleep sets** (Godefroid) stop the same interleaving being explored
  twice from both ends: a choice already explored at a node, and
  independent of the one taken now, sleeps in the subtree until a dependent
  transition wakes it. A run in which every enabled choice sleeps is cut
  (``pruned``): everything it could do was explored elsewhere.
* **Data choices are always explored in full**: which waiter a
  ``notify_one`` under ``notify="any"`` wakes, a spurious wakeup, and whether
  an interrupt fires on the thread about to move. They are alternatives of
  one thread's transition, not an order between threads, so partial-order
  reduction has nothing to say about them.

**The preemption bound.** A preemption is a switch away from a thread that
could have gone on (CHESS, Musuvathi and Qadeer, PLDI 2007); switching from
a thread that blocked or finished is free. With ``preemption_bound=k``
choices that would exceed ``k`` are never taken. A bounded search is plain
DFS, without partial-order reduction: DPOR explores one order of each class
of equivalent schedules, and the order it picks may need more preemptions
than the bound allows while another order of the same class does not, so
bounded DPOR can miss what the bound allows. Bounded partial-order reduction
(Coons, Musuvathi and McKinley, OOPSLA 2013: backtrack points also at the
last context switch before each race; sleep sets off) was tried and the
differential test caught it missing a class on the semaphore buffer at bound
1. So ``reduce="dpor"`` applies to unbounded searches only, and a bounded
search says ``reduce=none`` in its result. An unbounded DPOR proof covers
every bound, and is usually the cheaper one.

Every result is replayable: a schedule is the list of choices, and
:class:`Replay` forces them, raising :class:`Nondeterministic` when the code
does something else than it did (the test depends on something other than
the schedule: time, randomness, a global).

The samplers: ``random`` picks uniformly among the threads that can move;
``pct`` is Burckhardt et al.'s Probabilistic Concurrency Testing (random
distinct priorities, ``depth - 1`` priority change points among the ``k``
steps of a run, always run the highest-priority thread); both take data
choices at :data:`DATA_RATE`, so a spurious wakeup or an interrupt is
rare rather than half of all choices.
"""

from __future__ import annotations

import random as _random
from typing import Any, Sequence

from .._check.result import ReplayDivergence, Trace
from .scheduler import Choice, Execution, Op

__all__ = ["DATA_RATE", "DFS", "Node", "Nondeterministic", "PCT", "RandomWalk", "Replay", "Scripted",
           "alt_text", "parse_alt"]

#: How often a sampler takes a data choice (spurious wakeup, interrupt) when one is offered:
#: rare enough that runs reach deep states, frequent enough that a few hundred runs try each.
DATA_RATE = 0.05


class Nondeterministic(ReplayDivergence):
    """The code did something else under the same schedule: it depends on more than the schedule."""


def alt_text(ex: Execution, c: Choice) -> str | None:
    """The branch text of a choice in a trace: None for the plain operation."""
    if c.alt == 0:
        return None
    if c.alt == -1:
        return "spurious"
    if c.interrupt is not None:
        return f"interrupt {c.interrupt}"
    return f"waiter {c.alt}"


def parse_alt(text: str | None) -> int:
    """The inverse of :func:`alt_text`."""
    if text is None:
        return 0
    if text == "spurious":
        return -1
    kind, _, n = text.partition(" ")
    if kind == "interrupt":
        return -2 - int(n)
    if kind == "waiter":
        return int(n)
    raise ValueError(f"unknown branch {text!r} in a code trace")


# -- dependency -------------------------------------------------------------------------

def _sig(op: Op, c: Choice) -> tuple[frozenset, bool, bool]:
    return op.keys, op.write, op.star or c.interrupt is not None or c.alt == -1  # (-1: a spurious wakeup)


def _blocked_choices_depend_on_all(ex: Execution, ops: dict[int, Op]) -> None:
    """Mark star the operation a thread may be blocked in and yet have a choice at: a condition wait under
    ``spurious="on"``, any operation that may block under an interrupt that fires while blocked. Whether that
    choice is offered depends on every other thread's steps -- one that ends the run first, or takes the
    condition's lock, takes it away: with nobody else able to move, a blocked choice is not offered -- and
    not on the keys of the operation, so DPOR must order those steps after it too. (Left to the keys, DPOR
    said "ok, exhaustive" of a daemon waiter that pops from an empty list once woken for nothing, and of a
    Ctrl-C handler that raises, both found by the plain search in 2 and 3 runs.)"""
    blocked_interrupts = [i for i, intr in enumerate(ex.interrupts)
                          if intr.when in ("blocked", "both") and ex.interrupts_left[i] > 0]
    for vt in ex.threads:
        op = ops.get(vt.index)
        if op is None or op.star or op.enabled is None or vt.in_interrupt:
            continue
        if (op.kind == "wake" and ex.spurious_left > 0) or any(ex.interrupts[i].applies(vt)
                                                               for i in blocked_interrupts):
            op.star = True


def _dependent(a: tuple[frozenset, bool, bool], b: tuple[frozenset, bool, bool]) -> bool:
    if a[2] or b[2]:
        return True
    shared = a[0] & b[0]
    return bool(shared) and (a[1] or b[1])


def _after(clock: list[int], t: int, i: int) -> bool:
    """Whether the event with this vector clock happens after event ``i`` (of thread ``t``)."""
    return t < len(clock) and clock[t] >= i + 1


def _coenabled(done: Op, later: Op) -> bool:
    """False when the two cannot be enabled together: a release and a *blocking* acquire of one lock, a
    thread's exit and a *blocking* join of it.

    A try-lock (``acquire(blocking=False)``, ``timeout=0``) is always enabled, and a timed acquire or join
    is enabled once its deadline passes: either can run, and fail, while the lock is held or the thread
    alive, so it races with the release or the exit like any other dependent pair."""
    if done.obj is not None and done.obj is later.obj:
        kinds = {done.kind, later.kind}
        waiting = done if done.kind in ("acquire", "join") else later
        if waiting.enabled is None or waiting.deadline is not None:
            return True
        if kinds == {"exit", "join"}:
            return False
        if kinds == {"acquire", "release"} and getattr(done.obj, "_ilv_kind", "") in ("lock", "rlock"):
            # Released by its holder, nobody else's blocking acquire is enabled then. A release by another
            # thread (lock_release="any") can also run while the lock is free: it races with the acquire.
            return not (done if done.kind == "release" else later).by_holder
    return True


class Node:
    """One scheduling decision of the current schedule, kept across runs."""

    __slots__ = ("opts", "ops", "enabled_t", "backtrack", "done", "sleep", "chosen", "prev", "preempts", "cut",
                 "hints", "labels")

    def __init__(self, opts: Sequence[Choice], ops: dict[int, Op], prev: int | None, preempts: int):
        self.opts = tuple(opts)
        self.ops = ops
        self.enabled_t = {c.t for c in opts if c.alt >= 0}
        self.backtrack: set[Choice] = set()
        self.done: set[Choice] = set()
        self.sleep: set[Choice] = set()
        self.chosen: Choice | None = None
        self.prev = prev
        self.preempts = preempts
        self.cut = False  # a backtrack choice here was left out by the preemption bound
        #: For a backtrack choice: the order of threads that reverses the race it was added for (the
        #: wakeup sequence of optimal DPOR, used here only as the preferred order after it).
        self.hints: dict[Choice, list[int]] = {}
        #: What each choice was, in words (thread and operation), for a divergence's message.
        self.labels: str = ""

    def is_preemption(self, c: Choice) -> bool:
        return self.prev is not None and c.t != self.prev and self.prev in self.enabled_t

    def sig(self, c: Choice) -> tuple[frozenset, bool, bool]:
        return _sig(self.ops[c.t], c)


def last_race_scan(dfs: DFS, ex: Execution, p: int, op: Op, psig: tuple, k: int) -> int | None:
    """:meth:`DFS._last_race` by its definition: the latest event before ``k`` of another thread that is
    dependent with ``op``, does not happen before ``p``, is co-enabled with it and did not enable it."""
    events = ex.events
    for i in range(k - 1, -1, -1):
        e = events[i]
        if e.t == p or not _dependent((e.keys, e.write, e.star), psig):
            continue
        if ex.happens_before(i, p) or not _coenabled(e.op, op) or dfs._enabler(i, e.op, p, op):
            continue
        return i
    return None


class _EventIndex:
    """One execution's events, per thread: all of them, its ``star`` ones, and per key those touching it, each
    list in order. Built as the execution grows (its events are only ever appended)."""

    def __init__(self, ex: Execution):
        self.ex = ex
        self.n = 0
        self.every: dict[int, list[int]] = {}
        self.star: dict[int, list[int]] = {}
        self.keyed: dict[Any, dict[int, list[int]]] = {}

    def upto(self, k: int) -> None:
        events = self.ex.events
        for i in range(self.n, k):
            e = events[i]
            self.every.setdefault(e.t, []).append(i)
            if e.star:
                self.star.setdefault(e.t, []).append(i)
            for key in e.keys:
                self.keyed.setdefault(key, {}).setdefault(e.t, []).append(i)
        self.n = max(self.n, k)

    def candidates(self, p: int, psig: tuple) -> list[tuple[int, list[list[int]]]]:
        """Each other thread, with the lists of its events that can be dependent with ``psig``."""
        out = []
        for u in self.every:
            if u == p:
                continue
            if psig[2]:
                lists = [self.every[u]]
            else:
                lists = [by[u] for by in (self.keyed.get(key) for key in psig[0]) if by and u in by]
                if u in self.star:
                    lists.append(self.star[u])
            if lists:
                out.append((u, lists))
        return out


class DFS:
    """Stateless depth-first search over schedules, with DPOR and sleep sets unless ``reduce="none"``."""

    def __init__(self, reduce: str = "dpor", bound: int | None = None, sleep_sets: bool = True):
        if reduce not in ("dpor", "none"):
            raise ValueError(f"reduce must be 'dpor' or 'none', not {reduce!r}")
        # Under a bound: plain DFS (see "The preemption bound" above).
        self.reduce = reduce == "dpor" and bound is None
        self.sleep_sets = sleep_sets and self.reduce
        self.bound = bound
        self.stack: list[Node] = []
        self.hint: list[int] = []
        self.pruned = 0
        self.bound_cut = False
        self._index: _EventIndex | None = None

    # -- one run --------------------------------------------------------------------

    def choose(self, ex: Execution, opts: list[Choice]) -> Choice | None:
        k = len(ex.events)
        ops = {vt.index: vt.op for vt in ex.threads if not vt.finished and vt.op is not None}
        if self.reduce:
            _blocked_choices_depend_on_all(ex, ops)
        if k < len(self.stack):
            node = self.stack[k]
            if node.opts != tuple(opts) or node.labels != _show(ex, opts):
                raise Nondeterministic(
                    f"decision {k}: the same schedule offered {_show(ex, opts)} this time and {node.labels} "
                    "before: the code depends on something other than the schedule (time, randomness, a global, "
                    "hash order)")
            return node.chosen
        parent = self.stack[-1] if self.stack else None
        preempts = 0
        if parent is not None:
            preempts = parent.preempts + (1 if parent.is_preemption(parent.chosen) else 0)
        node = Node(opts, ops, ex.last, preempts)
        node.labels = _show(ex, opts)
        if self.reduce:
            if parent is not None and self.sleep_sets:
                pc = parent.chosen
                psig = parent.sig(pc)
                node.sleep = {s for s in (parent.sleep | parent.done) if s != pc and s.t != pc.t
                              and s in node.opts and not _dependent(parent.sig(s), psig)}
            self._races(ex, node, k)
        allowed = [c for c in opts if c not in node.sleep and self._allowed(node, c)]
        if not allowed:
            self.pruned += 1
            self.stack.append(node)
            node.chosen = None
            return None
        c = self._first(node, allowed)
        self._take(node, c)
        self.stack.append(node)
        return c

    def _first(self, node: Node, allowed: list[Choice]) -> Choice:
        while self.hint:
            t = self.hint.pop(0)
            for c in allowed:
                if c.t == t and c.alt >= 0:
                    return c
            self.hint = []
        for c in allowed:
            if c.t == node.prev and c.alt >= 0:
                return c
        for c in allowed:
            if c.alt >= 0:
                return c
        return allowed[0]

    def _take(self, node: Node, c: Choice) -> None:
        node.chosen = c
        node.done.add(c)
        if self.reduce:
            node.backtrack.add(c)
            node.backtrack.update(o for o in node.opts if o.t == c.t)  # the data choices of this transition
            # and what a blocked thread can still do -- an interrupt, a spurious wakeup -- which no race between
            # threads would ever add (a spurious wakeup was left out: DPOR said "ok, exhaustive" of a waiter
            # that pops from an empty list once woken for nothing, found by the plain search in 2 runs)
            node.backtrack.update(o for o in node.opts if o.alt < 0 and o.t not in node.enabled_t)
        else:
            node.backtrack.update(node.opts)

    def _allowed(self, node: Node, c: Choice) -> bool:
        if self.bound is None:
            return True
        return node.preempts + (1 if node.is_preemption(c) else 0) <= self.bound

    # -- DPOR: races found at a new state ------------------------------------------------

    def _races(self, ex: Execution, node: Node, k: int) -> None:
        if k == 0:
            return
        mover = ex.events[-1].t
        prev_ops = self.stack[k - 1].ops if k - 1 < len(self.stack) else {}
        newest = ex.events[-1]
        for p, op in node.ops.items():
            psig = (op.keys, op.write, op.star)
            if p == mover or prev_ops.get(p) is not op:
                i = self._last_race(ex, p, op, psig, k)
            elif (newest.t != p and _dependent((newest.keys, newest.write, newest.star), psig)
                  and not ex.happens_before(k - 1, p) and _coenabled(newest.op, op)
                  and not self._enabler(k - 1, newest.op, p, op)):
                i = k - 1
            else:
                continue
            if i is not None:
                self._backtrack_at(ex, i, p, k)

    def _last_race(self, ex: Execution, p: int, op: Op, psig: tuple, k: int) -> int | None:
        """The latest event before ``k`` that races with ``p``'s next operation ``op``, or None.

        :func:`last_race_scan` is the definition: every event, latest first. Scanning them all at every
        step made a long run quadratic (a livelock took minutes to reach ``max_steps``), so this looks
        only where a race can be: in each other thread's events that share a key with ``op`` or are
        ``star`` (all of them if ``op`` is), latest first, stopping at the first that happens before
        ``p`` (so do all earlier ones of that thread) or is no later than the best found. The latest
        over those lists is the scan's answer (tests/test_interleavings_review12.py compares the two at
        every call over the catalog's programs)."""
        index = self._index
        if index is None or index.ex is not ex:
            index = self._index = _EventIndex(ex)
        index.upto(k)
        events, clock, best = ex.events, ex.tclock[p], -1
        for u, lists in index.candidates(p, psig):
            floor = clock[u] if u < len(clock) else 0  # u's events before it happen before p
            for lst in lists:
                for i in reversed(lst):
                    if i <= best or i < floor:
                        break
                    if i >= k:
                        continue
                    e = events[i]
                    if not _dependent((e.keys, e.write, e.star), psig):
                        continue
                    if not _coenabled(e.op, op) or self._enabler(i, e.op, p, op):
                        continue
                    best = i
                    break
        return best if best >= 0 else None

    def _enabler(self, i: int, done: Op, p: int, op: Op) -> bool:
        """Whether transition ``i`` may have *enabled* ``p``'s operation rather than raced with it: ``p``
        already waited at this very operation, disabled, before ``i``, and ``i`` acted on its object (a
        notify for a waiter, a release for an acquire, a put for a get). Reordering them is not possible;
        another enabler would race with ``i`` on that object, and that race is explored."""
        node = self.stack[i]
        return (done.obj is not None and done.obj is op.obj and node.ops.get(p) is op
                and p not in node.enabled_t)

    def _backtrack_at(self, ex: Execution, i: int, p: int, k: int) -> None:
        self._add(ex, self.stack[i], i, p, k)

    def _add(self, ex: Execution, node: Node, i: int, p: int, k: int) -> None:
        if self.sleep_sets:
            self._add_source(ex, node, i, p, k)
            return
        if p in node.enabled_t:
            node.backtrack.update(c for c in node.opts if c.t == p and c.alt >= 0)
            return
        events = ex.events
        for q in sorted(node.enabled_t):
            if any(events[j].t == q and ex.happens_before(j, p) for j in range(i + 1, k)):
                node.backtrack.update(c for c in node.opts if c.t == q and c.alt >= 0)
                return
        node.backtrack.update(node.opts)

    def _add_source(self, ex: Execution, node: Node, i: int, p: int, k: int) -> None:
        """Source-DPOR's rule (Abdulla, Aronis, Jonsson and Sagonas, POPL 2014): reversing the race needs
        one of the *initials* of ``v`` -- the transitions after ``i`` that do not happen after it, then
        ``p`` -- first at the node before ``i``; if one is already there, nothing is added."""
        events = ex.events
        ti = events[i].t
        v = [j for j in range(i + 1, k) if not _after(events[j].clock, ti, i)]
        initials: list[int] = []
        for n, j in enumerate(v):
            u = events[j].t
            if u not in initials and not any(_after(events[j].clock, events[m].t, m) for m in v[:n]):
                initials.append(u)
        if not any(ex.happens_before(m, p) for m in v) and p not in initials:
            initials.append(p)
        if any(c.t in initials for c in node.backtrack):
            return
        order = [events[j].t for j in v] + [p]
        for q in ([p] if p in initials else []) + initials:
            if q in node.enabled_t:
                rest = list(order)
                rest.remove(q)
                for c in node.opts:
                    if c.t == q and c.alt >= 0:
                        node.backtrack.add(c)
                        node.hints.setdefault(c, rest)
                return
        node.backtrack.update(node.opts)

    def finished(self, ex: Execution) -> None:
        """The run ended (a deadlock, a violation, or every thread done): the races of its last state.

        No decision is made there, so :meth:`choose` never saw it; a thread blocked for good at the end
        (the second lock of a lock-order inversion) races with what blocks it exactly as at any other
        state."""
        k = len(ex.events)
        if not self.reduce or ex.outcome in ("pruned", "stuck") or k == 0 or k > len(self.stack):
            return
        ops = {vt.index: vt.op for vt in ex.threads if not vt.finished and vt.op is not None}
        _blocked_choices_depend_on_all(ex, ops)
        parent = self.stack[k - 1]
        final = Node((), ops, ex.last, parent.preempts)
        self._races(ex, final, k)

    # -- between runs -----------------------------------------------------------------

    def next_schedule(self) -> bool:
        """Move to the next schedule to run; False when the search is complete."""
        while self.stack:
            node = self.stack[-1]
            todo = sorted(c for c in node.backtrack - node.done if c not in node.sleep)
            for c in todo:
                if self._allowed(node, c):
                    self._take(node, c)
                    self.hint = list(node.hints.get(c, ()))
                    return True
                node.cut = True
                self.bound_cut = True
                node.done.add(c)
            self.stack.pop()
        return False


def _show(ex: Execution, opts: Sequence[Choice]) -> str:
    """The choices in words: thread, operation and (when not the plain one) the branch."""
    out = []
    for c in opts:
        vt = ex.threads[c.t] if c.t < len(ex.threads) else None
        what = f"{vt.name}: {vt.op.describe()}" if vt is not None and vt.op is not None else str(c.t)
        out.append(what if c.alt == 0 else f"{what} [{alt_text(ex, c)}]")
    return "[" + "; ".join(out) + "]"


class _Sampler:
    """What the samplers share: thread choice first, then a data choice at DATA_RATE."""

    def __init__(self, rng: _random.Random):
        self.rng = rng

    def _alt(self, mine: list[Choice]) -> Choice:
        plain = [c for c in mine if c.alt >= 0]
        data = [c for c in mine if c.alt < 0]
        if data and (not plain or self.rng.random() < DATA_RATE):
            return self.rng.choice(data)
        return self.rng.choice(plain)


class RandomWalk(_Sampler):
    """A uniformly random thread at each decision."""

    def choose(self, ex: Execution, opts: list[Choice]) -> Choice | None:
        threads = sorted({c.t for c in opts})
        t = self.rng.choice(threads)
        return self._alt([c for c in opts if c.t == t])


class PCT(_Sampler):
    """Probabilistic Concurrency Testing: random priorities and ``depth - 1`` change points among ``k`` steps."""

    def __init__(self, rng: _random.Random, depth: int, k: int):
        super().__init__(rng)
        self.depth = depth
        self.k = max(1, k)
        self.priority: dict[int, float] = {}
        self.changes = sorted(rng.sample(range(1, self.k + 1), min(self.k, max(0, depth - 1))))
        self.steps = 0

    def choose(self, ex: Execution, opts: list[Choice]) -> Choice | None:
        self.steps += 1
        for c in opts:
            if c.t not in self.priority:
                self.priority[c.t] = self.depth + self.rng.random()
        t = max({c.t for c in opts}, key=lambda u: self.priority[u])
        if self.steps in self.changes:
            self.priority[t] = (self.depth - 1 - self.changes.index(self.steps)) + 0.0
            t = max({c.t for c in opts}, key=lambda u: self.priority[u])
        return self._alt([c for c in opts if c.t == t])


class Scripted:
    """Choices from a list of integers (Hypothesis's): each indexes the choices, ordered from the thread
    that ran last, so 0 means "keep going"; past the end of the list every choice is 0."""

    def __init__(self, xs: Sequence[int]):
        self.xs = xs
        self.pos = 0

    def choose(self, ex: Execution, opts: list[Choice]) -> Choice | None:
        if len(opts) == 1:
            return opts[0]
        x = self.xs[self.pos] if self.pos < len(self.xs) else 0
        self.pos += 1
        n = len(ex.threads)
        last = ex.last if ex.last is not None else 0
        order = sorted(opts, key=lambda c: ((c.t - last) % n, c.alt < 0, abs(c.alt)))
        return order[x % len(order)]


class Replay:
    """Force a recorded schedule: thread names and branches, checked against the recorded labels."""

    def __init__(self, trace: Trace):
        self.steps = list(trace.steps)

    def choose(self, ex: Execution, opts: list[Choice]) -> Choice | None:
        k = len(ex.events)
        if k >= len(self.steps):
            raise Nondeterministic(f"the schedule ends after {len(self.steps)} steps, but the code goes on "
                                   f"(it offers {_show(ex, opts)})")
        want = self.steps[k]
        names = {vt.name: vt.index for vt in ex.threads}
        t = names.get(want.thread)
        alt = parse_alt(want.branch)
        c = Choice(t, alt) if t is not None else None
        if c is None or c not in opts:
            raise Nondeterministic(f"step {k + 1}: the schedule asks for {want.thread} ({want.step}), which is not "
                                   f"enabled here (enabled: {_show(ex, opts)})")
        vt = ex.threads[t]
        label = vt.op.describe() if c.interrupt is None else None
        if label is not None and c.alt != -1 and label != want.step:
            raise Nondeterministic(f"step {k + 1}: {want.thread} is at {label!r}, not {want.step!r}")
        return c

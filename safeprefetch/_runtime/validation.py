"""Translation validation: the generated transitions are the machine, state by state.

What it checks
--------------
:func:`validate` walks every reachable state of a machine (breadth first,
every interleaving, no reduction) and, in each state, compares the generated
transitions (``codegen.py``) with the machine they were generated from:

* **the same enabled steps and successors**: ``CompiledMachine.successors``
  equals ``Machine.successors`` -- the same ``(thread, branch)`` choices in
  the same order, the same successor states, field by field of the same
  types (``True`` is not ``1``, a slot state is not its int), the same step
  violations (kind and message);
* **the same invariant verdicts** (when the invariants are folded in): a
  successor the generated code returns as :class:`~.codegen.Broken` is the
  one ``Machine.invariant_violation`` rejects, with the same kind and
  message, and no other successor is rejected (unless the state before it
  already broke one);
* **the same guards**: each generated ``enabled`` function agrees with
  ``Machine.enabled``, and ``first`` returns the first enabled branch;
* **sound footprints**: every shared field a successor changes is in that
  branch's write set, and no step changes another thread's locals;
* **sound wake sets**: a step that turns another thread's disabled step
  into an enabled one lists that thread, at that program counter, in its
  wake set -- so waking only those never loses a wakeup.

It reports differences as data (:class:`Difference`), never raises for one,
so a test can show the first few with their states.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .._dsl.violations import StepViolation
from .._dsl.codegen import Broken, CompiledMachine

__all__ = ["Difference", "Validation", "same", "validate"]


@dataclass(frozen=True)
class Difference:
    """One way the generated code and the machine disagree, in one state."""

    #: What differs: "successors", "violation", "invariant", "guard", "first", "writes", "wake".
    what: str
    #: A sentence naming the thread, step and branch.
    message: str
    #: The state where it differs.
    state: tuple


@dataclass(frozen=True)
class Validation:
    """The result of :func:`validate`."""

    #: Distinct states walked.
    states: int
    #: Transitions compared.
    transitions: int
    #: Every difference found (at most ``limit``); empty means the generated code is the machine.
    differences: tuple[Difference, ...]
    #: Whether every reachable state was walked (False when ``max_states`` cut the walk).
    exhaustive: bool

    @property
    def ok(self) -> bool:
        return self.exhaustive and not self.differences


def same(a: object, b: object) -> bool:
    """Equal and of the same types, all the way down a tuple: ``==`` alone takes ``True`` for ``1`` and a slot
    state for its int value, which print, and behave as a successor's field, differently."""
    if type(a) is not type(b):
        return False
    if type(a) is tuple:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))  # type: ignore[arg-type]
    return a == b


def _same_violation(a: object, b: object) -> bool:
    return (isinstance(a, StepViolation) and isinstance(b, StepViolation) and type(a) is type(b)
            and a.kind == b.kind and a.message == b.message)


class _Walk:
    def __init__(self, compiled: CompiledMachine, limit: int):
        self.c, self.m, self.limit = compiled, compiled.machine, limit
        self.diffs: list[Difference] = []
        self.transitions = 0

    def report(self, what: str, message: str, state: tuple) -> None:
        if len(self.diffs) < self.limit:
            self.diffs.append(Difference(what, message, state))

    def name(self, t: int, state: tuple, b: int) -> str:
        info = self.m.step_info(state, t)
        branch = info.branches[b] if info is not None and b < len(info.branches) else b
        return f"{self.m.thread_names[t]} at {self.m.pc(state, t)!r}, branch {branch!r}"

    def state(self, state: tuple) -> list[tuple]:
        """Compare everything in ``state``; the successors to walk on."""
        m, c = self.m, self.c
        want, got = m.successors(state), c.successors(state)
        if [ch for ch, _ in want] != [ch for ch, _ in got]:
            self.report("successors", f"enabled choices {[ch for ch, _ in want]} != generated "
                        f"{[ch for ch, _ in got]}", state)
            return [n for _, n in want if type(n) is tuple]
        broken_before = m.invariant_violation(state) if m.invariants else None
        for ((t, b), w), (_, g) in zip(want, got):
            self.transitions += 1
            self.successor(state, t, b, w, g, broken_before)
        self.guards(state)
        return [n for _, n in want if type(n) is tuple and (not m.invariants or m.invariant_violation(n) is None)]

    def successor(self, state: tuple, t: int, b: int, w: object, g: object, broken_before: object) -> None:
        m, c = self.m, self.c
        where = self.name(t, state, b)
        if type(w) is not tuple:
            if not _same_violation(w, g):
                self.report("violation", f"{where}: the machine's step violation {w!r} != generated {g!r}", state)
            return
        if isinstance(g, Broken):
            bad = m.invariant_violation(w) if m.invariants else None
            if not same(g.state, w) or bad != (g.kind, g.message):
                self.report("invariant", f"{where}: generated {g!r}, the machine's verdict {bad!r}", state)
            return
        if not same(g, w):
            self.report("successors", f"{where}: successor differs" + (" in a type" if g == w else ""), state)
            return
        if (c.invariants_folded and m.invariants and broken_before is None
                and m.invariant_violation(w) is not None):
            self.report("invariant", f"{where}: the successor breaks {m.invariant_violation(w)} and the generated "
                        "code did not say so", state)
        step = c.steps[t].get(m.pc(state, t))
        if step is None:
            return
        changed = {i for i in range(len(state)) if state[i] != w[i]}
        shared = set(m.shared_index.values())
        if (changed & shared) - step.writes[b]:
            self.report("writes", f"{where}: changes fields {sorted((changed & shared) - step.writes[b])} "
                        f"outside its write set {sorted(step.writes[b])}", state)
        own = {m.pc_index[t], *m.local_index[t].values()}
        if changed - shared - own:
            self.report("writes", f"{where}: changes another thread's fields {sorted(changed - shared - own)}", state)
        self.wakes(state, t, b, w, step.wake[b])

    def wakes(self, state: tuple, t: int, b: int, nxt: tuple, wake: tuple) -> None:
        m = self.m
        listed = dict(wake)
        for u in range(len(m.thread_names)):
            if u == t or m.pc(state, u) != m.pc(nxt, u):
                continue  # its own step, or moved by this one (a primitive's notify): tested anyway
            pc = m.pc(state, u)
            info = m.step_info(state, u)
            for bu in range(max(1, len(info.branches) if info is not None else 1)):
                if not m.enabled(state, u, bu) and m.enabled(nxt, u, bu) and pc not in listed.get(u, ()):
                    self.report("wake", f"{self.name(t, state, b)} enables {self.name(u, state, bu)}, which its "
                                "wake set leaves out", state)

    def guards(self, state: tuple) -> None:
        m = self.m
        for t, table in enumerate(self.c.steps):
            step = table.get(m.pc(state, t))
            if step is None:
                continue
            first = None
            for bi, test in enumerate(step.enabled):
                want = m.enabled(state, t, bi)
                if bool(test(state)) != want:
                    self.report("guard", f"{self.name(t, state, bi)}: guard {not want} != the machine's {want}",
                                state)
                if want and first is None:
                    first = bi
            got = step.first(state)
            if (got[0] if got is not None else None) != first:
                self.report("first", f"{m.thread_names[t]}: first enabled branch {got and got[0]} != {first}", state)


def validate(compiled: CompiledMachine, max_states: int | None = None, limit: int = 10) -> Validation:
    """Walk every reachable state of ``compiled.machine`` and compare (see the module doc).

    Stops after ``max_states`` distinct states (then ``exhaustive`` is
    False) or once ``limit`` differences are found.
    """
    walk = _Walk(compiled, limit)
    init = compiled.machine.init
    seen = {init}
    queue = deque([init])
    exhaustive = True
    while queue and len(walk.diffs) < limit:
        state = queue.popleft()
        for nxt in walk.state(state):
            if nxt not in seen:
                if max_states is not None and len(seen) >= max_states:
                    exhaustive = False
                    continue
                seen.add(nxt)
                queue.append(nxt)
    return Validation(len(seen), walk.transitions, tuple(walk.diffs), exhaustive and not queue)

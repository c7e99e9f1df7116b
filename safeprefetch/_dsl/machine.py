"""The compiled machine: what every driver consumes.

Compiling a model at one configuration produces a :class:`Machine`: the
initial state and, per thread, a dict from program counter to a ``fire``
function. ``fire(state)`` returns the list of ``(branch, next_state)`` pairs
of that thread's step; an empty list means the step is not enabled. A
successor is a state tuple, or a :class:`StepViolation` when taking the step
exposes a bug. ``fire`` is pure: the explorer, the live runtime, the
strategies, ``play`` and the renderers all drive the same functions, so what
the checker proves is what runs.

A fire function may carry shortcuts, each exactly equal to a use of
``fire`` (``tests/test_model_fire_parts.py`` checks them on every reachable
state of every catalog model): ``fire.enabled(state)`` tests the guard only,
``fire.branch(state, bi)`` computes one branch, ``fire.enabled_branch``.
:meth:`Machine.enabled` and :meth:`Machine.fire_branch` use them when present.

The machine also carries the program graph as data (:attr:`Machine.graph`):
for every program, each step's kind and declared targets (``graph.py``).
Tools draw it; the compiled steps enforce it.

This module never imports ``threading``: it describes machines, it does not
run them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from . import specialize as _specialize
from .graph import GraphStep
from .program import DONE, NOT_STARTED
from .usererror import check_error
from .violations import USER_ERRORS, ModelError, truth

__all__ = ["Machine", "StepInfo"]


@dataclass(frozen=True)
class StepInfo:
    """Static description of one step of one thread.

    ``kind`` is the primitive ("step", "acquire", "release", "wait", "wake",
    "spurious", "notify_one", "notify_all", "sem_acquire", "sem_release",
    "set_flag", "wait_flag", "external"). ``obj`` names the primitive it acts
    on, if any.
    """

    thread: int
    pc: str
    label: str
    kind: str
    branches: tuple[str, ...] = ()
    obj: str | None = None
    action: str | None = None
    #: (fields read, fields written) of the shared state, by index, or None when unknown.
    #: Used by partial-order reduction; filled in at compile time.
    footprint: tuple[frozenset[int], frozenset[int]] | None = field(default=None, compare=False)


@dataclass
class Machine:
    """A compiled model at one configuration: what every driver consumes."""

    name: str
    config: dict[str, Any]
    init: tuple
    thread_names: tuple[str, ...]
    pc_index: tuple[int, ...]
    tables: tuple[dict[str, Callable], ...]
    infos: tuple[dict[str, StepInfo], ...]
    shared_index: dict[str, int]
    local_index: tuple[dict[str, int], ...]
    cond_index: dict[str, int]
    mutex_index: dict[str, int]
    invariants: tuple[tuple[str, str, Callable], ...]
    end_checks: tuple[Callable, ...]
    shutdown_pred: Callable | None
    waits: dict[tuple[int, str], tuple[str, Callable | None]]
    view: type
    local_views: tuple[type, ...]
    progress_labels: frozenset[str] = frozenset()
    priorities: tuple[int, ...] = ()
    field_names: tuple[str, ...] = field(default=())
    #: Per thread, the program counters whose only step is a spurious wakeup.
    spurious_pcs: tuple[frozenset[str], ...] = ()
    #: Per thread, the program counters where a timed wait sleeps: its branch 0 times out (a real move, time
    #: passes) and, with ``spurious=on``, its branch 1 is a spurious wakeup (:meth:`spurious_move`).
    timed_sleep_pcs: tuple[frozenset[str], ...] = ()
    #: Per thread, the moves ``(pc, branch)`` that happen to a blocked thread rather than being run by the
    #: scheduler: a spurious wakeup, and every timeout (a timed condvar wait's, ``Event.wait``'s,
    #: ``Semaphore.acquire``'s and ``queue.get``'s). See :meth:`event_move`.
    event_branches: tuple[frozenset[tuple[str, int]], ...] = ()
    #: Groups of interchangeable threads (indices), for symmetry reduction.
    symmetry: tuple[tuple[int, ...], ...] = ()
    #: The program graph: per program (role), each step's label -> :class:`GraphStep` (kind and
    #: declared targets), in declaration order. Read from the declarations; see graph.py.
    graph: Mapping[str, Mapping[str, GraphStep]] = field(default_factory=dict)
    #: The program (role) each thread runs, by thread index: ``graph[thread_roles[t]]`` is thread t's graph.
    thread_roles: tuple[str, ...] = ()
    #: The Model class this machine was compiled from (``Model.compile`` sets it; None when built by hand):
    #: what the code generator builds again to reach the step functions (``codegen.compile_transitions``).
    model: Any = field(default=None, compare=False, repr=False)

    def threads_of(self, role: str) -> list[str]:
        """The names of the threads that run program ``role``."""
        return [n for n, r in zip(self.thread_names, self.thread_roles) if r == role]

    def views(self, state: Sequence, thread: int) -> tuple[Any, Any]:
        s = self.view(state)
        return s, self.local_views[thread](s)

    def shared(self, state: Sequence) -> Any:
        """A read-only-by-convention view of ``state`` with named attributes."""
        return self.view(state)

    def pc(self, state: Sequence, thread: int) -> str:
        return state[self.pc_index[thread]]

    def step_info(self, state: Sequence, thread: int) -> StepInfo | None:
        return self.infos[thread].get(state[self.pc_index[thread]])

    def successors(self, state: tuple) -> list:
        """Every enabled choice ``(thread, branch)`` of ``state`` with its successor, in canonical order.

        A successor is a state tuple, or a :class:`StepViolation` when taking
        the step exposes a bug.
        """
        out = []
        pcs = self.pc_index
        for t, table in enumerate(self.tables):
            fire = table.get(state[pcs[t]])
            if fire is not None:
                for b, nxt in fire(state):
                    out.append(((t, b), nxt))
        return out

    def fire(self, state: tuple, thread: int) -> list:
        fire = self.tables[thread].get(state[self.pc_index[thread]])
        return fire(state) if fire is not None else []

    def enabled(self, state: tuple, thread: int, branch: int | None = None) -> bool:
        """Whether ``fire(state, thread)`` would be non-empty (with ``branch``: would hold that branch).

        Exact, and cheaper than ``fire``: a user step tests its guard only, with
        no successor built. Primitive steps fall back to ``fire``.
        """
        fire = self.tables[thread].get(state[self.pc_index[thread]])
        if fire is None:
            return False
        if branch is None:
            test = getattr(fire, "enabled", None)
            return test(state) if test is not None else bool(fire(state))
        test = getattr(fire, "enabled_branch", None)
        if test is not None:
            return test(state, branch)
        return any(b == branch for b, _ in fire(state))

    def fire_branch(self, state: tuple, thread: int, branch: int) -> list:
        """``[(b, nxt) for b, nxt in fire(state, thread) if b == branch]``, computing that branch only."""
        fire = self.tables[thread].get(state[self.pc_index[thread]])
        if fire is None:
            return []
        one = getattr(fire, "branch", None)
        if one is not None:
            return one(state, branch)
        return [(b, n) for b, n in fire(state) if b == branch]

    def is_done(self, state: Sequence, thread: int) -> bool:
        return state[self.pc_index[thread]] == DONE

    def is_stuck(self, state: Sequence, successors: Sequence) -> bool:
        """True when ``successors`` of ``state`` hold nothing but spurious wakeups (or nothing).

        Spurious wakeups are *allowed*, never *guaranteed*: a system whose only
        possible moves are spurious wakeups can sit still forever, so it is stuck.
        """
        sp, pcs = self.spurious_pcs, self.pc_index
        for (t, _b), _n in successors:
            if state[pcs[t]] not in sp[t]:
                return False
        return True

    def spurious_move(self, state: Sequence, thread: int, branch: int) -> bool:
        """Whether ``thread``'s move ``branch`` from ``state`` is a spurious wakeup: a spurious step's, or a timed
        wait's second branch (its first is the timeout). Liveness never lets a cycle repeat one."""
        pc = state[self.pc_index[thread]]
        return pc in self.spurious_pcs[thread] or (branch == 1 and bool(self.timed_sleep_pcs)
                                                   and pc in self.timed_sleep_pcs[thread])

    def event_move(self, state: Sequence, thread: int, branch: int) -> bool:
        """Whether ``thread``'s move ``branch`` from ``state`` happens *to* it rather than being run by the
        scheduler: a blocked thread's spurious wakeup or timeout. Strict priority neither picks nor holds back
        such a move."""
        return bool(self.event_branches) and (state[self.pc_index[thread]], branch) in self.event_branches[thread]

    def all_done(self, state: Sequence) -> bool:
        """Every thread is done -- or was never started (a thread nobody spawned has nothing left to do)."""
        return all(state[i] == DONE or state[i] == NOT_STARTED for i in self.pc_index)

    def describe(self, state: Sequence) -> dict[str, Any]:
        """Every named field of ``state``: shared variables, primitives, and each thread's pc and locals."""
        return {n: state[i] for i, n in enumerate(self.field_names)}

    def invariant_violation(self, state: tuple) -> tuple[str, str] | None:
        s = None
        fast = self.__dict__.get("_fast_inv") or self._fast_invariants
        name = None
        try:
            for name, kind, pred, raw in fast:
                if raw:
                    holds = pred(state)
                else:
                    if s is None:
                        s = self.view(state)
                    holds = pred(s)
                if holds is True or truth(holds, f"invariant {name!r}"):
                    continue
                return kind, f"invariant {name!r} fails"
        except ModelError:
            raise
        except USER_ERRORS as e:  # the model's own invariant raised: name it
            raise check_error(f"invariant {name!r}", e, state, self.shared_index) from e
        return None

    @property
    def _fast_invariants(self):
        cached = self.__dict__.get("_fast_inv")
        if cached is None:
            cached = []
            for name, kind, pred in self.invariants:
                fast, raw = pred, False
                if _specialize.ENABLED:
                    r = _specialize.specialize(pred, self.shared_index, {}, {})
                    if r is not None:
                        fast = r[0]
                        # A known footprint means `s` is only ever subscripted: a plain tuple will do.
                        raw = fast.__footprint__ is not None and not fast.__writes__
                cached.append((name, kind, fast, raw))
            self.__dict__["_fast_inv"] = cached
        return cached

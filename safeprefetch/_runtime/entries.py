"""What the kernel knows about each step, prepared once per runtime; and what an external action sees.

The hot path does one dict lookup per step for an :class:`Entry`: the step's
label, whether it is external, its branches and their indices, its fire,
guard-only tests (``enabled`` for any branch, ``enabled_one`` for one), and
its read/write footprint, which decides which parked threads a step must
wake.

An entry comes from the machine's own ``fire`` (:class:`Entry`), or from the
generated transitions (:func:`generated_entry`, ``codegen.py``): then it
also has ``first`` (the first enabled branch, in one call), ``choose`` (the
branch a caller asked for, without building a list), per-branch write sets
(``bwrites``) and wake sets (``wake``), and ``reads`` is what its *guards*
read, which is all that decides whether a parked thread may go on.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Mapping

from .interrupts import deliver, guard, interruptible, is_marked

__all__ = ["GENERIC", "ActionContext", "Entry", "bind_actions", "generated_entry", "never", "seconds"]

#: What ``Entry.choose`` returns for a branch request only the kernel's generic path can serve.
GENERIC: Any = type("_Generic", (), {"__repr__": lambda self: "GENERIC"})()


class ActionContext:
    """What an external action sees: its thread, and a snapshot of the state when the step began.

    ``me`` is a named view of the thread's locals in that snapshot (built on
    first use); ``state`` is the snapshot itself, for actions that read fields
    by index (``machine.local_index``), which is cheaper.
    """

    __slots__ = ("runtime", "thread", "state", "label", "_me")

    def __init__(self, runtime: Any, thread: int, state: tuple, label: str):
        self.runtime = runtime
        self.thread = thread
        self.state = state
        self.label = label
        self._me = None

    @property
    def name(self) -> str:
        return self.runtime.machine.thread_names[self.thread]

    @property
    def me(self) -> Any:
        if self._me is None:  # the state is an immutable tuple: this view is a snapshot
            self._me = self.runtime.machine.local_views[self.thread](self.state)
        return self._me


def bind_actions(machine: Any, actions: Mapping[str, Callable[[ActionContext], Any]] | None) -> dict[str, Callable]:
    """The runtime's actions by name: each key an action some external step runs (else ValueError, naming
    the model's), each action called in an interruptible frame unless it is marked ``protected`` itself
    (a Ctrl-C in a user's action is raised there, not held until the step returns)."""
    known = {info.action for infos in machine.infos for info in infos.values() if info.kind == "external"}
    bound = {}
    for name, action in dict(actions or {}).items():
        if name not in known:
            names = ", ".join(repr(a) for a in sorted(known)) or "none"
            raise ValueError(f"{machine.name}: no external step runs action {name!r} (the model's actions: {names})")
        if not callable(action):
            raise TypeError(f"{machine.name}: action {name!r} is {action!r}, not a callable f(ctx) -> branch")
        code = getattr(getattr(action, "__func__", action), "__code__", None)
        bound[name] = action if code is not None and is_marked(code) else partial(_users, action)
    return bound


@interruptible
def _users(action: Callable[[ActionContext], Any], ctx: ActionContext) -> Any:
    """A user's action: Ctrl-C in it is raised at once (one deferred in the step so far, first)."""
    if guard.deferred:
        deliver()
    return action(ctx)


def never(state: tuple) -> bool:
    return False


def seconds(timeout: float) -> float:
    """A step's timeout, refused where it would mean a silent wait forever (NaN compares false), or where it
    is not a number of seconds (``True`` is 1)."""
    if timeout.__class__ is bool:
        raise TypeError(f"timeout must be a number of seconds (or None), not {timeout!r}")
    if timeout != timeout:
        raise ValueError("timeout must be a number of seconds (or None), not nan")
    return timeout


def _any_branch(enabled_one: Callable, nb: int, state: tuple) -> bool:
    for bi in range(nb):
        if enabled_one(state, bi):
            return True
    return False


def _branch_of(fire: Callable) -> Callable:
    def enabled_one(state: tuple, bi: int) -> bool:
        for b, _ in fire(state):
            if b == bi:
                return True
        return False
    return enabled_one


class Entry:
    """What the kernel needs about one (thread, program counter), looked up once per step.

    Built once per runtime from the compiled machine, so the hot path does one
    dict lookup instead of re-deriving the step's kind, branches and footprint.
    """

    __slots__ = ("label", "external", "action", "branches", "bindex", "fire", "one", "enabled", "enabled_one",
                 "reads", "writes", "first", "choose", "bwrites", "wake", "inv", "ones", "tests")

    def __init__(self, info: Any, fire: Callable | None):
        self.label = info.label
        self.external = info.kind == "external"
        self.action = info.action
        self.branches = info.branches
        #: branch name -> branch index (a notify under notify=any names its branches
        #: "wake X" at run time: those go through the generic path).
        self.bindex = {name: i for i, name in enumerate(info.branches)}
        self.fire = fire
        if fire is None:  # asleep with no spurious wakeup: never enabled by itself
            self.one = lambda state, bi: []
            self.enabled = lambda state: False
            self.enabled_one = lambda state, bi: False
        else:
            self.one = getattr(fire, "branch", None) or (lambda state, bi: [x for x in fire(state) if x[0] == bi])
            self.enabled_one = getattr(fire, "enabled_branch", None) or _branch_of(fire)
            nb = len(info.branches)
            if nb > 1 and hasattr(fire, "enabled_branch"):
                # Any branch enabled, by a plain loop: a generator expression here (``any(...)``)
                # left suspended is closed when freed, and an interrupt landing in that close is
                # swallowed by the interpreter (found by the injection harness).
                one = self.enabled_one
                self.enabled = lambda state: _any_branch(one, nb, state)
            else:
                self.enabled = getattr(fire, "enabled", None) or (lambda state: bool(fire(state)))
        fp = info.footprint
        #: Shared fields the step reads / writes (guard, effect and next step together), or
        #: None when unknown. A parked thread whose step reads nothing the last step wrote
        #: cannot have become enabled by it.
        self.reads = fp[0] if fp is not None else None
        self.writes = fp[1] if fp is not None else None
        #: Generated steps only (see generated_entry); None here.
        self.first = self.choose = self.bwrites = self.wake = self.ones = self.tests = None
        #: The invariant predicates to check after this step (set by the runtime: none for a generated step
        #: whose transitions check them, every one for a step through the machine's own ``fire``).
        self.inv: tuple = ()


def generated_entry(info: Any, step: Any) -> Entry:
    """The entry of a generated step (``codegen.GeneratedStep``): the same interface, and the fast path.

    ``fire``, ``one``, ``enabled`` and ``enabled_one`` keep their meaning (the
    generic kernel paths, a forced schedule, use them); ``first(state)`` and
    ``choose(state, branch)`` give ``(branch index, successor)`` or None
    directly; ``bwrites[b]`` and ``wake[b]`` are branch ``b``'s write set and
    wake set; ``reads`` is what the step's guards read.
    """
    e = Entry(info, None)
    ones, tests = step.ones, step.enabled
    nb = len(ones)

    def fire(state: tuple) -> list:
        out = []
        for bi in range(nb):
            nxt = ones[bi](state)
            if nxt is not None:
                out.append((bi, nxt))
        return out

    def one(state: tuple, bi: int) -> list:
        nxt = ones[bi](state)
        return [] if nxt is None else [(bi, nxt)]

    def enabled(state: tuple) -> bool:
        for bi in range(nb):
            if tests[bi](state):
                return True
        return False

    bindex = e.bindex if info.branches else {None: 0}

    def choose(state: tuple, branch: Any) -> Any:
        """``(bi, successor)`` for ``branch`` (a name, or a tuple of names: the first enabled), or None."""
        if type(branch) is tuple:
            for name in branch:
                bi = bindex.get(name)
                if bi is None:
                    return GENERIC
                nxt = ones[bi](state)
                if nxt is not None:
                    return bi, nxt
            return None
        bi = bindex.get(branch)
        if bi is None:
            return GENERIC
        nxt = ones[bi](state)
        return None if nxt is None else (bi, nxt)

    e.fire, e.one, e.enabled = fire, one, enabled
    e.enabled_one = lambda state, bi: bool(tests[bi](state))
    e.first, e.choose = step.first, choose
    e.ones, e.tests = ones, tests  # (the kernel's C step calls them itself: ckernel.py)
    e.reads = step.reads
    e.bwrites = step.writes
    e.writes = frozenset().union(*step.writes)
    e.wake = step.wake
    return e

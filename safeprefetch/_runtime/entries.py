"""What the kernel knows about each step, prepared once per runtime; and what an external action sees.

The hot path does one dict lookup per step for an :class:`Entry`: the step's
label, whether it is external, its branches and their indices, its fire,
guard-only tests (``enabled`` for any branch, ``enabled_one`` for one), and
its read/write footprint, which decides which parked threads a step must
wake.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["ActionContext", "Entry", "never"]


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


def never(state: tuple) -> bool:
    return False


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
                 "reads", "writes")

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

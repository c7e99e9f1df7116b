"""Where everything sits in the flat state, and where one compiled step may go.

Theory of operation
-------------------
The whole state of a running model is one flat tuple:

    (shared vars..., mutexes..., condvars..., semaphores..., flags...,
     thread0 pc, thread0 locals..., thread1 pc, thread1 locals..., ...)

It is immutable and hashable, which is what lets the explorer store it in a
dict and the live runtime swap it under one lock. Every modeled primitive
keeps its state *inside* that tuple:

* Mutex      -- the owning thread's index, or -1 when free.
* CondVar    -- the ordered tuple of waiting thread indices.
* Semaphore  -- its count.
* Flag       -- a bool (an Event).

:class:`Layout` computes those positions once per compile, so every
compiled step is a closure over constant indices. :class:`Site` is one step
of one thread while it compiles: its program-counter field, its declared
targets, and how its next label is found -- the only place a step's ``next``
is resolved and checked against the declared graph, for user steps and
primitives alike.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from . import specialize as _specialize
from .builder import Builder
from .graph import GraphStep, did_you_mean, object_name, went_elsewhere
from .machine import StepInfo
from .program import ASLEEP, DONE, NOT_STARTED, TIMED_OUT, WOKEN, StepSpec
from .views import make_local_view, make_shared_view
from .usererror import step_error
from .violations import ModelError, StepError

__all__ = ["WAITS", "Layout", "Site", "union_fp"]

#: The step kinds that sleep on a condvar.
WAITS = ("wait", "timed_wait")


def union_fp(fns: Sequence[Callable]) -> tuple[frozenset[int], frozenset[int]] | None:
    """The shared fields ``fns`` read and write together; None if any of them is unknown."""
    reads: frozenset[int] = frozenset()
    writes: frozenset[int] = frozenset()
    for f in fns:
        fp = getattr(f, "__footprint__", None)
        if fp is None:
            return None  # not specialized, or hands `s` to other code: unknown
        reads |= fp[0]
        writes |= fp[1]
    return reads, writes


class Layout:
    """The field positions of one model's state, its initial value and its views."""

    def __init__(self, b: Builder):
        self.b = b
        self.fields: list[str] = []
        self.init: list[Any] = []
        self.shared_index = self._place(b.shared_vars.items())
        self.mutex_index = self._place((n, -1) for n in b.mutexes)
        self.cond_index = self._place((n, ()) for n in b.condvars)
        self.sem_index = self._place((n, initial) for n, (initial, _bound) in b.semaphores.items())
        self.flag_index = self._place(b.flags.items())
        self.pc_index: list[int] = []
        self.local_index: list[dict[str, int]] = []
        for t in b.threads:
            if not t.program.specs:
                raise ModelError(f"program {t.program.role!r} has no steps")
            self.pc_index.append(len(self.fields))
            self.fields.append(f"{t.name}.pc")
            self.init.append(next(iter(t.program.specs)) if t.start else NOT_STARTED)
            self.local_index.append(self._place(t.locals.items(), prefix=f"{t.name}."))
        self.view = make_shared_view(self.shared_index)
        self.local_views = tuple(make_local_view(i, t.name, self.local_index[i]) for i, t in enumerate(b.threads))
        self.notify_any = b.settings.get("notify", "fifo") == "any"
        self.spurious = b.settings.get("spurious", "off") == "on"
        self.woken_pc = {spec.label + ASLEEP: spec.label + WOKEN for t in b.threads
                         for spec in t.program.specs.values() if spec.kind in WAITS}
        # A thread that timed out is still queued until it retakes the mutex: a notify that reaches it is spent
        # there, and it goes on from its timeout (primitives._timed_sleep).
        self.woken_pc.update({spec.label + TIMED_OUT: spec.label + TIMED_OUT for t in b.threads
                              for spec in t.program.specs.values() if spec.kind == "timed_wait"})
        self.cond_mutex = self._cond_mutexes(b)

    def _cond_mutexes(self, b: Builder) -> dict[str, str]:
        """Condvar -> its one mutex: the declared one, or the one every wait on it names.

        A ``threading.Condition`` has one lock; a design whose waits on one
        condvar name two cannot be written with it, so it is refused here.
        """
        out = dict(b.condvar_mutex)
        for name, mutex in out.items():
            if mutex not in self.mutex_index:
                raise ModelError(f"condvar {name!r} is declared with undeclared mutex {mutex!r}"
                                 + did_you_mean(mutex, self.mutex_index))
        where: dict[str, str] = {c: "its declaration" for c in out}
        for t in b.threads:
            for spec in t.program.specs.values():
                if spec.kind not in WAITS or spec.obj not in self.cond_index or spec.obj2 not in self.mutex_index:
                    continue  # an undeclared condvar or mutex is named by the wait's own compile
                had = out.setdefault(spec.obj, spec.obj2)
                if had != spec.obj2:
                    raise ModelError(f"condvar {spec.obj!r} is used with two mutexes, {had!r} ({where[spec.obj]}) "
                                     f"and {spec.obj2!r} (program {t.program.role!r}, step {spec.label!r}); a condition variable has one "
                                     "mutex: declare one condvar per mutex")
                where.setdefault(spec.obj, f"program {t.program.role!r}, step {spec.label!r}")
        return out

    def _place(self, items, prefix: str = "") -> dict[str, int]:
        index: dict[str, int] = {}
        for name, value in items:
            index[name] = len(self.fields)
            self.fields.append(prefix + name)
            self.init.append(value)
        return index

    _KINDS = {"mutex": "mutex_index", "condvar": "cond_index", "semaphore": "sem_index", "flag": "flag_index"}

    def index(self, kind: str, name: str | None, label: str) -> int:
        """The field of primitive ``name`` of ``kind`` used by step ``label``."""
        known = getattr(self, self._KINDS[kind])
        try:
            return known[name]
        except KeyError:
            raise ModelError(f"step {label!r} uses undeclared {kind} {name!r}" + did_you_mean(name, known)) from None

    def waiter_pcs(self, cond: str | None) -> list[int]:
        """The pc fields of every thread with a step that waits on ``cond`` (a notify may move them)."""
        return [self.pc_index[u] for u, th in enumerate(self.b.threads)
                if any(sp.kind in WAITS and sp.obj == cond for sp in th.program.specs.values())]

    def thread_index(self, name: str, label: str) -> int:
        """The index of thread ``name``, named by step ``label``."""
        names = [t.name for t in self.b.threads]
        if name not in names:
            raise ModelError(f"step {label!r} names undeclared thread {name!r}" + did_you_mean(name, names))
        return names.index(name)

    def evaluator(self, ti: int, fn: Callable) -> tuple[Callable[[tuple], Any], Any]:
        """``state -> fn(s, me)`` for thread ``ti`` on a private copy, and ``fn``'s footprint (None: unknown).

        For the functions a primitive calls: a timed wait's ``until``, a mutex chooser.
        """
        fast, need_me = self.fast(ti, fn)
        fp = union_fp([fast])
        view, lview = self.view, self.local_views[ti]

        def run(state: tuple) -> Any:
            s = list(state) if fp is not None else view(state)
            return fast(s, lview(s) if need_me else None)
        return run, fp

    def fast(self, ti: int, fn: Callable | None) -> tuple[Callable | None, bool]:
        """``fn`` specialized for thread ``ti`` (see specialize.py), and whether it needs a ``me`` view."""
        if fn is None:
            return None, False
        if _specialize.ENABLED:
            r = _specialize.specialize(fn, self.shared_index, self.local_index[ti],
                                       {"name": self.b.threads[ti].name, "index": ti})
            if r is not None:
                return r
        return fn, _specialize.uses_arg(fn, 1)


class Site:
    """One step of one thread while it compiles: its pc field and where it may go next.

    ``allowed`` is the declared target set (every label, for an undeclared
    step of an exempt model). ``static_next`` is the fixed next label, or
    None when it is computed: by ``next_fn`` (the specialized ``next``
    function) or by the effect's return value.
    """

    def __init__(self, lay: Layout, ti: int, spec: StepSpec, step: GraphStep):
        thread = lay.b.threads[ti]
        self.lay, self.ti, self.spec, self.label = lay, ti, spec, spec.label
        self.role, self.thread_name = thread.program.role, thread.name
        self.my_pc = lay.pc_index[ti]
        labels = thread.program.specs
        self.allowed = frozenset(step.targets) if step.declared else frozenset(labels) | {DONE}
        self.static_next = spec.next if isinstance(spec.next, str) else None
        if callable(spec.next):
            self.next_fn, self.need_next_me = lay.fast(ti, spec.next)
            self.next_fp = union_fp([self.next_fn])
        else:
            self.next_fn, self.need_next_me = None, False
            self.next_fp = (frozenset(), frozenset())

    def elsewhere(self, target: Any) -> ModelError:
        return went_elsewhere(self.role, self.label, target, self.allowed)

    def user_error(self, error: BaseException, state: tuple) -> StepError:
        """The error to raise when this step's own code raised ``error`` in ``state`` (see usererror.py)."""
        return step_error(self.thread_name, self.label, error, state, self.lay.shared_index,
                          self.lay.local_index[self.ti])

    def resolver(self) -> Callable[[Any, Any], str]:
        """``(s, me) -> label`` for when the effect returned nothing: the fixed next, or ``next_fn``'s, checked."""
        if self.static_next is not None:
            nxt = self.static_next
            return lambda s, me: nxt
        fn, allowed = self.next_fn, self.allowed
        if fn is None:
            role, label = self.role, self.label

            def none(s, me):
                raise ModelError(f"program {role!r}: step {label!r} gave no next step")
            return none

        def resolve(s, me):
            label = fn(s, me)
            if label not in allowed:
                raise self.elsewhere(label)
            return label
        return resolve

    def goto(self) -> Callable[[list], str]:
        """``list_state -> label`` for a primitive step (no effect of its own to return a label)."""
        if self.static_next is not None:
            nxt = self.static_next
            return lambda lst: nxt
        resolve, need_me = self.resolver(), self.need_next_me
        view, lview = self.lay.view, self.lay.local_views[self.ti]
        plain = self.next_fp is not None  # a specialized function that only subscripts: the list will do

        def goto(lst):
            s = lst if plain else view(lst)
            return resolve(s, lview(s) if need_me else None)
        return goto

    def info(self, branches: Sequence[str] = (), action: str | None = None, fp: Any = None) -> StepInfo:
        """The StepInfo of this step's own program counter (its label)."""
        obj = None if self.spec.obj is None else object_name(self.spec.obj)
        return StepInfo(self.ti, self.label, self.label, self.spec.kind, tuple(branches), obj, action, fp)

    def prim_fp(self, *fields: int, writes_also: Sequence[int] = ()) -> Any:
        """Footprint of a primitive step that reads and writes ``fields`` (plus its ``next`` function's reads)."""
        if self.next_fp is None:
            return None
        f = frozenset(fields)
        return self.next_fp[0] | f, f | frozenset(writes_also)

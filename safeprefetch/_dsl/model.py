"""The model vocabulary: shared variables, threads, labelled steps, primitives.

Theory of operation
-------------------
A model is a set of threads running *programs*. A program is a table of
labelled steps; the label doubles as the thread's program counter, so the
label a user writes is exactly what appears in a trace. Each step is atomic.

The whole state of a running model is one flat tuple:

    (shared vars..., primitive fields..., thread0 pc, thread0 locals...,
     thread1 pc, thread1 locals..., ...)

It is immutable and hashable, which is what lets the explorer store it in a
dict and the live runtime swap it under one lock. Every modeled primitive
keeps its state *inside* that tuple:

* Mutex      -- the owning thread's index, or -1 when free.
* CondVar    -- the ordered tuple of waiting thread indices.
* Semaphore  -- its count.
* Flag       -- a bool (an Event).

Condition variables are Mesa-style. ``wait`` releases the mutex and enqueues
the thread in one atomic step; the thread then sleeps until a notify removes
it from the queue; a separate step re-acquires the mutex. ``notify_one``
wakes the head of the queue (``notify=fifo``) or branches over every waiter
(``notify=any``); ``notify_all`` wakes everyone. With ``spurious=on`` a
sleeping thread may also wake on its own. These are *settings* of every
model, so condvar semantics are a search dimension.

Compiling a model produces a :class:`Machine`: the initial state and, per
thread, a dict from program counter to a ``fire`` function. ``fire(state)``
returns the list of ``(branch, next_state)`` pairs of that thread's step; an
empty list means the step is not enabled. ``fire`` is pure. Primitive steps
are compiled to closures over constant indices; user steps see the state
through generated views (``s.count``, ``me.left``) that are plain lists
underneath, so a step may mutate ``s`` freely: it is a private copy.

A step that detects a bug calls :func:`violate`, which raises
:class:`StepViolation`; the explorer turns it into a violation whose trace
ends at that step.

This module never imports ``threading``: it describes machines, it does not
run them.
"""

from __future__ import annotations

import keyword
import os
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = [
    "DONE",
    "VIOLATION_KINDS",
    "Builder",
    "delivery_violation",
    "Machine",
    "Model",
    "ModelError",
    "Program",
    "StepInfo",
    "StepViolation",
    "violate",
]

#: The program counter of a thread that has finished.
DONE = "done"

#: Stable names of every violation kind (part of the CLI contract).
VIOLATION_KINDS = (
    "deadlock",
    "lost_wakeup",
    "overflow",
    "underflow",
    "lost_item",
    "duplicate_item",
    "out_of_order",
    "use_after_close",
    "shutdown_hang",
    "error_lost",
    "starvation",
    "invariant",
)

#: Set SAFEPREFETCH_SPECIALIZE=0 to run user step functions through views only
#: (slower; the test suite compares both paths).
SPECIALIZE = os.environ.get("SAFEPREFETCH_SPECIALIZE", "1") != "0"

_ASLEEP = " (asleep)"
_WOKEN = " (woken)"


class ModelError(Exception):
    """A model is malformed: an unknown label, a bad setting, a bad config."""


class StepViolation(Exception):
    """Raised inside a step to report a bug found while taking that step."""

    def __init__(self, kind: str, message: str):
        if kind not in VIOLATION_KINDS:
            raise ModelError(f"unknown violation kind {kind!r}")
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def violate(kind: str, message: str) -> None:
    """Report a violation from inside a step (for example a take from an empty buffer)."""
    raise StepViolation(kind, message)


def delivery_violation(expected: Sequence[Any], received: Sequence[Any], ordered: bool = True,
                       complete: bool = True) -> tuple[str, str] | None:
    """Compare what a consumer received with what was produced.

    Returns ``("duplicate_item" | "lost_item" | "out_of_order", message)`` or
    None. With ``complete=False`` (the consumer left early), only duplicates,
    items never produced, and order are checked: ``received`` must be a
    prefix of ``expected`` when ordered, a subset otherwise.
    """
    seen: set[Any] = set()
    for item in received:
        if item in seen:
            return "duplicate_item", f"item {item!r} was delivered twice"
        seen.add(item)
    unknown = [x for x in received if x not in set(expected)]
    if unknown:
        return "duplicate_item", f"item {unknown[0]!r} was delivered but never produced"
    if complete:
        missing = [x for x in expected if x not in seen]
        if missing:
            return "lost_item", f"item {missing[0]!r} was produced but never delivered"
    if ordered:
        order = {x: i for i, x in enumerate(expected)}
        pos = [order[x] for x in received]
        if pos != sorted(pos):
            return "out_of_order", f"items arrived as {list(received)!r}, expected {list(expected)[:len(pos)]!r}"
        if not complete and pos != list(range(len(pos))):
            gap = next(expected[i] for i, p in enumerate(pos) if p != i)
            return "lost_item", f"item {gap!r} was skipped in an ordered stream"
    return None


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


# --------------------------------------------------------------------------
# Programs: a table of labelled steps, written once per role.
# --------------------------------------------------------------------------

Next = "str | Callable[..., str]"


@dataclass
class _Spec:
    label: str
    kind: str
    next: Any = None
    fn: Callable | None = None
    guard: Callable | None = None
    obj: str | None = None
    obj2: str | None = None
    until: Callable | None = None
    branches: tuple[str, ...] | None = None
    action: str | None = None


class Program:
    """The steps of one role (producer, consumer, closer...).

    Each method adds one labelled step. The first step added is where every
    thread of this program starts. ``next`` is the label to go to after the
    step, or a function ``(s, me) -> label``; :data:`DONE` ends the thread.
    """

    def __init__(self, role: str, locals: Mapping[str, Any]):
        self.role = role
        self.locals = dict(locals)
        self.specs: dict[str, _Spec] = {}

    def _add(self, spec: _Spec) -> "Program":
        if spec.label in self.specs:
            raise ModelError(f"program {self.role!r}: duplicate step label {spec.label!r}")
        if spec.label == DONE or _ASLEEP in spec.label or _WOKEN in spec.label:
            raise ModelError(f"program {self.role!r}: reserved step label {spec.label!r}")
        self.specs[spec.label] = spec
        return self

    def step(self, label: str, effect: Callable | None = None, *, next: Any = None,
             guard: Callable | None = None, branches: Sequence[str] | None = None) -> "Program":
        """A plain atomic step.

        ``guard(s, me) -> bool`` says whether it is enabled (default: always).
        ``effect(s, me)`` mutates the state; if it returns a label, that is
        the next step, otherwise ``next`` is. With ``branches``, the step is
        nondeterministic: each branch is a separate choice, and both
        ``guard`` and ``effect`` take the branch name as a third argument.
        """
        return self._add(_Spec(label, "step", next=next, fn=effect, guard=guard,
                               branches=tuple(branches) if branches else None))

    def external(self, label: str, action: str, effect: Callable | None = None, *,
                 next: Any = None, branches: Sequence[str] = ("ok",),
                 guard: Callable | None = None) -> "Program":
        """A step whose work happens outside the model (fetch, copy, compute).

        The checker explores every branch. The live runtime runs the bound
        ``action`` outside the kernel lock, and the action's outcome picks the
        branch that is then applied atomically.
        """
        return self._add(_Spec(label, "external", next=next, fn=effect, action=action, guard=guard,
                               branches=tuple(branches)))

    def acquire(self, label: str, mutex: str, *, next: Any) -> "Program":
        return self._add(_Spec(label, "acquire", next=next, obj=mutex))

    def release(self, label: str, mutex: str, *, next: Any) -> "Program":
        return self._add(_Spec(label, "release", next=next, obj=mutex))

    def wait(self, label: str, cond: str, mutex: str, *, next: Any,
             until: Callable | None = None) -> "Program":
        """Mesa wait: release ``mutex`` and sleep on ``cond``; once woken, re-acquire.

        ``until(s, me)`` declares what the thread waits for. It is used only
        for diagnosis: a thread stuck asleep while its predicate holds, with no
        notify since, is reported as a lost wakeup rather than a deadlock.
        """
        return self._add(_Spec(label, "wait", next=next, obj=cond, obj2=mutex, until=until))

    def notify_one(self, label: str, cond: str, *, next: Any) -> "Program":
        return self._add(_Spec(label, "notify_one", next=next, obj=cond))

    def notify_all(self, label: str, cond: str, *, next: Any) -> "Program":
        return self._add(_Spec(label, "notify_all", next=next, obj=cond))

    def sem_acquire(self, label: str, sem: str, *, next: Any) -> "Program":
        return self._add(_Spec(label, "sem_acquire", next=next, obj=sem))

    def sem_release(self, label: str, sem: str, *, next: Any) -> "Program":
        return self._add(_Spec(label, "sem_release", next=next, obj=sem))

    def set_flag(self, label: str, flag: str, *, next: Any) -> "Program":
        return self._add(_Spec(label, "set_flag", next=next, obj=flag))

    def wait_flag(self, label: str, flag: str, *, next: Any) -> "Program":
        return self._add(_Spec(label, "wait_flag", next=next, obj=flag))


# --------------------------------------------------------------------------
# The builder: what a model's ``build`` method talks to.
# --------------------------------------------------------------------------


@dataclass
class _Thread:
    name: str
    program: Program
    locals: dict[str, Any]


class Builder:
    """Collects the shared variables, primitives, threads and checks of a model."""

    def __init__(self, settings: Mapping[str, Any]):
        self.settings = dict(settings)
        self.shared_vars: dict[str, Any] = {}
        self.mutexes: list[str] = []
        self.condvars: list[str] = []
        self.semaphores: dict[str, tuple[int, int | None]] = {}
        self.flags: dict[str, bool] = {}
        self.programs: dict[str, Program] = {}
        self.threads: list[_Thread] = []
        self.invariants: list[tuple[str, str, Callable]] = []
        self.end_checks: list[Callable] = []
        self.shutdown_pred: Callable | None = None
        self.progress_labels: set[str] = set()
        self.priorities: dict[str, int] = {}
        self.symmetry: list[tuple[str, ...]] = []

    def _name(self, name: str) -> str:
        if not name.isidentifier() or keyword.iskeyword(name):
            raise ModelError(f"{name!r} is not a valid variable name")
        if name in self._all_names():
            raise ModelError(f"name {name!r} is declared twice")
        return name

    def _all_names(self) -> set[str]:
        return (set(self.shared_vars) | set(self.mutexes) | set(self.condvars)
                | set(self.semaphores) | set(self.flags))

    def shared(self, **variables: Any) -> None:
        """Declare shared variables with their initial (hashable) values."""
        for name, value in variables.items():
            hash(value)
            self.shared_vars[self._name(name)] = value

    def mutex(self, name: str) -> None:
        self.mutexes.append(self._name(name))

    def condvar(self, name: str) -> None:
        self.condvars.append(self._name(name))

    def semaphore(self, name: str, initial: int, bound: int | None = None) -> None:
        """A counting semaphore; releasing past ``bound`` is an overflow."""
        self.semaphores[self._name(name)] = (initial, bound)

    def flag(self, name: str, initial: bool = False) -> None:
        self.flags[self._name(name)] = bool(initial)

    def program(self, role: str, **locals: Any) -> Program:
        """A new program (a role) whose threads have these locals and defaults."""
        if role in self.programs:
            raise ModelError(f"program {role!r} declared twice")
        p = Program(role, locals)
        self.programs[role] = p
        return p

    def thread(self, name: str, program: Program, **locals: Any) -> None:
        """Start a thread named ``name`` running ``program``."""
        if any(t.name == name for t in self.threads):
            raise ModelError(f"thread {name!r} declared twice")
        unknown = set(locals) - set(program.locals)
        if unknown:
            raise ModelError(f"thread {name!r}: unknown locals {sorted(unknown)}")
        values = {**program.locals, **locals}
        for v in values.values():
            hash(v)
        self.threads.append(_Thread(name, program, values))

    def invariant(self, name: str, predicate: Callable, kind: str = "invariant") -> None:
        """``predicate(s)`` must hold in every reachable state."""
        if kind not in VIOLATION_KINDS:
            raise ModelError(f"unknown violation kind {kind!r}")
        self.invariants.append((name, kind, predicate))

    def at_end(self, check: Callable) -> None:
        """``check(s)`` runs when every thread is done; it returns None or ``(kind, message)``."""
        self.end_checks.append(check)

    def shutdown_when(self, predicate: Callable) -> None:
        """``predicate(s)``: close, an error or an abandon was requested.

        A hang in such a state is reported as ``shutdown_hang``.
        """
        self.shutdown_pred = predicate

    def progress(self, *labels: str) -> None:
        """Mark steps whose execution counts as progress (for liveness checks)."""
        self.progress_labels.update(labels)

    def symmetric(self, *threads: str) -> None:
        """Declare threads interchangeable (same program and locals; nothing depends on which is which).

        The explorer may then store one state per permutation class (symmetry reduction).
        """
        self.symmetry.append(tuple(threads))

    def priority(self, thread: str, level: int) -> None:
        """Strict scheduling priority of a thread (higher runs first) for liveness checks."""
        self.priorities[thread] = level


# --------------------------------------------------------------------------
# Views: how user code reads and writes the flat state by name.
# --------------------------------------------------------------------------


def _prop(i: int) -> property:
    def setter(self, value, i=i):
        list.__setitem__(self, i, value)

    return property(itemgetter(i), setter)


def _local_prop(i: int) -> property:
    def getter(self, i=i):
        return self._s[i]

    def setter(self, value, i=i):
        self._s[i] = value

    return property(getter, setter)


class _SharedViewBase(list):
    """A mutable copy of the state, with shared variables as attributes."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<state {self._layout_repr()}>"


class _LocalViewBase:
    __slots__ = ("_s",)

    def __init__(self, s: list):
        self._s = s


def _make_shared_view(names: Mapping[str, int]) -> type:
    ns: dict[str, Any] = {"__slots__": ()}
    for name, i in names.items():
        ns[name] = _prop(i)
    ns["_layout_repr"] = lambda self: ", ".join(f"{n}={self[i]!r}" for n, i in names.items())
    return type("SharedView", (_SharedViewBase,), ns)


def _make_local_view(index: int, thread_name: str, names: Mapping[str, int]) -> type:
    ns: dict[str, Any] = {"__slots__": (), "index": index, "name": thread_name}
    for name, i in names.items():
        if name in ("index", "name"):
            raise ModelError(f"thread {thread_name!r}: local {name!r} is reserved")
        ns[name] = _local_prop(i)
    return type("LocalView", (_LocalViewBase,), ns)


# --------------------------------------------------------------------------
# The compiled machine.
# --------------------------------------------------------------------------


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
    #: Groups of interchangeable threads (indices), for symmetry reduction.
    symmetry: tuple[tuple[int, ...], ...] = ()

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

    def all_done(self, state: Sequence) -> bool:
        return all(state[i] == DONE for i in self.pc_index)

    def describe(self, state: Sequence) -> dict[str, Any]:
        """Every named field of ``state``: shared variables, primitives, and each thread's pc and locals."""
        return {n: state[i] for i, n in enumerate(self.field_names)}

    def invariant_violation(self, state: tuple) -> tuple[str, str] | None:
        s = None
        fast = self.__dict__.get("_fast_inv") or self._fast_invariants
        for name, kind, pred, raw in fast:
            if raw:
                if pred(state):
                    continue
            else:
                if s is None:
                    s = self.view(state)
                if pred(s):
                    continue
            return kind, f"invariant {name!r} fails"
        return None

    @property
    def _fast_invariants(self):
        cached = self.__dict__.get("_fast_inv")
        if cached is None:
            cached = []
            for name, kind, pred in self.invariants:
                fast, raw = pred, False
                if SPECIALIZE:
                    from .specialize import bare_uses, specialize

                    r = specialize(pred, self.shared_index, {}, {})
                    if r is not None:
                        fast = r[0]
                        raw = not bare_uses(fast, 0)  # only subscripts: a plain tuple will do
                cached.append((name, kind, fast, raw))
            self.__dict__["_fast_inv"] = cached
        return cached


class Model:
    """Base class of every model. Subclass it and implement :meth:`build`.

    Class attributes:

    * ``name``: the catalog name (``list`` prints it).
    * ``expected``: the verdict this model expects at its default config.
    * ``params``: the config parameters and their defaults.
    * ``sweep``: for reference designs, ``{param: [values]}`` to prove over.
    """

    name: str = ""
    expected: str = "ok"
    params: Mapping[str, Any] = {}
    sweep: Mapping[str, Sequence[Any]] | None = None

    #: Settings that every model accepts; they change condvar semantics.
    SETTINGS: Mapping[str, tuple[str, ...]] = {"notify": ("fifo", "any"), "spurious": ("off", "on"),
                                               "policy": ("fair", "priority")}

    #: Defaults for the settings above that this model changes (e.g. ``{"policy": "priority"}``).
    settings: Mapping[str, str] = {}

    def build(self, m: Builder, **config: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- configuration -----------------------------------------------------

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {**dict(cls.params), "notify": "fifo", "spurious": "off", "policy": "fair", **dict(cls.settings)}

    @classmethod
    def configure(cls, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The full config: defaults updated with ``overrides``, each checked and converted."""
        config = cls.defaults()
        for key, raw in (overrides or {}).items():
            if key not in config:
                known = ", ".join(sorted(config))
                raise ModelError(f"model {cls.name!r} has no parameter {key!r} (known: {known})")
            config[key] = _convert(key, raw, config[key], cls.SETTINGS.get(key))
        return config

    @classmethod
    def compile(cls, overrides: Mapping[str, Any] | None = None) -> Machine:
        config = cls.configure(overrides)
        b = Builder({k: config[k] for k in cls.SETTINGS})
        model = cls()
        model.build(b, **{k: v for k, v in config.items() if k not in cls.SETTINGS})
        return _compile(cls.name or cls.__name__, config, b)


def _convert(key: str, raw: Any, default: Any, choices: tuple[str, ...] | None) -> Any:
    if choices is not None:
        value = str(raw).lower()
        aliases = {"true": "on", "1": "on", "false": "off", "0": "off"}
        if choices == ("off", "on"):
            value = aliases.get(value, value)
        if value not in choices:
            raise ModelError(f"{key} must be one of {'|'.join(choices)}, not {raw!r}")
        return value
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        text = str(raw).lower()
        if text in ("1", "true", "on", "yes"):
            return True
        if text in ("0", "false", "off", "no"):
            return False
        raise ModelError(f"{key} must be a boolean (on/off), not {raw!r}")
    if isinstance(default, int):
        if isinstance(raw, bool):
            raise ModelError(f"{key} must be an integer, not {raw!r}")
        if isinstance(raw, int):
            return raw
        try:
            return int(str(raw), 10)
        except ValueError:
            raise ModelError(f"{key} must be an integer, not {raw!r}") from None
    if isinstance(default, str):
        return str(raw)
    raise ModelError(f"parameter {key} cannot be set from {raw!r}")


# --------------------------------------------------------------------------
# Compilation: programs -> fire functions over constant indices.
# --------------------------------------------------------------------------


def _compile(name: str, config: dict[str, Any], b: Builder) -> Machine:
    if not b.threads:
        raise ModelError(f"model {name!r} declares no threads")
    fields: list[str] = []
    init: list[Any] = []
    shared_index: dict[str, int] = {}
    for n, v in b.shared_vars.items():
        shared_index[n] = len(fields)
        fields.append(n)
        init.append(v)
    mutex_index: dict[str, int] = {}
    for n in b.mutexes:
        mutex_index[n] = len(fields)
        fields.append(n)
        init.append(-1)
    cond_index: dict[str, int] = {}
    for n in b.condvars:
        cond_index[n] = len(fields)
        fields.append(n)
        init.append(())
    sem_index: dict[str, int] = {}
    for n, (initial, _bound) in b.semaphores.items():
        sem_index[n] = len(fields)
        fields.append(n)
        init.append(initial)
    flag_index: dict[str, int] = {}
    for n, v in b.flags.items():
        flag_index[n] = len(fields)
        fields.append(n)
        init.append(v)

    pc_index: list[int] = []
    local_index: list[dict[str, int]] = []
    for t in b.threads:
        pc_index.append(len(fields))
        fields.append(f"{t.name}.pc")
        if not t.program.specs:
            raise ModelError(f"program {t.program.role!r} has no steps")
        init.append(next(iter(t.program.specs)))
        li: dict[str, int] = {}
        for ln, lv in t.locals.items():
            li[ln] = len(fields)
            fields.append(f"{t.name}.{ln}")
            init.append(lv)
        local_index.append(li)

    view = _make_shared_view(shared_index)
    local_views = tuple(_make_local_view(i, t.name, local_index[i]) for i, t in enumerate(b.threads))
    ctx = _Ctx(b, view, local_views, pc_index, mutex_index, cond_index, sem_index, flag_index,
               shared_index, local_index)

    tables: list[dict[str, Callable]] = []
    infos: list[dict[str, StepInfo]] = []
    waits: dict[tuple[int, str], tuple[str, Callable | None]] = {}
    spurious_pcs: list[frozenset[str]] = []
    for ti, t in enumerate(b.threads):
        table: dict[str, Callable] = {}
        info: dict[str, StepInfo] = {}
        labels = set(t.program.specs)
        for spec in t.program.specs.values():
            _check_next(t.program.role, spec, labels)
            for pc, fire, si in ctx.compile_spec(ti, spec):
                if fire is not None:
                    table[pc] = fire
                info[pc] = si
            if spec.kind == "wait":
                waits[(ti, spec.label + _ASLEEP)] = (spec.obj, spec.until)
        tables.append(table)
        infos.append(info)
        spurious_pcs.append(frozenset(pc for pc, si in info.items() if si.kind == "spurious"))

    names = [t.name for t in b.threads]
    symmetry = []
    for group in b.symmetry:
        unknown = [g for g in group if g not in names]
        if unknown:
            raise ModelError(f"symmetric: unknown threads {unknown}")
        idx = tuple(sorted(names.index(g) for g in group))
        first = b.threads[idx[0]]
        for i in idx[1:]:
            th = b.threads[i]
            if th.program is not first.program or th.locals != first.locals:
                raise ModelError(f"symmetric: {th.name} and {first.name} differ in program or initial locals")
        symmetry.append(idx)
    priorities = tuple(b.priorities.get(t.name, 0) for t in b.threads)
    unknown = set(b.priorities) - {t.name for t in b.threads}
    if unknown:
        raise ModelError(f"priority for unknown threads {sorted(unknown)}")
    return Machine(
        name=name,
        config=config,
        init=tuple(init),
        thread_names=tuple(t.name for t in b.threads),
        pc_index=tuple(pc_index),
        tables=tuple(tables),
        infos=tuple(infos),
        shared_index=shared_index,
        local_index=tuple(local_index),
        cond_index=cond_index,
        mutex_index=mutex_index,
        invariants=tuple(b.invariants),
        end_checks=tuple(b.end_checks),
        shutdown_pred=b.shutdown_pred,
        waits=waits,
        view=view,
        local_views=local_views,
        progress_labels=frozenset(b.progress_labels),
        priorities=priorities,
        field_names=tuple(fields),
        spurious_pcs=tuple(spurious_pcs),
        symmetry=tuple(symmetry),
    )


def _union_fp(fns) -> tuple[frozenset[int], frozenset[int]] | None:
    reads: frozenset[int] = frozenset()
    writes: frozenset[int] = frozenset()
    for f in fns:
        fp = getattr(f, "__footprint__", None)
        if fp is None:
            return None  # not specialized, or hands `s` to other code: unknown
        reads |= fp[0]
        writes |= fp[1]
    return reads, writes


def _check_next(role: str, spec: _Spec, labels: set[str]) -> None:
    if spec.next is None:
        if spec.kind in ("step", "external") and spec.fn is not None:
            return  # the effect returns the next label
        raise ModelError(f"program {role!r}: step {spec.label!r} has no next step")
    if isinstance(spec.next, str) and spec.next != DONE and spec.next not in labels:
        raise ModelError(f"program {role!r}: step {spec.label!r} goes to unknown step {spec.next!r}")


class _Ctx:
    """Holds the layout while compiling one model's steps."""

    def __init__(self, b, view, local_views, pc_index, mutex_index, cond_index, sem_index, flag_index,
                 shared_index=None, local_index=None):
        self.b = b
        self.shared_index = shared_index or {}
        self.local_index = local_index or []
        self.view = view
        self.local_views = local_views
        self.pc_index = pc_index
        self.mutex_index = mutex_index
        self.cond_index = cond_index
        self.sem_index = sem_index
        self.flag_index = flag_index
        self.notify_any = b.settings.get("notify", "fifo") == "any"
        self.spurious = b.settings.get("spurious", "off") == "on"

    def fast(self, ti: int, fn: Callable | None) -> tuple[Callable | None, bool]:
        """``fn`` specialized for thread ``ti`` (see _fast.py), and whether it needs a ``me`` view."""
        if fn is None:
            return None, False
        if SPECIALIZE:
            from .specialize import specialize

            r = specialize(fn, self.shared_index, self.local_index[ti],
                           {"name": self.b.threads[ti].name, "index": ti})
            if r is not None:
                return r
        from .specialize import uses_arg

        return fn, uses_arg(fn, 1)

    def _index(self, table: dict[str, int], kind: str, name: str, label: str) -> int:
        try:
            return table[name]
        except KeyError:
            raise ModelError(f"step {label!r} uses undeclared {kind} {name!r}") from None

    def _resolver(self, ti: int, spec: _Spec, labels: set[str]):
        """A function (list_state) -> next pc, checking labels returned at run time."""
        nxt = spec.next
        role = self.b.threads[ti].program.role
        if isinstance(nxt, str):
            return lambda s, me: nxt
        if callable(nxt):
            def resolve(s, me, nxt=nxt):
                label = nxt(s, me)
                if label != DONE and label not in labels:
                    raise ModelError(f"program {role!r}: step {spec.label!r} chose unknown next step {label!r}")
                return label
            return resolve
        raise ModelError(f"program {role!r}: step {spec.label!r} has a bad next {nxt!r}")

    def compile_spec(self, ti: int, spec: _Spec):
        pcs = self.pc_index
        my_pc = pcs[ti]
        label = spec.label
        thread = self.b.threads[ti]
        labels = set(thread.program.specs)
        view = self.view
        lview = self.local_views[ti]
        kind = spec.kind

        def info(pc=label, k=kind, branches=(), obj=spec.obj, action=None, fp=None):
            return StepInfo(ti, pc, label if pc == label else pc, k, tuple(branches), obj, action, fp)

        if kind in ("step", "external"):
            fn, need_fn = self.fast(ti, spec.fn)
            guard, need_guard = self.fast(ti, spec.guard)
            branches = spec.branches
            static_next = spec.next
            role = thread.program.role
            if callable(static_next):
                fast_next, need_next = self.fast(ti, static_next)
                spec_for_next = _Spec(spec.label, spec.kind, next=fast_next)
                resolve = self._resolver(ti, spec_for_next, labels)
            else:
                need_next = False
                resolve = self._resolver(ti, spec, labels) if static_next is not None else None
            need_me = need_fn or need_guard or need_next
            user_fp = _union_fp([f for f in (fn, guard, fast_next if callable(static_next) else None)
                                 if f is not None])

            def finish(s, me, ret):
                if ret is not None:
                    if ret not in targets:
                        raise ModelError(f"program {role!r}: step {label!r} chose unknown next step {ret!r}")
                    return ret
                if resolve is None:
                    raise ModelError(f"program {role!r}: step {label!r} gave no next step")
                return resolve(s, me)

            targets = labels | {DONE}
            # Fully specialized steps index a plain list; others need the named view.
            mk = list if user_fp is not None else view
            # A guard that only reads can be tested on the state tuple itself, before any copy.
            raw_guard = (guard is not None and user_fp is not None and not getattr(guard, "__footprint__")[1]
                         and not need_guard)
            simple = branches is None and isinstance(static_next, str) and fn is not None and not need_me

            if simple:
                def fire(state):
                    if raw_guard:
                        if not guard(state, None):
                            return []
                        s = mk(state)
                    else:
                        s = mk(state)
                        if guard is not None and not guard(s, None):
                            return []
                    try:
                        ret = fn(s, None)
                    except StepViolation as v:
                        return [(0, v)]
                    if ret is None:
                        s[my_pc] = static_next
                    elif ret in targets:
                        s[my_pc] = ret
                    else:
                        raise ModelError(f"program {role!r}: step {label!r} chose unknown next step {ret!r}")
                    return [(0, tuple(s))]

                def enabled(state):
                    if guard is None:
                        return True
                    return bool(guard(state, None) if raw_guard else guard(mk(state), None))
                fire.enabled = enabled
                yield label, fire, info(fp=user_fp)
                return

            if branches is None:
                def fire(state):
                    if raw_guard and not guard(state, None):
                        return []
                    s = mk(state)
                    me = lview(s) if need_me else None
                    if not raw_guard and guard is not None and not guard(s, me):
                        return []
                    try:
                        ret = fn(s, me) if fn is not None else None
                        s[my_pc] = finish(s, me, ret)
                    except StepViolation as v:
                        return [(0, v)]
                    return [(0, tuple(s))]

                def enabled(state):
                    if guard is None:
                        return True
                    if raw_guard:
                        return bool(guard(state, None))
                    s = mk(state)
                    return bool(guard(s, lview(s) if need_me else None))
                fire.enabled = enabled
                yield label, fire, info(fp=user_fp)
            else:
                nb = len(branches)

                def fire(state):
                    out = []
                    for bi in range(nb):
                        s = mk(state)
                        me = lview(s) if need_me else None
                        if guard is not None and not guard(s, me, branches[bi]):
                            continue
                        try:
                            ret = fn(s, me, branches[bi]) if fn is not None else None
                            s[my_pc] = finish(s, me, ret)
                        except StepViolation as v:
                            out.append((bi, v))
                            continue
                        out.append((bi, tuple(s)))
                    return out

                # One branch at a time, for a driver that already knows which branch it
                # takes (the live runtime applying an external step's outcome). Exactly
                # ``[x for x in fire(state) if x[0] == bi]``; tests/test_model_fire_parts.py.
                def fire_branch(state, bi):
                    s = mk(state)
                    me = lview(s) if need_me else None
                    if guard is not None and not guard(s, me, branches[bi]):
                        return []
                    try:
                        ret = fn(s, me, branches[bi]) if fn is not None else None
                        s[my_pc] = finish(s, me, ret)
                    except StepViolation as v:
                        return [(bi, v)]
                    return [(bi, tuple(s))]

                def enabled_branch(state, bi):
                    if guard is None:
                        return True
                    if raw_guard:
                        return bool(guard(state, None, branches[bi]))
                    s = mk(state)
                    return bool(guard(s, lview(s) if need_me else None, branches[bi]))

                def enabled(state):
                    return any(enabled_branch(state, bi) for bi in range(nb))
                fire.enabled = enabled
                fire.branch = fire_branch
                fire.enabled_branch = enabled_branch
                yield label, fire, info(branches=branches, action=spec.action, fp=user_fp)
            return

        static = spec.next if isinstance(spec.next, str) else None
        if static is None:
            fast_next, need_next = self.fast(ti, spec.next)
            resolve = self._resolver(ti, _Spec(spec.label, spec.kind, next=fast_next), labels)
            next_fp = _union_fp([fast_next])
        else:
            resolve, need_next = self._resolver(ti, spec, labels), False
            next_fp = (frozenset(), frozenset())

        def prim(*fields, writes_also=()):
            if next_fp is None:
                return None
            f = frozenset(fields)
            return next_fp[0] | f, f | frozenset(writes_also)

        def goto(lst):
            if static is not None:
                return static
            s = view(lst)
            return resolve(s, lview(s) if need_next else None)

        if kind == "acquire":
            mi = self._index(self.mutex_index, "mutex", spec.obj, label)

            def fire(state):
                if state[mi] != -1:
                    return []
                s = list(state)
                s[mi] = ti
                s[my_pc] = goto(s)
                return [(0, tuple(s))]
            yield label, fire, info(fp=prim(mi))
        elif kind == "release":
            mi = self._index(self.mutex_index, "mutex", spec.obj, label)
            mname = spec.obj

            def fire(state):
                if state[mi] != ti:
                    return [(0, StepViolation("invariant", f"{thread.name} releases {mname} it does not hold"))]
                s = list(state)
                s[mi] = -1
                s[my_pc] = goto(s)
                return [(0, tuple(s))]
            yield label, fire, info(fp=prim(mi))
        elif kind == "wait":
            ci = self._index(self.cond_index, "condvar", spec.obj, label)
            mi = self._index(self.mutex_index, "mutex", spec.obj2, label)
            mname = spec.obj2
            asleep, woken = label + _ASLEEP, label + _WOKEN

            def fire(state):
                if state[mi] != ti:
                    return [(0, StepViolation("invariant", f"{thread.name} waits on {spec.obj} without holding {mname}"))]
                s = list(state)
                s[mi] = -1
                s[ci] = state[ci] + (ti,)
                s[my_pc] = asleep
                return [(0, tuple(s))]
            yield label, fire, info(obj=spec.obj, fp=(frozenset((mi, ci)), frozenset((mi, ci))))

            if self.spurious:
                def spurious(state):
                    s = list(state)
                    q = state[ci]
                    s[ci] = tuple(x for x in q if x != ti)
                    s[my_pc] = woken
                    return [(0, tuple(s))]
                yield asleep, spurious, StepInfo(ti, asleep, f"{label}: spurious wakeup", "spurious", (), spec.obj,
                                                 None, (frozenset((ci,)), frozenset((ci,))))
            else:
                yield asleep, None, StepInfo(ti, asleep, f"{label}: asleep", "asleep", (), spec.obj)

            def reacquire(state):
                if state[mi] != -1:
                    return []
                s = list(state)
                s[mi] = ti
                s[my_pc] = goto(s)
                return [(0, tuple(s))]
            yield woken, reacquire, StepInfo(ti, woken, f"{label}: woken, reacquire {mname}", "wake", (), spec.obj,
                                             None, prim(mi))
        elif kind in ("notify_one", "notify_all"):
            ci = self._index(self.cond_index, "condvar", spec.obj, label)
            woken_pc = self._woken_map()

            def wake(s, who):
                p = pcs[who]
                s[p] = woken_pc[s[p]]

            waiter_pcs = [pcs[u] for u, th in enumerate(self.b.threads)
                          if any(sp.kind == "wait" and sp.obj == spec.obj for sp in th.program.specs.values())]
            notify_fp = prim(ci, writes_also=waiter_pcs)

            if kind == "notify_all":
                def fire(state):
                    s = list(state)
                    for who in state[ci]:
                        wake(s, who)
                    s[ci] = ()
                    s[my_pc] = goto(s)
                    return [(0, tuple(s))]
                yield label, fire, info(obj=spec.obj, fp=notify_fp)
            elif self.notify_any:
                def fire(state):
                    q = state[ci]
                    if not q:
                        s = list(state)
                        s[my_pc] = goto(s)
                        return [(0, tuple(s))]
                    out = []
                    for k, who in enumerate(q):
                        s = list(state)
                        wake(s, who)
                        s[ci] = q[:k] + q[k + 1:]
                        s[my_pc] = goto(s)
                        out.append((k, tuple(s)))
                    return out
                yield label, fire, info(obj=spec.obj, fp=notify_fp)
            else:
                def fire(state):
                    s = list(state)
                    q = state[ci]
                    if q:
                        wake(s, q[0])
                        s[ci] = q[1:]
                    s[my_pc] = goto(s)
                    return [(0, tuple(s))]
                yield label, fire, info(obj=spec.obj, fp=notify_fp)
        elif kind == "sem_acquire":
            si = self._index(self.sem_index, "semaphore", spec.obj, label)

            def fire(state):
                if state[si] <= 0:
                    return []
                s = list(state)
                s[si] -= 1
                s[my_pc] = goto(s)
                return [(0, tuple(s))]
            yield label, fire, info(fp=prim(si))
        elif kind == "sem_release":
            si = self._index(self.sem_index, "semaphore", spec.obj, label)
            bound = self.b.semaphores[spec.obj][1]
            sname = spec.obj

            def fire(state):
                if bound is not None and state[si] >= bound:
                    return [(0, StepViolation("overflow", f"semaphore {sname} released past its bound {bound}"))]
                s = list(state)
                s[si] += 1
                s[my_pc] = goto(s)
                return [(0, tuple(s))]
            yield label, fire, info(fp=prim(si))
        elif kind == "set_flag":
            fi = self._index(self.flag_index, "flag", spec.obj, label)

            def fire(state):
                s = list(state)
                s[fi] = True
                s[my_pc] = goto(s)
                return [(0, tuple(s))]
            yield label, fire, info(fp=prim(fi))
        elif kind == "wait_flag":
            fi = self._index(self.flag_index, "flag", spec.obj, label)

            def fire(state):
                if not state[fi]:
                    return []
                s = list(state)
                s[my_pc] = goto(s)
                return [(0, tuple(s))]
            yield label, fire, info(fp=None if next_fp is None else (next_fp[0] | {fi}, frozenset()))
        else:  # pragma: no cover - Program only creates the kinds above
            raise ModelError(f"unknown step kind {kind!r}")

    _woken: dict[str, str] | None = None

    def _woken_map(self) -> dict[str, str]:
        if self._woken is None:
            m: dict[str, str] = {}
            for t in self.b.threads:
                for spec in t.program.specs.values():
                    if spec.kind == "wait":
                        m[spec.label + _ASLEEP] = spec.label + _WOKEN
            self._woken = m
        return self._woken


def iter_labels(machine: Machine, thread: int) -> Iterable[str]:
    return machine.infos[thread].keys()

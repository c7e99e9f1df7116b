"""The builder: what a model's ``build`` method talks to.

``build(m, **config)`` declares, on a :class:`Builder` ``m``, the model's
shared variables and primitives, one :class:`Program` per role, the threads
that run them, and the checks (invariants, end-of-run checks, when a hang
counts as a shutdown hang, progress steps, symmetry, priorities). The builder
only collects; it checks names as they arrive (a name declared twice, a
local a program does not have) and leaves everything that needs the whole
model -- labels, targets, primitive names -- to the compiler.

Every initial value must be hashable: it becomes a field of the state tuple.
"""

from __future__ import annotations

import inspect
import keyword
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .program import Program
from .violations import VIOLATION_KINDS, ModelError

__all__ = ["MAX_THREADS", "MAX_VALUE_LEN", "Builder", "reads_threads"]

#: The longest tuple or frozenset a variable may start with. The state cap counts states, not
#: their size: ``--set capacity=1000000`` gives the prefetcher model the same 106 states as
#: capacity=2, but each holds a million-slot tuple that every step writing a slot copies (8 MB):
#: 53 s and 1.2 GB for a check of 106 states, and at 10**9 every copy is 8 GB and the machine runs
#: out of memory before the cap is near. 100,000 entries copy in well under a millisecond and are
#: orders of magnitude past any state a search can exhaust; past them, a count parameter is off.
MAX_VALUE_LEN = 100_000

#: The most threads a model may declare. Why a limit, and why this one: a thread costs about
#: 10 ms to compile (its program's steps, specialized for it), so a runaway count -- ``--set
#: workers=100000000`` -- would spend days declaring threads before any search began, with no
#: message; nothing here can search, or sample fairly, a state with hundreds of threads (the
#: Hypothesis strategy draws each choice from 0..255); and past it the error names the thread.
#: The live prefetchers compile their models with ``bounded=False`` (neither this bound nor
#: :data:`MAX_VALUE_LEN`): they run, not search, and a ``Prefetcher(workers=300)`` is theirs to allow.
MAX_THREADS = 255


@dataclass
class _Thread:
    name: str
    program: Program
    locals: dict[str, Any]
    #: False for a thread that a ``spawn`` step starts (it begins at NOT_STARTED).
    start: bool = True


def reads_threads(check: Callable) -> bool:
    """Whether an invariant or end check takes a second argument, the threads (see :meth:`Builder.invariant`)."""
    try:
        params = inspect.signature(check).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.default is p.empty]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    if len(positional) > 2 or not positional:
        raise ModelError(f"a check takes (s) or (s, threads), not {len(positional)} arguments")
    return len(positional) == 2



def _hashable(what: str, name: str, value: Any, max_len: int | None = None) -> None:
    """A state holds only hashable values: say which declaration broke that, instead of a bare TypeError.
    Nor, when ``max_len`` is given, values so long that copying them is the search (:data:`MAX_VALUE_LEN`)."""
    if max_len is not None and isinstance(value, (tuple, frozenset)) and len(value) > max_len:
        raise ModelError(f"{what} {name!r}: its initial value holds {len(value):,} entries; a state variable may "
                         f"hold at most {max_len:,} (is a count parameter far too large?)")
    try:
        hash(value)
    except TypeError as e:
        raise ModelError(f"{what} {name!r}: its initial value {value!r} is not hashable ({e}); a state holds "
                         "tuples and frozensets, not lists, dicts or sets") from None


def _variable_name(name: str) -> None:
    """Refuse a name no state variable can have: not an identifier, a keyword, or a ``__dunder__`` (the
    state's views are classes with one attribute per variable: ``__slots__`` or ``__init__`` would be theirs)."""
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ModelError(f"{name!r} is not a valid variable name")
    if name.startswith("__") and name.endswith("__"):
        raise ModelError(f"{name!r} is not a valid variable name: names that begin and end with '__' are reserved")

class Builder:
    """Collects the shared variables, primitives, threads and checks of a model."""

    def __init__(self, settings: Mapping[str, Any], max_threads: int | None = MAX_THREADS,
                 max_value_len: int | None = MAX_VALUE_LEN):
        self.settings = dict(settings)
        #: The most threads :meth:`thread` accepts (None: no bound; see :data:`MAX_THREADS`).
        self.max_threads = max_threads
        #: The longest tuple or frozenset a variable may start with (None: no bound; :data:`MAX_VALUE_LEN`).
        self.max_value_len = max_value_len
        self.shared_vars: dict[str, Any] = {}
        self.mutexes: list[str] = []
        self.condvars: list[str] = []
        #: Condvar -> the mutex it was declared with (``m.condvar(name, mutex)``), if any.
        self.condvar_mutex: dict[str, str] = {}
        #: The condvars declared ``notify_unlocked=True`` (C++/pthread: a notify need not hold the mutex).
        self.unlocked_notify: set[str] = set()
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
        _variable_name(name)
        if name in self._all_names():
            raise ModelError(f"name {name!r} is declared twice")
        return name

    def _all_names(self) -> set[str]:
        return (set(self.shared_vars) | set(self.mutexes) | set(self.condvars)
                | set(self.semaphores) | set(self.flags))

    def shared(self, **variables: Any) -> None:
        """Declare shared variables with their initial (hashable) values."""
        for name, value in variables.items():
            _hashable("shared variable", name, value, self.max_value_len)
            self.shared_vars[self._name(name)] = value

    def mutex(self, name: str) -> None:
        self.mutexes.append(self._name(name))

    def condvar(self, name: str, mutex: str | None = None, *, notify_unlocked: bool = False) -> None:
        """A condition variable: Python's ``threading.Condition``, bound to one mutex.

        Its mutex is ``mutex``, or else the one its waits name; waiting on it
        under two different mutexes is a model error (a ``Condition`` has one
        lock). A notify by a thread that does not hold that mutex is an
        ``invariant`` violation, as ``Condition.notify`` raises ``RuntimeError:
        cannot notify on un-acquired lock``. ``notify_unlocked=True`` declares
        a C++ ``std::condition_variable`` or a pthread condvar instead, which
        may be notified without its mutex.
        """
        self.condvars.append(self._name(name))
        if mutex is not None:
            if not isinstance(mutex, str):
                raise ModelError(f"condvar {name!r}: its mutex must be a mutex's name, not {mutex!r}")
            self.condvar_mutex[name] = mutex
        if notify_unlocked:
            self.unlocked_notify.add(name)

    def semaphore(self, name: str, initial: int, bound: int | None = None) -> None:
        """A counting semaphore; releasing past ``bound`` is an overflow."""
        if type(initial) is not int or initial < 0:
            raise ModelError(f"semaphore {name!r}: the initial count must be an int >= 0, not {initial!r}")
        if bound is not None and (type(bound) is not int or bound < initial):
            raise ModelError(f"semaphore {name!r}: the bound must be an int >= the initial count {initial}, "
                             f"not {bound!r}")
        self.semaphores[self._name(name)] = (initial, bound)

    def flag(self, name: str, initial: bool = False) -> None:
        self.flags[self._name(name)] = bool(initial)

    def program(self, role: str, **locals: Any) -> Program:
        """A new program (a role) whose threads have these locals and defaults."""
        if role in self.programs:
            raise ModelError(f"program {role!r} declared twice")
        for name, value in locals.items():
            _variable_name(name)
            _hashable(f"program {role!r}: local", name, value, self.max_value_len)
        p = Program(role, locals)
        self.programs[role] = p
        return p

    def thread(self, name: str, program: Program, *, start: bool = True, **locals: Any) -> None:
        """A thread named ``name`` running ``program``, with its locals (defaults: the program's).

        ``start=False`` declares a thread that another thread starts, with a
        ``spawn`` step; until then it is at NOT_STARTED, and a thread that is
        never started counts as finished at the end of a run.
        """
        if not isinstance(name, str) or not name:
            raise ModelError(f"a thread's name must be a non-empty str (traces name threads by it), not {name!r}")
        if not isinstance(program, Program):
            raise ModelError(f"thread {name!r} needs a program (m.program(...)), not {type(program).__name__}")
        if self.max_threads is not None and len(self.threads) >= self.max_threads:
            raise ModelError(f"thread {name!r}: a model may declare at most {self.max_threads} threads "
                             "(is a thread count parameter far too large?)")
        if any(t.name == name for t in self.threads):
            raise ModelError(f"thread {name!r} declared twice")
        unknown = set(locals) - set(program.locals)
        if unknown:
            raise ModelError(f"thread {name!r}: unknown locals {sorted(unknown)}")
        for local, value in locals.items():
            _hashable(f"thread {name!r}: local", local, value, self.max_value_len)
        values = {**program.locals, **locals}
        for v in values.values():
            hash(v)
        self.threads.append(_Thread(name, program, values, bool(start)))

    def invariant(self, name: str, predicate: Callable, kind: str = "invariant") -> None:
        """``predicate(s)`` must hold in every reachable state.

        ``predicate(s, threads)`` also sees every thread: ``threads["worker0"]``
        has the thread's locals as attributes, and ``pc`` (its current label)
        and ``done``. Reading threads makes every step visible to the
        invariant, so partial-order reduction stands down for such a model.
        """
        if kind not in VIOLATION_KINDS:
            raise ModelError(f"unknown violation kind {kind!r}")
        reads_threads(predicate)  # the arity, checked now
        self.invariants.append((name, kind, predicate))

    def at_end(self, check: Callable) -> None:
        """``check(s)`` runs when every thread is done; it returns None or ``(kind, message)``.

        ``check(s, threads)`` also sees every thread's locals (see :meth:`invariant`).
        """
        reads_threads(check)
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
        if isinstance(level, bool) or not isinstance(level, (int, float)) or level != level or level in (
                float("inf"), float("-inf")):  # (a NaN compared false with every level: starvation read "ok")
            raise ModelError(f"the priority of thread {thread!r} must be a finite number (higher runs first), "
                             f"not {level!r}")
        self.priorities[thread] = level


"""Programs: a table of labelled steps per role, and where each step may go.

Theory of operation
-------------------
A model is a set of threads running *programs*. A program is a table of
labelled steps; the label doubles as the thread's program counter, so the
label a user writes is exactly what appears in a trace. Each step is atomic.
The first step added is where every thread of the program starts; the
reserved label :data:`DONE` is where a thread ends.

Each method of :class:`Program` adds one step of one kind: a plain ``step``,
an ``external`` step whose work happens outside the model, or an operation on
a primitive (mutex, condvar, semaphore, flag). This module only *records*
steps (:class:`StepSpec`); the compiler turns them into fire functions.

Every step declares where it may go
-----------------------------------
The program graph is data, as h11 keeps its transitions in a table. A step
goes to ``next`` when that is a label (or DONE); a step whose ``next`` is a
function ``(s, me) -> label``, or whose effect returns the next label, says
so with ``to=[...]``: every label it may go to. So

    p.release("unlock", "lock", next=lambda s, me: "lock" if me.left else DONE,
              to=["lock", DONE])

The targets of a step are ``{next} | set(to)`` when ``next`` is a label, and
``set(to)`` otherwise. The compiler rejects a declared target that is not a
label of the program, and a step with a computed ``next`` (a function, or
none: the effect decides) that declares no ``to``; a step that goes anywhere
else at run time raises :class:`ModelError` (see ``graph.py``). Tools draw the
graph from these declarations, never by running the model.

Decisions, and why
------------------
* ``to`` is a keyword list, not a second form of ``next``: the common case --
  one fixed successor -- stays ``next="label"``, and the declaration sits next
  to the code that makes the choice.
* ``to="label"`` (a bare string) is refused at once: a string is a sequence
  of one-letter labels, the classic Python trap.
* Labels containing " (asleep)", " (woken)" or " (timed out)", and the label
  "(not started)", are reserved: the compiler adds those program counters for
  a waiting thread and for a thread not started yet.
* A try-lock (``try_acquire``) and a timed wait (``timeout=``) have a second
  outcome; its label (``busy=``, ``timeout=``) is a declared target like
  ``next``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .violations import ModelError

__all__ = ["ASLEEP", "DONE", "NOT_STARTED", "TIMED_OUT", "Program", "StepSpec", "WOKEN"]

#: The program counter of a thread that has finished.
DONE = "done"

#: Suffixes of the program counters the compiler adds after a ``wait`` label.
ASLEEP = " (asleep)"
WOKEN = " (woken)"
#: ... and after a timed ``wait``'s label, for the thread that timed out (it re-acquires the mutex).
TIMED_OUT = " (timed out)"

#: The program counter of a thread declared with ``start=False`` until a ``spawn`` step starts it.
NOT_STARTED = "(not started)"

#: What a mutex argument may be: a name, or ``(s, me) -> name`` (a mutex chosen by expression).
MutexRef = Any


@dataclass
class StepSpec:
    """One step as the model wrote it (before compilation)."""

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
    #: The extra labels this step declares it may go to (``to=``), or None when it declares none.
    to: tuple[str, ...] | None = None
    #: The other outcome's label: a try-lock's ``busy``, a timed wait's ``timeout``.
    alt: str | None = None


def _targets_arg(role: str, label: str, to: Sequence[str] | None) -> tuple[str, ...] | None:
    if to is None:
        return None
    if isinstance(to, str):
        raise ModelError(f"program {role!r}: step {label!r} has to={to!r}; to= takes a list of labels, "
                         f"e.g. to=[{to!r}]")
    out = tuple(to)
    bad = [t for t in out if not isinstance(t, str)]
    if bad:
        raise ModelError(f"program {role!r}: step {label!r} declares a target that is not a label: {bad[0]!r}")
    return out


class Program:
    """The steps of one role (producer, consumer, closer...).

    Each method adds one labelled step. The first step added is where every
    thread of this program starts. ``next`` is the label to go to after the
    step, or a function ``(s, me) -> label``; :data:`DONE` ends the thread.
    ``to`` lists the other labels the step may go to, and is required when
    ``next`` is a function or the effect picks the next label (module doc).
    """

    def __init__(self, role: str, locals: Mapping[str, Any]):
        self.role = role
        self.locals = dict(locals)
        self.specs: dict[str, StepSpec] = {}

    def _add(self, spec: StepSpec, to: Sequence[str] | None) -> "Program":
        if spec.label in self.specs:
            raise ModelError(f"program {self.role!r}: duplicate step label {spec.label!r}")
        if spec.label in (DONE, NOT_STARTED) or any(x in spec.label for x in (ASLEEP, WOKEN, TIMED_OUT)):
            raise ModelError(f"program {self.role!r}: reserved step label {spec.label!r}")
        spec.to = _targets_arg(self.role, spec.label, to)
        if spec.branches is not None:
            where = f"program {self.role!r}, step {spec.label!r}"
            if not spec.branches:
                raise ModelError(f"{where}: branches=() names no outcome, so the step could never be taken")
            if not all(isinstance(b, str) for b in spec.branches):
                raise ModelError(f"{where}: branch names must be strings, got {list(spec.branches)!r}")
            if len(set(spec.branches)) != len(spec.branches):
                dup = sorted({b for b in spec.branches if spec.branches.count(b) > 1})
                raise ModelError(f"{where}: branch {dup[0]!r} is named twice")
        self.specs[spec.label] = spec
        return self

    def step(self, label: str, effect: Callable | None = None, *, next: Any = None,
             guard: Callable | None = None, branches: Sequence[str] | None = None,
             to: Sequence[str] | None = None) -> "Program":
        """A plain atomic step.

        ``guard(s, me) -> bool`` says whether it is enabled (default: always).
        ``effect(s, me)`` mutates the state; if it returns a label, that is
        the next step, otherwise ``next`` is. With ``branches``, the step is
        nondeterministic: each branch is a separate choice, and both
        ``guard`` and ``effect`` take the branch name as a third argument.
        """
        return self._add(StepSpec(label, "step", next=next, fn=effect, guard=guard,
                                  branches=None if branches is None else tuple(branches)), to)

    def external(self, label: str, action: str, effect: Callable | None = None, *,
                 next: Any = None, branches: Sequence[str] = ("ok",),
                 guard: Callable | None = None, to: Sequence[str] | None = None) -> "Program":
        """A step whose work happens outside the model (fetch, copy, compute).

        The checker explores every branch. The live runtime runs the bound
        ``action`` outside the kernel lock, and the action's outcome picks the
        branch that is then applied atomically.
        """
        return self._add(StepSpec(label, "external", next=next, fn=effect, action=action, guard=guard,
                                  branches=tuple(branches)), to)

    def acquire(self, label: str, mutex: MutexRef, *, next: Any, to: Sequence[str] | None = None) -> "Program":
        """Take ``mutex``; not enabled while another thread holds it.

        ``mutex`` is a name, or a function ``(s, me) -> name`` for a lock chosen
        at run time (a lock order that depends on the thread's data).
        """
        return self._add(StepSpec(label, "acquire", next=next, obj=mutex), to)

    def try_acquire(self, label: str, mutex: MutexRef, *, next: Any, busy: str,
                    to: Sequence[str] | None = None) -> "Program":
        """``acquire(blocking=False)``: take ``mutex`` and go to ``next`` if it is free, else go to ``busy``.

        Never blocks. Its two branches, ``acquired`` and ``busy``, appear in traces.
        """
        return self._add(StepSpec(label, "try_acquire", next=next, obj=mutex, alt=busy,
                                  branches=("acquired", "busy")), to)

    def release(self, label: str, mutex: MutexRef, *, next: Any, to: Sequence[str] | None = None) -> "Program":
        """Give ``mutex`` (a name, or ``(s, me) -> name``) back; releasing a mutex the thread does not hold is an
        ``invariant`` violation."""
        return self._add(StepSpec(label, "release", next=next, obj=mutex), to)

    def wait(self, label: str, cond: str, mutex: str, *, next: Any,
             until: Callable | None = None, timeout: str | bool | None = None,
             to: Sequence[str] | None = None) -> "Program":
        """Mesa wait: release ``mutex`` and sleep on ``cond``; once woken, re-acquire.

        ``next`` is where the thread goes once it holds ``mutex`` again.
        ``until(s, me)`` declares what the thread waits for. It is used for
        diagnosis: a thread stuck asleep while its predicate holds, with no
        notify since, is reported as a lost wakeup rather than a deadlock.

        ``timeout`` makes it ``Condition.wait(timeout)``: while asleep the
        thread may also time out -- the branch ``timed out`` -- then re-acquire
        the mutex and go to ``timeout`` (a label; ``True``: to ``next``, as a
        ``while`` loop around the wait does). It may time out only while
        ``until`` is false: once what it waits for holds, only a notify wakes
        it, because a timeout there would mask a lost wakeup -- the bug the
        checker is for. (Without ``until``, it may time out at any time.)
        A thread that timed out stays in ``cond``'s queue until it holds
        ``mutex`` again, as in CPython's ``Condition.wait``: a notify in
        between is spent on it, and it still goes to ``timeout``.
        """
        alt = None if timeout is None or timeout is False else (None if timeout is True else timeout)
        kind = "wait" if timeout is None or timeout is False else "timed_wait"
        return self._add(StepSpec(label, kind, next=next, obj=cond, obj2=mutex, until=until, alt=alt), to)

    def notify_one(self, label: str, cond: str, *, next: Any, to: Sequence[str] | None = None) -> "Program":
        """Wake one waiter of ``cond`` (the longest one, or any: the ``notify`` setting)."""
        return self._add(StepSpec(label, "notify_one", next=next, obj=cond), to)

    def notify_all(self, label: str, cond: str, *, next: Any, to: Sequence[str] | None = None) -> "Program":
        """Wake every waiter of ``cond``."""
        return self._add(StepSpec(label, "notify_all", next=next, obj=cond), to)

    def sem_acquire(self, label: str, sem: str, *, next: Any, timeout: str | None = None,
                    to: Sequence[str] | None = None) -> "Program":
        """Take one unit of ``sem``; not enabled at zero.

        ``timeout`` makes it ``Semaphore.acquire(timeout=)`` or, for a semaphore
        counting a queue's items, ``queue.get(timeout=)``: at zero the thread
        may instead time out and go to ``timeout`` (branches ``acquired`` and
        ``timed out``).
        """
        if timeout is None:
            return self._add(StepSpec(label, "sem_acquire", next=next, obj=sem), to)
        return self._add(StepSpec(label, "sem_acquire", next=next, obj=sem, alt=timeout,
                                  branches=("acquired", "timed out")), to)

    def sem_release(self, label: str, sem: str, *, next: Any, to: Sequence[str] | None = None) -> "Program":
        """Give one unit back to ``sem``; past its bound that is an ``overflow``."""
        return self._add(StepSpec(label, "sem_release", next=next, obj=sem), to)

    def set_flag(self, label: str, flag: str, *, next: Any, to: Sequence[str] | None = None) -> "Program":
        """Set ``flag`` (an Event); it stays set."""
        return self._add(StepSpec(label, "set_flag", next=next, obj=flag), to)

    def wait_flag(self, label: str, flag: str, *, next: Any, timeout: str | None = None,
                  to: Sequence[str] | None = None) -> "Program":
        """Go on once ``flag`` is set; not enabled before.

        ``timeout`` makes it ``Event.wait(timeout)``: while the flag is clear
        the thread may instead time out and go to ``timeout`` (branches ``set``
        and ``timed out``).
        """
        if timeout is None:
            return self._add(StepSpec(label, "wait_flag", next=next, obj=flag), to)
        return self._add(StepSpec(label, "wait_flag", next=next, obj=flag, alt=timeout,
                                  branches=("set", "timed out")), to)

    def spawn(self, label: str, thread: str, *, next: Any, to: Sequence[str] | None = None) -> "Program":
        """Start ``thread`` (declared with ``m.thread(..., start=False)``), as ``Thread.start()`` does.

        Starting a thread that was already started is an ``invariant``
        violation (Python raises RuntimeError).
        """
        return self._add(StepSpec(label, "spawn", next=next, obj=thread), to)

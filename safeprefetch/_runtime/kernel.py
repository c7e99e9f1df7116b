"""The live runtime: any model, run on real threads.

Theory of operation
-------------------
The checker and this runtime consume the *same* compiled :class:`Machine`.
Nothing here re-implements a protocol; it only decides *when* each thread
applies the step the model gives it.

* One kernel lock guards the state value ``self._state`` (an immutable
  tuple). A thread applies its own enabled step under that lock, by calling
  the step's pure ``fire`` function and storing the successor. The lock is
  an ``RLock`` used without re-entry, only so that code can ask whether its
  own thread holds it (``owned_by_current_thread``): a signal handler or a
  finalizer that runs on a thread already inside a step must not wait for
  the lock, and re-entering the kernel from there raises a clear error.
* A thread whose step is not enabled *parks*: it marks itself parked under
  the kernel lock, releases it, and blocks on its own one-token lock. A
  wakeup is that token, given under the kernel lock, so a wakeup that comes
  between releasing the lock and blocking is not lost: the token is already
  there. (A ``threading.Condition`` would do the same and allocate a waiter
  lock per wait; this is the hot path.)
* After every step, each parked thread whose step has become enabled is
  woken -- and only those. A lost-wakeup bug in a model therefore really
  hangs here, and a correct model really runs. Which threads to test is
  decided exactly, and cheaply: a parked thread still at the step it parked
  on, whose step reads none of the shared fields the step just taken wrote
  (the compiled steps' footprints), cannot have become enabled and is not
  tested; the others are tested with the step's guard alone
  (``Machine.enabled``), without building a successor.
* ``step(t, chain=True)`` lets a step and the thread's next plain step
  share one critical section, parking there until the next one is enabled:
  the same as the thread being scheduled twice in a row, which is one of the
  interleavings the checker explored.
* Steps the model marks *external* (fetch a batch, copy into ``out``, user
  compute) run their bound action **outside** the lock. The model's view is a
  begin step (the one before) and an end step (the external step itself,
  whose branch -- "ok" or "error" -- is the action's outcome).
* Deadlock detection is exact, not a timer: when every thread is done,
  parked (with a deadline, only if its step has nothing else enabled), or
  left with nothing but spurious wakeups (none running, none inside an
  external action, none merely idle between calls), no step can ever happen
  again. The runtime then fails every
  parked thread with :class:`LiveDeadlock`, classified exactly as the
  checker would (deadlock, lost_wakeup, shutdown_hang) and carrying the same
  state printout, or ``blocked_branch`` when the model could move but the
  thread that could waits for another branch (``stuck.py``).
* A step that raises a model violation, or a state that breaks an invariant,
  fails the runtime with :class:`LiveViolation`.
* With ``compiled=`` (``codegen.compile_transitions``: the machine's steps
  generated as straight-line code and validated against it), a step calls
  its generated transition instead of ``fire``: the first enabled branch in
  one call, invariants checked inside it, and only the parked threads in
  that branch's precomputed wake set tested. Same steps, same states, same
  record: ``tests/test_codegen.py`` proves the transitions are the machine's,
  and runs this runtime both ways.
* With ``kernel=`` (built with the typed transitions, ``runtime="typed"``),
  ``step``'s common path runs in C (``ckernel.py``): the same stores in the
  same order, every other path through the methods below, and an
  interrupt-safety argument and injection sweep of its own, since C has no
  lines to inject at (``tests/test_ckernel.py``); not under a schedule, nor
  for a class that overrides a method whose work it does
  (``ckernel.REPLACED``).

Interrupts: the kernel's methods are marked protected (``_interrupts.py``):
with the SIGINT wrapper installed, Ctrl-C landing in them is deferred to the
parked thread's wait (``_wait``, the one interruptible point) or to the
step's return. Without it, one exception at any point where CPython can
raise one still leaves the kernel consistent: the lock is released by
``with``; a step's successor and the wakeups it owes (``_owed``) are stored
together, and a wake-up loop cut short leaves the debt for the next entry to
pay (``_settle``); a parking thread's release-wait-reacquire takes the lock
back in its ``except`` if it is not owned. tests/test_interrupts.py injects
at every such point.

Conformance: with ``record=True`` the runtime keeps every step it took as
``(thread, branch, successor)``. :func:`verify_record` replays that record
through the model and checks each step is a valid transition from the
previous state. With ``schedule=trace`` the runtime lets a thread step only
when it is that thread's turn in the trace, so a counterexample found by
the explorer can be replayed on real threads in exactly its order.

The model, checking and tooling layers never import ``threading``: this
module, the Prefetcher built on it, and their interrupt and lifecycle
support are the only ones that do.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, Mapping

from .._check.replay import choice_step
from .._check.result import Trace
from .interrupts import deliver, guard, interruptible, outermost, protected, retake
from .._dsl.model import DONE, Machine
from .._dsl.codegen import Broken, CompiledMachine
from .ckernel import FIELDS, REPLACED
from .driving import Driving
from .entries import GENERIC, ActionContext, Entry, bind_actions, generated_entry, never, seconds
from .errors import LiveDeadlock, LiveError, LiveViolation, NeverStarted, StepTimeout
from .stuck import check_branch, describe, detect
from .views import Views

#: What an interrupted step owes when its footprint is unknown: a test of every parked thread.
_EVERYTHING: Any = object()
_INF = float("inf")
#: The longest single wait ``Lock.acquire`` accepts; longer ones are taken in pieces.
_TIMEOUT_MAX = threading.TIMEOUT_MAX

__all__ = [
    "LiveDeadlock",
    "LiveError",
    "LiveViolation",
    "NeverStarted",
    "Runtime",
    "StepTimeout",
]


class Runtime(Driving, Views):
    """Runs one compiled machine on real threads.

    ``actions`` maps an external step's action name to ``f(ctx) -> branch``
    (None means the first branch). An action runs outside the kernel lock, and
    a Ctrl-C landing in it is raised there, unless it is marked ``protected``.
    ``kernel`` (``TypedTransitions.kernel``, with its ``compiled``) runs
    ``step`` through the kernel's step in C (``ckernel.py``) unless a
    ``schedule`` forces the order.
    """

    #: The fields the step in C reads and stores at their slots' offsets (the others live in the dict).
    __slots__ = FIELDS

    def __init__(self, machine: Machine, actions: Mapping[str, Callable[[ActionContext], str | None]] | None = None,
                 *, record: bool = False, check_invariants: bool = True, schedule: Trace | None = None,
                 compiled: CompiledMachine | None = None, kernel: Any = None):
        if isinstance(machine, type):
            raise TypeError(f"the live runtime runs a compiled Machine, not the class {machine.__name__}: pass "
                            f"{machine.__name__}.compile() (or .compile(config))")
        self.machine = machine
        self.compiled = compiled
        self.actions = bind_actions(machine, actions)
        self._n = n = len(machine.thread_names)
        # An RLock used without re-entry: it can say whether the calling thread holds it
        # (``_is_owned``), which is how code running on a thread already inside a step (a
        # signal handler, a finalizer) knows not to wait for it.
        self._lock = threading.RLock()
        self._owed: Any = None  # wakeups a step still owes (its write footprint), None when paid
        self._state = machine.init
        self._pci = machine.pc_index
        gen = compiled.steps if compiled is not None else [{}] * n
        self._entries = [{pc: generated_entry(info, gen[t][pc]) if pc in gen[t] else Entry(info, machine.tables[t].get(pc))
                          for pc, info in machine.infos[t].items()} for t in range(n)]
        # Precomputed wake sets are exact when every step is generated (no primitive moves a parked
        # thread's program counter) and no schedule forces the order.
        self._wake_sets = compiled is not None and not compiled.refused and schedule is None
        # Parking. Each thread has a private lock used as a one-token semaphore: held
        # means "no wakeup pending". A waker releases it (under the kernel lock, and
        # only for a thread marked parked, which it unmarks in the same breath), the
        # parked thread acquires it. Cheaper than a Condition per park: no waiter lock
        # is allocated and no waiter queue is kept, and the check-then-sleep is still
        # atomic: a wakeup given between releasing the kernel lock and blocking is a
        # token already there.
        self._tokens = [threading.Lock() for _ in range(n)]
        for tok in self._tokens:
            tok.acquire()
        self._parked = [False] * n          # blocked in _park, no wakeup given yet
        self._sleeping = [False] * n        # in _park's wait, the lock let go: a handler there must not drive it
        self._nparked = 0                   # how many are
        self._want: list[str | None] = [None] * n  # the branch a parked thread waits for
        self._timed = [False] * n                  # whether it waits with a deadline (then it is not stuck)
        self._spurious = machine.spurious_pcs if any(machine.spurious_pcs) else None
        self._parked_pc: list[Any] = [None] * n    # its program counter when it parked
        self._failure: LiveError | None = None
        self._ended = False                 # every thread done, but for never-started ones: the run is over
        self._check_invariants = check_invariants and bool(machine.invariants)
        self._invariant_violation = machine.invariant_violation
        # The invariants as plain predicates over the state tuple, when every one of them
        # was specialized to constant indices: one call each per step. Any failure (or any
        # invariant that needs a view) goes through machine.invariant_violation, which
        # names it.
        fast = machine._fast_invariants if self._check_invariants else []
        if all(raw for *_x, raw in fast):
            preds: tuple = tuple(pred for _n, _k, pred, _raw in fast)
        else:
            preds = (never,)  # always take the full check
        for es in self._entries:  # what to check after each step: a generated step checks them inside itself
            for e in es.values():
                e.inv = () if e.first is not None and compiled is not None and compiled.invariants_folded else preds
        self.record: list[tuple[int, int, tuple]] | None = [] if record else None
        self._schedule = list(schedule.steps) if schedule is not None else None
        self._pos = 0
        self.steps = 0
        bad = self._check_invariants and self._invariant_violation(self._state)
        if bad:  # the first state breaks one (the checker's 0-step counterexample): every step raises it
            self._failure = LiveViolation(bad[0], bad[1], self._state, describe(self, self._state))
        # The step in C (``ckernel.py``, built with the typed transitions): the free-running path only, and not
        # for a class that overrides a method it does the work of. It holds no reference to this runtime, so
        # none of its own makes a cycle.
        self._fast = kernel(self, FIELDS, Runtime).step \
            if kernel is not None and compiled is not None and schedule is None \
            and all(getattr(type(self), name) is getattr(Runtime, name) for name in REPLACED) else None

    # -- the kernel (all under self._lock) -----------------------------------
    #
    # Interrupt safety (see _interrupts.py). Every method here is protected: a
    # SIGINT landing in it is deferred while the wrapper is installed. Without
    # the wrapper, one exception at any eval-breaker point must still leave the
    # kernel consistent, which is what the following arrangements are for:
    #
    # * The lock is taken only by ``with`` (its exit runs from the exception
    #   table), except in ``_park``, whose release-wait-reacquire is one line
    #   with an ``except`` that takes the lock back if it is not owned.
    # * A step's successor, the wakeups it owes (``_owed``), the record and the
    #   step count change on one line with no call before the last one, so no
    #   interrupt separates them. ``_owed`` is cleared once the wakeups are
    #   given; an interrupted wake-up loop leaves it set and the next entry to
    #   the kernel (or the ``except`` of the interrupted one) pays it.
    # * A woken thread's parked marks are cleared on the line that wakes it,
    #   and a parking thread's on the line that takes the lock back.

    def _options(self, t: int, e: Entry, branch: str | None) -> list:
        """Enabled (branch index, successor) pairs of thread t at entry e, filtered by branch and schedule."""
        state = self._state
        if self._schedule is not None and self._pos < len(self._schedule):
            # Forced order: only the thread whose turn it is may step. Past the end of
            # the schedule every thread runs freely, so a hang there is a real hang.
            m = self.machine
            turn = self._schedule[self._pos]
            if turn.thread != m.thread_names[t]:
                return []
            branch = turn.branch
            info = m.step_info(state, t)
            if info is None or info.label != turn.step:
                here = info.label if info else m.pc(state, t)
                self._fail(LiveError("replay_divergence",
                                     f"step {self._pos}: {turn.thread} is at {here!r}, not {turn.step!r}"))
        if branch is None:
            return e.fire(state) if e.fire is not None else []
        if type(branch) is tuple:  # any of these branches, the first enabled in this order
            for name in branch:
                opts = self._options(t, e, name)
                if opts:
                    return opts
            return []
        bi = e.bindex.get(branch)
        if bi is not None:
            return e.one(state, bi)
        if e.fire is None:
            return []
        m = self.machine
        return [(b, n) for b, n in e.fire(state) if choice_step(m, state, (t, b)).branch == branch]

    def _enabled(self, u: int, e: Entry, branch: str | None) -> bool:
        """Whether parked thread u would find an option now (guards only, no successor built)."""
        if self._schedule is not None:
            return bool(self._options(u, e, branch))
        if branch is None:
            return e.enabled(self._state)
        if type(branch) is tuple:
            for name in branch:
                if self._enabled(u, e, name):
                    return True
            return False
        bi = e.bindex.get(branch)
        if bi is not None:
            return e.enabled_one(self._state, bi)
        return bool(self._options(u, e, branch))

    @protected
    def _apply(self, t: int, e: Entry, b: int, nxt: Any) -> None:
        pos = self._pos + 1 if self._schedule is not None else 0
        if type(nxt) is not tuple:
            if type(nxt) is Broken:  # a generated transition's successor breaks an invariant
                self._broken(t, e, b, nxt, pos)
            if self.record is not None:
                self.record.append((t, b, nxt))  # a violating step is recorded too: it is the last one
            self._fail(LiveViolation(nxt.kind, f"{self.machine.thread_names[t]}: {nxt.message}", self._state,
                                     describe(self, self._state)))
        owed = e.bwrites[b] if e.bwrites is not None else e.writes if e.writes is not None else _EVERYTHING
        # One line, no interruption point before its last call: the step happens together
        # with the wakeups it owes, its count and its record.
        self._owed = owed; self._state = nxt; self.steps += 1; self._pos = pos; self.record is not None and self.record.append((t, b, nxt))  # noqa: E702,E501
        for holds in e.inv:
            if holds(nxt) is not True:  # false, or a value whose truth the full check judges (and may refuse)
                bad = self._invariant_violation(nxt)  # names the invariant
                if bad:
                    self._fail(LiveViolation(bad[0], bad[1], nxt, describe(self, nxt)))
                break
        if not self._nparked:
            woke = False
        elif self._wake_sets:
            woke = self._wake_set(e.wake[b])
        else:
            woke = self._wake_enabled(owed if owed is not _EVERYTHING else None)
        self._owed = None
        # A replay's last step: the threads parked only because it was not their turn are woken now, and one
        # left at a spurious wakeup arrived there while the check was off; judge them all once, here.
        at_end = self._spurious is not None and self._schedule is not None and pos == len(self._schedule)
        if (at_end or not woke and self._nparked) and nxt[self._pci[t]] == DONE:
            # The last runnable thread just finished and woke nobody: the parked ones may be
            # stuck for good. Fail them, but let this thread return normally.
            try:
                detect(self)
            except LiveError:
                pass
        elif self._spurious is not None and (at_end or nxt[self._pci[t]] in self._spurious[t]) and (
                self._schedule is None or pos >= len(self._schedule)):  # (a replay: once past its end)
            detect(self)  # arrived where only a spurious wakeup moves it: stuck, if everyone else is

    @protected
    def _broken(self, t: int, e: Entry, b: int, broken: Broken, pos: int) -> None:
        """A generated transition's successor breaks an invariant: store it, as the plain path does, and fail."""
        nxt = broken.state
        self._owed = _EVERYTHING; self._state = nxt; self.steps += 1; self._pos = pos; self.record is not None and self.record.append((t, b, nxt))  # noqa: E702,E501
        self._fail(LiveViolation(broken.kind, broken.message, nxt, describe(self, nxt)))

    @protected
    def _wake_set(self, wake: tuple) -> bool:
        """Wake the parked threads of a branch's precomputed wake set whose step is now enabled; True if any.

        ``wake`` lists ``(thread, program counters)``: the steps whose guard reads a
        field the branch may write. Any other parked thread reads nothing it
        changed, so it is still disabled (``_wake_enabled`` decides the same,
        thread by thread).
        """
        if self._failure is not None:
            return self._wake_enabled(None)
        woke = False
        state, pci, parked = self._state, self._pci, self._parked
        for u, pcs in wake:
            if parked[u]:
                pc = state[pci[u]]
                if pc in pcs and self._enabled(u, self._entries[u][pc], self._want[u]):
                    parked[u] = False; self._nparked -= 1; self._tokens[u].release(); woke = True  # noqa: E702
        return woke

    @protected
    def _settle(self) -> None:
        """Pay the wakeups an interrupted step still owes (``_owed``)."""
        owed = self._owed
        if self._nparked:
            self._wake_enabled(None if owed is _EVERYTHING else owed)
        self._owed = None

    @protected
    def _wake_enabled(self, writes: frozenset | None) -> bool:
        """Wake exactly the parked threads whose step is now enabled; True if any.

        ``writes`` are the shared fields the step just taken wrote (None: unknown).
        A parked thread still at the step it parked on, whose step reads none of
        them, is skipped without testing: nothing it depends on changed since it
        last found itself disabled. (Its own locals only it writes; a notify that
        moves it changes its program counter, which forces the test.) After a
        failure, or the run's end, every parked thread is woken, to raise it.
        """
        woke = False
        state = self._state
        pci = self._pci
        parked = self._parked
        failed = self._failure is not None or self._ended
        for u in range(len(parked)):
            if not parked[u]:
                continue
            if not failed:
                pc = state[pci[u]]
                e = self._entries[u].get(pc)
                if e is None:
                    continue  # done: cannot happen for a parked thread, but never wake into nothing
                if (writes is not None and pc == self._parked_pc[u] and e.reads is not None
                        and self._schedule is None and e.reads.isdisjoint(writes)):
                    continue
                if not self._enabled(u, e, self._still_wanted(u, self._want[u])):
                    continue
            # One line: unmarked and counted as running in the same breath as its token
            # is given (the deadlock detector must not see it parked once woken).
            parked[u] = False; self._nparked -= 1; self._tokens[u].release(); woke = True  # noqa: E702
        return woke

    @protected
    def _fail(self, error: LiveError) -> None:
        if self._failure is None:
            self._failure = error
        self._owed = _EVERYTHING  # waking every parked thread is owed until done
        self._wake_enabled(None)
        self._owed = None
        raise self._failure

    def _check(self) -> None:
        if self._failure is not None:
            self._fail(self._failure)

    @protected
    def _park(self, t: int, branch: str | None, deadline: float | None) -> None:
        """Sleep until a step wakes thread t, or the deadline passes. Called and returns with the lock held.

        Raises StepTimeout once the deadline has passed with the step still
        disabled. The wait itself (``_wait``) is interruptible; everything
        around it is protected, and structured so that an exception at any
        point leaves the lock held (as the caller's ``with`` expects) and the
        thread unmarked.
        """
        tok = self._tokens[t]
        lock = self._lock
        got = True
        try:
            # Drop a stale token (a wakeup that raced a timeout or an interrupt), then mark parked.
            tok.acquire(False); self._parked[t] = True; self._nparked += 1; self._want[t] = branch; self._timed[t] = deadline is not None; self._parked_pc[t] = self._state[self._pci[t]]  # noqa: E702,E501
            detect(self)
            remaining = None if deadline is None else deadline - time.monotonic()
            if self._failure is not None:  # recorded by a handler's fail() in this step: never wait for it
                self._fail(self._failure)  # every parked thread woken (this one too), and raised
            self._sleeping[t] = True; lock.release(); got = _wait(tok, remaining); lock.acquire(); self._nparked -= self._parked[t]; self._parked[t] = self._sleeping[t] = False  # noqa: E702,E501
        except BaseException:
            retake(lock)
            self._nparked -= self._parked[t]; self._parked[t] = self._sleeping[t] = False  # noqa: E702
            raise
        if self._failure is not None:
            raise self._failure
        if self._ended:
            raise NeverStarted(f"{self.machine.thread_names[t]} was never started, and the run is over")
        if not got and deadline is not None and time.monotonic() >= deadline:
            e = self._entries[t].get(self._state[self._pci[t]])
            if e is None or not self._options(t, e, branch):
                raise StepTimeout(f"{self.machine.thread_names[t]}: step not enabled in time")

    # -- driving a thread ----------------------------------------------------

    @protected
    def _take(self, t: int, branch: str | None, deadline: float | None) -> None:
        """Apply thread t's current step (parking until enabled). Lock held."""
        pci = self._pci[t]
        free = self._schedule is None
        while True:
            e = self._entries[t][self._state[pci]]
            if free and e.first is not None:  # a generated step: the branch's transition, in one call
                r = e.first(self._state) if branch is None else e.choose(self._state, branch)
                if r is not GENERIC:
                    if r is not None:
                        self._apply(t, e, r[0], r[1])
                        return
                    self._park(t, branch, deadline)
                    branch = self._still_wanted(t, branch)
                    continue
            # The common case (no forced order; any branch, or one of the step's own) calls the
            # step's fire directly.
            if free and e.fire is not None and (branch is None or branch in e.bindex):
                opts = e.fire(self._state) if branch is None else e.one(self._state, e.bindex[branch])
            else:
                if free and branch is not None:
                    check_branch(self, t, e, branch)  # a name the step does not have (a typo): an error, not a wait
                opts = self._options(t, e, branch)
            if opts:
                b, nxt = opts[0]
                self._apply(t, e, b, nxt)
                return
            self._park(t, branch, deadline)
            branch = self._still_wanted(t, branch)

    def _still_wanted(self, t: int, branch: Any) -> Any:
        """The branch a woken thread still waits for: a tuple of its step's branches is an order of preference
        among that step's own, and when another thread's step moved it on while it slept (a notify moves a
        waiter to its reacquire) the step it is at has none of those names: it takes any of its branches.
        (Kept, the wake-up tests found none enabled and the thread was failed as ``blocked_branch``.)"""
        if type(branch) is tuple and self._state[self._pci[t]] != self._parked_pc[t]:
            return None
        return branch

    @protected
    def step(self, t: int, branch: str | None = None, timeout: float | None = None, *, chain: bool = False,
             then: str | None = None) -> str:
        """Apply thread ``t``'s next step, parking until it is enabled. Returns the step label.

        For an external step, the bound action runs outside the lock and its
        result picks the branch. ``branch`` selects among a plain step's
        branches (default: the first enabled one); a tuple of branch names
        accepts any of them, the first enabled in that order. ``timeout`` (seconds;
        ``None`` or ``inf``: none) raises :class:`StepTimeout` when the step
        stays disabled that long.

        ``chain=True``: then also take the thread's next step in the same
        critical section, parking until it is enabled, if it is a plain step
        (``then`` names its branch; default: the first enabled one). That is
        one lock round trip instead of two, the same schedule as the thread
        stepping twice in a row, and a thread that must wait for its next
        step parks right after the step that woke the others, instead of
        leaving and re-entering the kernel first: the woken thread finds the
        interpreter free instead of waking twice.
        """
        fast = self._fast
        if fast is None:
            if t.__class__ is not int or not 0 <= t < self._n:
                t = self._thread_index(t)
            deadline = None if timeout is None or timeout == _INF else time.monotonic() + seconds(timeout)
            lock = self._lock
            if lock._is_owned() or self._sleeping[t]:
                self._reentered(t)
        try:
            if fast is not None:  # the same step in C (ckernel.py); this frame stays, protected, for the delivery
                label = fast(self, t, branch, timeout, chain, then)
            else:
                with lock:
                    e = self._begin(t)  # the step's kind, fire and footprint, prepared once
                    state = self._state
                    if not e.external:
                        self._take_locked(t, branch, deadline, chain, then)
                if e.external:
                    # External: run the action outside the lock, on the snapshot taken above.
                    action = self.actions.get(e.action)
                    outcome = action(ActionContext(self, t, state, e.label)) if action is not None else branch
                    if outcome is not None and outcome not in e.bindex and (  # (no action: the caller's tuple)
                            action is not None or type(outcome) is not tuple or not e.bindex.keys() >= set(outcome)):
                        raise ValueError(f"action {e.action!r} returned unknown outcome {outcome!r}")
                    with lock:
                        self._begin(t)
                        self._take_locked(t, outcome, deadline, chain, then)
                if self._failure is not None:  # recorded while this step ran (a handler's fail()): it raises it
                    with lock:
                        self._fail(self._failure)
                label = e.label
        except BaseException:
            if guard.deferred and outermost(sys._getframe()):
                deliver()
            raise
        if guard.deferred and outermost(sys._getframe()):
            deliver()
        return label

    @protected
    def _begin(self, t: int) -> Entry:
        """On entering the kernel: pay what an interrupted step owes, raise a failure, find t's step."""
        if self._owed is not None:
            self._settle()
        if self._failure is not None:
            self._fail(self._failure)  # every parked thread woken to raise it too (a handler's fail() only records)
        pc = self._state[self._pci[t]]
        if pc == DONE:
            raise ValueError(f"{self.machine.thread_names[t]} is done")
        return self._entries[t][pc]

    @protected
    def _take_locked(self, t: int, branch: str | None, deadline: float | None, chain: bool, then: str | None) -> None:
        """``_take`` (and ``_chain``), paying the wakeups owed if an exception cuts the step short. Lock held."""
        try:
            self._take(t, branch, deadline)
            if chain:
                self._chain(t, then, deadline)
        except BaseException:
            if self._owed is not None:
                self._settle()
            raise

    @protected
    def _chain(self, t: int, branch: str | None, deadline: float | None) -> None:
        """The chained half of ``step(chain=True)``: thread t's next step, if plain. Lock held."""
        nxt = self._entries[t].get(self._state[self._pci[t]])  # None once done
        if nxt is not None and not nxt.external:
            self._take(t, branch, deadline)

    @protected
    def fail(self, error: LiveError) -> None:
        """Fail the machine from outside (a watchdog or a timeout); parked threads raise ``error``.

        From a thread already inside a step (a handler or a finalizer) it only
        records the failure and owes a wakeup of every parked thread: waking
        them here could cut into the step's own wake-up loop. The step in
        progress raises it when it returns, or before it would park.
        """
        lock = self._lock
        if lock._is_owned():
            if self._failure is None:
                self._failure = error
            self._owed = _EVERYTHING
            return
        with lock:
            try:
                self._fail(error)
            except LiveError:
                pass


@interruptible
def _wait(tok: Any, timeout: float | None) -> bool:
    """A parked thread's sleep: the one place in the kernel where Ctrl-C is raised at once.

    A deferred SIGINT is delivered here, before blocking (on the main thread
    only). Waits longer than ``threading.TIMEOUT_MAX`` are cut to it; the
    caller parks again until its own deadline.
    """
    if guard.deferred:
        deliver()
    if timeout is None:
        return tok.acquire()
    if timeout <= 0:
        return tok.acquire(False)
    return tok.acquire(True, timeout if timeout < _TIMEOUT_MAX else _TIMEOUT_MAX)

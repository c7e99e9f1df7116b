"""The controlled scheduler: one execution of unmodified threading code, one thread at a time.

What it guarantees
------------------
Every thread of the code under test is a real OS thread (so its Python
stack, ``threading.current_thread()`` and thread-local data are real), but
exactly one of them runs at any moment. A thread runs until it reaches a
*scheduling point* -- a synchronization operation on one of the drop-in
primitives (:mod:`.primitives`, :mod:`.queues`), a thread start, join or
exit, a virtual sleep -- and stops there, announcing the operation it is
about to perform (an :class:`Op`). The scheduler then chooses which thread
performs its announced operation next, among those whose operation is
enabled (a free lock, a non-empty queue, a notified waiter), and hands the
baton to it. So one execution is a sequence of *transitions*, each "one
thread performs its operation, then runs local code up to its next point",
and the sequence of choices determines the execution entirely, provided the
code is deterministic apart from scheduling. That is what makes a schedule
replayable, and what lets :mod:`.explore` enumerate schedules.

Time is virtual. ``time.sleep``, timeouts and ``time.monotonic`` read a
clock that only moves when no thread can move: it then jumps to the earliest
deadline (trio's autojump clock). Code that waits 5 s for a worker runs in
microseconds, and a timeout fires exactly when nothing else could happen
first -- the schedule in which every other thread is as slow as it may be.

How an execution ends, and what it reports
-------------------------------------------
The first violation ends it; the choices up to there are its trace:

* ``deadlock`` -- no thread can move, none has a deadline, and the test body
  has not returned; ``lost_wakeup`` when a thread asleep on a condition
  variable sleeps there after a notify on that condition woke nobody;
* ``uncaught_exception`` -- a thread (or the test body) raised;
  ``assertion`` -- the test body's ``assert`` failed;
* ``leaked_thread`` -- a thread is still alive when the test body returns;
* ``hang`` -- virtual time passed ``time_limit``, or ``max_steps``
  transitions ran, without the test ending (a polling loop that never stops);
* ``non_owner_release`` -- a lock released by a thread that does not hold it.

Decisions, and why
------------------
* **The scheduling logic runs in the thread that reached the point.** There
  is no scheduler thread: the running thread chooses its successor, releases
  that thread's baton (a raw ``_thread`` lock) and blocks on its own. One
  context switch per transition that changes thread, none otherwise.
* **Points announce before they act.** The operation is performed by the
  thread after the scheduler lets it go, so enabledness is decided on the
  state the operation will see: only one thread runs between two points.
* **Ending an execution unwinds its threads.** Each remaining thread is
  woken with an abort flag and raises :class:`Aborted` (a ``BaseException``)
  from its point, so ``finally`` blocks run and the OS thread exits. During
  the unwind, an operation that need not block is performed at once and one
  that would block raises again; a thread that swallows :class:`Aborted`
  more than :data:`ABORT_PATIENCE` times is left parked for good.
* **A thread that never reaches a point is an error, not a hang.** The
  caller waits with a wall-clock bound (``wall_timeout``); past it, the check
  stops with :class:`SchedulerStuck` naming the thread and the line it is
  at: it is blocked in something the scheduler does not control (a lock
  created before the check, ``_thread``, I/O) or spinning on a plain
  attribute (which ``lines=True`` makes visible).
"""

from __future__ import annotations

import _thread
import re
import threading
from typing import Any, Callable

from .ops import (Aborted, Choice, Op, SchedulerStuck, Settings, Step, handled_by_hook, join_clock, may_outlive,
                  name_from_line, raised_at)
from .ops import exit_finding, where as where

__all__ = ["ABORT_OPS", "ABORT_PATIENCE", "Aborted", "Choice", "Execution", "Op", "SchedulerStuck", "Settings", "Step",
           "VThread", "current", "where"]

#: An aborted thread's operations that may still go ahead (its cleanup), then Aborted at each but one giving
#: something back; past ABORT_PATIENCE more (it swallows Aborted in a loop) it is parked for good, not spinning.
ABORT_OPS, ABORT_PATIENCE = 10_000, 100


class VThread:
    """One thread of an execution: its baton, its announced operation, its fate."""

    __slots__ = ("index", "name", "obj", "body", "ident", "baton", "op", "granted", "finished", "abort",
                 "aborts", "in_interrupt", "started", "exited", "daemon", "stopped")

    def __init__(self, index: int, name: str, body: Callable[[], Any], obj: Any = None, daemon: bool = False):
        self.index, self.name, self.obj, self.body, self.daemon = index, name, obj, body, daemon
        self.ident: int | None = None
        self.baton = _thread.allocate_lock()
        self.baton.acquire()
        self.op: Op | None = None
        self.granted: Choice | None = None
        self.finished = self.abort = self.in_interrupt = False
        self.aborts = 0
        self.started = _thread.allocate_lock()
        self.started.acquire()
        self.exited = _thread.allocate_lock()
        self.exited.acquire()
        self.stopped = False  #: its Thread has recorded its end (CPython's ``_is_stopped``; patching._join)


_ACTIVE: list["Execution | None"] = [None]
_AUTO_NAME = re.compile(r"^Thread-\d+( \(.*\))?$")
#: concurrent.futures names its workers from a process-wide count of executors.
_EXECUTOR_NAME = re.compile(r"^ThreadPoolExecutor-(\d+)_(\d+)$")


def current() -> tuple["Execution", VThread] | None:
    """The execution and thread the caller runs as, or None when the caller is not controlled."""
    ex = _ACTIVE[0]
    if ex is None:
        return None
    vt = ex.by_ident.get(_thread.get_ident())
    if vt is None:
        return None
    return ex, vt


class Execution:
    """One run of the test body under one schedule; the ``controller`` makes every choice."""

    def __init__(self, controller: Any, settings: Settings, interrupts: tuple = (),
                 tracer: Callable[[bool], None] | None = None):
        self.controller = controller
        #: Turns line mode on or off for the calling thread (:mod:`.lines`; given by the runner).
        self.tracer = tracer
        self.settings = settings
        self.interrupts = interrupts
        self.interrupts_left = [getattr(i, "times", 1) for i in interrupts]
        self.threads: list[VThread] = []
        self.by_ident: dict[int, VThread] = {}
        self.clock = 0.0
        self.events: list[Step] = []
        self.steps = 0
        self.spurious_left = settings.max_spurious if settings.spurious == "on" else 0
        self.over = False
        self.outcome: str | None = None  # "ok", "pruned", or a violation kind
        self.message = ""
        self.stuck: list[tuple[str, str]] = []
        self.done = _thread.allocate_lock()
        self.done.acquire()
        self.root_done = False
        self.last: int | None = None  # the thread of the last transition
        self.names: dict[str, int] = {}
        self.thread_names: set[str] = set()
        self.thread_objs: dict[int, VThread] = {}
        self.auto_names = 0
        self.executor_names: dict[str, int] = {}
        self.objects: list[Any] = []  # every primitive created in this execution, in order
        self.lost_notifies: dict[int, str] = {}  # id(condition) -> where a notify woke nobody
        self.exception: BaseException | None = None
        #: An error the controller raised while choosing (re-raised by the runner once every thread is back).
        self.controller_error: Exception | None = None
        self.left_behind = 0
        self.result: Any = None
        # happens-before bookkeeping, for partial-order reduction
        self.tclock: list[list[int]] = []
        self._wclock: dict[Any, list[int]] = {}
        self._rclock: dict[Any, list[int]] = {}
        self._all: list[int] = []
        self._star: list[int] = []
        self._touched: list[Any] = []

    # -- naming ---------------------------------------------------------------

    def name_object(self, obj: Any, kind: str, line: tuple[str, int] | None, stored: str | None = None) -> None:
        """Give a new primitive a short, unique, identifier-like name: what it is stored to, or its line's."""
        base = stored or name_from_line(line) or kind.lower()
        n = self.names.get(base, 0) + 1
        self.names[base] = n
        obj._ilv_name = base if n == 1 else f"{base}_{n}"
        self.objects.append(obj)

    # -- threads --------------------------------------------------------------

    def add_thread(self, name: str, body: Callable[[], Any], obj: Any = None, daemon: bool = False,
                   named: bool = False) -> VThread:
        """Start ``body`` as a new controlled thread, parked at its first point (``named``: ``name`` is unique)."""
        if not named:
            name = self.unique_name(name, obj)
        vt = VThread(len(self.threads), name, body, obj, daemon)
        self.threads.append(vt)
        self.tclock.append([])
        vt.op = Op("begin", obj, (("start", vt.index),), label=f"begin {name}")
        _thread.start_new_thread(self._bootstrap, (vt,))
        vt.started.acquire()  # the new thread is registered and parked at its first point
        return vt

    def unique_name(self, name: str, obj: Any) -> str:
        """A thread name that is the same in every schedule and unique in this one.

        ``threading`` numbers unnamed threads from a process-wide counter
        (``Thread-7 (worker)``), and ``ThreadPoolExecutor`` its executors
        (``ThreadPoolExecutor-3_0``); both differ from one schedule to the
        next. Such a thread is renumbered within its execution (and its Thread
        object renamed to match). Two threads given the same name get ``#2``.
        """
        renamed = None
        if obj is not None:
            m = _AUTO_NAME.match(name)
            e = _EXECUTOR_NAME.match(name)
            if m is not None:
                self.auto_names += 1
                renamed = f"Thread-{self.auto_names}{m.group(1) or ''}"
            elif e is not None:
                k = self.executor_names.setdefault(e.group(1), len(self.executor_names) + 1)
                renamed = f"ThreadPoolExecutor-{k}_{e.group(2)}"
        if renamed is not None:
            name = renamed
            try:
                obj.name = name
            except Exception:  # noqa: BLE001 - a Thread subclass that forbids renaming keeps its name
                pass
        base, n = name, 1
        while name in self.thread_names:
            n += 1
            name = f"{base}#{n}"
        self.thread_names.add(name)
        return name

    def _bootstrap(self, vt: VThread) -> None:
        ident = _thread.get_ident()
        vt.ident = ident
        self.by_ident[ident] = vt
        _register(vt, ident)
        vt.started.release()
        vt.baton.acquire()
        tracing = self.settings.lines and self.tracer is not None
        try:
            if vt.abort:
                raise Aborted
            if tracing:
                self.tracer(True)
            self._run_body(vt)
        except Aborted:
            pass
        finally:
            if tracing:
                self.tracer(False)
            if vt.obj is not None:
                threading._active.pop(ident, None)  # type: ignore[attr-defined]
            self.by_ident.pop(ident, None)
            vt.exited.release()

    def _run_catching(self, vt: VThread) -> None:
        """The thread's body; what it raises is a finding (no ``except`` falls through: backedges.py, 3.12)."""
        try:
            vt.body()
            return
        except Aborted:
            raise
        except SystemExit as e:
            if (finding := exit_finding(e, "the test body" if vt.index == 0 else f"thread {vt.name}", vt.obj)):
                self.violation("uncaught_exception", finding, vt)
            return
        except BaseException as e:  # noqa: BLE001 - every exception of the code under test is a finding
            if vt.abort:  # raised by the code's own cleanup while the checker unwound it: not the code's
                raise Aborted from None
            if vt.index and handled_by_hook(e, vt.obj):
                return
            kind = "assertion" if vt.index == 0 and isinstance(e, AssertionError) else "uncaught_exception"
            text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            who = "the test body" if vt.index == 0 else f"thread {vt.name}"
            self.exception = e
            return self.violation(kind, f"{who} raised {text}{raised_at(e)}", vt)

    def _run_body(self, vt: VThread) -> None:
        self._run_catching(vt)
        # Unannounced, the reduction pruned the order where a thread ends after the body's leak check.
        root = vt.index == 0; self.root_done |= root  # noqa: E702
        keys = [("thread", vt.index)] + ([("threads",)] + [("thread", u.index) for u in self.threads]) * root
        self.point(vt, Op("exit", vt.obj, keys, label=f"exit {vt.name}"))
        if root and not self.over and (leaked := [u.name for u in self.threads if u is not vt and not u.finished
                                                  and not may_outlive(u.name, self.settings.allow_alive)]):
            self.violation("leaked_thread", f"{', '.join(leaked)} still alive when the test body returned", vt)
        vt.finished = True
        if vt.index > 0 and vt.obj is not None:
            retire(vt.obj)  # stopped, to real threading too (repr, the daemon setter)
        self._decide_and_pass(vt)

    # -- scheduling points ------------------------------------------------------

    def point(self, vt: VThread, op: Op) -> Choice:
        """Announce ``op`` and wait until the scheduler lets ``vt`` perform it. Returns the choice made."""
        if vt.abort:
            return self._aborting(vt, op)
        if vt.in_interrupt and op.kind == "exit":
            raise AssertionError("an interrupt callback cannot end its thread")
        vt.op = op
        while True:
            if vt.abort:  # also after an interrupt callback that ran while the execution ended
                return self._aborting(vt, op)
            nxt = self._decide(vt)
            if nxt is not vt:
                if nxt is not None:
                    nxt.baton.release()
                vt.baton.acquire()
            if vt.abort:
                return self._aborting(vt, op)
            c = vt.granted
            i = c.interrupt
            if i is None:
                vt.op = None
                return c
            self._run_interrupt(vt, i, op)

    def _run_interrupt(self, vt: VThread, i: int, op: Op) -> None:
        """Run interrupt ``i`` on ``vt`` now, as CPython runs a signal handler between bytecodes."""
        vt.in_interrupt = True
        try:
            self.interrupts[i].callback()
        finally:
            vt.in_interrupt = False
            vt.op = op

    def _aborting(self, vt: VThread, op: Op) -> Choice:
        vt.aborts += 1
        if vt.aborts > ABORT_OPS + ABORT_PATIENCE:  # it swallows every Aborted: park it (one lock, acquired twice)
            parked = _thread.allocate_lock()
            parked.acquire()
            parked.acquire()
        if op.kind != "exit" and (op.enabled is None or op.enabled()) and op.deadline is None and (
                vt.aborts <= ABORT_OPS or op.kind in ("release", "task_done")):  # a livelock ends at an acquire
            return Choice(vt.index)
        raise Aborted

    def _decide_and_pass(self, vt: VThread) -> None:
        """A finished thread chooses who goes next and leaves without waiting."""
        nxt = self._decide(vt)
        if nxt is not None and nxt is not vt:
            nxt.baton.release()

    def choices(self) -> list[Choice]:
        """The enabled choices of the current state, in canonical order (thread, then alternative)."""
        out: list[Choice] = []
        for vt in self.threads:
            op = vt.op
            if vt.finished or op is None:
                continue
            # A deadline is part of ``enabled`` (primitives.until): a timed-out condition wait still needs
            # its lock back, so a passed deadline alone does not enable an operation.
            ok = op.enabled is None or op.enabled()
            if ok:
                if op.alts is not None:
                    out.extend(Choice(vt.index, a) for a in op.alts())
                else:
                    out.append(Choice(vt.index))
            elif op.kind == "wake" and self.spurious_left > 0 and op.obj.lock_free_for(vt):
                out.append(Choice(vt.index, -1))
            if not vt.in_interrupt and op.kind not in ("begin", "exit"):
                for i, intr in enumerate(self.interrupts):
                    if intr.when in ("both", "running" if ok and op.running() else "blocked") \
                            and self.interrupts_left[i] > 0 and intr.applies(vt):
                        out.append(Choice(vt.index, -2 - i))
        return out

    def _moves(self, opts: list[Choice]) -> bool:
        """Whether a thread can go on: not by a spurious wakeup, nor by an interrupt while blocked."""
        for c in opts:
            if c.alt >= 0:
                return True
            if c.alt <= -2:
                op = self.threads[c.t].op
                if op.enabled is None or op.enabled():
                    return True
        return False

    def _decide(self, me: VThread) -> VThread | None:
        """Choose the next transition; None when the execution has ended."""
        if self.over:
            return None
        self._close_event()
        self.steps += 1
        if self.steps > self.settings.max_steps:
            self.end("hang", f"{self.settings.max_steps:,} transitions without the test ending")
            return None
        opts = self._advance_clock()
        if opts is None:
            return None
        if not self._moves(opts):
            if self.root_done:
                self.end("ok", "")
            else:
                self._deadlock()
            return None
        try:
            c = self.controller.choose(self, opts)
        except Exception as e:  # noqa: BLE001 - the controller's error (a replay that diverged), not the code's
            self.controller_error = e
            self.end("stuck", str(e))
            return None
        if c is None:
            self.end("pruned", "")
            return None
        vt = self.threads[c.t]
        vt.granted = c
        if c.alt == -1:
            self.spurious_left -= 1
        elif c.interrupt is not None:
            self.interrupts_left[c.interrupt] -= 1
        self._record(vt, c, opts)
        self.last = c.t
        return vt

    def _advance_clock(self) -> list[Choice] | None:
        """The current state's choices, virtual time moved to each next deadline while no thread can move (not
        once the body returned and only daemons are left: a heartbeat ran to ``time_limit``); None past it."""
        opts = self.choices()
        while not self._moves(opts) and not (self.root_done and all(v.daemon or v.finished for v in self.threads)):
            deadlines = [vt.op.deadline for vt in self.threads if not vt.finished and vt.op is not None
                         and vt.op.deadline is not None and vt.op.deadline > self.clock]
            if not deadlines:
                break
            self.clock = min(deadlines)
            if self.clock > self.settings.time_limit:
                self.end("hang", f"virtual time passed {self.settings.time_limit:g} s without the test ending")
                return None
            opts = self.choices()
        return opts

    # -- the record, with happens-before clocks ---------------------------------

    def _record(self, vt: VThread, c: Choice, opts: list[Choice]) -> None:
        op = vt.op
        last = self.last
        preempt = last is not None and c.t != last and any(o.t == last and o.alt >= 0 for o in opts)
        star = op.star or c.interrupt is not None or self.settings.lines
        t = vt.index
        clock = list(self.tclock[t])
        join_clock(clock, self._star)
        if star:
            join_clock(clock, self._all)
        else:
            for k in op.keys:
                join_clock(clock, self._wclock.get(k, ()))
                if op.write:
                    join_clock(clock, self._rclock.get(k, ()))
        n = len(self.events)
        while len(clock) <= t:
            clock.append(0)
        clock[t] = n + 1
        self.tclock[t] = clock
        join_clock(self._all, clock)
        if star:
            self._star = clock
        else:
            for k in op.keys:
                if op.write:
                    self._wclock[k] = clock
                    self._rclock.pop(k, None)
                else:
                    r = self._rclock.setdefault(k, [])
                    join_clock(r, clock)
        if c.interrupt is not None:
            label = f"interrupt: {self.interrupts[c.interrupt].name}"
            if not op.running():
                label += f" while blocked in {op.describe()}"
        elif c.alt == -1:
            label = op.describe() + " (spurious)"
        else:
            label = op.describe()
        self.events.append(Step(t, c, op, label, op.keys, op.write, star, clock, preempt))
        self._touched = [op.obj]

    def _close_event(self) -> None:
        """Fill in what the last transition changed, now that it has run."""
        if not self.events:
            return
        ev = self.events[-1]
        if ev.changes:
            return
        for obj in self._touched:
            describe = getattr(obj, "_ilv_state", None)
            if describe is not None:
                ev.changes.append(f"{obj._ilv_name}={describe()}")

    def happens_before(self, i: int, t: int) -> bool:
        """Whether event ``i`` happens before thread ``t``'s next transition."""
        clock = self.tclock[t]
        u = self.events[i].t
        return u < len(clock) and clock[u] >= i + 1

    def start_clock(self, t: int, parent: int) -> None:
        """A new thread starts after its ``start`` (the parent's last event)."""
        self.tclock[t] = list(self.tclock[parent])

    def enabled_by(self, t: int, by: int) -> None:
        """Thread ``t`` was just enabled by thread ``by``'s transition (a notify that woke it): what
        ``t`` does next happens after it."""
        join_clock(self.tclock[t], self.tclock[by])

    # -- ending -----------------------------------------------------------------

    def violation(self, kind: str, message: str, vt: VThread | None = None) -> None:
        """Record a violation and end the execution (the first one wins)."""
        self.end(kind, message)

    def _deadlock(self) -> None:
        stuck, lost = [], []
        for vt in self.threads:
            if vt.finished or vt.op is None:
                continue
            why = getattr(vt.op.obj, "_ilv_blocked", None)
            if why is not None:
                reason = why(vt, vt.op)
            elif vt.op.kind == "join":
                target = self.thread_objs.get(id(vt.op.obj))  # its name in this run (main#2), not the object's
                reason = f"joins {target.name if target is not None else vt.op.obj.name}, which never ends"
            else:
                reason = f"blocked at {vt.op.describe()}"
            stuck.append((vt.name, reason))
            timed_out = vt.op.deadline is not None and self.clock >= vt.op.deadline  # it waits for the lock
            if vt.op.kind == "wake" and id(vt.op.obj) in self.lost_notifies and not timed_out:
                lost.append(f"{vt.name} sleeps on {vt.op.obj._ilv_name}, whose notify at "
                            f"{self.lost_notifies[id(vt.op.obj)]} woke nobody")
        self.stuck = stuck
        what = "; ".join(f"{n} {r}" for n, r in stuck)
        if lost:
            self.end("lost_wakeup", f"every thread is blocked: {what} ({'; '.join(lost)})")
        else:
            self.end("deadlock", f"every thread is blocked: {what}")

    def end(self, outcome: str, message: str) -> None:
        if self.over:
            return
        self._close_event()
        self.over = True
        self.outcome = outcome
        self.message = message
        self.done.release()

    def abort_all(self, wait: float) -> int:
        """Unwind every thread still in the execution; the number left behind (parked for good)."""
        left = 0
        for vt in self.threads:
            if vt.exited.locked():
                vt.abort = True
                try:
                    vt.baton.release()
                except RuntimeError:
                    pass  # released already: the thread is on its way
                if not vt.exited.acquire(True, wait):
                    left += 1
                else:
                    vt.exited.release()
        return left


def _register(vt: VThread, ident: int) -> None:
    """Make ``vt``'s Thread object the one ``threading.current_thread()`` returns on its OS thread."""
    obj = vt.obj
    if obj is None:
        return
    obj._ident = ident
    if hasattr(obj, "_native_id"):
        obj._native_id = ident
    threading._active[ident] = obj  # type: ignore[attr-defined]


class _Started:
    """A Thread's ``_started`` Event, set for good (a real one made in a check would be a controlled one)."""

    __slots__ = ()

    def is_set(self) -> bool:
        return True

    def wait(self, timeout: float | None = None) -> bool:
        return True

    def set(self) -> None:
        pass

    _at_fork_reinit = set  # a fork's child resets every Thread's Event: this one stays set


_STARTED = _Started()


def mark_started(obj: threading.Thread) -> None:
    """A Thread the scheduler started is started to real ``threading`` too (``daemon`` fixed; its repr)."""
    obj._started = _STARTED  # type: ignore[attr-defined]


def retire(obj: threading.Thread) -> None:
    """Make a Thread object the scheduler ran look finished to the real ``threading`` API.

    Its run was virtual: the real Thread never started, so after the check a real ``join`` (``concurrent.futures``'
    exit hook joins every executor thread it saw) would raise "cannot join thread before it is started", and
    ``is_alive`` would read the controlled Event its ``__init__`` made. It did start and end, under the scheduler."""
    mark_started(obj)
    if hasattr(obj, "_handle"):  # 3.13: a thread handle, marked done
        handle = _thread._make_thread_handle(_thread.get_ident())  # type: ignore[attr-defined]
        handle._set_done()
        obj._handle = handle  # type: ignore[attr-defined]
    else:
        obj._is_stopped = True  # type: ignore[attr-defined]
        obj._tstate_lock = None  # type: ignore[attr-defined]

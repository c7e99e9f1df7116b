"""The exhaustive explorer over a full visited set: every reachable state, breadth first.

What it guarantees
------------------
*Shortest counterexamples.* The default search is level-synchronous BFS
over distinct states. A violation is found either *at* a state (a failed
invariant, a terminal state that is not a clean finish) or *on* a step (a
step that calls :func:`violate`). All states of depth ``d`` are processed
before any state of depth ``d + 1``; a violation on a step out of depth
``d`` has length ``d + 1``, so once one is seen the explorer still finishes
level ``d``, in case a terminal violation of length ``d`` is there. The
reported trace is therefore of minimal length, and the first such one in
canonical order. ``strategy="dfs"`` uses a stack instead: less frontier
memory, same verdict on exhaustive runs, traces not minimal.

*Honest bounds.* ``max_states`` caps the number of distinct states stored.
If the cap cuts the search short, the result says ``exhaustive=False``: an
``ok`` verdict then means only "no violation among the states seen", and a
violation whose trace is not known to be shortest (:func:`.cutoff.not_shortest`)
says so too.

*Determinism and replay* are the scheduler's (:mod:`.replay`).

Theory of operation
-------------------
The explorer is a search order and a visited set, nothing more. What a
state's moves are, and whether it is stuck, comes from the one expansion
function (:class:`~.expand.Expander`), which also applies the reductions;
what a terminal state means comes from the one classifier
(:mod:`.verdict`). The distributed workers, the sampling strategies and the
oracle in :mod:`safeprefetch.testing` consume the same two, so they cannot
disagree with the explorer about a state.

Checks
------
Invariants (model-declared, plus the primitives' own: releasing a mutex one
does not own) run on every new state; a state that fails one is reported
and never expanded. A terminal state -- no thread can step -- is classified
by :mod:`.verdict`: the end-of-run checks when every thread is done,
otherwise ``shutdown_hang``, ``lost_wakeup`` or ``deadlock``. The
lost-wakeup test needs history, not just the final state; it walks the
counterexample path (which BFS keeps anyway) rather than widening every
state with bookkeeping bits. Models that declare progress steps are checked
for starvation afterwards (:mod:`.liveness`).

Memory: ``parents`` maps every stored state to the state it was first
reached from (the visited set; paths are rebuilt from it only for the
violation reported). States are tuples, which cannot form cycles: the cyclic
GC is paused while searching.
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import replace
from typing import Any, Callable, Sequence

from .._dsl.codegen import compile_transitions
from .._dsl.model import Machine, ModelError, StepViolation
from .budget import DictGrowth, MemoryBudget
from .cutoff import cut_short, not_shortest
from .expand import Expander, check_max_states, counted_at_cut
from .determinism import Mutated, differs, error as determinism_error
from .extension import Build
from .generated import ENGINES, CompileUnavailable, Expansion, agrees, default_engine, expansion, start_build, why_not
from .liveness import STARVATION_CAPPED, bounded_starvation
from .replay import trace_of
from .result import CheckResult, Trace, Violation
from .verdict import HANG, classify_hang, end_violation, terminal

__all__ = ["DEFAULT_MAX_STATES", "DEFAULT_REDUCE", "Explorer", "PathLost"]

#: Default cap on stored states (a million states of a catalog model take 0.3-0.5 GB in CPython): it keeps a
#: runaway config from eating the machine, and every catalog default far below it.
DEFAULT_MAX_STATES = 2_000_000

#: Reductions are on by default: both preserve every verdict (the test suite checks each
#: catalog model under each setting), and symmetry also preserves trace lengths.
DEFAULT_REDUCE = "all"

#: A progress report is considered every this many expanded states (a mask: the clock per state costs more).
_PROGRESS_MASK = 1023
_PROGRESS_SHIFT = _PROGRESS_MASK.bit_length()  # counter >> this: which block of 1024 states

#: ``engine="auto"`` switches a BFS to the generated expansion once this many states are stored.
#: Writing the expansion costs 0.02-0.1 s (the prefetcher: about 0.05 s, what the plain engine
#: spends on some 15,000 states), and the expansion saves 20-45% per state from then on: below this
#: size a search is over before it would pay, above it the switch costs a few percent at most.
AUTO_STATES = 50_000

#: ``engine="auto"``, with the compiled expansion applicable but not yet built: once a search stores this
#: many states, the compiled expansion is built in a child process (5-7 s of one core here) while the
#: search goes on with the generated one, and the search switches to it when it is ready; the build lands
#: in the cache either way. By then the search has run a few seconds and is likely to run longer; a
#: smaller one would pay a build it never uses. ``SAFEPREFETCH_BACKGROUND_BUILD=0`` turns it off.
BUILD_STATES = 500_000

#: A search on a generated expansion checks the expansion's successors against the machine's on every
#: state of the first AUDIT_FIRST it hands the expansion, then on one state in every 1024 (about 8 µs
#: each): what catches a model whose build is not a function of its configuration, which the
#: generator, building the model again, would otherwise trust.
AUDIT_FIRST = 256


class PathLost(RuntimeError):
    """A stored path cannot be walked back through the machine's successors: the graph the search stored is
    not the machine's (a wrong symmetry declaration, or a model that is not a function of its state)."""


class _Diverged(Exception):
    """The generated expansion gave a state other successors than the machine does."""


class Explorer:
    """Exhaustive search over the distinct states of one machine.

    After :meth:`run`, ``parents`` maps every stored state to its BFS parent
    (``None`` for the initial state); tests use it as the reachable set.
    """

    def __init__(self, machine: Machine, *, strategy: str = "bfs", max_states: int = DEFAULT_MAX_STATES,
                 progress: Callable[[int, int, float], None] | None = None, stop_at_first: bool = True,
                 reduce: str = "none", progress_every: float = 3.0, memory: int | None = None,
                 engine: str | None = None):
        engine = default_engine() if engine is None else engine
        if engine not in ENGINES:
            raise ModelError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
        self.expander = Expander(machine, reduce)
        self.reduce = reduce
        #: The symmetry reduction in force (canonical representatives), or None.
        self.canon = self.expander.symmetry
        self.ample = self.expander.ample
        #: Seconds between progress reports (TLC: about a minute; a few seconds suit a check of half a minute).
        self.progress_every = progress_every
        if strategy not in ("bfs", "dfs"):
            raise ModelError(f"unknown strategy {strategy!r} (known: bfs, dfs)")
        self.machine = machine
        self.strategy = strategy
        self.max_states = check_max_states(max_states)
        self.progress = progress
        self.stop_at_first = stop_at_first
        self.parents: dict[tuple, tuple | None] = {}
        self.transitions = 0
        self.violations: list[Violation] = []
        self._max_depth = 0
        #: The memory budget in bytes (None: none); see :mod:`.budget`.
        self.memory = memory
        self.budget = MemoryBudget(memory) if memory is not None else None
        #: Why a search that is not exhaustive stopped: "max_states" or "memory"; and any detail of it.
        self.stop_reason: str | None = None
        self.stop_detail, self.longer = "", False  # longer: the trace may not be a shortest (.cutoff)
        #: The engine asked for, and the one the BFS ran (see :mod:`.generated`), with why not when they differ.
        self.engine = engine
        self.engine_used = "plain"
        self.engine_note = ""
        self.fast: Expansion | None = None
        #: Under ``auto``: the compiled expansion's build running in the background, and whether one was tried.
        self.build: Build | None = None
        self._build_tried = False

    @property
    def por_reduced(self) -> int:
        """States where partial-order reduction explored only an ample subset."""
        return self.expander.por_reduced

    # -- path reconstruction ---------------------------------------------

    def path_to(self, state: tuple) -> tuple[list[tuple], list[tuple[int, int]]]:
        """The real states and choices from the initial state to the stored ``state``."""
        states = [state]
        parents = self.parents
        while (p := parents[states[-1]]) is not None:
            states.append(p)
        states.reverse()
        return self.walk(states[1:], lambda x: x)

    def walk(self, keys: Sequence[Any], key: Callable[[tuple], Any]) -> tuple[list[tuple], list[tuple[int, int]]]:
        """Replay a stored path from the initial state: at each step, the successor whose stored key
        (``key`` of its representative) is the next of ``keys``. Returns the real states and choices."""
        m = self.machine
        canon = self.expander.canon or (lambda x: x)
        # With symmetry the stored states are representatives; walk the real states alongside.
        real, choices = [m.init], []
        for b in keys:
            for ch, nxt in m.successors(real[-1]):
                if nxt.__class__ is tuple and key(canon(nxt)) == b:
                    choices.append(ch)
                    real.append(nxt)
                    break
            else:  # pragma: no cover - would mean successors() is not pure
                raise PathLost("successor function is not deterministic")
        return real, choices

    def _trace(self, states: Sequence[tuple], choices: Sequence[tuple[int, int]]) -> Trace:
        return trace_of(self.machine, states, choices)

    def violation_at(self, state: tuple, found: Any = HANG) -> Violation:
        """The violation holding in the stored ``state``: ``found`` is ``(kind, message)``, or HANG to classify."""
        states, choices = self.path_to(state)
        if found is HANG or found is None:
            found = classify_hang(self.machine, states, choices)
        elif self.canon is not None:
            # The message may name threads: take it from the real state, not the representative.
            found = (self.machine.invariant_violation(states[-1]) or end_violation(self.machine, states[-1])
                     or found)
        kind, msg = found
        trace = self._trace(states, choices)
        return Violation(kind, msg, trace, states[-1], on_step=False, step=len(trace))

    def violation_on(self, state: tuple, choice: tuple[int, int], v: StepViolation) -> Violation:
        """The violation raised by taking ``choice`` in the stored ``state``."""
        states, choices = self.path_to(state)
        real = states[-1]
        if self.canon is not None and real != state:
            _, order = self.canon.canon_with_order(real)
            choice = (order[choice[0]], choice[1])  # the representative's thread j is real thread order[j]
            for ch, nxt in self.machine.successors(real):
                if ch == choice and isinstance(nxt, StepViolation):
                    v = nxt
                    break
        trace = self._trace(states + [real], choices + [choice])
        return Violation(v.kind, v.message, trace, real, on_step=True, step=len(trace))

    # -- search -------------------------------------------------------------

    def run(self) -> CheckResult:
        # The cyclic GC would rescan every stored tuple on each collection; none can be in a cycle.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if self.fast is not None:  # a compiled instance goes back for the next search to bind
                self.fast.release()
            if enabled:
                gc.enable()

    def _run(self) -> CheckResult:
        m = self.machine
        t0 = time.perf_counter()
        self._start()
        found: list[tuple[int, Violation]] = []  # (length, violation)
        exhaustive = True
        bad = m.invariant_violation(m.init)
        if bad:
            found.append((0, self.violation_at(self._root, bad)))
        elif self.strategy == "bfs":
            self.fast = self._expansion() if self.engine in ("generated", "compiled") else None  # auto: later
            diverged = False
            try:
                exhaustive = self._bfs(found)
            except _Diverged:
                diverged = True
            if diverged:  # out of the handler: its traceback held the aborted search's visited set
                # The expansion is not the machine here: nothing it stored can be trusted. Start again, plain.
                if self.fast is not None:
                    self.fast.release()
                odd = " Or did Cython compile a construct unlike Python?" * (self.engine == "compiled")
                self.engine_note = (f"the {self.engine} expansion disagreed with the machine at a reachable state (does "
                                    f"the model's build read anything but its configuration?{odd}); searched again plain")
                self.fast, self.engine, self.engine_used = None, "plain", "plain"
                self._start()
                found.clear()
                exhaustive = self._bfs(found)
        else:
            if self.engine in ("generated", "compiled"):
                self.engine_note = "the engines expand the breadth-first search; strategy='dfs' runs plain"
            exhaustive = self._dfs(found)
        self.kinds = frozenset(v.kind for _n, v in found)  # every kind met (all of them, without stop_at_first)
        if found and self.ample is not None and self.strategy == "bfs" and self.stop_at_first:
            # POR keeps the verdict but may lengthen the path: search again without it, for the shortest
            again = Explorer(m, strategy="bfs", max_states=self.max_states, progress=self.progress,
                             reduce="symmetry" if self.canon is not None else "none",
                             progress_every=self.progress_every, memory=self.memory, engine=self.engine).run()
            if again.violation is not None:
                return replace(again, seconds=time.perf_counter() - t0)
            exhaustive = not_shortest(self, again)  # (it was cut before it met one)
        if not found and exhaustive and m.progress_labels:
            lasso, exhaustive = bounded_starvation(m, self.max_states)  # the scheduling policy's own graph
            if not exhaustive:
                self.stop_detail = STARVATION_CAPPED
            if lasso is not None:
                found.append((len(lasso.trace), lasso))
        violation = min(found, key=lambda x: x[0])[1] if found else None
        certain = exhaustive or (violation is not None and not self.longer)
        self.violations = [v for _, v in found]
        #: Whether the search visited every reachable state (the result's ``exhaustive``: or found a violation).
        self.complete = exhaustive
        return CheckResult(
            model=m.name,
            config=dict(m.config),
            strategy=self.strategy,
            exhaustive=certain,
            verdict=violation.kind if violation else "ok",
            states=len(self.parents),
            transitions=self.transitions,
            seconds=time.perf_counter() - t0,
            violation=violation,
            max_depth=self._max_depth,
            engine=self.engine_used,
            engine_note=self.engine_note,
            **self._stop_fields(certain),
        )

    def _start(self) -> None:
        """A visited set holding only the root (its representative, under symmetry)."""
        self._root = self.expander.root()
        self.parents = {self._root: None}
        self.expander.known = self.parents

    def _expansion(self) -> Expansion | None:
        """The generated expansion for this BFS, or None (plain). ``auto`` takes the compiled one if it is
        already built (in the cache), else the Python one, where either applies; ``generated`` and
        ``compiled`` fall back to plain only where it does not apply (``engine_note`` says why)."""
        if self.engine == "plain":
            return None
        reason: str | None
        if self.ample is not None:
            reason = "partial-order reduction (its ample sets need the plain expander)"
        else:
            reason = why_not(self.machine, self.reduce)
        if reason is None:
            try:
                fast = None
                t0 = time.perf_counter()
                cm = compile_transitions(self.machine, self.machine.model)  # once, for either flavour
                written = time.perf_counter() - t0
                if self.engine in ("compiled", "auto"):  # auto: compiled only if already built (cached)
                    fast = expansion(self.machine, "compiled", canon=self.expander.canon, compiled=cm,
                                     build=self.engine == "compiled")
                if fast is None:
                    fast = expansion(self.machine, "generated", canon=self.expander.canon, compiled=cm)
            except CompileUnavailable:
                if self.engine == "compiled":
                    raise
                reason = "the compiled expansion is unavailable"
            except Exception as e:  # noqa: BLE001 - any failure to write it leaves the plain search, which is the reference
                reason = f"{type(e).__name__}: {e}"
            else:
                assert fast is not None
                self.engine_used = fast.engine
                return replace(fast, seconds=fast.seconds + written)  # writing it includes generating the transitions
        self.engine_note = reason or ""
        return None

    def _stop_fields(self, exhaustive: bool) -> dict[str, Any]:
        if exhaustive:
            return {}
        reason = self.stop_reason or "max_states"
        message = self.budget.reason if reason == "memory" and self.budget is not None else \
            f"stopped at the state cap, max_states={self.max_states:,}"
        detail = self.stop_detail
        if self.longer:
            message = detail  # the search again's own reason, in it
        elif detail and reason == "max_states":
            message = f"{detail}, max_states={self.max_states:,}"
        return {"stop_reason": reason, "stop_message": message}

    def _over_budget(self, states: int, growth: int) -> bool:
        """Ask the memory budget (if any); on True the search stops with stop_reason "memory"."""
        if self.budget is None or not self.budget.exceeded(states, growth):
            return False
        self.stop_reason = "memory"
        return True

    def _reporter(self) -> Callable[[int, int, int], None] | None:
        """A progress callback that reports at most every ``progress_every`` seconds (None: no progress)."""
        progress, every = self.progress, self.progress_every
        if progress is None:
            return None
        due = [time.perf_counter() + every]

        def report(states: int, frontier: int, transitions: int) -> None:
            if time.perf_counter() >= due[0]:
                progress(states, frontier, transitions)
                due[0] = time.perf_counter() + every
        return report

    def _stopped(self, depth: int, transitions: int, exhaustive: bool) -> bool:
        self.transitions = transitions
        self._max_depth = depth
        return exhaustive

    def _bfs(self, found: list) -> bool:
        """Level-synchronous BFS from the root; False when the state cap cut it short.

        The hot loop of the checker: one frame, locals only, no call per transition (Why long: split into
        helpers, it would pay a call per state, which is what this loop exists to avoid). With a generated
        expansion (``self.fast``), runs of routine states go through its ``chunk`` (the same loop, written
        out for the machine); each state it stops before is expanded here, by the plain code below.
        """
        parents = self.parents
        setdefault = parents.setdefault
        expand, check_inv = self.expander.expand, self.expander.invariant
        max_states, stop, report = self.max_states, self.stop_at_first, self._reporter()
        chunk = self.fast.chunk if self.fast is not None else None
        pending = self.engine == "auto"  # auto: switch once the search has grown to AUTO_STATES
        watch = pending and os.environ.get("SAFEPREFETCH_BACKGROUND_BUILD", "1").strip() != "0"
        growth = DictGrowth(parents)
        level = [self._root]
        depth = transitions = counter = audit = base = 0  # base: counter when the expansion took over
        while level:
            nxt_level: list[tuple] = []
            append = nxt_level.append
            on_step_found = False
            i, size, audited = 0, len(level), 0
            while i < size:
                if chunk is not None:
                    if counter - base < AUDIT_FIRST or counter >= audit:
                        audited, audit = self._audit(level, i, counter - base, audited, audit)
                    j, moved = chunk(level, i, min(size, i + _PROGRESS_MASK + 1), parents, nxt_level, max_states)
                    transitions += moved
                    crossed = (counter + j - i) >> _PROGRESS_SHIFT != counter >> _PROGRESS_SHIFT
                    counter += j - i
                    if crossed:
                        if report is not None:
                            report(len(parents), len(nxt_level) + size, transitions)
                        if self.budget is not None and self._over_budget(len(parents), growth.soon(64 << 10)):
                            return cut_short(self, level[i:], depth, transitions, found)
                    i = j
                    if crossed and watch and self._background(len(parents)):  # the compiled one took over
                        chunk, base, audit, audited = self.fast.chunk, counter, counter, i
                    if i == size:
                        break
                state = level[i]
                i += 1
                before = transitions
                moves, stuck = expand(state)
                for t, res in moves:
                    transitions += len(res)
                    for b, nxt in res:
                        if nxt.__class__ is not tuple:
                            if not on_step_found or not stop:
                                found.append((depth + 1, self.violation_on(state, (t, b), nxt)))
                                on_step_found = True
                            continue
                        # One hash per successor: setdefault inserts only if new.
                        n_before = len(parents)
                        setdefault(nxt, state)
                        if len(parents) == n_before:
                            continue
                        if n_before >= max_states:
                            del parents[nxt]
                            cut = counted_at_cut(moves, transitions - before - 1, self.expander.reduced)
                            return cut_short(self, level[i - 1:], depth, before + cut, found)  # with the state cut in
                        if check_inv is not None:
                            bad = check_inv(nxt)
                            if bad:  # an error state: report it, never expand it
                                if not on_step_found or not stop:
                                    found.append((depth + 1, self.violation_at(nxt, bad)))
                                    on_step_found = True
                                continue
                        append(nxt)
                if stuck and self._terminal(state, depth, found) and stop:
                    return self._stopped(depth, transitions, True)
                counter += 1
                if not counter & _PROGRESS_MASK:
                    self._still_deterministic(state, counter >> _PROGRESS_SHIFT)  # one in 1024 expanded twice
                    if pending and len(parents) >= AUTO_STATES:
                        pending, self.fast = False, self._expansion()
                        chunk = self.fast.chunk if self.fast is not None else None
                        base = audit = counter
                    if report is not None:
                        report(len(parents), len(nxt_level) + size, transitions)
                    # A level adds at most a few new states per expanded one: 64 per is a safe margin.
                    if self.budget is not None and self._over_budget(len(parents), growth.soon(64 << 10)):
                        return cut_short(self, level[i:], depth, transitions, found)
            self._stopped(depth, transitions, True)
            if on_step_found and stop:
                return True
            level = nxt_level
            depth += 1
        self.transitions = transitions
        return True

    def _still_deterministic(self, state: tuple, k: int) -> None:
        """Raise NondeterministicModel if two expansions of a sampled state differ (see :mod:`.determinism`).

        The ``k``-th sample takes ``state``'s ancestor ``k % 7`` steps up: every 1024th state alone would
        meet the same phase of a periodic search again and again (a loop of two steps, only one of them
        random, was never sampled at its random step)."""
        parents = self.parents
        for _ in range(k % 7):
            up = parents.get(state)
            if up is None:
                break
            state = up
        choice = differs(self.machine, state)
        if choice is None:
            return
        try:  # a state mutated in place has no path back to trust (its hash changed): as the probe, none
            trace = None if isinstance(choice, Mutated) else self._trace(*self.path_to(state))
        except PathLost:  # the path back changed too
            trace = None
        raise determinism_error(self.machine, choice, trace, state)

    def _background(self, stored: int) -> bool:
        """Under ``auto`` on the generated expansion: start the compiled one's build once ``stored`` reaches
        BUILD_STATES, and take it once built. True when ``self.fast`` became the compiled expansion."""
        if self.build is None:
            if self._build_tried or stored < BUILD_STATES or self.engine_used != "generated":
                return False
            self._build_tried = True
            try:
                self.build = start_build(self.machine, canon=self.expander.canon)
            except CompileUnavailable:
                return False  # no Cython or no C compiler: auto stays on the generated expansion, silently
            if self.build is not None:
                return False
        elif not self.build.done():
            return False
        elif self.build.error is not None:
            self.engine_note = f"the compiled expansion's background build failed ({self.build.error})"
            self.build = None
            return False
        self.build = None
        try:
            fast = expansion(self.machine, "compiled", canon=self.expander.canon, build=False)
        except CompileUnavailable as e:
            self.engine_note = f"the compiled expansion, built in the background, did not load ({e})"
            return False
        if fast is None:
            return False
        self.fast, self.engine_used = fast, "compiled"
        self.engine_note = f"its build finished in the background at {stored:,} states (generated until then)"
        return True

    def _audit(self, level: list, i: int, handed: int, audited: int, audit: int) -> tuple[int, int]:
        """Check the expansion's successors against the machine's (see ``agrees``) before the chunk from
        ``level[i]``: every state of the first AUDIT_FIRST handed to the expansion (``handed`` so far; those
        of this level from ``audited`` on), then one state in every 1024 (the next check once the search's
        counter reaches ``audit``). Raises _Diverged on a disagreement; returns the new ``(audited, audit)``."""
        m, fill = self.machine, self.fast.fill if self.fast is not None else None
        if fill is None:
            return audited, audit
        if handed < AUDIT_FIRST:
            top = min(len(level), i + AUDIT_FIRST - handed)
            for k in range(max(i, audited), top):
                if not agrees(m, fill, level[k]):
                    raise _Diverged(level[k])
            return top, audit
        if not agrees(m, fill, level[i]):
            raise _Diverged(level[i])
        return audited, audit + _PROGRESS_MASK + 1

    def _terminal(self, state: tuple, depth: int, found: list) -> bool:
        """Judge a stuck ``state`` with the shared classifier; record and return True if it is a violation."""
        bad = terminal(self.machine, state)
        if bad is None:
            return False
        found.append((depth, self.violation_at(state, bad)))
        return True

    def _dfs(self, found: list) -> bool:
        """Depth-first search from the root; False when the state cap cut it short."""
        parents = self.parents
        expand, check_inv = self.expander.expand, self.expander.invariant
        max_states, stop = self.max_states, self.stop_at_first
        stack = [(self._root, 0)]
        transitions = max_depth = counter = 0
        growth = DictGrowth(parents)
        while stack:
            state, depth = stack.pop()
            max_depth = max(max_depth, depth)
            counter += 1
            # The stack holds up to a few states per expanded one: 64 per is a safe margin.
            if (not counter & _PROGRESS_MASK and self.budget is not None
                    and self._over_budget(len(parents), growth.soon(64 << 10))):
                return self._stopped(max_depth, transitions, False)
            moves, stuck = expand(state)
            succ = [((t, b), n) for t, res in moves for b, n in res]
            transitions += len(succ)
            if stuck:
                if self._terminal(state, depth, found) and stop:
                    break
                if not succ:
                    continue
            hit = False
            for ch, nxt in reversed(succ):
                if nxt.__class__ is not tuple:
                    found.append((depth + 1, self.violation_on(state, ch, nxt)))
                    hit = True
                    continue
                if nxt in parents:
                    continue
                if len(parents) >= max_states:
                    return self._stopped(max_depth, transitions, False)
                parents[nxt] = state
                if check_inv is not None:
                    bad = check_inv(nxt)
                    if bad:
                        found.append((depth + 1, self.violation_at(nxt, bad)))
                        hit = True
                        continue
                stack.append((nxt, depth + 1))
            if hit and stop:
                break
        return self._stopped(max_depth, transitions, True)

"""Searching a model: :func:`check` and :func:`explore`, over the store the caller picks.

What it guarantees
------------------
Every store gives the same verdict, the same shortest counterexample and the
same counts, on a search that finishes: ``"full"`` keeps every state
(:class:`~.explorer.Explorer`, exact), ``"fingerprint"`` keeps 64-bit
fingerprints (:class:`~.fpsearch.FingerprintExplorer`, a collision could
hide a state, and the result says so with TLC's estimate of the chance).
The guarantees of the search itself -- shortest traces, honest bounds,
determinism -- are the explorer's (:mod:`.explorer`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping, NamedTuple

from .._dsl.model import Machine, Model, ModelError, StepError
from . import determinism
from .bitstate import BitstateExplorer
from .budget import format_bytes, resident_bytes
from .generated import ENGINES, default_engine
from .explorer import DEFAULT_MAX_STATES, DEFAULT_REDUCE, Explorer, PathLost
from .fpsearch import FingerprintExplorer
from .replay import choice_step, final_verdict, replay, replay_choices
from .result import CheckResult, ReplayDivergence, Trace, TraceError, TraceStep, Violation
from .steperror import step_error_with_trace
from .symmetry_check import symmetry_error
from .verdict import classify_hang, end_violation

# Re-exported: callers outside this layer (the runtime, the tools, the docs generator and the
# public package) import these from here, where they lived before the layer was split.
_end_violation = end_violation
__all__ = [
    "CheckResult",
    "DEFAULT_MAX_STATES",
    "DEFAULT_REDUCE",
    "Explorer",
    "ReplayDivergence",
    "STORES",
    "Trace",
    "TraceError",
    "TraceStep",
    "Violation",
    "check",
    "choice_step",
    "classify_hang",
    "explore",
    "final_verdict",
    "replay",
    "replay_choices",
]

#: How a search may keep its visited states.
STORES = ("full", "fingerprint", "bitstate")


def explore(machine: Machine, *, strategy: str = "bfs", max_states: int = DEFAULT_MAX_STATES,
            progress: Callable[[int, int, float], None] | None = None, reduce: str = DEFAULT_REDUCE,
            progress_every: float = 3.0, store: str = "full", memory: int | None = None,
            engine: str | None = None, seed: int | None = None) -> CheckResult:
    """Search every reachable state of ``machine``; return the verdict and the shortest trace.

    ``store="fingerprint"`` keeps 64-bit fingerprints instead of states (BFS only): the same
    result at a fraction of the memory, probabilistically (``result.collision_probability``).
    ``store="bitstate"`` is SPIN's supertrace, a depth-first search over a bit array: a last
    resort whose "ok" is not a proof (``result.coverage`` estimates what it saw).
    ``memory`` is a budget in bytes: a search that would pass it stops early, not exhaustive,
    with ``stop_reason="memory"``, instead of raising MemoryError.
    ``engine`` picks what expands states in the full-store BFS (``_check/generated.py``):
    ``auto`` (the generated expansion where it applies), ``plain``, ``generated``, ``compiled``;
    None reads ``SAFEPREFETCH_ENGINE`` (default ``auto``). ``seed`` picks the bitstate store's hash
    functions (two runs with different seeds that store as many states are SPIN's evidence of coverage).
    """
    if seed is not None and store != "bitstate":
        raise ModelError(f"seed picks the bitstate store's hash functions; store={store!r} has none")
    try:
        return _explore(machine, strategy, max_states, progress, reduce, progress_every, store, memory, engine,
                        seed or 0)
    except StepError as e:  # a step's own code raised: say how the search got there
        raise step_error_with_trace(machine, e, max_states) from e.__cause__
    except PathLost as e:
        # A wrong symmetry declaration, or a model that changes its mind, shows first as a path the explorer
        # cannot walk back; name which.
        wrong = symmetry_error(machine, max_states) if machine.symmetry and reduce in ("symmetry", "all") else None
        if wrong is not None:
            raise wrong from e
        raise determinism.error(machine, None) from e


def _explore(machine: Machine, strategy: str, max_states: int, progress: Callable | None, reduce: str,
             progress_every: float, store: str, memory: int | None, engine: str | None = None,
             seed: int = 0) -> CheckResult:
    if store not in STORES:
        raise ModelError(f"unknown store {store!r} (known: {', '.join(STORES)})")
    engine = default_engine() if engine is None else engine
    if engine not in ENGINES:
        raise ModelError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
    if engine in ("generated", "compiled") and store != "full":
        raise ModelError(f"engine={engine!r} expands the breadth-first search over the full store, "
                         f"not store={store!r}")
    determinism.check_before_search(machine, reduce, max_states)
    if memory is not None:
        if isinstance(memory, bool) or not isinstance(memory, (int, float)) or not memory > 0 \
                or memory == float("inf"):  # not memory > 0: NaN too, which disabled the budget
            raise ModelError(f"memory must be a positive number of bytes, not {memory!r}")
        held = resident_bytes()
        if memory <= held:
            raise ModelError(f"memory budget {format_bytes(memory)} is below what this process already holds "
                             f"({format_bytes(held)}): no search fits in it")
    if store == "bitstate":  # depth first by design: its trace is the stack
        return BitstateExplorer(machine, max_states=max_states, progress=progress, reduce=reduce,
                                progress_every=progress_every, memory=memory, seed=seed).run()
    if store == "fingerprint":
        if strategy != "bfs":
            raise ModelError("store='fingerprint' searches breadth first: use strategy='bfs'")
        return FingerprintExplorer(machine, max_states=max_states, progress=progress, reduce=reduce,
                                   progress_every=progress_every, memory=memory).run()
    return Explorer(machine, strategy=strategy, max_states=max_states, progress=progress, reduce=reduce,
                    progress_every=progress_every, memory=memory, engine=engine).run()


def check(model: type[Model] | Machine, config: Mapping[str, Any] | None = None, *, strategy: str = "bfs",
          max_states: int = DEFAULT_MAX_STATES,
          progress: Callable[[int, int, float], None] | None = None, reduce: str = DEFAULT_REDUCE,
          progress_every: float = 3.0, store: str = "full", memory: int | None = None,
          engine: str | None = None, seed: int | None = None) -> CheckResult:
    """Compile ``model`` at ``config`` (defaults updated with it) and explore it (see :func:`explore`).

    This is the function to call from pytest::

        result = check(MyModel, {"capacity": 2})
        assert result.verdict == "ok" and result.exhaustive
    """
    if isinstance(model, Machine):
        if config:
            raise ModelError("config cannot be given with an already compiled machine")
        machine = model
        expected = None
    else:
        machine = model.compile(config)
        expected = model.expected if not config or _is_default(model, machine.config) else None
    result = explore(machine, strategy=strategy, max_states=max_states, progress=progress, reduce=reduce,
                     progress_every=progress_every, store=store, memory=memory, engine=engine, seed=seed)
    if expected is not None:
        result = replace(result, expected=expected)
    return result


class ShutdownBound(NamedTuple):
    """What the bounded-progress search established (:func:`check_shutdown_bound`)."""

    #: The ``shutdown_hang`` violation, or None: none found (a proof only when ``exhaustive``).
    violation: Violation | None
    #: True when the search visited every reachable state; False when the state cap cut it, and
    #: then nothing is known: a state past the cap may hide a late thread, and a state at the edge
    #: has no successors yet, so it would look like a thread that never returns.
    exhaustive: bool
    #: States the search stored.
    states: int


def check_shutdown_bound(machine: Machine, bound: int, max_states: int = DEFAULT_MAX_STATES) -> ShutdownBound:
    """Bounded progress: after shutdown is requested, every thread returns within ``bound`` own steps.

    Its ``violation`` is a ``shutdown_hang`` whose trace leads to the state where the worst case
    starts, or None when every thread is within the bound. It needs the whole graph (unreduced):
    a search the state cap cut short says ``exhaustive=False`` and reports no violation.
    """
    from .liveness import shutdown_progress_detail

    if bound < 0:
        raise ModelError(f"a progress bound is a number of steps, at least 0, not {bound}")
    e = Explorer(machine, reduce="none", max_states=max_states, stop_at_first=False)
    e.run()
    if not e.complete:
        return ShutdownBound(None, False, len(e.parents))
    for name, (worst, where) in shutdown_progress_detail(machine, e.parents).items():
        if worst is None or worst > bound:
            states, choices = e.path_to(where)
            how = "may never return" if worst is None else f"may take {worst} of its own steps to return"
            trace = e._trace(states, choices)
            return ShutdownBound(Violation("shutdown_hang", f"after shutdown was requested, {name} {how} "
                                           f"(bound {bound})", trace, where, on_step=False, step=len(trace)),
                                 True, len(e.parents))
    return ShutdownBound(None, True, len(e.parents))


def _is_default(model: type[Model], config: Mapping[str, Any]) -> bool:
    return dict(config) == model.configure({})

"""Typed transitions, built and loaded: the live runtime's transitions over C values.

What it guarantees
------------------
:func:`typed_transitions` takes a machine's generated transitions (:mod:`.._dsl.codegen`) and returns
the same :class:`~.._dsl.codegen.CompiledMachine` with every transition, guard and first-branch function
replaced by its typed twin (:mod:`.._dsl.typedgen`), compiled by Cython and a C compiler: the fields a
step reads become C values, the step runs on them, and the successor is boxed once. The Python kernel calls
them exactly as it calls the generated ones, so nothing else in the runtime changes: the state is still
the immutable tuple the record, the conformance check, the consumer's lock-free reads and the
interrupt-safety arrangements rely on.

*Why it is the model.* A typed function decides a state only where its C values are exact; on every other
path (an unexpected value, an index out of range, a 64-bit overflow, a violation, a successor that breaks an
invariant, any exception) it runs the generated Python function on the same state, and the typed code is
pure (the one thing it keeps, the last tuple of pairs with its C value, answers only for that very object:
``typedsupport.py``), so that is the same as running the Python function first. What remains to prove --
that the typed code decides the states it decides the way the model does -- is translation validation, run
in CI (``tests/test_typed_transitions.py``): every reachable state of the prefetcher's live shapes, a slice
of its sweeps and the catalog, compared with ``Machine.successors`` as the generated transitions are; and,
for the reference model, which violates nothing, the fallback counters stay at zero over all those states,
so the typed code decided every one of them itself.

*Why the kernel's interrupt safety is unchanged.* A typed transition is called where the generated one
was, and like it, it changes nothing before it returns. Compiled code has no eval-breaker point of its
own: a signal handler or a finalizer can run only where it calls back into Python (a fallback, an
allocation that triggers a collection), which is inside the call, before anything is stored -- the
same place an exception from the generated function comes from. So the kernel's lines around the call,
which the injection sweeps cover, see the same outcomes. (Under the C step those lines are C: there the
argument is :mod:`.ckernel`'s, and its sweep raises at every call back into Python.)

*The kernel's step in C.* The same module carries :mod:`.ckernel`'s Cython (``TypedTransitions.kernel``):
``Runtime(..., kernel=...)`` then runs its step's common path in C, calling these typed functions directly.
That step has no Python lines for the injection sweeps to stop at, so it has its own argument and sweep
(``ckernel.py``'s docstring, ``tests/test_ckernel.py``).

*Needs the GIL.* The module's cache of the last tuple of pairs (``typedsupport.py``) and the C step's reuse
of action contexts are atomic only under the GIL: on a free-threaded Python running with the GIL off,
:func:`typed_transitions` raises :class:`CompileUnavailable` (``runtime="generated"`` works there).

*Built once per shape.* The build goes through :mod:`.._check.extension` (the checker's compiled engine's
cache: ``SAFEPREFETCH_CACHE``, atomic, checksummed, stopped whole by a Ctrl-C) and takes Cython and a C
compiler (``pip install safeprefetch[speed]``); without them :class:`CompileUnavailable` says what is
missing. The first build of a shape takes seconds; a cached one loads in milliseconds.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .._check.extension import CompileUnavailable, build
from .._dsl.codegen import CompiledMachine, GeneratedStep
from .._dsl.model import DONE
from .._dsl.typedgen import TypedSource, typed_source
from . import ckernel
from .entries import GENERIC, ActionContext
from .entries import seconds as timeout_seconds
from .errors import LiveError
from .kernel import _EVERYTHING
from .stuck import detect

__all__ = ["CompileUnavailable", "TypedTransitions", "typed_transitions"]


@dataclass(frozen=True)
class TypedTransitions:
    """The typed build of one machine's generated transitions."""

    #: The generated transitions with the typed functions in place: what the runtime is given.
    compiled: CompiledMachine
    #: The loaded extension (its ``fallbacks()`` counts, per typed function, the states it left to Python).
    module: ModuleType
    #: The typed source, what it typed and what it left to Python (and why).
    source: TypedSource
    #: Seconds spent building (0 when it came from the cache).
    build_seconds: float
    #: The kernel's step in C (:mod:`.ckernel`), built into the same module: ``Runtime(..., kernel=...)``.
    kernel: Any = None

    def fallbacks(self) -> dict[str, int]:
        """Per typed function, how many calls it handed to the generated Python function."""
        return dict(zip(self.source.typed, self.module.fallbacks()))


def typed_transitions(cm: CompiledMachine) -> TypedTransitions:
    """``cm`` with its transitions typed and compiled (see the module doc). Raises :class:`CompileUnavailable`."""
    if not getattr(sys, "_is_gil_enabled", lambda: True)():
        # The typed module's cache of the last tuple of pairs and the C step's reuse of action contexts are
        # atomic only under the GIL.
        raise CompileUnavailable("runtime='typed' needs the GIL (this is a free-threaded Python with the GIL "
                                 "off): use runtime='generated'")
    src = typed_source(cm)
    # The kernel's step goes in the same module (one build); its names start with K_, which no bound name
    # or typed function may share.
    clash = sorted(n for n in (*src.bind, *src.typed) if n.startswith("K_"))
    try:
        got = build(src.source + ("" if clash else ckernel.SOURCE), "typed transitions")
    except CompileUnavailable as e:  # its message speaks of the checker's engine: say what asked for it
        raise CompileUnavailable(f"runtime='typed' needs Cython and a C compiler (pip install "
                                 f"'safeprefetch[speed]'), or use runtime='generated': {e}") from e
    if got is None:  # pragma: no cover - build=True never returns None
        raise CompileUnavailable("the typed transitions were not built")
    module, _path, seconds = got
    for name, value in src.bind.items():
        setattr(module, name, value)
    module.bind_tags()
    kernel = None
    if not clash:
        module.K_bind(GENERIC, DONE, _EVERYTHING, detect, LiveError, ActionContext, time.monotonic, timeout_seconds)
        kernel = module.K_Kernel

    def typed(fn: Any) -> Any:
        return getattr(module, fn.__name__, fn) if fn.__name__ in src.typed or fn.__name__[0] == "f" else fn

    steps = tuple({pc: dataclasses.replace(g, ones=tuple(typed(f) for f in g.ones),
                                           enabled=tuple(typed(f) for f in g.enabled), first=typed(g.first))
                   for pc, g in table.items()} for table in cm.steps)
    _check_in_place(cm, steps, src)
    return TypedTransitions(dataclasses.replace(cm, steps=steps), module, src, seconds, kernel)


def _check_in_place(cm: CompiledMachine, steps: tuple, src: TypedSource) -> None:
    """Every generated function has a typed twin or stays the generated one, under its own name."""
    for old, new in zip(cm.steps, steps):
        for pc, g in new.items():
            before: GeneratedStep = old[pc]
            for a, b in zip(before.ones + before.enabled + (before.first,), g.ones + g.enabled + (g.first,)):
                if a.__name__ != b.__name__:
                    raise CompileUnavailable(f"the typed module put {b.__name__} in place of {a.__name__}")

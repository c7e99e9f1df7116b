"""The reference prefetcher model, compiled for a live configuration, once per shape.

The live Prefetcher runs ``models/prefetcher.py`` itself: the machine here is
that model compiled with the real capacity, workers, stream length and mode,
and its transitions generated as straight-line code (``_dsl/codegen.py``,
validated against the machine state by state in tests/test_codegen.py),
which is what the runtime calls by default. ``runtime="plain"`` (or
``SAFEPREFETCH_RUNTIME=plain``) runs the machine's own step functions instead.

A shape is compiled once however many threads construct it at once
(:func:`_once_per_key`): ``functools.lru_cache`` lets every caller that
misses compute, and eight threads building one new shape each compiled it,
eight times the CPU under one GIL (2 s instead of 0.2).
"""

from __future__ import annotations

import copy
import functools
import os
import threading
from typing import Any, Callable

from .._dsl.codegen import CompiledMachine, compile_transitions
from ..models import _protocol as P

__all__ = ["RUNTIMES", "compile_reference", "default_runtime", "machine_for", "transitions_for", "typed_for"]

#: The ways to run the model live: its generated transitions (the default), its plain step functions, or the
#: generated transitions typed and compiled to C with the kernel's step (``typed``: needs Cython and a C compiler,
#: the speed extra).
RUNTIMES = ("generated", "plain", "typed")


def default_runtime() -> str:
    """``SAFEPREFETCH_RUNTIME`` (one of :data:`RUNTIMES`), read at each construction; ``generated`` if unset."""
    value = os.environ.get("SAFEPREFETCH_RUNTIME", "generated").strip().lower() or "generated"
    if value not in RUNTIMES:
        raise ValueError(f"SAFEPREFETCH_RUNTIME must be one of {', '.join(RUNTIMES)}, not {value!r}")
    return value


def compile_reference(capacity: int, workers: int, items: int, ordered: bool, sized: bool, target: int = 0, run: int = 1):
    """The reference prefetcher model compiled for one live configuration.

    ``error=on`` (any fetch may fail), ``close=on`` (the closer is driven by
    ``close()``), ``abandon=off`` (abandonment is a close from the finalizer),
    ``history=off`` (O(1) per step; see tests/test_prefetcher_model_modes.py).
    ``target > 0`` turns on ``autotune`` with that starting target: ``capacity``
    is then the physical pool, and the model's tuner thread (driven by the
    consumer's calls) resizes the target within it. ``run`` is the longest run
    of ready batches the consumer may take in one step.
    """
    from ..models.prefetcher import Prefetcher as Model

    config = {"capacity": capacity, "workers": workers, "items": items, "ordered": ordered,
              "error": True, "close": True, "abandon": False, "sized": sized, "history": False, "run": run}
    if target:
        config.update(autotune=True, target=target)
    return Model.compile(config, bounded=False)  # a live run: Prefetcher(workers=300) is allowed


#: Every per-key lock of every :func:`_once_per_key` function that a thread holds or is about to take.
_BUSY: dict[Any, Any] = {}


def _holds_another(lock: Any) -> bool:
    """Whether the calling thread holds a per-key lock other than ``lock`` (of any table; ``lock`` may be None)."""
    for other in list(_BUSY.values()):
        if other is not lock and other._is_owned():
            return True
    return False


def _once_per_key(cached: Callable[..., Any]) -> Callable[..., Any]:
    """``cached`` (an ``lru_cache`` function), called by one thread at a time per key: the others wait, then
    find the result in its cache."""
    # No lock around the table: ``setdefault`` and ``pop`` on a key of builtins are each one C call, atomic
    # under the GIL (and under a free-threaded build's per-dict lock). A lock there was a second lock a signal
    # handler (or a finalizer) building a prefetcher could take on a thread that already held it, or hold while
    # it waited for another thread's key: both deadlocked. The per-key locks are reentrant for the same reason.
    # And a thread that holds one key's lock never waits for another's: it computes unguarded instead (the
    # cache takes either result). ``transitions_for`` holds its key while it asks ``_template`` for the same
    # shape, and a handler on a thread inside ``_template`` may ask ``transitions_for``: taking both locks in
    # opposite orders deadlocked. With no thread waiting while it holds, no cycle of waits can form.

    @functools.wraps(cached)
    def call(*args: Any, **kw: Any) -> Any:
        key = (cached, args, tuple(sorted(kw.items())))
        lock = _BUSY.get(key)
        if (lock is None or not lock._is_owned()) and _holds_another(lock):
            return cached(*args, **kw)  # (nothing put in the table: nobody would take it out)
        lock = _BUSY.setdefault(key, threading.RLock())  # (re-entered by a signal handler: it computes)
        with lock:
            try:
                return cached(*args, **kw)
            finally:
                _BUSY.pop(key, None)

    call.cache_clear, call.cache_info = cached.cache_clear, cached.cache_info  # type: ignore[attr-defined]
    return call


def _after_fork_in_child() -> None:  # a thread the child has not may have held one
    _BUSY.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@_once_per_key
@functools.lru_cache(maxsize=256)
def _template(capacity: int, workers: int, ordered: bool, sized: bool, target: int, run: int):
    return compile_reference(capacity, workers, 1, ordered, sized, target, run)


@functools.lru_cache(maxsize=1024)
def machine_for(capacity: int, workers: int, items: int, ordered: bool, sized: bool, target: int = 0, run: int = 1):
    """``compile_reference(...)``, without compiling again for every stream length.

    Compiling specializes every step function (tens of milliseconds), and the
    stream length enters the reference model only as the initial value of its
    ``length`` variable: no step, guard or check reads the ``items`` parameter.
    So the machine for ``items=n`` is the one compiled for the same shape with
    that initial value set to ``n``; tests/test_live_perf.py compares the
    two. A compiled machine is immutable, so prefetchers with one config share it.
    """
    base = _template(capacity, workers, ordered, sized, target, run)
    i = base.shared_index[P.LENGTH]
    m = copy.copy(base)  # shares the compiled tables and the specialized invariants
    m.init = base.init[:i] + (items,) + base.init[i + 1:]
    m.config = {**base.config, "items": items}
    return m


@_once_per_key
@functools.lru_cache(maxsize=256)
def transitions_for(capacity: int, workers: int, ordered: bool, sized: bool, target: int = 0,
                    run: int = 1) -> CompiledMachine:
    """The generated transitions of the machine of this shape, once per shape (any stream length).

    Generated from the same template ``machine_for`` derives every length from;
    the stream length is state (``length``), which the transitions read from it.
    """
    from ..models.prefetcher import Prefetcher as Model

    return compile_transitions(_template(capacity, workers, ordered, sized, target, run), Model)


@_once_per_key
@functools.lru_cache(maxsize=64)
def typed_for(capacity: int, workers: int, ordered: bool, sized: bool, target: int = 0, run: int = 1):
    """``transitions_for``'s transitions typed and compiled to C (``_runtime/typed.py``), once per shape.

    The first call of a shape builds it (seconds; then cached on disk); raises ``CompileUnavailable``
    without Cython or a C compiler.
    """
    from .._runtime.typed import typed_transitions

    return typed_transitions(transitions_for(capacity, workers, ordered, sized, target, run))

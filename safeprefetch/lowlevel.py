"""The supported lower layers: search strategies, distributed search, the live runtime, conformance, injection.

Everything here is public and stays importable from this module; the
private modules behind it may move. (trio keeps its own such surface in
``trio.lowlevel``.)

* **Search beyond BFS:** :func:`search` samples schedules (random, PCT,
  preemption-bounded, Hypothesis) for configurations too big to exhaust,
  returning a :class:`StrategyResult`; :func:`explore_cluster` explores
  exhaustively on a dask cluster, the frontier partitioned by state hash
  across actors, with the single-process result; :func:`swarm_search` runs
  K independent sampling searches there (a :class:`SwarmResult`)
  (docs/strategies.md, docs/parallel.md; the ``distributed`` extra).
* **The runtime:** :class:`Runtime` runs any compiled model on real threads
  (one kernel lock, parking, exact wakeups, external steps outside the lock);
  :func:`run_live` runs every thread of a model live; :func:`verify_record`
  checks a recorded live run against the model, step by step. A model
  thread is driven by one OS thread at a time: an external step's action
  runs on that thread, outside the lock, and must not take steps itself
  (its own thread's recurses; another's makes two drivers of one thread).
  A thread nobody spawned leaves its ``step`` with :class:`NeverStarted`
  once every other thread is done. When no thread can ever move again the
  parked ones raise :class:`LiveDeadlock`: classified as the checker would,
  or ``blocked_branch`` when the model could move but the thread that could
  waits for a branch it cannot take (a caller's ``branch=``, an action's
  outcome); a thread waiting with a ``timeout`` while its step has another
  branch enabled is not counted stuck, and one left with nothing but
  spurious wakeups is (but while a trace forces the order). A branch name the
  step does not have, an action name no external step runs, or a thread
  index that is not the model's is a ``ValueError``. Ctrl-C in an action is
  raised in it (an action marked ``protected`` defers it, as the
  Prefetcher's own do).
* **Interrupt injection:** :func:`record_points` lists every point where
  CPython can raise an asynchronous exception in your own code (function
  entry, the return of a call into C, a loop's back-edge), and
  :func:`run_with_injection` performs an effect at one of them -- a
  ``KeyboardInterrupt`` (:func:`raise_keyboard_interrupt`), the installed
  SIGINT handler (:func:`deliver_sigint`), or any callable -- so that a
  threading component can be checked against Ctrl-C, signal handlers and
  finalizers at every such point (docs/hardening.md does it to the
  Prefetcher). A process started in the background by a shell without job
  control has SIGINT ignored and no handler to deliver:
  :func:`deliver_sigint` then raises :class:`SigintUnavailable`, and
  :func:`python_sigint` installs Python's default handler for a block.
* **Back-edges that escape their handler:** a Ctrl-C that lands on a loop's
  back-edge is looked up in the exception table at a place that depends on
  the CPython version (3.11/3.12: before the jump's target; 3.13: the jump,
  which its compiler sometimes leaves out of the table), so it can skip a
  ``finally`` or a ``with``'s exit, or be caught by an ``except`` it is
  outside of. A trace-hook injector cannot show it on 3.11 and 3.12.
  :func:`escaping_back_edges` reads it from the bytecode of a function,
  method, code object or module on the running interpreter and returns
  :class:`EscapingBackEdge` records (docs/hardening.md).
"""

from __future__ import annotations

from ._check.cluster import ClusterError as ClusterError
from ._check.distributed import explore_cluster as explore_cluster
from ._check.strategies import STRATEGIES as STRATEGIES
from ._check.strategies import StrategyResult as StrategyResult
from ._check.strategies import pct_probability as pct_probability
from ._check.strategies import search as search
from ._check.swarm import SwarmResult as SwarmResult
from ._check.swarm import SwarmRun as SwarmRun
from ._check.swarm import swarm_search as swarm_search
from ._runtime.backedges import EscapingBackEdge as EscapingBackEdge
from ._runtime.backedges import escaping_back_edges as escaping_back_edges
from ._runtime.conformance import ConformanceReport as ConformanceReport
from ._runtime.conformance import LiveRunResult as LiveRunResult
from ._runtime.conformance import run_live as run_live
from ._runtime.conformance import verify_record as verify_record
from ._runtime.inject import InjectionOutcome as InjectionOutcome
from ._runtime.inject import InjectionPoint as InjectionPoint
from ._runtime.inject import deliver_sigint as deliver_sigint
from ._runtime.inject import SigintUnavailable as SigintUnavailable
from ._runtime.inject import package_files as package_files
from ._runtime.inject import python_sigint as python_sigint
from ._runtime.inject import raise_keyboard_interrupt as raise_keyboard_interrupt
from ._runtime.inject import record_points as record_points
from ._runtime.inject import run_with_injection as run_with_injection
from ._runtime.entries import ActionContext as ActionContext
from ._runtime.errors import LiveDeadlock as LiveDeadlock
from ._runtime.errors import LiveError as LiveError
from ._runtime.errors import LiveViolation as LiveViolation
from ._runtime.errors import NeverStarted as NeverStarted
from ._runtime.errors import StepTimeout as StepTimeout
from ._runtime.kernel import Runtime as Runtime

__all__ = [
    "STRATEGIES",
    "ActionContext",
    "ClusterError",
    "ConformanceReport",
    "EscapingBackEdge",
    "InjectionOutcome",
    "InjectionPoint",
    "LiveDeadlock",
    "LiveError",
    "LiveRunResult",
    "LiveViolation",
    "NeverStarted",
    "Runtime",
    "SigintUnavailable",
    "StepTimeout",
    "StrategyResult",
    "SwarmResult",
    "SwarmRun",
    "deliver_sigint",
    "escaping_back_edges",
    "explore_cluster",
    "package_files",
    "pct_probability",
    "python_sigint",
    "raise_keyboard_interrupt",
    "record_points",
    "run_live",
    "run_with_injection",
    "search",
    "swarm_search",
    "verify_record",
]

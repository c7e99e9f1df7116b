"""The on-demand core: the predictive model, run live over a numpy slot pool. It never references its owner.

Theory of operation
-------------------
As with the streaming Prefetcher, there is one implementation of the
protocol: ``models/predictive_prefetcher.py``, compiled for this capacity
and worker count and run by the live runtime (``_runtime/kernel.py``). The
checker proves it: no item fetched into two live slots, the caller always
served the index it asked for, a demand miss never waiting behind
speculation, close and errors as in the streaming model. This package adds
what the model leaves out:

* **Tags.** The model speaks of tags ``0..capacity`` (see
  ``models/_predictive_protocol.py``); ``index_of[tag]`` and ``tag_of[index]``
  map them to the caller's indices. Only the caller's thread (under the
  gate) assigns a tag, and only one no slot holds: nothing else can make a
  slot hold a tag, so a tag that is free in a snapshot stays free until the
  caller uses it, and a worker that reads ``index_of`` for the slot it
  fills reads a mapping that cannot change under it.
* **The slot pool.** A worker writes ``pool[k]`` only while the state says
  slot ``k`` is FILLING (or CANCELLED) by it; the caller writes ``pool[k]``
  during its own demand fetch (DEMAND) and reads it while LEASED, as the
  model's checked invariants allow.
* **Workers** start queued speculative claims and fetch outside the kernel
  lock; the caller's demand fetch runs on the caller's thread, at once.
* **Errors** are values: a failed fetch publishes its slot FAILED, and the
  exception waits in ``box.errors[slot]`` until a request for that index
  takes it; the caller raises the *same* object.

Close, finalizers, fork and exit reuse the streaming Prefetcher's machinery
unchanged (``closing.py``, ``lifecycle.py``): the model's closing half is the
streaming one, with the same names. The consumer side, with its stash and
interrupt handling, is in ``ondemand_serve.py``; the policy that turns
predictions into speculation steps in ``ondemand_policy.py``.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from typing import Any

import numpy as np

from .._dsl.model import DONE
from .._runtime.interrupts import deliver, guard, interruptible, protected
from .._runtime.kernel import LiveError
from ..models import _predictive_protocol as Q
from . import core as _streaming_core
from .closing import CloseSide
from .fetching import FetchSide
from .ondemand_serve import ServeSide
from .ondemand_stats import OnDemandCounters, OnDemandStats
from .predictors import Predictor, label
from .errors import from_source
from .filling import fill_into
from .sources import SourceBox, new_token, owned_copy, stop_iteration_error
from .waits import NOT_TAKEN, SOURCE_BUSY, SourceBusy, first_driver, left, new_gate, start_threads, wait_gate

__all__ = ["OnDemandCore", "compile_predictive"]


@functools.lru_cache(maxsize=128)
def compile_predictive(capacity: int, workers: int) -> Any:
    """The predictive model compiled for one live configuration (immutable, so shared).

    ``close=on`` (the closer is driven by ``close()``), ``leave=off`` (a
    caller leaves by closing), ``error=on`` (any fetch may fail),
    ``keys = capacity + 1`` tags, and ``request_check=off`` (the O(tags)
    per step check; proved by the checker, see the model's docstring).
    """
    from ..models.predictive_prefetcher import PredictivePrefetcher

    return PredictivePrefetcher.compile({"capacity": capacity, "workers": workers, "close": True, "leave": False,
                                         "error": True, "request_check": False}, bounded=False)


@interruptible
def call_source(fill: Any, box: SourceBox, index: int, k: int, deadline: float | None) -> str:
    """The caller's own fetch: Ctrl-C inside the source raises here (and is that request's error).

    A Ctrl-C deferred earlier in the call is delivered here first, as at any interruptible point:
    held until the source returned, it would wait for the whole fetch.
    """
    if guard.deferred:
        deliver()
    return fill(box, index, k, deadline)


class OnDemandCore(ServeSide, CloseSide):
    """What the caller's thread, the workers and close share."""

    # The item checks of the streaming workers, reused as they are (they read shape, dtype, pool, plan).
    _check = FetchSide._check
    _where = FetchSide._where

    def __init__(self, *, pool: np.ndarray, workers: int, box: SourceBox, predictor: Predictor, length: int,
                 close_timeout: float | None, timeout: float | None, name: str, depth: int):
        capacity = pool.shape[0]
        self.machine = m = compile_predictive(capacity, workers)
        self.rt = _streaming_core.runtime_factory[0](
            m, {Q.ACTION_FETCH: self._spec_fetch, Q.ACTION_DEMAND: self._demand_fetch}, check_invariants=True)
        self._index_machine(m, workers)
        self.pool, self.shape, self.dtype, self.plan = pool, pool.shape[1:], pool.dtype, None
        self.slot_views = [pool[k, ...] for k in range(capacity)]
        self.own_copy = owned_copy(pool.dtype)  # (np.array, unless the dtype has holes: sources.owned_copy)
        self.batch_bytes = int(pool[0, ...].nbytes) if capacity else 0  # (pool[0] of a 0-d object pool: its object)
        self.length = length
        self.source_ref = weakref.ref(box)
        self.close_timeout, self.timeout, self.name = close_timeout, timeout, name
        box.predictor, self.depth = predictor, depth  # in the box: see ``predictor``
        # -- tags (changed only by the gate's owner)
        self.keys = len(self.branches_request)
        self.index_of = [-1] * self.keys        # tag -> index
        self.tag_of: dict[int, int] = {}        # index -> tag (for tags mapped now)
        self.holdings_cache: tuple = ((), {})   # (slots, tag -> state): see ondemand_policy.holdings
        # -- the consumer's side (changed only by the gate's owner)
        self.gate = new_gate()
        self.stash: tuple | None = None         # an interrupted call's outcome: (kind, value, index, data)
        self.returned: list[tuple] = []         # outcomes put back without the gate (unreturn), not yet in the stash
        self.last_seen = threading.local()      # the shared hand-out stores each thread's last index here
        self.drop_demand = False                # the next demand fetch is an interrupted call's: drop it
        self.demand_deadline: float | None = None  # the request's, for a thread_safe=False source's lock
        self.busy: BaseException | None = None  # the last SourceBusy a demand fetch stored (not a source error)
        self.counts = OnDemandCounters(workers)
        # -- closing (the streaming CloseSide's fields)
        self.close_lock = new_gate()
        self.waiters_lock = threading.Lock()
        self.waiters: set[threading.Event] = set()
        self.close_started = self.closed = self.forked = self.sigint = False
        self.stuck: list[str] = []
        self.wait_uncounted = False  # a late hit's wait was cut short and uncounted (ondemand_serve)
        #: What this call's request counted (counter names), taken back when it is answered by no batch and no
        #: error of the source's (closed, or SourceBusy); None once taken back: no request to count.
        self.counted: tuple[str, ...] | None = ()
        self.remote_running: list[tuple[threading.Event, str]] = []  # fetches left running on the executor
        self.remote_stuck: list[str] = []  # those still running when the close returned
        self.threads: list[threading.Thread] = []
        self.worker_idents: set[int] = set()
        self.token = new_token()  # no executor here: a token marks no thread, but the streaming checks read it
        self.unstarted: list[tuple] = []
        self.drivers: dict[int, int] = {}

    def _index_machine(self, m: Any, workers: int) -> None:
        """Threads, fields and branch names, by the protocol's names (a rename fails here)."""
        names = m.thread_names
        self.worker_ids = [names.index(Q.worker(w)) for w in range(workers)]
        self.consumer, self.closer = names.index(Q.CONSUMER), names.index(Q.CLOSER)
        si = m.shared_index
        self.i_slots, self.i_queue, self.i_closing = si[Q.SLOTS], si[Q.QUEUE], si[Q.CLOSING]
        self.i_want, self.i_lease, self.i_error_slot = si[Q.WANT], si[Q.LEASE], si[Q.ERROR_SLOT]
        self.i_consumer_pc, self.i_closer_pc = m.pc_index[self.consumer], m.pc_index[self.closer]
        self.worker_fields = {t: (w, m.local_index[t][Q.SLOT]) for w, t in enumerate(self.worker_ids)}
        self.worker_pcs = [m.pc_index[t] for t in self.worker_ids]
        capacity = len(m.init[self.i_slots])
        keys = capacity + 1
        b = Q.branch
        # Per tag, every outcome a request for it can have (exactly one is enabled: checked), and
        # per tag or slot each speculation step with the steps that replace it if a worker moved
        # the slot on since the caller looked; CLOSED ends each, so no step the caller takes
        # parks except the wait for an in-flight fetch (SERVE).
        self.branches_request = [tuple(b(kind, t) for kind in (Q.HIT, Q.ERROR, Q.JOIN_FETCH, Q.REVIVE, Q.PROMOTE,
                                                               Q.MISS)) + (Q.CLOSED,) for t in range(keys)]
        self.branches_speculate = [(b(Q.SPECULATE, t), Q.CLOSED) for t in range(keys)]
        self.branches_uncancel = [(b(Q.UNCANCEL, t), b(Q.SPECULATE, t), Q.CLOSED) for t in range(keys)]
        self.branches_drop = [(b(Q.CANCEL, k), b(Q.EVICT, k), Q.CLOSED) for k in range(capacity)]
        self.branches_serve = (Q.HIT, Q.ERROR, Q.CLOSED)

    @property
    def predictor(self) -> Predictor:
        """The predictor, kept in the source box, which the core sees weakly: a custom predictor that refers
        back to its prefetcher (``self.pf = pf``) would otherwise keep it alive through the workers, which hold
        this core, and it would never be collected or closed. Read only inside a call of the owner (which keeps
        the box alive) or through it."""
        return self.source_ref().predictor

    # -- workers --------------------------------------------------------------

    def plan_workers(self) -> list:
        """As the streaming core's ``plan_workers``: the workers, recorded as unstarted before any starts."""
        workers = [(f"safeprefetch-{self.name}-worker{w}", _worker_main, (self, t))
                   for w, t in enumerate(self.worker_ids)]
        self.unstarted = [(target, args) for _name, target, args in workers]
        return workers

    def start(self) -> None:
        start_threads(self, self.plan_workers())

    def _closing(self) -> bool:
        return self.rt.state[self.i_closing]  # racy but sound: closing only goes from False to True

    @protected  # called directly by the kernel (entries.bind_actions)
    def _spec_fetch(self, ctx: Any) -> str:
        """The model's "fetch into slot": a worker fills its slot with the index its tag stands for."""
        w, i_slot = self.worker_fields[ctx.thread]
        k = ctx.state[i_slot]
        if self._closing():
            return Q.FETCH_OK  # discarded by the model when it lands
        box = self.source_ref()
        if box is None:
            return Q.FETCH_OK  # the owner was collected: its finalizer has asked for the close
        index = self.index_of[ctx.state[self.i_slots][k][1]]
        # Counted as it starts, so that a fetch in flight is both a fetch and pending in stats().
        self.counts.spec_fetches[w] += 1
        t0 = time.perf_counter()
        try:
            return self._fill(box, index, k)
        except BaseException as e:  # noqa: BLE001 - every error is delivered to the request for its index
            box.errors[k] = self._as_error(index, e)
            return Q.FETCH_ERROR
        finally:
            self.counts.spec_seconds[w] += time.perf_counter() - t0

    @protected  # called directly by the kernel (entries.bind_actions)
    def _demand_fetch(self, ctx: Any) -> str:
        """The model's "demand fetch", on the caller's thread: the asked-for index, into the caller's slot."""
        if self.drop_demand:
            return Q.FETCH_DROP
        k, index = ctx.state[self.i_lease], self.index_of[ctx.state[self.i_want]]
        box = self.source_ref()
        t0 = time.perf_counter()
        try:
            return call_source(self._fill, box, index, k, self.demand_deadline)
        except SourceBusy as e:  # the request's timeout, waiting for another thread's call: not a source error
            self.busy = box.errors[k] = e
            t0 = None  # nothing was fetched: neither counted nor timed as a fetch (the finally below)
            return Q.FETCH_ERROR
        except BaseException as e:  # noqa: BLE001 - raised by the request, as the same object
            box.errors[k] = self._as_error(index, e)
            return Q.FETCH_ERROR
        finally:
            if t0 is not None:
                self.counts.demand_fetches += 1
                self.counts.demand_seconds += time.perf_counter() - t0

    def _as_error(self, index: int, e: BaseException) -> BaseException:
        if isinstance(e, StopIteration):  # an indexed source has no end: PEP 479's rule, as in streaming
            return stop_iteration_error(self._where(index), e)
        return from_source(self._where(index), e)

    def _fill(self, box: SourceBox, index: int, k: int, deadline: float | None = None) -> str:
        """Fill slot ``k`` with ``index``; ``deadline`` bounds the wait for a ``thread_safe=False`` source's lock
        (a miss's, behind a worker's speculative call; SourceBusy when it passes). A fetch closed while it
        waited for that lock, speculative or a miss's, does not call the source: close() has returned, or
        given up on it, and a miss waiting with no deadline waited as long as the other call took."""
        if box.lock is not None:
            with (box.lock if wait_gate(box.lock, deadline, deliver_deferred=False, stop=self._closing)
                  else NOT_TAKEN if self._closing() else SOURCE_BUSY):
                if self._closing():
                    return Q.FETCH_OK  # discarded by the model when it lands: closing frees the slot, either fetch's
                return self._fill_unlocked(box, index, k)
        return self._fill_unlocked(box, index, k)

    def _fill_unlocked(self, box: SourceBox, index: int, k: int) -> str:
        if box.fetch_into is not None:
            problem = fill_into(box.fetch_into, index, self.slot_views[k])
            if problem is not None:
                raise TypeError(f"{self._where(index)}: {problem}")
            return Q.FETCH_OK
        item = box.getitem(index)
        self._check(index, item)
        np.copyto(self.slot_views[k], item, casting="no")
        return Q.FETCH_OK

    # -- inspection -----------------------------------------------------------

    def stats(self) -> OnDemandStats:
        # Pending: speculative fetches still usable (ready, failed, in flight), less the one a
        # waiting request has already counted as used.
        state = self.rt.state
        # (Not when its wait was cut short: uncounted as used then, it is pending again.)
        waited = state[self.i_want] if state[self.i_consumer_pc] == Q.SERVE and not self.wait_uncounted else -1
        pending = 0
        for st, tag in state[self.i_slots]:
            if st == Q.READY or st == Q.FAILED or (st == Q.FILLING and tag != waited):
                pending += 1
        return self.counts.snapshot(label(self.predictor), pending, self.closed, self.batch_bytes,
                                    len(self.slot_views))

    def slot_states(self) -> list[tuple[str, int | None]]:
        """Each slot's state name and the index it holds (a racy snapshot, for inspection and tests)."""
        out: list[tuple[str, int | None]] = []
        for st, tag in self.rt.state[self.i_slots]:
            out.append((repr(st), None if st == Q.EMPTY else self.index_of[tag]))
        return out


def _worker_main(core: OnDemandCore, t: int) -> None:
    """A worker thread: drive model thread ``t`` to completion. Holds the core, never its owner."""
    if not first_driver(core, t):
        return  # close() is driving it out already (this thread's start had raised: waits.start_threads)
    rt = core.rt
    try:
        while True:  # not ``while cond:``, whose back-edge 3.13 leaves out of the try (backedges.py)
            if rt.pc(t) == DONE:
                break
            # "fetch into slot" and the next "start queued fetch" share one critical section,
            # parking there until a claim is queued (or close).
            rt.step(t, chain=True)
    except LiveError:
        pass  # the runtime has failed: the caller and the closer raise it
    except BaseException as e:  # noqa: BLE001 - a bug here must not hang the caller
        rt.fail(LiveError("error", f"{threading.current_thread().name} crashed: {type(e).__name__}: {e}"))
    finally:
        left(core)

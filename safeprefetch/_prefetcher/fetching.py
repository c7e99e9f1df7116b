"""The workers: each drives one model worker thread, and fetches into the slot the model gave it.

A worker writes ``pool[k]`` only between its "claim index and slot" step
(which made slot ``k`` FILLING by this worker) and its "fetch into slot"
step (the model's external step: the source runs here, outside the kernel
lock). The kernel lock orders those steps against the consumer's, so no
slot is written while it is read. Every error from the source, a
``BaseException`` included, is published at its position as the fetch's
"error" outcome; the consumer re-raises the same object. Workers hold the
core, never the Prefetcher, and reach the source through a weak reference.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

import numpy as np

from .._dsl.model import DONE
from .._runtime.interrupts import protected
from .._runtime.kernel import LiveError
from ..models import _protocol as P
from .errors import from_source
from .filling import fill_into
from .sources import (FILLED, LocalSlot, SourceBox, batch_problem, check_future, remote_item,
                      stop_iteration_error)
from .waits import NOT_TAKEN, first_driver, left, start_threads, wait_gate

__all__ = ["FetchSide", "worker_main"]

#: What a remote fetch cut short by close returns.
CLOSING = object()


class FetchSide:
    """The worker half of the core (a mixin of ``_Core``)."""

    def plan_workers(self) -> list:
        """The worker threads to start, each ``(name, target, args)``; recorded as unstarted at once, so a
        constructor interrupted before ``start`` leaves a core whose close drives them out itself."""
        workers = [(f"safeprefetch-{self.name}-worker{w}", worker_main, (self, w, t))
                   for w, t in enumerate(self.worker_ids)]
        self.unstarted = [(target, args) for _name, target, args in workers]
        return workers

    def start(self) -> None:
        start_threads(self, self.plan_workers())

    def _closing(self) -> bool:
        # A racy read is sound: ``closing`` only ever goes from False to True.
        return self.rt.state[self.i_closing]

    @protected  # a critical section of its own: the kernel calls it directly (entries.bind_actions)
    def _fetch(self, ctx) -> str:
        """The model's external step "fetch into slot": fill the worker's ``slot`` with item ``idx``."""
        w, i_idx, i_slot = self.worker_fields[ctx.thread]
        state = ctx.state  # the snapshot taken when the step began: its idx and slot are this fetch's
        pos, k = state[i_idx], state[i_slot]
        if self.rt._state[self.i_closing]:  # (``_closing()``, without its call: every fetch asks)
            return "ok"  # the model discards a fetch that lands after close
        box = self.source_ref()
        if box is None:
            return "ok"  # the Prefetcher was collected: its finalizer has asked for the close
        t0 = time.perf_counter()
        try:
            if box.lock is None:
                return self._fill(box, pos, k)
            with (box.lock if wait_gate(box.lock, None, deliver_deferred=False, stop=self._closing) else NOT_TAKEN):
                t = time.perf_counter()  # waiting for another worker's call is not fetch time, nor blocked time
                self.counts.lock_seconds[w] += t - t0; t0 = t  # noqa: E702
                if self._closing():
                    return "ok"  # closed while waiting for the lock: no call into the source after close()
                return self._fill(box, pos, k)
        except BaseException as e:  # noqa: BLE001 - every error is delivered at its position
            return self.fetch_failed(box, pos, e)
        finally:
            t1 = time.perf_counter()
            self.counts.fetch_seconds[w] += t1 - t0
            if self.spans is not None:
                self.spans.append((f"worker{w}", "fetch", t0, t1))

    def fetch_failed(self, box: SourceBox, pos: int, e: BaseException) -> str:
        """The fetch of position ``pos`` raised ``e``: publish it there (the consumer raises it) and say so."""
        if isinstance(e, StopIteration):
            if box.iterator is not None:  # an iterator's own end is handled in _fill; this is not it
                box.errors[pos] = e
            else:
                box.errors[pos] = stop_iteration_error(self._where(pos), e)
        else:
            box.errors[pos] = from_source(self._where(pos), e)
        return "error"

    def _fill(self, box: SourceBox, pos: int, k: int) -> str:
        pre = box.preloaded.pop(pos, None) if box.preloaded else None
        if pre is not None:
            kind, value = pre
            if kind == "error":
                box.errors[pos] = value  # the very object the constructor's read raised
                return "error"
            item = value
        elif box.iterator is not None:
            try:
                item = next(box.iterator)
            except StopIteration:
                return "end"
        else:
            index = self.plan.item(pos)  # (a Python int, as int(plan[pos]), without the numpy scalar between)
            if box.executor is not None:
                item = self._remote(box, index, k)
                if item is CLOSING or item is FILLED:
                    return "ok"
            elif box.fetch_into is not None:
                problem = fill_into(box.fetch_into, index, self.slot_views[k])
                if problem is not None:
                    raise TypeError(f"{self._where(pos)}: {problem}")
                return "ok"
            else:
                item = box.getitem(index)
        self._check(pos, item)
        np.copyto(self.slot_views[k], item, casting="no")
        return "ok"

    def _where(self, pos: int) -> str:
        if self.plan is None:
            return f"item {pos}"
        index = int(self.plan[pos])
        return f"item {pos}" if index == pos else f"item {pos} (source index {index})"

    def _check(self, pos: int, item: Any) -> None:
        if type(item) is np.ndarray and item.shape == self.shape and item.dtype == self.dtype and self.pool is not None:
            return  # the hot path: a plain batch of the pool's shape and dtype
        bad = batch_problem(item, self.shape if self.pool is not None else None, self.dtype)
        if bad is not None:
            raise bad[0](f"{self._where(pos)}: {bad[1]}")

    def _remote(self, box: SourceBox, index: int, k: int) -> Any:
        fut = box.executor.submit(remote_item, box.source, index, self.shape, self.dtype, self.token,
                                  LocalSlot(self.slot_views[k]))
        check_future(box.executor, fut)
        done = threading.Event()      # set by the future's callback, or by close() to cut the wait short
        finished = threading.Event()  # set by the future's callback only
        fut.add_done_callback(functools.partial(_on_done, finished, done))
        with self.waiters_lock:
            self.waiters.add(done)
        try:
            if not self._closing():  # checked after registering: close() sets every registered event
                done.wait()
        finally:
            with self.waiters_lock:
                self.waiters.discard(done)
        if not fut.done() and self._closing():  # woken by close(), not by the future
            # Running on the executor (cancel() said False): close() waits for it, within its bound, or says so.
            # A future that cannot say (dask's cancel() returns None) is not waited for: docs/hardening.md.
            if fut.cancel() is False:
                with self.waiters_lock:
                    self.remote_running.append((finished, f"source index {index}"))
            return CLOSING
        # Woken by the future's callback. A future whose done() still says False there (a hand-written one
        # whose callbacks run before it says so) was taken for a close: the slot kept what it held, delivered
        # as the batch. Its result() is the batch.
        return fut.result()


def _on_done(finished: threading.Event, done: threading.Event, fut: Any) -> None:
    """A remote fetch's done callback: ``finished`` unless it was cancelled (it never ran; dask calls back on
    cancel with its task running on; a hand-written future without ``cancelled`` ran), and ``done`` always,
    whatever the future's ``cancelled`` does: the worker waits for ``done``."""
    try:
        cancelled = getattr(fut, "cancelled", None)
        if not (callable(cancelled) and cancelled()):
            finished.set()
    finally:
        done.set()


def worker_main(core: Any, w: int, t: int) -> None:
    """A worker thread: drive model thread ``t`` to completion. Holds the core, never the Prefetcher."""
    if not first_driver(core, t):
        return  # close() is driving it out already (this thread's start had raised: waits.start_threads)
    rt = core.rt
    blocked = core.counts.blocked_seconds
    step, i_pc = rt.step, core.worker_pcs[w]  # (the worker's pc read from the state: ``rt.pc(t)`` less its call)
    clock = time.perf_counter
    fetched, locked = core.counts.fetch_seconds, core.counts.lock_seconds
    timeline = core.spans is not None
    try:
        while True:
            at = rt._state[i_pc]
            if at == DONE:
                break
            if at == P.CLAIM:  # blocks while no slot is free: timed
                t0 = clock()
                step(t)
                t1 = clock()
                blocked[w] += t1 - t0
                if timeline:
                    core.spans.append((f"worker{w}", "wait", t0, t1))
            elif timeline:
                # Recording a timeline: the fetch and the next claim as two steps, so the
                # buffer occupancy can be sampled between them and the wait drawn apart.
                step(t)
                core.occupancy_log.append((clock(), core.ready_now()))
            else:
                # "fetch into slot": the source runs outside the kernel lock; then, in the same
                # critical section, the next claim, parking there until a slot is free.
                t0, f0, l0 = clock(), fetched[w], locked[w]
                step(t, chain=True)
                blocked[w] += clock() - t0 - (fetched[w] - f0) - (locked[w] - l0)
    except LiveError:
        pass  # the runtime has failed: the consumer and the closer raise it
    except BaseException as e:  # noqa: BLE001 - a bug here must not hang the consumer
        rt.fail(LiveError("error", f"{threading.current_thread().name} crashed: {type(e).__name__}: {e}"))
    finally:
        left(core)

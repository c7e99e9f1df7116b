"""The caller's side of the on-demand prefetcher: one request at a time, and an interrupted call loses nothing.

A call ``get(i)`` takes the *gate* (the streaming consumer's, an RLock) and
drives the model's consumer thread until it has served index ``i``:

1. **Settle** what an earlier, interrupted call left behind: a lease still
   held (released, unless it holds ``i``), a demand fetch not yet run (run
   if it is ``i``'s, else dropped without calling the source), a wait for an
   in-flight fetch (continued if it is ``i``'s, else withdrawn).
2. **Predict**: tell the predictor about ``i`` and turn its predictions into
   speculation steps (``ondemand_policy.py``).
3. **Request** ``i``'s tag: the model picks hit, error, join, revive,
   promote or miss, exactly one of which is enabled (a checked invariant),
   so the request never parks; only the wait for an in-flight fetch does.
4. **Hand out**: copy the batch out of the slot into the stash, then release
   the slot. The call takes the outcome out of the stash on the line that
   returns it.

What an interrupt can lose: nothing the caller is owed. A request has no
position in a stream, so an outcome produced for an interrupted call stays
in the stash and is returned by the next call for the same index (any API:
``copy_into`` after an interrupted ``get`` gets that batch copied into its
``out``), and is dropped by a call for another index; the model consumer is
found wherever the interrupt left it and settled as in step 1. No slot, lock
or wakeup is leaked. The caller's own demand fetch runs the source inside an
interruptible frame: Ctrl-C there becomes that request's error (the call
raises KeyboardInterrupt) and leaves the slot free. The predictor, the
caller's code too, is asked in an interruptible frame as well
(``ondemand_policy.ask``), before the request's first step: Ctrl-C there
raises at once, and the request was not made.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from .._dsl.model import DONE
from .._runtime.interrupts import protected
from .._runtime.kernel import StepTimeout
from ..models import _predictive_protocol as Q
from .consumer import COPY, GET, ConsumerSide
from .errors import PrefetcherClosed, PrefetcherForked, PrefetchTimeout
from .ondemand_policy import holdings, speculate
from .waits import NO_GATE, wait_gate

__all__ = ["CLOSED", "ERROR", "Raised", "ServeSide"]

# A stash entry is (kind, value, index, data): kind GET (value: a new array) or COPY (value: True,
# data: the caller's ``out``), or a terminal outcome ERROR (value: a ``Raised`` holding the source's exception)
# or CLOSED (value: the exception).
ERROR, CLOSED = "error", "closed"


class Raised:
    """The source's exception in an ERROR outcome, which the call raising it takes out (``error = None``).

    A miss runs the source on the caller's thread, below the frames serving the request: the error's
    traceback keeps those frames, and each frame its caller's, up to the caller's own. Their locals hold the
    outcome; holding the exception itself, they made a cycle that kept the caller's frame and locals (and
    the prefetcher) alive past its call, until a cyclic collection. They hold this emptied box instead.
    """

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error: BaseException | None = error


def _kept(entry: tuple, copy: Any) -> tuple:
    """``entry``, kept for a later call, with its batch in memory the prefetcher owns: a ``copy_into``
    outcome's batch is in the caller's ``out`` only, which the caller may write before it asks again.
    ``copy``: the core's ``own_copy`` (a padded dtype's holes as ``out`` holds them, not as an allocation)."""
    if entry[0] is COPY:
        return (COPY, True, entry[2], copy(entry[3]))
    return entry


class ServeSide:
    """The caller's half of the on-demand core (a mixin of ``OnDemandCore``)."""

    # The streaming consumer's: the deadline of a call, and the hand-out that delivers a deferred SIGINT
    # first (putting the outcome back for the next call with ``unreturn``).
    deadline = ConsumerSide.deadline
    handout = ConsumerSide.handout
    refuse_reentry = ConsumerSide.refuse_reentry
    on_own_thread = ConsumerSide.on_own_thread

    @protected
    def consume(self, api: str, request: tuple[int, Any], deadline: float | None) -> tuple:
        """One call's outcome (a stash entry), taken out of the stash under the gate. ``request``: (index, out)."""
        index, out = request
        if self.forked:
            raise PrefetcherForked(f"prefetcher {self.name!r} belongs to the process that forked this one")
        gate = self.gate
        if gate._is_owned() or threading.get_ident() in self.worker_idents:
            self.refuse_reentry()
        committed = None
        t0 = time.perf_counter()
        try:
            with (gate if wait_gate(gate, deadline) else NO_GATE):
                try:
                    if self.returned:
                        self.take_returned()
                    entry = self.stash
                    if entry is not None and (entry[2] != index or self.close_started):
                        entry = self.stash = None  # an interrupted call's outcome, for another index: nobody's now
                    if entry is None:
                        if self.close_started:
                            raise PrefetcherClosed(f"prefetcher {self.name!r} is closed")
                        self._serve(index, api, out, deadline)
                        entry = self.stash
                        if self.counted is not None:  # (None: closed, or the source busy: no answer)
                            self.counts.requests += 1
                        self.counts.wait_seconds += time.perf_counter() - t0
                    elif entry[0] is not ERROR and entry[0] is not CLOSED and (entry[0] is not api
                                                                             or entry[3] is not out):
                        entry = self.stash = self._adapt(entry, api, out)
                except BaseException:  # interrupted before the hand-out: the stash keeps it, in our memory
                    if self.stash is not None:
                        self.stash = _kept(self.stash, self.own_copy)
                    raise
                committed = entry; self.stash = None  # noqa: E702 - handed out: no interruption point between
                return entry
        except BaseException:
            if committed is not None:  # interrupted at the gate's exit, after the hand-out
                self.unreturn(committed)
            raise

    @protected
    def unreturn(self, entry: tuple) -> None:
        """Put back an outcome whose call is raising an interrupt instead: the next call for its index returns it.

        Recorded without the gate, as ``ConsumerSide.unreturn`` (a second Ctrl-C while waiting for the gate
        lost it); the next call moves it into the stash (:meth:`take_returned`).
        """
        self.returned.append(_kept(entry, self.own_copy))

    def take_returned(self) -> None:
        """Under the gate: the first outcome put back becomes the stash if it is empty (one is kept, as before);
        each is removed from ``returned`` on the line that stores it."""
        returned = self.returned
        while True:
            if not returned:
                return
            entry = returned[0]
            if self.stash is None:
                self.stash = entry; del returned[0]  # noqa: E702
            else:
                del returned[0]

    def _adapt(self, entry: tuple, api: str, out: Any) -> tuple:
        """An interrupted call's batch, for this call's API (or ``out``)."""
        _kind, _value, index, data = entry
        if api is GET:
            copied = self.own_copy(data)
            return (GET, copied, index, copied)
        np.copyto(out, data, casting="no")
        return (COPY, True, index, out)

    # -- driving the model consumer -----------------------------------------

    def _mine(self, state: tuple, index: int) -> bool:
        """Whether the tag the model consumer asked for last stands for ``index``."""
        tag = state[self.i_want]
        return tag >= 0 and self.index_of[tag] == index

    def _serve(self, index: int, api: str, out: Any, deadline: float | None) -> None:
        """Drive the model consumer until ``index`` is served; its outcome goes into the stash."""
        rt, c, i_pc = self.rt, self.consumer, self.i_consumer_pc
        asked = predicted = False
        self.counted = ()
        while True:
            state = rt.state
            pc = state[i_pc]
            if pc == DONE:
                self._uncount()  # (a late hit's wait ended by close: it used nothing)
                self.stash = (CLOSED, PrefetcherClosed(f"prefetcher {self.name!r} was closed"), index, None)
                return
            if pc == Q.RELEASE:
                if self._mine(state, index):
                    self._produce(api, out, state[self.i_lease], index)
                    return
                rt.step(c)  # an interrupted call's lease, for another index
            elif pc == Q.DEMAND_FETCH:
                self.drop_demand = not self._mine(state, index)
                self.demand_deadline = deadline
                try:
                    rt.step(c)
                finally:
                    self.drop_demand = False
                    self.demand_deadline = None
            elif pc == Q.SERVE:
                if self._mine(state, index):
                    self._wait_in_flight(deadline)
                    asked = True  # (a wait resumed from an interrupted call: its request was made then; a failed
                    # fetch is this request's error, not a reason to ask again -- a second request, a miss,
                    # swallowed the source's error and counted one request twice)
                else:
                    rt.step(c, Q.WITHDRAW)  # an interrupted call's wait, for another index
            elif asked:  # back at "request or predict": this request's fetch failed
                k = state[self.i_error_slot]
                box = self.source_ref()
                error = box.errors.pop(k, None) if box is not None else None
                if error is None:  # cannot happen: the slot's error is stored before it is published
                    error = RuntimeError(f"prefetcher {self.name!r}: the fetch of index {index} failed")
                if error is self.busy:  # this request's timeout, not the source's error: no miss, no answer
                    self.busy = None
                    self._uncount()
                else:
                    self.counts.errors += 1
                self.stash = (ERROR, Raised(error), index, None)
                del error  # (no local of this frame holds it: see Raised)
                return
            elif not predicted:
                predicted = True
                speculate(self, index)
            else:
                asked = True
                self._request(index)

    def _request(self, index: int) -> None:
        """Ask for ``index``'s tag: exactly one outcome is enabled, so this never parks. Counts what it was."""
        rt = self.rt
        self.wait_uncounted = False  # a new request: its own outcome is counted below
        before = rt.state[self.i_slots]
        tag = self.tag_for(index, before)
        rt.step(self.consumer, self.branches_request[tag])
        pc = rt.state[self.i_consumer_pc]
        counts = self.counts
        if pc == Q.RELEASE or pc == Q.REQUEST:  # (REQUEST: a speculative fetch's error, ready, answered it)
            counts.hits += 1
            counts.used += 1
            self.counted = ("hits", "used")
        elif pc == Q.SERVE:
            counts.late_hits += 1
            counts.used += 1
            self.counted = ("late_hits", "used")
        elif pc == Q.DEMAND_FETCH:
            counts.misses += 1
            self.counted = ("misses",)

    def _uncount(self) -> None:
        """Take back what this call's request counted: it was answered by nothing (closed, or SourceBusy)."""
        for name in self.counted or ():
            setattr(self.counts, name, getattr(self.counts, name) - 1)
        self.counted = None

    def _wait_in_flight(self, deadline: float | None) -> None:
        """Wait for a worker's fetch of the asked-for index (the only step of a call that parks)."""
        t0 = time.perf_counter()
        counts = self.counts
        if self.wait_uncounted:  # a wait a timeout or an interrupt cut short, resumed: a late hit again
            counts.late_hits += 1; counts.used += 1; self.wait_uncounted = False  # noqa: E702
            self.counted = ("late_hits", "used")
        try:
            self.rt.step(self.consumer, self.branches_serve,
                         timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        except BaseException as e:
            # Not served (yet): the request joined the fetch and counted it a late hit, used; a later
            # request taking the batch as a hit counted it again (4 outcomes for 3 requests, "used 2" of one
            # speculative fetch). Uncounted until a call resumes this wait.
            counts.late_hits -= 1; counts.used -= 1; self.wait_uncounted = True  # noqa: E702
            self.counted = ()
            if isinstance(e, StepTimeout):
                raise PrefetchTimeout("the batch being fetched did not arrive within the timeout") from None
            raise
        finally:
            counts.served_wait += time.perf_counter() - t0

    def _produce(self, api: str, out: Any, k: int, index: int) -> None:
        """Copy the leased slot out into the stash, then release it (the stash first: see the module doc)."""
        view = self.slot_views[k]
        if api is GET:
            data = self.own_copy(view)  # a copy: the caller owns it
            self.stash = (GET, data, index, data)
        else:
            np.copyto(out, view, casting="no")
            self.stash = (COPY, True, index, out)
        self.rt.step(self.consumer)  # "release lease"

    def tag_for(self, index: int, slots: tuple) -> int:
        """The tag standing for ``index``: its own if it has one, else one no slot holds (re-mapped to it)."""
        tag = self.tag_of.get(index)
        if tag is not None:
            return tag  # held by a slot, or free: either way it stands for ``index``
        held = holdings(self, slots)
        for tag in range(self.keys):
            if tag not in held:
                break
        old = self.index_of[tag]
        if old >= 0 and self.tag_of.get(old) == tag:
            del self.tag_of[old]
        self.index_of[tag] = index
        self.tag_of[index] = tag
        return tag

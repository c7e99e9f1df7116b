"""The consumer: one caller at a time drives the model consumer, and an interrupted call loses nothing.

Callers take the *gate* (an RLock, so a thread can ask whether it holds it)
and drive the model's consumer thread: "take next batch" (a run of batches,
or the end, the error, the close), then "release lease" once every batch of
the run is handed out. The consumer reads ``pool[k]`` only while the model
says slot ``k`` is LEASED.

An interrupted call loses no batch. A call produces its outcome -- an array
copied out, ``out`` filled, a Lease, the end, an error -- into the *stash*
under the gate, and takes it out of the stash on the line that returns it.
The run is released only after its last batch is in the stash. So wherever
a ``KeyboardInterrupt`` lands -- in the kernel, while copying, while
releasing -- the next call finds either the run still held (and serves its
next batch) or the outcome in the stash (and returns it, adapted to its own
API), and a take whose caller never saw its result is recognised by the
model consumer's own lease. With the SIGINT wrapper installed, a Ctrl-C
inside a call is delivered at the blocking wait or just before the call
returns, with the outcome put back for the next call (``unreturn``).

Open question: a signal landing in the few bytecodes between the gate's
``with`` exit and a consumer call's return puts the outcome back; with two
consumer threads racing, it may then be delivered after a batch another
thread took in between (never lost, never duplicated).
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .._dsl.model import DONE
from .._runtime.interrupts import deliver, guard, outermost, protected
from .._runtime.kernel import StepTimeout
from ..models import _protocol as P
from .args import as_seconds
from .errors import LeaseHeld, PrefetcherClosed, PrefetcherExhausted, PrefetcherForked, PrefetchTimeout
from .lease import RELEASED_ARRAY, Lease
from .sources import EXECUTING, executing
from .waits import NO_GATE, hold_gate, wait_gate

__all__ = ["DEFAULT", "ConsumerSide", "COPY", "END", "GET", "LEASE", "TERMINAL"]

# What a consumer call hands out. A stash entry is (kind, value, position, data, lease ref):
# ``kind`` is the API that produced it (GET: value is a new array; COPY: value is
# True, data is ``out``; LEASE: value is a Lease) or a terminal outcome (END, or
# ERROR / CLOSED, whose value is the exception to raise); ``data`` is the array
# holding the batch, for handing the entry to another API; ``lease ref`` a weak reference
# to the Lease (made beforehand, so that handing it out calls nothing).
GET, COPY, LEASE = "get", "copy", "lease"
END, ERROR, CLOSED = "end", "error", "closed"
TERMINAL = (END, ERROR, CLOSED)

#: numpy's copy for arrays that override nothing (np.copyto less its ``__array_function__`` dispatch).
_copyto_plain = getattr(np.copyto, "_implementation", np.copyto)

#: "The prefetcher's own timeout" for a call's ``timeout`` argument.
DEFAULT: Any = type("_Default", (), {"__repr__": lambda self: "<the prefetcher's timeout>"})()


def _owned(entry: tuple, copy: Any) -> tuple:
    """``entry``, kept for a later call, with its batch in memory the prefetcher owns.

    A ``copy_prefetched`` outcome's batch is in the caller's ``out`` only
    (its slot was given back when it was copied): a caller whose call
    raised may write ``out`` before its next call, which would then hand
    out the caller's data as the batch. So a kept copy outcome keeps a copy
    of ``out``, taken while it still holds the batch; the next call copies
    from it (``_adapt``), whatever buffer that call passes. ``copy`` is the
    core's ``own_copy``: ``np.array`` copies a padded dtype field by field,
    and a later ``get()`` handed out the padding as its allocation found it.
    """
    if entry[0] is COPY:
        return (COPY, True, entry[2], copy(entry[3]), None)
    return entry


class ConsumerSide:
    """The consumer half of the core (a mixin of ``_Core``)."""

    def deadline(self, timeout: Any) -> float | None:
        """The deadline for a consumer call given its ``timeout`` argument (``DEFAULT``: the prefetcher's)."""
        t = self.timeout if timeout is DEFAULT else as_seconds("timeout", timeout)
        return None if t is None else time.monotonic() + t

    def on_own_thread(self) -> bool:
        """Whether the calling thread runs a fetch of this prefetcher: one of its workers, or an executor's
        thread inside one of its fetches (``sources.EXECUTING``)."""
        return threading.get_ident() in self.worker_idents or (bool(EXECUTING) and executing(self.token))

    def refuse_reentry(self) -> None:
        """Raise RuntimeError for a consumer call that would wait for itself: made on a thread that holds the gate
        (from inside another call: its source or predictor, or a signal handler or finalizer that interrupted
        it), or on one of this prefetcher's workers (its source calling back)."""
        if self.gate._is_owned():
            raise RuntimeError(f"prefetcher {self.name!r}: a consumer call from inside another call on this thread "
                               "(the source or predictor it runs, or a signal handler or finalizer that interrupted "
                               "it); only close() may be called there")
        if self.on_own_thread():
            raise RuntimeError(f"prefetcher {self.name!r}: a consumer call from its own worker (the source calling "
                               "its prefetcher back): it would wait for the fetch it is inside; only close() may be "
                               "called there")

    def refuse_iteration(self) -> None:
        """``iter(pf)`` of a stream that is over: PrefetcherExhausted (one pass per Prefetcher). In a forked child
        PrefetcherForked first, as every consumer call there (a stream that had ended said "exhausted")."""
        if self.forked:
            raise PrefetcherForked(f"prefetcher {self.name!r} belongs to the process that forked this one")
        if (self.ended_with is not None and self.stash is None and not self.backlog and not self.returned
                and not self.close_started):
            how = "ended with the source's error" if self.ended_with == ERROR else "was delivered to the end"
            raise PrefetcherExhausted(
                f"prefetcher {self.name!r}: its stream {how} ({self.counts.delivered} batches); a Prefetcher is one "
                "pass over its source: create a new one for another pass (with epoch=... for a new shuffle)")

    @protected
    def consume(self, api: str, out: Any, deadline: float | None) -> tuple:
        """One consumer call: its outcome (a stash entry), taken out of the stash under the gate."""
        if self.forked:
            raise PrefetcherForked(f"prefetcher {self.name!r} belongs to the process that forked this one")
        gate = self.gate
        if gate._is_owned() or threading.get_ident() in self.worker_idents or (EXECUTING and self.on_own_thread()):
            self.refuse_reentry()
        committed = None
        try:
            with (gate if wait_gate(gate, deadline) else NO_GATE):
                try:
                    if self.handing:  # this thread's outcome from the C fast path, if its return was cut short
                        self.unhand()
                    if self.returned:
                        self.take_returned()
                    entry = self.stash
                    if entry is not None and self.close_started and entry[0] is not CLOSED:
                        # An interrupted call's outcome: after close none is handed out, not a batch and not the
                        # end or the source's error either ("use after close raises PrefetcherClosed"). Its
                        # batches were counted delivered when produced: they were not.
                        gone = sum(1 for e in (entry, *self.backlog) if e[0] not in TERMINAL)
                        entry = self.stash = None; self.backlog = (); self.counts.delivered -= gone  # noqa: E702
                    if entry is None and not self.backlog:
                        self._serve(api, out, deadline)
                        entry = self.stash
                    else:
                        if entry is None:
                            entry = self.backlog[0]
                            self.stash, self.backlog = entry, self.backlog[1:]
                        if entry[0] not in TERMINAL:
                            # An interrupted call's batch is a batch like any other: not while a lease is held
                            # (another consumer thread may have taken one since), or releasing this one would
                            # give back the slot the held lease reads.
                            self._no_lease_held()
                    if (entry[0] is not api or (api is COPY and entry[3] is not out)) and entry[0] not in TERMINAL:
                        self._adapt(api, out)  # an interrupted call (of another API, or another out) produced it
                        entry = self.stash
                except BaseException:  # interrupted before the hand-out: the stash keeps it, in our memory
                    if self.stash is not None:  # (still under the gate: no other consumer sees it meanwhile)
                        self.stash = _owned(self.stash, self.own_copy)
                    raise
                # Handed out: no interruption point from here to the caller's return (see get()),
                # except the check after the gate's exit, which the ``except`` below covers.
                committed = entry; self.stash = None  # noqa: E702
                if entry[0] is LEASE:
                    self.lease_out = entry[4]
                elif entry[0] is ERROR:
                    self.error_raised = True
                return entry
        except BaseException:
            if committed is not None:  # interrupted at the gate's exit, after the hand-out
                self.unreturn(committed)
            raise

    @protected
    def handout(self, api: str, out: Any, timeout: Any) -> tuple[str, Any]:
        """A public consumer call's (kind, value), with a deferred SIGINT delivered first.

        If the deferred SIGINT raises, the outcome goes back to the stash for
        the next call. The caller (a public method, not itself protected)
        returns the value with no interruption point in between.
        """
        try:
            entry = self.consume(api, out, None if timeout is DEFAULT and self.timeout is None else
                                 self.deadline(timeout))
        except BaseException:
            if guard.deferred and outermost(sys._getframe()):
                deliver()
            raise
        if guard.deferred and outermost(sys._getframe()):
            try:
                deliver()
            except BaseException:
                self.unreturn(entry)
                raise
        # A batch (of the call's own kind: consume adapted any other), handed to this thread: a store, not a call,
        # so no interruption point.
        if entry[0] is api or entry[0] not in TERMINAL:
            self.last_seen.last_pos = entry[2]
        return entry[0], entry[1]

    @protected
    def unreturn(self, entry: tuple) -> None:
        """Put back an outcome whose call is raising a Ctrl-C instead: the next call returns it.

        Recorded without the gate (``list.append`` is atomic): the next call moves it into the stash under
        the gate (:meth:`take_returned`). It used to wait for the gate here, interruptibly so as not to
        hang behind another consumer thread's long call, and a second Ctrl-C during that wait lost the
        outcome. Nothing here waits now, so a second Ctrl-C is deferred to the next call like any other.
        """
        self.returned.append(_owned(entry, self.own_copy))

    @protected
    def unhand(self) -> None:
        """Put back the outcome the C fast path served this thread, if its public method was interrupted before
        it returned it (``cconsumer.py``): the next call returns it, as for :meth:`unreturn`.

        Called by that method's ``except``, and by this thread's next call under the gate (an interrupt in here
        leaves the outcome where it was). It is put back and dropped from ``handing`` with no call between.
        """
        ident = threading.get_ident()
        entry = self.handing.get(ident)
        if entry is not None:
            owned = _owned(entry, self.own_copy)
            self.returned += [owned]; del self.handing[ident]  # noqa: E702

    @protected
    def record_terminal(self) -> None:
        """The C fast path's take ended the stream (``cconsumer.py``): stash how, under its gate, as
        :meth:`_take_run` does; the call then takes the Python path, which hands it out."""
        self._terminal(self.rt._state)

    def take_returned(self) -> None:
        """Move the outcomes interrupted calls put back into the stash, in the order they were put back.

        Under the gate. Each is stored and removed from ``returned`` with no interruption point in between
        (attribute stores, a tuple and ``del``; no call), so an interrupt anywhere here loses or repeats none.
        """
        returned = self.returned
        while True:
            if not returned:
                return
            entry = returned[0]
            if entry[0] is LEASE and self.lease_out is entry[4]:
                self.lease_out = None
            if self.stash is None:
                self.stash = entry; del returned[0]  # noqa: E702
            else:
                self.backlog = self.backlog + (entry,); del returned[0]  # noqa: E702

    def _usable(self) -> None:
        if self.close_started:
            raise PrefetcherClosed(f"prefetcher {self.name!r} is closed")
        self._no_lease_held()

    def _no_lease_held(self) -> None:
        """Raise LeaseHeld while a lease handed out is unreleased; a lease dropped unreleased is released here."""
        ref = self.lease_out
        if ref is not None:
            lo = ref()
            if lo is None:  # dropped unreleased: its run is released now (no one can read it any more)
                self.lease_out = None
                self._release_run()
            elif not lo._released:
                raise LeaseHeld("a lease is still held: release it (lease.release() or leave its with-block) "
                                "before asking for another batch")

    def _serve(self, api: str, out: Any, deadline: float | None) -> None:
        """Produce this call's outcome into the stash: the next batch of the run, taking a new run if needed."""
        if self.ended_with is not None:
            # The stream is over and its last word was said: a closed stream stays closed;
            # after the end or the source error, StopIteration.
            if self.ended_with is CLOSED or self.close_started:
                self.stash = (CLOSED, PrefetcherClosed(f"prefetcher {self.name!r} is closed"), -1, None, None)
            else:
                self.stash = (END, None, -1, None, None)
            return
        if self.close_started or self.lease_out is not None:
            self._usable()
        # The caller's pace (from the previous batch in hand to this call) decides run lengths.
        self.runs.observe_call()
        run, i = self.run, self.run_next
        if i >= len(run) or self._run_changed():
            if not self._take_run(deadline, single=api is LEASE):
                return  # the stream ended: the stash holds how
            run, i = self.run, self.run_next
        k, pos = run[i]
        spans = self.spans
        if spans is not None:
            t0 = time.perf_counter()
        if api is COPY:
            # numpy's C copy itself for a plain array: the same call np.copyto makes once it has asked the
            # arguments for an __array_function__ override, which a plain ndarray and our slot do not have.
            # Any other ``out`` is asked the call as before: ``casting`` by keyword (an override unpacks it).
            if type(out) is np.ndarray:
                _copyto_plain(out, self.slot_views[k], "no")
            else:
                np.copyto(out, self.slot_views[k], casting="no")
            data, value = out, True
        elif api is GET:
            data = self.own_copy(self.slot_views[k])  # a copy: the caller owns it
            value = data
        else:
            data = self.ro_views[k].view()
            value = Lease(self, data, pos, int(self.plan[pos]) if self.plan is not None else pos)
        ref = weakref.ref(value) if api is LEASE else None
        if spans is not None:
            spans.append(("consumer", "copy", t0, time.perf_counter()))
        # The outcome is stashed, and the run advanced past it, with no interruption point between.
        self.stash = (api, value, pos, data, ref); self.run_next = i = i + 1; self.counts.delivered += 1  # noqa: E702
        self.runs.last_call = time.perf_counter()
        if api is not LEASE and i >= len(run):
            self._release_run()
        if spans is not None:
            self.consumer_back = time.perf_counter()

    def _run_of(self, state: tuple) -> tuple[tuple[int, int], ...]:
        slots, lease = state[self.i_slots], state[self.i_lease]
        return tuple([(k, slots[k][1]) for k in lease])

    def _run_changed(self) -> bool:
        """A take applied by the kernel whose call was interrupted before it recorded the run.

        Only a take changes ``delivered``, and every take raises it, so a
        ``delivered`` other than the one recorded with the run means another
        take (the same answer as comparing the runs, without building one).
        ``_take_run`` asks it once the run is served, to tell a take left
        unrecorded from a release left undone. ``_serve`` asks it on every
        call, defensively: both release paths wait until the whole run was
        handed out, so as the code stands no run is replaced while part of it
        is unserved; this keeps the check free should that change.
        """
        state = self.rt._state
        return state[self.i_consumer_pc] == P.RELEASE and state[self.i_delivered] != self.run_delivered

    def _take_run(self, deadline: float | None, single: bool) -> bool:
        """Make ``self.run`` the run the model consumer holds, taking one if needed. False when the stream ended.

        Only the consumer changes its own pc, its lease, a LEASED slot,
        ``delivered`` and ``error_seen``, so reading them outside the kernel
        lock is exact.
        """
        rt, c = self.rt, self.consumer
        state = rt._state
        pc = state[self.i_consumer_pc]
        if pc == DONE:
            self._terminal(state)
            return False
        give_back = False
        if pc == P.RELEASE:
            if self._run_changed():
                # A take whose caller was interrupted: serve it now.
                self.run, self.run_next, self.run_delivered = self._run_of(state), 0, state[self.i_delivered]
                return True
            give_back = True  # the whole run was handed out; its release was interrupted
        branch = self.runs.branches(single)
        slots = state[self.i_slots]
        ready = 0
        for st, _ in slots:
            if st == P.READY or st == P.FAILED:
                ready += 1
        self.counts.sample_occupancy(ready)
        t0 = time.perf_counter()
        try:
            rt.step(c, None if give_back else branch,
                    timeout=None if deadline is None else max(0.0, deadline - time.monotonic()),
                    chain=give_back, then=branch)
        except StepTimeout:
            raise PrefetchTimeout("no batch within the timeout") from None
        finally:
            t1 = time.perf_counter()
            self.counts.wait_seconds += t1 - t0
            if self.spans is not None:
                if self.consumer_back is not None:
                    self.spans.append(("consumer", "compute", self.consumer_back, t0))
                self.spans.append(("consumer", "wait", t0, t1))
                self.occupancy_log.append((t0, ready))
        after = rt._state
        if after[self.i_consumer_pc] == DONE:
            self._terminal(after)
            return False
        self.run, self.run_next, self.run_delivered = self._run_of(after), 0, after[self.i_delivered]
        if self.autotuner is not None:
            self.autotuner.after_take(self, state, ready)
        return True

    def _terminal(self, state: tuple) -> None:
        """The model consumer is done: stash the end of stream, the source error, or PrefetcherClosed."""
        err = state[self.i_error_seen]
        box = self.source_ref()
        if err >= 0 and not self.error_raised and box is not None and err in box.errors:
            self.stash = (ERROR, box.errors[err], err, None, None)
            self.ended_with = ERROR
            # Taken out of the box (by statements that call nothing: no interruption point between them): once
            # raised, its traceback holds the caller's frame, whose locals hold this prefetcher and the box; kept
            # there, that cycle held the caller's locals past its call.
            del box.errors[err]
        elif err >= 0 or state[self.i_delivered] >= state[self.i_length]:
            self.stash = (END, None, -1, None, None)
            self.ended_with = END
        else:
            self.stash = (CLOSED, PrefetcherClosed(f"prefetcher {self.name!r} was closed"), -1, None, None)
            self.ended_with = CLOSED

    @protected
    def _release_run(self) -> None:
        """The model consumer's "release lease", once every batch of its run is handed out (never blocks).

        At once, not at the next call: a waiting worker then refills the slots
        while the caller is on its way back (measured: giving a run back at
        the next call, in one critical section with the next take, is slower
        at every depth).
        """
        rt = self.rt
        if rt._state[self.i_consumer_pc] == P.RELEASE and self.run_next >= len(self.run):
            rt.step(self.consumer)

    def _adapt(self, api: str, out: Any) -> None:
        """Turn the stashed outcome of an interrupted call of another API into this call's outcome."""
        kind, value, pos, data, _ref = self.stash
        if api is GET:
            copied = self.own_copy(data)
            new = (api, copied, pos, copied, None)
        elif api is COPY:
            if out is not data:
                np.copyto(out, data, casting="no")
            new = (api, True, pos, out, None)
        else:  # a Lease over a private read-only copy: no slot is held for it
            private = as_strided(self.own_copy(data), writeable=False)  # its flag cannot be set back, as a slot's
            lease = Lease(self, private, pos, int(self.plan[pos]) if self.plan is not None else pos, private=True)
            new = (api, lease, pos, private, weakref.ref(lease))
        self.stash = new
        if kind is LEASE:
            value._released = True; value._array = RELEASED_ARRAY  # noqa: E702
            self._release_run()

    @protected
    def release_lease(self, lease: "Lease") -> None:
        if self.forked:
            lease._released = True; lease._array = RELEASED_ARRAY  # noqa: E702
            return
        gate = self.gate
        if gate._is_owned():
            # Inside a call of ours on this thread: a ``leases()`` generator closed by a collection that started
            # there (its ``finally`` releases the lease). Waiting for the gate would wait for ourselves; marked
            # released, its run is given back by the next take (``_take_run``), as a dropped Lease's is.
            lease._released = True; lease._array = RELEASED_ARRAY  # noqa: E702
            return
        # A Ctrl-C on the way in (at ``Lease.__exit__``) or while waiting for the gate is delivered once the
        # lease is released, by the caller: raised before, it left a ``with`` block's lease held for good.
        with (gate if hold_gate(gate) else NO_GATE):
            if lease._released:
                return
            # Only the lease handed out last holds the run. An older one released late (its object kept by a
            # finalizer after its weak reference died, when the next call already gave its batch back) would
            # give back the batch of the lease held now. The last one's reference is dead too while a cycle
            # holding it is finalized (references are cleared first): no lease alive holds the run then.
            ref = self.lease_out
            held = ref() if ref is not None else self  # (self: no lease handed out since holds a run)
            if not lease._private and not self.closed and (held is lease or held is None):
                self._release_run()
            lease._released = True; lease._array = RELEASED_ARRAY  # noqa: E702

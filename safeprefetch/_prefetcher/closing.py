"""Closing: bounded, idempotent, from any thread -- and never waiting for itself.

``close()`` sets the model's ``closing`` (the closer's "close" step wakes every
blocked step: workers exit, an in-flight fetch is discarded when it lands,
the consumer's next take reports "closed"), then waits, bounded by
``close_timeout``, for the workers to leave the model and their threads to
end. A worker still inside a fetch after that is reported, not waited for.

Called on a thread that is inside this prefetcher -- holding the kernel lock
or the close lock (a signal handler or a finalizer that interrupted it), or
one of its workers (a source closing its own prefetcher) -- waiting would
wait for itself. There ``close()`` marks the prefetcher closed and hands the
rest to the reaper thread (``lifecycle.py``), which waits for the lock the
interrupted code releases as soon as the handler returns.
"""

from __future__ import annotations

import threading
import time
import warnings

from .._runtime.interrupts import protected
from .._runtime.kernel import LiveError, StepTimeout
from ..models import _protocol as P
from .args import deadline_after
from .consumer import DEFAULT
from .errors import PrefetcherWarning
from .lifecycle import drop_sigint, reaper
from .waits import CLOSE_BUSY, CloseBusy, join_threads, wait_event, wait_gate

__all__ = ["CloseSide"]


class CloseSide:
    """The closing half of the core (a mixin of ``_Core``)."""

    def cannot_wait(self) -> bool:
        """Whether the calling thread is inside this prefetcher: holds the kernel or close lock, the consumer gate
        (a consumer call, parked in the kernel or not), runs a fetch, or holds a ``thread_safe=False`` source's
        lock (an on-demand miss runs the source on the caller's thread).

        Such a caller is a signal handler or finalizer that interrupted us, or
        a source closing its own prefetcher; waiting for the lock there would
        wait for itself (for a worker waiting for the source's lock, in the
        last case). A handler that interrupted a consumer call parked in the
        kernel holds only the gate: its close joined the workers there, for
        the whole close timeout behind a worker stuck in a fetch, and for ever
        with ``close_timeout=None`` (the interrupted call could not return to
        let the fetch finish).
        """
        if (self.rt.owned_by_current_thread() or self.close_lock._is_owned() or self.gate._is_owned()
                or self.on_own_thread()):
            return True
        box = self.source_ref()
        return box is not None and box.lock is not None and box.lock._is_owned()

    def request_close(self) -> None:
        """Close without waiting: marked closed now, carried out by the reaper. Safe from any context."""
        self.close_started = True
        if not self.forked and not self.closed:
            reaper.request(self)

    @protected
    def close(self, timeout: float | None) -> bool:
        """Close and wait (bounded) for the workers. False when a worker was stuck in a fetch and left behind."""
        if self.forked:
            self.close_started = True
            return True
        if self.cannot_wait():
            self.request_close()
            return True
        deadline = deadline_after(self.close_timeout if timeout is DEFAULT else timeout)
        self.close_started = True
        self.begin_close(deadline)
        return self.finish_close(deadline)

    @protected
    def begin_close(self, deadline: float | None = None) -> None:
        """Set the model's ``closing`` (waking every blocked step) and cut executor waits short.

        The close lock is waited for until ``deadline`` at most, and Ctrl-C
        can cut that wait short: another thread's close may hold it while it
        waits for a stuck worker, and then it is that close which finishes.
        """
        self.close_started = True
        if self.forked or self.closed:
            return
        rt = self.rt
        lock = self.close_lock
        try:
            # A Ctrl-C deferred on the way in (at a with-block's ``__exit__``) is not delivered before ``closing``
            # is set: the workers would be left running. The join's wait delivers it.
            with (lock if wait_gate(lock, deadline, deliver_deferred=False) else CLOSE_BUSY):
                try:
                    if rt.state[self.i_closer_pc] == P.CLOSE:
                        rt.step(self.closer)
                except LiveError:
                    pass  # the runtime already failed; every parked thread has been told
                with self.waiters_lock:
                    waiters = list(self.waiters)
                for ev in waiters:
                    ev.set()
        except CloseBusy:
            pass  # another thread's close holds the lock past our deadline: it has set closing, or will

    @protected
    def finish_close(self, deadline: float | None, warn: bool = True) -> bool:
        """Wait until ``deadline`` for the workers to leave the model and their threads to end; then record it.

        Idempotent. A Ctrl-C during the wait leaves the prefetcher closed and
        its threads exiting; calling close() again finishes the join.
        """
        if self.forked:
            return True
        try:
            finished_here = self._finish_locked(deadline)
        except CloseBusy:
            return False  # another thread's close holds the lock past our deadline: it finishes the close
        box = self.source_ref()
        if finished_here and not self.stuck and box is not None:
            # No worker is inside next(): the iterator is the caller's again. A closed prefetcher kept (for its
            # stats) kept it too, and a generator's cleanup (its ``finally``, an inner prefetcher's ``with``)
            # waited for the garbage collector, its threads running. Dropped here, out of the close lock and
            # the protected join: the cleanup is the caller's code, and may call this close again.
            box.iterator = None
        if (self.stuck or self.remote_stuck) and warn and finished_here:  # warned once, by the close that found them
            waited = "no time" if deadline is None else "the close timeout"
            said = []
            if self.stuck:
                said.append(f"{', '.join(self.stuck)} still inside a fetch after {waited}; left running as daemon "
                            "threads (the result will be discarded)")
            if self.remote_stuck:
                said.append(f"the fetch of {', '.join(self.remote_stuck)} still running on the executor after "
                            f"{waited}; left to it (the result will be discarded)")
            warnings.warn(f"prefetcher {self.name!r}: {'; '.join(said)}", PrefetcherWarning, stacklevel=4)
        return not self.stuck and not self.remote_stuck

    @protected
    def _finish_locked(self, deadline: float | None) -> bool:
        """The close's join, under the close lock; False when an earlier close had finished it already."""
        rt = self.rt
        lock = self.close_lock
        with (lock if wait_gate(lock, deadline) else CLOSE_BUSY):
            if self.closed:
                self._after_close()  # idempotent: an interrupt may have cut the first one short
                return False
            me = threading.current_thread()
            try:
                if rt.state[self.i_closer_pc] == P.JOIN and me not in self.threads:
                    self._retire_unstarted()
                    rt.step(self.closer, timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except StepTimeout:
                pass  # a worker is stuck in a fetch: reported below
            except LiveError:
                pass
            join_threads(self.threads, deadline, me)
            state = rt.state
            if state[self.i_closing]:
                # Past the deadline, a worker out of any fetch is on its way out: with ``closing`` set its only
                # step is its exit (a claim offers nothing else), then its thread returns, running none of the
                # source. It is joined without the deadline (microseconds: close(timeout=0) used to return
                # before it ended, neither joined nor reported), so close() joins every thread it started but
                # the ones stuck in a fetch, which it reports.
                join_threads(list(th for th, i in zip(self.threads, self.worker_pcs)
                                  if th is not me and th.is_alive() and state[i] != P.FETCH), None, me)
            # Fetches a worker left running on the executor (it could not cancel them): waited for until the
            # deadline like the workers, and reported if still running (they used to run on after close()
            # returned, unreported).
            with self.waiters_lock:
                running = list(self.remote_running)
            for finished, _where in running:
                wait_event(finished, deadline)
            # (Generators, not list comprehensions, here: see the comment on ``self.stuck`` below.)
            self.remote_stuck = list(where for finished, where in running if not finished.is_set())
            # Still alive: a worker whose model thread is inside "fetch into slot" is stuck in the
            # source; the others have left the model and are only finishing their thread.
            state = rt.state
            # A generator, not a list comprehension: 3.13.0 inlines the comprehension with jumps that no
            # exception-table entry covers, so a Ctrl-C at its back-edge skipped this ``with``'s exit and left
            # the close lock held. A generator's frame raises into the ``list`` call, which is covered.
            self.stuck = list(th.name for th, i in zip(self.threads, self.worker_pcs)
                              if th is not me and th.is_alive() and state[i] == P.FETCH)
            self.counts.t_end = time.perf_counter()
            box = self.source_ref()
            if box is not None:
                box.preloaded.clear()
            self.closed = True
            self._after_close()
        return True

    def _retire_unstarted(self) -> None:
        """Drive out, on this thread, the model workers whose thread never started (``waits.start_threads``).

        ``closing`` is set, so each takes its exit step at once (never a
        fetch); without this, "join workers" would wait for them until the
        close timeout, and with none, forever.
        """
        while self.unstarted:
            target, args = self.unstarted[-1]
            target(*args)  # the worker loop, here; first_driver keeps each model worker to one driver
            self.unstarted.pop()  # only once done: a close cut short by Ctrl-C drives it again next time

    def _after_close(self) -> None:
        """Leave the registry of open prefetchers; remove the SIGINT wrapper if no open one asked for it."""
        drop_sigint(self)

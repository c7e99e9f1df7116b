"""The core: what the Prefetcher's threads share. It never references the Prefetcher.

One object, its halves in their own modules: the workers' (``fetching``),
the consumer's (``consumer``) and closing (``closing``). Its fields fall in
groups: the compiled machine and the runtime that runs it, with the indices
of the fields and threads the halves read (looked up by the protocol's
names, so a renamed field fails here, loudly); the slot pool and its views;
the source, weakly; the consumer's bookkeeping, changed only under the
gate; the close state; the counters and the policies.

Worker threads hold this object, never the Prefetcher, so an abandoned
Prefetcher is collected and its finalizer closes the core.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .._runtime.kernel import Runtime
from ..models import _protocol as P
from .closing import CloseSide
from .consumer import TERMINAL, ConsumerSide
from .fetching import FetchSide
from .policy import Autotuner, RunPolicy
from .sources import SourceBox, new_token, owned_copy
from .stats import Counters, PrefetchStats
from .waits import new_gate

__all__ = ["Core", "runtime_factory"]

#: How many spans, and how many occupancy samples, ``timeline=True`` keeps: the latest (about 12 MB each).
TIMELINE_RECORDS = 100_000

#: What builds each core's runtime: ``Runtime``, or a recording one while
#: ``safeprefetch.testing.recording_runtimes()`` is active.
runtime_factory: list = [Runtime]



def _read_only_alias(pool: np.ndarray) -> np.ndarray:
    """The pool through a read-only buffer: a view of it cannot be made writeable (``as_strided``)."""
    try:
        return as_strided(pool, writeable=False)
    except (TypeError, ValueError) as e:  # numpy cannot alias this dtype's buffer (StringDType, for one)
        raise TypeError(f"batches of dtype {pool.dtype} are not supported: numpy cannot give the slots a read-only "
                        f"alias for leases ({e}); use a fixed-width dtype (e.g. 'U16' for strings)"
                        ) from None

class Core(FetchSide, ConsumerSide, CloseSide):
    # The consumer's fields the C fast path reads and stores at their offsets (cconsumer.CORE_SLOTS); the rest
    # are in the instance's dict, as before.
    __slots__ = ("forked", "stash", "returned", "backlog", "handing", "close_started", "ended_with", "lease_out",
                 "spans", "run", "run_next", "run_delivered")

    def __init__(self, *, machine: Any, pool: np.ndarray | None, shape: tuple[int, ...] | None, dtype: Any,
                 plan: np.ndarray | None, box: SourceBox, workers: int, close_timeout: float | None,
                 name: str, timeline: bool = False, timeout: float | None = None, compiled: Any = None,
                 kernel: Any = None):
        self.machine = m = machine
        # ``compiled``: the machine's generated transitions (the default), or None for its plain steps.
        # ``kernel``: the kernel's step in C, built with typed transitions (``runtime="typed"``), or None.
        self.rt = runtime_factory[0](m, {P.ACTION_FETCH: self._fetch}, check_invariants=True, compiled=compiled,
                                     **({} if kernel is None else {"kernel": kernel}))
        self._index_machine(m, workers)
        # -- the pool: pool[k, ...] is a 0-d array (not a numpy scalar) when batches are 0-d, and
        # leases are views of a read-only alias of it (their writeable flag cannot be set).
        self.pool = pool
        self.slot_views = [pool[k, ...] for k in range(pool.shape[0])] if pool is not None else []
        ro = _read_only_alias(pool) if pool is not None else None
        self.ro_views = [ro[k, ...] for k in range(pool.shape[0])] if pool is not None else []
        self.shape, self.dtype = shape, dtype
        self.own_copy = owned_copy(dtype)  # (np.array, unless the dtype has holes: sources.owned_copy)
        # -- the source
        self.plan = plan
        self.source_ref = weakref.ref(box)  # the executor too (``box.executor``): an executor referring back
                                            # to its Prefetcher must not keep it alive through the workers
        self.close_timeout = close_timeout  # None: no limit
        self.timeout = timeout              # default timeout of the consumer's calls
        self.name = name
        # -- policies, counters, timeline
        self.runs = RunPolicy(m.config["run"])
        self.autotuner = Autotuner(m.thread_names.index(P.TUNER)) if P.TUNER in m.thread_names else None
        self.counts = Counters(workers)
        # Timeline (timeline=True): per-thread spans (thread, kind, start, end) and buffer occupancy samples
        # (time, ready batches), all perf_counter seconds; the latest TIMELINE_RECORDS of each (kept whole, a
        # day's run at 1,000 batches/s held 59 GB).
        self.spans: deque | None = deque(maxlen=TIMELINE_RECORDS) if timeline else None
        self.occupancy_log: deque | None = deque(maxlen=TIMELINE_RECORDS) if timeline else None
        self.consumer_back: float | None = None  # when the consumer's last call returned
        # -- the consumer's side (changed only by the gate's owner)
        self.gate = new_gate()                      # serializes the callers that drive the model consumer
        self.run: tuple[tuple[int, int], ...] = ()  # (slot, position) per batch the model consumer holds
        self.run_next = 0                       # how many of them went into the stash
        self.run_delivered = -1                 # the model's ``delivered`` right after the take of ``run``
        self.stash: tuple | None = None         # an outcome produced, not yet returned
        self.backlog: tuple = ()                # outcomes returned to the stash by interrupted calls (rare)
        self.returned: list[tuple] = []         # outcomes put back without the gate (unreturn), not yet in the stash
        # ``runtime="typed"``: the consumer's common call in C (cconsumer.py), or None; the outcomes it served,
        # by the thread it served them to, until the public method returns them (``unhand`` puts one back).
        self.serve_fast: Any = None
        self.handing: dict[int, tuple] = {}
        # The Lease handed out last, weakly: a Lease the caller dropped unreleased (a Ctrl-C right
        # after lease() returned, before ``with`` took it) is released by the next call.
        self.lease_out: weakref.ref | None = None
        self.error_raised = False               # the source error was raised (later calls: end of stream)
        self.ended_with: str | None = None      # the terminal outcome handed out, once the stream is over
        # Per consumer thread: ``last_pos``, the stream position of the batch handed to that thread last
        # (one attribute shared by every thread named another thread's batch).
        self.last_seen = threading.local()
        # -- closing
        self.close_lock = new_gate()            # serializes the callers that drive the model closer (waits.py)
        self.waiters_lock = threading.Lock()
        self.waiters: set[threading.Event] = set()  # executor waits that close() must cut short
        self.close_started = False              # close requested: no more batches (user-visible "closed")
        self.closed = False                     # close finished (threads joined, or reported stuck)
        self.forked = False                     # this is a forked child's copy (set by lifecycle)
        self.stuck: list[str] = []
        self.remote_running: list[tuple[threading.Event, str]] = []  # fetches left running on the executor
        self.remote_stuck: list[str] = []  # those still running when the close returned
        self.sigint = False                     # this prefetcher asked for the SIGINT wrapper
        self.threads: list[threading.Thread] = []
        self.worker_idents: set[int] = set()
        self.token = new_token()                    # marks an executor's threads running our fetch (sources.py)
        self.unstarted: list[tuple] = []            # (target, args) of workers whose thread never started
        self.drivers: dict[int, int] = {}           # model worker -> the thread driving it (waits.first_driver)

    def _index_machine(self, m: Any, workers: int) -> None:
        """The threads and fields the halves read, by the protocol's names (a rename fails here)."""
        names = m.thread_names
        self.worker_ids = [names.index(P.worker(w)) for w in range(workers)]
        self.consumer = names.index(P.CONSUMER)
        self.closer = names.index(P.CLOSER)
        si = m.shared_index
        self.i_slots, self.i_closing = si[P.SLOTS], si[P.CLOSING]
        self.i_delivered, self.i_length, self.i_error_seen = si[P.DELIVERED], si[P.LENGTH], si[P.ERROR_SEEN]
        self.i_target = si[P.TARGET]  # the whole pool unless autotune moves it
        self.i_next_index = si[P.NEXT_INDEX]
        self.i_consumer_pc = m.pc_index[self.consumer]
        self.i_closer_pc = m.pc_index[self.closer]
        self.i_lease = m.local_index[self.consumer][P.LEASE]
        # Per worker's model thread: (worker number, index of its "idx" local, of its "slot" local).
        # The fetch action reads them straight from the step's state snapshot.
        self.worker_fields = {t: (w, m.local_index[t][P.IDX], m.local_index[t][P.SLOT])
                              for w, t in enumerate(self.worker_ids)}
        self.worker_pcs = [m.pc_index[t] for t in self.worker_ids]
        self.slots_total = len(m.init[self.i_slots])

    # -- inspection -----------------------------------------------------------

    @property
    def target(self) -> int:
        """Slots the workers may use at once: the tuned target, or the whole pool."""
        return self.rt.state[self.i_target]

    @property
    def last_index(self) -> int | None:
        pos = getattr(self.last_seen, "last_pos", None)
        if pos is None or self.plan is None:
            return pos
        return int(self.plan[pos])

    @property
    def capacity_log(self) -> Any:
        """The latest autotune resizes (``policy.RESIZE_RECORDS``): (seconds since construction, batches
        delivered, new capacity)."""
        return self.autotuner.log if self.autotuner is not None else ()

    def stats(self) -> PrefetchStats:
        resizes = self.autotuner.resizes if self.autotuner is not None else 0
        return self.counts.snapshot(self.target, len(self.worker_ids), self.slots_total, resizes,
                                    self.delivered())

    def delivered(self) -> int:
        """Batches delivered. A batch is counted when it is produced; once close has begun, one an interrupted
        call put back will never be handed out (the next call drops it, and subtracts it then): not counted."""
        n = self.counts.delivered
        if self.close_started:
            for e in (self.stash, *self.backlog, *self.returned):  # a snapshot, off the gate: for statistics
                if e is not None and e[0] not in TERMINAL:
                    n -= 1
        return n

    def ready_now(self) -> int:
        """Batches ready in the buffer right now (a racy read of the immutable state: exact for that instant)."""
        n = 0
        for st, _ in self.rt.state[self.i_slots]:
            if st == P.READY or st == P.FAILED:
                n += 1
        return n

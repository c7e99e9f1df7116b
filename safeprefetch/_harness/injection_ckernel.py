"""The Prefetcher under interrupts at the C step's own points (``runtime="typed"``).

``injection_sweep.py`` injects at every point where CPython can raise an
asynchronous exception in safeprefetch's Python lines. Under
``runtime="typed"`` the kernel's common step runs in C (``_runtime/ckernel.py``),
which has no eval-breaker point of its own: an exception reaches it only where
it calls back into Python (a lock, a typed transition, a wake-up, a park), and
each such call goes through a hook that can raise there instead
(``K_inject``). The line sweep does not see those calls; this sweep does.

For every k a whole stream makes, a real typed Prefetcher over a real array is
drained through one consumer API (``get``, ``copy_prefetched``, a lease in a
``with`` block) with a ``KeyboardInterrupt`` raised at the k-th call back into
Python on the consumer's thread, and the caller catches it and carries on, as
a loop that survives a Ctrl-C does. The contract after each run: every batch
delivered once, in order; the prefetcher closes with no stuck worker; no lock
held (the kernel's, the consumer gate); no wakeup owed, no thread marked
parked. The sweep must also raise at every site the uninjected run reaches
whose calls do not depend on timing, and at the kernel's park: the source
holds one read until the consumer waits in the kernel for it, so every run
parks there (later parks depend on the machine's timing).
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .._prefetcher.api import Prefetcher
from .._runtime.ckernel import SITES

__all__ = ["APIS", "CStepReport", "STABLE", "run_at", "sweep_c_step"]

ITEMS = 10
DATA = np.arange(ITEMS * 4, dtype=np.float32).reshape(ITEMS, 4)
APIS = ("get", "copy_prefetched", "lease")
CAPACITIES = (2, 4)
#: Sites whose calls on the consumer's thread do not depend on how the two threads interleave, and the park.
STABLE = frozenset({"acquire", "transition", "wake guard", "park"})


class _ParksTheConsumer:
    """``DATA`` as a source whose item ``WAIT_AT`` is read only once the consumer waits in the kernel for it
    (or after ``WAIT_SECONDS``, so that a run that cannot park still ends)."""

    WAIT_AT, WAIT_SECONDS = 3, 10.0

    def __init__(self) -> None:
        self.pf: Prefetcher | None = None
        self.known = threading.Event()  # set once ``pf`` is (the worker starts inside the constructor)

    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, i: int) -> np.ndarray:
        if i == self.WAIT_AT and self.known.wait(self.WAIT_SECONDS) and self.pf is not None:
            core = self.pf._core
            deadline = time.monotonic() + self.WAIT_SECONDS
            while not (core.rt.is_parked(core.consumer) or core.close_started) and time.monotonic() < deadline:
                time.sleep(0.0005)  # polling observable state: the consumer's park
        return DATA[i]


def _take(pf: Prefetcher, api: str, got: list) -> None:
    """One batch through ``api`` into ``got`` (StopIteration at the end). A lease's batch is kept inside its
    with-block: an interrupt at its release (the block's exit) comes after the caller had the batch."""
    if api == "get":
        got.append(pf.get())
    elif api == "copy_prefetched":
        out = np.empty(DATA.shape[1:], DATA.dtype)
        if not pf.copy_prefetched(out):
            raise StopIteration
        got.append(out)
    else:
        with pf.lease() as view:
            got.append(view.copy())


def run_at(k: int, api: str, capacity: int) -> tuple[int, list[int], list[str]]:
    """Drain a typed Prefetcher through ``api``, a KeyboardInterrupt raised at the k-th call back into Python
    on this thread (k = -1: none), caught and carried on from. Returns the site raised at (an index of
    ``SITES``; -1: none), the calls per site, and what broke the contract."""
    source = _ParksTheConsumer()
    pf = source.pf = Prefetcher(source, capacity=capacity, workers=1, runtime="typed")
    source.known.set()
    rt, core = pf._core.rt, pf._core
    module = sys.modules[type(rt._fast.__self__).__module__]
    got: list[np.ndarray] = []
    caught = 0
    module.K_inject(k, threading.get_ident(), KeyboardInterrupt)
    try:
        while True:
            try:
                _take(pf, api, got)
            except KeyboardInterrupt:
                caught += 1
            except StopIteration:
                break
    finally:
        calls, fired = module.K_sites()
        module.K_inject(-1, 0, None)
    problems = []
    if len(got) != ITEMS or not np.array_equal(np.stack(got), DATA):
        items = [int(b[0]) // DATA.shape[1] for b in got]
        problems.append(f"the stream delivered items {items}, not 0..{ITEMS - 1} once each")
    if caught != (fired >= 0):
        problems.append(f"{caught} interrupts caught, {int(fired >= 0)} raised")
    pf.close()
    if not core.closed or core.stuck:
        problems.append(f"close left stuck threads: {core.stuck}")
    if not _free(rt._lock):
        problems.append("the kernel lock is held")
    if core.gate._is_owned() or not _free(core.gate):
        problems.append("the consumer gate is held")
    if rt._owed is not None or rt._nparked or any(rt._parked):
        problems.append(f"the kernel owes a wakeup or marks a thread parked: {rt._owed}, {rt._nparked}")
    return fired, calls, problems


def _free(lock: Any) -> bool:
    if not lock.acquire(False):
        return False
    lock.release()
    return True


@dataclass(frozen=True)
class CStepReport:
    """Every call back into Python of every run, injected once."""

    runs: int
    fired: int
    seconds: float
    #: (api, capacity, k, site, what): each broken contract.
    problems: tuple[tuple[str, int, int, str, str], ...]
    #: Sites the uninjected runs reached, and sites an interrupt was raised at.
    reached: frozenset[str]
    raised_at: frozenset[str]

    @property
    def missed(self) -> frozenset[str]:
        """Sites reached on every run's timing (``STABLE``) but never raised at."""
        return (self.reached & STABLE) - self.raised_at


def sweep_c_step(apis: tuple[str, ...] = APIS, capacities: tuple[int, ...] = CAPACITIES,
                 progress: Callable[[str], None] | None = None) -> CStepReport:
    """The sweep over every API and capacity (raises ``CompileUnavailable`` where the typed runtime cannot be
    built)."""
    t0 = time.perf_counter()
    runs = fired_total = 0
    problems: list[tuple[str, int, int, str, str]] = []
    reached: set[str] = set()
    raised: set[str] = set()
    for api in apis:
        for capacity in capacities:
            _f, calls, first = run_at(-1, api, capacity)
            problems += [(api, capacity, -1, "", what) for what in first]
            reached |= {SITES[i] for i, n in enumerate(calls) if n}
            for k in range(sum(calls) + 3):
                fired, _calls, found = run_at(k, api, capacity)
                runs += 1
                if fired >= 0:
                    fired_total += 1
                    raised.add(SITES[fired])
                problems += [(api, capacity, k, SITES[fired] if fired >= 0 else "", what) for what in found]
            if progress is not None:
                progress(f"C step / {api} / capacity {capacity}: {sum(calls) + 3} points")
    return CStepReport(runs, fired_total, time.perf_counter() - t0, tuple(problems), frozenset(reached),
                       frozenset(raised))

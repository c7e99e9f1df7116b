"""The bare model: the Prefetcher's checked model on two threads, with the least a runtime can add.

The live figures compare the Prefetcher with ``queue.Queue``. When ours
misses a target, the question is whose cost the gap is: the *design* (a
checked model stepped under a lock: claim, fetch, take, release, each a
transition building a new state) or the *runtime around it* (the kernel's
interrupt bookkeeping, exact wake sets, record and deadlock detection; the
consumer's gate, stash, statistics, run policy and copy-out).

This module answers it by measurement. :func:`bare_run` runs the same
generated transitions the Prefetcher runs (``transitions_for``, at the same
capacity, one worker, the same stream length), on a worker thread and the
calling thread, with nothing but one ``threading.Condition``: a thread whose
step is disabled waits on it, and every step notifies it. The worker
fetches into the slot the model gave it and the consumer copies out of the
slot the model leased it (``np.copyto``), as ``copy_prefetched`` does, so
the work per item is the Prefetcher's. Everything the hardened runtime adds
is absent: no interrupt safety (a Ctrl-C here can leave the lock held or a
thread waiting forever), no deadlock detection, no conformance record, no
timeout, no close, no statistics.

It is a measurement, never a prefetcher: the figures put it beside ours as
``bare model``, so the gap between ours and queue.Queue splits into the
design's share (bare model against queue.Queue) and the runtime's (ours
against the bare model). ``tests/test_live_bare.py`` checks that it
delivers every item once, in order, and that its state at the end is the
model's end state.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from .._dsl.model import DONE

__all__ = ["BARE", "bare_run"]

#: The figures' name for it, beside the baselines.
BARE = "bare model"


class _Steps:
    """The four steps a bare run takes, as the generated transitions of the model at this shape."""

    def __init__(self, n: int, capacity: int, run: int):
        from .._prefetcher.machine import machine_for, transitions_for

        m = machine_for(capacity, 1, n, True, True, 0, capacity)
        cm = transitions_for(capacity, 1, True, True, 0, capacity)
        w, c = m.thread_names.index("worker0"), m.thread_names.index("consumer")
        self.init, self.pw, self.pc = m.init, m.pc_index[w], m.pc_index[c]
        f = m.field_names
        self.i_idx, self.i_slot = f.index("worker0.idx"), f.index("worker0.slot")
        self.i_lease = f.index("consumer.lease")
        claim, fetch = cm.steps[w]["claim index and slot"], cm.steps[w]["fetch into slot"]
        take, self.release = cm.steps[c]["take next batch"], cm.steps[c]["release lease"]
        self.claim = claim.first
        self.fetch_ok = fetch.ones[fetch.branches.index("ok")]
        # "take up to k" (a lone "take" at capacity 1): the longest run allowed.
        takes = [b for b in take.branches if b.startswith("take")]
        self.take_ok = take.ones[take.branches.index(takes[min(run, len(takes)) - 1])]
        # The take's other outcomes (the source's error, the end, a close), in the model's order.
        self.take_other = tuple(take.ones[take.branches.index(b)] for b in ("error", "end", "closed"))


def _checked(nxt: Any) -> Any:
    if nxt is not None and type(nxt) is not tuple:  # a violation or a broken invariant: the model says no
        raise AssertionError(f"bare run: the model refused a step: {nxt!r}")
    return nxt


def _worker(s: _Steps, cond: threading.Condition, box: list, pool: list, fetch_into: Callable[[int, np.ndarray], Any],
            failure: list) -> None:
    """The worker thread: claim, fetch outside the lock, publish and claim the next in one section."""
    try:
        with cond:
            while (r := s.claim(box[0])) is None:
                cond.wait()
            box[0] = _checked(r[1])
            cond.notify()
        while True:
            st = box[0]
            if st[s.pw] == DONE:
                return
            fetch_into(st[s.i_idx], pool[st[s.i_slot]])
            with cond:
                box[0] = _checked(s.fetch_ok(box[0]))
                cond.notify()
                while (r := s.claim(box[0])) is None:
                    cond.wait()
                box[0] = _checked(r[1])
                cond.notify()
    except BaseException as e:  # noqa: BLE001 - raised on the consumer's side
        failure.append(e)
        with cond:
            cond.notify_all()


def bare_run(fetch_into: Callable[[int, np.ndarray], Any], n: int, capacity: int, shape: tuple[int, ...],
             dtype: Any, consume: Callable[[np.ndarray], None], run: int = 1) -> tuple:
    """Hand ``n`` items from a worker thread to the caller through the model's transitions; the final state.

    ``fetch_into(i, slot)`` fills a slot with item ``i``; ``consume(out)`` sees each item copied into one
    ``out`` array. ``run`` is the longest run the consumer takes per step (the model's "take up to
    ``run``"; the Prefetcher takes runs only for callers fast enough to use them).
    """
    s = _Steps(n, capacity, run)
    pool = [np.empty(shape, dtype) for _ in range(capacity)]
    out = np.empty(shape, dtype)
    cond = threading.Condition(threading.Lock())
    box = [s.init]
    failure: list[BaseException] = []
    th = threading.Thread(target=_worker, args=(s, cond, box, pool, fetch_into, failure), name="bare model worker",
                          daemon=True)
    th.start()
    take_ok, take_other, release = s.take_ok, s.take_other, s.release
    while True:
        with cond:
            while True:
                if failure:
                    raise failure[0]
                st = box[0]
                nxt = take_ok(st)
                for other in take_other if nxt is None else ():
                    if (nxt := other(st)) is not None:
                        break
                if nxt is not None:
                    break
                cond.wait()
            box[0] = st = _checked(nxt)
            cond.notify()
        if st[s.pc] != release.label:
            break  # the end (or the source's error, or a close): the consumer holds no lease
        lease = st[s.i_lease]
        last = len(lease) - 1
        for j, k in enumerate(lease):
            np.copyto(out, pool[k], casting="no")
            if j == last:  # the run is copied out: give its slots back before the caller's work, as ours does
                with cond:
                    box[0] = _checked(release.first(box[0])[1])
                    cond.notify()
            consume(out)
    th.join()
    if failure:
        raise failure[0]
    return box[0]

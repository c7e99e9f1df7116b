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

import functools
import threading
from typing import Any, Callable

import numpy as np

from .._dsl.model import DONE
from .live_common import slots_and_out

__all__ = ["BARE", "TRANSITIONS", "bare_run"]

#: The figures' name for it, beside the baselines.
BARE = "bare model"


#: The transitions a bare run can take: the generated ones (what the Prefetcher runs), and the in-place
#: rewrite of them (``live_layout.py``: the state a list updated in place, not a tuple rebuilt per step),
#: as Python and built by Cython. The in-place ones are the fastest transitions of this model measured
#: (``live_ceiling``'s K4 and K5); a bare run over them is the least any runtime of this design costs.
TRANSITIONS = ("generated", "in place", "in place, Cython")


@functools.lru_cache(maxsize=32)
def _in_place(capacity: int, transitions: str) -> Any:
    """The in-place rewrite of the transitions at this capacity, once per shape (as ``transitions_for``):
    rewriting and compiling them is no part of a run."""
    from .._prefetcher.machine import transitions_for
    from .live_ceiling import in_place_compiled
    from .live_layout import mutable_transitions

    cm = transitions_for(capacity, 1, True, True, 0, capacity)
    mt = mutable_transitions(cm) if transitions == "in place" else in_place_compiled(cm)
    if isinstance(mt, str):
        raise RuntimeError(mt)  # why Cython could not build them
    return mt


class _Steps:
    """The four steps a bare run takes, as transitions of the model at this shape (``TRANSITIONS``)."""

    def __init__(self, n: int, capacity: int, run: int, transitions: str = "generated"):
        from .._prefetcher.machine import machine_for, transitions_for

        if transitions not in TRANSITIONS:
            raise ValueError(f"transitions must be one of {', '.join(TRANSITIONS)}, not {transitions!r}")
        m = machine_for(capacity, 1, n, True, True, 0, capacity)
        cm = transitions_for(capacity, 1, True, True, 0, capacity)
        w, c = m.thread_names.index("worker0"), m.thread_names.index("consumer")
        self.pw, self.pc = m.pc_index[w], m.pc_index[c]
        f = m.field_names
        self.i_idx, self.i_slot = f.index("worker0.idx"), f.index("worker0.slot")
        self.i_lease = f.index("consumer.lease")
        if transitions == "generated":
            firsts = {(t, pc): g.first for t, table in enumerate(cm.steps) for pc, g in table.items()}
            ones = {(t, pc): g.ones for t, table in enumerate(cm.steps) for pc, g in table.items()}
            self.init, self.state_type, self.to_tuple = m.init, tuple, tuple
        else:
            mt = _in_place(capacity, transitions)
            firsts, ones = mt.firsts, mt.ones
            self.init, self.state_type, self.to_tuple = mt.to_list(m.init), list, mt.to_tuple

        def branch(t: int, pc: str, name: str) -> Callable[[Any], Any]:
            return ones[t, pc][cm.steps[t][pc].branches.index(name)]

        self.claim = firsts[w, "claim index and slot"]
        self.fetch_ok = branch(w, "fetch into slot", "ok")
        self.release, self.release_label = firsts[c, "release lease"], "release lease"
        # "take up to k" (a lone "take" at capacity 1): the longest run allowed.
        takes = [b for b in cm.steps[c]["take next batch"].branches if b.startswith("take")]
        self.take_ok = branch(c, "take next batch", takes[min(run, len(takes)) - 1])
        # The take's other outcomes (the source's error, the end, a close), in the model's order.
        self.take_other = tuple(branch(c, "take next batch", b) for b in ("error", "end", "closed"))

    def checked(self, nxt: Any) -> Any:
        if nxt is not None and type(nxt) is not self.state_type:  # a violation or a broken invariant
            raise AssertionError(f"bare run: the model refused a step: {nxt!r}")
        return nxt


def _worker(s: _Steps, cond: threading.Condition, box: list, pool: list, fetch_into: Callable[[int, np.ndarray], Any],
            failure: list) -> None:
    """The worker thread: claim, fetch outside the lock, publish and claim the next in one section."""
    try:
        with cond:
            while (r := s.claim(box[0])) is None:
                cond.wait()
            box[0] = s.checked(r[1])
            cond.notify()
        while True:
            st = box[0]
            if st[s.pw] == DONE:
                return
            fetch_into(st[s.i_idx], pool[st[s.i_slot]])
            with cond:
                box[0] = s.checked(s.fetch_ok(box[0]))
                cond.notify()
                while (r := s.claim(box[0])) is None:
                    cond.wait()
                box[0] = s.checked(r[1])
                cond.notify()
    except BaseException as e:  # noqa: BLE001 - raised on the consumer's side
        failure.append(e)
        with cond:
            cond.notify_all()


def bare_run(fetch_into: Callable[[int, np.ndarray], Any], n: int, capacity: int, shape: tuple[int, ...],
             dtype: Any, consume: Callable[[np.ndarray], None], run: int = 1, transitions: str = "generated",
             pool: list[np.ndarray] | None = None, out: np.ndarray | None = None) -> tuple:
    """Hand ``n`` items from a worker thread to the caller through the model's transitions; the final state.

    ``fetch_into(i, slot)`` fills a slot with item ``i``; ``consume(out)`` sees each item copied into one
    ``out`` array. ``run`` is the longest run the consumer takes per step (the model's "take up to
    ``run``"; the Prefetcher takes runs only for callers fast enough to use them). ``transitions``: one of
    ``TRANSITIONS``. The final state is returned as a tuple whatever the transitions' layout. ``pool`` (one
    array per slot) and ``out``, when given, are used instead of new arrays (already touched: no page
    faults in a timed run).
    """
    s = _Steps(n, capacity, run, transitions)
    pool, out = slots_and_out(capacity, shape, dtype, pool, out)
    cond = threading.Condition(threading.Lock())
    box = [s.init]
    failure: list[BaseException] = []
    th = threading.Thread(target=_worker, args=(s, cond, box, pool, fetch_into, failure), name="bare model worker",
                          daemon=True)
    th.start()
    take_ok, take_other, release, checked = s.take_ok, s.take_other, s.release, s.checked
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
            box[0] = st = checked(nxt)
            cond.notify()
        if st[s.pc] != s.release_label:
            break  # the end (or the source's error, or a close): the consumer holds no lease
        lease = st[s.i_lease]
        last = len(lease) - 1
        for j, k in enumerate(lease):
            np.copyto(out, pool[k], casting="no")
            if j == last:  # the run is copied out: give its slots back before the caller's work, as ours does
                with cond:
                    box[0] = checked(release(box[0])[1])
                    cond.notify()
            consume(out)
    th.join()
    if failure:
        raise failure[0]
    return s.to_tuple(box[0])

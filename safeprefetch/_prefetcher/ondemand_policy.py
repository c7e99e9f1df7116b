"""From predictions to speculation steps: which of the moves the checked model allows are worth making.

The model lets the caller speculate on any tag, cancel or evict any
speculation, at any moment (tests/test_predictive_model.py proves every
sequence safe), so nothing here can break the protocol: it only decides
what to fetch ahead. At each request for index ``i``, before ``i`` itself is
asked for (so the workers start on the proposals while a miss is fetched):

1. the predictor observes ``i`` and proposes up to ``depth`` indices, most
   likely first (``depth`` is at most ``capacity - 1``: a slot stays for the
   request itself); proposals outside ``0..length-1`` are dropped, and one
   that is not an int is a TypeError (a float ``2.0`` equals ``2``: a slot
   fetched as ``source[2.0]`` would answer every request for 2);
2. a speculation no longer proposed is dropped: *cancelled* if queued (no
   fetch was spent) or in flight (its result is discarded when it lands),
   and *evicted* if ready -- but only when its slot is needed, since a ready
   batch may still be asked for;
3. each proposal not held yet is *speculated* into a free slot (queued for
   the workers in the predictor's order), and a proposal whose fetch was
   cancelled in flight is *uncancelled* instead of fetched twice.

A slot is kept free for the request itself when it is a miss, so the miss
does not evict the speculation just made for it. Every step is taken with
the branches that replace it if a worker moved the slot on since the
caller looked (a queued claim started, a fetch landed): a cancel becomes an
evict, an uncancel a speculate. None of them parks.

The predictor is the caller's code, like its source: a custom one may be
slow, or never return. So it is asked in an interruptible frame (``ask``),
where Ctrl-C raises at once, as in the caller's own demand fetch, instead
of being deferred to the end of the call like the rest of it (its proposals
are taken there too: ``predict`` may return a generator, whose body is the
predictor's code). It is asked before the request's first step, with the
gate held and the model consumer at "request or predict": an interrupt
there leaves nothing half done, and the call simply did not happen (the next
call for the same index asks the predictor again, so it may observe that
index twice).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from .._dsl.model import DONE
from .._runtime.interrupts import deliver, guard, interruptible
from ..models import _predictive_protocol as Q
from .predictors import Predictor, label

__all__ = ["holdings", "read_limit", "speculate"]

_DROPPABLE = (Q.QUEUED, Q.FILLING)
_EVICTABLE = (Q.READY, Q.FAILED)


def speculate(core: Any, index: int) -> None:
    """Observe ``index``, then queue, cancel and evict speculation to match the predictor's proposals."""
    proposals = ask(core, index)
    if proposals is None:
        return
    wanted = set(proposals)
    wanted.add(index)
    rt, c = core.rt, core.consumer
    index_of = core.index_of
    # Drop queued and in-flight speculation nobody predicts any more.
    for k, (st, tag) in enumerate(rt.state[core.i_slots]):
        if (st == Q.QUEUED or st == Q.FILLING) and index_of[tag] not in wanted:
            rt.step(c, core.branches_drop[k])
            if rt.state[core.i_consumer_pc] == DONE:
                return
    for p in proposals:
        slots = rt.state[core.i_slots]
        tag = core.tag_of.get(p)
        held = holdings(core, slots).get(tag) if tag is not None else None
        if held == Q.CANCELLED:
            rt.step(c, core.branches_uncancel[tag])
        elif held is not None:
            continue  # queued, in flight or ready already
        else:
            if not _room(core, slots, index, wanted):
                return
            tag = core.tag_for(p, rt.state[core.i_slots])
            rt.step(c, core.branches_speculate[tag])
        if rt.state[core.i_consumer_pc] == DONE:
            return


def read_limit(depth: int) -> int:
    """How many of a predictor's proposals one request reads at most, for ``depth`` slots to fill."""
    return 4 * depth + 16


@interruptible
def ask(core: Any, index: int) -> list[int] | None:
    """The predictor observes ``index``; its proposals, checked (None: it predicts nothing). Ctrl-C raises in
    here at once (see the module doc), and a Ctrl-C deferred earlier in the call is delivered first, as at
    any interruptible point."""
    if guard.deferred:
        deliver()
    predictor = core.predictor
    predictor.observe(index)
    depth = core.depth
    if depth <= 0 or type(predictor) is Predictor:  # the base predicts nothing (a subclass may keep its name)
        return None
    proposals: list[int] = []
    seen: set[int] = set()
    # At most read_limit(depth) proposals are read: a predictor that proposes only indices it cannot have
    # (out of range, the one just asked for) forever hung the request, past its timeout.
    predicted = predictor.predict(depth)
    try:
        predicted = iter(predicted)
    except TypeError:  # (a predict() that forgot its return: "'NoneType' object is not iterable", naming nothing)
        raise TypeError(f"predictor {label(predictor)}: predict({depth}) returned {predicted!r} "
                        f"({type(predicted).__name__}); it must return the indices to fetch next (an iterable "
                        "of ints, possibly empty)") from None
    for p in itertools.islice(predicted, read_limit(depth)):
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
            raise TypeError(f"predictor {label(predictor)} proposed {p!r} ({type(p).__name__}); a proposal is an "
                            "index: an int")
        p = int(p)
        if p != index and 0 <= p < core.length and p not in seen:  # a repeat would take another slot's place
            seen.add(p)
            proposals.append(p)
            if len(proposals) >= depth:
                break
    return proposals


def holdings(core: Any, slots: tuple) -> dict[int, Any]:
    """Each tag a slot holds -> that slot's state (the first such slot's, in slot order; an EMPTY slot holds
    nothing).

    Built once per value of ``slots`` and kept on the core (by the gate's owner only): a request looks up
    every proposal, and scanning the slots for each made a request cost capacity x depth. The state is
    immutable, so the same tuple object means the same holdings; the cache keeps the tuple alive, so its
    identity is not reused.
    """
    cached = core.holdings_cache
    if cached[0] is slots:
        return cached[1]
    held = {t: st for st, t in reversed(slots) if st != Q.EMPTY}  # reversed: the first slot's state wins
    core.holdings_cache = (slots, held)
    return held


def _room(core: Any, slots: tuple, index: int, wanted: set) -> bool:
    """Whether a slot is free for one more speculation (evicting a ready batch nobody predicts, if need be)."""
    free = slots.count(Q.FREE)
    tag = core.tag_of.get(index)
    reserve = 1 if tag is None or tag not in holdings(core, slots) else 0  # the request will be a miss: keep it a slot
    if free > reserve:
        return True
    index_of = core.index_of
    for k, (st, t) in enumerate(slots):
        if (st == Q.READY or st == Q.FAILED) and index_of[t] not in wanted:
            core.rt.step(core.consumer, core.branches_drop[k])
            box = core.source_ref()
            if st == Q.FAILED and box is not None:
                # The evicted failure's exception, and the frames its traceback holds, go with it (kept, they
                # lived until the slot failed again or the prefetcher was collected).
                box.errors.pop(k, None)
            return core.rt.state[core.i_consumer_pc] != DONE and core.rt.state[core.i_slots].count(Q.FREE) > reserve
    return False

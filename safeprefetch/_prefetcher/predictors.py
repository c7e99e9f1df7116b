"""Predictors: which indices an on-demand caller will ask for next.

An :class:`~safeprefetch.OnDemandPrefetcher` tells its predictor every index
the caller asks for (:meth:`Predictor.observe`), then asks it for the
indices worth fetching ahead (:meth:`Predictor.predict`, most likely first).
A predictor is pure bookkeeping: no threads, no arrays, no clock. It cannot
break the prefetcher -- the checked protocol allows every speculation at
every moment -- it can only waste fetches by guessing wrong; measuring that
is ``bench predict``'s job (docs/predictive.md). Its calls run on the
caller's thread, where Ctrl-C raises inside them at once (a custom predictor
may be slow or hang): a call cut short anywhere must leave the predictor
consistent, if not exact. The four here do (tests/test_hardening_review6.py
interrupts them at every point).

The four are the classic software renderings of hardware prefetchers:

* :class:`SequentialPredictor` -- next-N (one-block lookahead, generalised:
  Smith, "Sequential program prefetching in memory hierarchies", IEEE
  Computer 1978).
* :class:`StridePredictor` -- a constant stride per stream, with the
  reference prediction table's confidence states (Chen and Baer, "Effective
  hardware-based data prefetching for high-performance processors", IEEE TC
  1995). Hardware tags a stream by the load's program counter; an index
  stream has none, so an access joins the stream it continues exactly, else
  the stream whose last index is nearest (within ``window``), else starts a
  new one, as stream buffers allocate (Jouppi, ISCA 1990; Palacharla and
  Kessler, ISCA 1994). Several interleaved streams are tracked at once.
* :class:`MarkovPredictor` -- a first-order transition table over indices
  with a bounded number of entries (LRU) and successors per entry (Joseph and
  Grunwald, "Prefetching using Markov predictors", ISCA 1997); it predicts
  the most probable next accesses, looking further ahead along the likeliest
  paths when the depth allows.
* :class:`AdaptivePredictor` -- runs the other three side by side without
  fetching for them, scores each one's predictions against what the caller
  really asks for over a window, follows the best, and throttles its depth
  with its measured precision, down to no prefetching at all when nothing
  predicts the workload (feedback-directed prefetching: Srinath et al., HPCA
  2007).

Every predictor drops indices outside ``0..length-1`` and repeats; none
predicts the index just observed.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from typing import Any, Callable

__all__ = ["AdaptivePredictor", "MarkovPredictor", "PREDICTORS", "Predictor", "SequentialPredictor",
           "StridePredictor", "label", "make_predictor"]


class Predictor:
    """The interface: ``observe(index)`` for every request, ``predict(depth)`` for what to fetch next.

    Subclasses keep their state bounded: a predictor runs for the life of
    the prefetcher, over any number of requests. Both methods run on the
    caller's thread, where Ctrl-C may cut either short at any point: keep
    the state consistent then (the request is asked again, so ``observe``
    may see its index twice).
    """

    #: The name ``OnDemandPrefetcher(predict=...)`` accepts for it, and stats show (a subclass that
    #: keeps "none" is shown by its class name; only this base class itself predicts nothing).
    name = "none"

    def __init__(self, length: int | None = None):
        #: Indices are ``0..length-1`` (None: unbounded).
        self.length = length

    def observe(self, index: int) -> None:
        """The caller asked for ``index``."""

    def predict(self, depth: int) -> list[int]:
        """Up to ``depth`` indices the caller is likely to ask for next, most likely first."""
        return []

    def _keep(self, out: list[int], seen: set[int], index: int, depth: int) -> bool:
        """Append ``index`` if it is new and in range; False once ``out`` holds ``depth`` indices."""
        if index not in seen and 0 <= index and (self.length is None or index < self.length):
            seen.add(index)
            out.append(index)
        return len(out) < depth

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


class SequentialPredictor(Predictor):
    """Next-N: after index i, predict i+1, i+2, ... i+depth."""

    name = "sequential"

    def __init__(self, length: int | None = None):
        super().__init__(length)
        self.last: int | None = None

    def observe(self, index: int) -> None:
        self.last = index

    def predict(self, depth: int) -> list[int]:
        out: list[int] = []
        if self.last is None or depth <= 0:
            return out
        seen = {self.last}
        for k in range(1, depth + 1):
            if not self._keep(out, seen, self.last + k, depth):
                break
        return out


class _Stream:
    __slots__ = ("last", "stride", "state")

    def __init__(self, last: int):
        self.last, self.stride, self.state = last, 0, INITIAL


# The reference prediction table's states (Chen and Baer): a stream predicts only when STEADY,
# which takes two accesses in a row at the same stride, and one irregular access in a steady
# stream costs it its confidence (back to INITIAL) but not its stride.
INITIAL, TRANSIENT, STEADY, NO_PRED = "initial", "transient", "steady", "no-prediction"
_ON_CORRECT = {INITIAL: STEADY, TRANSIENT: STEADY, STEADY: STEADY, NO_PRED: TRANSIENT}
_ON_WRONG = {INITIAL: TRANSIENT, TRANSIENT: NO_PRED, STEADY: INITIAL, NO_PRED: NO_PRED}


class StridePredictor(Predictor):
    """Constant strides, per stream, with confidence; several interleaved streams at once.

    ``streams`` entries are kept (least recently used replaced). An access
    that continues a stream exactly (``last + stride``) confirms it; else it
    trains the stream whose last index is nearest, within ``window``; else
    it starts a new stream. Predictions interleave the steady streams, least
    recently used first (in a round-robin interleaving, that is the one asked
    for next): ``b+s, a+t, b+2s, a+2t, ...``.
    """

    name = "stride"

    def __init__(self, length: int | None = None, streams: int = 8, window: int = 4096):
        super().__init__(length)
        if streams < 1 or window < 1:
            raise ValueError("StridePredictor needs streams >= 1 and window >= 1")
        self.window = window
        self.max_streams = streams
        self.streams: OrderedDict[int, _Stream] = OrderedDict()  # id -> stream, least recently used first
        self._next_id = 0

    def observe(self, index: int) -> None:
        streams = self.streams
        for sid, s in streams.items():
            if s.stride and s.last + s.stride == index:
                s.state, s.last = _ON_CORRECT[s.state], index
                streams.move_to_end(sid)
                return
        for sid, s in streams.items():
            if s.last == index:
                # The same index again (a retry after a timeout or a Ctrl-C, a revisited example): a touch,
                # not news. It used to start a new stream, pushing out a steady one per repeat.
                streams.move_to_end(sid)
                return
        near, gap = None, self.window + 1
        for sid, s in streams.items():
            d = abs(index - s.last)
            if 0 < d < gap:
                near, gap = sid, d
        if near is not None:
            s = streams[near]
            if s.state != STEADY:  # a steady stream keeps its stride through one irregular access
                s.stride = index - s.last
            s.state, s.last = _ON_WRONG[s.state], index
            streams.move_to_end(near)
            return
        if len(streams) >= self.max_streams:
            streams.popitem(last=False)
        streams[self._next_id] = _Stream(index)
        self._next_id += 1

    def predict(self, depth: int) -> list[int]:
        out: list[int] = []
        steady = [s for s in self.streams.values() if s.state == STEADY and s.stride]
        if not steady or depth <= 0:
            return out
        seen = {s.last for s in steady}
        for k in range(1, depth + 1):
            for s in steady:
                if not self._keep(out, seen, s.last + k * s.stride, depth):
                    return out
        return out


class MarkovPredictor(Predictor):
    """A first-order Markov model of the access stream, in bounded memory.

    The table maps an index to the counts of the indices that followed it:
    at most ``entries`` indices (least recently used evicted), each with at
    most ``ways`` successors (a new successor replaces the rarest). To
    predict, it walks the table best-first from the last index: the most
    probable next accesses (one step ahead, then along the likeliest paths
    when ``depth`` allows more), dropping paths less probable than
    ``min_probability``.
    """

    name = "markov"

    def __init__(self, length: int | None = None, entries: int = 65536, ways: int = 4,
                 min_probability: float = 0.05):
        super().__init__(length)
        if entries < 1 or ways < 1:
            raise ValueError("MarkovPredictor needs entries >= 1 and ways >= 1")
        self.entries, self.ways, self.min_probability = entries, ways, min_probability
        self.table: OrderedDict[int, dict[int, int]] = OrderedDict()
        self.last: int | None = None

    def observe(self, index: int) -> None:
        prev, self.last = self.last, index
        if prev is None:
            return
        table = self.table
        succ = table.get(prev)
        if succ is None:
            if len(table) >= self.entries:
                table.popitem(last=False)
            succ = table[prev] = {}
        else:
            table.move_to_end(prev)
        if index in succ:
            succ[index] += 1
        elif len(succ) < self.ways:
            succ[index] = 1
        else:
            rarest = min(succ, key=succ.__getitem__)
            del succ[rarest]
            succ[index] = 1

    def successors(self, index: int) -> list[tuple[float, int]]:
        """``(probability, successor)`` of ``index``, most probable first."""
        succ = self.table.get(index)
        if not succ:
            return []
        total = sum(succ.values())
        return sorted(((n / total, j) for j, n in succ.items()), key=lambda x: (-x[0], x[1]))

    def predict(self, depth: int) -> list[int]:
        if self.last is None or depth <= 0:
            return []
        return best_first(self.last, self.successors, depth, self.min_probability, self._keep)


def best_first(start: int, successors: Callable[[int], list[tuple[float, int]]], depth: int, floor: float,
               keep: Callable[[list[int], set[int], int, int], bool]) -> list[int]:
    """The ``depth`` most probable indices reachable from ``start``, by path probability (a best-first walk)."""
    out: list[int] = []
    seen = {start}
    heap = [(-p, j) for p, j in successors(start) if p >= floor]
    heapq.heapify(heap)
    pops = 0
    while heap and pops < 8 * depth:  # bounded: each pop adds at most ``ways`` entries
        negp, j = heapq.heappop(heap)
        pops += 1
        if j in seen:
            continue
        if not keep(out, seen, j, depth):
            break
        for p, k in successors(j):
            if -negp * p >= floor and k not in seen:
                heapq.heappush(heap, (negp * p, k))
    return out


class _Score:
    """One candidate's predictions, scored against what the caller really asked for.

    A prediction's fate is recorded when its horizon ends, used or not, in
    the order the predictions were made: recording a use at once and a waste
    only ``horizon`` requests later would make every young candidate look
    precise.
    """

    __slots__ = ("predictor", "pending", "expiry", "outcomes", "covered")

    def __init__(self, predictor: Predictor, window: int):
        self.predictor = predictor
        self.pending: dict[int, list] = {}                # predicted index -> [request number, used, index]
        self.expiry: deque[list] = deque()                # every entry, oldest first
        self.outcomes: deque[bool] = deque(maxlen=window)  # per settled prediction: used within the horizon?
        self.covered: deque[bool] = deque(maxlen=window)   # per request: had it been predicted?

    def score(self, index: int, n: int, horizon: int) -> None:
        """Request number ``n`` asked for ``index``: score it, and settle predictions older than ``horizon``."""
        entry = self.pending.pop(index, None)
        self.covered.append(entry is not None)
        if entry is not None:
            entry[1] = True
        expiry = self.expiry
        while expiry and n - expiry[0][0] > horizon:
            entry = expiry.popleft()
            self.outcomes.append(entry[1])
            # Only if it is this entry: a Ctrl-C right after the ``pop`` above (the predictor is the
            # caller's code, interruptible) leaves an entry popped and not yet marked used.
            if not entry[1] and self.pending.get(entry[2]) is entry:
                del self.pending[entry[2]]

    def predicted(self, indices: list[int], n: int) -> None:
        for j in indices:
            if j not in self.pending:
                entry = [n, False, j]
                self.pending[j] = entry
                self.expiry.append(entry)

    def precision(self) -> float:
        return sum(self.outcomes) / len(self.outcomes) if self.outcomes else 0.0

    def coverage(self) -> float:
        return sum(self.covered) / len(self.covered) if self.covered else 0.0


class AdaptivePredictor(Predictor):
    """Follow whichever predictor is right on this workload; predict nothing when none is.

    Every candidate (sequential, stride, Markov) sees every request and
    predicts ``max_depth`` indices each time, without fetching anything. A
    prediction counts as *used* if the caller asks for it within ``horizon``
    requests, *wasted* otherwise; over the last ``window`` of each, a
    candidate has a precision (used / predicted) and a coverage (requests it
    had predicted / requests). The best candidate is the one with the
    highest coverage among those at least ``min_precision`` precise and
    ``min_coverage`` covering. Its depth is ``max_depth`` scaled by its
    precision, and zero -- no prefetching, no bandwidth spent -- while no
    candidate qualifies, or before ``warmup`` requests have been scored.
    """

    name = "adaptive"

    def __init__(self, length: int | None = None, candidates: list[Predictor] | None = None, max_depth: int = 8,
                 window: int = 64, horizon: int = 16, min_precision: float = 0.4, min_coverage: float = 0.1,
                 warmup: int = 8):
        super().__init__(length)
        if (max_depth < 0 or window < 1 or horizon < 1 or warmup < 0 or not 0 <= min_precision <= 1
                or not 0 <= min_coverage <= 1):
            raise ValueError("AdaptivePredictor needs max_depth >= 0, window >= 1, horizon >= 1, warmup >= 0, "
                             "0 <= min_precision <= 1 and 0 <= min_coverage <= 1")
        if candidates is None:
            candidates = [SequentialPredictor(length), StridePredictor(length), MarkovPredictor(length)]
        self.scores = [_Score(p, window) for p in candidates]
        self.max_depth, self.horizon, self.warmup = max_depth, horizon, warmup
        self.min_precision, self.min_coverage = min_precision, min_coverage
        self.requests = 0
        #: The candidate followed now (None: none is good enough), and the depth it is given.
        self.chosen: Predictor | None = None
        self.depth = 0

    def observe(self, index: int) -> None:
        n = self.requests = self.requests + 1
        for sc in self.scores:
            sc.score(index, n, self.horizon)
            sc.predictor.observe(index)
            sc.predicted(sc.predictor.predict(self.max_depth), n)
        self._choose()

    def _choose(self) -> None:
        best, best_cov = None, -1.0
        if self.requests >= self.warmup:
            for sc in self.scores:
                cov = sc.coverage()
                if sc.outcomes and sc.precision() >= self.min_precision and cov >= self.min_coverage and cov > best_cov:
                    best, best_cov = sc, cov
        if best is None:
            self.chosen, self.depth = None, 0
        else:
            self.chosen = best.predictor
            self.depth = max(1, math.floor(self.max_depth * best.precision()))

    def predict(self, depth: int) -> list[int]:
        if self.chosen is None:
            return []
        return self.chosen.predict(min(depth, self.depth))

    def __repr__(self) -> str:
        chosen = self.chosen.name if self.chosen is not None else "none"
        return f"<AdaptivePredictor following {chosen}, depth {self.depth}>"


#: ``OnDemandPrefetcher(predict=NAME)``: the predictor each name makes.
PREDICTORS: dict[str, type[Predictor]] = {
    "none": Predictor, "sequential": SequentialPredictor, "stride": StridePredictor, "markov": MarkovPredictor,
    "adaptive": AdaptivePredictor,
}


def label(predictor: Predictor) -> str:
    """The name stats and repr show: ``name``, or the class's for a subclass that kept the base's "none"."""
    if predictor.name == "none" and type(predictor) is not Predictor:
        return type(predictor).__name__
    return predictor.name


def make_predictor(predict: Any, length: int) -> Predictor:
    """The predictor ``predict`` names (None, a name of :data:`PREDICTORS`), or ``predict`` itself if it is one."""
    if predict is None:
        return Predictor(length)
    if isinstance(predict, Predictor):
        return predict
    if isinstance(predict, str):
        cls = PREDICTORS.get(predict)
        if cls is None:
            raise ValueError(f"predict must be None, one of {', '.join(repr(n) for n in PREDICTORS)}, "
                             f"or a Predictor; got {predict!r}")
        return cls(length)
    raise TypeError(f"predict must be None, a name ({', '.join(PREDICTORS)}) or a Predictor, "
                    f"not {type(predict).__name__}")

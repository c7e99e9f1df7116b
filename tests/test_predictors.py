"""The four predictors on synthetic traces: what each predicts, its bounds, and its hit rate where it should win.

No threads here: a predictor is pure bookkeeping. ``replay`` plays a trace
the way the OnDemandPrefetcher does -- observe the request, then predict --
and counts a hit when the next request was among the predictions.
"""

import numpy as np
import pytest

from safeprefetch import AdaptivePredictor, MarkovPredictor, Predictor, SequentialPredictor, StridePredictor
from safeprefetch._prefetcher.predictors import INITIAL, STEADY, TRANSIENT, make_predictor


def replay(predictor, trace, depth=7):
    hits, predicted = 0, set()
    for i in trace:
        hits += i in predicted
        predictor.observe(i)
        out = predictor.predict(depth)
        assert len(out) == len(set(out)) <= depth and i not in out
        predicted = set(out)
    return hits / len(trace)


def interleaved(n, *streams):
    """Round-robin over arithmetic streams given as (start, stride)."""
    return [start + k * stride for k in range(n) for start, stride in streams]


RNG = np.random.default_rng(0)
UNIFORM = [int(x) for x in RNG.integers(0, 1_000_000, 2000)]


# -- sequential ---------------------------------------------------------------------------------


def test_sequential_predicts_the_next_n_within_the_source():
    p = SequentialPredictor(length=10)
    assert p.predict(3) == []
    p.observe(4)
    assert p.predict(3) == [5, 6, 7]
    p.observe(8)
    assert p.predict(5) == [9]  # nothing past the end
    assert p.predict(0) == []


def test_sequential_wins_on_a_scan_and_loses_on_random_requests():
    assert replay(SequentialPredictor(), range(1000)) > 0.99
    assert replay(SequentialPredictor(), UNIFORM) < 0.01


# -- stride -------------------------------------------------------------------------------------


def test_a_stream_predicts_only_once_its_stride_is_confirmed():
    p = StridePredictor()
    p.observe(100)
    assert p.predict(4) == []                      # one access: no stride
    p.observe(105)
    assert p.predict(4) == []                      # a stride, seen once (transient)
    assert list(p.streams.values())[0].state == TRANSIENT
    p.observe(110)
    assert p.predict(4) == [115, 120, 125, 130]    # confirmed: steady
    assert list(p.streams.values())[0].state == STEADY


def test_one_irregular_access_costs_a_steady_stream_its_confidence_not_its_stride():
    p = StridePredictor()
    for i in (0, 4, 8, 12):
        p.observe(i)
    p.observe(13)                                  # off by one
    s = list(p.streams.values())[0]
    assert s.state == INITIAL and s.stride == 4 and p.predict(3) == []
    p.observe(17)                                  # back on stride (from the new last index)
    assert s.state == STEADY and p.predict(2) == [21, 25]


def test_negative_strides_and_the_lower_bound():
    p = StridePredictor(length=1000)
    for i in (20, 15, 10):
        p.observe(i)
    assert p.predict(4) == [5, 0]


def test_two_interleaved_streams_are_tracked_apart_and_predicted_in_turn():
    p = StridePredictor()
    for i in interleaved(4, (0, 3), (50_000, 7)):
        p.observe(i)
    # After b's access, a is the stream asked for next: it comes first.
    assert p.predict(4) == [12, 50_028, 15, 50_035]
    assert replay(StridePredictor(), interleaved(500, (0, 3), (50_000, 7))) > 0.98
    assert replay(StridePredictor(), interleaved(300, (0, 2), (10_000, 5), (20_000, -3), (90_000, 11))) > 0.97


def test_the_stream_table_is_bounded_least_recently_used_first():
    p = StridePredictor(streams=2, window=10)
    for i in (0, 1000, 2000):
        p.observe(i)
    assert sorted(s.last for s in p.streams.values()) == [1000, 2000]
    with pytest.raises(ValueError):
        StridePredictor(streams=0)


def test_stride_finds_nothing_in_random_requests():
    assert replay(StridePredictor(), UNIFORM) < 0.01


# -- Markov -------------------------------------------------------------------------------------


def test_markov_learns_a_repeating_walk_and_predicts_its_successor():
    cycle = [int(x) for x in RNG.permutation(10_000)[:50]]
    p = MarkovPredictor()
    for i in cycle * 2:
        p.observe(i)
    assert p.predict(1) == [cycle[0]]  # the walk wraps around
    assert p.predict(3) == cycle[0:3]  # lookahead along the likeliest path
    assert replay(MarkovPredictor(), cycle * 10) > 0.85


def test_markov_orders_successors_by_count_and_drops_unlikely_paths():
    p = MarkovPredictor(min_probability=0.2)
    for a, b in [(1, 2)] * 6 + [(1, 3)] * 3 + [(1, 4)]:
        p.observe(a)
        p.observe(b)
    p.observe(1)
    assert [j for _pr, j in p.successors(1)] == [2, 3, 4]
    assert p.predict(3)[:2] == [2, 3]
    assert 4 not in p.predict(3)  # 0.1 < min_probability


def test_markov_memory_is_bounded_in_entries_and_ways():
    p = MarkovPredictor(entries=8, ways=2)
    for i in range(1000):
        p.observe(int(RNG.integers(0, 100)))
    assert len(p.table) <= 8 and all(len(s) <= 2 for s in p.table.values())
    p = MarkovPredictor(ways=2)
    for b in (5, 5, 6, 7):  # 7 replaces the rarest successor (6)
        p.observe(1)
        p.observe(b)
    assert set(p.table[1]) == {5, 7}
    with pytest.raises(ValueError):
        MarkovPredictor(entries=0)


def test_markov_reaches_most_of_what_a_chain_allows():
    """A chain whose states have successors .7/.2/.1: predicting 2 of them allows ~90% hits; Markov learns it."""
    rng = np.random.default_rng(3)
    nodes = [int(x) for x in rng.choice(100_000, 20, replace=False)]
    succ = {a: rng.choice([b for b in nodes if b != a], 3, replace=False) for a in nodes}
    walk, at = [], nodes[0]
    for _ in range(4000):
        walk.append(at)
        at = int(succ[at][rng.choice(3, p=[0.7, 0.2, 0.1])])
    assert replay(MarkovPredictor(), walk, depth=2) > 0.8 * 0.9


# -- adaptive -----------------------------------------------------------------------------------


@pytest.mark.parametrize("trace, winner", [
    (list(range(2000)), "sequential"),
    (interleaved(1000, (0, 3), (50_000, 7)), "stride"),
    ([int(x) for x in RNG.permutation(100_000)[:40]] * 30, "markov"),
])
def test_adaptive_follows_the_predictor_made_for_the_workload(trace, winner):
    p = AdaptivePredictor()
    rate = replay(p, trace)
    assert p.chosen is not None and p.chosen.name == winner, p
    assert rate > 0.9
    assert p.depth == p.max_depth


def test_adaptive_predicts_nothing_on_random_requests():
    p = AdaptivePredictor()
    predictions = 0
    for i in UNIFORM:
        p.observe(i)
        predictions += len(p.predict(7))
    assert predictions == 0 and p.chosen is None and p.depth == 0


def test_adaptive_throttles_to_nothing_when_the_pattern_stops():
    p = AdaptivePredictor(window=32, horizon=8)
    for i in range(300):
        p.observe(i)
    assert p.depth == p.max_depth
    depths = []
    for i in UNIFORM[:200]:
        p.observe(i)
        depths.append(p.depth)
    assert depths[-1] == 0 and p.predict(7) == []
    assert min(depths[:40]) < p.max_depth  # it shrank on its way down, not all at once at the end


def test_adaptive_waits_for_evidence_before_predicting():
    p = AdaptivePredictor(warmup=8, horizon=4)
    for i in range(4):
        p.observe(i)
        assert p.predict(7) == []


def test_make_predictor_names_and_errors():
    assert type(make_predictor(None, 10)) is Predictor and make_predictor("none", 10).predict(3) == []
    for name, cls in (("sequential", SequentialPredictor), ("stride", StridePredictor), ("markov", MarkovPredictor),
                      ("adaptive", AdaptivePredictor)):
        p = make_predictor(name, 10)
        assert type(p) is cls and p.length == 10 and p.name == name
    mine = SequentialPredictor()
    assert make_predictor(mine, 10) is mine
    with pytest.raises(ValueError, match="predict must be"):
        make_predictor("lstm", 10)
    with pytest.raises(TypeError, match="predict must be"):
        make_predictor(1.5, 10)
    with pytest.raises(ValueError):
        AdaptivePredictor(min_precision=2)

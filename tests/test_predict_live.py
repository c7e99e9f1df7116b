"""The OnDemandPrefetcher on real threads: every request served its own index, and the protocol's promises kept.

Each test waits on observable state (``pf.slots()``, the runtime's parked
threads, events the source sets), never on a fixed sleep, and every step a
run takes is checked against the model (``verify_record``).
"""

import gc
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safeprefetch import (OnDemandPrefetcher, OnDemandStats, Predictor, PrefetchTimeout, PrefetcherClosed,
                          SequentialPredictor)
from safeprefetch.lowlevel import verify_record
from safeprefetch.testing import recording_runtimes, thread_count
from _polling import wait_until

pytestmark = [pytest.mark.live, pytest.mark.timeout(60)]

SHAPE = (3,)


class Boom(Exception):
    pass


class Source:
    """Map-style: item i is ``[i, i, i]``; items in ``bad`` raise Boom; fetches on a worker thread of an index in
    ``held`` wait for ``release`` (the caller's own fetches never wait)."""

    def __init__(self, n=1000, bad=(), held=()):
        self.n, self.bad, self.held = n, set(bad), set(held)
        self.release = threading.Event()
        self.started: list[int] = []
        self.calls: list[tuple[str, int]] = []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        on_worker = "worker" in threading.current_thread().name
        self.calls.append(("worker" if on_worker else "caller", i))
        if on_worker and i in self.held:
            self.started.append(i)
            self.release.wait(10)
        if i in self.bad:
            raise Boom(i)
        return np.full(SHAPE, i, np.float32)


class Fixed(Predictor):
    """Predicts whatever the test put in ``next``."""

    name = "fixed"

    def __init__(self):
        super().__init__(None)
        self.next: list[int] = []

    def predict(self, depth):
        return self.next[:depth]


def held(pf, state):
    """Indices in slots of ``state`` (a slot state name)."""
    return sorted(i for s, i in pf.slots() if s == state)


@pytest.fixture
def recorded():
    with recording_runtimes() as runtimes:
        yield runtimes
    for rt in runtimes:
        report = verify_record(rt.machine, rt.record)
        assert report.ok, report.message


@pytest.mark.parametrize("predict", [None, "sequential", "stride", "markov", "adaptive"])
def test_every_request_gets_its_own_index_in_any_order(predict, recorded):
    rng = np.random.default_rng(0)
    order = list(range(60)) + list(rng.integers(0, 200, 60)) + list(range(150, 90, -3))
    out = np.empty(SHAPE, np.float32)
    with OnDemandPrefetcher(Source(200), capacity=4, workers=2, predict=predict) as pf:
        for n, i in enumerate(order):
            if n % 2:
                pf.copy_into(i, out)
                assert (out == i).all()
            else:
                assert (pf.get(i) == i).all()
        stats = pf.stats
    assert isinstance(stats, OnDemandStats) and stats.requests == len(order)
    assert stats.hits + stats.late_hits + stats.misses == len(order)


def test_a_sequential_scan_is_served_by_prediction(recorded):
    src = Source(300)
    with OnDemandPrefetcher(src, capacity=6, workers=2, predict="sequential") as pf:
        for i in range(300):
            assert pf.get(i)[0] == i
            # A caller slower than the source: the next batch is ready before it asks.
            assert wait_until(lambda n=i + 1: n in held(pf, "READY") or n == 300)
        stats = pf.stats
    assert stats.hits == 299 and stats.misses == 1, stats
    assert stats.verdict == "paying" and "paying for itself" in str(stats)
    assert sum(1 for who, _ in src.calls if who == "worker") == stats.speculative_fetches


def test_a_demand_miss_is_fetched_at_once_while_every_worker_is_busy_speculating(recorded):
    src = Source(100, held={1, 2})
    pred = Fixed()
    with OnDemandPrefetcher(src, capacity=4, workers=2, predict=pred) as pf:
        pred.next = [1, 2, 3]
        assert pf.get(0)[0] == 0
        assert wait_until(lambda: sorted(src.started) == [1, 2])  # both workers stuck in speculative fetches
        assert held(pf, "FILLING") == [1, 2] and held(pf, "QUEUED") == [3]
        # A miss: fetched on the caller's thread at once, the speculative fetches still blocked.
        assert pf.get(50)[0] == 50 and not src.release.is_set()
        # Queued but not started: the caller fetches it itself rather than wait for a worker.
        assert pf.get(3)[0] == 3 and not src.release.is_set()
        assert ("caller", 3) in src.calls and ("worker", 3) not in src.calls
        # Being fetched by a worker: the caller waits for that fetch, never a second one.
        with pytest.raises(PrefetchTimeout):
            pf.get(1, timeout=0.05)
        src.release.set()
        assert pf.get(1)[0] == 1 and pf.get(2)[0] == 2
        assert ("caller", 1) not in src.calls and ("caller", 2) not in src.calls
        stats = pf.stats
    assert stats.misses == 3 and stats.hits + stats.late_hits == 2


def test_a_timed_out_wait_is_withdrawn_by_the_next_request(recorded):
    src = Source(100, held={5})
    pred = Fixed()
    with OnDemandPrefetcher(src, capacity=3, workers=1, predict=pred) as pf:
        pred.next = [5]
        pf.get(4)
        assert wait_until(lambda: src.started == [5])
        pred.next = []
        with pytest.raises(PrefetchTimeout):
            pf.get(5, timeout=0.02)
        assert pf.get(9)[0] == 9  # the interrupted wait for 5 is withdrawn; its fetch goes on
        src.release.set()
        assert wait_until(lambda: held(pf, "FILLING") == [] and held(pf, "CANCELLED") == [])


def speculate_10_11_then_ask_50(pf, pred):
    """10 and 11 are speculated and land; then a request for 50, predicting 51 and 52, evicts them."""
    pred.next = [10, 11]
    pf.get(0)
    assert wait_until(lambda: held(pf, "READY") == [10, 11])
    pred.next = [51, 52]
    assert pf.get(50)[0] == 50


def test_unused_speculation_is_evicted_to_make_room(recorded):
    src = Source(100)
    pred = Fixed()
    with OnDemandPrefetcher(src, capacity=3, workers=2, predict=pred) as pf:
        speculate_10_11_then_ask_50(pf, pred)
        assert not {10, 11} & {i for _s, i in pf.slots()}
        assert wait_until(lambda: held(pf, "READY") == [51, 52])
        assert pf.stats.wasted == 2  # 10 and 11 can no longer be used; 51 and 52 still may
    stats = pf.stats
    assert stats.wasted == 2 + 2  # 10 and 11 evicted; 51 and 52 discarded at close
    assert stats.wasted_bytes == 4 * 3 * 4 and stats.accuracy == 0.0 and stats.verdict == "wasting"


def test_wasted_counts_evictions_while_other_speculation_is_in_flight(recorded):
    """A fetch in flight is a fetch and is still usable; one a request waits for is used, not pending."""
    src = Source(100, held={51, 52})
    pred = Fixed()
    with OnDemandPrefetcher(src, capacity=3, workers=2, predict=pred) as pf:
        speculate_10_11_then_ask_50(pf, pred)  # the fetches of 51 and 52 then block
        assert wait_until(lambda: sorted(src.started) == [51, 52])
        assert held(pf, "FILLING") == [51, 52]
        stats = pf.stats
        assert (stats.speculative_fetches, stats.used, stats.wasted) == (4, 0, 2)
        pred.next = [52]
        caller = threading.Thread(target=pf.get, args=(51,))
        caller.start()
        assert wait_until(lambda: pf._core.rt.is_parked(pf._core.consumer))  # a late hit, waiting for 51
        stats = pf.stats
        assert (stats.speculative_fetches, stats.used, stats.wasted, stats.late_hits) == (4, 1, 2, 1)
        src.release.set()
        caller.join(5)
        assert wait_until(lambda: held(pf, "READY") == [52])
        assert pf.stats.wasted == 2 and pf.stats.used == 1
    assert pf.stats.wasted == 3  # and 52, discarded at close


def cancel_7_in_flight(src, pf, pred):
    """Speculate 7 (its fetch then waits for ``src.release``), then drop the prediction: cancelled in flight."""
    pred.next = [7]
    pf.get(0)
    assert wait_until(lambda: src.started == [7])
    pred.next = []
    pf.get(1)
    assert held(pf, "CANCELLED") == [7]


def test_a_misprediction_in_flight_is_cancelled_and_discarded_when_it_lands(recorded):
    src = Source(100, held={7})
    pred = Fixed()
    with OnDemandPrefetcher(src, capacity=3, workers=1, predict=pred) as pf:
        cancel_7_in_flight(src, pf, pred)
        src.release.set()
        assert wait_until(lambda: all(s == "EMPTY" for s, _ in pf.slots()))
        assert pf.stats.wasted == 1


def test_a_cancelled_fetch_asked_for_again_is_revived_not_fetched_twice(recorded):
    src = Source(100, held={7})
    pred = Fixed()
    with OnDemandPrefetcher(src, capacity=3, workers=1, predict=pred) as pf:
        cancel_7_in_flight(src, pf, pred)
        # The fetch lands only once the caller waits for it (released earlier, it could be discarded
        # before the request and the request would be a plain miss: the race this test once lost).
        def land() -> None:
            wait_until(lambda: pf._core.rt.is_parked(pf._core.consumer))
            src.release.set()  # in any case: a caller that fetched 7 itself fails the assertion below
        lander = threading.Thread(target=land)
        lander.start()
        assert pf.get(7)[0] == 7
        lander.join(5)
    assert [c for c in src.calls if c[1] == 7] == [("worker", 7)]


def test_errors_reach_the_request_for_their_index_as_the_same_object(recorded):
    src = Source(100, bad={3, 40})
    with OnDemandPrefetcher(src, capacity=4, workers=1, predict="sequential") as pf:
        pf.get(0)
        assert wait_until(lambda: held(pf, "FAILED") == [3])  # fetched on speculation, failed, not raised
        assert pf.get(1)[0] == 1 and pf.get(2)[0] == 2
        with pytest.raises(Boom) as speculative:
            pf.get(3)
        with pytest.raises(Boom) as demand:
            pf.get(40)  # a miss: the caller's own fetch
        assert speculative.value.args == (3,) and demand.value.args == (40,)
        assert "__getitem__" in "".join(__import__("traceback").format_tb(speculative.value.__traceback__))
        assert pf.get(41)[0] == 41  # an error answers its request only: the prefetcher goes on
        assert pf.stats.errors == 2


def test_close_wakes_a_caller_waiting_for_a_fetch_and_joins_every_thread(recorded):
    before = thread_count()
    src = Source(100, held={5})
    pred = Fixed()
    pf = OnDemandPrefetcher(src, capacity=3, workers=2, predict=pred)
    pred.next = [5]
    pf.get(4)
    assert wait_until(lambda: src.started == [5])
    got = []

    def ask():
        try:
            pf.get(5)
        except PrefetcherClosed as e:
            got.append(e)

    caller = threading.Thread(target=ask)
    caller.start()
    assert wait_until(lambda: pf._core.rt.is_parked(pf._core.consumer))
    closer = threading.Thread(target=pf.close)
    closer.start()
    assert wait_until(lambda: pf.closed)
    src.release.set()
    caller.join(5)
    closer.join(5)
    assert got and isinstance(got[0], PrefetcherClosed)
    pf.close()  # idempotent
    with pytest.raises(PrefetcherClosed):
        pf.get(1)
    assert wait_until(lambda: thread_count() <= before)


def test_an_abandoned_prefetcher_is_collected_and_its_threads_end():
    before = thread_count()
    pf = OnDemandPrefetcher(Source(50), capacity=3, workers=2, predict="sequential")
    pf.get(0)
    pf.cycle = pf  # a reference cycle, as a stored traceback would make
    del pf
    gc.collect()
    assert wait_until(lambda: thread_count() <= before)


def test_bad_input_gets_a_clear_error():
    with pytest.raises(TypeError, match="map-style"):
        OnDemandPrefetcher(iter([np.zeros(3)]))
    with pytest.raises(ValueError, match="predict must be"):
        OnDemandPrefetcher(Source(5), predict="oracle")
    with pytest.raises(TypeError, match="predict must be"):
        OnDemandPrefetcher(Source(5), predict=3)
    with pytest.raises(ValueError, match="empty"):
        OnDemandPrefetcher(Source(0))
    with pytest.raises(ValueError, match="source\\[0\\]"):
        OnDemandPrefetcher(Source(5, bad={0}))
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        OnDemandPrefetcher(Source(5), capacity=0)
    with OnDemandPrefetcher(Source(5), capacity=2, workers=1) as pf:
        with pytest.raises(TypeError, match="index must be an int"):
            pf.get(1.0)
        with pytest.raises(IndexError, match="out of range"):
            pf.get(5)
        with pytest.raises(IndexError):
            pf.get(-1)
        with pytest.raises(ValueError, match="shape"):
            pf.copy_into(1, np.empty(4, np.float32))
        with pytest.raises(TypeError, match="numpy array"):
            pf.copy_into(1, [0, 0, 0])
        assert pf[2][0] == 2 and len(pf) == 5


def test_memory_budget_caps_the_pool_and_shape_skips_the_first_read():
    src = Source(20)
    with OnDemandPrefetcher(src, capacity=8, memory_budget=3 * 12, shape=SHAPE, dtype=np.float32) as pf:
        assert pf.capacity == 3 and pf.depth == 2
        assert pf.get(7)[0] == 7
    assert ("caller", 0) not in src.calls


def test_the_adaptive_predictor_stops_speculating_on_random_requests(recorded):
    rng = np.random.default_rng(1)
    src = Source(100_000)
    with OnDemandPrefetcher(src, capacity=6, workers=2, predict="adaptive") as pf:
        for i in rng.integers(0, 100_000, 300):
            pf.get(int(i))
        stats = pf.stats
    assert stats.speculative_fetches <= 0.1 * 300, stats
    assert pf.predictor.chosen is None and pf.predictor.depth == 0


def test_a_predictor_instance_is_used_as_given():
    pred = SequentialPredictor(100)
    with OnDemandPrefetcher(Source(100), capacity=3, predict=pred) as pf:
        pf.get(10)
        assert pf.predictor is pred and pred.last == 10


@settings(max_examples=25, deadline=None)
@given(requests=st.lists(st.integers(0, 30), min_size=1, max_size=40),
       predict=st.sampled_from([None, "sequential", "stride", "markov", "adaptive"]),
       capacity=st.integers(1, 4), workers=st.integers(1, 3))
def test_any_request_sequence_is_served_exactly_and_conforms_to_the_model(requests, predict, capacity, workers):
    with recording_runtimes() as runtimes:
        with OnDemandPrefetcher(Source(31, bad={13}), capacity=capacity, workers=workers, predict=predict) as pf:
            for i in requests:
                if i == 13:
                    with pytest.raises(Boom):
                        pf.get(i)
                else:
                    assert pf.get(i)[0] == i
    (rt,) = runtimes
    report = verify_record(rt.machine, rt.record)
    assert report.ok, report.message


# -- the policy's look-ups, against the plain scan -----------------------------------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

from safeprefetch._prefetcher.ondemand_policy import holdings  # noqa: E402
from safeprefetch.models import _predictive_protocol as _Q  # noqa: E402

_SLOT_STATES = [_Q.EMPTY, _Q.FREE, _Q.QUEUED, _Q.FILLING, _Q.CANCELLED, _Q.READY, _Q.FAILED, _Q.LEASED, _Q.DEMAND]


def _held_by_scan(slots, tag):
    """The plain answer: the state of the first slot, in slot order, that holds ``tag`` (EMPTY holds nothing)."""
    for st_, t in slots:
        if t == tag and st_ != _Q.EMPTY:
            return st_
    return None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(_SLOT_STATES), st.integers(0, 6)), max_size=8), min_size=1,
                max_size=4))
def test_holdings_are_the_plain_scan_for_every_tag_and_follow_the_slots(successive):
    """``holdings`` (one dict per value of the slots, cached on the core) answers what scanning the slots for
    each tag answers, a tag held by two slots (a cancelled fetch and a new one) included, for each of a
    sequence of states: a new slots tuple is never answered from the last one's dict."""
    class Core:
        holdings_cache = ((), {})

    core = Core()
    for slots in successive:
        slots = tuple(slots)
        for _twice in range(2):
            held = holdings(core, slots)
            assert {t: held.get(t) for t in range(8)} == {t: _held_by_scan(slots, t) for t in range(8)}

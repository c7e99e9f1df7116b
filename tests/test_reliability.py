"""Hypothesis-driven fault scenarios on real threads, real arrays and real .npy files.

Each scenario (see ``safeprefetch/_harness/soak_scenarios.py``) draws a configuration and at
most one fault -- a source error at some item, a close from the consumer or
from another thread, an abandoned prefetcher, a slow or bursty consumer, a
slow source, small timeouts -- and asserts: no hang, exactly-once delivery
(in order when ordered; the batch contents say which item they are), the
error delivered at its position, every thread joined. ``python -m
safeprefetch soak`` runs the same generator at scale with a seeded RNG.
"""

import random
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import safeprefetch._harness.soak as soak_module
from safeprefetch import Prefetcher
from safeprefetch._harness.soak import run_scenario, soak
from safeprefetch._harness.soak_scenarios import CONSUMERS, ERRORS, SOURCES, STOPS, Scenario, generate, random_scenario

pytestmark = [pytest.mark.live, pytest.mark.timeout(120)]

#: Modest example counts keep this file near 20 s on 2 shared cores; the soak
#: command runs the same scenarios by the thousand.
FEW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                     HealthCheck.function_scoped_fixture])
SOME = settings(FEW, max_examples=30)


@st.composite
def scenarios(draw, **fixed):
    """The soak's generator, drawing from Hypothesis; ``fixed`` values (or strategies) pin fields."""
    fixed = {k: draw(v) if isinstance(v, st.SearchStrategy) else v for k, v in fixed.items()}
    return generate(lambda lo, hi: draw(st.integers(lo, hi)), **fixed)


@pytest.fixture(scope="module")
def npy_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("npy")


def check(result):
    assert result.ok, f"{result.scenario}\n" + "\n".join(result.problems)
    return result


@SOME
@given(sc=scenarios())
def test_random_scenarios_keep_the_contract(sc, npy_dir):
    check(run_scenario(sc, npy_dir))


@FEW
@given(sc=scenarios(stop="close"))
def test_close_by_the_consumer_at_a_random_point(sc, npy_dir):
    r = check(run_scenario(sc, npy_dir))
    if sc.error == "none":
        assert len(r.delivered) == sc.stop_after


@FEW
@given(sc=scenarios(stop="thread"))
def test_close_from_another_thread_at_a_random_time(sc, npy_dir):
    check(run_scenario(sc, npy_dir))


@FEW
@given(sc=scenarios(stop="none", error="exception"))
def test_a_source_error_at_a_random_item_is_delivered_at_its_position(sc, npy_dir):
    r = check(run_scenario(sc, npy_dir))
    if sc.error != "none" and sc.ordered:
        assert len(r.delivered) == sc.error_pos


@FEW
@given(sc=scenarios(stop="none", error=st.sampled_from(["base", "shape", "dtype", "type"])))
def test_every_kind_of_bad_item_is_delivered(sc, npy_dir):
    check(run_scenario(sc, npy_dir))


@FEW
@given(sc=scenarios(stop="abandon"))
def test_abandoned_mid_stream_the_threads_are_joined(sc, npy_dir):
    check(run_scenario(sc, npy_dir))


@FEW
@given(sc=scenarios(pace=st.sampled_from(["slow", "bursty"]), consumer_ms=2))
def test_a_slow_or_bursty_consumer(sc, npy_dir):
    check(run_scenario(sc, npy_dir))


@FEW
@given(sc=scenarios(consume="get", timeout_ms=1, fetch_ms=2))
def test_small_timeouts_lose_nothing(sc, npy_dir):
    check(run_scenario(sc, npy_dir))


def test_the_generator_reaches_every_kind_of_scenario():
    rng = random.Random(0)
    seen = [random_scenario(rng) for _ in range(3000)]
    assert {s.source for s in seen} == set(SOURCES)
    assert {s.consume for s in seen} == set(CONSUMERS)
    assert {s.error for s in seen} == set(ERRORS)
    assert {s.stop for s in seen} == set(STOPS)
    assert {s.plan for s in seen} == {"seq", "shard", "shuffle"}
    assert {s.ordered for s in seen} == {True, False}
    assert any(s.error != "none" and s.error_pos == 0 for s in seen)
    assert any(s.memory_slots for s in seen) and any(s.timeout_ms for s in seen)


def test_a_small_seeded_soak_is_clean(npy_dir):
    report = soak(25, seed=7, workdir=npy_dir)
    assert report.ok, report.failures
    assert report.scenarios == 25 and report.hangs == report.lost == report.leaked_threads == 0
    assert report.to_json()["ok"] is True


# -- the checks are not vacuous: a broken prefetcher is caught ----------------------------


class DropsEveryThirdBatch(Prefetcher):
    def __next__(self):
        n = getattr(self, "_n", 0) + 1
        self._n = n
        if n % 3 == 0:
            super().__next__()
        return super().__next__()


class LeaksAThread(Prefetcher):
    stop = threading.Event()

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        threading.Thread(target=self.stop.wait, daemon=True).start()


def test_the_runner_catches_a_prefetcher_that_drops_batches(npy_dir, monkeypatch):
    monkeypatch.setattr(soak_module, "Prefetcher", DropsEveryThirdBatch)
    r = run_scenario(Scenario(source="map", items=8, consume="iter"), npy_dir)
    assert not r.ok and r.lost == 1


def test_the_runner_catches_a_prefetcher_that_leaks_a_thread(npy_dir, monkeypatch):
    monkeypatch.setattr(soak_module, "Prefetcher", LeaksAThread)
    try:
        r = run_scenario(Scenario(source="list", items=3), npy_dir)
        assert not r.ok and r.leaked_threads == 1
    finally:
        LeaksAThread.stop.set()


def test_the_runner_checks_batch_contents(npy_dir, monkeypatch):
    class Corrupts(Prefetcher):
        def __next__(self):
            b = super().__next__()
            b.flat[-1] += 1
            return b

    monkeypatch.setattr(soak_module, "Prefetcher", Corrupts)
    r = run_scenario(Scenario(source="npy", items=4, dtype="float32"), npy_dir)
    assert not r.ok and r.corrupt == 4
    assert np.dtype(r.scenario.dtype) == np.float32

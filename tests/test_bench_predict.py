"""``bench predict`` runs and reports every figure against no prefetch (the numbers are not asserted), and its
traces are what they claim to be."""

import json
import subprocess
import sys

import numpy as np
import pytest

from safeprefetch._harness.bench_predict import PREDICTORS, crop_trace, markov_chain

FIELDS = {"trace", "predictor", "requests", "hit_rate", "coverage", "p50_ms", "p99_ms", "hidden_p50", "hidden_p99",
          "wasted_fraction", "extra_bandwidth", "peak_bytes", "pool_bytes", "seconds", "summary"}


@pytest.mark.timeout(300)
def test_bench_predict_reports_every_trace_and_predictor_against_none():
    p = subprocess.run([sys.executable, "-m", "safeprefetch", "bench", "predict", "--quick", "--requests", "40",
                        "--json"], capture_output=True, text=True, timeout=280)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    runs = out["runs"]
    traces = ["sequential", "strided", "markov", "random", "crops"]
    assert [r["trace"] for r in runs] == [t for t in traces for _ in PREDICTORS + (("oracle",) if t == "markov"
                                                                                  else ())]
    assert all(set(r) == FIELDS for r in runs)
    for r in runs:
        assert r["requests"] == 40
        if r["predictor"] == "none":  # the baseline: no threads, no pool, every request fetched once
            assert r["hidden_p50"] == 0 and r["hit_rate"] == 0 and r["extra_bandwidth"] == 0 and r["pool_bytes"] == 0
        else:
            assert r["pool_bytes"] > 0 and r["peak_bytes"] >= r["pool_bytes"] and r["summary"]
            assert 0 <= r["hit_rate"] <= r["coverage"] <= 1 and 0 <= r["wasted_fraction"] < 1
            assert r["extra_bandwidth"] >= -0.01  # every request is fetched at least once (or served by a fetch)
    off = [r for r in runs if r["predictor"] == "off"]
    assert all(r["hit_rate"] == 0 and r["extra_bandwidth"] == 0 for r in off)
    assert [t[0] for t in out["targets"]][0] == "hit rate, sequential trace, sequential"
    assert len(out["targets"]) == 7 and all(isinstance(t[3], bool) for t in out["targets"])
    assert out["settings"]["requests"] == 40 and out["settings"]["repeats"] == 1


def test_the_markov_chain_has_three_successors_each_with_the_stated_probabilities():
    chain = markov_chain(24, 100_000, seed=7)
    assert len(chain) == 24
    for a, succ in chain.items():
        assert [p for p, _ in succ] == [0.7, 0.2, 0.1]
        assert len({b for _, b in succ}) == 3 and all(b in chain and b != a for _, b in succ)


def test_the_crop_trace_is_recorded_from_real_crops_of_a_memory_mapped_volume(tmp_path):
    trace, tile, tiles = crop_trace(tmp_path / "v.npy", crops=5, seed=1)  # raises if a crop is assembled wrong
    assert tiles == 8 * 4 * 4 and all(0 <= k < tiles for k in trace)
    assert 5 * 8 <= len(trace) <= 5 * 27  # each crop overlaps 2 or 3 tiles per axis
    vol = np.load(tmp_path / "v.npy", mmap_mode="r")
    assert np.array_equal(tile(tiles - 1), vol[56:64, 192:256, 192:256])

"""The explore benchmark runs and reports every figure with its baseline (numbers are not asserted)."""

import json
import os
import shutil
import subprocess
import sys

import pytest


@pytest.mark.timeout(300)
def test_bench_explore_quick_reports_rates_memory_and_the_spin_ratio():
    p = subprocess.run([sys.executable, "-m", "safeprefetch", "bench", "explore", "--quick", "--json"],
                       capture_output=True, text=True, timeout=280)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    runs = {r["label"]: r for r in out["runs"]}
    none, fingerprints, reduced = (runs["prefetcher, no reduction"], runs["prefetcher, no reduction, fingerprints"],
                                   runs["prefetcher, default reductions"])
    assert none["states"] == fingerprints["states"] > reduced["states"] > 0
    assert none["store"] == "full" and fingerprints["store"] == "fingerprint"
    # Two uint64 arrays at most 3/4 full after growth, at least 3/8: 21 to 43 bytes a state.
    assert 16 < fingerprints["table_bytes_per_state"] <= 43
    assert 0 < fingerprints["collision_probability"] < 1e-6
    assert out["fingerprint_speed_ratio"] > 0
    assert all(r["states_per_second"] > 0 for r in out["runs"])
    # Each engine searched the same states as the plain one, and reports its rate against it.
    engines = ["generated"] + (["compiled"] if "prefetcher, no reduction, compiled" in runs else [])
    if os.environ.get("CI"):  # CI installs the speed extra: the compiled engine must have been measured
        assert "compiled" in engines, sorted(runs)
    for engine in engines:
        run = runs[f"prefetcher, no reduction, {engine}"]
        assert run["engine"] == engine and run["states"] == none["states"] and run["setup_seconds"] > 0
        assert out["engine_speedup"][engine] > 0
    if shutil.which("spin") and shutil.which("gcc"):
        # The scaled twin and safeprefetch store exactly the same number of states, on every engine.
        for engine in ["plain"] + engines:
            assert out["spin"]["stored"] == runs[f"prefetcher twin config, {engine}"]["states"]
            assert out["ratio_to_spin_by_engine"][engine] > 0
        assert out["spin"]["errors"] == 0
        # pan's hash table is sized to the twin (two slots a state), not a fixed 2**24 slots whose
        # start-up page faults varied by more than the quick search and lost the ratio.
        stored = out["spin"]["stored"]
        assert 2 ** (out["spin"]["hash_bits"] - 1) < 2 * stored <= 2 ** out["spin"]["hash_bits"]
        assert out["spin"]["search_cpu_seconds"] > 0

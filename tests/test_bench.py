"""The explore benchmark runs and reports every figure with its baseline (numbers are not asserted)."""

import json
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
    labels = [r["label"] for r in out["runs"]]
    assert labels[:2] == ["prefetcher, no reduction", "prefetcher, default reductions"]
    none, reduced = out["runs"][0], out["runs"][1]
    assert none["states"] > reduced["states"] > 0
    assert all(r["states_per_second"] > 0 for r in out["runs"])
    if shutil.which("spin") and shutil.which("gcc"):
        # The scaled twin and safeprefetch store exactly the same number of states.
        assert out["spin"]["stored"] == out["runs"][2]["states"]
        assert out["spin"]["errors"] == 0

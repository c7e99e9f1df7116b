"""``python -m safeprefetch soak`` and ``demo``, run as a user runs them (subprocess, small settings)."""

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.live, pytest.mark.timeout(120)]


def cli(*args, timeout=100):
    return subprocess.run([sys.executable, "-m", "safeprefetch", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_soak_runs_scenarios_and_exits_zero_when_all_are_clean(tmp_path):
    r = cli("soak", "--scenarios", "6", "--seed", "3", "--dir", str(tmp_path), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["scenarios"] == 6 and report["seed"] == 3 and report["ok"] is True
    for key in ("hangs", "lost", "duplicate", "out_of_order", "errors_lost", "leaked_threads", "failed"):
        assert report[key] == 0
    assert report["seconds"] > 0
    assert list(tmp_path.glob("*.npy")) or report["errors_injected"] >= 0  # files are written on demand


def test_soak_prints_every_count():
    r = cli("soak", "--scenarios", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("hangs", "lost", "duplicate", "out-of-order", "errors-lost", "leaked-threads", "failed"):
        assert f"  {name}" in r.stdout
    assert r.stdout.startswith("soak: 3 scenarios (seed 0)")


def test_soak_rejects_zero_scenarios_with_one_line():
    r = cli("soak", "--scenarios", "0")
    assert r.returncode == 2
    assert r.stderr.strip() == "error: --scenarios must be at least 1"


def test_demo_writes_shards_and_reports_the_speedup(tmp_path):
    r = cli("demo", "--small", "--batches", "12", "--dir", str(tmp_path), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert len(list(tmp_path.glob("shard*.npy"))) == 12
    assert out["config"]["batches"] == 12
    assert out["serial_seconds"] > 0 and out["prefetch_seconds"] > 0
    assert out["speedup"] == pytest.approx(out["serial_seconds"] / out["prefetch_seconds"])
    assert 0 < out["overlap_efficiency"]
    assert out["same_result"] is True
    assert out["stats"]["batches"] == 12


def test_demo_prints_times_speedup_efficiency_and_stats():
    r = cli("demo", "--small", "--batches", "10")
    assert r.returncode == 0, r.stdout + r.stderr
    for text in ("without prefetching:", "with prefetching:", "speed-up:", "overlap efficiency:",
                 "prefetcher stats:", "bottleneck:"):
        assert text in r.stdout


def test_a_long_demo_shows_a_progress_line_on_stderr():
    r = cli("demo", "--small", "--batches", "25", "--latency-ms", "50")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "without prefetching: " in r.stderr and "/25 batches" in r.stderr


def test_demo_rejects_bad_settings_with_one_line():
    r = cli("demo", "--batches", "0")
    assert r.returncode == 2
    assert r.stderr.strip() == "error: --batches must be at least 1"

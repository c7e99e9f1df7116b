"""The twenty-second round (docs/hardening.md), the live runtime's review: the interrupt sweep's "held" situation
made deterministic

The tests of a fix reproduce a finding and failed on the commit before the fix; the others are labelled guards.
No test sleeps to synchronize: they wait on observable state (``_polling``) or on events set by the code under
test.
"""

from __future__ import annotations

import sys
import time

import pytest

from safeprefetch._harness import injection_sweep as sweep_mod
from safeprefetch._harness.injection_sweep import Scenario, points
from safeprefetch._runtime import inject as _inject

pytestmark = pytest.mark.timeout(120)


# -- 1. the sweep's "held" situation: a run of exactly two, however fast the workers are -------------------------

def _slow_after_first_wait(hold: float):
    """A trace hook: when the setup's first ``_wait`` returns (two batches ready), hold the main thread until a
    third batch is ready too (bounded by ``hold`` seconds) -- what a slow first traced run on 3.12 does."""
    code = sweep_mod._Setup._wait.__code__
    seen = []

    def local(frame, event, arg):
        if event == "return" and not seen:
            seen.append(True)
            core = frame.f_locals["self"].core
            deadline = time.monotonic() + hold
            while core.ready_now() < 3 and time.monotonic() < deadline:
                time.sleep(0.0005)  # a bounded wait on observable state; the ordering is the ready count
        return local

    def hook(frame, event, arg):
        return local if frame.f_code is code else None
    return hook


def _setup_under(hook, sc):
    old = sys.gettrace()
    sys.settrace(hook)
    try:
        return sweep_mod._Setup(sc)
    finally:
        sys.settrace(old)


@pytest.mark.parametrize("api", ["release", "get"])
def test_the_held_situation_is_a_run_of_two_even_when_a_third_batch_could_be_ready(api):
    setup = _setup_under(_slow_after_first_wait(1.0), Scenario(api, "held"))
    try:
        core = setup.core
        assert len(core.run) == 2, f"the held take was a run of {len(core.run)}: the scenario is timing-dependent"
        before = core.rt.steps
        setup.call_quietly()
        # The call hands out (or releases) the run's last batch, so it gives the run back: a kernel step, whose
        # points the sweep must inject at.
        assert core.rt.steps > before
    finally:
        setup.call_over = True
        setup.source.gate.set()
        assert sweep_mod._check(setup, closed_by_effect=False) == []


def test_release_at_held_records_the_kernel_step_points():
    """Guard on 3.11 (the first traced run is fast); on 3.12 it failed before the fix: 10 points, no kernel step."""
    with _inject.python_sigint():
        pts = points(Scenario("release", "held"))
    assert len(pts) >= 15 and any("Runtime.step" in str(p) for p in pts), [str(p) for p in pts]


# -- 2. a replay under spurious=on reaches the counterexample's verdict at the trace's end -------------------------

def test_a_replayed_spurious_hang_is_judged_at_the_traces_end():
    """Threads parked only because it was not their turn are woken at the trace's last step; one whose only move
    is a spurious wakeup is stuck there, as the checker counts it, and must not leave on that wakeup."""
    import warnings

    from safeprefetch import check, load_model
    from safeprefetch.lowlevel import run_live

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        machine = load_model("notify_one_on_close").compile({"spurious": "on"})
    found = check(machine)
    assert found.verdict == "shutdown_hang"
    for seed in range(3):
        replay = run_live(machine, schedule=found.violation.trace, seed=seed, timeout=20)
        assert (replay.verdict, replay.conforms) == ("shutdown_hang", True), replay.message
        assert replay.steps == len(found.violation.trace.steps)

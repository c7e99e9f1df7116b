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


# -- 3. the real-code scheduler's reports: the user's excepthook, thread and lock names -------------------------

def _hooked_body():
    import threading

    seen = []
    old = threading.excepthook
    threading.excepthook = lambda args: seen.append((args.exc_type, args.thread.name))
    try:
        t = threading.Thread(target=lambda: 1 / 0, name="worker")
        t.start()
        t.join()
    finally:
        threading.excepthook = old
    assert seen == [(ZeroDivisionError, "worker")], seen


def test_a_thread_exception_the_codes_own_excepthook_handles_is_not_uncaught():
    from safeprefetch import interleavings

    result = interleavings.check(_hooked_body)
    assert result.verdict == "ok", interleavings.render(result)


def _hook_raises_body():
    import threading

    def hook(args):
        raise RuntimeError("hook failed")
    old = threading.excepthook
    threading.excepthook = hook
    try:
        t = threading.Thread(target=lambda: 1 / 0, name="worker")
        t.start()
        t.join()
    finally:
        threading.excepthook = old


def test_an_excepthook_that_raises_is_still_reported():
    """Guard: a hook that fails handles nothing (CPython prints both); the thread's exception stays a finding."""
    from safeprefetch import interleavings

    result = interleavings.check(_hook_raises_body)
    assert result.verdict == "uncaught_exception"
    assert "ZeroDivisionError" in result.exception or "ZeroDivisionError" in interleavings.render(result)


def test_without_a_hook_of_the_codes_own_a_thread_exception_is_a_finding():
    """Guard: the hook in place when the check began (pytest's here) is not the code's: still a finding."""
    import threading

    from safeprefetch import interleavings

    def body():
        t = threading.Thread(target=lambda: 1 / 0)
        t.start()
        t.join()
    assert interleavings.check(body).verdict == "uncaught_exception"


def _main_named_body():
    import threading

    gate = threading.Event()
    t = threading.Thread(target=gate.wait, name="main")
    t.start()
    t.join()


def test_a_thread_named_main_is_told_apart_from_the_body_in_a_join():
    from safeprefetch import interleavings

    result = interleavings.check(_main_named_body)
    assert result.verdict == "deadlock"
    text = interleavings.render(result)
    assert "main joins main#2" in text and "main joins main," not in text, text


def _two_on_a_line_body():
    import threading

    a = threading.Lock(); b = threading.Lock()  # noqa: E702 - the case under test

    def w1():
        with a:
            with b:
                pass

    def w2():
        with b:
            with a:
                pass
    t1 = threading.Thread(target=w1)
    t2 = threading.Thread(target=w2)
    t1.start(); t2.start(); t1.join(); t2.join()  # noqa: E702


def test_two_locks_made_on_one_line_are_named_after_their_own_targets():
    from safeprefetch import interleavings

    result = interleavings.check(_two_on_a_line_body)
    assert result.verdict == "deadlock"
    text = interleavings.render(result)
    assert "a_2" not in text and "waits for b (held by" in text, text


def test_a_controlled_lock_has_the_type_name_of_a_real_one():
    import threading

    from safeprefetch import interleavings

    real = [type(threading.Lock()).__name__, type(threading.RLock()).__name__]
    seen = []

    def body():
        seen.append([type(threading.Lock()).__name__, type(threading.RLock()).__name__])
    interleavings.check(body)
    assert seen and seen[0] == real


def _default_hook_body():
    import threading

    old = threading.excepthook
    threading.excepthook = threading.__excepthook__  # the default: it prints the traceback, and the error is lost
    try:
        t = threading.Thread(target=lambda: 1 / 0)
        t.start()
        t.join()
    finally:
        threading.excepthook = old


def test_the_default_excepthook_set_by_the_code_handles_nothing():
    """The default hook only prints: an exception it gets is still uncaught (failed on e76279e, which took any
    hook the code installed for a handler)."""
    from safeprefetch import interleavings

    assert interleavings.check(_default_hook_body).verdict == "uncaught_exception"

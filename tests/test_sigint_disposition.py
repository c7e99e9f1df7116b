"""The interrupt harnesses in a process whose SIGINT is ignored (a background job of a shell).

A shell without job control starts ``cmd &`` with SIGINT ignored, and CPython
then installs no handler. Run that way, the "signal" effect of the injection
sweeps delivered nothing: every point of ``get@park`` came out as "the
interrupt was not raised by the call" (seen: a suite started with ``pytest &``
failed two tests). The harnesses now give themselves Python's default handler
for their run (``python_sigint``), and a bare ``deliver_sigint`` with no
handler raises a clear error instead of doing nothing.
"""

import json
import signal
import subprocess
import sys

import pytest

from safeprefetch.lowlevel import SigintUnavailable, deliver_sigint, python_sigint

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]


#: A first interpreter that ignores SIGINT and execs the second: the disposition survives exec, as a shell's
#: background job's does (no preexec_fn, which is unsafe in a process with threads).
_IGNORE_THEN_EXEC = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                     "os.execv(sys.executable, [sys.executable, '-c', sys.argv[1]])")


def _run_ignoring_sigint(code: str) -> dict:
    """Run ``code`` in a fresh interpreter started with SIGINT ignored; it prints one JSON object."""
    proc = subprocess.run([sys.executable, "-c", _IGNORE_THEN_EXEC, code], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_injection_sweep_delivers_ctrl_c_in_a_process_started_with_sigint_ignored():
    out = _run_ignoring_sigint(
        "import json, signal\n"
        "from safeprefetch._harness.injection_sweep import Scenario, sweep\n"
        "before = signal.getsignal(signal.SIGINT)\n"
        "r = sweep([(Scenario('get', 'park'), 'signal')])\n"
        "print(json.dumps({'ignored': before == signal.SIG_IGN, 'runs': r.runs, 'fired': r.fired,\n"
        "                  'problems': [p.what for p in r.problems][:5],\n"
        "                  'after': signal.getsignal(signal.SIGINT) == signal.SIG_IGN}))\n")
    assert out["ignored"], "the child did not start with SIGINT ignored: the test tests nothing"
    assert out["runs"] >= 15 and out["fired"] >= 0.8 * out["runs"]
    assert out["problems"] == []
    assert out["after"], "the sweep left its handler installed"


def test_the_ondemand_sweep_and_the_ctrl_c_soak_too():
    out = _run_ignoring_sigint(
        "import json\n"
        "from safeprefetch._harness import injection_ondemand as inj\n"
        "from safeprefetch._harness.ctrl_c_soak import ctrl_c_soak\n"
        "r = inj.sweep([(inj.OnDemandScenario('hit', 'copy'), 'signal')])\n"
        "s = ctrl_c_soak(runs=20, seed=3)\n"
        "print(json.dumps({'fired': r.fired, 'problems': [p.what for p in r.problems][:5],\n"
        "                  'interrupts': s.interrupts, 'clean': s.clean}))\n")
    assert out["fired"] > 0 and out["problems"] == []
    assert out["interrupts"] >= 10 and out["clean"]


def test_delivering_a_ctrl_c_with_no_handler_is_a_clear_error_not_a_silent_no_op():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(SigintUnavailable, match="not a Python callable"):
            deliver_sigint(sys._getframe())
        with python_sigint():
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
            with pytest.raises(KeyboardInterrupt):
                deliver_sigint(sys._getframe())
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # restored
    finally:
        signal.signal(signal.SIGINT, previous)


def test_python_sigint_leaves_a_python_handler_alone():
    def mine(signum, frame):
        pass

    previous = signal.signal(signal.SIGINT, mine)
    try:
        with python_sigint():
            assert signal.getsignal(signal.SIGINT) is mine
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, previous)

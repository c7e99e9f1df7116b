"""Ctrl-C at every call back into Python of the C step, through the Prefetcher's own consumer calls
(``_harness/injection_ckernel.py``; ``SAFEPREFETCH_RUNTIME=typed python -m safeprefetch inject`` runs it too).

``tests/test_ckernel.py`` raises a ``KeyboardInterrupt`` at each call back into Python the C step makes
(``K_inject``) with the bare runtime driven directly, and runs a handler's ``close()`` there through a
Prefetcher. What lies between -- the consumer's call (``get``, ``copy_prefetched``, a lease) around the C step,
with its stash and its run -- was swept line by line only on the Python kernel, whose lines the C step does not
run. Each sweep here must find the contract kept (each batch once, in order; nothing held, owed or parked
after) and raise at every timing-independent site the stream reaches, the kernel's park included; and a
consumer that forgets a take the kernel applied must be caught.
"""

from __future__ import annotations

import pytest
from _cython import cython_here

from safeprefetch._harness.injection_ckernel import APIS, STABLE, run_at, sweep_c_step
from safeprefetch._prefetcher.consumer import ConsumerSide

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(not cython_here(), reason="needs Cython (the speed extra) for runtime='typed'")]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("capacity", [2, 4])
def test_ctrl_c_at_every_call_back_into_python_loses_and_repeats_no_batch(api, capacity):
    report = sweep_c_step((api,), (capacity,))
    assert not report.problems, report.problems[:5]
    assert STABLE <= report.reached, report.reached
    assert not report.missed, report.missed
    assert report.fired >= len(STABLE) and report.runs > report.fired  # past the last call: nothing raised


def test_an_uninjected_run_keeps_the_contract():
    fired, calls, problems = run_at(-1, "get", 2)
    assert fired == -1 and sum(calls) > 0 and not problems, problems


def test_a_consumer_that_forgets_an_applied_take_is_caught(monkeypatch):
    """A mutant: the take the kernel applied before the interrupt is not recognised (``_run_changed`` always
    False), so its run is never served: a batch is lost, and the sweep says so."""
    monkeypatch.setattr(ConsumerSide, "_run_changed", lambda self: False)
    report = sweep_c_step(("get",), (2,))
    assert any("the stream delivered" in p[4] for p in report.problems), report.problems[:3]


def test_the_inject_command_adds_the_c_step_sweep_under_the_typed_runtime(monkeypatch):
    from safeprefetch._cli.live import _c_step_line, _c_step_sweep

    monkeypatch.setenv("SAFEPREFETCH_RUNTIME", "generated")
    assert _c_step_sweep() == (None, False)
    monkeypatch.setenv("SAFEPREFETCH_RUNTIME", "typed")
    summary, failed = _c_step_sweep()
    assert not failed and summary["problems"] == [] and set(summary["sites"]) >= STABLE, summary
    assert summary["reached"] >= 3 * 2 * len(STABLE)
    assert "C step" in _c_step_line(summary) and "0 problems" in _c_step_line(summary)

"""The Prefetcher's own threaded code, unmodified, under the controlled scheduler.

Today's code must show no violation in any scenario of the CI sweep
(exhaustively, or within each scenario's stated preemption bound). The
pre-hardening locking (commit c24e732) must show both reentrancy deadlocks
of the hardening issue -- a signal handler's ``close()`` on the consumer, the
finalizer on a worker -- and each mutation of the runtime's kernel, written
to a copy of the module, must be caught with a trace.
"""

import pytest

from safeprefetch import interleavings
from safeprefetch._harness import prefetcher_code as pc
from safeprefetch._harness import prefetcher_old

pytestmark = pytest.mark.timeout(600)


@pytest.mark.parametrize("sc", pc.SCENARIOS, ids=[s.name for s in pc.SCENARIOS])
def test_todays_prefetcher_shows_no_violation(sc):
    r = pc.check_scenario(sc)
    assert r.verdict == "ok", interleavings.render(r)
    assert r.exhaustive if sc.bound is None else r.bound_covered
    assert r.states >= 1


@pytest.mark.slow
@pytest.mark.parametrize("sc", pc.SLOW_SCENARIOS, ids=[s.name for s in pc.SLOW_SCENARIOS])
def test_todays_prefetcher_shows_no_violation_at_bigger_shapes(sc):
    r = pc.check_scenario(sc)
    assert r.verdict == "ok", interleavings.render(r)
    assert r.exhaustive if sc.bound is None else r.bound_covered


@pytest.mark.parametrize("kind, holder", [("signal", "main"), ("finalizer", "worker0")])
def test_the_pre_hardening_code_deadlocks_on_its_own_lock(kind, holder):
    r = prefetcher_old.check_old(kind)
    assert r.verdict == "deadlock", interleavings.render(r)
    assert r.preemptions == 0 and len(r.trace) <= 15
    steps = [(s.thread, s.step) for s in r.trace.steps]
    assert any(t == holder and step.startswith("interrupt: ") for t, step in steps)
    assert f"{holder} waits for" in r.violation.message and "(held by itself)" in r.violation.message


def test_the_same_interrupts_find_nothing_without_the_reentrancy():
    """The deadlock is the interrupt's doing: the old code without interrupts is fine."""
    r = interleavings.check(prefetcher_old.old_scenario("none"), lock_release="any")
    assert r.verdict == "ok" and r.exhaustive


@pytest.mark.parametrize("m", pc.MUTATIONS, ids=[m.name for m in pc.MUTATIONS])
def test_each_mutation_of_the_kernel_is_caught_with_a_trace(m, tmp_path):
    r = pc.check_mutation(m)
    assert r.verdict in ("deadlock", "lost_wakeup", "leaked_thread", "hang", "uncaught_exception", "assertion"), \
        interleavings.render(r)
    assert len(r.trace) > 0 and r.violation.trace == r.trace
    assert "mutant" in r.model


def test_a_mutation_whose_target_is_gone_is_an_error(tmp_path):
    stale = pc.Mutation("stale", "this text is not in kernel.py", "")
    with pytest.raises(AssertionError, match="no longer occurs exactly once"):
        pc.mutant_runtime(stale, tmp_path)


def test_the_unmutated_copy_of_the_kernel_passes(tmp_path):
    """The copy mechanism itself changes nothing: the identity "mutation" is not caught."""
    same = pc.Mutation("identity", "            woke = self._wake_set(e.wake[b])\n",
                       "            woke = self._wake_set(e.wake[b])\n")
    r = pc.check_mutation(same)
    assert r.verdict == "ok" and r.exhaustive

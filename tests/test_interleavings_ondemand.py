"""The OnDemandPrefetcher's own threaded code, unmodified, under the controlled scheduler.

Today's code must show no violation in any scenario (every schedule within
the scenario's preemption bound). Two regressions, each put back in turn,
must be caught with a trace: the miss that waited for a ``thread_safe=False``
source's lock past its timeout (fixed in the fifth hardening round), and a
join of a worker's fetch that ignores its timeout.
"""

import pytest

from safeprefetch import interleavings
from safeprefetch._harness import ondemand_code as oc

pytestmark = pytest.mark.timeout(600)


@pytest.mark.parametrize("sc", oc.SCENARIOS, ids=[s.name for s in oc.SCENARIOS])
def test_todays_on_demand_prefetcher_shows_no_violation(sc):
    r = oc.check_scenario(sc)
    assert r.verdict == "ok", interleavings.render(r)
    assert r.bound_covered and r.states >= 1


@pytest.mark.slow
@pytest.mark.parametrize("sc", oc.SLOW_SCENARIOS, ids=[s.name for s in oc.SLOW_SCENARIOS])
def test_todays_on_demand_prefetcher_shows_no_violation_at_bigger_bounds(sc):
    r = oc.check_scenario(sc)
    assert r.verdict == "ok", interleavings.render(r)
    assert r.bound_covered


def _scenario(name):
    return next(s for s in oc.SCENARIOS if s.name == name)


@pytest.mark.parametrize("what", [r[0] for r in oc.REGRESSIONS])
def test_each_regression_put_back_is_caught_with_a_trace(what):
    before = (oc.OnDemandCore.__dict__["_fill"], oc.ServeSide.__dict__["_wait_in_flight"])
    r = oc.check_regression(what)
    assert (oc.OnDemandCore.__dict__["_fill"], oc.ServeSide.__dict__["_wait_in_flight"]) == before  # undone
    assert r.verdict == "deadlock", interleavings.render(r)
    assert len(r.trace) > 0 and r.preemptions <= 1
    # the worker sits in the source (HeldSource) until main, itself stuck, lets it go
    assert "safeprefetch-pf-worker0 waits for go to be set" in r.violation.message
    if "miss" in what:
        assert "main waits for rlock (held by safeprefetch-pf-worker0)" in r.violation.message  # the source lock
    else:
        assert "main waits for _tokens_2 (held by itself)" in r.violation.message  # parked in the kernel


def test_the_bench_suite_reports_each_scenario_and_each_regression(capsys):
    from safeprefetch._harness.bench_code import _print

    rows = oc.run_suite(scenarios=(_scenario("copy-into"),), regressions=oc.REGRESSIONS[1:])
    assert [(r["what"], r["expect"], r["verdict"]) for r in rows] == [
        ("copy-into", "ok", "ok"), (f"regression: {oc.REGRESSIONS[1][0]}", "deadlock", "deadlock")]
    assert all(r["covered"] or r["verdict"] != "ok" for r in rows) and all(r["schedules"] >= 1 for r in rows)
    _print([], [], [], "status", rows)
    out = capsys.readouterr().out
    assert "the OnDemandPrefetcher's code" in out and "regression: a join of a fetch in flight" in out

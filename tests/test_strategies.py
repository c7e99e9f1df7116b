"""Strategies for configurations too big to exhaust: random, PCT, preemption bounding, Hypothesis."""

import json
import math

import pytest

from safeprefetch import load_model
from safeprefetch._cli.main import main
from safeprefetch._check.explore import Explorer, final_verdict, replay_choices
from safeprefetch._check.strategies import count_preemptions, pct_runs_needed
from safeprefetch.lowlevel import STRATEGIES, StrategyResult, pct_probability, search
from safeprefetch._harness.strategies_table import compare, format_comparison
from safeprefetch.model import DONE, Model, ModelError, violate

BROKEN = ["one_cond_signal", "no_predicate_wait", "no_space_guard"]

#: Small enough to keep the suite fast, large enough that every strategy finds
#: these bugs at their default configs (they are found within 10 schedules).
BUDGET = 200


def make(build, name="t", params=None):
    return type("T", (Model,), {"name": name, "params": params or {},
                                "build": lambda self, m, **c: build(m, **c)})


def _one_preemption_bug(m):
    """A sets x and resets it in two steps; B fails if it sees x set.

    Without preemption A runs a1 and a2 back to back (or B runs first), so B
    never sees x == 1: the bug needs exactly one preemption, between a1 and a2.
    It also has PCT depth 2 (a1 before b1, b1 before a2) in a 3-step run.
    """
    m.shared(x=0)

    def check(s, me):
        if s.x == 1:
            violate("invariant", "B saw the intermediate x == 1")

    a = m.program("a")
    a.step("a1", lambda s, me: setattr(s, "x", 1), next="a2")
    a.step("a2", lambda s, me: setattr(s, "x", 0), next=DONE)
    b = m.program("b")
    b.step("b1", check, next=DONE)
    m.thread("A", a)
    m.thread("B", b)


OnePreemption = make(_one_preemption_bug, "one_preemption")


def _search(name, strategy, seed=0, budget=BUDGET, **config):
    machine = load_model(name).compile(config or None)
    return machine, search(machine, strategy, seed=seed, budget=budget)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", BROKEN)
def test_every_strategy_finds_the_bug_at_the_default_config(name, strategy):
    machine, r = _search(name, strategy)
    assert isinstance(r, StrategyResult)
    assert r.strategy == strategy
    assert r.verdict == load_model(name).expected
    assert r.schedules_to_bug is not None and r.schedules_to_bug <= r.schedules
    assert r.seconds_to_bug is not None and r.seconds_to_bug <= r.seconds
    assert r.states >= 1 and r.transitions >= len(r.trace)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", BROKEN)
def test_the_found_trace_replays_to_the_same_verdict(name, strategy):
    machine, r = _search(name, strategy)
    kind, message = final_verdict(machine, r.trace)
    assert (kind, message) == (r.violation.kind, r.violation.message)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_same_seed_gives_the_same_schedules_and_trace(strategy):
    for name in BROKEN:
        _, a = _search(name, strategy, seed=7)
        _, b = _search(name, strategy, seed=7)
        assert a.trace == b.trace
        assert (a.schedules, a.schedules_to_bug, a.states, a.transitions) == \
            (b.schedules, b.schedules_to_bug, b.states, b.transitions)


def test_different_seeds_sample_different_schedules():
    machine = load_model("prefetcher").compile({"items": 4, "workers": 3})
    a = search(machine, "random", seed=1, budget=20)
    b = search(machine, "random", seed=2, budget=20)
    assert a.transitions != b.transitions or a.states != b.states


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_no_strategy_reports_a_violation_on_the_reference_prefetcher(strategy):
    machine = load_model("prefetcher").compile()
    r = search(machine, strategy, seed=3, budget=100)
    assert r.verdict == "ok" and r.violation is None
    assert r.schedules_to_bug is None and r.trace.steps == ()
    reachable = Explorer(machine, stop_at_first=False, reduce="none").run().states
    assert 1 < r.states <= reachable


def test_sampling_without_a_bug_is_not_exhaustive_and_says_so():
    r = search(load_model("prefetcher").compile(), "random", budget=10)
    assert not r.exhaustive and r.schedules == 10
    assert "proves nothing" in r.note


def test_a_found_violation_is_a_final_verdict_like_the_explorer_says():
    _, r = _search("one_cond_signal", "random")
    assert r.exhaustive  # CheckResult.exhaustive: "every state visited, or a violation found"


def test_trace_json_replays_through_the_cli(tmp_path, capsys):
    _, r = _search("one_cond_signal", "pct", seed=5, producers=2, consumers=3)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(r.to_json()))
    assert main(["replay", "one_cond_signal", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"replay of {len(r.trace)} steps" in out


def test_cli_check_with_a_strategy_prints_the_search_statistics(capsys):
    code = main(["check", "no_space_guard", "--strategy", "pct", "--depth", "2", "--seed", "4", "--json"])
    assert code == 1
    d = json.loads(capsys.readouterr().out)
    assert d["strategy"] == "pct" and d["verdict"] == "overflow" and d["expected"] == "overflow"
    assert d["search"]["seed"] == 4 and d["search"]["depth"] == 2
    assert "probability >= 1/(2*" in d["search"]["guarantee"]


# -- PCT ------------------------------------------------------------------------


@pytest.mark.parametrize("n, k, d, expected", [
    (1, 1, 1, 1.0), (2, 10, 1, 1 / 2), (3, 10, 2, 1 / 30), (2, 5, 3, 1 / 50), (4, 3, 4, 1 / 108)])
def test_pct_probability_is_one_over_n_times_k_to_the_d_minus_one(n, k, d, expected):
    assert pct_probability(n, k, d) == pytest.approx(expected)


def test_pct_runs_needed_reaches_the_confidence_and_no_fewer_runs_do():
    for p in (1 / 2, 1 / 6, 1 / 30, 1 / 1000):
        for c in (0.5, 0.9, 0.99):
            runs = pct_runs_needed(p, c)
            assert 1 - (1 - p) ** runs >= c
            assert runs == 1 or 1 - (1 - p) ** (runs - 1) < c
    assert pct_runs_needed(1.0) == 1
    assert pct_runs_needed(0.5, 0.75) == 2
    with pytest.raises(ModelError):
        pct_probability(0, 1, 1)


def test_pct_meets_its_bound_on_a_depth_two_bug():
    """The bug needs a1 < b1 < a2: depth 2, n=2, k=3, so p >= 1/6 per run.

    Exactly: A must start with the higher priority (1/2) and the change
    point must fall on step 2 (1/3); so runs to the first hit are geometric
    with mean 6.
    """
    machine = OnePreemption.compile()
    assert pct_probability(2, 3, 2) == pytest.approx(1 / 6)
    hits = [search(machine, "pct", seed=s, budget=200, depth=2, k=3).schedules_to_bug for s in range(300)]
    assert all(h is not None for h in hits)
    assert 4.5 <= sum(hits) / len(hits) <= 7.5


def test_pct_result_carries_the_guarantee():
    r = search(load_model("prefetcher").compile(), "pct", budget=50, depth=3)
    n = 3
    assert r.depth == 3 and r.k >= 1
    p = pct_probability(n, r.k, 3)
    assert r.guarantee.startswith(f"PCT d=3: one run finds a given depth-3 bug with probability >= 1/({n}*{r.k}^2)")
    assert f"{pct_runs_needed(p, 0.99):,} give 99% confidence" in r.guarantee
    assert r.to_json()["search"]["guarantee"] == r.guarantee


# -- preemption bounding ---------------------------------------------------------


def test_preemption_bound_zero_cannot_find_a_bug_that_needs_one_preemption():
    r = search(OnePreemption.compile(), "preempt", preemptions=0)
    assert r.verdict == "ok"
    assert r.bound_covered and not r.exhaustive  # covered the bound, but schedules beyond it exist


def test_preemption_bound_one_finds_it_with_exactly_one_preemption():
    machine = OnePreemption.compile()
    r = search(machine, "preempt", preemptions=1)
    assert r.verdict == "invariant" and r.preemptions == 1
    assert [(s.thread, s.step) for s in r.trace] == [("A", "a1"), ("B", "b1")]
    states, choices = replay_choices(machine, r.trace)
    assert count_preemptions(machine, states, choices) == 1


def test_preemption_search_reports_the_fewest_preemptions_any_bug_needs():
    for name in BROKEN + ["if_not_while"]:
        machine = load_model(name).compile()
        r = search(machine, "preempt", preemptions=3)
        assert r.violation is not None
        if r.preemptions:
            fewer = search(machine, "preempt", preemptions=r.preemptions - 1)
            assert fewer.verdict == "ok", name


def test_preemption_search_with_a_high_bound_visits_every_reachable_state():
    machine = load_model("monitor").compile({"producers": 2, "consumers": 2, "close": True})
    bfs = Explorer(machine, stop_at_first=False, reduce="none").run()
    r = search(machine, "preempt", preemptions=50)
    assert r.verdict == "ok" and r.exhaustive and r.bound_covered
    assert r.states == bfs.states
    low = search(machine, "preempt", preemptions=1)
    assert low.bound_covered and not low.exhaustive and low.states < bfs.states


def test_count_preemptions_ignores_switches_away_from_blocked_threads():
    machine = load_model("no_predicate_wait").compile()
    r = search(machine, "preempt", preemptions=0)
    states, choices = replay_choices(machine, r.trace)
    assert r.preemptions == 0 == count_preemptions(machine, states, choices)
    # The trace does switch threads: each switch happened when the thread could not go on.
    assert len({c[0] for c in choices}) == 2


# -- Hypothesis ------------------------------------------------------------------


@pytest.mark.parametrize("name, config", [
    ("one_cond_signal", {"producers": 2, "consumers": 3, "items": 2}),
    ("lease_overwrite", {"items": 5}),
    ("unlocked_check", {"producers": 2, "consumers": 2, "items": 2}),
])
def test_hypothesis_shrinks_to_a_schedule_no_longer_than_the_first_failure(name, config):
    machine = load_model(name).compile(config)
    for seed in range(3):
        r = search(machine, "hypothesis", seed=seed, budget=300)
        assert r.violation is not None
        assert r.shrunk_from is not None and len(r.trace) <= r.shrunk_from
        assert final_verdict(machine, r.trace)[0] == r.verdict


def test_hypothesis_shrinks_toward_fewer_switches():
    """Index 0 means "keep running": a shrunk schedule uses no needless preemption."""
    machine = OnePreemption.compile()
    r = search(machine, "hypothesis", budget=200)
    assert r.verdict == "invariant" and r.preemptions == 1
    assert [(s.thread, s.step) for s in r.trace] == [("A", "a1"), ("B", "b1")]


# -- semantics shared with the explorer ---------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_settings_branches_and_spurious_wakeups_replay(strategy):
    machine = load_model("one_cond_signal").compile({"notify": "any", "spurious": "on"})
    r = search(machine, strategy, seed=2, budget=BUDGET)
    assert r.verdict in ("deadlock", "lost_wakeup")
    assert final_verdict(machine, r.trace)[0] == r.verdict


def test_an_initial_state_that_breaks_an_invariant_is_reported_with_an_empty_trace():
    def build(m):
        m.shared(x=-1)
        p = m.program("p")
        p.step("s", next=DONE)
        m.thread("P", p)
        m.invariant("x >= 0", lambda s: s.x >= 0, "underflow")

    machine = make(build).compile()
    for strategy in STRATEGIES:
        r = search(machine, strategy, budget=5)
        assert r.verdict == "underflow" and len(r.trace) == 0 and r.schedules_to_bug == 1


def test_a_clean_finish_runs_the_end_checks():
    def build(m):
        m.shared(n=0)
        p = m.program("p")
        p.step("inc", lambda s, me: setattr(s, "n", s.n + 1), next=DONE)
        m.thread("P", p)
        m.thread("Q", p)
        m.at_end(lambda s: ("lost_item", "n is not 3") if s.n != 3 else None)

    machine = make(build).compile()
    for strategy in STRATEGIES:
        r = search(machine, strategy, budget=5)
        assert r.verdict == "lost_item" and len(r.trace) == 2
        assert final_verdict(machine, r.trace) == ("lost_item", "n is not 3")


def test_a_schedule_that_never_ends_is_cut_at_max_steps():
    def build(m):
        m.shared(n=0)
        p = m.program("p")
        p.step("spin", lambda s, me: setattr(s, "n", 1 - s.n), next="spin")
        m.thread("P", p)

    machine = make(build).compile()
    r = search(machine, "random", budget=3, max_steps=50)
    assert r.verdict == "ok" and r.truncated == 3 and r.max_depth == 50
    r = search(machine, "preempt", preemptions=1, max_steps=50)
    assert r.verdict == "ok" and r.exhaustive  # two states, a cycle, every schedule covered


def test_bad_arguments_are_model_errors():
    machine = OnePreemption.compile()
    for kwargs in ({"budget": 0}, {"depth": 0}, {"preemptions": -1}, {"k": 0}, {"max_steps": 0}):
        with pytest.raises(ModelError):
            search(machine, "random", **kwargs)
    with pytest.raises(ModelError, match="unknown strategy"):
        search(machine, "bfs")


def test_compare_reports_bfs_and_every_strategy():
    rows = compare([("no_space_guard", {"producers": 2, "consumers": 2, "items": 2})], budget=50, seeds=(0, 1),
                   bfs_cap=1000)
    methods = [r["method"] for r in rows]
    assert methods[0].startswith("bfs") and len(rows) == 6
    for r in rows:
        assert r["found"] >= 1 and r["verdict"] == "overflow"
    table = format_comparison(rows)
    assert table.count("\n") == len(rows) + 1 and "| no_space_guard (producers=2" in table
    assert not math.isnan(rows[1]["seconds"])

"""The SPIN cross-check: the twins agree with SPIN, and pan's report is parsed right.

The parser tests run everywhere, on reports captured from SPIN 6.5.2. The
cross-check itself needs ``spin`` and ``gcc`` and is skipped, with that
reason, only where ``spin`` is not installed.
"""

import json
import shutil

import pytest

from safeprefetch import catalog
from safeprefetch._cli.main import main
from safeprefetch._tools.spin import (
    ASSERTION_VIOLATED,
    INVALID_END_STATE,
    SPIN_CATEGORY,
    crosscheck,
    find_twins,
    parse_config_header,
    parse_pan_output,
)
from safeprefetch.model import VIOLATION_KINDS, ModelError

needs_spin = pytest.mark.skipif(shutil.which("spin") is None, reason="spin is not installed (apt-get install spin)")

REFERENCE = {"prefetcher", "monitor", "semaphores", "channel"}

# -- captured pan reports (SPIN 6.5.2, -DSAFETY, ./pan -c0) -----------------

PAN_OK = """\

(Spin Version 6.5.2 -- 6 December 2019)
\t+ Partial Order Reduction

Full statespace search for:
\tnever claim         \t- (none specified)
\tassertion violations\t+
\tcycle checks       \t- (disabled by -DSAFETY)
\tinvalid end states\t+

State-vector 68 byte, depth reached 77, errors: 0
     1148 states, stored
      257 states, matched
     1405 transitions (= stored+matched)
      936 atomic steps
hash conflicts:         0 (resolved)

pan: elapsed time 0 seconds
"""

PAN_DEADLOCK = """\
pan:1: invalid end state (at depth 27)

(Spin Version 6.5.2 -- 6 December 2019)
\t+ Partial Order Reduction

State-vector 44 byte, depth reached 36, errors: 2
      162 states, stored
       21 states, matched
      183 transitions (= stored+matched)
       40 atomic steps
"""

PAN_ASSERTIONS = """\
pan:1: assertion violated (count>0) (at depth 20)
pan:2: assertion violated (count<1) (at depth 26)
pan:3: assertion violated (count>0) (at depth 24)

(Spin Version 6.5.2 -- 6 December 2019)
\t+ Partial Order Reduction

State-vector 44 byte, depth reached 30, errors: 7
      174 states, stored
       23 states, matched
      197 transitions (= stored+matched)
       45 atomic steps
"""

# pan prints counts with "%9.8g": from 1e8 on they come out in exponent form.
PAN_BIG = """\
pan:1: assertion violated 0 (at depth 2)
pan:2: invalid end state (at depth 1)

State-vector 412 byte, depth reached 1234, errors: 2
1.2345679e+08 states, stored (1.3e+08 visited)
 98765432 states, matched
2.2222222e+08 transitions (= visited+matched)
"""

PAN_DEPTH_TOO_SMALL = """\
error: max search depth too small

State-vector 44 byte, depth reached 9, errors: 0
       36 states, stored
        7 states, matched
       43 transitions (= stored+matched)
"""


def test_parse_a_clean_report():
    r = parse_pan_output(PAN_OK)
    assert (r.stored, r.matched, r.transitions, r.errors, r.depth) == (1148, 257, 1405, 0, 77)
    assert r.kinds == () and r.first_error is None and r.verdict == "ok" and not r.truncated


def test_parse_an_invalid_end_state_as_spins_deadlock():
    r = parse_pan_output(PAN_DEADLOCK)
    assert r.errors == 2 and r.kinds == (INVALID_END_STATE,)
    assert r.first_error == "pan:1: invalid end state (at depth 27)"
    assert r.verdict == "invalid end state"
    assert (r.stored, r.matched, r.transitions) == (162, 21, 183)


def test_parse_repeated_assertion_violations_as_one_kind():
    r = parse_pan_output(PAN_ASSERTIONS)
    assert r.errors == 7 and r.kinds == (ASSERTION_VIOLATED,) and r.stored == 174


def test_parse_counts_in_exponent_form_and_mixed_error_kinds():
    r = parse_pan_output(PAN_BIG)
    assert r.stored == 123_456_790
    assert r.matched == 98_765_432
    assert r.transitions == 222_222_220
    assert r.kinds == (ASSERTION_VIOLATED, INVALID_END_STATE)
    assert r.verdict == "assertion violated+invalid end state"


def test_parse_notices_a_search_cut_by_the_depth_bound():
    assert parse_pan_output(PAN_DEPTH_TOO_SMALL).truncated


def test_parse_rejects_what_is_not_a_pan_report():
    with pytest.raises(ValueError, match="states, stored"):
        parse_pan_output("spin: m.pml:4, Error: syntax error\n")


# -- twins and their headers ------------------------------------------------


def test_config_header_is_parsed_and_required():
    assert parse_config_header("// x\n// config: capacity=2 ordered=on\nbyte x;\n") == {
        "capacity": "2", "ordered": "on"}
    with pytest.raises(ModelError, match="config"):
        parse_config_header("byte x;\n")
    with pytest.raises(ModelError, match="NAME=VALUE"):
        parse_config_header("// config: capacity\n")


def test_every_violation_kind_but_starvation_maps_to_a_spin_category():
    assert set(SPIN_CATEGORY) == set(VIOLATION_KINDS) - {"starvation"} | {"ok"}
    hangs = {k for k, v in SPIN_CATEGORY.items() if v == INVALID_END_STATE}
    assert hangs == {"deadlock", "lost_wakeup", "shutdown_hang"}


def test_twins_cover_the_references_and_each_kind_of_bug():
    twins = find_twins()
    models = catalog()
    assert len(twins) >= 10
    names = {t.name for t in twins}
    assert REFERENCE <= names
    for t in twins:
        assert t.name in models, f"twin {t.name}.pml has no catalog model"
        models[t.name].configure(t.config)  # the header names real parameters
        assert f"twin of models/{t.name}.py" in t.source
    expected = {models[n].expected for n in names}
    assert {"ok", "deadlock", "lost_wakeup", "overflow", "shutdown_hang"} <= expected


def test_unknown_twin_is_a_one_line_usage_error(capsys):
    assert main(["crosscheck", "no_such_model"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no SPIN twin for no_such_model") and err.count("\n") == 1


def test_missing_spin_exits_2_with_one_line(monkeypatch, capsys):
    import safeprefetch._tools.spin as spin_mod

    monkeypatch.setattr(spin_mod.shutil, "which", lambda name: None if name == "spin" else "/usr/bin/" + name)
    assert main(["crosscheck"]) == 2
    err = capsys.readouterr().err
    assert "spin not found" in err and err.count("\n") == 1


# -- the cross-check itself (needs spin and gcc) ------------------------------


@pytest.fixture(scope="module")
def results():
    return {t.name: crosscheck(t) for t in find_twins()}


@needs_spin
def test_every_twin_agrees_with_spin(results):
    bad = {n: (r.verdict, r.por.verdict, r.noreduce.verdict) for n, r in results.items() if not r.agree}
    assert not bad, f"safeprefetch and SPIN disagree: {bad}"


@needs_spin
def test_verdicts_are_the_declared_ones(results):
    models = catalog()
    for name, r in results.items():
        assert r.verdict == models[name].expected, name


@needs_spin
def test_reference_twins_mirror_the_models_state_for_state(results):
    """Without POR, SPIN stores exactly safeprefetch's distinct states: the twins mirror step for step."""
    for name in REFERENCE:
        r = results[name]
        assert r.noreduce.stored == r.states, (
            f"{name}: SPIN -DNOREDUCE stores {r.noreduce.stored}, safeprefetch {r.states}: the twin is out of date")


@needs_spin
def test_hang_twins_mirror_the_models_state_for_state(results):
    """A hang ends a path in both tools, so the full state spaces coincide too."""
    for name, r in results.items():
        if r.spin_expected == INVALID_END_STATE:
            assert r.noreduce.stored == r.states, name


@needs_spin
def test_crosscheck_command_prints_json_and_exits_0(capsys):
    assert main(["crosscheck", "--json", "no_predicate_wait", "monitor"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["model"] for r in rows] == ["no_predicate_wait", "monitor"]
    assert rows[0]["safeprefetch"]["verdict"] == "lost_wakeup"
    assert rows[0]["spin"]["noreduce"]["kinds"] == [INVALID_END_STATE]
    assert rows[1]["spin"]["por"]["verdict"] == "ok" and all(r["agree"] for r in rows)


@needs_spin
def test_crosscheck_table_has_a_row_per_twin(capsys):
    assert main(["crosscheck", "wait_holding_mutex"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["model", "config", "safeprefetch"]
    assert out[2].split()[0] == "wait_holding_mutex" and out[2].endswith("yes")
    assert out[-1].startswith("1/1 twins agree with SPIN")


@needs_spin
def test_docs_spin_table_is_current(results):
    """docs/spin.md shows what the command prints: regenerate with `crosscheck --markdown`."""
    from pathlib import Path

    from safeprefetch._tools.spin import format_markdown

    twins = find_twins()
    table = format_markdown([results[t.name] for t in twins], twins)
    doc = (Path(__file__).resolve().parent.parent / "docs" / "spin.md").read_text()
    begin, end = "<!-- crosscheck table: begin -->\n", "\n<!-- crosscheck table: end -->"
    committed = doc[doc.index(begin) + len(begin):doc.index(end)]
    assert committed == table, "docs/spin.md is stale: paste `python -m safeprefetch crosscheck --markdown`"

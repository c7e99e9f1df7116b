"""Where threads meet the interpreter: the two broken/fixed pairs of the catalog.

A signal handler, a GC finalizer or a KeyboardInterrupt runs *on a thread
that is already inside a step*. Each pair makes that interleaving explicit
as model steps (a ``SIGTERM`` or ``SIGINT`` branch of the interrupted
thread's own steps). The broken models are pinned to their exact shortest
trace; the fixed ones are proved ok, exhaustively, over their sweeps, and
shown not to get there by dropping the interrupt.
"""

import itertools

import pytest

from safeprefetch import catalog, check
from safeprefetch._check.explore import Explorer
from safeprefetch._tools.teach import fix_report, model_doc

MODELS = catalog()

# broken model -> (verdict, its fix, the shortest trace as (thread, step, branch), what the checker says)
BROKEN = {
    "handler_close_holding_lock": (
        "deadlock", "handler_close_deferred",
        [("main", "lock", None),
         ("main", "check item", "SIGTERM")],
        "all threads blocked: main at 'close(): lock', worker0 at 'lock'"),
    "interrupt_after_acquire": (
        "deadlock", "interrupt_deferred",
        [("main", "lock.acquire()", None),
         ("main", "check signals", "SIGINT"),
         ("main", "raise KeyboardInterrupt", None)],
        "all threads blocked: worker0 at 'lock.acquire()'"),
}
FIXED = {fix for _, fix, _, _ in BROKEN.values()}
# The switch that turns the interrupt on, per pair.
SWITCH = {"handler_close_holding_lock": "signal", "handler_close_deferred": "signal",
          "interrupt_after_acquire": "interrupt", "interrupt_deferred": "interrupt"}


def sweep_cases(name):
    sweep = MODELS[name].sweep
    return [dict(zip(sweep, values)) for values in itertools.product(*sweep.values())]


def final_states(name, cfg):
    """Every reachable state in which all threads are done (a full search, no reduction)."""
    machine = MODELS[name].compile(cfg)
    explorer = Explorer(machine, reduce="none", stop_at_first=False)
    explorer.run()
    return machine, [st for st in explorer.parents if machine.all_done(st)]


# -- the broken models: verdict and the exact shortest trace -----------------------


def test_both_pairs_are_in_the_catalog():
    assert set(BROKEN) | FIXED <= set(MODELS)
    for name in BROKEN:
        assert MODELS[name].expected != "ok"
    for name in FIXED:
        assert MODELS[name].expected == "ok"


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_model_has_its_verdict_and_exact_shortest_trace(name):
    verdict, _, steps, message = BROKEN[name]
    model = MODELS[name]
    assert model.expected == verdict
    result = check(model)
    assert result.exhaustive
    assert result.verdict == verdict, result.violation and result.violation.message
    assert [(s.thread, s.step) for s in result.trace.steps] == [(t, st) for t, st, _ in steps]
    assert [s.branch for s in result.trace.steps] == [b for _, _, b in steps]
    assert result.violation.message == message


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_the_bug_needs_the_interrupt(name):
    """Without the signal the same protocol is correct: the bug lives where the interrupt runs."""
    for workers in (1, 2):
        result = check(MODELS[name], {SWITCH[name]: False, "workers": workers})
        assert result.verdict == "ok" and result.exhaustive


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_the_bug_shows_in_every_configuration_with_the_interrupt(name):
    fix = BROKEN[name][1]
    for cfg in sweep_cases(fix):
        if cfg[SWITCH[name]]:
            result = check(MODELS[name], cfg)
            assert result.verdict == BROKEN[name][0], cfg


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_model_names_its_fix_and_the_fix_holds_at_its_config(name):
    _, fix, _, _ = BROKEN[name]
    assert MODELS[name].fix == fix
    report = fix_report(MODELS[name], MODELS[name].configure({}))
    assert report.fix is MODELS[fix] and not report.dropped
    assert report.result.verdict == "ok" and report.result.exhaustive


@pytest.mark.parametrize("name", sorted(set(BROKEN) | FIXED))
def test_docstring_says_why_a_protocol_model_cannot_see_it(name):
    doc = model_doc(MODELS[name])
    titles = [title for title, _ in doc.sections]
    assert "Why a protocol model cannot see it" in titles
    why = " ".join(dict(doc.sections)["Why a protocol model cannot see it"].split())
    assert "already inside a step" in why
    assert doc.source and doc.minimal_config and doc.expected.startswith(MODELS[name].expected)


# -- the fixed models: ok, exhaustively, over the sweep ----------------------------


def test_the_sweeps_are_the_declared_ones():
    assert MODELS["handler_close_deferred"].sweep == {"workers": [1, 2], "items": [0, 1, 2, 3],
                                                      "signal": [False, True]}
    assert MODELS["interrupt_deferred"].sweep == {"workers": [1, 2], "rounds": [1, 2],
                                                  "interrupt": [False, True]}
    assert len(sweep_cases("handler_close_deferred")) == 16
    assert len(sweep_cases("interrupt_deferred")) == 8


FIXED_CASES = [(name, cfg) for name in sorted(FIXED) for cfg in sweep_cases(name)]


def _id(case):
    name, cfg = case
    return name + " " + " ".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in cfg.items())


@pytest.mark.parametrize("case", FIXED_CASES, ids=[_id(c) for c in FIXED_CASES])
def test_fixed_model_is_ok_and_exhaustive_over_its_sweep(case):
    name, cfg = case
    result = check(MODELS[name], cfg)
    assert result.verdict == "ok", result.violation and result.violation.message
    assert result.exhaustive


@pytest.mark.parametrize("notify, spurious", [("fifo", "on"), ("any", "off"), ("any", "on")])
@pytest.mark.parametrize("workers", [1, 2])
def test_deferred_close_is_ok_under_every_condvar_semantics(workers, notify, spurious):
    result = check(MODELS["handler_close_deferred"],
                   {"workers": workers, "items": 2, "signal": True, "notify": notify, "spurious": spurious})
    assert result.verdict == "ok" and result.exhaustive


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("rounds", [1, 2])
def test_the_deferred_interrupt_still_reaches_main_and_no_lock_is_left_held(workers, rounds):
    machine, finals = final_states("interrupt_deferred", {"workers": workers, "rounds": rounds,
                                                          "interrupt": True})
    ends = [machine.describe(st) for st in finals]
    interrupted = [d for d in ends if d["sent"]]
    assert interrupted, "no run in which SIGINT arrives: the sweep would be vacuous"
    assert all(d["interrupted"] for d in interrupted)  # deferred, never dropped
    assert any(not d["sent"] for d in ends)  # and runs where it never comes
    assert all(d["lock"] == -1 for d in ends)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_deferred_close_is_carried_out_after_the_signal(workers):
    machine, finals = final_states("handler_close_deferred", {"workers": workers, "items": 1, "signal": True})
    ends = [machine.describe(st) for st in finals]
    signalled = [d for d in ends if d["signalled"]]
    assert signalled and all(d["closed"] and d["kernel"] == -1 for d in ends)
    # The signal stops the stream early in some runs, and comes too late to matter in others.
    assert {len(d["received"]) for d in signalled} == set(range(workers + 1))

"""Symmetry and partial-order reduction never change a verdict (or, with symmetry, a trace length)."""

import pytest

from safeprefetch import catalog, check, load_model
from safeprefetch._check.explore import Explorer
from safeprefetch._check.reduce import Symmetry

MODELS = catalog()
SEMANTICS = [{}, {"notify": "any"}, {"spurious": "on"}]


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("reduce", ["symmetry", "por", "all"])
def test_every_catalog_verdict_is_preserved_under_every_reduction(name, reduce):
    for cfg in SEMANTICS:
        base = check(MODELS[name], cfg, reduce="none")
        reduced = check(MODELS[name], cfg, reduce=reduce)
        assert reduced.verdict == base.verdict, (cfg, reduced.violation and reduced.violation.message)
        assert len(reduced.trace) == len(base.trace), cfg
        assert reduced.states <= base.states or not reduced.ok


@pytest.mark.parametrize("cfg", [
    {"workers": 3, "capacity": 2, "items": 3, "close": True, "error": True},
    {"workers": 2, "capacity": 3, "items": 4, "ordered": False, "abandon": True},
])
def test_symmetry_stores_exactly_one_state_per_orbit(cfg):
    machine = load_model("prefetcher").compile(cfg)
    full = Explorer(machine, reduce="none")
    full.run()
    sym = Symmetry(machine)
    orbits = {sym.canon(s) for s in full.parents}
    reduced = Explorer(machine, reduce="symmetry")
    assert reduced.run().verdict == "ok"
    assert set(reduced.parents) == orbits
    assert len(orbits) < len(full.parents)
    for s in list(full.parents)[:500]:
        c = sym.canon(s)
        assert sym.canon(c) == c


def test_a_trace_found_under_symmetry_replays_on_the_real_model():
    from safeprefetch import replay
    from safeprefetch._check.explore import final_verdict

    machine = load_model("non_idempotent_close").compile()
    result = check(machine, reduce="all")
    assert result.verdict != "ok"
    replay(machine, result.trace)
    assert final_verdict(machine, result.trace)[0] == result.verdict


def test_reference_models_shrink_under_reduction():
    for name in ("prefetcher", "semaphores"):
        cfg = {"workers": 3, "items": 3} if name == "prefetcher" else {}
        full = check(MODELS[name], cfg, reduce="none")
        red = check(MODELS[name], cfg, reduce="all")
        assert red.ok and full.ok and red.states < full.states

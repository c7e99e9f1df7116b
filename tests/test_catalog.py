"""Every catalog model has the verdict it declares, and broken models the exact shortest trace."""

import itertools

import pytest

from safeprefetch import catalog, check
from safeprefetch.model import VIOLATION_KINDS

# model -> (expected verdict, length of the shortest counterexample)
BROKEN = {
    "one_cond_signal": ("deadlock", 22),
    "no_predicate_wait": ("lost_wakeup", 7),
    "no_space_guard": ("overflow", 6),
}
REFERENCE = {"prefetcher"}

MODELS = catalog()


def test_every_catalog_model_is_pinned_here():
    assert set(MODELS) == set(BROKEN) | REFERENCE


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_model_shows_its_bug_with_the_shortest_trace(name):
    verdict, length = BROKEN[name]
    model = MODELS[name]
    assert model.expected == verdict
    result = check(model)
    assert result.verdict == verdict, result.violation and result.violation.message
    assert len(result.trace) == length
    assert result.expected == verdict


@pytest.mark.parametrize("name", sorted(MODELS))
def test_docstring_has_the_four_parts(name):
    doc = MODELS[name].__doc__ or __import__(MODELS[name].__module__, fromlist=["x"]).__doc__
    assert doc.startswith(f"{name}: ")
    assert "Source:" in doc and "Minimal config:" in doc and "Expected verdict:" in doc
    assert MODELS[name].expected in VIOLATION_KINDS + ("ok",)


REF_CASES = [(n, dict(zip(MODELS[n].sweep, vals))) for n in sorted(REFERENCE - {"prefetcher"})
             for vals in itertools.product(*MODELS[n].sweep.values())]


@pytest.mark.parametrize("name, cfg", REF_CASES)
def test_reference_design_is_ok_over_its_sweep(name, cfg):
    result = check(MODELS[name], cfg)
    assert result.verdict == "ok" and result.exhaustive

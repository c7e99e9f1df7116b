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
    "if_not_while": ("underflow", 15),
    "unlocked_check": ("lost_wakeup", 8),
    "racy_counter": ("lost_item", 16),
    "signal_before_publish": ("underflow", 5),
    "wait_holding_mutex": ("deadlock", 2),
    "one_sentinel_many_consumers": ("shutdown_hang", 13),
    "dropped_sentinel": ("shutdown_hang", 17),
    "blocking_close_on_full": ("shutdown_hang", 9),
    "close_without_wake": ("shutdown_hang", 12),
    "notify_one_on_close": ("shutdown_hang", 14),
    "swallowed_producer_error": ("shutdown_hang", 4),
    "join_before_drain": ("deadlock", 8),
    "shared_handle_close": ("lost_item", 22),
    "non_idempotent_close": ("lost_item", 27),
    "lease_overwrite": ("invariant", 18),
    "double_buffer_swap": ("underflow", 12),
    "caffe2_sticky_failure": ("error_lost", 27),
    # A lasso: 6 steps into the cycle, then the 1-step cycle (monitor0 spins) repeated forever.
    "priority_inversion": ("starvation", 7),
    # Where threads meet the interpreter: code that runs on a thread already inside a step.
    "handler_close_holding_lock": ("deadlock", 2),
    "interrupt_after_acquire": ("deadlock", 3),
    # A lasso under strong fairness: the writer sleeps while two readers keep the count above zero.
    "reader_preference_rwlock": ("starvation", 24),
    # The waits real code uses: a timed wait, a try-lock, a lock chosen by expression, an invariant
    # that reads the threads, a thread started by another.
    "polling_close": ("lost_wakeup", 14),
    "trylock_flush": ("lost_item", 6),
    "transfer_lock_order": ("deadlock", 2),
    "check_then_set": ("invariant", 4),
    "start_before_init": ("invariant", 2),
}
REFERENCE = {"prefetcher", "monitor", "semaphores", "channel", "handler_close_deferred", "interrupt_deferred",
             "predictive_prefetcher", "writer_preference_rwlock", "trylock_flush_recheck", "ordered_transfer"}

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


def test_priority_inversion_is_starvation_only_under_strict_priority():
    model = MODELS["priority_inversion"]
    strict = check(model)
    assert strict.verdict == "starvation"
    assert "consumer0 never makes progress" in strict.violation.message
    assert check(model, {"policy": "fair"}).verdict == "ok"

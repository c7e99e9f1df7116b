"""Hypothesis: generated configurations and fault points of the reference prefetcher are all ok."""

from hypothesis import given, settings
from hypothesis import strategies as st

from safeprefetch import check, load_model

PREFETCHER = load_model("prefetcher")


@st.composite
def prefetcher_configs(draw):
    items = draw(st.integers(0, 4))
    return {
        "capacity": draw(st.integers(1, 3)),
        "workers": draw(st.integers(1, 3)),
        "items": items,
        "ordered": draw(st.booleans()),
        "abandon": draw(st.booleans()),
        "close": (close := draw(st.booleans())),
        "closers": draw(st.integers(1, 2)) if close else 1,
        # Fault points: the item whose fetch fails, and how many deliveries before close.
        "error_at": draw(st.integers(-1, max(items - 1, -1))),
        "close_after": draw(st.integers(-1, items)) if close else -1,
        "notify": draw(st.sampled_from(["fifo", "any"])),
    }


@settings(max_examples=60)
@given(prefetcher_configs())
def test_generated_configs_and_fault_points_are_ok(cfg):
    result = check(PREFETCHER, cfg)
    assert result.exhaustive
    assert result.verdict == "ok", (cfg, result.violation and result.violation.message)


@settings(max_examples=30)
@given(items=st.integers(1, 4), error_at=st.integers(0, 3), workers=st.integers(1, 3), capacity=st.integers(1, 3))
def test_a_source_error_always_reaches_the_consumer_at_its_position(items, error_at, workers, capacity):
    # The model's end check is what proves this; here we make sure the fault really fires
    # by checking that some reachable end state has the consumer raising that error.
    from safeprefetch._check.explore import Explorer

    error_at = error_at % items
    machine = PREFETCHER.compile({"items": items, "error_at": error_at, "workers": workers, "capacity": capacity})
    e = Explorer(machine, stop_at_first=False)
    assert e.run().verdict == "ok"
    ends = [s for s in e.parents if machine.all_done(s)]
    assert ends
    for s in ends:
        view = machine.shared(s)
        assert view.error_seen == view.first_error == error_at
        assert view.received == tuple(range(error_at))

"""The catalog's bugs and reference designs as plain threading code, checked by the code checker.

Each of the 12 bugs must be found, with a trace minimized to the fewest
preemptions any schedule needs (checked against a search bounded one below)
and short enough to read; each reference must be proved over every schedule
at its shape. The explorer's reduction is differential-tested here too: DPOR
with sleep sets must reach exactly the outcomes (Mazurkiewicz traces and
verdicts) that plain DFS reaches, bounded and not, on the same bodies.
"""

import pytest

from safeprefetch import interleavings
from safeprefetch._harness.code_twins import REFERENCES, TWINS, twin
from safeprefetch._interleave.check import outcomes

pytestmark = pytest.mark.timeout(300)

#: The longest minimized trace each bug may have: the model's shortest counterexample, plus the
#: begin/start/join/exit steps of real threads. A trace longer than this is not minimized.
MAX_TRACE = {"one_cond_signal": 30, "if_not_while": 20, "no_predicate_wait": 8, "close_without_wake": 10,
             "no_space_guard": 20, "racy_counter": 45, "double_buffer_swap": 10, "join_before_drain": 6,
             "non_idempotent_close": 20, "dropped_sentinel": 8, "lock_order_inversion": 8,
             "swallowed_producer_error": 10}


def test_twelve_bugs_and_four_references():
    assert len(TWINS) >= 12 and set(MAX_TRACE) == set(TWINS)
    assert set(REFERENCES) == {"bounded_buffer", "monitor", "semaphores", "channel"}
    with pytest.raises(KeyError, match="no twin named"):
        twin("nope")


@pytest.mark.parametrize("name", sorted(TWINS))
def test_each_bug_is_found_with_a_minimized_trace(name):
    t = TWINS[name]
    r = interleavings.check(t.at(), **t.options)
    assert r.verdict == t.expected, interleavings.render(r)
    assert len(r.trace) <= MAX_TRACE[name], interleavings.render(r)
    assert r.shrunk_from is not None and len(r.trace) <= r.shrunk_from
    assert r.minimized is True  # finished: its preemptions are the least any schedule needs
    # Fewest preemptions: one fewer finds nothing of this kind.
    if r.preemptions:
        below = interleavings.check(t.at(), preemption_bound=r.preemptions - 1, minimize=False, **t.options)
        assert below.verdict != t.expected
    # The trace replays to the same violation.
    again = interleavings.replay(t.at(), r.to_json(), **{k: v for k, v in t.options.items() if k == "lines"})
    assert again.verdict == r.verdict


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_each_reference_is_proved_over_every_schedule(name):
    t = REFERENCES[name]
    # channel's two producers: every schedule is ~6,000 (slow sweep below); here within 1 preemption,
    # and every schedule of one producer sending two items.
    bound = 1 if name == "channel" else None
    r = interleavings.check(t.at(), preemption_bound=bound)
    assert r.verdict == "ok", interleavings.render(r)
    assert r.exhaustive or (bound is not None and r.bound_covered)
    assert r.states > 1
    if name == "channel":
        r = interleavings.check(t.at(producers=1, items=2))
        assert r.verdict == "ok" and r.exhaustive


@pytest.mark.parametrize("name", ["bounded_buffer", "monitor", "semaphores"])
def test_each_reference_also_holds_when_notify_wakes_any_waiter(name):
    t = REFERENCES[name]
    assert interleavings.check(t.at(), notify="any").verdict == "ok"


def test_a_reference_with_its_guard_removed_is_caught():
    """The proofs have teeth: the bounded buffer's capacity check, taken out, is found."""
    from safeprefetch._harness import code_twins

    def broken_put(self, x):
        with self.lock:
            self.items.append(x)  # no ``while full: wait``
            self.not_empty.notify()

    def body():
        buf = code_twins.BoundedBuffer(1)
        buf.put = broken_put.__get__(buf)
        buf.put(1)
        buf.put(2)
        assert len(buf.items) <= buf.capacity, f"{len(buf.items)} items in a buffer of 1"

    r = interleavings.check(body)
    assert r.verdict == "assertion" and "2 items" in r.violation.message


# -- the differential test of the reduction --------------------------------------------------------

#: (twin, shape) small enough for plain DFS to run every schedule in about a second.
DIFFERENTIAL = [("one_cond_signal", {"items": 1}), ("close_without_wake", {}), ("lock_order_inversion", {}),
                ("double_buffer_swap", {}), ("no_predicate_wait", {}), ("bounded_buffer", {"items": 1})]


def _same_outcomes(name, shape):
    t = twin(name)
    full, n_full = outcomes(t.at(**shape), reduce="none")
    reduced, n_reduced = outcomes(t.at(**shape), reduce="dpor")
    assert reduced == full
    assert n_reduced <= n_full
    return n_full, n_reduced


@pytest.mark.parametrize("name, shape", DIFFERENTIAL, ids=[n for n, _ in DIFFERENTIAL])
def test_dpor_reaches_every_outcome_plain_dfs_reaches(name, shape):
    _same_outcomes(name, shape)


@pytest.mark.slow
@pytest.mark.parametrize("name, shape", [("semaphores", {"consumers": 1, "items": 1}), ("if_not_while", {}),
                                         ("monitor", {"consumers": 1})])
def test_dpor_reaches_every_outcome_plain_dfs_reaches_on_bigger_bodies(name, shape):
    _same_outcomes(name, shape)


def test_a_bounded_search_is_plain_dfs_and_says_so():
    r = interleavings.check(twin("bounded_buffer").at(), preemption_bound=1)
    assert r.config["reduce"] == "none" and r.bound_covered and r.verdict == "ok"


def test_dpor_saves_schedules_on_the_reference_buffer():
    n_full, n_reduced = _same_outcomes("bounded_buffer", {"items": 1})
    assert n_reduced * 2 <= n_full, (n_full, n_reduced)


# -- the bigger shapes ---------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("shape", [dict(producers=1, consumers=1, capacity=1, items=2),
                                   dict(producers=2, consumers=2, capacity=2, items=1),
                                   dict(producers=2, consumers=2, capacity=2, items=2)])
def test_the_bounded_buffer_is_proved_at_the_bench_shapes(shape):
    r = interleavings.check(REFERENCES["bounded_buffer"].at(**shape))
    assert r.verdict == "ok" and r.exhaustive


@pytest.mark.slow
@pytest.mark.parametrize("name, shape", [("monitor", dict(consumers=2, capacity=2, items=2)),
                                         ("monitor", dict(consumers=1, capacity=1, items=2, fail=True)),
                                         ("monitor", dict(consumers=2, capacity=1, items=2, close_early=True)),
                                         ("semaphores", dict(consumers=2, capacity=2, items=2)),
                                         ("channel", dict(producers=2, capacity=1, items=1))])
def test_the_references_are_proved_at_bigger_shapes(name, shape):
    r = interleavings.check(REFERENCES[name].at(**shape))
    assert r.verdict == "ok" and r.exhaustive

"""The bare model (``_harness/live_bare.py``) and the slot-pool floor: the measurements beside ours must hand
over what ours hands over.

A figure that compares ours with a stripped runtime is only worth reading
if the stripped runtime does the same work: every item once, in order,
through the model's own transitions, ending in the model's end state.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from safeprefetch._dsl.model import DONE
from safeprefetch._harness.live_bare import TRANSITIONS, bare_run
from safeprefetch._harness.live_common import slot_pool_run
from safeprefetch._prefetcher.machine import machine_for

pytestmark = pytest.mark.timeout(60)


def _transitions(name: str) -> str:
    if name == "in place, Cython":
        from safeprefetch._check import generated as G

        if not G.cython_available():
            pytest.skip("Cython is not installed (the speed extra)")
    return name


@pytest.mark.parametrize("transitions", TRANSITIONS)
@pytest.mark.parametrize("capacity,run", [(1, 1), (2, 1), (2, 2), (3, 1), (8, 8)])
def test_every_item_once_in_order_through_the_model(capacity, run, transitions):
    n = 97
    seen: list[int] = []
    fetched: list[int] = []
    workers: set[int] = set()

    def fetch_into(i: int, slot: np.ndarray) -> None:
        workers.add(threading.get_ident())
        fetched.append(i)
        slot[:] = i

    final = bare_run(fetch_into, n, capacity, (3,), np.int64, lambda out: seen.append(int(out[0])), run=run,
                     transitions=_transitions(transitions))
    assert seen == list(range(n)) and fetched == list(range(n))
    assert workers and threading.get_ident() not in workers  # the fetches ran on the worker thread
    m = machine_for(capacity, 1, n, True, True, 0, capacity)
    names = m.field_names
    assert final[names.index("delivered")] == n
    assert final[m.pc_index[m.thread_names.index("worker0")]] == DONE
    assert final[m.pc_index[m.thread_names.index("consumer")]] != "release lease"
    assert type(final) is tuple and len(final) == len(names)


def test_every_layout_ends_in_the_same_state():
    # The in-place rewrite is checked against the generated transitions state by state elsewhere
    # (tests/test_live_layout.py); here, the two runs it is measured in end where the generated one ends.
    ends = {t: bare_run(lambda i, slot: None, 40, 2, (2,), np.int64, lambda out: None, transitions=_transitions(t))
            for t in TRANSITIONS[:2]}
    assert ends["in place"] == ends["generated"]


def test_unknown_transitions_are_refused():
    with pytest.raises(ValueError, match="transitions must be one of"):
        bare_run(lambda i, slot: None, 4, 2, (2,), np.int64, lambda out: None, transitions="C")


@pytest.mark.parametrize("transitions", TRANSITIONS[:2])
def test_consumer_copies_out_of_the_slot_before_the_worker_reuses_it(transitions):
    # One slot: the worker may refill it only after the consumer released it, so every copy holds its item
    # whole (a fetch that raced the copy would tear an item: half its rows from the next one).
    n = 200
    bad: list[int] = []

    def fetch_into(i: int, slot: np.ndarray) -> None:
        slot[:] = i

    def consume(out: np.ndarray) -> None:
        if not (out == out[0]).all():
            bad.append(int(out[0]))

    bare_run(fetch_into, n, 1, (4096,), np.int64, consume, transitions=transitions)
    assert bad == []


def test_a_failing_fetch_is_raised_not_hung():
    def fetch_into(i: int, slot: np.ndarray) -> None:
        if i == 5:
            raise OSError("disk gone")
        slot[:] = i

    with pytest.raises(OSError, match="disk gone"):
        bare_run(fetch_into, 20, 2, (2,), np.int64, lambda out: None)


def test_a_given_pool_and_out_are_the_ones_used():
    # The copy figure passes np.copyto's touched pool and out, so that no page fault lands in its timed run.
    pool = [np.full((3,), -1, np.int64) for _ in range(2)]
    out = np.zeros((3,), np.int64)
    filled: list[int] = []
    seen: list[int] = []

    def fetch_into(i: int, slot: np.ndarray) -> None:
        filled.append(next(k for k, a in enumerate(pool) if a is slot))
        slot[:] = i

    def consume(o: np.ndarray) -> None:
        assert o is out
        seen.append(int(o[0]))

    bare_run(fetch_into, 9, 2, (3,), np.int64, consume, pool=pool, out=out)
    assert seen == list(range(9)) and sorted(set(filled)) == [0, 1] and int(out[0]) == 8


def test_a_pool_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="pool: 2 arrays of shape"):
        bare_run(lambda i, slot: None, 4, 2, (2,), np.int64, lambda out: None, pool=[np.zeros((3,), np.int64)] * 2)


# The slot-pool floor (``live_common.slot_pool_run``): the contract with no model, over C queues. It is the
# floor the figures set ours and the bare model against, so it must do the same work: every item fetched on
# another thread into a slot, copied out whole, in order, and a slot refilled only after it was copied out.


@pytest.mark.parametrize("capacity", [1, 2, 8])
def test_slot_pool_floor_hands_over_every_item_once_in_order_untorn(capacity):
    n = 300
    seen: list[int] = []
    fetched: list[int] = []
    torn: list[int] = []
    workers: set[int] = set()

    def fetch_into(i: int, slot: np.ndarray) -> None:
        workers.add(threading.get_ident())
        fetched.append(i)
        slot[:] = i

    def consume(out: np.ndarray) -> None:
        if not (out == out[0]).all():
            torn.append(int(out[0]))
        seen.append(int(out[0]))

    slot_pool_run(fetch_into, n, capacity, (2048,), np.int64, consume)
    assert seen == list(range(n)) and fetched == list(range(n)) and torn == []
    assert workers and threading.get_ident() not in workers


def test_slot_pool_floor_raises_a_failing_fetch_and_uses_the_given_pool():
    def failing(i: int, slot: np.ndarray) -> None:
        if i == 3:
            raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        slot_pool_run(failing, 10, 2, (2,), np.int64, lambda out: None)
    pool = [np.full((3,), -1, np.int64) for _ in range(2)]
    out = np.zeros((3,), np.int64)
    used: set[int] = set()

    def fetch_into(i: int, slot: np.ndarray) -> None:
        used.add(next(k for k, a in enumerate(pool) if a is slot))
        slot[:] = i

    slot_pool_run(fetch_into, 5, 2, (3,), np.int64, lambda o: None, pool=pool, out=out)
    assert used == {0, 1} and int(out[0]) == 4
    with pytest.raises(ValueError, match="pool: 2 arrays of shape"):
        slot_pool_run(fetch_into, 4, 2, (2,), np.int64, lambda o: None, pool=[np.zeros((3,), np.int64)] * 2)

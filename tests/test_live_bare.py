"""The bare model (``_harness/live_bare.py``): the measurement beside ours must hand over what ours hands over.

A figure that compares ours with a stripped runtime is only worth reading
if the stripped runtime does the same work: every item once, in order,
through the model's own transitions, ending in the model's end state.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from safeprefetch._dsl.model import DONE
from safeprefetch._harness.live_bare import bare_run
from safeprefetch._prefetcher.machine import machine_for

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("capacity,run", [(1, 1), (2, 1), (2, 2), (3, 1), (8, 8)])
def test_every_item_once_in_order_through_the_model(capacity, run):
    n = 97
    seen: list[int] = []
    fetched: list[int] = []
    workers: set[int] = set()

    def fetch_into(i: int, slot: np.ndarray) -> None:
        workers.add(threading.get_ident())
        fetched.append(i)
        slot[:] = i

    final = bare_run(fetch_into, n, capacity, (3,), np.int64, lambda out: seen.append(int(out[0])), run=run)
    assert seen == list(range(n)) and fetched == list(range(n))
    assert workers and threading.get_ident() not in workers  # the fetches ran on the worker thread
    m = machine_for(capacity, 1, n, True, True, 0, capacity)
    names = m.field_names
    assert final[names.index("delivered")] == n
    assert final[m.pc_index[m.thread_names.index("worker0")]] == DONE
    assert final[m.pc_index[m.thread_names.index("consumer")]] != "release lease"


def test_consumer_copies_out_of_the_slot_before_the_worker_reuses_it():
    # One slot: the worker may refill it only after the consumer released it, so every copy holds its item
    # whole (a fetch that raced the copy would tear an item: half its rows from the next one).
    n = 200
    bad: list[int] = []

    def fetch_into(i: int, slot: np.ndarray) -> None:
        slot[:] = i

    def consume(out: np.ndarray) -> None:
        if not (out == out[0]).all():
            bad.append(int(out[0]))

    bare_run(fetch_into, n, 1, (4096,), np.int64, consume)
    assert bad == []


def test_a_failing_fetch_is_raised_not_hung():
    def fetch_into(i: int, slot: np.ndarray) -> None:
        if i == 5:
            raise OSError("disk gone")
        slot[:] = i

    with pytest.raises(OSError, match="disk gone"):
        bare_run(fetch_into, 20, 2, (2,), np.int64, lambda out: None)

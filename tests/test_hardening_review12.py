"""The twelfth round (docs/hardening.md, "A twelfth round"): what the eleventh left open, and its reviews.

Each test failed on the code before its fix.
"""

import threading

import numpy as np
import pytest

from safeprefetch import Prefetcher
from test_hardening_review10 import Items  # item i is [i, i, i]

pytestmark = pytest.mark.timeout(60)


def test_1_last_index_names_the_batch_this_thread_got_not_the_other_threads():
    # Thread A gets a batch, thread B then gets one, and only then A asks last_index: it names A's batch.
    with Prefetcher(Items(20), capacity=4, shape=(3,), dtype=np.int64, shuffle=True, seed=3) as pf:
        got_a, b_done, seen = threading.Event(), threading.Event(), {}

        def a():
            batch = pf.get()
            got_a.set()
            b_done.wait(30)
            seen["a"] = (int(batch[0]), pf.last_index)

        def b():
            got_a.wait(30)
            batch = pf.get()
            seen["b"] = (int(batch[0]), pf.last_index)
            b_done.set()

        threads = [threading.Thread(target=a), threading.Thread(target=b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert seen["a"][0] != seen["b"][0]
        assert seen["a"][0] == seen["a"][1], seen
        assert seen["b"][0] == seen["b"][1], seen
        # The thread that has had no batch has no last index; the main thread gets its own.
        assert pf.last_index is None
        batch = pf.get()
        assert pf.last_index == int(batch[0])


class FailsAt(Items):
    def __init__(self, n: int, fail_at: int):
        super().__init__(n)
        self.fail_at = fail_at

    def __getitem__(self, i):
        if i == self.fail_at:
            raise OSError(f"item {i} is unreadable")
        return super().__getitem__(i)


def test_1_the_source_error_leaves_last_index_at_the_last_batch():
    with Prefetcher(FailsAt(6, 3), capacity=2, shape=(3,), dtype=np.int64) as pf:
        assert [int(pf.get()[0]) for _ in range(3)] == [0, 1, 2]
        with pytest.raises(OSError):
            pf.get()
        assert pf.last_index == 2

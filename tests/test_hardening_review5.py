"""Fixes of the fifth hardening round (docs/hardening.md, "A fifth round"); each test failed before its fix."""

import threading
import time

import numpy as np
import pytest

from safeprefetch import OnDemandPrefetcher, PrefetchTimeout

pytestmark = pytest.mark.timeout(60)


class _HeldSource:
    """Index 1's call blocks until ``release`` is set; every call is counted by index."""

    def __init__(self):
        self.entered_1 = threading.Event()
        self.release = threading.Event()
        self.calls: list[int] = []

    def __len__(self):
        return 10

    def __getitem__(self, i):
        self.calls.append(i)
        if i == 1:
            self.entered_1.set()
            self.release.wait()
        return np.full(3, i, np.int64)


def test_1_a_thread_unsafe_miss_is_bounded_by_timeout_behind_a_speculative_fetch():
    # A worker's speculative fetch of 1 holds the source lock (thread_safe=False); the miss for 5
    # waited for it without bound, past timeout=. It raises PrefetchTimeout at the timeout now, and the
    # prefetcher stays usable: once the speculation finishes, the same request is served.
    src = _HeldSource()
    with OnDemandPrefetcher(src, capacity=3, workers=1, predict="sequential", shape=(3,), dtype=np.int64,
                            thread_safe=False, timeout=0.2) as pf:
        assert pf.get(0)[0] == 0
        assert src.entered_1.wait(30)  # the worker is inside the source, holding its lock
        t0 = time.monotonic()
        with pytest.raises(PrefetchTimeout, match="source"):
            pf.get(5)
        assert time.monotonic() - t0 < 10
        assert 5 not in src.calls  # the source was never called for 5 while 1 was in it
        src.release.set()
        assert pf.get(5, timeout=None)[0] == 5
        assert pf.get(1)[0] == 1
        assert pf.stats.errors == 0  # a timeout is not a source error


def test_1_timeout_none_still_waits_for_the_speculative_fetch():
    src = _HeldSource()
    with OnDemandPrefetcher(src, capacity=3, workers=1, predict="sequential", shape=(3,), dtype=np.int64,
                            thread_safe=False) as pf:
        assert pf.get(0)[0] == 0
        assert src.entered_1.wait(30)
        got = []
        th = threading.Thread(target=lambda: got.append(pf.get(5)[0]))
        th.start()
        th.join(0.3)
        assert th.is_alive() and not got  # waiting for the lock, as the contract says
        src.release.set()
        th.join(30)
        assert got == [5]

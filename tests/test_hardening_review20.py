"""The twentieth round (docs/hardening.md): three adversarial reviews, of the Prefetcher, the real-code
scheduler and the checker.

The tests of a fix reproduce a finding and failed on the commit before the fix; the others guard what each
fix must keep.
"""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from safeprefetch import Prefetcher
from safeprefetch.models import _protocol as P

from _polling import wait_until

# -- 1. A stale Lease released late gives back nothing: the lease held now keeps its slot ------------------------


class _Counting:
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        return np.full((8,), i, np.int64)


def test_a_stale_lease_released_by_a_finalizer_does_not_free_the_lease_held_now():
    # A cycle holding an unreleased lease L1 is collected on another thread: the collector clears L1's weak
    # reference first, and runs the finalizer that releases L1 after. In between, the consumer's next call
    # finds L1 dropped, gives its batch back, and hands out L2. L1's late release must not give back L2's.
    started, proceed = threading.Event(), threading.Event()

    class Holder:
        def __del__(self):
            started.set()
            proceed.wait(30)
            self.lease.release()

    gc.disable()
    try:
        with Prefetcher(_Counting(10), capacity=2, workers=1) as pf:
            holder = Holder()
            holder.me = holder
            holder.lease = pf.lease()  # L1: batch 0
            del holder
            collector = threading.Thread(target=gc.collect)
            collector.start()
            assert started.wait(30)
            l2 = pf.lease()  # L1 is dropped as far as the prefetcher can tell: L2 is batch 1
            assert l2.position == 1 and not l2.released
            proceed.set()
            collector.join(30)
            assert not collector.is_alive()
            core = pf._core
            # L2's batch is still held in the model: the consumer has not given its run back.
            assert core.rt.state[core.i_consumer_pc] == P.RELEASE
            assert (l2.array == 1).all()
            l2.release()
            assert core.rt.state[core.i_consumer_pc] != P.RELEASE
            assert [int(b[0]) for b in pf] == list(range(2, 10))
    finally:
        proceed.set()
        gc.enable()


def test_the_current_lease_released_still_gives_its_batch_back():
    with Prefetcher(_Counting(4), capacity=2, workers=1) as pf:
        core = pf._core
        lease = pf.lease()
        assert core.rt.state[core.i_consumer_pc] == P.RELEASE
        lease.release()
        assert core.rt.state[core.i_consumer_pc] != P.RELEASE
        lease.release()  # twice: nothing more
        assert [int(b[0]) for b in pf] == [1, 2, 3]


# -- 2. An on-demand miss waiting for a thread_safe=False source's lock leaves on close --------------------------


def test_a_miss_waiting_for_the_source_lock_is_woken_by_close_and_never_calls_the_source():
    import warnings

    from safeprefetch import OnDemandPrefetcher, PrefetcherClosed
    from safeprefetch.models import _predictive_protocol as Q


    inside, release = threading.Event(), threading.Event()
    calls: list[int] = []

    class Slow:
        def __len__(self) -> int:
            return 20

        def __getitem__(self, i: int) -> np.ndarray:
            calls.append(i)
            if i == 1:  # the speculative fetch of 1 holds the source lock: stuck storage
                inside.set()
                release.wait(60)
            return np.full(3, i, np.int64)

    pf = OnDemandPrefetcher(Slow(), capacity=4, workers=1, predict="sequential", thread_safe=False,
                            shape=(3,), dtype=np.int64)
    try:
        pf.get(0)  # predicts 1: a worker starts fetching it
        assert inside.wait(30)
        outcome: list[BaseException] = []

        def caller():
            try:
                pf.get(7)  # a miss: it waits for the source lock, with no deadline
            except BaseException as e:  # noqa: BLE001
                outcome.append(e)

        th = threading.Thread(target=caller, daemon=True)
        th.start()
        core = pf._core
        assert wait_until(lambda: core.rt.state[core.i_consumer_pc] == Q.DEMAND_FETCH, 30)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the stuck fetch is named)
            pf.close(timeout=0.5)
        th.join(30)
        assert not th.is_alive(), "close() left the miss waiting for the source lock"
        assert len(outcome) == 1 and isinstance(outcome[0], PrefetcherClosed)
        assert 7 not in calls
    finally:
        release.set()


def test_a_miss_behind_a_busy_source_lock_still_gets_source_busy_at_its_deadline():
    from safeprefetch import OnDemandPrefetcher, PrefetchTimeout

    inside, release = threading.Event(), threading.Event()

    class Slow:
        def __len__(self) -> int:
            return 20

        def __getitem__(self, i: int) -> np.ndarray:
            if i == 1:
                inside.set()
                release.wait(60)
            return np.full(3, i, np.int64)

    with OnDemandPrefetcher(Slow(), capacity=4, workers=1, predict="sequential", thread_safe=False,
                            shape=(3,), dtype=np.int64) as pf:
        try:
            pf.get(0)
            assert inside.wait(30)
            with pytest.raises(PrefetchTimeout, match="the source is busy"):
                pf.get(7, timeout=0.1)
        finally:
            release.set()
        assert int(pf.get(7)[0]) == 7


# -- 3. A process executor sends a big-endian batch back as it is ------------------------------------------------


class _BigEndian:
    """Batches of a non-native byte order (module level: a spawned process imports it)."""

    def __init__(self, dtype: str):
        self.dtype = dtype

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> np.ndarray:
        return np.arange(i, i + 6).astype(self.dtype).reshape(2, 3)


def test_a_process_executor_keeps_a_non_native_byte_order(tmp_path):
    # Pickled back at multiprocessing's protocol, a '>i4' batch arrived as '<i4': the pool took that dtype,
    # dtype='>i4' given refused every batch, and NpyFiles refused a big-endian file as if it were wrong.
    import concurrent.futures
    import multiprocessing
    import sys

    from safeprefetch import NpyFiles, write_npy_batches

    other = ">" if sys.byteorder == "little" else "<"
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        for dtype in (other + "i4", other + "f8", [("a", other + "i2"), ("b", "f4")]):
            source = _BigEndian(dtype)
            want = [source[i] for i in range(4)]
            with Prefetcher(source, capacity=2, executor=ex) as pf:
                got = list(pf)
            assert pf.dtype == np.dtype(dtype)
            assert [g.dtype for g in got] == [np.dtype(dtype)] * 4
            assert all(np.array_equal(g, w) for g, w in zip(got, want))
            with Prefetcher(source, capacity=2, executor=ex, shape=(2, 3), dtype=dtype) as pf:
                assert all(np.array_equal(g, w) for g, w in zip(pf, want))
        paths = write_npy_batches(tmp_path, 3, (5,), dtype=other + "i4")
        with Prefetcher(NpyFiles(paths), executor=ex) as pf:
            got = list(pf)
        assert [g.dtype.str for g in got] == [other + "i4"] * 3
        assert [g.tolist() for g in got] == [np.load(p).tolist() for p in paths]


def test_what_a_process_sends_back_arrives_as_the_same_array():
    import pickle

    from safeprefetch._prefetcher.sending import sendable

    for a in (np.arange(6, dtype=">i4").reshape(2, 3), np.array(7, ">u2"), np.zeros((0, 3), ">f4"),
              np.arange(12, dtype=">i8")[::3], np.arange(4, dtype="<i4"), np.array([1, "x"], object)):
        back = pickle.loads(pickle.dumps(sendable(a), protocol=4))
        assert type(back) is np.ndarray and back.dtype == a.dtype and back.shape == a.shape
        assert np.array_equal(back, a) and back.flags.writeable

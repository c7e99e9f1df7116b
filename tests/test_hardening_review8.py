"""The eighth adversarial review (docs/hardening.md, "An eighth round"): the README's and the docstrings'
promises about the Prefetcher and the OnDemandPrefetcher, tested as an attacker would. One test or more per
finding; each failed on the code before its fix.
"""

import gc
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from safeprefetch import OnDemandPrefetcher, Predictor, Prefetcher, PrefetcherExhausted, PrefetcherWarning
from safeprefetch.models import _protocol as P
from _polling import wait_until

pytestmark = pytest.mark.timeout(60)


def _threads_of(name):
    return [t.name for t in threading.enumerate() if t.name.startswith(f"safeprefetch-{name}-")]


def _gone(name, seconds=10.0):
    """Whether every thread of the prefetcher called ``name`` has ended within ``seconds`` (collecting meanwhile:
    an abandoned prefetcher is closed by the reaper once the garbage collector finds it)."""
    deadline = time.monotonic() + seconds
    while _threads_of(name):
        if time.monotonic() > deadline:
            return False
        gc.collect()
        time.sleep(0.005)  # polling an observable state against a deadline, not synchronizing
    return True


class _Rows:
    def __init__(self, n=10):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.full(3, i, dtype=np.int64)


class _Next(Predictor):
    """A custom predictor that keeps its prefetcher (to look at it when predicting, say)."""

    name = "next"

    def __init__(self, length=None):
        super().__init__(length)
        self.pf = None
        self.last = 0

    def observe(self, index):
        self.last = index

    def predict(self, depth):
        return [(self.last + 1) % 10]


def test_1_an_abandoned_ondemand_prefetcher_whose_predictor_refers_back_is_collected_and_its_threads_end():
    # The core held the predictor, the worker threads hold the core: a predictor referring back to its
    # prefetcher rooted it in the workers, so it was never collected, never closed, its threads never ended.
    def abandon():
        predictor = _Next(10)
        pf = OnDemandPrefetcher(_Rows(), capacity=3, workers=2, predict=predictor, name="r8-predictor-back")
        predictor.pf = pf
        assert int(pf.get(0)[0]) == 0 and pf.predictor is predictor and pf.stats.predictor == "next"

    abandon()
    assert _gone("r8-predictor-back"), _threads_of("r8-predictor-back")


class _OwnedExecutor(ThreadPoolExecutor):
    """An executor that knows the prefetcher it serves (a pipeline object's, say)."""

    pf = None


def test_2_an_abandoned_prefetcher_whose_executor_refers_back_is_collected_and_its_threads_end():
    # The same shape with executor=: the core held the executor, so an executor referring back (both owned by
    # the cycle alone) rooted the Prefetcher in its workers.
    def abandon():
        ex = _OwnedExecutor(2, thread_name_prefix="r8-executor")
        ex.pf = pf = Prefetcher(_Rows(20), capacity=2, workers=2, executor=ex, name="r8-executor-back")
        assert int(pf.get()[0]) == 0

    abandon()
    assert _gone("r8-executor-back"), _threads_of("r8-executor-back")
    with _OwnedExecutor(2) as ex, Prefetcher(_Rows(20), capacity=2, workers=2, executor=ex) as pf:
        assert [int(b[0]) for b in pf] == list(range(20))  # and an executor still runs the fetches


@pytest.mark.parametrize("n", [0, 1, 10])
def test_3_the_index_plan_cannot_be_made_writeable_so_the_stream_cannot_be_changed_through_it(n):
    # ``pf.indices`` ("read-only") was a plain array whose flag could be set back; writing it then changed the
    # items the workers fetched, silently (and ``last_index`` with them).
    with Prefetcher(_Rows(n), capacity=1, shape=(3,), dtype=np.int64, shuffle=True, seed=3) as pf:
        plan = pf.indices
        assert not plan.flags.writeable and sorted(plan.tolist()) == list(range(n))
        with pytest.raises(ValueError):
            plan.flags.writeable = True
        with pytest.raises(ValueError):
            plan[...] = 0
        assert [int(b[0]) for b in pf] == plan.tolist()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_4_iterating_a_finished_prefetcher_in_a_forked_child_raises_prefetcher_forked():
    # "In a forked child every call raises PrefetcherForked": iterating one whose stream had ended in the parent
    # raised PrefetcherExhausted there ("create a new one" -- and a child catching PrefetcherForked missed it).
    with Prefetcher(_Rows(3)) as pf:
        assert len(list(pf)) == 3
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report what iter(pf) raised, then leave without running anything of the parent's
            try:
                iter(pf)
                what = b"nothing"
            except BaseException as e:  # noqa: BLE001
                what = type(e).__name__.encode()
            os.write(w, what)
            os._exit(0)
        os.close(w)
        try:
            with os.fdopen(r, "rb") as f:
                what = f.read().decode()
        finally:
            os.waitpid(pid, 0)
        assert what == "PrefetcherForked"
        with pytest.raises(PrefetcherExhausted):  # the parent is unaffected
            iter(pf)


def test_5_unordered_a_source_error_ends_the_stream_without_the_batches_still_in_flight_as_documented():
    # A docs finding (it passed before the docs changed): "re-raised at its position in the stream" read as if
    # every earlier batch came first, as with ordered=True; with ordered=False the error is taken once no ready
    # batch has an earlier position, and a batch still being fetched then -- position 0 here -- never comes.
    release = threading.Event()

    class Source(_Rows):
        def __getitem__(self, i):
            if i == 0:
                release.wait(30)
            if i == 2:
                raise KeyError("two")
            return super().__getitem__(i)

    with Prefetcher(Source(6), capacity=3, workers=3, ordered=False, shape=(3,), dtype=np.int64) as pf:
        deadline = time.monotonic() + 20
        while pf.ready < 2:  # position 1 ready, position 2 failed; position 0 in flight
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert int(pf.get()[0]) == 1
        with pytest.raises(KeyError, match="two"):
            pf.get()
        release.set()
        with pytest.raises(StopIteration):
            pf.get()
        assert pf.stats.batches == 1


class _BlocksAt(_Rows):
    """A source that is not thread-safe, whose call for ``at`` blocks until ``release`` is set; records every call
    and whether ``closed`` was set when it began."""

    def __init__(self, n, at):
        super().__init__(n)
        self.at, self.release, self.closed, self.calls = at, threading.Event(), False, []

    def __getitem__(self, i):
        self.calls.append((i, self.closed))
        if i == self.at:
            self.release.wait(30)
        return super().__getitem__(i)


def test_6_thread_safe_false_workers_waiting_for_the_source_lock_do_not_call_the_source_after_close():
    # close() gave up on the worker stuck in the source and on those waiting for its lock ("still inside a
    # fetch"); once the stuck call returned, each waiting worker took the lock and called the source anyway,
    # after close() had returned (here items 2 and 3), to have the result discarded.
    src = _BlocksAt(10, at=1)
    pf = Prefetcher(src, capacity=4, workers=3, thread_safe=False, shape=(3,), dtype=np.int64, name="r8-unsafe")
    core = pf._core
    assert wait_until(lambda: all(core.rt.state[i] == P.FETCH for i in core.worker_pcs), 20)  # one in item 1, two wait
    with pytest.warns(PrefetcherWarning, match="still inside a fetch"):
        pf.close(timeout=0.2)
    src.closed = True
    src.release.set()
    assert _gone("r8-unsafe")
    assert [i for i, after_close in src.calls if after_close] == []


def test_6_on_demand_speculation_waiting_for_the_source_lock_does_not_call_the_source_after_close():
    # The same with the OnDemandPrefetcher's speculative fetches.
    src = _BlocksAt(10, at=1)

    class Ahead(Predictor):
        name = "ahead"

        def predict(self, depth):
            return [1, 2]

    pf = OnDemandPrefetcher(src, capacity=4, workers=2, predict=Ahead(10), thread_safe=False, shape=(3,),
                            dtype=np.int64, name="r8-unsafe-ondemand")
    assert int(pf.get(0)[0]) == 0
    assert wait_until(lambda: [st for st, _ in pf.slots()].count(repr(P.FILLING)) == 2, 20)  # one in item 1, one waits
    with pytest.warns(PrefetcherWarning, match="still inside a fetch"):
        pf.close(timeout=0.2)
    src.closed = True
    src.release.set()
    assert _gone("r8-unsafe-ondemand")
    assert [i for i, after_close in src.calls if after_close] == []

"""The Prefetcher contract, behaviour by behaviour, on real threads with real numpy arrays and .npy files."""

import concurrent.futures
import gc
import multiprocessing
import signal
import threading
import time
import traceback
import weakref

import numpy as np
import pytest

from safeprefetch.testing import thread_count

from safeprefetch import (Lease, LeaseHeld, NpyFiles, PrefetchStats, PrefetchTimeout, Prefetcher, PrefetcherClosed,
                          PrefetcherWarning, load_model, write_npy_batches)
from safeprefetch.testing import recording_runtimes
from safeprefetch.lowlevel import verify_record
from _polling import wait_until

pytestmark = [pytest.mark.live, pytest.mark.timeout(60)]

SHAPE = (4, 3)


def batch(i, dtype=np.float32):
    return np.full(SHAPE, i, dtype=dtype)


def ids(batches):
    out = []
    for b in batches:
        assert (b == b.flat[0]).all(), "a batch mixes two items"
        out.append(int(b.flat[0]))
    return out


class Slow:
    """Map-style; item i sleeps delays[i] seconds."""

    def __init__(self, n, delays=None, dtype=np.float32):
        self.n, self.delays, self.dtype = n, delays or {}, dtype
        self.calls = []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.calls.append(i)
        time.sleep(self.delays.get(i, 0.0))
        return batch(i, self.dtype)


class Into:
    """fetch_into only; remembers every ``out`` it was handed."""

    def __init__(self, n):
        self.n = n
        self.outs = []

    def __len__(self):
        return self.n

    def fetch_into(self, i, out):
        self.outs.append(out)
        out[...] = i


# -- sources ------------------------------------------------------------------


def test_an_iterable_of_arrays_is_delivered_in_order_as_arrays_the_caller_owns(baseline):
    with Prefetcher(iter([batch(i) for i in range(10)]), capacity=3) as pf:
        got = list(pf)
        pool = pf._core.pool
    assert ids(got) == list(range(10))
    assert all(not np.shares_memory(b, pool) for b in got)
    got[0][...] = 99  # the caller owns it
    assert ids(got[1:]) == list(range(1, 10))


def test_a_generator_of_unknown_length_ends_where_it_ends(baseline):
    def gen(n):
        for i in range(n):
            yield batch(i)

    for n in (0, 1, 2, 7):
        with Prefetcher(gen(n), capacity=2) as pf:
            assert pf.length is None or n == 0
            assert ids(pf) == list(range(n))


def test_a_map_style_source_is_fetched_in_parallel_and_delivered_in_order(baseline):
    """Four workers fetch at once: items 1-4 wait at a barrier until all four fetches have arrived (a
    serial fetcher would never get past it), and the batches still come out in order."""
    meet = threading.Barrier(4)

    class Together(Slow):
        def __getitem__(self, i):
            if 1 <= i <= 4:  # (item 0 is read by the constructor, to size the pool)
                meet.wait(10)  # BrokenBarrierError after 10 s if the fetches were not concurrent
            return super().__getitem__(i)

    with Prefetcher(Together(12), capacity=8, workers=4) as pf:
        assert ids(pf) == list(range(12))


def test_unordered_delivery_gives_every_item_exactly_once_and_reports_its_index(baseline):
    src = Slow(10, {1: 0.3})
    with Prefetcher(src, capacity=4, workers=3, ordered=False) as pf:
        got = []
        for b in pf:
            assert int(b.flat[0]) == pf.last_index
            got.append(pf.last_index)
    assert sorted(got) == list(range(10))
    assert got.index(1) > 1  # item 1 was slow, and unordered delivery did not wait for it


def test_a_fetch_into_source_fills_the_preallocated_slots_without_allocating(baseline):
    src = Into(9)
    with Prefetcher(src, capacity=3, workers=2, shape=SHAPE, dtype=np.float32) as pf:
        out = np.empty(SHAPE, np.float32)
        seen = []
        while pf.copy_prefetched(out):
            seen.append(int(out[0, 0]))
        pool = pf._core.pool
    assert seen == list(range(9))
    assert len(src.outs) == 9
    assert all(np.shares_memory(o, pool) for o in src.outs)
    assert len({o.__array_interface__["data"][0] for o in src.outs}) <= 3  # only the slots were ever used


def test_real_npy_files_through_getitem_and_through_fetch_into(baseline, tmp_path):
    paths = write_npy_batches(tmp_path, 8, SHAPE, np.float64)
    src = NpyFiles(paths)
    with Prefetcher(src, workers=2) as pf:
        assert ids(pf) == list(range(8))
    with Prefetcher(src, workers=2, shape=SHAPE, dtype=np.float64) as pf:
        out = np.empty(SHAPE, np.float64)
        seen = []
        while pf.copy_prefetched(out):
            seen.append(int(out[0, 0]))
    assert seen == list(range(8))


def test_every_batch_must_match_the_first_batch(baseline):
    items = [batch(0), batch(1), np.zeros((3, 4), np.float32), batch(3)]
    with Prefetcher(items) as pf:
        assert ids([next(pf), next(pf)]) == [0, 1]
        with pytest.raises(ValueError, match=r"item 2: expected shape \(4, 3\) dtype float32, got shape \(3, 4\)"):
            next(pf)
        with pytest.raises(StopIteration):
            next(pf)  # the stream ended with the error


def test_shape_and_dtype_arguments_size_the_pool_without_reading_ahead(baseline):
    src = Slow(3)
    pf = Prefetcher(src, shape=SHAPE, dtype="float32")
    assert pf.shape == SHAPE and pf.dtype == np.float32
    assert ids(pf) == [0, 1, 2]
    pf.close()
    with Prefetcher([batch(0, np.float64)], dtype=np.float32) as pf:
        with pytest.raises(ValueError, match="item 0: expected shape .* dtype float32, got .* dtype float64"):
            pf.get()


# -- copy_prefetched and lease ---------------------------------------------------


def test_copy_prefetched_fills_out_and_returns_false_at_the_end(baseline):
    with Prefetcher([batch(i) for i in range(3)]) as pf:
        out = np.zeros(SHAPE, np.float32)
        assert pf.copy_prefetched(out) and out[0, 0] == 0
        assert pf.copy_prefetched(out) and out[0, 0] == 1
        assert pf.copy_prefetched(out) and out[0, 0] == 2
        assert pf.copy_prefetched(out) is False
        assert pf.copy_prefetched(out) is False


def test_copy_prefetched_checks_out_before_consuming_anything(baseline):
    with Prefetcher([batch(i) for i in range(2)]) as pf:
        with pytest.raises(ValueError, match="read-only"):
            ro = np.zeros(SHAPE, np.float32)
            ro.flags.writeable = False
            pf.copy_prefetched(ro)
        with pytest.raises(ValueError, match="shape"):
            pf.copy_prefetched(np.zeros((3, 4), np.float32))
        with pytest.raises(ValueError, match="dtype"):
            pf.copy_prefetched(np.zeros(SHAPE, np.float64))
        with pytest.raises(TypeError, match="numpy array"):
            pf.copy_prefetched([0.0] * 12)
        assert ids(pf) == [0, 1]  # nothing was consumed


def test_a_lease_is_a_read_only_zero_copy_view_valid_until_released(baseline):
    with Prefetcher([batch(i) for i in range(4)], capacity=2) as pf:
        lease = pf.lease()
        assert isinstance(lease, Lease)
        assert lease.position == 0 and lease.index == 0
        view = lease.array
        assert np.shares_memory(view, pf._core.pool)
        assert not view.flags.writeable
        with pytest.raises(ValueError):
            view[0, 0] = 5
        # The workers run ahead until every slot but the leased one is full, and park: they
        # must not have touched the leased slot.
        rt = pf._core.rt
        assert wait_until(lambda: rt.is_parked(pf._core.worker_ids[0]))
        assert (view == 0).all()
        with pytest.raises(LeaseHeld):
            pf.get()
        with pytest.raises(LeaseHeld):
            pf.lease()
        with pytest.raises(LeaseHeld):
            pf.copy_prefetched(np.empty(SHAPE, np.float32))
        lease.release()
        lease.release()  # harmless
        assert lease.released
        with pf.lease() as view:
            assert view[0, 0] == 1
        assert ids(pf) == [2, 3]
        with pytest.raises(StopIteration):
            pf.lease()


def test_a_lease_stays_readable_across_close(baseline):
    pf = Prefetcher([batch(7)])
    lease = pf.lease()
    pf.close()
    assert (lease.array == 7).all()
    lease.release()
    with pytest.raises(PrefetcherClosed):
        pf.lease()


# -- close, context manager, abandonment ------------------------------------------


def test_close_is_idempotent_and_joins_every_thread(baseline):
    pf = Prefetcher(Slow(50), capacity=2, workers=3)
    assert thread_count() == baseline + 3
    pf.get()
    pf.close()
    pf.close()
    assert pf.closed
    assert thread_count() == baseline


def test_close_from_another_thread_wakes_a_blocked_consumer(baseline):
    """The consumer waits for item 1, whose fetch is held until the consumer has seen the close: only
    the close step can have woken it."""
    woken = threading.Event()

    class Held(Slow):
        def __getitem__(self, i):
            if i == 1:
                woken.wait(10)
            return super().__getitem__(i)

    pf = Prefetcher(Held(3))
    pf.get()
    rt = pf._core.rt
    closer = threading.Thread(target=lambda: (wait_until(lambda: rt.is_parked(pf._core.consumer)), pf.close()))
    closer.start()
    with pytest.raises(PrefetcherClosed):
        pf.get()
    woken.set()  # now the fetch may return; close (bounded) joins the worker
    closer.join(10)
    assert not closer.is_alive()


def test_concurrent_closes_from_many_threads(baseline):
    pf = Prefetcher(Slow(100), capacity=3, workers=2)
    pf.get()
    closers = [threading.Thread(target=pf.close) for _ in range(5)]
    for t in closers:
        t.start()
    for t in closers:
        t.join(10)
    assert not any(t.is_alive() for t in closers)
    assert pf.closed


def test_a_fetch_that_never_returns_cannot_make_close_hang(baseline):
    release = threading.Event()

    class Stuck:
        def __len__(self):
            return 3

        def __getitem__(self, i):
            if i == 1:
                release.wait()
            return batch(i)

    pf = Prefetcher(Stuck(), close_timeout=0.3)
    pf.get()
    t0 = time.perf_counter()
    with pytest.warns(PrefetcherWarning, match="still inside a fetch"):
        pf.close()
    assert time.perf_counter() - t0 < 1.5
    release.set()  # the fetch returns at last; the model discards it and the thread exits


def test_the_context_manager_closes_on_error(baseline):
    with pytest.raises(RuntimeError, match="user"):
        with Prefetcher(Slow(100), workers=2) as pf:
            pf.get()
            raise RuntimeError("user code failed")
    assert pf.closed


def test_an_abandoned_prefetcher_is_collected_and_its_threads_joined(baseline):
    pf = Prefetcher(Slow(100), capacity=2, workers=3)
    next(pf)
    rt = pf._core.rt
    assert wait_until(lambda: rt.parked_count == 3)  # the buffer is full; every worker is parked
    ref = weakref.ref(pf)
    del pf
    gc.collect()
    assert ref() is None


def test_an_iterator_abandoned_by_break_is_cleaned_up(baseline):
    def loop():
        for b in Prefetcher((batch(i) for i in range(1000)), capacity=2):
            if b[0, 0] == 3:
                break

    loop()
    gc.collect()


def test_abandoned_while_a_consumer_holds_a_lease(baseline):
    pf = Prefetcher([batch(i) for i in range(5)])
    lease = pf.lease()
    del pf
    gc.collect()
    assert (lease.array == 0).all()
    lease.release()


# -- errors -------------------------------------------------------------------------


class Boom(Exception):
    pass


class Failing:
    def __init__(self, n, bad, exc=Boom):
        self.n, self.bad, self.exc = n, bad, exc
        self.raised = None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.bad:
            self.raised = self.exc(f"item {i} is corrupt")
            raise self.raised
        return batch(i)


@pytest.mark.parametrize("workers", [1, 3])
def test_a_source_error_is_raised_at_its_position_with_its_type_and_traceback(baseline, workers):
    src = Failing(10, bad=4)
    with Prefetcher(src, capacity=3, workers=workers) as pf:
        got = []
        with pytest.raises(Boom) as info:
            for b in pf:
                got.append(int(b[0, 0]))
        assert got == [0, 1, 2, 3]
        assert info.value is src.raised  # the same object
        frames = [f.f_code.co_name for f, _ in traceback.walk_tb(info.value.__traceback__)]
        assert "__getitem__" in frames and "_fetch" in frames  # the worker's frames are kept
        with pytest.raises(StopIteration):
            pf.get()  # the stream ended at the error
        assert pf.get.__self__ is pf


def test_an_error_in_the_first_read_is_delivered_at_position_zero(baseline):
    with Prefetcher(Failing(5, bad=0)) as pf:
        with pytest.raises(Boom):
            pf.get()
        with pytest.raises(StopIteration):
            pf.get()


def test_an_iterator_error_is_raised_after_the_items_before_it(baseline):
    def gen():
        yield batch(0)
        yield batch(1)
        raise KeyError("shard missing")

    with Prefetcher(gen()) as pf:
        assert ids([pf.get(), pf.get()]) == [0, 1]
        with pytest.raises(KeyError, match="shard missing"):
            pf.get()


def test_a_base_exception_from_the_source_is_delivered_not_turned_into_end_of_stream(baseline):
    src = Failing(6, bad=2, exc=SystemExit)
    with Prefetcher(src, workers=2) as pf:
        got = []
        with pytest.raises(SystemExit) as info:
            for b in pf:
                got.append(int(b[0, 0]))
        assert got == [0, 1]
        assert info.value is src.raised


def test_a_base_exception_in_the_constructors_first_read_propagates(baseline):
    def gen():
        raise KeyboardInterrupt
        yield  # pragma: no cover

    with pytest.raises(KeyboardInterrupt):
        Prefetcher(gen())


# -- timeouts and Ctrl-C ------------------------------------------------------------


def test_get_timeout_raises_a_named_timeout_and_consumes_nothing(baseline):
    gates = {1: threading.Event(), 2: threading.Event()}

    class Gated(Slow):
        def __getitem__(self, i):
            if i in gates:
                gates[i].wait(10)
            return super().__getitem__(i)

    with Prefetcher(Gated(3), capacity=2) as pf:
        assert pf.get()[0, 0] == 0
        t0 = time.perf_counter()
        with pytest.raises(PrefetchTimeout) as info:
            pf.get(timeout=0.05)
        assert isinstance(info.value, TimeoutError)
        assert time.perf_counter() - t0 >= 0.05  # it waited its timeout (no upper bound: cores are shared)
        gates[1].set()
        assert pf.get(timeout=5)[0, 0] == 1
        with pytest.raises(PrefetchTimeout):
            pf.copy_prefetched(np.empty(SHAPE, np.float32), timeout=0)
        gates[2].set()
        assert ids([pf.get(timeout=5)]) == [2]


def test_ctrl_c_interrupts_a_get_blocked_in_the_main_thread(baseline):
    assert threading.current_thread() is threading.main_thread()
    release = threading.Event()

    class Waits:
        def __len__(self):
            return 2

        def __getitem__(self, i):
            if i == 1:
                release.wait(10)
            return batch(i)

    pf = Prefetcher(Waits())
    pf.get()
    main = threading.main_thread().ident
    killer = threading.Timer(0.2, signal.pthread_kill, args=(main, signal.SIGINT))
    killer.start()
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        pf.get()
    assert time.perf_counter() - t0 < 2.0
    killer.join()
    release.set()
    assert pf.get(timeout=5)[0, 0] == 1  # still usable, nothing lost
    pf.close()


@pytest.mark.parametrize("ending", ["error", "end"])
def test_a_take_interrupted_after_it_ended_the_stream_still_reports_how(baseline, ending):
    """Ctrl-C landing after the kernel step that ended the stream, before the caller saw how: the next
    call gives the answer that take had (the source error at its position, or the end), not a crash."""
    src = Failing(3, bad=1) if ending == "error" else Failing(1, bad=-1)
    with Prefetcher(src, capacity=2) as pf:
        assert pf.get()[0, 0] == 0
        core = pf._core
        deadline = time.monotonic() + 5
        while ending == "error" and core.ready_now() == 0 and time.monotonic() < deadline:
            time.sleep(0.001)  # the failed batch is published
        core.rt.step(core.consumer)  # the model's take, as an interrupted call left it: consumer done
        assert core.rt.is_done(core.consumer) and core.ended_with is None
        if ending == "error":
            with pytest.raises(Boom) as info:
                pf.get()
            assert info.value is src.raised
        with pytest.raises(StopIteration):
            pf.get()


@pytest.mark.parametrize("seed", range(12))
def test_takes_left_unrecorded_at_random_points_lose_and_repeat_nothing(baseline, seed):
    """The model's take applied with no call to record it (as a Ctrl-C between the kernel step and the
    recording leaves it), at random points: every batch still comes out once, in order; and at every point
    the consumer's cheap test for such a take (``delivered`` moved) agrees with comparing the runs."""
    import random

    from safeprefetch.models import _protocol as P

    rng = random.Random(seed)
    n = 30
    with Prefetcher([batch(i) for i in range(n)], capacity=4) as pf:
        core = pf._core

        def compared() -> bool:  # the plain definition: the kernel's run is not the recorded one
            st = core.rt.state
            return st[core.i_consumer_pc] == P.RELEASE and core._run_of(st) != core.run

        got, direct = [], 0
        while True:
            assert core._run_changed() == compared()
            if rng.random() < 0.4 and core.rt.pc(core.consumer) == P.TAKE and len(got) < n:
                # At TAKE every recorded batch was handed out, so a batch is still to come: wait for it
                # (the take would otherwise park this thread, with no call to wake it from).
                assert wait_until(lambda: core.ready_now() > 0)
                core.rt.step(core.consumer, f"take up to {rng.randint(1, 4)}")
                direct += 1
                continue
            try:
                got.append(int(pf.get(timeout=5)[0, 0]))
            except StopIteration:
                break
        assert got == list(range(n)) and direct > 0


# -- use after close ----------------------------------------------------------------


@pytest.mark.parametrize("call", ["get", "next", "copy_prefetched", "lease", "iterate"])
def test_every_use_after_close_raises_prefetcher_closed(baseline, call):
    pf = Prefetcher([batch(i) for i in range(3)])
    pf.close()
    with pytest.raises(PrefetcherClosed):
        if call == "get":
            pf.get()
        elif call == "next":
            next(pf)
        elif call == "copy_prefetched":
            pf.copy_prefetched(np.empty(SHAPE, np.float32))
        elif call == "lease":
            pf.lease()
        else:
            for _ in pf:
                pass


# -- memory budget and stats ----------------------------------------------------------


def test_memory_budget_caps_the_buffered_batches(baseline):
    nbytes = batch(0).nbytes
    with Prefetcher(Slow(10), capacity=8, memory_budget=3 * nbytes + 1) as pf:
        assert pf.capacity == 3
        assert pf._core.pool.nbytes <= 3 * nbytes + 1
        assert ids(pf) == list(range(10))
    with Prefetcher(Slow(10), capacity=8, memory_budget=nbytes) as pf:
        assert pf.capacity == 1
    with pytest.raises(ValueError, match="more than memory_budget"):
        Prefetcher(Slow(10), memory_budget=nbytes - 1)


def test_stats_say_when_the_source_is_the_bottleneck(baseline):
    with Prefetcher(Slow(8, {i: 0.02 for i in range(1, 8)})) as pf:
        for _ in pf:
            pass
        s = pf.stats
    assert isinstance(s, PrefetchStats)
    with pytest.raises(AttributeError):
        s.batches = 0  # frozen
    assert s.batches == 8 and s.bottleneck == "source"
    assert s.consumer_wait_fraction > 0.5
    assert s.worker_fetch_seconds >= 0.13
    assert 0 <= s.prefetch_efficiency < 0.5
    assert "bottleneck: source" in s.summary()


def test_stats_say_when_prefetching_is_paying_off(baseline):
    # The only wait the loop cannot avoid is the first batch's; 20 fetches of 10 ms make it a small
    # share of the fetch time even when a loaded machine starts the worker late.
    with Prefetcher(Slow(20, {i: 0.01 for i in range(20)}), capacity=3) as pf:
        pf.get()
        for _ in pf:
            time.sleep(0.03)  # the loop is slower than the source
        s = pf.stats
    assert s.batches == 20 and s.bottleneck == "consumer"
    assert s.consumer_wait_fraction < 0.1
    assert s.prefetch_efficiency > 0.8
    assert s.worker_blocked_seconds > 0.05  # the workers waited for free slots
    assert s.mean_occupancy > 1.0 and s.max_occupancy <= 3
    assert s.capacity == 3 and s.workers == 1
    assert s.batches_per_second > 0 and s.elapsed_seconds > 0.18


# -- index plans --------------------------------------------------------------------


def test_strided_shards_partition_the_source(baseline):
    seen = []
    for rank in range(3):
        with Prefetcher(Slow(11), rank=rank, world_size=3, workers=2) as pf:
            got = ids(pf)
            assert got == list(range(rank, 11, 3))
            assert list(pf.indices) == got
            seen += got
    assert sorted(seen) == list(range(11))


def test_a_seeded_shuffle_is_a_permutation_per_epoch(baseline):
    def order(seed, epoch, **kw):
        with Prefetcher(Slow(20), shuffle=True, seed=seed, epoch=epoch, workers=3, **kw) as pf:
            got = ids(pf)
            assert got == list(pf.indices)
            return got

    a = order(1, 0)
    assert sorted(a) == list(range(20)) and a != list(range(20))
    assert order(1, 0) == a
    assert order(1, 1) != a
    assert order(2, 0) != a
    shards = [order(1, 0, rank=r, world_size=2) for r in range(2)]
    assert shards[0] == a[0::2] and shards[1] == a[1::2]


def test_an_error_under_a_shuffle_names_the_position_and_the_source_index(baseline):
    pf = Prefetcher([batch(0)] * 3 + [np.zeros(2)] + [batch(0)] * 2, shuffle=True, seed=3)
    pos = list(pf.indices).index(3)
    with pytest.raises(ValueError, match=rf"item {pos} \(source index 3\)" if pos != 3 else r"item 3"):
        for _ in pf:
            pass
    pf.close()


# -- executors ----------------------------------------------------------------------


def test_a_thread_pool_executor_runs_the_fetches(baseline):
    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        with Prefetcher(Slow(12, {i: 0.01 for i in range(12)}), workers=3, executor=ex) as pf:
            assert ids(pf) == list(range(12))
        with Prefetcher(Failing(5, bad=2), workers=2, executor=ex) as pf:
            with pytest.raises(Boom):
                for _ in pf:
                    pass


def test_close_does_not_wait_for_an_executor_fetch_that_never_finishes(baseline):
    # Bounded like a worker's fetch: waited for until the close timeout, then named in a PrefetcherWarning
    # (the fourteenth hardening round; before it, close() returned at once and said nothing).
    release = threading.Event()
    entered = threading.Event()

    def never(i):
        entered.set()
        release.wait(20)
        return batch(i)

    class Src:
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return never(i) if i else batch(0)

    ex = concurrent.futures.ThreadPoolExecutor(2)
    pf = Prefetcher(Src(), workers=2, executor=ex, close_timeout=0.3)
    pf.get()
    assert entered.wait(20)  # a fetch is running on the executor
    t0 = time.perf_counter()
    # (Named as running on the executor once its worker gave up on it; as a worker inside a fetch, if a loaded
    # machine has not yet run that worker when the close's time is up.)
    with pytest.warns(PrefetcherWarning, match="still running on the executor|still inside a fetch"):
        pf.close()
    assert time.perf_counter() - t0 < 10  # the worker stopped waiting for the future; the close is bounded
    release.set()
    ex.shutdown(wait=True)


def test_a_process_pool_executor_runs_the_fetches_in_other_processes(baseline, tmp_path):
    paths = write_npy_batches(tmp_path, 6, SHAPE, np.float32)
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as ex:
        with Prefetcher(NpyFiles(paths), workers=2, executor=ex) as pf:
            assert ids(pf) == list(range(6))
        with Prefetcher(NpyFiles(paths), workers=2, executor=ex, shape=SHAPE, dtype=np.float32) as pf:
            assert ids(pf) == list(range(6))
        with Prefetcher(NpyFiles([*paths[:2], tmp_path / "missing.npy"]), executor=ex) as pf:
            pf.get()
            pf.get()
            with pytest.raises(FileNotFoundError):
                pf.get()


@pytest.mark.timeout(120)
def test_a_dask_distributed_client_executor_runs_the_fetches(tmp_path):
    distributed = pytest.importorskip("distributed")
    paths = write_npy_batches(tmp_path, 6, SHAPE, np.float32)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            executor = client.get_executor(pure=False)
            with Prefetcher(NpyFiles(paths), workers=2, executor=executor) as pf:
                assert ids(pf) == list(range(6))
            with Prefetcher(Failing(4, bad=1), workers=2, executor=executor) as pf:
                pf.get()
                with pytest.raises(Boom):
                    pf.get()


# -- it is the checked machine ---------------------------------------------------------


def test_the_prefetcher_runs_the_reference_model_and_every_step_conforms(baseline):
    src = Failing(9, bad=6)
    with recording_runtimes() as runtimes, Prefetcher(src, capacity=2, workers=3, ordered=False) as pf:
        with pytest.raises(Boom):
            for _ in pf:
                time.sleep(0.001)
        lease = None
    del lease
    (rt,) = runtimes
    assert rt.machine.name == load_model("prefetcher").name
    assert rt.machine.config["capacity"] == 2 and rt.machine.config["workers"] == 3
    assert not rt.machine.config["ordered"]
    report = verify_record(rt.machine, rt.record)
    assert report.ok and report.steps > 20, report.message
    assert rt.machine.all_done(rt.state)


def test_repr_and_properties(baseline):
    with Prefetcher([batch(i) for i in range(3)], capacity=3, name="train") as pf:
        assert "train" in repr(pf) and "capacity=3" in repr(pf)
        assert pf.capacity == 3 and pf.workers == 1 and pf.ordered and pf.length == 3
        assert list(pf.indices) == [0, 1, 2]
    assert "closed" in repr(pf)

"""The live Prefetcher on its generated transitions (the default) and on the plain runtime (selectable).

``tests/test_codegen.py`` proves the generated transitions are the machine,
state by state. These tests pin what the runtime around them promises: the
Prefetcher uses them by default and the plain runtime on request (argument
or ``SAFEPREFETCH_RUNTIME``), both conform to the model step by step
(``verify_record``) and deliver the same batches; a bad choice is a clear
error; the steady path leaves nothing allocated behind per item
(tracemalloc); and ``copy_prefetched`` copies outside the kernel lock.
"""

import functools
import gc
import tracemalloc

import numpy as np
import pytest

from safeprefetch import Prefetcher
from safeprefetch.lowlevel import verify_record
from safeprefetch.testing import recording_runtimes
from safeprefetch._harness.live_profile import protocol_loop
from safeprefetch._prefetcher.machine import transitions_for
from safeprefetch._runtime.kernel import Runtime
from test_prefetcher_runs import Boom, Cheap

pytestmark = [pytest.mark.live, pytest.mark.timeout(120)]


@pytest.mark.parametrize("how, generated", [({}, True), ({"runtime": "generated"}, True),
                                            ({"runtime": "plain"}, False), ({"env": "plain"}, False),
                                            ({"env": "generated"}, True)], ids=str)
@pytest.mark.parametrize("workers, capacity", [(1, 1), (3, 2), (2, 8)])
def test_both_runtimes_deliver_the_stream_and_conform_step_by_step(monkeypatch, how, generated, workers, capacity):
    if "env" in how:
        monkeypatch.setenv("SAFEPREFETCH_RUNTIME", how["env"])
    else:
        monkeypatch.delenv("SAFEPREFETCH_RUNTIME", raising=False)
    kw = {"runtime": how["runtime"]} if "runtime" in how else {}
    out, got = np.empty(4, np.float32), []
    with recording_runtimes() as runtimes, Prefetcher(Cheap(150), capacity=capacity, workers=workers, shape=(4,),
                                                      dtype=np.float32, **kw) as pf:
        assert (pf._core.rt.compiled is not None) is generated
        while pf.copy_prefetched(out):
            got.append(int(out[0]))
    assert sorted(got) == list(range(150))
    (rt,) = runtimes
    report = verify_record(rt.machine, rt.record)
    assert report.ok, report.message


@pytest.mark.parametrize("runtime", ["generated", "plain"])
def test_a_source_error_and_a_close_are_the_same_on_both_runtimes(runtime):
    with recording_runtimes() as runtimes:
        with Prefetcher(Cheap(40, bad=17), capacity=4, workers=2, runtime=runtime) as pf:
            got = []
            with pytest.raises(Boom):
                for b in pf:
                    got.append(int(b[0]))
        assert got == list(range(17))
        with Prefetcher(Cheap(1000), capacity=4, runtime=runtime) as pf:
            assert int(pf.get()[0]) == 0
            pf.close()
    for rt in runtimes:
        report = verify_record(rt.machine, rt.record)
        assert report.ok, report.message


def test_a_bad_runtime_choice_is_a_clear_error(monkeypatch):
    with pytest.raises(ValueError, match="runtime must be one of 'generated', 'plain', 'typed', not 'fast'"):
        Prefetcher(Cheap(4), runtime="fast")
    monkeypatch.setenv("SAFEPREFETCH_RUNTIME", "compiled")
    with pytest.raises(ValueError, match="SAFEPREFETCH_RUNTIME must be one of generated, plain, typed, not 'compiled'"):
        Prefetcher(Cheap(4))


def _net_traced(run):
    """(net traced bytes, net traced blocks) that ``run()`` leaves behind, once a first run warmed caches."""
    run()
    gc.collect()
    tracemalloc.start()
    try:
        run()  # free lists and caches reach their steady size under the tracer too
        gc.collect()
        before = tracemalloc.take_snapshot()
        run()
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    mine = [tracemalloc.Filter(False, tracemalloc.__file__)]  # the snapshots themselves
    stats = after.filter_traces(mine).compare_to(before.filter_traces(mine), "filename")
    return sum(s.size_diff for s in stats), sum(s.count_diff for s in stats)


def test_the_generated_steady_path_leaves_nothing_allocated_per_item():
    """One thread drives claim, fetch, take and release (the bench's protocol loop) on the generated
    runtime, 5000 items: nothing stays allocated (the transient state tuples come and go). ``bench live``
    reports the same for the threaded Prefetcher (steady_state_allocations)."""
    factory = functools.partial(Runtime, compiled=transitions_for(8, 1, True, True, 0, 8))
    for items in (500, 5000):
        size, blocks = _net_traced(protocol_loop(factory, items, run=1))
        assert blocks <= 2 and size < 1024, (items, size, blocks)


def test_copy_prefetched_leaves_nothing_allocated_per_batch_on_the_generated_runtime():
    shape = (1024,)
    out = np.empty(shape, np.float32)

    class Into:
        def __len__(self):
            return 10 ** 6

        def __getitem__(self, i):
            raise AssertionError("fetch_into is used")

        def fetch_into(self, i, a):
            a.fill(i)

    with Prefetcher(Into(), capacity=4, shape=shape, dtype=np.float32) as pf:
        assert pf._core.rt.compiled is not None
        copy = pf.copy_prefetched

        def run(n):
            return lambda: [copy(out) for _ in range(n)] and None

        b_small, k_small = _net_traced(run(300))
        b_big, k_big = _net_traced(run(3000))
    # Threads make a few transient objects outlive a run (a wakeup in flight); ten times the batches
    # must not leave ten times as much.
    assert k_big <= max(20, 2 * k_small), (k_small, k_big)
    assert b_big < 16384, (b_small, b_big)


@pytest.mark.parametrize("runtime", ["generated", "plain"])
def test_copy_prefetched_copies_outside_the_kernel_lock(monkeypatch, runtime):
    """The copy (numpy releases the GIL for it) runs with the kernel lock free: workers publish meanwhile."""
    from safeprefetch._prefetcher import consumer

    held = []
    real = np.copyto

    class Spy:
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def copyto(dst, src, *args, **kw):
            held.append(pf._core.rt._lock._is_owned())
            return real(dst, src, *args, **kw)

    monkeypatch.setattr(consumer, "np", Spy())
    monkeypatch.setattr(consumer, "_copyto_plain", Spy.copyto)  # a plain out's copy (numpy's, less the dispatch)
    out = np.empty(4, np.float32)
    with Prefetcher(Cheap(50), capacity=2, shape=(4,), dtype=np.float32, runtime=runtime) as pf:
        n = 0
        while pf.copy_prefetched(out):
            assert int(out[0]) == n
            n += 1
    assert n == 50 and len(held) == 50 and not any(held)

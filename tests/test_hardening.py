"""Where the runtime meets the interpreter: one regression test per finding of the adversarial review.

Each test failed on the code before the hardening (commit c24e732): the
finding's number is in the test's docstring. Findings that hang the old code
run in a subprocess with a deadline, so a regression is a failure, not a
hung suite. The systematic part (every interruption point of every consumer,
lease, copy, close and finalizer path) is tests/test_interrupts.py.
"""

import copy
import gc
import pickle
import subprocess
import sys
import textwrap
import threading
import time
import warnings
import weakref

import numpy as np
import pytest

import safeprefetch
from safeprefetch import (LeaseHeld, LeaseReleased, PrefetchTimeout, Prefetcher, PrefetcherExhausted, PrefetcherWarning)
from safeprefetch.testing import thread_count
from _polling import wait_until

pytestmark = [pytest.mark.live, pytest.mark.timeout(60)]


def run_python(code: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter; a hang is a failure (TimeoutExpired is reported as one)."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the subprocess hung (no exit within {timeout} s); output so far:\n{e.stdout}\n{e.stderr}")


class Items:
    """Map-style: item i is np.full((3,), i)."""

    def __init__(self, n, shape=(3,)):
        self.n, self.shape = n, shape

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.full(self.shape, i, np.float32)


# -- 1. a GC finalizer on a worker that holds the kernel lock ---------------------------------------


def test_1_a_finalizer_run_by_the_gc_on_a_worker_inside_a_step_does_not_deadlock():
    """Finding 1: the abandoned prefetcher's finalizer, run by a garbage collection on one of its own
    workers while that worker holds the kernel lock, blocked on that lock forever and disabled the
    process's cyclic GC. Reproduced exactly: the collection is triggered inside the worker's kernel step."""
    out = run_python("""
        import gc, sys, threading, time
        import numpy as np
        from safeprefetch import Prefetcher
        from safeprefetch._runtime.kernel import Runtime

        class Items:
            def __len__(self): return 50
            def __getitem__(self, i): return np.full((3,), i, np.float32)

        armed = threading.Event()
        collected = threading.Event()
        apply_code = Runtime._apply.__code__

        def hook(frame, event, arg):
            # On a worker, inside Runtime._apply (the kernel lock held): collect the garbage once.
            if event == "call" and frame.f_code is apply_code and armed.is_set() and not collected.is_set():
                if "worker" in threading.current_thread().name:
                    collected.set()
                    gc.collect()
            return None

        gc.disable()  # only our collection runs
        threading.settrace(hook)
        pf = Prefetcher(Items(), capacity=2, workers=2)
        threading.settrace(None)
        pf.get()
        core = pf._core
        pf.cycle = pf  # a reference cycle: only the cyclic GC can free it
        del pf
        armed.set()
        assert collected.wait(5), "the worker never took a step"
        deadline = time.monotonic() + 10
        while not core.closed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert core.closed, "the finalizer's close never finished"
        assert all(not th.is_alive() for th in core.threads), "a worker is still running"
        gc.enable()
        class Cycle: pass
        c = Cycle(); c.me = c; del c
        assert gc.collect() >= 1, "the cyclic GC no longer runs"
        print("ok")
    """)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_1_a_thousand_abandoned_prefetchers_in_cycles_leave_no_threads(baseline):
    """Finding 1, at scale: abandoned prefetchers in reference cycles are all collected and joined."""
    for _ in range(200):
        pf = Prefetcher(Items(100), capacity=2, workers=2)
        pf.get()
        pf.cycle = pf
        del pf
    gc.collect()
    assert wait_until(lambda: thread_count() <= baseline, 20), thread_count() - baseline


# -- 2. close() from a signal handler while next() holds the kernel lock ------------------------------


def test_2_close_from_a_signal_handler_that_interrupted_next_inside_the_kernel_returns():
    """Finding 2: a SIGTERM handler calling close(timeout=1.0) while next() held the kernel lock blocked
    forever. The handler is run exactly there: at the entry of the kernel's _apply on the main thread."""
    out = run_python("""
        import signal, sys, threading, time
        import numpy as np
        from safeprefetch import Prefetcher, PrefetcherClosed
        from safeprefetch._runtime.kernel import Runtime

        class Items:
            def __len__(self): return 20
            def __getitem__(self, i): return np.full((3,), i, np.float32)

        pf = Prefetcher(Items(), capacity=2, workers=1)
        pf.get()
        took = []
        def on_term(signum, frame):
            t0 = time.monotonic()
            pf.close(timeout=1.0)
            took.append(time.monotonic() - t0)
        signal.signal(signal.SIGTERM, on_term)
        apply_code = Runtime._apply.__code__
        def hook(frame, event, arg):
            if event == "call" and frame.f_code is apply_code and not took:
                on_term(signal.SIGTERM, frame)   # the signal lands inside the kernel
            return None
        sys.settrace(hook)
        try:
            pf.get()
        except PrefetcherClosed:
            pass
        sys.settrace(None)
        assert took and took[0] < 1.5, took
        assert pf.closed
        deadline = time.monotonic() + 5
        while not pf._core.closed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pf._core.closed and not any(t.is_alive() for t in pf._core.threads)
        print("ok")
    """)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# -- 3. Ctrl-C at chosen points (the full sweep is test_interrupts.py) ---------------------------------


def _interrupt_at(code, pf, call, when=lambda frame: True):
    """Raise KeyboardInterrupt once, at the first line event of ``code`` on this thread; run ``call``."""
    fired = []

    def local(frame, event, arg):
        if event == "line" and not fired and when(frame):
            fired.append(frame.f_lineno)
            raise KeyboardInterrupt
        return local

    def hook(frame, event, arg):
        return local if frame.f_code is code else None

    sys.settrace(hook)
    try:
        return call()
    finally:
        sys.settrace(None)
        assert fired, "the point was never reached"


def test_3_ctrl_c_right_after_the_consumer_gate_is_taken_leaks_nothing(baseline):
    """Finding 3a: a KeyboardInterrupt right after the consumer lock was acquired left it held: every later
    call blocked, or said another thread was consuming."""
    from safeprefetch._prefetcher.waits import wait_gate

    with Prefetcher(Items(6), capacity=2) as pf:
        assert int(pf.get()[0]) == 0
        assert wait_until(lambda: pf.ready >= 1)
        # _wait_gate has taken the gate and returns: the interrupt lands before the caller's with owns it.
        code = wait_gate.__code__
        with pytest.raises(KeyboardInterrupt):
            _interrupt_at(code, pf, pf.get, when=lambda f: f.f_lineno >= code.co_firstlineno + 12)
        assert not pf._core.gate._is_owned()
        got = [int(pf.get(timeout=5)[0]) for _ in range(5)]
        assert got == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("runtime, loop", [("plain", "_wake_enabled"), ("generated", "_wake_set")])
def test_3_ctrl_c_inside_the_wake_up_loop_loses_no_wakeup(baseline, runtime, loop):
    """Finding 3b: an interrupt inside the kernel's wake-up loop lost a worker's wakeup for good. The
    generated runtime wakes from a precomputed wake set (``_wake_set``), the plain one tests every parked
    thread (``_wake_enabled``): both are interrupted."""
    from safeprefetch._runtime.kernel import Runtime

    class Slow(Items):
        pass

    with Prefetcher(Slow(8), capacity=1, workers=1, runtime=runtime) as pf:
        assert int(pf.get()[0]) == 0
        rt, w = pf._core.rt, pf._core.worker_ids[0]
        assert wait_until(lambda: rt._parked[w])  # the worker waits for the slot the consumer holds next
        # The consumer's release wakes the worker: interrupt the wake-up loop of the next get.
        with pytest.raises(KeyboardInterrupt):
            _interrupt_at(getattr(Runtime, loop).__code__, pf, pf.get)
        got = [int(pf.get(timeout=5)[0]) for _ in range(7)]
        assert got == list(range(1, 8))


def test_3_ctrl_c_inside_lease_leaves_no_unreleasable_lease(baseline):
    """Finding 3c: an interrupt inside lease() left LeaseHeld forever, with no Lease object to release."""
    from safeprefetch._prefetcher.consumer import ConsumerSide

    with Prefetcher(Items(5), capacity=2) as pf:
        assert wait_until(lambda: pf.ready >= 1)
        with pytest.raises(KeyboardInterrupt):
            _interrupt_at(ConsumerSide.consume.__code__, pf, pf.lease,
                          when=lambda f: "committed" in f.f_locals and f.f_locals["committed"] is not None)
        lease = pf.lease(timeout=5)  # the batch the interrupted call was handing out
        assert int(lease.array[0]) == 0
        lease.release()
        assert [int(b[0]) for b in pf] == [1, 2, 3, 4]


def test_3_an_interrupt_loses_no_batch_of_a_run(baseline):
    """Finding 3d: one interrupt dropped a whole consumer run (up to 16 batches); now it drops none."""
    from safeprefetch._runtime.kernel import Runtime

    with Prefetcher(Items(12), capacity=8) as pf:
        core = pf._core
        assert wait_until(lambda: pf.ready >= 6)
        core.runs.ewma, core.runs.last_call = 1e-7, None  # a fast caller: the take is a run of every ready batch
        # Interrupt the take's kernel step after it applied (the run is taken, the caller never saw it).
        with pytest.raises(KeyboardInterrupt):
            _interrupt_at(Runtime._apply.__code__, pf, pf.get,
                          when=lambda f: f.f_locals.get("woke") is not None or f.f_lineno > f.f_code.co_firstlineno + 14)
        assert [int(b[0]) for b in pf] == list(range(12))


# -- 4 .. 6 --------------------------------------------------------------------------------------


class StopsAt(Items):
    def __getitem__(self, i):
        if i == 3:
            raise StopIteration
        return super().__getitem__(i)


def test_4_stop_iteration_from_a_map_style_source_is_an_error_at_its_position(baseline):
    """Finding 4: a StopIteration from __getitem__ silently truncated the stream (3 of 10 delivered)."""
    with Prefetcher(StopsAt(10), capacity=2, workers=2) as pf:
        got = []
        with pytest.raises(RuntimeError, match=r"item 3: the source raised StopIteration") as info:
            for b in pf:
                got.append(int(b[0]))
        assert got == [0, 1, 2]
        assert isinstance(info.value.__cause__, StopIteration)


def test_4_stop_iteration_in_the_first_read_is_an_error_at_position_zero(baseline):
    class StopsAt0(Items):
        def __getitem__(self, i):
            raise StopIteration

    with Prefetcher(StopsAt0(3)) as pf:
        with pytest.raises(RuntimeError, match=r"item 0: the source raised StopIteration"):
            pf.get()


def test_5_the_constructors_first_read_honours_the_timeout(baseline):
    """Finding 5: the constructor hung forever when the first read never returned."""
    release = threading.Event()

    class Never(Items):
        def __getitem__(self, i):
            release.wait(30)
            return super().__getitem__(i)

    t0 = time.monotonic()
    with pytest.raises(PrefetchTimeout, match=r"first batch within 0.2 s"):
        Prefetcher(Never(3), timeout=0.2)
    assert time.monotonic() - t0 < 5
    release.set()  # the helper thread finishes its read and exits


def test_5_the_timeout_is_also_the_default_for_every_call(baseline):
    gate = threading.Event()

    class Second(Items):
        def __getitem__(self, i):
            if i == 1:
                gate.wait(30)
            return super().__getitem__(i)

    with Prefetcher(Second(3), timeout=0.1) as pf:
        assert int(pf.get()[0]) == 0
        with pytest.raises(PrefetchTimeout):
            pf.get()
        gate.set()
        assert int(pf.get(timeout=None)[0]) == 1  # an explicit None waits


def test_6_a_forked_child_gets_a_clear_error_and_the_parent_is_unaffected():
    """Finding 6: a forked child that touched the Prefetcher hung."""
    out = run_python("""
        import os, signal, time
        import numpy as np
        from safeprefetch import Prefetcher, PrefetcherForked

        class Items:
            def __len__(self): return 30
            def __getitem__(self, i): return np.full((3,), i, np.float32)

        pf = Prefetcher(Items(), capacity=2, workers=2)
        assert int(pf.get()[0]) == 0
        pid = os.fork()
        if pid == 0:
            signal.alarm(5)  # a hang in the child is an exit by SIGALRM
            try:
                pf.get()
                os._exit(3)
            except PrefetcherForked:
                pass
            pf.close()     # a no-op in the child
            del pf         # so is the finalizer
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert [int(b[0]) for b in pf] == list(range(1, 30))
        pf.close()
        print("ok")
    """)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# -- 7 .. 9: leaks and exit --------------------------------------------------------------------------


def test_7_a_source_that_references_its_own_prefetcher_is_collected(baseline):
    """Finding 7: ``self.pf = Prefetcher(self)`` was never collected; its threads leaked."""

    class Loader:
        def __init__(self):
            self.pf = Prefetcher(self, capacity=2, workers=2)

        def __len__(self):
            return 100

        def __getitem__(self, i):
            return np.full((3,), i, np.float32)

    loader = Loader()
    assert int(loader.pf.get()[0]) == 0
    ref = weakref.ref(loader.pf)
    del loader
    gc.collect()
    assert ref() is None
    assert wait_until(lambda: thread_count() <= baseline)


def test_8_exit_closes_stuck_prefetchers_concurrently_within_one_timeout():
    """Finding 8: interpreter exit waited close_timeout per stuck prefetcher, one after another (4 took
    20.3 s). Four prefetchers stuck in a fetch, close_timeout=2: exit waits about 2 s, not 8."""
    code = """
        import threading, time
        import numpy as np
        from safeprefetch import Prefetcher

        forever = threading.Event()
        entered = threading.Semaphore(0)
        class Stuck:
            def __len__(self): return 5
            def __getitem__(self, i):
                if i >= 1:
                    entered.release()
                    forever.wait()
                return np.zeros(3, np.float32)

        pfs = [Prefetcher(Stuck(), capacity=1, close_timeout=2.0) for _ in range(4)]
        for pf in pfs:
            pf.get()
        for _ in pfs:
            assert entered.acquire(timeout=10)  # every worker is inside its stuck fetch
        print("exiting", time.monotonic(), flush=True)
    """
    out = run_python(code, timeout=30)
    ended = time.monotonic()  # CLOCK_MONOTONIC is one clock for every process on the machine
    assert out.returncode == 0 and "exiting" in out.stdout, out.stderr
    # Timed from the child's last line, so a loaded machine's slow interpreter start does not count.
    took = ended - float(out.stdout.split()[-1])
    assert took < 6.0, f"exit took {took:.1f} s: the stuck prefetchers were closed one after another"


def test_9_an_atexit_handler_registered_after_import_can_still_use_an_open_prefetcher():
    """Finding 9: a module-level prefetcher was closed before the user's atexit handlers ran."""
    out = run_python("""
        import atexit
        import numpy as np
        import safeprefetch
        from safeprefetch import Prefetcher

        class Items:
            def __len__(self): return 5
            def __getitem__(self, i): return np.full((3,), i, np.float32)

        def at_exit():
            print("at exit:", [int(b[0]) for b in pf])

        atexit.register(at_exit)
        pf = Prefetcher(Items(), capacity=2)
        print("first:", int(pf.get()[0]))
    """)
    assert out.returncode == 0, out.stderr
    assert "at exit: [1, 2, 3, 4]" in out.stdout, out.stdout + out.stderr


# -- 10 .. 16: wrong results and unclear errors ----------------------------------------------------


def test_10_zero_dimensional_batches_work_through_every_api(baseline, tmp_path):
    """Finding 10: 0-d batches failed with an internal copyto() error; fetch_into got a numpy scalar."""
    items = [np.array(float(i)) for i in range(4)]
    with Prefetcher(items, capacity=2) as pf:
        first = pf.get()
        assert first.shape == () and float(first) == 0.0
        out = np.empty((), np.float64)
        assert pf.copy_prefetched(out) and float(out) == 1.0
        with pf.lease() as view:
            assert view.shape == () and float(view) == 2.0
        assert [float(b) for b in pf] == [3.0]

    class Into:
        def __len__(self):
            return 3

        def fetch_into(self, i, out):
            assert isinstance(out, np.ndarray) and out.shape == ()
            out[...] = i

    with Prefetcher(Into(), shape=(), dtype=np.float64) as pf:
        assert [float(b) for b in pf] == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("timeout", [float("inf"), 1e10, np.float32(5), np.float64(5), np.int64(5), 5])
def test_11_any_real_timeout_is_accepted_and_infinity_means_none(baseline, timeout):
    """Finding 11: inf or 1e10 raised OverflowError from get/copy/close; np.float32 was rejected."""
    with Prefetcher(Items(3), capacity=2, close_timeout=timeout) as pf:
        assert int(pf.get(timeout=timeout)[0]) == 0
        out = np.empty(3, np.float32)
        assert pf.copy_prefetched(out, timeout=timeout) and int(out[0]) == 1
        with pf.lease(timeout=timeout) as view:
            assert int(view[0]) == 2
        pf.close(timeout=timeout)


def test_12_pickling_or_copying_says_why_it_cannot(baseline):
    """Finding 12: pickling or deep-copying failed with an internal message about a local function."""
    with Prefetcher(Items(3)) as pf:
        for attempt in (pickle.dumps, copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match=r"Prefetcher cannot be pickled or copied"):
                attempt(pf)
        with pf.lease() as _view:
            pass


def test_13_close_with_timeout_zero_does_not_call_waiting_workers_stuck(baseline):
    """Finding 13: close(timeout=0) on a healthy prefetcher warned that workers were "inside a fetch"
    when they only waited for a slot."""
    pf = Prefetcher(Items(50), capacity=2, workers=3)
    pf.get()
    rt = pf._core.rt
    assert wait_until(lambda: all(rt._parked[w] for w in pf._core.worker_ids))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrefetcherWarning)
        pf.close(timeout=0)


def test_13_close_with_timeout_zero_names_the_worker_really_inside_a_fetch(baseline):
    release = threading.Event()
    inside = threading.Event()

    class Stuck(Items):
        def __getitem__(self, i):
            if i == 1:
                inside.set()
                release.wait(30)
            return super().__getitem__(i)

    pf = Prefetcher(Stuck(3), capacity=2, workers=1)
    assert inside.wait(5)
    with pytest.warns(PrefetcherWarning, match=r"worker0 still inside a fetch"):
        pf.close(timeout=0)
    release.set()


def test_14_a_lease_view_cannot_be_made_writeable(baseline):
    """Finding 14: ``view.flags.writeable = True`` succeeded, and then corrupted a later batch."""
    with Prefetcher(Items(4), capacity=2) as pf:
        with pf.lease() as view:
            with pytest.raises(ValueError, match=r"WRITEABLE"):
                view.flags.writeable = True
            with pytest.raises(ValueError):
                view[0] = 99
        assert [int(b[0]) for b in pf] == [1, 2, 3]


def test_15_masked_arrays_and_matrices_are_rejected_clearly(baseline):
    """Finding 15: a MaskedArray's mask was silently dropped; np.matrix silently became an ndarray."""
    masked = [np.ma.masked_array(np.zeros((2, 2)), mask=[[1, 0], [0, 0]])] * 2
    with Prefetcher(masked) as pf:
        with pytest.raises(TypeError, match=r"item 0: a numpy.ma.MaskedArray: its mask would be dropped"):
            pf.get()
    matrices = [np.zeros((2, 2)), np.matrix(np.zeros((2, 2)))]
    with Prefetcher(matrices) as pf:
        pf.get()
        with pytest.raises(TypeError, match=r"item 1: a numpy.matrix"):
            pf.get()
    memmaps_are_fine = [np.zeros((2, 2)).view(np.memmap)] * 2
    with Prefetcher(memmaps_are_fine) as pf:
        assert len(list(pf)) == 2


def test_16_a_source_that_is_not_thread_safe_is_called_one_at_a_time(baseline):
    """Finding 16: a map source that is not thread-safe, with workers > 1, corrupted 2,332 of 3,000 batches,
    and nothing said sources must be thread-safe. ``thread_safe=False`` serializes the calls."""

    class Racy:
        """Keeps the requested index in an attribute across a GIL release: wrong under concurrency."""

        def __init__(self):
            self.current, self.inside, self.overlaps = -1, 0, 0

        def __len__(self):
            return 300

        def __getitem__(self, i):
            self.inside += 1
            if self.inside > 1:
                self.overlaps += 1
            self.current = i
            time.sleep(0)  # gives the GIL away, as real I/O would
            out = np.full((3,), self.current, np.float32)
            self.inside -= 1
            return out

    src = Racy()
    with Prefetcher(src, capacity=4, workers=4, thread_safe=False) as pf:
        assert [int(b[0]) for b in pf] == list(range(300))
    assert src.overlaps == 0


# -- 17 .. 21: as a new user meets it ----------------------------------------------------------------


def test_17_printing_the_stats_prints_the_summary(baseline):
    """Finding 17: ``print(pf.stats)`` printed a raw dataclass repr."""
    with Prefetcher(Items(3)) as pf:
        list(pf)
        stats = pf.stats
    assert str(stats) == stats.summary()
    assert str(stats).startswith("3 batches in ")


def test_18_iterating_an_exhausted_prefetcher_again_raises_a_clear_error(baseline):
    """Finding 18: a second ``for`` over an exhausted Prefetcher silently yielded nothing."""
    with Prefetcher(Items(3)) as pf:
        assert len(list(pf)) == 3
        with pytest.raises(PrefetcherExhausted, match=r"one pass"):
            for _ in pf:
                pass
        with pytest.raises(StopIteration):
            next(pf)  # the iterator protocol: an exhausted iterator stays exhausted


def test_19_leases_iterates_and_a_released_lease_refuses_access(baseline):
    """Finding 19: no ``for lease in pf.leases()``; lease() ended with StopIteration, a RuntimeError
    inside a generator; Lease.array stayed readable after release."""
    with Prefetcher(Items(5), capacity=2) as pf:
        kept = []

        def first_elements():
            for lease in pf.leases():
                kept.append(lease)
                yield int(lease.array[0])

        assert list(first_elements()) == [0, 1, 2, 3, 4]
        assert all(lease.released for lease in kept)
        with pytest.raises(LeaseReleased):
            kept[0].array


def test_19_a_lease_dropped_unreleased_is_released_by_the_next_call(baseline):
    with Prefetcher(Items(4), capacity=2) as pf:
        lease = pf.lease()
        with pytest.raises(LeaseHeld):
            pf.get()
        del lease  # lost, e.g. to a Ctrl-C between lease() and the with that would have released it
        assert [int(b[0]) for b in pf] == [1, 2, 3]


@pytest.mark.parametrize("even, lengths", [(None, [4, 3, 3]), ("pad", [4, 4, 4]), ("drop", [3, 3, 3])])
def test_20_sharding_can_give_every_rank_the_same_length(baseline, even, lengths):
    """Finding 20: 10 items over 3 ranks gave 4/3/3 with no pad or drop-last option."""
    got = []
    for rank in range(3):
        with Prefetcher(Items(10), rank=rank, world_size=3, even=even, shuffle=True, seed=7) as pf:
            got.append([int(b[0]) for b in pf])
    assert [len(g) for g in got] == lengths
    flat = [i for g in got for i in g]
    if even == "drop":
        assert len(set(flat)) == 9
    else:
        assert set(flat) == set(range(10))


def test_21_the_timeline_writer_is_public(baseline, tmp_path):
    """Finding 21: drawing ``pf.timeline()`` needed a private module."""
    with Prefetcher(Items(6), capacity=2, timeline=True) as pf:
        list(pf)
        pf.write_timeline(tmp_path / "a.svg")
        safeprefetch.write_timeline(tmp_path / "b.svg", pf.timeline())
    assert (tmp_path / "a.svg").read_text().startswith("<svg")
    assert (tmp_path / "b.svg").read_text() == (tmp_path / "a.svg").read_text()

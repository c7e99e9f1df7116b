"""A fifteenth hardening round: what real pipelines feed the prefetchers, and how long they run.

Each test reproduces a finding of an adversarial review (a thread pool's fetch read after the pool had reused
the source's buffer, a label stream of zeros, object batches shared with the source, memory-mapped sources
refused, a subarray dtype accepted as another shape) and failed on the code before its fix
(docs/hardening.md, "A fifteenth round").
"""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import pytest

import pickle

from safeprefetch import NpyFiles, OnDemandPrefetcher, Prefetcher, write_npy_batches

pytestmark = pytest.mark.timeout(60)


class _PerThreadBuffer:
    """Thread-safe: each thread decodes into a buffer of its own, reused for that thread's next item."""

    def __init__(self, n: int):
        self.n, self.local = n, threading.local()

    def __len__(self) -> int:
        return self.n

    def buffer(self) -> np.ndarray:
        buf = getattr(self.local, "buf", None)
        if buf is None:
            buf = self.local.buf = np.zeros(64, np.int64)
        return buf

    def __getitem__(self, i: int) -> np.ndarray:
        buf = self.buffer()
        buf[:] = i
        return buf


class _ReusingPool(concurrent.futures.ThreadPoolExecutor):
    """A thread pool whose thread, right after each task, decodes the source's next item into its buffer, before
    anyone waiting for the task's future can look at its result: the order a busy pool runs in. Deterministic."""

    def __init__(self, source: _PerThreadBuffer):
        super().__init__(max_workers=1)
        self.source = source

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        def task():
            result = fn(*args, **kwargs)
            self.source.buffer()[:] = -1  # the next decode on this thread, before the future completes
            return result
        return super().submit(task)


def test_1_a_thread_pool_fetch_is_copied_before_its_thread_runs_another():
    # The worker copied an executor's result into its slot after the future completed; a source that reuses
    # one buffer per thread (correct with the prefetcher's own workers) had refilled it for the pool's next
    # fetch by then: 745-807 of 2000 batches were another item's, silently. The first read too.
    src = _PerThreadBuffer(40)
    with _ReusingPool(src) as pool, Prefetcher(src, capacity=4, workers=2, executor=pool) as pf:
        got = [int(b[0]) if (b == b[0]).all() else None for b in pf]
    assert got == list(range(40))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        with Prefetcher(_PerThreadBuffer(300), capacity=4, workers=4, executor=pool) as pf:
            assert [int(b[0]) for b in pf] == list(range(300))


class _FetchIntoFillsHere:
    def __init__(self, n: int):
        self.n, self.calls = n, []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        return np.zeros(64, np.int64)

    def fetch_into(self, i: int, out: np.ndarray) -> None:
        self.calls.append((threading.get_ident(), out))  # (keeps each out alive: no address is reused)
        out[:] = i


def test_1_a_thread_pool_fetch_into_fills_the_slot_itself():
    # In-process, the executor's thread fills the worker's slot: no batch-sized array per fetch (there was one,
    # copied into the slot afterwards), and the result is in the slot before the pool runs another fetch.
    src = _FetchIntoFillsHere(20)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        with Prefetcher(src, capacity=3, workers=2, executor=pool) as pf:
            assert [int(b[-1]) for b in pf] == list(range(20))
    assert threading.get_ident() not in {ident for ident, _out in src.calls}
    assert len({out.__array_interface__["data"][0] for _ident, out in src.calls}) <= 3  # the three slots


class _Labels:
    """A 0-d label stream whose fetch_into is written like __getitem__: it returns the label."""

    def __init__(self, labels: np.ndarray):
        self.y = labels

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.y[i]

    def fetch_into(self, i: int, out: np.ndarray):
        return self.y[i]


def test_2_a_0d_value_returned_by_fetch_into_is_never_guessed_at():
    # A returned 0-d array or numpy scalar was ignored as "a count" for every batch shape: a label stream whose
    # fetch_into returns its label (written like __getitem__) delivered zeros, silently. Where the batch is
    # 0-d such a value is the batch or a count, which no test can tell apart: refused (a clear error at its
    # position) unless out holds that same value. (The round's first fix copied it in: a count of the
    # batch's dtype, returned by a source that had written out, then became every batch.)
    y = np.arange(1, 9, dtype=np.int64)
    with Prefetcher(_Labels(y), capacity=3, workers=2) as pf:
        with pytest.raises(TypeError, match=r"item 0: fetch_into returned .* for a 0-d batch write the value"):
            next(pf)
    with OnDemandPrefetcher(_Labels(y), capacity=3, workers=1, predict=None) as od:
        with pytest.raises(TypeError, match="for a 0-d batch write the value into out"):
            od.get(3)

    class WritesAndReturns(_Labels):
        def __init__(self, labels, count):
            super().__init__(labels)
            self.count = count

        def fetch_into(self, i, out):
            out[...] = self.y[i]
            return self.count(self.y[i])

    for count in (lambda v: v, lambda v: 1, lambda v: None):  # the value itself, a Python int count, nothing
        with Prefetcher(WritesAndReturns(y, count), capacity=3) as pf:
            assert [int(b) for b in pf] == list(range(1, 9))
    # A numpy count (equal to label 1 only, so refused at item 1), and the label in another dtype (refused at 0).
    for count, first_refused in ((lambda v: np.int64(1), 1), (lambda v: np.int32(v), 0)):
        with Prefetcher(WritesAndReturns(y, count), capacity=3) as pf:
            with pytest.raises(TypeError, match=f"item {first_refused}: fetch_into returned"):
                list(pf)


def _ragged(n: int):
    tokens = np.zeros(3, np.int64)  # decoded into one reused buffer
    for i in range(n):
        tokens[:] = i
        b = np.empty(2, object)
        b[0], b[1] = tokens, i
        yield b


def test_3_batches_that_hold_python_objects_are_refused():
    # A slot's copy of an object array copies references: the consumer's batches shared the generator's reused
    # token buffer, and positions 0-3 all held 3 inside the loop. Refused, at construction, wherever the dtype
    # comes from.
    with pytest.raises(TypeError, match="holds Python objects"):
        Prefetcher(_ragged(6), capacity=4)
    with pytest.raises(TypeError, match="holds Python objects"):
        Prefetcher(np.zeros(4), capacity=2, dtype=object, shape=())
    with pytest.raises(TypeError, match="holds Python objects"):
        Prefetcher(np.zeros(4), capacity=2, dtype=[("a", "f8"), ("b", "O")], shape=())
    objects = np.empty((3, 2), object)
    with pytest.raises(TypeError, match="holds Python objects"):
        OnDemandPrefetcher(objects, capacity=2)
    with pytest.raises(TypeError, match="holds Python objects"):
        OnDemandPrefetcher(np.zeros(4), capacity=2, dtype=object, shape=())


def test_4_on_demand_calls_its_source_from_two_threads_even_with_one_worker():
    # Documented now (the README and docs/predictive.md said the source is called concurrently "with
    # workers > 1"): a miss runs on the caller's thread while the one worker speculates.
    inside = threading.Event()
    both = threading.Event()

    class Slow:
        def __len__(self):
            return 16

        def __getitem__(self, i):
            if i == 1:  # the speculative fetch of the index after 0: waits for the caller's miss of 9
                inside.set()
                both.wait(30)
            if i == 9 and inside.is_set():
                both.set()
            return np.full(2, float(i))

    with OnDemandPrefetcher(Slow(), capacity=4, workers=1, predict="sequential", shape=(2,), dtype=float) as od:
        assert od.get(0)[0] == 0.0
        assert inside.wait(30)  # the worker is inside source[1]
        assert od.get(9)[0] == 9.0  # a miss, on this thread, while the worker is inside the source
        assert both.is_set()


def test_5_memory_mapped_sources_are_accepted_on_demand(tmp_path):
    # OnDemandPrefetcher refused any source[0] that was not exactly an ndarray ("not memmap"); the workers
    # and the streaming Prefetcher take a memmap.
    path = tmp_path / "x.npy"
    np.save(path, np.arange(20.0).reshape(5, 4))
    data = np.load(path, mmap_mode="r")
    with OnDemandPrefetcher(data, capacity=2) as od:
        assert [od.get(i).tolist() for i in (3, 0)] == [[12.0, 13.0, 14.0, 15.0], [0.0, 1.0, 2.0, 3.0]]
    with pytest.raises(TypeError, match="MaskedArray"):
        OnDemandPrefetcher(np.ma.array(np.zeros((2, 2)), mask=[[1, 0], [0, 0]]), capacity=2)


def test_6_a_memory_mapped_string_array_is_read_in_its_own_dtype(tmp_path):
    # Item 5 of the fourteenth round read plain string arrays as a[i, ...]; a memmap was read as a[i], a scalar
    # sized to its value ('<U2' out of '<U3'), refused at the first shorter label.
    path = tmp_path / "labels.npy"
    np.save(path, np.array(["cat", "dog", "ox", "eel"]))
    labels = np.load(path, mmap_mode="r")
    with Prefetcher(labels, capacity=2) as pf:
        assert [str(x) for x in pf] == ["cat", "dog", "ox", "eel"]
    with OnDemandPrefetcher(labels, capacity=2) as od:
        assert [str(od.get(i)) for i in (2, 0)] == ["ox", "cat"]


@pytest.mark.parametrize("dtype, shape", [("M8[s]", (2, 3)), ("m8[ms]", (4,)), ("M8[D]", ()), ("M8[s]", (0, 2))])
def test_7_npy_files_reads_datetime_files(tmp_path, dtype, shape):
    # NpyFiles read a file's bytes through memoryview(out), which numpy refuses for datetime64/timedelta64
    # ("cannot include dtype 'M' in a buffer").
    paths = write_npy_batches(tmp_path, 3, shape, dtype=dtype, fill=lambda i: i)
    with Prefetcher(NpyFiles(paths), capacity=2) as pf:
        got = list(pf)
    assert [g.dtype for g in got] == [np.dtype(dtype)] * 3
    assert all(np.array_equal(g, np.full(shape, i, dtype=dtype)) for i, g in enumerate(got))


def test_8_a_subarray_dtype_is_refused_with_the_shape_it_means():
    # dtype=("f4", (2,)) was accepted: the pool's batches came out (3, 2) float32, pf.shape said (3,), every
    # copy_prefetched out was refused, and an iterable source was asked for an impossible dtype.
    with pytest.raises(ValueError, match=r"subarray dtype .* give them in shape= and dtype=float32"):
        Prefetcher(np.zeros((4, 3, 2), np.float32), capacity=2, shape=(3,), dtype=("f4", (2,)))
    with pytest.raises(ValueError, match="subarray dtype"):
        OnDemandPrefetcher(np.zeros((4, 3, 2), np.float32), capacity=2, shape=(3,), dtype=("f4", (2,)))


class _Src:
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> np.ndarray:
        return np.zeros(2)


def _sigint_deferred_in_a_protected_frame() -> bool:
    """Raise a real SIGINT inside a protected frame: True if the wrapper deferred it (nothing ran there)."""
    from safeprefetch._runtime import interrupts

    ran = []
    previous = interrupts.wrapped()

    def handler(signum, frame):
        ran.append(frame.f_code.co_name if frame else None)

    interrupts.rewrap(previous, handler)

    @interrupts.protected
    def critical_section():
        import signal as _signal
        _signal.raise_signal(_signal.SIGINT)

    try:
        critical_section()
    finally:
        interrupts.rewrap(handler, previous)
        interrupts._guard.deferred = False
    return not ran and interrupts.installed()


@pytest.fixture
def own_sigint_handler():
    import signal

    original = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, original)


def test_9_a_prefetcher_opened_after_the_callers_handler_replaced_a_stale_wrapper_defers(own_sigint_handler):
    # The last prefetcher closed off the main thread leaves the wrapper stale (it cannot be removed there). The
    # caller then installed a handler of its own and opened a prefetcher: install() wrapped the new handler and
    # left the stale mark, so the first SIGINT, inside a protected frame too, ran the handler and removed the
    # wrapper with the prefetcher open.
    import signal

    a = Prefetcher(_Src(), capacity=2)
    closer = threading.Thread(target=a.close)
    closer.start()
    closer.join()
    signal.signal(signal.SIGINT, lambda signum, frame: None)  # the caller's own handler, over the stale wrapper
    with Prefetcher(_Src(), capacity=2):
        assert _sigint_deferred_in_a_protected_frame()


class _Announcing:
    """The SIGINT wrapper's lock, saying (``reached``) when a thread other than the main one goes for it."""

    def __init__(self, lock, reached: threading.Event):
        self.lock, self.reached = lock, reached

    def acquire(self, *how):
        if threading.current_thread() is not threading.main_thread():
            self.reached.set()
        return self.lock.acquire(*how)

    def release(self):
        return self.lock.release()

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        return self.lock.__exit__(*exc)


def test_10_a_close_on_another_thread_cannot_drop_the_wrapper_a_new_prefetcher_just_installed(
        own_sigint_handler, monkeypatch):
    # A constructor installed the wrapper, then stored that it had; a close on another thread deciding in
    # between that no open prefetcher had asked for it marked it stale: the new prefetcher's first SIGINT was
    # not deferred. Forced here at that point: the close runs while the constructor is between the two.
    from safeprefetch._prefetcher import lifecycle
    from safeprefetch._runtime import interrupts

    holder = {}
    a = Prefetcher(_Src(), capacity=2)  # on the main thread: the wrapper is installed
    opener = threading.Thread(target=lambda: holder.setdefault("b", Prefetcher(_Src(), capacity=2)))
    opener.start()
    opener.join()
    a.close()  # b, opened off the main thread while it was installed, keeps asking for it
    real_install = interrupts.install
    closer = threading.Thread(target=holder["b"].close)

    def install_then_close_elsewhere():
        got = real_install()
        if threading.current_thread() is threading.main_thread() and not closer.is_alive():
            closer.start()
            closer.join(30)  # the whole close, between the install and the constructor saying it asked
        return got

    monkeypatch.setattr(interrupts, "install", install_then_close_elsewhere)
    p = Prefetcher(_Src(), capacity=2)
    try:
        assert not closer.is_alive()
        assert _sigint_deferred_in_a_protected_frame()
    finally:
        p.close()


def test_10_a_stale_mark_a_racing_close_made_is_undone_while_a_prefetcher_asks(own_sigint_handler):
    # A close off the main thread decides without a lock (item 25) and may mark the wrapper stale just after a
    # new prefetcher asked for it: the wrapper asks again before it steps aside. Here the mark is made so.
    from safeprefetch._runtime import interrupts

    with Prefetcher(_Src(), capacity=2):
        marker = threading.Thread(target=interrupts.uninstall)  # what that close does off the main thread
        marker.start()
        marker.join()
        assert interrupts._guard.stale
        assert _sigint_deferred_in_a_protected_frame()
        assert not interrupts._guard.stale


class _Stuck:
    """Item 1 blocks until ``release`` is set (a hung network read)."""

    def __init__(self, entered: threading.Event, release: threading.Event):
        self.entered, self.release = entered, release

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> np.ndarray:
        if i == 1:
            self.entered.set()
            self.release.wait()
        return np.full(3, i, np.int64)


def test_11_a_stuck_close_in_a_batch_of_abandoned_ones_keeps_none_of_the_others():
    # The reaper closes the requests waiting together on one closer thread, finishing them in order and holding
    # every one until all were done: behind one stuck with close_timeout=inf, a healthy one was never finished
    # (still registered, its pool allocated). Driven here as the reaper's closer thread runs a batch.
    import gc
    import weakref

    from safeprefetch._prefetcher import lifecycle
    from tests._polling import wait_until

    entered, release = threading.Event(), threading.Event()
    stuck = Prefetcher(_Stuck(entered, release), capacity=2, workers=1, close_timeout=float("inf"))
    healthy = Prefetcher(np.zeros((8, 1000)), capacity=2, workers=1)
    try:
        assert entered.wait(10)
        batch = [stuck._core, healthy._core]
        healthy_core = weakref.ref(healthy._core)
        healthy._finalizer.detach()  # abandoned, with its close request in this batch (not the reaper's)
        del healthy
        closer = threading.Thread(target=lifecycle._close_all, args=(batch,), daemon=True)
        closer.start()
        assert wait_until(lambda: healthy_core() is None or healthy_core().closed, 10), \
            "the healthy prefetcher's close waits behind the stuck one"
        assert wait_until(lambda: batch[1] is None, 10)  # let go of once finished (the closer thread's list)
        gc.collect()
        assert healthy_core() is None, "the closer thread still holds the closed prefetcher"
        assert closer.is_alive() and not stuck._core.closed
    finally:
        release.set()
    closer.join(10)
    assert not closer.is_alive() and stuck._core.closed


def test_12_a_shape_built_by_many_threads_at_once_is_compiled_once(monkeypatch):
    # functools.lru_cache lets every caller that misses compute: eight threads constructing one new shape each
    # compiled the model and generated its transitions (2 s instead of 0.2). Forced here: the first compile
    # waits until every thread has asked for the shape.
    from safeprefetch._prefetcher import api, machine

    threads, asked, compiled = 4, [], []
    everyone = threading.Event()
    real_ask, real_compile = api.transitions_for, machine.compile_transitions

    def ask(*shape):
        asked.append(shape)
        if len(asked) == threads:
            everyone.set()
        return real_ask(*shape)

    def compile_once_everyone_asked(*args):
        compiled.append(args)
        assert everyone.wait(30)
        return real_compile(*args)

    monkeypatch.setattr(api, "transitions_for", ask)
    monkeypatch.setattr(machine, "compile_transitions", compile_once_everyone_asked)
    shape_nobody_built = 23 + threading.get_ident() % 7  # a capacity no other test uses
    got = []

    def build():
        with Prefetcher(np.zeros((40, 2)), capacity=shape_nobody_built, workers=3) as pf:
            got.append(len(list(pf)))

    workers = [threading.Thread(target=build) for _ in range(threads)]
    for th in workers:
        th.start()
    for th in workers:
        th.join(60)
    assert got == [40] * threads
    assert len(compiled) == 1, f"compiled {len(compiled)} times"


def test_13_a_generated_modules_source_lives_as_long_as_its_transitions():
    # linecache kept every generated module's text for good (about 48 KB a shape), after the caches had let
    # the transitions go: memory grew with every shape a long-running process ever built.
    import gc
    import linecache

    from safeprefetch._prefetcher import machine

    template = machine._template(3, 5, True, True, 0, 1)  # a shape no other test builds (five workers)
    built = machine.compile_transitions(template, _prefetcher_model())
    name = built.filename
    first = built.steps[0][next(iter(built.steps[0]))].first
    assert linecache.getline(first.__code__.co_filename, first.__code__.co_firstlineno).startswith("def ")
    again = machine.compile_transitions(template, _prefetcher_model())
    assert again.filename == name  # the same shape generated again: the same name and text
    cached = machine.transitions_for(3, 5, True, True, 0, 1)
    del built, first, again
    gc.collect()
    assert name in linecache.cache, "the source went while a module of that name (the cached one) lives"
    machine.transitions_for.cache_clear()
    del cached
    gc.collect()
    assert name not in linecache.cache


def _prefetcher_model():
    from safeprefetch.models.prefetcher import Prefetcher as Model

    return Model


def test_14_a_timeline_keeps_the_latest_records_only(monkeypatch):
    # timeline=True kept every span and occupancy sample for the prefetcher's life: about 740 bytes a batch,
    # 59 GB for a day at 1,000 batches/s. The latest TIMELINE_RECORDS of each are kept.
    from safeprefetch._prefetcher import core

    monkeypatch.setattr(core, "TIMELINE_RECORDS", 50)
    with Prefetcher(np.arange(400.0).reshape(200, 2), capacity=2, timeline=True) as pf:
        assert len(list(pf)) == 200
        got = pf.timeline()
    assert 0 < len(got["spans"]) <= 50 and 0 < len(got["occupancy"]) <= 50
    assert all(a <= b for _th, _kind, a, b in got["spans"])


class _PicklingPool(concurrent.futures.ThreadPoolExecutor):
    """An executor of this process that isolates its calls by pickling them, as a process pool would."""

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        fn, args, kwargs = pickle.loads(pickle.dumps((fn, args, kwargs)))
        return super().submit(fn, *args, **kwargs)


class _FetchIntoOnly:
    def __len__(self) -> int:
        return 8

    def fetch_into(self, i: int, out: np.ndarray) -> None:
        out[...] = i


def test_15_an_executor_of_this_process_that_pickles_its_calls_reads_into_its_own_array():
    # The slot pickles as empty, and the fetch, in this process, took the first read's path: a fetch_into-only
    # source failed every fetch ("'NoneType' object is not callable"; a dask Client(processes=False) too).
    with _PicklingPool(2) as pool:
        with Prefetcher(_FetchIntoOnly(), executor=pool, shape=(3,), dtype="i8") as pf:
            assert [int(b[0]) for b in pf] == list(range(8))
        with Prefetcher(np.arange(24).reshape(12, 2), executor=pool, capacity=2) as pf:
            assert [int(b[0]) for b in pf] == list(range(0, 24, 2))


def test_16_a_handler_closing_another_prefetcher_inside_the_install_keeps_the_wrapper(own_sigint_handler,
                                                                                        monkeypatch):
    # The lock ordering install and removal is an RLock (a handler on the main thread may close a prefetcher
    # inside it): a handler that closed the last other prefetcher right after the install found nobody asking
    # for the wrapper (the new one had not said so yet) and removed it.
    import signal

    from safeprefetch._runtime import interrupts

    a = Prefetcher(np.zeros((4, 3)), capacity=2)
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: a.close())
    real_install = interrupts.install

    def install_then_handler():
        got = real_install()
        signal.raise_signal(signal.SIGUSR1)  # the handler runs here, on this thread, inside the install's lock
        return got

    try:
        monkeypatch.setattr(interrupts, "install", install_then_handler)
        with Prefetcher(np.zeros((4, 3)), capacity=2):
            monkeypatch.setattr(interrupts, "install", real_install)
            assert a._core.closed
            assert _sigint_deferred_in_a_protected_frame()
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_17_the_shape_caches_take_keywords_as_before():
    from safeprefetch._prefetcher import machine

    assert machine.transitions_for(2, 1, True, True, target=0, run=2) is machine.transitions_for(2, 1, True, True,
                                                                                                  target=0, run=2)
    assert machine.transitions_for.cache_info().currsize >= 1


# -- NpyFiles, write_npy_batches and the demo (the fifth review) ----------------------------------------------

_SHRINK_WHILE_COPIED = r"""
import os, sys, numpy as np
from safeprefetch import NpyFiles, Prefetcher
d = sys.argv[1]
paths = []
for i in range(2):
    p = os.path.join(d, f"b{i}.npy")
    np.save(p, np.asfortranarray(np.full((256, 256), i, np.float32)))
    paths.append(p)
real = np.copyto
def copyto(dst, src, *a, **k):  # the shard rewritten in place (np.save truncates first) while it is copied
    if isinstance(src, np.memmap) and getattr(src, "filename", None) == os.path.abspath(paths[1]):
        os.truncate(paths[1], 128)
    return real(dst, src, *a, **k)
np.copyto = copyto
with Prefetcher(NpyFiles(paths), capacity=2, workers=1, timeout=30) as pf:
    print(len(list(pf)))
"""


def test_18_npy_files_never_maps_a_file_a_writer_may_shrink(tmp_path):
    # A Fortran-order (or v3.0) file was copied from a memory map: shrunk meanwhile, the process died of SIGBUS.
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", _SHRINK_WHILE_COPIED, str(tmp_path)], capture_output=True,
                       text=True, timeout=50)
    assert p.returncode == 0, (p.returncode, p.stderr[-500:])
    assert p.stdout.strip() == "2"


def test_19_npy_files_errors_name_the_file_and_hold_nothing_open(tmp_path):
    import os

    good = write_npy_batches(tmp_path, 1, (4, 4))[0]
    junk, empty, tail, short_f = (tmp_path / n for n in ("junk.npy", "empty.npy", "tail.npy", "short_f.npy"))
    junk.write_bytes(b"not an npy file at all" * 4)
    empty.write_bytes(b"")
    tail.write_bytes(good.read_bytes() + b"\0" * 4000)  # more data than its header declares: not this batch
    np.save(short_f, np.asfortranarray(np.zeros((4, 4), np.float32)))
    short_f.write_bytes(short_f.read_bytes()[:-8])
    src = NpyFiles([good, junk, empty, tail, short_f])
    out = np.empty((4, 4), np.float32)
    src.fetch_into(0, out)
    fds = len(os.listdir("/proc/self/fd"))
    kept = []
    for i, path in enumerate(src.paths[1:], start=1):
        for _ in range(20):
            with pytest.raises(ValueError, match=str(path)) as err:
                src.fetch_into(i, out)
            kept.append(err.value)
    with pytest.raises(ValueError, match="4000 bytes after"):
        src.fetch_into(3, out)
    assert len(os.listdir("/proc/self/fd")) <= fds + 2  # a kept error held its file's descriptor and mapping
    with pytest.raises(ValueError, match=str(junk)):
        src[1]


def test_20_npy_files_refuses_one_path_and_bad_latencies(tmp_path):
    path = write_npy_batches(tmp_path, 1, (2,))[0]
    with pytest.raises(TypeError, match="wrap it in a list"):
        NpyFiles(str(path))  # was 40-odd one-character paths, failing later with IsADirectoryError: '/'
    with pytest.raises(TypeError, match="wrap it in a list"):
        NpyFiles(path)
    for bad in (-1, float("nan"), float("inf"), None):
        with pytest.raises((ValueError, TypeError), match="latency"):
            NpyFiles([path], latency=bad)
    assert NpyFiles([path], latency=np.float32(0.0)).latency == 0.0


def test_21_write_npy_batches_refuses_values_the_dtype_would_change(tmp_path):
    # np.full casts unsafely: 1000 was stored as -24 in int8, 0.7 as 0 in int32, 1e6 as inf in float16.
    for dtype, value in (("i1", 1000), ("i4", 0.7), ("f2", 1e6)):
        with pytest.raises(ValueError, match=f"fill value .*{value!r}.* does not fit dtype"):
            write_npy_batches(tmp_path / dtype, 1, (2,), dtype=dtype, fill=lambda i: value)
    with pytest.raises(ValueError, match=r"fill value np.float64\(2.5\) does not fit dtype int32 .*int32\(2\)"):
        write_npy_batches(tmp_path / "arr", 1, (2,), dtype="i4", fill=lambda i: np.array([1, 2.5]))  # names it
    # Rounding is what floats do (0.1 into float32, the review of the first version of this check), and NaT
    # is a time's NaN: both stored as before.
    for dtype, value in (("f4", 0.1), ("f2", 1 / 3), ("M8[s]", np.datetime64("NaT")), ("m8[s]", np.timedelta64("NaT"))):
        write_npy_batches(tmp_path / "fine", 1, (2,), dtype=dtype, fill=lambda i: value)
    with pytest.raises(ValueError, match="n must be an int >= 0"):
        write_npy_batches(tmp_path, -5, (2,))
    nan = write_npy_batches(tmp_path / "nan", 1, (2,), dtype="f4", fill=lambda i: float("nan"))
    assert np.isnan(np.load(nan[0])).all()
    exact = write_npy_batches(tmp_path / "ok", 2, (3,), dtype="u1", fill=lambda i: np.arange(3) + i)
    assert np.load(exact[1]).tolist() == [1, 2, 3]


def test_22_the_demo_rewrites_a_truncated_shard_and_names_its_own_errors(tmp_path, capsys):
    # make_shards reused any shard whose header matched, a truncated one too; and the CLI blamed "the model".
    from safeprefetch._cli.main import main
    from safeprefetch._harness.demo import DemoConfig, make_shards

    cfg = DemoConfig(batches=3, batch_size=4, features=8)
    paths = make_shards(tmp_path / "d", cfg)
    paths[1].write_bytes(paths[1].read_bytes()[:-16])
    again = make_shards(tmp_path / "d", cfg)
    assert all(np.load(p).shape == (4, 8) for p in again)
    plain = tmp_path / "plainfile"
    plain.write_text("x")
    assert main(["demo", "--small", "--dir", str(plain)]) == 2
    err = capsys.readouterr().err
    assert "error: demo raised" in err and "the model" not in err


def test_23_a_close_never_waits_for_the_wrapper_lock_a_handler_may_be_holding(own_sigint_handler, monkeypatch):
    # drop_sigint waited for the lock while its close held the prefetcher's close lock. A signal handler on the
    # main thread, inside a constructor's install (so holding that lock), closing the same prefetcher waited
    # for the close lock: a deadlock, for ever with close_timeout=inf. A busy lock now hands the decision to
    # the reaper. Forced: the other thread's close reaches the lock while the handler runs inside the install.
    import signal
    import time

    from safeprefetch._prefetcher import lifecycle
    from safeprefetch._runtime import interrupts

    x = Prefetcher(np.zeros((4, 3)), capacity=2, close_timeout=float("inf"))
    reached, done = threading.Event(), threading.Event()
    lock = lifecycle._sigint_lock

    monkeypatch.setattr(lifecycle, "_sigint_lock", _Announcing(lock, reached))  # (where a close waited for it)
    real_wanted = lifecycle.__dict__.get("_wanted")

    def announcing_wanted():  # where it decides without the lock now
        if threading.current_thread() is not threading.main_thread():
            reached.set()
        return real_wanted()

    if real_wanted is not None:
        monkeypatch.setattr(lifecycle, "_wanted", announcing_wanted)
    closer = threading.Thread(target=lambda: (x.close(), done.set()))
    took = []

    def handler(signum, frame):
        t0 = time.monotonic()
        x.close(timeout=10)  # without the fix: waits the whole 10 s for the close lock, then gives up
        took.append(time.monotonic() - t0)

    previous = signal.signal(signal.SIGUSR1, handler)
    real_install = interrupts.install

    def install_with_a_close_racing():
        got = real_install()
        if threading.current_thread() is threading.main_thread() and not closer.is_alive() and not took:
            closer.start()
            assert reached.wait(30)
            signal.raise_signal(signal.SIGUSR1)
        return got

    try:
        monkeypatch.setattr(interrupts, "install", install_with_a_close_racing)
        with Prefetcher(np.zeros((4, 3)), capacity=2):
            monkeypatch.setattr(interrupts, "install", real_install)
            assert done.wait(30) and x._core.closed
            assert took and took[0] < 5, took
            assert _sigint_deferred_in_a_protected_frame()
    finally:
        signal.signal(signal.SIGUSR1, previous)
        closer.join(30)

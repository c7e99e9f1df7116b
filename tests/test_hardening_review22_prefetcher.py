"""The twenty-second hardening round, the Prefetcher as an ML pipeline uses it: each test failed before its fix."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import sys
import threading
import warnings
import weakref

import numpy as np
import pytest

from safeprefetch import OnDemandPrefetcher, Prefetcher

pytestmark = pytest.mark.timeout(120)


# -- 1. a fetch_into that returns before its fetch is done (async def, a future) is refused, never delivered ----


class _AsyncInto:
    """``async def fetch_into``: calling it only makes a coroutine; out is written when (if ever) it is awaited."""

    def __len__(self):
        return 4

    async def fetch_into(self, i, out):
        await asyncio.sleep(0)
        out[...] = i + 1


class _FutureInto:
    """A ``fetch_into`` that hands the read to a thread pool and returns the future: out is written later."""

    def __init__(self, pool, go):
        self.pool, self.go = pool, go

    def __len__(self):
        return 4

    def fetch_into(self, i, out):
        def read():
            self.go.wait(10)
            out[...] = i + 1
        return self.pool.submit(read)


class _GeneratorInto:
    """A ``fetch_into`` written with ``yield`` by mistake: calling it runs none of its body."""

    def __len__(self):
        return 4

    def fetch_into(self, i, out):
        out[...] = i + 1
        yield


class _AsyncResultInto:
    """A ``fetch_into`` that hands the read to a ``multiprocessing`` thread pool: an ``AsyncResult``."""

    def __init__(self, go):
        import multiprocessing.pool

        self.pool, self.go = multiprocessing.pool.ThreadPool(1), go

    def __len__(self):
        return 4

    def fetch_into(self, i, out):
        def read():
            self.go.wait(10)
            out[...] = i + 1
        return self.pool.apply_async(read)

    def close(self):
        self.pool.close()
        self.pool.join()


class _ThreadInto:
    """A ``fetch_into`` that starts a thread to read and returns it."""

    def __init__(self, go):
        self.go = go

    def __len__(self):
        return 4

    def fetch_into(self, i, out):
        def read():
            self.go.wait(10)
            out[...] = i + 1
        t = threading.Thread(target=read, daemon=True)
        t.start()
        return t


def _deferred_source(which, pool, go):
    return [_AsyncInto, lambda: _FutureInto(pool, go), _GeneratorInto, lambda: _AsyncResultInto(go),
            lambda: _ThreadInto(go)][which]()


@pytest.mark.parametrize("which", [0, 1, 2, 3, 4])
def test_a_fetch_into_that_returns_before_its_fetch_is_done_is_refused(which):
    # Before: the coroutine (future, generator) was taken for a status and ignored, so every batch was the slot's
    # zeros (and a future's thread wrote the slot after it was published): [[0, 0, 0]] * 4, silently.
    go = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        source = _deferred_source(which, pool, go)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (a coroutine never awaited warns; it is closed here, unawaited)
            with Prefetcher(source, shape=(3,), dtype=np.int64) as pf:
                with pytest.raises(TypeError, match=r"item 0: fetch_into returned .*not finished"):
                    pf.get()
            with OnDemandPrefetcher(source, shape=(3,), dtype=np.int64, predict=None) as od:
                with pytest.raises(TypeError, match=r"fetch_into returned .*not finished"):
                    od.get(2)
            gc.collect()
        go.set()
        getattr(source, "close", lambda: None)()


def test_a_status_object_is_still_a_status():
    # Guard (passes before and after): what fetch_into's rules call a status stays one.
    class Status:
        def __len__(self):
            return 3

        def fetch_into(self, i, out):
            out[...] = i
            return {"ok": True, "bytes": out.nbytes}

    with Prefetcher(Status(), shape=(2,), dtype=np.int64) as pf:
        assert [b.tolist() for b in pf] == [[0, 0], [1, 1], [2, 2]]


# -- 2. a source error, once raised, is not kept: the caller's frame (its locals) is not held in a cycle --------


class _FailsAt:
    def __init__(self, bad):
        self.bad = bad

    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i == self.bad:
            raise KeyError(i)
        return np.full(4, i)


class _Local:
    """A local of the training loop (a model, a GPU tensor): weakly referenceable, to see when it is freed."""


def _failing_generator(bad):
    for i in range(6):
        if i == bad:
            raise KeyError(i)
        yield np.full(4, i)


def _streaming(bad, kind):
    if kind == "map":
        return Prefetcher(_FailsAt(bad), workers=2)
    if kind == "map, timeout":
        return Prefetcher(_FailsAt(bad), workers=2, timeout=30)
    return Prefetcher(_failing_generator(bad))


def _collected_without_gc(epoch, refs):
    """Run ``epoch`` with the cyclic collector off: its local and its prefetcher (``refs[0]``, weak) must be
    gone once it returns, freed by reference counts alone."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        epoch()
        local, pf = refs[0]
        assert local() is None, "the caller's frame outlived its call (held by the error the prefetcher kept)"
        assert pf() is None
    finally:
        if was:
            gc.enable()


@pytest.mark.parametrize("kind", ["map", "map, timeout", "generator"])
@pytest.mark.parametrize("bad", [0, 3])  # (0: the constructor's own read failed)
def test_a_raised_source_error_does_not_keep_the_callers_frame_alive(bad, kind):
    # Before: the prefetcher kept the error it had raised (in its box; the constructor's read's also in locals
    # of the constructor's frames, and in the list its helper thread filled). The error's traceback holds
    # frames, and each frame keeps its caller's, up to the caller's: a cycle, so the caller's locals (and the
    # prefetcher, its pool and threads, unclosed) lived on after its function returned, until a cyclic
    # collection -- for ever under gc.disable().
    refs = []

    def epoch():
        local = _Local()
        pf = _streaming(bad, kind)
        refs.append((weakref.ref(local), weakref.ref(pf)))
        try:
            for _batch in pf:
                pass
        except KeyError:
            pass

    _collected_without_gc(epoch, refs)


# -- 3. a copy outcome kept across an interrupted call is handed out with the batch's bytes, padding included ---


_PADDED = np.dtype([("label", "i1"), ("weight", "f8")], align=True)  # 7 bytes of padding per record


def _padding(batch):
    return np.frombuffer(batch.tobytes(), np.uint8).reshape(-1, _PADDED.itemsize)[:, 1:8]


def _interrupt_at(code, marker, nbytes):
    """A trace hook raising KeyboardInterrupt (as a Ctrl-C would) at the first line of ``code`` containing
    ``marker``, once, after leaving a freed block of ``nbytes`` bytes of 0xAB where the next allocation of that
    size is likely to land."""
    import inspect

    lines, first = inspect.getsourcelines(code)
    line = first + next(i for i, text in enumerate(lines) if marker in text)
    fired = []

    def local(frame, event, arg):
        if event == "line" and frame.f_lineno == line and not fired:
            fired.append(line)
            junk = np.full(nbytes, 0xAB, np.uint8)
            del junk
            raise KeyboardInterrupt
        return local

    return (lambda frame, event, arg: local if frame.f_code is code.__code__ else None), fired


def test_an_interrupted_copy_prefetched_leaves_no_foreign_bytes_in_the_next_get():
    # Before: the kept outcome was np.array(out), which copies a padded dtype field by field into a fresh
    # allocation: the next get() handed out the padding as whatever that memory held (another object's bytes).
    from safeprefetch._prefetcher.consumer import ConsumerSide

    source = np.zeros((12, 512), _PADDED)
    source["label"], source["weight"] = np.arange(12)[:, None], 0.5
    with Prefetcher(source, capacity=2) as pf:
        for i in range(0, 12, 2):
            out = np.zeros(512, _PADDED)
            hook, fired = _interrupt_at(ConsumerSide.consume, "(entry[0] is not api or (api is COPY",
                                        source[0].nbytes)
            sys.settrace(hook)
            try:
                with pytest.raises(KeyboardInterrupt):
                    pf.copy_prefetched(out)
            finally:
                sys.settrace(None)
            assert fired
            kept = pf.get()  # the interrupted call's batch
            assert np.array_equal(kept, source[i]) and not _padding(kept).any(), i
            assert np.array_equal(pf.get(), source[i + 1])


def test_an_interrupted_on_demand_copy_into_leaves_no_foreign_bytes_in_the_next_get():
    from safeprefetch._prefetcher.ondemand_serve import ServeSide

    source = np.zeros((12, 512), _PADDED)
    source["label"], source["weight"] = np.arange(12)[:, None], 0.5
    with OnDemandPrefetcher(source, predict=None) as od:
        for i in range(6):
            out = np.zeros(512, _PADDED)
            hook, fired = _interrupt_at(ServeSide.consume, "if self.counted is not None:", source[0].nbytes)
            sys.settrace(hook)
            try:
                with pytest.raises(KeyboardInterrupt):
                    od.copy_into(i, out)
            finally:
                sys.settrace(None)
            assert fired
            kept = od.get(i)  # the interrupted call's batch
            assert np.array_equal(kept, source[i]) and not _padding(kept).any(), i


# -- 4. a memory-mapped source goes to a process pool by its file, not by its bytes -----------------------------


class _Measured(concurrent.futures.ProcessPoolExecutor):
    """A process pool that notes how many bytes each task it is given pickles to (what travels to a worker)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.sent = []

    def submit(self, fn, /, *args, **kwargs):
        import pickle

        self.sent.append(len(pickle.dumps((fn, args, kwargs))))
        return super().submit(fn, *args, **kwargs)


def _process_pool(workers):
    import multiprocessing

    return _Measured(workers, mp_context=multiprocessing.get_context("spawn"))  # (no fork of a threaded process)


@pytest.mark.parametrize("how", ["np.load", "np.memmap r+"])
def test_a_memmap_source_is_sent_to_a_process_pool_by_its_file(tmp_path, how):
    # Before: the memmap pickled as its whole data with every fetch: 16 MB sent for each 16 KB batch (a
    # 100 MB file: 0.6 s a batch; a file larger than memory: every fetch tried to hold it all).
    path = tmp_path / "data.npy"
    data = np.arange(1024 * 4096, dtype=np.float32).reshape(1024, 4096)
    np.save(path, data)
    if how == "np.load":
        source = np.load(path, mmap_mode="r")
    else:
        header = path.stat().st_size - data.nbytes
        source = np.memmap(path, dtype=np.float32, mode="r+", offset=header, shape=data.shape)
    with _process_pool(2) as pool:
        with Prefetcher(source, workers=2, executor=pool, shuffle=True, seed=1) as pf:
            got = [(pf.last_index, b) for b in (pf.get() for _ in range(12))]
        assert all(np.array_equal(b, data[i]) for i, b in got)
        assert max(pool.sent) < 64 * 1024, pool.sent  # the file's name, offset, shape and dtype


def test_a_copy_on_write_memmap_still_travels_by_its_bytes(tmp_path):
    # Guard (passes before and after): mode "c" changes live only in this process's pages, not in the file.
    path = tmp_path / "data.npy"
    np.save(path, np.zeros((8, 16), np.float32))
    source = np.load(path, mmap_mode="c")
    source[3] = 7.0
    with _process_pool(1) as pool:
        with Prefetcher(source, executor=pool) as pf:
            batches = list(pf)
    assert np.array_equal(batches[3], np.full(16, 7.0, np.float32)) and not batches[2].any()


@pytest.mark.parametrize("speculated", [False, True])
def test_a_raised_on_demand_error_does_not_keep_the_callers_frame_alive(speculated):
    # Before: the error of a miss (fetched on the caller's own thread, below its frames) was held by locals of the
    # frames serving the request, which its traceback keeps: the caller's frame and its locals lived on after
    # its function returned, until a cyclic collection. (A speculative fetch's error: a guard, its traceback
    # holds a worker's frames.)
    refs = []

    def epoch():
        local = _Local()
        od = OnDemandPrefetcher(_FailsAt(3), predict="sequential" if speculated else None)
        refs.append((weakref.ref(local), weakref.ref(od)))
        try:
            for i in range(6):
                od.get(i)
        except KeyError as e:
            assert e.args == (3,)

    _collected_without_gc(epoch, refs)


# -- 5. thread_safe=False serializes every prefetcher over one source, one that cannot be weakly referenced too --


class _NoWeakrefSource:
    """A source whose objects cannot be weakly referenced (``__slots__`` without ``__weakref__``, as a Cython
    class is), and which records a call made while another is inside it."""

    __slots__ = ("busy", "overlapped", "entered", "release")

    def __init__(self):
        self.busy, self.overlapped = threading.Lock(), []
        self.entered, self.release = threading.Event(), threading.Event()

    def __len__(self):
        return 4

    def __getitem__(self, i):
        if not self.busy.acquire(blocking=False):
            self.overlapped.append(i)
            return np.full(2, i)
        try:
            self.entered.set()
            self.release.wait(30)
            return np.full(2, i)
        finally:
            self.busy.release()


def _in_wait_gate(thread) -> bool:
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == "wait_gate":
            return True
        frame = frame.f_back
    return False


def test_thread_safe_false_serializes_prefetchers_over_a_source_without_weak_references():
    # Before: such a source got a gate per prefetcher, so two prefetchers declared thread_safe=False called it at
    # once (the README: "every prefetcher given that source object with thread_safe=False then takes turns"):
    # batches torn by a reader that is not thread-safe, silently.
    import time

    source = _NoWeakrefSource()
    with pytest.raises(TypeError):
        weakref.ref(source)
    a = Prefetcher(source, thread_safe=False, shape=(2,), dtype=np.int64, name="r22-A")
    try:
        assert source.entered.wait(30)
        b = Prefetcher(source, thread_safe=False, shape=(2,), dtype=np.int64, name="r22-B")
        try:
            worker = next(t for t in threading.enumerate() if t.name.startswith("safeprefetch-r22-B-worker"))
            deadline = time.monotonic() + 30
            while not source.overlapped and not _in_wait_gate(worker) and time.monotonic() < deadline:
                time.sleep(0.001)  # (a bounded poll of observable state)
            assert not source.overlapped, "B called the source while A's call was inside it"
            assert _in_wait_gate(worker)
            source.release.set()
            assert [b.tolist() for b in a] == [[i, i] for i in range(4)]
            assert [x.tolist() for x in b] == [[i, i] for i in range(4)]
            assert not source.overlapped
        finally:
            source.release.set()
            b.close()
    finally:
        source.release.set()
        a.close()


def test_an_abandoned_prefetcher_over_such_a_source_that_refers_back_is_still_collected(baseline):
    # Guard (passes before and after; a version of the fix that kept the source in the gates' table failed it):
    # the gates' table must not root a source, and through it the prefetcher the source refers back to.
    class RefersBack:
        __slots__ = ("pf",)

        def __len__(self):
            return 4

        def __getitem__(self, i):
            return np.full(2, i)

    source = RefersBack()
    pf = Prefetcher(source, thread_safe=False)
    source.pf = pf
    gone = weakref.ref(pf)
    pf.get()
    del pf, source
    gc.collect()
    assert gone() is None

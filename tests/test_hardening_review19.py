"""The nineteenth round (docs/hardening.md): what the eighteenth left, and three adversarial reviews.

The tests of a fix reproduce a finding and failed on the commit before the fix; the others guard what each
fix must keep.
"""

from __future__ import annotations

import gc
import json
import os

import numpy as np
import pytest

from safeprefetch import NpyFiles, Prefetcher, catalog, check

# -- 1. NpyFiles: a .npz, and bytes after the data in any format version --------------------------------------


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc")
def test_npz_is_refused_by_name_and_its_file_closed(tmp_path):
    path = tmp_path / "batch.npz"
    np.savez(path, x=np.zeros(4, np.float32))
    source = NpyFiles([path])
    gc.collect()
    before = _open_fds()
    with pytest.raises(ValueError, match=r"batch\.npz: holds a NpzFile, not one array") as kept:
        source[0]
    gc.collect()
    assert _open_fds() == before  # the error kept (``kept`` holds its traceback) holds no file open
    assert kept.value is not None
    with pytest.raises(ValueError, match=r"batch\.npz"):  # the Prefetcher's first read reports it by name
        with Prefetcher(NpyFiles([path, path]), capacity=2) as pf:
            list(pf)


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_bytes_after_the_data_are_refused_on_both_paths_in_every_version(tmp_path, version):
    data = np.arange(6, dtype=np.float32)
    path = tmp_path / "batch.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array(f, data, version=version)
        f.write(b"\0" * 8)
    source = NpyFiles([path])
    out = np.zeros_like(data)
    with pytest.raises(ValueError, match=r"batch\.npy: 8 bytes after the 24 data bytes"):
        source.fetch_into(0, out)
    with pytest.raises(ValueError, match=r"batch\.npy: 8 bytes after the 24 data bytes"):
        source[0]


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("fortran", [False, True])
def test_whole_files_are_still_read_in_every_version_and_order(tmp_path, version, fortran):
    data = np.arange(12, dtype=np.int32).reshape(3, 4)
    data = np.asfortranarray(data) if fortran else data
    path = tmp_path / "batch.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array(f, data, version=version)
    source = NpyFiles([path])
    out = np.zeros((3, 4), np.int32)
    assert source.fetch_into(0, out) is None
    assert np.array_equal(out, data)
    assert np.array_equal(source[0], data)


# -- 2. --json on an error path: a document saying so, not an empty standard output ---------------------------

_RAISING_BUILD = """
from safeprefetch.model import Model
class Raising(Model):
    def build(self, b):
        raise RuntimeError("broken at build")
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "safeprefetch", *argv], capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("argv, says", [
    (("check", "no_such_model", "--json"), "unknown model 'no_such_model'"),
    (("check", "prefetcher", "--set", "capacity=0", "--json"), "capacity must be at least 1"),
    (("check", "prefetcher", "--json", "--max-states", "0"), "--max-states must be at least 1"),
    (("check", "{model}", "--json"), "raised RuntimeError: broken at build"),
    (("check-code", "no_such_module_here:test", "--json"), "no_such_module_here"),
])
def test_json_error_paths_print_one_error_document(tmp_path, argv, says):
    model = tmp_path / "raising.py"
    model.write_text(_RAISING_BUILD)
    code, out, err = _cli(*(a.replace("{model}", str(model)) for a in argv))
    assert code == 2, err
    document = json.loads(out)  # (one document: json.loads refuses two)
    assert document["exit_code"] == 2 and document["command"] == argv[0]
    assert says in document["error"] and says in err


def test_json_a_command_that_wrote_its_document_adds_no_second_one(tmp_path):
    code, out, err = _cli("check", "one_cond_signal", "--json", "--svg", "/dev/full")
    assert code == 2 and "--svg" in err
    document = json.loads(out)
    assert "error" not in document and document["verdict"] == "deadlock"


# -- 3. play's starvation check: one pass over the path, the same answer as one replay per earlier visit ------


def _per_visit(machine, states, choices):
    """The plain rule ``play`` used: every earlier visit of the last state, latest first, replayed."""
    from safeprefetch._check.replay import trace_of
    from safeprefetch._check.reverify import starving_lasso

    trace = trace_of(machine, states, choices)
    for k in range(len(states) - 2, -1, -1):
        if states[k] == states[-1]:
            message = starving_lasso(machine, trace, k)
            if message is not None:
                return message
    return None


@pytest.mark.parametrize("name, config, walks_starve", [
    ("priority_inversion", {}, True),
    ("priority_inversion", {"policy": "fair"}, False),  # (nobody starves)
    ("reader_preference_rwlock", {}, True),
    ("reader_preference_rwlock", {"fairness": "strong"}, True),
    ("reader_preference_rwlock", {"spurious": "on"}, False),  # (random walks' cycles take a spurious wakeup)
    ("priority_inversion", {"fairness": "strong"}, True),
])
def test_play_starvation_in_one_pass_agrees_with_a_replay_per_visit(name, config, walks_starve):
    import random

    from safeprefetch._check.reverify import latest_starving_visit
    from safeprefetch._tools.play import allowed

    machine = catalog()[name].compile(config)
    found = compared = 0
    for seed in range(30):
        rng = random.Random(seed)
        states, choices = [machine.init], []
        for _ in range(60):
            options = [(c, n) for c, n in allowed(machine, states[-1]) if isinstance(n, tuple)]
            if not options:
                break
            choice, state = rng.choice(options)
            states.append(state)
            choices.append(choice)
            if state in states[:-1]:
                fast = latest_starving_visit(machine, states, choices)
                assert (fast and fast[1]) == _per_visit(machine, states, choices), (seed, choices)
                compared += 1
                found += fast is not None
    assert compared > 50
    assert (found > 0) == walks_starve


# -- 4. fetch_into: a bool, a datetime, a 0-d float or a MaskedArray returned is no status -----------------------


class _Returning:
    """A fetch_into source that returns ``value(i)`` and, unless ``writes``, leaves out as it was."""

    def __init__(self, value, writes=None, n=6):
        self.value, self.writes, self.n = value, writes, n

    def __len__(self):
        return self.n

    def fetch_into(self, i, out):
        if self.writes is not None:
            out[...] = self.writes(i)
        return self.value(i)


def _both_ways(source, shape, dtype):
    """The stream, read by a Prefetcher and by an OnDemandPrefetcher."""
    from safeprefetch import OnDemandPrefetcher

    with Prefetcher(source, capacity=2, workers=1, shape=shape, dtype=dtype) as pf:
        streamed = [b.copy() for b in pf]
    with OnDemandPrefetcher(source, capacity=2, workers=1, predict=None, shape=shape, dtype=dtype) as od:
        asked = [od.get(i) for i in range(len(source))]
    return streamed, asked


@pytest.mark.parametrize("shape, dtype, value", [
    ((), bool, lambda i: i % 3 != 1),  # a label stream of Python bools, `return self.y[i]`
    ((1,), np.float32, lambda i: np.float32(i + 0.5)),  # `return self.labels[i, 0]`
    ((1,), np.float64, lambda i: i + 0.5),  # a Python float
    ((), "M8[s]", lambda i: __import__("datetime").datetime(2024, 1, 1 + i)),
    ((), np.float64, lambda i: __import__("fractions").Fraction(i + 1, 3)),
])
def test_a_batch_returned_by_fetch_into_with_out_left_alone_is_refused(shape, dtype, value):
    # Before: a status, ignored: the slot's old bytes (zeros, or an earlier batch) delivered for every item.
    for how in ("streamed", "asked"):
        with pytest.raises(TypeError, match=r"item 0: fetch_into returned"):
            streamed, asked = _both_ways(_Returning(value), shape, dtype)
            (streamed if how == "streamed" else asked)  # (not reached)


@pytest.mark.parametrize("shape, dtype, value, writes", [
    ((), np.int64, lambda i: i, lambda i: i),  # the label returned and written
    ((), "M8[s]", lambda i: "ok", lambda i: np.datetime64(1_700_000_000 + i, "s")),  # a string: a status
    ((3,), np.float32, lambda i: True, lambda i: i),  # a bool where the batch cannot be one: a status
    ((3,), np.float32, lambda i: np.bool_(True), lambda i: i),
    ((3,), np.float32, lambda i: np.int64(3), lambda i: i),  # a count of values, as a numpy int
    ((3,), np.float32, lambda i: np.array(12), lambda i: i),  # a count of bytes, as a 0-d array
])
def test_statuses_and_whole_counts_still_pass(shape, dtype, value, writes):
    streamed, asked = _both_ways(_Returning(value, writes), shape, dtype)
    expected = [np.full(shape, writes(i), dtype) for i in range(6)]
    for got in (streamed, asked):
        assert all(np.array_equal(g, e) for g, e in zip(got, expected, strict=True))


@pytest.mark.parametrize("labels", [[1, 0, 1, 0, 0, 1], [1, 2, 3, 4, 5, 6]])
def test_a_bool_returned_for_a_0d_batch_is_refused_whatever_the_labels(labels):
    # True, done, after writing out: from outside it may be `return self.y[i]` with out left alone. Judged by
    # out's bytes (the first version of item 4), the refusal came or not depending on the labels (the review
    # of the second commit); refused at once now, whatever they are (README: for a 0-d batch return None).
    with pytest.raises(TypeError, match=r"item 0: fetch_into returned True for a 0-d batch, where a bool may "):
        _both_ways(_Returning(lambda i: True, lambda i: labels[i]), (), np.int64)


def test_a_masked_array_returned_by_fetch_into_is_refused_even_over_out():
    # Before: copied in with its mask dropped (or, over out, accepted): the masked values delivered as data.
    data = lambda i: np.array([i, -999, i], np.int64)  # noqa: E731
    copied = _Returning(lambda i: np.ma.masked_equal(data(i), -999))
    for source in (copied, _Returning(None, data)):
        if source is not copied:  # a masked view of out itself
            source.fetch_into = lambda i, out: (out.__setitem__(..., data(i)), np.ma.masked_equal(out, -999))[1]
        for how in (0, 1):
            with pytest.raises(TypeError, match=r"item 0: fetch_into returned a numpy.ma.MaskedArray: its mask"):
                _both_ways(source, (3,), np.int64)[how]


# -- 5. the constructor's first read is the caller's buffer: copied at once -----------------------------------


class _PerThreadBuffer:
    """Thread-safe: each thread decodes into a buffer of its own, reused across its calls."""

    def __init__(self, n):
        import threading

        self.n, self.local = n, threading.local()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        buf = getattr(self.local, "buf", None)
        if buf is None:
            buf = self.local.buf = np.empty(64, np.int64)
        buf[:] = i
        return buf


def test_the_first_read_is_copied_before_the_caller_reads_the_source_again():
    # Before: kept by reference (thread_safe=True, no executor) until a worker reached position 0; the caller
    # peeking at the source meanwhile refilled its buffer, and batch 0 held item 5. The worker is held at its
    # first fill by a trace hook until the peek is done.
    import threading

    go = threading.Event()

    def hold_workers(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "_fill" and frame.f_code.co_filename.endswith("fetching.py"):
            go.wait(30)

    source = _PerThreadBuffer(8)
    threading.settrace(hold_workers)
    try:
        pf = Prefetcher(source, capacity=2, workers=1)
    finally:
        threading.settrace(None)
    with pf:
        assert int(source[5][0]) == 5  # the caller's peek, on its own thread's buffer
        go.set()
        assert [int(b[0]) for b in pf] == list(range(8))


# -- 6. a worker waiting for a shared source lock is no fetch: close() does not wait for it -------------------


def _waiting_for_the_source_lock(thread) -> bool:
    import sys

    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == "wait_gate":
            return True
        frame = frame.f_back
    return False


@pytest.mark.parametrize("close_timeout", [2.0, None])
def test_close_does_not_wait_for_workers_queued_on_a_source_lock_another_prefetcher_holds(close_timeout):
    # Before: B.close() waited its whole close_timeout for workers that never entered the source (for ever
    # with None), named them "still inside a fetch", and left their threads running.
    import threading
    import warnings

    from _polling import wait_until

    hung, inside = threading.Event(), threading.Event()

    class Dataset:  # not thread-safe: every prefetcher over it takes turns
        def __len__(self):
            return 100

        def __getitem__(self, i):
            if threading.current_thread().name.startswith("safeprefetch-A-"):
                inside.set()
                hung.wait(60)  # A's fetch is stuck (a hung network read)
            return np.full(4, i, np.float32)

    ds = Dataset()
    a = Prefetcher(ds, capacity=2, workers=1, thread_safe=False, shape=(4,), dtype=np.float32, name="A",
                   close_timeout=0.5)
    try:
        assert inside.wait(30)
        b = Prefetcher(ds, capacity=2, workers=2, thread_safe=False, shape=(4,), dtype=np.float32, name="B",
                       close_timeout=close_timeout)
        workers = [t for t in threading.enumerate() if t.name.startswith("safeprefetch-B-worker")]
        assert len(workers) == 2
        assert wait_until(lambda: all(_waiting_for_the_source_lock(t) for t in workers), 30)
        closer = threading.Thread(target=b.close)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            closer.start()
            closer.join(30)  # (a bound for the test, not a sleep: it returns as soon as close does)
        assert not closer.is_alive(), "close() waited for workers that were only waiting for the source lock"
        assert not [w for w in caught if "inside a fetch" in str(w.message)]
        assert not any(t.is_alive() for t in workers)
    finally:
        hung.set()
        a.close()


# -- 7. a batch handed out has the slot's bytes, an aligned struct's padding included ---------------------------


@pytest.mark.parametrize("dtype, holes", [
    (np.float32, False),
    (np.dtype([("a", "i1"), ("b", "f8")]), False),  # packed
    (np.dtype([("a", "i1", (3,)), ("b", "i1")]), False),
    (np.dtype("V8"), False),
    (np.dtype([("a", "i1"), ("b", "f8")], align=True), True),
    (np.dtype((np.dtype([("a", "i1"), ("b", "f8")], align=True), (2,))), True),
    (np.dtype({"names": ["a"], "formats": ["i4"], "offsets": [4], "itemsize": 8}), True),
])
def test_dtypes_with_holes_are_told_apart(dtype, holes):
    from safeprefetch._prefetcher.sources import _has_holes

    assert _has_holes(np.dtype(dtype)) is holes


def test_get_hands_out_the_slots_bytes_with_a_padded_dtype():
    # Before: np.array(view) copied field by field into a fresh allocation: the padding came out as whatever
    # that memory held (40 of 40 batches in the review's run), where the slot holds zeros.
    from safeprefetch import OnDemandPrefetcher

    dtype = np.dtype([("label", "i1"), ("weight", "f8")], align=True)  # 7 bytes of padding per record
    source = np.zeros((40, 256), dtype)
    source["label"], source["weight"] = 1, 0.5

    def padding(batch):
        return np.frombuffer(batch.tobytes(), np.uint8).reshape(-1, 16)[:, 1:8]

    def dirty_the_heap():  # what a fresh batch-sized allocation is likely to be given next
        junk = np.full(source[0].nbytes, 0xAB, np.uint8)
        del junk

    with Prefetcher(source, capacity=2) as pf:
        streamed = []
        for batch in pf:
            streamed.append(batch)
            dirty_the_heap()
    with OnDemandPrefetcher(source, predict=None) as od:
        asked = []
        for i in range(40):
            dirty_the_heap()
            asked.append(od.get(i))
    for batch in streamed + asked:
        assert not padding(batch).any()
        assert batch.flags.writeable and batch.flags.owndata and np.array_equal(batch, source[0])


def test_a_predict_that_returns_none_is_named():
    from safeprefetch import OnDemandPrefetcher, Predictor

    class Forgetful(Predictor):
        def predict(self, depth):
            [self]  # (forgot its return)

    with OnDemandPrefetcher(np.zeros((8, 2)), predict=Forgetful()) as od:
        # Before: TypeError: 'NoneType' object is not iterable, naming neither the predictor nor the mistake.
        with pytest.raises(TypeError, match=r"predictor .*: predict\(\d+\) returned None \(NoneType\); it must "
                                            r"return the indices to fetch next"):
            od.get(0)


# -- 8. OnDemandStats: a request answered by close() or by SourceBusy counts as no request --------------------


class _HeldOnWorkers:
    """A map-style source whose item 1, fetched on a prefetcher's own thread (a speculative fetch), is held
    until ``release`` is set (``entered`` says it is), then returned or, with ``fails``, raises it."""

    def __init__(self, n, fails=None):
        import threading

        self.n, self.fails = n, fails
        self.entered, self.release = threading.Event(), threading.Event()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import threading

        if i == 1 and threading.current_thread().name.startswith("safeprefetch"):
            self.entered.set()
            self.release.wait(30)
            if self.fails is not None:
                raise self.fails
        return np.full(4, i, np.float32)


def test_a_late_hit_cut_short_by_close_used_nothing():
    # Before: late_hits=1, used=1, accuracy 100%, and a request counted, for a caller that got PrefetcherClosed.
    import threading
    import warnings

    from _polling import wait_until

    from safeprefetch import OnDemandPrefetcher, PrefetcherClosed
    from safeprefetch.models import _predictive_protocol as Q

    slow = _HeldOnWorkers(10)  # the speculative fetch of 1 is slow
    od = OnDemandPrefetcher(slow, capacity=4, workers=1, predict="sequential", shape=(4,), dtype=np.float32,
                            close_timeout=0.2)
    try:
        od.get(0)  # predicts 1: the worker starts on it
        assert slow.entered.wait(30)
        outcome = []

        def caller():
            try:
                od.get(1)  # joins the fetch in flight: a late hit, waiting
                outcome.append("got it")
            except PrefetcherClosed:
                outcome.append("closed")

        t = threading.Thread(target=caller)
        t.start()
        core = od._core
        assert wait_until(lambda: core.rt.state[core.i_consumer_pc] == Q.SERVE, 30)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the stuck fetch is named)
            od.close()
        t.join(30)
        assert outcome == ["closed"]
        s = od.stats
        assert (s.requests, s.hits, s.late_hits, s.misses, s.used) == (1, 0, 0, 1, 0)
        assert s.hits + s.late_hits + s.misses == s.requests
    finally:
        slow.release.set()
        od.close()


def test_a_source_busy_timeout_is_no_request_and_no_miss():
    # Before: requests=3, misses=3 for two answered requests.

    from safeprefetch import OnDemandPrefetcher, PrefetchTimeout

    source = _HeldOnWorkers(100)  # a worker's speculative fetch of 1 holds the source's lock
    with OnDemandPrefetcher(source, capacity=4, workers=1, predict="sequential", thread_safe=False,
                            shape=(4,), dtype=np.float32) as od:
        od.get(0)
        assert source.entered.wait(30)
        with pytest.raises(PrefetchTimeout, match="the source is busy"):
            od.get(50, timeout=0.05)
        source.release.set()
        assert od.get(50, timeout=30)[0] == 50
        s = od.stats
        assert (s.requests, s.misses, s.errors) == (2, 2, 0)


def test_an_iterator_whose_first_item_a_refused_constructor_read_says_so():
    # Before: the item was gone with no word; a retry with the same iterator silently started at item 1.
    items = (np.full(1024, i, np.float32) for i in range(5))
    with pytest.raises(ValueError, match="more than memory_budget=1000") as refused:
        Prefetcher(items, memory_budget=1000)
    assert any("the iterator has lost its first item" in note for note in refused.value.__notes__)
    source = np.zeros((4, 1024), np.float32)  # a map-style source loses nothing: no note
    with pytest.raises(ValueError, match="more than memory_budget=1000") as refused:
        Prefetcher(source, memory_budget=1000)
    assert not getattr(refused.value, "__notes__", None)


# -- 9. interleavings: what a blocked thread can still do, subclasses' clocks, code with no file --------------

import queue as _queue_module  # noqa: E402
import threading as _threading  # noqa: E402

from safeprefetch import interleavings  # noqa: E402
from safeprefetch.interleavings import Interrupt  # noqa: E402


def _waiter_woken_for_nothing():
    cond, jobs, started, other = _threading.Condition(), [], _threading.Event(), _threading.Lock()

    def worker():
        with cond:
            started.set()
            if not jobs:  # `if`, not `while`: a spurious wakeup falls through
                cond.wait()
            jobs.pop(0)  # IndexError after a spurious wakeup

    _threading.Thread(target=worker, name="worker", daemon=True).start()
    started.wait()
    with other:  # unrelated work, then the body returns
        pass


def _handler_that_raises_while_blocked():
    q, cond, in_flight, other = _queue_module.Queue(), _threading.Condition(), [], _threading.Lock()

    def worker():
        item = q.get_nowait()
        try:
            with cond:
                cond.wait()  # a daemon: it may wait for good
        except KeyboardInterrupt:
            in_flight.remove(item)  # the Ctrl-C path's bug: ValueError

    q.put("job")
    _threading.Thread(target=worker, name="worker", daemon=True).start()
    with other:
        pass


def _ctrl_c():
    raise KeyboardInterrupt


@pytest.mark.timeout(300)
@pytest.mark.parametrize("body, options, error", [
    (_waiter_woken_for_nothing, {"spurious": "on"}, "IndexError"),
    (_handler_that_raises_while_blocked, {"interrupts": (Interrupt(_ctrl_c, threads="worker", when="blocked"),)},
     "ValueError"),
])
def test_dpor_explores_what_a_blocked_thread_can_still_do(body, options, error):
    # Before: the default search (DPOR) said "ok, exhaustive"; the plain search found each in 2-3 schedules.
    plain = interleavings.check(body, allow_alive=("worker",), reduce="none", **options)
    found = interleavings.check(body, allow_alive=("worker",), **options)
    assert plain.verdict == found.verdict == "uncaught_exception"
    assert error in found.violation.message and error in plain.violation.message


class _JobQueue(_queue_module.Queue):  # an ordinary subclass, made before any check
    pass


class _Slots(_threading.Semaphore):
    pass


@pytest.mark.parametrize("make, wait", [(_JobQueue, lambda q: q.get(timeout=0.2)),
                                        (lambda: _Slots(0), lambda s: s.acquire(timeout=0.2) or 1 / 0)])
def test_a_subclass_made_before_the_check_times_out_in_virtual_time(make, wait):
    # Before: CPython's own get/acquire counted their timeout on the real clock around virtual waits: this
    # timeout never fired ("ok", where a real run raises), and a long one ran virtual time out (a false hang).
    import time as time_module

    def late_producer():
        box = make()
        t = _threading.Thread(target=wait, args=(box,), name="consumer")
        t.start()
        time_module.sleep(0.5)
        box.put("late") if hasattr(box, "put") else box.release()
        t.join()

    def patient():
        box = _JobQueue()

        def consumer():
            with contextlib.suppress(_queue_module.Empty):
                box.get(timeout=5.0)

        t = _threading.Thread(target=consumer)
        t.start()
        t.join()

    import contextlib

    assert interleavings.check(late_producer).verdict == "uncaught_exception"
    assert interleavings.check(patient).verdict == "ok"


_RACY = '''
import threading
def racy():
    st = {"n": 0}
    def w():
        st["n"] += 1
    ts = [threading.Thread(target=w) for _ in range(2)]
    for t in ts: t.start()
    for t in ts: t.join()
    assert st["n"] == 2, st["n"]
'''


def test_lines_mode_stops_in_code_with_no_file():
    # Before: `python -c`, the REPL, exec'd code and doctests (file names in <...>) had no line points: a lost
    # update there was "ok, exhaustive".
    namespace: dict = {}
    exec(compile(_RACY, "<string>", "exec"), namespace)
    assert interleavings.check(namespace["racy"], lines=True).verdict == "assertion"


def test_lines_mode_leaves_namedtuples_and_our_own_generated_code_alone():
    import collections
    import dataclasses

    Pair = collections.namedtuple("Pair", "a b")

    @dataclasses.dataclass
    class Box:
        x: int

    def body():
        got = []
        t = _threading.Thread(target=lambda: got.append((Pair(1, 2), Box(3))))
        t.start()
        t.join()
        assert got[0][0].b == 2 and got[0][1].x == 3

    result = interleavings.check(body, lines=True)
    assert result.verdict == "ok" and result.exhaustive


def test_an_allowed_daemon_with_a_timed_loop_is_no_hang_once_the_body_returns():
    # Before: virtual time went on for the allowed thread alone until time_limit: "hang" of a correct body.
    def heartbeat_body():
        stop = _threading.Event()

        def heartbeat():
            while not stop.wait(1.0):
                pass

        _threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()

    def poller_raising_late():  # what the allowed thread does before the body returns still counts
        def poll():
            raise ValueError("poller broke")

        t = _threading.Thread(target=poll, name="poller", daemon=True)
        t.start()
        t.join()

    assert interleavings.check(heartbeat_body, allow_alive=("heartbeat",)).verdict == "ok"
    assert interleavings.check(poller_raising_late, allow_alive=("poller",)).verdict == "uncaught_exception"


def test_allow_alive_takes_a_users_own_name_that_ends_in_a_number():
    def body():
        stop = _threading.Event()
        for i in (1, 2):
            _threading.Thread(target=stop.wait, name=f"conn#{i}", daemon=True).start()

    assert interleavings.check(body, allow_alive=("conn#1", "conn#2")).verdict == "ok"  # before: leaked_thread
    assert interleavings.check(body, allow_alive=("conn",)).verdict == "ok"
    assert interleavings.check(body, allow_alive=("conn#1",)).verdict == "leaked_thread"


@pytest.mark.parametrize("make", [
    lambda: (lambda: _async_body()),
    lambda: (lambda: _generator_body()),
])
def test_a_body_that_returns_a_coroutine_or_a_generator_is_refused(make):
    # Before: nothing ran, "ok, exhaustive" of an `assert False`.
    with pytest.raises(TypeError, match=r"the body returned a (coroutine|generator) .*its code never runs"):
        interleavings.check(make())


async def _async_body():
    assert False


def _generator_body():
    assert False
    yield


_LAZY = {"instance": None}


def _lazy_singleton_body():
    def get():
        if _LAZY["instance"] is None:  # check-then-act, no lock
            _LAZY["instance"] = object()
        return _LAZY["instance"]

    got = []
    ts = [_threading.Thread(target=lambda: got.append(get())) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got[0] is got[1]


def test_a_first_run_that_differs_from_the_second_is_warned_of():
    # Before: the uncounted warm-up built the singleton, and its race was "ok, bound covered", silently.
    _LAZY["instance"] = None
    with pytest.warns(interleavings.InterleavingWarning, match="the first run of the body took other steps"):
        interleavings.check(_lazy_singleton_body, lines=True, preemption_bound=1)
    import warnings

    with warnings.catch_warnings():  # a body with no such state: no warning
        warnings.simplefilter("error", interleavings.InterleavingWarning)
        interleavings.check(_waiter_woken_for_nothing, allow_alive=("worker",))


_PYTEST_FILE = '''
import threading
import pytest
from safeprefetch import interleavings


class Account:
    def __init__(self):
        self.lock = threading.Lock()


@pytest.fixture
def accounts():
    return Account(), Account()


@interleavings.test()
def test_fixture_with_real_locks(accounts):
    pass


@interleavings.test()
def test_skips():
    pytest.importorskip("no_such_module_for_this_test")


@interleavings.test()
def test_imports_a_sibling():
    from sibling_helper import VALUE
    assert VALUE == 7
'''


def test_pytest_skips_fixtures_with_real_locks_and_sibling_imports(tmp_path):
    import subprocess
    import sys

    (tmp_path / "test_generated.py").write_text(_PYTEST_FILE)
    (tmp_path / "sibling_helper.py").write_text("VALUE = 7\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
                           str(tmp_path / "test_generated.py")], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    out = done.stdout
    # Before: the fixture's real locks passed (a lock-order inversion over them was "ok"); a skip failed.
    assert "FAILED test_generated.py::test_fixture_with_real_locks - TypeError" in out, out[-2000:]
    assert "argument 0[0].lock holds a real lock" in out or "accounts[0].lock holds a real lock" in out, out
    assert "SKIPPED" in out and "no_such_module_for_this_test" in out
    assert "PASSED test_generated.py::test_imports_a_sibling" in out
    # check-code keeps the file's folder on sys.path for the check too (before: ModuleNotFoundError, exit 1).
    code = subprocess.run([sys.executable, "-m", "safeprefetch", "check-code",
                           f"{tmp_path / 'test_generated.py'}::test_imports_a_sibling"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path / "..")
    assert code.returncode == 0, code.stdout + code.stderr


# -- 10. the checker: preempt's proof, strict priority's events, idle threads, generated names, cluster options -


def test_preempt_covering_every_state_still_checks_for_starvation():
    # Before: "ok, exhaustive", exit 0, of priority_inversion, whose full check finds starvation.
    from safeprefetch._check.strategies import search

    machine = catalog()["priority_inversion"].compile({})
    full = check(machine)
    found = search(machine, "preempt", preemptions=50)
    assert full.verdict == found.verdict == "starvation" and found.exhaustive
    assert "starving fair cycle" in found.note


def _starving_low(kind, branch, label="fetch"):
    from safeprefetch.model import Model

    class Starving(Model):
        name = "starving_low"
        settings = {"policy": "priority"}

        def build(self, m):
            m.shared(n=0)
            hi = m.program("high")
            hi.step("spin", lambda s, me: None, next="spin")  # always ready
            lo = m.program("low")
            if kind == "external":
                lo.external(label, "fetch", branches=("ok", branch), next=label)
            else:
                lo.step(label, branches=("ok", branch), next=label)
            m.thread("hi", hi)
            m.thread("lo", lo)
            m.priority("hi", 1)
            m.progress(label)

    return Starving


@pytest.mark.parametrize("kind, branch, label", [
    ("external", "timed out", "fetch"),  # before: "ok" (the branch taken for a primitive's timeout)
    ("external", "timeout", "fetch"),
    ("step", "timed out", "fetch"),
    ("step", "ok again", "report (not started)"),  # before: "ok" (the label read as a thread not started)
])
def test_a_users_names_do_not_hide_strict_prioritys_victim(kind, branch, label):
    result = check(_starving_low(kind, branch, label))
    assert result.verdict == "starvation" and result.exhaustive
    assert "low never makes progress" in result.violation.message or "lo never" in result.violation.message


def _slug_clash(n):
    from safeprefetch.model import DONE, Model, violate

    class SlugClash(Model):
        name = "slug_clash"

        def build(self, m):
            m.shared(n=0, x=0)

            def put(s, me):
                s.x = 2
                violate("overflow", "put item found the buffer full")

            def harmless(s, me):
                s.x = 1

            def count(s, me):
                s.n += 1

            p = m.program("worker")
            p.step("begin", lambda s, me: None, next="put-item")
            p.step("put item", put, next=DONE)  # declared first: its generated functions were replaced
            p.step("put-item", harmless, next=lambda s, me: "count" if s.n == 0 else DONE, to=["count", DONE])
            p.step("count", count, next=lambda s, me: "count" if s.n < n else "put item", to=["count", "put item"])
            m.thread("w", p)
            m.invariant("x and n stay in range", lambda s: 0 <= s.x <= 2 and s.n >= 0)

    return SlugClash


def test_two_labels_with_one_slug_get_functions_of_their_own():
    # Before: the generated engine ran "put-item"'s code for "put item": "ok" where the model overflows.
    from safeprefetch._dsl.codegen import compile_transitions

    model = _slug_clash(20)
    plain = check(model, engine="plain", reduce="none")
    generated = check(model, engine="generated", reduce="none")
    assert plain.verdict == generated.verdict == "overflow"
    assert plain.states == generated.states and len(plain.trace) == len(generated.trace)
    source = compile_transitions(model.compile({}), model).source
    assert "def t0_put_item_0(" in source and "def t0_put_item_2_0(" in source


@pytest.mark.parametrize("extra", [["--cluster", "local:1", "--engine", "compiled"],
                                   ["--cluster", "local:1", "--swarm", "2", "--budget", "3", "--store", "bitstate"],
                                   ["--cluster", "local:1", "--swarm", "2", "--budget", "3", "--engine", "generated"]])
def test_cluster_and_swarm_refuse_the_options_they_would_not_use(extra):
    code, out, err = _cli("check", "one_cond_signal", *extra)  # before: accepted, and ignored
    assert code == 2 and "error:" in err and out == ""


# -- 11. the review of this round's first commits: what the fixes above broke or missed --------------------------


def test_a_resumed_late_hit_whose_fetch_fails_raises_the_sources_error_once():
    # Before: the resumed call asked again (a miss, a demand fetch): the source's error swallowed, one request
    # counted as a late hit and a miss.

    from safeprefetch import OnDemandPrefetcher, PrefetchTimeout

    failing = _HeldOnWorkers(10, fails=OSError("disk error on 1"))
    with OnDemandPrefetcher(failing, capacity=4, workers=1, predict="sequential", shape=(4,),
                            dtype=np.float32) as od:
        od.get(0)
        assert failing.entered.wait(30)
        with pytest.raises(PrefetchTimeout):
            od.get(1, timeout=0.05)  # joins the fetch in flight; cut short
        failing.release.set()
        with pytest.raises(OSError, match="disk error on 1"):
            od.get(1, timeout=30)  # resumes the wait: the fetch failed
        s = od.stats
        assert (s.requests, s.late_hits, s.misses, s.errors) == (2, 1, 1, 1)
        assert s.hits + s.late_hits + s.misses == s.requests
        assert not od._core.source_ref().errors


_REAL_JOBS = _queue_module.Queue()  # made at import: real, as a module-level work queue is
_REAL_SLOTS = _threading.Semaphore(0)


@pytest.mark.parametrize("wait", [lambda: _REAL_JOBS.get(timeout=0.05), lambda: _REAL_SLOTS.acquire(timeout=0.05)])
def test_a_real_queue_made_before_the_check_still_times_out_in_real_time(wait):
    # Before (with item 14's first version): the deadline counted in virtual time on a real wait never came,
    # and the check died with SchedulerStuck.
    def body():
        with contextlib.suppress(_queue_module.Empty):
            wait()

    import contextlib

    result = interleavings.check(body, wall_timeout=20)
    assert result.verdict == "ok" and result.exhaustive


def test_a_non_daemon_allowed_thread_still_runs_its_timed_work_after_the_body():
    # Item 16 stops virtual time after the body only when daemons alone are left: a non-daemon thread keeps a
    # process alive, and its failure after a sleep is found (before the fix of the fix: "ok").
    import time as time_module

    def body():
        def flusher():
            time_module.sleep(0.5)
            raise RuntimeError("flush failed after the body returned")

        _threading.Thread(target=flusher, name="flusher").start()

    result = interleavings.check(body, allow_alive=("flusher",))
    assert result.verdict == "uncaught_exception" and "flush failed" in result.violation.message


def test_lines_mode_takes_no_point_inside_a_queued_items_repr():
    # The scheduler describes a queue's items with their repr, on the controlled thread; a dataclass's
    # generated __repr__ (code with no file, in the user's module) got a line point there: a false deadlock.
    import dataclasses

    @dataclasses.dataclass
    class Job:
        n: int

    def body():
        q = _queue_module.Queue()
        t = _threading.Thread(target=lambda: q.put(Job(1)))
        t.start()
        assert q.get().n == 1
        t.join()

    result = interleavings.check(body, lines=True, preemption_bound=1)
    assert result.verdict == "ok" and (result.exhaustive or result.bound_covered)


_FIXTURES_FILE = '''
import dataclasses
import threading
from unittest import mock
import queue
import pytest
from safeprefetch import interleavings
import json as a_module_that_is_data


@pytest.fixture
def module():
    return a_module_that_is_data


@pytest.fixture
def mocked():
    return mock.MagicMock(spec=queue.Queue)


@dataclasses.dataclass(slots=True)
class Account:
    lock: threading.Lock


@pytest.fixture
def slotted():
    return Account(threading.Lock())


@interleavings.test()
def test_module_and_mock(module, mocked, tmp_path, monkeypatch, capsys, request):
    pass


@interleavings.test()
def test_slotted(slotted):
    pass
'''


def test_fixture_refusal_ignores_modules_and_mocks_and_sees_slots(tmp_path):
    import subprocess
    import sys

    (tmp_path / "test_fixtures.py").write_text(_FIXTURES_FILE)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
                           str(tmp_path / "test_fixtures.py")], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    out = done.stdout
    assert "PASSED test_fixtures.py::test_module_and_mock" in out, out[-3000:]  # before: refused, both
    assert "FAILED test_fixtures.py::test_slotted - TypeError" in out and "slotted.lock holds a real lock" in out


# -- 12. the checker's inputs: a priority level, a bitstate seed, a step's own starvation -----------------------


@pytest.mark.parametrize("level", [float("nan"), "high", True, float("inf")])
def test_a_priority_level_must_be_a_finite_number(level):
    # Before: NaN compared false with every level, and the starving thread read "ok"; a string failed inside
    # the search with an unrelated TypeError.
    from safeprefetch.model import ModelError

    model = _starving_low("step", "ok again")
    original = model.build

    def build(self, m):
        original(self, m)
        m.priority("hi", level)

    model.build = build
    with pytest.raises(ModelError, match=r"the priority of thread 'hi' must be a finite number"):
        check(model)


def test_the_bitstate_seed_reaches_the_hash_functions():
    # Before: --seed was refused with --store bitstate and check() took none: the docs' second run with
    # another seed could not be made.
    machine = catalog()["one_cond_signal"].compile({})
    runs = [check(machine, store="bitstate", seed=seed) for seed in (0, 1, 2)]
    assert all(r.verdict == "deadlock" for r in runs)
    code, out, err = _cli("check", "one_cond_signal", "--store", "bitstate", "--seed", "7")
    assert code == 1, err
    from safeprefetch.model import ModelError

    with pytest.raises(ModelError, match="seed picks the bitstate store's hash functions"):
        check(machine, seed=1)


_BOUNDED_WAIT = '''
from safeprefetch.model import DONE, Model, violate


class BoundedWait(Model):
    name = "bounded_wait"
    expected = "starvation"

    def build(self, m):
        m.shared(passes=0)
        m.mutex("lock")

        def passed_over(s, me):
            s.passes += 1
            if s.passes >= 2:
                violate("starvation", "the waiter was passed over twice")

        w = m.program("waiter")
        w.try_acquire("try", "lock", next="got it", busy="passed over")
        w.step("passed over", passed_over, next="try")
        w.release("got it", "lock", next=DONE)
        g = m.program("greedy", left=2)

        def use(s, me):
            me.left -= 1

        g.acquire("take", "lock", next="use")
        g.step("use", use, next="give")
        g.release("give", "lock", next=lambda s, me: "take" if me.left else DONE, to=["take", DONE])
        m.thread("waiter", w)
        m.thread("greedy", g)
'''


def test_a_steps_own_starvation_report_replays(tmp_path):
    # Before: replay refused check --json's own output: "a starvation counterexample needs its cycle_start".
    model = tmp_path / "bounded_wait.py"
    model.write_text(_BOUNDED_WAIT)
    code, out, err = _cli("check", str(model), "--json")
    assert code == 1 and json.loads(out)["verdict"] == "starvation" and json.loads(out)["cycle_start"] is None
    trace = tmp_path / "trace.json"
    trace.write_text(out)
    code, out, err = _cli("replay", str(model), str(trace))
    assert code == 1, err
    assert "the waiter was passed over twice" in out


@pytest.mark.parametrize("argv, says", [
    (("check", "one_cond_signal", "--json", "--strategy", "bogus"), "argument --strategy: invalid choice"),
    (("check", "one_cond_signal", "--json", "--budget", "x"), "argument --budget: invalid int value"),
])
def test_json_a_refused_command_line_prints_its_error_document(argv, says):
    # The review of the second commit: item 2 missed the parser's own errors (no document, exit 2).
    code, out, err = _cli(*argv)
    assert code == 2 and says in err
    document = json.loads(out)
    assert document["exit_code"] == 2 and says in document["error"] and document["command"] is None


_CONN_IDS = iter(range(1, 1_000_000))


def _conn_named_per_run():
    done = []
    t = _threading.Thread(target=lambda: done.append(1), name=f"conn-{next(_CONN_IDS)}")
    t.start()
    t.join()


def test_the_warm_up_comparison_ignores_names_that_change_per_run():
    # The review of the second commit: labels carry thread names; a body naming its threads from a per-run
    # counter got the lazy-initialization warning though both runs did the same work.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", interleavings.InterleavingWarning)
        result = interleavings.check(_conn_named_per_run)
    assert result.verdict == "ok" and result.exhaustive


def test_lines_mode_runs_code_compiled_with_an_empty_file_name():
    # The review of the second commit: the tracer indexed filename[0] (IndexError in the body).
    namespace: dict = {}
    exec(compile("def body():\n    x = [1]\n    x.append(2)\n    assert x == [1, 2]\n", "", "exec"), namespace)
    result = interleavings.check(namespace["body"], lines=True)
    assert result.verdict == "ok" and result.exhaustive


def _work_then_a_lazy_result():
    results, lock = [], _threading.Lock()

    def worker(i):
        with lock:
            results.append(i)

    ts = [_threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(results) == [0, 1]
    return (r * 2 for r in results)


def test_a_body_that_did_its_work_may_return_a_generator():
    # The review of the second commit: item 20 refused any generator returned, after all the work too.
    result = interleavings.check(_work_then_a_lazy_result)
    assert result.verdict == "ok" and result.exhaustive

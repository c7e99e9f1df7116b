"""The twenty-first hardening round (docs/hardening.md, "A twenty-first round"): each test failed before its fix."""

from __future__ import annotations

import sys
import threading

import pytest

pytestmark = pytest.mark.timeout(120)

_BOUNDARY = '''
import threading

lock = threading.Lock()
log = []


class Item:
    def __init__(self, x):
        self.x = x


def with_len(xs):
    with lock:
        return len(xs)


def with_list(xs):
    with lock:
        return list(xs)


def try_item(x):
    try:
        return Item(x)
    finally:
        log.append("finally")


def in_thread(xs):
    t = threading.Thread(target=with_list, args=(xs,), name="boundary-thread")
    t.start()
    t.join()
'''


@pytest.fixture
def boundary(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "r21_boundary.py").write_text(_BOUNDARY)
    import importlib

    import r21_boundary

    yield importlib.reload(r21_boundary)


def _sweep(m, fn, arg, threads=False):
    """Every point of ``fn(arg)`` interrupted once; returns the boundary points and whether any left the lock held."""
    from safeprefetch.lowlevel import raise_keyboard_interrupt, record_points, run_with_injection

    files = [m.__file__]
    found, leaked = [], []
    for p in record_points(lambda: fn(arg), files, threads=threads):
        m.log.clear()
        out = run_with_injection(lambda: fn(arg), p, raise_keyboard_interrupt, files, threads=threads)
        assert out.fired, p
        if m.lock.locked():
            m.lock.release()
            leaked.append(str(p))
        if p.boundary:
            found.append(p)
            assert fn is not m.try_item or m.log == ["finally"], p
    return found, leaked


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.11 has no sys.monitoring: a C type's call sends no "
                    "profile event there, and its boundary point is raised at the next instruction (inject.py)")
@pytest.mark.parametrize("name", ["with_len", "with_list", "try_item"])
def test_from_3_12_an_interrupt_at_the_end_of_a_with_or_try_body_runs_its_exit(boundary, name):
    # 3.12 and 3.13 raised every boundary point at the trace hook's next event, past the with's exit: a correct
    # ``with lock: return len(xs)`` was reported as leaking its lock (and ``try: return Item(x)`` skipped its
    # finally). sys.monitoring's C_RETURN is the end of the call, where the real check raises.
    found, leaked = _sweep(boundary, getattr(boundary, name), [1, 2])
    assert len(found) == 1 and not leaked


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.11 has no sys.monitoring (inject.py)")
def test_a_boundary_point_in_a_thread_the_action_started_runs_its_exit(boundary):
    from safeprefetch.lowlevel import raise_keyboard_interrupt, record_points, run_with_injection

    files = [boundary.__file__]
    points = [p for p in record_points(lambda: boundary.in_thread([1]), files, threads=True) if p.boundary]
    assert [p.function for p in points] == ["with_list"]
    errors = []
    hook = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_type)
    try:
        out = run_with_injection(lambda: boundary.in_thread([1]), points[0], raise_keyboard_interrupt, files,
                                 threads=True)
    finally:
        threading.excepthook = hook
    assert out.fired and errors == [KeyboardInterrupt] and not boundary.lock.locked()


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12's")
def test_the_injection_takes_a_free_monitoring_id_and_gives_it_back(boundary):
    mon = sys.monitoring
    held = [i for i in (3, 4) if mon.get_tool(i) is None]
    for i in held[:1]:
        mon.use_tool_id(i, "someone else's coverage tool")
    try:
        found, leaked = _sweep(boundary, boundary.with_list, [1])
        assert len(found) == 1 and not leaked
        assert [mon.get_tool(i) for i in held[:1]] == ["someone else's coverage tool"]
    finally:
        for i in held[:1]:
            mon.free_tool_id(i)
    assert [mon.get_tool(i) for i in range(6)] == [None if i in held else mon.get_tool(i) for i in range(6)]


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12's")
def test_with_every_monitoring_id_taken_the_injection_still_runs(boundary):
    # Falls back to the trace hook's next event (the point is still performed, past the exit).
    mon = sys.monitoring
    taken = [i for i in range(6) if mon.get_tool(i) is None]
    for i in taken:
        mon.use_tool_id(i, "busy")
    try:
        from safeprefetch.lowlevel import raise_keyboard_interrupt, record_points, run_with_injection

        files = [boundary.__file__]
        points = [p for p in record_points(lambda: boundary.with_list([1]), files) if p.boundary]
        out = run_with_injection(lambda: boundary.with_list([1]), points[0], raise_keyboard_interrupt, files)
        assert out.fired and isinstance(out.result, KeyboardInterrupt)
        assert all(mon.get_tool(i) == "busy" for i in taken)
    finally:
        if boundary.lock.locked():
            boundary.lock.release()
        for i in taken:
            mon.free_tool_id(i)


_LOOP_IN_WITH = '''
import threading

lock = threading.Lock()


def spin_in_with(limit):
    n = 0
    with lock:
        while n < limit:  # no call in the body: the back-edge is the loop's only check
            n += 1
    return n
'''


def test_a_back_edge_is_injected_where_the_interpreter_looks_its_handler_up(tmp_path, monkeypatch):
    # 3.12 leaves the jump closing ``while n < limit:`` out of the exception table but looks the handler up
    # at the code unit before the jump's target, inside the with: a real Ctrl-C there runs the exit. The
    # injector raised at the jump's own event and reported the lock leaked (a false alarm on 3.12.1). On 3.13
    # the lookup is at the jump, and the leak is real (python/cpython#130279): both tools say so there.
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "r21_loop.py").write_text(_LOOP_IN_WITH)
    import importlib

    import r21_loop

    m = importlib.reload(r21_loop)
    from safeprefetch.lowlevel import escaping_back_edges, raise_keyboard_interrupt, record_points, run_with_injection

    files = [m.__file__]
    points = [p for p in record_points(lambda: m.spin_in_with(3), files) if p.kind == "loop"]
    assert points, "the loop's back-edge is a point on every version"
    leaked = []
    for p in points:
        out = run_with_injection(lambda: m.spin_in_with(3), p, raise_keyboard_interrupt, files)
        assert out.fired and isinstance(out.result, KeyboardInterrupt), p
        if m.lock.locked():
            m.lock.release()
            leaked.append(p.line)
    assert bool(leaked) == bool(escaping_back_edges(m.spin_in_with)) == (sys.version_info >= (3, 13))


# -- fetch_into: a view of part of out, and a failure status, delivered an earlier batch ---------------------------

import numpy as np  # noqa: E402
from collections import deque  # noqa: E402

from safeprefetch import OnDemandPrefetcher, Prefetcher  # noqa: E402


class _ShortReads:
    """Odd items are short records: two of the four rows read; ``returns(out, n)`` says what the read returns."""

    def __init__(self, returns):
        self.returns = returns

    def __len__(self):
        return 4

    def fetch_into(self, i, out):
        n = 2 if i % 2 else 4
        out[:n] = i
        return self.returns(out, n)


@pytest.mark.parametrize("returns", [
    lambda out, n: out[:n], lambda out, n: memoryview(out)[:n], lambda out, n: out[:n - 2] if n == 2 else out,
    lambda out, n: out.reshape(-1)[: n * 3]], ids=["out[:n]", "memoryview(out)[:n]", "out[:0]", "flat view"])
def test_a_fetch_into_returning_part_of_out_is_refused_not_delivered_with_an_earlier_batchs_rows(returns):
    # Before: item 1 came out as [1, 1, 0, 0]: its last two rows were item 0's.
    with Prefetcher(_ShortReads(returns), shape=(4, 3), dtype=np.int64, timeout=30) as pf:
        it = iter(pf)
        assert next(it).tolist() == [[0] * 3] * 4
        with pytest.raises(TypeError, match=r"item 1: fetch_into returned a view of part of out \((48|0) of its "
                                            r"96 bytes\)"):
            next(it)


@pytest.mark.parametrize("returns", [
    lambda out, n: out, lambda out, n: memoryview(out), lambda out, n: out.reshape(-1), lambda out, n: out.T,
    lambda out, n: out.view(np.uint8), lambda out, n: np.empty(0)], ids=["out", "memoryview", "flat", "transposed",
                                                                        "bytes view", "an empty array of its own"])
def test_a_fetch_into_returning_the_whole_of_out_or_an_empty_array_of_its_own_is_fine(returns):
    class Whole(_ShortReads):
        def fetch_into(self, i, out):
            out[...] = i
            return self.returns(out, 4)

    with Prefetcher(Whole(returns), shape=(4, 3), dtype=np.int64, timeout=30) as pf:
        assert [b[:, 0].tolist() for b in pf] == [[i] * 4 for i in range(4)]


class _Video:
    """A reader in OpenCV's way: frames 3 and 4 cannot be read, and it says so with its return value."""

    def __init__(self, returns):
        self.returns = returns

    def __len__(self):
        return 6

    def fetch_into(self, i, out):
        ok = i not in (3, 4)
        if ok:
            out[...] = i
        return self.returns(ok, out)


@pytest.mark.parametrize("returns", [lambda ok, out: ok, lambda ok, out: (ok, out), lambda ok, out: [ok, out],
                                     lambda ok, out: np.bool_(ok), lambda ok, out: np.array(ok)],
                         ids=["ok", "(ok, out)", "[ok, out]", "numpy bool", "0-d bool array"])
def test_a_fetch_into_returning_false_is_a_failure_not_the_earlier_batch_again(returns):
    # Before: items 3 and 4 came out as item 2 again, silently.
    with Prefetcher(_Video(returns), shape=(2,), dtype=np.uint8, timeout=30) as pf:
        it = iter(pf)
        assert [next(it).tolist() for _ in range(3)] == [[0, 0], [1, 1], [2, 2]]
        failed = r"item 3: fetch_into returned ((np\.)?False_?|\(False, \.\.\.\)): a failure"
        with pytest.raises(TypeError, match=failed):
            next(it)


def test_after_true_what_a_read_returns_is_judged_as_if_returned_alone():
    class NewArray:  # ``ok, image = cap.read()``: a new array, out left as it was; copied in
        def __len__(self):
            return 3

        def fetch_into(self, i, out):
            return True, np.full(2, i, np.uint8)

    class Short(_Video):
        def fetch_into(self, i, out):
            out[:1] = i
            return True, out[:1]

    with Prefetcher(NewArray(), shape=(2,), dtype=np.uint8, timeout=30) as pf:
        assert [b.tolist() for b in pf] == [[0, 0], [1, 1], [2, 2]]
    with Prefetcher(Short(None), shape=(2,), dtype=np.uint8, timeout=30) as pf:
        with pytest.raises(TypeError, match=r"item 0: fetch_into returned a view of part of out"):
            next(iter(pf))


def test_an_on_demand_fetch_into_returning_part_of_out_is_refused_too():
    with OnDemandPrefetcher(_ShortReads(lambda out, n: out[:n]), shape=(4, 3), dtype=np.int64, timeout=30) as od:
        assert od[0].tolist() == [[0] * 3] * 4
        with pytest.raises(TypeError, match=r"fetch_into returned a view of part of out"):
            od[1]


# -- autotune's resize log is bounded -----------------------------------------------------------------------------


class _Counting:
    def __len__(self):
        return 40

    def fetch_into(self, i, out):
        out[...] = i


def test_the_autotune_resize_log_keeps_the_latest_resizes_and_the_stats_count_them_all(monkeypatch):
    # ``capacity_history`` kept every resize for the prefetcher's life: a settled autotune still resizes by one
    # every SHRINK_WINDOW_MAX takes, so a months-long run grew it without bound ("cannot grow without bound").
    from _polling import wait_until

    from safeprefetch._prefetcher import policy

    monkeypatch.setattr(policy, "RESIZE_RECORDS", 2, raising=False)
    monkeypatch.setattr(policy, "SHRINK_WINDOW", 1)  # a take that finds two batches ready shrinks by one
    monkeypatch.setattr(policy, "RUN_BUDGET", 0.0)  # one batch per take
    out = np.empty((4,), np.int64)
    with Prefetcher(_Counting(), capacity=6, workers=1, shape=(4,), dtype=np.int64, autotune=True,
                    max_capacity=6, timeout=30) as pf:
        core = pf._core
        for n in range(5):  # each take finds the target's batches ready: five shrinks, 6 -> 1
            target = pf.capacity
            assert wait_until(lambda: core.ready_now() >= target, 20)
            assert pf.copy_prefetched(out) and out[0] == n
        history, stats = pf.capacity_history, pf.stats
        assert [b.tolist() for b in pf] == [[i] * 4 for i in range(5, 40)]
    assert stats.capacity_changes == 5 and [c for _t, _d, c in history] == [2, 1]


# -- the fresh-eyes review of the round's first commits --------------------------------------------------------

_CALLS = '''
import threading

lock = threading.Lock()
done = []


def key(x):
    return x


def with_sorted(xs):
    with lock:
        return sorted(xs, key=key)


def with_len(xs):
    with lock:
        return len(xs)


def twice():
    done.append(with_sorted([3]))     # key runs once: taken for an inlined call, no point after it
    done.append(with_sorted([2, 1]))  # key runs twice: C calling back, the boundary point (occurrence 1)


def helper_and_own():
    t = threading.Thread(target=with_len, args=([1, 2],), name="untraced-helper")
    t.start()
    t.join()
    return with_len([1])
'''


@pytest.fixture
def calls(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "r21_calls.py").write_text(_CALLS)
    import importlib

    import r21_calls

    m = importlib.reload(r21_calls)
    yield m
    if m.lock.locked():
        m.lock.release()


def _boundary(m, action, **kw):
    from safeprefetch.lowlevel import record_points

    points = [p for p in record_points(action, [m.__file__], **kw) if p.boundary]
    assert len(points) == 1, points
    return points[0]


def test_a_boundary_point_is_performed_where_it_was_recorded_not_at_a_call_the_tracer_took_for_inlined(calls):
    # The end-of-call hook counted every return of the CALL; the tracer does not count a C call that ran one
    # Python callback (it takes it for an inlined call): the point recorded in the second call was performed
    # in the first (3.12 and 3.13 after the first commit; 3.11's profile path since the twentieth round).
    from safeprefetch.lowlevel import raise_keyboard_interrupt, run_with_injection

    p = _boundary(calls, calls.twice)
    calls.done.clear()
    out = run_with_injection(calls.twice, p, raise_keyboard_interrupt, [calls.__file__])
    assert isinstance(out.result, KeyboardInterrupt) and calls.done == [[3]] and not calls.lock.locked()


def test_a_boundary_point_is_not_performed_in_prepare_nor_on_a_thread_not_traced(calls):
    from safeprefetch.lowlevel import raise_keyboard_interrupt, run_with_injection

    files = [calls.__file__]
    p = _boundary(calls, lambda: calls.with_len([1]))
    ran = []

    def prepare():  # runs the target code itself: not counted, as record_points does not count it
        ran.append(calls.with_len([1, 2, 3]))
        return lambda: calls.with_len([1])

    out = run_with_injection(None, p, raise_keyboard_interrupt, files, prepare=prepare)
    assert ran == [3] and isinstance(out.result, KeyboardInterrupt) and not calls.lock.locked()
    errors = []
    hook = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_type)
    try:  # threads=False: the helper thread's call is not traced, and not interrupted
        out = run_with_injection(calls.helper_and_own, p, raise_keyboard_interrupt, files)
    finally:
        threading.excepthook = hook
    assert errors == [] and isinstance(out.result, KeyboardInterrupt) and not calls.lock.locked()


def test_a_bool_batch_returned_as_a_list_is_copied_in_not_read_as_a_status():
    # After the first commit a list starting with a bool was read as ``(ok, item)``: True dropped the batch
    # (the slot's old bytes delivered), False refused it as a failure.
    rows = [[True, False, True], [False, True, False], [True, True], [False, False]]

    class Bools:
        def __init__(self, rows):
            self.rows = rows

        def __len__(self):
            return len(self.rows)

        def fetch_into(self, i, out):
            return list(self.rows[i])

    with Prefetcher(Bools(rows[:2]), shape=(3,), dtype=np.bool_, timeout=30) as pf:
        assert [b.tolist() for b in pf] == rows[:2]
    with Prefetcher(Bools(rows[2:]), shape=(2,), dtype=np.bool_, timeout=30) as pf:  # a pair of bools: a batch
        assert [b.tolist() for b in pf] == rows[2:]


def test_a_strided_view_of_out_with_its_byte_bounds_is_still_a_part_of_it():
    class EveryOther:
        def __len__(self):
            return 2

        def fetch_into(self, i, out):
            out[::2] = i
            return out[::2]

    with Prefetcher(EveryOther(), shape=(5,), dtype=np.int64, timeout=30) as pf:
        with pytest.raises(TypeError, match=r"item 0: fetch_into returned a view of part of out \(24 of its 40"):
            next(iter(pf))


def test_the_timeline_copies_the_resize_log_a_consumer_appends_to(monkeypatch):
    # timeline() iterated the resize log in Python; a deque (item 5) raised "deque mutated during iteration"
    # when the consumer's take resized meanwhile (the review's run: on the first call).
    from safeprefetch._prefetcher import policy

    monkeypatch.setattr(policy, "SHRINK_WINDOW", 1)  # a take that finds two batches ready shrinks: resizes often
    monkeypatch.setattr(policy, "SHRINK_WINDOW_MAX", 1)
    monkeypatch.setattr(policy, "RUN_BUDGET", 0.0)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    stop, errors = threading.Event(), []

    class Endless:
        def __len__(self):
            return 10**7

        def fetch_into(self, i, out):
            out[...] = i

    with Prefetcher(Endless(), capacity=8, workers=2, shape=(4,), dtype=np.int64, autotune=True, max_capacity=8,
                    timeline=True, timeout=30) as pf:
        log = pf._core.autotuner.log
        log.extend((0.0, 0, 4) for _ in range(policy.RESIZE_RECORDS - 10))  # a long run's history

        def consume():
            out = np.empty((4,), np.int64)
            while not stop.is_set():
                pf.copy_prefetched(out)

        t = threading.Thread(target=consume)
        t.start()
        try:
            for _ in range(10):
                try:
                    pf.timeline()
                except RuntimeError as e:
                    errors.append(str(e))
        finally:
            stop.set()
            t.join()
            sys.setswitchinterval(interval)
    assert errors == []

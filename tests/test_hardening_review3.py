"""The third adversarial review of the Prefetcher (2026-12-02, second session): one test per finding.

Each failed on the code before its fix. Findings that hung the old code run in a subprocess with a
deadline (``run_python``), so a regression is a failure, not a hung suite.

1. ``close(timeout=T)`` while another thread's close waited for a stuck worker was not bounded by T: it
   waited for the close lock as long as the other close did (forever with ``close_timeout=inf``), and
   Ctrl-C could not cut that wait short; interpreter exit hung the same way.
2. With ``thread_safe=False`` and a source that hands out one buffer, batch 0 could hold item 1: the
   constructor's read of item 0 was kept by reference and copied only when a worker reached position 0.
3. Autotune never grew when the target, not the source, held the workers back, for a fast caller: its
   snapshot came after the release had freed a slot and before the woken worker claimed it.
4. ``stats.worker_fetch_seconds`` counted the wait for the source lock (``thread_safe=False``).
5. A 1-d ndarray source (numpy scalars as 0-d batches) failed only when iterated.
6. An unsized dtype with ``shape=`` (``'U'``, ``'S'``, ``'V'``) was accepted; no batch could match it.
"""

import sys
import threading
import time
import types

import numpy as np
import pytest
from _polling import wait_until
from test_hardening_glue import run_python

from safeprefetch import Prefetcher
from safeprefetch._prefetcher.core import Core
from safeprefetch._prefetcher.machine import machine_for
from safeprefetch._prefetcher.policy import Autotuner
from safeprefetch._runtime.kernel import Runtime
from safeprefetch.models import _protocol as P

pytestmark = [pytest.mark.live, pytest.mark.timeout(120)]

_STUCK = """
    import json, os, signal, sys, threading, time, warnings
    import numpy as np
    from safeprefetch import Prefetcher
    warnings.simplefilter("ignore")
    fetching, release = threading.Event(), threading.Event()

    class Stuck:  # item 1 on never returns until released (a dead NFS mount, say)
        def __len__(self): return 10
        def __getitem__(self, i):
            if i >= 1:
                fetching.set()
                release.wait()
            return np.zeros(3)

    def until(cond, what):
        end = time.monotonic() + 30
        while not cond():
            if time.monotonic() > end:
                raise SystemExit(f"timed out waiting for {what}")
            time.sleep(0.001)

    def frames(th):
        f, names = sys._current_frames().get(th.ident), []
        while f is not None:
            names.append(f.f_code.co_name)
            f = f.f_back
        return names

    pf = Prefetcher(Stuck(), capacity=2, workers=1, close_timeout={first_timeout})
    assert fetching.wait(30)
    first = threading.Thread(target=pf.close, daemon=True, name="first-closer")
    first.start()
    until(lambda: "join_threads" in frames(first) or "step" in frames(first), "the first close to wait for the worker")
"""


def _stuck(first_timeout):
    return _STUCK.replace("{first_timeout}", first_timeout)


def test_1_a_second_close_is_bounded_by_its_own_timeout():
    out = run_python(_stuck('float("inf")') + """
    second = threading.Thread(target=pf.close, kwargs={"timeout": 0.2}, daemon=True)
    second.start()
    second.join(30)  # bounded by 0.2 s; before, by the first close: forever
    returned = not second.is_alive()
    release.set()
    first.join(30)
    print(json.dumps({"second_returned": returned, "first_returned": not first.is_alive(), "closed": pf.closed}))
    """)
    assert out == {"second_returned": True, "first_returned": True, "closed": True}


def test_1_ctrl_c_cuts_short_a_close_waiting_for_another_close():
    out = run_python(_stuck('float("inf")') + """
    main = threading.main_thread()

    def ctrl_c():
        until(lambda: "begin_close" in frames(main), "the main thread's close to wait for the close lock")
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c, daemon=True).start()
    try:
        pf.close(timeout=float("inf"))  # only a Ctrl-C can end this wait
        got = "returned"
    except KeyboardInterrupt:
        got = "KeyboardInterrupt"
    release.set()
    first.join(30)
    print(json.dumps({"main": got, "first_returned": not first.is_alive()}))
    """)
    assert out == {"main": "KeyboardInterrupt", "first_returned": True}


def test_1_exit_is_bounded_while_a_daemon_thread_closes_without_a_bound():
    # The exit hook told every open prefetcher to stop, waiting for each close lock without a bound: a
    # daemon thread inside close(timeout=inf) on a stuck worker held it for good, and exit hung.
    out = run_python(_stuck("0.3").replace(
        'target=pf.close, daemon=True', 'target=pf.close, kwargs={"timeout": float("inf")}, daemon=True') + """
    print(json.dumps({"exiting": True}))
    """, timeout=60)
    assert out == {"exiting": True}


class _OneBuffer:
    """A map-style source that refills and returns one internal buffer per call: not thread-safe."""

    def __init__(self, n):
        self.n, self.buf, self.called = n, np.empty(4, np.int64), {}

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.buf[:] = i
        if i in self.called:
            self.called[i].set()
        return self.buf


def test_2_a_serialized_source_that_reuses_its_buffer_delivers_item_0_intact():
    source = _OneBuffer(8)
    source.called[1] = threading.Event()
    held = []

    def tracer(frame, event, arg):  # hold worker 0 just before position 0's fill until source[1] has run
        if frame.f_code.co_name != "_fetch":
            return None

        def local(frame, event, arg):
            if event == "line" and "box" in frame.f_locals and frame.f_locals.get("pos") == 0 and not held:
                held.append(source.called[1].wait(30))
            return local
        return local

    threading.settrace(tracer)
    try:
        with Prefetcher(source, capacity=4, workers=2, thread_safe=False) as pf:
            got = [int(b[0]) for b in pf]
    finally:
        threading.settrace(None)
    assert held == [True]  # the other worker did call source[1] first
    assert got == list(range(8))


def _tuner_view(capacity, workers, target):
    """What ``Autotuner.after_take`` reads of a core, over the real compiled machine and a one-thread runtime."""
    m = machine_for(capacity, workers, 20, True, True, target, 1)
    counts = types.SimpleNamespace(t0=0.0, delivered=0, blocked_seconds=[0.0] * workers)
    view = types.SimpleNamespace(machine=m, counts=counts)
    Core._index_machine(view, m, workers)
    view.rt = Runtime(m, {"fetch": lambda ctx: "ok"})
    return view


def _tuned(view, before):
    """The target after one take that found ``before`` (nothing ready: the consumer waited)."""
    Autotuner(view.machine.thread_names.index(P.TUNER)).after_take(view, before, ready=0)
    return view.rt.state[view.i_target]


def test_3_autotune_grows_when_the_target_holds_workers_back_for_a_fast_caller():
    # Pool 4, target 1, three workers. The consumer takes batch 0 and releases it; a fast caller's next take
    # comes before any woken worker has claimed the freed slot. Three workers wait to claim, the target
    # has room for one: two are held back by the target, so it must grow. Before, "slots in use" (none,
    # at that instant) said the target was not the limit, and it never grew.
    view = _tuner_view(4, 3, 1)
    rt, w, c = view.rt, view.worker_ids, view.consumer
    rt.step(w[0])               # claim index 0: the target's one slot
    rt.step(w[0])               # fetch it: ready
    rt.step(c, P.TAKE_ONE)      # taken
    rt.step(c)                  # released: the slot is free, no worker has claimed it yet
    before = rt.state
    assert [before[i] for i in view.worker_pcs] == [P.CLAIM] * 3
    assert before[view.i_slots].count(P.FREE) == 4
    assert not view.machine.enabled(before, c)  # the caller must wait
    assert _tuned(view, before) == 2


def test_3_autotune_does_not_grow_when_every_worker_is_fetching():
    view = _tuner_view(4, 2, 2)
    rt, w = view.rt, view.worker_ids
    rt.step(w[0])
    rt.step(w[1])               # both workers inside a fetch: the source is the limit, not the target
    assert _tuned(view, rt.state) == 2


def test_3_autotune_grows_when_a_claimed_target_leaves_a_worker_idle():
    view = _tuner_view(4, 2, 1)
    rt, w = view.rt, view.worker_ids
    rt.step(w[0])               # the one slot the target allows is being filled; worker 1 waits for room
    assert _tuned(view, rt.state) == 2


def test_4_fetch_seconds_exclude_the_wait_for_a_serialized_source():
    inside = {}
    names = {}

    class Slow:
        def __len__(self):
            return 2

        def __getitem__(self, i):
            me = threading.current_thread().name
            t0 = time.perf_counter()
            if i == 0:
                names[0] = threading.get_ident()
                # The other worker is queued on the source lock, inside its fetch ...
                assert wait_until(lambda: any(t != names[0] and "_fetch" in _names(f)
                                              for t, f in sys._current_frames().items()), 30)
                time.sleep(0.3)  # ... while this call costs the source 0.3 s (a cost, not synchronization)
            inside[me] = inside.get(me, 0.0) + time.perf_counter() - t0
            return np.full(2, i)

    with Prefetcher(Slow(), capacity=2, workers=2, thread_safe=False, shape=(2,), dtype=np.int64) as pf:
        got = sorted(int(b[0]) for b in pf)
        fetch = pf.stats.worker_fetch_seconds
    assert got == [0, 1]
    # Inside the source: 0.3 s in all. Before, the queued worker's 0.3 s wait for the lock was added: 0.6.
    assert fetch <= sum(inside.values()) + 0.1, (fetch, inside)


def test_5_a_1d_array_source_gives_0d_batches():
    with Prefetcher(np.arange(5.0), capacity=2) as pf:
        got = list(pf)
    assert [b.shape for b in got] == [()] * 5 and [float(b) for b in got] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert all(type(b) is np.ndarray for b in got)
    with Prefetcher(np.arange(4, dtype=np.int16), capacity=2, workers=2) as pf:
        out = np.empty((), np.int16)
        copied = []
        while pf.copy_prefetched(out):
            copied.append(int(out))
    assert sorted(copied) == [0, 1, 2, 3]


@pytest.mark.parametrize("dtype", ["U", "S", "V", np.str_, np.bytes_])
def test_6_an_unsized_dtype_is_refused_at_construction(dtype):
    with pytest.raises(ValueError, match="has no size"):
        Prefetcher(np.zeros((4, 2)), shape=(2,), dtype=dtype)


def _names(frame):
    out = []
    while frame is not None:
        out.append(frame.f_code.co_name)
        frame = frame.f_back
    return out


def test_1_a_stuck_worker_is_warned_about_once_not_at_every_close():
    # Found reviewing fix 1: the close that found a worker stuck warns; a later close() is idempotent.
    import warnings
    release = threading.Event()
    fetching = threading.Event()

    class Stuck:
        def __len__(self):
            return 4

        def __getitem__(self, i):
            if i >= 1:
                fetching.set()
                release.wait(60)
            return np.zeros(2)

    pf = Prefetcher(Stuck(), capacity=2, close_timeout=0.05)
    try:
        assert fetching.wait(30)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            pf.close()
            pf.close()
            pf.close()
        assert len([w for w in seen if "still inside a fetch" in str(w.message)]) == 1
    finally:
        release.set()

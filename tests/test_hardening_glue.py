"""The second adversarial review of the Prefetcher (2026-12-02): one regression test per finding.

Each failed on the code before its fix. Findings that hung the old code run in a subprocess with a
deadline, so a regression is a failure, not a hung suite.

1. A worker thread that could not start (``RuntimeError: can't start new thread``, or a Ctrl-C inside
   ``Thread.start``) left its model worker undriven: the constructor's close waited for it for the whole
   ``close_timeout``, and forever with ``close_timeout=inf``.
2. A ``copy_prefetched(out)`` interrupted after its copy kept its batch only in the caller's ``out``:
   a caller that then wrote ``out`` got its own data back as the batch. (Swept at every interruption
   point by tests/test_interrupts.py, whose harness now overwrites the caller's buffer after the call.)
3. The SIGINT wrapper stayed installed for good after a last close off the main thread.
4. A Ctrl-C at the entry of ``__exit__`` left the prefetcher open.
5. An integer timeout past float's range raised ``OverflowError``.
6. The reaper thread died on an abandoned prefetcher with ``close_timeout=inf`` (None + a float), and
   never closed it, nor any later one.
7. StringDType batches failed with a message from inside numpy's ``as_strided``.
"""

import gc
import json
import math
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from safeprefetch import Prefetcher
from safeprefetch.testing import thread_count
from _polling import wait_until

pytestmark = [pytest.mark.live, pytest.mark.timeout(120)]


def run_python(code: str, timeout: float = 60.0) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON line last. A hang is a failure."""
    try:
        p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the subprocess hung (no exit within {timeout} s); output so far:\n{e.stdout}\n{e.stderr}")
    assert p.returncode == 0, p.stderr
    assert "Exception in thread" not in p.stderr, p.stderr  # no thread died of what the test did
    return json.loads(p.stdout.strip().splitlines()[-1])


class Items:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.full(3, i, np.float32)


_START_FAILS = """
    import json, signal, sys, threading, time
    import numpy as np
    import safeprefetch
    from safeprefetch._prefetcher.lifecycle import open_cores
    from safeprefetch.testing import thread_count

    class Items:
        def __len__(self): return 10
        def __getitem__(self, i): return np.full(3, i, np.float32)

    cls = getattr(safeprefetch, {cls!r})
    real_start = threading.Thread.start
    results = []
    before = thread_count()
    for failing in range({workers}):
        def start(self, failing=failing):
            if self.name.endswith(f"-worker{{failing}}"):
                {fail}
            return real_start(self)
        threading.Thread.start = start
        try:
            cls(Items(), capacity=2, workers={workers}, close_timeout=float("inf"))
            got = "constructed"
        except BaseException as e:
            got = type(e).__name__
        finally:
            threading.Thread.start = real_start
        deadline = time.monotonic() + 10
        while thread_count() > before and time.monotonic() < deadline:
            time.sleep(0.001)
        results.append([got, thread_count() - before, len(open_cores()),
                        signal.getsignal(signal.SIGINT) is signal.default_int_handler])
    with cls(Items(), capacity=2, workers={workers}) as pf:  # and the next prefetcher works
        n = len([pf.get(i) for i in range(10)] if {cls!r} == "OnDemandPrefetcher" else list(pf))
    print(json.dumps({{"results": results, "after": n}}))
"""


@pytest.mark.parametrize("cls", ["Prefetcher", "OnDemandPrefetcher"])
def test_1_a_worker_thread_that_cannot_start_fails_the_constructor_at_once(cls):
    """Finding 1: with close_timeout=inf the constructor waited forever for a worker that never ran."""
    got = run_python(_START_FAILS.format(cls=cls, workers=3, fail='raise RuntimeError("can\'t start new thread")'))
    # For each worker in turn: the error raised, no thread left, no prefetcher left open, SIGINT restored.
    assert got == {"results": [["RuntimeError", 0, 0, True]] * 3, "after": 10}


_CTRL_C_IN_START = """
    import json, sys, threading, time
    import numpy as np
    import safeprefetch
    from safeprefetch._prefetcher.lifecycle import open_cores

    class Items:
        def __len__(self): return 10
        def __getitem__(self, i): return np.full(3, i, np.float32)

    cls = getattr(safeprefetch, {cls!r})
    start_code = threading.Thread.start.__code__

    def thread_count():
        # Running threads: an interrupt just before Thread.start's ``try`` leaves the Thread object in
        # threading's _limbo for good (CPython's ``except Exception`` does not take it out), listed by
        # threading.enumerate() but never alive: not ours to clean, and not a running thread.
        return sum(1 for th in threading.enumerate() if th.is_alive() and th.name != "safeprefetch-reaper")

    def run(failing, line):
        # A KeyboardInterrupt raised at one line of worker ``failing``'s Thread.start (every line is a
        # point where CPython can run the SIGINT handler); record mode (line None) lists the lines.
        seen = []

        def tracer(frame, event, arg):
            if frame.f_code is not start_code or not frame.f_locals["self"].name.endswith(f"-worker{{failing}}"):
                return None
            def local(frame, event, arg):
                if event == "line":
                    seen.append(frame.f_lineno)
                    if frame.f_lineno == line and seen.count(line) == 1:
                        raise KeyboardInterrupt
                return local
            return local

        before = thread_count()
        sys.settrace(tracer)
        try:
            # Closed here, not dropped: a dropped one is closed by the reaper, later, and would still be
            # open when the next run counts.
            cls(Items(), capacity=2, workers=2, close_timeout=float("inf")).close()
            got = "constructed"
        except BaseException as e:
            got = type(e).__name__
        finally:
            sys.settrace(None)
        deadline = time.monotonic() + 10
        while thread_count() > before and time.monotonic() < deadline:
            time.sleep(0.001)
        return seen, [got, thread_count() - before, len(open_cores())]

    results = {{}}
    for failing in (0, 1):
        lines, _ = run(failing, None)
        for line in sorted(set(lines)):
            results[f"{{failing}}:{{line}}"] = run(failing, line)[1]
    gc_open = [c for c in open_cores() if not c.closed]
    print(json.dumps({{"results": results, "open": len(gc_open)}}))
"""


@pytest.mark.parametrize("cls", ["Prefetcher", "OnDemandPrefetcher"])
def test_1_ctrl_c_at_every_line_of_a_workers_thread_start_leaves_nothing_running(cls):
    """Finding 1, at every line: an interrupt before the thread runs, and after it does (two would-be
    drivers of one model worker: exactly one drives it)."""
    got = run_python(_CTRL_C_IN_START.format(cls=cls))
    assert len(got["results"]) >= 6, got  # Thread.start has more lines than this on every Python
    bad = {k: v for k, v in got["results"].items() if v != ["KeyboardInterrupt", 0, 0]}
    assert not bad and got["open"] == 0


def test_3_the_sigint_wrapper_steps_aside_after_a_last_close_off_the_main_thread():
    """Finding 3: a last close on another thread could not restore the handler, and nothing did later."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("the SIGINT handler is not Python's default here")
    pf = Prefetcher(Items(4), capacity=2)
    assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler  # the wrapper, while open
    th = threading.Thread(target=pf.close)
    th.start()
    th.join()
    with pytest.raises(KeyboardInterrupt):  # the next SIGINT goes to the wrapped handler, as before ...
        signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # ... which is restored


def test_3_a_main_thread_open_after_a_close_elsewhere_keeps_the_wrapper_it_needs():
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("the SIGINT handler is not Python's default here")
    a = Prefetcher(Items(4), capacity=2)
    th = threading.Thread(target=a.close)
    th.start()
    th.join()
    with Prefetcher(Items(4), capacity=2) as b:  # wanted again: not stale
        wrapper = signal.getsignal(signal.SIGINT)
        assert wrapper is not signal.default_int_handler
        assert [int(x[0]) for x in b] == [0, 1, 2, 3]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # a main-thread close restores it


def test_4_ctrl_c_at_every_line_of_exit_closes_the_prefetcher(baseline):
    """Finding 4: Ctrl-C (the installed SIGINT handler, as the interpreter runs it) on the way into
    ``__exit__`` left the prefetcher open; now at every line of ``__exit__`` the with-block raises
    KeyboardInterrupt with the prefetcher closed and its threads gone."""
    from safeprefetch import lowlevel

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("the SIGINT handler is not Python's default here")
    code = Prefetcher.__exit__.__code__

    def run(line):
        seen = []

        def tracer(frame, event, arg):
            if frame.f_code is not code:
                return None

            def local(frame, event, arg):
                if event in ("call", "line"):
                    at = -1 if event == "call" else frame.f_lineno
                    seen.append(at)
                    if at == line and seen.count(at) == 1:
                        lowlevel.deliver_sigint(frame)
                return local
            if event == "call":
                return local(frame, event, arg)
            return local

        pf = Prefetcher(Items(6), capacity=2)
        sys.settrace(tracer)
        try:
            with pf:
                pf.get()
            raised = None
        except KeyboardInterrupt:
            raised = "KeyboardInterrupt"
        finally:
            sys.settrace(None)
        return seen, raised, pf.closed

    lines, raised, closed = run(None)
    assert raised is None and closed and -1 in lines
    for line in sorted(set(lines)):
        _, raised, closed = run(line)
        assert (raised, closed) == ("KeyboardInterrupt", True), line
        assert wait_until(lambda: thread_count() <= baseline), line


@pytest.mark.parametrize("big", [10**400, 2**1100])
def test_5_an_integer_timeout_past_floats_range_means_no_timeout(baseline, big):
    """Finding 5: OverflowError from float(); ``any real number`` of seconds is accepted."""
    with Prefetcher(Items(3), capacity=2, timeout=big, close_timeout=big) as pf:
        assert int(pf.get(timeout=big)[0]) == 0
        assert pf.copy_prefetched(np.empty(3, np.float32), timeout=big)
    with pytest.raises(ValueError, match=">= 0"):
        Prefetcher(Items(3), timeout=-big)


def test_6_the_reaper_closes_an_abandoned_prefetcher_with_an_unbounded_close_timeout(baseline):
    """Finding 6: the reaper computed ``time.monotonic() + None`` and died, leaving it (and every later
    abandoned one) open with its workers running."""
    from safeprefetch._prefetcher.lifecycle import reaper

    for _ in range(2):  # the second proves the reaper outlived the first
        pf = Prefetcher(Items(50), capacity=2, close_timeout=math.inf)
        pf.get()
        cores = [pf._core]
        del pf
        gc.collect()
        assert wait_until(lambda: cores[0].closed, 10.0)
        assert reaper.thread is not None and reaper.thread.is_alive()
        cores.clear()
    assert wait_until(lambda: thread_count() <= baseline)


def test_7_a_dtype_numpy_cannot_alias_read_only_is_refused_by_name(baseline):
    """Finding 7: ``data type 'StringDType()' not understood``, raised inside numpy."""
    string_dtype = getattr(getattr(np, "dtypes", None), "StringDType", None)
    if string_dtype is None:
        pytest.skip("numpy has no StringDType")
    items = [np.array(["a" * i, "xyz"], dtype=string_dtype()) for i in range(3)]
    with pytest.raises(TypeError, match=r"batches of dtype StringDType\(\) are not supported.*fixed-width"):
        Prefetcher(items, capacity=2)

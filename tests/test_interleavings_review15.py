"""The real-code checker against brute force, fifteenth round: reads the reduction could not see.

Each program has a real bug (or none) that ``reduce="none"`` (every schedule) finds; the default reduction
said "ok, exhaustive" for the first three, and the fourth stopped as nondeterministic (docs/hardening.md,
"A fifteenth round"). Each test failed on the code before its fix.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from safeprefetch import interleavings

pytestmark = pytest.mark.timeout(240)


def _together(*threads: threading.Thread) -> None:
    """Start the threads in order, then join them in order."""
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def test_is_alive_of_a_thread_not_yet_started_races_with_its_start():
    # is_alive() of a Thread this run has not started was no scheduling point: the first schedule's answer
    # (False) was the only one, and the start racing it was never ordered first.
    outcomes: list = []

    def body():
        q, lock, go = queue.Queue(), threading.Lock(), threading.Event()
        t = threading.Thread(target=go.wait, name="t")
        saw = []

        def watcher():
            q.put(1)
            with lock:
                pass
            saw.append(t.is_alive())
            go.set()

        w = threading.Thread(target=watcher, name="w")
        w.start()
        q.get()
        t.start()
        w.join()
        t.join()
        outcomes.append(saw[0])
        assert saw[0] is False, "w saw t alive"

    for reduce in ("dpor", "none"):
        outcomes.clear()
        r = interleavings.check(body, reduce=reduce)
        assert r.verdict == "assertion", (reduce, r.verdict)
        assert True in outcomes


def test_join_of_a_thread_not_yet_started_races_with_its_start():
    # join() before start() raises RuntimeError; a program catching it must see both orders.
    outcomes: list = []

    def body():
        gate = threading.Lock()
        t = threading.Thread(target=lambda: None, name="t")
        caught = []

        def joiner():
            with gate:
                pass
            try:
                t.join()
                caught.append(False)
            except RuntimeError:
                caught.append(True)

        j = threading.Thread(target=joiner, name="j")
        _together(j, t)
        outcomes.append(caught[0])

    interleavings.check(body)
    assert set(outcomes) == {True, False}


def test_a_thread_that_ends_after_the_body_returns_is_a_leak_under_the_reduction_too():
    def body():
        ev = threading.Event()
        t = threading.Thread(target=ev.set, name="setter")
        t.start()
        ev.wait()  # the setter may still be alive here: its end comes after its set(); no join

    reduced = interleavings.check(body)
    assert interleavings.check(body, reduce="none").verdict == "leaked_thread"
    assert reduced.verdict == "leaked_thread" and "setter" in reduced.violation.message


def test_a_joined_thread_is_no_leak():
    def body():
        ev = threading.Event()
        t = threading.Thread(target=ev.set, name="setter")
        t.start()
        ev.wait()
        t.join()

    r = interleavings.check(body)
    assert r.verdict == "ok" and r.exhaustive


@pytest.mark.parametrize("read", ["broken", "n_waiting"])
def test_a_barriers_state_read_races_with_an_abort(read):
    outcomes: list = []

    def body():
        bar, lock = threading.Barrier(2), threading.Lock()
        saw = []

        def reader():
            with lock:
                pass
            saw.append(getattr(bar, read))

        r = threading.Thread(target=reader, name="reader")
        a = threading.Thread(target=bar.abort, name="aborter")
        _together(r, a)
        outcomes.append(saw[0])

    interleavings.check(body)
    if read == "broken":
        assert set(outcomes) == {False, True}
    else:
        assert set(outcomes) == {0}


def test_a_barriers_waiting_count_read_races_with_an_arrival():
    outcomes: list = []

    def body():
        bar, lock = threading.Barrier(2, timeout=1.0), threading.Lock()
        saw = []

        def reader():
            with lock:
                pass
            saw.append(bar.n_waiting)
            bar.abort()  # lets the waiter go

        def waiter():
            try:
                bar.wait()
            except threading.BrokenBarrierError:
                pass

        r = threading.Thread(target=reader, name="reader")
        w = threading.Thread(target=waiter, name="waiter")
        _together(r, w)
        outcomes.append(saw[0])

    interleavings.check(body)
    assert set(outcomes) == {0, 1}


def test_a_two_thread_pool_gets_a_verdict():
    # shutdown() joined the pool's threads in set order (by identity hash, different in every run): the
    # minimizer's replay diverged and the check raised Nondeterministic instead of reporting the bug.
    def buggy():
        out, lock = [], threading.Lock()

        def f(i):
            with lock:
                out.append(i)

        with ThreadPoolExecutor(2) as ex:
            for fut in [ex.submit(f, i) for i in range(3)]:
                fut.result()
        assert out == [0, 1, 2], out

    def correct():
        with ThreadPoolExecutor(2) as ex:
            assert sorted(ex.map(abs, [-1, -2, -3])) == [1, 2, 3]

    r = interleavings.check(buggy)
    assert r.verdict == "assertion" and interleavings.replay(buggy, r.trace).verdict == "assertion"
    assert interleavings.check(correct, preemption_bound=1).verdict == "ok"

"""The real-code checker's twelfth-round review (docs/hardening.md, "A twelfth round").

Each test failed on the code before its fix.
"""

import threading

import pytest

from safeprefetch import interleavings
from _polling import wait_until

pytestmark = pytest.mark.timeout(120)


async def async_body():
    assert False, "never reached"


def generator_body():
    assert False, "never reached"
    yield


async def async_generator_body():
    assert False, "never reached"
    yield


@pytest.mark.parametrize("body", [async_body, generator_body, async_generator_body])
def test_1_a_body_whose_call_runs_nothing_is_refused_not_ok(body):
    # Before: "ok, exhaustive": one run in which nothing ran.
    with pytest.raises(TypeError, match=f"'{body.__name__}' is an? .*its body would never run"):
        interleavings.check(body)


def test_1_the_decorator_refuses_an_async_test_when_it_decorates():
    # Before: the decorated test passed, whatever its body asserted.
    with pytest.raises(TypeError, match="is an async def"):
        @interleavings.test()
        async def test_async():
            assert False


def test_2_the_indexed_race_lookup_is_the_scan_at_every_call(monkeypatch):
    """DPOR's race lookup goes through per-thread, per-key event lists (a livelock's run to max_steps was
    quadratic: minutes); at every call over the catalog's bugs and references, plain and with
    ``lines=True``, it gives the plain scan's answer."""
    from safeprefetch._harness.code_twins import REFERENCES, TWINS
    from safeprefetch._interleave import explore

    indexed, calls = explore.DFS._last_race, []

    def both(self, ex, p, op, psig, k):
        got = indexed(self, ex, p, op, psig, k)
        want = explore.last_race_scan(self, ex, p, op, psig, k)
        calls.append(got == want)
        assert got == want, (p, k)
        return got

    monkeypatch.setattr(explore.DFS, "_last_race", both)
    for t in [*TWINS.values(), *REFERENCES.values()]:
        options = dict(t.options)
        options.pop("strategy", None)
        interleavings.check(t.at(), **options)
    interleavings.check(TWINS["racy_counter"].at(), lines=True, reduce="dpor")
    assert len(calls) > 1000 and all(calls)


def livelock():
    """A thread takes and drops a lock forever; the test body joins it: a hang, at max_steps."""
    lock = threading.Lock()

    def spin_forever():
        while True:
            with lock:
                pass

    t = threading.Thread(target=spin_forever)
    t.start()
    t.join()


class _CountedEvents(list):
    """An execution's event list that counts how often an event is looked up by index."""

    looked = 0

    def __getitem__(self, i):
        _CountedEvents.looked += 1
        return super().__getitem__(i)


def test_2_a_livelock_reaches_its_hang_verdict_in_a_linear_run(monkeypatch):
    # Before: every step scanned every earlier event (229 s to reach max_steps=20,000 without minimizing).
    # Counted, not timed: events looked up on the way to 500 and to 2,000 steps go about 1:4, not 1:16.
    from safeprefetch._interleave import scheduler

    made = scheduler.Execution.__init__

    def init(self, *args, **kwargs):
        made(self, *args, **kwargs)
        self.events = _CountedEvents()

    monkeypatch.setattr(scheduler.Execution, "__init__", init)

    looked = {}
    for steps in (500, 2_000):
        _CountedEvents.looked = 0
        r = interleavings.check(livelock, max_steps=steps, minimize=False)
        looked[steps] = _CountedEvents.looked
        assert r.verdict == "hang"
    assert looked[2_000] < 6 * looked[500], looked


def lost_update_among_noise():
    """Two threads lose an update (check-then-act, one preemption), among six threads that each take the
    lock once: the schedules without a preemption alone are too many to search to the end."""
    lock, state = threading.Lock(), {"n": 0}

    def noise():
        with lock:
            pass

    def inc():
        with lock:
            v = state["n"]
        with lock:
            state["n"] = v + 1

    threads = [threading.Thread(target=noise) for _ in range(6)] + [threading.Thread(target=inc) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert state["n"] == 2, state


def test_3_minimizing_stops_at_its_budget_and_says_so(monkeypatch):
    # Before: found in 2 schedules, then minimizing searched the 0-preemption space to its end: no result
    # within 300 s. The cap is lowered here only to keep the test short.
    from safeprefetch._interleave import check as checking

    monkeypatch.setattr(checking, "MINIMIZE_SCHEDULES", 200)
    r = interleavings.check(lost_update_among_noise)
    assert r.verdict == "assertion" and r.schedules_to_bug == 2
    assert r.minimized is False and r.to_json()["search"]["minimized"] is False
    assert "minimizing stopped before it finished" in interleavings.render(r)
    assert "minimized from" not in interleavings.render(r)
    again = interleavings.replay(lost_update_among_noise, r.to_json())
    assert again.verdict == "assertion"


def test_4_a_livelocked_thread_does_not_outlive_its_check():
    # Before: parking a thread that swallowed Aborted took a fresh lock twice (so never parked), and a
    # spinner, whose every operation was enabled, went on after the check on the real lock, for good: the
    # process burned a CPU on it from then on (and each run waited 2 s for it to unwind).
    r = interleavings.check(livelock, max_steps=300, minimize=False)
    assert r.verdict == "hang"
    assert wait_until(lambda: not any("spin_forever" in t.name for t in threading.enumerate()), 10)


def test_4_a_thread_that_swallows_every_abort_is_parked_not_spinning():
    def stubborn():
        lock = threading.Lock()

        def swallow_forever():
            while True:
                try:
                    with lock:
                        pass
                except BaseException:  # noqa: BLE001 - the point: it swallows the checker's Aborted too
                    pass

        t = threading.Thread(target=swallow_forever)
        t.start()
        t.join()

    r = interleavings.check(stubborn, max_steps=300, minimize=False)
    assert r.verdict == "hang"
    # Parked (blocked for good on a lock of its own): it uses no CPU. Wait until it is there.
    import sys

    def parked():
        frames = sys._current_frames()
        mine = [t for t in threading.enumerate() if "swallow_forever" in t.name]
        return mine and all(frames.get(t.ident) is not None and frames[t.ident].f_code.co_name == "_aborting"
                            for t in mine)

    assert wait_until(parked, 10)


_KEPT = {}


def holds_a_lock_through_a_long_cleanup():
    """A worker takes a lock made by the first run (kept across runs), reads an Event 150 times, and gives
    the lock back, not exception-safe; the body asserts it finished, which the first schedule shows false."""
    lock = _KEPT.setdefault("lock", threading.Lock())
    flag, started, finished = threading.Event(), threading.Event(), threading.Event()

    def worker():
        lock.acquire()
        started.set()
        for _ in range(150):
            flag.is_set()
        lock.release()
        finished.set()

    t = threading.Thread(target=worker)
    t.start()
    started.wait()
    assert finished.is_set(), "the worker has not finished"
    t.join()


def test_4_an_unwound_thread_may_finish_a_long_cleanup():
    # The review of the first fix: Aborted came after 100 operations of the unwound run, at is_set, with the
    # lock still held: the next check said the lock "ended held" (RuntimeError), not the assertion.
    _KEPT.clear()
    for _ in range(2):
        r = interleavings.check(holds_a_lock_through_a_long_cleanup)
        assert r.verdict == "assertion", interleavings.render(r)
        assert not _KEPT["lock"].locked()

"""The twenty-first round (docs/hardening.md): the adversarial review of the real-code scheduler.

The tests of a fix reproduce a finding and failed on the commit before the fix (95aa9ad); the others
guard what each fix must keep. Inside a checked body ``time.sleep`` is the checker's virtual time: it
fires only once every other thread has run as far as it can, which is how these bodies order their
waiters (a thread started before a sleep is asleep in its call when the sleep returns).
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from pathlib import Path

import pytest

from safeprefetch import interleavings

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parent.parent


def _verdict(result) -> str:
    return result.violation.kind if result.violation is not None else "ok"


def _start_in_order(*targets) -> list[threading.Thread]:
    """Start each ``(name, target, *args)`` and let it run until it blocks (a virtual sleep) before the next."""
    threads = []
    for name, target, *args in targets:
        threads.append(threading.Thread(target=target, args=tuple(args), name=name))
        threads[-1].start()
        time.sleep(0.1)  # virtual: returns once the thread just started waits in its call
    return threads


# -- 1. A release or a put wakes the longest waiter, as CPython's Condition.notify does ---------------------


def _release_then_join_the_first_waiter(kind: str):
    def body():
        s = getattr(threading, kind)(0) if kind == "Semaphore" else threading.BoundedSemaphore(2)
        if kind == "BoundedSemaphore":
            s.acquire()
            s.acquire()
        order = []

        def w(i):
            s.acquire()
            order.append(i)

        t1, t2 = _start_in_order(("w1", w, 1), ("w2", w, 2))  # w1 waits in acquire, w2 behind it
        s.release()  # CPython wakes w1 only; w2 sleeps on though the count is 1
        t1.join()
        s.release()
        t2.join()
        assert order == [1, 2], order
    return body


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["Semaphore", "BoundedSemaphore"])
def test_a_release_wakes_the_longest_waiting_acquire_not_any(kind):
    body = _release_then_join_the_first_waiter(kind)
    for reduce in ("dpor", "none"):
        result = interleavings.check(body, reduce=reduce)
        assert _verdict(result) == "ok", interleavings.render(result)  # was: deadlock, main joins w1
        assert result.exhaustive


@pytest.mark.timeout(120)
def test_under_notify_any_a_release_may_wake_either_waiter():
    result = interleavings.check(_release_then_join_the_first_waiter("Semaphore"), notify="any")
    assert _verdict(result) == "deadlock", result
    assert "waiter 1" in json.dumps(result.to_json())  # the release's choice of waiter, in the trace


def _put_then_join_the_first_getter():
    q = queue.Queue()
    got = []

    def c(i):
        got.append((i, q.get()))

    t1, t2 = _start_in_order(("c1", c, 1), ("c2", c, 2))
    q.put("a")  # not_empty.notify(): c1 only
    t1.join()
    q.put("b")
    t2.join()
    assert got == [(1, "a"), (2, "b")], got


def _get_then_join_the_first_putter():
    q = queue.Queue(maxsize=1)
    q.put("x")

    def p(item):
        q.put(item)

    t1, t2 = _start_in_order(("p1", p, "a"), ("p2", p, "b"))  # p1 waits for room, p2 behind it
    assert q.get() == "x"  # not_full.notify(): p1 only
    t1.join()
    assert q.get() == "a"
    t2.join()
    assert q.get() == "b"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("body", [_put_then_join_the_first_getter, _get_then_join_the_first_putter])
def test_a_put_wakes_the_longest_getter_and_a_get_the_longest_putter(body):
    for reduce in ("dpor", "none"):
        result = interleavings.check(body, reduce=reduce)
        assert _verdict(result) == "ok", interleavings.render(result)
        assert result.exhaustive


def _timed_waiter_behind_an_untimed_one(kind: str):
    def body():
        sem, q = threading.Semaphore(0), queue.Queue()
        results = {}

        def first():
            results["first"] = sem.acquire() if kind == "semaphore" else q.get()

        def second():
            if kind == "semaphore":
                results["second"] = sem.acquire(timeout=5)
            else:
                try:
                    results["second"] = q.get(timeout=5)
                except queue.Empty:
                    results["second"] = False

        t1, t2 = _start_in_order(("first", first), ("second", second))
        sem.release() if kind == "semaphore" else q.put(True)  # wakes `first`; `second` times out
        t1.join()
        t2.join()
        assert results == {"first": True, "second": False}, results
    return body


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["semaphore", "queue"])
def test_a_timed_waiter_not_woken_still_times_out(kind):
    body = _timed_waiter_behind_an_untimed_one(kind)
    result = interleavings.check(body)
    assert _verdict(result) == "ok", interleavings.render(result)


@pytest.mark.timeout(120)
def test_code_waiting_on_not_empty_itself_and_a_blocked_get_share_one_fifo_list():
    def body():
        q = queue.Queue()
        got = []

        def direct():  # waits on the queue's own condition, as some code does
            with q.not_empty:
                while not q._qsize():
                    q.not_empty.wait()
                got.append(("direct", q._get()))

        def getter():
            got.append(("getter", q.get()))

        t1, t2 = _start_in_order(("direct", direct), ("getter", getter))
        q.put("a")  # wakes `direct`, which waited first
        t1.join()
        q.put("b")
        t2.join()
        assert got == [("direct", "a"), ("getter", "b")], got

    for reduce in ("dpor", "none"):  # was: plain DFS let the getter take "a", and `direct` slept on
        result = interleavings.check(body, reduce=reduce)
        assert _verdict(result) == "ok", interleavings.render(result)


@pytest.mark.timeout(120)
def test_an_item_added_behind_the_queues_back_without_a_notify_leaves_the_getter_asleep():
    def body():
        q = queue.Queue()
        (t,) = _start_in_order(("getter", q.get))  # the getter sleeps in get
        with q.mutex:
            q.queue.append("item")  # no not_empty.notify(): a real getter sleeps on
        t.join()

    result = interleavings.check(body)
    assert _verdict(result) == "deadlock", result  # was: ok (the get was enabled by the item itself)
    assert "getter waits for an item in q" in result.violation.message


# What must still hold: a thread arriving while a woken waiter is on its way back may take the permit first,
# the search explores every order of arrival, and real bugs with semaphores and queues are still found.


@pytest.mark.timeout(120)
def test_a_thread_arriving_after_a_release_may_barge_past_the_woken_waiter():
    def body():
        s = threading.Semaphore(0)
        got = {}

        def waiter():
            s.acquire()

        def barger():
            got["barger"] = s.acquire(blocking=False)

        (t1,) = _start_in_order(("waiter", waiter))
        s.release()  # wakes `waiter`, which still has to take the count
        t2 = threading.Thread(target=barger, name="barger")
        t2.start()
        t2.join()
        assert got["barger"] is False, "the barger took the permit meant for the waiter"
        t1.join()

    result = interleavings.check(body)
    assert _verdict(result) == "assertion", result


def _fifo_outcomes(kind: str, log: set):
    def body():
        s, q = threading.Semaphore(0), queue.Queue()
        order = []

        def w(i):
            if kind == "semaphore":
                s.acquire()
                order.append(i)
            else:
                order.append((i, q.get()))

        threads = [threading.Thread(target=w, args=(i,), name=f"w{i}") for i in range(2)]
        for t in threads:
            t.start()
        for i in range(2):
            s.release() if kind == "semaphore" else q.put(i)
        for t in threads:
            t.join()
        log.add(tuple(order))
    return body


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["semaphore", "queue"])
def test_dpor_reaches_the_outcomes_plain_dfs_reaches_over_the_waiter_lists(kind):
    seen = {}
    for reduce in ("dpor", "none"):
        log: set = set()
        result = interleavings.check(_fifo_outcomes(kind, log), reduce=reduce)
        assert _verdict(result) == "ok" and result.exhaustive, result
        seen[reduce] = log
    assert seen["dpor"] == seen["none"]
    assert len(seen["none"]) == 2  # any order of arrival: either waiter first


def _over_release():
    b = threading.BoundedSemaphore(1)

    def worker():
        with b:
            pass

    t = threading.Thread(target=worker, name="worker")
    t.start()
    b.release()  # gives back a permit main never took: fine only while the worker holds it
    t.join()


def _two_consumers(consumer) -> None:
    cs = [threading.Thread(target=consumer, name=f"c{i}") for i in range(2)]
    for c in cs:
        c.start()
    for c in cs:
        c.join()


def _one_sentinel_for_two_consumers():
    q, end = queue.Queue(), object()
    q.put(1)
    q.put(end)

    def consumer():
        while q.get() is not end:
            pass

    _two_consumers(consumer)


def _get_nowait_after_an_empty_check():
    q = queue.Queue()
    q.put(1)

    def consumer():
        if not q.empty():
            q.get_nowait()  # another consumer may have taken it since

    _two_consumers(consumer)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("body, verdict, text", [
    (_over_release, "uncaught_exception", "Semaphore released too many times"),
    (_one_sentinel_for_two_consumers, "deadlock", "waits for an item in q"),
    (_get_nowait_after_an_empty_check, "uncaught_exception", "Empty"),
])
def test_real_bugs_with_semaphores_and_queues_are_still_found(body, verdict, text):
    result = interleavings.check(body)
    assert _verdict(result) == verdict, result
    assert text in result.violation.message


@pytest.mark.timeout(120)
def test_a_semaphore_waiter_interrupted_after_its_wakeup_leaves_the_permit_to_nobody():
    """Ctrl-C in the woken waiter: the permit stays, the waiter behind sleeps on (CPython's own lost
    wakeup of a Condition-based semaphore); the deadlock names the count the waiter could have taken."""
    armed = [False]

    def ctrl_c():
        if armed[0] and threading.current_thread().name == "w1":
            raise KeyboardInterrupt

    def body():
        armed[0] = False
        s = threading.Semaphore(0)

        def w1():  # takes the permit, then passes it on to w2
            try:
                s.acquire()
            except KeyboardInterrupt:
                return
            armed[0] = False
            s.release()

        def w2():
            s.acquire()

        t1, t2 = _start_in_order(("w1", w1), ("w2", w2))
        armed[0] = True
        s.release()  # wakes w1 only
        t1.join()
        armed[0] = False
        t2.join()

    result = interleavings.check(body, interrupts=[interleavings.Interrupt(ctrl_c, threads="w1")])
    assert _verdict(result) == "deadlock", result
    assert "w2 waits for s (count 1, but no release woke it)" in result.violation.message  # was: ok


# -- 2. DPOR's "exhaustive" is for race-free code: the same data under two different locks is outside it ------


class _Account:
    """A lost update under inconsistent locking: ``balance`` is read and written back under two locks."""

    def __init__(self):
        self.balance = 0
        self.deposit_lock = threading.Lock()
        self.bonus_lock = threading.Lock()  # the bug: should be deposit_lock

    def _add(self, lock, x):
        with lock:
            b = self.balance
        with lock:
            self.balance = b + x

    def deposit(self, x):
        self._add(self.deposit_lock, x)

    def bonus(self, x):
        self._add(self.bonus_lock, x)


def _wrong_lock():
    acct = _Account()
    t1 = threading.Thread(target=acct.deposit, args=(10,), name="deposit")
    t2 = threading.Thread(target=acct.bonus, args=(1,), name="bonus")
    t1.start()
    t2.start()
    t1.join()
    t2.join()
    assert acct.balance == 11, f"lost update: balance {acct.balance}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("options", [{"reduce": "none"}, {"lines": True, "preemption_bound": 1}])
def test_the_same_data_under_two_different_locks_is_found_by_the_searches_the_docs_name(options):
    result = interleavings.check(_wrong_lock, **options)
    assert _verdict(result) == "assertion", result
    assert "lost update: balance" in result.violation.message


@pytest.mark.timeout(120)
def test_a_dpor_ok_says_it_covers_every_schedule_up_to_its_equivalence_for_race_free_code():
    scope = "every schedule up to DPOR's equivalence, for race-free code"
    result = interleavings.check(_wrong_lock)  # DPOR sees two independent locks: it may run one order only
    if result.verdict == "ok":  # then the result must not read as a proof for this (racy) code
        assert result.exhaustive
        assert scope in result.note and scope in interleavings.render(result)
    plain = interleavings.check(_wrong_lock, reduce="none", preemption_bound=1)
    assert plain.verdict == "assertion"
    proved = interleavings.check(lambda: None, reduce="none")  # a plain proof claims every schedule
    assert proved.exhaustive and scope not in interleavings.render(proved)


@pytest.mark.timeout(60)
def test_the_docs_state_that_dpor_assumes_race_free_code_and_what_to_use_otherwise():
    page = (ROOT / "docs" / "interleavings.md").read_text()
    assert "**What DPOR assumes: data-race freedom.**" in page
    section = page[page.index("**What DPOR assumes"):]
    for phrase in ("two *different* locks", 'reduce="none"', "lines=True", "not* exact otherwise"):
        assert phrase in section[:3000], phrase
    assert "DPOR reaches exactly the outcomes plain DFS reaches" in page  # ... on those race-free programs:
    assert "Those programs are\nrace-free, and so must yours be" in page
    readme = (ROOT / "README.md").read_text()
    assert "only for race-free code" in readme and 'reduce="none"' in readme
    doc = " ".join(interleavings.check.__doc__.split())
    assert "for race-free code" in doc and "two different locks" in doc


def _steal_from_a_condition_waiter():
    q = queue.Queue()
    got = {}

    def a():  # waits on the queue's own condition, under its mutex, as the docs invite
        with q.mutex:
            while not q._qsize():
                q.not_empty.wait()
            got["A"] = q._get()

    def c():
        try:
            got["C"] = q.get_nowait()
        except queue.Empty:
            got["C"] = None

    ta = threading.Thread(target=a, name="A")
    ta.start()
    time.sleep(0.1)  # virtual: A is asleep on not_empty
    q.put("a")  # wakes A, which must take q.mutex back; C's get may take it first
    tc = threading.Thread(target=c, name="C")
    tc.start()
    tc.join()
    q.put("b")
    ta.join()
    assert got["A"] == "a", f"C took {got['C']!r} first; A got {got['A']!r}"


def test_dpor_orders_a_condition_wake_up_against_the_calls_on_its_queue():
    # (The fresh-eyes review of items 20-21.) A condition's wake-up, which takes its lock back, was keyed by
    # the lock alone; a queue's mutex is also keyed by the queue, as every get and put is. DPOR took the wake-up
    # for independent of another thread's get_nowait and said "ok, exhaustive" of race-free code whose lost
    # item reduce="none" finds.
    plain = interleavings.check(_steal_from_a_condition_waiter, reduce="none")
    dpor = interleavings.check(_steal_from_a_condition_waiter)
    assert plain.violation is not None and plain.violation.kind == "assertion"
    assert dpor.violation is not None and dpor.violation.kind == "assertion"


def _two_getters_then_a_put():
    q = queue.SimpleQueue()
    got = {}

    def c(i):
        got[i] = q.get()

    t1 = threading.Thread(target=c, args=(1,), name="c1")
    t1.start()
    time.sleep(0.1)  # virtual: c1 waits in get
    t2 = threading.Thread(target=c, args=(2,), name="c2")
    t2.start()
    time.sleep(0.1)  # virtual: c2 waits behind it
    q.put("a")
    t1.join()  # 3.13 hands "a" to c1, which waited longest
    q.put("b")
    t2.join()
    assert got == {1: "a", 2: "b"}


@pytest.mark.skipif(sys.version_info < (3, 13), reason="3.11's and 3.12's C SimpleQueue wakes any getter")
def test_a_simple_queue_put_is_handed_to_the_longest_waiting_getter_on_3_13():
    # (The fresh-eyes review.) Any blocked getter could take a put's item: a false deadlock on 3.13, whose
    # SimpleQueue hands the item to the getter parked longest (20 of 20 real runs finish).
    r = interleavings.check(_two_getters_then_a_put)
    assert r.verdict == "ok" and r.exhaustive
    assert interleavings.check(_two_getters_then_a_put, reduce="none").verdict == "ok"


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="3.13 hands the item to the longest waiter")
def test_before_3_13_any_simple_queue_getter_may_take_a_put():
    r = interleavings.check(_two_getters_then_a_put)
    assert r.violation is not None and r.violation.kind == "deadlock"

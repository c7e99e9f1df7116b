"""The real-code checker's thirteenth-round fixes (docs/hardening.md, "A thirteenth round").

Each test failed on the code before its fix (on Python 3.11 or 3.12 for the queue's ``shutdown``).
It runs on 3.12 and 3.13 too in CI: what the standard library has differs between them.
"""

import concurrent.futures
import logging
import queue
import threading

import pytest

from safeprefetch import interleavings

pytestmark = pytest.mark.timeout(120)

REAL_QUEUE_HAS_SHUTDOWN = hasattr(queue.Queue, "shutdown")
REAL_MODULE_HAS_SHUTDOWN = hasattr(queue, "ShutDown")


def test_2_a_queue_under_the_check_has_shutdown_exactly_where_the_real_one_has():
    # Before: on 3.11 and 3.12 the drop-in had shutdown() and queue.ShutDown: code calling them passed the
    # check and failed for real with AttributeError.
    seen = []

    def body():
        seen.append((hasattr(queue.Queue(), "shutdown"), hasattr(queue.LifoQueue(), "shutdown"),
                     hasattr(queue, "ShutDown")))

    assert interleavings.check(body).verdict == "ok"
    assert set(seen) == {(REAL_QUEUE_HAS_SHUTDOWN, REAL_QUEUE_HAS_SHUTDOWN, REAL_MODULE_HAS_SHUTDOWN)}
    assert hasattr(queue, "ShutDown") == REAL_MODULE_HAS_SHUTDOWN  # nothing left behind


@pytest.mark.skipif(REAL_QUEUE_HAS_SHUTDOWN, reason="the real Queue has shutdown from Python 3.13")
def test_2_calling_shutdown_before_3_13_fails_under_the_check_as_it_fails_for_real():
    def body():
        queue.Queue().shutdown()

    r = interleavings.check(body)
    assert r.verdict == "uncaught_exception"
    assert "AttributeError" in r.violation.message and "shutdown" in r.violation.message


def test_3_active_count_and_enumerate_see_the_body_as_the_only_thread():
    # Before: the body's thread `main` was counted beside the interpreter's main thread (2, not 1), and a
    # joined thread stayed listed until its OS thread got round to leaving threading's table.
    seen = []

    def body():
        me = threading.current_thread()
        seen.append((threading.active_count(), threading.enumerate() == [me]))
        t = threading.Thread(target=lambda: None, name="w")
        t.start()
        t.join()
        seen.append((threading.active_count(), threading.enumerate() == [me]))

    r = interleavings.check(body)
    assert (r.verdict, r.exhaustive) == ("ok", True)
    assert set(seen) == {(1, True)}


def test_3_active_count_races_with_a_thread_ending_and_the_checker_shows_it():
    def body():
        t = threading.Thread(target=lambda: None, name="w")
        t.start()
        n = threading.active_count()
        t.join()
        assert n == 2, n

    r = interleavings.check(body)
    assert r.verdict == "assertion" and "AssertionError: 1" in r.violation.message
    labels = [s.step.split(" @")[0] for s in r.violation.trace]
    assert labels == ["begin main", "start w", "begin w", "exit w", "threading.active_count", "join w"]


def test_3_enumerate_races_with_a_thread_another_thread_starts():
    # The first version read the threads that existed at the call: a thread started later by another thread
    # was independent of it for DPOR, which said "ok, exhaustive" where reduce="none" finds the assertion.
    def body():
        def a_fn():
            c = threading.Thread(target=lambda: None, name="c")
            c.start()
            c.join()

        a = threading.Thread(target=a_fn, name="a")
        a.start()
        names = [t.name for t in threading.enumerate()]
        a.join()
        assert len(names) < 3, names

    for reduce in ("dpor", "none"):
        r = interleavings.check(body, reduce=reduce)
        assert r.verdict == "assertion" and "['main', 'a', 'c']" in r.violation.message, reduce


def _release_unheld(kind):
    def body():
        lock = getattr(threading, kind)()
        try:
            lock.release()  # an idempotent release: Python raises, the code expects it
        except RuntimeError:
            pass
    return body


@pytest.mark.parametrize("kind", ["Lock", "RLock"])
def test_4_a_caught_release_of_an_unheld_lock_is_python_s_rule_under_lock_release_any(kind):
    # Before: non_owner_release, whatever lock_release said.
    assert interleavings.check(_release_unheld(kind), lock_release="any").verdict == "ok"
    assert interleavings.check(_release_unheld(kind)).verdict == "non_owner_release"


def test_4_an_uncaught_one_is_still_an_error_under_lock_release_any():
    def body():
        threading.Lock().release()

    r = interleavings.check(body, lock_release="any")
    assert r.verdict == "uncaught_exception" and "release unlocked lock" in r.violation.message


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def records():
    handler = Records()
    logging.getLogger().addHandler(handler)
    try:
        yield handler.records
    finally:
        logging.getLogger().removeHandler(handler)


def test_5_unwinding_an_executor_logs_no_exception_in_worker_on_correct_code(records):
    # Before: concurrent.futures logged "Exception in worker" (CRITICAL, with the checker's Aborted) for
    # worker threads the checker unwound at the end of a pruned run: 4 records in these 30 schedules.
    def body():
        lock = threading.Lock()
        box = []

        def task(i):
            with lock:
                box.append(i)

        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            for i in range(3):
                ex.submit(task, i)
        assert sorted(box) == [0, 1, 2]

    r = interleavings.check(body, max_schedules=30)
    assert r.verdict == "ok"
    assert [rec.getMessage() for rec in records] == []


def test_5_a_real_error_the_code_logs_is_still_logged(records):
    def body():
        def work():
            try:
                raise ValueError("real")
            except BaseException:
                logging.getLogger("user").exception("work failed")

        t = threading.Thread(target=work)
        t.start()
        t.join()

    assert interleavings.check(body).verdict == "ok"
    assert records and {rec.getMessage() for rec in records} == {"work failed"}
    assert all(rec.exc_info[0] is ValueError for rec in records)


def test_5_code_that_keeps_what_it_caught_is_told_the_checker_ended_the_run():
    caught = []

    def body():
        never = threading.Event()

        def waiter():
            try:
                never.wait()
            except BaseException as e:  # the checker's unwinding of the deadlocked run reaches here
                caught.append(e)
                raise

        t = threading.Thread(target=waiter, name="waiter")
        t.start()
        t.join()

    assert interleavings.check(body).verdict == "deadlock"
    assert caught and {str(e) for e in caught} == {
        "the interleaving checker ended this run; not an error of the code under test"}

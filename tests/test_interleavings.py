"""The controlled scheduler, its drop-ins and its checks, on small pieces of plain threading code.

Every test body here is ordinary ``threading``/``queue``/``time`` code; the
check patches the drop-ins in while it runs. Each check kind has a body that
shows it and a fixed body that does not, so no test here could pass with a
checker that always says "ok" or always says "violation".
"""

import json
import queue
import threading
import time
from threading import Lock as DirectLock

import pytest
from _threads import run

from safeprefetch import interleavings
from safeprefetch.interleavings import Interrupt

pytestmark = pytest.mark.timeout(120)


# -- the drop-ins ---------------------------------------------------------------------------------

def test_the_drop_ins_are_in_place_only_during_a_check_and_only_for_controlled_threads():
    seen = {}

    def body():
        seen["lock"] = repr(threading.Lock())
        seen["queue"] = repr(queue.Queue())
        seen["direct"] = repr(DirectLock())  # imported by name before the check
        seen["t0"] = time.monotonic()
        time.sleep(3600)  # virtual: an hour passes in no real time
        seen["t1"] = time.monotonic()

    r = interleavings.check(body)
    assert r.verdict == "ok" and r.exhaustive
    assert all(seen[k].startswith("<controlled") for k in ("lock", "queue", "direct")), seen
    assert seen["t1"] - seen["t0"] == pytest.approx(3600)
    assert not repr(threading.Lock()).startswith("<controlled")
    assert threading.Lock is DirectLock


@pytest.mark.parametrize("kind", ["Lock", "RLock", "Semaphore", "BoundedSemaphore"])
def test_mutual_exclusion_holds_for_every_lock_like_drop_in(kind):
    def body():
        lock = getattr(threading, kind)()
        inside = []

        def work():
            with lock:
                inside.append(1)
                assert len(inside) == 1
                time.sleep(0.1)  # a scheduling point inside the critical section
                inside.pop()

        run(threading.Thread(target=work), threading.Thread(target=work))

    assert interleavings.check(body).verdict == "ok"


def test_a_semaphore_of_two_admits_two():
    def body():
        sem = threading.Semaphore(2)
        inside = []
        peak = []

        def work():
            with sem:
                inside.append(1)
                peak.append(len(inside))
                time.sleep(0.1)
                inside.pop()

        run(*[threading.Thread(target=work) for _ in range(3)])
        assert max(peak) <= 1, "two were inside at once"

    r = interleavings.check(body)
    assert r.verdict == "assertion" and "two were inside" in r.violation.message


def test_rlock_is_reentrant_and_bounded_semaphore_refuses_an_extra_release():
    def body():
        r = threading.RLock()
        with r:
            with r:
                pass
        b = threading.BoundedSemaphore(1)
        b.acquire()
        b.release()
        b.release()

    r = interleavings.check(body)
    assert r.verdict == "uncaught_exception" and "ValueError" in r.violation.message


def test_event_barrier_and_queues_work_as_the_standard_library_says():
    def body():
        ev = threading.Event()
        bar = threading.Barrier(2)
        lifo = queue.LifoQueue()
        simple = queue.SimpleQueue()
        got = []

        def other():
            ev.wait()
            bar.wait()
            got.append(simple.get())

        t = threading.Thread(target=other)
        t.start()
        lifo.put(1)
        lifo.put(2)
        assert lifo.get() == 2
        ev.set()
        bar.wait()
        simple.put("x")
        t.join()
        assert got == ["x"]
        assert not t.is_alive()
        with pytest.raises(queue.Empty):
            queue.Queue().get(timeout=5)  # a virtual timeout

    r = interleavings.check(body)
    assert r.verdict == "ok" and r.exhaustive and r.states >= 2


@pytest.mark.skipif(not hasattr(queue.Queue, "shutdown"), reason="Queue.shutdown is new in Python 3.13")
def test_queue_shutdown_drains_then_raises_shutdown():
    def body():
        q = queue.Queue()
        q.put(1)
        q.shutdown()
        assert q.get() == 1
        with pytest.raises(interleavings.ShutDown):
            q.get()
        with pytest.raises(interleavings.ShutDown):
            q.put(2)

    assert interleavings.check(body).verdict == "ok"


def test_a_lock_created_before_the_check_is_refused_with_a_clear_error():
    shared = DirectLock()
    shared.acquire()

    def body():
        shared.acquire()  # a real lock, held: the scheduler cannot see it

    with pytest.raises(interleavings.SchedulerStuck, match="main ran"):
        interleavings.check(body, wall_timeout=0.5)
    shared.release()


# -- the checks ------------------------------------------------------------------------------------

def _handoff(with_predicate):
    def body():
        lock = threading.Lock()
        cond = threading.Condition(lock)
        box = []

        def consumer():
            with cond:
                if with_predicate:
                    while not box:
                        cond.wait()
                else:
                    cond.wait()

        t = threading.Thread(target=consumer, name="consumer")
        t.start()
        with cond:
            box.append(1)
            cond.notify()
        t.join()

    return body


def test_a_notify_before_the_wait_is_a_lost_wakeup_and_the_predicate_loop_fixes_it():
    bad = interleavings.check(_handoff(False))
    assert bad.verdict == "lost_wakeup"
    assert "woke nobody" in bad.violation.message
    assert bad.preemptions == 0 and len(bad.trace) <= 8
    good = interleavings.check(_handoff(True))
    assert good.verdict == "ok" and good.exhaustive


def test_lock_order_inversion_is_a_deadlock_with_one_preemption():
    def body():
        a, b = threading.Lock(), threading.Lock()

        def one():
            with a, b:
                pass

        def two():
            with b, a:
                pass

        run(threading.Thread(target=one, name="t1"), threading.Thread(target=two, name="t2"))

    r = interleavings.check(body)
    assert r.verdict == "deadlock" and r.preemptions == 1
    assert {t for t, _ in r.stuck} >= {"t1", "t2", "main"}
    assert interleavings.check(body, preemption_bound=0).verdict == "ok"  # needs one preemption


def test_an_exception_in_a_thread_and_a_failed_assertion_in_the_body():
    def raises():
        run(threading.Thread(target=lambda: 1 / 0, name="worker"))

    r = interleavings.check(raises)
    assert r.verdict == "uncaught_exception" and "worker raised ZeroDivisionError" in r.violation.message

    def asserts():
        assert 1 == 2, "wrong"

    r = interleavings.check(asserts)
    assert r.verdict == "assertion" and "wrong" in r.violation.message


def test_a_thread_alive_when_the_body_returns_is_a_leak_unless_allowed():
    def body():
        ev = threading.Event()
        threading.Thread(target=ev.wait, name="straggler", daemon=True).start()

    r = interleavings.check(body)
    assert r.verdict == "leaked_thread" and "straggler" in r.violation.message
    assert interleavings.check(body, allow_alive=("straggler",)).verdict == "ok"


def test_a_poll_loop_that_never_ends_is_a_hang_in_virtual_time():
    def body():
        stop = threading.Event()
        while not stop.wait(1.0):
            pass

    r = interleavings.check(body, time_limit=60)
    assert r.verdict == "hang" and "virtual time" in r.violation.message


def test_releasing_a_lock_held_by_another_thread_is_a_non_owner_release():
    def body():
        lock = threading.Lock()
        lock.acquire()
        t = threading.Thread(target=lock.release, name="thief")
        t.start()
        t.join()

    r = interleavings.check(body)
    assert r.verdict == "non_owner_release" and "thief released lock" in r.violation.message
    assert interleavings.check(body, lock_release="any").verdict == "ok"


def test_line_mode_finds_a_lost_update_that_synchronization_granularity_cannot_see():
    class Counter:
        n = 0

    def body():
        c = Counter()

        def inc():
            v = c.n
            c.n = v + 1

        run(threading.Thread(target=inc), threading.Thread(target=inc))
        assert c.n == 2, f"n={c.n}"

    assert interleavings.check(body).verdict == "ok"
    r = interleavings.check(body, lines=True)
    assert r.verdict == "assertion" and "n=1" in r.violation.message


def test_notify_any_and_spurious_wakeups_are_search_dimensions():
    def body():
        lock = threading.Lock()
        cond = threading.Condition(lock)
        flag = []

        def waiter():
            with cond:
                if not flag:  # an ``if``: correct only without spurious wakeups
                    cond.wait()
                assert flag, "woke with nothing to do"

        t = threading.Thread(target=waiter, name="waiter")
        t.start()
        with cond:
            flag.append(1)
            cond.notify()
        t.join()

    assert interleavings.check(body).verdict == "ok"
    r = interleavings.check(body, spurious="on")
    assert r.verdict == "uncaught_exception" and any(s.branch == "spurious" for s in r.trace.steps)


# -- exploration, replay and results ------------------------------------------------------------------

def _racy_pair():
    a, b = threading.Lock(), threading.Lock()
    got = []

    def one():
        with a:
            got.append(1)

    def two():
        with b:
            got.append(2)
        with a:
            got.append(3)

    run(threading.Thread(target=one, name="t1"), threading.Thread(target=two, name="t2"))


def test_dpor_runs_fewer_schedules_than_plain_dfs_and_reaches_the_same_outcomes():
    from safeprefetch._interleave.check import outcomes

    full, n_full = outcomes(_racy_pair, reduce="none")
    reduced, n_reduced = outcomes(_racy_pair, reduce="dpor")
    assert reduced == full
    assert n_reduced < n_full


def test_a_counterexample_replays_from_its_json_and_a_different_program_is_nondeterministic():
    bad = _handoff(False)
    r = interleavings.check(bad)
    text = json.dumps(r.to_json())
    again = interleavings.replay(bad, json.loads(text))
    assert again.verdict == r.verdict and [s.step for s in again.trace.steps] == [s.step for s in r.trace.steps]
    with pytest.raises(interleavings.Nondeterministic):
        interleavings.replay(_handoff(True), json.loads(text))


def test_the_result_is_frozen_json_and_renders_with_the_checkers_table_and_svg(tmp_path):
    r = interleavings.check(_handoff(False))
    with pytest.raises(AttributeError):
        r.verdict = "ok"
    d = r.to_json()
    assert d["verdict"] == "lost_wakeup" and d["search"]["kind"] == "code"
    assert all({"thread", "step", "file", "line"} <= set(step) for step in d["trace"])
    assert any(step["file"] and step["file"].endswith("test_interleavings.py") for step in d["trace"])
    text = interleavings.render(r)
    assert "lost_wakeup" in text and "consumer" in text and "wait cond @test_interleavings.py" in text
    interleavings.write_svg(r, tmp_path / "t.svg")
    assert (tmp_path / "t.svg").read_text().startswith("<svg")


@pytest.mark.parametrize("strategy", ["random", "pct", "hypothesis"])
def test_the_samplers_find_the_inversion_and_are_reproducible_by_seed(strategy):
    def body():
        a, b = threading.Lock(), threading.Lock()

        def one():
            with a, b:
                pass

        def two():
            with b, a:
                pass

        run(threading.Thread(target=one, name="t1"), threading.Thread(target=two, name="t2"))

    r1 = interleavings.check(body, strategy=strategy, max_schedules=300, seed=3)
    r2 = interleavings.check(body, strategy=strategy, max_schedules=300, seed=3)
    assert r1.verdict == r2.verdict == "deadlock"
    assert r1.schedules_to_bug == r2.schedules_to_bug
    assert r1.seed == 3


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="strategy"):
        interleavings.check(lambda: None, strategy="bfs")
    with pytest.raises(ValueError, match="notify"):
        interleavings.check(lambda: None, notify="lifo")
    with pytest.raises(TypeError, match="callable"):
        interleavings.check(42)
    with pytest.raises(ValueError, match="preemption_bound"):
        interleavings.check(lambda: None, preemption_bound=-1)
    with pytest.raises(TypeError, match="unknown options"):
        interleavings.test(preemption=1)


# -- interrupts ----------------------------------------------------------------------------------------

class Closable:
    """A worker that a signal handler may close; ``reentrant`` says whether close() takes the lock the
    interrupted code may hold."""

    def __init__(self, reentrant_safe):
        self.lock = threading.Lock()
        self.closed = False
        self.safe = reentrant_safe
        self.pending = False

    def work(self):
        with self.lock:
            time.sleep(0.01)  # a scheduling point while the lock is held
            if self.pending:
                self.closed = True

    def close(self):
        if self.safe:
            self.pending = True  # record the request; the lock holder carries it out
            if self.lock.acquire(blocking=False):
                self.closed = True
                self.lock.release()
        else:
            with self.lock:
                self.closed = True


def _closable_body(safe, box):
    def body():
        c = Closable(safe)
        box[0] = c
        c.work()

    return body


@pytest.mark.parametrize("safe, verdict", [(False, "deadlock"), (True, "ok")])
def test_an_interrupt_that_takes_the_lock_its_thread_holds_deadlocks(safe, verdict):
    box = [None]
    intr = Interrupt(lambda: box[0].close(), threads="main", name="signal handler")
    r = interleavings.check(_closable_body(safe, box), interrupts=(intr,))
    assert r.verdict == verdict
    if verdict == "deadlock":
        assert any(s.step == "interrupt: signal handler" for s in r.trace.steps)
        assert "itself" in r.violation.message


# -- the decorator and the command ---------------------------------------------------------------------

@interleavings.test(expect="lost_wakeup")
def test_the_decorator_checks_a_broken_body_against_its_expected_verdict():
    _handoff(False)()


@interleavings.test()
def test_the_decorator_proves_a_correct_body():
    _handoff(True)()


def test_the_decorator_fails_with_the_rendered_trace():
    @interleavings.test()
    def broken():
        _handoff(False)()

    with pytest.raises(interleavings.InterleavingFailure, match="lost_wakeup"):
        broken()


CLI_FILE = '''
import threading
from safeprefetch import interleavings


def lost():
    lock = threading.Lock()
    cond = threading.Condition(lock)

    def consumer():
        with cond:
            cond.wait()

    t = threading.Thread(target=consumer, name="consumer")
    t.start()
    with cond:
        cond.notify()
    t.join()


@interleavings.test(preemption_bound=1)
def fine():
    t = threading.Thread(target=lambda: None, name="w")
    t.start()
    t.join()
'''


def test_check_code_command_exit_codes_json_and_replay(tmp_path, capsys):
    from safeprefetch._cli.main import main

    f = tmp_path / "test_mine.py"
    f.write_text(CLI_FILE)
    assert main(["check-code", f"{f}::lost", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "lost_wakeup"
    (tmp_path / "t.json").write_text(json.dumps(out))
    assert main(["check-code", f"{f}::lost", "--replay", str(tmp_path / "t.json")]) == 1
    assert "lost_wakeup" in capsys.readouterr().out
    assert main(["check-code", f"{f}::fine"]) == 0
    assert "verdict: ok" in capsys.readouterr().out
    assert main(["check-code", f"{f}::lost", "--strategy", "random", "--max-schedules", "1", "--seed", "0"]) in (1, 3)
    capsys.readouterr()
    assert main(["check-code", f"{f}::nothing"]) == 2
    assert "has no 'nothing'" in capsys.readouterr().err
    assert main(["check-code", str(f)]) == 2


def test_the_tutorial_in_the_docs_runs_and_finds_the_lost_wakeup(capsys):
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "interleavings.md").read_text()
    code = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    ns = {"__name__": "tutorial"}
    exec(compile(code, "interleavings.md", "exec"), ns)
    result = ns["result"]
    assert result.verdict == "lost_wakeup" and len(result.trace) == 8
    assert "lost_wakeup" in capsys.readouterr().out


def test_bench_code_quick_measures_proofs_and_bugs(capsys):
    from safeprefetch._cli.main import main

    assert main(["bench-code", "--quick", "--json", "--no-prefetcher"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["interleave_test"].startswith(("skipped", "available"))
    assert all(r["verdict"] == "ok" and r["covered"] for r in out["proofs"])
    assert {b["bug"] for b in out["bugs"]} == {"one_cond_signal", "if_not_while", "no_predicate_wait",
                                               "close_without_wake"}
    assert all(b["verdict"] != "ok" and b["trace"] > 0 for b in out["bugs"])


def test_the_readme_example_runs():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "interleavings.test" in b)
    ns = {"handoff": _handoff(True)}
    exec(block, ns)
    ns["test_handoff"]()
    ns["handoff"] = _handoff(False)
    exec(block, ns)
    with pytest.raises(interleavings.InterleavingFailure, match="lost_wakeup"):
        ns["test_handoff"]()


def test_the_public_module_exports_what_it_lists():
    for name in interleavings.__all__:
        assert hasattr(interleavings, name), name
    assert interleavings.check.__module__.startswith("safeprefetch.")


_LAZY: dict = {}


def test_lazy_initialization_on_the_first_run_is_not_nondeterminism():
    """A cache filled on the first call (one more lock operation, in that run only) used to stop the
    search with Nondeterministic at its second schedule; the warm-up run absorbs it."""
    _LAZY.clear()

    def cached(shared):
        if "lock" not in _LAZY:
            init = threading.Lock()
            with init:  # a scheduling point only the very first run reaches
                _LAZY["lock"] = True
        with shared:  # a race, so there is more than one schedule to run
            pass

    def body():
        shared = threading.Lock()
        run(threading.Thread(target=cached, args=(shared,), name="a"),
            threading.Thread(target=cached, args=(shared,), name="b"))

    with pytest.warns(interleavings.InterleavingWarning, match="the first run of the body took other steps"):
        r = interleavings.check(body)  # (the nineteenth round: the first run's extra work is not checked, said so)
    assert r.verdict == "ok" and r.exhaustive and r.states > 1


def test_one_fresh_value_bound_to_two_names_is_one_object_per_schedule():
    import types

    from safeprefetch._interleave.check import Fresh

    a, b = types.ModuleType("a"), types.ModuleType("b")
    a.q = b.q = None
    fresh = Fresh(queue.SimpleQueue)
    seen = []

    def body():
        seen.append(a.q is b.q and a.q is not None)

    r = interleavings.check(body, patch_globals={(a, "q"): fresh, (b, "q"): fresh})
    assert r.verdict == "ok" and seen and all(seen)
    assert a.q is None and b.q is None  # put back afterwards

"""Bugs an adversarial tester found in the code checker, each pinned by a test that failed before its fix.

Each test states the behaviour of real ``threading`` the checker got wrong
-- a schedule it never tried (a false "ok"), a schedule real Python cannot
take (a false violation), or state it left behind -- and checks it on the
smallest body that showed it. Where the fix is in the explorer's reduction,
the test also compares DPOR against plain DFS on a few small programs of the
same shape: the two must reach the same verdicts and the same outcomes.
"""

import threading
import time
import types

import pytest
from _threads import run

from safeprefetch import interleavings
from safeprefetch._interleave.check import outcomes

pytestmark = pytest.mark.timeout(120)


# -- a failed try-lock is a schedule of its own (DPOR missed it) ------------------------------------

TRY_LOCKS = {
    "blocking=False": lambda lock: lock.acquire(blocking=False),
    "timeout=0": lambda lock: lock.acquire(timeout=0),
}


def _dropped_work(kind, try_lock, hold=lambda: None):
    """A worker that drops its work when its try-lock fails, while ``main`` takes the lock once."""
    def body():
        lock = getattr(threading, kind)()  # looked up in the body: the check patches it in
        done = []

        def worker():
            if try_lock(lock):
                try:
                    done.append(1)
                finally:
                    lock.release()

        t = threading.Thread(target=worker, name="worker")
        t.start()
        with lock:
            hold()
        t.join()
        assert done == [1], "the worker's try-lock failed: its work was dropped"

    return body


@pytest.mark.parametrize("kind", ["Lock", "RLock"])
@pytest.mark.parametrize("try_name", sorted(TRY_LOCKS))
def test_a_try_lock_that_fails_while_another_thread_holds_the_lock_is_found_by_dpor(kind, try_name):
    body = _dropped_work(kind, TRY_LOCKS[try_name])
    r = interleavings.check(body)
    assert r.verdict == "assertion", interleavings.render(r)
    assert "dropped" in r.violation.message
    assert interleavings.check(body, reduce="none").verdict == "assertion"


def test_a_timed_acquire_that_times_out_while_the_lock_is_held_is_found_by_dpor():
    body = _dropped_work("Lock", lambda lock: lock.acquire(timeout=0.5), hold=lambda: time.sleep(1))
    r = interleavings.check(body)
    assert r.verdict == "assertion", interleavings.render(r)


def _two_try_lockers():
    lock = threading.Lock()
    got = []

    def worker():
        if lock.acquire(blocking=False):
            got.append(threading.current_thread().name)
            lock.release()

    run(threading.Thread(target=worker, name="a"), threading.Thread(target=worker, name="b"))
    assert len(got) == 2, f"only {got} got the lock"


def _try_lock_against_a_semaphore_guarded_holder():
    lock = threading.RLock()
    sem = threading.Semaphore(1)

    def holder():
        with sem:
            with lock:
                pass

    def trier():
        if lock.acquire(timeout=0):
            with sem:
                pass
            lock.release()
        else:
            raise RuntimeError("the try-lock failed")

    run(threading.Thread(target=holder, name="holder"), threading.Thread(target=trier, name="trier"))


def _try_lock_then_a_blocking_lock():
    lock = threading.Lock()
    tried = []

    def worker():
        tried.append(lock.acquire(False))
        if tried[-1]:
            lock.release()
        with lock:
            pass

    t = threading.Thread(target=worker, name="worker")
    t.start()
    with lock:
        pass
    t.join()
    assert tried == [True]


@pytest.mark.parametrize("body", [_dropped_work("Lock", TRY_LOCKS["blocking=False"]), _two_try_lockers,
                                  _try_lock_against_a_semaphore_guarded_holder, _try_lock_then_a_blocking_lock],
                         ids=["dropped_work", "two_try_lockers", "semaphore_guarded_holder", "try_then_block"])
def test_dpor_and_plain_dfs_agree_on_try_lock_programs(body):
    assert interleavings.check(body).verdict == interleavings.check(body, reduce="none").verdict != "ok"
    full, _ = outcomes(body, reduce="none")
    reduced, _ = outcomes(body, reduce="dpor")
    assert reduced == full


# -- a timed-out condition wait takes its lock back only once it is free ----------------------------

def _timed_wait_under_a_held_lock(wait):
    """``waiter`` times out on a condition while ``main`` holds its lock, asleep, for a whole second; every
    schedule must see the wait return False, after main let the lock go."""
    def body():
        seen = {}
        cond = threading.Condition()
        inside = []

        def waiter():
            with cond:
                seen["woke"] = wait(cond)
                seen["at"] = time.monotonic()
                inside.append("waiter")
                assert inside == ["waiter"], f"two threads inside the lock: {inside}"
                inside.remove("waiter")

        t = threading.Thread(target=waiter, name="waiter")
        t.start()
        time.sleep(0.05)  # virtual: the waiter is asleep on cond by now
        with cond:
            inside.append("main")
            time.sleep(1.0)  # the waiter's 0.1 s timeout passes while main holds the lock
            assert inside == ["main"], f"two threads inside the lock: {inside}"
            inside.remove("main")
            seen["released"] = time.monotonic()
        t.join()
        assert seen["woke"] is False, "the wait did not say it timed out"
        assert seen["at"] >= seen["released"], "the waiter returned before main let the lock go"

    return body


@pytest.mark.parametrize("wait", [lambda c: c.wait(0.1), lambda c: c.wait_for(lambda: False, timeout=0.1)],
                         ids=["wait", "wait_for"])
def test_a_condition_wait_that_times_out_waits_for_the_lock_before_returning(wait):
    r = interleavings.check(_timed_wait_under_a_held_lock(wait))
    assert r.verdict == "ok" and r.exhaustive, interleavings.render(r)


def test_a_timed_out_waiter_whose_lock_is_never_released_is_a_deadlock_on_the_lock():
    def body():
        cond = threading.Condition()
        never = threading.Event()

        def waiter():
            with cond:
                cond.wait(0.1)

        t = threading.Thread(target=waiter, name="waiter")
        t.start()
        time.sleep(0.05)
        with cond:
            never.wait()
        t.join()

    r = interleavings.check(body)
    assert r.verdict == "deadlock", interleavings.render(r)
    assert "waiter waits for" in r.violation.message and "held by main" in r.violation.message


# -- line mode splits a one-line check-then-delete --------------------------------------------------
#
# Each check and its delete share one line, so no line event falls between them; the call in the check
# is where CPython may switch threads. Only a point before the delete lets the other thread delete first.

class _Box:
    pass


def _delete_item(d):
    if "k" in d: del d[str("k")]  # noqa: E701 - one line on purpose


def _delete_attribute(box):
    if hasattr(box, "k"): del box.k  # noqa: E701


@pytest.mark.parametrize("what", ["item", "attribute"])
def test_line_mode_puts_a_point_before_a_delete_so_a_one_line_check_then_delete_races(what):
    def body():
        d, box = {"k": 1}, _Box()
        box.k = 1
        worker = {"item": lambda: _delete_item(d), "attribute": lambda: _delete_attribute(box)}[what]
        run(threading.Thread(target=worker, name="a"), threading.Thread(target=worker, name="b"))

    r = interleavings.check(body, lines=True, preemption_bound=1)
    assert r.verdict == "uncaught_exception", interleavings.render(r)
    assert ("KeyError" if what == "item" else "AttributeError") in r.violation.message


# -- a primitive made lazily during a check: adopted by later runs, real after the check ------------

_lazy: dict = {}


def _lazily(kind, make):
    """``make()`` the first time a check's body asks for ``kind``, as a lazily initialized library does."""
    if kind not in _lazy:
        _lazy[kind] = make()
    return _lazy[kind]


def _lazy_body(kind, make, use):
    def body():
        obj = _lazily(kind, make)
        run(*[threading.Thread(target=use, args=(obj,), name=f"t{i}") for i in range(2)])

    return body


def _hold(lock):
    with lock:
        pass


def _notify_self(cond):
    with cond:
        cond.notify_all()
        cond.wait(0.1)


def _pass_through(q):
    q.put(1)
    q.get()


LAZY = {
    "Lock": (lambda: threading.Lock(), _hold),
    "RLock": (lambda: threading.RLock(), _hold),
    "Condition": (lambda: threading.Condition(), _notify_self),
    "Semaphore": (lambda: threading.Semaphore(1), _hold),
    "Event": (lambda: threading.Event(), lambda e: (e.set(), e.wait())),
    "Queue": (lambda: __import__("queue").Queue(), _pass_through),
}


@pytest.mark.parametrize("kind", sorted(LAZY))
def test_a_primitive_made_lazily_in_the_warm_up_is_adopted_by_every_counted_run(kind):
    _lazy.pop(kind, None)
    r = interleavings.check(_lazy_body(kind, *LAZY[kind]))
    assert r.verdict == "ok" and r.exhaustive, interleavings.render(r)


def _check_making_it_lazily(kind):
    _lazy.pop(kind, None)
    r = interleavings.check(_lazy_body(kind, *LAZY[kind]))
    assert r.verdict == "ok", interleavings.render(r)
    return _lazy[kind]


def _in_a_real_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


@pytest.mark.parametrize("kind", ["Lock", "RLock", "Semaphore"])
def test_after_the_check_a_lazily_made_lock_excludes_real_threads(kind):
    lock = _check_making_it_lazily(kind)
    assert lock.acquire()
    try:
        assert _in_a_real_thread(lambda: lock.acquire(blocking=False)) is False
        assert _in_a_real_thread(lambda: lock.acquire(timeout=0.01)) is False
    finally:
        lock.release()
    assert _in_a_real_thread(lambda: (lock.acquire(blocking=False), lock.release())[0]) is True


def test_after_the_check_a_lazily_made_condition_event_and_queue_work_between_real_threads():
    cond, event, q = (_check_making_it_lazily(k) for k in ("Condition", "Event", "Queue"))
    event.clear()
    woke = []

    def waiter():
        with cond:
            woke.append(cond.wait_for(event.is_set, timeout=30))

    t = threading.Thread(target=waiter)
    t.start()
    with cond:
        event.set()
        cond.notify_all()  # or the waiter sees the event set before it waits
    t.join()
    assert woke == [True]
    q.put("x")
    assert _in_a_real_thread(q.get) == "x"
    assert q.qsize() == 0


def test_a_lazily_made_lock_has_the_fork_hook_of_a_real_one():
    lock = _check_making_it_lazily("Lock")
    lock.acquire()
    lock._at_fork_reinit()  # what os.register_at_fork runs in a child
    assert lock.acquire(blocking=False)
    lock.release()


def test_a_lazily_made_lock_left_held_by_an_ended_run_is_a_clear_error():
    _lazy.pop("held", None)

    def body():
        _lazily("held", threading.Lock).acquire()  # never released: the next run cannot start the same

    r = interleavings.check(body)
    assert r.verdict == "uncaught_exception", interleavings.render(r)
    assert "held by main" in r.violation.message and "Fresh(factory)" in r.violation.message


# -- the body's threads are non-daemon unless asked ------------------------------------------------

def test_threads_the_body_creates_are_non_daemon_by_default_as_in_real_python():
    def body():
        seen = {}
        plain = threading.Thread(target=lambda: seen.setdefault("inner", threading.current_thread().daemon))
        asked = threading.Thread(target=lambda: None, daemon=True)
        run(plain, asked)
        assert (plain.daemon, asked.daemon, seen["inner"]) == (False, True, False), (plain.daemon, seen)
        assert not threading.current_thread().daemon

    r = interleavings.check(body)
    assert r.verdict == "ok" and r.exhaustive, interleavings.render(r)


def test_shutdown_code_that_joins_only_non_daemon_threads_is_judged_as_in_real_python():
    def body():
        done = threading.Event()
        worker = threading.Thread(target=done.wait, name="worker")
        worker.start()
        done.set()
        for t in [worker]:
            if not t.daemon:  # daemon threads are left to die with the process
                t.join()

    r = interleavings.check(body)
    assert r.verdict == "ok", interleavings.render(r)


# -- a result replays with the settings it was found with ------------------------------------------

def _poller():
    stop = threading.Event()

    def worker():
        while not stop.is_set():  # nobody sets it: a hang, in virtual time or in steps
            time.sleep(1.0)

    t = threading.Thread(target=worker, name="worker")
    t.start()
    t.join()


@pytest.mark.parametrize("limit", [{"time_limit": 10.0}, {"max_steps": 50}])
def test_a_hang_found_under_a_limit_replays_from_its_json_alone(limit):
    import json

    r = interleavings.check(_poller, **limit)
    assert r.verdict == "hang"
    again = interleavings.replay(_poller, json.loads(json.dumps(r.to_json())))
    assert again.verdict == "hang" and again.trace == r.trace
    assert interleavings.replay(_poller, r.to_json(), **limit).verdict == "hang"  # explicit: the same


_Shared = types.ModuleType("_shared")  # a module whose LOCK was made before the check: a real lock
_Shared.LOCK = threading.Lock()


def _fresh_lock():
    return threading.Lock()


def _worker_first():
    done = []

    def worker():
        with _Shared.LOCK:
            done.append(1)

    t = threading.Thread(target=worker, name="worker")
    t.start()
    with _Shared.LOCK:
        assert not done, "worker ran first"
    t.join()


def test_a_result_found_with_patch_globals_replays_with_them_and_says_so_without():
    swap = {(_Shared, "LOCK"): interleavings.Fresh(_fresh_lock)}
    r = interleavings.check(_worker_first, patch_globals=swap)
    assert r.verdict == "assertion"
    assert interleavings.replay(_worker_first, r.to_json(), patch_globals=swap).verdict == "assertion"
    with pytest.raises(ValueError, match=r"patch_globals \(_shared\.LOCK\)"):
        interleavings.replay(_worker_first, r.to_json())


def test_check_code_replays_a_trace_of_a_test_whose_decorator_sets_a_time_limit(tmp_path, capsys):
    from safeprefetch._cli.main import main

    f = tmp_path / "test_poll.py"
    f.write_text("import threading, time\nfrom safeprefetch import interleavings\n\n"
                 "@interleavings.test(expect='hang', time_limit=10.0)\ndef test_poll():\n"
                 "    stop = threading.Event()\n    t = threading.Thread(target=lambda: [time.sleep(1) for _ in "
                 "iter(stop.is_set, True)])\n    t.start()\n    t.join()\n")
    assert main(["check-code", f"{f}::test_poll", "--json"]) == 1
    (tmp_path / "t.json").write_text(capsys.readouterr().out)
    assert main(["check-code", f"{f}::test_poll", "--replay", str(tmp_path / "t.json")]) == 1
    assert "hang" in capsys.readouterr().out


def test_fresh_is_exported_where_the_docs_say():
    from safeprefetch._interleave.check import Fresh

    assert interleavings.Fresh is Fresh and "Fresh" in interleavings.__all__


# -- a violation is not "exhaustive": the search stopped at it ------------------------------------

@pytest.mark.parametrize("strategy", ["random", "dfs"])
def test_a_found_violation_is_not_reported_as_an_exhaustive_search(strategy):
    from safeprefetch._harness import code_bugs

    r = interleavings.check(code_bugs.if_not_while, strategy=strategy, seed=7, max_schedules=300)
    assert r.verdict == "uncaught_exception"
    assert r.exhaustive is False and r.to_json()["exhaustive"] is False
    header = interleavings.render(r).splitlines()[1]
    assert "exhaustive" not in header and "stopped at this violation" in header, header


# -- bad arguments are named before the body runs -------------------------------------------------

BAD_ARGUMENTS = [
    ("preemption_bound", "2", TypeError), ("max_schedules", "5", TypeError), ("reduce", "bogus", ValueError),
    ("time_budget", "x", TypeError), ("time_budget", 0, ValueError), ("depth", "3", TypeError),
    ("max_steps", 2.5, TypeError), ("allow_alive", 5, TypeError), ("patch_globals", [1], TypeError),
    ("patch_globals", {(int, "x"): 1}, TypeError), ("wall_timeout", "1", TypeError), ("lines", "no", TypeError),
    ("minimize", "no", TypeError), ("seed", 1.5, TypeError), ("interrupts", "Interrupt", TypeError),
]


@pytest.mark.parametrize("option, value, error", BAD_ARGUMENTS, ids=[f"{o}={v!r}" for o, v, _ in BAD_ARGUMENTS])
def test_a_bad_argument_is_named_before_the_body_runs(option, value, error):
    ran = []
    if value == "Interrupt":
        value = interleavings.Interrupt(lambda: None)  # one, not a sequence of them
    with pytest.raises(error, match=option):
        interleavings.check(lambda: ran.append(1), **{option: value})
    assert ran == []


@pytest.mark.parametrize("strategy", ["random", "pct", "hypothesis"])
def test_a_preemption_bound_with_a_sampling_strategy_is_refused_not_ignored(strategy):
    """It was accepted and the result reported preemption_bound=0 while the samples preempted freely."""
    ran = []
    with pytest.raises(ValueError, match="preemption_bound.*dfs"):
        interleavings.check(lambda: ran.append(1), strategy=strategy, preemption_bound=0, max_schedules=5)
    assert ran == []


def _locked_twice(module):
    def body():
        lock = module.shared
        done = []

        def worker():
            with lock:
                done.append(1)

        th = threading.Thread(target=worker)
        th.start()
        with lock:
            pass
        th.join()
        assert done == [1]
    return body


@pytest.mark.parametrize("exists", [True, False], ids=["existing name", "new name"])
def test_a_fresh_global_may_be_a_name_the_module_did_not_have(exists):
    """It raised AttributeError; afterwards the module is as it was (the new name gone again)."""
    module = types.ModuleType("fresh_target")
    if exists:
        module.shared = "before"
    result = interleavings.check(_locked_twice(module),
                                 patch_globals={(module, "shared"): interleavings.Fresh(lambda: threading.Lock())})
    assert result.verdict == "ok", result
    assert vars(module).get("shared", "absent") == ("before" if exists else "absent")


@pytest.mark.parametrize("kind", ["Lock", "RLock", "Semaphore"])
def test_fresh_of_a_threading_class_taken_before_the_check_makes_a_controlled_one(kind):
    """``Fresh(threading.Lock)`` named the real class (looked up before the check patched it): every
    schedule got a real lock, the check saw one schedule and said ok without looking at the others."""
    module = types.ModuleType("fresh_target")
    result = interleavings.check(_locked_twice(module),
                                 patch_globals={(module, "shared"): interleavings.Fresh(getattr(threading, kind))})
    assert result.verdict == "ok", result
    assert result.states >= 2  # the worker first, or main first (a real lock: one schedule)


def test_an_interrupt_with_bad_threads_and_a_body_that_needs_arguments_are_refused_up_front():
    with pytest.raises(TypeError, match="Interrupt.threads"):
        interleavings.Interrupt(lambda: None, threads=5)

    def needs(x):
        pass

    with pytest.raises(TypeError, match="zero-argument callable.*needs"):
        interleavings.check(needs)


def test_a_result_with_an_unbounded_time_limit_is_strict_json_and_replays():
    """The recorded settings wrote time_limit=inf as the bare token Infinity (not JSON); as "inf" it must
    also come back as the float for the replay."""
    import json
    import threading

    from safeprefetch import interleavings

    def body():
        t = threading.Thread(target=lambda: None)
        t.start()
        t.join()
        assert False, "always"

    r = interleavings.check(body, time_limit=float("inf"))
    assert r.verdict != "ok"

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    data = json.loads(json.dumps(r.to_json()), parse_constant=refuse)
    assert data["settings"]["time_limit"] == "inf"
    assert interleavings.replay(body, data).verdict == r.verdict


# -- concurrent.futures: executors under the scheduler -------------------------------------------

def _pool_waiting_on_a_later_task(workers):
    """Task 1 waits for an event that task 2 sets: with one worker, task 2 never runs."""
    import concurrent.futures

    def body():
        event = threading.Event()
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            first = pool.submit(event.wait)
            pool.submit(event.set)
            assert first.result() is True
    return body


def test_a_thread_pool_executor_is_checked_exhaustively_not_called_nondeterministic():
    # ThreadPoolExecutor names its threads from a process-wide count of executors
    # ("ThreadPoolExecutor-7_0"), so every schedule's labels differed and the
    # first replay was reported as Nondeterministic.
    ok = interleavings.check(_pool_waiting_on_a_later_task(2))
    assert (ok.verdict, ok.exhaustive) == ("ok", True)
    again = interleavings.check(_pool_waiting_on_a_later_task(2))
    assert again.states == ok.states  # the same exploration, whatever the process-wide counter says now


def test_a_one_worker_pool_waiting_on_a_later_task_is_a_deadlock():
    r = interleavings.check(_pool_waiting_on_a_later_task(1))
    assert r.verdict == "deadlock"
    assert "ThreadPoolExecutor-1_0 waits for event to be set" in r.violation.message
    assert "start ThreadPoolExecutor-1_0" in [s.step.split(" @")[0] for s in r.violation.trace.steps]


def test_a_thread_the_scheduler_ran_is_finished_to_real_threading_afterwards():
    kept = []

    def body():
        t = threading.Thread(target=lambda: None)
        t.start()
        t.join()
        kept.append(t)

    assert interleavings.check(body).verdict == "ok"
    t = kept[-1]
    assert not t.is_alive()
    t.join()  # it returned under the check; a real join must not raise "before it is started"
    t.join(0.01)
    with pytest.raises(RuntimeError, match="only be started once"):
        t.start()


def test_interpreter_exit_after_checking_an_executor_is_clean():
    # concurrent.futures joins every executor thread it saw from an exit hook: it
    # raised "cannot join thread before it is started" on the threads the
    # scheduler had run.
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import concurrent.futures
        from safeprefetch import interleavings
        def body():
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                assert pool.submit(int, "7").result() == 7
        print(interleavings.check(body).verdict)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "ok", "")


@pytest.mark.parametrize("wall", [float("inf"), 1e12])
def test_wall_timeout_without_a_limit_is_accepted(wall):
    # wall_timeout=inf passed validation and then overflowed the lock's timeout
    # ("timestamp out of range for platform time_t") once the first run waited.
    def body():
        lock = threading.Lock()
        t = threading.Thread(target=lock.acquire)
        t.start()
        t.join()
        assert lock.locked()

    r = interleavings.check(body, wall_timeout=wall)
    assert (r.verdict, r.exhaustive) == ("ok", True)
    assert r.settings["wall_timeout"] == ("inf" if wall == float("inf") else wall)


# -- the third adversarial review of the checker (2026-12-02) --------------------------------------

def _ctrl_c():
    raise KeyboardInterrupt


def test_dpor_tries_a_release_by_another_thread_before_the_acquire():
    # A Lock used as a signal (lock_release="any"): the worker may release it before main's first
    # acquire, which real threads do ("release unlocked lock"). DPOR held a release and a blocking
    # acquire never enabled together, true only of a release by the lock's holder, and said ok.
    def body():
        done = threading.Lock()
        t = threading.Thread(target=done.release, name="worker")
        t.start()
        done.acquire()
        done.acquire()
        t.join()

    # Under lock_release="any" it is what real Python does: the worker's release raises, uncaught.
    results = {red: interleavings.check(body, lock_release="any", reduce=red) for red in ("dpor", "none")}
    assert {red: r.verdict for red, r in results.items()} == {"dpor": "uncaught_exception",
                                                              "none": "uncaught_exception"}
    assert all("thread worker raised RuntimeError: release unlocked lock" in r.violation.message
               for r in results.values())


def test_a_condition_wait_that_timed_out_returns_false_even_if_a_notify_picks_it_later():
    # The waiter times out while main holds the lock; main then notifies before releasing. CPython's
    # waiter is still in the waiter list, so the notify picks it, and wait returns False.
    def body():
        cond = threading.Condition()
        seen = []

        def waiter():
            with cond:
                seen.append(cond.wait(0.2))

        t = threading.Thread(target=waiter, name="waiter")
        t.start()
        time.sleep(0.05)
        with cond:
            time.sleep(0.4)  # past the waiter's deadline, holding the lock
            cond.notify()
        t.join()
        assert seen == [True], seen

    r = interleavings.check(body)
    assert r.verdict == "assertion" and "[False]" in r.violation.message


def test_a_started_thread_is_started_to_threading():
    def body():
        t = threading.Thread(target=lambda: None, name="w")
        t.start()
        with pytest.raises(RuntimeError, match="daemon status of active thread"):
            t.daemon = True
        assert "started" in repr(t) or "stopped" in repr(t)
        t.join()
        assert "stopped" in repr(t)

    r = interleavings.check(body)
    assert (r.verdict, r.exhaustive) == ("ok", True), r.violation


def test_an_event_set_then_cleared_wakes_a_thread_already_waiting():
    # CPython's set() notifies every waiter; one already inside wait() returns True even if clear()
    # follows at once. The checker let the waiter go only while the flag was set: a false deadlock.
    def body():
        e = threading.Event()
        got = []
        t = threading.Thread(target=lambda: got.append(e.wait()), name="waiter")
        t.start()
        time.sleep(0.1)  # virtual time moves only once the waiter blocks: it is inside wait()
        e.set()
        e.clear()
        t.join()
        assert got == [True]

    r = interleavings.check(body)
    assert (r.verdict, r.exhaustive) == ("ok", True), r.violation


def test_an_interrupt_in_a_condition_wait_takes_the_lock_back_before_it_propagates():
    def body():
        cond = threading.Condition()
        box = []

        def consumer():
            try:
                with cond:
                    while not box:
                        cond.wait()
            except KeyboardInterrupt:
                pass

        t = threading.Thread(target=consumer, name="consumer")
        t.start()
        with cond:
            box.append(1)
            cond.notify()
        t.join()

    r = interleavings.check(body, interrupts=(interleavings.Interrupt(_ctrl_c, threads="consumer"),))
    assert (r.verdict, r.exhaustive) == ("ok", True), interleavings.render(r)


def test_an_interrupt_at_a_with_blocks_exit_still_releases_the_lock():
    # An interrupt at the release of a with-block's exit stands for one in the body: its exception
    # reaches __exit__, which releases (in C). The checker raised it from inside __exit__, lock held.
    def body():
        lock = threading.Lock()
        try:
            with lock:
                pass
        except KeyboardInterrupt:
            pass
        try:
            free = lock.acquire(blocking=False)
        except KeyboardInterrupt:
            free = lock.acquire(blocking=False)
        assert free, "KeyboardInterrupt left the lock held"

    r = interleavings.check(body, interrupts=(interleavings.Interrupt(_ctrl_c, threads="main"),))
    assert (r.verdict, r.exhaustive) == ("ok", True), interleavings.render(r)


def test_a_lost_wakeup_reports_no_exception_of_the_checkers_own_unwinding():
    from test_interleavings import _handoff  # a notify before the wait: a lost wakeup

    r = interleavings.check(_handoff(False))
    assert r.verdict == "lost_wakeup" and r.exception is None


@pytest.mark.parametrize("bad, error", [
    (dict(interrupts=None), TypeError), (dict(interrupts=5), TypeError)])
def test_interrupts_that_are_not_a_sequence_are_refused_by_name(bad, error):
    with pytest.raises(error, match="interrupts must be a sequence"):
        interleavings.check(lambda: None, **bad)


@pytest.mark.parametrize("bad, error, match", [
    (dict(name="x"), TypeError, "drop name="), (dict(expect="deadlok"), ValueError, "expect must be one of"),
    (dict(expect=None), ValueError, "expect must be one of")])
def test_a_test_decorator_with_options_it_cannot_honour_is_refused_when_applied(bad, error, match):
    with pytest.raises(error, match=match):
        interleavings.test(**bad)


# -- a Queue's mutex and conditions (they were missing: code that used them died of AttributeError) --


def _clear_under_the_mutex():
    import queue
    q = queue.Queue()
    seen = []

    def producer():
        q.put(1)
        q.put(2)

    def clearer():
        with q.mutex:  # the standard idiom for emptying a queue
            q.queue.clear()
            q.unfinished_tasks = 0

    ths = [threading.Thread(target=producer), threading.Thread(target=clearer)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    seen.append(q.qsize())
    return seen


def test_the_clear_under_the_mutex_idiom_is_checked_and_every_ordering_is_seen():
    sizes = []
    result = interleavings.check(lambda: sizes.extend(_clear_under_the_mutex()), reduce="none")
    assert result.verdict == "ok", result
    assert set(sizes) == {0, 1, 2}  # cleared after no put, after one, after both


def test_a_put_waits_while_another_thread_holds_the_queues_mutex():
    import queue

    def body():
        q = queue.Queue()

        def inspector():
            with q.mutex:
                before = len(q.queue)
                time.sleep(0)  # a scheduling point inside: a put must still not land here
                assert len(q.queue) == before, "a put went in while the mutex was held"

        th = threading.Thread(target=inspector)
        th.start()
        q.put(1)
        th.join()

    assert interleavings.check(body, reduce="none").verdict == "ok"
    assert interleavings.check(body).verdict == "ok"


def test_a_get_by_the_thread_that_holds_the_queues_mutex_is_a_deadlock_as_in_real_python():
    import queue

    def body():
        q = queue.Queue()
        q.put(1)
        with q.mutex:
            q.get()  # the real mutex is a Lock: it waits for itself

    result = interleavings.check(body)
    assert result.verdict == "deadlock", result
    assert "q.mutex" in interleavings.render(result)


def test_code_that_waits_on_not_empty_itself_is_woken_by_a_put():
    import queue

    def body():
        q = queue.Queue()
        got = []

        def consumer():
            with q.not_empty:
                while not q._qsize():
                    q.not_empty.wait()
                got.append(q._get())

        th = threading.Thread(target=consumer)
        th.start()
        q.put("item")
        th.join()
        assert got == ["item"]

    result = interleavings.check(body)
    assert result.verdict == "ok", result
    assert result.states >= 2  # the consumer waits before the put in one, finds the item in another


def test_join_waits_on_all_tasks_done_that_code_resets_under_the_mutex():
    import queue

    def body():
        q = queue.Queue()
        q.put(1)

        def canceller():
            with q.all_tasks_done:  # drop the pending task, as cancellation code does
                q.queue.clear()
                q.unfinished_tasks = 0
                q.all_tasks_done.notify_all()

        th = threading.Thread(target=canceller)
        th.start()
        q.join()
        th.join()

    assert interleavings.check(body).verdict == "ok"


# -- an interrupt while a thread is blocked (a Ctrl-C while the program waits) ----------------------

_ARMED = [False]


def _ctrl_c_when_armed():
    """Ctrl-C, but only inside the region the body arms (elsewhere the interrupt is spent doing nothing)."""
    if _ARMED[0]:
        raise KeyboardInterrupt


def _ctrl_c_then_assume_the_item_came():
    import queue

    def body():
        _ARMED[0] = False
        q = queue.Queue()
        th = threading.Thread(target=lambda: q.put("item"))
        th.start()
        try:
            _ARMED[0] = True
            q.get()
        except KeyboardInterrupt:
            _ARMED[0] = False
            q.get_nowait()  # "the worker's item is there by now": not if Ctrl-C came while get waited
        _ARMED[0] = False
        th.join()
    return body


def test_an_interrupt_while_blocked_is_explored_only_when_asked_for():
    body = _ctrl_c_then_assume_the_item_came()
    between_bytecodes = interleavings.check(body, interrupts=[interleavings.Interrupt(_ctrl_c_when_armed)])
    assert between_bytecodes.verdict == "ok"  # at main's enabled get the item is there
    for reduce, when in (("dpor", "both"), ("none", "both"), ("dpor", "blocked"), ("none", "blocked")):
        result = interleavings.check(body, reduce=reduce,
                                     interrupts=[interleavings.Interrupt(_ctrl_c_when_armed, when=when)])
        assert result.verdict == "uncaught_exception", result
        assert "Empty" in result.violation.message
        labels = [step.step for step in result.trace.steps]
        interrupted = [i for i, label in enumerate(labels) if label.startswith("interrupt: _ctrl_c_when_armed")][0]
        assert labels[interrupted].startswith("interrupt: _ctrl_c_when_armed while blocked in get q @"), labels
        assert "put" not in " ".join(labels[:interrupted])  # main was waiting on an empty queue


def _one_wait(wait, log):
    def body():
        _ARMED[0] = False
        lock = threading.Lock()
        cond = threading.Condition()
        ev = threading.Event()
        sem = threading.Semaphore(0)
        got = []

        def worker():
            with lock:
                got.append("w")
            with cond:
                cond.notify()
            ev.set()
            sem.release()

        th = threading.Thread(target=worker, name="worker")
        th.start()
        _ARMED[0] = True
        try:
            if wait == "lock":
                with lock:
                    got.append("m")
            elif wait == "condition":
                with cond:
                    cond.wait(5)
            elif wait == "event":
                ev.wait()
            elif wait == "join":
                th.join()
            elif wait == "sleep":
                time.sleep(1)
            else:
                sem.acquire()
            got.append("done")
        except KeyboardInterrupt:
            got.append("interrupted")
        _ARMED[0] = False
        if wait == "join":
            ev.wait()  # before 3.13 an interrupted join() leaves the next one returning at once: wait for "w"
        th.join()
        log.add(tuple(got))
    return body


@pytest.mark.parametrize("wait", ["lock", "condition", "event", "join", "sleep", "semaphore"])
def test_dpor_and_plain_dfs_agree_with_interrupts_while_blocked(wait):
    seen = {}
    for reduce in ("none", "dpor"):
        for when in ("running", "blocked", "both"):
            log = set()
            # Before 3.13 a Ctrl-C in join() records the worker as ended: the final join returns at once,
            # and the worker may outlive the body, as in CPython (test_interleavings_arguments.py).
            result = interleavings.check(_one_wait(wait, log), reduce=reduce, allow_alive=("worker",), interrupts=[
                interleavings.Interrupt(_ctrl_c_when_armed, when=when)])
            assert result.verdict == "ok", result
            seen[reduce, when] = log
    for when in ("running", "blocked", "both"):
        assert seen["dpor", when] == seen["none", when], when
    assert seen["none", "both"] == seen["none", "running"] | seen["none", "blocked"]
    if wait in ("join", "sleep", "semaphore"):  # a wait no enabled point of main reaches before the worker
        assert seen["none", "both"] - seen["none", "running"] == {("interrupted", "w")}
        assert ("interrupted", "w") in seen["none", "blocked"]


def test_a_deadlock_that_only_an_interrupt_could_break_is_still_a_deadlock():
    def body():
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()  # waits for itself

    result = interleavings.check(body, interrupts=[interleavings.Interrupt(lambda: None, when="blocked")])
    assert result.verdict == "deadlock", result


def test_an_unknown_interrupt_when_is_refused():
    with pytest.raises(ValueError, match="Interrupt.when"):
        interleavings.Interrupt(lambda: None, when="always")

"""The waits real code uses: timed waits, try-locks, locks chosen by expression, invariants that read
threads, and threads started by other threads.

Each primitive is pinned on small models here; its catalog model (the real bug it exposes) is pinned
in tests/test_catalog.py and cross-checked with SPIN in tests/test_spin.py.
"""

from __future__ import annotations

import pytest

from safeprefetch import check, load_model
from safeprefetch._check.explore import Explorer
from safeprefetch.model import DONE, CheckError, Model, ModelError

# -- timed waits -----------------------------------------------------------------------------------


def _poller(notify: bool, timeout="check"):
    class Poller(Model):
        """poller: a consumer polls with cond.wait(timeout) for an item a producer puts."""

        name = "poller"

        def build(self, m):
            m.shared(ready=False)
            m.mutex("lock")
            m.condvar("changed")
            c = m.program("consumer")
            c.acquire("lock", "lock", next="check")
            c.step("check", next=lambda s, me: "got it" if s.ready else "wait", to=["got it", "wait"])
            c.wait("wait", "changed", "lock", next="check", until=lambda s, me: s.ready, timeout=timeout)
            c.release("got it", "lock", next=DONE)
            p = m.program("producer")
            p.acquire("lock", "lock", next="put")
            p.step("put", lambda s, me: setattr(s, "ready", True), next="notify" if notify else "unlock")
            p.notify_all("notify", "changed", next="unlock")
            p.release("unlock", "lock", next=DONE)
            m.thread("consumer", c)
            m.thread("producer", p)
    return Poller


def test_a_timed_wait_times_out_only_while_its_predicate_is_false():
    machine = _poller(notify=True).compile()
    e = Explorer(machine, reduce="none", stop_at_first=False)
    e.run()
    timed_out = 0
    for state in e.parents:
        if machine.pc(state, 0) != "wait (asleep)":
            continue
        moves = machine.fire(state, 0)
        ready = machine.describe(state)["ready"]
        assert bool(moves) == (not ready)  # while ready holds, only a notify moves the sleeper
        for _b, nxt in moves:
            assert machine.pc(nxt, 0) == "wait (timed out)"
            # It stays queued until it retakes the mutex, as in CPython's Condition.wait (the twenty-second round):
            # a notify meanwhile is spent on it.
            assert 0 in nxt[machine.cond_index["changed"]]
            timed_out += 1
    assert timed_out


def test_a_timeout_does_not_mask_a_missing_notify():
    assert check(_poller(notify=True)).verdict == "ok"
    r = check(_poller(notify=False))
    assert r.verdict == "lost_wakeup" and "consumer sleeps on changed" in r.violation.message


def test_a_timeout_goes_to_its_own_label_after_reacquiring():
    class GiveUp(Model):
        """give_up: a waiter gives up on timeout instead of re-checking."""

        name = "give_up"

        def build(self, m):
            m.shared(ready=False)
            m.mutex("lock")
            m.condvar("changed")
            c = m.program("consumer")
            c.acquire("lock", "lock", next="wait")
            c.wait("wait", "changed", "lock", next="got it", until=lambda s, me: s.ready, timeout="gave up")
            c.release("got it", "lock", next=DONE)
            c.release("gave up", "lock", next=DONE)
            m.thread("consumer", c)

    assert check(GiveUp).verdict == "ok"
    machine = GiveUp.compile()
    assert machine.graph["consumer"]["wait"].targets == ("got it", "gave up")
    e = Explorer(machine, reduce="none", stop_at_first=False)
    e.run()
    timed_out = [s for s in e.parents if machine.pc(s, 0) == "wait (timed out)"]
    assert timed_out
    (_, after), = machine.fire(timed_out[0], 0)
    assert machine.pc(after, 0) == "gave up" and machine.describe(after)["lock"] == 0


def test_spurious_wakeups_of_a_timed_wait_are_a_branch_of_its_sleep():
    machine = _poller(notify=True).compile({"spurious": "on"})
    info = machine.infos[0]["wait (asleep)"]
    assert info.kind == "timed_wait" and info.branches == ("timed out", "spurious wakeup")
    assert "wait (asleep)" not in machine.spurious_pcs[0]  # a timeout is a real move: the sleeper is not stuck
    assert check(_poller(notify=True), {"spurious": "on"}).verdict == "ok"
    assert check(_poller(notify=False), {"spurious": "on"}).verdict == "lost_wakeup"


def test_an_event_wait_with_a_timeout_branches_on_the_flag():
    class EventWait(Model):
        """event_wait: Event.wait(timeout) either sees the flag or times out."""

        name = "event_wait"

        def build(self, m):
            m.flag("done")
            w = m.program("waiter")
            w.wait_flag("wait", "done", next=DONE, timeout="timed out")
            w.step("timed out", next=DONE)
            s = m.program("setter")
            s.set_flag("set", "done", next=DONE)
            m.thread("waiter", w)
            m.thread("setter", s)

    machine = EventWait.compile()
    assert machine.infos[0]["wait"].branches == ("set", "timed out")
    assert [b for b, _ in machine.fire(machine.init, 0)] == [1]  # flag clear: only the timeout
    after = machine.fire(machine.init, 1)[0][1]
    assert [b for b, _ in machine.fire(after, 0)] == [0]  # flag set: only "set"
    assert check(EventWait).verdict == "ok"


class TimedGet(Model):
    """timed_get: ``queue.get(timeout=)`` as a semaphore acquire with a timeout; a consumer that gives up."""

    name = "timed_get"

    def build(self, m):
        m.shared(put=0, got=0)
        m.semaphore("items", 0)

        def put(s, me):
            s.put += 1

        def take(s, me):
            s.got += 1

        p = m.program("producer")
        p.step("put", put, next="announce")
        p.sem_release("announce", "items", next=DONE)
        c = m.program("consumer")
        c.sem_acquire("get", "items", next="take", timeout="gave up")
        c.step("take", take, next=DONE)
        c.step("gave up", next=DONE)
        m.thread("producer", p)
        m.thread("consumer", c)
        m.at_end(lambda s: ("lost_item", f"{s.put - s.got} item(s) put, never taken") if s.put != s.got else None)


def test_a_queue_get_with_a_timeout_times_out_only_while_the_queue_is_empty():
    machine = TimedGet.compile()
    assert machine.infos[1]["get"].branches == ("acquired", "timed out")
    assert [b for b, _ in machine.fire(machine.init, 1)] == [1]  # empty: only the timeout
    state = machine.init
    for _ in range(2):  # the producer puts and announces
        (_, state), = machine.fire(state, 0)
    (b, after), = machine.fire(state, 1)  # an item: only "acquired"
    assert b == 0 and machine.describe(after)["consumer.pc"] == "take"
    r = check(TimedGet)
    assert r.verdict == "lost_item" and len(r.trace) == 4
    assert [s.step for s in r.trace if s.thread == "consumer"] == ["get", "gave up"]


# -- try-locks -------------------------------------------------------------------------------------


def test_a_try_lock_takes_a_free_mutex_and_goes_to_busy_otherwise():
    machine = load_model("trylock_flush").compile()
    first = machine.fire(machine.init, 0)[0][1]  # writer0 appends
    (b, took), = machine.fire(first, 0)
    assert b == 0 and machine.describe(took)["flush_lock"] == 0 and machine.pc(took, 0) == "flush"
    appended = machine.fire(took, 1)[0][1]
    (b, busy), = machine.fire(appended, 1)
    assert b == 1 and machine.pc(busy, 1) == DONE and busy[machine.mutex_index["flush_lock"]] == 0
    r = check(load_model("trylock_flush"))
    assert [(s.step, s.branch) for s in r.trace][:2] == [("append", None), ("try lock", "acquired")]
    assert ("try lock", "busy") in [(s.step, s.branch) for s in r.trace]


# -- a mutex chosen by expression -----------------------------------------------------------------


def test_opposite_transfers_deadlock_and_ordered_ones_do_not():
    r = check(load_model("transfer_lock_order"))
    assert r.verdict == "deadlock" and len(r.trace) == 2
    for transfers in (2, 3, 4):
        assert check(load_model("ordered_transfer"), {"transfers": transfers}).verdict == "ok"


def test_a_chosen_mutex_that_does_not_exist_is_a_model_error_that_suggests_one():
    class Typo(Model):
        """typo: the chooser names a lock that was not declared."""

        name = "typo"

        def build(self, m):
            m.mutex("lock0")
            p = m.program("p")
            p.acquire("take", lambda s, me: "lokc0", next=DONE)
            m.thread("t", p)

    with pytest.raises(ModelError, match="chose undeclared mutex 'lokc0'; did you mean 'lock0'"):
        check(Typo)


def test_the_program_graph_names_the_chooser():
    graph = load_model("transfer_lock_order").compile().graph["transfer"]
    assert graph["lock first"].objects == ("chosen by first()",)


# -- checks that read threads ----------------------------------------------------------------------


class SecretCounter(Model):
    """secret_counter: each thread counts in a local; the invariant bounds their sum."""

    name = "secret_counter"

    def build(self, m):
        m.shared(dummy=0)
        p = m.program("p", n=0)
        p.step("count", lambda s, me: setattr(me, "n", me.n + 1), next="again")
        p.step("again", next=lambda s, me: "count" if me.n < 2 else DONE, to=["count", DONE])
        m.thread("a", p)
        m.thread("b", p)
        m.invariant("the two counted at most 3 together", lambda s, threads: sum(t.n for t in threads.values()) <= 3)
        m.at_end(lambda s, threads: ("lost_item", "no") if threads["a"].done and threads["a"].pc != DONE else None)


def test_an_invariant_reads_every_threads_locals_and_pc():
    r = check(SecretCounter)
    assert r.verdict == "invariant" and len(r.trace) == 6
    # Partial-order reduction must not treat a step that writes only its own locals as invisible:
    # every step's footprint now includes its thread's own fields, which the invariant reads.
    machine = SecretCounter.compile()
    own = {machine.pc_index[0], machine.local_index[0]["n"]}
    assert own <= machine.infos[0]["count"].footprint[1]
    assert check(SecretCounter, reduce="none").trace == r.trace


def test_the_threads_a_check_sees_are_read_only():
    seen = {}

    class Peek(Model):
        """peek: an end check that tries to write a thread's local."""

        name = "peek"

        def build(self, m):
            p = m.program("p", n=0)
            p.step("one", next=DONE)
            m.thread("a", p)

            def check_end(s, threads):
                seen["a"] = (threads["a"].pc, threads["a"].n, threads["a"].done, list(threads))
                threads["a"].n = 5
            m.at_end(check_end)

    with pytest.raises(CheckError, match="end check: AttributeError: thread 'a': a check cannot change") as info:
        check(Peek)
    assert isinstance(info.value.error, AttributeError)
    assert seen["a"] == (DONE, 0, True, ["a"])


def test_a_check_with_more_than_two_arguments_is_refused():
    class Three(Model):
        """three: an invariant with three arguments."""

        name = "three"

        def build(self, m):
            p = m.program("p")
            p.step("one", next=DONE)
            m.thread("a", p)
            m.invariant("bad", lambda s, threads, extra: True)

    with pytest.raises(ModelError, match="takes \\(s\\) or \\(s, threads\\)"):
        Three.compile()


# -- spawning threads ------------------------------------------------------------------------------


def test_a_thread_declared_not_started_waits_for_its_spawn():
    machine = load_model("start_before_init").compile()
    assert machine.pc(machine.init, 1) == "(not started)"
    assert machine.fire(machine.init, 1) == []
    (_, started), = machine.fire(machine.init, 0)
    assert machine.pc(started, 1) == "get"
    r = check(load_model("start_before_init"))
    assert r.verdict == "invariant" and [s.step for s in r.trace] == ["start worker", "get"]


def _spawner(spawns: int, declared_started: bool = False):
    class Spawner(Model):
        """spawner: main starts a worker some number of times."""

        name = "spawner"

        def build(self, m):
            main = m.program("main")
            labels = [f"start {i}" for i in range(spawns)] or ["idle"]
            for i, label in enumerate(labels):
                nxt = labels[i + 1] if i + 1 < len(labels) else DONE
                if spawns:
                    main.spawn(label, "worker", next=nxt)
                else:
                    main.step(label, next=nxt)
            w = m.program("work")
            w.step("work", next=DONE)
            m.thread("main", main)
            m.thread("worker", w, start=declared_started)
    return Spawner


def test_a_thread_that_is_never_started_counts_as_finished():
    assert check(_spawner(0)).verdict == "ok"
    assert check(_spawner(1)).verdict == "ok"


def test_starting_a_thread_twice_is_a_violation():
    r = check(_spawner(2))
    assert r.verdict == "invariant" and "a second time" in r.violation.message


def test_spawning_a_thread_that_already_runs_is_a_model_error():
    with pytest.raises(ModelError, match="declare it with m.thread\\('worker', ..., start=False\\)"):
        _spawner(1, declared_started=True).compile()


def test_spawning_an_unknown_thread_suggests_a_name():
    class Unknown(Model):
        """unknown: spawns a thread name with a typo."""

        name = "unknown_spawn"

        def build(self, m):
            main = m.program("main")
            main.spawn("start", "wroker", next=DONE)
            w = m.program("work")
            w.step("work", next=DONE)
            m.thread("main", main)
            m.thread("worker", w, start=False)

    with pytest.raises(ModelError, match="undeclared thread 'wroker'; did you mean 'worker'"):
        Unknown.compile()

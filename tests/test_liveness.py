"""Liveness: starvation under weak fairness and strict priority; bounded progress after shutdown."""

from safeprefetch import check, load_model
from safeprefetch._check.explore import Explorer, replay
from safeprefetch._check.liveness import shutdown_progress
from safeprefetch.model import DONE, Model


class GreedyLock(Model):
    """greedy_lock: one thread re-takes a lock forever; the other is enabled only intermittently."""

    name = "greedy_lock"

    def build(self, m):
        m.shared(done=False)
        m.mutex("lock")
        g = m.program("greedy")
        g.acquire("lock", "lock", next="work")
        g.step("work", next="unlock")
        g.release("unlock", "lock", next=lambda s, me: DONE if s.done else "lock", to=[DONE, "lock"])
        w = m.program("waiter")
        w.acquire("lock", "lock", next="finish")
        w.step("finish", lambda s, me: setattr(s, "done", True), next="unlock")
        w.release("unlock", "lock", next=DONE)
        m.thread("greedy", g)
        m.thread("waiter", w)
        m.progress("finish")


class AlwaysReady(Model):
    """always_ready: a spinner loops forever while another thread is always able to finish."""

    name = "always_ready"

    def build(self, m):
        m.shared(done=False)
        sp = m.program("spinner")
        sp.step("spin", next=lambda s, me: DONE if s.done else "spin", to=[DONE, "spin"])
        f = m.program("finisher")
        f.step("finish", lambda s, me: setattr(s, "done", True), next=DONE)
        m.thread("spinner", sp)
        m.thread("finisher", f)
        m.progress("finish")


def test_weak_fairness_does_not_save_an_intermittently_enabled_thread():
    r = check(GreedyLock)
    assert r.verdict == "starvation"
    assert "waiter never makes progress" in r.violation.message
    # The lasso replays: the cycle returns to the state where it started.
    machine = GreedyLock.compile()
    states = replay(machine, r.trace)
    start = r.violation.cycle_start
    assert states[start] == states[-1]
    assert len(r.trace) == 3 and r.violation.step == 3
    assert f"the cycle starts after step {start}" in r.violation.message  # the message says it for people


def test_weak_fairness_runs_an_always_enabled_thread():
    assert check(AlwaysReady).verdict == "ok"


def test_strict_priority_can_starve_an_always_enabled_low_priority_thread():
    class Prioritized(AlwaysReady):
        name = "always_ready_prio"
        settings = {"policy": "priority"}

        def build(self, m):
            super().build(m)
            m.priority("spinner", 2)
            m.priority("finisher", 1)

    r = check(Prioritized)
    assert r.verdict == "starvation" and "finisher never makes progress" in r.violation.message
    assert check(Prioritized, {"policy": "fair"}).verdict == "ok"


def test_models_without_progress_steps_are_not_checked_for_starvation():
    class NoProgress(GreedyLock):
        name = "no_progress"

        def build(self, m):
            super().build(m)
            m.progress_labels.clear()

    assert check(NoProgress).verdict == "ok"


def test_every_thread_returns_within_a_few_own_steps_after_close():
    machine = load_model("prefetcher").compile({"close": True, "error": True, "abandon": True, "workers": 2,
                                                "capacity": 2, "items": 3})
    e = Explorer(machine)
    assert e.run().verdict == "ok"
    bounds = shutdown_progress(machine, e.parents)
    assert set(bounds) == {"worker0", "worker1", "consumer", "closer"}
    assert all(b is not None for b in bounds.values()), bounds
    # A worker may be mid-fetch: land it (1), see closing at claim and exit (1).
    assert bounds["worker0"] == bounds["worker1"] == 2
    assert bounds["closer"] <= 2
    # With close alone (no error, whose "shutdown" still lets the consumer drain earlier items):
    # the consumer releases its lease, then its next take reports "closed".
    machine = load_model("prefetcher").compile({"close": True, "workers": 2, "capacity": 2, "items": 3})
    e = Explorer(machine)
    e.run()
    assert shutdown_progress(machine, e.parents)["consumer"] == 2


def test_a_hang_after_close_is_unbounded_progress():
    class Stuck(Model):
        name = "stuck"

        def build(self, m):
            m.shared(closing=False, ready=False)
            c = m.program("closer")
            c.step("close", lambda s, me: setattr(s, "closing", True), next=DONE)
            w = m.program("consumer")
            w.step("wait for item", guard=lambda s, me: s.ready, next=DONE)
            m.thread("closer", c)
            m.thread("consumer", w)
            m.shutdown_when(lambda s: s.closing)

    machine = Stuck.compile()
    e = Explorer(machine, stop_at_first=False)
    e.run()
    assert shutdown_progress(machine, e.parents) == {"closer": 0, "consumer": None}


def test_bounded_progress_check_from_the_cli():
    import json
    import subprocess
    import sys

    def run(*args):
        return subprocess.run([sys.executable, "-m", "safeprefetch", "check", "prefetcher", "--set", "close=on",
                               *args, "--json"], capture_output=True, text=True, timeout=60)

    ok = run("--progress-bound", "2")
    assert ok.returncode == 0 and json.loads(ok.stdout)["verdict"] == "ok"
    late = run("--progress-bound", "1")
    out = json.loads(late.stdout)
    assert late.returncode == 1 and out["verdict"] == "shutdown_hang"
    assert "may take 2 of its own steps" in out["message"] and out["trace"][-1]["step"] == "close"


# -- fairness and spurious wakeups ---------------------------------------------------------------


class FlagHandoff(Model):
    """flag_handoff: two threads pass a turn back and forth through one monitor, forever (correct)."""

    name = "flag_handoff"

    def build(self, m):
        m.shared(turn=0)
        m.mutex("lock")
        m.condvar("changed")

        def hand_over(s, me):
            s.turn = 1 - me.index

        p = m.program("player")
        p.acquire("lock", "lock", next="check")
        p.step("check", next=lambda s, me: "take turn" if s.turn == me.index else "wait",
               to=["take turn", "wait"])
        p.wait("wait", "changed", "lock", next="check", until=lambda s, me: s.turn == me.index)
        p.step("take turn", hand_over, next="notify")
        p.notify_all("notify", "changed", next="unlock")
        p.release("unlock", "lock", next="lock")
        m.thread("player0", p)
        m.thread("player1", p)
        m.progress("take turn")


def test_strong_fairness_runs_an_intermittently_enabled_thread():
    assert check(GreedyLock).verdict == "starvation"
    r = check(GreedyLock, {"fairness": "strong"})
    assert r.verdict == "ok" and r.exhaustive


def test_strong_fairness_still_finds_a_thread_that_is_never_enabled():
    r = check(load_model("reader_preference_rwlock"), {"fairness": "strong"})
    assert r.verdict == "starvation" and "writer0 never makes progress" in r.violation.message
    assert "strongly fair" in r.violation.message


def test_fairness_is_a_setting_with_two_values():
    from safeprefetch.model import ModelError

    assert GreedyLock.configure({"fairness": "strong"})["fairness"] == "strong"
    assert GreedyLock.configure({})["fairness"] == "weak"
    import pytest

    with pytest.raises(ModelError, match="fairness must be one of weak|strong"):
        GreedyLock.configure({"fairness": "fair"})


def test_spurious_wakeups_do_not_starve_a_correct_handoff():
    """Spurious wakeups are finite: a waiter that wakes spuriously forever is not a run a design must survive."""
    for fairness in ("weak", "strong"):
        r = check(FlagHandoff, {"spurious": "on", "fairness": fairness})
        assert r.verdict == "ok" and r.exhaustive, (fairness, r.violation and r.violation.message)
    assert check(FlagHandoff, {"notify": "any", "spurious": "on", "fairness": "strong"}).verdict == "ok"


def test_the_correct_reader_writer_lock_passes_with_spurious_wakeups_under_strong_fairness():
    model = load_model("writer_preference_rwlock")
    for readers in (1, 2, 3):
        r = check(model, {"readers": readers, "spurious": "on", "fairness": "strong"})
        assert r.verdict == "ok" and r.exhaustive, readers


def test_two_writers_can_starve_each_other_even_under_strong_fairness():
    """Writer preference does not order writers: the one that loses the lock every time round starves."""
    r = check(load_model("writer_preference_rwlock"), {"writers": 2})
    assert r.verdict == "starvation" and "strongly fair" in r.violation.message


def test_weak_fairness_lets_a_reader_re_take_the_lock_before_the_writer_announces():
    r = check(load_model("writer_preference_rwlock"), {"fairness": "weak"})
    assert r.verdict == "starvation" and "writer0 never makes progress" in r.violation.message
    assert {s.thread for s in r.trace.steps[r.violation.cycle_start:]} == {"reader0"}


def test_a_spurious_wakeup_may_lead_into_a_cycle_but_not_repeat_in_it():
    """A cycle that needs a spurious wakeup each time round is not a starvation lasso; a stem may use one."""
    class WokenBySpuriousOnly(Model):
        """woken_by_spurious_only: a sleeper nobody notifies; once awake it blocks the watcher and spins."""

        name = "woken_by_spurious_only"
        settings = {"spurious": "on"}

        def build(self, m):
            m.shared(x=0)
            m.mutex("lock")
            m.condvar("never")
            p = m.program("sleeper")
            p.acquire("lock", "lock", next="sleep")
            p.wait("sleep", "never", "lock", next="block")
            p.step("block", lambda s, me: setattr(s, "x", 1), next="spin")
            p.step("spin", next="spin")
            w = m.program("watcher")
            w.step("look", guard=lambda s, me: s.x == 0, next="look")
            m.thread("sleeper", p)
            m.thread("watcher", w)
            m.progress("look")

    r = check(WokenBySpuriousOnly)
    assert r.verdict == "starvation" and "watcher never makes progress" in r.violation.message
    labels = [s.step for s in r.trace]
    assert "sleep: spurious wakeup" in labels[:r.violation.cycle_start]
    assert labels[r.violation.cycle_start:] == ["spin"]
    assert check(WokenBySpuriousOnly, {"spurious": "off"}).verdict == "ok"

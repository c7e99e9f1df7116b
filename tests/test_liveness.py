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

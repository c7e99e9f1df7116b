"""The live runtime runs the checked machine on real threads: conformance, forced replay, exact deadlock detection."""

import threading

import pytest

from safeprefetch import catalog, check, load_model
from safeprefetch.lowlevel import LiveDeadlock, LiveError, Runtime, StepTimeout, run_live, verify_record
from safeprefetch.model import DONE, Model

pytestmark = [pytest.mark.live, pytest.mark.timeout(60)]

# Starvation is an infinite behaviour: a finite live run cannot show it, so it is left out here.
BROKEN = [name for name, m in catalog().items() if m.expected not in ("ok", "starvation")]


@pytest.mark.parametrize("name", BROKEN)
def test_a_counterexample_replayed_on_real_threads_shows_the_same_bug(name):
    machine = load_model(name).compile()
    result = check(machine)
    live = run_live(machine, schedule=result.trace, timeout=20)
    assert live.forced
    assert live.verdict == result.verdict, live.message
    assert live.conforms
    assert live.trace.steps[: len(result.trace)] == result.trace.steps


@pytest.mark.parametrize("seed", range(8))
def test_free_runs_of_the_reference_prefetcher_finish_and_conform(seed):
    machine = load_model("prefetcher").compile({"workers": 3, "capacity": 2, "items": 5, "close": True,
                                                "error": True, "abandon": True})
    live = run_live(machine, seed=seed, timeout=20)
    assert live.verdict == "ok", live.message
    assert live.conforms and live.steps > 0


def test_verify_record_rejects_a_step_the_model_does_not_allow():
    machine = load_model("no_space_guard").compile()
    live = run_live(machine, seed=1)
    record = [(t, b, s) for t, b, s in _record(machine)]
    assert verify_record(machine, record).ok
    t, b, s = record[1]
    tampered = record[:1] + [(t, b, s[:-1] + ("bogus",))] + record[2:]
    report = verify_record(machine, tampered)
    assert not report.ok and report.first_mismatch == 1
    assert live.conforms


def _record(machine):
    rt = Runtime(machine, record=True)

    def body(t):
        try:
            rt.run_thread(t)
        except LiveError:
            pass  # the model's bug showed up live; the record up to it is what we check

    threads = [threading.Thread(target=body, args=(t,)) for t in range(len(machine.thread_names))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    return rt.record


class Handoff(Model):
    name = "handoff"

    def build(self, m):
        m.shared(ready=False)
        c = m.program("consumer")
        c.step("wait for ready", guard=lambda s, me: s.ready, next=DONE)
        p = m.program("producer")
        p.step("forget to publish", next=DONE)
        m.thread("consumer", c)
        m.thread("producer", p)


def test_a_live_deadlock_is_detected_exactly_not_hung():
    live = run_live(Handoff.compile(), timeout=10)
    assert live.verdict == "deadlock"
    assert "consumer" in live.message and "ready = False" in live.message
    assert live.seconds < 5


def test_a_step_can_time_out_while_the_machine_stays_usable():
    rt = Runtime(Handoff.compile())
    with pytest.raises(StepTimeout):
        rt.step(0, timeout=0.05)  # producer has not run; consumer's guard is false
    rt.step(1)  # producer finishes without publishing: now the consumer's wait is a real deadlock
    with pytest.raises(LiveDeadlock) as e:
        rt.step(0)
    assert e.value.kind == "deadlock"


def _cli(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "safeprefetch", *args], capture_output=True, text=True, timeout=60)


def test_run_command_shows_a_broken_model_deadlocking_live():
    p = _cli("run", "one_cond_signal", "--json")
    import json

    out = json.loads(p.stdout)
    assert p.returncode == 1
    assert out["verdict"] == "deadlock" and out["conforms"]
    assert len(out["trace"]) == 22 or not out["forced"]


def test_run_command_on_the_reference_model_is_ok():
    p = _cli("run", "prefetcher", "--set", "close=on", "--set", "error=on", "--attempts", "5")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "live run of prefetcher: ok" in p.stdout


class MaybeSpawn(Model):
    """A helper thread that only a spawn step starts, and no step spawns it (``spawn=False``)."""

    name = "maybe_spawn"
    params = {"spawn": False}

    def build(self, m, spawn, **_):
        m.shared(x=0)

        def work(s, me):
            s.x += 1

        main = m.program("main")
        main.step("work", work, next="start helper" if spawn else DONE)
        main.spawn("start helper", "helper", next=DONE)
        helper = m.program("helper")
        helper.step("help", work, next=DONE)
        m.thread("main", main)
        m.thread("helper", helper, start=False)


@pytest.mark.parametrize("spawn", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_a_thread_nobody_spawns_counts_as_finished_live_as_in_the_checker(spawn, seed):
    """Before: run_live said deadlock ("all threads blocked: ", nobody named) where check says ok."""
    machine = MaybeSpawn.compile({"spawn": spawn})
    assert check(MaybeSpawn, {"spawn": spawn}).verdict == "ok"
    live = run_live(machine, seed=seed, timeout=10)
    assert (live.verdict, live.conforms, live.steps) == ("ok", True, 3 if spawn else 1)


def test_a_step_of_a_thread_nobody_can_spawn_any_more_raises_never_started():
    from safeprefetch.lowlevel import NeverStarted

    machine = MaybeSpawn.compile({"spawn": False})
    rt = Runtime(machine)
    rt.run_thread(0)
    with pytest.raises(NeverStarted, match="helper was never started, and the run is over"):
        rt.step(1, timeout=10)


def test_verify_record_rejects_thread_and_branch_numbers_the_model_does_not_have():
    """Before: thread -1 and -2 aliased real threads (ok=True), thread 2 raised IndexError, and a successor
    with True where the model has 1 passed (True == 1), the check then going on from the tampered state."""
    machine = load_model("no_space_guard").compile()
    record = list(_record(machine))
    assert verify_record(machine, record).ok
    n = len(machine.thread_names)
    t, b, s = record[0]
    for bad_t in (t - n, n, True if t == 1 else None, "0"):
        report = verify_record(machine, [(bad_t, b, s)] + record[1:])
        assert not report.ok and report.first_mismatch == 0 and "is not a thread" in report.message, bad_t
    report = verify_record(machine, [(t, True if b == 1 else 1.0 * b, s)] + record[1:])
    assert not report.ok and report.first_mismatch == 0
    ints = [i for i, v in enumerate(s) if type(v) is int and v in (0, 1)]
    assert ints, "the first successor has a 0 or 1 field to tamper with"
    k = ints[0]
    tampered = s[:k] + (bool(s[k]),) + s[k + 1:]
    report = verify_record(machine, [(t, b, tampered)] + record[1:])
    assert not report.ok and report.first_mismatch == 0

"""The live runtime's thirteenth-round review (docs/hardening.md, "A thirteenth round", items 7-16).

An adversarial review of ``Runtime``, ``run_live`` and ``verify_record`` as a user drives them, with real
threads. Each test failed on the code before its fix.
"""

import math
import signal
import threading
import time

import pytest

from safeprefetch import Prefetcher, check, load_model
from safeprefetch.lowlevel import LiveDeadlock, Runtime, StepTimeout, python_sigint, run_live, verify_record
from safeprefetch.model import DONE, Model

from _polling import wait_until

pytestmark = pytest.mark.timeout(120)


class Request(Model):
    """The consumer takes the item if it is there, else asks for it (a branch that is always enabled)."""

    name = "request"

    def build(self, m):
        m.shared(requested=False, item=None)
        c = m.program("consumer")

        def get(s, me, b):
            if b == "request":
                s.requested = True
                return "get"

        c.step("get", get, branches=("take", "request"), to=["get"], next=DONE,
               guard=lambda s, me, b: s.item is not None if b == "take" else not s.requested)
        p = m.program("producer")
        p.step("produce", lambda s, me: setattr(s, "item", 1), guard=lambda s, me: s.requested, next=DONE)
        m.thread("consumer", c)
        m.thread("producer", p)


def _in_thread(fn):
    out = {}

    def run():
        try:
            out["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - the test reads it
            out["error"] = e

    th = threading.Thread(target=run)
    th.start()
    return th, out


def test_7_a_thread_waiting_for_one_branch_with_a_timeout_is_not_a_deadlock():
    # Before: LiveDeadlock at once ("all threads blocked"), though the timeout would have let the consumer go
    # on, and the runtime stayed failed: the fallback step and the producer raised it too.
    machine = Request.compile()
    assert check(machine).verdict == "ok"
    rt = Runtime(machine, record=True)
    th, out = _in_thread(lambda: rt.step(1))
    wait_until(lambda: rt.is_parked(1))
    with pytest.raises(StepTimeout):
        rt.step(0, branch="take", timeout=0.2)
    assert rt.step(0, branch="request") == "get"
    th.join(30)
    assert out == {"result": "produce"} and rt.failure is None
    assert rt.step(0, branch="take") == "get" and rt.is_done(0)
    assert verify_record(machine, rt.record).ok


def test_7_a_driver_that_waits_for_a_disabled_branch_for_good_is_told_so_not_the_model():
    # No timeout: nothing else can move, but the model can. Before: "deadlock: all threads blocked", the
    # checker's verdict on a model the checker proves ok.
    machine = Request.compile()
    rt = Runtime(machine)
    th, out = _in_thread(lambda: rt.step(1))
    wait_until(lambda: rt.is_parked(1))
    with pytest.raises(LiveDeadlock) as e:
        rt.step(0, branch="take")
    assert e.value.kind == "blocked_branch"
    assert "consumer waits for branch 'take' of step 'get'" in str(e.value)
    assert "enabled: 'request'" in str(e.value)
    th.join(30)
    assert isinstance(out["error"], LiveDeadlock)


class Read(Model):
    name = "read"

    def build(self, m):
        m.shared(closed=False)
        p = m.program("reader")
        p.external("read", "read", branches=("data", "eof"), next=DONE,
                   guard=lambda s, me, b: b == "data" or s.closed)  # eof only after close
        m.thread("reader", p)


def test_8_an_action_outcome_the_model_does_not_allow_there_is_not_a_model_deadlock():
    machine = Read.compile()
    assert check(machine).verdict == "ok"
    r = run_live(machine, actions={"read": lambda ctx: "eof"}, seed=0)
    assert r.verdict == "blocked_branch"  # before: "deadlock"
    assert "reader waits for branch 'eof' of step 'read'" in r.message and "enabled: 'data'" in r.message


class Pick(Model):
    name = "pick"

    def build(self, m):
        m.shared(x=0)
        p = m.program("p")
        p.step("choose", branches=("left", "right"), next=DONE)
        q = m.program("q")
        q.external("work", "work", next=DONE)
        m.thread("chooser", p)
        m.thread("worker", q)


@pytest.mark.parametrize("branch", ["lefft", ("lefft", "right")])
def test_9_a_branch_name_the_step_does_not_have_is_a_clear_error(branch):
    # Before: StepTimeout with a timeout, a hang while another thread could act, and a "deadlock" after.
    rt = Runtime(Pick.compile())
    with pytest.raises(ValueError, match=r"chooser's step 'choose' has no branch 'lefft' \(its branches: 'left', "
                                         r"'right'\)"):
        rt.step(0, branch=branch)
    assert rt.failure is None and rt.step(0, branch="left") == "choose"


def test_10_spurious_wakeups_do_not_hide_a_deadlock_live():
    # Before: the waiters spun on spurious wakeups until run_live's timer (789,298 steps recorded in 5 s).
    machine = load_model("join_before_drain").compile({"spurious": True})
    expected = check(machine).verdict
    assert expected == "deadlock"
    r = run_live(machine, seed=0, jitter=0.0, timeout=60)
    assert (r.verdict, r.conforms) == (expected, True), r.message  # before: "timeout", after 60 s of spinning


def test_10_a_correct_model_with_spurious_wakeups_still_runs_to_the_end():
    machine = load_model("monitor").compile({"spurious": True})
    assert check(machine).verdict == "ok"
    for seed in range(3):
        r = run_live(machine, seed=seed, timeout=60)
        assert (r.verdict, r.conforms) == ("ok", True), r.message


class Compute(Model):
    name = "compute"

    def build(self, m):
        m.shared(x=0)
        p = m.program("w")
        p.external("compute", "compute", next=DONE)
        m.thread("worker", p)


def test_11_ctrl_c_in_a_users_action_is_raised_there_with_a_prefetcher_open():
    # Before: with any Prefetcher open, the SIGINT was deferred to the end of the step, i.e. the action's.
    seen = {}

    def action(ctx):
        if "calls" in seen:
            return None  # the retry
        seen["calls"] = 1
        signal.raise_signal(signal.SIGINT)
        seen["after"] = True  # not reached: the interrupt lands in the action
        return None

    with python_sigint(), Prefetcher([1.0, 2.0], capacity=1):
        rt = Runtime(Compute.compile(), {"compute": action})
        try:  # (pytest.raises lets a KeyboardInterrupt through)
            rt.step(0)
            raised = False
        except KeyboardInterrupt:
            raised = True
    assert raised and "after" not in seen
    assert rt.pc(0) != DONE and rt.step(0) == "compute"  # the step was not taken; a retry takes it


def test_12_an_action_bound_under_a_name_no_step_uses_is_refused():
    with pytest.raises(ValueError, match=r"no external step runs action 'compute_batch' \(the model's actions: "
                                         r"'compute'\)"):
        Runtime(Compute.compile(), {"compute_batch": lambda ctx: None})


@pytest.mark.parametrize("timeout", [None, math.inf])
def test_13_run_live_without_a_time_limit_runs_to_the_end(timeout):
    # Before: TypeError / OverflowError after the threads had started, and they kept running.
    r = run_live(load_model("monitor").compile(), seed=0, timeout=timeout)
    assert r.verdict == "ok"


@pytest.mark.parametrize("kw", [{"timeout": math.nan}, {"timeout": -1}, {"jitter": -1}, {"jitter": math.nan},
                                {"timeout": "5"}])
def test_13_run_live_refuses_bad_numbers_before_it_starts_a_thread(kw):
    before = threading.active_count()
    with pytest.raises((ValueError, TypeError)):
        run_live(load_model("monitor").compile(), seed=0, **kw)
    assert threading.active_count() == before


def test_14_run_live_says_which_threads_it_left_running():
    release = threading.Event()

    def stuck(ctx):
        release.wait(60)

    try:
        r = run_live(Compute.compile(), actions={"compute": stuck}, timeout=0.2)
        assert r.verdict == "timeout" and r.left_running == ("worker",)
        assert "left running: worker" in r.message
    finally:
        release.set()


@pytest.mark.parametrize("t", [-1, True, 2, "a", 1.0])
def test_15_a_thread_index_that_is_not_one_of_the_models_is_a_clear_error(t):
    rt = Runtime(Pick.compile(), record=True)
    with pytest.raises(ValueError, match="not a thread of pick"):
        rt.step(t)
    assert rt.record == [] and rt.failure is None


@pytest.mark.parametrize("model_value,recorded", [(frozenset({1}), frozenset({True})),
                                                  (frozenset({1}), frozenset({1.0})),
                                                  (frozenset({(1,)}), frozenset({(True,)}))])
def test_16_conformance_compares_types_inside_frozensets(model_value, recorded):
    class Sets(Model):
        name = "sets"

        def build(self, m):
            m.shared(s=frozenset())
            p = m.program("p")
            p.step("add", lambda s, me: setattr(s, "s", model_value), next=DONE)
            m.thread("t", p)

    machine = Sets.compile()
    (b, expected), = machine.fire(machine.init, 0)
    i = machine.field_names.index("s")
    tampered = expected[:i] + (recorded,) + expected[i + 1:]
    assert tampered == expected  # equal by ==, which is what made it pass
    assert not verify_record(machine, [(0, b, tampered)]).ok
    assert verify_record(machine, [(0, b, expected)]).ok


# -- the fresh-eyes review of the fixes above ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["no_predicate_wait", "if_not_while"])
def test_10_a_forced_replay_through_a_spurious_wakeup_still_replays(name):
    # The spurious rule counted a thread at its wait as stuck while the trace, forcing the order, had the
    # others parked only because it was not their turn: a false replay_divergence on the wakeup itself.
    machine = load_model(name).compile({"spurious": True})
    found = check(machine)
    assert any("spurious wakeup" in s.step for s in found.violation.trace.steps)
    for seed in range(5):
        r = run_live(machine, schedule=found.violation.trace, seed=seed, timeout=60)
        assert (r.verdict, r.forced) == (found.verdict, True), r.message


class Never(Model):
    name = "never"

    def build(self, m):
        m.shared(flag=False)
        w = m.program("w")
        w.step("wait flag", lambda s, me: None, guard=lambda s, me: s.flag, next=DONE)
        o = m.program("o")
        o.step("finish", lambda s, me: None, next=DONE)
        m.thread("waiter", w)
        m.thread("other", o)


def test_7_a_retry_with_a_timeout_on_a_step_that_can_never_be_enabled_is_a_deadlock():
    # The first fix let any thread waiting with a deadline keep the run alive: a retry loop timed out for
    # ever. Only a step with another branch enabled can go on after its timeout.
    rt = Runtime(Never.compile())
    rt.step(1)
    with pytest.raises(LiveDeadlock) as e:
        rt.step(0, timeout=30)  # would time out (30 s) if it were not found at once
    assert e.value.kind == "deadlock"


def test_9_an_empty_tuple_of_branches_is_refused():
    rt = Runtime(Pick.compile())
    with pytest.raises(ValueError, match=r"chooser: branch=\(\) names no branch of step 'choose'"):
        rt.step(0, branch=())

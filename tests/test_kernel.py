"""The model vocabulary and the scheduler: primitives, settings, traces, replay."""

import json

import pytest

from safeprefetch import ReplayDivergence, Trace, TraceError, TraceStep, check, replay
from safeprefetch._check.explore import Explorer, final_verdict
from safeprefetch.model import DONE, Model, ModelError, violate


def make(build, params=None, name="t"):
    return type("T", (Model,), {"name": name, "params": params or {}, "build": lambda self, m, **c: build(m, **c)})


def reachable(model, **cfg):
    e = Explorer(model.compile(cfg or None), stop_at_first=False)
    r = e.run()
    return e, r


def waiters_model(m):
    """Two sleepers on one condvar, then a notifier; records who woke first."""
    m.shared(ready=False, order=())
    m.mutex("lock")
    m.condvar("cv")
    w = m.program("waiter")
    w.acquire("lock", "lock", next="check")
    w.step("check", next=lambda s, me: "got it" if s.ready else "sleep", to=["got it", "sleep"])
    w.wait("sleep", "cv", "lock", next="check", until=lambda s, me: s.ready)

    def got(s, me):
        s.order += (me.name,)
    w.step("got it", got, next="unlock")
    w.release("unlock", "lock", next=DONE)
    n = m.program("notifier")
    n.acquire("lock", "lock", next="set ready")
    n.step("set ready", lambda s, me: setattr(s, "ready", True), next="notify one",
           guard=lambda s, me: True)
    n.notify_one("notify one", "cv", next="unlock")
    n.release("unlock", "lock", next=DONE)
    m.thread("A", w)
    m.thread("B", w)
    m.thread("N", n)


WaitersOne = make(waiters_model)


def test_state_is_a_flat_hashable_tuple():
    machine = WaitersOne.compile()
    assert isinstance(machine.init, tuple)
    hash(machine.init)
    assert machine.describe(machine.init)["A.pc"] == "lock"


def test_notify_one_fifo_wakes_only_the_head_of_the_queue():
    machine = WaitersOne.compile()
    # A sleeps, then B sleeps, then N sets ready and notifies once.
    trace = Trace(tuple(TraceStep(t, l) for t, l in [
        ("A", "lock"), ("A", "check"), ("A", "sleep"), ("B", "lock"), ("B", "check"), ("B", "sleep"),
        ("N", "lock"), ("N", "set ready"), ("N", "notify one")]))
    last = replay(machine, trace)[-1]
    assert machine.pc(last, 0) == "sleep (woken)"
    assert machine.pc(last, 1) == "sleep (asleep)"
    assert last[machine.cond_index["cv"]] == (1,)


def test_notify_one_any_branches_over_every_waiter():
    machine = WaitersOne.compile({"notify": "any"})
    trace = Trace(tuple(TraceStep(t, l) for t, l in [
        ("A", "lock"), ("A", "check"), ("A", "sleep"), ("B", "lock"), ("B", "check"), ("B", "sleep"),
        ("N", "lock"), ("N", "set ready")]))
    before = replay(machine, trace)[-1]
    options = machine.fire(before, 2)
    assert len(options) == 2
    woken = sorted(machine.pc(nxt, t) for (_, nxt), t in zip(options, (0, 1)))
    assert woken == ["sleep (woken)", "sleep (woken)"]
    # One notify_one leaves the other waiter asleep, so "any" can strand B or A: both verdicts are a hang.
    result = check(WaitersOne, {"notify": "any"})
    assert result.verdict == "deadlock"


def test_notify_all_wakes_everyone_and_the_model_terminates():
    NotifyAll = make(lambda m: _replace_notify(m))
    assert check(NotifyAll).verdict == "ok"
    assert check(NotifyAll, {"spurious": "on"}).verdict == "ok"


def _replace_notify(m):
    waiters_model(m)
    n = m.programs["notifier"]
    n.specs.pop("notify one")
    n.notify_all("notify one", "cv", next="unlock")
    # keep table order: notify one was before unlock
    unlock = n.specs.pop("unlock")
    n.specs["unlock"] = unlock


def test_a_hang_with_only_spurious_wakeups_left_is_still_a_hang():
    result = check(WaitersOne, {"spurious": "on"})
    assert result.verdict == "deadlock"
    assert result.exhaustive


def test_spurious_wakeups_are_explored_when_on():
    e_off, _ = reachable(WaitersOne)
    e_on, _ = reachable(WaitersOne, spurious="on")
    assert len(e_on.parents) > len(e_off.parents)
    labels = {machine_label for machine_label in _labels(e_on)}
    assert "sleep: spurious wakeup" in labels


def _labels(explorer):
    m = explorer.machine
    for state in explorer.parents:
        for (t, b), _ in m.successors(state):
            yield m.step_info(state, t).label


def test_mutex_excludes_and_release_of_unowned_mutex_is_a_violation():
    def build(m):
        m.mutex("lock")
        p = m.program("p")
        p.release("oops", "lock", next=DONE)
        m.thread("p0", p)
    r = check(make(build))
    assert r.verdict == "invariant"
    assert "does not hold" in r.violation.message
    assert len(r.trace) == 1 and r.violation.on_step


def test_semaphore_blocks_at_zero_and_bounded_release_overflows():
    def build(m):
        m.semaphore("sem", 0, bound=1)
        a = m.program("a")
        a.sem_acquire("down", "sem", next=DONE)
        b = m.program("b")
        b.sem_release("up", "sem", next="up again")
        b.sem_release("up again", "sem", next=DONE)
        m.thread("A", a)
        m.thread("B", b)
    r = check(make(build))
    # B: up (1) then up again (2 > bound) unless A took it in between; shortest is 2 steps.
    assert r.verdict == "overflow"
    assert len(r.trace) == 2


def test_flag_wait_blocks_until_set():
    def build(m):
        m.flag("go")
        a = m.program("a")
        a.wait_flag("wait for go", "go", next=DONE)
        m.thread("A", a)
    r = check(make(build))
    assert r.verdict == "deadlock"
    assert "wait for go" in r.violation.message


def test_step_violation_ends_the_trace_at_that_step():
    def build(m):
        m.shared(x=0)
        p = m.program("p")
        p.step("inc", lambda s, me: setattr(s, "x", s.x + 1), next="check")
        p.step("check", lambda s, me: violate("underflow", "x went up") if s.x else None, next=DONE)
        m.thread("p0", p)
    r = check(make(build))
    assert r.verdict == "underflow"
    assert [s.step for s in r.trace] == ["inc", "check"]
    assert r.violation.on_step and r.violation.step == 2  # raised by step number 2, a field


def test_where_a_violation_shows_is_a_field_and_in_the_json():
    r = check(WaitersOne)
    v = r.violation
    assert not v.on_step and v.step == len(r.trace) and v.cycle_start is None
    out = r.to_json()
    assert (out["step"], out["on_step"], out["cycle_start"]) == (v.step, False, None)
    ok = check(make(lambda m: m.thread("t", m.program("p").step("s", next=DONE))))
    assert ok.to_json()["step"] is None and ok.to_json()["cycle_start"] is None


def test_bad_models_are_named_errors():
    def unknown_next(m):
        p = m.program("p")
        p.step("a", next="nowhere")
        m.thread("p0", p)
    with pytest.raises(ModelError, match="unknown step 'nowhere'"):
        make(unknown_next).compile()

    def dup(m):
        p = m.program("p")
        p.step("a", next=DONE)
        p.step("a", next=DONE)
    with pytest.raises(ModelError, match="duplicate step label"):
        make(dup).compile()

    def undeclared(m):
        p = m.program("p")
        p.acquire("a", "nolock", next=DONE)
        m.thread("p0", p)
    with pytest.raises(ModelError, match="undeclared mutex 'nolock'"):
        make(undeclared).compile()

    with pytest.raises(ModelError, match="no threads"):
        make(lambda m: None).compile()


def test_config_is_checked_and_converted():
    M = make(lambda m, n, flag: waiters_model(m), params={"n": 1, "flag": False})
    assert M.configure({"n": "3", "flag": "on"})["n"] == 3
    assert M.configure({"flag": "on"})["flag"] is True
    for bad in ({"n": "x"}, {"n": True}, {"flag": "maybe"}, {"nope": 1}, {"notify": "lifo"}, {"spurious": "2"}):
        with pytest.raises(ModelError):
            M.configure(bad)


def test_trace_json_round_trip_and_replay_reproduces_the_same_states():
    r = check(WaitersOne)
    text = json.dumps(r.to_json())
    again = Trace.loads(text)
    assert again == r.trace
    machine = WaitersOne.compile()
    states = replay(machine, again)
    assert states[-1] == r.violation.state
    assert final_verdict(machine, again)[0] == r.verdict


@pytest.mark.parametrize("text, message", [
    ("not json", "not valid JSON"),
    ("{}", "must be a JSON list"),
    ("[1]", "must be an object"),
    ('[{"thread": 1, "step": "x"}]', "string 'thread' and 'step'"),
    ('[{"thread": "A", "step": "lock", "branch": 3}]', "'branch' must be a string"),
])
def test_malformed_trace_json_is_a_clear_error(text, message):
    with pytest.raises(TraceError, match=message):
        Trace.loads(text)


def test_a_diverging_replay_is_a_named_error():
    machine = WaitersOne.compile()
    with pytest.raises(ReplayDivergence, match="is at 'lock', not at 'sleep'"):
        replay(machine, Trace((TraceStep("A", "sleep"),)))
    with pytest.raises(ReplayDivergence, match="no thread 'Z'"):
        replay(machine, Trace((TraceStep("Z", "lock"),)))
    # B cannot lock while A holds the lock.
    with pytest.raises(ReplayDivergence, match="not enabled"):
        replay(machine, Trace((TraceStep("A", "lock"), TraceStep("B", "lock"))))


def test_successors_are_pure_and_canonically_ordered():
    machine = WaitersOne.compile({"notify": "any", "spurious": "on"})
    e, _ = reachable(WaitersOne, notify="any", spurious="on")
    for state in list(e.parents)[:200]:
        a = machine.successors(state)
        b = machine.successors(state)
        assert a == b
        assert [c for c, _ in a] == sorted(c for c, _ in a)


def test_state_bound_makes_the_result_not_exhaustive():
    from safeprefetch._tools.catalog import load_model
    r = check(load_model("prefetcher"), {"items": 4, "workers": 2}, max_states=50)
    assert r.verdict == "ok" and not r.exhaustive and r.states == 50


def test_dfs_finds_the_same_verdicts_as_bfs():
    from safeprefetch._tools.catalog import catalog
    for name, model in catalog().items():
        bfs = check(model)
        dfs = check(model, strategy="dfs")
        assert dfs.verdict == bfs.verdict, name
        assert len(dfs.trace) >= len(bfs.trace)
        if bfs.ok:
            assert dfs.states == bfs.states

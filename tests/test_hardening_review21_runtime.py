"""The twenty-first round (docs/hardening.md), the live runtime's review: a failure recorded by a handler inside
a step, run_thread's branch choices, the first state's invariants, invariants of the steps a generated runtime
runs through plain ``fire``, and refusing a Model class or a bool timeout.

The tests of a fix reproduce a finding and failed on the commit before the fix (95aa9ad); the others guard
what each fix must keep. No test sleeps to synchronize: they wait on observable state (``_polling``) or on
events set by the code under test.
"""

from __future__ import annotations

import random
import signal
import threading
import types

import pytest

from safeprefetch import check
from safeprefetch._runtime import driving
from safeprefetch.lowlevel import LiveError, LiveViolation, Runtime, run_live
from safeprefetch.model import DONE, Model

from _polling import wait_until

pytestmark = pytest.mark.timeout(120)

# -- 1. fail() from a signal handler inside a step: the step raises it, and never parks for good -----------------

_ARMED: list = []


def _land_signal_here() -> None:
    if _ARMED:
        _ARMED.clear()
        signal.raise_signal(signal.SIGUSR1)  # its Python handler runs right here, inside the step (lock held)


class _HandlerParks(Model):
    """``waiter``'s guard lands a signal; ``other`` parks on the same flag first; ``goer`` never steps."""

    name = "r21_handler_parks"

    def build(self, m):
        m.shared(go=False)

        def landing_guard(s, me):
            _land_signal_here()
            return s.go

        def go(s, me):
            s.go = True

        w = m.program("waiter")
        w.step("wait for go", guard=landing_guard, next=DONE)
        o = m.program("other")
        o.step("wait too", guard=lambda s, me: s.go, next=DONE)
        g = m.program("goer")
        g.step("work", next="set")
        g.step("set", go, next=DONE)
        m.thread("waiter", w)
        m.thread("other", o)
        m.thread("goer", g)


class _HandlerRuns(Model):
    name = "r21_handler_runs"

    def build(self, m):
        m.shared(x=0)

        def eff(s, me):
            _land_signal_here()
            s.x += 1

        p = m.program("p")
        p.step("a", eff, next="b")
        p.step("b", next=DONE)
        m.thread("t", p)


@pytest.fixture
def usr1():
    old = signal.getsignal(signal.SIGUSR1)
    yield lambda handler: signal.signal(signal.SIGUSR1, handler)
    _ARMED.clear()
    signal.signal(signal.SIGUSR1, old)


@pytest.mark.timeout(60)
def test_fail_from_a_handler_inside_a_step_raises_as_that_step_returns(usr1):
    rt = Runtime(_HandlerRuns.compile())
    usr1(lambda *a: rt.fail(LiveError("stopped", "a watchdog stopped the run")))
    _ARMED.append(1)
    with pytest.raises(LiveError, match="a watchdog stopped the run"):
        rt.step(0)
    assert rt.pc(0) == "b"  # the step itself was taken: the failure came after it
    with pytest.raises(LiveError, match="a watchdog"):
        rt.step(0)


@pytest.mark.timeout(60)
def test_fail_from_a_handler_inside_a_step_that_parks_raises_instead_of_sleeping(usr1):
    rt = Runtime(_HandlerParks.compile())
    usr1(lambda *a: rt.fail(LiveError("stopped", "a watchdog stopped the run")))
    raised: list = []

    def other() -> None:
        try:
            rt.step(1)
        except LiveError as e:
            raised.append(e)

    th = threading.Thread(target=other, daemon=True)
    th.start()
    assert wait_until(lambda: rt.is_parked(1))
    _ARMED.append(1)
    done = threading.Event()
    main_raised: list = []
    rescued: list = []

    def unstick() -> None:  # only if the step hangs (the defect): fail it from outside, so the test reports
        if not done.wait(10):
            rescued.append(rt.is_parked(0))
            rt.fail(LiveError("unstuck", "the test had to wake it"))

    threading.Thread(target=unstick, daemon=True).start()
    try:
        rt.step(0)
    except LiveError as e:
        main_raised.append(e)
    done.set()
    th.join(10)
    assert rescued == []  # raised at once, not parked until the test's rescue
    assert [e.kind for e in main_raised] == ["stopped"]
    assert not th.is_alive() and [e.kind for e in raised] == ["stopped"]  # the thread parked before woke too
    assert rt.parked_count == 0


# -- 2. run_thread: every candidate branch, the first enabled when the step runs ------------------------------


class _ExtRace(Model):
    """Two takers race for one item; a take's outcome is 'ok' (needs the item) or 'skip' (always allowed)."""

    name = "r21_ext_race"

    def build(self, m):
        m.shared(items=1)

        def take(s, me, b):
            if b == "ok":
                s.items -= 1

        p = m.program("taker")
        p.external("take", "take", take, branches=("ok", "skip"),
                   guard=lambda s, me, b: s.items > 0 if b == "ok" else True, next=DONE)
        m.thread("a", p)
        m.thread("b", p)
        m.invariant("items >= 0", lambda s: s.items >= 0, "underflow")


class _NotifyRace(Model):
    """Two waiters asleep on c; two notifiers each notify_one once (after passing through the lock)."""

    name = "r21_notify_race"

    def build(self, m):
        m.shared(asleep=0)
        m.mutex("l")
        # The notifiers notify after their unlock, so that the two race: a C++-style condvar (a threading.Condition
        # refuses that, the twenty-second round).
        m.condvar("c", notify_unlocked=True)

        def arrive(s, me):
            s.asleep += 1

        w = m.program("waiter")
        w.acquire("lock", "l", next="arrive")
        w.step("arrive", arrive, next="wait")
        w.wait("wait", "c", "l", next="unlock")
        w.release("unlock", "l", next=DONE)
        n = m.program("notifier")
        n.step("ready", guard=lambda s, me: s.asleep == 2, next="lock")
        n.acquire("lock", "l", next="unlock")
        n.release("unlock", "l", next="notify")
        n.notify_one("notify", "c", next=DONE)
        for t in ("w1", "w2"):
            m.thread(t, w)
        for t in ("n1", "n2"):
            m.thread(t, n)


class _FirstRng(random.Random):
    """Picks the first option, keeps the given order: the choice a stale pick makes in these races."""

    def choice(self, seq):
        return seq[0]

    def sample(self, population, k):
        return list(population)[:k]

    def random(self):
        return 0.5


def _run_thread_paused_at(monkeypatch, rt: Runtime, t: int, label: str):
    """Run thread t by run_thread in a thread, pausing it (in its jitter) once it has chosen its branches for
    the step ``label``; returns (thread, chosen event, go-on event, errors)."""
    chosen, go_on, errors = threading.Event(), threading.Event(), []
    real_sleep = driving.time.sleep

    def sleep(seconds: float) -> None:
        if threading.current_thread() is th and rt.pc(t) == label and not go_on.is_set():
            chosen.set()
            go_on.wait(30)

    monkeypatch.setattr(driving, "time", types.SimpleNamespace(sleep=sleep, real=real_sleep))

    def body() -> None:
        try:
            rt.run_thread(t, rng=_FirstRng(), jitter=1.0)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    th = threading.Thread(target=body, daemon=True)
    th.start()
    return th, chosen, go_on, errors


@pytest.mark.timeout(60)
def test_run_thread_takes_the_branch_still_enabled_of_an_external_step_without_an_action(monkeypatch):
    rt = Runtime(_ExtRace.compile(), record=True)
    th, chosen, go_on, errors = _run_thread_paused_at(monkeypatch, rt, 1, "take")
    assert chosen.wait(10)  # b looked while the item was there: "ok" was enabled
    assert rt.step(0, "ok") == "take"  # a takes it: "ok" is disabled for b, "skip" still enabled
    go_on.set()
    th.join(10)
    assert not th.is_alive() and errors == [] and rt.failure is None
    assert rt.is_done(1) and rt.trace().steps[-1].branch == "skip"


@pytest.mark.timeout(60)
def test_run_thread_takes_a_waiter_still_asleep_of_a_notify_under_notify_any(monkeypatch):
    rt = Runtime(_NotifyRace.compile({"notify": "any"}), record=True)
    for w in (0, 1):  # both waiters asleep on c
        for _ in range(3):
            rt.step(w)
    th, chosen, go_on, errors = _run_thread_paused_at(monkeypatch, rt, 2, "notify")
    assert chosen.wait(10)  # n1 looked while both slept: "wake w1" was enabled
    for _ in range(4):
        rt.step(3, "wake w1" if rt.pc(3) == "notify" else None)  # n2 wakes w1 first
    go_on.set()
    th.join(10)
    try:
        assert not th.is_alive() and errors == [] and rt.failure is None
        assert rt.trace().steps[-1] == type(rt.trace().steps[-1])("n1", "notify", "wake w2")
    finally:
        rt.fail(LiveError("test over", "the test is over"))  # releases n1 if it waits (the defect)
        th.join(10)


@pytest.mark.timeout(60)
def test_a_tuple_outcome_is_refused_for_an_external_step_with_an_action_or_a_name_it_lacks():
    rt = Runtime(_ExtRace.compile(), {"take": lambda ctx: ("ok", "skip")})
    with pytest.raises(ValueError, match="unknown outcome"):
        rt.step(0)
    rt = Runtime(_ExtRace.compile())
    with pytest.raises(ValueError, match="unknown outcome"):
        rt.step(0, ("ok", "maybe"))
    assert rt.step(0, ("skip", "ok")) == "take"
    assert rt.state[0] == 1  # skipped: the item is still there


@pytest.mark.timeout(300)
@pytest.mark.parametrize("model, config", [(_ExtRace, {}), (_NotifyRace, {"notify": "any"})])
def test_run_live_agrees_with_the_checker_on_races_for_a_branch(model, config):
    assert check(model, config).verdict == "ok"
    verdicts = {run_live(model.compile(config), seed=seed, jitter=0.001, timeout=20).verdict for seed in range(30)}
    assert verdicts == {"ok"}


# -- 3. The first state is checked against the invariants, as the checker checks it --------------------------


class _InitBad(Model):
    """The first state breaks the invariant; the first step repairs it."""

    name = "r21_init_bad"

    def build(self, m):
        m.shared(x=0)

        def fix(s, me):
            s.x = 1

        p = m.program("p")
        p.step("fix", fix, next=DONE)
        m.thread("t", p)
        m.invariant("x is set", lambda s: s.x == 1)


@pytest.mark.timeout(60)
def test_a_first_state_that_breaks_an_invariant_fails_the_live_run_as_the_checker_says():
    found = check(_InitBad)
    assert found.verdict == "invariant" and found.violation.trace.steps == ()
    machine = _InitBad.compile()
    assert run_live(machine, seed=0).verdict == found.verdict
    assert run_live(machine, schedule=found.violation.trace).verdict == found.verdict
    rt = Runtime(machine)
    with pytest.raises(LiveViolation, match="x is set"):
        rt.step(0)
    assert rt.pc(0) == "fix"  # no step taken from a broken state
    assert Runtime(machine, check_invariants=False).step(0) == "fix"  # unless asked not to check


# -- 4. A generated runtime checks the invariants after the steps it runs through the machine's fire -----------


class _RefusedInv(Model):
    """One step the generator refuses (an assignment expression) breaks the invariant."""

    name = "r21_refused_inv"

    def build(self, m):
        m.shared(count=0)

        def add_two(s, me):
            if (k := 2) > 1:
                s.count += k

        def add_none(s, me):
            s.count += 0

        p = m.program("p")
        p.step("add", add_two, next="after")
        p.step("after", add_none, next=DONE)
        m.thread("t", p)
        m.invariant("count <= 1", lambda s: s.count <= 1, "overflow")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("generated", [False, True])
def test_a_step_the_generator_refused_has_its_invariants_checked(generated):
    from safeprefetch._dsl.codegen import compile_transitions

    assert check(_RefusedInv).verdict == "overflow"
    machine = _RefusedInv.compile()
    compiled = compile_transitions(machine, _RefusedInv) if generated else None
    if generated:
        assert [label for _t, label, _why in compiled.refused] == ["add"] and compiled.invariants_folded
    rt = Runtime(machine, compiled=compiled, record=True)
    with pytest.raises(LiveViolation) as e:
        rt.step(0)
    assert e.value.kind == "overflow" and rt.state[0] == 2


@pytest.mark.timeout(60)
def test_a_generated_step_still_checks_no_invariant_twice():
    from safeprefetch._dsl.codegen import compile_transitions

    machine = _RefusedInv.compile()
    rt = Runtime(machine, compiled=compile_transitions(machine, _RefusedInv))
    entries = rt._entries[0]
    assert entries["add"].first is None and entries["add"].inv != ()  # through fire: checked after it
    assert entries["after"].first is not None and entries["after"].inv == ()  # checked inside its transition


# -- 6. A Model class, or a bool timeout, is refused with a clear error ----------------------------------------


@pytest.mark.timeout(60)
def test_a_model_class_is_refused_naming_compile():
    for call in (lambda: Runtime(_InitBad), lambda: run_live(_InitBad)):
        with pytest.raises(TypeError, match=r"_InitBad\.compile\(\)"):
            call()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("timeout", [True, False])
def test_a_bool_step_timeout_is_refused(timeout):
    rt = Runtime(_HandlerRuns.compile())
    with pytest.raises(TypeError, match="timeout must be a number of seconds"):
        rt.step(0, timeout=timeout)
    assert rt.pc(0) == "a" and rt.step(0, timeout=1) == "a"


# -- 5. A replayed spurious=on hang is judged once past the trace's end, as a free run is -----------------------


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["one_cond_signal", "dropped_sentinel"])
def test_a_replayed_hang_under_spurious_wakeups_is_reproduced(name):
    import warnings

    from safeprefetch import load_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        machine = load_model(name).compile({"spurious": "on"})
    found = check(machine)
    assert found.verdict in ("deadlock", "shutdown_hang")
    for seed in range(3):
        replay = run_live(machine, schedule=found.violation.trace, seed=seed, timeout=20)
        assert (replay.verdict, replay.conforms) == (found.verdict, True)

"""The twenty-second round, the checker's review (docs/hardening.md): a condvar has one mutex, held to notify."""

from __future__ import annotations

import pytest

from safeprefetch import check
from safeprefetch.model import DONE, Model, ModelError


def _setter_waiter(m, *, notify_holding: bool, notify: str = "notify_all", declare: dict | None = None,
                   waiters: int = 1) -> None:
    """A setter sets ``ready`` and notifies ``cv`` (before or after its unlock); waiters wait for ``ready``."""
    m.shared(ready=False)
    m.mutex("lock")
    m.condvar("cv", **(declare or {}))

    def set_ready(s, me):
        s.ready = True

    p = m.program("setter")
    p.acquire("lock", "lock", next="set")
    if notify_holding:
        p.step("set", set_ready, next="notify")
        getattr(p, notify)("notify", "cv", next="unlock")
        p.release("unlock", "lock", next=DONE)
    else:
        p.step("set", set_ready, next="unlock")
        p.release("unlock", "lock", next="notify")
        getattr(p, notify)("notify", "cv", next=DONE)
    w = m.program("waiter")
    w.acquire("lock", "lock", next="check")
    w.step("check", next=lambda s, me: "unlock" if s.ready else "wait", to=["unlock", "wait"])
    w.wait("wait", "cv", "lock", next="check", until=lambda s, me: s.ready)
    w.release("unlock", "lock", next=DONE)
    m.thread("setter", p)
    for i in range(waiters):
        m.thread(f"waiter{i}", w)


class UnlockedNotify(Model):
    """unlocked_notify: the setter notifies after its unlock, which threading.Condition refuses."""
    name = "unlocked_notify"
    params = {"notify_holding": False, "kind": "notify_all", "waiters": 1}

    def build(self, m, notify_holding, kind, waiters):
        _setter_waiter(m, notify_holding=notify_holding, notify=kind, waiters=waiters)


class CppUnlockedNotify(Model):
    """cpp_unlocked_notify: the same design over a std::condition_variable, which may be notified unlocked."""
    name = "cpp_unlocked_notify"
    params = {}

    def build(self, m):
        _setter_waiter(m, notify_holding=False, declare={"notify_unlocked": True})


class TwoMutexes(Model):
    """two_mutexes: one condvar waited on under two different mutexes."""
    name = "two_mutexes"
    params = {}

    def build(self, m):
        m.shared(ready=False)
        m.mutex("a")
        m.mutex("b")
        m.condvar("cv")
        for name, mu in (("w0", "a"), ("w1", "b")):
            w = m.program(name)
            w.acquire("lock", mu, next="wait")
            w.wait("wait", "cv", mu, next="unlock")
            w.release("unlock", mu, next=DONE)
            m.thread(name, w)


class DeclaredMutex(Model):
    """declared_mutex: ``m.condvar("cv", "lock")`` binds the mutex; a notify nobody waits for still needs it."""
    name = "declared_mutex"
    params = {"wait_on": "lock"}

    def build(self, m, wait_on):
        m.shared(n=0)
        m.mutex("lock")
        m.mutex("other")
        m.condvar("cv", "lock")
        p = m.program("p")
        p.notify_one("notify", "cv", next="wait" if wait_on else DONE)
        if wait_on:
            p.acquire("wait", wait_on, next="sleep")
            p.wait("sleep", "cv", wait_on, next=DONE)
        m.thread("t", p)


# -- 1. a notify without the condvar's mutex is a violation, with its shortest trace ----------------------------


@pytest.mark.parametrize("kind", ["notify_all", "notify_one"])
@pytest.mark.parametrize("notify", ["fifo", "any"])
def test_a_notify_without_the_mutex_is_an_invariant_violation(kind, notify):
    # Before: "ok, exhaustive", though threading.Condition.notify raises RuntimeError("cannot notify on
    # un-acquired lock") there: the checker verified a design that cannot run.
    for waiters in (1, 2):
        r = check(UnlockedNotify, {"kind": kind, "waiters": waiters, "notify": notify})
        assert r.verdict == "invariant", (kind, notify, waiters, r.verdict)
        assert "setter notifies cv without holding lock" in r.violation.message
        assert "un-acquired lock" in r.violation.message
        # lock, set, unlock, notify: the shortest schedule, whatever the waiters do first.
        assert len(r.violation.trace.steps) == 4
        assert (r.violation.trace.steps[-1].thread, r.violation.trace.steps[-1].step) == ("setter", "notify")


@pytest.mark.parametrize("reduce", ["none", "symmetry", "por", "all"])
def test_every_reduction_finds_the_unheld_notify(reduce):
    r = check(UnlockedNotify, {"waiters": 2}, reduce=reduce)
    assert (r.verdict, len(r.violation.trace.steps)) == ("invariant", 4)


def test_the_same_design_notifying_under_the_mutex_is_ok():
    for notify in ("fifo", "any"):
        for spurious in ("off", "on"):
            r = check(UnlockedNotify, {"notify_holding": True, "waiters": 2, "notify": notify,
                                       "spurious": spurious})
            assert (r.verdict, r.exhaustive) == ("ok", True)


def test_a_condvar_declared_notify_unlocked_may_be_notified_without_its_mutex():
    # C++'s std::condition_variable (caffe2_sticky_failure's Finalize()) allows it: the opt-out keeps it ok.
    r = check(CppUnlockedNotify)
    assert (r.verdict, r.exhaustive) == ("ok", True)


# -- 2. a condvar has one mutex: two are a model error at compile time -----------------------------------------


def test_a_condvar_waited_on_under_two_mutexes_is_a_model_error():
    # Before: compiled and searched (a threading.Condition has one lock, so the design cannot be written).
    with pytest.raises(ModelError, match=r"condvar 'cv' is used with two mutexes, 'a' \(program 'w0', step 'wait'\)"
                                         r" and 'b' \(program 'w1', step 'wait'\)"):
        TwoMutexes.compile()


def test_a_declared_mutex_binds_the_condvar():
    # No wait at all: the declared mutex still makes the unheld notify a violation, at the first step.
    r = check(DeclaredMutex, {"wait_on": ""})
    assert (r.verdict, len(r.violation.trace.steps)) == ("invariant", 1)
    assert "t notifies cv without holding lock" in r.violation.message
    with pytest.raises(ModelError, match=r"condvar 'cv' is used with two mutexes, 'lock' \(its declaration\) and "
                                         r"'other'"):
        DeclaredMutex.compile({"wait_on": "other"})


def test_a_condvar_declared_with_an_undeclared_mutex_is_a_model_error():
    class Bad(Model):
        """bad: the condvar names a mutex never declared."""
        name = "bad"
        params = {}

        def build(self, m):
            m.mutex("lock")
            m.condvar("cv", "lokc")
            p = m.program("p")
            p.notify_one("n", "cv", next=DONE)
            m.thread("t", p)
    with pytest.raises(ModelError, match=r"condvar 'cv' is declared with undeclared mutex 'lokc'.*lock"):
        Bad.compile()


def test_the_catalog_model_that_notifies_unlocked_keeps_its_verdict():
    from safeprefetch._tools.catalog import load_model
    r = check(load_model("caffe2_sticky_failure"))
    assert (r.verdict, len(r.violation.trace.steps)) == ("error_lost", 27)

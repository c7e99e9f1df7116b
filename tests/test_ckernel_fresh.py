"""Round 23, a fresh review of the kernel's step in C (``_runtime/ckernel.py``) after its entry-record refactor.

* **A subclass's own kernel methods are not bypassed.** The C step stands in for ``Runtime``'s
  ``_begin``/``_take_locked``/``_take``/``_chain``/``_apply``/``_wake_set``/``_enabled`` on its common path. A
  runtime class that overrides one of them (the public ``safeprefetch.lowlevel.Runtime`` is subclassable, and
  ``Core.runtime_factory`` swaps the class in) had its override silently skipped under ``kernel=`` -- the same
  trap the kernel's mutants fell into (``check_mutation``). Such a class keeps the Python step.
* **Branch requests the call-for-call test does not make** (guards): a name the step lacks, an unhashable
  name, ``(None,)``, a tuple mixing known and unknown names, branch and ``then`` objects whose ``__hash__``
  raises ``KeyboardInterrupt`` or runs a handler's ``fail()`` -- calls back into Python that do not go
  through ``K_out``: the C step and the Python step give the same outcome, state, count, record, debt and
  failure.
* **A step that parks calls its transition once before parking**, as the Python step does: the C step handed a
  disabled step to ``_take``, which called the transition again (one more fallback per park counted).
* **Freed by reference counting** (a guard): a runtime on the C step, with the collector off, is freed when
  its last reference goes (``K_Kernel`` holds its lock, lists and entries, not the runtime).
"""

import gc
import random
import weakref

import pytest
from _cython import cython_here

from safeprefetch._dsl.codegen import compile_transitions
from safeprefetch._prefetcher.machine import machine_for, typed_for
from safeprefetch._runtime.errors import LiveError, StepTimeout
from safeprefetch._runtime.kernel import Runtime
from safeprefetch._runtime.typed import typed_transitions
from safeprefetch.model import DONE, Model

pytestmark = pytest.mark.skipif(not cython_here(), reason="the kernel's C step is built with Cython (the speed extra)")

SHAPE = (2, 1, True, True, 0, 2)
REPLACED = ("_begin", "_take_locked", "_take", "_chain", "_apply", "_wake_set", "_enabled")


def _machine(items=6):
    return machine_for(SHAPE[0], SHAPE[1], items, *SHAPE[2:])


@pytest.mark.parametrize("name", REPLACED)
def test_a_subclass_that_overrides_a_method_the_c_step_stands_in_for_keeps_the_python_step(name):
    typed = typed_for(*SHAPE)
    calls = []

    def counted(self, *a, **k):
        calls.append(name)
        return getattr(Runtime, name)(self, *a, **k)

    Own = type("Own", (Runtime,), {name: counted})
    machine = _machine()
    rt = Own(machine, None, record=True, compiled=typed.compiled, kernel=typed.kernel)
    if name not in ("_wake_set", "_enabled"):  # (those two are called only with a thread parked)
        w = machine.thread_names.index("worker0")
        rt.step(w)  # claim a slot
        rt.step(w, chain=True)  # fetch into it (external), and chain the next plain step
        assert rt.steps >= 2 and calls, f"{name} was not called"
    assert rt._fast is None, f"the C step would bypass {name}"


def test_a_subclass_that_overrides_only_the_wrapper_keeps_the_c_step():
    """(A guard: overriding ``step`` and calling it, as tests/test_hardening_review20.py does, bypasses nothing.)"""
    typed = typed_for(*SHAPE)

    class Wrapped(Runtime):
        def step(self, t, *a, **k):
            return super().step(t, *a, **k)

    rt = Wrapped(_machine(), None, compiled=typed.compiled, kernel=typed.kernel)
    assert rt._fast is not None


class _Name:
    """A branch name as an object: its hash raises, runs a handler's ``fail()``, or is the name's."""

    def __init__(self, name, mode, rt):
        self.name, self.mode, self.rt = name, mode, rt

    def __hash__(self):
        if self.mode == "raise":
            raise KeyboardInterrupt("in __hash__")
        if self.mode == "fail":
            self.rt.fail(LiveError("handler", "failed from inside the step"))
        return hash(self.name)

    def __eq__(self, other):
        return other == self.name

    def __repr__(self):
        return f"_Name({self.name!r})"


def _outcome(rt, call):
    try:
        got = ("returned", call(rt))
    except BaseException as e:  # noqa: BLE001 - the outcome compared, whatever it is
        got = ("raised", type(e).__name__, str(e))
    failure = rt.failure
    return got, rt.state, rt.steps, rt.record, rt._owed, rt._nparked, failure and str(failure)


def _request(rng, names, rt):
    r = rng.random()
    if r < 0.2:
        return None
    if r < 0.35:
        return rng.choice(names)
    if r < 0.5:
        return tuple(rng.sample(names, rng.randint(0, 3)))
    if r < 0.55:
        return [names[0]]  # unhashable
    if r < 0.6:
        return (None,)
    if r < 0.65:
        return (names[0], [1])
    obj = _Name(rng.choice(names), rng.choice(["raise", "fail", "plain"]), rt)
    return obj if r < 0.85 else (obj,)


def test_odd_branch_requests_give_the_same_outcome_on_both_steps():
    """(A guard: the calls back into Python a branch request makes, outside ``K_out``, leave the two alike.)"""
    typed = typed_for(*SHAPE)
    machine = _machine()
    names = sorted({b for infos in machine.infos for i in infos.values() for b in i.branches} | {"no such branch"})
    calls = raised = 0
    for seed in range(150):
        rng = random.Random(seed)
        c = Runtime(machine, None, record=True, compiled=typed.compiled, kernel=typed.kernel)
        py = Runtime(machine, None, record=True, compiled=typed.compiled)
        for _ in range(30):
            t = rng.randrange(len(machine.thread_names))
            chain = rng.random() < 0.5
            outcomes = []
            for rt in (c, py):
                r = random.Random(seed * 1000 + calls)  # the same requests for both, each naming its own runtime
                b, then = _request(r, names, rt), _request(r, names, rt)
                outcomes.append(_outcome(rt, lambda rt: rt.step(t, b, 0, chain=chain, then=then)))
            calls += 1
            raised += outcomes[1][0][0] == "raised"
            assert outcomes[0] == outcomes[1], (seed, t, b, chain, then)
            if py.failure is not None:
                break
    assert calls > 1000 and 100 < raised < calls


def test_a_runtime_on_the_c_step_is_freed_by_reference_counting():
    """(A guard.)"""
    typed = typed_for(*SHAPE)
    machine = _machine()
    gc.disable()
    try:
        rt = Runtime(machine, None, record=True, compiled=typed.compiled, kernel=typed.kernel)
        rt.step(machine.thread_names.index("worker0"))
        gone = weakref.ref(rt)
        kernel = weakref.ref(rt._fast.__self__) if hasattr(type(rt._fast.__self__), "__weakref__") else None
        del rt
        assert gone() is None
        assert kernel is None or kernel() is None
    finally:
        gc.enable()


class _HugeWait(Model):
    """A waiter whose guard reads a value past 64 bits: its typed guard hands every state to Python."""

    name = "huge_wait_typed"

    def build(self, m):
        m.shared(big=2**70, go=0)

        def set_go(s, me):
            s.go = 1

        waiter = m.program("waiter")
        waiter.step("wait", None, next=DONE, guard=lambda s, me: s.go == 1 and s.big > 0)
        setter = m.program("setter")
        setter.step("set", set_go, next=DONE)
        m.thread("waiter", waiter)
        m.thread("setter", setter)


def test_a_step_that_parks_calls_its_transition_as_often_as_the_python_step():
    """Found: the C step called the transition, found it disabled, and handed the step to ``_take``, which called
    it again before parking: one more fallback per park in ``TypedTransitions.fallbacks()`` than the Python step
    counts (and one more transition call per park)."""
    machine = _HugeWait.compile()
    typed = typed_transitions(compile_transitions(machine, _HugeWait))
    counted = []
    for kernel in (typed.kernel, None):
        rt = Runtime(machine, None, record=True, compiled=typed.compiled, kernel=kernel)
        before = sum(typed.module.fallbacks())
        with pytest.raises(StepTimeout):
            rt.step(0, timeout=0)  # parks, and times out at once
        counted.append(sum(typed.module.fallbacks()) - before)
        assert rt.steps == 0 and rt._nparked == 0 and rt._owed is None
    assert counted[1] >= 1 and counted[0] == counted[1], counted

"""The C step's stores at slot offsets, and the action contexts it reuses: invisible, checked from outside.

``Runtime`` keeps the fields the C step reads and stores (``ckernel.FIELDS``) in slots, and the C step
reaches them at their offsets, as the slots' descriptors do; an external step's ``ActionContext`` is filled
the same way, and one that its action did not keep is filled again by the next external step on that thread.
These tests check what a user could see of either:

* a context an action keeps is never changed afterwards: every kept context still shows its own thread,
  label and snapshot after the run, on the C step as on the Python step;
* a context's ``me`` is the view of its own snapshot, even when the context is a reused one whose last action
  built a view;
* the cached contexts hold no runtime: a runtime whose actions ran is freed by reference counting;
* a subclass that puts a property, or a slot of its own, where ``Runtime``'s slot is gets the Python step's
  semantics or a clear error, never stores that bypass it;
* the fields read through Python after C steps are the ones the C step stored (``steps``, ``_state``, ``record``).
"""

import gc
import weakref

import pytest
from _cython import cython_here

from safeprefetch._prefetcher.machine import machine_for, typed_for
from safeprefetch._runtime.ckernel import FIELDS
from safeprefetch._runtime.conformance import verify_record
from safeprefetch._runtime.kernel import Runtime

pytestmark = pytest.mark.skipif(not cython_here(), reason="the kernel's C step is built with Cython (the speed extra)")

SHAPE = (3, 1, True, True, 0, 3)


def _drive(rt, machine, items):
    """One worker and the consumer, stepped on this thread in a fixed order until the stream is drained."""
    w, c = machine.thread_names.index("worker0"), machine.thread_names.index("consumer")
    rt.step(w)  # claims the first slot
    for _ in range(items):
        rt.step(w, chain=True)  # fetches into it, and claims the next (or stops)
        rt.step(c, "take up to 1")
        rt.step(c)  # releases the lease
    return w, c


def _runtime(items, fetch, kernel=True):
    typed = typed_for(*SHAPE)
    machine = machine_for(SHAPE[0], SHAPE[1], items, *SHAPE[2:])
    rt = Runtime(machine, {"fetch": fetch}, record=True, compiled=typed.compiled,
                 kernel=typed.kernel if kernel else None)
    assert (rt._fast is not None) == kernel
    return machine, rt


@pytest.mark.parametrize("kernel", [True, False], ids=["C step", "Python step"])
def test_a_context_an_action_keeps_is_never_changed_afterwards(kernel):
    kept, other = [], []

    def fetch(ctx):
        if len(kept) % 2 == 0:  # every other context is kept; the ones between are free to be reused
            kept.append((ctx, ctx.runtime, ctx.thread, ctx.state, ctx.label))
        else:
            kept.append(None)
            other.append((ctx.thread, ctx.state, ctx.label))
        return None

    machine, rt = _runtime(6, fetch, kernel)
    _drive(rt, machine, 6)
    assert len([k for k in kept if k is not None]) >= 3 and other
    for entry in kept:
        if entry is not None:
            ctx, runtime, thread, state, label = entry
            assert (ctx.runtime, ctx.thread, ctx.label) == (runtime, thread, label) and ctx.state is state
    assert len({id(k[0]) for k in kept if k is not None}) == len([k for k in kept if k is not None])
    report = verify_record(rt.machine, rt.record)
    assert report.ok, report


def test_a_reused_context_shows_the_view_of_its_own_snapshot():
    views = []

    def fetch(ctx):
        fresh = machine.local_views[ctx.thread](ctx.state)
        views.append(((ctx.me.idx, ctx.me.slot), (fresh.idx, fresh.slot)))
        return None

    machine, rt = _runtime(5, fetch)
    _drive(rt, machine, 5)
    assert len(views) >= 5
    assert all(got == want for got, want in views), views
    assert [got[0] for got, _want in views] == list(range(len(views)))  # each fetch its own item, in order


def test_a_runtime_whose_actions_ran_is_freed_by_reference_counting():
    gc.disable()
    try:
        machine, rt = _runtime(3, lambda ctx: None)
        _drive(rt, machine, 3)
        gone = weakref.ref(rt)
        del rt
        assert gone() is None
    finally:
        gc.enable()


def test_a_subclass_with_a_property_in_place_of_a_field_is_refused_with_a_clear_error():
    typed = typed_for(*SHAPE)
    machine = machine_for(SHAPE[0], SHAPE[1], 2, *SHAPE[2:])

    class Watched(Runtime):
        @property
        def steps(self):
            return 0

        @steps.setter
        def steps(self, value):
            pass

    with pytest.raises(TypeError, match="defines 'steps' on its class"):
        Watched(machine, None, compiled=typed.compiled, kernel=typed.kernel)

    class Reslotted(Runtime):
        __slots__ = ("_state",)  # a second slot of that name: the C step would store Runtime's

    with pytest.raises(TypeError, match="defines '_state' on its class"):
        Reslotted(machine, None, compiled=typed.compiled, kernel=typed.kernel)


def test_the_fields_python_reads_after_c_steps_are_the_ones_the_c_step_stored():
    machine, c = _runtime(4, lambda ctx: None)
    _m, py = _runtime(4, lambda ctx: None, kernel=False)
    _drive(c, machine, 4)
    _drive(py, machine, 4)
    for name in FIELDS:
        if name != "actions":
            assert getattr(c, name) == getattr(py, name), name
    assert c.steps == len(c.record) > 0 and c._state == py._state
    assert type(c).__dict__["_state"].__get__(c) is c._state  # read through the slot itself

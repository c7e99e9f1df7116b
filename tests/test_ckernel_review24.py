"""Review 24: the pairs cache, the unchecked field reads, the slots at their offsets and the reused contexts.

The four commits after 0d19b20 made the typed transitions and the kernel's step in C faster by trusting
things they used to check. Each test here is a case where the trust was misplaced, and failed before its fix:

* The cache of the last tuple of pairs (``typedsupport.PAIRS_OBJ``) started out as ``None``, so before any
  tuple of pairs was cached, a state whose slot field *is* ``None`` was taken for a cache hit: the typed
  functions read a pool of zeros (``TAGS[0]``, index 0) where Python raises, and a transition returned a
  successor with slots Python never built. Unboxing must raise ``Fallback`` for anything that is not a tuple
  of pairs, cache or no cache. It needs a process whose module has cached nothing yet, so it runs in a child.
* ``K_Kernel.step`` reads and stores the runtime's fields at ``Runtime``'s slot offsets in whatever object it
  is given: given something else (``rt._fast(obj, ...)``), it read and wrote raw memory past the object, and
  the interpreter died of a segmentation fault. It must refuse, with a ``TypeError``, an object whose layout
  is not ``Runtime``'s (checked in C: ``isinstance`` would ask the object's own ``__class__``). A child again.
* A context its action did not keep is cached for the next external step with its ``runtime``, ``state`` and
  view cleared, and ``thread`` and ``label`` left as the action left them: an action that wrote its runtime
  into one of those (they are plain writable slots) made the cache hold the runtime, a cycle through the
  kernel that reference counting never frees. The cache must hold nothing an action gave it.
* A context in that cache was taken out and filled again without asking whether anyone had taken it
  meanwhile: ``gc.get_objects()`` (a memory profiler, a debugger) hands it out, and the holder then saw it
  change under them. Out of the cache, it must be the step's alone to be reused.
"""

import gc
import os
import subprocess
import sys
import textwrap
import weakref

import pytest
from _cython import cython_here

import safeprefetch
from safeprefetch._prefetcher.machine import machine_for, typed_for
from safeprefetch._runtime.kernel import Runtime

pytestmark = pytest.mark.skipif(not cython_here(), reason="the typed transitions need Cython (the speed extra)")

PAIRS_SHAPE = (2, 2, True, True, 0, 2)
SLOTS_SHAPE = (3, 1, True, True, 0, 3)


def _child(code):
    """Run ``code`` in a fresh interpreter (the typed module loaded from the cache, nothing cached in it yet)."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(safeprefetch.__file__)))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=60)


def test_a_slot_field_that_is_none_is_python_s_to_decide_before_any_pairs_are_cached():
    typed_for(*PAIRS_SHAPE)  # built (or loaded) here, so that the child loads it from the cache
    done = _child(f"""
        from safeprefetch._prefetcher.machine import machine_for, typed_for
        typed = typed_for{PAIRS_SHAPE!r}
        init = machine_for(2, 2, 3, *{PAIRS_SHAPE[2:]!r}).init
        odd = (None,) + init[1:]
        def outcome(fn):
            try:
                r = fn(odd)
            except Exception as e:
                return ("raised", type(e).__name__)
            return ("returned", r if r is None or isinstance(r, (bool, tuple)) else repr(r))
        wrong = [n for n in typed.source.typed
                 if outcome(getattr(typed.module, n)) != outcome(typed.source.bind["PY_" + n])]
        print("WRONG", wrong)
    """)
    assert done.returncode == 0, done.stderr
    assert "WRONG []" in done.stdout, done.stdout


def test_the_c_step_refuses_an_object_that_is_not_a_runtime_instead_of_writing_into_it():
    typed_for(*SLOTS_SHAPE)
    done = _child(f"""
        from safeprefetch._prefetcher.machine import machine_for, typed_for
        from safeprefetch._runtime.kernel import Runtime
        typed = typed_for{SLOTS_SHAPE!r}
        rt = Runtime(machine_for(3, 1, 2, *{SLOTS_SHAPE[2:]!r}), None, compiled=typed.compiled,
                     kernel=typed.kernel)
        class Fake(bytes):  # raw bytes where Runtime's slots are, and a _begin to get past the first check
            def _begin(self, t):
                pass
        class Liar:  # says it is a Runtime
            __class__ = property(lambda self: Runtime)
            def _begin(self, t):
                pass
        for fake in (Fake(b"\\x10" * 256), Liar()):
            try:
                rt._fast(fake, 0, None, None, False, None)
            except TypeError as e:
                print("REFUSED", type(fake).__name__, e)
        print("ALIVE")
    """)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "REFUSED Fake" in done.stdout and "REFUSED Liar" in done.stdout and "ALIVE" in done.stdout, done.stdout


def _drive(rt, machine, items):
    w, c = machine.thread_names.index("worker0"), machine.thread_names.index("consumer")
    rt.step(w)
    for _ in range(items):
        rt.step(w, chain=True)
        rt.step(c, "take up to 1")
        rt.step(c)


@pytest.mark.parametrize("where", ["thread", "label"])
def test_a_context_cached_for_reuse_holds_nothing_its_action_wrote_into_it(where):
    typed = typed_for(*SLOTS_SHAPE)
    machine = machine_for(SLOTS_SHAPE[0], SLOTS_SHAPE[1], 3, *SLOTS_SHAPE[2:])

    def fetch(ctx):  # annotates its context with its runtime, and does not keep the context
        setattr(ctx, where, (getattr(ctx, where), ctx.runtime))
        return None

    gc.disable()
    try:
        rt = Runtime(machine, {"fetch": fetch}, compiled=typed.compiled, kernel=typed.kernel)
        assert rt._fast is not None
        _drive(rt, machine, 3)
        gone = weakref.ref(rt)
        del rt
        assert gone() is None, "the runtime is held by the kernel's cached context"
    finally:
        gc.enable()


def test_a_context_someone_took_while_it_sat_in_the_cache_is_not_filled_again():
    """The cache is reachable without the action's help: ``gc.get_objects()`` (a memory profiler, a debugger)
    hands out the contexts it holds. One taken that way is the taker's: the next step must make a new one."""
    typed = typed_for(*SLOTS_SHAPE)
    machine = machine_for(SLOTS_SHAPE[0], SLOTS_SHAPE[1], 3, *SLOTS_SHAPE[2:])
    seen = []
    rt = Runtime(machine, {"fetch": lambda ctx: seen.append(ctx.state) and None}, compiled=typed.compiled,
                 kernel=typed.kernel)
    assert rt._fast is not None
    w = machine.thread_names.index("worker0")
    rt.step(w)
    rt.step(w)  # the fetch: its context, not kept, goes to the cache
    assert len(seen) == 1
    # This kernel's cache (a list it holds), as a profiler walking gc.get_objects() would find it.
    cached = [o for ref in gc.get_referents(rt._fast.__self__) if type(ref) is list for o in ref
              if type(o).__name__ == "ActionContext"]
    assert cached, "the fetch's context is not in the cache"
    before = [(o.runtime, o.state, o.thread, o.label) for o in cached]
    c = machine.thread_names.index("consumer")
    rt.step(c, "take up to 1")
    rt.step(c)
    rt.step(w)
    rt.step(w)  # the next fetch
    assert len(seen) == 2 and seen[1] is not seen[0]
    assert [(o.runtime, o.state, o.thread, o.label) for o in cached] == before, "a context someone holds was refilled"


def test_guard_kept_and_reused_contexts_on_two_worker_threads_and_the_consumer():
    """A guard (it passed before the fixes too): two workers and the consumer on real threads through the C step,
    every third context kept; each kept context still shows its own thread, label and snapshot at the end, the
    run conforms to the model, and no context the kernel still holds keeps a runtime or a state."""
    import threading

    from safeprefetch._runtime.conformance import verify_record

    typed = typed_for(*PAIRS_SHAPE)
    machine = machine_for(PAIRS_SHAPE[0], PAIRS_SHAPE[1], 40, *PAIRS_SHAPE[2:])
    kept, lock = [], threading.Lock()

    def fetch(ctx):
        with lock:
            # Every third context kept, but none of the last ten items': the worker that fetches the last item
            # leaves its context to the kernel's cache, so the check below is never vacuous (with every third
            # kept whatever the item, both workers' last contexts were sometimes kept, and the cache held none:
            # the full suite failed so once under load, 2026-12-08).
            if len(kept) % 3 == 0 and ctx.me.idx < 30:
                kept.append((ctx, ctx.thread, ctx.state, ctx.label, ctx.me.idx))
            else:
                kept.append(None)

    rt = Runtime(machine, {"fetch": fetch}, record=True, compiled=typed.compiled, kernel=typed.kernel)
    assert rt._fast is not None
    errors = []

    def run(t):
        try:
            if machine.thread_names[t] == "consumer":  # every batch taken, then the stream closed, not before
                for _ in range(40):
                    rt.step(t, "take up to 1")
                    rt.step(t)
                rt.run_thread(machine.thread_names.index("closer"))
            rt.run_thread(t)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t, name in enumerate(machine.thread_names)
               if name != "closer"]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert not errors and not any(th.is_alive() for th in threads), errors
    assert len(kept) >= 40 and sum(k is not None for k in kept) >= 8
    for entry in filter(None, kept):
        ctx, thread, state, label, idx = entry
        assert (ctx.runtime, ctx.thread, ctx.state, ctx.label, ctx.me.idx) == (rt, thread, state, label, idx)
    assert verify_record(rt.machine, rt.record).ok
    held = [o for ref in gc.get_referents(rt._fast.__self__) if type(ref) is list for o in ref
            if type(o).__name__ == "ActionContext"]  # the kernel's cache, through its traversal
    assert held, "the kernel holds no cached context: the guard would check nothing"
    assert all((o.runtime, o.state, o._me) == (None, None, None) for o in held), held

"""The kernel's step in C (``_runtime/ckernel.py``): the Python step's twin, checked against it and under fire.

* **Call for call.** A runtime on the C step and one on the Python step, on the same typed transitions, are
  given the same calls (random threads, branches, tuples of branches, chains, timeouts): after every call
  their states, labels, step counts and records are equal.
* **On real threads.** Every thread of the model on its own thread, parking and waking, the record
  replayed through the model (``verify_record``); a Prefetcher on ``runtime="typed"`` runs the C step and
  delivers its source.
* **Injected at every call back into Python.** The C step has no eval-breaker point of its own: an
  exception can reach it only where it calls back into Python, and each such call goes through a hook
  that can raise there instead (``K_inject``). The sweep raises a ``KeyboardInterrupt`` at the k-th call
  on the consumer's thread, then on the worker's, for every k the run makes; each thread carries on after
  it, as a caller that catches Ctrl-C does. Every run must finish with the whole stream delivered, its
  record conforming to the model, no lock held, no wakeup owed and no thread marked parked; and the sweep
  must have raised at every site the uninjected run reaches.
  A signal handler's ``close()`` run at every one of those calls on the consumer's thread returns within
  its bound, and the prefetcher ends closed with its threads gone.
* **Under the real-code scheduler** (``safeprefetch.interleavings``): a typed Prefetcher's scenarios -- drain,
  a handler's close, the finalizer on a worker, Ctrl-C while waiting, ``copy_prefetched`` -- show no violation
  in any schedule within their bounds; the C step's lock and token calls are the scheduling points.
* **Mutations.** A C step that takes the last enabled of a tuple of branches differs from the Python step; one
  whose wake set wakes nobody deadlocks under the scheduler, with a trace.
* **Violations.** A step whose successor breaks an invariant fails both runtimes with the same verdict.
"""

import random
import threading
import time

import pytest
from _cython import cython_here
from _polling import wait_until

from safeprefetch import Prefetcher, PrefetcherClosed, interleavings
from safeprefetch._harness import prefetcher_code as pc
from safeprefetch._check.replay import choice_step
from safeprefetch._dsl.codegen import compile_transitions
from safeprefetch._prefetcher.machine import machine_for, typed_for
from safeprefetch._runtime.ckernel import SITES
from safeprefetch._runtime.conformance import verify_record
from safeprefetch._runtime.errors import LiveViolation
from safeprefetch._runtime.interrupts import protected
from safeprefetch._runtime.kernel import Runtime
from safeprefetch._runtime.typed import typed_transitions
from safeprefetch.model import DONE
from test_typed_transitions import Overflowing  # two adds, an invariant that bounds their count by one

pytestmark = pytest.mark.skipif(not cython_here(), reason="the kernel's C step is built with Cython (the speed extra)")

SHAPES = [(2, 2, False, True, 0, 2), (3, 1, True, True, 2, 3), (8, 1, True, True, 0, 8), (2, 1, True, False, 0, 2)]


def _pair(shape, items, outcome=None, typed=None):
    """Two runtimes on the same typed transitions, on the C step and on the Python step. With ``outcome`` (a
    one-item list), the fetch action returns ``outcome[0]`` and logs what its context shows."""
    typed = typed or typed_for(*shape)
    machine = machine_for(shape[0], shape[1], items, *shape[2:])
    runtimes, seen = [], ([], [])
    for log, kernel in zip(seen, (typed.kernel, None)):
        def fetch(ctx, log=log, mine=len(runtimes)):
            log.append((type(ctx), ctx.runtime is runtimes[mine], ctx.thread, ctx.state, ctx.label, ctx.name,
                        type(ctx.me), ctx.me.index, list(ctx.me._s)))
            return outcome[0]
        runtimes.append(Runtime(machine, None if outcome is None else {"fetch": fetch}, record=True,
                                compiled=typed.compiled, kernel=kernel))
    c, py = runtimes
    assert c._fast is not None and py._fast is None
    return machine, c, py, seen


def _call(machine, state, rng):
    """A random call that cannot park a lone caller: a step the model enables, and a chain only when the
    thread's next step is plain and enabled after it."""
    options = machine.successors(state)
    # A close or a source error ends the stream: rarely, so that most runs go through it.
    ending = [o for o in options if machine.thread_names[o[0][0]] == "closer"
              or choice_step(machine, state, o[0]).branch == "error"]
    going = [o for o in options if o not in ending]
    (t, b), nxt = rng.choice(going if going and rng.random() < 0.995 else options)
    info = machine.step_info(state, t)
    named = choice_step(machine, state, (t, b)).branch
    branch = named
    if len(info.branches) > 1 and rng.random() < 0.3:  # any of these, the first enabled in this order
        others = [x for x in info.branches if x != named]
        branch = (*rng.sample(others, rng.randint(0, len(others))), named)
    elif info.kind != "external" and rng.random() < 0.3 and all(o[0][0] != t or o[0][1] == b for o in options):
        branch = None  # the first enabled: the only one enabled here
    nxt_info = machine.step_info(nxt, t) if isinstance(nxt, tuple) else None
    chain = (nxt_info is not None and nxt_info.kind != "external" and machine.enabled(nxt, t)
             and rng.random() < 0.5)
    return t, branch, chain, rng.choice([None, 30.0, float("inf")])


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_c_step_takes_the_python_steps_call_for_call(shape):
    _call_for_call(shape)


def _call_for_call(shape, typed=None):
    steps = contexts = 0
    for seed in range(6):
        outcome = [None] if seed % 2 else None  # the external step's branch from an action, or from the call
        machine, c, py, seen = _pair(shape, 30, outcome, typed)
        rng = random.Random(seed)
        calls = 0
        while machine.successors(py.state):
            t, branch, chain, timeout = _call(machine, py.state, rng)
            if outcome is not None:
                outcome[0] = branch[-1] if type(branch) is tuple else branch
            got = c.step(t, branch, timeout, chain=chain)
            want = py.step(t, branch, timeout, chain=chain)
            calls += 1
            assert (got, c.state, c.steps) == (want, py.state, py.steps), (calls, t, branch, chain)
        assert c.record == py.record
        assert seen[0] == seen[1]  # the same contexts, field by field
        assert all(ok for _type, ok, *_rest in seen[0])
        contexts += len(seen[0])
        assert verify_record(machine, c.record).ok
        steps += len(c.record)
    assert steps > 30 and contexts > 3


def _run_threads(rt, machine, seed):
    threads = [threading.Thread(target=rt.run_thread, args=(t,), kwargs={"rng": random.Random(seed * 7 + t)})
               for t in range(len(machine.thread_names))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not any(th.is_alive() for th in threads)


@pytest.mark.parametrize("step", ["C step", "Python step"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_typed_transitions_on_real_threads_conform_to_the_model(shape, step):
    typed = typed_for(*shape)
    machine = machine_for(shape[0], shape[1], 150, *shape[2:])
    for seed in range(4):
        rt = Runtime(machine, {"fetch": lambda ctx: "ok"}, record=True, compiled=typed.compiled,
                     kernel=typed.kernel if step == "C step" else None)
        _run_threads(rt, machine, seed)
        assert machine.pc(rt.state, machine.thread_names.index("consumer")) == DONE
        report = verify_record(machine, rt.record)
        assert report.ok, report


def test_a_typed_prefetcher_runs_the_c_step_and_delivers_its_source():
    import numpy as np

    data = np.arange(4 * 300, dtype=np.float32).reshape(300, 4)
    for workers, capacity in ((1, 2), (2, 3), (3, 8)):
        with Prefetcher(data, capacity=capacity, workers=workers, runtime="typed") as pf:
            assert pf._core.rt._fast is not None
            got = np.stack(list(pf))
        np.testing.assert_array_equal(got, data)


# -- injection at every call back into Python ------------------------------------------------------------

INJECT_SHAPE = (2, 1, True, True, 0, 2)
#: The sites every run of the protocol reaches on both threads' hot paths.
HOT = {"acquire", "transition"}


def _injected_run(items, side, k):
    """The protocol's worker and consumer on two threads, a KeyboardInterrupt raised at the k-th call back
    into Python on ``side``'s thread (k = -1: none). Returns the per-site calls, the site raised at, and
    how many interrupts were caught."""
    typed = typed_for(*INJECT_SHAPE)
    machine = machine_for(INJECT_SHAPE[0], INJECT_SHAPE[1], items, *INJECT_SHAPE[2:])
    rt = Runtime(machine, {"fetch": protected(lambda ctx: "ok")}, record=True, compiled=typed.compiled,
                 kernel=typed.kernel)
    w, c = machine.thread_names.index("worker0"), machine.thread_names.index("consumer")
    caught, sites = [], {}
    armed = threading.Event()

    def drive(t):
        if (t == c) == (side == "consumer"):
            typed.module.K_inject(k, threading.get_ident(), KeyboardInterrupt)
            armed.set()
        else:
            armed.wait(30)
        while True:
            try:
                if rt.pc(t) == DONE:
                    break
                rt.step(t, chain=t == w)
            except KeyboardInterrupt:
                caught.append(t)  # a caller that catches Ctrl-C and carries on
        if (t == c) == (side == "consumer"):
            sites["calls"], sites["fired"] = typed.module.K_sites()
            typed.module.K_inject(-1, 0, None)

    worker = threading.Thread(target=drive, args=(w,))
    worker.start()
    drive(c)
    worker.join(60)
    assert not worker.is_alive()
    # Consistent, whatever point it was cut at: the stream delivered, the record the model's, nothing held.
    assert machine.pc(rt.state, c) == DONE and machine.pc(rt.state, w) == DONE
    report = verify_record(machine, rt.record)
    assert report.ok, (side, k, report)
    assert rt._lock.acquire(False)
    rt._lock.release()
    assert rt._owed is None and rt._nparked == 0 and not any(rt._parked), (side, k)
    return sites["calls"], sites["fired"], len(caught)


@pytest.mark.parametrize("side", ["consumer", "worker"])
def test_an_exception_at_every_call_back_into_python_leaves_the_kernel_consistent(side):
    calls, fired, caught = _injected_run(12, side, -1)
    assert fired == -1 and caught == 0
    reached = {SITES[i] for i, n in enumerate(calls) if n}
    assert HOT <= reached, reached
    raised_at = set()
    for k in range(sum(calls) + 5):  # (the count moves a little with the interleaving)
        _calls, fired, caught = _injected_run(12, side, k)
        if fired >= 0:
            raised_at.add(SITES[fired])
            assert caught == 1
    assert reached <= raised_at, reached - raised_at


# -- violations ---------------------------------------------------------------------------------------------

def test_a_broken_invariant_fails_the_c_step_as_it_fails_the_python_step():
    """The same verdict, state and record; and the violating transition computed once on both steps, as the
    fallbacks the typed code counts show (the C step once computed it again: test_ckernel_review.py's finding)."""
    machine = Overflowing.compile()
    typed = typed_transitions(compile_transitions(machine, Overflowing))
    verdicts = []
    for kernel in (typed.kernel, None):
        rt = Runtime(machine, None, record=True, compiled=typed.compiled, kernel=kernel)
        assert (rt._fast is not None) == (kernel is not None)
        rt.step(0)
        before = sum(typed.module.fallbacks())
        with pytest.raises(LiveViolation) as raised:
            rt.step(1)  # the second add: count 2, handed to Python by the typed transition
        fallbacks = sum(typed.module.fallbacks()) - before
        verdicts.append((raised.value.kind, str(raised.value), rt.state, rt.record, fallbacks))
    assert verdicts[1][-1] >= 1 and verdicts[0] == verdicts[1], (verdicts[0][-1], verdicts[1][-1])


# -- a signal handler's close() at every call back into Python -------------------------------------------

class _Items:
    def __len__(self):
        return 20

    def __getitem__(self, i):
        import numpy as np

        return np.full((3,), i, np.float32)


def _close_from_a_handler_at(k):
    """A typed Prefetcher's get(), with a handler calling close(timeout=1.0) run at its k-th call back into
    Python (the lock held there, or not): returns the site it ran at (-1: none) and the calls per site."""
    pf = Prefetcher(_Items(), capacity=2, workers=1, runtime="typed")
    typed = typed_for(2, 1, True, True, 0, 2)
    assert type(pf._core.rt._fast.__self__) is typed.kernel
    pf.get()
    took = []

    def handler(site):
        t0 = time.monotonic()
        pf.close(timeout=1.0)
        took.append(time.monotonic() - t0)

    typed.module.K_inject(k, threading.get_ident(), handler)
    try:
        pf.get()
    except PrefetcherClosed:
        pass
    finally:
        calls, fired = typed.module.K_sites()
        typed.module.K_inject(-1, 0, None)
    if fired >= 0:
        assert took and took[0] < 1.5, (SITES[fired], took)
        assert pf.closed
        assert wait_until(lambda: pf._core.closed and not any(t.is_alive() for t in pf._core.threads), 10)
    pf.close()
    return fired, calls


def test_close_from_a_signal_handler_at_every_call_back_into_python_returns():
    fired, calls = _close_from_a_handler_at(-1)
    reached = {SITES[i] for i, n in enumerate(calls) if n}
    assert fired == -1 and {"acquire", "transition"} <= reached, reached
    ran_at = {SITES[f] for f in (_close_from_a_handler_at(k)[0] for k in range(sum(calls) + 3)) if f >= 0}
    assert reached <= ran_at, reached - ran_at


# -- the real-code scheduler: the C step's lock and token calls are its scheduling points ----------------

TYPED = (("runtime", "typed"),)
SCHEDULED = [pc.Scenario("typed-map-c1-w1-i2", options=TYPED),
             pc.Scenario("typed-signal-handler-close", interrupt="signal", bound=0, options=TYPED),
             pc.Scenario("typed-finalizer-on-worker", interrupt="finalizer", bound=0, options=TYPED),
             pc.Scenario("typed-ctrl-c-while-waiting", interrupt="ctrl_c", bound=1, options=TYPED),
             pc.Scenario("typed-copy-c2-i3", items=3, capacity=2, api="copy", bound=1, options=TYPED)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sc", SCHEDULED, ids=[s.name for s in SCHEDULED])
def test_a_typed_prefetcher_under_the_real_code_scheduler_shows_no_violation(sc, monkeypatch):
    for shape in ((1, 1, True, True, 0, 1), (2, 1, True, True, 0, 2)):
        typed_for(*shape)  # built before, not inside, the controlled runs
    on_c_step, run_with = [], pc._run_with
    monkeypatch.setattr(pc, "_run_with", lambda sc, pf: (on_c_step.append(pf._core.rt._fast is not None),
                                                          run_with(sc, pf))[1])
    r = pc.check_scenario(sc)
    assert r.verdict == "ok", interleavings.render(r)
    assert r.exhaustive if sc.bound is None else r.bound_covered
    assert on_c_step and all(on_c_step)  # the runs went through the C step


# -- a mutated C step is caught ---------------------------------------------------------------------------

MUTATIONS = {
    # The first enabled of a tuple of branches becomes the last: a different step than the Python step's.
    "tuple of branches: the last enabled": ("                        b = x\n                        break\n",
                                             "                        b = x\n"),
    # A parked thread whose step the branch enabled is left parked: a lost wakeup.
    "wake set: none woken": ("                    if ok:\n                        # Unmarked",
                             "                    if False:\n                        # Unmarked"),
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_mutated_c_step_is_caught(mutation, monkeypatch):
    from safeprefetch._prefetcher.machine import transitions_for
    from safeprefetch._runtime import ckernel

    old, new = MUTATIONS[mutation]
    assert ckernel.SOURCE.count(old) == 1
    monkeypatch.setattr(ckernel, "SOURCE", ckernel.SOURCE.replace(old, new))
    if mutation.startswith("tuple"):
        shape = (3, 1, True, True, 2, 3)  # the tuner's grow, shrink and stop are often enabled together
        typed = typed_transitions(transitions_for(*shape))
        with pytest.raises(AssertionError):
            _call_for_call(shape, typed)
        return
    # Under the real-code scheduler, whose deadlock detection is exact: the consumer parks for a batch, and
    # the worker's fill leaves it parked.
    from safeprefetch._prefetcher import api

    shape = (1, 1, True, True, 0, 1)
    typed = typed_transitions(transitions_for(*shape))
    monkeypatch.setattr(api, "typed_for", lambda *key: typed)
    r = pc.check_scenario(SCHEDULED[0])
    assert r.verdict in ("deadlock", "lost_wakeup", "hang"), interleavings.render(r)
    assert len(r.trace) > 0

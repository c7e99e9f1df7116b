"""Round 23's review of the kernel's step in C (``_runtime/ckernel.py``): where it was not the Python step.

* **``chain``'s truth, judged where the Python step judges it.** The Python step asks ``if chain:`` in
  ``_take_locked``, after the first step is taken; the C step took ``chain`` as a C ``bint``, which judges
  it on entry. A ``chain`` whose truth raises (a numpy array, an object whose ``__bool__`` raises) left the
  Python runtime one step on and the C one where it was, with the same exception.
* **A violation's transition, called once.** Handing a step it does not store to Python, the C step called
  ``rt._take``, which called the typed transition again: a violation (or a successor breaking an invariant)
  cost two calls, and two fallbacks in ``TypedTransitions.fallbacks()`` where the Python step counts one. It
  calls ``rt._apply`` with the result, as ``_take`` does (asserted in test_ckernel.py's violation test).
* **The kernel's mutants run.** ``prefetcher_code.check_mutation`` edits ``kernel.py`` and swaps the edited
  ``Runtime`` in; under ``SAFEPREFETCH_RUNTIME=typed`` the Prefetcher handed it the C step, which replaces the
  edited ``_apply``/``_wake_set``: a skipped wakeup was checked, exhaustively, and found "ok". The mutant now
  runs the Python step it mutates.
"""

import threading

import numpy as np
import pytest
from _cython import cython_here

from safeprefetch._harness import prefetcher_code as pc
from safeprefetch._prefetcher.machine import machine_for, typed_for
from safeprefetch._runtime.ckernel import SITES
from safeprefetch._runtime.conformance import verify_record
from safeprefetch._runtime.kernel import Runtime

pytestmark = pytest.mark.skipif(not cython_here(), reason="the kernel's C step is built with Cython (the speed extra)")

SHAPE = (2, 1, True, True, 0, 2)


def _both(items=5, record=True):
    """A runtime on the C step and one on the Python step, on the same typed transitions."""
    typed = typed_for(*SHAPE)
    machine = machine_for(SHAPE[0], SHAPE[1], items, *SHAPE[2:])
    c = Runtime(machine, None, record=record, compiled=typed.compiled, kernel=typed.kernel)
    py = Runtime(machine, None, record=record, compiled=typed.compiled)
    assert c._fast is not None and py._fast is None
    return machine, c, py


def _after(rt, call):
    try:
        got = ("returned", call(rt))
    except Exception as e:  # noqa: BLE001 - the outcome compared, whatever it is
        got = ("raised", type(e), str(e))
    return got, rt.state, rt.steps, rt.record, rt._owed, rt._nparked


class _Unjudgeable:
    def __bool__(self):
        raise ZeroDivisionError("no truth here")


@pytest.mark.parametrize("chain", [_Unjudgeable(), np.array([True, False])], ids=["__bool__ raises", "array"])
def test_a_chain_whose_truth_raises_is_judged_after_the_first_step_as_the_python_step_does(chain):
    machine, c, py = _both()
    w = machine.thread_names.index("worker0")
    got, want = _after(c, lambda rt: rt.step(w, chain=chain)), _after(py, lambda rt: rt.step(w, chain=chain))
    assert want[0][0] == "raised" and want[2] == 1  # the Python step: taken, then the chain's truth raised
    assert got == want


def test_an_interrupt_at_the_chains_truth_leaves_the_first_step_taken_and_the_kernel_consistent():
    """(A guard: the new call back into Python, injected like the others.)"""
    typed = typed_for(*SHAPE)
    site = SITES.index("chain's truth")
    for k in range(8):
        machine, c, _py = _both()
        w = machine.thread_names.index("worker0")
        typed.module.K_inject(k, threading.get_ident(), KeyboardInterrupt)
        try:
            c.step(w, chain=1)  # not a bool: its truth is a call, through K_out
        except KeyboardInterrupt:
            pass
        finally:
            _calls, fired = typed.module.K_sites()
            typed.module.K_inject(-1, 0, None)
        if fired == site:
            break
    else:
        pytest.fail("never raised at the chain's truth")
    assert c.steps == 1 and verify_record(machine, c.record).ok
    assert c._lock.acquire(False)
    c._lock.release()
    assert c._owed is None and c._nparked == 0
    c.step(w)  # and the kernel goes on: the chained step, taken alone


def test_a_mutant_of_the_kernel_runs_its_own_step_under_the_typed_runtime(monkeypatch):
    monkeypatch.setenv("SAFEPREFETCH_RUNTIME", "typed")
    skipped = next(m for m in pc.MUTATIONS if m.name == "skipped wakeup")
    r = pc.check_mutation(skipped)
    assert r.verdict in ("deadlock", "lost_wakeup", "leaked_thread", "hang"), r.verdict

"""The typed transitions are the model: translation validation of the C build, state by state.

``_dsl/typedgen.py`` writes the generated transitions again over C values and ``_runtime/typed.py``
builds them with Cython. These tests prove, for the shapes the live Prefetcher compiles and a slice of
the prefetcher's sweeps, that in every reachable state the typed build gives exactly what the machine
gives (``_runtime/validation.py``: the same enabled steps, successors, violations, guards, invariant
verdicts, footprints and wake sets), and that the typed code itself decided those states: its wrapper
counts every state it handed to the generated Python function, and for the reference model there must
be none. Where the model does violate something, the typed code hands exactly those states over, and the
verdicts are still the machine's. A mutated emitter (a negation dropped, a count miscounted) fails the
validation. A Prefetcher on ``runtime="typed"`` delivers every batch, checked against its source (the
kernel's record on these transitions, on the Python step and on the C step: ``tests/test_ckernel.py``).
"""

import ast
import dataclasses

import numpy as np
import pytest
from _cython import cython_here

from safeprefetch import Prefetcher
from safeprefetch._dsl import typedexpr, typedsupport
from safeprefetch._dsl.codegen import compile_transitions
from safeprefetch._prefetcher.machine import machine_for, transitions_for, typed_for
from safeprefetch._runtime.typed import typed_transitions
from safeprefetch._runtime.validation import validate
from safeprefetch.model import DONE, Model, violate

pytestmark = pytest.mark.skipif(not cython_here(), reason="the typed transitions need Cython (the speed extra)")

#: The shapes the live Prefetcher compiles (as tests/test_codegen.py), plus two workers unordered at 3
#: and the deepest default shape.
LIVE_SHAPES = [(1, 1, True, True, 0, 1), (2, 1, True, True, 0, 2), (2, 2, False, True, 0, 2),
               (3, 2, True, True, 0, 3), (2, 1, True, False, 0, 2), (3, 1, True, True, 2, 3),
               (8, 1, True, True, 0, 8)]


def _failures(result):
    return "; ".join(f"{d.what}: {d.message}" for d in result.differences[:3])


@pytest.mark.parametrize("shape", LIVE_SHAPES, ids=str)
def test_typed_transitions_are_the_live_machine_and_decide_every_state(shape):
    typed = typed_for(*shape)
    assert typed.source.refused == (), typed.source.refused
    capacity, workers, ordered, sized, target, run = shape
    before = sum(typed.module.fallbacks())
    walked = 0
    for items in (0, 1, 2, 3):
        machine = machine_for(capacity, workers, items, ordered, sized, target, run)
        result = validate(dataclasses.replace(typed.compiled, machine=machine), max_states=60_000)
        assert result.ok or (not result.exhaustive and not result.differences), _failures(result)
        walked += result.states
    assert walked > 10
    # The reference model violates nothing: the typed code decided every state itself.
    assert sum(typed.module.fallbacks()) == before, {k: v for k, v in typed.fallbacks().items() if v}


SWEEP_SLICE = [
    {"capacity": 3, "run": 3, "workers": 2, "items": 3, "autotune": True, "target": 1, "close": True},
    {"capacity": 3, "run": 3, "workers": 1, "items": 4, "sized": False, "close": True, "error": True},
    {"capacity": 3, "run": 3, "workers": 2, "items": 4, "error_at": 2},
    {"capacity": 2, "workers": 2, "items": 3, "ordered": False, "close": True, "error": True, "history": False},
    {"capacity": 2, "workers": 2, "items": 3, "close": True, "error": True},  # history on: `received` typed
]


@pytest.mark.parametrize("cfg", SWEEP_SLICE, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_typed_transitions_are_the_machine_on_a_slice_of_the_sweeps(cfg):
    from safeprefetch import load_model

    model = load_model("prefetcher")
    machine = model.compile(cfg)
    typed = typed_transitions(compile_transitions(machine, model))
    before = sum(typed.module.fallbacks())
    result = validate(typed.compiled)
    assert result.ok and result.exhaustive, _failures(result)
    assert sum(typed.module.fallbacks()) == before


class Overflowing(Model):
    """Two threads add one each to a counter an invariant bounds by one, and one of them checks it."""

    name = "overflowing_typed"

    def build(self, m):
        m.shared(count=0, seen=0)

        def add(s, me):
            s.count += 1

        def look(s, me):
            if s.count > 1:
                violate("invariant", "counted past one")
            s.seen += 1

        p = m.program("adder")
        p.step("add", add, next="look")
        p.step("look", look, next=DONE)
        m.thread("a", p)
        m.thread("b", p)
        m.invariant("count <= 1", lambda s: s.count <= 1, "overflow")


def test_violations_and_broken_invariants_are_handed_to_python_with_the_machines_verdict():
    machine = Overflowing.compile()
    typed = typed_transitions(compile_transitions(machine, Overflowing))
    assert typed.source.refused == ()
    result = validate(typed.compiled)
    assert result.ok, _failures(result)
    # The second add breaks the invariant, and a look after it violates: those states came from Python.
    assert sum(typed.module.fallbacks()) > 0


@pytest.mark.parametrize("mutation", ["not dropped", "membership by state alone", "pairs cache by no identity"])
def test_a_mutated_typed_emitter_fails_the_validation(monkeypatch, mutation):
    if mutation == "not dropped":
        original = typedexpr._Expressions.x_UnaryOp
        monkeypatch.setattr(typedexpr._Expressions, "x_UnaryOp", lambda self, e, pre: (
            self.expr(e.operand, pre) if isinstance(e.op, ast.Not) else original(self, e, pre)))
    elif mutation == "pairs cache by no identity":
        # The cache of the last tuple of pairs answers for any tuple: a stale slot pool.
        header = typedsupport.HEADER.replace("if o is PAIRS_OBJ:", "if PAIRS_OBJ is not None:")
        assert header != typedsupport.HEADER
        monkeypatch.setattr(typedsupport, "HEADER", header)
    else:
        # ``(READY, i) in slots`` true of any ready slot: the ordered consumer's next slot is wrong.
        header = typedsupport.HEADER.replace(
            "if s.a[i].tag == v.tag and s.a[i].idx == v.idx:\n            return 1",
            "if s.a[i].tag == v.tag:\n            return 1")
        assert header != typedsupport.HEADER
        monkeypatch.setattr(typedsupport, "HEADER", header)
    typed = typed_transitions(transitions_for(2, 2, True, True, 0, 2))  # two workers: out-of-order fills
    machine = machine_for(2, 2, 3, True, True, 0, 2)
    before = sum(typed.module.fallbacks())
    result = validate(dataclasses.replace(typed.compiled, machine=machine))
    # Caught either way: a different answer, or states the typed code did not decide itself (a mutated
    # ``in`` that finds the wrong slot makes the ``.index`` after it miss, and Python answers instead).
    assert (not result.ok and result.differences) or sum(typed.module.fallbacks()) > before


def test_a_state_the_typed_code_cannot_hold_is_handed_to_python():
    typed = typed_for(2, 1, True, True, 0, 2)
    cm = transitions_for(2, 1, True, True, 0, 2)
    init = machine_for(2, 1, 3, True, True, 0, 2).init
    huge = init[:1] + (2**70,) + init[2:]  # next_index past 64 bits: Python's ints, not C's
    before = sum(typed.module.fallbacks())
    assert typed.compiled.successors(huge) == cm.successors(huge)
    assert sum(typed.module.fallbacks()) > before


@pytest.mark.live
@pytest.mark.timeout(60)
def test_a_prefetcher_on_the_typed_runtime_delivers_its_source():
    data = np.arange(4 * 500, dtype=np.float32).reshape(500, 4)
    with Prefetcher(data, capacity=4, runtime="typed") as pf:
        got = np.stack(list(pf))
    np.testing.assert_array_equal(got, data)
    out = np.empty(4, np.float32)
    with Prefetcher(data[:50], capacity=3, workers=2, runtime="typed") as pf:
        for i in range(50):
            pf.copy_prefetched(out)
            np.testing.assert_array_equal(out, data[i])
    # The kernel on the typed transitions, every thread on its own real thread, its record replayed through
    # the model, on the Python step and on the C step: tests/test_ckernel.py.


# -- the catalog: models the typed emitter was not written for ---------------------------------------------

def _catalog_names():
    from safeprefetch import catalog

    return sorted(catalog())


#: A default-run slice that uses conditionals, slices, tuples of ints, ``not`` on ints and helpers; the whole
#: catalog runs under ``-m slow``.
CATALOG_FAST = ["prefetcher", "swallowed_producer_error", "non_idempotent_close", "interrupt_deferred"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in CATALOG_FAST else pytest.mark.slow)
                                  for n in _catalog_names()])
def test_every_catalog_model_validates_through_its_typed_transitions(name):
    from safeprefetch import load_model

    model = load_model(name)
    machine = model.compile()
    compiled = compile_transitions(machine, model)
    typed = typed_transitions(compiled)
    result = validate(typed.compiled, max_states=20_000)
    assert result.ok or (not result.exhaustive and not result.differences), _failures(result)
    if name in CATALOG_FAST:
        assert len(typed.source.typed) >= 8, typed.source.refused  # the slice is there to exercise the emitter


def test_the_typed_runtime_without_cython_is_a_clear_error_at_construction(tmp_path):
    import os
    import subprocess
    import sys

    code = ("import sys; sys.modules['Cython'] = None\n"
            "import numpy as np\n"
            "from safeprefetch import Prefetcher\n"
            "from safeprefetch._runtime.typed import CompileUnavailable\n"
            "try:\n"
            "    Prefetcher(np.zeros((5, 3)), capacity=2, runtime='typed')\n"
            "except CompileUnavailable as e:\n"
            "    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "SAFEPREFETCH_CACHE": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert "refused: runtime='typed' needs Cython" in out.stdout and "runtime='generated'" in out.stdout

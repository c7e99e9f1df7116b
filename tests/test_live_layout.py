"""The in-place layout the ceiling measures (K4, K5) is the generated transitions, rewritten, not other code.

``bench live --profile`` times the generated transitions rewritten to update
a mutable list in place (``_harness/live_layout.py``). A figure for code that
computes something else would be no figure: here the rewrite is compared with
the generated transitions in every reachable state of live shapes, for every
thread's step and branch, and a rewrite that forgets one store is caught.
"""

import ast

import pytest

from safeprefetch._harness import live_layout
from safeprefetch._prefetcher.machine import machine_for, transitions_for

pytestmark = pytest.mark.timeout(300)

#: (capacity, workers, ordered, sized, autotune target, run): runs, several workers, unordered, an iterator
#: source, autotune.
SHAPES = [(2, 1, True, True, 0, 2), (3, 2, True, True, 0, 3), (2, 2, False, True, 0, 2), (2, 1, True, False, 0, 2),
          (3, 1, True, True, 2, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_in_place_rewrite_gives_the_generated_transitions_in_every_reachable_state(shape):
    cm = transitions_for(*shape)
    mt = live_layout.mutable_transitions(cm)
    assert mt.list_fields == (cm.machine.shared_index["slots"],)  # the one field steps update with _set
    assert "_set(" not in mt.source and "nxt__ = (" not in mt.source  # every rebuild became stores
    states = live_layout.check_against(cm, mt, machine_for(shape[0], shape[1], 4, *shape[2:]).init)
    assert states > 400


def test_a_rewrite_that_forgets_one_store_is_caught(monkeypatch):
    real = live_layout._InPlace.visit_Assign

    def forgetful(self, node):
        out = real(self, node)
        if isinstance(out, list) and len(out) > 2:  # the stores of a successor: drop the first changed field
            return out[1:]
        return out

    monkeypatch.setattr(live_layout._InPlace, "visit_Assign", forgetful)
    cm = transitions_for(*SHAPES[0])
    with pytest.raises(AssertionError, match="in place"):
        live_layout.check_against(cm, live_layout.mutable_transitions(cm), machine_for(2, 1, 3, True, True, 0, 2).init)


def test_the_rewrite_leaves_guards_and_reads_alone():
    cm = transitions_for(*SHAPES[1])
    before, after = ast.parse(cm.source), ast.parse(live_layout.mutable_transitions(cm).source)
    names = [f.name for f in before.body if isinstance(f, ast.FunctionDef)]
    assert names == [f.name for f in after.body if isinstance(f, ast.FunctionDef)]
    guards = [ast.unparse(f) for f in before.body if isinstance(f, ast.FunctionDef) and f.name.startswith("e")]
    assert guards == [ast.unparse(f) for f in after.body if isinstance(f, ast.FunctionDef) and f.name.startswith("e")]

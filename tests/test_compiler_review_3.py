"""The eleventh review's compiler finding 3 (docs/hardening.md); each test failed before its fix.

inline._comprehension_names renames every name a comprehension binds to a prefixed local
everywhere in the function, and only refuses when the same name is also read *outside every comprehension*
as a non-local. Two holes:

(a) the clash test subtracts ``rn.locals`` (the code's ``co_varnames``), and from 3.12 (PEP 709) an inlined
    list comprehension's target *is* in ``co_varnames``: ``sum([x for x in s.q]) + x`` with a global ``x``
    is refused on 3.11 but accepted on 3.12/3.13, and the generated code reads an unbound ``L1__x``;
(b) a global read inside *another* comprehension's body is not "outside" (the walk skips comprehension
    bodies), so ``[k for k in s.q]`` next to ``(j + k for j in s.q)`` renames the global ``k`` (all Pythons).
"""
import pytest

from safeprefetch.model import DONE, Model
from safeprefetch._dsl.codegen import compile_transitions

x = 100
k = 10


def eff_outer(s, me):
    s.total = sum([x for x in s.q]) + x


def eff_other_comprehension(s, me):
    s.total = sum([k for k in s.q]) + sum(j + k for j in s.q)


class Comp(Model):
    name = "comp"
    params = {"which": "outer"}

    def build(self, m, which):
        m.shared(q=(1, 2), total=0)
        p = m.program("p")
        p.step("a", eff_outer if which == "outer" else eff_other_comprehension, next=DONE)
        m.thread("t", p)


@pytest.mark.parametrize("which", ["outer", "other"])
def test_generated_transition_equals_machine(which):
    machine = Comp.compile({"which": which})
    want = machine.successors(machine.init)
    cm = compile_transitions(machine, Comp)
    if cm.refused:
        return  # refusing is correct behaviour
    assert cm.successors(machine.init) == want  # fails: NameError L1__x / L1__k

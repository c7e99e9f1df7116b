"""The eleventh review's compiler finding 9 (docs/hardening.md); each test failed before its fix.

The constant folder evaluates every comparison of two known values at generation time, even
where the model's own code would never evaluate it (behind ``limit is not None and ...``). With an optional
setting left at None, ``limit < 4`` raises TypeError out of compile_transitions instead of generating the
step or refusing it (NotInlinable -> ``refused``). inline.py _Fold.visit_Compare calls _CMP[...] unguarded.
"""
from safeprefetch.model import Model
from safeprefetch._dsl.codegen import compile_transitions


class Optional(Model):
    name = "optional_limit"
    params = {"limit": 0}

    def build(self, m, limit):
        limit = limit or None  # 0: no limit
        m.shared(x=0)

        def guard(s, me):
            if limit is not None and limit < 4:
                return s.x < limit
            return s.x < 2

        def eff(s, me):
            s.x += 1

        p = m.program("p")
        p.step("a", eff, guard=guard, next="a", to=["a"])
        m.thread("t", p)


def test_compile_transitions_does_not_crash():
    machine = Optional.compile()
    cm = compile_transitions(machine, Optional)  # fails: TypeError '<' not supported ... 'NoneType' and 'int'
    assert cm.successors(machine.init) == machine.successors(machine.init)

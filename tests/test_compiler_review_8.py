"""The eleventh review's compiler finding 8 (docs/hardening.md); each test failed before its fix.

A lambda whose closure variable is called ``step`` is silently miscompiled by the specializer
(default settings, every check and the live runtime).

specialize._factory compiles the rewritten body as ``def step(<params>): ...`` (a lambda's name is not an
identifier, so it is called "step") inside ``def __factory__(<free variables>)``. When one free variable is
itself named ``step``, the nested ``def step`` rebinds the factory's parameter: the twin's ``step`` cell holds
the twin function, not the captured value. _same_code cannot see it (same names, same instructions), so
``lambda s, me: s.x == step`` compares ``s[0]`` with a function: the guard is never enabled.
"""
from safeprefetch import check
from safeprefetch.model import DONE, Model
from safeprefetch._dsl import specialize


class Stride(Model):
    name = "stride"

    def build(self, m):
        step = 2  # a build-time value that happens to be called `step` (a stride, a phase...)
        m.shared(x=2)
        p = m.program("p")
        p.step("check", guard=lambda s, me: s.x == step, next=DONE)
        m.thread("t", p)


def test_guard_sees_the_captured_value(monkeypatch):
    monkeypatch.setattr(specialize, "ENABLED", False)
    plain = Stride.compile()
    monkeypatch.setattr(specialize, "ENABLED", True)
    fast = Stride.compile()
    assert plain.successors(plain.init) == [((0, 0), (2, "done"))]
    assert fast.successors(fast.init) == plain.successors(plain.init)  # fails: [] (guard False)


def test_verdict(monkeypatch):
    monkeypatch.setattr(specialize, "ENABLED", False)
    plain = check(Stride)
    monkeypatch.setattr(specialize, "ENABLED", True)
    fast = check(Stride)
    assert plain.verdict == "ok"
    assert fast.verdict == plain.verdict  # fails: a deadlock that does not exist

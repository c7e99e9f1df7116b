"""The eleventh review's compiler finding 4 (docs/hardening.md); each test failed before its fix.

A bound method as a step function (``p.step("a", self.inc)``). ``fn.__code__`` of a bound method
is its function's code, whose first parameter is ``self``: specialize() takes ``self`` for the state and ``s``
for ``me``, and returns a plain function of (self, s, me) that the step calls with (s, me) -> TypeError. The
plain path (SAFEPREFETCH_SPECIALIZE=0) is off by one the same way in uses_arg(fn, 1): it asks whether ``s`` is
read, not ``me``, so a method reading only ``me`` runs with me=None.
"""
import pytest

from safeprefetch.model import DONE, Model
from safeprefetch._dsl import specialize


class Method(Model):
    name = "method_step"

    def inc(self, s, me):
        s.x += 1

    def ready(self, s, me):
        return me.left > 0

    def build(self, m):
        m.shared(x=0)
        p = m.program("p", left=1)
        p.step("a", guard=self.ready, next="b")   # a guard-only step: need_me is uses_arg(ready, 1) alone
        p.step("b", self.inc, next=DONE)
        m.thread("t", p)


@pytest.mark.parametrize("enabled", [True, False], ids=["specialized", "plain"])
def test_bound_method_steps_run(monkeypatch, enabled):
    monkeypatch.setattr(specialize, "ENABLED", enabled)
    machine = Method.compile()
    (_, mid), = machine.fire(machine.init, 0)  # fails (plain): AttributeError, me is None
    (_, after), = machine.fire(mid, 0)  # fails (specialized): TypeError, missing 'me'
    assert machine.describe(after)["x"] == 1

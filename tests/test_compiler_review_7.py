"""The eleventh review's compiler finding 7 (docs/hardening.md); each test failed before its fix.

Uses_arg(fn, 1) decides whether a step needs its ``me`` view by looking for a LOAD_FAST of the
parameter. A function that reaches ``me`` through locals()/vars()/eval() -- the very names specialize's
_DYNAMIC list refuses to rewrite for that reason -- has no such load, so the step runs with ``me=None`` (on the
plain path as well): AttributeError on valid Python.
"""
import pytest

from safeprefetch.model import DONE, Model
from safeprefetch._dsl import specialize


def eff_locals(s, me):
    s.log = s.log + ("{me.name} ran".format(**locals()),)


def eff_eval(s, me):
    s.log = s.log + (eval("me.name"),)


class Dynamic(Model):
    name = "dynamic_me"
    params = {"which": "locals"}

    def build(self, m, which):
        m.shared(log=())
        p = m.program("p")
        p.step("a", eff_locals if which == "locals" else eff_eval, next=DONE)
        m.thread("w", p)


@pytest.mark.parametrize("enabled", [True, False], ids=["specialized", "plain"])
@pytest.mark.parametrize("which", ["locals", "eval"])
def test_me_reached_dynamically_is_passed(monkeypatch, enabled, which):
    monkeypatch.setattr(specialize, "ENABLED", enabled)
    machine = Dynamic.compile({"which": which})
    (_, after), = machine.fire(machine.init, 0)  # fails: StepError AttributeError 'NoneType' has no 'name'
    assert machine.describe(after)["log"][0] in ("w ran", "w")

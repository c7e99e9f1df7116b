"""The eleventh review's compiler finding 2 (docs/hardening.md); each test failed before its fix.

The inliner renames a step function's locals only where they are ``ast.Name`` nodes. Names bound
by a ``match`` capture (``case ("get", key)``), ``except ... as err`` or an ``import`` are identifier strings
in the AST, so they stay unrenamed while every *use* becomes ``L1__key``: the generated transition reads an
unbound name. compile_transitions accepts the step (nothing in ``refused``), and where the model catches the
NameError (a broad ``except Exception``) the generated search silently computes another state: wrong verdict.
"""
import warnings

import pytest

from safeprefetch import check
from safeprefetch.model import DONE, Model
from safeprefetch._dsl.codegen import compile_transitions
from safeprefetch._runtime.validation import validate
from _past_the_switch import AFTER, count_past_the_switch

TABLE = {"a": "poison"}


def eff_match(s, me):
    match s.item:
        case (kind, size):
            s.total += size


def eff_except(s, me):
    try:
        s.total += {"a": 1}[s.key]
    except KeyError as err:
        s.msg = str(err)


def eff_import(s, me):
    import math
    s.total += math.floor(2.5)


class Binds(Model):
    name = "binds"
    params = {"which": "match"}

    def build(self, m, which):
        m.shared(item=("big", 5), total=0, key="b", msg="")
        p = m.program("p")
        p.step("a", globals()["eff_" + which], next=DONE)
        m.thread("t", p)


@pytest.mark.parametrize("which", ["match", "except", "import"])
def test_generated_transition_equals_machine(which):
    machine = Binds.compile({"which": which})
    cm = compile_transitions(machine, Binds)
    if cm.refused:
        return  # refusing is correct behaviour
    assert cm.successors(machine.init) == machine.successors(machine.init)  # fails: NameError 'L1__size' ...



def handle(s, me):
    match s.request:
        case ("get", key):
            try:
                s.reply = TABLE[key]
            except Exception:  # the modelled code swallows errors
                s.reply = "missing"


class Capture(Model):
    name = "capture_verdict"

    def build(self, m):
        m.shared(c=0, request=("get", "a"), reply="")
        p = m.program("p")
        count_past_the_switch(p)
        p.step(AFTER, handle, next=DONE)
        m.thread("t", p)
        m.invariant("no poison", lambda s: s.reply != "poison" or s.c < 0)


def test_default_check_verdict_matches_plain():
    plain = check(Capture, engine="plain")
    assert plain.verdict == "invariant"
    default = check(Capture)  # auto: the generated engine from 50,000 states on
    assert default.verdict == plain.verdict, (default.verdict, default.engine)  # fails: "ok"

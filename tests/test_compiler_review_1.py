"""The eleventh review's compiler finding 1 (docs/hardening.md); each test failed before its fix.

The generated transitions replace the branch name (and me.name) by a *literal*, so an identity
test against the model's own string object (``b is GOT``) changes meaning: wrong successor, wrong verdict.

inline.py turns the branch parameter into ``ast.Constant(branch)`` and ``me.name`` into ``ast.Constant(name)``;
codegen.py then unparses to text and compiles it, so the literal is a *new* string object whenever the name is
not interned (any name with a space, like the DSL's own "timed out"). ``same_object`` exists exactly for this,
but is not applied to these two substitutions.
"""
import warnings

from safeprefetch import check
from safeprefetch.model import DONE, Model
from safeprefetch._dsl.codegen import compile_transitions
from safeprefetch._runtime.validation import validate
from _past_the_switch import AFTER, N, count_past_the_switch

warnings.simplefilter("ignore", SyntaxWarning)  # the generated code says `'got it' is GOT`

GOT = "got it"        # branch names with a space: not interned, so a literal is another object
MISS = "timed out"
BOSS = "boss thread"



def pick(s, me, b):
    if b is GOT:          # the branch taken is the model's own object
        s.bad = True


class BranchIdentity(Model):
    name = "branch_identity"

    def build(self, m):
        m.shared(c=0, bad=False)
        p = m.program("p")
        count_past_the_switch(p)
        p.step(AFTER, pick, branches=(GOT, MISS), next=DONE)
        m.thread("t", p)
        # reads c too, so no step is invisible: no partial-order reduction, the default search may go generated
        m.invariant("never bad", lambda s: not (s.bad and s.c >= 0))


def test_generated_successor_keeps_branch_identity():
    machine = BranchIdentity.compile()
    state = machine.init
    for _ in range(N):
        (_, state), = machine.successors(state)
    cm = compile_transitions(machine, BranchIdentity)
    (got_choice, got_plain), (miss_choice, miss_plain) = machine.successors(state)
    assert machine.describe(got_plain)["bad"] and machine.invariant_violation(got_plain)
    (c1, got_gen), (c2, miss_gen) = cm.successors(state)
    # The generated branch GOT sets bad, as the machine's does, and reports the invariant it breaks (before
    # the fix the literal 'got it' was another object: bad stayed False); MISS gives the machine's state.
    assert (c1, c2) == (got_choice, miss_choice)
    assert type(got_gen).__name__ == "Broken" and got_gen.state == got_plain and got_gen.kind == "invariant"
    assert miss_gen == miss_plain


def test_default_check_finds_the_violation():
    plain = check(BranchIdentity, engine="plain")
    assert plain.verdict == "invariant"
    default = check(BranchIdentity)  # engine auto: generated from 50,000 states on
    assert default.verdict == plain.verdict, (default.verdict, default.engine)  # fails: "ok"


def boss_step(s, me):
    if me.name is BOSS:
        s.n += 1


class NameIdentity(Model):
    name = "name_identity"

    def build(self, m):
        m.shared(n=0)
        p = m.program("p")
        p.step("a", boss_step, next=DONE)
        m.thread(BOSS, p)


def test_generated_keeps_thread_name_identity():
    machine = NameIdentity.compile()
    cm = compile_transitions(machine, NameIdentity)
    assert cm.refused == ()
    assert cm.successors(machine.init) == machine.successors(machine.init)  # fails: n stays 0
    assert validate(cm).ok

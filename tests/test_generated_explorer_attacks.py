"""Models an adversarial review wrote against the generated and compiled engines; each one disagreed with
the plain engine (or crashed it) before its fix, and must now search exactly as plain does.

Found: a compiled negative index and a constant index out of range read outside the tuple (Cython's
boundscheck and wraparound were off); a compiled helper's default argument was evaluated before its
name was bound; a model helper named like a builtin, or like the expansion's own functions, or a
closure variable named ``state``, was replaced by something else; the folder wrote an equal literal
for a string sentinel tested with ``is`` and for a NaN (identity shows in both); a value whose repr
raises broke the cache key; two models whose closure values print alike but differ (``__slots__``
objects) shared one compiled module.
"""

import builtins
import json
import math

import pytest

from safeprefetch._check import generated
from safeprefetch._check.explorer import Explorer
from safeprefetch._check.generated import _describe
from safeprefetch.model import DONE, Model, StepError
from _cython import cython_here


def _outcome(machine, engine, **kw):
    """The search's result (or the StepError it raised), and the engine that ran it."""
    e = Explorer(machine, reduce="none", engine=engine, **kw)
    try:
        r = e.run()
    except StepError as err:
        return ("StepError", str(err)), e.engine_used
    return (r.states, r.transitions, r.verdict, r.exhaustive, json.dumps(r.trace.to_json())), e.engine_used


def _engines():
    return ["generated", "compiled"] if cython_here() else ["generated"]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SAFEPREFETCH_CACHE", str(tmp_path))


def _same_as_plain(machine, engines=None, **kw):
    want, _ = _outcome(machine, "plain", **kw)
    for engine in engines or _engines():
        got, used = _outcome(machine, engine, **kw)
        assert used == engine, f"the {engine} engine did not run"
        assert got == want, engine
    return want


class NegativeIndex(Model):
    name = "negative_index"

    def build(self, m):
        m.shared(q=(1, 2, 3), last=0)

        def rotate(s, me):
            s.last = s.q[-1]
            s.q = (s.last,) + s.q[:-1]

        p = m.program("w")
        p.step("rot", rotate, next="rot")
        m.thread("w0", p)


class ConstantIndexOutOfRange(Model):
    name = "constant_index_out_of_range"

    def build(self, m):
        m.shared(q=(10, 20), i=0, got=0)

        def read(s, me):
            s.got = s.q[2] if s.i == 1 else 0  # a bug of the model's: q has 2 items
            s.i += 1

        p = m.program("w")
        p.step("read", read, guard=lambda s, me: s.i < 3, next="read")
        m.thread("w0", p)


@pytest.mark.timeout(300)
def test_indexing_does_what_python_does_wrap_or_raise():
    assert _same_as_plain(NegativeIndex.compile({}))[0] == 4
    assert _same_as_plain(ConstantIndexOutOfRange.compile({}))[0] == "StepError"


ORDERED = True


def arrive(q, x, ordered=ORDERED):
    """The queue after x arrives: kept sorted when ordered."""
    q = q + (x,)
    return tuple(sorted(q)) if ordered else q


class DefaultArgument(Model):
    name = "default_argument"

    def build(self, m):
        m.shared(q=())

        def put(s, me, b):
            s.q = arrive(s.q, int(b))

        p = m.program("w")
        p.step("put", put, next=DONE, branches=("1", "2"))
        m.thread("w0", p)
        m.thread("w1", p)


@pytest.mark.timeout(300)
def test_a_helpers_default_argument_keeps_its_value():
    assert _same_as_plain(DefaultArgument.compile({}))[0] == 8


def sum(xs):  # noqa: A001 - the model's own helper, shadowing the builtin in this module
    return builtins.sum(xs) % 3


def len(xs):  # noqa: A001 - shadows the builtin the expansion's own loop calls (the state cap's count)
    return builtins.len(xs) % 2


def fill(slots, k):
    """The model's helper, named like the expansion's own function."""
    return tuple(1 if i == k else v for i, v in enumerate(slots))


class Shadows(Model):
    name = "shadows"

    def build(self, m):
        state = frozenset({"idle", "busy", "done"})  # a closure variable named like the transitions' parameter
        m.shared(total=0, slots=(0, 0, 0), x=0)

        def add(s, me):
            s.total = sum((s.total, 1))

        def put(s, me, b):
            s.slots = fill(s.slots, int(b))

        def phase(s, me):
            s.x = (s.x + 1) % (len(state) + 2)  # the model's len: 3 % 2, plus 2

        for name, fn, branches in (("add", add, None), ("put", put, ("0", "1", "2")), ("phase", phase, None)):
            p = m.program(name)
            p.step(name, fn, next=name, branches=branches)
            m.thread(name, p)


@pytest.mark.timeout(300)
def test_the_models_names_are_the_models_even_where_they_look_like_ours():
    assert _same_as_plain(Shadows.compile({}), max_states=5000)[0] == 3 * 8 * 3
    # A cut search counts with the builtin len, whatever the model calls len (the review's repro: 7 states
    # stored under a cap of 4, "exhaustive").
    assert _same_as_plain(Shadows.compile({}), max_states=4)[3] is False


NOBODY = "no one"
NAN = float("nan")


class Identity(Model):
    name = "identity"

    def build(self, m):
        unset = NAN
        m.shared(owner=NOBODY, x=unset, tick=0)

        def take(s, me):
            s.owner = me.name

        def reset(s, me):
            s.x = unset  # the same NaN object each time: the state does not change

        p = m.program("w")
        p.step("take", take, guard=lambda s, me: s.owner is NOBODY, next=DONE)
        r = m.program("r")
        r.step("reset", reset, next="reset")
        t = m.program("ticker")
        t.step("tick", lambda s, me: setattr(s, "tick", 1 - s.tick), next="tick")
        m.thread("w0", p)
        m.thread("r0", r)
        m.thread("clock", t)


@pytest.mark.timeout(300)
def test_a_sentinel_tested_with_is_and_a_nan_stay_the_models_own_objects():
    got = _same_as_plain(Identity.compile({}))
    assert got[0] == 4 and math.isnan(NAN)


class Unprintable:
    def __init__(self, n):
        self.n = n

    def __repr__(self):
        raise NotImplementedError("no repr")

    def step(self, x):
        return (x + 1) % self.n


class ReprRaises(Model):
    name = "repr_raises"

    def build(self, m):
        table = Unprintable(50)

        def go(s, me):
            s.x = table.step(s.x)

        m.shared(x=0)
        p = m.program("w")
        p.step("go", go, next="go")
        m.thread("w0", p)


@pytest.mark.timeout(300)
def test_a_value_whose_repr_raises_is_described_by_identity():
    assert _same_as_plain(ReprRaises.compile({}))[0] == 50
    assert "id" in _describe(Unprintable(3))


class Limit:
    __slots__ = ("hi",)

    def __init__(self, hi):
        self.hi = hi


def test_values_that_print_alike_but_differ_never_share_a_module():
    assert _describe(Limit(3)) != _describe(Limit(4))
    assert _describe(Limit(3)) == _describe(Limit(3))
    assert generated._describe(object()) != generated._describe(object())

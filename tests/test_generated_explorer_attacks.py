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


def _below(hi):
    """``x < hi`` as a function whose code, constants and closure are the same for every ``hi``: the
    limit is a global of its own namespace, which no description of a function can see."""
    ns = {"HI": hi}
    exec("def below(x):\n    return x < HI\n", ns)  # noqa: S102 - the test's own source
    return ns["below"]


class CountTo(Model):
    name = "count_to"
    params = {"hi": 3}

    def build(self, m, hi, **_):
        below = _below(hi)

        def inc(s, me):
            if below(s.x):
                s.x += 1
            else:
                s.stop = True

        m.shared(x=0, stop=False)
        p = m.program("w")
        p.step("inc", inc, next="inc")
        m.thread("w0", p)


@pytest.mark.timeout(300)
def test_a_search_keeps_its_own_bindings_while_another_with_the_same_cache_key_runs():
    # Two configurations the cache key cannot tell apart (the limit hides in the helper's globals):
    # one compiled module. Search A is under way when search B, in another thread, binds that
    # module's names to its own values and runs to the end; A must finish with A's values. Before
    # the fix A went on with B's limit: 3003 states for 3002 (or, where the audit's sample saw it,
    # a restart on the plain engine).
    if not cython_here():
        pytest.skip("the compiled engine needs Cython")
    import threading

    a, b = CountTo.compile({"hi": 3000}), CountTo.compile({"hi": 3001})
    assert generated.expansion(a, "compiled").path == generated.expansion(b, "compiled").path  # one module
    other = {}

    def run_b():
        e = Explorer(b, reduce="none", engine="compiled")
        other["states"], other["engine"] = e.run().states, e.engine_used

    calls = []

    def progress(states, frontier, transitions):
        if not calls:  # A is past its first 1024 states: run all of B now
            t = threading.Thread(target=run_b)
            t.start()
            t.join()
        calls.append(states)

    e = Explorer(a, reduce="none", engine="compiled", progress=progress, progress_every=0.0)
    r = e.run()
    assert calls and other == {"states": 3003, "engine": "compiled"}
    assert (r.states, e.engine_used, e.engine_note) == (3002, "compiled", "")


def test_expansions_held_at_once_get_their_own_instances_and_a_released_one_is_taken_again():
    if not cython_here():
        pytest.skip("the compiled engine needs Cython")
    from safeprefetch._check import extension

    a, b = CountTo.compile({"hi": 5}), CountTo.compile({"hi": 7})
    xa = generated.expansion(a, "compiled")
    xb = generated.expansion(b, "compiled")  # while xa is held: another instance, loaded from a copy
    (ma,), (mb,) = xa.held, xb.held
    assert ma is not mb and ma.__name__ == mb.__name__ and xa.path == xb.path
    x = a.shared_index["x"]
    at_5 = tuple(5 if i == x else v for i, v in enumerate(a.init))
    want_a, want_b = [nxt for _, nxt in a.successors(at_5)], [nxt for _, nxt in b.successors(at_5)]
    assert want_a != want_b  # A stops at 5, B counts on
    for held, want in ((xa, want_a), (xb, want_b), (xa, want_a)):
        buf: list = []
        held.fill(at_5, buf)
        assert buf == want
    loaded = len(extension._INSTANCES[ma.__name__])
    xb.release()
    xb.release()  # idempotent: given back once
    xc = generated.expansion(a, "compiled")
    assert xc.held == [mb] and len(extension._INSTANCES[ma.__name__]) == loaded  # taken again, not loaded
    xa.release(), xc.release()
    assert sorted(map(id, extension._FREE[ma.__name__])) == sorted((id(ma), id(mb)))

"""The explorer's generated expansion (``_check/generated.py``) against the plain one.

The generated expansion is clever code: a BFS inner loop written out per
machine over the generated transitions, optionally compiled by Cython. Here
it is checked against the straightforward path: every search gives the same
states, transitions, verdict, depth and trace as the plain explorer (whole
catalog, both condvar semantics, with and without symmetry, cut by the state
cap, the prefetcher's sweep), and on every reachable state its successors
are ``Machine.successors``. Mutations of the generator fail these checks.
"""

import itertools
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safeprefetch._check import extension, generated
from safeprefetch._check.explorer import Explorer
from safeprefetch._check.generated import expansion, why_not
from safeprefetch._dsl.codegen import Broken
from safeprefetch._tools.catalog import catalog, load_model
from safeprefetch.model import DONE, Model, ModelError, StepError
from _cython import cython_here
from test_oracle import OPS, random_model

CATALOG = catalog()


def _summary(r):
    return (r.states, r.transitions, r.verdict, r.max_depth, r.exhaustive, r.stop_reason,
            json.dumps(r.trace.to_json()), r.violation.message if r.violation else None)


def _both(machine, reduce="none", max_states=2_000_000, engine="generated"):
    plain = Explorer(machine, reduce=reduce, engine="plain", max_states=max_states).run()
    e = Explorer(machine, reduce=reduce, engine=engine, max_states=max_states)
    fast = e.run()
    return plain, fast, e


def _needs_cython():
    if not cython_here():
        pytest.skip("Cython is not installed (pip install 'safeprefetch[speed]')")


@pytest.mark.parametrize("notify", ["fifo", "any"])
@pytest.mark.parametrize("reduce", ["none", "symmetry", "all"])
def test_every_catalog_search_is_the_plain_one(reduce, notify):
    used = 0
    for name, model in CATALOG.items():
        m = model.compile({"notify": notify})
        plain, fast, e = _both(m, reduce)
        assert _summary(fast) == _summary(plain), name
        used += fast.engine == "generated"
        assert fast.engine == "generated" or e.engine_note, name  # a fallback always says why
    assert used >= len(CATALOG) - (8 if reduce == "all" else 4), f"only {used} of {len(CATALOG)} models ran it"


def test_a_search_cut_by_the_state_cap_is_cut_where_the_plain_one_is():
    for name, model in CATALOG.items():
        m = model.compile({})
        full = Explorer(m, reduce="none", engine="plain").run()
        if full.states < 20:
            continue
        for cap in (full.states // 3, full.states // 2, full.states - 1, full.states):
            plain, fast, e = _both(m, max_states=cap)
            assert _summary(fast) == _summary(plain), (name, cap)
            assert fast.engine == "generated" or e.engine_note, name


def _successors_agree(machine, fill):
    """Every reachable state: ``fill`` lists Machine.successors' successors in order (a Broken one exactly
    where the invariants reject it; None for a refused step's successor that breaks one)."""
    seen = {machine.init}
    todo = [machine.init]
    while todo:
        state = todo.pop()
        want = [n for _c, n in machine.successors(state)]
        got = []
        fill(state, got)
        assert len(got) == len(want), state
        for g, w in zip(got, want):
            if isinstance(g, Broken):
                assert g.state == w and machine.invariant_violation(w), state
            elif g is None:
                assert w.__class__ is tuple and machine.invariant_violation(w), state
            elif w.__class__ is tuple:
                assert g == w, state
                if w not in seen and not machine.invariant_violation(w):
                    seen.add(w)
                    todo.append(w)
            else:
                assert type(g) is type(w) and (g.kind, g.message) == (w.kind, w.message), state
    return len(seen)


def test_on_every_reachable_state_the_generated_successors_are_the_machines():
    checked = 0
    for name, model in CATALOG.items():
        m = model.compile({})
        if why_not(m, "none") is not None:
            continue
        try:
            x = expansion(m, "generated")
        except ModelError:
            continue  # an invariant the generator cannot fold: that search runs plain
        checked += 1
        _successors_agree(m, x.fill)
    assert checked >= len(CATALOG) - 4


PREFETCHER_SWEEP = [dict(capacity=c, workers=w, items=i, close=cl, error=er, abandon=ab)
                    for c, w, i, cl, er, ab in itertools.product([1, 2], [1, 2], [0, 1, 3], [False, True],
                                                                 [False, True], [False, True])]


@pytest.mark.parametrize("ordered", [True, False])
def test_the_prefetchers_sweep_searches_alike(ordered):
    model = load_model("prefetcher")
    for config in PREFETCHER_SWEEP:
        m = model.compile(dict(config, ordered=ordered))
        for reduce in ("none", "symmetry"):
            plain, fast, _ = _both(m, reduce)
            assert fast.engine == "generated" and _summary(fast) == _summary(plain), (config, reduce)


def test_runs_and_autotune_search_alike():
    model = load_model("prefetcher")
    for config in [dict(capacity=3, run=3, items=4), dict(capacity=2, run=2, items=3, error=True, close=True),
                   dict(capacity=3, autotune=True, target=1, items=3, close=True),
                   dict(capacity=2, workers=1, sized=False, items=3, error=True)]:
        plain, fast, _ = _both(model.compile(config))
        assert fast.engine == "generated" and _summary(fast) == _summary(plain), config


@settings(max_examples=200)
@given(programs=st.lists(st.lists(OPS, min_size=1, max_size=5), min_size=1, max_size=3),
       notify=st.sampled_from(["fifo", "any"]), reduce=st.sampled_from(["none", "symmetry"]),
       cap=st.sampled_from([2_000_000, 5, 17]))
def test_random_models_search_alike(programs, notify, reduce, cap):
    """Hypothesis-generated models (mutexes, condvars, guards, branches, asserts, an invariant), many of
    whose steps the generator refuses (the primitives): those run through the machine's fire inside
    the generated loop."""
    m = random_model(programs).compile({"notify": notify})
    plain, fast, e = _both(m, reduce, max_states=cap)
    assert _summary(fast) == _summary(plain)
    assert fast.engine == "generated", e.engine_note


# -- compiled (Cython) ----------------------------------------------------------------------------

COMPILED_CASES = [("prefetcher", {}, "none"), ("prefetcher", {"items": 5, "close": True, "error": True}, "symmetry"),
                  ("semaphores", {}, "none"), ("one_cond_signal", {}, "none"), ("trylock_flush", {}, "symmetry"),
                  ("non_idempotent_close", {}, "none")]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name, config, reduce", COMPILED_CASES, ids=lambda x: str(x) if isinstance(x, str) else None)
def test_the_compiled_expansion_searches_like_the_plain_one(name, config, reduce, tmp_path, monkeypatch):
    _needs_cython()
    monkeypatch.setenv("SAFEPREFETCH_CACHE", str(tmp_path))
    m = load_model(name).compile(config)
    plain, fast, e = _both(m, reduce, engine="compiled")
    assert fast.engine == "compiled" and _summary(fast) == _summary(plain)
    assert e.fast.build_seconds > 0 and e.fast.path.startswith(str(tmp_path))
    _successors_agree(m, e.fast.fill)
    # Once built, the same configuration loads from the cache (a new process would find it there).
    monkeypatch.setattr(extension, "_FREE", {})
    monkeypatch.setattr(extension, "_INSTANCES", {})
    monkeypatch.setattr(extension, "_FIRST", {})
    again = Explorer(m, reduce=reduce, engine="compiled")
    assert _summary(again.run()) == _summary(plain)
    assert again.fast.build_seconds == 0 and again.fast.path == e.fast.path


# -- mutations: the checks above have teeth --------------------------------------------------------

def _mutant_differs(monkeypatch, attr, wrap, cases):
    """Whether a mutation of the writer is caught: a search differs from the plain one, or the explorer's
    own check (one state per chunk against the machine) saw the expansion disagree and searched plain."""
    real = getattr(generated._Writer, attr)
    monkeypatch.setattr(generated._Writer, attr, lambda self, *a: wrap(real(self, *a)))
    for m, reduce, cap in cases:
        plain, fast, e = _both(m, reduce, max_states=cap)
        if _summary(fast) != _summary(plain) or "disagreed" in e.engine_note:
            return True
    return False


def test_a_generator_that_drops_a_branch_is_caught(monkeypatch):
    m = load_model("prefetcher").compile({"items": 3, "close": True})

    def drop(lines):  # the last branch of the dispatch yields no successor
        last = max(i for i, ln in enumerate(lines) if ln.strip().startswith("n = t"))
        return lines[:last] + [lines[last].split("n = ")[0] + "n = None"] + lines[last + 1:]
    assert _mutant_differs(monkeypatch, "_dispatch", drop, [(m, "none", 2_000_000)])


def test_a_generator_that_ignores_the_state_cap_is_caught(monkeypatch):
    m = load_model("prefetcher").compile({})
    assert _mutant_differs(monkeypatch, "_expand_state", lambda src: src.replace("if k >= max_states:", "if False:"),
                           [(m, "none", 40)])


def test_a_generator_that_skips_symmetry_is_caught(monkeypatch):
    m = load_model("prefetcher").compile({})
    assert _mutant_differs(monkeypatch, "_expand_state", lambda src: src.replace("n = X__canon(n)", "pass"),
                           [(m, "symmetry", 2_000_000)])


# -- where it does not apply, and errors ------------------------------------------------------------

def test_where_the_expansion_does_not_apply_the_search_runs_plain_and_says_why():
    m = load_model("one_cond_signal").compile({"spurious": "on"})
    e = Explorer(m, reduce="none", engine="generated")
    r = e.run()
    assert r.engine == "plain" and "spurious" in e.engine_note
    e = Explorer(load_model("semaphores").compile({}), reduce="all", engine="generated")
    assert e.run().engine == "plain" and "partial-order" in e.engine_note
    # Where partial-order reduction finds no ample set to use, the default reduction keeps the expansion.
    assert Explorer(load_model("prefetcher").compile({}), reduce="all", engine="generated").run().engine == "generated"
    with pytest.raises(ModelError, match="unknown engine"):
        Explorer(m, engine="fast")


def test_the_engine_comes_from_the_environment(monkeypatch):
    m = load_model("prefetcher").compile({})
    monkeypatch.setenv("SAFEPREFETCH_ENGINE", "plain")
    assert Explorer(m, reduce="none").run().engine == "plain"
    monkeypatch.setenv("SAFEPREFETCH_ENGINE", "turbo")
    with pytest.raises(ModelError, match="SAFEPREFETCH_ENGINE"):
        Explorer(m, reduce="none")


class RaisesAtTwo(Model):
    """A step that raises on its second visit: the error must name the same step on both engines."""

    name = "raises_at_two"

    def build(self, m):
        m.shared(count=0)

        def add(s, me):
            if s.count == 2:
                raise ValueError("count reached two")
            s.count += 1

        p = m.program("adder")
        p.step("add", add, next="add", to=["add"])
        m.thread("a", p)
        m.thread("b", p)


def test_a_step_that_raises_is_reported_as_the_plain_search_reports_it():
    m = RaisesAtTwo.compile({})
    messages = []
    for engine in ("plain", "generated"):
        with pytest.raises(StepError) as info:
            Explorer(m, reduce="none", engine=engine).run()
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "count reached two" in messages[0]


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "safeprefetch", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_the_cli_reports_the_engine_and_refuses_it_where_it_does_not_apply():
    out = _cli("check", "prefetcher", "--reduce", "none", "--engine", "generated", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["engine"] == "generated"
    out = _cli("check", "prefetcher", "--engine", "generated", "--strategy", "dfs")
    assert out.returncode == 2 and "breadth-first" in out.stderr


def test_compiled_without_cython_is_a_clear_error(tmp_path):
    code = ("import sys; sys.modules['Cython'] = None\n"
            "from safeprefetch._cli.main import main\n"
            "sys.exit(main(['check', 'prefetcher', '--reduce', 'none', '--engine', 'compiled']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "SAFEPREFETCH_CACHE": str(tmp_path)})
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "needs Cython" in out.stderr and "Traceback" not in out.stderr


def test_a_model_without_a_model_class_runs_plain():
    m = load_model("prefetcher").compile({})
    m.model = None
    e = Explorer(m, reduce="none", engine="generated")
    assert e.run().engine == "plain" and "Model class" in e.engine_note
    assert DONE  # the DSL's terminal label is importable from the public model module


def test_auto_switches_a_growing_search_to_the_expansion_and_keeps_small_ones_plain(monkeypatch):
    from safeprefetch._check import explorer

    m = load_model("prefetcher").compile({"items": 12, "close": True, "error": True})
    plain = Explorer(m, reduce="none", engine="plain").run()
    assert plain.states > 3000
    assert Explorer(m, reduce="none", engine="auto").run().engine == "plain"  # below AUTO_STATES
    monkeypatch.setattr(explorer, "AUTO_STATES", 1000)
    switched = Explorer(m, reduce="none", engine="auto").run()
    assert switched.engine == "generated" and _summary(switched) == _summary(plain)


LIMIT = 3


class ReadsAGlobal(Model):
    """Its build reads a module global: the generator, which builds the model again, sees a later value."""

    name = "reads_a_global"

    def build(self, m):
        limit = LIMIT

        def inc(s, me):
            s.x += 1

        m.shared(x=0)
        p = m.program("w")
        p.step("inc", inc, guard=lambda s, me: s.x < limit, next="inc")
        t = m.program("ticker")
        t.step("tick", None, next="tick")
        m.thread("w0", p)
        m.thread("clock", t)


def test_a_build_that_is_not_a_function_of_its_config_is_caught_and_searched_plain(monkeypatch):
    m = ReadsAGlobal.compile({})  # with LIMIT = 3
    monkeypatch.setattr(sys.modules[__name__], "LIMIT", 6)  # what a hand-written sweep might do next
    plain, fast, e = _both(m)
    assert _summary(fast) == _summary(plain) and plain.states == 4
    assert fast.engine == "plain" and "disagreed" in e.engine_note


def test_under_auto_the_audit_starts_when_the_expansion_does(monkeypatch):
    """auto switches at AUTO_STATES: the states the expansion is handed from then on are the ones audited."""
    from safeprefetch._check import explorer

    monkeypatch.setattr(sys.modules[__name__], "LIMIT", 1500)
    m = ReadsAGlobal.compile({})
    monkeypatch.setattr(sys.modules[__name__], "LIMIT", 3000)
    monkeypatch.setattr(explorer, "AUTO_STATES", 200)
    plain = Explorer(m, reduce="none", engine="plain").run()
    e = Explorer(m, reduce="none", engine="auto")
    r = e.run()
    assert _summary(r) == _summary(plain) and plain.states == 1501
    assert r.engine == "plain" and "disagreed" in e.engine_note


def test_an_engine_where_it_does_not_apply_is_refused_or_said():
    from safeprefetch._check.explore import check

    m = load_model("prefetcher").compile({})
    e = Explorer(m, strategy="dfs", engine="compiled")
    assert e.run().engine == "plain" and "dfs" in e.engine_note
    with pytest.raises(ModelError, match="full store"):
        check(m, store="fingerprint", engine="generated")
    with pytest.raises(ModelError, match="unknown engine"):
        check(m, store="bitstate", engine="bogus")


def test_a_cache_that_cannot_be_written_is_a_clear_error(tmp_path, monkeypatch):
    _needs_cython()
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("SAFEPREFETCH_CACHE", str(blocker / "cache"))
    monkeypatch.setattr(extension, "_FREE", {})
    monkeypatch.setattr(extension, "_INSTANCES", {})
    monkeypatch.setattr(extension, "_FIRST", {})  # nothing loaded in this process either
    m = load_model("prefetcher").compile({"items": 2})
    with pytest.raises(generated.CompileUnavailable, match="SAFEPREFETCH_CACHE"):
        Explorer(m, reduce="none", engine="compiled").run()
    assert Explorer(m, reduce="none", engine="auto").run().ok  # auto never builds, so it never fails here

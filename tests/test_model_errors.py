"""Errors that point at the user's code: a step that raises, a typo, a wrong symmetry, a parameter that
shadows a setting, unknown names, and the CLI's and pytest's view of them."""

from __future__ import annotations

import json
import pickle
import sys

import pytest
from test_cli import run  # python -m safeprefetch ARGS -> (exit code, stdout, stderr)

from safeprefetch import check
from safeprefetch._cli.live import cap_table
from safeprefetch._dsl import specialize
from safeprefetch.model import DONE, CheckError, Model, ModelError, StepError, violate
from safeprefetch.testing import assert_verdict

RAISER = '''
"""raiser: the third bump divides by zero."""
from safeprefetch.model import DONE, Model


class Raiser(Model):
    name = "raiser"

    def build(self, m):
        m.shared(hits=0, n=0)
        p = m.program("p")

        def bump(s, me):
            s.hits += 1
            s.n = 6 // (s.hits - 3)

        p.step("bump", bump, next=lambda s, me: "bump" if s.hits < 5 else DONE, to=["bump", DONE])
        m.thread("worker", p)
'''
#: The line of ``s.n = 6 // (s.hits - 3)`` in RAISER, counted from the file's first line.
RAISER_LINE = RAISER.split("\n").index("            s.n = 6 // (s.hits - 3)") + 1


@pytest.fixture
def raiser(tmp_path):
    path = tmp_path / "raiser.py"
    path.write_text(RAISER)
    return path


def _load(path):
    from safeprefetch import load_model

    return load_model(str(path))


@pytest.mark.parametrize("specialized", [True, False])
def test_a_step_that_raises_names_thread_label_the_users_line_and_the_trace(raiser, specialized, monkeypatch):
    monkeypatch.setattr(specialize, "ENABLED", specialized)
    with pytest.raises(StepError) as info:
        check(_load(raiser))
    e = info.value
    assert (e.thread, e.label, type(e.error)) == ("worker", "bump", ZeroDivisionError)
    assert e.where == f"{raiser}:{RAISER_LINE}"
    assert [s.step for s in e.trace] == ["bump", "bump"]
    assert str(e) == (f"worker, step 'bump': ZeroDivisionError: integer division or modulo by zero "
                      f"at {raiser}:{RAISER_LINE}, after 2 steps")
    assert "hits=2" in e.table


def test_a_step_error_survives_pickling_as_a_worker_process_sends_it(raiser):
    with pytest.raises(StepError) as info:
        check(_load(raiser))
    back = pickle.loads(pickle.dumps(info.value))
    assert type(back) is StepError and str(back) == str(info.value)
    assert (back.thread, back.label, back.where, back.table) == (info.value.thread, info.value.label,
                                                                  info.value.where, info.value.table)
    assert type(back.error) is ZeroDivisionError and back.trace == info.value.trace


def test_the_cli_prints_the_error_line_and_the_trace(raiser):
    code, out, err = run("check", str(raiser))
    assert code == 2 and out == ""
    first, *rest = err.splitlines()
    assert first.startswith("error: worker, step 'bump': ZeroDivisionError") and f"raiser.py:{RAISER_LINE}" in first
    assert rest[0] == "the trace that reached it:" and any("hits=2" in line for line in rest)


def test_a_typo_in_a_shared_name_suggests_the_right_one(tmp_path):
    path = tmp_path / "typo.py"
    path.write_text(RAISER.replace("s.hits += 1", "s.hist += 1"))
    with pytest.raises(StepError, match="no shared variable 'hist'; did you mean 'hits'"):
        check(_load(path))


def _checked(invariant=None, at_end=None):
    class Checked(Model):
        """checked: a counter with a model-supplied invariant or end check."""

        name = "checked"

        def build(self, m):
            m.shared(hits=0)
            p = m.program("p")
            p.step("bump", lambda s, me: setattr(s, "hits", s.hits + 1),
                   next=lambda s, me: "bump" if s.hits < 3 else DONE, to=["bump", DONE])
            m.thread("worker", p)
            if invariant:
                m.invariant("few hits", invariant)
            if at_end:
                m.at_end(at_end)
    return Checked


@pytest.mark.parametrize("specialized", [True, False])
def test_an_invariant_that_raises_is_named_with_its_line_and_the_trace(specialized, monkeypatch):
    monkeypatch.setattr(specialize, "ENABLED", specialized)
    line = sys._getframe().f_lineno + 1
    model = _checked(invariant=lambda s: s.hits < 2 or s.hist < 9)
    with pytest.raises(CheckError) as info:
        check(model)
    e = info.value
    assert e.thread is None and e.label == "invariant 'few hits'" and e.where == f"{__file__}:{line}"
    assert str(e).startswith("invariant 'few hits': AttributeError") and str(e).endswith(", after 2 steps")
    assert "no shared variable 'hist'; did you mean 'hits'" in str(e)
    assert [s.step for s in e.trace] == ["bump", "bump"] and "hits=2" in e.table


def test_an_end_check_that_raises_is_named_with_the_trace_that_finished():
    with pytest.raises(CheckError) as info:
        check(_checked(at_end=lambda s: 1 // (s.hits - 3)))
    e = info.value
    assert str(e).startswith("end check: ZeroDivisionError") and str(e).endswith(", after 3 steps")
    assert len(e.trace) == 3
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is CheckError and str(back) == str(e)


def test_assert_verdict_shows_the_trace_table_when_the_verdict_is_wrong():
    from safeprefetch import catalog

    with pytest.raises(AssertionError) as info:
        assert_verdict(catalog()["no_predicate_wait"], "ok")
    text = str(info.value)
    assert "expected ok, got lost_wakeup" in text and "producer0" in text and "<== lost_wakeup" in text
    with pytest.raises(AssertionError, match="shortest trace has 7 steps, expected 3(.|\n)*<== lost_wakeup"):
        assert_verdict(catalog()["no_predicate_wait"], "lost_wakeup", trace_length=3)


def test_assert_verdict_on_a_raising_step_points_at_it(raiser):
    with pytest.raises(AssertionError) as info:
        assert_verdict(_load(raiser), "ok")
    text = str(info.value)
    assert f"raiser.py:{RAISER_LINE}" in text and "worker, step 'bump'" in text and "hits=2" in text


# -- definitions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("setting", ["notify", "spurious", "policy", "fairness"])
def test_a_parameter_named_like_a_setting_is_refused_when_the_model_is_defined(setting):
    with pytest.raises(ModelError, match=f"parameter '{setting}' has the name of a setting"):
        type("Clash", (Model,), {"name": "clash", "params": {setting: 1}})


def test_an_unknown_setting_is_refused_when_the_model_is_defined():
    with pytest.raises(ModelError, match="did you mean 'policy'"):
        type("Typo", (Model,), {"name": "typo", "settings": {"polcy": "priority"}})
    with pytest.raises(ModelError, match="must be one of weak|strong"):
        type("Bad", (Model,), {"name": "bad", "settings": {"fairness": "fair"}})


class OwnerIndex(Model):
    """owner_index: each worker writes its own index into shared state -- so they are not symmetric."""

    name = "owner_index"

    def build(self, m):
        m.shared(owner=-1, total=0)
        m.mutex("lock")

        def claim(s, me):
            s.owner = me.index

        def add(s, me):
            s.total += 1 if s.owner == 0 else 2

        p = m.program("worker")
        p.acquire("lock", "lock", next="claim")
        p.step("claim", claim, next="add")
        p.step("add", add, next="unlock")
        p.release("unlock", "lock", next=DONE)
        m.thread("worker0", p)
        m.thread("worker1", p)
        m.symmetric("worker0", "worker1")


def test_a_symmetry_that_breaks_interchangeability_is_named():
    from safeprefetch._check.symmetry_check import SymmetryError

    with pytest.raises(SymmetryError) as info:
        check(OwnerIndex)
    e = info.value
    assert e.threads == ("worker0", "worker1")
    assert "symmetric(worker0, worker1) is wrong" in str(e) and "differs in owner" in str(e)
    assert [s.step for s in e.trace] == ["lock"]
    assert check(OwnerIndex, reduce="none").verdict == "ok"  # without the reduction nothing is wrong


class NamedInvariant(Model):
    """Two interchangeable workers, but an invariant that names one of them: "w1 never finishes first"."""

    name = "named_invariant"

    def build(self, m):
        def go(s, me):
            me.x = 1

        p = m.program("w", x=0)
        p.step("go", go, next=DONE)
        m.thread("w0", p)
        m.thread("w1", p)
        m.symmetric("w0", "w1")
        m.invariant("w0 first", lambda s, threads: not (threads["w1"].x == 1 and threads["w0"].x == 0))


class NamedEndCheck(Model):
    """The same with the check at the end: "w1 finished last" (each worker records when it finished)."""

    name = "named_end_check"

    def build(self, m):
        def go(s, me):
            me.order = s.count
            s.count += 1

        m.shared(count=0)
        p = m.program("w", order=-1)
        p.step("go", go, next=DONE)
        m.thread("w0", p)
        m.thread("w1", p)
        m.symmetric("w0", "w1")
        m.at_end(lambda s, threads: None if threads["w1"].order == 1 else ("invariant", "w0 finished last"))


@pytest.mark.parametrize("model, which", [(NamedInvariant, "invariant 'w0 first'"), (NamedEndCheck, "an end check")])
def test_a_symmetry_a_check_tells_apart_is_named_instead_of_hiding_the_violation(model, which):
    """Before: reduce=symmetry (and the default, all) said ok, exhaustive; reduce=none finds the violation.
    The reduced search judges one state of each swapped pair, so a check that names a thread is a
    broken declaration, as a step that does is."""
    from safeprefetch._check.symmetry_check import SymmetryError

    assert check(model, reduce="none").verdict == "invariant"
    for reduce in ("symmetry", "all"):
        with pytest.raises(SymmetryError, match=rf"symmetric\(w0, w1\) is wrong: {which} judges"):
            check(model, reduce=reduce)


def test_every_catalog_symmetry_declaration_holds():
    from safeprefetch import catalog
    from safeprefetch._check.symmetry_check import symmetry_error

    for name, model in catalog().items():
        assert symmetry_error(model.compile(), 5_000) is None, name


# -- names ----------------------------------------------------------------------------------------


def test_unknown_labels_get_a_did_you_mean():
    class Labels(Model):
        """labels: a next label with a typo."""

        name = "labels"

        def build(self, m):
            p = m.program("p")
            p.step("start", next="finsh")
            p.step("finish", next=DONE)
            m.thread("t", p)

    with pytest.raises(ModelError, match="unknown step 'finsh'.*did you mean 'finish'"):
        Labels.compile()


@pytest.mark.parametrize("declare, message", [
    (lambda m: m.progress("tak"), "progress: no program has a step 'tak'; did you mean 'take'?"),
    (lambda m: m.priority("wroker", 1), r"priority for unknown threads \['wroker'\]; did you mean 'worker'\?"),
    (lambda m: m.symmetric("worker", "wroker"), r"symmetric: unknown threads \['wroker'\]; did you mean 'worker'\?"),
])
def test_unknown_names_in_declarations_get_a_did_you_mean(declare, message):
    class Declared(Model):
        """declared: one thread, and a declaration with a typo."""

        name = "declared"

        def build(self, m):
            m.mutex("lock")
            p = m.program("p")
            p.acquire("take", "lock", next="give")
            p.release("give", "lock", next=DONE)
            m.thread("worker", p)
            declare(m)

    with pytest.raises(ModelError, match=message):
        Declared.compile()


def test_unknown_model_names_get_a_did_you_mean():
    code, _, err = run("check", "one_cond_signl")
    assert code == 2 and "did you mean one_cond_signal" in err


def test_explain_of_a_file_suggests_playing_that_file(raiser):
    code, out, _ = run("explain", str(raiser.parent / "nothing.py"))
    assert code == 2
    path = raiser.parent / "fine.py"
    path.write_text(RAISER.replace("6 // (s.hits - 3)", "6 // (s.hits + 3)"))
    code, out, _ = run("explain", str(path))
    assert code == 0 and out.rstrip().endswith(f"play {path}")


# -- run caps its table ---------------------------------------------------------------------------


def test_cap_table_keeps_the_first_and_last_rows_and_counts_the_rest():
    table = "\n".join(["  #  t", "---  -"] + [f"{i:3}  x" for i in range(1, 101)])
    capped = cap_table(table, 10).split("\n")
    assert capped[:2] == ["  #  t", "---  -"] and len(capped) == 2 + 10 + 1
    assert capped[2].startswith("  1") and capped[-1].startswith("100")
    assert capped[7] == "... 90 steps omitted (--max-rows 10) ..."
    assert cap_table(table, 500) == table


FOREVER = '''
"""forever: two threads take turns on a lock forever."""
from safeprefetch.model import Model


class Forever(Model):
    name = "forever"

    def build(self, m):
        m.shared(n=0)
        m.mutex("lock")
        p = m.program("p")
        p.acquire("lock", "lock", next="bump")
        p.step("bump", lambda s, me: setattr(s, "n", (s.n + 1) % 3), next="unlock")
        p.release("unlock", "lock", next="lock")
        m.thread("a", p)
        m.thread("b", p)
'''


def test_run_of_a_model_that_never_ends_prints_a_capped_table(tmp_path):
    path = tmp_path / "forever.py"
    path.write_text(FOREVER)
    code, out, _ = run("run", str(path), "--attempts", "1", "--timeout", "0.5", "--force", "never",
                       "--max-rows", "20")
    lines = out.splitlines()
    assert code == 3 and "omitted (--max-rows 20)" in out  # a run cut by --timeout is no verdict: 3
    assert len(lines) == 1 + 2 + 20 + 1 + 1  # summary, header, rows, the omission, the verdict
    code, out, _ = run("run", str(path), "--attempts", "1", "--timeout", "0.5", "--force", "never", "--json")
    assert len(json.loads(out)["trace"]) > 20  # the JSON keeps the whole trace


# -- determinism --------------------------------------------------------------------------------------


class RandomStep(Model):
    """The adversarial review's model: a step that draws from a seeded random.Random instead of branches=;
    a violation is reachable (x == 3 when c runs with y == 2), yet some seeds gave "ok, exhaustive"."""

    name = "random_step"
    params = {"seed": 0, "deep": 0}

    def build(self, m, seed, deep, **_):
        import random

        rng = random.Random(seed)
        m.shared(x=0, y=0, n=0)

        def count(s, me):
            s.n += 1

        def a(s, me):
            s.x = rng.randint(0, 3) if s.n >= deep else 0

        def c(s, me):
            if s.x == 3 and s.y == 2:
                violate("underflow", "boom")
            s.y += 1

        w = m.program("w")
        w.step("count", count, guard=lambda s, me: s.n < deep, next="count")
        r = m.program("r")
        r.step("a", a, guard=lambda s, me: s.n >= deep, next="c")
        r.step("c", c, next="a")
        m.thread("w0", w)
        m.thread("r0", r)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("store, engine", [("full", "plain"), ("full", "generated"), ("fingerprint", None)])
def test_a_step_that_is_not_a_function_of_the_state_is_refused(seed, store, engine):
    """Before: ok and exhaustive for seed 2, a raw RuntimeError for seeds 0, 1, 4 and 5."""
    from safeprefetch import NondeterministicModel

    with pytest.raises(NondeterministicModel, match=r"not deterministic.*\(r0's step 'a', "):
        check(RandomStep, config={"seed": seed}, store=store, engine=engine, max_states=20_000)


@pytest.mark.parametrize("engine", ["plain", "generated"])
def test_a_step_that_changes_its_mind_deep_in_the_search_is_caught_by_the_sample(engine):
    """The probe before the search sees only its first 256 states; past them, one state in 1024 is
    expanded twice (plain), and the generated engines' audit against the machine restarts plain."""
    from safeprefetch import NondeterministicModel

    with pytest.raises(NondeterministicModel, match="not deterministic"):
        check(RandomStep, config={"seed": 2, "deep": 3000}, engine=engine, reduce="none", max_states=200_000)


# -- what the checker prints --------------------------------------------------------------------------


_BIG_INT_MODEL = '''
from safeprefetch.model import DONE, Model, violate

class Big(Model):
    name = "bigint"

    def build(self, m):
        m.shared(x=0)

        def grow(s, me):
            s.x = 10 ** 5000

        def bad(s, me):
            violate("underflow", "boom")

        p = m.program("w")
        p.step("grow", grow, next="bad")
        p.step("bad", bad, next=DONE)
        m.thread("w0", p)
'''


def test_a_trace_with_a_value_python_cannot_print_still_prints_its_violation(tmp_path):
    """Before: "the model raised ValueError: Exceeds the limit (4300 digits)", exit 2 -- the trace table's
    repr raised, not the model."""
    path = tmp_path / "bigint.py"
    path.write_text(_BIG_INT_MODEL)
    code, out, err = run("check", str(path))
    assert code == 1, err
    assert "verdict: underflow" in out and "x=<int of 16610 bits>" in out


@pytest.mark.parametrize("returned, message", [
    ("f'lost {2 - s.got}'", r"end check returned 'lost 1': it must return None \(ok\) or \(kind, message\)"),
    ("('lost', '1 item lost')", r"end check returned the kind 'lost': not a verdict kind.*did you mean 'lost_item'"),
    ("('lost_item', 'x', 1)", r"end check returned \('lost_item', 'x', 1\): it must return None"),
])
def test_an_end_check_must_return_a_known_kind_and_a_message(returned, message):
    """Before: a misspelled kind was reported as verdict 'lost' (exit 1); a bare string as "the model raised
    ValueError: too many values to unpack"."""
    end = eval(f"lambda s: None if s.got == 2 else {returned}")  # noqa: S307 - the test's own expressions

    class AtEnd(Model):
        name = "at_end_kind"

        def build(self, m):
            def take(s, me):
                s.got += 1

            m.shared(got=0)
            p = m.program("w")
            p.step("take", take, next=DONE)
            m.thread("w0", p)
            m.at_end(end)

    with pytest.raises(ModelError, match=message):
        check(AtEnd)


def test_check_json_is_strict_json_whatever_the_configuration_holds(tmp_path):
    """Before: a parameter of inf was written as the bare token Infinity, and a frozenset one failed with
    "Object of type frozenset is not JSON serializable" (exit 2)."""
    path = tmp_path / "params.py"
    path.write_text(
        "from safeprefetch.model import DONE, Model\n"
        "class P(Model):\n"
        "    name = 'params'\n"
        "    params = {'deadline': float('inf'), 'names': frozenset({'b', 'a'}), 'pair': (1, 2)}\n"
        "    def build(self, m, deadline, names, pair, **_):\n"
        "        p = m.program('w'); p.step('a', next=DONE); m.thread('w0', p)\n")
    code, out, err = run("check", str(path), "--json")
    assert code == 0, err

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    got = json.loads(out, parse_constant=refuse)
    assert {k: got["config"][k] for k in ("deadline", "names", "pair")} == \
        {"deadline": "inf", "names": ["a", "b"], "pair": [1, 2]}


# -- declarations that could never mean what they say ---------------------------------------------------


def _model(declare):
    class Declared(Model):
        name = "declared"

        def build(self, m):
            declare(m)
            if not m.threads:
                p = m.program("w")
                p.step("a", next=DONE)
                m.thread("w0", p)

    return Declared


def _external_no_branches(m):
    p = m.program("w")
    p.external("fetch", "fetch", next=DONE, branches=())
    m.thread("w0", p)


def _step_no_branches(m):
    p = m.program("w")
    p.step("choose", next=DONE, branches=())
    m.thread("w0", p)


def _duplicate_branch(m):
    p = m.program("w")
    p.step("choose", next=DONE, branches=("left", "left"))
    m.thread("w0", p)


def _unhashable_local(m):
    p = m.program("w", seen=[])
    p.step("a", next=DONE)
    m.thread("w0", p)


def _unhashable_thread_local(m):
    p = m.program("w", seen=())
    p.step("a", next=DONE)
    m.thread("w0", p, seen={1: 2})


@pytest.mark.parametrize("declare, message", [
    (_external_no_branches, r"step 'fetch': branches=\(\) names no outcome"),
    (_step_no_branches, r"step 'choose': branches=\(\) names no outcome"),
    (_duplicate_branch, r"step 'choose': branch 'left' is named twice"),
    (lambda m: m.semaphore("sem", -1), r"semaphore 'sem': the initial count must be an int >= 0, not -1"),
    (lambda m: m.semaphore("sem", 3, bound=2), r"semaphore 'sem': the bound must be an int >= the initial count 3"),
    (_unhashable_local, r"program 'w': local 'seen': its initial value \[\] is not hashable"),
    (_unhashable_thread_local, r"thread 'w0': local 'seen': its initial value \{1: 2\} is not hashable"),
])
def test_a_declaration_that_could_never_mean_what_it_says_is_refused_by_name(declare, message):
    """Before: an external step with no branches was silently never enabled (a deadlock verdict), a step with
    none silently had none, a branch named twice was accepted, a semaphore could start at -1 or above its
    bound, and an unhashable local raised a bare TypeError."""
    with pytest.raises(ModelError, match=message):
        _model(declare).compile()


def test_a_nan_step_timeout_is_refused_instead_of_waiting_forever():
    from safeprefetch.lowlevel import Runtime

    rt = Runtime(_model(lambda m: None).compile())
    with pytest.raises(ValueError, match="not nan"):
        rt.step(0, timeout=float("nan"))


# -- the review of the checks above: what they must not refuse ---------------------------------------------


class PerThreadInvariants(Model):
    """Symmetric as a whole: one invariant per worker, "each worker below 2", which two steps break."""

    name = "per_thread_invariants"

    def build(self, m):
        def go(s, me):
            me.x += 1

        p = m.program("w", x=0)
        p.step("go", go, next="go")
        for t in ("w1", "w2"):
            m.thread(t, p)
            m.invariant(f"{t} below 2", lambda s, threads, t=t: threads[t].x < 2)
        m.symmetric("w1", "w2")


def test_one_invariant_per_symmetric_thread_is_a_symmetric_declaration():
    """The swap fails the other thread's invariant, not none: the reduced search misses nothing there."""
    got = {reduce: check(PerThreadInvariants, reduce=reduce) for reduce in ("none", "symmetry")}
    assert {r.verdict for r in got.values()} == {"invariant"}
    assert len(got["none"].trace) == len(got["symmetry"].trace) == 2


class FreshObjectInMessage(Model):
    """A violation whose message prints a new object each time (its address differs per expansion)."""

    name = "fresh_object_in_message"

    def build(self, m):
        class Item:
            pass

        def take(s, me):
            if s.n == 0:
                violate("underflow", f"took {Item()!r} from an empty buffer")
            s.n -= 1

        m.shared(n=2)
        p = m.program("w")
        p.step("take", take, next="take")
        m.thread("w0", p)


def test_a_violation_message_that_prints_an_address_is_not_nondeterminism():
    r = check(FreshObjectInMessage)
    assert r.verdict == "underflow" and " at 0x" in r.violation.message


class RaisesLate(Model):
    """A step that raises only at x == 100: a search capped below it never gets there."""

    name = "raises_late"

    def build(self, m):
        def inc(s, me):
            if s.x == 100:
                raise ZeroDivisionError("boom at 100")
            s.x += 1

        m.shared(x=0)
        p = m.program("w")
        p.step("inc", inc, next="inc")
        m.thread("w0", p)


def test_the_determinism_probe_stays_within_the_searchs_cap_and_leaves_step_errors_to_it():
    r = check(RaisesLate, max_states=10)
    assert (r.verdict, r.exhaustive, r.states) == ("ok", False, 10)
    with pytest.raises(StepError, match="boom at 100"):
        check(RaisesLate, max_states=1000)

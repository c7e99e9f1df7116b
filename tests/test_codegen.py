"""The generated transitions are the model: translation validation, state by state.

The live Prefetcher runs its model's transitions compiled to straight-line
code (``safeprefetch/_dsl/codegen.py``). These tests prove, for every
configuration of the prefetcher's sweeps (the model's, runs, autotune, the
iterator and history modes, an error at a fixed index) and for the shapes
the live Prefetcher compiles, that in every reachable state the generated
code gives exactly what the machine gives: the same enabled steps, the same
successors, the same violations, the same guards and invariant verdicts,
with sound write and wake sets (``_runtime/validation.py``). The default
run covers a slice of each sweep (every shape and injection, the shortest
streams); ``-m slow`` covers all of it.

The validation has teeth: each mutation of the generator below -- a guard
clause dropped, a branch folded the wrong way, a write left out of a write
set, a folded invariant dropped, a thread left out of a wake set -- makes it
fail, with the kind of difference it should report.
"""

import itertools
import linecache
import traceback

import pytest

from safeprefetch import catalog, load_model
from safeprefetch.model import DONE, Model
from safeprefetch._prefetcher.machine import machine_for, transitions_for
from safeprefetch._dsl import codegen, inline
from safeprefetch._dsl.codegen import compile_transitions
from safeprefetch._runtime.validation import validate
from test_prefetcher_autotune import configs as autotune_configs
from test_prefetcher_model import configs as model_configs
from test_prefetcher_model_modes import iterator_configs
from test_prefetcher_runs import configs as runs_configs

PREFETCHER = load_model("prefetcher")


def key(cfg):
    return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in cfg.items())


def sweeps():
    """Every configuration of the prefetcher's sweeps, by sweep."""
    yield "model", list(model_configs())
    yield "runs", list(runs_configs())
    yield "autotune", list(autotune_configs())
    yield "iterator", list(iterator_configs())
    yield "runs-iterator", [{"capacity": 3, "run": 3, "workers": 1, "items": n, "sized": False, "close": c,
                             "error": True} for n in range(5) for c in (False, True)]
    yield "runs-error-at", [{"capacity": 3, "run": 3, "workers": w, "items": 4, "error_at": e}
                            for e in range(4) for w in (1, 2)]
    yield "runs-autotune", [{"capacity": 3, "run": 3, "workers": w, "items": 3, "autotune": True, "target": t, **inj}
                            for t in (1, 3) for w in (1, 2) for inj in ({}, {"close": True}, {"error": True})]
    yield "history-off", [{"capacity": 2, "workers": 2, "items": 3, "ordered": False, "close": True, "error": True,
                           "history": False},
                          {"capacity": 3, "workers": 2, "items": 4, "close": True, "error": True, "history": False},
                          {"capacity": 2, "workers": 1, "items": 3, "ordered": False, "close": True, "error": True,
                           "sized": False, "history": False}]


def groups():
    """(sweep, group, configs): a sweep's configurations grouped by shape, generated once per group."""
    for sweep, cfgs in sweeps():
        by_shape: dict = {}
        for cfg in cfgs:
            by_shape.setdefault(key({k: v for k, v in cfg.items() if k != "items"}), []).append(cfg)
        for shape, members in by_shape.items():
            yield sweep, shape, members


def _fast(sweep, members):
    """The default run's slice: streams of at most one item (at most two where that is all there is)."""
    short = [c for c in members if c["items"] <= 1]
    return short if sweep in ("model", "runs", "autotune", "iterator") else members[:1]


FAST = [(s, g, _fast(s, m)) for s, g, m in groups()]
FAST = [(s, g, m) for s, g, m in FAST if m]
# One generated module per shape, every stream length validated against it: exactly what the live
# Prefetcher does (transitions_for), and a fair share of the sweep.
FAST = [x for i, x in enumerate(FAST) if i % 6 == 0 or x[0] not in ("model", "runs", "autotune", "iterator")]


def _check(cfgs):
    """Generate once for the first config's shape and validate every config's machine against it."""
    first = PREFETCHER.compile(cfgs[0])
    compiled = compile_transitions(first, PREFETCHER)
    assert compiled.refused == () and compiled.invariants_folded
    states = 0
    for cfg in cfgs:
        machine = PREFETCHER.compile(cfg)
        result = validate(_for(compiled, machine))
        assert result.ok, f"{key(cfg)}: " + "; ".join(f"{d.what}: {d.message}" for d in result.differences[:3])
        states += result.states
    return states


def _for(compiled, machine):
    """``compiled``'s transitions, checked against ``machine`` (same shape, another stream length)."""
    import dataclasses

    return dataclasses.replace(compiled, machine=machine)


@pytest.mark.parametrize("sweep,shape,cfgs", FAST, ids=[f"{s}:{g}" for s, g, _ in FAST])
def test_generated_transitions_are_the_machine_on_the_sweeps(sweep, shape, cfgs):
    assert _check(cfgs) > 0


SLOW = list(groups())


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("sweep,shape,cfgs", SLOW, ids=[f"{s}:{g}" for s, g, _ in SLOW])
def test_generated_transitions_are_the_machine_on_every_sweep_config(sweep, shape, cfgs):
    assert _check(cfgs) > 0


def test_the_default_slice_covers_every_sweep_and_every_shape_axis():
    seen = {s for s, _g, _m in FAST}
    assert seen == {s for s, _c in sweeps()}
    cfgs = [c for _s, _g, m in FAST for c in m]
    for axis in ("capacity", "workers", "close", "error", "abandon", "ordered", "run", "autotune", "sized"):
        assert len({c.get(axis) for c in cfgs}) >= 2, axis


# -- the shapes the live Prefetcher compiles -------------------------------------------------------------

LIVE_SHAPES = [(1, 1, True, True, 0, 1), (2, 1, True, True, 0, 2), (2, 2, False, True, 0, 2),
               (3, 2, True, True, 0, 3), (2, 1, True, False, 0, 2), (3, 1, True, True, 2, 3)]


@pytest.mark.parametrize("shape", LIVE_SHAPES, ids=str)
def test_the_live_transitions_are_the_live_machine_at_every_length(shape):
    compiled = transitions_for(*shape)
    capacity, workers, ordered, sized, target, run = shape
    for items in (0, 1, 2, 3):
        machine = machine_for(capacity, workers, items, ordered, sized, target, run)
        result = validate(_for(compiled, machine), max_states=60_000)
        assert result.ok or (not result.exhaustive and not result.differences), result.differences[:3]


# -- the rest of the catalog: primitives are left to the machine, user steps are generated --------------


@pytest.mark.parametrize("name", sorted(catalog()))
def test_every_catalog_model_validates_with_its_primitives_left_to_the_machine(name):
    model = catalog()[name]
    compiled = compile_transitions(model.compile(), model)
    assert sum(len(steps) for steps in compiled.steps) > 0, "no step generated"
    result = validate(compiled, max_states=20_000)
    assert not result.differences, [f"{d.what}: {d.message}" for d in result.differences[:3]]


# -- mutations of the generator: each must make the validation fail -------------------------------------

MUTANT_CFG = {"capacity": 2, "workers": 2, "items": 2, "close": True, "error": True, "abandon": True}


def _mutant_result(monkeypatch, mutate, model=PREFETCHER, cfg=MUTANT_CFG):
    mutate(monkeypatch)
    compiled = compile_transitions(model.compile(cfg), model)
    return validate(compiled)


def _drop_guard_clause(mp):
    """A guard whose test is not a constant never disables its step (the clause is dropped)."""
    real = codegen._GuardReturns.at

    def at(self, value):
        if not self.value and value is not None and not isinstance(value, codegen.ast.Constant):
            return []
        return real(self, value)
    mp.setattr(codegen._GuardReturns, "at", at)


def _fold_equality_backwards(mp):
    mp.setitem(inline._CMP, inline.ast.Eq, lambda a, b: a != b)


def _drop_a_write(mp):
    """The successor keeps the old value of the first field a step writes."""
    real = codegen._Generator._successor

    def successor(self, t, writes, mentioned):
        out = real(self, t, writes, mentioned)
        tup = out[0].value
        for i, e in enumerate(tup.elts):
            if isinstance(e, codegen.ast.Name) and e.id.startswith("S__") and e.id[3:] in writes:
                tup.elts[i] = codegen._subscript(self.m.shared_index[e.id[3:]])
                break
        return out
    mp.setattr(codegen._Generator, "_successor", successor)


def _forget_write_sets(mp):
    mp.setattr(codegen, "_stored", lambda stmts, prefix: set())


def _forget_the_consumer_in_wake_sets(mp):
    real = codegen._with_wake_sets

    def with_wake_sets(machine, steps):
        out = real(machine, steps)
        consumer = machine.thread_names.index("consumer")
        return [{pc: codegen.GeneratedStep(g.label, g.branches, g.ones, g.enabled, g.first, g.writes, g.reads,
                                           tuple(tuple(x for x in w if x[0] != consumer) for w in g.wake))
                 for pc, g in table.items()} for table in out]
    mp.setattr(codegen, "_with_wake_sets", with_wake_sets)


@pytest.mark.parametrize("mutate,expected", [
    (_drop_guard_clause, {"successors", "guard", "first"}),
    (_fold_equality_backwards, {"successors", "guard", "first"}),
    (_drop_a_write, {"successors"}),
    (_forget_write_sets, {"writes"}),
    (_forget_the_consumer_in_wake_sets, {"wake"}),
], ids=lambda x: getattr(x, "__name__", ""))
def test_a_mutated_generator_fails_the_validation(monkeypatch, mutate, expected):
    result = _mutant_result(monkeypatch, mutate)
    assert not result.ok
    assert {d.what for d in result.differences} & expected, [d.what for d in result.differences]


class Overflowing(Model):
    """Two threads add one each to a counter the invariant bounds by one: the second add breaks it."""

    name = "overflowing"

    def build(self, m):
        m.shared(count=0, other=0)

        def add(s, me):
            s.count += 1

        p = m.program("adder")
        p.step("add", add, next="touch")
        p.step("touch", lambda s, me: None, next=DONE)
        m.thread("a", p)
        m.thread("b", p)
        m.invariant("count <= 1", lambda s: s.count <= 1, "overflow")


def test_a_folded_invariant_reports_the_machines_verdict_and_dropping_it_fails(monkeypatch):
    good = validate(compile_transitions(Overflowing.compile(), Overflowing))
    assert good.ok
    compiled = compile_transitions(Overflowing.compile(), Overflowing)
    broken = [n for s in [compiled.machine.init] for _c, n in compiled.successors(s)]
    assert broken and all(type(n) is tuple for n in broken)  # one add: fine
    monkeypatch.setattr(codegen._Generator, "_invariants", lambda self: [])
    bad = validate(compile_transitions(Overflowing.compile(), Overflowing))
    assert not bad.ok and {d.what for d in bad.differences} == {"invariant"}


# -- what the generator refuses, and what it writes ------------------------------------------------------


def _helper(s):
    return s.count


class Refusals(Model):
    """Steps the inliner must refuse: one hands ``s`` to a helper, one returns from inside a loop."""

    name = "refusals"

    def build(self, m):
        m.shared(count=0)

        def hands_s_over(s, me):
            s.count = _helper(s) + 1

        def returns_in_a_loop(s, me):
            for _ in range(2):
                if s.count:
                    return DONE
            s.count += 1

        p = m.program("p")
        p.step("hand over", hands_s_over, next="loop")
        p.step("loop", returns_in_a_loop, next=DONE, to=[DONE])
        m.thread("t", p)


def test_steps_it_cannot_inline_exactly_are_left_to_the_machine_and_still_validate():
    compiled = compile_transitions(Refusals.compile(), Refusals)
    reasons = {label: why for _t, label, why in compiled.refused}
    assert "other than by attribute" in reasons["hand over"]
    assert "return inside a for" in reasons["loop"]
    assert validate(compiled).ok


def test_the_generated_module_reads_as_the_model_and_tracebacks_show_its_lines():
    compiled = transitions_for(2, 1, True, True, 0, 2)
    src = compiled.source
    assert "def t0_claim_index_and_slot_0(state):" in src and "S__next_index += 1" in src
    assert "fire" not in src and ".count(FREE) > 2 - S__target" in src  # the closure's capacity, folded
    one = compiled.steps[0]["claim index and slot"].ones[0]
    assert linecache.getline(one.__code__.co_filename, one.__code__.co_firstlineno).startswith("def t0_claim")
    with pytest.raises(IndexError) as info:
        one(("not", "a", "state"))
    last = traceback.extract_tb(info.value.__traceback__)[-1]
    assert last.name == "t0_claim_index_and_slot_0" and last.line.startswith("S__") and "= state[" in last.line
    assert last.line in src


def test_a_generated_module_is_one_per_shape_and_generation_is_fast():
    import time

    a, b = transitions_for(2, 1, True, True, 0, 2), transitions_for(2, 1, True, True, 0, 2)
    assert a is b
    t0 = time.process_time()
    compile_transitions(PREFETCHER.compile({"capacity": 3, "workers": 3, "close": True, "error": True}), PREFETCHER)
    assert time.process_time() - t0 < 5  # generous: about 0.05 s on the bench machine; a hang fails here


@pytest.mark.parametrize("cfg", [dict(zip(("capacity", "workers"), cw)) for cw in itertools.product((1, 3), (1, 3))],
                         ids=key)
def test_wake_sets_list_only_readers_of_what_a_branch_writes(cfg):
    compiled = compile_transitions(PREFETCHER.compile({**cfg, "close": True, "error": True}), PREFETCHER)
    m = compiled.machine
    consumer = m.thread_names.index("consumer")
    claim = compiled.steps[0]["claim index and slot"]
    exit_branch = claim.branches.index("exit")
    # A worker's exit writes only `alive`: it may wake the joins (consumer, closer), never a claim or a take.
    woken = {(m.thread_names[u], pc) for u, pcs in claim.wake[exit_branch] for pc in pcs}
    assert woken and all(pc == "join workers" for _u, pc in woken)
    assert claim.writes[exit_branch] == frozenset({m.shared_index["alive"]})
    take = compiled.steps[consumer]["take next batch"]
    assert m.shared_index["slots"] in take.reads and m.shared_index["alive"] not in take.reads


def test_clone_is_deepcopy_and_builds_nodes_with_their_fields():
    """inline.clone against copy.deepcopy over this package's own sources: the same tree, with locations,
    sharing no node; and no node built without its fields (deprecated in 3.13, an error in 3.15)."""
    import ast
    import copy
    import pathlib
    import warnings

    import safeprefetch
    from safeprefetch._dsl.inline import clone

    root = pathlib.Path(safeprefetch.__file__).parent
    files = sorted(root.glob("_dsl/*.py"))[:6] + sorted(root.glob("_prefetcher/*.py"))[:4]
    assert len(files) == 10
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            mine = clone(tree)
        theirs = copy.deepcopy(tree)
        assert ast.dump(mine, include_attributes=True) == ast.dump(theirs, include_attributes=True), path
        originals = {id(n) for n in ast.walk(tree)}
        assert not originals & {id(n) for n in ast.walk(mine)}, path


@pytest.mark.parametrize("subject", ["catalog", "live shapes", "many workers"])
def test_successor_tuples_written_as_text_give_the_plain_paths_module(monkeypatch, subject):
    """The generator writes each successor tuple as text (construction with many workers spent most of its
    time walking and unparsing them); the module is character for character the one ``ast.unparse`` writes."""
    if subject == "catalog":
        cases = [(m.compile(), m) for m in catalog().values()]
    elif subject == "live shapes":
        cases = [(machine_for(c, w, 2, o, s, t, r), PREFETCHER) for c, w, o, s, t, r in LIVE_SHAPES]
    else:
        cases = [(PREFETCHER.compile({"capacity": 9, "workers": 9, "close": True, "error": True}), PREFETCHER)]
    for machine, model in cases:
        monkeypatch.setattr(codegen._Generator, "tuples_as_text", False)
        plain = compile_transitions(machine, model).source
        monkeypatch.setattr(codegen._Generator, "tuples_as_text", True)
        fast = compile_transitions(machine, model).source
        assert "SUCCESSOR" not in fast and fast.count("nxt__ = (") == plain.count("nxt__ = (") > 0
        assert fast == plain, machine.name


def test_validation_compares_successors_type_by_type():
    """A generated successor equal to the machine's but holding ``1`` where the machine has ``True`` (or an
    int where it has a slot state) prints, and behaves, differently: the validation says so (``==`` did not)."""
    import dataclasses

    compiled = transitions_for(2, 1, True, True, 0, 2)
    machine = machine_for(2, 1, 2, True, True, 0, 2)

    def as_ints(fn):
        def one(state):
            nxt = fn(state)
            if type(nxt) is not tuple:
                return nxt
            return tuple(int(x) if type(x) is bool else x for x in nxt)
        one.__name__ = fn.__name__
        return one

    steps = tuple({pc: dataclasses.replace(g, ones=tuple(as_ints(f) for f in g.ones)) for pc, g in table.items()}
                  for table in compiled.steps)
    result = validate(dataclasses.replace(compiled, machine=machine, steps=steps))
    assert not result.ok and any("in a type" in d.message for d in result.differences), result.differences[:2]
    assert validate(dataclasses.replace(compiled, machine=machine)).ok

"""The program graph is data: every step declares where it may go, the compiler checks it, tools draw it.

* compile time: a declared target that is not a label, an unknown ``next``,
  a computed ``next`` without ``to=``, a label returned literally but not
  declared -- each a ModelError naming the program, the step and the label;
* fire time: a step that goes to a label outside its declared set raises,
  on every path a label is computed (an effect's return, a ``next``
  function, a primitive's ``next`` function, one branch at a time);
* the compiled Machine carries the graph (``machine.graph``), equal to
  ``Model.graph()``, and ``list``, ``explain`` and the docs draw it;
* every catalog model compiles with complete declarations, and the
  declarations cover every move the checker explores.
"""

import io
import json
from contextlib import redirect_stdout

import pytest

from safeprefetch import catalog, check
from safeprefetch._check.explore import Explorer
from safeprefetch._cli.main import main as cli
from safeprefetch._dsl.graph import GRAPH_PENDING, format_graph, graph_json
from safeprefetch._tools.teach import explain
from safeprefetch.model import DONE, GraphStep, Model, ModelError

LABELS = {0: "a", 1: "b"}  # a label the literal-return check cannot see: computed at run time


def model(build, **attrs):
    return type("M", (Model,), {"name": "m", "build": lambda self, m: build(m), **attrs})


def one_program(add_steps):
    def build(m):
        m.shared(x=1)
        m.mutex("lock")
        p = m.program("p")
        add_steps(p)
        m.thread("t", p)
    return model(build)


# -- compile time ----------------------------------------------------------------


def test_a_declared_target_that_is_not_a_label_is_refused_naming_program_step_and_label():
    def steps(p):
        p.step("a", next=lambda s, me: "b", to=["b", "nowhere"])
        p.step("b", next=DONE)
    with pytest.raises(ModelError, match=r"program 'p': step 'a' goes to unknown step 'nowhere' \(declared in to=\)"):
        one_program(steps).compile()


def test_an_unknown_next_label_is_refused_naming_program_step_and_label():
    with pytest.raises(ModelError, match=r"program 'p': step 'a' goes to unknown step 'nowhere' \(its next\)"):
        one_program(lambda p: p.step("a", next="nowhere")).compile()


@pytest.mark.parametrize("how", ["next function", "effect returns the label"])
def test_a_computed_next_without_to_is_refused_at_compile_time(how):
    def steps(p):
        if how == "next function":
            p.step("a", next=lambda s, me: DONE)
        else:
            p.step("a", lambda s, me: DONE)
    with pytest.raises(ModelError, match=r"program 'p': step 'a' picks its next step at run time .* to=\[\.\.\.\]"):
        one_program(steps).compile()


def test_a_primitive_with_a_computed_next_must_declare_it_too():
    def steps(p):
        p.acquire("lock", "lock", next="unlock")
        p.release("unlock", "lock", next=lambda s, me: DONE)
    with pytest.raises(ModelError, match="step 'unlock' picks its next step at run time"):
        one_program(steps).compile()


def test_to_takes_a_list_of_labels_not_a_string():
    with pytest.raises(ModelError, match=r"to='b'; to= takes a list of labels, e\.g\. to=\['b'\]"):
        one_program(lambda p: p.step("a", next=lambda s, me: "b", to="b")).compile()


def test_a_label_returned_literally_but_not_declared_is_refused_at_compile_time():
    def effect(s, me):
        if s.x:
            return "b"  # declared: next="a" only

    def steps(p):
        p.step("a", effect, next="a")
        p.step("b", next=DONE)
    with pytest.raises(ModelError, match=r"program 'p': step 'a' may go to 'b' \(returned by effect\(\)\), "
                                         r"which is not among the labels it declares: 'a'; add it to to="):
        one_program(steps).compile()


# -- fire time -------------------------------------------------------------------

ELSEWHERE = r"program 'p', step 'a' went to 'b', which is not among the labels it declares: 'a', 'done'"


def _went_elsewhere_models():
    def by_effect(p):
        p.step("a", lambda s, me: LABELS[s.x], to=["a", DONE])
        p.step("b", next=DONE)

    def by_next(p):
        p.step("a", next=lambda s, me: LABELS[s.x], to=["a", DONE])
        p.step("b", next=DONE)

    def by_branch(p):
        p.step("a", lambda s, me, b: LABELS[s.x] if b == "two" else DONE, branches=("one", "two"), to=["a", DONE])
        p.step("b", next=DONE)

    def by_primitive(p):
        p.acquire("lock", "lock", next="a")
        p.release("a", "lock", next=lambda s, me: LABELS[s.x], to=["a", DONE])
        p.step("b", next=DONE)
    return {"effect": by_effect, "next": by_next, "branch": by_branch, "primitive": by_primitive}


@pytest.mark.parametrize("path", ["effect", "next", "branch", "primitive"])
def test_a_step_that_goes_outside_its_declared_set_raises_when_it_fires(path):
    machine = one_program(_went_elsewhere_models()[path]).compile()  # compiles: the label is computed
    with pytest.raises(ModelError, match=ELSEWHERE):
        check(machine)
    state = machine.init
    if path == "primitive":
        state = machine.fire(state, 0)[0][1]  # take the lock first
    with pytest.raises(ModelError, match=ELSEWHERE):
        machine.fire(state, 0)
    if path == "branch":
        assert machine.fire_branch(state, 0, 0)[0][0] == 0  # branch "one" goes to DONE: declared
        with pytest.raises(ModelError, match=ELSEWHERE):
            machine.fire_branch(state, 0, 1)


def test_a_step_inside_its_declared_set_fires_normally():
    def steps(p):
        p.step("a", lambda s, me: LABELS[s.x], to=["a", "b"])
        p.step("b", next=DONE)
    assert check(one_program(steps)).verdict == "ok"


# -- the graph as data -----------------------------------------------------------


class Handoff(Model):
    name = "handoff"
    params = {"items": 1}

    def build(self, m, items):
        m.shared(count=0)
        m.mutex("lock")
        m.condvar("changed")
        p = m.program("producer", left=items)
        p.acquire("lock", "lock", next="check full")
        p.step("check full", next=lambda s, me: "wait" if s.count else "put", to=["wait", "put"])
        p.wait("wait", "changed", "lock", next="check full")
        p.step("put", lambda s, me: setattr(s, "count", s.count + 1), next="notify")
        p.notify_all("notify", "changed", next="unlock")
        p.release("unlock", "lock", next=lambda s, me: DONE, to=[DONE])
        c = m.program("consumer")
        c.external("take", "fetch", lambda s, me, b: "take" if b == "retry" else DONE, branches=("ok", "retry"),
                   guard=lambda s, me, b: s.count > 0, to=[DONE, "take"])
        m.thread("producer", p)
        m.thread("consumer0", c)
        m.thread("consumer1", c)


def test_the_machine_exposes_each_programs_graph_as_data():
    machine = Handoff.compile()
    assert machine.thread_roles == ("producer", "consumer", "consumer")
    assert machine.threads_of("consumer") == ["consumer0", "consumer1"]
    producer = machine.graph["producer"]
    assert list(producer) == ["lock", "check full", "wait", "put", "notify", "unlock"]
    assert producer["lock"] == GraphStep("lock", "acquire", ("check full",), ("lock",))
    assert producer["check full"] == GraphStep("check full", "step", ("wait", "put"))
    assert producer["wait"] == GraphStep("wait", "wait", ("check full",), ("changed", "lock"))
    assert producer["unlock"].targets == (DONE,)
    assert machine.graph["consumer"]["take"] == GraphStep("take", "external", (DONE, "take"), (), ("ok", "retry"),
                                                           "fetch")
    # The same graph without compiling anything.
    assert Handoff.graph() == machine.graph


def test_targets_keep_declaration_order_next_first_without_duplicates():
    def steps(p):
        p.step("a", lambda s, me: None, next="b", to=[DONE, "b", "a"])
        p.step("b", next=DONE)
    assert one_program(steps).compile().graph["p"]["a"].targets == ("b", DONE, "a")


def test_the_graph_is_drawn_as_text_and_json():
    machine = Handoff.compile()
    text = format_graph(machine.graph, {r: machine.threads_of(r) for r in machine.graph})
    lines = text.splitlines()
    assert lines[0] == "producer (threads: producer)"
    assert any(line.split() == ["check", "full", "step", "->", "wait,", "put"] for line in lines)
    assert any(line.split() == ["wait", "wait", "changed", "(lock)", "->", "check", "full"] for line in lines)
    assert "consumer (threads: consumer0, consumer1)" in lines
    assert any(line.split()[:4] == ["take", "external", "[fetch]", "{ok|retry}"] for line in lines)
    data = graph_json(machine.graph)
    assert data["producer"]["check full"] == {"kind": "step", "targets": ["wait", "put"]}
    assert data["consumer"]["take"]["targets"] == [DONE, "take"]
    json.dumps(data)


def test_an_exempt_model_compiles_and_its_graph_says_what_is_undeclared():
    def build(m):
        p = m.program("p")
        p.step("a", lambda s, me: LABELS[0])
        m.thread("t", p)
    loose = model(build, graph_checked=False)
    machine = loose.compile()
    assert machine.graph["p"]["a"] == GraphStep("a", "step", (), declared=False)
    assert "? (not declared)" in format_graph(machine.graph)
    assert graph_json(machine.graph)["p"]["a"]["targets"] is None
    with pytest.raises(ModelError, match="picks its next step at run time"):
        model(build).compile()


# -- the catalog -----------------------------------------------------------------

CHECKED = sorted(n for n in catalog() if n not in GRAPH_PENDING)


def test_the_pending_list_names_catalog_models_only():
    assert GRAPH_PENDING <= set(catalog())


@pytest.mark.parametrize("name", CHECKED)
def test_every_catalog_model_compiles_with_complete_declarations(name):
    m = catalog()[name]
    configs = [{}, {"notify": "any", "spurious": "on"}]
    configs += [{k: v} for k, values in (m.sweep or {}).items() for v in values]
    for config in configs:
        machine = m.compile(config)
        assert all(step.declared for steps in machine.graph.values() for step in steps.values())


@pytest.mark.parametrize("name", CHECKED)
def test_the_declared_targets_cover_every_move_the_checker_explores(name):
    machine = catalog()[name].compile({"spurious": "on", "notify": "any"})
    e = Explorer(machine, stop_at_first=False, max_states=20_000)
    e.run()
    for state in e.parents:
        for t, role in enumerate(machine.thread_roles):
            pc = machine.pc(state, t)
            label = pc.split(" (", 1)[0] if pc.endswith((" (asleep)", " (woken)", " (timed out)")) else pc
            for _, nxt in machine.fire(state, t):
                if isinstance(nxt, tuple) and not pc.endswith(" (asleep)"):
                    after = machine.pc(nxt, t)
                    if after.endswith(" (asleep)"):
                        continue  # a wait going to sleep; its own target is where it goes once woken
                    assert after in machine.graph[role][label].targets, (name, role, pc, after)


# -- the tools draw it -----------------------------------------------------------


def _cli(*args):
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli(list(args))
    return code, out.getvalue()


def test_list_graph_draws_every_programs_steps_and_targets():
    code, out = _cli("list", "--graph")
    assert code == 0
    block = out.split("one_cond_signal ", 1)[1].split("\n\n", 1)[0]
    assert "    producer" in block and "    consumer" in block
    assert any(line.split() == ["check", "full", "step", "->", "wait,", "put"] for line in block.splitlines())


def test_list_json_carries_the_programs():
    code, out = _cli("list", "--json")
    assert code == 0
    rows = {row["model"]: row for row in json.loads(out)}
    assert rows["one_cond_signal"]["programs"]["producer"]["unlock"] == {
        "kind": "release", "targets": ["lock", DONE], "objects": ["lock"]}


def test_explain_shows_the_programs():
    text = explain(catalog()["one_cond_signal"])
    section = text.split("The programs", 1)[1]
    assert "producer (threads: producer0)" in section and "consumer (threads: consumer0, consumer1)" in section

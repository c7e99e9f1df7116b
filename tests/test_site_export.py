"""The playground's exported state graphs: the checker's graph, verdicts and counterexample, as data.

A page walks this data instead of running the model, so each fact in it is
compared with the checker on the same states: successors with the compiled
machine, the per-state verdicts with the explorer's classifier, the stuck
states' messages with ``classify_hang`` on their BFS paths, and the
counterexample with ``replay``.
"""

import json
import subprocess
import sys
from collections import deque

import pytest

from safeprefetch import catalog, check, replay
from safeprefetch.model import DONE, StepViolation
from safeprefetch._check.replay import replay_choices
from safeprefetch._check.verdict import classify_hang
from safeprefetch._tools.playground import (FORMAT, MAX_STATES, SEMANTICS, difficulty, export_graph, export_model,
                                            variant_key)

MODELS = catalog()


def _normal(value):
    return json.loads(json.dumps(value))


def _bfs_paths(machine, graph):
    """For every exported state, a shortest path to it: (states, choices), by following the export."""
    paths = {0: ([machine.init], [])}
    queue = deque([0])
    while queue:
        i = queue.popleft()
        states, choices = paths[i]
        for move in graph["states"][i]["moves"]:
            j = move.get("to")
            if j is not None and j not in paths:
                nxt = machine.fire_branch(states[-1], move["thread"], move["branch"])[0][1]
                paths[j] = (states + [nxt], choices + [(move["thread"], move["branch"])])
                queue.append(j)
    return paths


@pytest.mark.parametrize("name", sorted(MODELS))
def test_export_matches_the_machine_state_by_state(name):
    machine = MODELS[name].compile({})
    graph = export_graph(machine)
    assert graph["format"] == FORMAT and graph["complete"]
    assert json.loads(json.dumps(graph)) == graph  # plain JSON, nothing Python-only
    paths = _bfs_paths(machine, graph)
    assert len(paths) == len(graph["states"])  # every exported state is reachable through the moves
    for i, record in enumerate(graph["states"]):
        states, choices = paths[i]
        state = states[-1]
        assert record["values"] == _normal(list(state))
        succ = [(c, n) for c, n in machine.successors(state)] if not machine.invariant_violation(state) else []
        assert [(m["thread"], m["branch"]) for m in record["moves"]] == [c for c, _n in succ]
        for move, (_c, nxt) in zip(record["moves"], succ):
            if isinstance(nxt, StepViolation):
                assert move["violation"]["kind"] == nxt.kind and "to" not in move
            else:
                assert graph["states"][move["to"]]["values"] == _normal(list(nxt))
        hang = (record["status"] or {}).get("hang")
        if hang is not None:
            kind, message = classify_hang(machine, states, choices)
            if kind == "lost_wakeup":
                assert message in [lost["message"] for lost in hang["lost"]]
            elif kind == "deadlock":
                assert message == hang["deadlock"]
            else:
                assert (kind, message) == ("shutdown_hang", hang["shutdown"])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_counterexample_plays_to_the_checkers_end_state(name):
    machine = MODELS[name].compile({})
    result = check(machine, reduce="none")
    graph = export_graph(machine, result=result)
    checker = graph["checker"]
    assert checker["verdict"] == result.verdict == MODELS[name].expected
    at, last_move = 0, None
    for t, b in checker["trace"]:
        last_move = next(m for m in graph["states"][at]["moves"] if (m["thread"], m["branch"]) == (t, b))
        if "to" in last_move:
            at = last_move["to"]
    expected = replay(machine, result.trace)
    if isinstance(expected[-1], StepViolation):
        assert last_move["violation"]["kind"] == result.verdict
        expected = expected[:-1]
    assert graph["states"][at]["values"] == _normal(list(expected[-1]))
    if result.violation is not None and result.violation.cycle_start is not None:
        assert checker["cycle_start"] == result.violation.cycle_start


def test_a_bounded_excerpt_keeps_the_counterexample_and_says_where_it_ends():
    machine = MODELS["one_cond_signal"].compile({})
    full = export_graph(machine)
    small = export_graph(machine, max_states=20)
    assert full["complete"] and not small["complete"] and small["max_states"] == 20
    trace_states = replay_choices(machine, check(machine, reduce="none").trace)[0]
    exported = {tuple(json.dumps(r["values"]) for r in [s]) for s in small["states"]}
    for state in trace_states:
        assert (json.dumps(_normal(list(state))),) in exported
    assert 20 < len(small["states"]) <= 20 + len(trace_states)
    assert any(m.get("to", 0) is None for r in small["states"] for m in r["moves"])
    with pytest.raises(ValueError, match="at least 1"):
        export_graph(machine, max_states=0)


def test_blocked_threads_say_why_and_places_name_program_steps():
    machine = MODELS["one_cond_signal"].compile({})
    graph = export_graph(machine)
    deadlocked = [r for r in graph["states"] if (r["status"] or {}).get("hang")]
    assert deadlocked
    for record in deadlocked:
        assert set(record["blocked"]) == {t["name"] for t, pc in zip(graph["threads"], record["values"][5::2])
                                          if pc != DONE}
        assert all(reason.startswith(("asleep on", "waits for")) for reason in record["blocked"].values())
    for thread, places in zip(graph["threads"], graph["places"]):
        labels = {s["label"] for s in graph["programs"][thread["role"]]}
        assert {p["step"] for p in places.values()} == labels | {DONE}
        assert places["wait (asleep)"] == {"step": "wait", "note": "asleep"}


def test_priority_policy_holds_back_lower_threads_and_marks_progress():
    graph = export_graph(MODELS["priority_inversion"].compile({}))
    moves = [m for r in graph["states"] for m in r["moves"]]
    assert graph["progress"] and any(m.get("held") for m in moves) and any(m.get("progress") for m in moves)
    assert graph["checker"]["verdict"] == "starvation" and graph["checker"]["cycle_start"] is not None


def test_export_model_has_every_setting_for_the_model_and_its_fix():
    data = export_model(MODELS["no_predicate_wait"])
    assert data["fix"] == "monitor" and data["default"] == variant_key("model", "fifo", "off")
    assert set(data["variants"]) == {variant_key(d, n, s) for d in ("model", "fix") for n, s in SEMANTICS}
    verdicts = {k: v["checker"]["verdict"] for k, v in data["variants"].items()}
    assert verdicts[variant_key("model", "fifo", "off")] == "lost_wakeup"
    assert verdicts[variant_key("model", "fifo", "on")] != "lost_wakeup"  # spurious wakeups change the bug
    assert all(v == "ok" for k, v in verdicts.items() if k.startswith("fix"))
    fix = data["variants"][variant_key("fix", "fifo", "off")]
    assert fix["model"] == "monitor" and fix["config"]["items"] == MODELS["no_predicate_wait"].defaults()["items"]
    assert "fix" not in {k.split()[0] for k in export_model(MODELS["monitor"])["variants"]}


def test_difficulty_grows_with_the_counterexample():
    assert difficulty(check(MODELS["monitor"])) == "reference"
    assert difficulty(check(MODELS["wait_holding_mutex"])) == "easy"
    assert difficulty(check(MODELS["one_cond_signal"])) == "hard"


@pytest.mark.slow
def test_every_catalog_model_fits_the_playground_whole():
    for name, model in MODELS.items():
        for notify, spurious in SEMANTICS:
            graph = export_graph(model.compile({"notify": notify, "spurious": spurious}))
            assert graph["complete"] and len(graph["states"]) < MAX_STATES, (name, notify, spurious)


def test_docs_graph_command_prints_the_export(tmp_path):
    out = subprocess.run([sys.executable, "-m", "safeprefetch", "docs", "graph", "no_space_guard",
                          "--set", "items=1", "--max-states", "10"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    graph = json.loads(out.stdout)
    assert graph["model"] == "no_space_guard" and graph["config"]["items"] == 1 and graph["max_states"] == 10
    bad = subprocess.run([sys.executable, "-m", "safeprefetch", "docs", "graph", "no_such_model"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown model" in bad.stderr and "Traceback" not in bad.stderr

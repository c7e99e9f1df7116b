"""An unfinished search never passes: the exit codes of ``check``, ``check --all`` and ``replay``.

0: no violation, every state visited. 1: a violation. 2: a usage or model
error. 3: no violation, but the search did not finish (a state cap, a
memory budget, a sampling strategy) -- unless ``--allow-partial`` says that
is enough.
"""

import json
from dataclasses import replace

import pytest
from test_cli import run  # python -m safeprefetch ARGS -> (exit code, stdout, stderr)

from safeprefetch._cli import main as cli
from safeprefetch.model import DONE, Model

UNBOUNDED = '''
"""unbounded: a counter that grows forever, so no search can finish."""
from safeprefetch.model import Model


class Unbounded(Model):
    name = "unbounded"

    def build(self, m):
        m.shared(n=0)
        p = m.program("counter")
        p.step("count", lambda s, me: setattr(s, "n", s.n + 1), next="count")
        m.thread("counter", p)
'''


@pytest.fixture
def unbounded(tmp_path):
    path = tmp_path / "unbounded.py"
    path.write_text(UNBOUNDED)
    return str(path)


def test_an_unbounded_model_exits_3_and_says_the_search_is_incomplete(unbounded):
    code, out, _ = run("check", unbounded, "--max-states", "500", "--json")
    assert code == 3
    d = json.loads(out)
    assert d["verdict"] == "ok" and d["exhaustive"] is False and d["states"] == 500
    assert d["trace_length"] is None and d["trace"] == []
    code, out, _ = run("check", unbounded, "--max-states", "500")
    assert code == 3 and "NOT exhaustive" in out


def test_allow_partial_opts_out(unbounded):
    code, _, _ = run("check", unbounded, "--max-states", "500", "--allow-partial")
    assert code == 0


def test_a_search_stopped_by_its_memory_budget_is_incomplete_too(unbounded):
    # The interpreter with numpy holds about 40 MiB (a budget below that is refused up front); the
    # counter's states fill the rest within a second or so of CPU.
    code, out, err = run("check", unbounded, "--memory", "100M", "--json")
    assert code == 3, err
    d = json.loads(out)
    assert d["verdict"] == "ok" and d["exhaustive"] is False and d["stop_reason"] == "memory"
    assert d["trace_length"] is None
    assert run("check", unbounded, "--memory", "100M", "--allow-partial")[0] == 0
    code, _, err = run("check", unbounded, "--memory", "1M")
    assert code == 2 and "below what this process already holds" in err


def test_a_sampling_strategy_that_finds_nothing_is_incomplete_too():
    code, out, _ = run("check", "monitor", "--strategy", "random", "--budget", "20", "--json")
    assert code == 3 and json.loads(out)["exhaustive"] is False
    assert run("check", "monitor", "--strategy", "random", "--budget", "20", "--allow-partial")[0] == 0


def test_a_complete_ok_exits_0_and_has_no_trace_length():
    code, out, _ = run("check", "monitor", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["exhaustive"] is True and d["trace_length"] is None


def test_a_violation_found_before_the_cap_exits_1():
    code, out, _ = run("check", "no_space_guard", "--max-states", "14", "--json")
    assert code == 1 and json.loads(out)["trace_length"] == 6


def _unbounded_model():
    namespace: dict = {}
    exec(UNBOUNDED, namespace)  # the file's model, in process
    return namespace["Unbounded"]


_Counter = _unbounded_model()


def test_check_all_fails_on_an_incomplete_search(monkeypatch, capsys):
    monkeypatch.setattr(cli, "catalog", lambda: {"counter": _Counter})
    assert cli.main(["check", "--all", "--max-states", "50"]) == 3
    assert "did not finish" in capsys.readouterr().err
    assert cli.main(["check", "--all", "--max-states", "50", "--allow-partial"]) == 0


def test_check_all_exit_1_wins_over_3(monkeypatch):
    class Wrong(Model):
        """wrong: declares a deadlock it does not have (its search ends within the cap: a real mismatch; an
        ok the cap cut short is no verdict, and counts as incomplete, test_hardening_review18.py)."""

        name = "wrong"
        expected = "deadlock"

        def build(self, m):
            m.shared(x=0)
            p = m.program("p")
            p.step("set", lambda s, me: setattr(s, "x", 1), next=DONE)
            m.thread("t", p)

    monkeypatch.setattr(cli, "catalog", lambda: {"counter": _Counter, "wrong": Wrong})
    assert cli.main(["check", "--all", "--max-states", "50"]) == 1


def test_exit_code_is_one_function_of_the_result():
    from safeprefetch import check

    assert cli.exit_code(check(_Counter, max_states=10)) == 3
    assert cli.exit_code(check(_Counter, max_states=10), allow_partial=True) == 0
    assert cli.exit_code(replace(check(_Counter, max_states=10), exhaustive=True)) == 0


# -- replay ---------------------------------------------------------------------------------------


def test_an_empty_trace_is_an_error_not_a_success(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text("[]")
    code, _, err = run("replay", "one_cond_signal", str(path))
    assert code == 2 and "has no steps" in err and err.count("\n") == 1


def test_replay_numbers_steps_from_1_like_the_tables(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"thread": "producer0", "step": "lock"}, {"thread": "producer0", "step": "nope"}]))
    code, _, err = run("replay", "one_cond_signal", str(path))
    assert code == 2 and "step 2:" in err


def test_replay_of_an_unknown_thread_suggests_one(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"thread": "producer", "step": "lock"}]))
    code, _, err = run("replay", "one_cond_signal", str(path))
    assert code == 2 and "step 1: the model has no thread 'producer'; did you mean 'producer0'?" in err

"""The CLI contract from ARCHITECTURE.md: commands, JSON keys, exit codes, one-line errors."""

import json
import subprocess
import sys

import pytest


def run(*args, cwd=None):
    p = subprocess.run([sys.executable, "-m", "safeprefetch", *args], capture_output=True, text=True, cwd=cwd,
                       timeout=120)
    return p.returncode, p.stdout, p.stderr


def test_check_prefetcher_json_is_ok_and_exhaustive():
    code, out, err = run("check", "prefetcher", "--set", "capacity=2", "--set", "workers=2", "--set", "items=3",
                         "--json")
    assert code == 0, err
    d = json.loads(out)
    for k in ("model", "config", "strategy", "exhaustive", "verdict", "expected", "states", "transitions",
              "seconds", "trace"):
        assert k in d
    assert d["verdict"] == "ok" and d["exhaustive"] is True and d["states"] > 0
    assert d["config"]["capacity"] == 2 and d["strategy"] == "bfs"


def test_check_broken_model_exits_1_with_a_shortest_trace():
    code, out, _ = run("check", "one_cond_signal", "--json")
    assert code == 1
    d = json.loads(out)
    assert d["verdict"] == "deadlock" and d["expected"] == "deadlock"
    assert len(d["trace"]) == 22
    assert all({"thread", "step"} <= set(s) for s in d["trace"])


def test_check_text_output_shows_the_trace_table():
    code, out, _ = run("check", "no_predicate_wait")
    assert code == 1
    assert "producer0" in out and "consumer0" in out and "<== lost_wakeup" in out


def test_list_and_list_json():
    code, out, _ = run("list")
    assert code == 0 and "prefetcher" in out
    code, out, _ = run("list", "--json")
    names = {m["model"] for m in json.loads(out)}
    assert {"prefetcher", "one_cond_signal", "no_predicate_wait", "no_space_guard"} <= names


def test_check_all_exits_0_when_every_verdict_matches():
    code, out, err = run("check", "--all", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert isinstance(rows, list) and len(rows) >= 4
    assert all(r["verdict"] == r["expected"] for r in rows)


@pytest.mark.parametrize("args, message", [
    (("check", "no_such_model"), "unknown model"),
    (("check", "prefetcher", "--set", "capacity=two"), "capacity must be an integer"),
    (("check", "prefetcher", "--set", "capacity"), "expects NAME=VALUE"),
    (("check", "prefetcher", "--set", "colour=red"), "has no parameter 'colour'"),
    (("check", "prefetcher", "--set", "capacity=0"), "capacity must be at least 1"),
    (("check", "prefetcher", "--max-states", "0"), "at least 1"),
    (("check", "prefetcher", "--set", "notify=lifo"), "notify must be one of fifo|any"),
    (("check",), "needs a MODEL"),
    (("frobnicate",), "invalid choice"),
])
def test_usage_and_model_errors_are_one_line_and_exit_2(args, message):
    code, out, err = run(*args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_model_file_that_fails_to_import_is_exit_2(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import no_such_module_anywhere\n")
    code, _, err = run("check", str(bad))
    assert code == 2 and "cannot import" in err and "ModuleNotFoundError" in err
    syntax = tmp_path / "syntax.py"
    syntax.write_text("def broken(:\n")
    code, _, err = run("check", str(syntax))
    assert code == 2 and "SyntaxError" in err
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    code, _, err = run("check", str(empty))
    assert code == 2 and "defines no Model" in err
    code, _, err = run("check", str(tmp_path / "missing.py"))
    assert code == 2 and "does not exist" in err


USER_MODEL = '''
from safeprefetch.model import DONE, Model

class Handoff(Model):
    """handoff: a flag-guarded handoff that forgets to set the flag."""
    name = "handoff"
    params = {"forget": True}

    def build(self, m, forget):
        m.shared(ready=False)
        p = m.program("producer")
        p.step("publish", lambda s, me: None if forget else setattr(s, "ready", True), next=DONE)
        c = m.program("consumer")
        c.step("wait for ready", guard=lambda s, me: s.ready, next=DONE)
        m.thread("producer", p)
        m.thread("consumer", c)
'''


def test_check_a_user_model_file(tmp_path):
    path = tmp_path / "handoff.py"
    path.write_text(USER_MODEL)
    code, out, _ = run("check", str(path), "--json")
    assert code == 1 and json.loads(out)["verdict"] == "deadlock"
    code, out, _ = run("check", str(path), "--set", "forget=off", "--json")
    assert code == 0 and json.loads(out)["verdict"] == "ok"


def test_replay_a_saved_trace_and_reject_malformed_ones(tmp_path):
    code, out, _ = run("check", "one_cond_signal", "--json")
    saved = tmp_path / "trace.json"
    saved.write_text(out)
    code, out, err = run("replay", "one_cond_signal", str(saved))
    assert code == 1, err
    assert "<== deadlock" in out and out.count("\n") > 22
    bad = tmp_path / "bad.json"
    bad.write_text("[{\"thread\": \"consumer0\"")
    code, _, err = run("replay", "one_cond_signal", str(bad))
    assert code == 2 and "not valid JSON" in err
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps([{"thread": "consumer0", "step": "get"}]))
    code, _, err = run("replay", "one_cond_signal", str(wrong))
    assert code == 2 and "not at 'get'" in err


def test_long_checks_print_progress_lines_to_stderr_and_keep_stdout_json():
    code, out, err = run("check", "prefetcher", "--set", "items=4", "--set", "workers=3", "--set", "capacity=3",
                         "--set", "close=on", "--set", "error=on", "--set", "ordered=off", "--reduce", "none",
                         "--progress-seconds", "0.05", "--json")
    assert code == 0
    assert json.loads(out)["verdict"] == "ok"
    lines = [ln for ln in err.splitlines() if ln.startswith("progress:")]
    assert lines and "states" in lines[0] and "frontier" in lines[0] and "states/s" in lines[0]

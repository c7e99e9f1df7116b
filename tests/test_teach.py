"""``explain`` and ``play``: the bug told in the model's words, and the user as the scheduler (driven via stdin)."""

import io
import json
import subprocess
import sys

import pytest

from safeprefetch import catalog, check
from safeprefetch._tools.explain import explain
from safeprefetch._tools.modeldoc import model_doc
from safeprefetch._tools.play import Play, choice_numbers
from safeprefetch.model import DONE, Model, violate


def run(*args, stdin=""):
    p = subprocess.run([sys.executable, "-m", "safeprefetch", *args], input=stdin, capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout, p.stderr


def shortest_choices(name, **config):
    machine = catalog()[name].compile(config)
    return choice_numbers(machine, check(machine).trace)


# -- the docstring convention --------------------------------------------------


def test_model_doc_reads_the_bug_source_verdict_and_fix():
    doc = model_doc(catalog()["one_cond_signal"])
    assert doc.summary.startswith("``while`` loops, but one condvar")
    assert doc.source.startswith("OSTEP ch. 30")
    assert doc.minimal_config.startswith("producers=1 consumers=2")
    assert doc.expected.startswith("deadlock.")
    assert doc.expected_detail.startswith("Consumer A takes the item")
    assert "two condvars" in doc.fix


def test_model_doc_keeps_a_reference_designs_headed_sections():
    doc = model_doc(catalog()["monitor"])
    assert doc.fix is None
    assert "Design" in [title for title, _ in doc.sections]


def test_model_doc_tolerates_a_model_without_a_docstring():
    class Bare(Model):
        name = "bare"

        def build(self, m):
            p = m.program("p")
            p.step("s", next=DONE)
            m.thread("t", p)

    doc = model_doc(Bare)
    assert doc.name == "bare" and doc.source is None and doc.sections == ()


# -- explain ---------------------------------------------------------------------


def test_explain_a_broken_model_tells_bug_source_trace_and_checked_fix():
    code, out, err = run("explain", "one_cond_signal")
    assert code == 0, err
    assert out.startswith("one_cond_signal: broken model (expected verdict: deadlock)")
    for part in ("The bug", "Source", "OSTEP ch. 30", "Shortest trace (22 steps)", "<== deadlock", "The fix",
                 "Two condvars"):
        assert part in out
    # the fix is re-checked at the same config
    assert "monitor at producers=1 consumers=2 capacity=1 items=2" in out
    assert out.split("monitor at ", 1)[1].splitlines()[1].strip().startswith("ok,")


def test_explain_diff_shows_the_source_diff_against_the_fix():
    code, out, _ = run("explain", "one_cond_signal", "--diff")
    assert code == 0
    assert "--- models/one_cond_signal.py" in out and "+++ models/monitor.py" in out
    assert "-class OneCondSignal(Model):" in out


def test_explain_a_reference_design_shows_its_guarantees():
    code, out, _ = run("explain", "monitor")
    assert code == 0
    assert out.startswith("monitor: reference design (expected verdict: ok)")
    assert "verdict: ok" in out and "Shortest trace" not in out
    assert "\nDesign\n" in out and "Proved ok exhaustively over the sweep" in out
    assert "It is the fix of" in out and "one_cond_signal" in out


def test_explain_honours_set_and_reports_bad_models_in_one_line():
    text = explain(catalog()["one_cond_signal"], {"notify": "any"})
    assert "notify=any" in text and "(not the model's default)" in text
    code, _, err = run("explain", "no_such_model")
    assert code == 2 and err.startswith("error: unknown model") and "Traceback" not in err


# -- play through stdin -------------------------------------------------------------


def test_play_reaches_the_one_cond_signal_deadlock_from_stdin():
    choices = shortest_choices("one_cond_signal")
    assert len(choices) == 22
    code, out, err = run("play", "one_cond_signal", stdin="".join(f"{n}\n" for n in choices))
    assert code == 1, err
    assert "*** all threads blocked: deadlock" in out
    assert "(end of input)" in out
    assert out.rstrip().endswith("session over after 22 steps: all threads blocked: deadlock")


def test_play_shows_each_threads_next_step_and_whether_it_is_enabled():
    code, out, _ = run("play", "one_cond_signal", stdin="2\n")
    assert code == 0  # ended at EOF, not at a violation
    first = out.split("-- after 0 steps --", 1)[1].split("-- after 1 step --", 1)[0]
    assert "[1] lock" in first and "[2] lock" in first and "[3] lock" in first
    after = out.split("-- after 1 step --", 1)[1]
    assert "(blocked) lock -- waits for lock (held by consumer0)" in after
    assert "[1] check empty" in after
    assert "shared: count=0" in after and "lock=consumer0" in after


def test_undo_steps_back_out_of_the_deadlock():
    choices = shortest_choices("one_cond_signal")
    code, out, _ = run("play", "one_cond_signal", stdin="".join(f"{n}\n" for n in choices) + "u\n")
    assert "all threads blocked: deadlock" in out
    assert "undone; back to step 21" in out
    assert code == 0  # the session ended one step before the violation
    assert out.rstrip().endswith("session over after 21 steps: unfinished")


def test_undo_with_nothing_to_undo_says_so():
    code, out, _ = run("play", "no_predicate_wait", stdin="u\nq\n")
    assert code == 0 and "nothing to undo" in out


def test_bad_input_is_reported_and_the_session_goes_on():
    code, out, err = run("play", "no_predicate_wait", stdin="banana\n0\n99\n\nh\n1\nq\n")
    assert code == 0 and not err
    assert "unknown command 'banana'; type h for help" in out
    assert "no choice 0: pick a number from 1 to 2" in out
    assert "no choice 99: pick a number from 1 to 2" in out
    assert "u   undo the last step" in out  # the help
    assert "==> producer0: lock" in out
    assert "session over after 1 steps" in out


def test_eof_at_once_exits_cleanly():
    code, out, err = run("play", "no_space_guard", stdin="")
    assert code == 0 and not err
    assert "(end of input)" in out and "session over after 0 steps: unfinished" in out


def test_picking_a_step_after_the_violation_is_refused():
    choices = shortest_choices("no_space_guard")
    code, out, _ = run("play", "no_space_guard", stdin="".join(f"{n}\n" for n in choices) + "1\nq\n")
    assert code == 1
    assert "*** invariant broken: overflow" in out
    assert "the run is over: u to undo, q to quit" in out


def test_play_trace_file_replays_to_the_same_violation(tmp_path):
    path = tmp_path / "played.json"
    choices = shortest_choices("one_cond_signal")
    code, out, _ = run("play", "one_cond_signal", "--trace", str(path), stdin="".join(f"{n}\n" for n in choices))
    assert code == 1 and "schedule saved to" in out
    saved = json.loads(path.read_text())
    assert saved["model"] == "one_cond_signal" and len(saved["trace"]) == 22
    code, out, _ = run("replay", "one_cond_signal", str(path))
    assert code == 1 and "<== deadlock" in out


def test_play_honours_set_and_branches_notify_any_into_separate_choices():
    choices = shortest_choices("one_cond_signal", notify="any")
    code, out, _ = run("play", "one_cond_signal", "--set", "notify=any",
                       stdin="".join(f"{n}\n" for n in choices))
    assert code == 1 and "notify=any" in out.splitlines()[0]
    assert "[wake consumer" in out


# -- play in-process: other endings -------------------------------------------------


class Tiny(Model):
    """tiny: one thread that either finishes or trips over an empty buffer."""

    name = "tiny"
    expected = "ok"
    params = {"fail": False}

    def build(self, m, fail):
        m.shared(n=0)

        def take(s, me):
            if fail:
                violate("underflow", "nothing to take")

        p = m.program("p")
        p.step("first", next="take")
        p.step("take", take, next=DONE)
        m.thread("only", p)


def play(model_cls, commands, **config):
    out = io.StringIO()
    code = Play(model_cls.compile(config), io.StringIO(commands), out).run()
    return code, out.getvalue()


def test_play_says_all_threads_done_ok():
    code, out = play(Tiny, "1\n1\n")
    assert code == 0
    assert "*** all threads done: ok" in out and "only  -- done" in out


def test_play_reports_a_violation_raised_by_a_step():
    code, out = play(Tiny, "1\n1\n", fail=True)
    assert code == 1
    assert "<== underflow: nothing to take" in out
    assert "*** only's step fails: underflow" in out


def test_play_trace_command_prints_the_table_so_far():
    code, out = play(Tiny, "1\nt\nq\n")
    assert code == 0
    assert "  1  first" in out


@pytest.mark.parametrize("name", ["no_predicate_wait", "no_space_guard"])
def test_play_verdict_matches_the_checker_on_the_shortest_trace(name):
    model = catalog()[name]
    result = check(model.compile({}))
    code, out = play(model, "".join(f"{n}\n" for n in choice_numbers(model.compile({}), result.trace)))
    assert code == 1 and f": {result.verdict}" in out.rsplit("session over", 1)[1]

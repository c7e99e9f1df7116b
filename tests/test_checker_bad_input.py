"""The model checker against bad input and wrong verdicts: every case names the exit code and the message.

The contract (ARCHITECTURE.md, "CLI contract"): bad input -- a malformed
model, a model whose own code misbehaves, an option out of range, a saved
trace that was tampered with -- gets exit 2 and one line naming what was
wrong; never a traceback, a hang, or a verdict. A check cut short (the state
cap, a memory budget) is exit 3, inconclusive, and never a pass. A verdict is
only ever the one the search actually established.

Each test here pins a hole an adversarial review of the checker's CLI and API
found: it failed before its fix. Most run the CLI in process
(``cli.main``), which is what ``python -m safeprefetch`` calls; a few run it
as a subprocess where the exit code of the process itself is the point (a
model calling ``sys.exit`` must not become the checker's exit code). Models
are written to ``tmp_path`` as the small files a user would write.
"""

import json
import textwrap

import pytest
from test_cli import run  # python -m safeprefetch ARGS -> (exit code, stdout, stderr)

from safeprefetch._cli import main as cli

pytestmark = pytest.mark.timeout(60)


def model_file(tmp_path, name, body):
    """Write a one-class model file; ``body`` is the build method's body (indented by us)."""
    path = tmp_path / f"{name}.py"
    path.write_text(f'"""{name}: a model written by a test."""\n'
                    "import sys\n"
                    "from safeprefetch.model import DONE, Model\n\n\n"
                    f"class M(Model):\n    name = {name!r}\n\n    def build(self, m):\n"
                    + textwrap.indent(textwrap.dedent(body), " " * 8))
    return str(path)


def cli_run(capsys, *args):
    """``cli.main(args)`` in process: (exit code, stdout, stderr)."""
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# -- 1. a model that calls sys.exit -------------------------------------------------------------

ONE_STEP = """
m.shared(n=0)
p = m.program("t")
p.step("quit", STEP, next=DONE)
m.thread("t0", p)
"""


@pytest.mark.parametrize("where, body, names", [
    ("step", ONE_STEP.replace("STEP", "lambda s, me: sys.exit(0)"), "t0, step 'quit'"),
    ("build", "sys.exit(0)\n", "its build"),
    ("invariant", ONE_STEP.replace("STEP", "lambda s, me: None") + "m.invariant('small', lambda s: sys.exit(0))\n",
     "invariant 'small'"),
    ("end check", ONE_STEP.replace("STEP", "lambda s, me: None") + "m.at_end(lambda s: sys.exit(0))\n",
     "end check"),
])
def test_a_model_calling_sys_exit_is_a_model_error_not_the_checkers_exit_code(tmp_path, where, body, names):
    path = model_file(tmp_path, "exits", body)
    code, out, err = run("check", path)
    assert code == 2, (out, err)
    line = err.splitlines()[0]
    assert "sys.exit(0)" in line and "'exits'" in line and names in line
    assert "Traceback" not in err


def test_a_step_calling_sys_exit_is_a_step_error_from_the_api(tmp_path):
    from safeprefetch import check
    from safeprefetch.model import ModelError
    from safeprefetch._tools.catalog import load_model

    model = load_model(model_file(tmp_path, "exits", ONE_STEP.replace("STEP", "lambda s, me: sys.exit(7)")))
    for engine in ("plain", "generated"):
        with pytest.raises(ModelError, match=r"t0, step 'quit': the model called sys.exit\(7\)"):
            check(model, engine=engine)


# -- 7. numbers out of range, and options that would silently do nothing -----------------------


@pytest.mark.parametrize("args, message", [
    (("--set", "capacity=-1"), "parameter capacity must be at least 1, not -1"),
    (("--set", "items=-1"), "parameter items must be at least 0, not -1 (a count)"),
    (("--max-states", "-1"), "--max-states must be at least 1"),
    (("--strategy", "pct", "--depth", "-1"), "--depth must be at least 1, not -1"),
    (("--strategy", "random", "--budget", "0"), "--budget must be at least 1, not 0"),
    (("--strategy", "preempt", "--preemptions", "-1"), "--preemptions must be at least 0, not -1"),
    (("--progress-bound", "-1"), "--progress-bound must be at least 0, not -1"),
    (("--progress-seconds", "nan"), "--progress-seconds must be a positive number of seconds, not nan"),
    (("--progress-seconds", "-1"), "--progress-seconds must be a positive number of seconds"),
    (("--depth", "2"), "--depth applies to --strategy pct and --swarm, not to --strategy bfs"),
    (("--budget", "50"), "--budget applies to the sampling strategies"),
    (("--strategy", "random", "--preemptions", "1"), "--preemptions applies to --strategy preempt"),
    (("--seed", "3"), "--seed applies to the sampling strategies (random, pct, hypothesis), --swarm and --store "
                      "bitstate, not to "
                      "--strategy bfs"),  # it was accepted and did nothing
    (("--strategy", "preempt", "--seed", "3"), "--seed applies to the sampling strategies"),
    (("--set", "items=2", "--set", "items=3"), "--set items given twice"),
])
def test_out_of_range_numbers_and_options_that_do_nothing_are_usage_errors(capsys, args, message):
    code, out, err = cli_run(capsys, "check", "prefetcher", "--set", "close=on", *args)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("model, param", [
    ("join_before_drain", "consumers"), ("no_predicate_wait", "consumers"), ("no_space_guard", "consumers"),
    ("one_cond_signal", "consumers"), ("racy_counter", "consumers"), ("racy_counter", "producers"),
    ("signal_before_publish", "consumers"), ("unlocked_check", "consumers"), ("wait_holding_mutex", "items"),
    ("reader_preference_rwlock", "readers"), ("writer_preference_rwlock", "writers"),
    ("if_not_while", "consumers"), ("if_not_while", "producers"), ("if_not_while", "items"),  # review: missed
])
def test_a_catalog_model_refuses_a_count_it_cannot_run_with(capsys, model, param):
    # Zero consumers made these models divide by zero (readers or writers: an IndexError), reported as "the
    # model raised ZeroDivisionError at line ..."; zero producers or items said "needs consumers <= 0". Each
    # declares its minimums now.
    code, out, err = cli_run(capsys, "check", model, "--set", f"{param}=0")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"model {model!r}: parameter {param} must be at least 1, not 0" in err


def test_a_negative_sentinel_parameter_is_still_accepted(capsys):
    # error_at's default is -1 ("no error"): not a count, so any integer goes.
    code, _, err = cli_run(capsys, "check", "prefetcher", "--set", "error_at=-1", "--set", "items=1")
    assert code == 0, err


@pytest.mark.parametrize("args", [("--set", "capacity=3"), ("--progress-bound", "2"), ("--svg", "x.svg")])
def test_check_all_refuses_what_applies_to_one_model(capsys, args):
    code, _, err = cli_run(capsys, "check", "--all", *args)
    assert code == 2 and f"{args[0]} applies to one MODEL" in err


def test_progress_bound_on_a_model_without_shutdown_is_refused(tmp_path, capsys):
    path = model_file(tmp_path, "noshut", ONE_STEP.replace("STEP", "lambda s, me: None"))
    code, _, err = cli_run(capsys, "check", path, "--progress-bound", "1")
    assert code == 2 and "declares no shutdown" in err


# -- 2. --progress-bound cut by the state cap ---------------------------------------------------
# prefetcher close=on: 374 states reduced (the main search), 546 unreduced (the bound's search).


@pytest.mark.parametrize("cap", ["200", "400"])
def test_a_progress_bound_search_cut_by_the_state_cap_is_inconclusive(capsys, cap):
    code, out, err = cli_run(capsys, "check", "prefetcher", "--set", "close=on", "--progress-bound", "2",
                             "--max-states", cap, "--json")
    assert code == 3, err
    d = json.loads(out)
    assert d["verdict"] == "ok" and d["exhaustive"] is False and d["stop_reason"] == "max_states"
    # With the whole graph the same bound holds, and a tighter one does not.
    assert cli_run(capsys, "check", "prefetcher", "--set", "close=on", "--progress-bound", "2")[0] == 0
    assert cli_run(capsys, "check", "prefetcher", "--set", "close=on", "--progress-bound", "1")[0] == 1


def test_check_shutdown_bound_says_when_it_is_not_exhaustive():
    from safeprefetch._check.explore import check_shutdown_bound
    from safeprefetch._tools.catalog import load_model

    machine = load_model("prefetcher").compile({"close": "on"})
    cut = check_shutdown_bound(machine, 2, max_states=400)
    assert cut.violation is None and cut.exhaustive is False and cut.states == 400
    full = check_shutdown_bound(machine, 1)
    assert full.exhaustive and full.violation.kind == "shutdown_hang"


# -- 3, 4. replay holds a saved counterexample to the check that saved it ------------------------


def saved(capsys, tmp_path, *check_args, edit=None):
    """``check ... --json`` saved to a file (after ``edit(d)``, if given): its path."""
    code, out, err = cli_run(capsys, "check", *check_args, "--json")
    assert code == 1, err
    d = json.loads(out)
    if edit is not None:
        edit(d)
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(d))
    return str(path)


def test_replay_of_a_starvation_lasso_re_verifies_the_lasso(capsys, tmp_path):
    path = saved(capsys, tmp_path, "priority_inversion")
    code, out, err = cli_run(capsys, "replay", "priority_inversion", path)
    assert code == 1, err  # it was 0, "no violation at the end of this trace": a lasso's end is a plain state
    assert "<== starvation: consumer0 never makes progress" in out


def test_replay_of_a_progress_bound_counterexample_re_checks_the_bound(capsys, tmp_path):
    path = saved(capsys, tmp_path, "prefetcher", "--set", "close=on", "--progress-bound", "1")
    code, out, err = cli_run(capsys, "replay", "prefetcher", path)
    assert code == 1, err  # it was 0: the trace ends where the worst case starts, not in a hang
    assert "may take 2 of its own steps to return (bound 1)" in out


def _set(key, value):
    return lambda d: d.__setitem__(key, value)


@pytest.mark.parametrize("model, check_args, edit, message", [
    ("priority_inversion", (), _set("cycle_start", 5), "does not end in the state after step 5"),
    ("priority_inversion", (), _set("cycle_start", None), "saved verdict 'starvation': its end is no violation"),
    ("priority_inversion", (), _set("cycle_start", 99), "cycle_start must be a step count from 0 to 6"),
    ("priority_inversion", (), _set("verdict", "deadlock"), "a cycle_start belongs to a starvation lasso"),
    ("one_cond_signal", (), _set("verdict", "lost_wakeup"), "saved verdict 'lost_wakeup': it shows deadlock"),
    ("one_cond_signal", (), lambda d: d.__setitem__("trace", d["trace"][:-1]),
     "saved verdict 'deadlock': its end is no violation"),
    ("one_cond_signal", (), _set("verdict", "slow"), "saved verdict 'slow' is not 'ok' nor a violation kind"),
    ("one_cond_signal", (), _set("model", "monitor"), "saved by a check of model 'monitor', not 'one_cond_signal'"),
    ("prefetcher", ("--set", "close=on", "--progress-bound", "1"), _set("progress_bound", 2),
     "every thread returns within 2 of its own steps after shutdown"),
    ("prefetcher", ("--set", "close=on", "--progress-bound", "1"), _set("progress_bound", -1),
     "progress_bound must be a number of steps"),
])
def test_replay_refuses_a_tampered_counterexample(capsys, tmp_path, model, check_args, edit, message):
    path = saved(capsys, tmp_path, model, *check_args, edit=edit)
    code, _, err = cli_run(capsys, "replay", model, path)
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_every_catalog_counterexample_replays_to_its_own_verdict(capsys, tmp_path):
    from safeprefetch._tools.catalog import catalog

    for name, model in catalog().items():
        if model.expected != "ok":
            path = saved(capsys, tmp_path, name)
            code, out, err = cli_run(capsys, "replay", name, path)
            assert code == 1, (name, err)


# -- 5, 6. threads: a name that is not a str, a count far too large -----------------------------

MANY = """
m.shared(x=0)
p = m.program("t")
p.step("inc", lambda s, me: None, next=DONE)
for i in range(COUNT):
    m.thread(TNAME, p)
"""


@pytest.mark.parametrize("n, name, message", [
    (2, "i", "a thread's name must be a non-empty str (traces name threads by it), not 0"),
    (2, "f'x{i}'.encode()", "a thread's name must be a non-empty str (traces name threads by it), not b'x0'"),
    (1, "''", "a thread's name must be a non-empty str"),
    (300, "f't{i}'", "thread 't255': a model may declare at most 255 threads"),
])
def test_bad_threads_are_refused_when_the_model_is_built(tmp_path, capsys, n, name, message):
    path = model_file(tmp_path, "threads", MANY.replace("COUNT", str(n)).replace("TNAME", name))
    code, out, err = cli_run(capsys, "check", path)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("setting", ["workers=100000000", "closers=100000000"])
def test_a_runaway_thread_count_is_refused_at_once_not_built_for_days(capsys, setting):
    # Each thread costs ~10 ms to compile: 10**8 of them was a silent hang of years.
    code, _, err = cli_run(capsys, "check", "prefetcher", "--set", "close=on", "--set", setting)
    assert code == 2 and "at most 255 threads" in err



def test_the_thread_bound_is_the_checkers_not_the_live_prefetchers():
    # The live prefetcher compiles its reference model with a thread per worker; it runs it, and
    # bounds its workers itself.
    from safeprefetch._prefetcher.machine import compile_reference

    assert len(compile_reference(1, 254, 1, True, True).thread_names) > 255  # workers, consumer, closer


@pytest.mark.parametrize("setting, message", [
    # The prefetcher model holds a tuple of `capacity` slots: at 10**9 its build alone would
    # allocate 8 GB (a minute of it, or the OOM killer); it now fails at once.
    ("capacity=1000000000", "building model 'prefetcher' ran out of memory: it needed more than 2.0 GiB"),
    # At 10**6 the state count is capacity=2's, but each step copied an 8 MB tuple: 53 s, 1.2 GB.
    ("capacity=1000000", "shared variable 'slots': its initial value holds 1,000,000 entries"),
])
def test_a_huge_size_parameter_is_refused_before_it_exhausts_memory(setting, message):
    code, out, err = run("check", "prefetcher", "--set", setting)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1, err


def test_a_huge_parameter_that_only_deepens_the_search_reaches_the_state_cap(capsys):
    code, out, err = cli_run(capsys, "check", "prefetcher", "--set", "items=1000000000", "--max-states", "2000",
                             "--json")
    assert code == 3, err
    d = json.loads(out)
    assert d["exhaustive"] is False and d["stop_reason"] == "max_states" and d["states"] == 2000


def test_the_size_bounds_are_the_checkers_not_the_live_prefetchers():
    from safeprefetch._prefetcher.machine import compile_reference

    assert len(compile_reference(200_000, 1, 1, True, True).init[0]) == 200_000  # the slots, one a slot


# -- more of the same kind ------------------------------------------------------------------------


@pytest.mark.parametrize("where, message", [("missing/x.svg", "its directory does not exist"),
                                            (".", "it is a directory")])
def test_an_svg_path_that_cannot_be_written_is_a_usage_error_not_the_models(tmp_path, capsys, where, message):
    # It was "the model raised FileNotFoundError", after the whole search.
    code, out, err = cli_run(capsys, "check", "one_cond_signal", "--svg", str(tmp_path / where))
    assert code == 2 and out == "" and f"cannot write --svg" in err and message in err and "model" not in err


@pytest.mark.parametrize("store", ["full", "fingerprint", "bitstate"])
def test_a_starvation_search_past_the_state_cap_is_inconclusive_not_unbounded(capsys, store):
    # reader_preference_rwlock: 122 states reduced, 279 in the policy's unreduced graph, which the
    # starvation search walked whole whatever the cap: a search the cap let through stored more.
    code, out, err = cli_run(capsys, "check", "reader_preference_rwlock", "--max-states", "130", "--store", store,
                             "--json")
    d = json.loads(out)
    assert code == 3 and d["verdict"] == "ok" and d["exhaustive"] is False and d["stop_reason"] == "max_states"
    code, out, _ = cli_run(capsys, "check", "reader_preference_rwlock", "--max-states", "300", "--store", store,
                           "--json")
    assert code == 1 and json.loads(out)["verdict"] == "starvation"


@pytest.mark.parametrize("args, flag", [
    (("--strategy", "random", "--reduce", "none"), "--reduce"),
    (("--strategy", "pct", "--max-states", "10"), "--max-states"),
    (("--strategy", "hypothesis", "--progress-seconds", "1"), "--progress-seconds"),
])
def test_exhaustive_search_options_with_a_sampling_strategy_are_refused(capsys, args, flag):
    # The sampling strategies store no states and report no progress: these were silently ignored.
    code, _, err = cli_run(capsys, "check", "monitor", *args)
    assert code == 2 and f"{flag} applies to the exhaustive searches (bfs, dfs)" in err


def test_max_states_with_a_sampling_strategy_still_bounds_a_progress_bound_search(capsys):
    code, _, err = cli_run(capsys, "check", "prefetcher", "--set", "close=on", "--strategy", "random",
                           "--budget", "5", "--max-states", "10", "--progress-bound", "2")
    assert code == 3, err  # sampling is never a proof; the bound search is skipped, not judged on 10 states


@pytest.mark.parametrize("line, message", [
    ('expected = "deadlok"', "expected must be 'ok' or a violation kind, not 'deadlok'; did you mean 'deadlock'?"),
    ("name = 5", "its name must be a str"),
])
def test_a_model_class_that_declares_a_verdict_or_name_no_search_can_match_is_refused(line, message):
    from safeprefetch.model import Model, ModelError

    with pytest.raises(ModelError, match=message.replace("?", r"\?").replace("(", r"\(")):
        exec(f"class Typo(Model):\n    name = 'typo'\n    {line}\n", {"Model": Model})


@pytest.mark.parametrize("kwargs, message", [
    ({"max_states": float("nan")}, "max_states must be an int, not nan"),  # NaN < n is False: no cap at all
    ({"max_states": 1.5}, "max_states must be an int, not 1.5"),
    ({"max_states": True}, "max_states must be an int, not True"),
    ({"memory": float("nan")}, "memory must be a positive number of bytes, not nan"),  # no budget at all
    ({"store": "fingerprint", "max_states": float("nan")}, "max_states must be an int"),
])
def test_the_api_refuses_a_cap_or_budget_that_is_not_a_number_of_anything(kwargs, message):
    from safeprefetch import check
    from safeprefetch.model import ModelError

    with pytest.raises(ModelError, match=message):
        check(load("monitor"), **kwargs)


def load(name):
    from safeprefetch._tools.catalog import load_model

    return load_model(name)


def test_the_api_takes_a_numpy_int_cap():
    import numpy as np
    from safeprefetch import check

    assert check(load("monitor"), max_states=np.int64(10)).states == 10

"""The twenty-first round, the checker's review (docs/hardening.md): one pre-search check for every search."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from safeprefetch._check.determinism import NondeterministicModel
from safeprefetch._check.strategies import STRATEGIES, search
from safeprefetch._tools.catalog import load_model

_BADSYM = '''
from safeprefetch.model import DONE, Model

class BadSym(Model):
    """badsym: two workers declared symmetric, with an invariant that names one of them."""
    name = "badsym"
    params = {}

    def build(self, m):
        m.shared(n=0)
        w = m.program("worker", x=0)

        def go(s, me):
            me.x = 1
        w.step("go", go, next=DONE)
        m.thread("w0", w)
        m.thread("w1", w)
        m.symmetric("w0", "w1")
        m.invariant("w0 goes first", lambda s, threads: not (threads["w1"].x == 1 and threads["w0"].x == 0))
'''

_NONDET = '''
import itertools
from safeprefetch.model import DONE, Model

CALLS = itertools.count()

class NonDet(Model):
    """nondet: a step that reads module state (a call counter): not a function of its state."""
    name = "nondet"
    params = {}

    def build(self, m):
        m.shared(x=0)
        p = m.program("p")

        def flip(s, me):
            s.x = next(CALLS) % 2
        p.step("flip", flip, next=DONE)
        m.thread("t", p)
        m.invariant("x stays 0", lambda s: s.x == 0)
'''


def _model_file(tmp_path, source: str, name: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return str(path)


def _cli(*argv: str, stderr: object = subprocess.PIPE) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "safeprefetch", *argv], check=False, text=True, timeout=300,
                          stdout=subprocess.PIPE, stderr=stderr)
    return done.returncode, done.stdout, done.stderr or ""


# -- 1. --cluster runs the symmetry probe the one-process search runs -------------------------------------------


@pytest.mark.timeout(300)
def test_a_cluster_search_refuses_a_wrong_symmetry_declaration(tmp_path):
    # The invariant names w1, so w0 and w1 are not interchangeable: one process refuses the declaration
    # (exit 2); the cluster search said "ok, exhaustive", exit 0, of a model whose invariant is violated.
    path = _model_file(tmp_path, _BADSYM, "badsym")
    assert _cli("check", path)[0] == 2
    assert _cli("check", path, "--reduce", "none")[0] == 1
    code, out, err = _cli("check", path, "--cluster", "local:1", "--json")
    assert code == 2, (out, err)
    doc = json.loads(out)
    assert doc["exit_code"] == 2 and "symmetric(w0, w1) is wrong" in doc["error"]


@pytest.mark.timeout(300)
def test_a_cluster_search_without_symmetry_reduction_does_not_probe_the_declaration(tmp_path):
    # (What the fix must keep: the declaration is tested only where the search applies it.)
    path = _model_file(tmp_path, _BADSYM, "badsym")
    code, out, err = _cli("check", path, "--cluster", "local:1", "--reduce", "none", "--json")
    assert code == 1 and json.loads(out)["verdict"] == "invariant", (out, err)


# -- 2. --cluster and every strategy run the determinism probe ----------------------------------------------------


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", [("--strategy", "preempt"), ("--cluster", "local:1")])
def test_a_nondeterministic_model_is_refused_by_preempt_and_the_cluster(tmp_path, how):
    path = _model_file(tmp_path, _NONDET, "nondet")
    assert _cli("check", path)[0] == 2
    code, out, err = _cli("check", path, *how, "--json")
    assert code == 2, (out, err)
    doc = json.loads(out)
    assert doc["exit_code"] == 2 and "the model is not deterministic" in doc["error"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_probes_determinism_before_its_first_run(tmp_path, strategy):
    model = load_model(_model_file(tmp_path, _NONDET, f"nondet_{strategy}"))
    with pytest.raises(NondeterministicModel, match="not deterministic"):
        search(model, strategy, budget=5)


# -- 3. An error's exit code survives a reader of standard error that left -----------------------------------------


def _stderr_reader_left(*argv: str) -> int:
    """The command's exit code, with its standard error a pipe whose reader closed it before anything was written."""
    r, w = os.pipe()
    os.close(r)  # the reader is gone: every write to standard error gets EPIPE
    try:
        return _cli(*argv, stderr=w)[0]
    finally:
        os.close(w)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("argv, code", [
    (("check", "nosuchmodel"), 2),
    (("check", "one_cond_signal", "--max-states", "0"), 2),
    (("replay", "one_cond_signal", "/nonexistent.json"), 2),
    (("check", "one_cond_signal"), 1),  # (what the fix must keep: a violation's code)
    (("check", "monitor"), 0),
])
def test_the_exit_code_survives_a_reader_of_standard_error_that_left(argv, code):
    assert _cli(*argv)[0] == code
    assert _stderr_reader_left(*argv) == code


# -- 4. preempt's text says exhaustive where its JSON does -------------------------------------------------------------


@pytest.mark.timeout(120)
def test_preempt_text_says_exhaustive_when_every_schedule_was_covered():
    code, out, _err = _cli("check", "monitor", "--strategy", "preempt")
    assert code == 0
    assert "NOT exhaustive" not in out and "exhaustive (--strategy preempt covered every schedule)" in out
    code, out, _err = _cli("check", "monitor", "--strategy", "preempt", "--json")
    assert code == 0 and json.loads(out)["exhaustive"] is True


@pytest.mark.timeout(120)
def test_preempt_text_still_says_not_exhaustive_when_the_bound_cut_schedules():
    code, out, _err = _cli("check", "monitor", "--strategy", "preempt", "--preemptions", "0", "--json")
    assert code == 3 and json.loads(out)["exhaustive"] is False, out
    code, out, _err = _cli("check", "monitor", "--strategy", "preempt", "--preemptions", "0")
    assert code == 3 and "sampled by --strategy preempt, NOT exhaustive" in out, out

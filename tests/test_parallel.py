"""The parallel explorer is the sequential BFS, split by state hash: same states, verdict and trace."""

import multiprocessing
import sys
import textwrap
from pathlib import Path

import pytest

from safeprefetch import ModelError, catalog, load_model, replay
from safeprefetch._check.explore import Explorer, final_verdict
from safeprefetch._check.distributed import _Pool, explore_parallel_timed
from safeprefetch.lowlevel import explore_parallel
from safeprefetch.model import StepError

pytestmark = pytest.mark.timeout(120)

MODELS = catalog()


def parallel(name, config=None, processes=2, **kwargs):
    """explore_parallel on the catalog model ``name`` (the caller resolves names, as the CLI does)."""
    return explore_parallel(load_model(name), config, processes, **kwargs)


@pytest.fixture(autouse=True)
def no_process_outlives_a_call():
    yield
    assert multiprocessing.active_children() == []


def sequential(name, config=None, reduce="none", max_states=2_000_000):
    machine = load_model(name).compile(config or {})
    return machine, Explorer(machine, reduce=reduce, max_states=max_states).run()


def assert_same(par, seq):
    assert par.verdict == seq.verdict
    assert len(par.trace) == len(seq.trace)
    assert par.trace == seq.trace  # the parallel search rebuilds the sequential order exactly
    assert (par.states, par.transitions, par.max_depth, par.exhaustive) == (
        seq.states, seq.transitions, seq.max_depth, seq.exhaustive)
    if seq.violation is not None:  # the same violation, field by field
        fields = lambda v: (v.kind, v.message, v.on_step, v.step, v.cycle_start, v.state)  # noqa: E731
        assert fields(par.violation) == fields(seq.violation)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_catalog_model_gets_the_sequential_verdict_trace_and_state_count(name):
    machine, seq = sequential(name)
    par = parallel(name, {})
    assert_same(par, seq)
    assert par.expected == MODELS[name].expected
    if not par.ok:
        replay(machine, par.trace)
        if par.verdict != "starvation":  # a lasso: its end state is not where the bug is
            assert final_verdict(machine, par.trace)[0] == par.verdict


@pytest.mark.parametrize("config", [
    {"workers": 3, "capacity": 2, "items": 3, "close": True, "error": True},
    {"workers": 2, "capacity": 3, "items": 4, "ordered": False, "abandon": True},
    {"workers": 2, "capacity": 2, "items": 3, "close": True, "error": True, "abandon": True, "ordered": False,
     "spurious": "on"},
])
@pytest.mark.parametrize("processes", [1, 3])
def test_prefetcher_configs_store_exactly_the_sequential_states(config, processes):
    _, seq = sequential("prefetcher", config)
    par = parallel("prefetcher", config, processes)
    assert par.ok and par.exhaustive
    assert_same(par, seq)


@pytest.mark.parametrize("name", ["one_cond_signal", "unlocked_check", "non_idempotent_close", "if_not_while"])
@pytest.mark.parametrize("config", [{"notify": "any"}, {"spurious": "on"}])
def test_condvar_semantics_settings_give_the_sequential_result(name, config):
    _, seq = sequential(name, config)
    assert_same(parallel(name, config), seq)


@pytest.mark.parametrize("name", ["prefetcher", "non_idempotent_close", "one_sentinel_many_consumers"])
def test_symmetry_reduction_runs_in_the_workers(name):
    _, seq = sequential(name, reduce="symmetry")
    assert_same(parallel(name, {}, reduce="symmetry"), seq)


def test_reduce_all_keeps_the_verdict_and_trace_length_without_por():
    _, full = sequential("non_idempotent_close")
    par = parallel("non_idempotent_close", {}, reduce="all")
    assert par.verdict == full.verdict and len(par.trace) == len(full.trace)


@pytest.mark.parametrize("cap", [1, 2, 7, 500, 2245])
def test_the_state_bound_cuts_where_the_sequential_search_cuts(cap):
    config = {"workers": 3, "capacity": 2, "items": 3, "close": True, "error": True}  # 2246 states
    _, seq = sequential("prefetcher", config, max_states=cap)
    par = parallel("prefetcher", config, max_states=cap)
    assert not par.exhaustive and par.states == cap
    assert_same(par, seq)


@pytest.mark.parametrize("cap", [124, 128])
def test_a_violation_found_in_the_level_the_bound_cuts_still_counts(cap):
    _, seq = sequential("if_not_while", max_states=cap)  # 129 states; the bug is in the last level
    par = parallel("if_not_while", {}, max_states=cap)
    assert par.verdict == "underflow" and par.states == cap
    assert_same(par, seq)


def test_the_crc32_partition_gives_the_same_result():
    _, seq = sequential("non_idempotent_close")
    assert_same(parallel("non_idempotent_close", {}, partition="crc32"), seq)


def test_spawned_workers_import_the_model_by_module_name_and_partition_by_crc32():
    _, seq = sequential("no_predicate_wait")
    par, _ = explore_parallel_timed(load_model("no_predicate_wait"), {}, 2, 1000, "none", None, None, method="spawn")
    assert_same(par, seq)


def test_spawned_workers_reimport_a_model_loaded_from_a_user_file(tmp_path):
    path = tmp_path / "user_model.py"
    path.write_text(Path(sys.modules[MODELS["one_cond_signal"].__module__].__file__).read_text())
    model = load_model(str(path))
    _, seq = sequential("one_cond_signal")
    par, _ = explore_parallel_timed(model, {}, 2, 2_000_000, "none", None, None, method="spawn")
    assert_same(par, seq)


def test_hash_partitioning_refuses_processes_that_do_not_share_the_hash_secret():
    with pytest.raises(ModelError, match="fork"):
        explore_parallel_timed(load_model("channel"), {}, 2, 1000, "none", "hash", None, method="spawn")


def test_bad_arguments_are_model_errors_before_any_process_starts():
    for kwargs in ({"processes": 0}, {"max_states": 0}, {"reduce": "fast"}, {"partition": "md5"}):
        with pytest.raises(ModelError):
            parallel("channel", {}, **kwargs)
    with pytest.raises(ModelError, match="no parameter"):
        parallel("channel", {"nonsense": 1})


def test_a_model_name_is_resolved_by_the_caller_not_by_the_checking_layer():
    with pytest.raises(ModelError, match="load_model"):
        explore_parallel("channel", {})


def test_a_model_class_defined_inside_a_function_is_refused_before_any_process_starts():
    class Local(MODELS["channel"]):
        pass

    with pytest.raises(ModelError, match="inside a function"):
        explore_parallel(Local, {})


BOOM = textwrap.dedent('''
    """boom: a model whose third step fails in the explorer's worker, not at compile time."""
    import os
    from safeprefetch.model import DONE, Model

    class Boom(Model):
        name = "boom"
        params = {"how": "raise"}

        def build(self, m, how):
            m.shared(n=0)

            def tick(s, me):
                s.n += 1
                if s.n == 3:
                    if how == "raise":
                        raise ZeroDivisionError("model bug at n == 3")
                    os._exit(3)

            p = m.program("ticker")
            p.step("tick", tick, next="tick")
            m.thread("t", p)
''')


def test_an_exception_in_model_code_reaches_the_caller_and_stops_the_workers(tmp_path):
    path = tmp_path / "boom.py"
    path.write_text(BOOM)
    with pytest.raises(StepError, match="ZeroDivisionError: model bug at n == 3") as info:
        explore_parallel(load_model(str(path)), {}, processes=2)
    assert any("worker" in note for note in getattr(info.value, "__notes__", []))
    assert isinstance(info.value.error, ZeroDivisionError) and info.value.label == "tick"


def test_a_worker_that_dies_is_reported_and_the_others_are_stopped(tmp_path):
    path = tmp_path / "boom.py"
    path.write_text(BOOM)
    with pytest.raises(Exception, match="died"):
        explore_parallel(load_model(str(path)), {"how": "exit"}, processes=2)


def test_keyboard_interrupt_in_the_coordinator_leaves_no_worker_behind(monkeypatch):
    calls = []
    real = _Pool.broadcast

    def interrupted(self, *cmd):
        calls.append(cmd[0])
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(self, *cmd)

    monkeypatch.setattr(_Pool, "broadcast", interrupted)
    with pytest.raises(KeyboardInterrupt):
        parallel("prefetcher", {"workers": 3, "items": 3})


def test_progress_is_reported_between_levels():
    seen = []
    result = parallel("prefetcher", {"workers": 3, "items": 3}, progress_every=0.0,
                      progress=lambda *counts: seen.append(counts))
    assert seen and all(0 < states <= result.states for states, _, _ in seen)
    assert [s for s, _, _ in seen] == sorted(s for s, _, _ in seen)


def test_check_processes_from_the_cli():
    import json
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "safeprefetch", "check", "one_cond_signal", "--processes", "2",
                        "--json"], capture_output=True, text=True, timeout=120)
    out = json.loads(p.stdout)
    assert p.returncode == 1 and out["verdict"] == "deadlock" and out["trace_length"] == 22
    bad = subprocess.run([sys.executable, "-m", "safeprefetch", "check", "one_cond_signal", "--processes", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "at least 1" in bad.stderr

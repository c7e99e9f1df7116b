"""The cluster search is the sequential BFS, split by state hash across dask actors: same states, verdict and trace.

Every test that needs a cluster shares one real LocalCluster (two single-threaded worker
processes), started once for the module; a few start their own ``local:N`` to show that
nothing they start outlives the call.
"""

import json
import logging
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from safeprefetch import ModelError, catalog, check, load_model, replay
from safeprefetch._check.cluster import ActorPool
from safeprefetch._check.explore import Explorer, final_verdict
from safeprefetch._check.fingerprint import fingerprinter, stable_fingerprinter
from safeprefetch._cli.main import main
from safeprefetch.lowlevel import ClusterError, explore_cluster, search, swarm_search
from safeprefetch.model import StepError

pytestmark = pytest.mark.timeout(180)

MODELS = catalog()


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=logging.ERROR) as cluster:
        with distributed.Client(cluster, direct_to_workers=True) as c:
            c.wait_for_workers(2)
            yield c


def held_actors(client):
    return sum(client.run(lambda dask_worker: len(dask_worker.state.actors)).values())


def sequential(name, config=None, reduce="none", max_states=2_000_000):
    machine = load_model(name).compile(config or {})
    return machine, Explorer(machine, reduce=reduce, max_states=max_states).run()


def assert_same(got, seq):
    assert got.verdict == seq.verdict
    assert got.trace == seq.trace  # the cluster search rebuilds the sequential order exactly
    assert (got.states, got.transitions, got.max_depth, got.exhaustive) == (
        seq.states, seq.transitions, seq.max_depth, seq.exhaustive)
    if seq.violation is not None:  # the same violation, field by field
        fields = lambda v: (v.kind, v.message, v.on_step, v.step, v.cycle_start, v.state)  # noqa: E731
        assert fields(got.violation) == fields(seq.violation)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_catalog_model_gets_the_sequential_result_on_a_cluster(client, name):
    model = MODELS[name]
    for reduce in ("none", "symmetry"):
        machine, seq = sequential(name, reduce=reduce)
        got = explore_cluster(model, {}, cluster=client, reduce=reduce)
        assert_same(got, seq)
        assert got.expected == model.expected and got.store == "full" and not got.probabilistic
    if not got.ok:
        replay(machine, got.trace)
        if got.verdict != "starvation":  # a lasso: its end state is not where the bug is
            assert final_verdict(machine, got.trace)[0] == got.verdict


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_catalog_model_gets_the_sequential_result_in_fingerprint_mode(client, name):
    fp = explore_cluster(MODELS[name], {}, cluster=client, store="fingerprint")
    assert_same(fp, sequential(name)[1])
    assert fp.store == "fingerprint" and fp.probabilistic and 0 <= fp.collision_probability < 1e-9


PREFETCHER = {"workers": 3, "capacity": 2, "items": 3, "close": True, "error": True}  # 2246 states


@pytest.mark.parametrize("store", ["full", "fingerprint"])
def test_a_larger_prefetcher_config_stores_exactly_the_sequential_states(client, store):
    _, seq = sequential("prefetcher", PREFETCHER)
    got = explore_cluster(load_model("prefetcher"), PREFETCHER, cluster=client, store=store)
    assert got.ok and got.exhaustive and seq.states == 2246
    assert_same(got, seq)


@pytest.mark.parametrize("store", ["full", "fingerprint"])
@pytest.mark.parametrize("cap", [1, 7, 500, 2245])
def test_the_state_cap_cuts_where_the_sequential_search_cuts(client, cap, store):
    _, seq = sequential("prefetcher", PREFETCHER, max_states=cap)
    got = explore_cluster(load_model("prefetcher"), PREFETCHER, cluster=client, max_states=cap, store=store)
    assert not got.exhaustive and got.states == cap and got.stop_reason == "max_states"
    assert_same(got, seq)


@pytest.mark.parametrize("cap", [124, 128])
def test_a_violation_found_in_the_level_the_cap_cuts_still_counts(client, cap):
    _, seq = sequential("if_not_while", max_states=cap)  # 129 states; the bug is in the last level
    got = explore_cluster(load_model("if_not_while"), {}, cluster=client, max_states=cap)
    assert got.verdict == "underflow" and got.states == cap
    assert_same(got, seq)


@pytest.mark.parametrize("name", ["one_cond_signal", "lease_overwrite", "prefetcher", "priority_inversion",
                                  "semaphores", "non_idempotent_close"])
def test_fingerprint_mode_on_a_cluster_equals_the_single_process_fingerprint_and_full_searches(client, name):
    local = check(MODELS[name], {}, reduce="none", store="fingerprint")
    got = explore_cluster(MODELS[name], {}, cluster=client, store="fingerprint")
    assert (got.verdict, got.trace, got.states, got.transitions, got.collision_probability) == (
        local.verdict, local.trace, local.states, local.transitions, local.collision_probability)
    assert_same(got, sequential(name)[1])
    assert got.store == "fingerprint" and got.probabilistic and 0 <= got.collision_probability < 1e-9


def test_reduce_all_keeps_the_verdict_and_trace_length_without_por(client):
    _, full = sequential("non_idempotent_close")
    got = explore_cluster(MODELS["non_idempotent_close"], {}, cluster=client, reduce="all")
    assert got.verdict == full.verdict and len(got.trace) == len(full.trace)


def test_a_model_loaded_from_a_user_file_is_imported_again_by_the_workers(client, tmp_path):
    path = tmp_path / "user_model.py"
    path.write_text(Path(sys.modules[MODELS["one_cond_signal"].__module__].__file__).read_text())
    _, seq = sequential("one_cond_signal")
    assert_same(explore_cluster(load_model(str(path)), {}, cluster=client), seq)


def test_the_actors_are_gone_when_the_call_returns(client):
    explore_cluster(MODELS["channel"], {}, cluster=client)
    assert held_actors(client) == 0


def test_progress_is_reported_between_levels(client):
    seen = []
    result = explore_cluster(load_model("prefetcher"), PREFETCHER, cluster=client, progress_every=0.0,
                             progress=lambda *counts: seen.append(counts))
    assert seen and all(0 < states <= result.states for states, _, _ in seen)
    assert [s for s, _, _ in seen] == sorted(s for s, _, _ in seen)


BOOM = textwrap.dedent('''
    """boom: a step that fails in the search's worker (raise: the third; exit: the thousandth)."""
    import os
    from safeprefetch.model import DONE, Model

    class Boom(Model):
        name = "boom"
        params = {"how": "raise"}

        def build(self, m, how):
            m.shared(n=0)

            def tick(s, me):
                s.n += 1
                if s.n == 3 and how == "raise":
                    raise ZeroDivisionError("model bug at n == 3")
                if s.n == 1000:  # (past the determinism probe, which runs in the client before the search)
                    os._exit(3)

            p = m.program("ticker")
            p.step("tick", tick, next="tick")
            m.thread("t", p)
''')


def test_an_exception_in_model_code_is_raised_as_check_raises_it_and_releases_the_actors(client, tmp_path):
    path = tmp_path / "boom.py"
    path.write_text(BOOM)
    model = load_model(str(path))
    with pytest.raises(StepError) as alone:
        check(model, {}, reduce="none")
    with pytest.raises(StepError, match="n == 3") as info:
        explore_cluster(model, {}, cluster=client)
    assert isinstance(alone.value.error, ZeroDivisionError) and isinstance(info.value.error, ZeroDivisionError)
    assert info.value.label == alone.value.label == "tick"
    assert held_actors(client) == 0


def test_keyboard_interrupt_in_the_coordinator_releases_the_actors(client, monkeypatch):
    calls = []
    real = ActorPool.broadcast

    def interrupted(self, *cmd):
        calls.append(cmd[0])
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(self, *cmd)

    monkeypatch.setattr(ActorPool, "broadcast", interrupted)
    with pytest.raises(KeyboardInterrupt):
        explore_cluster(load_model("prefetcher"), PREFETCHER, cluster=client)
    assert held_actors(client) == 0


def children():
    psutil = pytest.importorskip("psutil")
    return {p.pid for p in psutil.Process().children(recursive=True) if p.is_running()}


def test_a_local_cluster_started_for_a_call_is_gone_after_it():
    pytest.importorskip("distributed")
    before = children()
    _, seq = sequential("one_cond_signal")
    assert_same(explore_cluster(MODELS["one_cond_signal"], {}, cluster="local:1"), seq)
    assert children() <= before


def test_a_worker_that_dies_is_reported_and_its_cluster_closed(tmp_path):
    pytest.importorskip("distributed")
    path = tmp_path / "boom.py"
    path.write_text(BOOM)
    before = children()
    with pytest.raises(ClusterError, match="died"):
        explore_cluster(load_model(str(path)), {"how": "exit"}, cluster="local:2")
    assert children() <= before


def test_a_swarm_finds_a_known_bug_and_reports_every_runs_coverage(client):
    model = MODELS["one_cond_signal"]
    got = swarm_search(model, {}, cluster=client, runs=4, budget=300)
    assert got.verdict == "deadlock" and got.exhaustive and got.strategy == "swarm"
    assert [r.index for r in got.runs] == [0, 1, 2, 3] and [r.strategy for r in got.runs] == ["random", "pct"] * 2
    first = next(r for r in got.runs if r.verdict != "ok")
    assert got.found_by == first.index and len(got.trace) == first.trace_length
    assert final_verdict(model.compile({}), got.trace)[0] == "deadlock"  # a real, replayable schedule
    assert got.states == sum(r.states for r in got.runs) and got.workers == 2
    for r in got.runs:  # each run is the single-process search with the same strategy and seed
        alone = search(model, r.strategy, seed=r.seed, budget=300)
        assert (r.verdict, r.schedules, r.states, r.schedules_to_bug) == (
            alone.verdict, alone.schedules, alone.states, alone.schedules_to_bug)
        assert r.schedules >= 1 and r.states >= 1 and r.worker in client.scheduler_info()["workers"]
    assert got.to_json()["swarm"]["found_by"] == got.found_by


def test_a_swarm_over_a_correct_model_finds_nothing_and_proves_nothing(client):
    got = swarm_search(MODELS["monitor"], {}, cluster=client, runs=3, strategies="pct", budget=50)
    assert got.ok and not got.exhaustive and got.found_by is None
    assert all(r.strategy == "pct" and r.schedules == 50 and r.verdict == "ok" for r in got.runs)
    assert "proves nothing" in got.note


def test_bad_arguments_are_model_errors_before_any_cluster_starts():
    model = MODELS["channel"]
    for kwargs in ({"max_states": 0}, {"reduce": "fast"}, {"store": "bitstate"}):
        with pytest.raises(ModelError):
            explore_cluster(model, {}, cluster="local:1", **kwargs)
    with pytest.raises(ModelError, match="no parameter"):
        explore_cluster(model, {"nonsense": 1}, cluster="local:1")
    with pytest.raises(ModelError, match="load_model"):
        explore_cluster("channel", {})
    for kwargs in ({"runs": 0}, {"strategies": "preempt"}, {"budget": 0}):
        with pytest.raises(ModelError):
            swarm_search(model, {}, cluster="local:1", **kwargs)

    class Local(model):
        pass

    with pytest.raises(ModelError, match="inside a function"):
        explore_cluster(Local, {})


def test_a_bad_cluster_name_is_a_model_error():
    pytest.importorskip("distributed")
    for spec, message in (("local:0", "at least one"), ("somewhere", "unknown cluster"), (3, "cluster must be")):
        with pytest.raises(ModelError, match=message):
            explore_cluster(MODELS["channel"], {}, cluster=spec)


def run_cli(*argv, env=None):
    return subprocess.run([sys.executable, "-m", "safeprefetch", *argv], capture_output=True, text=True, timeout=120,
                          env=env)


def shard_keys(client):
    return client.run_on_scheduler(
        lambda dask_scheduler: [k for k in dask_scheduler.tasks if str(k).startswith("safeprefetch-shard")])


def test_check_on_a_cluster_from_the_cli_while_another_search_shares_it(client, capsys):
    address = client.scheduler.address
    sets = [arg for k, v in PREFETCHER.items() for arg in ("--set", f"{k}={v}")]
    other = subprocess.Popen([sys.executable, "-m", "safeprefetch", "check", "prefetcher", *sets, "--reduce", "none",
                              "--cluster", address, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not shard_keys(client) and other.poll() is None:  # the other search's actors are up
            time.sleep(0.01)
        assert main(["check", "one_cond_signal", "--cluster", address, "--json"]) == 1
        out = json.loads(capsys.readouterr().out)
        assert (out["verdict"], out["trace_length"], out["states"], out["store"]) == ("deadlock", 22, 162, "full")
        assert main(["check", "one_cond_signal", "--cluster", address, "--store", "fingerprint", "--json"]) == 1
        out = json.loads(capsys.readouterr().out)
        assert (out["verdict"], out["trace_length"], out["states"], out["probabilistic"]) == (
            "deadlock", 22, 162, True)
        assert main(["check", "one_cond_signal", "--cluster", address, "--swarm", "3", "--budget", "300"]) == 1
        text = capsys.readouterr().out
        assert "verdict: deadlock" in text and text.count("distinct states") == 3
    finally:
        stdout, stderr = other.communicate(timeout=120)
    assert other.returncode == 0, stderr
    theirs, seq = json.loads(stdout), sequential("prefetcher", PREFETCHER)[1]
    assert (theirs["states"], theirs["transitions"], theirs["verdict"]) == (seq.states, seq.transitions, "ok")
    assert held_actors(client) == 0


@pytest.mark.parametrize("argv, message", [
    (["--swarm", "2"], "add --cluster"),
    (["--cluster", "local:2", "--strategy", "dfs"], "breadth first"),
    (["--cluster", "local:2", "--memory", "1G"], "own memory limit"),
    (["--cluster", "local:2", "--store", "bitstate"], "not partitioned"),
    (["--cluster", "local:2", "--swarm", "2", "--strategy", "preempt"], "random or pct"),
    (["--cluster", "local:2", "--swarm", "0"], "at least 1"),
    (["--cluster", "nowhere"], "unknown cluster"),
])
def test_cluster_options_that_make_no_sense_are_usage_errors(argv, message, capsys):
    assert main(["check", "one_cond_signal", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_without_dask_the_cluster_search_says_how_to_install_it():
    code = ("import sys; sys.modules['distributed'] = None; from safeprefetch._cli.main import main; "
            "sys.exit(main(['check', 'one_cond_signal', '--cluster', 'local:2']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert 'pip install -e ".[distributed]"' in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_the_route_fingerprint_is_the_same_in_processes_with_different_hash_secrets():
    code = ("import sys; from safeprefetch import load_model; from safeprefetch._check.explore import Explorer; "
            "from safeprefetch._check.fingerprint import fingerprinter, stable_fingerprinter; "
            "m = load_model('prefetcher').compile({'items': 3}); e = Explorer(m); e.run(); "
            "states = sorted(e.parents, key=repr)[:200]; f, g = stable_fingerprinter(m.init), fingerprinter(m.init); "
            "print([f(s) for s in states], [g(s) for s in states])")
    outs = []
    for seed in ("1", "2"):
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           env={**__import__("os").environ, "PYTHONHASHSEED": seed})
        assert p.returncode == 0, p.stderr
        outs.append(p.stdout.split("] ["))
    assert outs[0][0] == outs[1][0]  # the stable fingerprint: equal
    assert outs[0][1] != outs[1][1]  # Python's SipHash: keyed per process


@pytest.mark.parametrize("name", ["prefetcher", "semaphores", "non_idempotent_close"])
def test_the_stable_fingerprint_tells_apart_every_state_the_explorer_tells_apart(name):
    machine = MODELS[name].compile({})
    e = Explorer(machine, reduce="none")
    e.run()
    f = stable_fingerprinter(machine.init)
    assert f is not fingerprinter(machine.init)
    assert len({f(s) for s in e.parents}) == len(e.parents)
    assert all(f(s) == f(tuple(s)) and f(s) != 0 for s in e.parents)


def test_check_all_refuses_a_cluster(capsys):
    assert main(["check", "--all", "--cluster", "local:2"]) == 2
    assert "not --all" in capsys.readouterr().err


def test_bench_parallel_checks_agreement_and_prints_the_per_state_costs(capsys):
    pytest.importorskip("distributed")
    from safeprefetch._harness.bench_parallel import main as bench

    assert bench(["prefetcher", "--repeat", "1", "--workers", "1", "--wait", "0"]) == 0
    out = capsys.readouterr().out
    assert "| defaults | 101 | all |" in out and "x" in out.split("| all |")[1].splitlines()[0]
    assert out.count("    worker ") == 1 and "expand" in out and "rss" in out
    costs = next(line for line in out.splitlines() if "per state, CPU summed over workers" in line)
    assert "bytes sent" in costs and " barriers" in costs


@pytest.mark.slow
def test_bench_parallel_measures_the_cluster_message_costs(capsys):
    pytest.importorskip("distributed")
    from safeprefetch._harness.bench_parallel import main as bench

    assert bench(["--costs", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "client barrier" in out and "one at a time" in out and "MB/s" in out


def test_a_cluster_without_workers_is_a_cluster_error_after_a_bounded_wait(monkeypatch):
    distributed = pytest.importorskip("distributed")
    from safeprefetch._check import cluster as cluster_module

    monkeypatch.setattr(cluster_module, "WORKER_WAIT", 0.5)
    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=":0",
                                  silence_logs=logging.ERROR) as empty:
        with distributed.Client(empty) as c:
            with pytest.raises(ClusterError, match="no workers"):
                explore_cluster(MODELS["channel"], {}, cluster=c)


def live_shards(client):
    def count(dask_worker=None):
        import gc

        from safeprefetch._check.shard import Worker

        return sum(isinstance(o, Worker) for o in gc.get_objects())

    return sum(client.run(count).values())


@pytest.mark.parametrize("store", ["full", "fingerprint"])
def test_a_released_shard_frees_its_states_at_once_not_at_the_next_garbage_collection(client, store):
    # The actor and its shard refer to each other, and dask keeps the actor in reference cycles:
    # without the release dropping the shard, every search would leave its states on a shared
    # cluster until a full collection (measured: the resident set tripled over three searches).
    explore_cluster(load_model("prefetcher"), PREFETCHER, cluster=client, store=store)
    assert live_shards(client) == 0


def test_a_step_violation_does_not_keep_its_shard_alive(client):
    # start_before_init's bug is a violation raised inside a step: its traceback held the frames of
    # the shard that expanded it, and so the shard, after the search had released it.
    r = explore_cluster(load_model("start_before_init"), {}, cluster=client, reduce="none")
    assert r.violation is not None and r.violation.on_step
    assert live_shards(client) == 0

"""The seventeenth hardening round (docs/hardening.md, "A seventeenth round"): what the sixteenth left, and
what the round's reviews found. Each test failed on the commit before its fix."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

pytestmark = pytest.mark.timeout(120)


# -- the shape cache: a thread that holds one key's lock never waits for another's ------------------------------


def _opposite_orders() -> tuple[list, threading.Thread, threading.Thread]:
    """The shape the sixteenth round left: ``outer`` (as ``transitions_for``) calls ``inner`` (as ``_template``).
    Thread B is inside ``outer(1)`` and about to call ``inner(1)``; thread A is inside ``inner(1)``, and a
    "handler" there asks for ``outer(1)``. Returns (results, A, B)."""
    from safeprefetch._prefetcher.machine import _once_per_key

    a_inside, b_inside = threading.Event(), threading.Event()
    results: list = []

    def compute_inner(x):
        if threading.current_thread() is a and not a_inside.is_set():
            a_inside.set()
            b_inside.wait(10)  # B holds outer(1)'s lock now: observable state, not a timer
            results.append(("handler got", outer(x)))  # as a signal handler on A would
        return x * 10

    def compute_outer(x):
        if threading.current_thread() is b:
            b_inside.set()
            a_inside.wait(10)
        return inner(x) + 1

    inner = _once_per_key(functools.lru_cache(maxsize=8)(compute_inner))
    outer = _once_per_key(functools.lru_cache(maxsize=8)(compute_outer))
    a = threading.Thread(target=lambda: results.append(("A got", inner(1))), daemon=True)
    b = threading.Thread(target=lambda: results.append(("B got", outer(1))), daemon=True)
    a.start()
    b.start()
    a.join(20)
    b.join(20)
    return results, a, b


def test_a_handler_needing_a_shape_whose_template_its_thread_holds_does_not_deadlock():
    results, a, b = _opposite_orders()
    assert not a.is_alive() and not b.is_alive(), "deadlocked: two per-key locks taken in opposite orders"
    assert sorted(results) == [("A got", 10), ("B got", 11), ("handler got", 11)]


def test_the_shape_cache_still_computes_a_shape_once_for_threads_that_hold_nothing():
    # The fix must not give up what the table is for: eight threads asking for one new key compute it once.
    from safeprefetch._prefetcher.machine import _once_per_key

    calls: list[int] = []
    gate = threading.Barrier(8)

    def compute(x):
        calls.append(x)
        return x

    f = _once_per_key(functools.lru_cache(maxsize=8)(compute))

    def ask():
        gate.wait(10)
        assert f(7) == 7

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(20)
    assert calls == [7]


# -- check-code: a fork from a checked thread ------------------------------------------------------------------

FORK_TEST = '''
import os
import threading


def test_fork_from_a_thread():
    def work():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)

    th = threading.Thread(target=work)
    th.start()
    th.join()
'''


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_fork_from_a_checked_thread_resets_threading_in_the_child_without_errors(tmp_path):
    # The child's threading._after_fork resets every Thread's started Event; the scheduler's stand-in for a
    # started thread's had no _at_fork_reinit, and the child printed two ignored AttributeErrors.
    (tmp_path / "t_fork.py").write_text(FORK_TEST)
    proc = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-m", "safeprefetch", "check-code",
                           "t_fork.py::test_fork_from_a_thread"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict: ok" in proc.stdout
    assert "Exception ignored" not in proc.stderr and "AttributeError" not in proc.stderr, proc.stderr


# -- os._exit in a model or checked code is an error or a violation, never a silent exit 0 -------------------

EXIT_MODEL = '''
import os
from safeprefetch.model import DONE, Model


class ExitModel(Model):
    name = "exit_model"
    params = {"at": "step"}

    def build(self, m, at):
        if at == "build":
            os._exit(0)
        if at == "fork":  # a forked child still ends by the real os._exit, with its own status
            import multiprocessing  # (a bare os.fork() in a model is refused: test_hardening_review18.py)

            child = multiprocessing.get_context("fork").Process(target=os._exit, args=(7,))
            child.start()
            child.join()
            assert child.exitcode == 7, child.exitcode
        m.shared(x=0)

        def bump(s, me):
            if s.x == 1 and at == "step":
                os._exit(0)
            s.x += 1

        p = m.program("t")
        p.step("bump", bump, next="bump again")
        p.step("bump again", bump, next=DONE)
        m.thread("t0", p)
        m.invariant("x small", lambda s: s.x < 5)
'''


def _cli(tmp_path, *argv):
    return subprocess.run([sys.executable, "-m", "safeprefetch", *argv], cwd=tmp_path, capture_output=True,
                          text=True, timeout=100)


@pytest.mark.parametrize("at", ["step", "build"])
def test_a_model_calling_os_exit_is_the_models_error_not_a_silent_pass(tmp_path, at):
    (tmp_path / "exit_model.py").write_text(EXIT_MODEL)
    proc = _cli(tmp_path, "check", "exit_model.py", "--set", f"at={at}")
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "os._exit(0)" in proc.stderr and "exit_model.py:" in proc.stderr, proc.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_of_the_checker_still_exits_by_the_real_os_exit(tmp_path):
    (tmp_path / "exit_model.py").write_text(EXIT_MODEL)
    proc = _cli(tmp_path, "check", "exit_model.py", "--set", "at=fork")
    assert proc.returncode == 0 and "verdict: ok" in proc.stdout, (proc.stdout, proc.stderr)


def test_a_model_module_calling_os_exit_at_import_is_refused(tmp_path):
    (tmp_path / "bye.py").write_text("import os\nos._exit(0)\n")
    for argv in (["check", "bye.py"], ["check-code", "bye.py::test"]):
        proc = _cli(tmp_path, *argv)
        assert proc.returncode == 2 and "os._exit(0)" in proc.stderr, (argv, proc.stdout, proc.stderr)


EXIT_CODE = '''
import os
import threading


def test_in_a_thread():
    th = threading.Thread(target=lambda: os._exit(0))
    th.start()
    th.join()


def test_in_the_body():
    os._exit(0)
'''


@pytest.mark.parametrize("target", ["test_in_a_thread", "test_in_the_body"])
def test_checked_code_calling_os_exit_is_a_violation(tmp_path, target):
    (tmp_path / "t_exit.py").write_text(EXIT_CODE)
    proc = _cli(tmp_path, "check-code", f"t_exit.py::{target}")
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "uncaught_exception" in proc.stdout and "called os._exit(0)" in proc.stdout, proc.stdout
    assert "t_exit.py:" in proc.stdout.splitlines()[-1]


def test_interleavings_check_refuses_os_exit_from_python_too(tmp_path):
    # Not the command line: a pytest run calling interleavings.check ended the whole session with status 0.
    (tmp_path / "t_exit.py").write_text(EXIT_CODE)
    script = ("import t_exit\nfrom safeprefetch import interleavings\n"
              "r = interleavings.check(t_exit.test_in_a_thread)\nprint('verdict', r.violation.kind)\n"
              "import os\nassert os._exit.__module__ == 'posix', os._exit  # put back after the check\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0 and "verdict uncaught_exception" in proc.stdout, (proc.stdout, proc.stderr)


def test_the_command_line_puts_the_real_os_exit_back():
    from safeprefetch._cli.main import main

    real = os._exit
    assert main(["list"]) == 0
    assert os._exit is real


# -- check-code --replay: the saved verdict and settings are read, not ignored ------------------------------------

DEADLOCK = '''
import threading


def test_deadlock():
    a, b = threading.Lock(), threading.Lock()

    def other():
        with a:
            with b:
                pass

    th = threading.Thread(target=other)
    th.start()
    with b:
        with a:
            pass
    th.join()
'''


@pytest.fixture
def saved_deadlock(tmp_path):
    import json

    (tmp_path / "t_dl.py").write_text(DEADLOCK)
    proc = _cli(tmp_path, "check-code", "t_dl.py::test_deadlock", "--json")
    assert proc.returncode == 1, proc.stderr
    saved = json.loads(proc.stdout)
    assert saved["verdict"] == "deadlock"

    def replay_with(change):
        value = json.loads(json.dumps(saved))
        change(value)
        (tmp_path / "trace.json").write_text(json.dumps(value))
        return _cli(tmp_path, "check-code", "t_dl.py::test_deadlock", "--replay", "trace.json")

    return replay_with


def test_a_replay_that_ends_in_another_verdict_than_the_saved_one_is_not_a_reproduction(saved_deadlock):
    same = saved_deadlock(lambda d: None)
    assert same.returncode == 1 and "deadlock" in same.stdout, (same.stdout, same.stderr)
    other = saved_deadlock(lambda d: d.update(verdict="assertion"))
    assert other.returncode == 2, (other.stdout, other.stderr)
    assert "shows deadlock" in other.stderr and "saved with (assertion)" in other.stderr, other.stderr


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(verdict=5), "saved verdict 5 is not one of ok, assertion"),
    (lambda d: d.update(settings=5), "settings must be an object of NAME: VALUE, not int"),
    (lambda d: d["settings"].update(interrupts=5), "the trace's settings: interrupts must be a list of names, not 5"),
    (lambda d: d["settings"].update(time_limit="abc"), "the trace's settings: time_limit must be a number"),
    (lambda d: d["settings"].update(notify=3), "the trace's settings: notify must be 'fifo' or 'any', not 3"),
])
def test_a_malformed_saved_result_is_refused_with_a_labelled_message(saved_deadlock, change, message):
    proc = saved_deadlock(change)
    assert proc.returncode == 2 and message in proc.stderr, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr


def test_a_saved_infinite_time_limit_still_replays(saved_deadlock):
    proc = saved_deadlock(lambda d: d["settings"].update(time_limit="inf"))
    assert proc.returncode == 1 and "deadlock" in proc.stdout, (proc.stdout, proc.stderr)


# -- the compiled engine: ``in`` over a literal container is Python's, identity test included -------------------

MISSING = float("nan")


class _NeverEqual:
    """A value equal to nothing, itself included (as a NaN is)."""

    def __eq__(self, other):
        return False

    __hash__ = object.__hash__


NEVER = _NeverEqual()


def _found(value):  # a helper the compiled engine compiles with the transitions
    return value in [MISSING, NEVER]


def _literal_in_model():
    from safeprefetch.model import DONE, Model

    class LiteralIn(Model):
        name = "literal_in"
        params = {"n": 3, "sentinel": "nan"}

        def build(self, m, n, sentinel):
            m.shared(i=0, reading=MISSING if sentinel == "nan" else NEVER, seen=0)

            def tick(s, me):
                s.i += 1

            def look(s, me):
                s.seen = 1 if _found(s.reading) else 2

            p = m.program("ticker")
            p.step("tick", tick, next=lambda s, me: "tick" if s.i < n else "look", to=["tick", "look"])
            p.step("look", look, next=lambda s, me: "stuck" if s.reading in (MISSING, NEVER, None) else DONE,
                   to=["stuck", DONE])
            p.step("stuck", guard=lambda s, me: s.reading not in {MISSING, NEVER}, next=DONE)
            m.thread("t", p)

    return LiteralIn


@pytest.mark.parametrize("sentinel", ["nan", "never_equal"])
def test_the_compiled_engine_finds_a_sentinel_not_equal_to_itself_in_a_literal_container(
        sentinel, tmp_path, monkeypatch):
    from _cython import cython_here
    from safeprefetch._check.explorer import Explorer

    if not cython_here():
        pytest.skip("the compiled engine needs Cython and a C compiler")
    monkeypatch.setenv("SAFEPREFETCH_CACHE", str(tmp_path))
    machine = _literal_in_model().compile({"n": 3, "sentinel": sentinel})
    plain = Explorer(machine, reduce="none", engine="plain").run()
    assert plain.verdict == "deadlock" and plain.states == 5
    e = Explorer(machine, reduce="none", engine="compiled")
    got = e.run()
    assert (e.engine_used, e.engine_note) == ("compiled", ""), e.engine_note  # not caught by the audit, then redone
    assert (got.verdict, got.states, got.transitions, got.trace.to_json()) == \
        (plain.verdict, plain.states, plain.transitions, plain.trace.to_json())


# -- a prefetcher's own signals raised by its source are not taken for its own ------------------------------------


class _SignalAt:
    """A map-style source whose item ``at`` raises ``signal`` (as a prefetcher it reads from would)."""

    def __init__(self, n, at, signal):
        self.n, self.at, self.signal = n, at, signal

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.at:
            raise self.signal
        return np.full((4,), i, np.int64)


def _drain(pf):
    got = []
    while True:
        try:
            got.append(int(pf.get()[0]))
        except StopIteration:
            return got, None
        except BaseException as e:  # noqa: BLE001 - the test looks at what it is
            return got, e


def _signals():
    from safeprefetch import LeaseHeld, PrefetcherClosed, PrefetcherExhausted, PrefetchTimeout

    return [PrefetchTimeout("no batch within the timeout"), PrefetcherClosed("closed"),
            PrefetcherExhausted("again"), LeaseHeld("held")]


@pytest.mark.parametrize("at", [0, 5])
@pytest.mark.parametrize("kind", ["map", "iterator", "executor"])
def test_a_sources_prefetcher_signal_is_delivered_wrapped_not_as_the_outers_own(kind, at):
    from concurrent.futures import ThreadPoolExecutor

    from safeprefetch import Prefetcher

    for signal in _signals():
        items = _SignalAt(12, at, signal)
        src = (items[i] for i in range(12)) if kind == "iterator" else items
        kw = {"executor": ThreadPoolExecutor(2)} if kind == "executor" else {}
        with Prefetcher(src, capacity=2, workers=2 if kind != "iterator" else 1, **kw) as pf:
            got, err = _drain(pf)
        if kw:
            kw["executor"].shutdown()
        assert got == list(range(at)), (signal, got)
        assert type(err) is RuntimeError and err.__cause__ is signal, (kind, signal, err)
        assert f"item {at}: the source raised {type(signal).__name__}" in str(err)


def test_an_on_demand_request_whose_source_times_out_is_not_the_requests_own_timeout():
    from safeprefetch import OnDemandPrefetcher, PrefetchTimeout

    signal = PrefetchTimeout("no batch within the timeout")
    with OnDemandPrefetcher(_SignalAt(12, 3, signal), capacity=2, workers=1) as pf:
        assert int(pf.get(1)[0]) == 1
        with pytest.raises(RuntimeError) as caught:
            pf.get(3)
    assert caught.value.__cause__ is signal


def test_a_closed_inner_prefetcher_does_not_make_the_outer_say_it_is_closed():
    # The reviewer's nesting, without a timer: the inner is closed while the outer reads it.
    from safeprefetch import Prefetcher, PrefetcherClosed

    inner = Prefetcher(_SignalAt(100, -1, None), capacity=1)
    outer = Prefetcher(inner, capacity=1)
    assert int(outer.get()[0]) == 0
    inner.close()
    got, err = _drain(outer)
    assert got == list(range(1, 1 + len(got))) and len(got) <= 3, got
    assert type(err) is RuntimeError and isinstance(err.__cause__, PrefetcherClosed), err
    assert not outer.closed
    outer.close()


# -- the compiled engine's cache: a damaged build is built again, never loaded -------------------------------------


TICKER = '''
from safeprefetch.model import DONE, Model


class Ticker(Model):
    name = "ticker"
    params = {"n": 40}

    def build(self, m, n):
        m.shared(i=0)

        def tick(s, me):
            s.i += 1

        p = m.program("ticker")
        p.step("tick", tick, next=lambda s, me: "tick" if s.i < n else "stuck", to=["tick", "stuck"])
        p.step("stuck", guard=lambda s, me: False, next=DONE)
        m.thread("t", p)
'''


@pytest.mark.parametrize("damage", ["truncate", "garbage", "no digest"])
def test_a_damaged_cached_build_is_built_again_not_loaded(tmp_path, damage):
    from _cython import cython_here
    from safeprefetch._check.extension import intact

    if not cython_here():
        pytest.skip("the compiled engine needs Cython and a C compiler")
    env = {**os.environ, "SAFEPREFETCH_CACHE": str(tmp_path / "cache")}
    # Plain steps only: a model with primitives (locks, semaphores) describes some bound values by identity,
    # so its cache key differs in every process, and a second process would not meet the damaged file.
    (tmp_path / "ticker.py").write_text(TICKER)

    def check():
        return subprocess.run([sys.executable, "-m", "safeprefetch", "check", "ticker.py", "--reduce", "none",
                               "--engine", "compiled"], capture_output=True, text=True, timeout=300, env=env,
                              cwd=tmp_path)

    first = check()
    assert first.returncode == 1 and "verdict: deadlock" in first.stdout, first.stdout + first.stderr
    [built] = [p for p in (tmp_path / "cache").iterdir() if p.suffix == ".so"]
    whole = built.read_bytes()
    if damage == "truncate":  # the reviewer's: cut to one page, and the next run died of SIGBUS
        os.truncate(built, 4096)
    elif damage == "garbage":
        built.write_bytes(b"\x7fELF" + b"\0" * 200)
    else:  # the digest a build appends cut off: a whole library, but nothing says so
        built.write_bytes(whole[:-(len("\nsafeprefetch-sha256:") + 64)])
    again = check()
    assert again.returncode == 1 and "verdict: deadlock" in again.stdout, (again.returncode, again.stdout,
                                                                           again.stderr)
    assert "compiled engine" in again.stdout
    assert intact(built) and len(built.read_bytes()) > len(whole) // 2  # built again, whole


# -- --cluster: an address that is not a dask scheduler is a clear error, in bounded time ----------------------


@pytest.fixture
def listener():
    """A local TCP port that accepts connections; ``speak(b"...")`` makes it send those bytes to each."""
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    said: list[bytes] = []
    conns: list = []

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            conns.append(c)
            if said:
                c.sendall(said[0])

    threading.Thread(target=serve, daemon=True).start()
    yield f"tcp://127.0.0.1:{srv.getsockname()[1]}", said.append
    srv.close()
    for c in conns:
        c.close()


def test_a_listener_that_never_speaks_dask_is_refused_in_bounded_time(listener, monkeypatch):
    pytest.importorskip("distributed")
    from safeprefetch._check import cluster
    from safeprefetch.model import ModelError

    address, _speak = listener
    monkeypatch.setattr(cluster, "CONNECT_SECONDS", 3.0)
    with pytest.raises(ModelError, match=r"cannot reach the dask scheduler at .*no dask handshake within 3 s"):
        with cluster.open_cluster(address):
            pass


def test_another_services_banner_is_not_blamed_on_the_model(listener, tmp_path):
    pytest.importorskip("distributed")
    address, speak = listener
    speak(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
    proc = _cli(tmp_path, "check", "check_then_set", "--cluster", address)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith(f"error: cannot reach the dask scheduler at {address}: "), proc.stderr
    assert "the model raised" not in proc.stderr


@pytest.mark.parametrize("address", ["inproc://x", "tcp://127.0.0.1:abc", "tcp://"])
def test_an_unusable_scheduler_address_is_not_blamed_on_the_model(address, tmp_path):
    pytest.importorskip("distributed")
    proc = _cli(tmp_path, "check", "check_then_set", "--cluster", address)
    assert proc.returncode == 2 and "cannot reach the dask scheduler" in proc.stderr, (proc.stdout, proc.stderr)
    assert "the model raised" not in proc.stderr


def test_a_cluster_failure_is_reported_as_the_clusters_not_the_models(monkeypatch, capsys):
    from safeprefetch._check.cluster import ClusterError
    from safeprefetch._cli import main as cli

    def lost_worker(args):
        raise ClusterError("worker tcp://127.0.0.1:40000 died with shard 1 of 2")

    monkeypatch.setitem(cli.COMMANDS, "list", lost_worker)
    assert cli.main(["list"]) == 2
    err = capsys.readouterr().err
    assert err == "error: the dask cluster failed under the search: worker tcp://127.0.0.1:40000 died with shard 1 " \
                  "of 2\n", err


# -- thread_safe=False holds across prefetchers that share the source ---------------------------------------------


class _Exclusive:
    """A map-style source that records overlapping calls. Its first call after construction waits (bounded) for
    a second one to enter, so an unserialized second prefetcher's call overlaps it for certain."""

    def __init__(self, n):
        self.n, self.active, self.overlaps, self.armed = n, 0, 0, False
        self.first_in, self.second_in = threading.Event(), threading.Event()
        self.count = threading.Lock()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        with self.count:
            self.active += 1
            self.overlaps += self.active > 1
        try:
            if self.armed:
                if not self.first_in.is_set():
                    self.first_in.set()
                    self.second_in.wait(2)  # observable state: set by an overlapping call (none, serialized)
                else:
                    self.second_in.set()
            return np.full((4,), i, np.int64)
        finally:
            with self.count:
                self.active -= 1


@pytest.mark.parametrize("second", ["streaming", "on_demand"])
def test_two_prefetchers_over_one_unsafe_source_never_call_it_at_once(second):
    from safeprefetch import OnDemandPrefetcher, Prefetcher

    src = _Exclusive(40)
    a = Prefetcher(src, capacity=2, workers=2, thread_safe=False, shuffle=True, seed=3)
    b = (Prefetcher(src, capacity=2, workers=2, thread_safe=False) if second == "streaming"
         else OnDemandPrefetcher(src, capacity=2, workers=2, thread_safe=False))
    src.armed = True
    got_a: list = []
    reader = threading.Thread(target=lambda: got_a.extend(int(x[0]) for x in a))
    reader.start()
    got_b = [int(x[0]) for x in b] if second == "streaming" else [int(b.get(i)[0]) for i in range(40)]
    reader.join(60)
    a.close()
    b.close()
    assert sorted(got_a) == list(range(40)) and got_b == list(range(40))
    assert src.overlaps == 0, f"{src.overlaps} calls into a thread_safe=False source overlapped"


def test_a_source_that_cannot_be_weakly_referenced_still_gets_a_gate():
    from safeprefetch._prefetcher.sources import gate_of

    class Slotted:
        __slots__ = ("n",)

    one, two = gate_of(Slotted()), gate_of(Slotted())
    assert one is not None and two is not None and one is not two
    held = Slotted.__new__(Slotted)
    # Shared since the twenty-second round (a gate per prefetcher let two of them call it at once; the gate now
    # holds its source, keeping its id its own: tests/test_hardening_review22_prefetcher.py, section 5).
    assert gate_of(held) is gate_of(held)


# -- close() gives an iterator source back: a generator's cleanup runs then, not at garbage collection ------------


def test_close_lets_a_generator_source_clean_up_while_the_prefetcher_is_kept():
    from safeprefetch import Prefetcher

    cleaned: list[bool] = []
    inner_threads: list = []

    def stream():
        try:
            with Prefetcher(_SignalAt(10**6, -1, None), capacity=2, workers=2, name="inner17") as inner:
                inner_threads.extend(th for th in threading.enumerate() if "inner17" in th.name)
                yield from inner
        finally:
            cleaned.append(True)

    outer = Prefetcher(stream(), capacity=2)
    for i, b in enumerate(outer):
        assert int(b[0]) == i
        if i == 5:
            break
    outer.close()
    assert cleaned == [True], "the generator's finally waits for the garbage collector"
    assert inner_threads and not any(th.is_alive() for th in inner_threads)
    assert outer.stats.batches == 6  # the closed prefetcher, kept, still answers


def test_without_the_rewrite_the_audit_catches_the_compiled_engine_and_says_which_engine(tmp_path, monkeypatch):
    from _cython import cython_here
    from safeprefetch._check import generated
    from safeprefetch._check.explorer import Explorer

    if not cython_here():
        pytest.skip("the compiled engine needs Cython and a C compiler")
    monkeypatch.setenv("SAFEPREFETCH_CACHE", str(tmp_path))
    monkeypatch.setattr(generated, "_hide_literal_containers", lambda transitions, helpers: False)
    e = Explorer(_literal_in_model().compile({"n": 3, "sentinel": "nan"}), reduce="none", engine="compiled")
    assert e.run().verdict == "deadlock"  # searched again plain, after the audit's sample caught it
    assert e.engine_used == "plain"
    assert e.engine_note.startswith("the compiled expansion disagreed with the machine at a reachable state")
    assert "Or did Cython compile a construct unlike Python?" in e.engine_note


def test_the_shape_cache_leaves_no_lock_behind_on_its_unguarded_path():
    # transitions_for asks _template while it holds its own key: that call computes unguarded, and it left the
    # lock it had put in the table there, one per shape, for good (and every call scans the table).
    from safeprefetch._prefetcher import machine as M

    before = len(M._BUSY)
    for shape in [(5, 1, True, True, 0, 1), (5, 2, True, True, 0, 2), (6, 1, False, True, 0, 1)]:
        M.transitions_for(*shape)
    assert len(M._BUSY) == before == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_inherit_a_gate_a_parents_thread_holds():
    import select

    from safeprefetch import Prefetcher

    inside, release = threading.Event(), threading.Event()

    class Blocking(_SignalAt):
        def __getitem__(self, i):
            if i == 3 and threading.current_thread().name.startswith("safeprefetch-parent17"):
                inside.set()
                release.wait(30)  # observable state: the test sets it once the child has reported
            return super().__getitem__(i)

    ds = Blocking(50, -1, None)
    parent = Prefetcher(ds, capacity=2, workers=2, thread_safe=False, name="parent17")
    it = iter(parent)
    assert [int(next(it)[0]) for _ in range(2)] == [0, 1]
    assert inside.wait(30)  # a parent's worker holds the source's gate, inside ds[3]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a prefetcher over the inherited dataset, read to its end
        try:
            with Prefetcher(ds, capacity=2, thread_safe=False) as child:
                n = sum(1 for _ in child)
            os.write(w, str(n).encode())
        finally:
            os._exit(0)
    os.close(w)
    ready, _, _ = select.select([r], [], [], 60)
    said = os.read(r, 16).decode() if ready else "hung"
    os.close(r)
    release.set()
    if said == "hung":
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    parent.close()
    assert said == "50", said


def test_under_interleavings_every_gate_is_the_runs_own_and_none_is_kept():
    from safeprefetch import interleavings
    from safeprefetch._prefetcher import sources

    ds = _SignalAt(4, -1, None)  # made outside the check, as a module-level dataset would be
    before = len(sources._GATES)
    seen: list = []

    def body():
        seen.append((sources.gate_of(ds), sources.gate_of(ds)))

    assert interleavings.check(body).violation is None
    assert len(sources._GATES) == before  # one entry per schedule was kept before
    assert all(a is not b for a, b in seen)  # each the run's own lock, never one from an earlier run


CHAINED = '''
from safeprefetch.model import DONE, Model

MISSING = float("nan")


class Chained(Model):
    name = "chained"
    params = {"n": 3}

    def build(self, m, n):
        m.shared(i=0, r=MISSING, out=0)

        def tick(s, me):
            s.i += 1

        def look(s, me):
            # Python: (r in t) and (t == True), t evaluated once; 0 < i in (1, 2, 3) likewise
            s.out = (1 if s.r in (MISSING, None) == True else 2) + (10 if 0 < s.i in (1, 2, 3) else 20)

        p = m.program("t")
        p.step("tick", tick, next=lambda s, me: "tick" if s.i < n else "look", to=["tick", "look"])
        p.step("look", look, next="stuck")
        p.step("stuck", guard=lambda s, me: s.out != 12, next=DONE)  # 12: as Python computes it
        m.thread("t", p)
'''


def test_a_chained_comparison_with_in_is_compiled_without_crashing_and_as_python_computes_it(tmp_path):
    from _cython import cython_here

    if not cython_here():
        pytest.skip("the compiled engine needs Cython and a C compiler")
    (tmp_path / "chained.py").write_text(CHAINED)
    env = {**os.environ, "SAFEPREFETCH_CACHE": str(tmp_path / "cache")}
    runs = {engine: subprocess.run([sys.executable, "-m", "safeprefetch", "check", "chained.py", "--reduce", "none",
                                    "--engine", engine], capture_output=True, text=True, timeout=300, env=env,
                                   cwd=tmp_path) for engine in ("plain", "compiled")}
    plain, compiled = runs["plain"], runs["compiled"]
    assert plain.returncode == 1 and "verdict: deadlock" in plain.stdout, plain.stdout + plain.stderr
    assert compiled.returncode == 1, (compiled.returncode, compiled.stderr)  # was -11: SIGSEGV, nothing printed
    assert "compiled engine" in compiled.stdout and "searched again plain" not in compiled.stdout
    head = [line for line in plain.stdout.splitlines() if line.startswith("verdict:")]
    assert [line.split(",")[:2] for line in head] == \
        [line.split(",")[:2] for line in compiled.stdout.splitlines() if line.startswith("verdict:")]


# -- --cluster: equal states are routed to one owner ---------------------------------------------------------------


@pytest.mark.parametrize("one, other", [
    ((0.0,), (-0.0,)), ((1,), (True,)), ((1,), (1.0,)), ((0, "x"), (False, "x")),
    (((1, 2.0), frozenset({3})), ((1.0, 2), frozenset({3.0}))), ((complex(2, 0),), (2,)),
    ((complex(1, -0.0) * 0 + complex(0.0, 1),), (complex(-0.0, 1),)), ((("FREE", -0.0),), (("FREE", 0),)),
])
def test_equal_states_get_one_stable_fingerprint_in_a_search_with_floats(one, other):
    from safeprefetch._check.fingerprint import stable_fingerprinter

    fp = stable_fingerprinter(("FREE", (0, 0.0)))  # a first state with a float, nested: the numbers kept in one form
    assert one == other
    assert fp(one) == fp(other)


def test_a_record_field_keeps_the_canonical_form_for_its_numbers_and_the_rest():
    from collections import namedtuple

    from safeprefetch._check.fingerprint import stable_fingerprinter

    P = namedtuple("P", "n")
    fp = stable_fingerprinter((P(0.0), 1.0))  # marshal refuses the record: its field is told apart by repr
    assert fp((P(0.0), 1.0)) == fp((P(-0.0), 1))
    assert fp((P(-0.0), True)) == fp((P(0), 1.0))
    assert fp((P(0.5), 1)) != fp((P(0.25), 1))


def test_only_a_search_with_floats_pays_for_the_canonical_form():
    from safeprefetch._check.fingerprint import stable_fingerprint, stable_fingerprinter

    assert stable_fingerprinter((1, "x", (True, None), frozenset({2}))) is stable_fingerprint
    assert stable_fingerprinter((1, frozenset({(2, complex(0, 1))}))) is not stable_fingerprint


def test_unequal_states_still_get_different_stable_fingerprints():
    from safeprefetch._check.fingerprint import stable_fingerprinter

    fp = stable_fingerprinter((0.0,))
    states = [(0.5,), (1,), (2,), (1.5,), ("T",), ("F",), (True, 2), (complex(1, 1),), (frozenset({1, 2}),),
              (float("inf"),), (float("-inf"),), ((1, 2),), ((2, 1),)]
    assert len({fp(s) for s in states}) == len(states)


SIGNED_ZERO = '''
import math
from safeprefetch.model import DONE, Model


class SignedZero(Model):
    name = "signed_zero"
    expected = "ok"
    params = {"tag": 8}

    def build(self, m, tag):
        m.shared(x=0.0, tag=tag)

        def negate(s, me):
            s.x = -s.x

        def add_zero(s, me):
            s.x = s.x + 0.0

        a = m.program("a")
        a.step("negate", negate, next=DONE)
        b = m.program("b")
        b.step("add zero", add_zero, next=DONE)
        m.thread("a", a)
        m.thread("b", b)
        m.at_end(lambda s: None if math.copysign(1.0, s.x) > 0 else ("invariant", "the balance ended as -0.0"))
'''


SIGNED_ZERO_RECORD = SIGNED_ZERO.replace("import math\n", "import math\nfrom collections import namedtuple\n"
                                         "Tag = namedtuple('Tag', 'n')\n").replace(
    "m.shared(x=0.0, tag=tag)", "m.shared(x=0.0, tag=Tag(tag))").replace('"tag": 8', '"tag": 3')


@pytest.mark.parametrize("store, model", [("full", SIGNED_ZERO), ("fingerprint", SIGNED_ZERO),
                                          ("full", SIGNED_ZERO_RECORD)], ids=["full", "fingerprint", "record"])
def test_the_cluster_search_merges_equal_states_as_the_sequential_one_does(tmp_path, store, model):
    # The reviewer's model: tag=8 puts the two parents, and the equal ends 0.0 and -0.0, on different shards.
    # With a record in the state (marshal refuses it: fingerprinted by repr), tag=3 does (the second review).
    pytest.importorskip("distributed")
    (tmp_path / "signed_zero.py").write_text(model)
    seq = _cli(tmp_path, "check", "signed_zero.py", "--reduce", "none", "--store", store)
    par = _cli(tmp_path, "check", "signed_zero.py", "--reduce", "none", "--store", store, "--cluster", "local:2")
    verdict = [line for line in seq.stdout.splitlines() if line.startswith("verdict:")]
    assert verdict and verdict[0].startswith("verdict: ok (expected ok); 4 states"), seq.stdout
    assert (par.returncode, [line for line in par.stdout.splitlines() if line.startswith("verdict:")][0].split(",")[:2]) \
        == (seq.returncode, verdict[0].split(",")[:2]), (par.stdout, par.stderr)


# -- interleavings: a set or notify at the waiter's deadline may win the tie ----------------------------------------


def _tie(kind):
    import time  # under the check, the scheduler's virtual clock: the sleep is the scenario, not a wait for state

    def body():
        if kind == "event":
            ev = threading.Event()
            setter = threading.Thread(target=lambda: (time.sleep(1.0), ev.set()))
            setter.start()
            got = ev.wait(1.0)
        else:
            cond, box = threading.Condition(), []

            def notifier():
                time.sleep(1.0)
                with cond:
                    box.append(1)
                    cond.notify()

            setter = threading.Thread(target=notifier)
            setter.start()
            with cond:
                got = cond.wait(1.0) if not box else True
        setter.join()
        assert not got, "the set arrived in time"

    return body


@pytest.mark.parametrize("kind", ["event", "condition"])
def test_a_set_at_the_waiters_deadline_can_be_in_time(kind):
    # Real threads: the setter's sleep starts first, so its set can land before the waiter's timeout fires
    # (5 of 20 and 11 of 20 runs in the review). The checker ran that order and called the set late.
    from safeprefetch import interleavings

    result = interleavings.check(_tie(kind))
    assert result.violation is not None and result.violation.kind == "assertion", interleavings.render(result)


def test_a_model_with_primitives_is_built_once_for_every_process(tmp_path):
    # racy_counter's semaphores are primitive steps, bound into the module as the machine's own functions; their
    # objects were described by address and frozensets in hash order, so every process built it again (3.6 s)
    # and left another file in the cache.
    from _cython import cython_here

    if not cython_here():
        pytest.skip("the compiled engine needs Cython and a C compiler")
    env = {**os.environ, "SAFEPREFETCH_CACHE": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-m", "safeprefetch", "check", "racy_counter", "--reduce", "none",
                            "--engine", "compiled"], capture_output=True, text=True, timeout=300,
                           env={**env, "PYTHONHASHSEED": str(seed)}) for seed in (1, 2)]
    for run in runs:
        assert run.returncode == 1 and "verdict: lost_item" in run.stdout and "compiled engine" in run.stdout
    assert len([p for p in (tmp_path / "cache").iterdir() if p.suffix == ".so"]) == 1

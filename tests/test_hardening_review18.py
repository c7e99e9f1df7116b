"""The eighteenth round (docs/hardening.md): liveness verdicts, a store's zeros, replay's last line, and the
Prefetcher's counts, autotune and first read.

The tests of a fix reproduce a finding of that round's adversarial reviews, and failed on the commit before
the fix; the others (a starvation found without the sleeper, whole counts, a thread kept waiting) guard what
each fix must keep.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from safeprefetch import NpyFiles, OnDemandPrefetcher, Prefetcher, catalog, check
from safeprefetch._check.explore import check_shutdown_bound
from safeprefetch._check.result import Trace
from safeprefetch._check.reverify import NotReproduced, saved_claim, saved_verdict
from safeprefetch._cli.main import main as cli_main
from safeprefetch._tools.play import choice_numbers
from safeprefetch._tools.spin import CrossCheck, Twin, crosscheck, find_twins, parse_config_header, parse_pan_output
from safeprefetch.model import DONE, Model, violate

# -- 1. strict priority: a sleeper's spurious wakeup or timeout is no thread running --------------------------


class _PrioritySleeper(Model):
    """hi0 (top priority) sleeps on a condvar: nobody notifies it, or (``timed``) it times out and sets x;
    or (``kind``) it waits with a timeout on an event nobody sets or a semaphore nobody releases.
    mid0 spins while x == 0; lo0, lowest, is the victim. Under strict priority lo0 starves in every case."""

    name = "priority_sleeper"
    params = {"timed": False, "kind": "condvar"}
    settings = {"policy": "priority"}

    def build(self, m, timed, kind):
        m.shared(x=0)
        m.mutex("lock")
        m.condvar("cv")
        h = m.program("hi")
        if kind == "flag":
            m.flag("ev")
            h.wait_flag("wait", "ev", next="set", timeout="set")
        elif kind == "semaphore":
            m.semaphore("sem", 0)
            h.sem_acquire("wait", "sem", next="set", timeout="set")
        else:
            h.acquire("lock", "lock", next="wait")
            if timed:
                h.wait("wait", "cv", "lock", next="wait", until=lambda s, me: False, timeout="set")
            else:
                h.wait("wait", "cv", "lock", next="set")
        h.step("set", lambda s, me: setattr(s, "x", 1), next=DONE if kind != "condvar" else "unlock")
        if kind == "condvar":
            h.release("unlock", "lock", next=DONE)
        md = m.program("mid")
        md.step("look", next=lambda s, me: "spin" if s.x == 0 else DONE, to=["spin", DONE])
        md.step("spin", next="spin")
        lo = m.program("lo")
        lo.step("work", next="work")
        m.thread("hi0", h)
        m.thread("mid0", md)
        m.thread("lo0", lo)
        m.priority("hi0", 3)
        m.priority("mid0", 2)
        m.priority("lo0", 1)
        m.progress("work")


@pytest.mark.parametrize("timed,spurious", [(False, "off"), (False, "on"), (True, "off"), (True, "on")])
@pytest.mark.parametrize("fairness", ["weak", "strong"])
def test_a_high_priority_sleeper_does_not_hide_a_starving_low_thread(timed, spurious, fairness):
    # Before: a spurious wakeup (spurious=on) or a timeout (timed) of hi0 set the top priority, so mid0 never
    # ran while hi0 slept, no cycle starved lo0, and the check said ok, exit 0.
    r = check(_PrioritySleeper, {"timed": timed, "spurious": spurious, "fairness": fairness})
    assert r.verdict == "starvation"
    assert r.violation.message.startswith("lo0 never makes progress")
    # The lasso is one a strict-priority scheduler can run: the replay check accepts it.
    machine = _PrioritySleeper.compile({"timed": timed, "spurious": spurious, "fairness": fairness})
    claim = saved_claim(json.loads(json.dumps(r.to_json())), len(r.trace))
    assert saved_verdict(machine, r.trace, claim, 10_000)[0] == "starvation"


class _TimedGiveUp(Model):
    """A waiter waits for a flag nobody sets, with a timeout: it gives up, which is progress."""

    name = "timed_give_up"

    def build(self, m):
        m.shared(flag=False)
        m.mutex("lock")
        m.condvar("cv")
        w = m.program("waiter")
        w.acquire("lock", "lock", next="check")
        w.step("check", next=lambda s, me: "got it" if s.flag else "wait", to=["got it", "wait"])
        w.wait("wait", "cv", "lock", next="check", until=lambda s, me: s.flag, timeout="gave up")
        w.step("got it", next="unlock")
        w.step("gave up", next="unlock")
        w.release("unlock", "lock", next=DONE)
        m.thread("w0", w)
        m.progress("got it", "gave up")


@pytest.mark.parametrize("kind", ["flag", "semaphore"])
@pytest.mark.parametrize("fairness", ["weak", "strong"])
def test_a_high_priority_thread_blocked_with_a_timeout_does_not_hide_a_starving_low_thread(kind, fairness):
    # The fresh-eyes review: Event.wait and Semaphore.acquire (queue.get) with a timeout were still counted
    # as the blocked thread running at its priority, and said ok.
    r = check(_PrioritySleeper, {"kind": kind, "fairness": fairness})
    assert r.verdict == "starvation" and r.violation.message.startswith("lo0 never makes progress")


@pytest.mark.parametrize("fairness", ["weak", "strong"])
def test_a_timed_waits_spurious_wakeup_is_not_repeated_in_a_cycle(fairness):
    # Before: the timed wait's "spurious wakeup" branch counted as a real move, and a cycle of spurious
    # wakeups was reported as starvation (5 steps) with spurious=on.
    assert check(_TimedGiveUp, {"spurious": "on", "fairness": fairness}).verdict == "ok"


def test_replay_refuses_a_lasso_that_repeats_a_timed_waits_spurious_wakeup():
    machine = _TimedGiveUp.compile({"spurious": "on"})
    trace = Trace.from_json({"trace": [
        {"thread": "w0", "step": "lock"}, {"thread": "w0", "step": "check"}, {"thread": "w0", "step": "wait"},
        {"thread": "w0", "step": "wait: asleep", "branch": "spurious wakeup"},
        {"thread": "w0", "step": "wait: woken, reacquire lock"}]})
    claim = saved_claim({"verdict": "starvation", "cycle_start": 1}, len(trace))
    with pytest.raises(NotReproduced, match="step 4, in the cycle, is a spurious wakeup"):
        saved_verdict(machine, trace, claim, 10_000)


# -- 2. the progress bound: threads never started, a request acknowledged, the thread to blame ---------------


class _NeverStarted(Model):
    """main0 may start worker0 or not, then requests shutdown; each started thread returns in one step."""

    name = "never_started"

    def build(self, m):
        m.shared(closing=False)
        mn = m.program("main")
        mn.step("decide", branches=("start", "close"),
                effect=lambda s, me, b: ("spawn" if b == "start" else "close"), to=["spawn", "close"])
        mn.spawn("spawn", "worker0", next="close")
        mn.step("close", lambda s, me: setattr(s, "closing", True), next=DONE)
        w = m.program("worker")
        w.step("work", next=DONE)
        m.thread("main0", mn)
        m.thread("worker0", w, start=False)
        m.shutdown_when(lambda s: s.closing)


class _Acknowledged(Model):
    """Shutdown is "requested and not yet acknowledged": the predicate turns false again."""

    name = "acknowledged"

    def build(self, m):
        m.shared(req=False, ack=False)
        a = m.program("closer")
        a.step("request", lambda s, me: setattr(s, "req", True), next=DONE)
        b = m.program("worker")
        b.step("ack", lambda s, me: setattr(s, "ack", True), guard=lambda s, me: s.req, next="finish")
        b.step("finish", next=DONE)
        m.thread("closer0", a)
        m.thread("worker0", b)
        m.shutdown_when(lambda s: s.req and not s.ack)


class _SpinningCloser(Model):
    """After close, worker0 returns in one step; closer0 spins until it has (unbounded steps of its own)."""

    name = "spinning_closer"

    def build(self, m):
        m.shared(closing=False, wdone=False)
        w = m.program("worker")
        w.step("finish", lambda s, me: setattr(s, "wdone", True), guard=lambda s, me: s.closing, next=DONE)
        c = m.program("closer")
        c.step("close", lambda s, me: setattr(s, "closing", True), next="join")
        c.step("join", next=lambda s, me: DONE if s.wdone else "join", to=["join", DONE])
        m.thread("worker0", w)
        m.thread("closer0", c)
        m.shutdown_when(lambda s: s.closing)


@pytest.mark.parametrize("model", [_NeverStarted, _Acknowledged])
def test_the_progress_bound_holds_for_a_model_whose_threads_all_return(model):
    # Before: a thread never started was "stuck before returning", and a state after the acknowledgement
    # had no successors: both a false shutdown_hang.
    assert check_shutdown_bound(model.compile(), 2).violation is None


def test_the_progress_bound_names_the_thread_that_loops():
    found = check_shutdown_bound(_SpinningCloser.compile(), 3).violation
    assert found is not None and found.kind == "shutdown_hang"
    # Before: worker0, first in order, was named: it returns in one step, in any fair run.
    assert "closer0 may never return" in found.message


class _SpinningAfterClose(Model):
    """closer0 closes, then spins forever; worker0 returns once go is set; with ``setter``, setter0 (always
    ready once closing) sets go, and without it nobody does."""

    name = "spinning_after_close"
    params = {"setter": True}

    def build(self, m, setter):
        m.shared(closing=False, go=False)
        w = m.program("worker")
        w.step("finish", guard=lambda s, me: s.go, next=DONE)
        c = m.program("closer")
        c.step("close", lambda s, me: setattr(s, "closing", True), next="spin")
        c.step("spin", next="spin")
        m.thread("worker0", w)
        if setter:
            st = m.program("setter")
            st.step("set go", lambda s, me: setattr(s, "go", True), guard=lambda s, me: s.closing, next=DONE)
            m.thread("setter0", st)
        m.thread("closer0", c)
        m.shutdown_when(lambda s: s.closing)


@pytest.mark.parametrize("fairness", ["weak", "strong"])
def test_a_cycle_unfair_to_another_thread_does_not_name_a_waiter(fairness):
    # The fresh-eyes review: the cycle of closer0's spins alone is unfair to setter0, so it is no run in
    # which worker0 waits for good: closer0 is the one to name.
    found = check_shutdown_bound(_SpinningAfterClose.compile({"fairness": fairness}), 3).violation
    assert found is not None and "closer0 may never return" in found.message


def test_a_thread_kept_waiting_by_a_fair_cycle_is_unbounded():
    # The fairness rule cuts both ways: with no setter, worker0 waits for a flag nobody sets while closer0
    # spins, and that cycle is fair to it.
    found = check_shutdown_bound(_SpinningAfterClose.compile({"setter": False}), 5).violation
    assert found is not None and "worker0 may never return" in found.message


# -- 3. a float field's two zeros are one value in every store -------------------------------------------------


class _SignedZero(Model):
    """z becomes 0.0 on a short path and -0.0 on a longer one (the reviewer's model): a state with the -0.0
    twin is met at another BFS level than the one with 0.0. The last step reads the zero's sign."""

    name = "signed_zero"

    def build(self, m):
        m.shared(z=1.0, c=0, done=0)

        def a1(s, me):
            s.z = -0.0 if s.c else 0.0
            s.done += 1

        def b1(s, me, b):
            if b == "long":
                s.c = 1
                return "b2"
            s.done += 1
            return DONE

        def b2(s, me):
            s.c = 0
            s.done += 1

        def check_sign(s, me):
            if math.copysign(1.0, s.z) < 0:
                violate("invariant", f"z is negative zero: {s.z!r}")

        a = m.program("a")
        a.step("a1", a1, next=DONE)
        b = m.program("b")
        b.step("b1", b1, branches=("short", "long"), guard=lambda s, me, b: b == "short" or s.z == 1.0,
               to=["b2", DONE])
        b.step("b2", b2, next=DONE)
        c = m.program("c")
        c.step("check", check_sign, guard=lambda s, me: s.done == 2, next=DONE)
        m.thread("a", a)
        m.thread("b", b)
        m.thread("c", c)


@pytest.mark.parametrize("reduce", ["none", "all"])
def test_the_fingerprint_store_merges_a_float_fields_zeros_as_the_full_store_does(reduce):
    # Before: the fingerprint store merged 0.0 and -0.0 within a chunk by == and told them apart across BFS
    # levels (marshal bytes): it counted a state the full store and the cluster did not.
    full = check(_SignedZero, reduce=reduce)
    fp = check(_SignedZero, reduce=reduce, store="fingerprint")
    assert (fp.verdict, fp.states, fp.transitions) == (full.verdict, full.states, full.transitions)


# -- 4. replay names the invariant that failed ------------------------------------------------------------------


def test_replay_prints_an_invariants_violation(tmp_path, capsys):
    saved = tmp_path / "trace.json"
    assert cli_main(["check", "check_then_set", "--json"]) == 1
    saved.write_text(capsys.readouterr().out)
    assert cli_main(["replay", "check_then_set", str(saved)]) == 1
    out = capsys.readouterr().out
    # Before: the message starts with its kind ("invariant '...' fails"), and replay skipped it.
    assert out.rstrip().splitlines()[-1] == ("<== invariant: invariant 'at most one thread in the critical "
                                             "section' fails")


def test_replay_prints_a_steps_own_violation_once(tmp_path, capsys):
    saved = tmp_path / "trace.json"
    assert cli_main(["check", "no_space_guard", "--json"]) == 1
    saved.write_text(capsys.readouterr().out)
    assert cli_main(["replay", "no_space_guard", str(saved)]) == 1
    assert capsys.readouterr().out.count("<== ") == 1


# -- 5. fetch_into's count must say out was filled whole ---------------------------------------------------------


class _Records:
    """readinto-style records of 8 int64, filled with the item's index; the last one is short."""

    def __init__(self, n: int, short: int | None = None, count=lambda written, out: written):
        self.n, self.short, self.count = n, short, count

    def __len__(self) -> int:
        return self.n

    def fetch_into(self, i: int, out: np.ndarray):
        view = out.reshape(-1)
        take = view.size if i != self.short else view.size // 2
        view[:take] = i
        return self.count(take * out.itemsize, out)


@pytest.mark.parametrize("capacity", [1, 2])
def test_a_short_count_is_refused_not_the_old_bytes_delivered(capacity):
    # Before: the last batch came out as [4, 4, 4, 4, 3, 3, 3, 3]: half of it an earlier batch's bytes.
    got = []
    with Prefetcher(_Records(5, short=4), capacity=capacity, shape=(8,), dtype=np.int64, timeout=30) as pf:
        with pytest.raises(TypeError, match=r"item 4: fetch_into returned 32, a count that is not out's whole "
                                            r"\(64 bytes, 8 values, 8 rows\)"):
            for batch in pf:
                got.append(batch.tolist())
    assert got == [[i] * 8 for i in range(4)]


def test_a_short_count_is_refused_on_demand_too():
    with OnDemandPrefetcher(_Records(5, short=4), capacity=2, shape=(8,), dtype=np.int64, timeout=30) as pf:
        assert pf.get(2).tolist() == [2] * 8
        with pytest.raises(TypeError, match="a count that is not out's whole"):
            pf.get(4)


@pytest.mark.parametrize("count", [lambda w, out: out.nbytes, lambda w, out: out.size, lambda w, out: len(out),
                                   lambda w, out: np.int32(out.nbytes), lambda w, out: True],
                         ids=["bytes", "values", "rows", "numpy bytes", "a bool status"])
def test_a_whole_count_in_any_unit_is_fine(count):
    with Prefetcher(_Records(6, count=count), shape=(2, 4), dtype=np.int64, timeout=30) as pf:
        assert [b.tolist() for b in pf] == [[[i] * 4] * 2 for i in range(6)]


@pytest.mark.parametrize("count", [0, lambda w, out: np.int64(3)], ids=["0 at the end of a file", "numpy short"])
def test_zero_and_numpy_short_counts_are_refused(count):
    counting = count if callable(count) else (lambda w, out: count)
    with Prefetcher(_Records(3, count=counting), shape=(8,), dtype=np.int64, timeout=30) as pf:
        with pytest.raises(TypeError, match="a count that is not out's whole"):
            next(iter(pf))


class _IntLabels:
    """A 0-d int label stream written like __getitem__: it returns the label and leaves out as it was."""

    def __len__(self) -> int:
        return 4

    def fetch_into(self, i: int, out: np.ndarray) -> int:
        return [7, 3, 9, 5][i]


class _NanThenLabels:
    """A 0-d float stream: item 0 written as NaN, the others returned as ints, out left as it was."""

    def __len__(self) -> int:
        return 3

    def fetch_into(self, i: int, out: np.ndarray):
        if i == 0:
            out[...] = np.nan
            return None
        return i


def test_an_int_label_over_a_nan_left_in_the_slot_is_refused():
    # The fresh-eyes review: "did the call write out" compared values, and NaN != NaN read as written.
    with Prefetcher(_NanThenLabels(), capacity=1, shape=(), dtype=np.float64, timeout=30) as pf:
        it = iter(pf)
        assert np.isnan(next(it))
        with pytest.raises(TypeError, match="item 1: fetch_into returned 1 where out holds"):
            next(it)


def test_an_int_label_returned_for_a_0d_batch_is_refused_not_zeros():
    # Before: an int was a count whatever the batch, and every label came out as 0.
    with Prefetcher(_IntLabels(), shape=(), dtype=np.int64, timeout=30) as pf:
        with pytest.raises(TypeError, match=r"item 0: fetch_into returned 7 where out holds \S*0\S*, as before the "
                                            r"call: for a 0-d batch"):
            next(iter(pf))


# -- 6. the on-demand first read keeps the source's exception --------------------------------------------------


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str boom")


class _FailsFirst:
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> np.ndarray:
        raise _Unprintable()


def test_the_on_demand_first_read_keeps_an_unprintable_exception():
    # Before: formatting the message raised "str boom" in its place, cause and context lost.
    with pytest.raises(ValueError, match=r"reading source\[0\] to size the slot pool failed \(_Unprintable") as e:
        OnDemandPrefetcher(_FailsFirst(), capacity=2, timeout=30)
    assert isinstance(e.value.__cause__, _Unprintable)


# -- 7. on-demand statistics add up --------------------------------------------------------------------------------


class _FailsOnThrees:
    def __len__(self) -> int:
        return 20

    def fetch_into(self, i: int, out: np.ndarray) -> None:
        if i % 3 == 0:
            raise KeyError(f"bad {i}")
        out[...] = i


@pytest.mark.timeout(60)
def test_on_demand_outcomes_add_up_to_the_requests_when_speculation_fails():
    with OnDemandPrefetcher(_FailsOnThrees(), capacity=4, workers=2, predict="sequential", shape=(2,),
                            dtype=np.int64, timeout=30) as pf:
        assert pf.get(2).tolist() == [2, 2]  # speculation goes on from 3, whose fetch fails
        deadline = time.monotonic() + 20
        while ("FAILED", 3) not in pf.slots() and time.monotonic() < deadline:
            threading.Event().wait(0.001)  # polling observable state: the failed fetch, published
        assert ("FAILED", 3) in pf.slots()
        with pytest.raises(KeyError, match="bad 3"):
            pf.get(3)  # answered by that speculative fetch's error, ready
        stats = pf.stats
    assert (stats.requests, stats.errors) == (2, 1)
    # Before: a request answered by a failed speculative fetch counted in none of the three (1 of 2).
    assert stats.hits + stats.late_hits + stats.misses == stats.requests == 2


# -- 8. autotune grows a one-worker pipeline whose worker idles on a full buffer ---------------------------------


class _Bursty:
    """Free fetches, but every tenth takes 30 ms: a buffer deep enough absorbs the burst."""

    def __len__(self) -> int:
        return 60

    def fetch_into(self, i: int, out: np.ndarray) -> None:
        if i % 10 == 9:
            time.sleep(0.03)  # the source's slow read: the workload, not synchronization
        out[...] = i


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2])
def test_autotune_grows_when_the_workers_idled_before_the_consumer_waited(workers):
    # Before: with one worker, that worker was always mid-fetch when the consumer starved, so the tuner
    # never saw one "held back" and stayed at capacity 1 (the consumer waited a third of the run).
    out = np.empty(3, np.float32)
    with Prefetcher(_Bursty(), capacity=1, workers=workers, shape=(3,), dtype=np.float32, autotune=True,
                    max_capacity=12) as pf:
        n = 0
        while pf.copy_prefetched(out):
            assert out[0] == n
            n += 1
            time.sleep(0.003)  # the consumer's own work: the workload, not synchronization
        history = pf.capacity_history
    assert n == 60
    assert history and max(c for _t, _d, c in history) >= 3


# -- 9. the SPIN cross-check: agreement is the same errors in a state space of the same size ---------------------

needs_spin = pytest.mark.skipif(shutil.which("spin") is None or shutil.which("gcc") is None,
                                reason="spin and gcc are not installed (apt-get install spin gcc)")


def _one_cond_signal(edit) -> Twin:
    (twin,) = find_twins(["one_cond_signal"])
    source = edit(twin.source)
    assert source != twin.source
    return Twin(twin.name, source, parse_config_header(source))


@needs_spin
@pytest.mark.timeout(300)
def test_a_twin_that_reports_an_error_the_model_does_not_have_disagrees():
    # Before: the expected "invalid end state" was among SPIN's kinds, so "agree", whatever else SPIN found.
    row = crosscheck(_one_cond_signal(lambda s: s.replace("assert(count > 0)", "assert(count > 1)", 1)))
    assert not row.agree
    assert "assertion violated" in row.disagreement and "safeprefetch's full search invalid end state" in (
        row.disagreement)


@needs_spin
@pytest.mark.timeout(300)
def test_a_twin_of_another_configuration_disagrees():
    # The header says items=3, the Promela still encodes its own configuration: the same verdict by both
    # tools, over state spaces of different sizes. Before: "agree".
    row = crosscheck(_one_cond_signal(lambda s: re.sub(r"items=\d+", "items=3", s, count=1)))
    assert row.verdict == "deadlock" and not row.agree
    assert "the twin is not the model at this configuration" in row.disagreement


def test_a_pan_search_that_ran_out_of_memory_is_not_a_pass():
    report = """pan: out of memory
\thint: to reduce memory, recompile with
Warning: Search not completed
\t+ Partial Order Reduction

State-vector 48 byte, depth reached 9, errors: 0
        0 states, stored
        0 states, matched
        0 transitions (= stored+matched)
"""
    parsed = parse_pan_output(report)
    assert parsed.truncated and parsed.errors == 0
    row = CrossCheck("m", {}, "ok", None, 10, 10, parsed, parsed, spin_expected="ok")
    assert not row.agree and row.disagreement == "pan did not search to the end"


# -- 10. the command line: what it prints, its exit codes, what it may delete ---------------------------------------

HANDOFF = '''
import os
from safeprefetch.model import DONE, Model


class Handoff(Model):
    name = "handoff"
    params = {"act": "print"}

    def build(self, m, act):
        m.shared(count=0)

        def put(s, me):
            if act == "print":
                print("HELLO from the model")
                os.write(1, b"RAW to fd 1\\n")
            elif act == "loop":
                while True:
                    pass
            elif act == "base":
                raise BaseException("not an Exception")
            elif act == "fork":
                os.fork()
            s.count += 1

        p = m.program("producer")
        p.step("put", put, next=DONE)
        c = m.program("consumer")
        c.step("take", lambda s, me: setattr(s, "count", s.count - 1), guard=lambda s, me: s.count > 0, next=DONE)
        m.thread("producer0", p)
        m.thread("consumer0", c)
'''


def _cli(tmp_path, *argv, timeout=120):
    (tmp_path / "handoff.py").write_text(HANDOFF)
    return subprocess.run([sys.executable, "-m", "safeprefetch", *argv], cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("argv", [["check", "handoff.py", "--json"], ["run", "handoff.py", "--json"],
                                  ["docs", "graph", "handoff.py"]], ids=["check", "run", "docs graph"])
def test_json_output_is_the_document_alone_whatever_the_model_prints(tmp_path, argv):
    # Before: the model's print and its write to fd 1 came first on stdout, and json.loads failed (exit 0).
    done = _cli(tmp_path, *argv)
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)
    assert "HELLO from the model" in done.stderr and "RAW to fd 1" in done.stderr


def test_json_output_of_check_code_is_the_document_alone(tmp_path):
    (tmp_path / "t_print.py").write_text("import threading\n\n\ndef test_print():\n    print('chatty test')\n"
                                          "    t = threading.Thread(target=print, args=('chatty thread',))\n"
                                          "    t.start()\n    t.join()\n")
    done = subprocess.run([sys.executable, "-m", "safeprefetch", "check-code", "t_print.py::test_print", "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verdict"] == "ok"


def test_a_model_raising_a_base_exception_is_the_models_error(tmp_path):
    # Before: a traceback and exit 1, the code of a violation found.
    done = _cli(tmp_path, "check", "handoff.py", "--set", "act=base")
    assert done.returncode == 2 and "the model raised BaseException: not an Exception" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_model_that_forks_is_refused_not_a_fork_bomb(tmp_path):
    # Before: each child went on with the search, forked again, and printed its own verdict.
    done = _cli(tmp_path, "check", "handoff.py", "--set", "act=fork")
    assert done.returncode == 2 and "the model called os.fork()" in done.stderr, done.stderr
    assert "verdict" not in done.stdout


@pytest.mark.skipif(not hasattr(os, "forkpty"), reason="needs os.forkpty")
def test_a_model_that_forks_through_pty_is_refused_too(tmp_path):
    # The fresh-eyes review: pty.fork() is the standard library's, and os.forkpty was not replaced.
    (tmp_path / "handoff.py").write_text(HANDOFF.replace("os.fork()", "__import__('pty').fork()"))
    done = subprocess.run([sys.executable, "-m", "safeprefetch", "check", "handoff.py", "--set", "act=fork"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "the model called os.forkpty()" in done.stderr, done.stderr


def test_json_with_standard_output_closed_is_not_the_models_error(tmp_path):
    # The fresh-eyes review: sys.stdout is None there, and the redirection's flush raised, blamed on the model.
    done = subprocess.run([sys.executable, "-c", "import os, sys, runpy; os.close(1); sys.stdout = None; "
                           "sys.argv = ['safeprefetch', 'check', 'channel', '--json']; "
                           "runpy.run_module('safeprefetch', run_name='__main__')"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "raised" not in done.stderr, done.stderr


@pytest.mark.timeout(120)
def test_run_stops_at_its_timeout_when_a_step_never_returns(tmp_path):
    # Before: the timeout's fail() waited for the kernel lock the looping step held: the command hung.
    done = _cli(tmp_path, "run", "handoff.py", "--set", "act=loop", "--timeout", "1", "--attempts", "1",
                "--force", "never", timeout=100)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert "live timeout" in done.stdout and "left running: producer0" in done.stdout


def test_run_exit_codes_follow_checks(tmp_path, capsys):
    assert cli_main(["run", "prefetcher"]) == 0
    assert cli_main(["run", "one_cond_signal"]) == 1  # the bug, reproduced (forced)
    raises = tmp_path / "raises.py"
    raises.write_text(HANDOFF.replace('raise BaseException("not an Exception")', 'raise ValueError("boom")'))
    assert cli_main(["run", str(raises), "--set", "act=base", "--attempts", "1"]) == 2  # before: 1


def test_check_all_cut_short_is_incomplete_not_a_mismatch(capsys):
    # Before: exit 1 with NO for every bug the cap hid, though nothing disagreed.
    assert cli_main(["check", "--all", "--max-states", "10"]) == 3
    out = capsys.readouterr().out
    assert " cut" in out and " NO" not in out


def test_soak_refuses_a_missing_directory_and_a_storm_without_ctrl_c(capsys):
    # Before: every scenario failed writing its files, reported as the Prefetcher's failures (exit 1);
    # --storm without --ctrl-c was ignored.
    assert cli_main(["soak", "--scenarios", "2", "--dir", "/nonexistent/dir"]) == 2
    assert "--dir /nonexistent/dir: not a directory" in capsys.readouterr().err
    assert cli_main(["soak", "--scenarios", "2", "--storm", "5"]) == 2
    assert "without --ctrl-c" in capsys.readouterr().err


def test_small_arguments_are_refused_not_replaced(capsys):
    assert cli_main(["check", "one_cond_signal", "--svg", ""]) == 2
    assert "--svg needs a file name" in capsys.readouterr().err
    assert cli_main(["bench", "predict", "--requests", "-5"]) == 2
    assert "--requests must be at least 1" in capsys.readouterr().err


def test_explain_at_a_configuration_without_the_bug_does_not_tell_it_as_found(capsys):
    assert cli_main(["explain", "one_cond_signal", "--set", "capacity=2"]) == 0
    out = capsys.readouterr().out
    assert "NOTE: the model declares 'deadlock'; the checker says 'ok' at this configuration" in out
    assert "At its declared configuration (deadlock): Consumer A" in out


def test_play_with_standard_input_closed_says_so(tmp_path):
    done = subprocess.run([sys.executable, "-m", "safeprefetch", "play", "one_cond_signal"], cwd=tmp_path,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0  # (end of input)
    closed = subprocess.run([sys.executable, "-c", "import os, sys, runpy; os.close(0); sys.stdin = None; "
                             "sys.argv = ['safeprefetch', 'play', 'one_cond_signal']; "
                             "runpy.run_module('safeprefetch', run_name='__main__')"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert closed.returncode == 2 and "standard input, which is closed" in closed.stderr, closed.stderr


def test_docs_build_refuses_a_folder_with_an_index_html_it_did_not_build(tmp_path):
    from safeprefetch._tools.site import SiteError, build_site, require_mkdocs

    try:
        require_mkdocs()
    except Exception as e:  # noqa: BLE001 - the docs extra is not installed
        pytest.skip(str(e))
    www = tmp_path / "www"
    (www / "photos").mkdir(parents=True)
    (www / "index.html").write_text("mine")
    (www / "precious.txt").write_text("mine")
    # Before: an index.html was taken for a built site, and MkDocs emptied the folder.
    with pytest.raises(SiteError, match="not a site this command built"):
        build_site(www, models=["prefetcher"])
    assert (www / "precious.txt").read_text() == "mine" and (www / "photos").is_dir()


def test_play_reads_a_line_with_no_end_in_bounded_pieces(tmp_path):
    # Before: one readline of a stream with no line end (/dev/zero) grew until memory ran out.
    long_line = subprocess.run([sys.executable, "-m", "safeprefetch", "play", "one_cond_signal"], cwd=tmp_path,
                               input="7" * 10_000 + "\nq\n", capture_output=True, text=True, timeout=60)
    assert long_line.returncode == 0 and long_line.stdout.count("unknown command") == 1, long_line.stdout[-500:]
    endless = subprocess.run([sys.executable, "-m", "safeprefetch", "play", "one_cond_signal"], cwd=tmp_path,
                             input="0" * 2_000_000, capture_output=True, text=True, timeout=60)
    assert endless.returncode == 0 and "(end of input)" in endless.stdout


# -- 11. NpyFiles: a shard written over while it is read, errors that name no file --------------------------------


def _rewritten_while_read(monkeypatch, tmp_path, new: np.ndarray) -> tuple[NpyFiles, np.ndarray]:
    """A shard of float32 1.0, written over with ``new`` by np.save right after its header is parsed (as
    another process's np.save lands between the two reads); its times set back first, as an older file's."""
    path = tmp_path / "shard.npy"
    np.save(path, np.ones(4096, np.float32))
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    real = np.lib.format.read_array_header_1_0

    def header_then_rewrite(f, *args, **kwargs):
        header = real(f, *args, **kwargs)
        np.save(path, new)
        return header

    monkeypatch.setattr(np.lib.format, "read_array_header_1_0", header_then_rewrite)
    return NpyFiles([path]), np.empty(4096, np.float32)


@pytest.mark.parametrize("new", [np.full(4096, 2, np.int32), np.full(4096, 2.0, np.float32)],
                         ids=["int32 bits under a float32 header", "new values under the old header"])
def test_a_shard_written_over_while_it_is_read_is_refused(monkeypatch, tmp_path, new):
    # Before: the new data was read under the old header (int32 2 delivered as float32 2.8e-45), or the
    # batch was two versions stitched together, silently.
    source, out = _rewritten_while_read(monkeypatch, tmp_path, new)
    with pytest.raises(ValueError, match="the file changed while it was read"):
        source.fetch_into(0, out)


def test_getitem_refuses_a_shard_written_over_while_it_is_read(monkeypatch, tmp_path):
    # The review of the second commit: fetch_into refused it, __getitem__ (np.load's own header reader, at
    # the same moment) still delivered it.
    path = tmp_path / "shard.npy"
    np.save(path, np.ones(4096, np.float32))
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    where = np.lib.format.read_array.__globals__  # (numpy's implementation module, whatever its name)
    real = where["_read_array_header"]

    def header_then_rewrite(*args, **kwargs):
        header = real(*args, **kwargs)
        np.save(path, np.full(4096, 2, np.int32))
        return header

    monkeypatch.setitem(where, "_read_array_header", header_then_rewrite)
    with pytest.raises(ValueError, match="the file changed while it was read"):
        NpyFiles([path])[0]


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("change", ["rename a new shard into place", "chmod", "hard link", "utime"])
def test_a_shard_whose_data_did_not_change_under_the_read_is_delivered(monkeypatch, tmp_path, order, change):
    # The review of the second commit: the inode change time was compared too, and the very practice the
    # error recommends (a new shard renamed into place) was refused (3% of reads in a race), as were chmod, a
    # hard link and utime, which leave the data alone; the Fortran-order path stat'ed the path again.
    path = tmp_path / "shard.npy"
    ones = np.ones((64, 64), np.float32)
    np.save(path, np.asfortranarray(ones) if order == "F" else ones)
    real = np.lib.format.read_array_header_1_0

    def header_then_change(f, *args, **kwargs):
        header = real(f, *args, **kwargs)
        if change == "chmod":
            os.chmod(path, 0o600)
        elif change == "hard link":
            os.link(path, tmp_path / "snapshot.npy")
        elif change == "utime":
            os.utime(path, ns=(1, os.stat(path).st_mtime_ns))  # the access time: the data stays
        else:
            np.save(tmp_path / "new.npy", np.full((64, 64), 2, np.float32))
            os.replace(tmp_path / "new.npy", path)
        return header

    monkeypatch.setattr(np.lib.format, "read_array_header_1_0", header_then_change)
    out = np.empty((64, 64), np.float32)
    NpyFiles([path]).fetch_into(0, out)
    assert np.unique(out).tolist() == [1.0]  # the file the read opened, whole


def test_an_unchanged_shard_still_reads(tmp_path):
    path = tmp_path / "shard.npy"
    np.save(path, np.arange(6, dtype=np.int64))
    out = np.empty(6, np.int64)
    NpyFiles([path]).fetch_into(0, out)
    assert out.tolist() == list(range(6))


def test_a_header_that_does_not_close_and_a_pipe_name_their_file(tmp_path):
    bad = tmp_path / "bad.npy"
    np.save(bad, np.ones(3, np.float32))
    raw = bad.read_bytes()
    bad.write_bytes(raw.replace(b"'descr'", b"('descr'", 1))  # an unclosed bracket: tokenize's error
    out = np.empty(3, np.float32)
    # Before: tokenize.TokenError, naming no file and not a ValueError.
    with pytest.raises(ValueError, match=rf"^{re.escape(str(bad))}: "):
        NpyFiles([bad]).fetch_into(0, out)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(bad))}: "):
        NpyFiles([bad])[0]
    if not hasattr(os, "mkfifo"):
        return
    fifo = tmp_path / "pipe.npy"
    os.mkfifo(fifo)
    def write():
        with contextlib.suppress(OSError):  # the reader gives up at its first seek: a broken pipe here
            fifo.write_bytes(raw)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        # Before: OSError "[Errno 29] Illegal seek", with no file named.
        with pytest.raises(OSError, match=rf"{re.escape(str(fifo))}: Illegal seek"):
            NpyFiles([fifo]).fetch_into(0, out)
    finally:
        writer.join(10)


# -- 12. play, the terminal game: the same policy and the same starvation as the checker and the page ------------


@pytest.mark.parametrize("name,victim", [("priority_inversion", "consumer0"), ("reader_preference_rwlock", "writer0")])
def test_play_reports_the_checkers_starvation_lasso(name, victim):
    # Before: play offered a low-priority thread's step while a higher one was ready, and a closed starving
    # cycle ended "unfinished" (exit 0), where the checker and the playground page report starvation.
    model = catalog()[name]
    result = check(model.compile({}))
    numbers = choice_numbers(model.compile({}), result.trace)
    done = subprocess.run([sys.executable, "-m", "safeprefetch", "play", name], capture_output=True, text=True,
                          input="".join(f"{n}\n" for n in numbers), timeout=60)
    assert done.returncode == 1
    assert done.stdout.rstrip().endswith(f"starvation: {victim} never makes progress"), done.stdout[-800:]
    if name == "priority_inversion":
        last_board = done.stdout.rsplit("-- after", 1)[1]
        # (The review of the second commit: the last board called the held thread "(stopped)".)
        assert "(held) unlock -- a thread of higher priority is ready" in last_board
        assert "(stopped)" not in last_board


def test_the_playground_names_the_victim_the_checker_names():
    from safeprefetch._tools.playground import export_graph

    machine = catalog()["priority_inversion"].compile({})
    victims = export_graph(machine)["victims"]
    assert machine.thread_names[victims[0]] == "consumer0"  # the checker's: the most important first

"""The checker's thirteenth-round fixes (docs/hardening.md, "A thirteenth round").

Each test failed on the code before its fix.
"""

import signal
import subprocess
import sys

import pytest

from safeprefetch import ModelError, NondeterministicModel
from safeprefetch._check.trace import render_result
from safeprefetch._check.explore import Explorer, check
from safeprefetch.model import DONE, Model

from _polling import wait_until
from test_checker_review12 import Box, fanned
from test_shards import assert_sequential, partitioned

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("store", ["full", "fingerprint"])
@pytest.mark.parametrize("nproc", [1, 2, 3])
@pytest.mark.parametrize("width", [3, 7])
def test_1_a_partitioned_search_cut_inside_a_level_reports_the_shortest_violation(width, nproc, store):
    # Before: with the cap inside level 1 past the first fanned state, the shards reported "invariant, 2
    # steps" where sequential BFS (which judges the rest of the level's stuck states) says "deadlock, 1 step".
    machine = fanned(width).compile({})
    lates = 0
    for cap in range(1, width + 9):
        seq = Explorer(machine, reduce="none", max_states=cap).run()
        levels = partitioned(machine, nproc, store=store, max_states=cap)
        assert_sequential(levels, seq)
        lates += seq.verdict == "deadlock" and not levels.exhaustive  # found in the level's unstored rest
    assert lates >= width - 1


class SameRepr(Box):
    """A hashable object whose repr does not show its value."""

    def __repr__(self):
        return "SameRepr"


class HashOnly(Model):
    """A step changes ``box`` in place, and only its hash shows it."""

    name = "hash_only"
    params = {}

    def build(self, m):
        m.shared(a=0, box=SameRepr(0))

        def bump(s, me):
            s.box.v += 1

        p = m.program("w")
        p.step("bump", bump, next=DONE)
        m.thread("t0", p)


@pytest.mark.parametrize("store", ["full", "fingerprint"])
def test_2_a_change_in_place_only_the_hash_shows_names_the_field_that_changed(store):
    # Before: "field 'a' was 0 before ... and 0 after": the first field, which had not changed.
    with pytest.raises(NondeterministicModel, match=r"field 'box' was SameRepr before .* and SameRepr \(the same "
                                                    r"repr, but its hash changed from 0 to 2\) after"):
        check(HashOnly, reduce="none", store=store, progress_every=1e9)


class PrivateThenBump(Model):
    """t0 takes six private steps; t1 and t2 each take two, then bump ``x``: two bumps break ``x < 2``. The
    shortest violation is 6 steps; partial-order reduction finds one of 12 (t0's steps first)."""

    name = "private_then_bump"
    params = {}

    def build(self, m):
        m.shared(x=0)

        def private(s, me):
            me.c += 1

        def bump(s, me):
            s.x += 1

        idle = m.program("idle", c=0)
        idle.step("idle", private, next=lambda s, me: "idle" if me.c < 6 else DONE, to=["idle", DONE])
        p = m.program("p", c=0)
        p.step("local", private, next=lambda s, me: "local" if me.c < 2 else "bump", to=["local", "bump"])
        p.step("bump", bump, next=DONE)
        m.thread("t0", idle)
        m.thread("t1", p)
        m.thread("t2", p)
        m.invariant("x < 2", lambda s: s.x < 2)


@pytest.mark.parametrize("reduce", ["por", "all"])
@pytest.mark.parametrize("store", ["full", "fingerprint"])
def test_3_a_reduced_trace_not_known_to_be_shortest_is_not_called_shortest(reduce, store):
    # Before: "invariant ... exhaustive, shortest trace: 12 steps" under the cap: the search again without the
    # reduction (for the shortest trace) had stopped at the same cap, and its silence was taken for a yes.
    full = check(PrivateThenBump, reduce="none", store=store, progress_every=1e9)
    assert (full.verdict, len(full.violation.trace.steps)) == ("invariant", 6)
    capped = check(PrivateThenBump, reduce=reduce, store=store, progress_every=1e9, max_states=40)
    assert capped.verdict == "invariant" and len(capped.violation.trace.steps) > 6
    assert not capped.exhaustive and capped.stop_reason == "max_states"
    assert "may not be a shortest one" in capped.stop_message
    assert capped.stop_message.endswith("(stopped at the state cap, max_states=40)")  # the search again's reason
    assert "\ntrace: " in render_result(capped, PrivateThenBump.compile())  # not "shortest trace: "
    # A cap the search again fits under: the shortest trace, exhaustive as far as it needed.
    roomy = check(PrivateThenBump, reduce=reduce, store=store, progress_every=1e9, max_states=200)
    assert (roomy.verdict, len(roomy.violation.trace.steps), roomy.exhaustive) == ("invariant", 6, True)


def test_4_a_thread_local_named_like_what_checks_read_of_a_thread_is_refused():
    # Before: an end check's ``t.done`` was "has the thread ended" (True), not the local ``done`` the thread
    # counted its jobs in: a false violation, or a false ok (True == 1); ``t.pc`` the step label.
    for name in ("done", "pc", "_s", "_t", "_where"):  # the last three: a thread view's own fields
        class Counting(Model):
            name_ = name

            def build(self, m):
                m.shared(total=0)
                p = m.program("worker", **{self.name_: 0})
                p.step("work", lambda s, me: setattr(s, "total", 1), next=DONE)
                m.thread("w0", p)
                m.at_end(lambda s, threads: None)

        Counting.name = f"local_{name}"
        with pytest.raises(ModelError, match=f"thread 'w0': local '{name}' is reserved"):
            Counting.compile()


SPIN_IN_STEP = '''
from safeprefetch.model import DONE, Model

class SpinInStep(Model):
    name = "spin_in_step"
    params = {}

    def build(self, m):
        m.shared(ready=False)

        def wait_ready(s, me):
            open(MARKER, "w").close()
            while not s.ready:  # an atomic step: nothing else runs, it never returns
                pass

        c = m.program("consumer")
        c.step("wait", wait_ready, next=DONE)
        m.thread("consumer", c)
'''


def test_5_ctrl_c_in_a_step_that_never_returns_says_where_it_was(tmp_path):
    # Before: "interrupted", and nothing else: no step, no line.
    path, marker = tmp_path / "spin_in_step.py", tmp_path / "spinning"
    path.write_text(f"MARKER = {str(marker)!r}\n" + SPIN_IN_STEP)
    # The CLI as `python -m safeprefetch check`, with Python's SIGINT handler installed first: a process started
    # in the background without job control has SIGINT ignored, and then Python installs none.
    cli = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
           "sys.argv = ['safeprefetch', 'check', sys.argv[1]]; runpy.run_module('safeprefetch', run_name='__main__')")
    child = subprocess.Popen([sys.executable, "-c", cli, str(path)], stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: marker.exists() or child.poll() is not None, 60)  # in the step
        assert child.poll() is None, child.stderr.read()
        child.send_signal(signal.SIGINT)
        assert child.wait(60) == 130
        # The step's last three lines (the marker's, the loop's two): the interrupt lands on one of them.
        assert child.stderr.read().strip() in {f"interrupted in the model code at {path}:{n}" for n in (13, 14, 15)}
    finally:
        child.kill()
        child.wait()

"""Runs: the consumer taking several ready batches in one step.

The live Prefetcher amortizes the kernel's per-step cost over cheap batches
by taking the reference model's "take up to r" branches (models/prefetcher.py,
parameter ``run``) for a fast caller. Those branches are part of the checked
model, so they are proven here like the rest of it:

* the reference model with runs is ok, exhaustively and with no reduction,
  over a sweep of shapes and every injection (close, error, abandon), with
  its state counts pinned in ``data/prefetcher_runs_states.json``
  (regenerate deliberately with ``python tests/test_prefetcher_runs.py
  --regenerate``). ``run=capacity`` explores every run length at once: the
  branches "up to 1" .. "up to capacity" are all there at every take;
* with ``run=1`` the model is the one without runs (the pinned counts of
  tests/test_prefetcher_model.py are unchanged);
* an iterator source (``sized=off``), a fetch error at a fixed index
  (``error_at``) and autotune, each with runs;
* mutations of the run logic, applied to a copy of the model file on disk,
  are caught with their exact verdict and shortest trace;
* live, on real threads: a fast caller really takes runs, a slow one does
  not, every step the runtime takes conforms to the model, and a source whose
  next item waits for the caller to receive the previous one does not hang
  (workers publish every batch before calling the source again).
"""

import itertools
import json
import sys
from pathlib import Path

import pytest

from safeprefetch import check, load_model

DATA = Path(__file__).parent / "data" / "prefetcher_runs_states.json"
MODEL_FILE = Path(__file__).parent.parent / "models" / "prefetcher.py"
PREFETCHER = load_model("prefetcher")
FLAGS = ("close", "error", "abandon", "ordered")


def configs(items=(0, 1, 2, 3, 4)):
    for capacity in (2, 3):
        for workers, n in itertools.product((1, 2, 3), items):
            for flags in itertools.product((False, True), repeat=len(FLAGS)):
                yield {"capacity": capacity, "run": capacity, "workers": workers, "items": n, **dict(zip(FLAGS, flags))}


def key(cfg):
    return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in cfg.items())


PINNED = json.loads(DATA.read_text()) if DATA.exists() else {}
FAST = [c for c in configs() if c["items"] <= 3]
SLOW = [c for c in configs() if c["items"] > 3]


def _proved(cfg):
    result = check(PREFETCHER, cfg, reduce="none")  # the full state space
    assert result.exhaustive
    assert result.verdict == "ok", result.violation and result.violation.message
    assert result.states == PINNED[key(cfg)], "state space changed: regenerate the pinned counts deliberately"
    return result


@pytest.mark.parametrize("cfg", FAST, ids=key)
def test_runs_are_ok_exhaustively(cfg):
    _proved(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("cfg", SLOW, ids=key)
def test_runs_are_ok_exhaustively_four_items(cfg):
    _proved(cfg)


def test_the_pinned_sweep_is_complete():
    assert set(PINNED) == {key(c) for c in configs()}
    assert len(PINNED) == 2 * 3 * 5 * 2 ** 4


def test_runs_add_states_and_run_1_is_the_model_without_runs():
    base = {"capacity": 2, "workers": 2, "items": 3, "close": True, "error": True}
    without = check(PREFETCHER, base, reduce="none")
    assert check(PREFETCHER, {**base, "run": 1}, reduce="none").states == without.states
    with_runs = check(PREFETCHER, {**base, "run": 2}, reduce="none")
    assert with_runs.verdict == "ok" and with_runs.states > without.states


def test_runs_really_happen_in_the_model():
    """A run of two is taken and released: the branches are live, not dead code."""
    from safeprefetch._check.explore import Explorer

    machine = PREFETCHER.compile({"capacity": 2, "run": 2, "workers": 1, "items": 2})
    explorer = Explorer(machine)
    explorer.run()
    leases = machine.local_index[machine.thread_names.index("consumer")]["lease"]
    assert any(len(s[leases]) == 2 for s in explorer.parents)


@pytest.mark.parametrize("items", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("close", [False, True])
def test_runs_with_an_iterator_source(items, close):
    result = check(PREFETCHER, {"capacity": 3, "run": 3, "workers": 1, "items": items, "sized": False,
                                "close": close, "error": True}, reduce="none")
    assert result.verdict == "ok" and result.exhaustive


@pytest.mark.parametrize("error_at", [0, 1, 2, 3])
@pytest.mark.parametrize("workers", [1, 2])
def test_runs_with_an_error_at_a_fixed_index(error_at, workers):
    result = check(PREFETCHER, {"capacity": 3, "run": 3, "workers": workers, "items": 4, "error_at": error_at},
                   reduce="none")
    assert result.verdict == "ok" and result.exhaustive


@pytest.mark.parametrize("target", [1, 3])
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("injection", ["none", "close", "error"])
def test_runs_with_autotune(target, workers, injection):
    cfg = {"capacity": 3, "run": 3, "workers": workers, "items": 3, "autotune": True, "target": target}
    if injection != "none":
        cfg[injection] = True
    result = check(PREFETCHER, cfg, reduce="none")
    assert result.verdict == "ok" and result.exhaustive


def test_run_longer_than_the_pool_is_refused():
    from safeprefetch import ModelError

    with pytest.raises(ModelError, match="run"):
        PREFETCHER.compile({"capacity": 2, "run": 3})


# -- teeth: the checker catches bugs in the run logic --------------------------------------------

MUTATIONS = {
    # The consumer gives back only the first slot of its run: the rest stay leased forever.
    "release frees only the first lease": (
        "            for k in me.lease:\n",
        "            for k in me.lease[:1]:\n",
        {"capacity": 2, "run": 2, "workers": 1, "items": 3},
        "invariant", 9),
    # A run taken past a failed slot: the consumer delivers around the error and never raises it.
    "take runs past a failed batch": (
        "                if k is None or slots[k][0] == FAILED:\n",
        "                if k is None:\n",
        {"capacity": 2, "run": 2, "workers": 1, "items": 2, "error_at": 1},
        "error_lost", 8),
    # The run's next batch is looked up one index too far: it takes 0 and 2, then waits for 2 forever.
    "a run skips an index": (
        "                k = next_slot(slots, delivered)\n",
        "                k = next_slot(slots, delivered + 1)\n",
        {"capacity": 3, "run": 3, "workers": 1, "items": 3},
        "deadlock", 9),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_a_broken_run_is_caught_with_its_shortest_trace(name, tmp_path):
    old, new, cfg, verdict, length = MUTATIONS[name]
    text = MODEL_FILE.read_text()
    assert text.count(old) == 1, "the mutation no longer applies: update it with the model"
    path = tmp_path / "prefetcher_mutant.py"
    path.write_text(text.replace(old, new))
    mutant = load_model(str(path))
    assert check(PREFETCHER, cfg).verdict == "ok"
    result = check(mutant, cfg)
    assert result.verdict == verdict, result.violation and result.violation.message
    assert len(result.violation.trace.steps) == length


if __name__ == "__main__" and "--regenerate" in sys.argv:
    DATA.write_text(json.dumps({key(c): check(PREFETCHER, c, reduce="none").states for c in configs()}, indent=0,
                               sort_keys=True) + "\n")


# -- live: the Prefetcher takes runs, and every step it takes is one the model allows ----------

import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from safeprefetch.testing import recording_runtimes  # noqa: E402
from safeprefetch import Prefetcher  # noqa: E402
from safeprefetch.lowlevel import verify_record  # noqa: E402


class Boom(Exception):
    pass


class Cheap:
    """A map-style source with ``fetch_into``: item i is ``[i, i, i, i]``; item ``bad`` raises; ``delay`` seconds each."""

    def __init__(self, n, bad=-1, delay=0.0):
        self.n, self.bad, self.delay = n, bad, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        out = np.empty(4, np.float32)
        self.fetch_into(i, out)
        return out

    def fetch_into(self, i, out):
        if self.delay:
            time.sleep(self.delay)
        if i == self.bad:
            raise Boom(i)
        out[...] = i


@pytest.fixture
def recorded():
    with recording_runtimes() as runtimes:
        yield runtimes


def _branches(rt, thread_prefix):
    names = rt.machine.thread_names
    return [rt.trace().steps[i].branch for i, (t, _b, _n) in enumerate(rt.record)
            if names[t].startswith(thread_prefix)]


def _run_lengths(branches, prefix):
    return [int(b.rsplit(" ", 1)[1]) for b in branches if b and b.startswith(prefix)]


@pytest.mark.live
@pytest.mark.timeout(60)
def test_cheap_batches_go_in_runs_and_every_step_conforms(recorded):
    out = np.empty(4, np.float32)
    got = []
    with Prefetcher(Cheap(400), capacity=8, shape=(4,), dtype=np.float32) as pf:
        while pf.copy_prefetched(out):
            got.append(int(out[0]))
    assert got == list(range(400))
    (rt,) = recorded
    report = verify_record(rt.machine, rt.record)
    assert report.ok, report.message
    takes = _run_lengths(_branches(rt, "consumer"), "take up to ")
    assert max(takes) > 1, takes[:20]
    # Fewer kernel steps than one claim, fetch, take and release per batch: the consumer's
    # two steps per run, not per batch.
    assert len(rt.record) < 3 * 400


@pytest.mark.live
@pytest.mark.timeout(60)
def test_slow_batches_go_one_at_a_time(recorded):
    out = np.empty(4, np.float32)
    with Prefetcher(Cheap(12, delay=0.002), capacity=4, shape=(4,), dtype=np.float32) as pf:
        n = 0
        while pf.copy_prefetched(out):
            time.sleep(0.002)
            n += 1
    assert n == 12
    (rt,) = recorded
    assert verify_record(rt.machine, rt.record).ok
    assert set(_run_lengths(_branches(rt, "consumer"), "take up to ")) == {1}


@pytest.mark.live
@pytest.mark.timeout(60)
def test_a_request_response_source_does_not_hang():
    """Each item exists only once the caller has received the one before (after a cheap warm-up, so the
    consumer is fast enough to take runs): a worker sitting on a fetched batch while it asks the source for
    the next one would hang here. Workers publish every batch before calling the source again."""
    import queue

    requests: queue.Queue = queue.Queue()
    for i in range(40):
        requests.put(i)

    def stream():
        while True:
            i = requests.get(timeout=10)
            if i is None:
                return
            yield np.full(4, i, np.float32)

    got = []
    with recording_runtimes() as runtimes, Prefetcher(stream(), capacity=8) as pf:
        for _ in range(70):
            got.append(int(pf.get(timeout=5)[0]))
            if len(got) >= 40:
                requests.put(len(got))  # the next item, now that this one has arrived
        requests.put(None)
    assert got == list(range(70))
    (rt,) = runtimes
    assert verify_record(rt.machine, rt.record).ok


@pytest.mark.live
@pytest.mark.timeout(120)
@settings(max_examples=25, deadline=None)
@given(capacity=st.integers(1, 6), workers=st.integers(1, 3), n=st.integers(0, 40), ordered=st.booleans(),
       bad=st.one_of(st.just(-1), st.integers(0, 39)), close_after=st.one_of(st.just(-1), st.integers(0, 40)),
       api=st.sampled_from(["copy", "get", "lease", "mixed"]))
def test_runs_deliver_exactly_and_conform(capacity, workers, n, ordered, bad, close_after, api):
    """Any shape, error position and close point: the batches that arrive are the right ones, each once, in
    order when ordered, the error at its position, and every step the runtime took is one the model allows."""
    with recording_runtimes() as runtimes:
        pf = Prefetcher(Cheap(n, bad=bad), capacity=capacity, workers=workers, ordered=ordered, shape=(4,),
                        dtype=np.float32)
    got, raised = [], None
    out = np.empty(4, np.float32)
    with pf:
        try:
            k = 0
            while close_after < 0 or k < close_after:
                mode = api if api != "mixed" else ("copy", "get", "lease")[k % 3]
                if mode == "copy":
                    if not pf.copy_prefetched(out):
                        break
                    got.append(int(out[0]))
                elif mode == "get":
                    got.append(int(pf.get()[0]))
                else:
                    with pf.lease() as arr:
                        got.append(int(arr[0]))
                k += 1
        except StopIteration:
            pass
        except Boom as e:
            raised = e.args[0]
    expected_n = n if not 0 <= bad < n else bad
    if ordered:
        assert got == list(range(len(got)))
    assert len(set(got)) == len(got) and all(0 <= i < n and i != bad for i in got)
    if close_after < 0 or close_after > n:
        assert len(got) == expected_n or (not ordered and raised is not None)
        assert raised == (bad if 0 <= bad < n else None)
    (rt,) = runtimes
    report = verify_record(rt.machine, rt.record)
    assert report.ok, report.message

"""Autotune: the resize steps are part of the checked model, and the live Prefetcher stays inside its budget.

The model half proves, exhaustively over a sweep, that a tuner growing or
shrinking the target at *any* point (workers blocked on a full buffer, a
lease held, an error published, close in progress) never deadlocks and
never loses, duplicates or reorders an item. Each config's distinct-state
count is pinned in ``data/prefetcher_autotune_states.json`` (regenerate
deliberately with ``python tests/test_prefetcher_autotune.py --regenerate``).
A deliberately broken resize (a shrink that drops a buffered batch to give
memory back) is caught, so the sweep has teeth.

The live half checks that capacity really changes, never leaves
``1..max_capacity``, never exceeds ``memory_budget``, and that a grow while
every worker is blocked on a full buffer wakes them.
"""

import itertools
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from safeprefetch import Prefetcher, check, load_model
from safeprefetch.lowlevel import run_live
from safeprefetch.model import DONE

DATA = Path(__file__).parent / "data" / "prefetcher_autotune_states.json"
MODEL = load_model("prefetcher")
INJECTIONS = {"none": {}, "close": {"close": True}, "error": {"error": True}, "abandon": {"abandon": True},
              "all": {"close": True, "error": True, "abandon": True}}


def configs():
    for cap, workers, items, ordered, inj, start in itertools.product(
            [2, 3], [1, 2, 3], [0, 1, 2, 3], [True, False], INJECTIONS, ["low", "high"]):
        yield {"capacity": cap, "workers": workers, "items": items, "ordered": ordered, "autotune": True,
               "target": 1 if start == "low" else cap, **INJECTIONS[inj]}


def key(cfg):
    return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in cfg.items())


PINNED = json.loads(DATA.read_text()) if DATA.exists() else {}


def test_every_autotune_config_is_pinned():
    assert sorted(PINNED) == sorted(key(c) for c in configs())


@pytest.mark.parametrize("cfg", list(configs()), ids=key)
def test_resizing_at_any_point_never_deadlocks_or_loses_items(cfg):
    result = check(MODEL, cfg, reduce="none")
    assert result.exhaustive
    assert result.verdict == "ok", result.violation and result.violation.message
    assert result.states == PINNED[key(cfg)], "state space changed: regenerate the pinned counts deliberately"


def test_autotune_off_leaves_the_state_space_alone():
    """autotune=off compiles exactly the model the pinned prefetcher counts describe: no tuner, a fixed target."""
    from safeprefetch._check.explore import Explorer

    machine = MODEL.compile({"capacity": 2, "workers": 2, "items": 3})
    assert "tuner" not in machine.thread_names
    explorer = Explorer(machine)
    explorer.run()
    target = machine.shared_index["target"]
    assert {s[target] for s in explorer.parents} == {2}  # the whole pool, in every reachable state
    tuned = MODEL.compile({"capacity": 2, "workers": 2, "items": 3, "autotune": True})
    assert "tuner" in tuned.thread_names and tuned.shared_index["target"] >= 0


def test_the_tuner_really_resizes_in_the_search():
    """Every target in 1..capacity is reached, so the sweep is not vacuous."""
    from safeprefetch._check.explore import Explorer

    machine = MODEL.compile({"capacity": 3, "workers": 2, "items": 3, "autotune": True})
    e = Explorer(machine)
    e.run()
    i = machine.shared_index["target"]
    assert {s[i] for s in e.parents} == {1, 2, 3}


class EvictingShrink(MODEL):
    """A broken resize: shrinking "gives memory back" by dropping the newest buffered batch."""

    name = "prefetcher_evicting_shrink"

    def build(self, m, **config):
        super().build(m, **config)

        def resize(s, me, branch):
            if branch == "grow":
                s.target += 1
            elif branch == "shrink":
                s.target -= 1
                ready = [(i, k) for k, (st, i) in enumerate(s.slots) if st == 2]
                if ready:
                    _, k = max(ready)
                    s.slots = s.slots[:k] + ((0, -1),) + s.slots[k + 1:]
            else:
                return DONE
            return "resize"

        m.programs["tuner"].specs["resize"].fn = resize


@pytest.mark.parametrize("ordered,verdict", [(True, "deadlock"), (False, "deadlock")])
def test_a_shrink_that_drops_a_buffered_batch_is_caught(ordered, verdict):
    # The consumer counts what it was given, so it waits forever for the batch that was dropped.
    result = check(EvictingShrink, {"capacity": 2, "workers": 1, "items": 2, "autotune": True, "target": 2,
                                    "ordered": ordered})
    assert result.verdict == verdict
    assert any(step.branch == "shrink" for step in result.trace.steps)


@pytest.mark.live
@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", range(4))
def test_free_live_runs_with_a_random_tuner_finish_and_conform(seed):
    machine = MODEL.compile({"capacity": 3, "workers": 2, "items": 5, "autotune": True, "close": True,
                             "error": True})
    live = run_live(machine, seed=seed, timeout=20)
    assert live.verdict == "ok", live.message
    assert live.conforms


class Jittery:
    """A map-style source whose fetch is usually fast and sometimes slow (seeded)."""

    def __init__(self, n, fast=0.0005, slow=0.008, every=5):
        self.n, self.fast, self.slow, self.every = n, fast, slow, every

    def __len__(self):
        return self.n

    def fetch_into(self, i, out):
        time.sleep(self.slow if i % self.every == 0 else self.fast)
        out[...] = i


@pytest.mark.live
@pytest.mark.timeout(60)
def test_live_autotune_grows_and_stays_within_the_memory_budget():
    shape, dtype = (64,), np.float32
    batch = 64 * 4
    budget = 5 * batch + 7  # room for 5 slots
    out = np.empty(shape, dtype)
    with Prefetcher(Jittery(300), capacity=1, workers=2, shape=shape, dtype=dtype, autotune=True,
                    memory_budget=budget) as pf:
        assert pf.max_capacity == 5 and pf.capacity == 1
        n = 0
        while pf.copy_prefetched(out):
            assert out[0] == n
            assert 1 <= pf.capacity <= pf.max_capacity
            n += 1
            time.sleep(0.002)
        assert n == 300
        history = pf.capacity_history
        stats = pf.stats
    assert history, "autotune never changed the capacity"
    assert all(1 <= c <= 5 for _t, _d, c in history)
    assert max(c for _t, _d, c in history) > 1
    assert stats.max_capacity == 5 and stats.capacity_changes == len(history)
    assert pf.max_capacity * batch <= budget


@pytest.mark.live
@pytest.mark.timeout(60)
def test_live_autotune_shrinks_a_buffer_that_stays_full():
    shape, dtype = (8,), np.float32
    out = np.empty(shape, dtype)
    with Prefetcher(Jittery(400, fast=0.0, slow=0.0), capacity=6, workers=1, shape=shape, dtype=dtype,
                    autotune=True, max_capacity=6) as pf:
        while pf.copy_prefetched(out):
            time.sleep(0.0005)  # the consumer is the bottleneck: the buffer stays full
        final = pf.capacity
    assert final < 6
    assert any(c < 6 for _t, _d, c in pf.capacity_history)


@pytest.mark.live
@pytest.mark.timeout(30)
def test_a_grow_while_every_worker_is_blocked_wakes_them():
    """target=1, the only slot full and unconsumed: the workers park; a grow must wake one to fill slot 2."""
    shape, dtype = (4,), np.float32
    with Prefetcher(Jittery(10, fast=0.0, slow=0.0), capacity=1, workers=2, shape=shape, dtype=dtype,
                    autotune=True, max_capacity=3) as pf:
        core = pf._core
        deadline = time.monotonic() + 5
        while core.ready_now() < 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        while core.rt.parked_count < 2 and time.monotonic() < deadline:
            time.sleep(0.001)  # both workers park on "claim index and slot": the target is full
        assert core.rt.parked_count == 2 and core.ready_now() == 1
        done = threading.Event()

        def grow():
            core.gate.acquire()  # the tuner is driven under the consumer's gate
            try:
                core.rt.step(core.autotuner.thread, "grow")
            finally:
                core.gate.release()
            done.set()

        threading.Thread(target=grow).start()
        assert done.wait(5)
        deadline = time.monotonic() + 5
        while core.ready_now() < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert core.ready_now() == 2 and pf.capacity == 2
        got = [int(b[0]) for b in pf]
    assert got == list(range(10))


def test_autotune_arguments_are_checked():
    src = np.zeros((4, 2), np.float32)
    with pytest.raises(ValueError, match="max_capacity"):
        Prefetcher(src, capacity=2, max_capacity=4)  # without autotune
    with pytest.raises(ValueError, match="max_capacity"):
        Prefetcher(src, capacity=4, autotune=True, max_capacity=2)
    with pytest.raises(TypeError, match="autotune"):
        Prefetcher(src, autotune="yes")


if __name__ == "__main__" and "--regenerate" in sys.argv:
    DATA.write_text(json.dumps({key(c): check(MODEL, c, reduce="none").states for c in configs()}, indent=0,
                               sort_keys=True) + "\n")
    print(f"wrote {DATA}")

"""The reference prefetcher model is proven ok, exhaustively, over the whole sweep.

Each config's distinct-state count is pinned in ``data/prefetcher_states.json``
so that any change to the state space is noticed (regenerate deliberately
with ``python tests/test_prefetcher_model.py --regenerate``).
"""

import itertools
import json
import sys
from pathlib import Path

import pytest

from safeprefetch import check, load_model
from safeprefetch.testing import enumerate_schedules

DATA = Path(__file__).parent / "data" / "prefetcher_states.json"
PREFETCHER = load_model("prefetcher")
AXES = {"capacity": [1, 2, 3], "workers": [1, 2, 3], "items": [0, 1, 2, 3, 4], "close": [False, True],
        "error": [False, True], "abandon": [False, True], "ordered": [True, False]}


def configs():
    for values in itertools.product(*AXES.values()):
        yield dict(zip(AXES, values))


def key(cfg):
    return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in cfg.items())


PINNED = json.loads(DATA.read_text())


def test_sweep_covers_the_required_axes():
    sweep = PREFETCHER.sweep
    assert sweep["capacity"] == [1, 2, 3] and sweep["workers"] == [1, 2, 3] and sweep["items"] == [0, 1, 2, 3, 4]
    assert len(PINNED) == 3 * 3 * 5 * 2 * 2 * 2 * 2


@pytest.mark.parametrize("cfg", list(configs()), ids=key)
def test_reference_prefetcher_is_ok_exhaustively(cfg):
    result = check(PREFETCHER, cfg, reduce="none")  # the full state space, no reduction
    assert result.exhaustive
    assert result.verdict == "ok", result.violation and result.violation.message
    assert result.states == PINNED[key(cfg)], "state space changed: regenerate the pinned counts deliberately"


@pytest.mark.parametrize("closers", [2, 3])
def test_close_is_idempotent_with_concurrent_closers(closers):
    result = check(PREFETCHER, {"close": True, "closers": closers, "error": True, "abandon": True})
    assert result.verdict == "ok" and result.exhaustive


def test_small_prefetcher_matches_the_oracle():
    machine = PREFETCHER.compile({"capacity": 1, "workers": 2, "items": 2, "close": True})
    result = check(machine)
    oracle = enumerate_schedules(machine, depth=result.max_depth)
    from safeprefetch._check.explore import Explorer
    e = Explorer(machine)
    e.run()
    assert oracle.states == frozenset(e.parents)
    assert not oracle.violations


if __name__ == "__main__" and "--regenerate" in sys.argv:
    DATA.write_text(json.dumps({key(c): check(PREFETCHER, c, reduce="none").states for c in configs()}, indent=0,
                               sort_keys=True) + "\n")

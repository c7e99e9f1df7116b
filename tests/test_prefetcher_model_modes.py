"""The two prefetcher-model modes the live ``Prefetcher`` compiles are checked too.

* ``sized=off``: an iterator source, whose length is learned when a fetch
  reports "end". One worker reads it; the checker lets the source end at any
  index below ``items``, so every length from 0 to ``items`` is covered.
* ``history=off``: the consumer does not record what it received (a ghost
  variable that only the end-of-run check reads). The live Prefetcher runs
  this mode so that a long stream costs O(1) per step, not O(n). Removing a
  variable that no guard or effect reads cannot change what the machine does;
  the projection test below checks exactly that claim.
"""

import itertools

import pytest

from safeprefetch import ModelError, check, load_model
from safeprefetch._check.explore import Explorer

PREFETCHER = load_model("prefetcher")

ITER_AXES = {"capacity": [1, 2, 3], "items": [0, 1, 2, 3], "close": [False, True], "error": [False, True],
             "abandon": [False, True], "ordered": [True, False]}


def iterator_configs():
    for values in itertools.product(*ITER_AXES.values()):
        yield {"workers": 1, "sized": False, **dict(zip(ITER_AXES, values))}


def key(cfg):
    return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in cfg.items())


@pytest.mark.parametrize("cfg", list(iterator_configs()), ids=key)
def test_iterator_source_that_ends_anywhere_is_ok_exhaustively(cfg):
    result = check(PREFETCHER, cfg)
    assert result.exhaustive
    assert result.verdict == "ok", result.violation and result.violation.message


def test_iterator_source_explores_every_length():
    machine = PREFETCHER.compile({"workers": 1, "sized": False, "items": 3, "capacity": 2})
    e = Explorer(machine)
    e.run()
    length = machine.shared_index["length"]
    ends = {s[length] for s in e.parents if machine.all_done(s)}
    assert ends == {0, 1, 2, 3}


def test_iterator_source_needs_exactly_one_worker():
    with pytest.raises(ModelError, match="workers=1"):
        PREFETCHER.compile({"workers": 2, "sized": False})


@pytest.mark.parametrize("cfg", [
    {"capacity": 2, "workers": 2, "items": 3, "ordered": False, "close": True, "error": True},
    {"capacity": 3, "workers": 2, "items": 4, "ordered": True, "close": True, "error": True},
    {"capacity": 2, "workers": 1, "items": 3, "ordered": False, "close": True, "error": True, "sized": False},
], ids=key)
def test_dropping_the_history_changes_nothing_but_the_history(cfg):
    def projected(history):
        machine = PREFETCHER.compile({**cfg, "history": history})
        e = Explorer(machine)
        e.run()
        r = machine.shared_index["received"]
        return {s[:r] + s[r + 1:] for s in e.parents}

    with_history, without = projected(True), projected(False)
    assert with_history == without
    result = check(PREFETCHER, {**cfg, "history": False})
    assert result.verdict == "ok" and result.exhaustive

"""The predictive (on-demand) prefetcher model: proved ok over a sweep, counts pinned, and it has teeth.

* Exhaustively, with no reduction, over capacity 1..2, workers 1..2, with
  and without fetch errors, closed by a closer, by the consumer leaving, by
  both or by neither (then nothing ever ends and the check is that nothing
  ever goes wrong): 32 configurations, each state count pinned in
  ``data/predictive_states.json`` (regenerate deliberately with ``python
  tests/test_predictive_model.py --regenerate``). Capacity 3 with up to three
  workers runs in the slow set, with the default reductions.
* Every branch of every step is taken somewhere: speculative claims, a
  request joining a fetch in flight, revive, promote, eviction, cancellation
  in flight, withdraw, drop -- none is dead code.
* Mutations, applied to a copy of the model file, are caught with their
  verdict and shortest trace: a demand that waits behind speculation (two
  ways), a duplicate claim (two ways), an in-flight fetch cancelled by
  freeing its slot, a cancelled fetch fetched again instead of revived.
* The explorer agrees with the schedule-tree oracle on the small configs,
  and the live configuration (``request_check=off``) has the same states.
"""

import itertools
import json
import sys
from pathlib import Path

import pytest

from safeprefetch import check, load_model
from safeprefetch.testing import enumerate_schedules

DATA = Path(__file__).parent / "data" / "predictive_states.json"
MODEL_FILE = Path(__file__).parent.parent / "models" / "predictive_prefetcher.py"
MODEL = load_model("predictive_prefetcher")
FLAGS = ("error", "close", "leave")


def configs(capacities=(1, 2), workers=(1, 2)):
    for capacity, w in itertools.product(capacities, workers):
        for flags in itertools.product((False, True), repeat=len(FLAGS)):
            yield {"capacity": capacity, "workers": w, **dict(zip(FLAGS, flags))}


def key(cfg):
    return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in cfg.items())


SLOW = [c for c in configs(capacities=(3,), workers=(1, 2, 3)) if c["close"]]
PINNED = json.loads(DATA.read_text()) if DATA.exists() else {}


def _count(cfg):
    slow = cfg["capacity"] > 2
    return check(MODEL, cfg, reduce="all" if slow else "none", max_states=10_000_000)


@pytest.mark.parametrize("cfg", list(configs()), ids=key)
def test_predictive_prefetcher_is_ok_exhaustively(cfg):
    result = _count(cfg)
    assert result.exhaustive
    assert result.verdict == "ok", result.violation and result.violation.message
    assert result.states == PINNED[key(cfg)], "state space changed: regenerate the pinned counts deliberately"


@pytest.mark.slow
@pytest.mark.parametrize("cfg", SLOW, ids=key)
def test_predictive_prefetcher_is_ok_at_capacity_3(cfg):
    result = _count(cfg)
    assert result.exhaustive
    assert result.verdict == "ok", result.violation and result.violation.message
    assert result.states == PINNED[key(cfg)], "state space changed: regenerate the pinned counts deliberately"


def test_the_pinned_sweep_is_complete():
    assert set(PINNED) == {key(c) for c in list(configs()) + SLOW}
    assert len(PINNED) == 2 * 2 * 8 + 3 * 4


def test_the_live_configuration_has_the_same_states():
    """``request_check=off`` (what the live object compiles) drops a check, not a state."""
    cfg = {"capacity": 2, "workers": 2, "error": True}
    on = check(MODEL, cfg, reduce="none")
    off = check(MODEL, {**cfg, "request_check": False}, reduce="none")
    assert on.verdict == off.verdict == "ok" and on.states == off.states


def test_more_tags_than_slots_plus_one_add_no_behaviour():
    """Data independence: with a fourth tag at capacity 2 the verdict is the same (tags only compare equal)."""
    assert check(MODEL, {"capacity": 2, "workers": 1, "error": True, "keys": 4}).verdict == "ok"


def test_every_branch_is_taken_somewhere():
    from safeprefetch._check.expand import Expander
    from safeprefetch._check.explore import Explorer

    machine = MODEL.compile({"capacity": 2, "workers": 1, "error": True, "leave": True})
    explorer = Explorer(machine, reduce="none")
    explorer.run()
    expand = Expander(machine).expand
    taken = set()
    for state in explorer.parents:
        for t, res in expand(state)[0]:
            info = machine.step_info(state, t)
            for b, _next in res:
                taken.add((info.label, info.branches[b].split(" ")[0] if info.branches else ""))
    want = {("request or predict", kind) for kind in
            ("hit", "miss", "join", "revive", "promote", "error", "speculate", "uncancel", "cancel", "evict",
             "leave", "closed")}
    want |= {("wait for in-flight", kind) for kind in ("hit", "error", "closed", "withdraw")}
    want |= {("demand fetch", kind) for kind in ("ok", "error", "drop")}
    want |= {("start queued fetch", "start"), ("start queued fetch", "exit"), ("fetch into slot", "ok"),
             ("fetch into slot", "error"), ("release lease", ""), ("close", ""), ("join workers", "")}
    assert want <= taken, sorted(want - taken)


@pytest.mark.parametrize("cfg", [{"capacity": 1, "workers": 1}, {"capacity": 1, "workers": 2, "error": True}])
def test_small_models_match_the_oracle(cfg):
    from safeprefetch._check.explore import Explorer

    machine = MODEL.compile(cfg)
    result = check(machine, reduce="none")
    oracle = enumerate_schedules(machine, depth=result.max_depth)
    explorer = Explorer(machine)
    explorer.run()
    assert oracle.states == frozenset(explorer.parents)
    assert not oracle.violations


def test_a_bad_config_is_refused():
    from safeprefetch import ModelError

    with pytest.raises(ModelError, match="capacity"):
        MODEL.compile({"capacity": 0})


# -- teeth: the checker catches bugs in the protocol ---------------------------------------------

MUTATIONS = {
    # Workers may fill every slot with speculation: a demand miss then has to wait behind it.
    "workers fill every slot, the demand waits behind speculation": (
        "_in_flight(s.slots) < capacity - 1", "_in_flight(s.slots) < capacity",
        {"capacity": 2, "workers": 2}, "invariant", 4),
    # A miss may only take a free slot, not evict a speculative batch: it waits behind speculation.
    "a miss that cannot evict waits behind speculation": (
        "return _absent(slots, arg) and _victim(slots, s.queue) >= 0", "return _absent(slots, arg) and FREE in slots",
        {"capacity": 2, "workers": 1}, "invariant", 2),
    # A speculative claim for a tag a slot already holds: the item is fetched twice.
    "a duplicate speculative claim": (
        "return _absent(slots, arg) and FREE in slots", "return FREE in slots",
        {"capacity": 2, "workers": 1}, "duplicate_item", 2),
    # A demand for a tag a worker is fetching starts a second fetch instead of joining it.
    "a demand races the speculative fetch of its index": (
        "            if kind == MISS:\n                return _absent(slots, arg)",
        "            if kind == MISS:\n                return (_absent(slots, arg) or _find(slots, FILLING, arg) >= 0)",
        {"capacity": 2, "workers": 1, "request_check": False}, "duplicate_item", 3),
    # The same, caught earlier by the request check: two outcomes compete for one request.
    "a demand races the speculative fetch (request check)": (
        "            if kind == MISS:\n                return _absent(slots, arg)",
        "            if kind == MISS:\n                return (_absent(slots, arg) or _find(slots, FILLING, arg) >= 0)",
        {"capacity": 2, "workers": 1}, "invariant", 2),
    # Cancelling an in-flight fetch frees its slot at once: the worker then writes a reused slot.
    "cancel frees a slot still being filled": (
        "                    s.slots = _set(slots, arg, (CANCELLED, t))  # in flight: discarded when it lands",
        "                    s.slots = _set(slots, arg, FREE)",
        {"capacity": 2, "workers": 1}, "invariant", 4),
    # A request for a tag whose fetch was cancelled in flight fetches it again instead of reviving it.
    "a cancelled fetch is fetched again, not revived": (
        "                return _absent(slots, arg) and _victim(slots, s.queue) >= 0",
        "                return _find(slots, CANCELLED, arg) >= 0 or (_absent(slots, arg) and "
        "_victim(slots, s.queue) >= 0)",
        {"capacity": 2, "workers": 1}, "invariant", 3),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_a_broken_protocol_is_caught_with_its_shortest_trace(name, tmp_path):
    old, new, cfg, verdict, length = MUTATIONS[name]
    text = MODEL_FILE.read_text()
    assert text.count(old) == 1, "the mutation no longer applies: update it with the model"
    path = tmp_path / "predictive_mutant.py"
    path.write_text(text.replace(old, new))
    mutant = load_model(str(path))
    assert check(MODEL, cfg).verdict == "ok"
    result = check(mutant, cfg)
    assert result.verdict == verdict, result.violation and result.violation.message
    assert len(result.violation.trace.steps) == length


def test_the_demand_waiting_behind_speculation_is_shown_step_by_step(tmp_path):
    """The shortest trace of the first mutation: two speculations started by two workers fill both slots."""
    old, new, cfg, _verdict, _length = MUTATIONS["workers fill every slot, the demand waits behind speculation"]
    path = tmp_path / "predictive_mutant.py"
    path.write_text(MODEL_FILE.read_text().replace(old, new))
    result = check(load_model(str(path)), cfg)
    steps = [(s.thread, s.step, s.branch) for s in result.violation.trace.steps]
    assert steps == [("consumer", "request or predict", "speculate 0"), ("worker0", "start queued fetch", "start"),
                     ("consumer", "request or predict", "speculate 1"), ("worker1", "start queued fetch", "start")]
    assert "free or evictable" in result.violation.message


if __name__ == "__main__" and "--regenerate" in sys.argv:
    DATA.write_text(json.dumps({key(c): _count(c).states for c in list(configs()) + SLOW}, indent=0,
                               sort_keys=True) + "\n")

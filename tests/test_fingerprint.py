"""Fingerprint storage against the plain explorer: same verdicts, counts and traces; sound fingerprints.

The fingerprint explorer is clever code (a vectorized table, chunked
expansion with an event replay, paths rebuilt from parent fingerprints), so
it is checked against the straightforward path: the full explorer, which
keeps every state in a dict.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safeprefetch._check.bitstate import BitstateExplorer
from safeprefetch._check.explore import Explorer
from safeprefetch._check.fingerprint import (FingerprintTable, Frontier, collision_probability, fingerprint,
                                             fingerprinter)
from safeprefetch._check.fpsearch import FingerprintExplorer
from safeprefetch._tools.catalog import catalog
from safeprefetch.model import DONE, Model

MODELS = catalog()


def _same(full, fp) -> None:
    assert fp.store == "fingerprint" and fp.probabilistic and full.store == "full" and not full.probabilistic
    assert (fp.verdict, fp.states, fp.transitions, fp.exhaustive) == \
        (full.verdict, full.states, full.transitions, full.exhaustive)
    if full.violation is None:
        assert fp.violation is None
    else:
        assert fp.violation.kind == full.violation.kind
        assert [str(s) for s in fp.violation.trace] == [str(s) for s in full.violation.trace]


@pytest.mark.parametrize("reduce", ["none", "all"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_catalog_matches_the_full_explorer(name, reduce):
    machine = MODELS[name].compile()
    _same(Explorer(machine, reduce=reduce).run(), FingerprintExplorer(machine, reduce=reduce).run())


# Configurations of tens of thousands of states: several 4,096-state chunks per level, the
# table grows a few times, and (below) the frontier spills to disk.
BIG = [
    ("semaphores", {"producers": 2, "consumers": 2, "capacity": 2, "items": 2}),
    ("prefetcher", {"workers": 2, "capacity": 3, "items": 4, "close": True}),
    ("channel", {"producers": 2, "consumers": 2, "capacity": 2, "items": 2, "abandon": True}),
    ("one_cond_signal", {"producers": 2, "consumers": 2, "capacity": 1, "items": 2}),
]


@pytest.mark.parametrize("name,config", BIG, ids=[n for n, _ in BIG])
def test_larger_configs_match_and_spill(name, config):
    machine = MODELS[name].compile(config)
    full = Explorer(machine).run()
    fp = FingerprintExplorer(machine).run()
    _same(full, fp)
    spilled = FingerprintExplorer(machine, frontier_states=100)
    _same(full, spilled.run())
    if full.states > 2_000:
        assert spilled.spilled > 0


def test_state_cap_is_reported_as_not_exhaustive():
    machine = MODELS["semaphores"].compile({"producers": 2, "consumers": 2, "capacity": 2, "items": 2})
    capped = FingerprintExplorer(machine, max_states=5_000).run()
    assert not capped.exhaustive and capped.verdict == "ok" and capped.states <= 5_000


class MinusOneOrTwo(Model):
    """One thread steps to x = -1 or to x = -2; only -2 is bad. ``hash`` cannot tell the two states apart."""

    name = "minus_one_or_two"
    expected = "invariant"
    params: dict = {}

    def build(self, m):
        m.shared(x=0)

        def go(s, me, choice):
            s.x = -1 if choice == "minus one" else -2
            return DONE

        t = m.program("t")
        t.step("go", go, branches=("minus one", "minus two"), to=[DONE])
        m.thread("t", t)
        m.invariant("x != -2", lambda s: s.x != -2)


def test_minus_one_and_minus_two_are_different_states():
    assert hash((0, -1)) == hash((0, -2))  # why the fingerprint is not hash(state)
    assert fingerprint((0, -1)) != fingerprint((0, -2))
    machine = MinusOneOrTwo.compile()
    full = Explorer(machine).run()
    assert full.verdict == "invariant" and full.states == 3
    _same(full, FingerprintExplorer(machine).run())


def test_fingerprint_ignores_object_sharing():
    inner = (1, 2)
    assert fingerprint((inner, inner)) == fingerprint(((1, 2), tuple([1, 2])))
    assert getattr(fingerprinter((0, "a")), "marshal_first", False)
    assert all(fingerprint((i,)) != 0 for i in range(1000))


def test_named_slot_states_go_by_field_ids_and_stay_sound():
    from models._protocol import EMPTY, FILLING, FREE
    by = fingerprinter(((EMPTY, -1), 0))  # marshal refuses the named int in field 0
    assert not getattr(by, "marshal_first", False)
    assert by(((EMPTY, -1), 0)) != by(((EMPTY, -2), 0))      # inside the field taken by id
    assert by(((EMPTY, -1), -1)) != by(((EMPTY, -1), -2))    # outside it
    assert by(((EMPTY, -1), 0)) != by(((FILLING, -1), 0))
    assert by((FREE, 0)) == by(((EMPTY, -1), 0))              # a shared constant or a fresh tuple
    odd = ((EMPTY, -1), FILLING)                               # a refused value in another field: ids
    assert by(odd) == by(((EMPTY, -1), FILLING)) != by(((EMPTY, -1), EMPTY))


# -- the table against a dict -------------------------------------------------------------------

batches = st.lists(st.lists(st.tuples(st.integers(1, 60), st.integers(1, 2**64 - 1)), max_size=40), max_size=12)


@settings(max_examples=150, deadline=None)
@given(batches, st.integers(1, 8))
def test_table_add_new_is_dict_setdefault_in_order(batches, capacity):
    table = FingerprintTable(capacity)
    reference: dict[int, int] = {}
    for batch in batches:
        fps = [k for k, _ in batch]
        parents = [p for _, p in batch]
        new = table.add_new(fps, parents)
        expected = []
        for k, p in batch:
            expected.append(k not in reference)
            reference.setdefault(k, p)
        assert new.tolist() == expected
        assert len(table) == len(reference)
    for k, p in reference.items():
        assert k in table and table.parent(k) == p
    assert 61 not in table and 0 not in table


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 200), max_size=80), st.integers(0, 30))
def test_table_limit_keeps_the_first_new_ones(keys, limit):
    table = FingerprintTable(4)
    table.add_new([5, 6], [1, 1])
    new = table.add_new(keys, [9] * len(keys), limit)
    seen, kept = {5, 6}, []
    for k in keys:
        if k not in seen:
            seen.add(k)
            if len(kept) < limit:
                kept.append(k)
    assert [k for k, n in zip(keys, new.tolist()) if n] == kept
    assert len(table) == 2 + len(kept)


def test_table_grows_and_stays_small():
    table = FingerprintTable()
    rng = np.random.default_rng(7)
    keys = rng.integers(1, 2**63, size=300_000, dtype=np.int64).astype(np.uint64)
    for part in np.array_split(keys, 30):
        table.add_new(part.tolist(), [1] * len(part))
    assert len(table) == len(np.unique(keys))
    assert table.nbytes / len(table) <= 16 / 0.75 * 2 + 1  # two uint64 per slot, at most 3/4 full after growth


def test_frontier_spills_and_reads_back_in_order(tmp_path):
    f = Frontier(7)
    states = [(i, "s", (i, -i)) for i in range(100)]
    for i, s in enumerate(states[:50]):
        f.append(s, i + 1)
    f.extend(states[50:], list(range(51, 101)))
    assert len(f) == 100 and f.spilled > 0
    assert list(f) == [(s, i + 1) for i, s in enumerate(states)]
    f.close()


def test_collision_estimate_is_tlc_formula():
    assert collision_probability(0, 0) == 0.0
    assert collision_probability(10**6, 4 * 10**6) == pytest.approx(10**6 * 3 * 10**6 / 2**64)


# -- the memory budget ---------------------------------------------------------------------------

BUDGETED = ("semaphores", {"producers": 2, "consumers": 2, "capacity": 2, "items": 4})  # 131,149 states


@pytest.mark.parametrize("store", ["full", "fingerprint"])
def test_a_search_over_its_memory_budget_stops_early_with_its_partial_result(store):
    from safeprefetch import check
    from safeprefetch._check.budget import resident_bytes

    model, config = MODELS[BUDGETED[0]], BUDGETED[1]
    tight = resident_bytes() + (8 << 20)  # 8 MiB more than now: far less than the search needs
    r = check(model, config, reduce="none", store=store, memory=tight)
    assert r.verdict == "ok" and not r.exhaustive and r.stop_reason == "memory"
    assert 0 < r.states < 131_149 and "memory budget" in r.stop_message
    roomy = check(model, config, reduce="none", store=store, memory=resident_bytes() + (4 << 30))
    assert roomy.exhaustive and roomy.states == 131_149 and roomy.stop_reason is None


def test_state_cap_says_why_it_stopped():
    from safeprefetch import check

    r = check(MODELS["semaphores"], BUDGETED[1], reduce="none", max_states=1_000)
    assert not r.exhaustive and r.stop_reason == "max_states" and "max_states=1,000" in r.stop_message


def test_memory_amounts_parse_or_fail_clearly():
    from safeprefetch._check.budget import parse_memory

    assert parse_memory("8G") == 8 << 30 and parse_memory("512M") == 512 << 20
    assert parse_memory("1.5GiB") == int(1.5 * (1 << 30)) and parse_memory("1000") == 1000
    for bad in ("", "lots", "-1G", "0", "8X"):
        with pytest.raises(ValueError):
            parse_memory(bad)


# -- bitstate ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(MODELS))
def test_bitstate_with_room_finds_what_the_full_search_finds(name):
    from safeprefetch import check
    from safeprefetch._check.explore import final_verdict

    model = MODELS[name]
    full = check(model, reduce="none")
    bits = check(model, reduce="none", store="bitstate")
    assert bits.store == "bitstate" and bits.probabilistic and bits.hash_factor > 10_000
    assert bits.verdict == full.verdict
    if full.ok:
        assert bits.states == full.states  # 2**30 bits for a few hundred states: nothing skipped
    elif bits.violation.kind != "starvation":
        # Not the shortest trace (depth first), but a real one: replaying it reaches the violation.
        found = final_verdict(model.compile(), bits.trace)
        assert found is not None and found[0] == full.verdict


def test_bitstate_under_pressure_skips_states_and_says_so():
    from safeprefetch import check

    model, config = MODELS["semaphores"], BIG[0][1]  # 9,853 states
    runs = [BitstateExplorer(model.compile(config), bits_log2=14, seed=seed).run() for seed in (1, 2)]
    for r in runs:
        assert r.verdict == "ok" and r.states < 9_853 and r.hash_factor < 100
        assert r.collision_probability > 0.01
    assert runs[0].states != runs[1].states  # independent hash functions skip different states
    assert "not a proof" in __import__("safeprefetch._check.trace", fromlist=["render_result"]).render_result(
        runs[0], model.compile(config))
    with pytest.raises(Exception, match="below what this process already holds"):
        check(model, config, store="bitstate", memory=10)
    assert all(not r.exhaustive and r.stop_reason == "bitstate" for r in runs)


# -- regressions found by an adversarial review ---------------------------------------------------

def test_values_marshal_refuses_are_told_apart_by_equality_not_repr():
    """Two unequal records with one repr once took one fingerprint for certain, hiding a violation."""
    from dataclasses import dataclass, field

    @dataclass(frozen=True)
    class Msg:
        seq: int
        payload: str = field(repr=False)

    assert repr(Msg(1, "ok")) == repr(Msg(1, "bad")) and Msg(1, "ok") != Msg(1, "bad")

    class Mailbox(Model):
        name = "mailbox"
        params: dict = {}

        def build(self, m):
            m.shared(msg=None)

            def send(s, me, choice):
                s.msg = Msg(1, "ok" if choice == "good" else "bad")
            p = m.program("p")
            p.step("send", send, branches=("good", "bad"), next=DONE)
            m.thread("t", p)
            m.invariant("payload intact", lambda s: s.msg is None or s.msg.payload == "ok")

    machine = Mailbox.compile()
    full = Explorer(machine).run()
    assert full.verdict == "invariant" and full.states == 3
    _same(full, FingerprintExplorer(machine).run())
    assert BitstateExplorer(machine).run().verdict == "invariant"
    by = fingerprinter((None,))
    assert by((Msg(1, "ok"),)) != by((Msg(1, "bad"),)) and by((Msg(1, "ok"),)) == by((Msg(1, "ok"),))
    assert by((Msg(1, "ok"), -1)) != by((Msg(1, "ok"), -2))


class _SelfLoopThenStuck(Model):
    name = "selfloop_then_stuck"
    params: dict = {}

    def build(self, m):
        m.shared(x=0)

        def go(s, me, choice):
            if choice == "fwd":
                s.x += 1
                return "go" if s.x < 2 else "stuck"
            return "go"
        p = m.program("p")
        p.step("go", go, branches=("loop", "fwd"), to=["go", "stuck"])
        p.step("stuck", None, guard=lambda s, me: False, next=DONE)
        m.thread("t", p)


def test_a_cap_of_exactly_the_reachable_states_cuts_nothing():
    """The fingerprint search once stopped 'at the cap' when a full table met only known states."""
    machine = _SelfLoopThenStuck.compile()
    assert Explorer(machine).run().states == 3
    full = Explorer(machine, max_states=3).run()
    assert full.verdict == "deadlock" and full.exhaustive
    _same(full, FingerprintExplorer(machine, max_states=3).run())
    ring = MODELS["semaphores"].compile()
    n = Explorer(ring).run().states
    _same(Explorer(ring, max_states=n).run(), FingerprintExplorer(ring, max_states=n).run())


def test_depth_first_search_keeps_its_memory_budget():
    from safeprefetch import check

    model, config = MODELS[BUDGETED[0]], BUDGETED[1]
    from safeprefetch._check.budget import resident_bytes

    r = check(model, config, reduce="none", strategy="dfs", memory=resident_bytes() + (8 << 20))
    assert r.verdict == "ok" and not r.exhaustive and r.stop_reason == "memory" and r.states < 131_149


def test_a_frontier_pickle_refuses_stays_in_memory():
    """A record class defined inside build() cannot be pickled: the spill keeps such a level in memory."""
    from dataclasses import dataclass

    class Local(Model):
        name = "local_record"
        params: dict = {}

        def build(self, m):
            @dataclass(frozen=True)
            class Rec:
                n: int

            m.shared(a=Rec(0), b=Rec(0))

            def fa(s, me):
                s.a = Rec((s.a.n + 1) % 40)

            def fb(s, me):
                s.b = Rec((s.b.n + 1) % 40)
            pa = m.program("pa")
            pa.step("a", fa, next="a")
            pb = m.program("pb")
            pb.step("b", fb, next="b")
            m.thread("A", pa)
            m.thread("B", pb)

    machine = Local.compile()
    spilled = FingerprintExplorer(machine, frontier_states=10)
    _same(Explorer(machine).run(), spilled.run())
    assert spilled.run().states == 1_600


def test_bitstate_budgets_are_checked_and_clamped():
    from safeprefetch import check

    model = MODELS["semaphores"]
    from safeprefetch._check.bitstate import _bits_for_budget
    from safeprefetch._check.budget import resident_bytes

    for store in ("full", "fingerprint", "bitstate"):
        with pytest.raises(Exception, match="below what this process already holds"):
            check(model, store=store, memory=1)
    with pytest.raises(Exception, match="leaves no room"):
        _bits_for_budget(resident_bytes() + 100)
    huge = check(model, store="bitstate", memory=1 << 39)  # more than the machine: its memory instead
    assert huge.verdict == "ok" and huge.stop_reason == "bitstate" and not huge.exhaustive


def test_cluster_fingerprints_refuse_unequal_values_that_print_alike():
    """The cross-process fingerprint tells refused values apart by repr: a repr hiding a field is refused."""
    from dataclasses import dataclass, field

    from safeprefetch._check.fingerprint import stable_fingerprinter
    from safeprefetch.model import ModelError

    @dataclass(frozen=True)
    class Msg:
        seq: int
        payload: str = field(repr=False)

    fp = stable_fingerprinter((Msg(1, "ok"), 0))
    assert fp((Msg(1, "ok"), 0)) == fp((Msg(1, "ok"), 0)) != fp((Msg(2, "ok"), 0))
    with pytest.raises(ModelError, match="print alike"):
        fp((Msg(1, "bad"), 0))


def test_cli_store_and_memory_are_checked_and_reach_check_all(capsys):
    from safeprefetch._cli.main import main

    for bad in (["--strategy", "random", "--memory", "lots"], ["--strategy", "random", "--memory", "8G"],
                ["--strategy", "pct", "--store", "fingerprint"], ["--memory", "lots"], ["--memory", "1"]):
        assert main(["check", "semaphores", *bad]) == 2, bad
        assert "error:" in capsys.readouterr().err
    assert main(["check", "--all", "--store", "fingerprint", "--json"]) == 0
    import json

    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(MODELS) and {r["store"] for r in rows} == {"fingerprint"}

"""The explorer against an independent oracle: a naive walk of every schedule, with no hashing.

For a model small enough to enumerate, both must reach exactly the same set
of states, agree on whether there is a violation, and agree on the length
(and kind) of the shortest one.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safeprefetch import catalog, check
from safeprefetch._check.explore import Explorer
from safeprefetch.model import DONE, Model, violate
from safeprefetch.testing import enumerate_schedules


def agree(machine):
    full = Explorer(machine, stop_at_first=False)
    full.run()
    first = check(machine)
    oracle = enumerate_schedules(machine, depth=full._max_depth + 1)
    assert oracle.states == frozenset(full.parents), "explorer and oracle reach different states"
    if first.ok:
        assert not oracle.violations, f"oracle found {sorted(oracle.violations)} but explorer says ok"
    else:
        assert oracle.shortest == len(first.trace)
        assert first.verdict in oracle.kinds_at_shortest()
    return first, oracle


SMALL = [(n, {}) for n in ("no_predicate_wait", "no_space_guard", "one_cond_signal")] + [
    ("one_cond_signal", {"notify": "any"}), ("no_predicate_wait", {"spurious": "on"}),
    ("prefetcher", {"capacity": 1, "workers": 1, "items": 2, "close": True, "error": True}),
    ("prefetcher", {"capacity": 2, "workers": 2, "items": 2, "abandon": True, "ordered": False}),
]


@pytest.mark.parametrize("name, cfg", SMALL, ids=lambda x: str(x))
def test_catalog_models_agree_with_the_oracle(name, cfg):
    agree(catalog()[name].compile(cfg or None))


# -- random small models ------------------------------------------------------

OPS = st.one_of(
    st.tuples(st.just("inc"), st.sampled_from("xy")),
    st.tuples(st.just("await"), st.sampled_from("xy"), st.integers(0, 2)),
    st.tuples(st.just("choose"), st.sampled_from("xy")),
    st.tuples(st.just("assert_not"), st.sampled_from("xy"), st.integers(1, 2)),
    st.tuples(st.just("lock")),
    st.tuples(st.just("unlock")),
    st.tuples(st.just("wait"), st.sampled_from("xy"), st.integers(0, 2)),
    st.tuples(st.just("notify_one")),
    st.tuples(st.just("notify_all")),
)


def random_model(programs):
    def build(self, m):
        m.shared(x=0, y=0)
        m.mutex("m")
        m.condvar("cv")
        for ti, ops in enumerate(programs):
            p = m.program(f"role{ti}")
            labels = [f"{k}:{op[0]}" for k, op in enumerate(ops)]
            for k, op in enumerate(ops):
                label, nxt = labels[k], labels[k + 1] if k + 1 < len(ops) else DONE
                kind = op[0]
                if kind == "inc":
                    p.step(label, lambda s, me, v=op[1]: setattr(s, v, (getattr(s, v) + 1) % 3), next=nxt)
                elif kind == "await":
                    p.step(label, guard=lambda s, me, v=op[1], c=op[2]: getattr(s, v) == c, next=nxt)
                elif kind == "choose":
                    p.step(label, lambda s, me, b, v=op[1]: setattr(s, v, int(b)), next=nxt, branches=("0", "1"))
                elif kind == "assert_not":
                    p.step(label, lambda s, me, v=op[1], c=op[2]:
                           violate("invariant", f"{v} == {c}") if getattr(s, v) == c else None, next=nxt)
                elif kind == "lock":
                    p.acquire(label, "m", next=nxt)
                elif kind == "unlock":
                    p.release(label, "m", next=nxt)
                elif kind == "wait":
                    p.wait(label, "cv", "m", next=nxt, until=lambda s, me, v=op[1], c=op[2]: getattr(s, v) == c)
                elif kind == "notify_one":
                    p.notify_one(label, "cv", next=nxt)
                else:
                    p.notify_all(label, "cv", next=nxt)
            m.thread(f"T{ti}", p)
        m.invariant("x + y < 4", lambda s: s.x + s.y < 4)

    return type("Random", (Model,), {"name": "random", "build": build})


@settings(max_examples=150)
@given(programs=st.lists(st.lists(OPS, min_size=1, max_size=4), min_size=1, max_size=3),
       notify=st.sampled_from(["fifo", "any"]), spurious=st.sampled_from(["off", "on"]))
def test_random_small_models_agree_with_the_oracle(programs, notify, spurious):
    model = random_model(programs)
    agree(model.compile({"notify": notify, "spurious": spurious}))

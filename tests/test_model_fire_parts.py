"""``Machine.enabled`` and ``Machine.fire_branch`` agree exactly with ``Machine.fire``.

The live runtime tests a parked thread with the guard-only ``enabled`` and
applies an external step's known outcome with ``fire_branch``; both are
shortcuts of ``fire`` and must never disagree with it. Checked here on every
reachable state of every catalog model (and a few prefetcher configs, under
each condvar semantics), for every thread and every branch.

Specialization is a shortcut too: a model compiled with the specializer off
(every user function run through views) reaches the same states, with the
same successors, and gets the same verdict.
"""

import pytest

from safeprefetch import catalog, check, load_model
from safeprefetch._check.explore import Explorer
from safeprefetch._dsl import specialize

CASES = [(name, {}) for name in sorted(catalog())]
CASES += [("prefetcher", {"capacity": 2, "workers": 2, "items": 3, "close": True, "error": True, "abandon": True}),
          ("prefetcher", {"capacity": 2, "workers": 1, "items": 3, "close": True, "sized": False}),
          ("prefetcher", {"capacity": 2, "workers": 2, "items": 3, "ordered": False, "error_at": 1}),
          ("prefetcher", {"capacity": 3, "workers": 2, "items": 3, "autotune": True, "close": True,
                          "error": True}),
          ("monitor", {"spurious": "on"}), ("monitor", {"notify": "any"}), ("channel", {"notify": "any"})]


def _states(machine, limit=20_000):
    e = Explorer(machine, max_states=limit, stop_at_first=False)
    e.run()
    return list(e.parents)


@pytest.mark.parametrize("name,config", CASES, ids=[f"{n}-{c}" for n, c in CASES])
def test_enabled_and_fire_branch_agree_with_fire(name, config):
    machine = load_model(name).compile(config)
    checked = 0
    for state in _states(machine):
        for t in range(len(machine.thread_names)):
            opts = machine.fire(state, t)
            assert machine.enabled(state, t) == bool(opts), (name, machine.thread_names[t], state)
            info = machine.step_info(state, t)
            branches = len(info.branches) if info is not None and info.branches else 1
            for b in range(branches):
                want = [(x, n) for x, n in opts if x == b]
                got = machine.fire_branch(state, t, b)
                assert [x for x, _ in got] == [x for x, _ in want]
                for (_, n1), (_, n2) in zip(got, want):
                    assert type(n1) is type(n2)
                    if isinstance(n1, tuple):
                        assert n1 == n2
                    else:
                        assert n1.kind == n2.kind
                assert machine.enabled(state, t, b) == bool(want)
            checked += 1
    assert checked > 0


# -- specialization is a shortcut too: on and off, the same machine ------------------------------

DIFFERENTIAL = [(name, {}) for name in sorted(catalog())] + [
    ("monitor", {"notify": "any", "spurious": "on", "close": True}),
    ("prefetcher", {"capacity": 2, "workers": 2, "items": 2, "close": True, "error": True, "abandon": True}),
    ("prefetcher", {"capacity": 2, "workers": 1, "items": 3, "run": 2, "autotune": True, "close": True}),
]


@pytest.mark.parametrize("name,config", DIFFERENTIAL, ids=[f"{n}-{c}" for n, c in DIFFERENTIAL])
def test_specialized_and_plain_steps_reach_the_same_states_and_verdict(name, config, monkeypatch):
    """The specializer rewrites step functions to index the state; the plain path runs them through views.

    Compiled either way (``specialize.ENABLED``), a model reaches the same states, with the same
    successors from each, and gets the same verdict.
    """
    fast = load_model(name).compile(config)
    fast_states, fast_verdict = _states(fast), check(fast).verdict  # before the switch: invariants are lazy
    monkeypatch.setattr(specialize, "ENABLED", False)
    plain = load_model(name).compile(config)
    plain_states = _states(plain)
    assert set(plain_states) == set(fast_states)
    assert all(info.footprint is None for infos in plain.infos for info in infos.values()
               if info.kind in ("step", "external"))  # nothing was specialized
    for state in plain_states[:2000]:
        for t in range(len(plain.thread_names)):
            got, want = fast.fire(state, t), plain.fire(state, t)
            assert [(b, n if isinstance(n, tuple) else n.kind) for b, n in got] == \
                   [(b, n if isinstance(n, tuple) else n.kind) for b, n in want]
    assert check(plain).verdict == fast_verdict

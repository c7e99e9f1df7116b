"""``Machine.enabled`` and ``Machine.fire_branch`` agree exactly with ``Machine.fire``.

The live runtime tests a parked thread with the guard-only ``enabled`` and
applies an external step's known outcome with ``fire_branch``; both are
shortcuts of ``fire`` and must never disagree with it. Checked here on every
reachable state of every catalog model (and a few prefetcher configs, under
each condvar semantics), for every thread and every branch.

Specialization is a shortcut too; tests/test_specialize.py compares it with
the plain path.
"""

import pytest

from safeprefetch import catalog, load_model
from safeprefetch._check.explore import Explorer

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

"""The three lock-based reference designs are correct under every condvar semantics.

``test_catalog`` proves each design over its full sweep with the default
semantics (FIFO ``notify_one``, no spurious wakeups). Here a reduced sweep is
proved under all four combinations of ``notify=fifo|any`` and
``spurious=off|on``: a design that is only correct when ``notify_one`` wakes
the longest waiter, or when threads never wake on their own, fails here.
"""

import itertools

import pytest

from safeprefetch import catalog, check

SEMANTICS = [{"notify": n, "spurious": s} for n, s in itertools.product(("fifo", "any"), ("off", "on"))]

# Every injection flag on and off, with two threads on each side contending
# for a buffer that is full after one put.
REDUCED = {
    "monitor": {"producers": [1, 2], "consumers": [1, 2], "capacity": [1], "items": [2],
                "close": [False, True], "error": [False, True]},
    # No condvar here, so the settings cannot change it; one item each keeps it quick.
    "semaphores": {"producers": [1, 2], "consumers": [1, 2], "capacity": [1], "items": [1],
                   "close": [False, True], "error": [False, True]},
    "channel": {"producers": [1, 2], "consumers": [1, 2], "capacity": [1], "items": [2],
                "abandon": [False, True], "double_close": [False, True]},
}

MODELS = catalog()

CASES = [(name, dict(zip(sweep, values)), sem)
         for name, sweep in REDUCED.items()
         for values in itertools.product(*sweep.values())
         for sem in SEMANTICS]


def _id(case):
    name, cfg, sem = case
    args = " ".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in {**cfg, **sem}.items())
    return f"{name} {args}"


def test_reduced_sweeps_stay_inside_the_declared_sweeps():
    for name, sweep in REDUCED.items():
        declared = MODELS[name].sweep
        assert set(sweep) == set(declared)
        for param, values in sweep.items():
            assert set(values) <= set(declared[param]), (name, param)


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_reference_design_is_ok_under_every_condvar_semantics(case):
    name, cfg, sem = case
    result = check(MODELS[name], {**cfg, **sem})
    assert result.exhaustive
    assert result.verdict == "ok", f"{name} {cfg} {sem}: {result.violation and result.violation.message}"


@pytest.mark.parametrize("name", sorted(REDUCED))
def test_semantics_settings_really_change_the_search(name):
    """The settings are not ignored: with spurious wakeups on, a condvar design has more states."""
    cfg = {k: v[-1] for k, v in REDUCED[name].items()}
    if name == "semaphores":
        cfg["producers"] = 1
    plain = check(MODELS[name], cfg)
    noisy = check(MODELS[name], {**cfg, "spurious": "on"})
    if name == "semaphores":  # no condvar at all: the settings cannot matter
        assert noisy.states == plain.states
    else:
        assert noisy.states > plain.states

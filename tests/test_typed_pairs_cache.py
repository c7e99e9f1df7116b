"""The typed transitions' cache of the last tuple of pairs is invisible: checked against the Python functions.

``_dsl/typedsupport.py`` keeps the last slot tuple a typed function unboxed or built, with its C value, and
answers the next unboxing of that very object from it (a step's successor is the next step's state). The
tests call every typed function of a live shape on reachable states drawn in any order -- the same state
twice, a successor after its state, an equal tuple rebuilt as new objects, a slot tuple the typed code
cannot hold -- and compare every answer with the generated Python function's, object kind for object kind
(a slot state must be the model's own singleton, not an int of its value). They also check that the cache
is used on the path it exists for, and that a successor keeps the pair objects of the slots it did not
change (the translation validation in ``test_typed_transitions.py`` walks every reachable state through it
too, and a mutation that drops its identity check fails there).
"""

import pytest
from _cython import cython_here
from hypothesis import given
from hypothesis import strategies as st

from safeprefetch._prefetcher.machine import machine_for, typed_for

pytestmark = pytest.mark.skipif(not cython_here(), reason="the typed transitions need Cython (the speed extra)")

SHAPE = (2, 2, True, True, 0, 2)  # two workers: slots filled out of order


def _reachable(limit=400):
    machine = machine_for(*SHAPE[:2], 3, *SHAPE[2:])
    seen, frontier = [machine.init], [machine.init]
    known = {machine.init}
    while frontier and len(seen) < limit:
        nxt = []
        for s in frontier:
            for _choice, succ in machine.successors(s):
                if isinstance(succ, tuple) and succ not in known:
                    known.add(succ)
                    seen.append(succ)
                    nxt.append(succ)
        frontier = nxt
    return seen


STATES = None


def _states():
    global STATES
    if STATES is None:
        STATES = _reachable()
    return STATES


def _alike(a, b):
    """The same value built of the same kinds of objects (a slot state is its singleton, a flag a bool)."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return type(a) is type(b) and len(a) == len(b) and all(_alike(x, y) for x, y in zip(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, int) and type(a) not in (int, bool):  # a slot state: the model's singleton
        return a is b
    if a is None or type(a) in (int, bool, str, float):
        return a == b
    return repr(a) == repr(b)  # a violation: its kind and message


def _rebuilt(state):
    """An equal state whose slot tuple and pairs are new objects."""
    slots = tuple(tuple(list(p)) for p in state[0])
    return (tuple(list(slots)),) + state[1:]


def _unholdable(state):
    """The slot tuple with one index past 64 bits: the typed code must hand it to Python."""
    (tag, _i), *rest = state[0]
    return (((tag, 2**70), *rest),) + state[1:]


@given(st.data())
def test_every_typed_function_answers_as_python_in_any_order_of_states(data):
    typed = typed_for(*SHAPE)
    states = _states()
    names = typed.source.typed
    previous = None
    for _ in range(30):
        # "again": the last successor built (or the last state, after a guard or a disabled step).
        how = data.draw(st.sampled_from(["drawn", "again", "rebuilt", "unholdable"]))
        if how == "again" and previous is not None:
            state = previous
        else:
            state = data.draw(st.sampled_from(states))
            if how == "rebuilt":
                state = _rebuilt(state)
            elif how == "unholdable":
                state = _unholdable(state)
        name = data.draw(st.sampled_from(names))
        got = getattr(typed.module, name)(state)
        want = typed.source.bind["PY_" + name](state)
        assert _alike(got, want), (name, how, state, got, want)
        previous = got if isinstance(got, tuple) else state


def test_a_successor_is_unboxed_from_the_cache_and_keeps_the_pairs_it_did_not_change():
    typed = typed_for(*SHAPE)
    init = machine_for(*SHAPE[:2], 3, *SHAPE[2:]).init
    claim = typed.module.t0_claim_index_and_slot_0
    first = claim(init)
    assert isinstance(first, tuple) and first != init
    # One slot claimed: the other pair is the very object of the state before.
    changed = [i for i, (a, b) in enumerate(zip(init[0], first[0])) if a != b]
    assert len(changed) == 1
    assert all(first[0][i] is init[0][i] for i in range(len(init[0])) if i not in changed)
    hits = typed.module.pairs_cache()
    second = typed.module.t1_claim_index_and_slot_0(first)  # the other worker, on the successor just built
    assert typed.module.pairs_cache() > hits
    assert _alike(second, typed.source.bind["PY_t1_claim_index_and_slot_0"](first))
    # A step that leaves the slots as they were returns the very tuple it was given.
    unchanged = [n for n in typed.source.typed if n.startswith("t")]
    for name in unchanged:
        got = getattr(typed.module, name)(first)
        if isinstance(got, tuple) and got[0] == first[0]:
            assert got[0] is first[0], name


@pytest.mark.parametrize("change", ["one field short", "one field more", "not a tuple"])
def test_a_state_of_another_length_is_decided_by_python(change):
    """The typed functions read fields unchecked after checking the length on entry."""
    typed = typed_for(*SHAPE)
    state = _states()[3]
    odd = {"one field short": state[:-1], "one field more": state + (0,), "not a tuple": list(state)}[change]
    before = sum(typed.module.fallbacks())
    for name in typed.source.typed:
        try:
            want = ("returned", typed.source.bind["PY_" + name](odd))
        except Exception as e:  # noqa: BLE001 - the Python function's own error, whatever it is
            want = ("raised", type(e))
        try:
            got = ("returned", getattr(typed.module, name)(odd))
        except Exception as e:  # noqa: BLE001
            got = ("raised", type(e))
        assert got[0] == want[0] and (got[1] == want[1] if got[0] == "raised" else _alike(got[1], want[1])), name
    assert sum(typed.module.fallbacks()) > before  # Python decided them


def test_the_typed_runtime_is_refused_without_the_gil(monkeypatch):
    """The pairs cache and the reused contexts are atomic only under the GIL: a free-threaded Python with the
    GIL off gets a clear error, not a racy build."""
    import sys

    from safeprefetch._prefetcher.machine import transitions_for
    from safeprefetch._runtime.typed import CompileUnavailable, typed_transitions

    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    with pytest.raises(CompileUnavailable, match="needs the GIL"):
        typed_transitions(transitions_for(*SHAPE))

"""State-count regression: every catalog model's distinct states, pinned.

A change to a model, to the kernel's semantics or to a reduction that moves
a state count fails here loudly. If the change is deliberate, regenerate::

    python tests/test_state_counts.py --regenerate

and say why in the commit. Counts are taken at each model's declared config,
under each condvar semantics, with and without the default reductions.
"""

import json
import sys
from pathlib import Path

import pytest

from safeprefetch import catalog, check

DATA = Path(__file__).parent / "data" / "catalog_states.json"
SEMANTICS = {"fifo": {}, "any": {"notify": "any"}, "spurious": {"spurious": "on"}}


def cases():
    for name in catalog():
        for sem in SEMANTICS:
            for reduce in ("none", "all"):
                yield f"{name}|{sem}|{reduce}"


def count(case):
    name, sem, reduce = case.split("|")
    return check(catalog()[name], SEMANTICS[sem] or None, reduce=reduce).states


PINNED = json.loads(DATA.read_text()) if DATA.exists() else {}


def test_every_catalog_model_is_pinned():
    assert sorted(PINNED) == sorted(cases()), "new or removed catalog model: regenerate the pinned counts"


@pytest.mark.parametrize("case", sorted(PINNED))
def test_state_count_is_unchanged(case):
    assert count(case) == PINNED[case], f"{case}: the state space changed"


if __name__ == "__main__" and "--regenerate" in sys.argv:
    DATA.write_text(json.dumps({c: count(c) for c in cases()}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {DATA}")

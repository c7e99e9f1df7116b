"""The checker's thirteenth-round fixes (docs/hardening.md, "A thirteenth round").

Each test failed on the code before its fix.
"""

import pytest

from safeprefetch import NondeterministicModel
from safeprefetch._check.explore import Explorer, check
from safeprefetch.model import DONE, Model

from test_checker_review12 import Box, fanned
from test_shards import assert_sequential, partitioned

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("store", ["full", "fingerprint"])
@pytest.mark.parametrize("nproc", [1, 2, 3])
@pytest.mark.parametrize("width", [3, 7])
def test_1_a_partitioned_search_cut_inside_a_level_reports_the_shortest_violation(width, nproc, store):
    # Before: with the cap inside level 1 past the first fanned state, the shards reported "invariant, 2
    # steps" where sequential BFS (which judges the rest of the level's stuck states) says "deadlock, 1 step".
    machine = fanned(width).compile({})
    lates = 0
    for cap in range(1, width + 9):
        seq = Explorer(machine, reduce="none", max_states=cap).run()
        levels = partitioned(machine, nproc, store=store, max_states=cap)
        assert_sequential(levels, seq)
        lates += seq.verdict == "deadlock" and not levels.exhaustive  # found in the level's unstored rest
    assert lates >= width - 1


class SameRepr(Box):
    """A hashable object whose repr does not show its value."""

    def __repr__(self):
        return "SameRepr"


class HashOnly(Model):
    """A step changes ``box`` in place, and only its hash shows it."""

    name = "hash_only"
    params = {}

    def build(self, m):
        m.shared(a=0, box=SameRepr(0))

        def bump(s, me):
            s.box.v += 1

        p = m.program("w")
        p.step("bump", bump, next=DONE)
        m.thread("t0", p)


@pytest.mark.parametrize("store", ["full", "fingerprint"])
def test_2_a_change_in_place_only_the_hash_shows_names_the_field_that_changed(store):
    # Before: "field 'a' was 0 before ... and 0 after": the first field, which had not changed.
    with pytest.raises(NondeterministicModel, match=r"field 'box' was SameRepr before .* and SameRepr \(the same "
                                                    r"repr, but its hash changed from 0 to 2\) after"):
        check(HashOnly, reduce="none", store=store, progress_every=1e9)

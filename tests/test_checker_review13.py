"""The checker's thirteenth-round fixes (docs/hardening.md, "A thirteenth round").

Each test failed on the code before its fix.
"""

import pytest

from safeprefetch._check.explore import Explorer

from test_checker_review12 import fanned
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

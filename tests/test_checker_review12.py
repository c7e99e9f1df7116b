"""The checker's twelfth-round review (docs/hardening.md, "A twelfth round"): silent wrong answers.

An adversarial review of the model checker found searches that answered wrongly without a word: a
violation reported as the shortest when the state cap had cut the level it lies in, a step that
changed a state object in place (checked as if it had not), and a declared symmetry broken only past
the probe's first states (the reduced search said ok). Each test failed before its fix.
"""

import pytest

from safeprefetch.model import DONE, Model
from safeprefetch._check.explore import check

pytestmark = pytest.mark.timeout(120)


def fanned(width):
    """A model whose level 1 has ``width`` states: all but the last go on to an invariant broken at depth 2;
    the last is stuck, a deadlock at depth 1, the shortest violation."""

    class Fanned(Model):
        name = "fanned"
        params = {}

        def build(self, m):
            m.shared(mode=-1, x=-1)
            p = m.program("t")

            def choose(s, me, b):
                s.mode = int(b[1:])
                return "stuck" if s.mode == width - 1 else "fan"

            def fan(s, me, b):
                s.x = int(b[1:])

            p.step("choose", choose, branches=tuple(f"b{i}" for i in range(width)), to=["fan", "stuck"])
            p.step("fan", fan, branches=tuple(f"f{i}" for i in range(4)), next=DONE)
            p.step("stuck", guard=lambda s, me: False, next=DONE)
            m.thread("t0", p)
            m.invariant("x != 0", lambda s: s.x != 0)

    return Fanned


# width 5000: the stuck state lies past the fingerprint store's first chunk (the generated engine is left out
# there: generating a step of 5,000 branches takes a minute).
@pytest.mark.parametrize("store,engine,width", [("full", "plain", 3), ("full", "generated", 3),
                                               ("fingerprint", None, 3), ("full", "plain", 5000),
                                               ("fingerprint", None, 5000)])
def test_1_a_state_cap_inside_a_level_still_reports_the_shortest_violation(store, engine, width):
    model = fanned(width)
    full = check(model, reduce="none", store=store, engine=engine, progress_every=1e9)
    assert (full.verdict, len(full.violation.trace.steps)) == ("deadlock", 1)
    # The cap falls while level 1 is expanded: the invariant broken at depth 2 is found first.
    cut = check(model, reduce="none", store=store, engine=engine, progress_every=1e9, max_states=width + 3)
    assert (cut.verdict, len(cut.violation.trace.steps)) == ("deadlock", 1)
    assert cut.exhaustive

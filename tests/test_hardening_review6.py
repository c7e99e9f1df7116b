"""The sixth adversarial review (docs/hardening.md, "A sixth round"): the findings fixed, one test each.

Each failed on the code before its fix.
"""

import numpy as np
import pytest

from safeprefetch import OnDemandPrefetcher

pytestmark = pytest.mark.timeout(60)


class Tiles:
    """Item i is ``[i, i, i]``."""

    def __len__(self):
        return 10

    def __getitem__(self, i):
        return np.full(3, i, np.int64)


class _Long:
    """Item i is ``[i, i, i]``, for 1000 indices."""

    def __len__(self):
        return 1000

    def __getitem__(self, i):
        return np.full(3, i, np.int64)


@pytest.mark.parametrize("effect", ["signal", "raise"])
def test_2_ctrl_c_anywhere_in_the_adaptive_predictor_leaves_it_consistent(effect):
    # A KeyboardInterrupt raised inside the predictor (a SIGINT handler installed after the prefetcher)
    # right after _Score.score popped a pending prediction left it popped and unused: 16 requests later
    # its expiry raised KeyError out of get(). Injected at every eval-breaker point of predictors.py.
    from safeprefetch._prefetcher import predictors
    from safeprefetch._runtime import inject

    files = [predictors.__file__]
    do = inject.deliver_sigint if effect == "signal" else inject.raise_keyboard_interrupt
    opened = []

    def prepare():
        pf = OnDemandPrefetcher(_Long(), capacity=4, workers=1, predict="adaptive")
        opened.append(pf)
        for i in range(60):
            pf.get(i)
        return lambda: pf.get(60)

    try:
        points = inject.record_points(None, files, prepare=prepare, occurrences=2)
        for pf in opened:
            pf.close()
        assert len(points) > 50, points
        problems = []
        for point in points:
            opened.clear()
            got = inject.run_with_injection(None, point, do, files, prepare=prepare)
            pf = opened[0]
            try:
                if got.fired and not (got.raised and isinstance(got.result, KeyboardInterrupt)):
                    problems.append(f"{point}: the call returned {got.result!r}")
                for i in range(60, 100):
                    if pf.get(i)[0] != i:
                        problems.append(f"{point}: get({i}) answered with another index")
            except Exception as e:  # noqa: BLE001 - what the test is looking for
                problems.append(f"{point}: {type(e).__name__}: {e}")
            finally:
                pf.close()
        assert not problems, "\n".join(problems[:10])
    finally:
        for pf in opened:
            pf.close()

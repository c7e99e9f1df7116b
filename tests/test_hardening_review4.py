"""The fourth adversarial review (2026-12-02, third session): the findings fixed, one test each.

Each failed on the code before its fix.

1. ``OnDemandPrefetcher.copy_into`` interrupted by Ctrl-C after its copy kept the batch only in the
   caller's ``out`` (by reference): a caller that wrote ``out`` before asking again got its own data
   back as the batch. The streaming Prefetcher had this fixed (``consumer._owned``); the on-demand
   one keeps a private copy now too.
2. ``OnDemandPrefetcher`` refused a 1-d ndarray source (numpy scalars) that the streaming one takes
   as 0-d batches, and that its own workers serve once shape and dtype are given.
"""

import inspect
import signal
import sys

import numpy as np
import pytest

from safeprefetch import OnDemandPrefetcher
from safeprefetch._prefetcher.ondemand_serve import ServeSide

pytestmark = pytest.mark.timeout(60)


class Tiles:
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return np.full(4, i, np.int64)


def _release_line():
    """The line of ``ServeSide._produce`` that releases the slot, right after the copy into ``out``."""
    lines, first = inspect.getsourcelines(ServeSide._produce)
    hits = [first + i for i, text in enumerate(lines) if "self.rt.step(self.consumer)" in text]
    assert len(hits) == 1, lines
    return hits[0]


@pytest.mark.parametrize("retry", ["copy_into", "get"])
def test_1_copy_into_interrupted_after_its_copy_hands_out_the_batch_not_the_callers_buffer(retry):
    code, line = ServeSide._produce.__code__, _release_line()
    fired = []

    def tracer(frame, event, arg):
        if frame.f_code is not code:
            return None

        def local(frame, event, arg):
            if event == "line" and frame.f_lineno == line and not fired:
                fired.append(1)
                signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)  # Ctrl-C lands here, as CPython runs it
            return local
        return local

    with OnDemandPrefetcher(Tiles(), capacity=4, workers=1, predict=None) as pf:
        handler = signal.getsignal(signal.SIGINT)
        assert callable(handler)
        out = np.zeros(4, np.int64)
        sys.settrace(tracer)
        try:
            with pytest.raises(KeyboardInterrupt):
                pf.copy_into(7, out)
        finally:
            sys.settrace(None)
        assert fired
        out[:] = -1  # the caller reuses its buffer before it asks again
        if retry == "copy_into":
            pf.copy_into(7, out)
            got = out
        else:
            got = pf.get(7)
        assert got.tolist() == [7, 7, 7, 7]


def test_2_a_1d_array_source_is_served_as_0d_batches_on_demand_too():
    src = np.arange(10.0)
    with OnDemandPrefetcher(src, workers=1) as pf:
        assert pf.get(3).shape == ()
        assert float(pf.get(3)) == 3.0 and float(pf.get(8)) == 8.0

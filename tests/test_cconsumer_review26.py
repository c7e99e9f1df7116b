"""Review of the consumer's C fast path (``cconsumer.py``, runtime="typed"): each test failed on cae9842.

1. ``last_index`` after a Ctrl-C at the fast path's return named the batch put back, not the one the thread
   last received (the C function set it before its return; the Python path sets it at the hand-out).
2. A consumer call made at the fast path's return (a signal handler or finalizer running at that eval-breaker
   point) took the outcome out of ``handing`` (``unhand``), and the interrupted call then raised KeyError.
3. ``Prefetcher(..., runtime="typed")`` of batches with more than 32 dimensions raised TypeError at
   construction (numpy 2 allows 64); runtime="generated" serves them.
"""

from __future__ import annotations

import numpy as np
import pytest
from _cython import cython_here
from test_cconsumer import _METHODS, _interrupt_at_a_served_return, _one, _opened, _source, at_each_instruction

from safeprefetch import Prefetcher
from safeprefetch._prefetcher import cconsumer

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(not cython_here(), reason="needs Cython (speed extra)")]


@pytest.mark.parametrize("how", ["copy", "get", "next"])
def test_last_index_after_a_ctrl_c_at_the_fast_paths_return_names_the_last_batch_received(monkeypatch, how):
    with _opened(monkeypatch) as pf:
        out = np.empty((2, 3), np.float32)
        [_one(pf, how, out) for _ in range(3)]
        assert pf.last_index == 2
        fired, disarm = _interrupt_at_a_served_return(how)
        try:
            with pytest.raises(KeyboardInterrupt):
                _one(pf, how, out)
        finally:
            disarm()
        assert fired == [True]
        assert pf.last_index == 2  # batch 3 was put back for the next call, not handed out
        b = _one(pf, how, out)
        assert float(b[0, 0]) == 18.0 and pf.last_index == 3


def _call_at_a_served_return(how: str, action):
    """Run ``action`` (as a signal handler or a finalizer would) at the first instruction of the public method
    ``how`` after the fast path served a batch. Returns (a list of what ``action`` returned, the disarm)."""
    done: list = []
    module = cconsumer.load()
    start = module.F_count()

    def at(offset: int) -> None:
        if not done and module.F_count() > start:
            done.append(action())

    return done, at_each_instruction(_METHODS[how].__code__, at)


@pytest.mark.parametrize("how", ["copy", "get", "next"])
def test_a_consumer_call_at_the_fast_paths_return_does_not_make_it_raise(monkeypatch, how):
    with _opened(monkeypatch) as pf:
        out = np.empty((2, 3), np.float32)
        got = [_one(pf, how, out) for _ in range(3)]
        inner, disarm = _call_at_a_served_return(how, pf.get)
        try:
            outer = _one(pf, how, out)  # KeyError on cae9842: the inner call took its outcome
        finally:
            disarm()
        assert len(inner) == 1
        got += [inner[0], outer]
        while (b := _one(pf, how, out)) is not None:
            got.append(b)
        assert sorted(float(b[0, 0]) for b in got) == [float(b[0, 0]) for b in _source()]  # every batch once


def test_batches_of_more_than_32_dimensions_with_runtime_typed():
    src = np.arange(4, dtype=np.float32).reshape((4,) + (1,) * 33)
    with Prefetcher(src, runtime="typed") as pf:  # TypeError on cae9842: "more than 32 dimensions"
        assert [float(b.ravel()[0]) for b in pf] == [0.0, 1.0, 2.0, 3.0]

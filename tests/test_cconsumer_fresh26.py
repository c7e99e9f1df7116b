"""Fresh-eyes review 26 of the consumer's C fast path (``cconsumer.py``, runtime="typed"): each test fails on 49e4dfb.

1. A ``get()`` waiting in a take that a ``close()`` on another thread cuts short raises the Python path's
   ``PrefetcherClosed("... was closed")`` (the take's own CLOSED outcome, ``_terminal``); through the fast path
   the take's end was left unrecorded and the Python path that followed raised "is closed" instead.
"""

from __future__ import annotations

import threading

import pytest
from _cython import cython_here
from test_cconsumer import _Held

from safeprefetch import Prefetcher, PrefetcherClosed

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(not cython_here(), reason="needs Cython (speed extra)")]


def _closed_while_taking(fast: bool) -> str:
    """The error of a get() parked in its take when another thread closes the prefetcher."""
    source = _Held(held=3)
    pf = Prefetcher(source, capacity=4, runtime="typed", ordered=True, name="held")
    core = pf._core
    if not fast:
        core.serve_fast = None
    try:
        assert [int(pf.get()[0, 0]) for _ in range(3)] == [0, 1, 2]
        errors: list[BaseException] = []

        def call() -> None:
            try:
                pf.get()
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        consumer = threading.Thread(target=call)
        consumer.start()
        while not core.rt._parked[core.consumer]:  # observable: the model consumer parked in its take
            threading.Event().wait(0.001)
        closer = threading.Thread(target=pf.close)
        closer.start()
        consumer.join(30)
        source.release.set()
        closer.join(30)
        assert len(errors) == 1 and type(errors[0]) is PrefetcherClosed, errors
        return str(errors[0])
    finally:
        source.release.set()
        pf.close()


def test_a_take_cut_short_by_close_raises_the_python_paths_error():
    slow = _closed_while_taking(fast=False)
    assert slow == "prefetcher 'held' was closed"
    assert _closed_while_taking(fast=True) == slow  # "... is closed" on 49e4dfb

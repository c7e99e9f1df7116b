"""The twenty-second hardening round, the Prefetcher as an ML pipeline uses it: each test failed before its fix."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import sys
import threading
import warnings
import weakref

import numpy as np
import pytest

from safeprefetch import OnDemandPrefetcher, Prefetcher

pytestmark = pytest.mark.timeout(120)


# -- 1. a fetch_into that returns before its fetch is done (async def, a future) is refused, never delivered ----


class _AsyncInto:
    """``async def fetch_into``: calling it only makes a coroutine; out is written when (if ever) it is awaited."""

    def __len__(self):
        return 4

    async def fetch_into(self, i, out):
        await asyncio.sleep(0)
        out[...] = i + 1


class _FutureInto:
    """A ``fetch_into`` that hands the read to a thread pool and returns the future: out is written later."""

    def __init__(self, pool, go):
        self.pool, self.go = pool, go

    def __len__(self):
        return 4

    def fetch_into(self, i, out):
        def read():
            self.go.wait(10)
            out[...] = i + 1
        return self.pool.submit(read)


class _GeneratorInto:
    """A ``fetch_into`` written with ``yield`` by mistake: calling it runs none of its body."""

    def __len__(self):
        return 4

    def fetch_into(self, i, out):
        out[...] = i + 1
        yield


def _deferred_sources(pool, go):
    return [_AsyncInto(), _FutureInto(pool, go), _GeneratorInto()]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_fetch_into_that_returns_before_its_fetch_is_done_is_refused(which):
    # Before: the coroutine (future, generator) was taken for a status and ignored, so every batch was the slot's
    # zeros (and a future's thread wrote the slot after it was published): [[0, 0, 0]] * 4, silently.
    go = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        source = _deferred_sources(pool, go)[which]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (a coroutine never awaited warns; it is closed here, unawaited)
            with Prefetcher(source, shape=(3,), dtype=np.int64) as pf:
                with pytest.raises(TypeError, match=r"item 0: fetch_into returned .*not finished"):
                    pf.get()
            with OnDemandPrefetcher(source, shape=(3,), dtype=np.int64, predict=None) as od:
                with pytest.raises(TypeError, match=r"fetch_into returned .*not finished"):
                    od.get(2)
            gc.collect()
        go.set()


def test_a_status_object_is_still_a_status():
    # Guard (passes before and after): what fetch_into's rules call a status stays one.
    class Status:
        def __len__(self):
            return 3

        def fetch_into(self, i, out):
            out[...] = i
            return {"ok": True, "bytes": out.nbytes}

    with Prefetcher(Status(), shape=(2,), dtype=np.int64) as pf:
        assert [b.tolist() for b in pf] == [[0, 0], [1, 1], [2, 2]]

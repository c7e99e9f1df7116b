"""Bad input, enumerated: every case names the exception type and the message it must carry.

Constructor arguments fail at construction (ValueError / TypeError). Bad
batches fail at their position in the stream. Misuse of a live or closed
prefetcher fails with a named error. No case may leave a thread behind.
"""

import concurrent.futures
import gc
import threading
import time

import numpy as np
import pytest

from safeprefetch.testing import thread_count

from safeprefetch import LeaseHeld, Prefetcher, PrefetcherClosed

pytestmark = [pytest.mark.live, pytest.mark.timeout(60)]

SHAPE = (4, 3)


def good(n=3, dtype=np.float32):
    return [np.full(SHAPE, i, dtype) for i in range(n)]


def make(source=None, **kw):
    def run():
        pf = Prefetcher(good() if source is None else source, **kw)
        pf.close()  # only reached if construction wrongly succeeded
    return run


def drain(source, **kw):
    """Construct (must succeed), then read everything: the error must come from the stream."""
    def run():
        with Prefetcher(source, **kw) as pf:
            for _ in pf:
                pass
    return run


def on_open(action, source=None, **kw):
    def run():
        with Prefetcher(good() if source is None else source, **kw) as pf:
            action(pf)
    return run


def after_close(action):
    def run():
        pf = Prefetcher(good())
        pf.close()
        action(pf)
    return run


def gen(*items):
    def g():
        yield from items
    return g()


def raising(exc, at=1, n=3):
    class Src:
        def __len__(self):
            return n

        def __getitem__(self, i):
            if i == at:
                raise exc
            return np.full(SHAPE, i, np.float32)
    return Src()


class IntoOnly:
    def __len__(self):
        return 3

    def fetch_into(self, i, out):
        out[...] = i


class BadLen:
    def __len__(self):
        raise TypeError("no length today")

    def __getitem__(self, i):
        return np.zeros(SHAPE)


def exits_after_one():
    yield np.zeros(2)
    raise SystemExit("generator exit")


def read_only():
    a = np.zeros(SHAPE, np.float32)
    a.flags.writeable = False
    return a


def hold_lease_then(action):
    def run(pf):
        lease = pf.lease()
        try:
            action(pf)
        finally:
            lease.release()
    return run


CASES = [
    # -- constructor: capacity and workers
    ("capacity=0", make(capacity=0), ValueError, r"capacity must be >= 1, got 0"),
    ("capacity=-1", make(capacity=-1), ValueError, r"capacity must be >= 1, got -1"),
    ("capacity=1.5", make(capacity=1.5), TypeError, r"capacity must be an int, not float \(1\.5\)"),
    ("capacity='2'", make(capacity="2"), TypeError, r"capacity must be an int, not str \('2'\)"),
    ("capacity=True", make(capacity=True), TypeError, r"capacity must be an int, not bool"),
    ("capacity=None", make(capacity=None), TypeError, r"capacity must be an int, not NoneType"),
    ("workers=0", make(workers=0), ValueError, r"workers must be >= 1, got 0"),
    ("workers=2.0", make(workers=2.0), TypeError, r"workers must be an int, not float"),
    ("ordered='yes'", make(ordered="yes"), TypeError, r"ordered must be a bool, not str"),
    # -- constructor: the source
    ("source=None", lambda: Prefetcher(None), TypeError, r"map-style source, not None"),
    ("source=str", make(source="abc"), TypeError, r"a str yields characters"),
    ("source=bytes", make(source=b"abc"), TypeError, r"a bytes yields characters"),
    ("source=int", make(source=42), TypeError, r"iterable of arrays or a map-style source .* not int"),
    ("source=0-d array", make(source=np.array(5.0)), TypeError, r"0-d array"),
    ("len() raises", make(source=BadLen()), TypeError, r"len\(source\) failed: no length today"),
    ("fetch_into without shape", make(source=IntoOnly()), ValueError, r"needs shape= and dtype="),
    ("iterator with workers=2", make(source=gen(*good()), workers=2), ValueError,
     r"iterable source is read by one worker.*workers=2"),
    ("iterator with shuffle", make(source=gen(*good()), shuffle=True), ValueError, r"index plans .* map-style"),
    ("iterator with a shard", make(source=gen(*good()), world_size=2), ValueError, r"index plans .* map-style"),
    ("iterator with an executor", make(source=gen(*good()), executor=concurrent.futures.ThreadPoolExecutor(1)),
     ValueError, r"executor= needs a map-style source"),
    # -- constructor: plan, budget, shape, dtype, executor, timeouts
    ("rank >= world_size", make(rank=2, world_size=2), ValueError, r"rank must be < world_size"),
    ("rank=-1", make(rank=-1), ValueError, r"rank must be >= 0, got -1"),
    ("world_size=0", make(world_size=0), ValueError, r"world_size must be >= 1, got 0"),
    ("shuffle='yes'", make(shuffle="yes"), TypeError, r"shuffle must be a bool"),
    ("seed=-1", make(shuffle=True, seed=-1), ValueError, r"seed must be >= 0"),
    ("epoch=1.0", make(epoch=1.0), TypeError, r"epoch must be an int"),
    ("memory_budget=0", make(memory_budget=0), ValueError, r"memory_budget must be >= 1, got 0"),
    ("memory_budget='1GB'", make(memory_budget="1GB"), TypeError, r"memory_budget must be an int, not str"),
    ("memory_budget below one batch", make(memory_budget=47), ValueError,
     r"one batch of shape \(4, 3\) dtype float32 takes 48 bytes, more than memory_budget=47"),
    ("shape='4,3'", make(shape="4,3"), TypeError, r"shape must be a tuple of ints, not str"),
    ("shape=(4, -3)", make(shape=(4, -3)), ValueError, r"shape must not have negative dimensions"),
    ("shape=(4, 3.0)", make(shape=(4, 3.0)), TypeError, r"shape must be a tuple of ints"),
    ("dtype='float33'", make(dtype="float33"), TypeError, r"dtype 'float33' is not a numpy dtype"),
    ("executor=object()", make(executor=object()), TypeError, r"executor must be a concurrent\.futures\.Executor"),
    ("close_timeout=0", make(close_timeout=0), ValueError, r"close_timeout must be > 0 seconds"),
    ("close_timeout=nan", make(close_timeout=float("nan")), ValueError, r"close_timeout must be a number of seconds"),
    ("close_timeout='5'", make(close_timeout="5"), TypeError, r"close_timeout must be a number of seconds"),
    ("name=3", make(name=3), TypeError, r"name must be a str"),
    # -- bad batches, delivered at their position
    ("wrong shape at item 2", drain(good(2) + [np.zeros((3, 4), np.float32)]), ValueError,
     r"item 2: expected shape \(4, 3\) dtype float32, got shape \(3, 4\) dtype float32"),
    ("wrong dtype at item 1", drain([good(1)[0], np.zeros(SHAPE, np.float64)]), ValueError,
     r"item 1: expected shape \(4, 3\) dtype float32, got shape \(4, 3\) dtype float64"),
    ("non-array at item 1", drain([good(1)[0], [[0.0] * 3] * 4]), TypeError,
     r"item 1: expected a numpy array, got list"),
    ("non-array first item", drain([7, good(1)[0]]), TypeError, r"item 0: expected a numpy array, got int"),
    ("mixed shapes from a generator", drain(gen(np.zeros(3), np.zeros(3), np.zeros(4))), ValueError,
     r"item 2: expected shape \(3,\) dtype float64, got shape \(4,\)"),
    ("given shape, first batch differs", drain(good(), shape=(3, 4)), ValueError,
     r"item 0: expected shape \(3, 4\) dtype float32, got shape \(4, 3\)"),
    ("given dtype, batch differs", drain(good(), dtype=np.int64), ValueError,
     r"item 0: expected shape \(4, 3\) dtype int64, got shape \(4, 3\) dtype float32"),
    ("wrong shape under a shard", drain([np.zeros(2)] * 3 + [np.zeros(3)], rank=1, world_size=2), ValueError,
     r"item 1 \(source index 3\): expected shape \(2,\)"),
    # -- exceptions from the source, delivered with their own type
    ("source raises SystemExit", drain(raising(SystemExit(3))), SystemExit, r"3"),
    ("source raises KeyboardInterrupt", drain(raising(KeyboardInterrupt("from the source"))), KeyboardInterrupt,
     r"from the source"),
    ("source raises GeneratorExit", drain(raising(GeneratorExit("odd"))), GeneratorExit, r"odd"),
    ("source raises OSError", drain(raising(OSError(5, "disk on fire"))), OSError, r"disk on fire"),
    ("generator raises SystemExit", drain(exits_after_one()), SystemExit, r"generator exit"),
    # -- copy_prefetched and timeouts, checked before anything is consumed
    ("copy_prefetched into read-only", on_open(lambda pf: pf.copy_prefetched(read_only())), ValueError,
     r"out is read-only"),
    ("copy_prefetched wrong shape", on_open(lambda pf: pf.copy_prefetched(np.zeros((3, 4), np.float32))),
     ValueError, r"out has shape \(3, 4\) dtype float32; the batches have shape \(4, 3\) dtype float32"),
    ("copy_prefetched wrong dtype", on_open(lambda pf: pf.copy_prefetched(np.zeros(SHAPE, np.float64))),
     ValueError, r"out has shape \(4, 3\) dtype float64"),
    ("copy_prefetched into a list", on_open(lambda pf: pf.copy_prefetched([0] * 12)), TypeError,
     r"out must be a numpy array, not list"),
    ("get(timeout=-1)", on_open(lambda pf: pf.get(timeout=-1)), ValueError, r"timeout must be >= 0 seconds"),
    ("get(timeout='1')", on_open(lambda pf: pf.get(timeout="1")), TypeError, r"timeout must be a number of seconds"),
    ("get(timeout=nan)", on_open(lambda pf: pf.get(timeout=float("nan"))), ValueError, r"timeout must be a number"),
    ("get(timeout=True)", on_open(lambda pf: pf.get(timeout=True)), TypeError, r"timeout must be a number"),
    ("close(timeout=-1)", on_open(lambda pf: pf.close(timeout=-1)), ValueError, r"timeout must be >= 0 seconds"),
    ("timeout=-1", make(timeout=-1), ValueError, r"timeout must be >= 0 seconds"),
    ("even='yes'", make(even="yes"), ValueError, r"even must be None, 'pad' or 'drop'"),
    ("even= with an iterator", make(source=iter(good()), even="pad"), ValueError, r"index plans .* need a map-style source"),
    ("thread_safe=1", make(thread_safe=1), TypeError, r"thread_safe must be a bool"),
    # -- one lease at a time
    ("get while a lease is held", on_open(hold_lease_then(lambda pf: pf.get())), LeaseHeld,
     r"a lease is still held"),
    ("lease while a lease is held", on_open(hold_lease_then(lambda pf: pf.lease())), LeaseHeld,
     r"a lease is still held"),
    # -- use after close
    ("get after close", after_close(lambda pf: pf.get()), PrefetcherClosed, r"is closed"),
    ("next after close", after_close(lambda pf: next(pf)), PrefetcherClosed, r"is closed"),
    ("iteration after close", after_close(lambda pf: list(pf)), PrefetcherClosed, r"is closed"),
    ("copy_prefetched after close", after_close(lambda pf: pf.copy_prefetched(np.zeros(SHAPE, np.float32))),
     PrefetcherClosed, r"is closed"),
    ("lease after close", after_close(lambda pf: pf.lease()), PrefetcherClosed, r"is closed"),
    ("get(timeout) after close", after_close(lambda pf: pf.get(timeout=0.1)), PrefetcherClosed, r"is closed"),
]


def test_there_are_at_least_thirty_cases():
    assert len(CASES) >= 30
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case, expected, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_a_clear_named_error(case, expected, message):
    gc.collect()
    before = thread_count()
    with pytest.raises(expected, match=message) as info:
        case()
    assert type(info.value) is expected or expected in (OSError,)
    del info
    gc.collect()
    deadline = time.monotonic() + 5
    while thread_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert thread_count() == before

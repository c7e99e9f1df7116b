"""The tenth round (docs/hardening.md, "A tenth round"): an adversarial review of the put-back path.

Each test failed on the code before its fix.
"""

import signal
import threading
import time

import numpy as np
import pytest

from safeprefetch import LeaseHeld, Prefetcher
from safeprefetch._prefetcher.consumer import GET, ConsumerSide
from safeprefetch.lowlevel import python_sigint
from _tracing import interrupted_under

pytestmark = pytest.mark.timeout(60)


class Items:
    """Item i is ``[i, i, i]``."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.full(3, i, np.int64)


def test_1_a_put_back_batch_is_not_handed_out_while_another_thread_holds_a_lease():
    # The main thread's get() is interrupted at its hand-out (a deferred Ctrl-C), and before its batch goes
    # back (unreturn), a second consumer thread takes a lease. The next calls used to serve the put-back
    # batch without asking whether a lease was held: a lease() returned it as a private lease and forgot
    # the held one, and the get() after it gave back the slot the held lease was reading, which a worker
    # then refilled under it ([2, 2, 2] became [4, 4, 4], the lease unreleased).
    with python_sigint():
        pf = Prefetcher(Items(12), capacity=2, workers=1)
        try:
            assert int(pf.get(timeout=10)[0]) == 0
            held, taken = [], threading.Event()
            other = threading.Thread(target=lambda: (held.append(pf.lease(timeout=10)), taken.set()))
            serve, unreturn = ConsumerSide._serve.__code__, ConsumerSide.unreturn.__code__
            fired = {"serve": 0, "unreturn": 0}

            def tracer(frame, event, arg):
                if event != "call":
                    return None
                if frame.f_code is serve and not fired["serve"]:
                    fired["serve"] = 1
                    signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)  # deferred to the hand-out
                elif frame.f_code is unreturn and not fired["unreturn"]:
                    fired["unreturn"] = 1  # the batch goes back now: another thread takes a lease first
                    other.start()
                    assert taken.wait(10)
                return None

            interrupted_under(tracer, lambda: pf.get(timeout=10))
            other.join(10)
            (lease,) = held
            assert int(lease.array[0]) == 2
            snapshot = lease.array.copy()
            with pytest.raises(LeaseHeld):
                pf.lease(timeout=10)
            with pytest.raises(LeaseHeld):
                pf.get(timeout=10)
            assert np.array_equal(lease.array, snapshot) and not lease.released
            lease.release()
            # The put-back batch (1) comes next, then the rest in order: nothing lost or repeated.
            rest = [int(b[0]) for b in pf]
            assert rest == [1] + list(range(3, 12)), rest
        finally:
            pf.close()


def _put_back(pf: Prefetcher, count: int) -> list[int]:
    """``count`` calls whose hand-out was interrupted, one after another, as ``handout`` puts them back."""
    core = pf._core
    taken = [core.consume(GET, None, time.monotonic() + 5) for _ in range(count)]
    for entry in taken:
        core.unreturn(entry)
    return [int(e[2]) for e in taken]


def test_2_outcomes_put_back_come_out_in_the_order_they_went_back():
    # take_returned put each outcome after the first at the front of the backlog: three put back as
    # 0, 1, 2 came out as 0, 2, 1.
    pf = Prefetcher(Items(8), capacity=3, workers=1)
    try:
        assert _put_back(pf, 3) == [0, 1, 2]
        assert [int(b[0]) for b in pf] == list(range(8))
    finally:
        pf.close()


def test_3_iteration_is_not_refused_while_a_put_back_batch_waits_in_the_backlog():
    # A third call got the end of the stream; two batches were put back before it. After one of them,
    # iter(pf) raised PrefetcherExhausted though batch 1 was still owed (refuse_iteration looked at the
    # stash and the put-back list, not the backlog).
    pf = Prefetcher(Items(2), capacity=2, workers=1)
    core = pf._core
    try:
        taken = [core.consume(GET, None, time.monotonic() + 5) for _ in range(2)]
        assert core.consume(GET, None, time.monotonic() + 5)[0] == "end"
        for entry in taken:
            core.unreturn(entry)
        assert int(pf.get(timeout=5)[0]) == 0
        assert [int(b[0]) for b in pf] == [1]
    finally:
        pf.close()

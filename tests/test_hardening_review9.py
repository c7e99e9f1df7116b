"""The ninth round (docs/hardening.md, "A ninth round"): the findings fixed, one test each.

Each failed on the code before its fix. (The back-edge audit has its own file, tests/test_backedges.py.)
"""

import signal
import threading

import numpy as np
import pytest

from safeprefetch import Prefetcher
from safeprefetch._prefetcher.consumer import ConsumerSide
from safeprefetch.lowlevel import python_sigint
from _tracing import interrupted_under
from _polling import wait_until

pytestmark = pytest.mark.timeout(60)


class HeldAt:
    """Item i is ``[i, i, i]``; reading item ``hold`` waits until ``go`` is set (bounded). ``started``: the
    items whose read began."""

    def __init__(self, n: int, hold: int):
        self.n, self.hold, self.go, self.started = n, hold, threading.Event(), []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.started.append(i)
        if i == self.hold:
            self.go.wait(30)
        return np.full(3, i, np.int64)


def _held_by_another_thread(lock) -> bool:
    if lock.acquire(blocking=False):
        lock.release()
        return False
    return True


def test_1_a_second_ctrl_c_while_the_batch_goes_back_behind_another_consumer_loses_nothing():
    # A Ctrl-C deferred in a call is raised as the call hands its batch out, and the batch is put back for
    # the next call (unreturn). Putting it back waited for the consumer gate, interruptibly (so that it
    # could not hang behind another consumer thread's long call), and a second Ctrl-C during that wait
    # lost the batch: here batch 1, while a second consumer thread held the gate waiting for batch 2.
    # docs/hardening.md listed it as not fixed. unreturn now records the batch without the gate.
    src = HeldAt(8, hold=2)
    serve, unreturn = ConsumerSide._serve.__code__, ConsumerSide.unreturn.__code__
    with python_sigint():
        pf = Prefetcher(src, capacity=2, workers=1)
        try:
            main_got = [int(pf.get(timeout=10)[0])]
            # One worker: once it has begun reading item 2, item 1 is ready, and the next call takes it at once.
            assert wait_until(lambda: 2 in src.started, 10)
            other_got: list[int] = []
            other = threading.Thread(target=lambda: other_got.append(int(pf.get(timeout=30)[0])))
            fired = {"first": 0, "second": 0, "other": 0}

            def tracer(frame, event, arg):
                if event != "call":
                    return None
                if frame.f_code is serve and not fired["first"]:
                    fired["first"] += 1  # the first Ctrl-C, inside the call: deferred to its hand-out
                    signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)
                elif frame.f_code is unreturn and not fired["other"]:
                    fired["other"] += 1  # the batch goes back now: let another consumer take the gate first
                    other.start()
                    assert wait_until(lambda: _held_by_another_thread(pf._core.gate), 10)
                elif frame.f_back is not None and frame.f_back.f_code is unreturn:
                    fired["second"] += 1  # a second Ctrl-C at every call the put-back makes
                    signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)
                return None

            interrupted_under(tracer, lambda: pf.get(timeout=10))
            assert fired["first"] == fired["other"] == 1 and fired["second"] >= 1, fired
            src.go.set()
            other.join(30)
            assert not other.is_alive()
            interrupts = 0
            while True:  # the second Ctrl-C, if it was deferred, is raised by a later call
                try:
                    main_got.append(int(pf.get(timeout=10)[0]))
                except StopIteration:
                    break
                except KeyboardInterrupt:
                    interrupts += 1
                    assert interrupts <= 2
        finally:
            pf.close()
    assert other_got == [2]
    assert sorted(main_got + other_got) == list(range(8)), (main_got, other_got)

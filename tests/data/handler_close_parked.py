"""Child process for tests/test_hardening_review14.py: a SIGINT handler calls close() while the consumer call it
interrupted is parked in the kernel (holding the consumer gate) and the worker is stuck in a fetch that only the
interrupted call's return lets finish. ``close_timeout=None``: a close that waits there waits for ever.

argv[1]: "stream" or "ondemand". Prints one line: the consumer call's exception type and the handler close's
result (``returned``)."""

import signal
import sys
import threading
from pathlib import Path

import numpy as np

from safeprefetch import OnDemandPrefetcher, Prefetcher

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' own helpers
from _polling import wait_until  # noqa: E402

MAIN = threading.main_thread().ident
release = threading.Event()


class Source:
    def __len__(self) -> int:
        return 20

    def __getitem__(self, i: int) -> np.ndarray:
        if i == 4 and threading.get_ident() != MAIN:
            release.wait()  # set by the main thread once its call has returned
        return np.zeros(4, np.float32) + i


def poll(cond) -> None:
    if not wait_until(cond, 30):
        print("setup never reached")
        sys.exit(3)


said = []


def handler(*_a) -> None:
    pf.close()
    said.append("returned")


if sys.argv[1] == "stream":
    pf = Prefetcher(Source(), capacity=1, workers=1, close_timeout=None)
    it = iter(pf)
    for _ in range(4):
        next(it)  # the worker is now inside fetch 4, waiting for release
    call = lambda: next(it)  # noqa: E731
else:
    pf = OnDemandPrefetcher(Source(), capacity=3, workers=1, predict="sequential", shape=(4,), dtype=np.float32,
                            close_timeout=None)
    pf.get(3)  # the worker speculates 4 and waits for release
    poll(lambda: any(str(st) == "FILLING" and tag == 4 for st, tag in pf.slots()))  # else get(4) is a miss
    call = lambda: pf.get(4)  # noqa: E731
core = pf._core
signal.signal(signal.SIGINT, handler)


def kill_when_parked() -> None:
    poll(lambda: core.rt.is_parked(core.consumer))
    signal.pthread_kill(MAIN, signal.SIGINT)


threading.Thread(target=kill_when_parked, daemon=True).start()
try:
    call()
    outcome = "no exception"
except BaseException as e:  # noqa: BLE001
    outcome = type(e).__name__
release.set()
print(outcome, *said)
pf.close()

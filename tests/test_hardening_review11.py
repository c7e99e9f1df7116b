"""The eleventh round (docs/hardening.md, "An eleventh round"): what the tenth left open, and its reviews.

Each test failed on the code before its fix.
"""

import time

import numpy as np
import pytest

from safeprefetch import Prefetcher, PrefetcherClosed
from safeprefetch._prefetcher.consumer import GET

pytestmark = pytest.mark.timeout(60)


class Items:
    """Item i is ``[i, i, i]``; item ``fail_at`` raises."""

    def __init__(self, n: int, fail_at: int = -1):
        self.n = n
        self.fail_at = fail_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise OSError(f"item {i} is unreadable")
        return np.full(3, i, np.int64)


def _interrupted_outcome(pf: Prefetcher) -> tuple:
    """A call whose hand-out was interrupted: its outcome goes back (``unreturn``), as ``handout`` does."""
    entry = pf._core.consume(GET, None, time.monotonic() + 5)
    pf._core.unreturn(entry)
    return entry


@pytest.mark.parametrize("fail_at", [-1, 1], ids=["end", "error"])
def test_1_use_after_close_raises_closed_even_with_an_end_or_error_put_back(fail_at):
    # "Use after close raises PrefetcherClosed." A call that got the end of the stream (or the source's
    # error) and was interrupted at its hand-out puts that outcome back; after close() the next call
    # reported the end (False / StopIteration) or re-raised the source error, and only the one after it
    # raised PrefetcherClosed. A batch put back was already dropped at close; an end or error was not.
    pf = Prefetcher(Items(1 if fail_at < 0 else 2, fail_at), capacity=2, workers=1)
    assert int(pf.get(timeout=5)[0]) == 0
    kind = _interrupted_outcome(pf)[0]
    assert kind == ("end" if fail_at < 0 else "error")
    pf.close()
    for call in (lambda: pf.get(timeout=5), lambda: pf.copy_prefetched(np.empty(3, np.int64), timeout=5),
                 lambda: next(iter(pf))):
        with pytest.raises(PrefetcherClosed):
            call()

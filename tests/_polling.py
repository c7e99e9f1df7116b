"""Waiting on observable state in tests: poll a condition, never sleep a fixed time and hope."""

from __future__ import annotations

import time
from typing import Callable


def wait_until(cond: Callable[[], object], seconds: float = 5.0) -> bool:
    """Poll ``cond`` until it holds; False if it does not hold within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)
    return True

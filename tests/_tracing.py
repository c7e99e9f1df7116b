"""A call made under a trace function that fires a Ctrl-C inside it (the hardening reviews' tests)."""

import sys
from typing import Any, Callable

import pytest


def interrupted_under(tracer: Callable[..., Any], call: Callable[[], Any]) -> None:
    """Run ``call()`` with ``tracer`` as this thread's trace function; it must raise KeyboardInterrupt."""
    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            call()
    finally:
        sys.settrace(None)

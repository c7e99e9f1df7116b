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


def sigint_at_call(code: Any) -> tuple[Callable[..., Any], list]:
    """A trace function that runs the SIGINT handler (a Ctrl-C) once, when a frame of ``code`` is entered; and
    a list that holds one item once it has."""
    import signal

    fired: list = []

    def tracer(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is code and not fired:
            fired.append(1)
            signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)
        return None

    return tracer, fired

"""How the live runtime fails: named errors, classified as the checker classifies violations."""

from __future__ import annotations

__all__ = ["LiveDeadlock", "LiveError", "LiveViolation", "NeverStarted", "StepTimeout"]


class LiveError(Exception):
    """The live machine can make no further progress, or broke a property."""

    kind = "error"

    def __init__(self, kind: str, message: str, state: tuple = (), description: str = ""):
        super().__init__(f"{kind}: {message}" + (f"\n{description}" if description else ""))
        self.kind = kind
        self.message = message
        self.state = state
        self.description = description


class LiveDeadlock(LiveError):
    """Every thread is done or parked, and some are parked: nothing can ever step again."""


class LiveViolation(LiveError):
    """A step raised a model violation, or a state broke an invariant, on real threads."""


class NeverStarted(Exception):
    """The run is over and this thread was never started (no step spawned it): it has nothing left to do.

    Raised by ``Runtime.step`` for such a thread once every other thread is done; the model counts it
    as finished (``Machine.all_done``), and so does ``run_thread``."""


class StepTimeout(Exception):
    """A thread's step did not become enabled within its timeout."""

"""Starting and joining a test body's threads, and recording what a call did, for the interleaving tests (run
under the checker)."""

from __future__ import annotations

import threading


def run(*threads: threading.Thread) -> None:
    """Start every thread, then join every one: the shape most test bodies share."""
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def outcome(call):
    """What one call did: ``("returned", repr(value))`` or ``(exception type, message)``."""
    try:
        value = call()
    except BaseException as e:  # noqa: BLE001 - the outcome is what is compared
        return (type(e).__name__, str(e))
    return ("returned", repr(value))

"""Starting and joining a test body's threads, for the interleaving tests (run under the checker)."""

from __future__ import annotations

import threading


def run(*threads: threading.Thread) -> None:
    """Start every thread, then join every one: the shape most test bodies share."""
    for t in threads:
        t.start()
    for t in threads:
        t.join()

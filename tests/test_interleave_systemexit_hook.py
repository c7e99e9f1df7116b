"""A thread's ``SystemExit`` goes to the code's own ``threading.excepthook``, as CPython gives it (the checker did
not call the hook for it: a program whose hook wakes a waiter for every ended thread was reported hanging).

Each body is first run on real threads, so the behaviour asserted is CPython's, not an assumption about it.
"""

from __future__ import annotations

import pytest

from safeprefetch import interleavings

pytestmark = pytest.mark.timeout(120)


def _hook_sees_systemexit():
    import sys
    import threading

    seen = []
    old = threading.excepthook
    threading.excepthook = lambda args: seen.append((args.exc_type, args.thread.name))
    try:
        t = threading.Thread(target=lambda: sys.exit(3), name="worker")
        t.start()
        t.join()
    finally:
        threading.excepthook = old
    assert seen == [(SystemExit, "worker")], seen


def _hook_wakes_the_waiter():
    """The main thread waits for an event only the hook sets: with the hook not called, it waits for ever."""
    import sys
    import threading

    ended = threading.Event()
    old = threading.excepthook
    threading.excepthook = lambda args: ended.set()
    try:
        t = threading.Thread(target=sys.exit, name="worker")
        t.start()
        ended.wait()
        t.join()
    finally:
        threading.excepthook = old


def _hook_raises_on_systemexit():
    import sys
    import threading

    def hook(args):
        raise RuntimeError("hook failed")
    old = threading.excepthook
    threading.excepthook = hook
    try:
        t = threading.Thread(target=sys.exit, name="worker")
        t.start()
        t.join()
    finally:
        threading.excepthook = old


def _no_hook_systemexit():
    import sys
    import threading

    t = threading.Thread(target=sys.exit, name="worker")
    t.start()
    t.join()


@pytest.mark.parametrize("body", [_hook_sees_systemexit, _hook_wakes_the_waiter])
def test_a_threads_systemexit_reaches_the_codes_own_hook(body):
    body()  # CPython's behaviour, on real threads
    result = interleavings.check(body)
    assert result.verdict == "ok", interleavings.render(result)


def test_a_hook_that_raises_on_systemexit_is_reported():
    result = interleavings.check(_hook_raises_on_systemexit)
    assert result.verdict == "uncaught_exception"
    assert "raised SystemExit" in result.violation.message and "excepthook raised" in result.violation.message


def test_without_a_hook_of_the_codes_own_a_threads_systemexit_is_no_finding():
    """Guard: CPython's default hook ignores SystemExit silently; so does the checker (pytest's hook is not the
    code's). Not run on real threads here: pytest's own hook would take the SystemExit as a warning."""
    assert interleavings.check(_no_hook_systemexit).verdict == "ok"

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


# -- What CPython does around the hook, beyond calling it (fresh review 25) -----------------------------------
# A body run on real threads in a child process: what CPython prints, and how the process ends, are the behaviour
# the checker must report (a traceback printed is a finding; nothing printed is none).


class _Exit(SystemExit):
    """A SystemExit of the code's own: CPython's default hook passes over ``SystemExit`` itself only."""


def _child(name: str):
    import os
    import subprocess
    import sys

    code = f"import runpy; runpy.run_path({__file__!r})[{name!r}](); print('returned')"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=root,
                          check=False)


def _worker_under_hook(hook, target):
    """Run ``target`` in a thread named worker, with ``hook`` as ``threading.excepthook`` (None: the one in place)."""
    import threading

    old = threading.excepthook
    threading.excepthook = old if hook is None else hook
    try:
        t = threading.Thread(target=target, name="worker")
        t.start()
        t.join()
    finally:
        threading.excepthook = old


def _raise(e):
    def hook_or_target(*_args):
        raise e
    return hook_or_target


def _hook_raises_systemexit_on_systemexit():
    import sys

    _worker_under_hook(_raise(SystemExit(5)), sys.exit)


def _hook_raises_systemexit_on_an_error():
    _worker_under_hook(_raise(SystemExit(5)), _raise(ZeroDivisionError("division by zero")))


def _a_systemexit_subclass_without_a_hook():
    _worker_under_hook(None, _raise(_Exit(3)))


def _a_systemexit_subclass_with_a_hook():
    seen = []
    _worker_under_hook(lambda args: seen.append(args.exc_type), _raise(_Exit(3)))
    assert seen == [_Exit], seen


def _hook_calls_os_exit():
    import os
    import sys

    _worker_under_hook(lambda args: os._exit(7), sys.exit)


@pytest.mark.parametrize("body", [_hook_raises_systemexit_on_systemexit, _hook_raises_systemexit_on_an_error])
def test_a_hook_that_raises_systemexit_ends_its_thread_silently(body):
    """CPython's C thread start clears a ``SystemExit`` out of the hook with no output, whatever the thread raised;
    the checker reported it (the hook "raised while handling it", or the thread's own error as unhandled)."""
    real = _child(body.__name__)
    assert (real.returncode, real.stdout, real.stderr) == (0, "returned\n", ""), real
    result = interleavings.check(body)
    assert result.verdict == "ok", interleavings.render(result)


def test_a_systemexit_subclass_without_a_hook_is_a_finding():
    """CPython's default hook ignores ``SystemExit`` itself, and prints a subclass's traceback like any other;
    the checker passed over every SystemExit."""
    real = _child(_a_systemexit_subclass_without_a_hook.__name__)
    assert real.returncode == 0 and "Exception in thread worker" in real.stderr and "_Exit: 3" in real.stderr, real
    result = interleavings.check(_a_systemexit_subclass_without_a_hook)
    assert result.verdict == "uncaught_exception", interleavings.render(result)
    assert "thread worker raised _Exit: 3" in result.violation.message, result.violation.message


def test_a_systemexit_subclass_reaches_the_codes_hook():
    real = _child(_a_systemexit_subclass_with_a_hook.__name__)
    assert (real.returncode, real.stderr) == (0, ""), real
    result = interleavings.check(_a_systemexit_subclass_with_a_hook)
    assert result.verdict == "ok", interleavings.render(result)


def test_a_hook_that_calls_os_exit_is_reported_as_the_process_ending():
    """``os._exit`` in the hook ends the process there (the checker's ProcessExit, a SystemExit): the finding says
    so, not that the hook raised."""
    real = _child(_hook_calls_os_exit.__name__)
    assert (real.returncode, real.stdout, real.stderr) == (7, "", ""), real
    result = interleavings.check(_hook_calls_os_exit)
    assert result.verdict == "uncaught_exception", interleavings.render(result)
    assert "excepthook called os._exit(7): the process would have ended there" in result.violation.message, \
        result.violation.message

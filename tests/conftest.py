import contextlib
import gc
import os
import threading
import time

import pytest

from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True, scope="session")
def _sigint_as_from_a_terminal():
    """SIGINT has Python's default handler for the whole run, as in an interpreter started from a terminal.

    A shell without job control starts a background job (``pytest &``) with SIGINT ignored, and CPython
    then installs no handler: every test that delivers a Ctrl-C would see nothing happen. The
    interrupt tests are about what Ctrl-C does, so they get one to deliver however pytest was started
    (tests/test_sigint_disposition.py checks the harnesses themselves in such a process)."""
    from safeprefetch.lowlevel import python_sigint

    with python_sigint():
        yield


@pytest.fixture
def baseline():
    """The running threads before the test (the reaper not counted); after it, every thread the test's
    prefetchers started must be gone (garbage collected, closed and joined)."""
    from safeprefetch.testing import thread_count

    gc.collect()
    before = thread_count()
    yield before
    gc.collect()
    deadline = time.monotonic() + 5
    while thread_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert thread_count() <= before, [t.name for t in threading.enumerate()]

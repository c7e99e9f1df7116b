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

"""Whether the compiled engine's tests can run: Cython is optional, except in CI, which installs it."""

import os

import pytest

from safeprefetch._check.generated import cython_available


def cython_here() -> bool:
    """True when Cython is importable; in CI (which installs the speed extra) its absence fails the test."""
    if cython_available():
        return True
    if os.environ.get("CI"):
        pytest.fail("CI installs the speed extra: Cython must be importable here")
    return False

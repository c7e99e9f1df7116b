"""The built documentation site, shared by the site tests: one build per test run.

``python -m safeprefetch docs build`` runs once, end to end (the live demo
for the story page included), into a folder every xdist worker of the run
shares; a file lock makes the other workers wait for it, so two cores do
not build it twice. Where ``SAFEPREFETCH_SITE`` names a site already built
from this checkout (``.ci/run`` builds one as a step of its own), the tests
open that one. Tests skip with the reason when the ``docs`` extra is not
installed.
"""

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: Seconds the build may take before the test that asked for it fails (10 s of CPU; 25 to 80 s of
#: wall time on two busy cores).
BUILD_TIMEOUT = 300
#: The pytest-timeout of a test that uses the site: the first one waits for the build (another
#: xdist worker may be building it), so the default 120 s is too short on a loaded machine.
SITE_TIMEOUT = BUILD_TIMEOUT + 120


def docs_extra_missing() -> str | None:
    """Why the site cannot be built here, or None."""
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError as e:
        return f"the docs extra is not installed ({e.name} missing): pip install -e \".[docs]\""
    return None


def built_site(tmp_path_factory) -> Path:
    """The site, built once per run (shared by xdist workers through a lock)."""
    missing = docs_extra_missing()
    if missing:
        pytest.skip(missing)
    given = os.environ.get("SAFEPREFETCH_SITE")
    if given and (Path(given) / "index.html").is_file():
        return Path(given)
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    out = root / "safeprefetch-site"
    with open(root / "safeprefetch-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "index.html").exists():
            done = subprocess.run([sys.executable, "-m", "safeprefetch", "docs", "build", "--out", str(out)],
                                  capture_output=True, text=True, timeout=BUILD_TIMEOUT)
            assert done.returncode == 0, done.stderr
            (root / "safeprefetch-site.log").write_text(done.stdout + done.stderr)
    return out

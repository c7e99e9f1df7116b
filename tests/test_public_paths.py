"""The README and the docs teach only public import paths (the private ones may move)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PRIVATE = re.compile(r"(from\s+safeprefetch\._\w+|import\s+safeprefetch\._\w+|python -m safeprefetch\._\w+)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_imports_or_runs_a_private_module(page):
    found = PRIVATE.findall(page.read_text())
    assert not found, f"{page.name} uses private paths: {sorted(set(found))}"


def test_the_public_modules_import_what_the_docs_name():
    import safeprefetch
    import safeprefetch.lowlevel as lowlevel
    import safeprefetch.model as model
    import safeprefetch.testing as testing

    for module in (safeprefetch, lowlevel, model, testing):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"
    for name in ("search", "explore_cluster", "swarm_search", "run_live", "verify_record", "Runtime", "record_points",
                 "run_with_injection"):
        assert name in lowlevel.__all__
    assert "write_timeline" in safeprefetch.__all__ and "recording_runtimes" in testing.__all__

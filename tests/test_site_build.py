"""The documentation site: docs/ verbatim, the API reference, a playground per model, no network.

The site is built once per run by the real command (``tests/_site.py``);
these tests read the files it wrote. The browser tests
(``tests/test_site_browser.py``) open the same build in Chromium.
"""

import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

from _site import SITE_TIMEOUT, built_site, docs_extra_missing
from safeprefetch import catalog
from safeprefetch._tools.fix import fix_model

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

pytestmark = pytest.mark.timeout(SITE_TIMEOUT)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return built_site(tmp_path_factory)


def _text(path: Path) -> str:
    """A page's visible text, roughly: tags dropped, entities decoded, whitespace collapsed."""
    raw = re.sub(r"<[^>]+>", " ", path.read_text(encoding="utf-8"))
    return " ".join(html.unescape(raw).split())


def test_every_docs_page_is_in_the_site(site):
    for page in sorted(DOCS.rglob("*.md")):
        rel = page.relative_to(DOCS).with_suffix(".html")
        assert (site / rel).is_file(), rel
    for svg in sorted((DOCS / "models").glob("*.svg")):
        assert (site / "models" / svg.name).read_bytes() == svg.read_bytes()
    for name in ("semantics", "spin", "performance", "reductions", "readme"):
        assert (site / f"{name}.html").is_file()


def test_generated_pages_are_the_generated_text_not_a_copy_of_it(site):
    # The model page's trace table comes from docs/models/NAME.md, unchanged: every line of its
    # fenced blocks is in the built page.
    for name in ("one_cond_signal", "monitor", "priority_inversion"):
        source = (DOCS / "models" / f"{name}.md").read_text(encoding="utf-8")
        blocks = re.findall(r"```text\n(.*?)```", source, re.S)
        assert blocks, name
        built = _text(site / "models" / f"{name}.html")
        for line in blocks[0].splitlines():
            assert " ".join(line.split()) in built, (name, line)
        assert f"playground/{name}.html" in (site / "models" / f"{name}.html").read_text(encoding="utf-8")
    semantics = _text(site / "semantics.html")
    for row in re.findall(r"^\| \[(\w+)\]\(models/", (DOCS / "semantics.md").read_text(), re.M):
        assert row in semantics


def test_api_reference_documents_the_public_modules_only(site):
    api = (site / "api" / "safeprefetch.html").read_text(encoding="utf-8")
    for name in ("safeprefetch.Prefetcher.copy_prefetched", "safeprefetch.check", "safeprefetch.PrefetchStats",
                 "safeprefetch.Violation"):
        assert f'id="{name}"' in api, name
    assert 'id="safeprefetch.model.Model"' in (site / "api" / "safeprefetch.model.html").read_text()
    assert "run_live" in (site / "api" / "safeprefetch.lowlevel.html").read_text()
    assert "assert_verdict" in (site / "api" / "safeprefetch.testing.html").read_text()
    for page in (site / "api").glob("*.html"):
        assert not re.search(r'id="safeprefetch\._', page.read_text()), page.name


def test_api_reference_turns_sphinx_roles_into_code_and_links(site):
    # The docstrings say :class:`Lease`; the page shows `Lease`, linked to where it is documented.
    for page in (site / "api").glob("*.html"):
        left = re.findall(r":(?:class|func|meth|data|mod|attr|exc|obj):<code>", page.read_text(encoding="utf-8"))
        assert left == [], page.name
    api = (site / "api" / "safeprefetch.html").read_text(encoding="utf-8")
    assert '<a href="#safeprefetch.Lease"><code>Lease</code></a>' in api
    assert '<a href="#safeprefetch.PrefetcherClosed"><code>PrefetcherClosed</code></a>' in api


def test_every_catalog_model_has_a_playground_with_every_setting(site):
    index = (site / "playground" / "index.html").read_text(encoding="utf-8")
    for name in catalog():
        assert (site / "playground" / f"{name}.html").is_file()
        assert f'data-model="{name}"' in index
        data = site / "playground" / "data" / name
        files = sorted(p.name for p in data.glob("model-*.js"))
        assert files == sorted(f"model-{n}-{s}.js" for n in ("fifo", "any") for s in ("off", "on")), name
        has_fix = catalog()[name].expected != "ok" and fix_model(catalog()[name]) is not None
        assert len(list(data.glob("fix-*.js"))) == (4 if has_fix else 0), name


def test_the_page_script_reads_the_export_format_python_writes(site):
    from safeprefetch._tools.playground import FORMAT

    script = (site / "playground" / "assets" / "playground.js").read_text(encoding="utf-8")
    assert f"var FORMAT = {FORMAT};" in script
    data = (site / "playground" / "data" / "monitor" / "model-fifo-off.js").read_text(encoding="utf-8")
    assert f'"format":{FORMAT},' in data


def test_the_site_asks_no_server_for_anything(site):
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r'<(script|link|img)[^>]+(src|href)="(https?:)?//', text), page
        assert "fonts.googleapis" not in text, page


def test_story_page_has_a_recorded_timeline_and_the_model(site):
    story = (site / "story.html").read_text(encoding="utf-8")
    assert 'src="story/timeline.svg"' in story and (site / "story" / "timeline.svg").read_text().startswith("<svg")
    assert 'data-model="prefetcher"' in story and "consumer waited" in story
    prefetcher = (site / "playground" / "data" / "prefetcher" / "model-fifo-off.js").read_text()
    assert '"capacity":2' in prefetcher and '"workers":2' in prefetcher


def _docs(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "safeprefetch", "docs", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_docs_build_refuses_to_empty_a_folder_that_is_not_a_site(tmp_path):
    if docs_extra_missing():
        pytest.skip(docs_extra_missing())
    keep = tmp_path / "precious.txt"
    keep.write_text("mine")
    done = _docs("build", "--out", str(tmp_path), "--no-demo")
    assert done.returncode == 2 and "not a site this command built" in done.stderr and keep.read_text() == "mine"
    done = _docs("build", "--out", str(tmp_path / "new"), "--no-demo", "--model", "no_such_model")
    assert done.returncode == 2 and "unknown catalog model" in done.stderr
    done = _docs("build", "--out", str(DOCS), "--no-demo")
    assert done.returncode == 2 and "overwrite docs/" in done.stderr


def test_strict_build_fails_on_a_broken_link(tmp_path):
    if docs_extra_missing():
        pytest.skip(docs_extra_missing())
    docs = tmp_path / "docs"
    docs.mkdir()
    # A link to the repository's README is not broken: the site has a copy of the README.
    (docs / "index.md").write_text("# Home\n\nSee [the missing page](nowhere.md) and "
                                   "[the prefetcher](../README.md#the-prefetcher).\n")
    done = _docs("build", "--docs", str(docs), "--out", str(tmp_path / "site"), "--no-demo", "--model", "monitor",
                 "--strict", timeout=SITE_TIMEOUT - 60)
    assert done.returncode == 1, done.stderr
    assert "nowhere.md" in done.stderr and "--strict: MkDocs gave 1 warning(s)" in done.stderr
    assert "README" not in done.stderr
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")  # written all the same, for a look
    assert 'href="readme.html#the-prefetcher"' in home
    assert 'id="the-prefetcher"' in (tmp_path / "site" / "readme.html").read_text(encoding="utf-8")
    done = _docs("build", "--docs", str(tmp_path / "site" / "assets"), "--out", str(tmp_path / "x"), "--no-demo")
    assert done.returncode == 2 and "not a docs folder" in done.stderr


def test_a_missing_docs_extra_is_one_clear_line(tmp_path):
    # A real interpreter in which mkdocs cannot be imported.
    code = ("import sys; sys.modules['mkdocs'] = None\n"
            "from safeprefetch._cli.main import main\n"
            f"raise SystemExit(main(['docs', 'build', '--out', {str(tmp_path / 's')!r}, '--no-demo']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        'error: building the site needs the docs extra (missing mkdocs): pip install -e ".[docs]"']

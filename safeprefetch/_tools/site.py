"""The documentation site: docs/ as it is, an API reference, and a playground page per model.

What it guarantees
------------------
:func:`build_site` turns the repository's ``docs/`` folder into a static
site with navigation, search and an API reference, and adds a playground
page for every catalog model, without writing any page twice:

* every Markdown page and SVG of ``docs/`` is copied verbatim, so the
  generated pages (one per model, the semantics table, the SPIN table, the
  performance pages) appear exactly as ``docs/generate.py`` and the
  benchmarks wrote them, and ``tests/test_docs.py`` still fails when they
  drift; a build hook only appends a "play it" link to each model page;
* the API reference is generated from the docstrings of the public modules
  (``safeprefetch``, ``safeprefetch.model``, ``safeprefetch.testing``,
  ``safeprefetch.lowlevel``) by mkdocstrings, following their ``__all__``;
* each playground page is the model's exported state graph
  (:mod:`.playground`) and one small script (``web/playground.js``): it
  works offline from the built folder, opened as a file, with no server;
* the prefetcher's story page puts a live run's recorded timeline next to
  the model's state graph at capacity 2, workers 2 (the catalog
  ``prefetcher`` at its declared configuration), with an explainer that
  reads the learner's own ``PrefetchStats.summary()``. The run itself is
  the demo's, so it is recorded by the harness and handed in as a
  :class:`Story`.

Decisions, and why
------------------
*MkDocs with Material*, not Sphinx with Furo: the docs are already
Markdown with tables, fenced blocks and SVG images, and MkDocs builds them
as they are, where Sphinx would need MyST and its own dialect; Material
gives navigation and search with no server-side part, and mkdocstrings
renders the public modules' docstrings. Search needs the site served
(``python -m http.server -d site``): a browser runs no search worker from
``file://``, and Material's offline plugin would fetch a shim from a CDN.
Everything else, the playground included, works opened as files. The generator is an optional extra (``pip install -e
".[docs]"``), imported only here, lazily, with a clear message when missing.

*Data as scripts, not fetched JSON.* A browser refuses ``fetch()`` of a
local file, so each exported graph is written as a ``.js`` file that
assigns the JSON to a global; the page loads the variant it shows (the
model or its fix, under one of four condvar settings) when it is chosen.
"""

from __future__ import annotations

import inspect
import json
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Mapping, Sequence

from .catalog import catalog
from .playground import export_model

__all__ = ["PUBLIC_MODULES", "SITE_MARK", "SiteError", "SiteReport", "Story", "build_site", "docs_source",
           "require_mkdocs"]

#: The public modules the API reference documents (never a private path: the docs use public ones only).
PUBLIC_MODULES = ("safeprefetch", "safeprefetch.model", "safeprefetch.testing", "safeprefetch.lowlevel")

#: Files of docs/ the site leaves out: the generators' own sources.
_SKIP_SUFFIXES = (".py", ".pyc")

#: The order of the hand-written pages in the navigation (any other page follows, by name).
_NAV = (("Tutorial", "index.md"), ("README", "readme.md"), ("Architecture", "architecture.md"),
        ("Condvar semantics", "semantics.md"), ("SPIN cross-check", "spin.md"), ("Reductions", "reductions.md"), ("Strategies", "strategies.md"),
        ("Parallel search", "parallel.md"), ("Explorer speed", "exploration.md"), ("Soak", "soak.md"),
        ("Performance", "performance.md"), ("Hardening", "hardening.md"), ("This site", "site.md"))


class SiteError(Exception):
    """The site cannot be built: the ``docs`` extra is missing, docs/ is not there, or MkDocs failed."""


@dataclass(frozen=True)
class Story:
    """A live run of the prefetcher, recorded for the story page (by ``safeprefetch._harness.docsite.record_story``)."""

    #: The prefetching loop's timeline, drawn as SVG by ``write_timeline``'s renderer.
    timeline_svg: str
    #: ``PrefetchStats.summary()`` of that run.
    stats_summary: str
    #: The demo's own report (both loops, the speed-up), as it prints it.
    demo_report: str


#: The file a build leaves in its folder: the one mark by which a later build may empty that folder.
SITE_MARK = ".safeprefetch-site"


@dataclass(frozen=True)
class SiteReport:
    """What :func:`build_site` wrote."""

    #: The built site (open ``index.html``).
    out: Path
    #: Pages of the site, relative to the source folder MkDocs read (``models/monitor.md``...).
    pages: tuple[str, ...]
    #: Catalog models that got a playground page.
    playgrounds: tuple[str, ...]
    #: Bytes of exported state graphs.
    data_bytes: int
    #: Warnings MkDocs logged (broken links, missing pages...).
    warnings: tuple[str, ...]
    #: Wall-clock seconds for the whole build.
    seconds: float


def require_mkdocs():
    """Import MkDocs' build entry points, or raise :class:`SiteError` saying how to install them."""
    try:
        from mkdocs.commands.build import build
        from mkdocs.config import load_config
        import material  # noqa: F401  (the theme)
        import mkdocstrings  # noqa: F401  (the API reference)
    except ImportError as e:
        raise SiteError(f"building the site needs the docs extra (missing {(e.name or '?').split('.')[0]}): "
                        "pip install -e \".[docs]\"") from None
    return load_config, build


def docs_source(docs: str | Path | None = None) -> Path:
    """The docs folder to build from: ``docs``, or the repository's docs/ (a source checkout)."""
    if docs is not None:
        docs = Path(docs).resolve()
        if not (docs / "index.md").is_file():
            raise SiteError(f"--docs {docs} has no index.md: it is not a docs folder")
        return docs
    docs = Path(__file__).resolve().parents[2] / "docs"
    if not (docs / "index.md").is_file():
        raise SiteError(f"no docs/index.md next to the package ({docs}): build the site from a source checkout")
    return docs


def _copy_docs(src: Path, dst: Path) -> list[str]:
    pages = []
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if path.is_dir() or path.suffix in _SKIP_SUFFIXES or "__pycache__" in rel.parts:
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dst / rel)
        if path.suffix == ".md":
            pages.append(rel.as_posix())
    return pages


def _readme(dst: Path) -> list[str]:
    """The repository's README.md, verbatim, as the page ``readme.md`` (docs pages link to it)."""
    readme = Path(__file__).resolve().parents[2] / "README.md"
    if not readme.is_file() or (dst / "readme.md").exists():
        return []
    shutil.copyfile(readme, dst / "readme.md")
    return ["readme.md"]


def _web(name: str) -> str:
    return resources.files(__package__).joinpath("web", name).read_text(encoding="utf-8")


def _api_pages(dst: Path) -> list[str]:
    (dst / "api").mkdir()
    pages = []
    for module in PUBLIC_MODULES:
        rel = f"api/{module}.md"
        (dst / rel).write_text(f"# `{module}`\n\n::: {module}\n", encoding="utf-8")
        pages.append(rel)
    return pages


def _script(assign: str, value: object) -> str:
    return f"{assign} = {json.dumps(value, separators=(',', ':'))};\n"


def _playground_page(name: str, meta: Mapping, names: Sequence[str], documented: set[str]) -> str:
    fix = meta["fix"]
    where = f"{fix}.md" if fix in names else f"../models/{fix}.md"
    fix_line = f" Its fix is [{fix}]({where})." if fix else ""
    own = f" The model's own page: [{name}](../models/{name}.md)." if name in documented else ""
    graph = "on" if name == "prefetcher" else "off"
    return (f"# Play: {name}\n\n{meta['summary']}\n\n"
            f"Expected verdict: **{meta['expected']}** (difficulty: {meta['difficulty']}).{own}{fix_line}\n\n"
            f"You are the scheduler: each button runs one step of that thread. Reach the bug, undo, "
            f"restart, or press *Show me* to watch the checker's shortest counterexample. Switch "
            f"`notify` and `spurious` to see the verdict change, or open the fix at the same shape "
            f"and try to break it.\n\n"
            f'<div class="pg-root" data-model="{name}" data-base="data/{name}/" data-graph="{graph}"></div>\n'
            f'<script src="assets/playground.js"></script>\n')


def _write_model_data(dst: Path, name: str, data: Mapping) -> tuple[dict, int]:
    """Write one model's variants as scripts; return its meta record and the bytes written."""
    folder = dst / "playground" / "data" / name
    folder.mkdir(parents=True)
    meta = {k: v for k, v in data.items() if k != "variants"}
    meta["files"] = {}
    size = 0
    for key, graph in data["variants"].items():
        file = key.replace(" ", "-") + ".js"
        text = _script(f"window.SAFEPREFETCH_PLAYGROUND.variants[{json.dumps(name + ' ' + key)}]", graph)
        (folder / file).write_text(text, encoding="utf-8")
        meta["files"][key] = file
        size += len(text)
    head = "window.SAFEPREFETCH_PLAYGROUND = window.SAFEPREFETCH_PLAYGROUND || {meta: {}, variants: {}};\n"
    (folder / "meta.js").write_text(head + _script(f"window.SAFEPREFETCH_PLAYGROUND.meta[{json.dumps(name)}]",
                                                   meta), encoding="utf-8")
    return meta, size


def _playground(dst: Path, names: Sequence[str]) -> tuple[list[str], int]:
    """The playground pages, their data and the index that lists them; returns pages and data bytes."""
    assets = dst / "playground" / "assets"
    assets.mkdir(parents=True)
    for asset in ("playground.js", "playground.css", "story.js"):
        (assets / asset).write_text(_web(asset), encoding="utf-8")
    models = catalog()
    documented = {p.stem for p in (dst / "models").glob("*.md")}
    rows, pages, total = [], ["playground/index.md"], 0
    for name in names:
        meta, size = _write_model_data(dst, name, export_model(models[name]))
        total += size
        rel = f"playground/{name}.md"
        (dst / rel).write_text(_playground_page(name, meta, names, documented), encoding="utf-8")
        pages.append(rel)
        summary = meta["summary"].replace("|", "\\|")  # a pipe would end the table cell
        shown = name.replace("_", "_<wbr>")  # long names break at their underscores, not mid-word
        rows.append(f"| [{shown}]({name}.md) | {summary} | {meta['expected']} | {meta['difficulty']} | "
                    f'<span class="pg-progress" data-model="{name}"></span> |')
    index = (_web("playground-index.md") + '\n<div class="pg-index" markdown>\n\n| model | the bug (or the design) '
             "| verdict | difficulty | your progress |\n|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n</div>\n\n"
             '<script src="assets/playground.js"></script>\n')
    (dst / "playground" / "index.md").write_text(index, encoding="utf-8")
    return pages, total


def _sources(dst: Path) -> list[str]:
    """Each catalog model's source, verbatim, as a page (the model pages link their ``.py`` file)."""
    (dst / "source").mkdir()
    pages = []
    for name, model in catalog().items():
        path = Path(inspect.getsourcefile(model) or "")
        rel = f"source/{name}.md"
        (dst / rel).write_text(f"# models/{path.name}\n\n```python\n{path.read_text(encoding='utf-8')}```\n",
                               encoding="utf-8")
        pages.append(rel)
    return pages


def _story(dst: Path, story: Story | None) -> str:
    """The prefetcher's story page: a recorded run next to the model's state graph."""
    folder = dst / "story"
    folder.mkdir()
    if story is not None:
        (folder / "timeline.svg").write_text(story.timeline_svg, encoding="utf-8")
        run = (f"![the prefetching loop's timeline](story/timeline.svg)\n\n```text\n{story.demo_report}\n```\n")
        summary = story.stats_summary
    else:
        run = "*This build skipped the live run (`--no-demo`), so there is no timeline here.*\n"
        summary = ""
    text = _web("story.md").replace("$RUN", run).replace("$SUMMARY", summary)
    (dst / "story.md").write_text(text, encoding="utf-8")
    return "story.md"


def _nav(pages: Sequence[str], playgrounds: Sequence[str]) -> list:
    rest = [p for p in pages if "/" not in p and p not in {f for _t, f in _NAV} and p != "story.md"]
    nav: list = [{title: f} for title, f in _NAV if f in pages] + rest
    nav.insert(1, {"The prefetcher's story": "story.md"})
    nav.append({"Playground": ["playground/index.md"] + [{n: f"playground/{n}.md"} for n in playgrounds]})
    nav.append({"Catalog": [{p[len("models/"):-3]: p} for p in pages if p.startswith("models/")]})
    nav.append({"API reference": [{m: f"api/{m}.md"} for m in PUBLIC_MODULES]})
    return nav


def _config(src: Path, out: Path, pages: Sequence[str], playgrounds: Sequence[str]) -> dict:
    root = Path(__file__).resolve().parents[2]
    api = {"show_source": False, "show_root_heading": True, "show_submodules": False, "members_order": "source",
           "docstring_style": "sphinx", "filters": ["!^_"], "heading_level": 2, "merge_init_into_class": True,
           "show_signature_annotations": True, "separate_signature": True}
    return {
        "site_name": "safeprefetch",
        "site_description": "A numpy prefetcher whose protocol is a model-checked state machine",
        "docs_dir": str(src),
        "site_dir": str(out),
        "use_directory_urls": False,
        "theme": {"name": "material", "font": False, "features": ["navigation.sections", "search.highlight",
                                                                    "content.code.copy", "toc.follow"]},
        "plugins": ["search", {"mkdocstrings": {"handlers": {"python": {"paths": [str(root)],
                                                                                   "options": api}}}}],
        "markdown_extensions": ["tables", "admonition", "attr_list", "md_in_html", {"toc": {"permalink": True}},
                                "pymdownx.highlight", "pymdownx.superfences"],
        "extra_css": ["playground/assets/playground.css"],
        "hooks": [str(Path(__file__).with_name("site_hooks.py"))],
        "nav": _nav(pages, playgrounds),
        "validation": {"links": {"not_found": "warn", "absolute_links": "info", "unrecognized_links": "info"}},
    }


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def build_site(out: str | Path, *, story: Story | None = None, models: Sequence[str] | None = None,
               docs: str | Path | None = None) -> SiteReport:
    """Build the site into ``out`` (replaced if it exists); ``models`` limits the playground pages
    (the ``prefetcher`` page is always built: the story page plays it); ``docs`` is the folder of
    pages to build from (default: the checkout's docs/).

    Raises :class:`SiteError` when the ``docs`` extra is missing, docs/ cannot be
    found, a model name is unknown, or MkDocs fails.
    """
    load_config, build = require_mkdocs()
    t0 = time.perf_counter()
    src_docs = docs_source(docs)
    names = list(catalog()) if models is None else list(dict.fromkeys(models))
    unknown = sorted(set(names) - set(catalog()))
    if unknown:
        raise SiteError(f"unknown catalog model(s): {', '.join(unknown)}")
    if "prefetcher" not in names:
        names.append("prefetcher")  # the story page plays it
    out = Path(out).resolve()
    if out == src_docs.resolve() or src_docs.resolve().is_relative_to(out):
        raise SiteError(f"--out {out} would overwrite docs/; choose another folder")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / SITE_MARK).is_file())):
        # MkDocs empties its output folder first: never let it empty one this command did not build (an
        # index.html is no proof: a folder of the user's with one in it lost everything else).
        raise SiteError(f"--out {out} exists and is not a site this command built (no {SITE_MARK} in it); "
                        "choose a new or empty folder")
    with tempfile.TemporaryDirectory(prefix="safeprefetch-site-") as tmp:
        src = Path(tmp) / "docs"
        src.mkdir()
        pages = _copy_docs(src_docs, src) + _readme(src) + _api_pages(src) + _sources(src)
        play_pages, data_bytes = _playground(src, names)
        pages += play_pages + [_story(src, story)]
        config_file = Path(tmp) / "mkdocs.yml"
        config_file.write_text(json.dumps(_config(src, out, pages, names), indent=1), encoding="utf-8")
        collect = _Collect()
        logger = logging.getLogger("mkdocs")
        logger.addHandler(collect)
        try:
            build(load_config(str(config_file)))
        except Exception as e:  # MkDocs' own errors (a bad page, a failing plugin) in one line
            raise SiteError(f"mkdocs build failed: {type(e).__name__}: {e}") from None
        finally:
            logger.removeHandler(collect)
    (out / SITE_MARK).write_text("built by python -m safeprefetch docs build: the next build empties this folder\n",
                                 encoding="utf-8")
    return SiteReport(out, tuple(pages), tuple(names), data_bytes, tuple(collect.messages),
                      time.perf_counter() - t0)

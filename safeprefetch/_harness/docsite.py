"""The ``docs`` command: build the site, with a live run for the prefetcher's story page.

What it guarantees
------------------
``python -m safeprefetch docs build [--out DIR] [--strict]`` builds the documentation
site (:func:`~.._tools.site.build_site`) into ``DIR`` (default ``site/``).
The story page shows a real run, so the build records one: the demo's
training-like loop (:func:`~.demo.run_demo`), small, at the shape of the
model drawn next to it -- capacity 2, two workers -- with its timeline and
its ``PrefetchStats.summary()``. That run is why this command lives with the
harness: the site builder below it cannot import the demo, and takes the
recording as a :class:`~.._tools.site.Story`. ``--no-demo`` skips it (the
page then says so).

``python -m safeprefetch docs graph MODEL [--set NAME=VALUE]... [--max-states N]``
prints the state graph a playground page is made of, as JSON
(:func:`~.._tools.playground.export_graph`), for a catalog model or a
model file.

Exit codes: 0 on success, 1 when ``--strict`` and MkDocs warned (a broken
link, a missing page: ``.ci/run`` builds with it), 2 on a usage error or a
missing ``docs`` extra, one line on stderr.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from .._tools.cliargs import UsageError, parse_sets
from .._tools.catalog import load_model
from .._tools.jsonout import emit_json, json_stdout
from .demo import DemoConfig, format_result, run_demo

if TYPE_CHECKING:
    from .._tools.site import Story

__all__ = ["STORY_DEMO", "record_story", "register"]

#: The story's run: the demo's loop at the model's shape (capacity 2, 2 workers), small enough
#: to add about two seconds to a build, long enough (60 batches) for the timeline to show the
#: workers' reads overlapping the compute.
STORY_DEMO = DemoConfig(batches=60, batch_size=128, features=256, hidden=256, latency_ms=4.0, workers=2,
                        capacity=2)


def record_story(cfg: DemoConfig = STORY_DEMO) -> "Story":
    """Run the demo with a timeline and keep what the story page shows."""
    from .._prefetcher.timeline import timeline_svg
    from .._tools.site import Story

    result = run_demo(cfg, timeline=True)
    svg = timeline_svg(result.timeline, "safeprefetch demo: the prefetching loop",
                       f"capacity {cfg.capacity}, {cfg.workers} workers, {cfg.batches} batches")
    return Story(svg, result.stats.summary(), format_result(result))


def _cmd_docs(args) -> int:
    # The site's modules are imported here, not at start-up: the other commands need none of them.
    from .._tools.playground import MAX_STATES, export_graph
    from .._tools.site import SiteError, build_site

    if args.what == "graph":
        max_states = MAX_STATES if args.excerpt is None else args.excerpt
        if max_states < 1:
            raise UsageError("--max-states must be at least 1")
        with json_stdout(True):  # the graph is JSON: the model's prints go to stderr
            machine = load_model(args.model).compile(parse_sets(args.set or []))
            emit_json(export_graph(machine, max_states=max_states))
        return 0
    try:
        story = None if args.no_demo else record_story()
        report = build_site(args.out, story=story, models=args.model or None, docs=args.docs)
    except SiteError as e:
        raise UsageError(str(e)) from None
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"site written to {report.out} ({len(report.pages)} pages, {len(report.playgrounds)} playgrounds, "
          f"{report.data_bytes / 1e6:.1f} MB of state graphs, {report.seconds:.1f} s); "
          f"open {report.out / 'index.html'}")
    if args.strict and report.warnings:
        print(f"error: --strict: MkDocs gave {len(report.warnings)} warning(s)", file=sys.stderr)
        return 1
    return 0


def register(sub) -> dict[str, Any]:
    """Add ``docs build`` and ``docs graph`` to the CLI's subparsers."""
    p = sub.add_parser("docs", help="the documentation site and the playground's state graphs")
    which = p.add_subparsers(dest="what", required=True)
    b = which.add_parser("build", help="build the site (needs the docs extra: pip install -e \".[docs]\")")
    b.add_argument("--out", default="site", help="output folder (default: site)")
    b.add_argument("--no-demo", action="store_true", help="skip the live run the story page shows")
    b.add_argument("--model", action="append", metavar="NAME",
                   help="only these catalog models get a playground page (default: all)")
    b.add_argument("--docs", metavar="DIR", help="build from this folder of pages (default: the checkout's docs/)")
    b.add_argument("--strict", action="store_true",
                   help="exit 1 when MkDocs warns (a broken link, a missing page); the site is still written")
    g = which.add_parser("graph", help="print a model's state graph as the playground's JSON")
    g.add_argument("model", help="catalog name or path to a .py file")
    g.add_argument("--set", action="append", metavar="NAME=VALUE", help="set a config parameter")
    g.add_argument("--max-states", dest="excerpt", type=int, default=None,
                   help="the largest excerpt, in states (default: the playground's bound, 5,000)")
    return {"docs": _cmd_docs}

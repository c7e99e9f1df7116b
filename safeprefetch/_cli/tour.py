"""The main job: ``python -m safeprefetch main [--small]``.

It does what the project is for, in order: check every catalog model at its
declared configuration (each verdict must be the one it declares), then run
the live prefetcher on generated ``.npy`` shards, without and with
prefetching. The exit code is nonzero if either part fails.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["register"]


def _cmd_main(args, main: Callable[[list[str]], int]) -> int:
    print("== 1. check the whole catalog ==", flush=True)
    checked = main(["check", "--all"])
    print(flush=True)
    print("== 2. live prefetch demo on generated data ==", flush=True)
    demo = ["demo"] + (["--small"] if args.small else [])
    if args.dir:
        demo += ["--dir", args.dir]
    ran = main(demo)
    return checked or ran


def register(sub, main: Callable[[list[str]], int]) -> dict[str, Any]:
    """Add ``main``; ``main`` is the CLI's entry point, which the command runs twice (passed in, not imported)."""
    p = sub.add_parser("main", help="check the whole catalog, then a live prefetch demo")
    p.add_argument("--small", action="store_true", help="a demo of a few seconds")
    p.add_argument("--dir", help="where the demo writes its shards (default: a temporary directory)")
    return {"main": lambda args: _cmd_main(args, main)}

"""Teaching commands: ``explain MODEL`` and ``play MODEL``, and their CLI.

Why these exist
---------------
A counterexample is only useful if a person can follow it. The checker
already finds the shortest one; these commands put it in front of a reader
in the two ways that make concurrency bugs click:

* ``explain`` (:mod:`.explain`) tells the story of one catalog model: the
  bug in one sentence, in the model's own words (:mod:`.modeldoc`), the
  shortest trace, each program's graph, and the fix re-checked at the same
  configuration (:mod:`.fix`).
* ``play`` (:mod:`.play`) makes the reader the scheduler, and says when
  the run reaches a state the checker would report, in the checker's words.

This module adds both to the command line (:func:`register`) and is where
the teaching tools' names are found together: it re-exports them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .catalog import load_model
from .explain import explain
from .fix import FixReport, fix_model, fix_name, fix_report, source_diff
from .modeldoc import ModelDoc, model_doc
from .plaintext import programs_text, trace_table
from .play import Play, PlayStatus, choice_numbers

__all__ = [
    "FixReport",
    "ModelDoc",
    "Play",
    "PlayStatus",
    "choice_numbers",
    "explain",
    "fix_model",
    "fix_name",
    "fix_report",
    "model_doc",
    "programs_text",
    "register",
    "source_diff",
    "trace_table",
]


def _cmd_explain(args) -> int:
    from .cliargs import parse_sets

    from .._check.budget import bounded_build

    model = load_model(args.model)
    overrides = parse_sets(args.set or [])
    with bounded_build(f"building model {model.name!r}"):  # as ``check`` builds it: a size that fits, first
        model.compile(overrides)
    sys.stdout.write(explain(model, overrides, diff=args.diff, spec=args.model))
    return 0


def _cmd_play(args) -> int:
    from .cliargs import UsageError, parse_sets

    from .._check.budget import bounded_build

    model = load_model(args.model)
    with bounded_build(f"building model {model.name!r}"):
        machine = model.compile(parse_sets(args.set or []))
    if sys.stdin is None:  # started with standard input closed (<&-)
        raise UsageError("play reads your moves from standard input, which is closed")
    session = Play(machine, sys.stdin, sys.stdout, summary=model_doc(model).summary)
    code = session.run()
    if args.trace:
        payload = {"model": machine.name, "config": machine.config, "trace": session.trace.to_json()}
        try:
            Path(args.trace).write_text(json.dumps(payload, indent=2) + "\n")
        except OSError as e:
            raise UsageError(f"cannot write trace {args.trace!r}: {e.strerror}") from None
        print(f"schedule saved to {args.trace} (python -m safeprefetch replay {machine.name} {args.trace})")
    return code


def register(sub) -> dict[str, Any]:
    """Add ``explain`` and ``play`` to the CLI's subparsers."""
    ex = sub.add_parser("explain", help="a catalog model's bug, shortest trace and fix")
    ex.add_argument("model", help="catalog name or path to a .py file")
    ex.add_argument("--set", action="append", metavar="NAME=VALUE", help="set a config parameter")
    ex.add_argument("--diff", action="store_true", help="also print the source diff against the fix")
    pl = sub.add_parser("play", help="be the scheduler: step a model's threads by hand")
    pl.add_argument("model", help="catalog name or path to a .py file")
    pl.add_argument("--set", action="append", metavar="NAME=VALUE", help="set a config parameter")
    pl.add_argument("--trace", metavar="FILE", help="save the played schedule as trace JSON")
    return {"explain": _cmd_explain, "play": _cmd_play}

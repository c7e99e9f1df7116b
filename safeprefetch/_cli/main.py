"""The command line: ``python -m safeprefetch ...``.

The contract (fixed, scripts depend on it)::

    list [--json]
    check MODEL [--set NAME=VALUE]... [--strategy NAME] [--json] [--max-states N] [--seed S]
    check --all [--json]
    replay MODEL TRACE.json

Exit codes: ``check`` gives 0 when no violation was found by a complete
search, 1 when one was found, 2 on a usage or model error (one line on
stderr, never a traceback), and 3 when no violation was found but the search
was not complete (a state cap, a memory budget, a sampling strategy): a
cut-off search is never a pass, unless ``--allow-partial`` says it may be.
``check --all`` gives 0 exactly when every catalog model's verdict equals the
verdict it declares, from a complete search; 1 when one differs; else 3 when
some search was incomplete.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import contextlib
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from .._tools.catalog import catalog, load_model
from .._check.explore import DEFAULT_MAX_STATES, DEFAULT_REDUCE, CheckResult, ReplayDivergence, Trace, TraceError, check, final_verdict
from .._dsl.graph import format_graph, graph_json
from .._dsl.model import ModelError
from .._dsl.violations import ProcessExit, StepError, exit_call, refusing_fork, refusing_os_exit, users_file
from .._check.cluster import ClusterError
from .._check.reverify import ReverifyIncomplete, saved_claim, saved_verdict
from .._check.trace import format_table, render_result
from .._harness import bench as _bench_commands
from .._harness import docsite as _docs_commands
from .._harness import bench_code as _bench_code_commands
from .._interleave import api as _code_commands
from .._tools import spin as _spin_commands
from .._tools import teach as _teach_commands
from .._tools.cliargs import UsageError, parse_sets, read_json_file
from .._tools.jsonout import OutputError, emit_json, emitted, guarded_stderr, guarded_stdout, json_stdout
from . import cluster as _cluster_args
from . import live as _live_commands
from . import tour as _tour_commands

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        raise UsageError(message)


class _Progress:
    """TLC-style progress lines on stderr: states, frontier, states per second, and memory: the
    resident set, its growth per stored state, and when the ``--memory`` budget would be reached."""

    def __init__(self, memory: int | None = None):
        from .._check.budget import resident_bytes

        self.t0 = time.perf_counter()
        self.rss0 = resident_bytes()
        self.memory = memory

    def __call__(self, states: int, frontier: int, transitions: int) -> None:
        from .._check.budget import format_bytes, resident_bytes

        elapsed = time.perf_counter() - self.t0
        rate = states / max(elapsed, 1e-9)
        rss = resident_bytes()
        per = max(rss - self.rss0, 0) / max(states, 1)
        mem = f"  memory {format_bytes(rss)} ({per:,.0f} B/state)" if rss else ""
        if rss and self.memory and per > 0 and rate > 0:
            room = (self.memory - rss) / per  # states that still fit at the current growth
            mem += (f", budget {format_bytes(self.memory)} reached at ~{states + room:,.0f} states "
                    f"(in ~{room / rate:,.0f} s)" if room > 0 else f", over the budget {format_bytes(self.memory)}")
        print(f"progress: {elapsed:6.1f} s  {states:,} states  frontier {frontier:,}  {transitions:,} transitions  "
              f"{rate:,.0f} states/s{mem}", file=sys.stderr, flush=True)


def _cmd_list(args) -> int:
    """The catalog, one model a line; ``--graph`` adds each program's graph, ``--json`` always has it
    (``"programs"``: role -> label -> kind and declared targets, at the model's default config)."""
    models = catalog()
    if args.json:
        emit_json([{**_describe(m), "programs": graph_json(m.graph())} for m in models.values()])
        return 0
    width = max(len(n) for n in models)
    for name, m in models.items():
        summary = (m.__doc__ or "").strip().split("\n")[0]
        summary = summary.split(": ", 1)[-1] if summary.startswith(name) else summary
        print(f"{name.ljust(width)}  {m.expected.ljust(14)}  {summary}")
        if args.graph:
            print(format_graph(m.graph(), indent="    ") + "\n")
    return 0


def _describe(model) -> dict[str, Any]:
    return {"model": model.name, "expected": model.expected, "config": model.configure({}),
            "summary": (model.__doc__ or "").strip().split("\n")[0]}


def _check_options(args) -> None:
    """Refuse, before any search, a number out of range and an option that would silently do nothing.

    A negative ``--depth`` or a NaN ``--progress-seconds`` reached the search unchecked, and an option
    the chosen search ignores (``--budget`` under bfs, ``--set`` under ``--all``) made a command look
    as if it had done what it said. Defaults are None in the parser so that "given" can be told
    from "left alone"; this fills them in.
    """
    sampling = args.strategy in ("random", "pct", "hypothesis") or args.swarm is not None
    for name, least, applies, why in (
            ("budget", 1, sampling, "the sampling strategies (random, pct, hypothesis) and --swarm"),
            ("depth", 1, args.strategy == "pct" or args.swarm is not None, "--strategy pct and --swarm"),
            ("preemptions", 0, args.strategy == "preempt", "--strategy preempt"),
            ("seed", -2**63, sampling or args.store == "bitstate",
             "the sampling strategies (random, pct, hypothesis), --swarm and --store bitstate"),
            ("progress_bound", 0, True, "")):
        value = getattr(args, name)
        flag = "--" + name.replace("_", "-")
        if value is None:
            continue
        if value < least:
            raise UsageError(f"{flag} must be at least {least}, not {value}")
        if not applies:
            raise UsageError(f"{flag} applies to {why}, not to --strategy {args.strategy}")
    # The exhaustive searches' options, which a sampling strategy (or a swarm of them) does not read;
    # --max-states also bounds the --progress-bound search, which runs after any strategy.
    if args.strategy not in ("bfs", "dfs") or args.swarm is not None:
        for flag, value in (("--reduce", args.reduce), ("--progress-seconds", args.progress_seconds),
                            ("--max-states", None if args.progress_bound is not None else args.max_states)):
            if value is not None:
                raise UsageError(f"{flag} applies to the exhaustive searches (bfs, dfs), not to "
                                 + ("--swarm" if args.swarm is not None else f"--strategy {args.strategy}"))
    args.reduce = DEFAULT_REDUCE if args.reduce is None else args.reduce
    args.progress_seconds = 3.0 if args.progress_seconds is None else args.progress_seconds
    args.max_states = DEFAULT_MAX_STATES if args.max_states is None else args.max_states
    args.budget = 1000 if args.budget is None else args.budget
    args.depth = 3 if args.depth is None else args.depth
    args.preemptions = 2 if args.preemptions is None else args.preemptions
    args.seed = 0 if args.seed is None else args.seed
    if math.isnan(args.progress_seconds) or args.progress_seconds <= 0:  # inf: no progress lines
        raise UsageError(f"--progress-seconds must be a positive number of seconds, not {args.progress_seconds}")
    if args.all:
        given = [flag for flag, value in (("--set", args.set), ("--progress-bound", args.progress_bound),
                                          ("--svg", args.svg)) if value]
        if given:
            raise UsageError(f"{given[0]} applies to one MODEL; --all checks every catalog model at its "
                             "declared config")


def _cmd_check(args) -> int:
    _check_options(args)
    if args.all:
        if args.model:
            raise UsageError("give a MODEL or --all, not both")
        if args.cluster is not None or args.swarm is not None:
            raise UsageError("--cluster and --swarm check one MODEL, not --all")
        if args.strategy not in ("bfs", "dfs"):
            raise UsageError(f"--all explores every model exhaustively (--strategy bfs or dfs), not by "
                             f"{args.strategy!r}'s samples")
        return _check_all(args)
    if not args.model:
        raise UsageError("check needs a MODEL (or --all)")
    model = load_model(args.model)
    with _named(model):
        return _check_one(args, model)


def _compile(model, overrides):
    """The model built and compiled at ``overrides``, with a bound on the memory its build may take."""
    from .._check.budget import bounded_build

    with bounded_build(f"building model {model.name!r}"):
        return model.compile(overrides)


@contextmanager
def _named(model) -> Iterator[None]:
    """A StepError (the model's own code raised, or called sys.exit) names the model as well as the step."""
    try:
        yield
    except StepError as e:
        e.args = (f"{e} (model {model.name!r})",)
        raise


def _check_one(args, model) -> int:
    if args.svg == "":
        raise UsageError("--svg needs a file name")
    if args.svg:  # before the search, not after it: a bad path is known now
        where = Path(args.svg)
        if where.is_dir() or not where.parent.is_dir():
            raise UsageError(f"cannot write --svg {args.svg!r}: "
                             + ("it is a directory" if where.is_dir() else "its directory does not exist"))
    overrides = parse_sets(args.set or [])
    machine = _compile(model, overrides)
    if args.progress_bound is not None and machine.shutdown_pred is None:
        raise UsageError(f"--progress-bound measures progress after shutdown, and model {model.name!r} declares "
                         "no shutdown (m.shutdown_when(...))")
    if args.cluster is not None or args.swarm is not None:
        from .cluster import check_on_cluster  # on dask: the partitioned BFS, or a swarm of samplers

        result = check_on_cluster(args, model, overrides, _Progress())
    elif args.strategy in ("bfs", "dfs"):
        memory = _memory_arg(args.memory)
        if args.store == "fingerprint" and args.strategy != "bfs":
            raise UsageError("--store fingerprint searches breadth first: drop --strategy dfs")
        _engine_applies(args)
        result = check(machine, strategy=args.strategy, max_states=args.max_states,
                       progress=_Progress(memory), reduce=args.reduce, progress_every=args.progress_seconds,
                       store=args.store, memory=memory, engine=args.engine,
                       seed=args.seed if args.store == "bitstate" else None)
    else:
        _engine_applies(args)
        if args.memory is not None or args.store != "full":
            raise UsageError(f"--store and --memory apply to the exhaustive searches (bfs, dfs), "
                             f"not to --strategy {args.strategy}, which stores no visited set")
        from .._check.strategies import search  # schedule-sampling strategies for configs too big to exhaust

        result = search(machine, args.strategy, seed=args.seed, budget=args.budget, depth=args.depth,
                        preemptions=args.preemptions)
    if args.progress_bound is not None and result.ok and result.exhaustive:  # else inconclusive already
        from dataclasses import replace

        from .._check.explore import check_shutdown_bound

        late = check_shutdown_bound(machine, args.progress_bound, args.max_states)
        if late.violation is not None:
            result = replace(result, violation=late.violation, verdict=late.violation.kind)
        elif not late.exhaustive:  # nothing is known about the bound: inconclusive, never a pass
            result = replace(result, exhaustive=False, stop_reason="max_states",
                             stop_message=f"the --progress-bound search (unreduced) stopped at the state cap, "
                                          f"max_states={args.max_states:,}, after {late.states:,} states")
    if machine.config == model.configure({}):
        from dataclasses import replace
        result = replace(result, expected=model.expected)
    if args.json:
        d = result.to_json()
        if args.progress_bound is not None:  # the check's claim, which replay holds the trace to
            d["progress_bound"] = args.progress_bound
        emit_json(d)
    else:
        print(render_result(result, machine))
    if args.svg:  # after the verdict is out: a write that fails (a full disk) loses nothing but the picture
        from .._tools.svg import write_svg  # the swimlane renderer
        try:
            write_svg(machine, result, Path(args.svg))
        except OSError as e:  # not the model's error: the file's
            raise UsageError(f"cannot write --svg {args.svg!r}: {e.strerror or e}") from None
    return exit_code(result, args.allow_partial)


def _engine_applies(args) -> None:
    """``--engine generated|compiled`` names the full-store BFS's expansion: refuse it anywhere else."""
    if args.engine in ("generated", "compiled") and (args.strategy != "bfs" or args.store != "full"
                                                      or getattr(args, "cluster", None) is not None):
        raise UsageError(f"--engine {args.engine} expands the breadth-first search over the full store; "
                         f"it does not apply to --strategy {args.strategy} --store {args.store}"
                         + (" on a cluster" if getattr(args, "cluster", None) is not None else ""))


#: The exit code of a search that found no violation but did not visit every state.
INCOMPLETE = 3


def exit_code(result: CheckResult, allow_partial: bool = False) -> int:
    """0: no violation, complete search; 1: a violation; 3: no violation, incomplete (0 with ``allow_partial``)."""
    if not result.ok:
        return 1
    return 0 if result.exhaustive or allow_partial else INCOMPLETE


def _memory_arg(text: str | None) -> int | None:
    from .._check.budget import parse_memory

    if text is None:
        return None
    try:
        return parse_memory(text)
    except ValueError as e:
        raise UsageError(f"--memory: {e}") from None


def _check_all(args) -> int:
    _engine_applies(args)
    results: list[CheckResult] = []
    for name, model in catalog().items():
        machine = model.compile({})
        r = check(machine, strategy=args.strategy, max_states=args.max_states, reduce=args.reduce,
                  store=args.store, memory=_memory_arg(args.memory), engine=args.engine,
                  seed=args.seed if args.store == "bitstate" else None)
        from dataclasses import replace
        results.append(replace(r, expected=model.expected))
    # An ok the search did not finish is no verdict: it differs from a declared bug by being cut, not by
    # disagreeing (3, as for one model), and it is named below.
    def cut(r: CheckResult) -> bool:
        return r.ok and not r.exhaustive

    incomplete = [r for r in results if cut(r)]
    mismatches = [r for r in results if r.verdict != r.expected and not cut(r)]
    if args.json:
        emit_json([r.to_json() for r in results])
    else:
        w = max(len(r.model) for r in results)
        print(f"{'model'.ljust(w)}  {'expected':14}  {'verdict':14}  {'states':>9}  {'seconds':>8}  {'trace':>5}  match")
        for r in results:
            mark = "cut" if cut(r) else "yes" if r.verdict == r.expected else "NO"  # a cut ok matches nothing
            print(f"{r.model.ljust(w)}  {r.expected:14}  {r.verdict:14}  {r.states:>9}  {r.seconds:>8.3f}  "
                  f"{len(r.trace):>5}  {mark}")
        print(f"{sum(r.verdict == r.expected and not cut(r) for r in results)}/{len(results)} models match their "
              "expected verdict")
        if incomplete:
            print(f"{len(incomplete)} search(es) did not finish, so their ok is not a proof: "
                  + ", ".join(r.model for r in incomplete), file=sys.stderr)
    if mismatches:
        return 1
    return INCOMPLETE if incomplete and not args.allow_partial else 0


def _cmd_replay(args) -> int:
    model = load_model(args.model)
    path = Path(args.trace)
    value: Any = read_json_file(path, "trace", TraceError)
    overrides = {}
    if isinstance(value, dict) and value.get("config") is not None and not isinstance(value["config"], dict):
        raise TraceError(f"trace {str(path)!r}: its config must be an object of NAME: VALUE, not "
                         f"{type(value['config']).__name__}")
    if isinstance(value, dict) and isinstance(value.get("config"), dict):
        overrides = {k: v for k, v in value["config"].items()}
    overrides.update(parse_sets(args.set or []))
    trace = Trace.from_json(value)
    claim = saved_claim(value, len(trace))  # a saved check's verdict: the trace must show it again
    # A trace of no steps that check or play saved (a model whose threads all block at once is a deadlock in its
    # first state) judges that state; a bare empty list is a mistake, not a success.
    if not len(trace) and not (isinstance(value, dict) and isinstance(value.get("model"), str)):
        raise TraceError(f"trace {str(path)!r} has no steps: there is nothing to replay")
    saved_by = value.get("model") if isinstance(value, dict) else None
    if isinstance(saved_by, str) and saved_by != model.name:
        raise TraceError(f"trace {str(path)!r} was saved by a check of model {saved_by!r}, not {model.name!r}")
    with _named(model):
        machine = _compile(model, overrides)
        print(f"replay of {len(trace)} steps on {model.name}")
        table = format_table(machine, trace)
        print(table)
        try:
            found = saved_verdict(machine, trace, claim, DEFAULT_MAX_STATES)
        except ReverifyIncomplete as e:
            print(f"inconclusive: {e}")
            return INCOMPLETE
    if found:
        kind, msg = found
        if f"<== {kind}: {msg}" not in table:  # (a step's own violation is the table's last row already)
            print(f"<== {kind}: {msg}")
        return 1
    print("no violation at the end of this trace")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m safeprefetch", description="Model-check and run the safeprefetch prefetcher.")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    ls = sub.add_parser("list", help="list the catalog models")
    ls.add_argument("--json", action="store_true", help="one object per model, with its program graph")
    ls.add_argument("--graph", action="store_true",
                    help="also draw each model's programs: every step and the labels it may go to")
    ck = sub.add_parser("check", help="check a model exhaustively")
    ck.add_argument("model", nargs="?", help="catalog name or path to a .py file")
    ck.add_argument("--all", action="store_true", help="check every catalog model at its declared config")
    ck.add_argument("--set", action="append", metavar="NAME=VALUE", help="set a config parameter")
    ck.add_argument("--strategy", default="bfs", choices=["bfs", "dfs", "random", "pct", "preempt", "hypothesis"],
                    help="bfs/dfs explore exhaustively; the others sample schedules (replayable by --seed)")
    ck.add_argument("--reduce", default=None, choices=["none", "symmetry", "por", "all"],
                    help="state-space reductions (each keeps whether a violation exists and its shortest "
                         "length; where shortest violations of several kinds exist, the one reported may "
                         "differ; default all)")
    _cluster_args.add_arguments(ck)  # --cluster SPEC, --swarm K
    ck.add_argument("--progress-bound", type=int, metavar="K",
                    help="also require every thread to return within K of its own steps after shutdown")
    ck.add_argument("--progress-seconds", type=float, default=None,
                    help="seconds between progress lines (stderr; default 3)")
    ck.add_argument("--budget", type=int, default=None, help="schedules to try for sampling strategies (default 1000)")
    ck.add_argument("--depth", type=int, default=None, help="PCT bug depth d (default 3)")
    ck.add_argument("--preemptions", type=int, default=None,
                    help="preemption bound for --strategy preempt (default 2)")
    ck.add_argument("--json", action="store_true")
    ck.add_argument("--max-states", type=int, default=None,
                    help=f"stop a search after storing this many states (default {DEFAULT_MAX_STATES:,})")
    ck.add_argument("--store", default="full", choices=["full", "fingerprint", "bitstate"],
                    help="keep visited states whole (exact), as 64-bit fingerprints (TLC's way: about 24 "
                         "bytes a state; the result reports the chance of a collision), or as bits (SPIN's "
                         "supertrace, depth first: a last resort, not a proof)")
    ck.add_argument("--memory", metavar="SIZE",
                    help="memory budget, e.g. 8G: a search that would pass it stops early with its partial "
                         "result (not exhaustive) instead of dying of MemoryError")
    ck.add_argument("--engine", default=None, choices=["auto", "plain", "generated", "compiled"],
                    help="what expands states in the breadth-first search over the full store: the expansion "
                         "generated for this model where it applies (auto, the default; also SAFEPREFETCH_ENGINE), "
                         "the model's own step functions (plain), the generated expansion as Python (generated) "
                         "or compiled by Cython to C (compiled: pip install 'safeprefetch[speed]'; built once "
                         "per configuration and cached). Every engine gives the same result")
    ck.add_argument("--seed", type=int, default=None, help="seed for randomized strategies (default 0)")
    ck.add_argument("--svg", metavar="FILE", help="also draw the counterexample as an SVG swimlane diagram")
    ck.add_argument("--allow-partial", action="store_true",
                    help="exit 0, not 3, when no violation was found by a search that did not finish")
    rp = sub.add_parser("replay", help="re-run a saved trace and print it")
    rp.add_argument("model")
    rp.add_argument("trace")
    rp.add_argument("--set", action="append", metavar="NAME=VALUE")
    for module in (_teach_commands, _spin_commands, _live_commands, _bench_commands, _docs_commands,
                   _code_commands, _bench_code_commands):
        COMMANDS.update(module.register(sub))
    COMMANDS.update(_tour_commands.register(sub, main))
    return p


#: The command registry: name -> handler (parsed args -> exit code). ``list``, ``check`` and
#: ``replay`` are here; the modules above add theirs through ``register(subparsers)``, which
#: returns their handlers. Raising UsageError, ModelError or TraceError gives the one-line
#: error and exit code 2.
COMMANDS = {"list": _cmd_list, "check": _cmd_check, "replay": _cmd_replay}


#: The commands whose uncaught errors come from model (or test) code, the user's or the catalog's.
_MODEL_COMMANDS = {"check", "replay", "explain", "play", "crosscheck", "run", "check-code", "docs", "main"}


def main(argv: Sequence[str] | None = None) -> int:
    code = 2
    # Standard error guarded around the command and its error report: a reader of it that left (2>&1 | true)
    # raised BrokenPipeError out of _failed, and an error (2) exited 1, a violation's code. A failure to write
    # it that is left for the flush on the way out has nowhere to be reported: the command's code stands.
    with contextlib.suppress(OutputError), guarded_stderr():
        code = _main(argv)
    return code


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    given = list(sys.argv[1:] if argv is None else argv)
    args: Any = argparse.Namespace(command=None, json="--json" in given)  # (until parsed: a refused line's --json)
    before = emitted()
    try:
        with guarded_stdout():
            args = parser.parse_args(argv)
            if args.command is None:
                parser.print_help()
                return 2
            max_states = getattr(args, "max_states", None)
            if max_states is not None and max_states < 1:
                raise UsageError("--max-states must be at least 1")
            with json_stdout(getattr(args, "json", False) is True):
                return _refusing_os_exit(COMMANDS[args.command], args)
    except (UsageError, ModelError, TraceError, ReplayDivergence) as e:
        table = getattr(e, "table", None)  # a step that raised, a wrong symmetry: the schedule that got there
        return _failed(args, before, 2, f"error: {e}", table and f"the trace that reached it:\n{table}")
    except ClusterError as e:  # a worker died, an actor was lost: the cluster's failure, not the model's
        return _failed(args, before, 2, f"error: the dask cluster failed under the search: {e}")
    except ProcessExit as e:  # os._exit where nothing reported it (a fork's child ends by the real one)
        return _failed(args, before, 2, f"error: {_whose(args)} called {exit_call(e)}: the process would have "
                       "ended there, with no verdict")
    except OutputError as e:  # (a reader that left is not one: the command goes on to its verdict)
        return _failed(args, before, 2, f"error: {e}")
    except KeyboardInterrupt as e:
        # Inside the model's own code (a step that never returns, say): say where.
        where = _user_frame(e)
        return _failed(args, before, 130, f"interrupted{where and f' in the model code{where}'}")
    except BaseException as e:  # an exception raised by model code (a step, a guard, a check)
        if isinstance(e, SystemExit) or os.environ.get("SAFEPREFETCH_TRACEBACK"):
            raise  # (argparse's usage error and --help; a model's sys.exit is a ModelError by now)
        where = _user_frame(e)
        return _failed(args, before, 2, f"error: {_whose(args)} raised {type(e).__name__}: {e}{where} "
                       "(set SAFEPREFETCH_TRACEBACK=1 for the traceback)")


def _failed(args: Any, before: int, code: int, message: str, detail: str | None = None) -> int:
    """Report a command that ended without its result: ``message`` (and ``detail``) on standard error, and,
    under ``--json``, a document saying so on standard output -- unless the command wrote its own already.
    A pipeline reading ``--json`` got an empty standard output on every error path, and no JSON to parse."""
    print(message, file=sys.stderr)
    if detail:
        print(detail, file=sys.stderr)
    if getattr(args, "json", False) is True and emitted() == before:
        with contextlib.suppress(OSError, ValueError):
            emit_json({"error": message.removeprefix("error: "), "exit_code": code,
                       "command": getattr(args, "command", None)})
    return code


def _whose(args: Any) -> str:
    """Whose code raised, for an error message."""
    command = getattr(args, "command", None)
    return ("the code under test" if command == "check-code" else "the model" if command in _MODEL_COMMANDS
            else f"{command or 'the command'}")  # (demo: its files)


def _refusing_os_exit(command: Any, args: Any) -> int:
    """``command(args)`` with ``os._exit`` refused in this process: a model's or checked code's
    ``os._exit(0)`` ended the checker with status 0 and no verdict, a pass for a check that never ended."""
    real = os._exit
    forks = {name: getattr(os, name) for name in ("fork", "forkpty") if hasattr(os, name)}
    os._exit = refusing_os_exit()
    if getattr(args, "command", None) in _MODEL_COMMANDS - {"check-code"}:  # (checked code may fork)
        for name, fork in forks.items():
            setattr(os, name, refusing_fork(fork))
    try:
        return command(args)
    finally:
        os._exit = real
        for name, fork in forks.items():
            setattr(os, name, fork)


def _user_frame(e: BaseException) -> str:
    """' at FILE:LINE' of the innermost frame of the model's (or the user's) own code, if any."""
    import traceback

    frames = [f for f in traceback.extract_tb(e.__traceback__) if users_file(f.filename)]
    if not frames:
        return ""
    f = frames[-1]
    return f" at {f.filename}:{f.lineno}"

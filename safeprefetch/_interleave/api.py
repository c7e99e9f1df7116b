"""The public face of code checking: ``check``, ``replay``, the pytest decorator, the command.

What it guarantees
------------------
``check(fn)`` explores the schedules of a zero-argument callable that starts
threads and asserts, and returns a frozen
:class:`~.report.CodeCheckResult`; ``@test(...)`` turns a pytest test into
such a check that fails with the rendered counterexample; ``python -m
safeprefetch check-code FILE::NAME`` runs one from the command line, with the
exit codes of ``check``: 0 when no violation was found and the search covered
what it promised (every schedule, or every schedule within the bound), 1 when
a violation was found, 2 on a usage error (one line, no traceback), 3 when
nothing was found but the search was cut short (``--allow-partial`` makes
that 0).

Bad arguments raise ``ValueError`` or ``TypeError`` naming the argument,
before anything runs.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import sys
import types
from pathlib import Path
from typing import Any, Callable, Sequence

from .._check.result import ReplayDivergence, Trace
from .._dsl.violations import ProcessExit, exit_call
from .._tools.jsonout import emit_json
from .arguments import runs_when_called
from .check import Interrupt, check_code, replay_code, settings_of
from .report import CodeCheckResult, render_text, write_svg

__all__ = ["InterleavingFailure", "check", "register", "replay", "test"]


class InterleavingFailure(AssertionError):
    """A ``@test`` check found a schedule that fails; the message is the rendered counterexample."""

    def __init__(self, result: CodeCheckResult):
        super().__init__(render_text(result))
        self.result = result


def check(fn: Callable[[], Any], *, strategy: str = "dfs", preemption_bound: int | None = None,
          max_schedules: int | None = None, seed: int = 0, interrupts: Sequence[Interrupt] = (),
          notify: str = "fifo", spurious: str = "off", lines: bool = False, reduce: str = "dpor",
          lock_release: str = "owner", allow_alive: Sequence[str] = (), depth: int = 3,
          time_budget: float | None = None, minimize: bool = True, max_steps: int = 20_000,
          time_limit: float = 3600.0, wall_timeout: float = 20.0, name: str | None = None,
          patch_globals: dict | None = None) -> CodeCheckResult:
    """Explore the schedules of ``fn`` (a zero-argument callable that starts threads and asserts).

    * ``strategy``: ``"dfs"`` (exhaustive, with DPOR unless ``reduce="none"``),
      ``"pct"``, ``"random"`` or ``"hypothesis"`` (sampled: ``max_schedules``
      runs, default 1,000, from ``seed``; ``depth`` is PCT's bug depth).
    * ``reduce``: ``"dpor"`` runs one schedule of each class that orders the synchronization operations
      alike: *exhaustive* then means every schedule up to DPOR's equivalence, **for race-free code** (all
      shared plain data accessed under one common lock). Code that updates the same data under two
      different locks, or under none, can be "ok, exhaustive" with a lost update DPOR never ran; check it
      with ``reduce="none"`` (every schedule) or ``lines=True`` (docs/interleavings.md, "What DPOR assumes").
    * ``preemption_bound``: explore only schedules with at most that many
      preemptions (``dfs``); the result's ``bound_covered`` says the bound was
      covered.
    * ``interrupts``: :class:`Interrupt` callbacks the explorer may run on a
      thread at any of its scheduling points (a signal handler, a finalizer).
    * ``notify`` (``fifo``/``any``) and ``spurious`` (``off``/``on``): the
      condition-variable semantics, as for models.
    * ``lines``: also schedule at line events and before stores and deletes (data races).
    * ``lock_release="any"``: Python's own rule for ``Lock`` (any thread may
      release it; releasing one nobody holds raises ``RuntimeError``, which the
      code may catch); by default either is a violation.
    * ``allow_alive``: thread names that may outlive the test body (each of several threads of one name).
    * ``max_steps``/``time_limit``: a run longer than that (transitions /
      virtual seconds) is a ``hang``; ``wall_timeout``: real seconds a thread may
      run without reaching a scheduling point before the check stops with an
      error (``inf``: no limit); ``time_budget``: real seconds for the whole search.
    * ``patch_globals``: ``{(module, name): replacement}`` swapped in for the
      check (an object created before it, which the scheduler cannot see).
    """
    settings = settings_of(notify, spurious, lines, lock_release, allow_alive, max_steps, time_limit, wall_timeout)
    return check_code(fn, strategy=strategy, preemption_bound=preemption_bound, max_schedules=max_schedules,
                      seed=seed, interrupts=interrupts, settings=settings, reduce=reduce, depth=depth,
                      time_budget=time_budget, minimize=minimize, name=name, patch_globals=patch_globals)


def replay(fn: Callable[[], Any], trace: Trace | Any, *, interrupts: Sequence[Interrupt] = (),
           notify: str | None = None, spurious: str | None = None, lines: bool | None = None,
           lock_release: str | None = None, allow_alive: Sequence[str] | None = None, max_steps: int | None = None,
           time_limit: float | None = None, wall_timeout: float | None = None, patch_globals: dict | None = None,
           name: str | None = None) -> CodeCheckResult:
    """Run ``fn`` once under a recorded schedule: a Trace, its JSON, or a result's ``to_json()``.

    A result's JSON records the check's settings (``notify``, ``time_limit``, ...), and the replay uses
    them; a keyword given here overrides one. ``patch_globals`` and ``interrupts`` are code, so they are
    given again: replaying a result recorded with some, without them, is a ``ValueError`` naming them.
    Raises ``ReplayDivergence`` when the code does something else under that schedule, or when a saved
    result's run ends in another verdict than the one it was saved with.
    """
    recorded, saved = _recorded(trace)
    given = {"notify": notify, "spurious": spurious, "lines": lines, "lock_release": lock_release,
             "allow_alive": allow_alive, "max_steps": max_steps, "time_limit": time_limit,
             "wall_timeout": wall_timeout}
    chosen = {k: v if v is not None else recorded[k] for k, v in given.items() if v is not None or k in recorded}
    for option, value in (("patch_globals", patch_globals), ("interrupts", interrupts)):
        if recorded.get(option) and not value:
            raise ValueError(f"the trace was recorded with {option} ({', '.join(recorded[option])}): pass the "
                             f"same {option}= to replay it")
    settings = settings_of(**chosen)
    result = replay_code(fn, trace, interrupts=interrupts, settings=settings, name=name, patch_globals=patch_globals)
    shown = result.violation.kind if result.violation is not None else "ok"
    if saved is not None and shown != saved:  # the same schedule, another ending: the code is not the one saved
        raise ReplayDivergence(f"the run under the trace's schedule shows {shown}"
                               f"{f': {result.violation.message}' if result.violation else ''}, not the verdict it "
                               f"was saved with ({saved})")
    return result


def _recorded(trace: Any) -> tuple[dict[str, Any], str | None]:
    """A saved result's settings (checked one by one, each error naming the trace) and its verdict, if any."""
    if not isinstance(trace, dict):
        return {}, None
    saved, recorded = trace.get("verdict"), trace.get("settings", {})
    if saved is not None and saved not in VERDICTS:
        raise ValueError(f"the trace's saved verdict {saved!r} is not one of {', '.join(VERDICTS)}")
    if not isinstance(recorded, dict):
        raise ValueError(f"the trace's settings must be an object of NAME: VALUE, not {type(recorded).__name__}")
    recorded = dict(recorded)
    for key in ("time_limit", "wall_timeout"):  # recorded as JSON: an infinity as "inf"
        if isinstance(recorded.get(key), str) and recorded[key] in ("inf", "Infinity"):
            recorded[key] = float(recorded[key])
    for key in ("interrupts", "patch_globals"):
        value = recorded.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"the trace's settings: {key} must be a list of names, not {value!r}")
    for key in set(recorded) & set(inspect.signature(settings_of).parameters):
        try:
            settings_of(**{key: recorded[key]})
        except (ValueError, TypeError) as e:
            raise ValueError(f"the trace's settings: {e}") from None
    return recorded, saved


_CHECK_OPTIONS = set(inspect.signature(check).parameters) - {"fn"}
#: The verdicts a check can give: "ok", or the kind of the violation it found.
VERDICTS = ("ok", "assertion", "uncaught_exception", "deadlock", "lost_wakeup", "hang", "leaked_thread",
            "non_owner_release")
#: The options of a check that a replay of it takes (the rest choose schedules, which a replay is given).
_REPLAY_OPTIONS = set(inspect.signature(replay).parameters) - {"fn", "trace", "name"}


def test(*, expect: str = "ok", **options: Any) -> Callable[[Callable[..., Any]], Callable[..., None]]:
    """A pytest decorator: the test body is checked under every schedule (``check``'s options).

    The test passes when the verdict is ``expect`` (``"ok"`` by default; a
    deliberately broken design names the violation it must show). Pytest
    fixtures still work: they are bound before the body is checked, so one that holds a real lock, condition,
    event, semaphore, barrier or queue is refused (return a factory the body calls instead). A check
    that was cut short (neither exhaustive nor covering its bound) without a
    violation fails too, unless the strategy samples.
    """
    unknown = set(options) - _CHECK_OPTIONS
    if unknown:
        raise TypeError(f"interleavings.test got unknown options: {', '.join(sorted(unknown))}")
    if "name" in options:
        raise TypeError("interleavings.test names the check after the test function: drop name=")
    if expect not in VERDICTS:
        raise ValueError(f"expect must be one of {', '.join(VERDICTS)}, not {expect!r}")

    def decorate(fn: Callable[..., Any]) -> Callable[..., None]:
        runs_when_called(fn)  # an async def or a generator: refused when decorated, not passed silently

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            _refuse_real_primitives(fn, args, kwargs)
            body = functools.partial(fn, *args, **kwargs) if (args or kwargs) else fn
            result = check(body, name=fn.__qualname__, **options)
            if result.verdict != expect:
                if result.violation is not None:
                    raise InterleavingFailure(result)
                raise AssertionError(f"{fn.__qualname__}: expected {expect}, but no schedule showed it\n"
                                     + render_text(result))
            sampled = options.get("strategy", "dfs") != "dfs"
            if expect == "ok" and not sampled and not (result.exhaustive or result.bound_covered):
                raise AssertionError(f"{fn.__qualname__}: the search was cut short; nothing is proved\n"
                                     + render_text(result))

        wrapper.interleavings = dict(options, expect=expect)  # type: ignore[attr-defined]
        wrapper.interleavings_body = fn  # type: ignore[attr-defined]
        return wrapper

    return decorate


def _real_kinds() -> tuple[type, ...]:
    import _thread
    import queue
    import threading

    return (_thread.LockType, type(threading.RLock()), threading.Condition, threading.Semaphore, threading.Event,
            threading.Barrier, queue.Queue, queue.SimpleQueue)


def _fields(value: Any) -> dict[str, Any]:
    """An object's attributes as stored: its ``__dict__`` and its ``__slots__`` (a ``dataclass(slots=True)``,
    an attrs class has no ``__dict__``); no property is run."""
    found = dict(vars(value)) if isinstance(getattr(value, "__dict__", None), dict) else {}
    for cls in type(value).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots if isinstance(slots, (tuple, list)) else ():
            try:
                found.setdefault(name, object.__getattribute__(value, name))
            except AttributeError:  # (a slot never set)
                pass
    return found


def _refuse_real_primitives(fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    """Refuse a pytest fixture's value that holds a real lock, condition, event, semaphore, barrier or queue
    (itself, or up to two levels inside it: attributes, items). It was made before the check, so it is no
    scheduling point, and every schedule shares it: a lock-order inversion over a fixture's two accounts
    passed, and a correct counter failed once the warm-up and the failing run had both added to it."""
    kinds = _real_kinds()

    def find(value: Any, where: str, depth: int) -> str | None:
        if issubclass(type(value), kinds):  # (the type itself: a MagicMock(spec=Queue) says it is one)
            return f"{where} holds a real {type(value).__name__}"
        if depth == 0 or isinstance(value, (str, bytes, type, types.ModuleType)):  # (a module's own globals)
            return None
        if type(value) in (list, tuple, set, frozenset):
            inner = [(f"{where}[{i}]", v) for i, v in enumerate(list(value)[:100])]
        elif type(value) is dict:
            inner = [(f"{where}[{k!r}]", v) for k, v in list(value.items())[:100]]
        else:
            inner = [(f"{where}.{k}", v) for k, v in list(_fields(value).items())[:100]]
        return next((hit for w, v in inner if (hit := find(v, w, depth - 1)) is not None), None)

    named = [(f"argument {i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    for name, value in named:
        hit = find(value, name, 2)
        if hit is not None:
            raise TypeError(f"{fn.__qualname__}: {hit}, made before the check: it is no scheduling point and "
                            "every schedule would share it. Build it in the body, or have the fixture return "
                            "a factory the body calls")


# -- the command line ---------------------------------------------------------------------

def register(sub: Any) -> dict[str, Callable[[Any], int]]:
    """Add ``check-code`` to the CLI's subparsers; returns its handler."""
    p = sub.add_parser("check-code", help="check real threading code under every schedule (FILE::TEST)")
    p.add_argument("target", help="path/to/test_file.py::test_name (a zero-argument function, or one "
                   "decorated with @interleavings.test)")
    p.add_argument("--strategy", choices=["dfs", "pct", "random", "hypothesis"], help="default: dfs")
    p.add_argument("--preemption-bound", type=int, metavar="K", help="only schedules with at most K preemptions")
    p.add_argument("--max-schedules", type=int, metavar="N", help="stop after N schedules")
    p.add_argument("--seed", type=int, help="seed for the sampling strategies")
    p.add_argument("--notify", choices=["fifo", "any"])
    p.add_argument("--spurious", choices=["off", "on"])
    p.add_argument("--lines", action="store_true", help="also schedule at line events and before stores and deletes")
    p.add_argument("--reduce", choices=["dpor", "none"])
    p.add_argument("--time-budget", type=float, metavar="S", help="stop the search after S seconds")
    p.add_argument("--json", action="store_true")
    p.add_argument("--svg", metavar="FILE", help="also draw the counterexample as an SVG swimlane diagram")
    p.add_argument("--replay", metavar="TRACE.json", help="run once under a saved schedule (a --json result)")
    p.add_argument("--allow-partial", action="store_true", help="exit 0, not 3, when the search was cut short")
    return {"check-code": _cmd_check_code}


def _cmd_check_code(args: Any) -> int:
    from .._tools.cliargs import UsageError

    if args.svg:  # before the search, as ``check`` does: a bad path is known now
        where = Path(args.svg)
        if where.is_dir() or not where.parent.is_dir():
            raise UsageError(f"cannot write --svg {args.svg!r}: "
                             + ("it is a directory" if where.is_dir() else "its directory does not exist"))
    folder = str(Path(args.target.partition("::")[0]).resolve().parent)
    sys.path.insert(0, folder)  # for the import and the check (pytest keeps it too: a body imports siblings)
    try:
        return _check_code(args)
    finally:
        sys.path.remove(folder)


def _check_code(args: Any) -> int:
    from .._tools.cliargs import UsageError, read_json_file

    fn, options = _load_target(args.target, UsageError)
    for opt in ("strategy", "preemption_bound", "max_schedules", "seed", "notify", "spurious", "reduce",
                "time_budget"):
        value = getattr(args, opt)
        if value is not None:
            options[opt] = value
    if args.lines:
        options["lines"] = True
    options.pop("expect", None)
    try:
        if args.replay:
            trace = read_json_file(args.replay, "trace")
            keep = {k: v for k, v in options.items() if k in _REPLAY_OPTIONS}
            result = replay(fn, trace, name=args.target, **keep)
        else:
            result = check(fn, name=args.target, **options)
    except (ValueError, TypeError) as e:
        raise UsageError(str(e)) from None
    if args.json:
        emit_json(result.to_json())
    else:
        print(render_text(result))
    if args.svg and result.violation is not None:  # after the verdict is out: a write that fails loses nothing
        try:
            write_svg(result, args.svg)
        except OSError as e:
            raise UsageError(f"cannot write --svg {args.svg!r}: {e.strerror or e}") from None
    if result.violation is not None:
        return 1
    if result.exhaustive or result.bound_covered or args.allow_partial or args.replay:
        return 0
    return 3


def _load_target(target: str, usage: type) -> tuple[Callable[[], Any], dict[str, Any]]:
    """The function ``FILE::NAME`` names, and the options of its ``@test`` decorator (if any)."""
    path_text, sep, attr = target.partition("::")
    if not sep or not attr:
        raise usage(f"{target!r}: give FILE.py::TEST_NAME")
    path = Path(path_text)
    if not path.is_file():
        raise usage(f"no such file: {path_text!r}")
    modname = f"_safeprefetch_check_code_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise usage(f"cannot import {path_text!r}")
    module = importlib.util.module_from_spec(spec)
    try:  # (the file's folder is on sys.path: _cmd_check_code put it there, for the check too)
        sys.modules[modname] = module
        spec.loader.exec_module(module)
    except SystemExit as e:  # not a pass: nothing was checked (exit 0 would read as "every schedule passed")
        what = f"called {exit_call(e)}" if isinstance(e, ProcessExit) else f"raised SystemExit({e.code!r})"
        raise usage(f"importing {path_text!r} {what}: nothing was checked") from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise usage(f"{path_text!r} has no {attr!r}")
    options = dict(getattr(obj, "interleavings", {}))
    body = getattr(obj, "interleavings_body", obj)
    if not callable(body):
        raise usage(f"{attr!r} is not callable")
    params = [p for p in inspect.signature(body).parameters.values()
              if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if params:
        raise usage(f"{attr!r} needs arguments ({', '.join(p.name for p in params)}): pytest fixtures are not "
                    "available from the command line; run it with pytest")
    return body, options


test.__test__ = False  # type: ignore[attr-defined]  # pytest must not collect the decorator itself

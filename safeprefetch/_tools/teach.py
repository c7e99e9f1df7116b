"""Teaching commands: ``explain MODEL`` and ``play MODEL``.

Why these exist
---------------
A counterexample is only useful if a person can follow it. The checker
already finds the shortest one; this module puts it in front of a reader
in the two ways that make concurrency bugs click:

* ``explain`` tells the story of one catalog model: the bug in one
  sentence (from the model's own docstring), where it comes from, the
  shortest trace as the OSTEP-style table, each program's graph (every
  step and the labels it declares it may go to, drawn from the ``to=``
  declarations, never by running it), and the fix -- the docstring's
  description of it, and the verdict of the fixed design re-checked at the
  same configuration, so the claim "this fixes it" is itself checked.
  ``--diff`` adds a unified diff of the two model classes.
* ``play`` makes the reader the scheduler. Each turn lists every thread's
  next step, numbered when it is enabled, with the reason when it is not
  ("asleep on cond", "waits for lock (held by consumer0)"). The reader
  picks; ``u`` undoes. When the run reaches a state the checker would
  report, ``play`` says so in the checker's own words ("all threads
  blocked: deadlock"), because it uses the checker's own classification
  (:func:`classify_hang`, the invariants, the end-of-run checks).

Everything here is a client of the kernel: the model is compiled once and
driven through :meth:`Machine.successors`, exactly as the explorer drives
it, so what you play is what the checker proves. ``play`` reads plain
lines from standard input -- no curses, no terminal assumptions -- so a
session can be scripted and tested by piping commands into it.

The docstring convention
------------------------
Every catalog module's docstring opens with ``NAME: one sentence``, then
paragraphs that start with ``Source:``, ``Minimal config:``, ``Expected
verdict:`` and (for broken models) ``Fix:``; paragraphs that follow one of
them without a key of their own continue it. Reference designs add headed
sections (a title underlined with dashes, e.g. ``Design``): those state
what the design guarantees. :func:`model_doc` parses exactly this, and
tolerates models that follow none of it.
"""

from __future__ import annotations

import difflib
import inspect
import json
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Mapping, Sequence

from .catalog import catalog, load_model
from .._check.explore import check
from .._check.replay import choice_step, replay_choices
from .._check.result import CheckResult, Trace, TraceStep
from .._check.verdict import HANG, classify_hang, terminal
from .._dsl.model import DONE, Machine, Model, StepViolation
from .._dsl.graph import format_graph
from .svg import blocked_reason
from .._check.trace import changes, format_table, format_value

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

#: Width the terminal prose is wrapped to; the trace table is as wide as it needs.
WRAP = 88

_KEYS = {"source": "source", "minimal config": "minimal_config", "expected verdict": "expected",
         "fix": "fix"}
_KEY_RE = re.compile(r"^([A-Z][A-Za-z ]{1,30}):\s+(.*)$", re.S)
_HEADING_RE = re.compile(r"^[-=~]{3,}$")


# --------------------------------------------------------------------------
# The model's own words: parsing the docstring.
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelDoc:
    """The parts of a catalog model's docstring."""

    #: The catalog name.
    name: str
    #: The bug (or the design) in one sentence, without the ``NAME:`` prefix.
    summary: str
    #: Where the bug or design comes from.
    source: str | None = None
    #: The smallest configuration that shows it, as the docstring states it.
    minimal_config: str | None = None
    #: The "Expected verdict" paragraph(s), starting with the verdict.
    expected: str | None = None
    #: How to fix it (broken models).
    fix: str | None = None
    #: Every other section, ``(title, text)``, in docstring order (e.g. "Design").
    sections: tuple[tuple[str, str], ...] = ()

    @property
    def expected_detail(self) -> str:
        """The Expected verdict paragraph without its leading ``verdict.`` word."""
        text = self.expected or ""
        m = re.match(r"^[\w ,()]+?\.\s*", text)
        return text[m.end():] if m else ""


def model_doc(model: type[Model]) -> ModelDoc:
    """Parse ``model``'s docstring (see the module docstring for the convention)."""
    text = inspect.cleandoc(model.__doc__ or "")
    paragraphs = [p.strip("\n") for p in re.split(r"\n[ \t]*\n", text) if p.strip()]
    name = model.name or model.__name__
    if not paragraphs:
        return ModelDoc(name, "(this model has no docstring)")
    summary = " ".join(line.strip() for line in paragraphs[0].splitlines())
    if summary.startswith(name + ":"):
        summary = summary[len(name) + 1:].strip()
    fields: dict[str, list[str]] = {}
    sections: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for para in paragraphs[1:]:
        lines = para.splitlines()
        if len(lines) >= 2 and _HEADING_RE.match(lines[1].strip()):
            current = ["\n".join(lines[2:])] if lines[2:] else []
            sections.append((lines[0].strip(), current))
            continue
        m = _KEY_RE.match(para)
        if m and m.group(1).lower() in _KEYS:
            current = [m.group(2)]
            fields[_KEYS[m.group(1).lower()]] = current
            continue
        if current is None:
            current = []
            sections.append(("About", current))
        current.append(para)
    joined = {k: "\n\n".join(v) for k, v in fields.items()}
    return ModelDoc(name, summary, joined.get("source"), joined.get("minimal_config"), joined.get("expected"),
                    joined.get("fix"), tuple((t, "\n\n".join(v)) for t, v in sections))


def _rst_to_plain(text: str) -> str:
    return text.replace("``", "`")


def sentence(text: str) -> str:
    """Capitalise the first letter (docstring paragraphs after ``Key:`` often start in lower case)."""
    return text[:1].upper() + text[1:] if text[:1].islower() else text


def _reflow(text: str, indent: str = "  ", width: int = WRAP) -> str:
    """Re-wrap plain paragraphs; keep lists, indented blocks and tables as written."""
    out = []
    for para in re.split(r"\n[ \t]*\n", _rst_to_plain(text).strip()):
        lines = para.splitlines()
        if any(line.startswith((" ", "\t", "* ", "- ", "|")) for line in lines) or any(
                re.match(r"^\s*([*-]|\d+\.)\s", line) for line in lines[1:]):
            out.append("\n".join(indent + line for line in lines))
        else:
            out.append(textwrap.fill(" ".join(line.strip() for line in lines), width,
                                     initial_indent=indent, subsequent_indent=indent))
    return "\n\n".join(out)


def trace_table(machine: Machine, trace: Trace, violation: Any = None) -> str:
    """:func:`format_table` with columns as wide as the longest label (so none is cut), within reason."""
    longest = max([len(s.step) + (len(s.branch) + 3 if s.branch else 0) for s in trace.steps]
                  + [len(n) for n in machine.thread_names] + [8])
    return format_table(machine, trace, violation, width=min(longest, 44))


def config_text(config: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def programs_text(machine: Machine, indent: str = "") -> str:
    """Each program's graph, from its declarations (``label  kind  -> targets``), with the threads that run it."""
    return format_graph(machine.graph, {role: machine.threads_of(role) for role in machine.graph}, indent)


# --------------------------------------------------------------------------
# The fix: the design it names, re-checked at the same configuration.
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class FixReport:
    """The fixed design checked where the broken one fails."""

    #: The broken model.
    model: type[Model]
    #: The design named by the broken model's ``fix`` attribute.
    fix: type[Model]
    #: The configuration the fix was checked at.
    config: Mapping[str, Any]
    #: Parameters of the broken model's config that the fix does not take.
    dropped: tuple[str, ...]
    #: The fix's check result there.
    result: CheckResult


def fix_name(model: type[Model]) -> str | None:
    """The design that fixes ``model``: its ``fix`` attribute.

    A model without one gets the first catalog reference design its Fix
    paragraph names in double backticks.
    """
    name = getattr(model, "fix", None)
    if name:
        return name
    text = model_doc(model).fix or ""
    refs = {n for n, m in catalog().items() if m.expected == "ok"}
    named = [n for n in re.findall(r"``(\w+)``", text) if n in refs]
    return named[0] if named else None


def fix_model(model: type[Model]) -> type[Model] | None:
    """The catalog model named by :func:`fix_name`, or None."""
    name = fix_name(model)
    if not name:
        return None
    return catalog().get(name)


def fix_report(model: type[Model], config: Mapping[str, Any]) -> FixReport | None:
    """Check ``model``'s fix at ``config``: the parameters both models share (the semantics settings
    among them), updated with the model's optional ``fix_config``."""
    fix = fix_model(model)
    if fix is None:
        return None
    known = fix.defaults()
    overrides = {k: v for k, v in config.items() if k in known}
    dropped = tuple(k for k in config if k not in known)
    # A model may say how its config maps onto its fix's (e.g. producers -> workers):
    # ``fix_config`` is a dict of overrides, or a function of the broken model's config.
    extra = getattr(model, "fix_config", None)
    if callable(extra):
        extra = extra(dict(config))
    if extra:
        overrides.update(extra)
    machine = fix.compile(overrides)
    result = check(machine)
    return FixReport(model, fix, machine.config, dropped, result)


def _source_file(model: type[Model]) -> str:
    try:
        path = Path(inspect.getsourcefile(model) or "")
    except TypeError:
        return model.__name__
    return f"models/{path.name}" if path.parent.name == "models" else path.name


def source_diff(model: type[Model], fix: type[Model], context: int = 3) -> str:
    """A unified diff from ``model``'s class to ``fix``'s class (their source, verbatim)."""
    a = inspect.getsource(model).splitlines(keepends=True)
    b = inspect.getsource(fix).splitlines(keepends=True)
    lines = difflib.unified_diff(a, b, _source_file(model), _source_file(fix), n=context)
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _result_line(result: CheckResult) -> str:
    scope = "exhaustive" if result.exhaustive else "NOT exhaustive (state bound reached)"
    text = f"{result.verdict}, {result.states} states, {scope}"
    if result.violation is not None:
        text += f", shortest trace {len(result.trace)} steps"
    return text


# --------------------------------------------------------------------------
# explain
# --------------------------------------------------------------------------


def explain(model: type[Model], overrides: Mapping[str, Any] | None = None, *, diff: bool = False) -> str:
    """The text ``explain`` prints: the bug, its source, the shortest trace and the fix."""
    doc = model_doc(model)
    machine = model.compile(overrides)
    result = check(machine)
    default = machine.config == model.configure({})
    reference = model.expected == "ok"
    out: list[str] = []
    kind = "reference design" if reference else "broken model"
    out.append(f"{doc.name}: {kind} (expected verdict: {model.expected})")
    out.append("")
    out.append("The design" if reference else "The bug")
    out.append(_reflow(sentence(doc.summary)))
    if doc.source:
        out += ["", "Source", _reflow(sentence(doc.source))]
    out += ["", "Checked", f"  config: {config_text(machine.config)}"
            + ("" if default else " (not the model's default)")]
    out.append(f"  verdict: {_result_line(result)}")
    if default and result.verdict != model.expected:
        out.append(f"  NOTE: the model declares {model.expected!r}; the checker says {result.verdict!r}")
    if doc.expected_detail:
        out += ["", _reflow(doc.expected_detail)]
    if result.violation is not None:
        out += ["", f"Shortest trace ({len(result.trace)} steps)",
                trace_table(machine, result.trace, result.violation)]
    out += ["", "The programs (each step, its kind, and the labels it declares it may go to)",
            programs_text(machine, indent="  ")]
    if reference:
        for title, text in doc.sections:
            out += ["", title, _reflow(text)]
        if model.sweep:
            sweep = ", ".join(f"{k} in {list(v)}" for k, v in model.sweep.items())
            out += ["", "Proved ok exhaustively over the sweep", _reflow(sweep)]
        fixes = [n for n, m in catalog().items() if m.expected != "ok" and fix_name(m) == doc.name]
        if fixes:
            out += ["", "It is the fix of", _reflow(", ".join(fixes))]
    else:
        for title, text in doc.sections:
            out += ["", title, _reflow(text)]
        out += ["", "The fix"]
        out.append(_reflow(sentence(doc.fix)) if doc.fix else "  (the model does not describe a fix)")
        name = fix_name(model)
        report = fix_report(model, machine.config) if name else None
        if name and report is None:
            out.append(f"  The fix names {name!r}, which is not in the catalog.")
        elif report is not None:
            out.append("")
            out.append(f"  {report.fix.name} at {config_text(report.config)}:")
            out.append(f"    {_result_line(report.result)}")
            if report.dropped:
                out.append(f"    ({report.fix.name} has no parameter {', '.join(report.dropped)}; left at its default)")
            if diff:
                out += ["", f"Source diff: {_source_file(model)} -> {_source_file(report.fix)}",
                        source_diff(model, report.fix).rstrip("\n")]
            else:
                out.append(f"  (add --diff to see the source diff against {report.fix.name})")
    out += ["", f"Be the scheduler yourself: python -m safeprefetch play {doc.name}"]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------
# play
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class PlayStatus:
    """Where a play session stands."""

    #: None while the run can go on; "ok" when every thread is done cleanly; else a violation kind.
    kind: str | None
    #: One line a person reads ("all threads blocked: deadlock").
    headline: str
    #: The checker's message, if any.
    detail: str = ""

    @property
    def over(self) -> bool:
        return self.kind is not None

    @property
    def violation(self) -> bool:
        return self.kind is not None and self.kind != "ok"


def play_status(machine: Machine, states: Sequence[Any], choices: Sequence[tuple[int, int]]) -> PlayStatus:
    """Classify the end of a run exactly as the explorer would."""
    last = states[-1]
    if isinstance(last, StepViolation):
        t = choices[-1][0]
        return PlayStatus(last.kind, f"{machine.thread_names[t]}'s step fails: {last.kind}", last.message)
    bad = machine.invariant_violation(last)
    if bad:
        return PlayStatus(bad[0], f"invariant broken: {bad[0]}", bad[1])
    succ = machine.successors(last)
    if not machine.is_stuck(last, succ):
        return PlayStatus(None, "running")
    end = terminal(machine, last)  # the explorer's own classifier
    if end is None:
        return PlayStatus("ok", "all threads done: ok")
    if end is not HANG:
        return PlayStatus(end[0], f"all threads done: {end[0]}", end[1])
    kind, msg = classify_hang(machine, list(states), list(choices))
    return PlayStatus(kind, f"all threads blocked: {kind}", msg)


def choice_numbers(machine: Machine, trace: Trace) -> list[int]:
    """The numbers ``play`` shows for each step of ``trace`` (what to type to replay it)."""
    states, choices = replay_choices(machine, trace)
    out = []
    for state, choice in zip(states, choices):
        options = [ch for ch, _ in machine.successors(state)]
        out.append(options.index(choice) + 1)
    return out


_HELP = """\
commands:
  N   run choice N (the numbers in brackets)
  u   undo the last step
  t   print the steps so far as a trace table
  s   print the whole state, field by field
  h   this help
  q   quit (end of input quits too)"""


class Play:
    """One interactive session: the user is the scheduler of ``machine``.

    It reads one command per line from ``inp`` and writes to ``out``; it
    never assumes a terminal. :meth:`run` returns the exit code: 1 when the
    session ends at a violation, else 0.
    """

    def __init__(self, machine: Machine, inp: IO[str], out: IO[str], *, echo: bool | None = None,
                 summary: str | None = None):
        self.machine = machine
        self.inp = inp
        self.out = out
        self.echo = (not _isatty(inp)) if echo is None else echo
        self.summary = summary
        self.states: list[Any] = [machine.init]
        self.choices: list[tuple[int, int]] = []
        self.steps: list[TraceStep] = []

    # -- state ---------------------------------------------------------------

    @property
    def trace(self) -> Trace:
        return Trace(tuple(self.steps))

    def status(self) -> PlayStatus:
        return play_status(self.machine, self.states, self.choices)

    def options(self) -> list[tuple[tuple[int, int], Any]]:
        last = self.states[-1]
        if not isinstance(last, tuple) or self.machine.invariant_violation(last):
            return []
        return self.machine.successors(last)

    def take(self, number: int) -> str:
        """Run choice ``number`` (1-based); return a one-line account of the step."""
        options = self.options()
        (t, b), nxt = options[number - 1]
        before = self.states[-1]
        step = choice_step(self.machine, before, (t, b))
        self.states.append(nxt)
        self.choices.append((t, b))
        self.steps.append(step)
        label = step.step if step.branch is None else f"{step.step} [{step.branch}]"
        if isinstance(nxt, StepViolation):
            what = f"<== {nxt.kind}: {nxt.message}"
        else:
            what = ", ".join(changes(self.machine, before, nxt, t))
            info = self.machine.step_info(before, t)
            if info is not None and info.kind in ("notify_one", "notify_all") \
                    and not before[self.machine.cond_index[info.obj]]:
                what = (what + ", " if what else "") + f"nobody waits on {info.obj}"
            what = what or "nothing visible changed"
            if self.machine.pc(nxt, t) == DONE:
                what += ", (done)"
        return f"==> {self.machine.thread_names[t]}: {label}   ({what})"

    def undo(self) -> bool:
        if not self.choices:
            return False
        self.states.pop()
        self.choices.pop()
        self.steps.pop()
        return True

    # -- rendering -------------------------------------------------------------

    def _shared_fields(self, state: Sequence) -> list[str]:
        m = self.machine
        prefixes = tuple(n + "." for n in m.thread_names)
        return [f"{name}={format_value(m, i, state[i])}" for i, name in enumerate(m.field_names)
                if not name.startswith(prefixes)]

    def _locals(self, state: Sequence, t: int) -> str:
        m = self.machine
        return "  ".join(f"{n}={format_value(m, i, state[i])}" for n, i in m.local_index[t].items())

    def board(self) -> str:
        m = self.machine
        last = self.states[-1]
        state = last if isinstance(last, tuple) else self.states[-2]
        lines = [f"-- after {len(self.steps)} step{'s' if len(self.steps) != 1 else ''} --",
                 "shared: " + "  ".join(self._shared_fields(state))]
        options = self.options()
        over = self.status().over
        by_thread: dict[int, list[int]] = {}
        for n, ((t, _b), _nxt) in enumerate(options, 1):
            by_thread.setdefault(t, []).append(n)
        width = max(len(n) for n in m.thread_names)
        for t, name in enumerate(m.thread_names):
            loc = self._locals(state, t)
            head = f"  {name.ljust(width)}" + (f"  {loc}" if loc else "")
            if m.pc(state, t) == DONE:
                lines.append(head + "  -- done")
                continue
            lines.append(head)
            info = m.step_info(state, t)
            for n in by_thread.get(t, []):
                step = choice_step(m, state, options[n - 1][0])
                label = step.step if step.branch is None else f"{step.step} [{step.branch}]"
                lines.append(f"      [{n}] {label}")
            if t not in by_thread and isinstance(last, tuple) and m.fire(state, t) and over:
                lines.append(f"      (stopped) {info.label if info else m.pc(state, t)}")
            elif t not in by_thread:
                pc = m.pc(state, t)
                label = pc[: -len(" (asleep)")] if pc.endswith(" (asleep)") else (info.label if info else pc)
                lines.append(f"      (blocked) {label} -- {blocked_reason(m, state, t)}")
        return "\n".join(lines)

    def _prompt(self) -> str:
        n = len(self.options())
        picks = f"pick 1-{n}, " if n > 1 else ("pick 1, " if n == 1 else "")
        return f"{picks}u undo, h help, q quit> "

    def _say(self, text: str = "") -> None:
        self.out.write(text + "\n")

    # -- the loop ----------------------------------------------------------------

    def run(self) -> int:
        m = self.machine
        self._say(f"play {m.name} ({config_text(m.config)})")
        if self.summary:
            self._say(_reflow(self.summary, indent=""))
        self._say("You are the scheduler: each turn, pick which thread takes its next step.")
        self._say("Type h for help.")
        show = True
        while True:
            status = self.status()
            if show:
                self._say()
                self._say(self.board())
                if status.over:
                    self._say(f"*** {status.headline}")
                    detail = status.detail
                    if detail.startswith("all threads blocked: "):
                        detail = detail[len("all threads blocked: "):]
                    if detail:
                        self._say(textwrap.fill(detail, WRAP, initial_indent="    ", subsequent_indent="    "))
                    if self.options():
                        self._say("    (only spurious wakeups remain, and a spurious wakeup is never guaranteed)")
                    else:
                        self._say("    the run is over: u to undo, q to quit")
            show = False
            self.out.write(self._prompt())
            self.out.flush()
            try:
                line = self.inp.readline()
            except KeyboardInterrupt:  # Ctrl-C at the prompt quits like q
                line = "q\n"
            if not line:
                self._say("\n(end of input)")
                break
            cmd = line.strip().lower()
            if self.echo:
                self._say(cmd)
            if not cmd:
                continue
            if cmd in ("q", "quit", "exit"):
                break
            if cmd in ("h", "help", "?"):
                self._say(_HELP)
                continue
            if cmd in ("u", "undo"):
                if self.undo():
                    self._say(f"undone; back to step {len(self.steps)}")
                    show = True
                else:
                    self._say("nothing to undo")
                continue
            if cmd in ("t", "trace"):
                self._say(trace_table(m, self.trace) if self.steps else "(no steps yet)")
                continue
            if cmd in ("s", "state"):
                last = self.states[-1] if isinstance(self.states[-1], tuple) else self.states[-2]
                for i, name in enumerate(m.field_names):
                    self._say(f"  {name} = {format_value(m, i, last[i])}")
                continue
            if cmd.isdigit():
                n = int(cmd)
                options = self.options()
                if not options:
                    self._say("the run is over: u to undo, q to quit")
                elif not 1 <= n <= len(options):
                    self._say(f"no choice {n}: pick a number from 1 to {len(options)}")
                else:
                    self._say(self.take(n))
                    show = True
                continue
            self._say(f"unknown command {line.strip()!r}; type h for help")
        status = self.status()
        end = status.headline if status.over else "unfinished"
        self._say(f"session over after {len(self.steps)} steps: {end}")
        return 1 if status.violation else 0


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def _cmd_explain(args) -> int:
    from .cliargs import parse_sets

    model = load_model(args.model)
    sys.stdout.write(explain(model, parse_sets(args.set or []), diff=args.diff))
    return 0


def _cmd_play(args) -> int:
    from .cliargs import UsageError, parse_sets

    model = load_model(args.model)
    machine = model.compile(parse_sets(args.set or []))
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

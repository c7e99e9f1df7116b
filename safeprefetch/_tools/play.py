"""``play MODEL``: the reader is the scheduler.

Concurrency bugs click when you cause one yourself. Each turn, ``play``
lists every thread's next step, numbered when it is enabled, with the
reason when it is not ("asleep on cond", "waits for lock (held by
consumer0)"). The reader picks; ``u`` undoes. When the run reaches a state
the checker would report, ``play`` says so in the checker's own words ("all
threads blocked: deadlock"), because it uses the checker's own
classification (:func:`classify_hang`, the invariants, the end-of-run
checks).

Everything here is a client of the kernel: the model is compiled once and
driven through :meth:`Machine.successors`, exactly as the explorer drives
it, so what you play is what the checker proves. ``play`` reads plain
lines from standard input -- no curses, no terminal assumptions -- so a
session can be scripted and tested by piping commands into it.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import IO, Any, Sequence

from .plaintext import WRAP, blocked_reason, config_text, reflow, trace_table
from .._check.lasso import by_priority
from .._check.replay import choice_step, replay_choices
from .._check.reverify import latest_starving_visit
from .._check.result import Trace, TraceStep
from .._check.trace import changes, format_value
from .._check.verdict import HANG, classify_hang, terminal
from .._dsl.model import DONE, Machine, StepViolation

__all__ = ["Play", "PlayStatus", "choice_numbers", "play_status"]

#: The longest input line read as one: a longer one is read a piece at a time and refused as one unknown
#: command, and past 256 pieces with no line end input ends (a stream with no line end, /dev/zero, ran the
#: process out of memory in one readline, and a huge line was echoed back).
MAX_LINE = 4096


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
        return _closed_cycle(machine, states, choices) or PlayStatus(None, "running")
    end = terminal(machine, last)  # the explorer's own classifier
    if end is None:
        return PlayStatus("ok", "all threads done: ok")
    if end is not HANG:
        return PlayStatus(end[0], f"all threads done: {end[0]}", end[1])
    kind, msg = classify_hang(machine, list(states), list(choices))
    return PlayStatus(kind, f"all threads blocked: {kind}", msg)


def _closed_cycle(machine: Machine, states: Sequence[Any], choices: Sequence[tuple[int, int]]) -> PlayStatus | None:
    """Starvation, when the last step returned to an earlier state by a cycle the checker would report (as the
    playground page judges it: every earlier visit tried, the latest first); None otherwise."""
    if not machine.progress_labels or len(states) < 2 or not all(isinstance(s, tuple) for s in states):
        return None
    if states[-1] not in states[:-1]:
        return None
    found = latest_starving_visit(machine, list(states), list(choices))
    if found is None:
        return None
    message = found[1]
    return PlayStatus("starvation", f"starvation: {message.split(':', 1)[0]}", message)


def choice_numbers(machine: Machine, trace: Trace) -> list[int]:
    """The numbers ``play`` shows for each step of ``trace`` (what to type to replay it)."""
    states, choices = replay_choices(machine, trace)
    out = []
    for state, choice in zip(states, choices):
        options = [ch for ch, _ in allowed(machine, state)]
        out.append(options.index(choice) + 1)
    return out


def allowed(machine: Machine, state: tuple) -> list[tuple[tuple[int, int], Any]]:
    """The moves the scheduling policy lets the player make from ``state``: every one, or under
    ``policy=priority`` the checker's strict-priority rule (:func:`~safeprefetch._check.lasso.by_priority`; the
    game offered a low thread's step while a higher one was ready, where the checker and the playground page
    hold it back)."""
    succ = machine.successors(state)
    return by_priority(machine, state, succ) if succ and machine.config.get("policy") == "priority" else succ


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
        return allowed(self.machine, last)

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
            if t not in by_thread and isinstance(last, tuple) and m.fire(state, t) and over and not options:
                lines.append(f"      (stopped) {info.label if info else m.pc(state, t)}")
            elif t not in by_thread and isinstance(last, tuple) and m.fire(state, t):
                lines.append(f"      (held) {info.label if info else m.pc(state, t)} -- a thread of higher "
                             "priority is ready (strict-priority policy)")
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

    def _show_board(self, status: PlayStatus) -> None:
        """The board, and, when the run is over, what the checker would report and what is left to do."""
        self._say()
        self._say(self.board())
        if status.over:
            self._say(f"*** {status.headline}")
            detail = status.detail
            if detail.startswith("all threads blocked: "):
                detail = detail[len("all threads blocked: "):]
            if detail:
                self._say(textwrap.fill(detail, WRAP, initial_indent="    ", subsequent_indent="    "))
            if status.kind == "starvation":
                self._say("    the scheduler may repeat that cycle forever: step on, u to undo, or q to quit")
            elif self.options():
                self._say("    (only spurious wakeups remain, and a spurious wakeup is never guaranteed)")
            else:
                self._say("    the run is over: u to undo, q to quit")

    # -- the loop ----------------------------------------------------------------

    def _read_line(self) -> str:
        """The next line of input; Ctrl-C at the prompt quits like q. (Both branches return: an ``except``
        body that falls through ends in a back-edge on 3.12, where a second Ctrl-C lands in it again.)"""
        try:
            line = self.inp.readline(MAX_LINE)
            return line if len(line) < MAX_LINE or line.endswith("\n") else self._skip_rest()
        except KeyboardInterrupt:
            return "q\n"

    def _skip_rest(self) -> str:
        """After the first :data:`MAX_LINE` characters of a line: the rest of it read and dropped, a piece at a
        time; one unknown command for the whole line, or the end of input where no line end comes soon."""
        for _ in range(256):
            piece = self.inp.readline(MAX_LINE)
            if not piece:
                return ""
            if piece.endswith("\n"):
                return "(a line too long to be a choice)\n"
        return ""

    def run(self) -> int:
        m = self.machine
        self._say(f"play {m.name} ({config_text(m.config)})")
        if self.summary:
            self._say(reflow(self.summary, indent=""))
        self._say("You are the scheduler: each turn, pick which thread takes its next step.")
        self._say("Type h for help.")
        show = True
        while True:
            if show:
                self._show_board(self.status())
            show = False
            self.out.write(self._prompt())
            self.out.flush()
            line = self._read_line()
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
            if cmd.isascii() and cmd.isdigit() and len(cmd) < 10:  # not '²', nor a number int() refuses
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

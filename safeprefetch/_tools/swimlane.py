"""The swimlane diagram's plan, before any SVG: the trace replayed, what each row says, where things go.

Like the text table, the picture is computed by replaying the trace through
the model, so it cannot disagree with what the model does. :func:`run_of`
replays it and records, for every row, what the SVG draws there: the step's
label and kind, the "what changed" text, the threads a notify wakes and the
blocked threads a step lets move. :func:`layout_of` then decides where
everything goes: one lane per thread, each as wide as its longest label
(within :data:`LANE_MIN` and :data:`LANE_MAX`), one row per step, time
flowing down, the changes column on the right, and a last row for a
violation that holds in the final state (a deadlock, a failed invariant)
where every stuck thread says why. A starvation lasso's cycle starts at its
``Violation.cycle_start`` (the field, never the message, says where).

Nothing here writes SVG (:mod:`.svg` draws the plan), and nothing measures
a font: text is monospace, so a label's width is its length times
:data:`CHAR`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .plaintext import blocked_reason, config_text
from .._check.replay import replay_choices
from .._check.result import Trace, TraceStep, Violation
from .._check.trace import changes
from .._dsl.model import DONE, Machine, StepViolation
from .._dsl.program import ASLEEP

__all__ = ["BOX_H", "CHANGES_MAX", "CHAR", "FONT", "HEADER", "LANE_MAX", "LANE_MIN", "MARGIN", "NUM_W", "ROW",
           "STUCK_KINDS", "Layout", "Run", "layout_of", "run_of", "step_label"]

# Layout constants, in SVG user units (pixels at 100 %). Text is monospace at
# FONT px; CHAR is the advance width of one character of it, used to size
# lanes to their longest label so nothing overlaps without a font metric table.
FONT = 12
CHAR = 7.3
ROW = 30          # height of one step row
BOX_H = 22        # height of a step box
MARGIN = 16
NUM_W = 34        # the step-number column
LANE_MIN = 120    # narrowest lane
LANE_MAX = 340    # widest lane; longer labels are cut and kept whole in a tooltip
CHANGES_MAX = 560
HEADER = 64       # title, verdict and thread names

#: Violations that hold in a terminal state where some thread cannot step.
_HANGS = ("deadlock", "lost_wakeup", "shutdown_hang")
#: Violations of a state (or a cycle of states) whose stuck threads the final row explains.
STUCK_KINDS = _HANGS + ("starvation",)


def step_label(step) -> str:
    return step.step if step.branch is None else f"{step.step} [{step.branch}]"


# -- the trace replayed --------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """The trace replayed through the model, and what each row of the picture says."""

    machine: Machine
    steps: list[TraceStep]
    #: Every state, the initial one first; the last is a StepViolation when a step raised one.
    states: list[Any]
    choices: list[tuple[int, int]]
    violation: Violation | None
    step_violation: StepViolation | None
    #: The last real state (the one before a step's violation, if any).
    final_state: Any
    #: A final-state row: the violation holds in the state reached, not on a step.
    state_row: bool
    labels: list[str]
    #: Per row: the primitive's kind ("notify_one", "spurious", ...; "step" when unknown).
    kinds: list[str]
    #: Per row: the "changes" column.
    change_text: list[str]
    #: Per row: the threads a notify wakes.
    woken_by: list[list[int]]
    #: Per row: the blocked threads the step lets move (not by a notify, not a mutex hand-over).
    unblocked: list[list[int]]

    @property
    def names(self) -> tuple[str, ...]:
        return self.machine.thread_names

    @property
    def rows_state(self) -> list[Any]:
        """The state before each row: each step's, then the final state's row if there is one."""
        return self.states[:len(self.steps)] + ([self.final_state] if self.state_row else [])

    @property
    def shown(self) -> Violation | StepViolation | None:
        """The violation the picture reports: the checker's, else the one a step raised, else None."""
        return self.violation if self.violation is not None else self.step_violation


def _row_facts(machine: Machine, before: Any, after: Any, t: int) -> tuple[str, str, list[int], list[int]]:
    """(kind, changes text, woken, unblocked) of thread ``t``'s step from ``before`` to ``after``."""
    nthreads = len(machine.thread_names)
    info = machine.step_info(before, t)
    kind = info.kind if info is not None else "step"
    if isinstance(after, StepViolation):
        return kind, f"{after.kind}: {after.message}", [], []
    text = ", ".join(changes(machine, before, after, t))
    if kind in ("notify_one", "notify_all") and info is not None and not before[machine.cond_index[info.obj]]:
        text = (text + ", " if text else "") + f"(nobody waits on {info.obj})"
    if machine.pc(after, t) == DONE:
        text = (text + ", " if text else "") + "(done)"
    woken = [w for w in range(nthreads) if w != t
             and machine.pc(before, w).endswith(ASLEEP)
             and not machine.pc(after, w).endswith(ASLEEP)]
    # A semaphore release, a flag set or a plain step that lets a blocked
    # thread move. Mutex hand-overs are left out: the ownership bars say it.
    unblocked = ([] if kind in ("notify_one", "notify_all") else
                 [w for w in range(nthreads) if w != t and machine.pc(before, w) != DONE
                  and not machine.pc(before, w).endswith(ASLEEP)
                  and machine.step_info(before, w).kind not in ("acquire", "wake")
                  and not machine.fire(before, w) and machine.fire(after, w)])
    return kind, text, woken, unblocked


def run_of(machine: Machine, trace: Trace, violation: Violation | None) -> Run:
    """Replay ``trace`` on ``machine`` and gather what every row of its picture says."""
    states, choices = replay_choices(machine, trace)
    steps = list(trace.steps)
    last = states[-1]
    step_violation = last if isinstance(last, StepViolation) else None
    final_state = states[-2] if step_violation is not None else last
    state_row = violation is not None and not violation.on_step and step_violation is None
    facts = [_row_facts(machine, states[k], states[k + 1], t) for k, (t, _b) in enumerate(choices)]
    return Run(machine, steps, states, choices, violation, step_violation, final_state, state_row,
               [step_label(s) for s in steps], [f[0] for f in facts], [f[1] for f in facts],
               [f[2] for f in facts], [f[3] for f in facts])


# -- layout -------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where everything goes: lanes sized to their longest label, the changes column, the rows."""

    mutexes: list[str]
    #: Room on the left of each step box for the mutex bars.
    box_inset: int
    #: Why each stuck thread is stuck, for the final-state row.
    reasons: dict[int, str]
    #: The step a starvation lasso's cycle starts at (0-based), or None.
    cycle_from: int | None
    #: The final-state row's text in the changes column.
    final_text: str
    lane_w: list[float]
    lane_x: list[float]
    changes_x: float
    changes_w: float
    nrows: int
    top: int
    foot_h: int
    width: float
    height: float

    @property
    def header_y(self) -> int:
        """The baseline of the column titles (``#``, the thread names, ``changes``)."""
        return self.top - 8

    def row_y(self, k: int) -> float:
        """The top of row ``k`` (0-based)."""
        return self.top + k * ROW

    def centre(self, t: int) -> float:
        return self.lane_x[t] + self.lane_w[t] / 2

    def box_x(self, t: int) -> float:
        return self.lane_x[t] + self.box_inset

    def box_w(self, t: int) -> float:
        return self.lane_w[t] - self.box_inset - 6


def _stuck_reasons(run: Run) -> dict[int, str]:
    """Why each thread is stuck in the final state of a hang or a starvation (empty otherwise)."""
    machine, final_state, violation = run.machine, run.final_state, run.violation
    if not (run.state_row and isinstance(final_state, tuple) and violation.kind in STUCK_KINDS):
        return {}
    return {t: blocked_reason(machine, final_state, t) for t in range(len(run.names))
            if machine.pc(final_state, t) != DONE
            and all(machine.pc(final_state, t) in machine.spurious_pcs[t] for _ in machine.fire(final_state, t))}


def _cycle_from(run: Run) -> int | None:
    """A starvation trace is a lasso: the steps after the stem repeat forever. Where the cycle starts."""
    violation = run.violation
    if violation is not None and violation.kind == "starvation":
        start = violation.cycle_start
        if start is not None and 0 <= start < len(run.steps):
            return start
    return None


def _final_text(run: Run, cycle_from: int | None) -> str:
    final_text = "<== " + run.violation.kind if run.violation is not None else ""
    if cycle_from is not None:
        n = len(run.steps)
        span = f"step {n}" if cycle_from + 1 == n else f"steps {cycle_from + 1}-{n}"
        final_text += f" ({span} can repeat forever)"
    return final_text


def layout_of(run: Run) -> Layout:
    """Size the lanes to their labels, place the changes column, and size the document to fit."""
    machine = run.machine
    mutexes = list(machine.mutex_index)
    box_inset = 8 + 4 * len(mutexes)
    reasons = _stuck_reasons(run)
    cycle_from = _cycle_from(run)
    final_text = _final_text(run, cycle_from)
    lane_w = []
    for t, name in enumerate(run.names):
        longest = max([len(name), len(reasons.get(t, ""))]
                      + [len(run.labels[k]) for k, (ct, _) in enumerate(run.choices) if ct == t])
        lane_w.append(min(LANE_MAX, max(LANE_MIN, longest * CHAR + box_inset + 26)))
    lane_x = []
    x = MARGIN + NUM_W
    for w in lane_w:
        lane_x.append(x)
        x += w
    changes_x = x + 20
    longest_change = max([len(c) + 4 for c in run.change_text] + [7, len(final_text)])
    changes_w = min(CHANGES_MAX, longest_change * CHAR + 8)
    nrows = len(run.steps) + (1 if run.state_row else 0)
    top = MARGIN + HEADER
    legend_h = 24 if mutexes or nrows else 0
    v = run.shown
    foot_h = 30 if v is not None else 24
    verdict_len = len(v.kind) + 2 + len(v.message) if v is not None else 40
    width = max(changes_x + changes_w + MARGIN, 2 * MARGIN + verdict_len * CHAR,
                2 * MARGIN + len(config_text(machine.config)) * CHAR)
    height = top + max(nrows, 1) * ROW + foot_h + legend_h + MARGIN
    return Layout(mutexes, box_inset, reasons, cycle_from, final_text, lane_w, lane_x, changes_x, changes_w,
                  nrows, top, foot_h, width, height)

"""Rendering a trace as an SVG swimlane diagram.

Reading the picture
-------------------
One vertical lane per thread, one row per step, time flowing down. A step
is a box in its thread's lane, holding the label verbatim from the model
(and the branch taken, in brackets); the last column repeats the text
table's "what changed". The primitives' events are drawn, not just listed:

* a thread **asleep** on a condition variable is a grey hatched span in its
  lane, from the step after its ``wait`` to the step that wakes it;
* a **notify** is an arrow from the notifying step to every thread it wakes
  (a notify with nobody waiting is drawn as a short arrow into nothing, so
  a notify that went missing is visible);
* a thread **holding a mutex** has a thick coloured bar along its lifeline,
  one colour per mutex (see the legend);
* a **spurious wakeup** is a box with a dashed border;
* a thread that is **done** ends with a bar.

The violation is red. A violation raised *by* a step (an underflow on a
take, say) marks that step's box. A violation that holds *in* a state (a
deadlock, a failed invariant) adds a last row, the final state, where every
thread that is not done shows where it is stuck. A starvation lasso marks
the steps from its ``Violation.cycle_start`` on as the cycle that repeats
forever (the field, never the message, says where it starts).

Like the text table, the picture is computed by replaying the trace through
the model, so it cannot disagree with what the model does. The output is
plain SVG 1.1 built from strings (no dependency), deterministic for a given
trace, and every piece of model text is XML-escaped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence
from xml.sax.saxutils import escape

from .._check.replay import replay_choices
from .._check.result import CheckResult, Trace, Violation
from .._dsl.model import DONE, Machine, StepViolation
from .._check.trace import changes

__all__ = ["blocked_reason", "svg_for", "write_svg"]

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

_ASLEEP = " (asleep)"
_WOKEN = " (woken)"
_MUTEX_COLOURS = ("#3b7dd8", "#d9822b", "#2e9e6a", "#8e5bd6", "#c2417a", "#6b8e23")
_RED = "#c62828"
#: Violations that hold in a terminal state where some thread cannot step.
_HANGS = ("deadlock", "lost_wakeup", "shutdown_hang")
#: Violations of a state (or a cycle of states) whose stuck threads the final row explains.
_STUCK_KINDS = _HANGS + ("starvation",)


def _x(text: Any) -> str:
    """Escape for both element text and double-quoted attributes."""
    return escape(str(text), {'"': "&quot;"})


def _cut(text: str, width: float) -> str:
    n = max(4, int(width / CHAR))
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def _step_label(step) -> str:
    return step.step if step.branch is None else f"{step.step} [{step.branch}]"


def blocked_reason(machine: Machine, state: Sequence, t: int) -> str:
    """Why thread ``t`` cannot take its next step in ``state``, in a few words.

    Only meaningful for a thread that is not done and has no enabled step
    (or only a spurious wakeup).
    """
    pc = machine.pc(state, t)
    info = machine.step_info(state, t)
    if pc.endswith(_ASLEEP):
        cond = info.obj if info is not None else "?"
        return f"asleep on {cond}"
    if info is None:
        return f"blocked at {pc!r}"
    if info.kind in ("acquire", "wake"):
        mutex = info.obj if info.kind == "acquire" else info.label.rsplit("reacquire ", 1)[-1]
        if mutex in machine.mutex_index:
            owner = state[machine.mutex_index[mutex]]
            if owner != -1:
                return f"waits for {mutex} (held by {machine.thread_names[owner]})"
    if info.kind == "sem_acquire":
        return f"waits for semaphore {info.obj} (count 0)"
    if info.kind == "wait_flag":
        return f"waits for flag {info.obj}"
    return f"waits at {info.label!r}: not enabled yet"


def svg_for(machine: Machine, trace: Trace, violation: Violation | None = None) -> str:
    """The swimlane diagram of ``trace`` on ``machine`` as an SVG document (a string)."""
    states, choices = replay_choices(machine, trace)
    steps = list(trace.steps)
    names = machine.thread_names
    nthreads = len(names)
    last = states[-1]
    step_violation = last if isinstance(last, StepViolation) else None
    final_state = states[-2] if step_violation is not None else last
    # A final-state row: the violation holds in the state reached, not on a step.
    state_row = violation is not None and not violation.on_step and step_violation is None

    # -- per-row facts ---------------------------------------------------------
    labels = [_step_label(s) for s in steps]
    change_text: list[str] = []
    woken_by: list[list[int]] = []
    unblocked: list[list[int]] = []
    kinds: list[str] = []
    for k, (t, _b) in enumerate(choices):
        before, after = states[k], states[k + 1]
        info = machine.step_info(before, t)
        kinds.append(info.kind if info is not None else "step")
        if isinstance(after, StepViolation):
            change_text.append(f"{after.kind}: {after.message}")
            woken_by.append([])
            unblocked.append([])
            continue
        text = ", ".join(changes(machine, before, after, t))
        if kinds[k] in ("notify_one", "notify_all") and info is not None and not before[machine.cond_index[info.obj]]:
            text = (text + ", " if text else "") + f"(nobody waits on {info.obj})"
        if machine.pc(after, t) == DONE:
            text = (text + ", " if text else "") + "(done)"
        change_text.append(text)
        woken_by.append([w for w in range(nthreads) if w != t
                         and machine.pc(before, w).endswith(_ASLEEP)
                         and not machine.pc(after, w).endswith(_ASLEEP)])
        # A semaphore release, a flag set or a plain step that lets a blocked
        # thread move. Mutex hand-overs are left out: the ownership bars say it.
        unblocked.append([] if kinds[-1] in ("notify_one", "notify_all") else
                         [w for w in range(nthreads) if w != t and machine.pc(before, w) != DONE
                          and not machine.pc(before, w).endswith(_ASLEEP)
                          and machine.step_info(before, w).kind not in ("acquire", "wake")
                          and not machine.fire(before, w) and machine.fire(after, w)])

    # -- geometry -------------------------------------------------------------
    mutexes = list(machine.mutex_index)
    box_inset = 8 + 4 * len(mutexes)  # room on the left of each box for the mutex bars
    reasons = {}
    if state_row and isinstance(final_state, tuple) and violation.kind in _STUCK_KINDS:
        reasons = {t: blocked_reason(machine, final_state, t) for t in range(nthreads)
                   if machine.pc(final_state, t) != DONE
                   and all(machine.pc(final_state, t) in machine.spurious_pcs[t] for _ in machine.fire(final_state, t))}
    # A starvation trace is a lasso: the steps after the stem repeat forever.
    cycle_from = None
    if violation is not None and violation.kind == "starvation":
        start = violation.cycle_start
        if start is not None and 0 <= start < len(steps):
            cycle_from = start
    final_text = "<== " + violation.kind if violation is not None else ""
    if cycle_from is not None:
        span = f"step {len(steps)}" if cycle_from + 1 == len(steps) else f"steps {cycle_from + 1}-{len(steps)}"
        final_text += f" ({span} can repeat forever)"
    lane_w = []
    for t, name in enumerate(names):
        longest = max([len(name), len(reasons.get(t, ""))]
                      + [len(labels[k]) for k, (ct, _) in enumerate(choices) if ct == t])
        lane_w.append(min(LANE_MAX, max(LANE_MIN, longest * CHAR + box_inset + 26)))
    lane_x = []
    x = MARGIN + NUM_W
    for w in lane_w:
        lane_x.append(x)
        x += w
    changes_x = x + 20
    longest_change = max([len(c) + 4 for c in change_text] + [7, len(final_text)])
    changes_w = min(CHANGES_MAX, longest_change * CHAR + 8)
    nrows = len(steps) + (1 if state_row else 0)
    top = MARGIN + HEADER
    legend_h = 24 if mutexes or nrows else 0
    foot_h = 30 if violation is not None or step_violation is not None else 24
    if violation is not None or step_violation is not None:
        v = violation if violation is not None else step_violation
        verdict_len = len(v.kind) + 2 + len(v.message)
    else:
        verdict_len = 40
    width = max(changes_x + changes_w + MARGIN, 2 * MARGIN + verdict_len * CHAR,
                2 * MARGIN + len(" ".join(f"{k}={v}" for k, v in machine.config.items())) * CHAR)
    height = top + max(nrows, 1) * ROW + foot_h + legend_h + MARGIN

    def row_y(k: int) -> float:  # top of row k (0-based)
        return top + k * ROW

    def centre(t: int) -> float:
        return lane_x[t] + lane_w[t] / 2

    out: list[str] = []
    add = out.append
    add(f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="ui-monospace, Menlo, Consolas, monospace" '
        f'font-size="{FONT}">')
    cfg = " ".join(f"{k}={v}" for k, v in machine.config.items())
    verdict = violation.kind if violation is not None else (step_violation.kind if step_violation else "ok")
    add(f"<title>{_x(machine.name)}: {_x(verdict)}</title>")
    add("<defs>"
        '<pattern id="asleep" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        '<rect width="6" height="6" fill="#eeeeee"/><line x1="0" y1="0" x2="0" y2="6" stroke="#9e9e9e" '
        'stroke-width="2"/></pattern>'
        '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555555"/></marker>'
        '<marker id="arrow-red" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{_RED}"/></marker>'
        "</defs>")
    add(f'<rect x="0" y="0" width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>')
    add(f'<text x="{MARGIN}" y="{MARGIN + 12}" font-weight="bold">{_x(machine.name)}</text>')
    add(f'<text x="{MARGIN}" y="{MARGIN + 28}" fill="#555555">{_x(cfg)}</text>')

    # Header: column titles.
    hy = top - 8
    add(f'<text x="{MARGIN + NUM_W - 8}" y="{hy}" text-anchor="end" font-weight="bold">#</text>')
    add(f'<text x="{changes_x:.1f}" y="{hy}" font-weight="bold">changes</text>')

    # Zebra rows behind everything.
    for k in range(nrows):
        if k % 2 == 1:
            add(f'<rect x="{MARGIN}" y="{row_y(k):.1f}" width="{width - 2 * MARGIN:.0f}" height="{ROW}" '
                f'fill="#f7f7f7"/>')

    if state_row:
        add(f'<rect x="{MARGIN}" y="{row_y(len(steps)):.1f}" width="{width - 2 * MARGIN:.0f}" height="{ROW}" '
            f'fill="#ffebee" stroke="{_RED}" stroke-width="1"/>')

    rows_state = [states[k] for k in range(len(steps))] + ([final_state] if state_row else [])

    def _row_class(state: Any, t: int) -> str | None:
        if not isinstance(state, tuple) or machine.pc(state, t) == DONE:
            return None
        if machine.pc(state, t).endswith(_ASLEEP):
            return "asleep"
        return None if machine.fire(state, t) else "blocked"

    # -- lanes -------------------------------------------------------------------
    end_y = row_y(nrows)
    for t, name in enumerate(names):
        cx = centre(t)
        add(f'<g class="lane" data-thread="{_x(name)}">')
        add(f'<text x="{cx:.1f}" y="{hy}" text-anchor="middle" font-weight="bold">'
            f'{_x(_cut(name, lane_w[t] - 8))}<title>{_x(name)}</title></text>')
        # Lifeline, up to the row where the thread finishes.
        done_row = next((k for k in range(len(steps)) if isinstance(states[k + 1], tuple)
                         and machine.pc(states[k + 1], t) == DONE), None)
        line_end = row_y(done_row) + ROW / 2 + BOX_H / 2 if done_row is not None else end_y
        add(f'<line x1="{cx:.1f}" y1="{top:.1f}" x2="{cx:.1f}" y2="{line_end:.1f}" stroke="#bdbdbd" '
            f'stroke-width="1"/>')
        if done_row is not None:
            add(f'<rect class="done" x="{cx - 14:.1f}" y="{line_end:.1f}" width="28" height="4" fill="#616161">'
                f"<title>{_x(name)} is done</title></rect>")
        # Mutex ownership bars: held from the middle of the step that takes it
        # to the middle of the step that gives it back.
        for mi, mutex in enumerate(mutexes):
            idx = machine.mutex_index[mutex]
            colour = _MUTEX_COLOURS[mi % len(_MUTEX_COLOURS)]
            bx = lane_x[t] + 4 + 4 * mi
            held = [isinstance(states[k + 1], tuple) and states[k + 1][idx] == t for k in range(len(steps))]
            k = 0
            while k < len(held):
                if not held[k]:
                    k += 1
                    continue
                j = k
                while j + 1 < len(held) and held[j + 1]:
                    j += 1
                y1 = row_y(k) + ROW / 2
                y2 = row_y(j + 1) + ROW / 2 if j + 1 < nrows else row_y(nrows)
                add(f'<rect class="holds" x="{bx - 1.5:.1f}" y="{y1:.1f}" width="3" height="{y2 - y1:.1f}" '
                    f'fill="{colour}"><title>{_x(name)} holds {_x(mutex)}</title></rect>')
                k = j + 1
        # Asleep and blocked spans: rows during which the thread, before the
        # row's step, sleeps on a condvar (hatched) or cannot take its next
        # step for another reason -- a mutex, a semaphore, a guard (grey).
        k = 0
        while k < len(rows_state):
            what = _row_class(rows_state[k], t)
            if what is None:
                k += 1
                continue
            j = k
            while j + 1 < len(rows_state) and _row_class(rows_state[j + 1], t) == what:
                j += 1
            y1 = row_y(k) - (ROW - BOX_H) / 2 if k > 0 else row_y(k)
            y2 = row_y(j) + ROW / 2
            if j == len(rows_state) - 1:
                y2 = row_y(j) + ROW
            reason = blocked_reason(machine, rows_state[k], t)
            if what == "asleep":
                add(f'<rect class="asleep" x="{cx - 9:.1f}" y="{y1:.1f}" width="18" height="{y2 - y1:.1f}" '
                    f'fill="url(#asleep)" stroke="#9e9e9e" stroke-width="0.5">'
                    f"<title>{_x(name)}: {_x(reason)}</title></rect>")
            else:
                add(f'<rect class="blocked" x="{cx - 5:.1f}" y="{y1:.1f}" width="10" height="{y2 - y1:.1f}" '
                    f'fill="#e0e0e0" stroke="#bdbdbd" stroke-width="0.5">'
                    f"<title>{_x(name)} blocked: {_x(reason)}</title></rect>")
            k = j + 1
        add("</g>")

    # -- steps -------------------------------------------------------------------
    for k, (t, _b) in enumerate(choices):
        y = row_y(k)
        cy = y + ROW / 2
        add(f'<text x="{MARGIN + NUM_W - 8}" y="{cy + 4:.1f}" text-anchor="end" fill="#757575">{k + 1}</text>')
        bad = isinstance(states[k + 1], StepViolation)
        marks_state = (state_row and k == len(steps) - 1 and violation is not None
                       and violation.kind not in _STUCK_KINDS and isinstance(final_state, tuple)
                       and not machine.all_done(final_state))
        fill = "#ffebee" if bad or marks_state else ("#fffde7" if kinds[k].startswith("notify") else "#e3f2fd")
        stroke = _RED if bad or marks_state else "#607d8b"
        dash = ' stroke-dasharray="4 2"' if kinds[k] == "spurious" else ""
        bx = lane_x[t] + box_inset
        bw = lane_w[t] - box_inset - 6
        cls = "step violation" if bad else "step"
        add(f'<g class="{cls}" data-step="{k + 1}" data-thread="{_x(names[t])}">')
        add(f'<rect x="{bx:.1f}" y="{y + (ROW - BOX_H) / 2:.1f}" width="{bw:.1f}" height="{BOX_H}" rx="4" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="{2 if bad or marks_state else 1}"{dash}/>')
        add(f'<text x="{bx + 6:.1f}" y="{cy + 4:.1f}">{_x(_cut(labels[k], bw - 12))}'
            f"<title>{_x(names[t])}: {_x(labels[k])}</title></text>")
        add("</g>")
        # Notify arrows.
        if kinds[k] in ("notify_one", "notify_all"):
            targets = woken_by[k]
            for w in targets:
                x1 = bx + bw if centre(w) > centre(t) else bx
                x2 = centre(w) - 10 if centre(w) > centre(t) else centre(w) + 10
                add(f'<line class="notify" x1="{x1:.1f}" y1="{cy:.1f}" x2="{x2:.1f}" y2="{cy:.1f}" stroke="#555555" '
                    f'stroke-width="1.2" marker-end="url(#arrow)"><title>{_x(names[t])} wakes {_x(names[w])}'
                    f"</title></line>")
            if not targets:
                x1 = bx + bw
                add(f'<line class="notify lost" x1="{x1:.1f}" y1="{cy:.1f}" x2="{x1 + 10:.1f}" y2="{cy:.1f}" '
                    f'stroke="#9e9e9e" stroke-width="1.2" stroke-dasharray="2 2" marker-end="url(#arrow)">'
                    f"<title>nobody is waiting: this notify wakes no one</title></line>")
        for w in unblocked[k]:
            x1 = bx + bw if centre(w) > centre(t) else bx
            x2 = centre(w) - 6 if centre(w) > centre(t) else centre(w) + 6
            add(f'<line class="unblock" x1="{x1:.1f}" y1="{cy:.1f}" x2="{x2:.1f}" y2="{cy:.1f}" stroke="#555555" '
                f'stroke-width="1" stroke-dasharray="5 3" marker-end="url(#arrow)"><title>{_x(names[t])} lets '
                f"{_x(names[w])} move</title></line>")
        colour = _RED if bad else "#333333"
        text = ("<== " + change_text[k]) if bad else change_text[k]
        add(f'<text x="{changes_x:.1f}" y="{cy + 4:.1f}" fill="{colour}">{_x(_cut(text, changes_w))}'
            + (f"<title>{_x(text)}</title>" if len(text) * CHAR > changes_w else "") + "</text>")

    if cycle_from is not None:
        y1, y2 = row_y(cycle_from) + 4, row_y(len(steps)) - 4
        bx = changes_x - 8
        add(f'<path class="cycle" d="M{bx - 6:.1f},{y2:.1f} H{bx:.1f} V{y1:.1f} H{bx - 8:.1f}" fill="none" '
            f'stroke="{_RED}" stroke-width="1.5" marker-end="url(#arrow-red)"><title>steps {cycle_from + 1} to '
            f"{len(steps)} can repeat forever</title></path>")

    # -- the final state ---------------------------------------------------------
    if state_row:
        k = len(steps)
        y = row_y(k)
        cy = y + ROW / 2
        add(f'<g class="final violation" data-kind="{_x(violation.kind)}">')
        add(f'<text x="{MARGIN + NUM_W - 8}" y="{cy + 4:.1f}" text-anchor="end" fill="{_RED}">end</text>')
        for t, reason in reasons.items():
            text = _cut(reason, lane_w[t] - box_inset - 6)
            add(f'<rect x="{lane_x[t] + box_inset - 3:.1f}" y="{cy - 8:.1f}" width="{len(text) * CHAR + 6:.1f}" '
                f'height="16" rx="3" fill="#ffffff" fill-opacity="0.85"/>')
            add(f'<text x="{lane_x[t] + box_inset:.1f}" y="{cy + 4:.1f}" fill="{_RED}">'
                f"{_x(text)}<title>{_x(names[t])}: {_x(reason)}</title></text>")
        add(f'<text x="{changes_x:.1f}" y="{cy + 4:.1f}" fill="{_RED}" font-weight="bold">'
            f"{_x(_cut(final_text, changes_w))}</text>")
        add("</g>")

    # -- verdict line and legend ---------------------------------------------------
    fy = row_y(max(nrows, 1)) + 20
    if violation is not None or step_violation is not None:
        kind = violation.kind if violation is not None else step_violation.kind
        msg = violation.message if violation is not None else step_violation.message
        add(f'<text class="verdict" x="{MARGIN}" y="{fy:.1f}" fill="{_RED}" font-weight="bold">'
            f"{_x(kind)}: {_x(msg)}</text>")
    else:
        what = "no violation at the end of this trace" if steps else "verdict: ok (no counterexample to draw)"
        add(f'<text class="verdict" x="{MARGIN}" y="{fy:.1f}" fill="#2e7d32" font-weight="bold">{_x(what)}</text>')
    ly = fy + foot_h - 6
    lx = MARGIN
    if nrows:
        add(f'<rect x="{lx}" y="{ly - 9}" width="12" height="12" fill="url(#asleep)" stroke="#9e9e9e"/>')
        add(f'<text x="{lx + 16}" y="{ly + 1}" fill="#555555">asleep</text>')
        lx += 16 + 7 * CHAR + 12
        add(f'<rect x="{lx:.1f}" y="{ly - 9}" width="8" height="12" fill="#e0e0e0" stroke="#bdbdbd"/>')
        add(f'<text x="{lx + 12:.1f}" y="{ly + 1}" fill="#555555">blocked</text>')
        lx += 12 + 8 * CHAR + 12
        add(f'<line x1="{lx:.1f}" y1="{ly - 3}" x2="{lx + 18:.1f}" y2="{ly - 3}" stroke="#555555" '
            f'marker-end="url(#arrow)"/>')
        add(f'<text x="{lx + 22:.1f}" y="{ly + 1}" fill="#555555">notify wakes</text>')
        lx += 22 + 13 * CHAR + 12
        add(f'<line x1="{lx:.1f}" y1="{ly - 3}" x2="{lx + 18:.1f}" y2="{ly - 3}" stroke="#555555" '
            f'stroke-dasharray="5 3" marker-end="url(#arrow)"/>')
        add(f'<text x="{lx + 22:.1f}" y="{ly + 1}" fill="#555555">lets it move</text>')
        lx += 22 + 12 * CHAR + 12
    for mi, mutex in enumerate(mutexes):
        colour = _MUTEX_COLOURS[mi % len(_MUTEX_COLOURS)]
        add(f'<rect x="{lx:.1f}" y="{ly - 9}" width="4" height="12" fill="{colour}"/>')
        text = f"holds {mutex}"
        add(f'<text x="{lx + 8:.1f}" y="{ly + 1}" fill="#555555">{_x(text)}</text>')
        lx += 8 + len(text) * CHAR + 12
    add("</svg>")
    return "\n".join(out) + "\n"


def write_svg(machine: Machine, result: CheckResult, path: str | Path) -> None:
    """Draw ``result``'s counterexample (or an empty, ok diagram) into ``path``."""
    Path(path).write_text(svg_for(machine, result.trace, result.violation), encoding="utf-8")

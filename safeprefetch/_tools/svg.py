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
the model, so it cannot disagree with what the model does: :mod:`.swimlane`
replays it and lays it out, and this module draws that plan, one step at a
time (the head, the rows, each lane, each step and its arrows, the cycle,
the final state, the verdict and the legend). The output is plain SVG 1.1
built from strings (no dependency), deterministic for a given trace, and
every piece of model text is XML-escaped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence
from xml.sax.saxutils import escape

from .plaintext import blocked_reason, config_text
from .swimlane import BOX_H, CHAR, FONT, MARGIN, NUM_W, ROW, STUCK_KINDS, Layout, Run, layout_of, run_of
from .._check.result import CheckResult, Trace, Violation
from .._dsl.model import DONE, Machine, StepViolation
from .._dsl.program import ASLEEP

__all__ = ["blocked_reason", "svg_for", "write_svg"]

_MUTEX_COLOURS = ("#3b7dd8", "#d9822b", "#2e9e6a", "#8e5bd6", "#c2417a", "#6b8e23")
_RED = "#c62828"


def _x(text: Any) -> str:
    """Escape for both element text and double-quoted attributes."""
    return escape(str(text), {'"': "&quot;"})


def _cut(text: str, width: float) -> str:
    n = max(4, int(width / CHAR))
    return text if len(text) <= n else text[: n - 1] + "\u2026"


_DEFS = ("<defs>"
         '<pattern id="asleep" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
         '<rect width="6" height="6" fill="#eeeeee"/><line x1="0" y1="0" x2="0" y2="6" stroke="#9e9e9e" '
         'stroke-width="2"/></pattern>'
         '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
         'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555555"/></marker>'
         '<marker id="arrow-red" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
         f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{_RED}"/></marker>'
         "</defs>")


def _draw_head(run: Run, lay: Layout) -> list[str]:
    """The document, its title, the background, the model's name and config, the column titles."""
    machine, width, height, hy = run.machine, lay.width, lay.height, lay.header_y
    verdict = run.shown.kind if run.shown is not None else "ok"
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="ui-monospace, Menlo, Consolas, monospace" '
        f'font-size="{FONT}">',
        f"<title>{_x(machine.name)}: {_x(verdict)}</title>",
        _DEFS,
        f'<rect x="0" y="0" width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>',
        f'<text x="{MARGIN}" y="{MARGIN + 12}" font-weight="bold">{_x(machine.name)}</text>',
        f'<text x="{MARGIN}" y="{MARGIN + 28}" fill="#555555">{_x(config_text(machine.config))}</text>',
        f'<text x="{MARGIN + NUM_W - 8}" y="{hy}" text-anchor="end" font-weight="bold">#</text>',
        f'<text x="{lay.changes_x:.1f}" y="{hy}" font-weight="bold">changes</text>',
    ]


def _draw_row_backgrounds(run: Run, lay: Layout) -> list[str]:
    """Zebra rows behind everything, and the final-state row in red."""
    out = [f'<rect x="{MARGIN}" y="{lay.row_y(k):.1f}" width="{lay.width - 2 * MARGIN:.0f}" height="{ROW}" '
           f'fill="#f7f7f7"/>' for k in range(lay.nrows) if k % 2 == 1]
    if run.state_row:
        out.append(f'<rect x="{MARGIN}" y="{lay.row_y(len(run.steps)):.1f}" width="{lay.width - 2 * MARGIN:.0f}" '
                   f'height="{ROW}" fill="#ffebee" stroke="{_RED}" stroke-width="1"/>')
    return out


def _spans(values: Sequence[Any]) -> list[tuple[int, int, Any]]:
    """``(first, last, value)`` of each run of equal, truthy values."""
    out = []
    k = 0
    while k < len(values):
        if not values[k]:
            k += 1
            continue
        j = k
        while j + 1 < len(values) and values[j + 1] == values[k]:
            j += 1
        out.append((k, j, values[k]))
        k = j + 1
    return out


def _wait_kind(machine: Machine, state: Any, t: int) -> str | None:
    """Whether thread ``t`` is "asleep" on a condvar in ``state``, "blocked" (cannot take its next step), or neither."""
    if not isinstance(state, tuple) or machine.pc(state, t) == DONE:
        return None
    if machine.pc(state, t).endswith(ASLEEP):
        return "asleep"
    return None if machine.fire(state, t) else "blocked"


def _draw_lifeline(run: Run, lay: Layout, t: int) -> list[str]:
    """The thread's lifeline, up to the row where it finishes, and the bar that ends a done thread."""
    machine, states, name, cx = run.machine, run.states, run.names[t], lay.centre(t)
    done_row = next((k for k in range(len(run.steps)) if isinstance(states[k + 1], tuple)
                     and machine.pc(states[k + 1], t) == DONE), None)
    line_end = lay.row_y(done_row) + ROW / 2 + BOX_H / 2 if done_row is not None else lay.row_y(lay.nrows)
    out = [f'<line x1="{cx:.1f}" y1="{lay.top:.1f}" x2="{cx:.1f}" y2="{line_end:.1f}" stroke="#bdbdbd" '
           f'stroke-width="1"/>']
    if done_row is not None:
        out.append(f'<rect class="done" x="{cx - 14:.1f}" y="{line_end:.1f}" width="28" height="4" fill="#616161">'
                   f"<title>{_x(name)} is done</title></rect>")
    return out


def _draw_mutex_bars(run: Run, lay: Layout, t: int) -> list[str]:
    """Mutex ownership bars: held from the middle of the step that takes it to the middle of the step that
    gives it back."""
    out = []
    states, name, nrows = run.states, run.names[t], lay.nrows
    for mi, mutex in enumerate(lay.mutexes):
        idx = run.machine.mutex_index[mutex]
        colour = _MUTEX_COLOURS[mi % len(_MUTEX_COLOURS)]
        bx = lay.lane_x[t] + 4 + 4 * mi
        held = [isinstance(states[k + 1], tuple) and states[k + 1][idx] == t for k in range(len(run.steps))]
        for k, j, _ in _spans(held):
            y1 = lay.row_y(k) + ROW / 2
            y2 = lay.row_y(j + 1) + ROW / 2 if j + 1 < nrows else lay.row_y(nrows)
            out.append(f'<rect class="holds" x="{bx - 1.5:.1f}" y="{y1:.1f}" width="3" height="{y2 - y1:.1f}" '
                       f'fill="{colour}"><title>{_x(name)} holds {_x(mutex)}</title></rect>')
    return out


def _draw_wait_spans(run: Run, lay: Layout, t: int) -> list[str]:
    """Asleep and blocked spans: rows during which the thread, before the row's step, sleeps on a condvar
    (hatched) or cannot take its next step for another reason -- a mutex, a semaphore, a guard (grey)."""
    out = []
    machine, name, cx = run.machine, run.names[t], lay.centre(t)
    rows_state = run.rows_state
    for k, j, what in _spans([_wait_kind(machine, state, t) for state in rows_state]):
        y1 = lay.row_y(k) - (ROW - BOX_H) / 2 if k > 0 else lay.row_y(k)
        y2 = lay.row_y(j) + ROW / 2
        if j == len(rows_state) - 1:
            y2 = lay.row_y(j) + ROW
        reason = blocked_reason(machine, rows_state[k], t)
        if what == "asleep":
            out.append(f'<rect class="asleep" x="{cx - 9:.1f}" y="{y1:.1f}" width="18" height="{y2 - y1:.1f}" '
                       f'fill="url(#asleep)" stroke="#9e9e9e" stroke-width="0.5">'
                       f"<title>{_x(name)}: {_x(reason)}</title></rect>")
        else:
            out.append(f'<rect class="blocked" x="{cx - 5:.1f}" y="{y1:.1f}" width="10" height="{y2 - y1:.1f}" '
                       f'fill="#e0e0e0" stroke="#bdbdbd" stroke-width="0.5">'
                       f"<title>{_x(name)} blocked: {_x(reason)}</title></rect>")
    return out


def _draw_lane(run: Run, lay: Layout, t: int) -> list[str]:
    """Thread ``t``'s lane: its name, lifeline, mutex bars and asleep/blocked spans."""
    name = run.names[t]
    return [f'<g class="lane" data-thread="{_x(name)}">',
            f'<text x="{lay.centre(t):.1f}" y="{lay.header_y}" text-anchor="middle" font-weight="bold">'
            f'{_x(_cut(name, lay.lane_w[t] - 8))}<title>{_x(name)}</title></text>',
            *_draw_lifeline(run, lay, t), *_draw_mutex_bars(run, lay, t), *_draw_wait_spans(run, lay, t),
            "</g>"]


def _arrow_ends(lay: Layout, t: int, w: int, gap: float) -> tuple[float, float]:
    """From the side of ``t``'s step box facing lane ``w`` to ``gap`` short of ``w``'s lifeline."""
    bx, bw = lay.box_x(t), lay.box_w(t)
    right = lay.centre(w) > lay.centre(t)
    return (bx + bw if right else bx), (lay.centre(w) - gap if right else lay.centre(w) + gap)


def _draw_arrows(run: Run, lay: Layout, k: int, t: int, cy: float) -> list[str]:
    """Row ``k``'s arrows: a notify to every thread it wakes (or into nothing), a step letting a thread move."""
    out = []
    names = run.names
    if run.kinds[k] in ("notify_one", "notify_all"):
        targets = run.woken_by[k]
        for w in targets:
            x1, x2 = _arrow_ends(lay, t, w, 10)
            out.append(f'<line class="notify" x1="{x1:.1f}" y1="{cy:.1f}" x2="{x2:.1f}" y2="{cy:.1f}" '
                       f'stroke="#555555" stroke-width="1.2" marker-end="url(#arrow)"><title>{_x(names[t])} wakes '
                       f"{_x(names[w])}</title></line>")
        if not targets:
            x1 = lay.box_x(t) + lay.box_w(t)
            out.append(f'<line class="notify lost" x1="{x1:.1f}" y1="{cy:.1f}" x2="{x1 + 10:.1f}" y2="{cy:.1f}" '
                       f'stroke="#9e9e9e" stroke-width="1.2" stroke-dasharray="2 2" marker-end="url(#arrow)">'
                       f"<title>nobody is waiting: this notify wakes no one</title></line>")
    for w in run.unblocked[k]:
        x1, x2 = _arrow_ends(lay, t, w, 6)
        out.append(f'<line class="unblock" x1="{x1:.1f}" y1="{cy:.1f}" x2="{x2:.1f}" y2="{cy:.1f}" '
                   f'stroke="#555555" stroke-width="1" stroke-dasharray="5 3" marker-end="url(#arrow)">'
                   f"<title>{_x(names[t])} lets {_x(names[w])} move</title></line>")
    return out


def _draw_step(run: Run, lay: Layout, k: int) -> list[str]:
    """Row ``k``: its number, the step's box in its thread's lane, its arrows and its changes."""
    t = run.choices[k][0]
    y = lay.row_y(k)
    cy = y + ROW / 2
    violation, final_state = run.violation, run.final_state
    bad = isinstance(run.states[k + 1], StepViolation)
    # A violation of the state this last step reaches (an invariant, say) marks the step.
    marks_state = (run.state_row and k == len(run.steps) - 1 and violation is not None
                   and violation.kind not in STUCK_KINDS and isinstance(final_state, tuple)
                   and not run.machine.all_done(final_state))
    kind = run.kinds[k]
    fill = "#ffebee" if bad or marks_state else ("#fffde7" if kind.startswith("notify") else "#e3f2fd")
    stroke = _RED if bad or marks_state else "#607d8b"
    dash = ' stroke-dasharray="4 2"' if kind == "spurious" else ""
    bx, bw = lay.box_x(t), lay.box_w(t)
    cls = "step violation" if bad else "step"
    label, name = run.labels[k], run.names[t]
    colour = _RED if bad else "#333333"
    text = ("<== " + run.change_text[k]) if bad else run.change_text[k]
    tip = f"<title>{_x(text)}</title>" if len(text) * CHAR > lay.changes_w else ""
    return [f'<text x="{MARGIN + NUM_W - 8}" y="{cy + 4:.1f}" text-anchor="end" fill="#757575">{k + 1}</text>',
            f'<g class="{cls}" data-step="{k + 1}" data-thread="{_x(name)}">',
            f'<rect x="{bx:.1f}" y="{y + (ROW - BOX_H) / 2:.1f}" width="{bw:.1f}" height="{BOX_H}" rx="4" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="{2 if bad or marks_state else 1}"{dash}/>',
            f'<text x="{bx + 6:.1f}" y="{cy + 4:.1f}">{_x(_cut(label, bw - 12))}'
            f"<title>{_x(name)}: {_x(label)}</title></text>",
            "</g>",
            *_draw_arrows(run, lay, k, t, cy),
            f'<text x="{lay.changes_x:.1f}" y="{cy + 4:.1f}" fill="{colour}">{_x(_cut(text, lay.changes_w))}'
            + tip + "</text>"]


def _draw_cycle(run: Run, lay: Layout) -> list[str]:
    """A starvation lasso: a red bracket from the last step back to the step the cycle starts at."""
    if lay.cycle_from is None:
        return []
    n = len(run.steps)
    y1, y2 = lay.row_y(lay.cycle_from) + 4, lay.row_y(n) - 4
    bx = lay.changes_x - 8
    return [f'<path class="cycle" d="M{bx - 6:.1f},{y2:.1f} H{bx:.1f} V{y1:.1f} H{bx - 8:.1f}" fill="none" '
            f'stroke="{_RED}" stroke-width="1.5" marker-end="url(#arrow-red)"><title>steps {lay.cycle_from + 1} '
            f"to {n} can repeat forever</title></path>"]


def _draw_final_row(run: Run, lay: Layout) -> list[str]:
    """The final state's row, for a violation of a state: where each stuck thread is stuck."""
    if not run.state_row:
        return []
    cy = lay.row_y(len(run.steps)) + ROW / 2
    out = [f'<g class="final violation" data-kind="{_x(run.violation.kind)}">',
           f'<text x="{MARGIN + NUM_W - 8}" y="{cy + 4:.1f}" text-anchor="end" fill="{_RED}">end</text>']
    for t, reason in lay.reasons.items():
        text = _cut(reason, lay.box_w(t))
        out.append(f'<rect x="{lay.box_x(t) - 3:.1f}" y="{cy - 8:.1f}" '
                   f'width="{len(text) * CHAR + 6:.1f}" height="16" rx="3" fill="#ffffff" fill-opacity="0.85"/>')
        out.append(f'<text x="{lay.box_x(t):.1f}" y="{cy + 4:.1f}" fill="{_RED}">'
                   f"{_x(text)}<title>{_x(run.names[t])}: {_x(reason)}</title></text>")
    out.append(f'<text x="{lay.changes_x:.1f}" y="{cy + 4:.1f}" fill="{_RED}" font-weight="bold">'
               f"{_x(_cut(lay.final_text, lay.changes_w))}</text>")
    out.append("</g>")
    return out


def _draw_verdict(run: Run, fy: float) -> str:
    """The verdict line under the rows: the violation in red, or green when there is none."""
    v = run.shown
    if v is not None:
        return (f'<text class="verdict" x="{MARGIN}" y="{fy:.1f}" fill="{_RED}" font-weight="bold">'
                f"{_x(v.kind)}: {_x(v.message)}</text>")
    what = "no violation at the end of this trace" if run.steps else "verdict: ok (no counterexample to draw)"
    return f'<text class="verdict" x="{MARGIN}" y="{fy:.1f}" fill="#2e7d32" font-weight="bold">{_x(what)}</text>'


def _draw_legend(lay: Layout, ly: float) -> list[str]:
    """The legend: the marks for asleep, blocked, notify and unblock (when there are rows), and one colour per
    mutex."""
    out = []
    lx = MARGIN
    if lay.nrows:
        out.append(f'<rect x="{lx}" y="{ly - 9}" width="12" height="12" fill="url(#asleep)" stroke="#9e9e9e"/>')
        out.append(f'<text x="{lx + 16}" y="{ly + 1}" fill="#555555">asleep</text>')
        lx += 16 + 7 * CHAR + 12
        out.append(f'<rect x="{lx:.1f}" y="{ly - 9}" width="8" height="12" fill="#e0e0e0" stroke="#bdbdbd"/>')
        out.append(f'<text x="{lx + 12:.1f}" y="{ly + 1}" fill="#555555">blocked</text>')
        lx += 12 + 8 * CHAR + 12
        out.append(f'<line x1="{lx:.1f}" y1="{ly - 3}" x2="{lx + 18:.1f}" y2="{ly - 3}" stroke="#555555" '
                   f'marker-end="url(#arrow)"/>')
        out.append(f'<text x="{lx + 22:.1f}" y="{ly + 1}" fill="#555555">notify wakes</text>')
        lx += 22 + 13 * CHAR + 12
        out.append(f'<line x1="{lx:.1f}" y1="{ly - 3}" x2="{lx + 18:.1f}" y2="{ly - 3}" stroke="#555555" '
                   f'stroke-dasharray="5 3" marker-end="url(#arrow)"/>')
        out.append(f'<text x="{lx + 22:.1f}" y="{ly + 1}" fill="#555555">lets it move</text>')
        lx += 22 + 12 * CHAR + 12
    for mi, mutex in enumerate(lay.mutexes):
        colour = _MUTEX_COLOURS[mi % len(_MUTEX_COLOURS)]
        out.append(f'<rect x="{lx:.1f}" y="{ly - 9}" width="4" height="12" fill="{colour}"/>')
        text = f"holds {mutex}"
        out.append(f'<text x="{lx + 8:.1f}" y="{ly + 1}" fill="#555555">{_x(text)}</text>')
        lx += 8 + len(text) * CHAR + 12
    return out


def svg_for(machine: Machine, trace: Trace, violation: Violation | None = None) -> str:
    """The swimlane diagram of ``trace`` on ``machine`` as an SVG document (a string)."""
    run = run_of(machine, trace, violation)
    lay = layout_of(run)
    out = [*_draw_head(run, lay), *_draw_row_backgrounds(run, lay)]
    for t in range(len(run.names)):
        out += _draw_lane(run, lay, t)
    for k in range(len(run.choices)):
        out += _draw_step(run, lay, k)
    out += _draw_cycle(run, lay) + _draw_final_row(run, lay)
    fy = lay.row_y(max(lay.nrows, 1)) + 20
    out.append(_draw_verdict(run, fy))
    out += _draw_legend(lay, fy + lay.foot_h - 6)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_svg(machine: Machine, result: CheckResult, path: str | Path) -> None:
    """Draw ``result``'s counterexample (or an empty, ok diagram) into ``path``."""
    Path(path).write_text(svg_for(machine, result.trace, result.violation), encoding="utf-8")

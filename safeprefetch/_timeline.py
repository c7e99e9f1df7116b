"""Drawing a prefetcher's timeline: does prefetching overlap?

Reading the picture
-------------------
Time runs left to right, in milliseconds since the prefetcher was built.
One lane per thread, workers first, then the consumer:

* a worker's lane shows its **fetch** spans (the source running, outside the
  kernel lock) and its **wait** spans (blocked on a full buffer: every slot
  the capacity allows is in use);
* the consumer's lane shows **wait** (asking for a batch that is not ready),
  **copy** (copying the batch out of its slot) and **compute** (the caller's
  own work between two batches).

Below the lanes, **buffer occupancy** (ready batches when the consumer asked,
and after each fetch) is a step line, with the capacity drawn as a dashed
line over it (it moves when autotune resizes).

Prefetching overlaps when the workers' fetch spans sit under the consumer's
compute spans and the consumer's wait spans are slivers. A consumer lane
full of wait means the source is the bottleneck (add workers); workers full
of wait mean the consumer is, and prefetching already does all it can.

The SVG is built from strings (no dependency), deterministic for given data,
and every label is XML-escaped.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence
from xml.sax.saxutils import escape

__all__ = ["timeline_svg", "write_timeline"]

COLOURS = {"fetch": "#3b7dd8", "wait": "#d9534f", "copy": "#d9822b", "compute": "#2e9e6a"}
LEGEND = (("fetch", "fetch (source)"), ("wait", "wait"), ("copy", "copy out"), ("compute", "compute"))

# Layout, in SVG user units (pixels at 100 %).
WIDTH = 1100      # whole picture
LEFT = 110        # lane labels
RIGHT = 20
TOP = 58          # title and legend
LANE = 26         # lane pitch
BAR = 18          # span height
OCC_H = 90        # occupancy chart
AXIS = 34         # time axis under the chart
FONT = 12


def _ticks(span_ms: float) -> list[float]:
    """Round tick positions (ms) for an axis of ``span_ms``: 1, 2 or 5 times a power of ten apart."""
    if span_ms <= 0:
        return [0.0]
    raw = span_ms / 8
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [round(i * step, 9) for i in range(int(span_ms // step) + 1)]


def timeline_svg(data: dict[str, Any], title: str = "prefetcher timeline", subtitle: str = "") -> str:
    """The SVG text for ``data`` as returned by ``Prefetcher.timeline()``."""
    spans: Sequence[tuple[str, str, float, float]] = data.get("spans", [])
    occ: Sequence[tuple[float, int]] = sorted(data.get("occupancy", []))
    workers = int(data.get("workers", 0))
    lanes = [f"worker{w}" for w in range(workers)]
    lanes += sorted({th for th, *_ in spans if th not in lanes and th != "consumer"})
    lanes.append("consumer")
    end = max([b for *_x, b in spans] + [t for t, _n in occ] + [1e-6])
    start = 0.0
    plot_w = WIDTH - LEFT - RIGHT
    scale = plot_w / (end - start)

    def x(t: float) -> float:
        return LEFT + (t - start) * scale

    caps = [(0.0, int(data.get("initial_capacity", 0)))] + [(t, int(c)) for t, c in data.get("capacity", [])]
    top_cap = max([c for _t, c in caps] + [n for _t, n in occ] + [1])
    lanes_h = LANE * len(lanes)
    occ_top = TOP + lanes_h + 16
    height = occ_top + OCC_H + AXIS + 8
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="monospace" font-size="{FONT}">',
           f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>']
    if subtitle:
        out.append(f'<text x="{LEFT}" y="36">{escape(subtitle)}</text>')
    lx = LEFT
    for kind, label in LEGEND:
        out.append(f'<rect x="{lx}" y="44" width="12" height="10" fill="{COLOURS[kind]}"/>')
        out.append(f'<text x="{lx + 16}" y="53">{escape(label)}</text>')
        lx += 24 + int(7.3 * len(label))
    out.append(f'<line x1="{lx}" y1="49" x2="{lx + 20}" y2="49" stroke="#555" stroke-dasharray="4,3"/>'
               f'<text x="{lx + 24}" y="53">capacity</text>')

    # Lanes.
    row = {name: TOP + i * LANE for i, name in enumerate(lanes)}
    for name, y in row.items():
        out.append(f'<rect x="{LEFT}" y="{y}" width="{plot_w}" height="{LANE}" fill="{"#f6f6f6" if (y // LANE) % 2 else "#ffffff"}"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y + LANE / 2 + 4:.1f}" text-anchor="end">{escape(name)}</text>')
    for th, kind, a, b in spans:
        if th not in row:
            continue
        w = max((b - a) * scale, 0.6)  # keep very short spans visible
        colour = COLOURS.get(kind, "#888")
        tip = f"{th}: {kind} {1000 * a:.3f}-{1000 * b:.3f} ms ({1000 * (b - a):.3f} ms)"
        edge = ' stroke="white" stroke-width="0.6"' if w > 3 else ""  # adjacent spans stay distinct
        out.append(f'<rect x="{x(a):.2f}" y="{row[th] + (LANE - BAR) / 2:.1f}" width="{w:.2f}" height="{BAR}" '
                   f'fill="{colour}"{edge}><title>{escape(tip)}</title></rect>')

    # Occupancy chart.
    def oy(n: float) -> float:
        return occ_top + OCC_H - n * (OCC_H / top_cap)

    out.append(f'<rect x="{LEFT}" y="{occ_top}" width="{plot_w}" height="{OCC_H}" fill="#fafafa" stroke="#ccc"/>')
    out.append(f'<text x="{LEFT - 8}" y="{occ_top + 14}" text-anchor="end">ready</text>')
    out.append(f'<text x="{LEFT - 8}" y="{occ_top + 28}" text-anchor="end">batches</text>')
    for n in range(top_cap + 1):
        out.append(f'<text x="{LEFT + plot_w + 4}" y="{oy(n) + 4:.1f}" font-size="10">{n}</text>')
    if occ:
        pts = [f"{x(occ[0][0]):.2f},{oy(0):.2f}"]
        prev = 0
        for t, n in occ:
            pts.append(f"{x(t):.2f},{oy(prev):.2f}")
            pts.append(f"{x(t):.2f},{oy(n):.2f}")
            prev = n
        pts.append(f"{x(end):.2f},{oy(prev):.2f}")
        out.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="#3b7dd8" stroke-width="1.5"/>')
    if caps[0][1]:
        pts = []
        prev_c = caps[0][1]
        for t, c in caps:
            pts.append(f"{x(t):.2f},{oy(prev_c):.2f}")
            pts.append(f"{x(t):.2f},{oy(c):.2f}")
            prev_c = c
        pts.append(f"{x(end):.2f},{oy(prev_c):.2f}")
        out.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="#555" stroke-dasharray="4,3"/>')

    # Time axis.
    axis_y = occ_top + OCC_H
    span_ms = 1000 * (end - start)
    for tick in _ticks(span_ms):
        tx = x(tick / 1000)
        out.append(f'<line x1="{tx:.2f}" y1="{TOP}" x2="{tx:.2f}" y2="{axis_y + 4}" stroke="#ddd"/>')
        out.append(f'<text x="{tx:.2f}" y="{axis_y + 18}" text-anchor="middle" font-size="10">{tick:g}</text>')
    out.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{axis_y + 31}" text-anchor="middle">time (ms)</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_timeline(path: str | Path, data: dict[str, Any], title: str = "prefetcher timeline",
                   subtitle: str = "") -> Path:
    """Write the timeline picture to ``path`` (``.svg``)."""
    p = Path(path)
    if p.suffix.lower() != ".svg":
        raise ValueError(f"{p.name}: the timeline is drawn as SVG; give a .svg file name")
    p.write_text(timeline_svg(data, title, subtitle), encoding="utf-8")
    return p

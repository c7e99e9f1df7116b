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

Two formats, same picture (lanes, order, colours, legend): ``.svg`` is built
from strings (no dependency), deterministic for given data, and every label
is XML-escaped; ``.png`` is drawn with matplotlib (the optional ``plot``
extra, imported only when a PNG is asked for) on its Agg canvas, without
pyplot, so no global plotting state is touched.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple, Sequence
from xml.sax.saxutils import escape

__all__ = ["PlotUnavailable", "require_matplotlib", "timeline_png", "timeline_svg", "write_timeline"]

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


class _Prepared(NamedTuple):
    lanes: list[str]                                # top to bottom
    spans: Sequence[tuple[str, str, float, float]]  # (thread, kind, start s, end s)
    occ: list[tuple[float, int]]                    # (t s, ready batches), by time
    caps: list[tuple[float, int]]                   # (t s, capacity), from t = 0
    end: float                                      # s, right edge of the time axis
    top_cap: int                                    # top of the occupancy scale


def _prepare(data: dict[str, Any]) -> _Prepared:
    """What both formats draw, from ``Prefetcher.timeline()`` data."""
    spans: Sequence[tuple[str, str, float, float]] = data.get("spans", [])
    occ = sorted((float(t), int(n)) for t, n in data.get("occupancy", []))
    workers = int(data.get("workers", 0))
    lanes = [f"worker{w}" for w in range(workers)]
    lanes += sorted({th for th, *_ in spans if th not in lanes and th != "consumer"})
    lanes.append("consumer")
    end = max([b for *_x, b in spans] + [t for t, _n in occ] + [1e-6])
    caps = [(0.0, int(data.get("initial_capacity", 0)))] + [(t, int(c)) for t, c in data.get("capacity", [])]
    top_cap = max([c for _t, c in caps] + [n for _t, n in occ] + [1])
    return _Prepared(lanes, spans, occ, caps, end, top_cap)


def timeline_svg(data: dict[str, Any], title: str = "prefetcher timeline", subtitle: str = "") -> str:
    """The SVG text for ``data`` as returned by ``Prefetcher.timeline()``."""
    lanes, spans, occ, caps, end, top_cap = _prepare(data)
    start = 0.0
    plot_w = WIDTH - LEFT - RIGHT
    scale = plot_w / (end - start)

    def x(t: float) -> float:
        return LEFT + (t - start) * scale

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


PLOT_HINT = 'pip install "safeprefetch[plot]"'


class PlotUnavailable(ImportError):
    """A PNG timeline was asked for but matplotlib (the ``plot`` extra) cannot be imported."""


def require_matplotlib() -> tuple[Any, Any]:
    """``(Figure, FigureCanvasAgg)``, or :class:`PlotUnavailable` naming the install command."""
    try:
        import matplotlib  # noqa: F401  (first, so a missing package is what the message names)
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise PlotUnavailable(f"a PNG timeline needs matplotlib ({e}): {PLOT_HINT}, "
                              "or give a .svg file name") from e
    return Figure, FigureCanvasAgg


# PNG layout, in inches (the figure is WIDTH pixels wide at DPI / 100 scale).
DPI = 120
IN_LEFT = LEFT / 100
IN_RIGHT = 0.3
IN_TOP = 0.95     # title, subtitle and legend, above the lanes
IN_GAP = 0.12     # between the lanes and the occupancy chart
IN_BOTTOM = 0.5   # time axis label


def timeline_png(path: str | Path, data: dict[str, Any], title: str = "prefetcher timeline",
                 subtitle: str = "") -> Path:
    """Draw ``data`` (as returned by ``Prefetcher.timeline()``) to the PNG file ``path`` with matplotlib."""
    Figure, FigureCanvasAgg = require_matplotlib()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    lanes, spans, occ, caps, end, top_cap = _prepare(data)
    end_ms = 1000 * end
    width = WIDTH / 100
    lanes_h = LANE / 100 * len(lanes)
    occ_h = OCC_H / 100
    height = IN_TOP + lanes_h + IN_GAP + occ_h + IN_BOTTOM
    fig = Figure(figsize=(width, height), dpi=DPI, facecolor="white")
    FigureCanvasAgg(fig)
    plot_w = width - IN_LEFT - IN_RIGHT
    lane_ax = fig.add_axes((IN_LEFT / width, (IN_BOTTOM + occ_h + IN_GAP) / height,
                            plot_w / width, lanes_h / height))
    occ_ax = fig.add_axes((IN_LEFT / width, IN_BOTTOM / height, plot_w / width, occ_h / height),
                          sharex=lane_ax)

    fig.text(IN_LEFT / width, 1 - 0.12 / height, title, fontsize=11, fontweight="bold", va="top")
    if subtitle:
        fig.text(IN_LEFT / width, 1 - 0.36 / height, subtitle, fontsize=9, va="top")
    handles = [Patch(facecolor=COLOURS[kind], label=label) for kind, label in LEGEND]
    handles.append(Line2D([], [], color="#555", linestyle="--", label="capacity"))
    # Above the lanes, outside every axes, so it never covers a span.
    fig.legend(handles=handles, loc="lower left", ncol=len(handles), frameon=False, fontsize=9,
               bbox_to_anchor=(IN_LEFT / width - 0.01, (height - IN_TOP) / height + 0.02 / height),
               handlelength=1.6, columnspacing=1.4, borderaxespad=0)

    _png_lanes(lane_ax, lanes, spans, end_ms / (plot_w * DPI))
    _png_occupancy(occ_ax, occ, caps, end_ms, top_cap)
    for ax in (lane_ax, occ_ax):
        for side in ("top", "right"):
            ax.spines[side].set_color("#ccc")

    p = Path(path)
    fig.savefig(p, format="png", dpi=DPI)
    return p


def _png_lanes(lane_ax: Any, lanes: Sequence[str], spans: Sequence, ms_per_px: float) -> None:
    """One lane per thread, its spans as bars (row 0 at the top, as in the SVG)."""
    row = {name: i for i, name in enumerate(lanes)}
    for name, i in row.items():
        if i % 2:
            lane_ax.axhspan(i - 0.5, i + 0.5, color="#f6f6f6", zorder=0)
    bars: dict[str, tuple[list, list, list]] = {}
    for th, kind, a, b in spans:
        if th not in row:
            continue
        w = max(1000 * (b - a), 0.6 * ms_per_px)  # keep very short spans visible
        ranges, ys, edges = bars.setdefault(kind, ([], [], []))
        ranges.append((1000 * a, w))
        ys.append(row[th])
        edges.append(0.6 if w > 3 * ms_per_px else 0.0)  # adjacent spans stay distinct
    half = BAR / LANE / 2
    for kind, (ranges, ys, edges) in bars.items():
        for y in sorted(set(ys)):
            sel = [k for k, yy in enumerate(ys) if yy == y]
            lane_ax.broken_barh([ranges[k] for k in sel], (y - half, 2 * half),
                                facecolors=COLOURS.get(kind, "#888"), edgecolor="white",
                                linewidths=[edges[k] for k in sel], zorder=2)
    lane_ax.set_ylim(len(lanes) - 0.5, -0.5)
    lane_ax.set_yticks(range(len(lanes)), lanes, fontsize=9)
    lane_ax.tick_params(axis="y", length=0)
    lane_ax.tick_params(axis="x", labelbottom=False)
    lane_ax.grid(axis="x", color="#ddd", linewidth=0.8, zorder=1)
    lane_ax.set_axisbelow(True)



def _png_occupancy(occ_ax: Any, occ: Sequence, caps: Sequence, end_ms: float, top_cap: int) -> None:
    """The buffer occupancy as a step line, with the capacity dashed over it."""
    from matplotlib.ticker import MaxNLocator

    # Step lines, held from each sample to the next and to the end.
    occ_ax.set_facecolor("#fafafa")
    if occ:
        ts = [1000 * occ[0][0]] + [1000 * t for t, _n in occ] + [end_ms]
        ns = [0] + [n for _t, n in occ] + [occ[-1][1]]
        occ_ax.step(ts, ns, where="post", color="#3b7dd8", linewidth=1.5, zorder=3)
    if caps[0][1]:
        ts = [1000 * t for t, _c in caps] + [end_ms]
        cs = [c for _t, c in caps] + [caps[-1][1]]
        occ_ax.step(ts, cs, where="post", color="#555", linestyle="--", linewidth=1.2, zorder=2)
    occ_ax.set_ylim(-0.15, top_cap + 0.35)
    if top_cap <= 8:
        occ_ax.set_yticks(range(top_cap + 1))  # every level, as the SVG labels them
    else:
        occ_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    occ_ax.set_ylabel("ready\nbatches", fontsize=9, rotation=0, ha="right", va="center", labelpad=14)
    occ_ax.tick_params(labelsize=8)
    occ_ax.grid(axis="x", color="#ddd", linewidth=0.8)
    occ_ax.set_axisbelow(True)
    occ_ax.set_xlim(0, end_ms)
    occ_ax.set_xlabel("time (ms)", fontsize=9)


def write_timeline(path: str | Path, data: dict[str, Any], title: str = "prefetcher timeline",
                   subtitle: str = "") -> Path:
    """Write the timeline picture to ``path``: SVG for ``.svg``, PNG (needs matplotlib) for ``.png``."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".png":
        return timeline_png(p, data, title, subtitle)
    if suffix != ".svg":
        raise ValueError(f"{p.name}: the timeline is drawn as SVG or PNG; give a .svg or .png file name")
    p.write_text(timeline_svg(data, title, subtitle), encoding="utf-8")
    return p

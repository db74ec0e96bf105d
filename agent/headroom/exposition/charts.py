"""The landing page's charts: inline SVG line charts of the sampler's window with the thresholds drawn.

Each chart covers the last minutes, newest sample at the right edge ("now"), on a time axis labelled with its
span: the shortest of CHART_SPANS that holds the window's oldest sample (so an agent that just started shows
its first minute across the chart, not as a dot at the edge of five minutes), at most CHART_SECONDS. The value
axis starts at 0 and ends at ``top`` (a capacity where one exists: 100 %, the GPU's memory; else a round
number above the data and the thresholds), labelled with its unit. Thresholds are dashed lines, labelled on
the value axis and in the caption; every chart has a <title> and a <desc> that says in words what it shows.

The series of every GPU and every serving workload come from ONE pass over the window (``gpu_series``,
``serving_series``); a chart draws at most two points per COLUMN_PX pixels of its plot (the lowest and
the highest of the column, in time order: a spike stays visible), and always the newest sample as it is, so
a 250 ms interval costs no more to draw than a 1 s one. The geometry is on the <svg> as data attributes
(``data-x0 data-x1 data-y0 data-y1 data-top data-seconds``): the browser test checks the points against the
data with them. No script, no external asset: it works offline and behind any proxy.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter

from headroom.samples import NvmlSample, Sample, ServingSample

CHART_SECONDS = 300.0  # the longest span a chart covers, newest at the right
CHART_SPANS = (60.0, 120.0, CHART_SECONDS)  # the spans a time axis may have: the shortest that holds the window
WIDTH, HEIGHT = 240, 90  # px, the whole chart's own size (plot and axis labels); the page scales it to its cell
LEFT, RIGHT, TOP, BOTTOM = 50, 6, 7, 15  # px of margin around the plot: value labels left, time labels below
COLUMN_PX = 2  # the plot is drawn in columns this wide: each gets at most its lowest and highest point
LABEL_GAP = 10  # px: a threshold's value label is left out where it would overlap another value label
NICE = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)  # mantissas of the round tops of open-ended axes

# what each chart of a GPU (of a serving workload) reads from a GpuSample (a ServingEndpoint): one attrgetter call
# per GPU per sample reads them all
GPU_FIELDS = {"busy": "utilization_ratio", "sm_active": "sm_active_ratio", "memory": "memory_used_bytes",
              "power": "power_watts", "temperature": "temperature_celsius"}
SERVING_FIELDS = {"kv_usage": "kv_cache_usage_ratio", "waiting": "requests_waiting"}

Series = list[tuple[float, float]]  # (monotonic seconds, value)


@dataclass(frozen=True, slots=True)
class Mark:
    """A threshold drawn across a chart: a dashed line at ``value`` (in the chart's unit) named ``label``."""

    value: float
    label: str  # for people: "power limit (enforced)", "gpu_compute starts"
    key: str = ""  # what it is: the analysis threshold's name (compute_busy_low), power_limit, thermal_limit ...
    color: str = "#c53030"


# -------------------------------------------------------------------------------------------- series
def _recent(window: Sequence[Sample], now: float) -> Iterable[Sample]:
    """The window's samples of the last CHART_SECONDS up to ``now`` (the snapshot's sample), oldest first: a
    sample the sampler appended after the snapshot the page shows is left out, so the charts end where the
    page's numbers are."""
    start = len(window)
    while start > 0 and now - window[start - 1].monotonic <= CHART_SECONDS:
        start -= 1
    return (s for s in window[start:] if s.monotonic <= now)


def gpu_series(window: Sequence[Sample], now: float) -> dict[str, dict[str, Series]]:
    """uuid -> GPU_FIELDS name -> (t, value) over the last CHART_SECONDS, unknown values left out."""
    read = attrgetter(*GPU_FIELDS.values())
    out: dict[str, list[Series]] = {}
    for s in _recent(window, now):
        nvml = s.data("nvml")
        if not isinstance(nvml, NvmlSample):
            continue
        t = s.monotonic
        for g in nvml.gpus:
            if g.up:
                lists = out.get(g.uuid) or out.setdefault(g.uuid, [[] for _ in GPU_FIELDS])
                for series, v in zip(lists, read(g), strict=True):
                    if v is not None:
                        series.append((t, v))
    return {uuid: dict(zip(GPU_FIELDS, lists, strict=True)) for uuid, lists in out.items()}


def serving_series(window: Sequence[Sample], now: float) -> dict[str, dict[str, Series]]:
    """workload name -> SERVING_FIELDS name -> (t, value) from the serving endpoints that answered."""
    read = attrgetter(*SERVING_FIELDS.values())
    out: dict[str, list[Series]] = {}
    for s in _recent(window, now):
        serving = s.data("serving")
        if not isinstance(serving, ServingSample):
            continue
        t = s.monotonic
        for e in serving.endpoints:
            if e.up:
                lists = out.get(e.workload) or out.setdefault(e.workload, [[] for _ in SERVING_FIELDS])
                for series, v in zip(lists, read(e), strict=True):
                    if v is not None:
                        series.append((t, v))
    return {name: dict(zip(SERVING_FIELDS, lists, strict=True)) for name, lists in out.items()}


def span_for(window: Sequence[Sample], now: float) -> float:
    """The time axis of every chart of the page: the shortest of CHART_SPANS that holds the window's samples of
    the last CHART_SECONDS."""
    oldest = next(iter(_recent(window, now)), None)
    age = now - oldest.monotonic if oldest is not None else 0.0
    return next((s for s in CHART_SPANS if age <= s), CHART_SECONDS)


def nice_top(x: float) -> float:
    """The smallest round number (NICE x 10^k) at or above ``x``; 1 for nothing positive."""
    if not x > 0 or not math.isfinite(x):
        return 1.0
    scale = 10.0 ** math.floor(math.log10(x))
    return next(m * scale for m in NICE if m * scale >= x * (1 - 1e-9))


# -------------------------------------------------------------------------------------------- drawing
def _thin(points: Series, now: float, x1: float, scale: float) -> list[tuple[float, float]]:
    """(x, value) with at most two points per COLUMN_PX column of the plot (its lowest and highest, in time
    order), the newest point always kept as it is; x = x1 - (now - t) * scale."""
    out: list[tuple[float, float]] = []
    lo = hi = (0.0, 0.0)  # the open column's lowest and highest points (a column is open once ``at`` is set)
    at: int | None = None
    for t, v in points:
        x = x1 - (now - t) * scale
        px = int(x) // COLUMN_PX
        if px != at:
            if at is not None:
                out += (lo,) if lo is hi else (lo, hi) if lo[0] < hi[0] else (hi, lo)
            lo = hi = (x, v)
            at = px
        elif v < lo[1]:
            lo = (x, v)
        elif v > hi[1]:
            hi = (x, v)
    if at is not None:  # the last column: its extremes, then the newest point itself
        last = points[-1]
        newest = (x1 - (now - last[0]) * scale, last[1])
        out += [p for p in sorted({lo, hi}) if p[0] < newest[0]]
        out.append(newest)
    return out


def chart(points: Series, now: float, top: float, label: str, fmt: Callable[[float], str],
          marks: Sequence[Mark] = (), color: str = "#2b6cb0", seconds: float = CHART_SECONDS) -> str:
    """One line chart: ``points`` (t, value) over the ``seconds`` before ``now``, on a value axis from 0 to
    ``top`` (values above it are drawn at the top), with ``marks`` as dashed lines; ``fmt`` writes a value
    with its unit. ``label`` names it (its title and aria-label)."""
    e = html.escape
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP
    top = top if top > 0 and math.isfinite(top) else 1.0

    def y_of(v: float) -> float:
        return y0 - max(0.0, min(v / top, 1.0)) * (y0 - y1)

    shown = [m for m in marks if m.value is not None and 0 <= m.value <= top]
    points = [p for p in points if now - p[0] <= seconds]
    values = [v for _, v in points]
    if values:
        desc = (f"{len(values)} samples over the last {span_text(seconds)}: now {fmt(values[-1])}, lowest "
                f"{fmt(min(values))}, highest {fmt(max(values))}")
    else:
        desc = f"no samples over the last {span_text(seconds)}"
    if shown:
        desc += "; thresholds: " + ", ".join(f"{m.label} {fmt(m.value)}" for m in shown)
    parts = [f'<svg class="chart" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-label="{e(label)}" data-x0="{x0}" data-x1="{x1}" data-y0="{y0}" data-y1="{y1}" '
             f'data-top="{float(top)!r}" data-seconds="{seconds:g}">'
             f"<title>{e(label)}</title><desc>{e(desc)}.</desc>"
             f'<rect class="plot" x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="#f7fafc" '
             'stroke="#cbd5e0" stroke-width="0.5"/>']
    # value axis: 0, the top and each threshold, a label left out where it would overlap another
    taken: list[float] = [y0, y1]
    ticks: list[tuple[float, str]] = [(y0, fmt(0.0)), (y1, fmt(top))]
    for m in shown:
        y = y_of(m.value)
        parts.append(f'<line class="mark" data-threshold="{e(m.key)}" data-value="{float(m.value)!r}" x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="{m.color}" stroke-width="1" stroke-dasharray="3 2"><title>{e(m.label)} '
                     f"{e(fmt(m.value))}</title></line>")
        if all(abs(y - other) >= LABEL_GAP for other in taken):
            taken.append(y)
            ticks.append((y, fmt(m.value)))
    parts.append('<g class="axis" font-size="10" fill="#4a5568">')
    parts += [f'<text x="{x0 - 3}" y="{y + 3:.1f}" text-anchor="end">{e(text)}</text>' for y, text in ticks]
    parts.append(f'<text x="{x0}" y="{HEIGHT - 3}">-{e(span_text(seconds))}</text>'
                 f'<text x="{x1}" y="{HEIGHT - 3}" text-anchor="end">now</text></g>')
    drawn = _thin(points, now, x1, (x1 - x0) / seconds)
    if drawn:
        k = (y0 - y1) / top
        coords = " ".join([f"{x:.1f},{y0 - (v if v < top else top) * k if v > 0 else y0:.1f}" for x, v in drawn])
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" stroke-linejoin="round" '
                     f'points="{coords}"/>')
        x, v = drawn[-1]
        parts.append(f'<circle cx="{x:.1f}" cy="{y_of(v):.1f}" r="2.2" fill="{color}"/>')
    parts.append("</svg>")
    return "".join(parts)


def span_text(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def figure(name: str, now_text: str, svg: str, marks: Sequence[Mark] = (), fmt: Callable[[float], str] = str) -> str:
    """A chart with its caption: what it is and its value now above, the thresholds below."""
    e = html.escape
    legend = " ".join(f'<span class="dash" style="border-color:{m.color}"></span> {e(fmt(m.value))} {e(m.label)}'
                      for m in marks)
    return (f'<figure class="chart" data-chart="{e(name)}"><figcaption>{e(name)} <b>{e(now_text)}</b></figcaption>'
            f"{svg}" + (f'<div class="legend muted">{legend}</div>' if legend else "") + "</figure>")


def absent(name: str, why: str) -> str:
    """The place of a chart the GPU or the runtime gives no data for, saying why."""
    e = html.escape
    return (f'<figure class="chart absent" data-chart="{e(name)}"><figcaption>{e(name)}</figcaption>'
            f'<div class="muted">{e(why)}</div></figure>')


# -------------------------------------------------------------------------------------------- units on axes
def fmt_ratio(v: float) -> str:
    return f"{v * 100:.0f} %"


def fmt_bytes(v: float) -> str:
    """Compact bytes for an axis: GiB from 1 GiB (no decimals from 100 GiB), else MiB; 0 as "0 GiB"."""
    if v >= 100 * 2**30:
        return f"{v / 2**30:.0f} GiB"
    if v >= 2**30 or v == 0:
        return f"{v / 2**30:.1f} GiB".replace("0.0 GiB", "0 GiB")
    return f"{v / 2**20:.0f} MiB"


def fmt_watts(v: float) -> str:
    return f"{v:.0f} W"


def fmt_celsius(v: float) -> str:
    return f"{v:.0f} °C"


def fmt_count(v: float) -> str:
    return f"{v:.0f}" if v >= 10 or v == int(v) else f"{v:.1f}"

"""The probe's chart: latency percentiles and throughput against load, the binding resource marked (SVG).

``chart(result)`` draws from the result dict (store.validate's shape) one inline SVG in the landing page's style
(exposition/charts.py: its colours, fonts, dashed marks, a <title> and a <desc> in words, no script): two plots
sharing the load axis (one column per step, labelled with its level: concurrency or requests/s). Above,
latency: TTFT p50 and p95 and ITL p95 (ms), the SLO's objectives as dashed lines. Below, throughput: requests/s
completed and goodput (requests/s within the SLO). The step the capacity is bound from gets a red dashed line
labelled "bound by RESOURCE"; a step where the client saturated, an amber one. Every point carries
``data-series``, ``data-step`` and ``data-value`` so a test can check it against the result; every text from the
result is escaped (a resource name or a level is never markup).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from headroom.exposition.charts import fmt_count, nice_top
from headroom.jsontypes import JsonDoc

WIDTH, HEIGHT = 480, 250  # px, the whole chart; the page scales it to its column
LEFT, RIGHT, TOP, GAP, BOTTOM = 56, 12, 10, 30, 30  # px: value labels left, the load axis and its title below
PANEL = (HEIGHT - TOP - GAP - BOTTOM) // 2  # px of each plot's height
LATENCY = (("ttft", "p50", "TTFT p50", "#2b6cb0"), ("ttft", "p95", "TTFT p95", "#6b46c1"),
           ("itl", "p95", "ITL p95", "#2c7a7b"))
THROUGHPUT = (("requests_per_second", "requests/s", "#2f855a"), ("goodput_requests_per_second", "goodput", "#dd6b20"))
SLO_COLORS = {"ttft": "#6b46c1", "itl": "#2c7a7b"}  # an objective's dashed line: its series' colour
BOUND_COLOR, CLIENT_COLOR = "#c53030", "#b7791f"


def _ms(v: float) -> str:
    return f"{v * 1000:.0f} ms" if v >= 0.01 or v == 0 else f"{v * 1000:.1f} ms"


def _level(v: float) -> str:
    return f"{v:g}"


def _polyline(points: Sequence[tuple[float, float, int, float]], name: str, color: str, dash: str = "") -> str:
    e = html.escape
    if not points:
        return ""
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in points)
    out = [f'<polyline class="series" data-series="{e(name)}" fill="none" stroke="{color}" stroke-width="1.5" '
           f'stroke-linejoin="round"{dash} points="{coords}"/>']
    out += [f'<circle data-series="{e(name)}" data-step="{i}" data-value="{v!r}" cx="{x:.1f}" cy="{y:.1f}" r="2.4" '
            f'fill="{color}"><title>{e(name)} at step {i}: {e(_ms(v) if "/" not in name and name != "goodput" else fmt_count(v))}'
            f"</title></circle>" for x, y, i, v in points]
    return "".join(out)


def chart(result: JsonDoc, label: str = "") -> str:
    """The chart of a probe result (module docstring); a short note in a <figure> when it has no step."""
    e = html.escape
    steps = list(result.get("steps") or ())
    unit = "concurrent sequences" if result.get("schedule") == "concurrency" else "requests/s offered"
    who = result.get("workload") or result.get("url") or "the endpoint"
    label = label or f"Probe of {who}: latency and throughput against load"
    if not steps:
        return f'<p class="muted probe-chart-empty">{e(label)}: no step completed.</p>'
    x0, x1 = LEFT, WIDTH - RIGHT
    lat_top, lat_bottom = TOP, TOP + PANEL
    thr_top, thr_bottom = TOP + PANEL + GAP, TOP + 2 * PANEL + GAP
    n = len(steps)
    column = (x1 - x0) / n

    def x_of(i: int) -> float:
        return x0 + column * (i + 0.5)

    slo = result.get("slo") or {}
    slo_marks = [(k, f"{k.split('_')[0].upper()} {k.split('_')[1]} objective", SLO_COLORS[k.split("_")[0]])
                 for k in sorted(slo) if k.split("_")[0] in SLO_COLORS and slo[k]]
    latencies = [v for s in steps for key, q, _, _ in LATENCY
                 if (v := (s.get(key) or {}).get(q)) is not None]
    lat_max = nice_top(max([*latencies, *(slo[k] for k, _, _ in slo_marks)] or [0.0]) * 1.1)
    rates = [v for s in steps for key, _, _ in THROUGHPUT if (v := s.get(key)) is not None]
    thr_max = nice_top(max(rates or [0.0]) * 1.1)

    def y_lat(v: float) -> float:
        return lat_bottom - min(v / lat_max, 1.0) * PANEL

    def y_thr(v: float) -> float:
        return thr_bottom - min(v / thr_max, 1.0) * PANEL

    cap = result.get("capacity") or {}
    bound, k = cap.get("bound_by") or "none", cap.get("from_step")
    bound_i = next((i for i, s in enumerate(steps) if s.get("index") == k), None) if k is not None else None
    saturated = next((i for i, s in enumerate(steps) if s.get("client_saturated")), None)
    desc = [f"{n} steps at {', '.join(_level(s['level']) for s in steps)} {unit}"]
    for s in steps:
        ttft = (s.get("ttft") or {}).get("p95")
        rps = s.get("requests_per_second")
        desc.append(f"step {s['index']} ({_level(s['level'])}): TTFT p95 {'-' if ttft is None else _ms(ttft)}, "
                    f"{'-' if rps is None else fmt_count(rps)} requests/s, SLO {'met' if s.get('slo_ok') else 'broken'}")
    if bound_i is not None:
        desc.append(f"bound by {bound} from step {k}")
    if saturated is not None:
        desc.append(f"the client saturated from step {steps[saturated]['index']}")
    parts = [f'<svg class="probe-chart" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'role="img" aria-label="{e(label)}" data-steps="{n}" data-bound-by="{e(bound)}" '
             f'data-lat-top="{lat_max!r}" data-thr-top="{thr_max!r}">'
             f"<title>{e(label)}</title><desc>{e('; '.join(desc))}.</desc>"]
    for top, bottom in ((lat_top, lat_bottom), (thr_top, thr_bottom)):
        parts.append(f'<rect class="plot" x="{x0}" y="{top}" width="{x1 - x0}" height="{bottom - top}" '
                     'fill="#f7fafc" stroke="#cbd5e0" stroke-width="0.5"/>')
    parts.append('<g class="axis" font-size="10" fill="#4a5568">')
    parts += [f'<text x="{x0 - 3}" y="{y + 3:.1f}" text-anchor="end">{e(t)}</text>' for y, t in (
        (lat_bottom, _ms(0.0)), (lat_top, _ms(lat_max)), (thr_bottom, "0/s"), (thr_top, f"{fmt_count(thr_max)}/s"))]
    parts.append(f'<text x="{x0 - 3}" y="{(lat_top + lat_bottom) / 2 + 3:.0f}" text-anchor="end">latency</text>'
                 f'<text x="{x0 - 3}" y="{(thr_top + thr_bottom) / 2 + 3:.0f}" text-anchor="end">throughput</text>')
    parts += [f'<text class="level" x="{x_of(i):.1f}" y="{thr_bottom + 12}" text-anchor="middle">'
              f"{e(_level(s['level']))}</text>" for i, s in enumerate(steps)]
    parts.append(f'<text x="{(x0 + x1) / 2:.0f}" y="{HEIGHT - 4}" text-anchor="middle">load: {e(unit)}</text></g>')
    for key, name, color in slo_marks:
        if slo[key] <= lat_max:
            y = y_lat(slo[key])
            parts.append(f'<line class="mark" data-threshold="{key}" data-value="{float(slo[key])!r}" x1="{x0}" '
                         f'x2="{x1}" y1="{y:.1f}" y2="{y:.1f}" stroke="{color}" stroke-width="1" '
                         f'stroke-dasharray="3 2"><title>{e(name)} {e(_ms(slo[key]))}</title></line>')
    for i, color, text, cls in ((bound_i, BOUND_COLOR, f"bound by {bound}", "bound"),
                                (saturated, CLIENT_COLOR, "client saturated", "client")):
        if i is None:
            continue
        x = x_of(i) - column / 2 if cls == "bound" else x_of(i) + column / 2 - 1
        parts.append(f'<line class="{cls}" data-step="{steps[i]["index"]}" x1="{x:.1f}" x2="{x:.1f}" y1="{lat_top}" '
                     f'y2="{thr_bottom}" stroke="{color}" stroke-width="1.2" stroke-dasharray="4 2"/>'
                     f'<text class="{cls}-label" x="{x + 3:.1f}" y="{lat_top + 10 + (12 if cls == "client" else 0)}" '
                     f'font-size="10" fill="{color}">{e(text)}</text>')
    for key, q, name, color in LATENCY:
        pts = [(x_of(i), y_lat(v), s["index"], v) for i, s in enumerate(steps)
               if (v := (s.get(key) or {}).get(q)) is not None]
        parts.append(_polyline(pts, name, color))
    for key, name, color in THROUGHPUT:
        pts = [(x_of(i), y_thr(v), s["index"], v) for i, s in enumerate(steps) if (v := s.get(key)) is not None]
        parts.append(_polyline(pts, name, color, ' stroke-dasharray="5 2"' if key.startswith("goodput") else ""))
    parts.append("</svg>")
    return "".join(parts)


def legend() -> str:
    """The chart's key, as the page's figures have one (the series' colours, the marks)."""
    e = html.escape
    items = [(c, n) for _, _, n, c in LATENCY] + [(c, n) for _, n, c in THROUGHPUT]
    keys = " ".join(f'<span class="dash" style="border-color:{c};border-top-style:solid"></span> {e(n)}'
                    for c, n in items)
    return (f'<div class="legend muted">{keys} <span class="dash" style="border-color:{BOUND_COLOR}"></span> '
            f'binding step <span class="dash" style="border-color:{CLIENT_COLOR}"></span> client saturated</div>')


def figure(result: JsonDoc, answer: str) -> str:
    """The chart with the answer sentence above it, for the landing page and ``headroom probe --chart``."""
    e = html.escape
    return (f'<figure class="probe" data-chart="probe"><figcaption class="probe-answer">{e(answer)}</figcaption>'
            f"{chart(result)}{legend()}</figure>")


def document(result: JsonDoc) -> str:
    """A standalone SVG file of the chart (``headroom probe --chart FILE.svg``), with the XML namespace."""
    return chart(result).replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1)

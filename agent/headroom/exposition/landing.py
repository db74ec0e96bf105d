"""The landing page (``/``), built from the JSON status (status_api.py) of the current Snapshot.

The page answers the product's two questions without Grafana: per workload and per GPU, what limits it
now (with the evidence) and how much room is left, plus small charts of the last minutes drawn as
inline SVG from the sampler's window. No external assets: it works offline and behind any proxy. It
refreshes itself every few seconds.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import TYPE_CHECKING

from headroom import __version__
from headroom.analysis.bottleneck import DEFAULT_THRESHOLDS
from headroom.exposition import charts
from headroom.exposition.charts import Mark
from headroom.exposition.health import State
from headroom.exposition.status_api import Json, status
from headroom.units import format_size

if TYPE_CHECKING:
    from headroom.probe.store import LastResult
    from headroom.samples import Snapshot


def _fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.0f} %"


def _fmt_gib(n: float | None) -> str:
    """A size on the page, its unit chosen by its size (units.format_size, as in the evidence)."""
    return "-" if n is None else format_size(n)


_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;max-width:80em;color:#1a202c}
h1{margin:0 0 .2em}h2{margin-top:1.4em}
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #e2e8f0;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#edf2f7}.warn{color:#b7791f}.bad{color:#c53030}.muted{color:#718096}
.pill{display:inline-block;padding:.1em .6em;border-radius:1em;font-weight:600;background:#e2e8f0}
.pill.none{background:#c6f6d5;color:#22543d}.pill.hot{background:#fed7d7;color:#822727}
.pill.pending{background:#fefcbf;color:#744210}p.pending{color:#975a16}.remedy code{background:#edf2f7;padding:0 .2em;word-break:break-all}
.card{border:1px solid #e2e8f0;border-radius:.5em;padding:.8em 1em;margin:.8em 0}
.evidence{margin:.3em 0}.scores td{padding:.1em .5em}.scores td:last-child{overflow-wrap:anywhere}
.charts{display:flex;flex-wrap:wrap;gap:.5em 1.2em;margin:.5em 0}
figure.chart{margin:0;flex:1 1 220px;max-width:320px;min-width:0}figure.chart figcaption{font-size:.9em}
svg.chart{display:block;width:100%;height:auto}.legend{font-size:.75em}
.dash{display:inline-block;width:1.4em;vertical-align:middle;border-top:2px dashed}
figure.probe{margin:.4em 0;max-width:720px}figure.probe svg{display:block;width:100%;height:auto}
.probe-answer{margin:.3em 0}
"""


def _pill(primary: str, pending: Json | None = None) -> str:
    """The primary's pill; while nothing is confirmed but a candidate is pending, an amber 'pending: <resource>'
    (data-bottleneck stays the primary, data-pending names the candidate)."""
    e = html.escape
    if primary == "none" and pending and pending.get("resource") != "none":
        return (f'<span class="pill pending" data-bottleneck="none" data-pending="{e(pending["resource"])}">'
                f'pending: {e(pending["resource"])}</span>')
    cls = "none" if primary == "none" else "hot"
    return f'<span class="pill {cls}" data-bottleneck="{e(primary)}">{e(primary)}</span>'


def _code(text: str) -> str:
    """Escaped text with `backquoted` commands and settings set in <code>."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts)) if len(parts) % 2 else \
        html.escape(text)


def runbook_href(remedy: Json) -> str:
    """The page's link to a remedy's runbook section: the agent's own ``/runbook`` as a relative link
    ('runbook#bottleneck-gpu_power'), so it works on an air-gapped host and behind a proxy's path prefix."""
    path = remedy.get("runbook_path")
    return str(path.lstrip("/") if path else remedy["runbook_url"])


def _remedy_line(remedy: Json | None, label: str = "What to do") -> str:
    if not remedy:
        return ""
    return (f'<p class="remedy"><b>{html.escape(label)}:</b> {_code(remedy["text"])} '
            f'<a class="runbook" href="{html.escape(runbook_href(remedy))}">runbook</a></p>')


def pending_text(pending: Json) -> str:
    """'pending: gpu_power (score 1.00), confirmed in 12 s if it holds'."""
    score = pending.get("score")
    held = "" if score is None else f" (score {score:.2f})"
    wait = pending.get("confirm_in_seconds") or 0.0
    return f"pending: {pending['resource']}{held}, confirmed in {wait:.0f} s if it holds"


def _verdict_lines(v: Json, none_text: str) -> str:
    """The card's verdict: the primary's evidence and what to do about it (or why nothing limits it), then a
    pending candidate with its score, when it will be confirmed, its evidence and its remedy."""
    e = html.escape
    primary = v.get("primary_bottleneck", "none")
    pending = v.get("pending")
    out = ""
    if primary != "none":
        evidence = v.get("evidence", {}).get(primary)
        out += (f'<p class="evidence">{e(evidence)}</p>' if evidence else "") + _remedy_line(v.get("remedy"))
    elif not pending or pending.get("resource") == "none":
        out += f'<p class="evidence muted">{e(none_text)}</p>'
    if pending:
        out += f'<p class="pending"><b>{e(pending_text(pending))}</b></p>'
        if pending.get("evidence"):
            out += f'<p class="evidence pending-evidence">{e(pending["evidence"])}</p>'
        out += _remedy_line(pending.get("remedy"), "What to do if it holds")
    return out


def _scores_table(v: Json) -> str:
    rows = "".join(f"<tr><td>{html.escape(r)}</td><td>{s:.2f}</td><td class=muted>{html.escape(v['evidence'][r])}</td></tr>"
                   for r, s in list(v["scores"].items())[:4])
    return f'<table class="scores"><tr><th>resource</th><th>score</th><th>evidence</th></tr>{rows}</table>'


def _workload_card(w: Json, charts_html: str = "") -> str:
    e = html.escape
    primary = w["primary_bottleneck"]
    h = w["headroom"]
    room = [
        ("VRAM free", _fmt_gib(h.get("gpu_memory_bytes"))),
        *_capacity_rows(h),
        ("spare CPU cores", "-" if h.get("cpu_cores") is None else f"{h['cpu_cores']:.1f}"),
        ("host RAM available", _fmt_gib(h.get("host_memory_bytes"))),
        ("shared memory left", _fmt_gib(h.get("shared_memory_bytes"))),
        ("power margin", _power_margin(h)),
        ("thermal margin", "-" if h.get("thermal_celsius") is None else f"{h['thermal_celsius']:.0f} °C"),
    ]
    room_html = "".join(f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>" for k, v in room)
    expected = w.get("expected") or {}
    measured = w.get("measured") or {}
    memory = ""
    if expected.get("gpu_memory_peak_bytes") is not None or measured.get("gpu_memory_used_bytes") is not None:
        memory = (f"<p>GPU memory: expected peak <b>{_fmt_gib(expected.get('gpu_memory_peak_bytes'))}</b>, "
                  f"measured <b>{_fmt_gib(measured.get('gpu_memory_used_bytes'))}</b></p>")
    if expected.get("estimate_error"):
        memory += f"<p class=warn>No estimate: {e(expected['estimate_error'])}</p>"
    for problem in w.get("problems") or ():  # workload status problems (a declared count that disagrees with /proc)
        memory += f"<p class=warn>{e(problem)}</p>"
    gpus = ", ".join(str(i) for i in w["gpus"]) or "none"
    ident = w.get("identity")
    if ident:  # an automatic workload: say what it was recognised as, so nobody looks for its profile
        found = " ".join(x for x in (ident.get("runtime"), ident.get("model")) if x) or ident.get("kind", "")
        gpus += f" · found automatically ({found}; no profile declared)"
    none_why = w["evidence"].get("none") if primary == "none" else None  # the serving runtime's word
    return (f'<div class="card workload" id="workload-{e(w["name"])}"><h3>{e(w["name"])} '
            f'{_pill(primary, w.get("pending"))}</h3>'
            f"<p class=muted>GPUs: {e(gpus)}</p>"
            + _verdict_lines(w, none_why or "Nothing limits this workload now.")
            + _serving_line(w.get("serving")) + charts_html + _neighbours_line(w.get("neighbours")) + memory + f"<table><tr><th>headroom</th><th></th></tr>{room_html}</table>"
            + _capacity_note(h) + _scores_table(w) + "</div>")


def _tokens(n: float | None) -> str:
    return "-" if n is None else f"{n:,.0f}".replace(",", " ")


_BASIS_WORDS = {"runtime": "from the runtime's KV cache", "memory_model": "memory model's estimate",
                "free_vram": "free VRAM / the model's KV bytes per token"}


def _capacity_rows(h: Json) -> list[tuple[str, str]]:
    """'more sequences at max context' and 'more context tokens' from their basis, and the memory model's
    estimate beside them when the runtime's figures lead (analysis/headroom.py)."""
    basis = h.get("basis") or ""
    why = _BASIS_WORDS.get(basis, basis)
    tag = f" ({why})" if why and h.get("sequences") is not None else ""
    rows = [("more sequences at max context", _tokens(h.get("sequences")) + tag),
            ("more context tokens", _tokens(h.get("context_tokens")) + tag)]
    if basis == "runtime" and h.get("kv_capacity_tokens"):
        rows.append(("KV cache free (runtime)", f"{_tokens(h.get('kv_free_tokens'))} of "
                                                f"{_tokens(h['kv_capacity_tokens'])} tokens"))
        if h.get("estimate_sequences") is not None or h.get("estimate_kv_capacity_tokens") is not None:
            rows.append(("memory model's estimate",
                         f"{_tokens(h.get('estimate_sequences'))} sequences, {_tokens(h.get('estimate_context_tokens'))}"
                         f" context tokens, KV {_tokens(h.get('estimate_kv_capacity_tokens'))} tokens"))
    return rows


def _capacity_note(h: Json) -> str:
    text = h.get("explanation")
    return f'<p class="capacity-note muted">{html.escape(text)}</p>' if text else ""


def _neighbours_line(found: Json | None) -> str:
    """'Pressure from outside the workload: CPU: stress-ng (bob) 49 %; disk I/O: rsync (backup) 87 %'."""
    if not found:
        return ""
    e = html.escape
    what = {"cpu": ("CPU", "cpu_share"), "disk_io": ("disk I/O", "io_share"), "host_memory": ("RAM", "memory_share")}
    parts = []
    for resource, items in found.items():
        label, share = what.get(resource, (resource, ""))
        names = ", ".join(f"{e(n['name'])} ({e(n['user'])}) {_fmt_pct(n.get(share))}" for n in items)
        parts.append(f"{e(label)}: {names}")
    return f'<p class="neighbours warn">Pressure from outside the workload: {"; ".join(parts)}</p>'


def _power_margin(h: Json) -> str:
    """'GPU 0: 5 W, GPU 1: 407 W (412 W summed)': per GPU first, the one at its cap shows; the sum, which would hide
    it beside an idle card, only after."""
    if h.get("power_watts") is None:
        return "-"
    per_gpu = h.get("power_watts_by_gpu") or {}
    if len(per_gpu) <= 1:
        return f"{h['power_watts']:.0f} W"
    detail = ", ".join(f"GPU {i}: {w:.0f} W" for i, w in sorted(per_gpu.items(), key=lambda kv: int(kv[0])))
    return f"{detail} ({h['power_watts']:.0f} W summed)"


def _serving_line(s: Json | None) -> str:
    """The serving runtime's view of a workload with an endpoint: KV cache, queue, latency, or why it is unread."""
    if not s:
        return ""
    e = html.escape
    if not s.get("up") or s.get("state") == "restarting":  # down or restarting: its state and why, nothing else
        state = s.get("state") or "down"
        why = (s.get("state_reason") or s.get("error") or "not read").removeprefix(f"serving endpoint {state}: ")
        return (f'<p class="serving warn">Serving endpoint {e(s["endpoint"])} <b>{e(state)}</b>: '
                f'{e(why)}</p>')
    percentiles = s.get("percentiles") or {}
    latency = ""
    for key, title in (("ttft_p95", "TTFT p95"), ("itl_p95", "ITL p95")):
        p = percentiles.get(key)
        if p:  # a bound reads as one ("< 10 ms"): the runtime's buckets are no finer
            latency += f", {title} <b>{e(p.get('text') or '')}</b>"
    oversized = f' <span class="warn">(oversized: {e(s["oversized"])})</span>' if s.get("oversized") else ""
    slos = "".join(f'<br><span class="{_SLO_CLASS.get(o.get("judgement"), "muted")}">SLO {e(o.get("text") or "")}'
                   f'</span>' for o in s.get("slo") or ())
    if s.get("resident_bytes") is not None:  # a runtime that lists what it holds loaded (Ollama's /api/ps), no queue
        models = s.get("resident_models") or ()
        names = f" ({e(', '.join(models[:3]))}{', ...' if len(models) > 3 else ''})" if models else ""
        return (f'<p class="serving">{e(s.get("runtime") or "")}: <b>{len(models)}</b> model'
                f'{"s" if len(models) != 1 else ""} loaded{names}, {_gib(s["resident_bytes"])}, '
                f'{_gib(s.get("resident_vram_bytes") or 0)} in GPU memory{oversized}{slos}</p>')
    extra = ""
    if s.get("deferred"):
        extra += f" ({s['deferred']:.0f} deferred, not for capacity)"
    if s.get("rejections_per_minute"):
        extra += f", <b>{s['rejections_per_minute']:.1f}</b>/min refused at admission"
    if (p := percentiles.get("queue_p95")) is not None:
        extra += f", queue p95 <b>{e(p.get('text') or '')}</b>"
    if s.get("sleep_level"):
        extra += f', <span class="muted">asleep (sleep level {s["sleep_level"]}): idle, not broken</span>'
    return (f'<p class="serving">{e(s.get("runtime") or "")}: KV cache <b>{_fmt_pct(s.get("usage"))}</b> used, '
            f'<b>{s.get("running") or 0:.0f}</b> running, <b>{s.get("waiting") or 0:.0f}</b> waiting{extra}{latency}'
            f'{oversized}{slos}</p>')


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


# how the page colours an objective's judgement (analysis/serving.py JUDGEMENTS)
_SLO_CLASS = {"met": "", "breached": "bad", "undecided": "warn", "not_measurable": "warn", "no_data": "muted"}


def _gpu_card(g: Json, series: dict[str, dict[str, charts.Series]], axis: tuple[float, float], thresholds: dict[str, float]) -> str:
    e = html.escape
    primary = g.get("primary_bottleneck", "none")
    health = g.get("health") or {}
    sick = "".join(f'<p class="bad health">unhealthy: {e(c["reason"])} (action: {e(c["action"])})</p>'
                   for c in health.get("conditions", ()))
    if not g["up"]:
        return (f'<div class="card gpu"><h3>GPU {g["index"]} {e(g["name"])} <span class="bad">DOWN</span></h3>'
                f"<p>{e(g.get('error') or '')}</p>{sick}</div>")
    return (f'<div class="card gpu" id="gpu-{g["index"]}"><h3>GPU {g["index"]} {e(g["name"])} '
            f'{_pill(primary, g.get("pending"))}'
            f"{' <span class=muted>(idle)</span>' if g.get('idle') else ''}"
            f"{' <span class=bad>UNHEALTHY</span>' if sick else ''}</h3>" + sick
            + (_verdict_lines(g, "") if primary != "none" or g.get("pending") else "")
            + _gpu_charts(g, series.get(g["uuid"]) or {}, axis, thresholds)
            + (_scores_table(g) if "scores" in g else "") + "</div>")


def _gpu_charts(g: Json, s: dict[str, charts.Series], axis: tuple[float, float], t: dict[str, float]) -> str:
    """Busy, SM activity, memory, power and temperature over the last minutes (``axis``: now and the span, in
    seconds), each with the thresholds the analysis judges it by (analysis.thresholds), the enforced power limit
    and the temperature limits."""
    c = charts
    name = f"GPU {g['index']}"
    now, seconds = axis
    span = f"last {charts.span_text(seconds)}"
    figs = []

    def add(key: str, title: str, now_text: str, top: float, fmt: Callable[[float], str], marks: list[Mark], color: str,
            caption: str = "") -> None:
        svg = c.chart(s.get(key) or [], now, top, f"{name} {title}, {span}", fmt, marks, color, seconds)
        figs.append(c.figure(caption or title, now_text, svg, marks, fmt))

    add("busy", "utilization", _fmt_pct(g["utilization_ratio"]), 1.0, c.fmt_ratio,
        [Mark(t["compute_busy_low"], "gpu_compute starts", "compute_busy_low"),
         Mark(t["busy_low"], "starved at or below", "busy_low", "#b7791f")], "#2b6cb0")
    sm = s.get("sm_active") or []
    if sm:
        add("sm_active", "SM activity", _fmt_pct(sm[-1][1]), 1.0, c.fmt_ratio,
            [Mark(t["sm_active_high"], "compute-bound from", "sm_active_high"),
             Mark(t["sm_active_low"], "launch-bound below", "sm_active_low", "#b7791f")], "#2c7a7b")
    else:
        figs.append(c.absent("SM activity", "not reported by this GPU (NVML GPM: Hopper or newer)"))
    total = g["memory_total_bytes"]
    if total:
        used = g["memory_used_bytes"]
        add("memory", "memory used", "-" if used is None else f"{format_size(used)} / {format_size(total)}", float(total),
            c.fmt_bytes, [Mark(t["vram_high"] * total, "gpu_memory full", "vram_high"),
                          Mark(t["vram_low"] * total, "gpu_memory starts", "vram_low", "#b7791f")], "#805ad5",
            caption="memory")
    limit = g["power_limit_watts"]
    power = s.get("power") or []
    top = c.nice_top(max([limit or 0.0, *(v for _, v in power)]) * 1.1)
    add("power", "power", "-" if g["power_watts"] is None else f"{g['power_watts']:.0f} / {limit or 0:.0f} W", top,
        c.fmt_watts, [Mark(limit, "power limit (enforced)", "power_limit")] if limit else [], "#dd6b20")
    heat = g.get("thermal_limit_celsius")
    nvml = g.get("temperature_thresholds_celsius") or {}
    marks = [Mark(heat, f"thermal limit ({g.get('thermal_limit_source') or 'configured'})", "thermal_limit")] \
        if heat else []
    if nvml.get("slowdown") and nvml["slowdown"] != heat:
        marks.append(Mark(nvml["slowdown"], "hardware slowdown", "slowdown", "#9b2c2c"))
    temps = s.get("temperature") or []
    top = c.nice_top(max([0.0, *(m.value for m in marks), *(v for _, v in temps)]) * 1.1)
    add("temperature", "temperature", "-" if g["temperature_celsius"] is None else
        f"{g['temperature_celsius']:.0f} °C", top, c.fmt_celsius, marks, "#c05621")
    return f'<div class="charts">{"".join(figs)}</div>'


def _serving_charts(w: Json, s: dict[str, charts.Series] | None, axis: tuple[float, float],
                    t: dict[str, float]) -> str:
    """A serving workload's KV cache usage and queue (requests waiting) over the last minutes, from its
    runtime's endpoint, with the kv_cache verdict's thresholds. The last probe's capacity chart is its own section
    (probe_section)."""
    if not s or not any(s.values()):
        return ""
    c = charts
    now, seconds = axis
    span = f"last {charts.span_text(seconds)}"
    figs = []
    kv = s.get("kv_usage") or []
    if kv:
        marks = [Mark(t["kv_usage_high"], "kv_cache full", "kv_usage_high"),
                 Mark(t["kv_usage_low"], "kv_cache starts", "kv_usage_low", "#b7791f")]
        svg = c.chart(kv, now, 1.0, f"{w['name']} KV cache used, {span}", c.fmt_ratio, marks, "#6b46c1", seconds)
        figs.append(c.figure("KV cache used", "now " + c.fmt_ratio(kv[-1][1]), svg, marks, c.fmt_ratio))
    waiting = s.get("waiting") or []
    if waiting:
        marks = [Mark(t["serving_waiting_high"], "queueing counts fully (mean)", "serving_waiting_high")]
        top = c.nice_top(max([t["serving_waiting_high"], *(v for _, v in waiting)]) * 1.1)
        svg = c.chart(waiting, now, top, f"{w['name']} requests waiting, {span}", c.fmt_count, marks, "#2f855a",
                      seconds)
        figs.append(c.figure("requests waiting", "now " + c.fmt_count(waiting[-1][1]), svg, marks, c.fmt_count))
    return f'<div class="charts">{"".join(figs)}</div>'


_PROBE_FILES: dict[str, LastResult] = {}  # probe-last.json path -> its reader (one stat per page view)


def probe_section(snap: Snapshot | None) -> str:
    """The last `headroom probe` (sources/probe.py found it valid this tick): its answer and its chart."""
    from headroom.probe import answer, chart, store

    p = snap.sample.data("probe") if snap is not None else None
    if p is None or not getattr(p, "found", False):
        return ""
    watch = _PROBE_FILES.get(p.path)
    if watch is None:
        _PROBE_FILES.clear()  # one state directory per agent: a changed --state.dir replaces the old entry
        watch = _PROBE_FILES[p.path] = store.LastResult(p.path.rsplit("/", 1)[0])
    result = watch.get()
    if result is None:
        return ""
    when = ""
    if result.get("finished_at"):
        import time

        when = f"measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(result['finished_at']))}"
    who = result.get("workload") or result.get("url") or ""
    return (f'<h2>Capacity (last probe)</h2><div class="card probe" id="probe"><p class="muted">{html.escape(who)} '
            f"&middot; {html.escape(when)} &middot; <code>headroom probe</code> (docs/probe.md)</p>"
            f"{chart.figure(result, answer.capacity_answer(result))}</div>")


def page(state: State, telemetry_path: str) -> bytes:
    snap = state.snapshot
    s = status(state, snap)
    e = html.escape
    # the charts end at the snapshot the page shows (the sampler may have appended a newer sample since)
    now = snap.sample.monotonic if snap is not None else 0.0
    window = list(getattr(state, "window", ()) or ())
    gpu_series, serving_series = charts.gpu_series(window, now), charts.serving_series(window, now)
    axis = (now, charts.span_for(window, now))
    thresholds = {**DEFAULT_THRESHOLDS, **(getattr(getattr(snap, "findings", None), "thresholds", None) or {})}
    sim = (f'<p class="warn">Simulated host: scenario <b>{e(s["simulated_scenario"])}</b> '
           "(GPU values come from a scenario, not a driver).</p>") if s["simulated_scenario"] else ""
    failing = [f"<li>{e(k)}: {e(v['error'] or '')}</li>" for k, v in s["collectors"].items() if not v["ok"]]
    host = s.get("host") or {}
    cost = host.get("gpu_idle_cost_total")
    host_line = ""
    if host:
        host_line = (f"<p>{host['gpus_idle']} of {len(s['gpus'])} {'GPU' if len(s['gpus']) == 1 else 'GPUs'} idle now; "
                     f"{host['gpu_idle_seconds_total'] / 3600:.2f} idle GPU-hours since start"
                     + (f", costing {cost:.2f} {e(host.get('currency') or '')}" if cost is not None else "") + ".</p>")
    workloads = "".join(_workload_card(w, _serving_charts(w, serving_series.get(w["name"]), axis, thresholds))
                        for w in s["workloads"]) or (
        '<p class="muted">No workload declared. Declare one under <code>workloads:</code> in config.yaml to see '
        "what limits it and how much room is left.</p>")
    gpus = "".join(_gpu_card(g, gpu_series, axis, thresholds) for g in s["gpus"]) or '<p class="muted">No GPU found.</p>'
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>headroom</title>
<meta http-equiv="refresh" content="5"><meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<style>{_STYLE}</style></head>
<body data-timestamp="{s.get('timestamp', '')}"><h1>headroom</h1>
<p class="muted">version {e(__version__)} &middot; health: <b>{e(s['health'])}</b> &middot;
<a href="{e(telemetry_path)}">Metrics</a> &middot; <a href="/healthz">Health</a> &middot;
<a href="/api/v1/status">Status (JSON)</a></p>
{sim}{host_line}
<h2>Workloads</h2>{workloads}
{probe_section(snap)}
<h2>GPUs</h2>{gpus}
{"<h2>Failing collectors</h2><ul>" + "".join(failing) + "</ul>" if failing else ""}
</body></html>
"""
    return body.encode()

"""The landing page (``/``) and the JSON status (``/api/v1/status``), built from the current Snapshot.

The page answers the product's two questions without Grafana: per workload and per GPU, what limits it
now (with the evidence) and how much room is left, plus small charts of the last minutes drawn as
inline SVG from the sampler's window. No external assets: it works offline and behind any proxy. It
refreshes itself every few seconds.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from headroom import __version__
from headroom.samples import NvmlSample, Sample
from headroom.units import format_size

CHART_SECONDS = 300.0
GIB = 2**30


# -------------------------------------------------------------------------------------------- JSON
def status(state: Any) -> dict[str, Any]:
    """A JSON-able summary of the current snapshot: health, collectors, GPUs and workloads with verdicts."""
    from headroom.exposition.server import health

    snap = state.snapshot
    ok, reason, degraded = health(state, snap)  # as /healthz says it: "ok; degraded: nvml: ..." with NVML down
    out: dict[str, Any] = {
        "version": __version__,
        "healthy": ok,
        "health": reason,
        "degraded": degraded,
        "simulated_scenario": getattr(snap, "scenario", None) if snap else None,
        "collectors": {},
        "gpus": [],
        "workloads": [],
    }
    if snap is None:
        return out
    out["timestamp"] = snap.sample.timestamp
    out["interval_seconds"] = snap.interval
    for name, r in snap.sample.sources.items():
        out["collectors"][name] = {"ok": r.ok, "duration_seconds": round(r.duration_seconds, 6), "error": r.error}
    f = snap.findings
    verdicts = {g.index: g for g in getattr(f, "gpu_findings", ())}
    statuses = {getattr(s, "name", None): s for s in getattr(f, "workloads", ())}
    out["workloads"] = [_workload_status(wf, statuses.get(wf.name)) for wf in getattr(f, "workload_findings", ())]
    if f is not None and getattr(f, "gpu_findings", ()):
        out["host"] = {"gpus_idle": f.host.gpus_idle, "gpu_idle_seconds_total": f.host.gpu_idle_seconds_total,
                       "gpu_idle_cost_total": f.host.gpu_idle_cost_total, "currency": f.host.currency}
    identity = snap.sample.data("identity")
    if identity is not None:
        out["identity"] = _identity_status(identity, getattr(f, "workloads", ()) or ())
    nvml = snap.sample.data("nvml")
    if isinstance(nvml, NvmlSample):
        out["driver_version"] = nvml.driver_version
        for g in nvml.gpus:
            out["gpus"].append({
                "index": g.index, "uuid": g.uuid, "name": g.name, "pci_bus_id": g.pci_bus_id, "up": g.up,
                "error": g.error, "utilization_ratio": g.utilization_ratio,
                "memory_used_bytes": g.memory_used_bytes, "memory_total_bytes": g.memory_total_bytes,
                "power_watts": g.power_watts, "power_limit_watts": g.power_limit_watts,
                "temperature_celsius": g.temperature_celsius,
                # the GPU's own limits the analysis judges heat against (NVML; absent where it gives none)
                "temperature_thresholds_celsius": {k: v for k, v in (
                    ("max_operating", g.temperature_max_operating_celsius), ("slowdown", g.temperature_slowdown_celsius),
                    ("shutdown", g.temperature_shutdown_celsius),
                    ("memory_max_operating", g.memory_temperature_max_operating_celsius)) if v is not None},
                **(_verdict(verdicts[g.index].verdict) if g.index in verdicts else {}),
                **({"idle": verdicts[g.index].idle} if g.index in verdicts else {}),
                # each clock-event reason's share of the short window: distinct causes (docs/analysis.md)
                **({"clock_event_shares": dict(verdicts[g.index].clock_events)} if g.index in verdicts else {}),
            })  # fmt: skip
    return out


def _identity_status(identity: Any, statuses: Any) -> dict[str, Any]:
    """Identity sources (kubelet, job mapping) with their errors, the cap, and the automatic workloads."""
    auto = {st.name: st for st in statuses if getattr(st, "source", "declared") == "auto"}
    return {
        "sources": [{"name": s.name, "up": s.up, "error": s.error, "unknown_devices": list(s.unknown_devices)}
                    for s in identity.sources],
        "max_workloads": identity.max_groups,
        "dropped_total": identity.dropped_total,
        "workloads": [{
            "name": g.name, "kind": g.kind, "namespace": g.namespace, "pod": g.pod, "container": g.container,
            "pod_uid": g.pod_uid, "hpc_job": g.job_id, "devices": list(g.gpus),
            "processes": auto[g.name].processes if g.name in auto else g.processes,
            "gpu_memory_used_bytes": auto[g.name].gpu_memory_used_bytes if g.name in auto else None,
            "declared_profile_wins": g.name not in auto,
            **({"launcher": _launcher_status(g, auto.get(g.name))} if getattr(g, "launcher", None) is not None else {}),
        } for g in identity.groups],
    }  # fmt: skip


def _launcher_status(g: Any, st: Any) -> dict[str, Any]:
    """What an automatic workload's launcher said on its command line, where its model config came from, and
    why it has no expected memory when it has none (workload/launchers.py)."""
    from dataclasses import asdict

    given = {k: v for k, v in asdict(g.launcher).items() if v not in (None, "", ())}
    model = g.model
    return {
        **given,
        "model_config": model.source if model is not None and model.source else None,
        "model_config_error": model.error if model is not None and model.error else None,
        "estimate_error": getattr(st, "estimate_error", None) if st is not None else None,
    }


def _verdict(v: Any) -> dict[str, Any]:
    """Primary, candidate, scores and the evidence behind them, strongest first; plus, under "none", what says
    nothing limits it (idle for lack of work or demand, a serving runtime's own limits), where something does."""
    order = sorted(v.scores, key=lambda r: -v.scores[r])
    evidence = {r: v.evidence[r] for r in order}
    if "none" in v.evidence:
        evidence["none"] = v.evidence["none"]
    return {
        "primary_bottleneck": v.primary,
        "candidate": v.candidate,
        "scores": {r: v.scores[r] for r in order},
        "long_window_scores": dict(v.long_scores),
        "evidence": evidence,
    }


def _workload_status(wf: Any, st: Any) -> dict[str, Any]:
    from headroom.samples import to_jsonable

    out = {"name": wf.name, "gpus": list(wf.gpus), **_verdict(wf.verdict), "headroom": to_jsonable(wf.headroom)}
    neighbours = getattr(wf, "neighbours", None)
    if neighbours:  # who else presses on the host's CPU, disks or memory (never a metric label)
        out["neighbours"] = {r: [{"pid": n.pid, "name": n.name, "user": n.user, "workload": n.workload,
                                  "cpu_cores": n.cpu_cores, "cpu_share": n.cpu_share,
                                  "io_bytes_per_second": n.io_bytes_per_second, "io_share": n.io_share,
                                  "rss_bytes": n.rss_bytes, "memory_share": n.memory_share} for n in found]
                             for r, found in neighbours.items()}
    serving = getattr(wf, "serving", None)
    if serving is not None:
        out["serving"] = {**to_jsonable(serving), "ttft": {str(q): v for q, v in serving.ttft.items()},
                          "itl": {str(q): v for q, v in serving.itl.items()},
                          "headroom": to_jsonable(getattr(wf, "serving_headroom", None)),
                          "slo": to_jsonable(getattr(wf, "slos", ()))}
    if st is not None:
        est = getattr(st, "estimate", None)
        measured = getattr(st, "measured", None)
        out["source"] = getattr(st, "source", "declared")
        if out["source"] == "auto":  # found without a profile (pod, job, launcher): what it was recognised as
            out["identity"] = {"kind": getattr(st, "kind", ""), "model": getattr(st, "model", ""),
                               "runtime": getattr(st, "runtime", "")}
        out["measured"] = {
            "processes": getattr(st, "processes", None),
            # no process rule (processes None): nothing is measured, which is not the same as 0 bytes
            "gpu_memory_used_bytes": (getattr(st, "gpu_memory_used_bytes", None)
                                      if getattr(st, "processes", None) is not None else None),
            "resident_memory_bytes": getattr(measured, "resident_memory_bytes", None),
        }
        out["expected"] = {
            "gpu_memory_peak_bytes": getattr(st, "expected_peak_bytes", None),
            "components": {c.name: c.bytes for c in est.components} if est is not None else None,
            "estimate_error": getattr(st, "estimate_error", None),
        }
    return out


def status_json(state: Any) -> bytes:
    return json.dumps(status(state), indent=1).encode()


# -------------------------------------------------------------------------------------------- page
def _fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.0f} %"


def _fmt_gib(n: float | None) -> str:
    """A size on the page, its unit chosen by its size (units.format_size, as in the evidence)."""
    return "-" if n is None else format_size(n)


def sparkline(points: Sequence[tuple[float, float]], top: float, label: str, width: int = 220,
              height: int = 36, color: str = "#2b6cb0") -> str:
    """An inline SVG line chart of (t, value) points scaled to [0, top], newest at the right."""
    if len(points) < 2 or top <= 0:
        return f'<svg class="spark" width="{width}" height="{height}" role="img" aria-label="{html.escape(label)}"></svg>'
    t0, t1 = points[0][0], points[-1][0]
    span = (t1 - t0) or 1.0
    coords = " ".join(f"{(t - t0) / span * (width - 2) + 1:.1f},{height - 1 - min(v / top, 1.0) * (height - 2):.1f}"
                      for t, v in points)
    last = points[-1][1]
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{html.escape(label)}"><title>{html.escape(label)}</title>'
            f'<rect width="{width}" height="{height}" fill="#f7fafc"/>'
            f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{coords}"/>'
            f'<circle cx="{width - 1}" cy="{height - 1 - min(last / top, 1.0) * (height - 2):.1f}" r="2" '
            f'fill="{color}"/></svg>')


def _series(window: Sequence[Sample], uuid: str, read) -> list[tuple[float, float]]:
    if not window:
        return []
    newest = window[-1].monotonic
    out = []
    for s in window:
        if newest - s.monotonic > CHART_SECONDS:
            continue
        nvml = s.data("nvml")
        if not isinstance(nvml, NvmlSample):
            continue
        for g in nvml.gpus:
            if g.uuid == uuid:
                v = read(g)
                if v is not None:
                    out.append((s.monotonic, float(v)))
    return out


_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;max-width:80em;color:#1a202c}
h1{margin:0 0 .2em}h2{margin-top:1.4em}
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #e2e8f0;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#edf2f7}.warn{color:#b7791f}.bad{color:#c53030}.muted{color:#718096}
.pill{display:inline-block;padding:.1em .6em;border-radius:1em;font-weight:600;background:#e2e8f0}
.pill.none{background:#c6f6d5;color:#22543d}.pill.hot{background:#fed7d7;color:#822727}
.card{border:1px solid #e2e8f0;border-radius:.5em;padding:.8em 1em;margin:.8em 0}
.evidence{margin:.3em 0}.scores td{padding:.1em .5em}.spark{vertical-align:middle}
@media (max-width:48em){.charts tr:first-child{display:none}.charts td{display:block;border:0}
.charts td::before{content:attr(data-label);display:block;font-weight:600}}
"""


def _pill(primary: str) -> str:
    cls = "none" if primary == "none" else "hot"
    return f'<span class="pill {cls}" data-bottleneck="{html.escape(primary)}">{html.escape(primary)}</span>'


def _scores_table(v: dict[str, Any]) -> str:
    rows = "".join(f"<tr><td>{html.escape(r)}</td><td>{s:.2f}</td><td class=muted>{html.escape(v['evidence'][r])}</td></tr>"
                   for r, s in list(v["scores"].items())[:4])
    return f'<table class="scores"><tr><th>resource</th><th>score</th><th>evidence</th></tr>{rows}</table>'


def _workload_card(w: dict[str, Any]) -> str:
    e = html.escape
    primary = w["primary_bottleneck"]
    evidence = w["evidence"].get(primary) if primary != "none" else None
    h = w["headroom"]
    room = [
        ("VRAM free", _fmt_gib(h.get("gpu_memory_bytes"))),
        ("more sequences at max context", "-" if h.get("sequences") is None else str(h["sequences"])),
        ("more context tokens", "-" if h.get("context_tokens") is None else str(h["context_tokens"])),
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
    gpus = ", ".join(str(i) for i in w["gpus"]) or "none"
    ident = w.get("identity")
    if ident:  # an automatic workload: say what it was recognised as, so nobody looks for its profile
        found = " ".join(x for x in (ident.get("runtime"), ident.get("model")) if x) or ident.get("kind", "")
        gpus += f" · found automatically ({found}; no profile declared)"
    none_why = w["evidence"].get("none") if primary == "none" else None  # the serving runtime's word
    return (f'<div class="card workload" id="workload-{e(w["name"])}"><h3>{e(w["name"])} {_pill(primary)}</h3>'
            f"<p class=muted>GPUs: {e(gpus)}</p>"
            + (f'<p class="evidence">{e(evidence)}</p>' if evidence else
               f'<p class="evidence muted">{e(none_why or "Nothing limits this workload now.")}</p>')
            + _serving_line(w.get("serving")) + _neighbours_line(w.get("neighbours")) + memory + f"<table><tr><th>headroom</th><th></th></tr>{room_html}</table>"
            + _scores_table(w) + "</div>")


def _neighbours_line(found: dict[str, Any] | None) -> str:
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


def _power_margin(h: dict[str, Any]) -> str:
    """'GPU 0: 5 W, GPU 1: 407 W (412 W summed)': per GPU first, the one at its cap shows; the sum, which would hide
    it beside an idle card, only after."""
    if h.get("power_watts") is None:
        return "-"
    per_gpu = h.get("power_watts_by_gpu") or {}
    if len(per_gpu) <= 1:
        return f"{h['power_watts']:.0f} W"
    detail = ", ".join(f"GPU {i}: {w:.0f} W" for i, w in sorted(per_gpu.items(), key=lambda kv: int(kv[0])))
    return f"{detail} ({h['power_watts']:.0f} W summed)"


def _serving_line(s: dict[str, Any] | None) -> str:
    """The serving runtime's view of a workload with an endpoint: KV cache, queue, latency, or why it is unread."""
    if not s:
        return ""
    e = html.escape
    if not s.get("up"):
        return f'<p class="serving warn">Serving endpoint {e(s["endpoint"])}: {e(s.get("error") or "not read")}</p>'
    ttft = s.get("ttft") or {}
    itl = s.get("itl") or {}
    latency = ""
    if "0.95" in ttft:
        latency += f", TTFT p95 <b>{ttft['0.95'] * 1000:.0f} ms</b>"
    if "0.95" in itl:
        latency += f", ITL p95 <b>{itl['0.95'] * 1000:.0f} ms</b>"
    return (f'<p class="serving">{e(s.get("runtime") or "")}: KV cache <b>{_fmt_pct(s.get("usage"))}</b> used, '
            f'<b>{s.get("running") or 0:.0f}</b> running, <b>{s.get("waiting") or 0:.0f}</b> waiting{latency}</p>')


def _gpu_card(g: dict[str, Any], window: Sequence[Sample]) -> str:
    e = html.escape
    primary = g.get("primary_bottleneck", "none")
    if not g["up"]:
        return (f'<div class="card gpu"><h3>GPU {g["index"]} {e(g["name"])} <span class="bad">DOWN</span></h3>'
                f"<p>{e(g.get('error') or '')}</p></div>")
    evidence = g.get("evidence", {}).get(primary) if primary != "none" else None
    util = sparkline(_series(window, g["uuid"], lambda x: x.utilization_ratio), 1.0,
                     f"GPU {g['index']} utilization, last 5 minutes")
    mem = sparkline(_series(window, g["uuid"], lambda x: x.memory_used_bytes), float(g["memory_total_bytes"] or 1),
                    f"GPU {g['index']} memory used, last 5 minutes", color="#805ad5")
    power = sparkline(_series(window, g["uuid"], lambda x: x.power_watts), float(g["power_limit_watts"] or 1),
                      f"GPU {g['index']} power, last 5 minutes", color="#dd6b20")
    power_text = "-" if g["power_watts"] is None else f"{g['power_watts']:.0f} / {g['power_limit_watts'] or 0:.0f} W"
    return (f'<div class="card gpu" id="gpu-{g["index"]}"><h3>GPU {g["index"]} {e(g["name"])} {_pill(primary)}'
            f"{' <span class=muted>(idle)</span>' if g.get('idle') else ''}</h3>"
            + (f'<p class="evidence">{e(evidence)}</p>' if evidence else "")
            + '<table class="charts"><tr><th>busy</th><th>memory</th><th>power</th></tr>'
            f"<tr><td data-label=busy>{util} {_fmt_pct(g['utilization_ratio'])}</td>"
            f"<td data-label=memory>{mem} {_fmt_gib(g['memory_used_bytes'])} / {_fmt_gib(g['memory_total_bytes'])}</td>"
            f"<td data-label=power>{power} {power_text}</td></tr></table>"
            + (_scores_table(g) if "scores" in g else "") + "</div>")


def page(state: Any, telemetry_path: str) -> bytes:
    s = status(state)
    e = html.escape
    window = list(getattr(state, "window", ()) or ())
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
    workloads = "".join(_workload_card(w) for w in s["workloads"]) or (
        '<p class="muted">No workload declared. Declare one under <code>workloads:</code> in config.yaml to see '
        "what limits it and how much room is left.</p>")
    gpus = "".join(_gpu_card(g, window) for g in s["gpus"]) or '<p class="muted">No GPU found.</p>'
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>headroom</title>
<meta http-equiv="refresh" content="5"><meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<style>{_STYLE}</style></head>
<body><h1>headroom</h1>
<p class="muted">version {e(__version__)} &middot; health: <b>{e(s['health'])}</b> &middot;
<a href="{e(telemetry_path)}">Metrics</a> &middot; <a href="/healthz">Health</a> &middot;
<a href="/api/v1/status">Status (JSON)</a></p>
{sim}{host_line}
<h2>Workloads</h2>{workloads}
<h2>GPUs</h2>{gpus}
{"<h2>Failing collectors</h2><ul>" + "".join(failing) + "</ul>" if failing else ""}
</body></html>
"""
    return body.encode()

"""The landing page (``/``) and the JSON status (``/api/v1/status``), built from the current Snapshot."""

from __future__ import annotations

import html
import json
from typing import Any

from headroom import __version__
from headroom.samples import NvmlSample


def status(state: Any) -> dict[str, Any]:
    """A JSON-able summary of the current snapshot."""
    snap = state.snapshot
    ok, reason = state.healthy()
    out: dict[str, Any] = {
        "version": __version__,
        "healthy": ok,
        "health": reason,
        "simulated_scenario": getattr(snap, "scenario", None) if snap else None,
        "collectors": {},
        "gpus": [],
    }
    if snap is None:
        return out
    out["timestamp"] = snap.sample.timestamp
    out["interval_seconds"] = snap.interval
    for name, r in snap.sample.sources.items():
        out["collectors"][name] = {"ok": r.ok, "duration_seconds": round(r.duration_seconds, 6), "error": r.error}
    f = snap.findings
    verdicts = {g.index: g for g in getattr(f, "gpu_findings", ())}
    out["workloads"] = [_workload_status(wf) for wf in getattr(f, "workload_findings", ())]
    if f is not None and getattr(f, "gpu_findings", ()):
        out["host"] = {"gpus_idle": f.host.gpus_idle, "gpu_idle_seconds_total": f.host.gpu_idle_seconds_total,
                       "gpu_idle_cost_total": f.host.gpu_idle_cost_total}
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
                **(_verdict(verdicts[g.index].verdict) if g.index in verdicts else {}),
                **({"idle": verdicts[g.index].idle} if g.index in verdicts else {}),
            })
    return out


def _verdict(v: Any) -> dict[str, Any]:
    """Primary, candidate, scores and the evidence behind them, strongest first."""
    order = sorted(v.scores, key=lambda r: -v.scores[r])
    return {
        "primary_bottleneck": v.primary,
        "candidate": v.candidate,
        "scores": {r: v.scores[r] for r in order},
        "long_window_scores": dict(v.long_scores),
        "evidence": {r: v.evidence[r] for r in order},
    }


def _workload_status(wf: Any) -> dict[str, Any]:
    from headroom.samples import to_jsonable

    return {"name": wf.name, "gpus": list(wf.gpus), **_verdict(wf.verdict), "headroom": to_jsonable(wf.headroom)}


def status_json(state: Any) -> bytes:
    return json.dumps(status(state), indent=1, sort_keys=False).encode()


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.1f} GiB"


def page(state: Any, telemetry_path: str) -> bytes:
    s = status(state)
    e = html.escape
    rows = []
    for g in s["gpus"]:
        util = "-" if g["utilization_ratio"] is None else f"{g['utilization_ratio'] * 100:.0f} %"
        power = "-" if g["power_watts"] is None else f"{g['power_watts']:.0f} W"
        rows.append(
            f"<tr><td>{g['index']}</td><td>{e(g['name'])}</td><td><code>{e(g['uuid'])}</code></td>"
            f"<td>{e(g['pci_bus_id'])}</td><td>{'up' if g['up'] else 'DOWN: ' + e(g['error'] or '')}</td>"
            f"<td>{util}</td><td>{_gib(g['memory_used_bytes'])} / {_gib(g['memory_total_bytes'])}</td>"
            f"<td>{power}</td></tr>"
        )
    gpus = ("<table><tr><th>GPU</th><th>name</th><th>uuid</th><th>PCI</th><th>state</th><th>busy</th>"
            "<th>memory</th><th>power</th></tr>" + "".join(rows) + "</table>") if rows else "<p>No GPU found.</p>"
    failing = [f"<li>{e(k)}: {e(v['error'] or '')}</li>" for k, v in s["collectors"].items() if not v["ok"]]
    sim = (f"<p class=warn>Simulated host: scenario <b>{e(s['simulated_scenario'])}</b> "
           "(values do not come from a driver).</p>") if s["simulated_scenario"] else ""
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>headroom</title>
<meta http-equiv="refresh" content="5">
<style>body{{font-family:sans-serif;margin:2em;max-width:72em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:.3em .6em;text-align:left}}.warn{{color:#a60}}</style></head>
<body><h1>headroom {e(__version__)}</h1>
<p>GPU host monitoring agent that knows the AI workload. Health: <b>{e(s['health'])}</b>.</p>
{sim}
<p><a href="{e(telemetry_path)}">Metrics</a> &middot; <a href="/healthz">Health</a> &middot;
<a href="/api/v1/status">Status (JSON)</a></p>
<h2>GPUs</h2>{gpus}
{"<h2>Failing collectors</h2><ul>" + "".join(failing) + "</ul>" if failing else ""}
</body></html>
"""
    return body.encode()

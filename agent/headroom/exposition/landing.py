"""The landing page (``/``) and the JSON status (``/api/v1/status``), built from the current Snapshot.

The page answers the product's two questions without Grafana: per workload and per GPU, what limits it
now (with the evidence) and how much room is left, plus small charts of the last minutes drawn as
inline SVG from the sampler's window. No external assets: it works offline and behind any proxy. It
refreshes itself every few seconds.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, cast

from headroom import __version__
from headroom.analysis.bottleneck import DEFAULT_THRESHOLDS
from headroom.exposition import charts
from headroom.exposition.charts import Mark
from headroom.exposition.health import State, health
from headroom.jsontypes import JsonDoc
from headroom.samples import NvmlSample
from headroom.units import format_size

if TYPE_CHECKING:
    from headroom.analysis.bottleneck import Verdict
    from headroom.analysis.health import GpuHealth
    from headroom.analysis.pipeline import Findings, WorkloadFinding
    from headroom.probe.store import LastResult
    from headroom.samples import IdentityGroup, IdentitySample, Launcher, Sample, Snapshot, TickTiming
    from headroom.workload.attribution import WorkloadStatus

GIB = 2**30

Json = JsonDoc  # the status API's JSON document (/api/v1/status) as built and read here


# -------------------------------------------------------------------------------------------- JSON
def status(state: State, snap: Snapshot | None = None) -> Json:
    """A JSON-able summary of the current snapshot (or of ``snap``): health, collectors, GPUs and workloads with
    verdicts."""
    snap = state.snapshot if snap is None else snap
    ok, reason, degraded = health(state, snap)  # as /healthz says it: "ok; degraded: nvml: ..." with NVML down
    out: Json = {
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
    timing: TickTiming | None = getattr(snap, "timing", None)
    if timing is not None:
        out["agent"] = timing_status(timing, snap.tick_duration_seconds)
    f = cast("Findings | None", snap.findings)  # samples.Findings: the pipeline's is the one implementation
    verdicts = {g.index: g for g in getattr(f, "gpu_findings", ())}
    health_of = {h.index: h for h in getattr(f, "gpu_health", ())}
    statuses = {getattr(s, "name", None): s for s in getattr(f, "workloads", ())}
    out["workloads"] = [_workload_status(wf, statuses.get(wf.name)) for wf in getattr(f, "workload_findings", ())]
    pair = _newest_pair(getattr(state, "window", ()) or (), snap)
    out["now"] = host_now(*pair)
    for w in out["workloads"]:
        w["now"] = workload_now(pair[1], w["name"], w["gpus"])
    if f is not None and bool(getattr(f, "gpu_findings", ())):
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
                "sm_active_ratio": g.sm_active_ratio,  # GPM (Hopper and later); None where the GPU has none
                # the GPU's own limits the analysis judges heat against (NVML; absent where it gives none)
                "temperature_thresholds_celsius": {k: v for k, v in (
                    ("max_operating", g.temperature_max_operating_celsius), ("slowdown", g.temperature_slowdown_celsius),
                    ("shutdown", g.temperature_shutdown_celsius),
                    ("memory_max_operating", g.memory_temperature_max_operating_celsius)) if v is not None},
                # the one the analysis judges heat against: max operating, else slowdown, else the configured default
                **({"thermal_limit_celsius": verdicts[g.index].thermal_limit_celsius,
                    "thermal_limit_source": verdicts[g.index].thermal_limit_source} if g.index in verdicts else {}),
                **(_verdict(verdicts[g.index].verdict) if g.index in verdicts else {}),
                **({"idle": verdicts[g.index].idle, "idle_seconds": verdicts[g.index].idle_seconds,
                    "allocated_to": list(verdicts[g.index].allocated_to)} if g.index in verdicts else {}),
                **({"health": _health(health_of[g.index], snap.sample.monotonic)} if g.index in health_of else {}),
                # each clock-event reason's share of the short window: distinct causes (docs/analysis.md)
                **({"clock_event_shares": dict(verdicts[g.index].clock_events)} if g.index in verdicts else {}),
            })  # fmt: skip
    return out


def _health(h: GpuHealth, now: float) -> Json:
    """A GPU's health (analysis/health.py): healthy or unhealthy, the reason in one line, and each condition that
    holds with its reason, the action it asks for (reset, reboot, service, inspect) and how long it has held."""
    return {"status": h.status, "reason": h.reason,
            "conditions": [{"condition": c.condition, "reason": c.reason, "action": c.action,
                            "held_seconds": round(max(0.0, now - c.since), 3)} for c in h.conditions]}


def timing_status(t: TickTiming, duration: float) -> Json:
    """How the agent kept its schedule over the timing window (sampler.TIMING_WINDOW_SECONDS): the last tick's
    lateness and duration, and their median, p95 and max over the window's ticks (seconds)."""
    from headroom.probe.stats import percentile

    def spread(last: float | None, xs: tuple[float, ...]) -> dict[str, float | None]:
        figures = {"last": last, "median": percentile(xs, 0.5), "p95": percentile(xs, 0.95), "max": max(xs, default=None)}
        return {k: None if v is None else round(v, 6) for k, v in figures.items()}

    return {"window_seconds": t.window_seconds, "ticks_in_window": len(t.recent_duration_seconds),
            "tick_lateness_seconds": spread(t.lateness_seconds, t.recent_lateness_seconds),
            "tick_duration_seconds": spread(duration, t.recent_duration_seconds),
            "missed_ticks_total": t.missed_total}


def _newest_pair(window: Sequence[Sample], snap: Snapshot) -> tuple[Sample | None, Sample]:
    """(the sample before the snapshot's, the snapshot's): what ``now`` values come from. Only the window's tail
    is looked at (the sampler may have appended a newer sample than the snapshot's since)."""
    now = snap.sample.monotonic
    before = None
    for i, s in enumerate(reversed(window)):
        if i >= 4:
            break
        if s.monotonic < now:
            before = s
            break
    return before, snap.sample


def _per_second(a: float | None, b: float | None, seconds: float) -> float | None:
    return None if a is None or b is None or seconds <= 0 or b < a else (b - a) / seconds


def host_now(before: Sample | None, last: Sample) -> dict[str, float | None]:
    """The host as the newest tick saw it (rates over the last tick): what `headroom probe` records per step
    (probe/host.py). None where a collector gave nothing (or, for a rate, before the second tick)."""
    from headroom.analysis import rates
    from headroom.samples import DiskSample, MemorySample, NetSample, ShmSample

    out: dict[str, float | None] = dict.fromkeys(HOST_NOW_KEYS)
    dt = last.monotonic - before.monotonic if before is not None else 0.0
    if before is not None:
        out["cpu_busy_ratio"] = rates.cpu_utilization([before, last], 0.0)
    mem = last.data("memory")
    if isinstance(mem, MemorySample) and mem.available_bytes is not None:
        out["host_memory_used_bytes"] = mem.total_bytes - mem.available_bytes
    shm = last.data("shm")
    if isinstance(shm, ShmSample) and shm.mounts:
        out["shm_used_bytes"] = max(m.used_bytes for m in shm.mounts)
    disk, disk0 = last.data("disk"), before.data("disk") if before is not None else None
    if isinstance(disk, DiskSample) and isinstance(disk0, DiskSample) and dt > 0:
        old = {d.device: d for d in disk0.devices}
        busy = [_per_second(old[d.device].io_time_seconds, d.io_time_seconds, dt) for d in disk.devices
                if d.device in old]
        moved = [_per_second(old[d.device].read_bytes + old[d.device].written_bytes, d.read_bytes + d.written_bytes,
                             dt) for d in disk.devices if d.device in old]
        out["disk_busy_ratio"] = min(1.0, max((b for b in busy if b is not None), default=0.0)) if busy else None
        out["disk_bytes_per_second"] = max((m for m in moved if m is not None), default=None)
    net, net0 = last.data("net"), before.data("net") if before is not None else None
    if isinstance(net, NetSample) and isinstance(net0, NetSample) and dt > 0:
        old_net = {d.device: d for d in net0.devices}
        moved = [_per_second(old_net[d.device].receive_bytes + old_net[d.device].transmit_bytes,
                             d.receive_bytes + d.transmit_bytes, dt) for d in net.devices if d.device in old_net]
        out["network_bytes_per_second"] = max((m for m in moved if m is not None), default=None)
    return out


HOST_NOW_KEYS = ("cpu_busy_ratio", "host_memory_used_bytes", "shm_used_bytes", "disk_busy_ratio",
                 "disk_bytes_per_second", "network_bytes_per_second")
WORKLOAD_NOW_KEYS = ("gpu_memory_used_bytes", "gpu_busy_ratio", "sm_active_ratio", "kv_cache_usage_ratio",
                     "kv_cache_capacity_tokens", "requests_running", "requests_waiting", "preemptions_total")


def workload_now(last: Sample, name: str, gpus: Iterable[int]) -> dict[str, float | None]:
    """A workload's GPUs (memory summed, busy and SM activity of the busiest) and its serving runtime's KV cache,
    queue and preemptions as the newest tick read them (``now`` in the status API)."""
    from headroom.samples import ServingSample

    out: dict[str, float | None] = dict.fromkeys(WORKLOAD_NOW_KEYS)
    nvml = last.data("nvml")
    mine = [g for g in getattr(nvml, "gpus", ()) if g.up and g.index in set(gpus)] if isinstance(nvml, NvmlSample) \
        else []
    used = [g.memory_used_bytes for g in mine if g.memory_used_bytes is not None]
    busy = [g.utilization_ratio for g in mine if g.utilization_ratio is not None]
    sm = [g.sm_active_ratio for g in mine if g.sm_active_ratio is not None]
    out["gpu_memory_used_bytes"] = sum(used) if used else None
    out["gpu_busy_ratio"] = max(busy) if busy else None
    out["sm_active_ratio"] = max(sm) if sm else None
    serving = last.data("serving")
    for e in serving.endpoints if isinstance(serving, ServingSample) else ():
        if e.workload == name and e.up:
            out.update(kv_cache_usage_ratio=e.kv_cache_usage_ratio, kv_cache_capacity_tokens=e.kv_cache_capacity_tokens,
                       requests_running=e.requests_running, requests_waiting=e.requests_waiting,
                       preemptions_total=e.preemptions_total)
    return out


def _identity_status(identity: IdentitySample, statuses: Iterable[WorkloadStatus]) -> Json:
    """Identity sources (kubelet, job mapping) with their errors, the cap, and the automatic workloads."""
    auto = {st.name: st for st in statuses if getattr(st, "source", "declared") == "auto"}
    return {
        "sources": [{"name": s.name, "up": s.up, "error": s.error, "unknown_devices": list(s.unknown_devices),
                     "refused": list(s.refused)} for s in identity.sources],
        "max_workloads": identity.max_groups,
        "dropped_total": identity.dropped_total,
        "workloads": [{
            "name": g.name, "kind": g.kind, "namespace": g.namespace, "pod": g.pod, "container": g.container,
            "pod_uid": g.pod_uid, "hpc_job": g.job_id, "devices": list(g.gpus),
            "processes": auto[g.name].processes if g.name in auto else g.processes,
            "gpu_memory_used_bytes": auto[g.name].gpu_memory_used_bytes if g.name in auto else None,
            "declared_profile_wins": g.name not in auto,
            # why it has no expected memory ("automatic workload: no profile to size it", or its launcher's reason)
            "estimate_error": auto[g.name].estimate_error if g.name in auto else None,
            **({"launcher": _launcher_status(g, auto.get(g.name))} if getattr(g, "launcher", None) is not None else {}),
        } for g in identity.groups],
    }  # fmt: skip


def _launcher_status(g: IdentityGroup, st: WorkloadStatus | None) -> Json:
    """What an automatic workload's launcher said on its command line, where its model config came from, and
    why it has no expected memory when it has none (workload/launchers.py)."""
    from dataclasses import asdict

    launcher = cast("Launcher", g.launcher)  # (called for a group with one)
    given = {k: v for k, v in asdict(launcher).items() if v not in (None, "", ())}
    model = g.model
    return {
        **given,
        "model_config": model.source if model is not None and model.source else None,
        "model_config_error": model.error if model is not None and model.error else None,
        "estimate_error": getattr(st, "estimate_error", None) if st is not None else None,
    }


def _verdict(v: Verdict) -> Json:
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
        **_verdict_actions(v),
    }


def _remedy(v: Verdict, resource: str) -> Json | None:
    found = getattr(v, "remedies", {}).get(resource)
    return None if found is None else {"text": found.text, "runbook_url": found.runbook_url,
                                       "runbook_path": found.runbook_path}


def _verdict_actions(v: Verdict) -> Json:
    """The primary's remedy, and the pending candidate (resource, score, how long it has held, when it will be
    confirmed if it holds, its evidence and remedy); None where there is none."""
    pending = None
    if getattr(v, "is_pending", False):
        pending = {"resource": v.pending, "score": v.scores.get(v.pending), "held_seconds": v.pending_seconds,
                   "confirm_in_seconds": v.confirm_in_seconds, "evidence": v.evidence.get(v.pending),
                   "remedy": _remedy(v, v.pending)}
    return {"remedy": _remedy(v, v.primary), "pending": pending}


def _workload_status(wf: WorkloadFinding, st: WorkloadStatus | None) -> Json:
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
        # its per-scrape figures stay out (the verdict's evidence quotes their counts): state, reason and the rest in
        out["serving"] = {**{k: v for k, v in to_jsonable(serving).items() if k != "scrapes"},
                          "ttft": {str(q): v for q, v in serving.ttft.items()},
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
            # found in its process tree (issue 25): summed (the metric) and per rank (pid -> its worker pids)
            "dataloader_workers": getattr(st, "dataloader_workers", None),
            "ranks": ({str(r): list(ws) for r, ws in sorted(measured.ranks.items())}
                      if measured is not None and getattr(measured, "ranks", None) else None),
        }
        declared = getattr(st, "declared_dataloader_workers", None)
        if declared is not None:
            out["declared"] = {"dataloader_workers": declared}
        problem = getattr(st, "dataloader_workers_problem", None)
        if problem:  # a declared count that disagrees with what runs: said, never silently used
            out["problems"] = [problem]
        out["expected"] = {
            "gpu_memory_peak_bytes": getattr(st, "expected_peak_bytes", None),
            "components": {c.name: c.bytes for c in est.components} if est is not None else None,
            "estimate_error": getattr(st, "estimate_error", None),
        }
    return out


def status_json(state: State) -> bytes:
    return json.dumps(status(state), indent=1).encode()


# -------------------------------------------------------------------------------------------- page
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

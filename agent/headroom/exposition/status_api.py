"""The JSON status (``/api/v1/status``), built from the current Snapshot: health, collectors, GPUs and workloads
with their verdicts, evidence and headroom, and the host's and each workload's figures of the newest tick.

The landing page (landing.py) reads the same document; ``headroom probe`` (probe/host.py) takes its ``now`` section.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, cast

from headroom import __version__
from headroom.exposition.health import State, health
from headroom.jsontypes import JsonDoc
from headroom.samples import NvmlSample

if TYPE_CHECKING:
    from headroom.analysis.bottleneck import Verdict
    from headroom.analysis.health import GpuHealth
    from headroom.analysis.pipeline import Findings, WorkloadFinding
    from headroom.samples import IdentityGroup, IdentitySample, Launcher, Sample, Snapshot, TickTiming
    from headroom.workload.attribution import WorkloadStatus

Json = JsonDoc  # the status API's JSON document (/api/v1/status) as built here and read by the landing page


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

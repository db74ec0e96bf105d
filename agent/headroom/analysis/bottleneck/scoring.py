"""Scoring: the verdict of one GPU on its own (``score_gpu``) and of one workload from its GPUs, its processes, the
host and its serving runtime (``score_workload``): the rules' results, the demand that decides whether the
starvation rules count (``cpu_demand``, ``_no_demand``), the straggler of a multi-GPU workload (``straggler``) and
what the serving runtime says (``_serving_verdict``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from headroom.analysis import serving as serving_rules
from headroom.analysis.bottleneck.evidence import NONE, RESOURCES, STARVATION_RULES, Result, Scored, pct
from headroom.analysis.bottleneck.gpu import (
    GpuRules,
    Reserved,
    not_computing,
    reserved_by,
    rule_gpu_compute,
    rule_gpu_memory,
    rule_gpu_power,
    rule_gpu_thermal,
)
from headroom.analysis.bottleneck.neighbours import _name_neighbours
from headroom.analysis.bottleneck.starvation import (
    HostView,
    host_view,
    rule_cpu,
    rule_disk_io,
    rule_host_memory,
    rule_network,
    rule_shared_memory,
    starvation,
)
from headroom.analysis.bottleneck.verdict import CPU_WORK_PRECEDES, Verdict, _verdict
from headroom.analysis.signals import GpuSignals, HostSignals, WorkloadSignals

if TYPE_CHECKING:
    from headroom.analysis.serving import ServingSignals
    from headroom.workload.profiles.types import WorkloadProfile


def _without_demand(results: dict[str, Result], why: str) -> dict[str, Result]:
    """No demand (the GPU idle for lack of work): the starvation rules say what they saw but score 0."""
    out = dict(results)
    for r in STARVATION_RULES:
        out[r] = Scored(0.0, f"{results[r][1]}; not limiting: {why}", False)
    return out


def score_gpu(g: GpuSignals, h: HostSignals, t: Mapping[str, float], reserved: Reserved | None = None,
              view: HostView | None = None, rules: GpuRules | None = None) -> Verdict:
    """Scores for one GPU on its own (also for GPUs no profile claims): host rules use host signals only.
    ``reserved``: the serving runtime on this GPU that reserves its memory up front (``reserved_by``).
    ``view``: host_view(h, t), ``rules``: a GpuRules, when the caller has them (one per tick for every GPU and
    workload)."""
    if not g.up:
        return Verdict(dict.fromkeys(RESOURCES, 0.0), dict.fromkeys(RESOURCES, f"GPU {g.index} is down"), NONE)
    view = view or host_view(h, t)
    own = GpuRules.for_thresholds(rules, t)(g)
    starved = starvation(g.busy, t)
    busy_text = f"GPU {g.index} busy {pct(g.busy)}"
    results: dict[str, Result] = {
        "gpu_compute": own["gpu_compute"],
        "gpu_memory": rule_gpu_memory(g, t, None, reserved),
        "gpu_thermal": own["gpu_thermal"],
        "gpu_power": own["gpu_power"],
        "pcie": own["pcie"],
        "nvlink": own["nvlink"],
        "cpu": rule_cpu(starved, busy_text, h, None, t, view=view),
        "host_memory": rule_host_memory(starved, busy_text, h, t, view),
        "shared_memory": rule_shared_memory(starved, busy_text, h, t, workers=None, view=view),
        "disk_io": rule_disk_io(starved, busy_text, h, t, view=view),
        "network": (0.0, "network is judged per distributed workload"),
        "kv_cache": (0.0, "the KV cache is judged per serving workload"),
    }
    idle = _no_demand(g.busy, t, str(g.index))
    if idle is not None:
        v = _verdict(_without_demand(results, idle), t)
        return replace(v, evidence={**v.evidence, NONE: idle})
    return _verdict(results, t)


def cpu_demand(w: WorkloadSignals, serving: ServingSignals | None, t: Mapping[str, float]) -> tuple[float, str | None]:
    """(demand, idle sentence or None) of work without a GPU, which has no GPU to wait: its own work shows the
    demand a GPU's busy ratio shows for GPU work. Requests running or waiting at its serving runtime, or its
    processes using at least demand_cores, count in full (1); its processes' cores unknown but processes seen
    count in full too (host-wide signals then speak, as for a GPU no profile claims); none of that is idle (0)."""
    if serving is not None and getattr(serving, "up", False) and \
            ((getattr(serving, "running", None) or 0) > 0 or (getattr(serving, "waiting", None) or 0) > 0):
        return 1.0, None
    cores = w.cores_used
    if cores is None:
        if w.processes:
            return 1.0, None
        return 0.0, "no process of the workload seen: nothing runs that the host could limit"
    if cores >= t["demand_cores"]:
        return 1.0, None
    return 0.0, (f"the workload's processes use {cores:.2f} cores (below {t['demand_cores']:g}) and no request runs "
                 "or waits: idle for lack of work, not starved; host-wide activity is not its bottleneck")


def _no_demand(busy: float | None, t: Mapping[str, float], names: str = "") -> str | None:
    """The sentence for an idle GPU (busy below demand_busy), or None when it shows demand (or busy is unknown)."""
    if busy is None or busy >= t["demand_busy"]:
        return None
    who = f"GPU {names} " if names else "the GPU "
    return (f"{who}busy {pct(busy)} (below {pct(t['demand_busy'])}): idle for lack of work, not starved; "
            "host-wide activity is not its bottleneck")


def straggler(gpus: list[GpuSignals], t: Mapping[str, float]) -> GpuSignals | None:
    """The slowest rank of a workload on several GPUs: the one throttled most (thermal or power reasons for at
    least throttle_share_low of the window, and that much more than any other rank), else one whose SM clock
    is 10 points or more below the others' lowest, or None. Synchronous work (data, tensor, pipeline parallel) waits for it in every collective, so
    its cause is the workload's, however busy the waiting GPUs look."""
    if len(gpus) < 2:
        return None

    def throttled(g: GpuSignals) -> float:
        return max(g.thermal_share, g.power_cap_share)

    worst = max(gpus, key=throttled)
    rest = max(throttled(g) for g in gpus if g is not worst)
    if throttled(worst) >= t["throttle_share_low"] and throttled(worst) - rest >= t["throttle_share_low"]:
        return worst  # throttled clearly more than any other rank (all throttled alike: no straggler)
    clocked = [g for g in gpus if g.sm_clock_ratio is not None]
    if len(clocked) >= 2:
        slow = min(clocked, key=lambda g: g.sm_clock_ratio or 0.0)
        others = min(g.sm_clock_ratio or 0.0 for g in clocked if g is not slow)
        if (slow.sm_clock_ratio or 0.0) <= others - 0.1:
            return slow
    return None


def score_workload(profile: WorkloadProfile, w: WorkloadSignals, gpus: list[GpuSignals], h: HostSignals,
                   t: Mapping[str, float], expected_peak: float | None = None, serving: ServingSignals | None = None,
                   kv_alternatives: str = "", view: HostView | None = None, rules: GpuRules | None = None,
                   reserved: Reserved | None = None) -> Verdict:
    """Scores for one declared workload from its GPUs, its processes and the host (``view``, ``rules``: as
    score_gpu; ``reserved``: the reservation of the runtime that runs it, else ``reserved_by`` finds it)."""
    kind = getattr(profile.kind, "value", str(profile.kind))
    # work without a GPU: declared cpu-inference, or no GPU attributed at all (a runtime on a GPU-less host, an
    # automatic launcher that holds none): the CPU is its compute and the work itself plays the part of "the GPU
    # waits" (docs/analysis.md, "Work without a GPU")
    cpu_work = kind == "cpu-inference" or not gpus
    up = [g for g in gpus if g.up]
    busy_values = [g.busy for g in up if g.busy is not None]
    busy = sum(busy_values) / len(busy_values) if busy_values else None
    names = ", ".join(str(g.index) for g in up)
    cpu_idle = None
    if cpu_work:
        starved, cpu_idle = cpu_demand(w, serving, t)
        busy_text = "CPU inference" if kind == "cpu-inference" else "work without a GPU"
    else:
        starved = starvation(busy, t) if busy is not None else 0.0
        busy_text = f"GPU {names} busy {pct(busy)}" if busy is not None else "no GPU attributed to the workload"
    if reserved is None:  # its own reservation holds whoever else shares its GPUs
        reserved = reserved_by(profile, serving)
    reserved = replace(reserved, others=()) if reserved is not None else None
    workers = w.dataloader_workers  # measured under its ranks, never the profile's declared count
    parallel = getattr(profile, "parallel", None)
    # distributed: replicas or stages that exchange data every step (we cannot see whether peers share the host)
    distributed = bool(parallel and (parallel.data > 1 or parallel.pipeline > 1))

    own = [GpuRules.for_thresholds(rules, t)(g) for g in up]
    kv_busy = busy
    if cpu_work:  # its cores stand in for the GPU where they say the compute is saturated (no "runtime limits" then);
        # the memory model's alternatives speak of GPU memory and GPUs, which a CPU runtime has not
        compute = w.cores_used / w.cores_allowed if w.cores_used is not None and w.cores_allowed else None
        kv_busy = compute if compute is not None and compute >= t["compute_busy_low"] else None
    waits = [x for x in (not_computing(g, t) for g in up) if x is not None]  # GPM's busy-but-not-computing, per GPU
    # synchronous ranks wait alike: the mean says how much, the GPU that computes most speaks (the cautious reading)
    link_wait = (sum(x[0] for x in waits) / len(waits), min(waits, key=lambda x: x[0])[1]) if waits else None

    def best(pairs: list[tuple[float, str]]) -> tuple[float, str]:
        return max(pairs, key=lambda p: p[0]) if pairs else (0.0, "no GPU attributed to the workload")

    per_gpu_peak = (expected_peak / max(1, len(up))) if expected_peak else None
    results: dict[str, Result] = {
        "gpu_compute": best([r["gpu_compute"] for r in own]),
        "gpu_memory": best([rule_gpu_memory(g, t, per_gpu_peak, reserved) for g in up]),
        "gpu_thermal": best([r["gpu_thermal"] for r in own]),
        "gpu_power": best([r["gpu_power"] for r in own]),
        "pcie": best([r["pcie"] for r in own]),
        "nvlink": best([r["nvlink"] for r in own]),
        "cpu": rule_cpu(starved, busy_text, h, w, t, cpu_is_compute=cpu_work, view=view),
        "host_memory": rule_host_memory(starved, busy_text, h, t, view),
        "shared_memory": rule_shared_memory(starved, busy_text, h, t, workers=workers, view=view,
                                            processes=w.processes if cpu_work else None),
        "disk_io": rule_disk_io(starved, busy_text, h, t, w, view),
        "network": rule_network(starved, busy_text, h, t, distributed, link_wait, busy),
        "kv_cache": serving_rules.rule_kv_cache(serving, t, kv_busy, "" if cpu_work else kv_alternatives),
    }
    slow = straggler(up, t)
    if slow is not None:  # synchronous ranks run at the pace of the slowest: its compute, and its cause, are the workload's
        others = [g for g in up if g is not slow]
        names_ = ", ".join(str(g.index) for g in others)
        verb, whose = ("waits", f"GPU {names_}") if len(others) == 1 else ("wait", f"GPUs {names_}")
        waiting = (f"GPU {slow.index} is the straggler: {whose} (busy "
                   f"{pct(sum(g.busy or 0.0 for g in others) / len(others))}) {verb} for it in every collective")
        score, text = rule_gpu_compute(slow, t)
        results["gpu_compute"] = (score, f"{text}; {waiting}")
        for r, rule in (("gpu_thermal", rule_gpu_thermal), ("gpu_power", rule_gpu_power)):
            score, text = rule(slow, t)
            results[r] = (score, f"{text}; {waiting}")
    demanded = serving is not None and getattr(serving, "up", False) and \
        ((getattr(serving, "running", None) or 0) > 0 or (getattr(serving, "waiting", None) or 0) > 0)
    idle = cpu_idle if cpu_work else (None if demanded else _no_demand(busy, t, names))
    if idle is not None:
        results = _without_demand(results, idle)
    _name_neighbours(results, h, profile.name)
    compute_busy = busy
    if cpu_work and w.cores_used is not None and w.cores_allowed:
        compute_busy = w.cores_used / w.cores_allowed  # the CPU is its compute: how busy it is, for the serving rules
    v = _serving_verdict(results, t, serving, compute_busy, CPU_WORK_PRECEDES if cpu_work else None)
    if idle is not None and v.candidate == NONE and NONE not in v.evidence:
        v = replace(v, evidence={**v.evidence, NONE: idle})
    return v


def _serving_verdict(results: dict[str, Result], t: Mapping[str, float], serving: ServingSignals | None,
                     busy: float | None, precedes: Mapping[str, tuple[str, ...]] | None = None) -> Verdict:
    """The verdict, with what the serving runtime says about demand (analysis/serving.py): a server with
    nothing running or waiting is idle for lack of demand whatever the host does (every score 0); one that is
    down or restarting is judged on nothing (every score 0, its state the evidence for none); one
    whose requests queue while the GPU is busy says so under gpu_compute; one whose requests queue
    while KV cache and GPU have room is held back by its own limits (evidence for none)."""
    down = serving_rules.not_judged(serving)
    if down is not None:  # an outage or a restart's own work is no resource's bottleneck
        results = {r: (0.0, f"{res[1]}; not judged: {down}") if r != "kv_cache" else res
                   for r, res in results.items()}
        v = _verdict(results, t)
        return replace(v, evidence={**v.evidence, NONE: down})
    idle = serving_rules.idle_for_demand(serving)
    if idle is not None:
        results = {r: (0.0, f"{res[1]}; not limiting: {idle}") for r, res in results.items()}
        v = _verdict(results, t)
        return replace(v, evidence={**v.evidence, NONE: idle})
    if serving is not None and serving.up and (serving.waiting or 0) > 0:
        res = results["gpu_compute"]
        results["gpu_compute"] = (res[0], f"{res[1]}; {serving_rules.describe(serving)}")
    v = _verdict(results, t, precedes)
    limited = serving_rules.runtime_limited(serving, t, busy)
    return replace(v, evidence={**v.evidence, NONE: limited}) if limited is not None else v

"""Bottleneck classification: a score in [0, 1] per resource, with evidence, for each GPU and workload.

Each rule below is a small function of the signals (signals.py) returning (score, evidence). A score
says how sure the rule is that this resource limits the work now. Rules that explain an under-used GPU
(cpu, shared_memory, disk_io, host_memory, network) multiply a *starvation* term (the GPU is less busy
than it could be) by the corroborating signal, so low GPU use alone never names a culprit, and a GPU idle
for lack of work (below demand_busy) is `none` whatever the host does. A host-wide signal counts for a
workload in proportion to its own use of that resource; ties between scores go to the cause, then to direct
evidence. docs/analysis.md documents every rule, threshold, source and blind spot; thresholds come from
config.yaml (analysis.thresholds).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from headroom.analysis import serving as serving_rules
from headroom.analysis.signals import (
    AMBIGUOUS_REASONS,
    POWER_REASONS,
    REASON_LABELS,
    THERMAL_NEAR_CELSIUS,
    THERMAL_REASONS,
    GpuSignals,
    HostSignals,
    WorkloadSignals,
)
from headroom.units import format_size

RESOURCES = ("gpu_compute", "gpu_memory", "cpu", "host_memory", "shared_memory", "disk_io", "pcie",
             "gpu_thermal", "gpu_power", "network", "nvlink", "kv_cache")  # fmt: skip
NONE = "none"

# name -> (default, meaning). Ramps go from 0 at *_low to 1 at *_high.
THRESHOLDS: dict[str, tuple[float, str]] = {
    "primary_min_score": (0.5, "a resource becomes the primary bottleneck only at or above this score"),
    "busy_low": (0.50, "GPU busy ratio at or below which the GPU counts as fully starved"),
    "busy_high": (0.85, "GPU busy ratio at or above which the GPU counts as not starved"),
    "compute_busy_low": (0.80, "GPU busy ratio where gpu_compute starts to score"),
    "compute_busy_high": (0.95, "GPU busy ratio where gpu_compute scores 1 (clocks at max, no throttling)"),
    "vram_low": (0.90, "VRAM used / total where gpu_memory starts to score"),
    "vram_high": (0.98, "VRAM used / total where gpu_memory scores 1"),
    "vram_fill_seconds_low": (900.0, "seconds until VRAM is full (at its growth rate, once above vram_low) where "
                                     "gpu_memory starts to score"),
    "vram_fill_seconds_high": (120.0, "seconds until VRAM is full where gpu_memory scores 1"),
    "throttle_share_low": (0.2, "share of the window a thermal or power reason was active where it starts to score"),
    "throttle_share_high": (0.7, "share of the window throttled where the rule scores 1"),
    "work_busy": (0.3, "GPU busy ratio below which throttling is not limiting anything"),
    "pcie_low": (0.6, "PCIe throughput / link capability where pcie starts to score"),
    "pcie_high": (0.85, "PCIe throughput / link capability where pcie scores 1"),
    "cpu_saturation_low": (0.80, "workload cores used / cores it may use where cpu starts to score"),
    "cpu_saturation_high": (0.95, "workload cores used / cores it may use where cpu scores 1"),
    "host_cpu_low": (0.85, "host CPU busy ratio where cpu starts to score"),
    "host_cpu_high": (0.97, "host CPU busy ratio where cpu scores 1"),
    "psi_cpu_low": (0.10, "PSI cpu some avg10 where cpu starts to score"),
    "psi_cpu_high": (0.40, "PSI cpu some avg10 where cpu scores 1"),
    "cpu_wait_low": (0.20, "share of their runnable time the workload's main threads waited for a CPU (/proc/PID/schedstat) "
                           "where cpu starts to score: more runnable threads than cores (oversubscribed); below it "
                           "host-wide CPU signals count for it in proportion"),
    "cpu_wait_high": (0.50, "share of their runnable time its main threads waited for a CPU where cpu scores 1"),
    "cpu_wait_runnable_min": (0.5, "main threads runnable on average (on a CPU or waiting) below which their wait "
                                   "share is not judged (sleeping threads: too little to tell)"),
    "threads_per_core_over": (1.5, "its runnable threads per core it may use from which the evidence says its own "
                                   "threads outnumber its cores (below: other processes' threads take its CPUs)"),
    "run_queue_low": (1.5, "host runnable tasks (procs_running) per logical CPU where cpu starts to score (host-wide: "
                           "counts in proportion to own use, and to its threads' measured waits)"),
    "run_queue_high": (3.0, "host runnable tasks per logical CPU where cpu scores 1"),
    "psi_memory_low": (0.05, "PSI memory full avg10 where host_memory starts to score"),
    "psi_memory_high": (0.20, "PSI memory full avg10 where host_memory scores 1"),
    "mem_available_low": (0.10, "MemAvailable / MemTotal below which host_memory starts to score"),
    "mem_available_high": (0.02, "MemAvailable / MemTotal at which host_memory scores 1"),
    "shm_low": (0.85, "/dev/shm used / size where shared_memory starts to score"),
    "shm_high": (0.97, "/dev/shm used / size where shared_memory scores 1"),
    "disk_busy_low": (0.70, "busiest disk's busy ratio where disk_io starts to score"),
    "disk_busy_high": (0.95, "busiest disk's busy ratio where disk_io scores 1"),
    "psi_io_low": (0.20, "PSI io some avg10 where disk_io starts to score"),
    "psi_io_high": (0.60, "PSI io some avg10 where disk_io scores 1"),
    "iowait_weight": (0.3, "the most iowait alone can contribute to disk_io (iowait is unreliable)"),
    "sm_active_low": (0.50, "GPM SM activity below which a busy GPU counts as launch- or latency-bound, not "
                            "compute-bound (gpu_compute scales down to 0 here; GPUs with GPM only)"),
    "sm_active_high": (0.80, "GPM SM activity at or above which gpu_compute is not scaled down"),
    "dram_active_low": (0.60, "GPM DRAM activity from which a busy GPU counts as computing (memory-bound kernels) "
                              "whatever its SM activity (GPUs with GPM only)"),
    "dram_active_high": (0.85, "GPM DRAM activity from which a busy GPU counts as fully computing"),
    "compute_power_low": (0.35, "power draw / limit at or below which a busy GPU without GPM shows no sign of "
                                "computing: PCIe near its capacity is then not discounted for the busy GPU"),
    "compute_power_high": (0.55, "power draw / limit from which a busy GPU without GPM counts as computing: PCIe "
                                 "near its capacity is discounted in full while the GPU is busy"),
    "link_active_low": (0.10, "mean PCIe or NVLink throughput / capability where a busy GPU that is not computing "
                              "(GPM) starts to count as bound by that link"),
    "link_active_high": (0.30, "mean PCIe or NVLink throughput / capability from which a busy GPU that is not "
                               "computing counts as bound by that link in full"),
    "net_active_low_mib": (8.0, "MiB/s on the busiest interface where a distributed workload's busy GPUs that are "
                                "not computing (GPM) start to count as waiting on the network"),
    "net_active_high_mib": (64.0, "MiB/s on the busiest interface from which they count as waiting on it in full "
                                  "(its own level, not its line rate: a TCP transport reaches a fraction of it)"),
    "link_steady_low": (0.5, "share of the window a link carries its traffic (intervals at half its mean rate or "
                             "more) where the busy-but-not-computing rule starts to name it"),
    "link_steady_high": (0.8, "share of the window from which the traffic counts as steady in full"),
    "nvlink_low": (0.6, "NVLink throughput / capability of the active links where nvlink starts to score"),
    "nvlink_high": (0.85, "NVLink throughput / capability of the active links where nvlink scores 1"),
    "net_low": (0.70, "busiest NIC's throughput / link speed where network starts to score"),
    "net_high": (0.90, "busiest NIC's throughput / link speed where network scores 1"),
    "kv_usage_low": (0.80, "serving runtime's KV cache usage where kv_cache starts to score"),
    "kv_usage_high": (0.95, "serving runtime's KV cache usage where kv_cache scores 1 (with requests waiting)"),
    "serving_waiting_high": (1.0, "requests waiting in one serving scrape at which queueing counts fully"),
    "preemptions_per_minute_high": (1.0, "preemptions per minute at which KV eviction counts fully"),
    "latency_bucket_width_max": (serving_rules.BUCKET_WIDTH_MAX,
                                 "a latency percentile read inside a runtime's histogram bucket wider than this share "
                                 "of the bucket's upper bound (and any in its first or +Inf bucket) is a bound, not a "
                                 "value: SLOs are judged from the bucket (docs/serving.md, Resolution)"),

    "kv_recent_scrapes": (3, "the latest serving scrapes kv_cache also scores from on their own (the share of them "
                             "with the cache full while requests wait or are preempted): a cache that just filled "
                             "scores at once, not once most of the window has"),
    "serving_scrape_share": (0.5, "share of the window's serving scrapes in which requests waited while the KV cache "
                                  "had room for the evidence to blame the runtime's own limits"),
    "serving_down_seconds": (3.0, "seconds a serving endpoint's scrapes must have failed since its last answer "
                                  "before it is reported down (a scrape that timed out under load is not an outage)"),
    "serving_unresponsive_seconds": (30.0, "seconds a serving endpoint may answer late (every scrape since its last "
                                           "answer connected, then timed out: a runtime saturated by its load) "
                                           "before it is reported down"),
    "serving_restart_seconds": (15.0, "seconds after a serving endpoint restarted (counters reset, KV capacity "
                                      "changed, answering again after failed scrapes) during which its workload is "
                                      "reported restarting and not judged"),
    "demand_busy": (0.05, "GPU busy ratio below which the GPU shows no demand (idle for lack of work): no starvation "
                          "rule (cpu, host_memory, shared_memory, disk_io, network) scores, whatever the host does"),
    "own_cpu_cores": (0.5, "cores the workload's own processes use from which host-wide CPU signals (host busy, PSI "
                           "cpu) count for it in full (in proportion below; in full when its processes are unknown)"),
    "own_io_mib_per_second": (1.0, "MiB/s of the workload's own block I/O from which host-wide disk signals (busy, "
                                   "PSI io, iowait) count for it in full (in proportion below; in full when unknown)"),
    "demand_cores": (0.05, "cores the processes of a workload without a GPU (cpu-inference, a runtime on a GPU-less "
                           "host) use below which, with no request running or waiting, it shows no demand (idle for "
                           "lack of work): no host-side rule scores for it, as demand_busy for a GPU"),
    "health_xid_clear_seconds": (3600.0, "seconds without a recurrence after which an XID that needs a GPU reset or "
                                         "reboot no longer makes the GPU unhealthy when no reset was seen (0: only a "
                                         "reset clears it; docs/analysis.md, GPU health)"),
    "health_clocks_stuck_seconds": (300.0, "seconds a hardware slowdown, or a busy GPU's low SM clock that no "
                                           "clock-event reason explains, must hold before the GPU's clocks count as "
                                           "stuck (health condition clocks_stuck)"),
    "health_clock_low_ratio": (0.5, "SM clock / its maximum at or below which a busy GPU's clock counts as low for "
                                    "clocks_stuck"),
    "tie_margin": (0.05, "scores within this of the top score tie: causal evidence decides (docs/analysis.md, Ties)"),
}
DEFAULT_THRESHOLDS: dict[str, float] = {k: v for k, (v, _) in THRESHOLDS.items()}


def ramp(x: float | None, low: float, high: float) -> float:
    """0 at ``low``, 1 at ``high`` (either direction), linear between; 0 for unknown."""
    if x is None:
        return 0.0
    if high == low:
        return 1.0 if x >= high else 0.0
    return max(0.0, min(1.0, (x - low) / (high - low)))


def pct(x: float | None) -> str:
    return "?" if x is None else f"{x * 100:.0f} %"


def plural(n: float | None, word: str, words: str | None = None) -> str:
    """'1 DataLoader worker', '4 DataLoader workers', '1 process', '? processes' (unknown count)."""
    many = words or (word + "es" if word.endswith(("s", "x", "ch", "sh")) else word + "s")
    if n is None:
        return f"? {many}"
    return f"{n:g} {word if n == 1 else many}"


def gib(n: float | None) -> str:
    """A size in the evidence: the unit chosen by its size (units.format_size: '64.0 MiB left of 512 MiB', never
    '0.0 GiB left of 0.1 GiB')."""
    return format_size(n)


@dataclass(frozen=True)
class Verdict:
    """Scores and evidence for one GPU or workload, and the primary after hysteresis."""

    scores: Mapping[str, float]
    evidence: Mapping[str, str]
    candidate: str  # the top-scoring resource this tick (or none)
    primary: str = NONE  # after hysteresis
    long_scores: Mapping[str, float] = field(default_factory=dict)
    # the candidate that differs from the primary and holds, not yet for analysis.hold (none when nothing is
    # pending): how long it has held and how long it still must to become the primary (Hysteresis.pending)
    pending: str = NONE
    pending_seconds: float | None = None
    confirm_in_seconds: float | None = None
    # resource -> what to do about it (analysis/remedies.py), for the primary and the pending candidate
    remedies: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_pending(self) -> bool:
        """A candidate other than the primary waits out its hold (it may be none: a return to nothing)."""
        return self.pending_seconds is not None


# cause -> the resources whose signals it produces (docs/analysis.md, "Ties"): when a cause and its effect tie, the
# cause is the bottleneck. Memory pressure burns CPU in reclaim (kswapd, direct reclaim) and turns into disk I/O
# (swap, page cache refaults); a throttled GPU is slow at computing because of the throttling.
EXPLAINS: dict[str, tuple[str, ...]] = {
    "host_memory": ("cpu", "disk_io"),
    "gpu_thermal": ("gpu_compute",),
    "gpu_power": ("gpu_compute",),
    # a kernel that waits on a transfer or a collective counts as "utilization"; a NIC's traffic crosses PCIe
    # (bounce buffers of a socket transport, GPUDirect RDMA)
    "pcie": ("gpu_compute",),
    "nvlink": ("gpu_compute",),
    "network": ("gpu_compute", "pcie"),
}


# work without a GPU (cpu-inference, a serving runtime on a GPU-less host): cause -> the effects it explains whatever
# their scores, once the cause itself is at or above primary_min_score (docs/analysis.md, "Work without a GPU"). A
# runtime whose KV cache is full while requests wait or are preempted saturates its cores with that very work (a
# preempted sequence is recomputed from its prompt, every step re-reads a cache it cannot grow): more cache is what
# lets it through, so kv_cache is the verdict and its remedy; with room in the cache, cpu (the compute) is.
CPU_WORK_PRECEDES: dict[str, tuple[str, ...]] = {"kv_cache": ("cpu",)}
PRECEDENCE_WHY = {"kv_cache": "the cores are busy with sequences the full cache preempts and recomputes, and more "
                              "cache admits the waiting requests"}


def candidate_of(scores: Mapping[str, float], t: Mapping[str, float],
                 direct: frozenset[str] | set[str] | None = None) -> str:
    """The top-scoring resource at or above primary_min_score, else none; ties are decided by :func:`decide`."""
    return decide(scores, t, direct)[0]


def decide(scores: Mapping[str, float], t: Mapping[str, float],
           direct: frozenset[str] | set[str] | None = None,
           precedes: Mapping[str, tuple[str, ...]] | None = None) -> tuple[str, str]:
    """(candidate, why the tie went its way or ""). ``precedes`` (cause -> effects, CPU_WORK_PRECEDES) first: the
    top resource gives way to a cause of it that scores at or above primary_min_score, however much lower. Then
    scores within ``tie_margin`` of the top tie; among them (1) a cause beats the effects it explains
    (EXPLAINS), (2) direct evidence (the GPU's own counters, the workload's own consumption or stall) beats a
    host-wide correlation, (3) the higher score wins, and only an exact tie left after all that falls back to the
    fixed order of RESOURCES."""
    top = max(scores.get(r, 0.0) for r in RESOURCES)
    if top < t["primary_min_score"]:
        return NONE, ""
    for cause, effects in (precedes or {}).items():
        if scores.get(cause, 0.0) >= t["primary_min_score"]:
            beaten = [r for r in effects if scores.get(r, 0.0) >= top - t.get("tie_margin", 0.0)]
            if beaten:
                return cause, f"{cause} precedes {', '.join(beaten)} for work without a GPU"
    tied = [r for r in RESOURCES if scores.get(r, 0.0) >= max(top - t.get("tie_margin", 0.0), t["primary_min_score"])]
    if len(tied) == 1:
        return tied[0], ""
    why = []
    causes = [r for r in tied if not any(r in EXPLAINS.get(o, ()) for o in tied if o != r)]
    if causes and len(causes) < len(tied):
        explained = [r for r in tied if r not in causes]
        why.append(f"{', '.join(causes)} explains {', '.join(explained)}")
        tied = causes
    if direct is not None and len(tied) > 1:
        own = [r for r in tied if r in direct]
        if own and len(own) < len(tied):
            why.append(f"direct evidence for {', '.join(own)}, host-wide only for "
                       f"{', '.join(r for r in tied if r not in own)}")
            tied = own
    best = max(tied, key=lambda r: scores.get(r, 0.0))  # max keeps the first (RESOURCES order) of equal scores
    return best, "; ".join(why)


# ------------------------------------------------------------------------------- GPU-bound rules
NO_GPM = "utilization alone: no GPM activity ratios on this GPU, a weaker signal"


def has_gpm(g: GpuSignals) -> bool:
    return g.sm_active is not None or g.tensor_active is not None or g.dram_active is not None


def compute_activity(g: GpuSignals, t: Mapping[str, float]) -> float | None:
    """How much a GPU computes, from GPM (Hopper and later): 1 when its SMs (or their tensor cores) or its DRAM
    are active at the high thresholds, 0 when all are below the low ones; None without GPM. NVML's
    utilization counts a kernel that waits on a transfer or a collective as busy; these ratios do not."""
    if not has_gpm(g):
        return None
    sm = max((x for x in (g.sm_active, g.tensor_active) if x is not None), default=None)
    return max(ramp(sm, t["sm_active_low"], t["sm_active_high"]),
               ramp(g.dram_active, t["dram_active_low"], t["dram_active_high"]))


def activity_text(g: GpuSignals) -> str:
    """'SMs active 12 %, tensor cores 3 %, DRAM 5 %' for the GPM ratios the GPU has."""
    parts = [f"{label} {pct(v)}" for label, v in (("SMs active", g.sm_active), ("tensor cores", g.tensor_active),
                                                  ("DRAM", g.dram_active)) if v is not None]
    return ", ".join(parts)


def not_computing(g: GpuSignals, t: Mapping[str, float]) -> tuple[float, str] | None:
    """(score, evidence) that a GPU is busy but not computing: NVML busy (ramp busy_low..busy_high) times how
    little its GPM activity ratios say it computes; None without GPM (utilization alone cannot tell)."""
    activity = compute_activity(g, t)
    if activity is None:
        return None
    busy = ramp(g.busy, t["busy_low"], t["busy_high"])
    text = f"GPU {g.index} busy {pct(g.busy)} while {activity_text(g)}"
    if busy > 0 and activity < 1.0:
        text += ": busy, not computing (its kernels wait on a transfer or a collective)"
    return busy * (1.0 - activity), text


def rule_gpu_compute(g: GpuSignals, t: Mapping[str, float]) -> tuple[float, str]:
    busy = ramp(g.busy, t["compute_busy_low"], t["compute_busy_high"])
    throttled = max(g.thermal_share, g.power_cap_share)
    score = busy * (1.0 - throttled)
    clocks = "" if g.sm_clock_ratio is None else f", SM clock {pct(g.sm_clock_ratio)} of max"
    share = max(throttled, g.throttled_share or 0.0)
    activity = compute_activity(g, t)
    busy_text = ("busy unknown (MIG mode: NVML reports no utilization for the GPU)" if g.busy is None and g.mig_enabled
                 else f"busy {pct(g.busy)}" + (f" ({NO_GPM})" if activity is None and busy > 0 else ""))
    text = f"GPU {g.index} {busy_text}{clocks}, " + (f"throttled {pct(share)} of the window" if share > 0
                                                      else "not throttled")
    if activity is not None:  # GPM: how much of the GPU the kernels used, not just that one ran
        score *= activity
        text += f", {activity_text(g)}"
        if busy > 0 and activity == 0.0:
            text += (": launch- or latency-bound (small kernels, synchronisation, or waits on the host, memory "
                     "or the interconnect), not compute-bound")
    return score, text


@dataclass(frozen=True)
class Reserved:
    """A serving runtime on the GPU that reserves its memory up front (workload/runtimes.py describes how each
    does), so a full card is its normal state: ``reserved_by`` finds it from what runs there."""

    runtime: str  # how people call it (TGI, Ollama ...)
    setting: str  # what sizes the reservation, and its default
    how: str  # what it takes, and when
    found: str  # how the runtime was found: its serving metrics, its launcher's command line, its profile
    # other workloads on the same GPU: the reservation leaves them no room, so a full card is not normal there
    others: tuple[str, ...] = ()
    resident: str = ""  # what the runtime says it holds loaded (Ollama's /api/ps), "" where it does not say


def reserved_by(profile: Any, serving: Any = None, auto: bool = False) -> Reserved | None:
    """The reservation of the runtime that runs ``profile``'s workload, found from its serving metrics (``serving``:
    its newest scrape or ServingSignals), else its profile's runtime (``auto``: an automatic workload's, which its
    launcher's command line gives); None when that runtime does not reserve up front (workload/runtimes.py)."""
    from headroom.workload import runtimes

    found = runtimes.running(profile, serving, auto)
    if found is None:
        return None
    name, how = found
    r = runtimes.reservation(name, serving if how == "its serving metrics" else None)
    if r is None:
        return None
    return Reserved(runtimes.label(name, r), f"{r.setting}, default {r.default}", r.how, how, resident=_resident(serving))


def _resident(serving: Any) -> str:
    """'its /api/ps lists 1 model loaded: gemma3:latest, 5.6 GiB, all of it in GPU memory' (Ollama), else ''."""
    models = getattr(serving, "resident_models", ()) if getattr(serving, "up", False) else ()
    total, vram = getattr(serving, "resident_bytes", None), getattr(serving, "resident_vram_bytes", None)
    if total is None or vram is None:
        return ""
    if not models:
        return "its /api/ps lists no model loaded"
    where = ("all of it in GPU memory" if vram >= total else f"{gib(vram)} of it in GPU memory, the rest on the CPU"
             if vram else "none of it in GPU memory (on the CPU)")
    shown = ", ".join(models[:3]) + (f" and {len(models) - 3} more" if len(models) > 3 else "")
    return f"its /api/ps lists {len(models)} model{'s' if len(models) != 1 else ''} loaded: {shown}, {gib(total)}, {where}"


def rule_gpu_memory(g: GpuSignals, t: Mapping[str, float], expected_peak: float | None = None,
                    reserved: Reserved | None = None) -> tuple[float, str]:
    """VRAM full or filling. Under a runtime that reserves the card up front (``reserved``) the level is its
    normal state and scores 0; it still scores when the card grows past the reservation (a steady rise that
    will fill it) or when another workload shares the GPU (the reservation leaves it no room)."""
    scope = f" ({g.memory_scope})" if g.memory_scope else ""
    growth = g.memory_growth_bytes_per_second
    text = (f"GPU {g.index}{scope} VRAM {gib(g.memory_used_bytes)} of {gib(g.memory_total_bytes)} "
            f"({pct(g.memory_used_ratio)})")
    level = ramp(g.memory_used_ratio, t["vram_low"], t["vram_high"])
    if reserved is not None:
        text += f", reserved up front by {reserved.runtime} (found from {reserved.found}; {reserved.setting})"
        if reserved.resident:
            text += f"; {reserved.resident}"
        if reserved.others:
            text += (f", on a GPU it shares with {', '.join(reserved.others)}: the reservation leaves "
                     f"{'it' if len(reserved.others) == 1 else 'them'} no room")
        else:
            level = 0.0
            text += ": a full card is its normal state; NVML cannot see how full its KV cache is"
    score = level
    filling = (g.memory_used_ratio or 0.0) >= t["vram_low"]
    if growth and growth > 0 and g.memory_used_bytes is not None and g.memory_total_bytes:
        to_full = (g.memory_total_bytes - g.memory_used_bytes) / growth
        steady = "" if g.memory_growth_r2 is None else f", a steady trend: R² {g.memory_growth_r2:.2f}"
        past = " past the reservation" if reserved is not None else ""
        text += "," if reserved is None else "; but"
        text += f" growing{past} {growth / 2**20:.0f} MiB/s{steady} (full in {to_full / 60:.0f} min at this rate)"
        if filling:  # already nearly full and still growing: it will run out before long
            score = max(score, ramp(to_full, t["vram_fill_seconds_low"], t["vram_fill_seconds_high"]))
    if expected_peak:
        text += f"; profile expects {gib(expected_peak)} at peak"
        if g.memory_total_bytes and expected_peak > g.memory_total_bytes:
            text += " (more than the GPU holds)"  # context for the reader; the score stays on what NVML shows
    return score, text


# power draw / limit that says a GPU works when NVML gives no utilization (MIG mode): an idle H100 draws
# 10-15 % of its limit, one running kernels well over 40 %
WORK_POWER_RATIO = (0.2, 0.4)


def _work(g: GpuSignals, t: Mapping[str, float]) -> float:
    """1 when the GPU has work to do (throttling then costs throughput), 0 when it is idle. With MIG on,
    NVML reports no utilization for the GPU: its power draw stands in, so a throttled MIG GPU still counts."""
    if g.busy is None and g.power_ratio is not None:
        return ramp(g.power_ratio, *WORK_POWER_RATIO)
    return ramp(g.busy, t["work_busy"] * 0.5, t["work_busy"])


def _reasons_text(g: GpuSignals, names: tuple[str, ...]) -> str:
    """'hardware thermal slowdown 63 %, software thermal slowdown 40 %' for the reasons seen in the window."""
    shares = g.reason_shares
    seen = [(shares[r], r) for r in names if shares.get(r)]
    if not seen:
        return ""
    seen.sort(reverse=True)
    return ", ".join(f"{REASON_LABELS[r]} active {pct(v)}" for v, r in seen)


_LIMIT_NAMES = {"max operating": "max operating temperature", "slowdown": "slowdown temperature"}


def _temperature_text(g: GpuSignals) -> str:
    """' at 89 °C, 2 °C below its 91 °C max operating temperature, memory at 80 °C (its limit 95 °C)': the
    hottest of the window against the GPU's own limit (signals.thermal_limit)."""
    temp = g.temperature_peak_celsius if g.temperature_peak_celsius is not None else g.temperature_celsius
    if temp is None:
        return ""
    text = f" at {temp:.0f} °C"
    if g.thermal_limit_celsius is not None:
        gap = g.thermal_limit_celsius - temp
        where = _LIMIT_NAMES.get(g.thermal_limit_source, "slowdown temperature (analysis.gpu_slowdown_celsius)")
        text += (f", {gap:.0f} °C below its {g.thermal_limit_celsius:.0f} °C {where}" if gap > 0
                 else f", at or over its {g.thermal_limit_celsius:.0f} °C {where}")
    if g.memory_temperature_celsius is not None:
        text += f", memory at {g.memory_temperature_celsius:.0f} °C"
        if g.memory_thermal_limit_celsius is not None:
            text += f" (its limit {g.memory_thermal_limit_celsius:.0f} °C)"
    return text


def _near_limit(g: GpuSignals) -> bool:
    temp = g.temperature_peak_celsius if g.temperature_peak_celsius is not None else g.temperature_celsius
    hot = (g.thermal_limit_celsius is not None and temp is not None
           and temp >= g.thermal_limit_celsius - THERMAL_NEAR_CELSIUS)
    memory_hot = (g.memory_thermal_limit_celsius is not None and g.memory_temperature_celsius is not None
                  and g.memory_temperature_celsius >= g.memory_thermal_limit_celsius - THERMAL_NEAR_CELSIUS)
    return hot or memory_hot


_HEAT_NEAR = THERMAL_REASONS + AMBIGUOUS_REASONS  # hw_slowdown is heat near the limit, power away from it
_POWER_COOL = POWER_REASONS + AMBIGUOUS_REASONS


def rule_gpu_thermal(g: GpuSignals, t: Mapping[str, float]) -> tuple[float, str]:
    """Slowed for heat: a thermal reason, or hw_slowdown while the GPU or its memory is near its limit
    (signals.py sorts hw_slowdown sample by sample). The evidence names each reason and the temperature
    against the GPU's own limit, and never calls a cool GPU hot."""
    score = ramp(g.thermal_share, t["throttle_share_low"], t["throttle_share_high"]) * _work(g, t)
    clocks = "" if g.sm_clock_ratio is None else f"; SM clock {pct(g.sm_clock_ratio)} of max"
    near = _near_limit(g)
    reasons = _reasons_text(g, _HEAT_NEAR if near else THERMAL_REASONS)
    text = f"GPU {g.index} slowed for heat {pct(g.thermal_share)} of the window"
    text += (f" ({reasons})" if reasons else "") + _temperature_text(g)
    if g.thermal_share > 0 and not near and g.thermal_limit_celsius is not None:
        text += (": the GPU core is not near its limit, so the sensor that tripped is elsewhere on the board "
                 "(memory, voltage regulators); check the airflow")
    return score, text + clocks


def rule_gpu_power(g: GpuSignals, t: Mapping[str, float]) -> tuple[float, str]:
    """Slowed for power: the software power cap, the hardware power brake, or hw_slowdown on a GPU that is
    not near its thermal limit (an external brake: the power supply or the chassis asserted it)."""
    score = ramp(g.power_cap_share, t["throttle_share_low"], t["throttle_share_high"]) * _work(g, t)
    power = ""
    if g.power_watts is not None and g.power_limit_watts:
        power = f", drawing {g.power_watts:.0f} of {g.power_limit_watts:.0f} W"
    names = POWER_REASONS if _near_limit(g) else _POWER_COOL
    seen = [r for r in names if g.reason_shares.get(r)]
    if len(seen) == 1:
        text = f"GPU {g.index} {REASON_LABELS[seen[0]]} active {pct(g.reason_shares[seen[0]])} of the window{power}"
    elif seen:
        text = f"GPU {g.index} slowed for power {pct(g.power_cap_share)} of the window ({_reasons_text(g, names)}){power}"
    else:
        text = f"GPU {g.index} power cap active {pct(g.power_cap_share)} of the window{power}"
    external = [r for r in seen if r != "sw_power_cap"]
    if external and g.power_cap_share > 0:
        text += (f"; the GPU is{_temperature_text(g)}: a power problem, not heat (the power supply, a failing PSU "
                 "or an external power brake signal from the chassis or BMC)")
    return score, text


def bound_link(g: GpuSignals, t: Mapping[str, float], link: str, mean: float | None, capability: float | None,
               steady: float | None) -> tuple[float, str]:
    """The busy-but-not-computing rule for one of a GPU's own links (PCIe, NVLink): a busy GPU whose GPM ratios say
    it does not compute (not_computing) while the link carries steady traffic (``steady``: steady_share, at least
    link_active_low of its ``capability`` on average) is bound by that link, however far from saturation it runs.
    (0, "") without GPM, without traffic, or on a GPU that is not busy."""
    waiting = not_computing(g, t)
    if waiting is None or waiting[0] <= 0 or mean is None or not capability:
        return 0.0, ""
    level = ramp(mean / capability, t["link_active_low"], t["link_active_high"])
    steadiness = ramp(steady, t["link_steady_low"], t["link_steady_high"])
    if level <= 0:
        return 0.0, ""
    return waiting[0] * level * steadiness, (
        f"{waiting[1]}; {link} carries {mean / 1e9:.1f} GB/s on average ({pct(mean / capability)} of its capability), "
        f"at that level {pct(steady)} of the window" + ("" if steadiness > 0 else ": bursts, not steady traffic"))


def rule_pcie(g: GpuSignals, t: Mapping[str, float]) -> tuple[float, str]:
    """Host-device transfers (weights or KV cache offloaded to host memory, pinned-memory copies). PCIe near its
    capacity is discounted while the GPU computes: from GPM where the GPU has it, else only while it is busy and
    draws the power of a GPU that computes (a GPU waiting on copies draws little). A busy GPU whose GPM says it
    does not compute is bound by steady PCIe traffic far below capacity too (bound_link)."""
    if g.pcie_bytes_per_second is None or not g.pcie_capability_bytes_per_second:
        return 0.0, f"GPU {g.index} PCIe throughput unknown"
    busy = ramp(g.busy, t["compute_busy_low"], t["compute_busy_high"])
    activity = compute_activity(g, t)
    if activity is not None:
        computing, why = activity, activity_text(g)
    elif g.power_ratio is not None:
        computing = ramp(g.power_ratio, t["compute_power_low"], t["compute_power_high"])
        why = f"drawing {pct(g.power_ratio)} of its power limit ({NO_GPM})"
    else:
        computing, why = 1.0, NO_GPM
    score = ramp(g.pcie_ratio, t["pcie_low"], t["pcie_high"]) * (1.0 - busy * computing)
    text = (f"GPU {g.index} PCIe {g.pcie_bytes_per_second / 1e9:.1f} of "
            f"{g.pcie_capability_bytes_per_second / 1e9:.1f} GB/s ({pct(g.pcie_ratio)}) while busy {pct(g.busy)}")
    if busy > 0:
        text += f", {why}" + (": it computes, so the link is not what limits it" if busy * computing >= 1.0 else "")
    bound, bound_text = bound_link(g, t, "PCIe", g.pcie_mean_bytes_per_second, g.pcie_capability_bytes_per_second,
                                   g.pcie_steady)
    if bound > score:
        return bound, bound_text
    return score, text


def rule_nvlink(g: GpuSignals, t: Mapping[str, float]) -> tuple[float, str]:
    """The GPU-to-GPU interconnect near its capacity. Where GPM says the GPU computes anyway, compute is
    the limit, not the links: the score is scaled down by its activity (tensor-parallel all-reduce time
    shows as "utilization" too, so busy alone cannot say that). A busy GPU that GPM says does not compute is
    bound by steady NVLink traffic below capacity too (bound_link)."""
    if g.nvlink_bytes_per_second is None or not g.nvlink_capability_bytes_per_second:
        return 0.0, f"GPU {g.index} NVLink throughput unknown (no NVLink, or not yet two samples)"
    score = ramp(g.nvlink_ratio, t["nvlink_low"], t["nvlink_high"])
    text = (f"GPU {g.index} NVLink {g.nvlink_bytes_per_second / 1e9:.1f} of "
            f"{g.nvlink_capability_bytes_per_second / 1e9:.0f} GB/s ({pct(g.nvlink_ratio)})")
    activity = compute_activity(g, t)
    if activity is not None:
        score *= 1.0 - activity
        text += f" while {activity_text(g)}"
    elif ramp(g.busy, t["busy_low"], t["busy_high"]) > 0:
        text += f" while busy {pct(g.busy)} ({NO_GPM})"
    bound, bound_text = bound_link(g, t, "NVLink", g.nvlink_bytes_per_second, g.nvlink_capability_bytes_per_second,
                                   g.nvlink_steady)
    if bound > score:
        return bound, bound_text
    return score, text


class GpuRules:
    """The rules that read only one GPU's signals and the thresholds (GPU_OWN_RULES), run once per GpuSignals
    object and shared: the pipeline makes one per window, so a GPU's verdict and those of the workloads on it
    read the same results instead of running the rules again for each (a workload on a MIG slice has its own
    GpuSignals object, so its own results)."""

    __slots__ = ("t", "_seen")

    def __init__(self, t: Mapping[str, float]) -> None:
        self.t = t
        self._seen: dict[int, tuple[GpuSignals, dict[str, tuple[float, str]]]] = {}

    def __call__(self, g: GpuSignals) -> dict[str, tuple[float, str]]:
        seen = self._seen.get(id(g))
        if seen is not None and seen[0] is g:  # the object itself (kept alive here), not one at a reused id
            return seen[1]
        results = {name: rule(g, self.t) for name, rule in GPU_OWN_RULES}
        self._seen[id(g)] = (g, results)
        return results

    @classmethod
    def for_thresholds(cls, rules: GpuRules | None, t: Mapping[str, float]) -> GpuRules:
        """``rules`` when made for these thresholds, else a new one."""
        return rules if rules is not None and rules.t is t else cls(t)


GPU_OWN_RULES = (("gpu_compute", rule_gpu_compute), ("gpu_thermal", rule_gpu_thermal), ("gpu_power", rule_gpu_power),
                 ("pcie", rule_pcie), ("nvlink", rule_nvlink))


# --------------------------------------------------------------------------- starvation rules
@dataclass(frozen=True)
class HostView:
    """What the starvation rules read of the host alone, worked out once per tick (``host_view``) and shared by
    every GPU's and workload's verdict instead of once for each: per rule, the host-wide score and its evidence."""

    cpu: tuple[float, tuple[str, ...]]  # host CPU busy, PSI cpu and the run queue: (score, evidence parts)
    memory: tuple[float, tuple[str, ...]]  # PSI memory full, RAM available, major faults
    shm: tuple[float, str | None]  # (fill score, the fullest mount's sentence; None when unknown)
    disk: tuple[float, tuple[str, ...]]  # the busiest disk, PSI io, iowait


def host_view(h: HostSignals, t: Mapping[str, float]) -> HostView:
    return HostView(_host_cpu(h, t), _host_memory(h, t), _host_shm(h, t), _host_disk(h, t))


def _host_cpu(h: HostSignals, t: Mapping[str, float]) -> tuple[float, tuple[str, ...]]:
    host, parts = 0.0, []
    if h.cpu_busy is not None:
        host = max(host, ramp(h.cpu_busy, t["host_cpu_low"], t["host_cpu_high"]))
        parts.append(f"host CPU {pct(h.cpu_busy)} busy")
    psi = h.psi.get("cpu.some")
    if psi is not None:
        host = max(host, ramp(psi, t["psi_cpu_low"], t["psi_cpu_high"]))
        parts.append(f"PSI cpu some avg10 {pct(psi)}")
    if h.run_queue is not None and h.logical_cpus:  # more runnable tasks than CPUs: they wait for one
        host = max(host, ramp(h.run_queue / h.logical_cpus, t["run_queue_low"], t["run_queue_high"]))
        parts.append(f"run queue {h.run_queue:.0f} on {h.logical_cpus} CPUs")
    return host, tuple(parts)


def _host_shm(h: HostSignals, t: Mapping[str, float]) -> tuple[float, str | None]:
    fill = ramp(h.shm_fill, t["shm_low"], t["shm_high"])
    if h.shm_fill is None:
        return fill, None
    return fill, (f"{h.shm_mountpoint} {pct(h.shm_fill)} full ({gib(h.shm_available_bytes)} left of "
                  f"{gib(h.shm_size_bytes)})")


def _host_disk(h: HostSignals, t: Mapping[str, float]) -> tuple[float, tuple[str, ...]]:
    parts, host = [], 0.0
    if h.disk_busy is not None:
        host = max(host, ramp(h.disk_busy, t["disk_busy_low"], t["disk_busy_high"]))
        queue = "" if h.disk_queue is None else f", queue depth {h.disk_queue:.1f}"
        parts.append(f"{h.disk_device} busy {pct(h.disk_busy)}{queue}")
    psi = h.psi.get("io.some")
    if psi is not None:
        host = max(host, ramp(psi, t["psi_io_low"], t["psi_io_high"]))
        parts.append(f"PSI io some avg10 {pct(psi)}")
    if h.cpu_iowait is not None and h.cpu_iowait > 0.05:
        host = max(host, t["iowait_weight"] * ramp(h.cpu_iowait, 0.05, 0.5))
        parts.append(f"iowait {pct(h.cpu_iowait)} (weak signal)")
    return host, tuple(parts)


def starvation(busy: float | None, t: Mapping[str, float]) -> float:
    """1 when the GPUs are at or below busy_low, 0 at or above busy_high; 0 when unknown."""
    if busy is None:
        return 0.0
    return 1.0 - ramp(busy, t["busy_low"], t["busy_high"])


class Scored(tuple):
    """A rule's (score, evidence), which unpacks as the pair every caller expects, plus ``direct``: whether the
    score rests on direct evidence (the workload's own consumption or stall) rather than a host-wide
    correlation. Ties use it (see decide); a plain (score, evidence) pair counts as direct for the GPU's own
    rules and host-wide for the starvation rules."""

    direct: bool

    def __new__(cls, score: float, text: str, direct: bool) -> Scored:
        obj = super().__new__(cls, (score, text))
        obj.direct = direct
        return obj


def _involvement(own: float | None, full: float) -> float:
    """How much a host-wide signal counts for a workload: its own use of the resource against ``full`` (1 when its
    processes are unknown: then the verdict is the GPU's own view, as for a GPU no profile claims)."""
    return 1.0 if own is None else ramp(own, 0.0, full)


def rule_cpu(starved: float, busy_text: str, h: HostSignals, w: WorkloadSignals | None,
             t: Mapping[str, float], cpu_is_compute: bool = False, view: HostView | None = None) -> Scored:
    """CPU starving the GPU. The workload's own saturation (all its cores, one process pinned at a core, its
    cgroup's PSI cpu) is direct evidence; busy host CPUs and host PSI count only in proportion to the CPU the
    workload itself uses (a compile job saturating the host does not starve a trainer that waits on storage)."""
    parts, own = [], 0.0
    if w is not None and w.cores_used is not None and w.cores_allowed:
        saturation = w.cores_used / w.cores_allowed
        own = max(own, ramp(saturation, t["cpu_saturation_low"], t["cpu_saturation_high"]))
        cores = f"{w.cores_allowed:.2f}".rstrip("0").rstrip(".")  # a quota may be 0.5 or 1.5 cores
        parts.append(f"the workload's {plural(w.processes, 'process')} used {w.cores_used:.2f} "
                     f"{'core' if round(w.cores_used, 2) == 1 else 'cores'}, of the {cores} it may use (cgroup quota "
                     "or CPU affinity, else logical CPUs)")
    # each rank feeds its own GPU: its DataLoader workers against the cores they can use (one each), and its own
    # process pinned at a core (the GIL of a rank with 0 workers, collation, a tokenizer) starve it whatever the
    # workload's total says. The worst rank speaks for the workload (synchronous ranks wait for the slowest)
    # work without a GPU computes on all its threads (OpenMP, ggml): its saturation is its cores against what it may
    # use, not one process at a full core, which there is only one thread of many
    worst = _worst_rank(w.ranks, t, w.dataloader_workers is not None) if w is not None and not cpu_is_compute else None
    if worst is not None:
        score, text = worst
        own = max(own, score)
        parts.append(text)
    elif w is not None and w.ranks and w.dataloader_workers is not None:  # the count, measured: 0 says 0
        parts.append(f"{plural(len(w.ranks), 'rank')} with {plural(w.dataloader_workers, 'DataLoader worker')}, "
                     "none at a full core")
    # no ranks known: one process at a full core (a thread that cannot go faster, the GIL of a DataLoader with 0
    # workers, a single-threaded decoder or tokenizer) while the host looks idle. DataLoader workers work in
    # parallel, so one hot worker among idle ones is not the limit: there only the main process counts. With ranks
    # known, any other process pinned at a core counts only where no rank has workers (a decoder the rank waits on)
    ranked = {r.pid for r in w.ranks} if w is not None else set()
    critical = w is not None and not cpu_is_compute and (not w.dataloader_workers or (w.busiest_is_main and not ranked))
    if critical and ranked and w.busiest_process_pid in ranked:
        critical = False  # judged with its rank above
    if critical and w.busiest_process_cores is not None and w.busiest_process_cores >= t["cpu_saturation_low"]:
        which = "its main process" if w.busiest_is_main else "its busiest process"
        used = f"{which} (pid {w.busiest_process_pid}) used {w.busiest_process_cores:.2f} cores"
        if w.busiest_is_main and w.main_thread_cores is not None:  # its threads were read: the busiest decides
            single = ramp(w.main_thread_cores, t["cpu_saturation_low"], t["cpu_saturation_high"])
            used += f", its busiest thread (tid {w.main_thread_tid}) {w.main_thread_cores:.2f}"
            parts.append(used + (": one thread saturated (data loading in the main process, a decoder, a tokenizer)"
                                 if single > 0 else ": spread over its threads, none saturated"))
        else:
            single = ramp(w.busiest_process_cores, t["cpu_saturation_low"], t["cpu_saturation_high"])
            parts.append(used + ": one core saturated (a single thread: data loading in the main process, a "
                                "decoder, a tokenizer)")
        own = max(own, single)
    cgroup_psi = w.cgroup_pressure.get("cpu") if w is not None else None
    if cgroup_psi is not None:
        own = max(own, ramp(cgroup_psi, t["psi_cpu_low"], t["psi_cpu_high"]))
        parts.append(f"its cgroup's PSI cpu some avg10 {pct(cgroup_psi)}")
    waits = _cpu_waits(w, t) if w is not None else None
    if waits is not None:
        own = max(own, waits[0])
        parts.append(waits[1])
    host, host_parts = view.cpu if view is not None else _host_cpu(h, t)
    parts.extend(host_parts)
    own_cores = w.cores_used if w is not None else None
    involved = _involvement(own_cores, t["own_cpu_cores"])
    if host > 0 and own_cores is not None and involved < 1.0:
        parts.append(f"host-wide CPU counts {pct(involved)}: the workload itself uses {own_cores:.2f} cores")
    # its threads' measured waits say whether the host's contention reaches them: busy CPUs, PSI and a long run queue
    # of neighbours whose threads leave its own runnable threads a CPU are not its bottleneck
    if waits is not None and waits[2] < involved:
        involved = waits[2]
        if host > 0:
            parts.append(f"host-wide CPU counts {pct(involved)}: its threads waited only {pct(w.cpu_wait_share)} "
                         "for a CPU")
    signal = max(own, host * involved)
    factor = 1.0 if cpu_is_compute else starved
    return Scored(factor * signal, _join(busy_text, parts, cpu_is_compute), own > 0 and own >= host * involved)


def _cpu_waits(w: WorkloadSignals, t: Mapping[str, float]) -> tuple[float, str, float] | None:
    """(score, evidence, how much host-wide CPU signals count for it) from how long its processes' main threads
    waited runnable for a CPU (/proc/PID/schedstat): more runnable threads than cores (OpenMP, MKL or tokenizer pools
    times DataLoader workers or ranks) starve the work with no thread saturated and not every core used. The wait
    counts in proportion to its own use (own_cpu_cores), as host-wide CPU does: a workload using a tenth of a core
    whose few threads wait behind other processes' is barely slowed. None when unread, or too few of its threads
    were runnable to tell."""
    share, runnable = w.cpu_wait_share, w.runnable_main_threads
    if share is None or runnable is None or runnable < t["cpu_wait_runnable_min"]:
        return None
    score = ramp(share, t["cpu_wait_low"], t["cpu_wait_high"])
    text = f"its processes' main threads waited {pct(share)} of their runnable time for a CPU"
    threads = w.runnable_threads
    if threads is not None and w.cores_allowed:
        per_core = threads / w.cores_allowed
        cores = f"{w.cores_allowed:.2f}".rstrip("0").rstrip(".")
        of = f", of its {w.threads} threads" if w.threads else ""
        text += f": ≈ {threads:.0f} runnable threads on the {cores} cores it may use ({per_core:.1f} per core{of})"
        if score > 0:
            text += (": its own threads outnumber its cores (thread pools, OpenMP, MKL, a tokenizer, times its "
                     "processes)" if per_core >= t["threads_per_core_over"] else ": other processes' threads take the CPUs")
    involved = _involvement(w.cores_used, t["own_cpu_cores"])
    if score > 0 and involved < 1.0:
        score *= involved
        text += f" (counts {pct(involved)}: the workload itself uses {w.cores_used:.2f} cores)"
    return score, text, ramp(share, 0.0, t["cpu_wait_low"])


def _worst_rank(ranks: Any, t: Mapping[str, float], trainer: bool = True) -> tuple[float, str] | None:
    """(score, evidence) of the rank that starves its GPU most: its DataLoader workers' summed cores against their
    count (one core each: all busy, they cannot keep up), and its own process at a full core (its busiest thread
    decides where its threads were read); None when no rank shows either. ``trainer``: its worker count means
    something (not a serving runtime's main process), so 0 is said."""
    low, high = t["cpu_saturation_low"], t["cpu_saturation_high"]
    best: tuple[float, float, str] | None = None
    for r in ranks:
        who = f"rank pid {r.pid}" if r.launched else f"its main process (pid {r.pid})"
        score, texts = 0.0, []
        if r.workers and r.workers_cores is not None:
            ratio = r.workers_cores / r.workers
            score = ramp(ratio, low, high)
            texts.append(f"{who}'s {plural(r.workers, 'DataLoader worker')} used {r.workers_cores:.2f} of the "
                         + ("1 core it can use" if r.workers == 1 else f"{r.workers} cores they can use (one each)")
                         + ((": it cannot keep up" if r.workers == 1 else ": they cannot keep up") if score > 0 else ""))
            who = "the rank itself" if r.launched else "the main process itself"
        if r.cores is not None and r.cores >= low:
            used = f"{who} used {r.cores:.2f} cores"
            if r.thread_cores is not None:  # its threads were read: the busiest decides
                single = ramp(r.thread_cores, low, high)
                used += f", its busiest thread (tid {r.thread_tid}) {r.thread_cores:.2f}"
                used += (": one thread saturated (data loading in the main process, a decoder, a tokenizer)"
                         if single > 0 else ": spread over its threads, none saturated")
            else:
                single = ramp(r.cores, low, high)
                used += ": one core saturated (a single thread: data loading in the main process, a decoder, a tokenizer)"
            if not r.workers and trainer:
                used += ", with 0 DataLoader workers"
            score = max(score, single)
            texts.append(used)
        if not texts:
            continue
        key = (score, max(r.cores or 0.0, (r.workers_cores or 0.0) / max(r.workers, 1)))
        if best is None or key > best[:2]:
            many = f" (the worst of {len(ranks)} ranks)" if len(ranks) > 1 and score > 0 else ""
            best = (*key, "; ".join(texts) + many)
    return None if best is None else (best[0], best[2])


def rule_host_memory(starved: float, busy_text: str, h: HostSignals, t: Mapping[str, float],
                     view: HostView | None = None) -> tuple[float, str]:
    signal, parts = view.memory if view is not None else _host_memory(h, t)
    # memory pressure slows everything on the host: it needs no starved GPU to count, but a starved one
    # makes it more certain that it costs the workload throughput
    return signal * (0.6 + 0.4 * starved), _join(busy_text, parts)


def _host_memory(h: HostSignals, t: Mapping[str, float]) -> tuple[float, tuple[str, ...]]:
    parts, signal = [], 0.0
    full = h.psi.get("memory.full")
    if full is not None:
        signal = max(signal, ramp(full, t["psi_memory_low"], t["psi_memory_high"]))
        parts.append(f"PSI memory full avg10 {pct(full)}")
    if h.memory_available_bytes is not None and h.memory_total_bytes:
        available = h.memory_available_bytes / h.memory_total_bytes
        signal = max(signal, ramp(available, t["mem_available_low"], t["mem_available_high"]))
        parts.append(f"{gib(h.memory_available_bytes)} of {gib(h.memory_total_bytes)} RAM available")
    if h.major_faults_per_second is not None and h.major_faults_per_second >= 1:
        parts.append(f"{h.major_faults_per_second:.0f} major faults/s")
    return signal, tuple(parts)


def rule_shared_memory(starved: float, busy_text: str, h: HostSignals, t: Mapping[str, float],
                       workers: int | None, view: HostView | None = None, processes: int | None = None) -> Scored:
    """``workers``: the DataLoader workers running under the workload's ranks (measured; 0 or None: none).
    ``processes``: for work without a GPU, its process count: a multi-process runtime (vLLM's API server, engine
    core and CPU workers) passes its requests and tensors through /dev/shm, a single process (llama.cpp, Ollama's
    runner) passes nothing there; None for GPU work (the starvation term decides)."""
    fill, text = view.shm if view is not None else _host_shm(h, t)
    # a full /dev/shm kills DataLoader workers ("No space left on device", "Bus error"): it limits a
    # workload whose workers run even before the GPU starves
    factor = max(starved, 0.8 if workers else 0.0)
    if text is None:
        return Scored(0.0, "shared memory unknown", False)
    if workers:
        text += f" while {plural(workers, 'DataLoader worker')} {'runs' if workers == 1 else 'run'} under its ranks"
    elif processes is not None and processes >= 2:
        text += f" while its {plural(processes, 'process')} pass requests and tensors through it"
    elif processes is not None:
        factor = 0.0
        if fill > 0:
            text += (f"; not limiting: the workload runs {plural(processes, 'process')}, which passes nothing "
                     "through shared memory")
    return Scored(fill * factor, _join(busy_text, [text]), bool(workers) or bool(processes and processes >= 2))


def rule_disk_io(starved: float, busy_text: str, h: HostSignals, t: Mapping[str, float],
                 w: WorkloadSignals | None = None, view: HostView | None = None) -> Scored:
    """Storage starving the GPU. Its cgroup's PSI io is direct evidence; a busy disk, host PSI io and iowait count
    only in proportion to the block I/O the workload itself does (a backup saturating the disk does not starve a
    trainer whose data sits in RAM)."""
    host, host_parts = view.disk if view is not None else _host_disk(h, t)
    parts = list(host_parts)
    own_io = w.io_bytes_per_second if w is not None else None
    involved = _involvement(None if own_io is None else own_io / 2**20, t["own_io_mib_per_second"])
    if own_io is not None and host > 0:
        of = ""
        if h.disk_bytes_per_second:
            of = f" ({pct(own_io / h.disk_bytes_per_second)} of {h.disk_device}'s {h.disk_bytes_per_second / 1e6:.0f} MB/s)"
        note = "" if involved >= 1.0 else f": host-wide I/O counts {pct(involved)}"
        parts.append(f"the workload's own I/O {own_io / 1e6:.1f} MB/s{of}{note}")
    own = 0.0
    cgroup_psi = w.cgroup_pressure.get("io") if w is not None else None
    if cgroup_psi is not None:
        own = ramp(cgroup_psi, t["psi_io_low"], t["psi_io_high"])
        parts.append(f"its cgroup's PSI io some avg10 {pct(cgroup_psi)}")
    direct = own > 0 or (own_io is not None and involved > 0)
    return Scored(starved * max(own, host * involved), _join(busy_text, parts), direct)


def rule_network(starved: float, busy_text: str, h: HostSignals, t: Mapping[str, float],
                 distributed: bool, waiting: tuple[float, str] | None = None, busy: float | None = None) -> Scored:
    """A distributed workload's collectives over sockets or a NIC. Two ways: its GPUs starved while the busiest
    NIC runs near its link speed, or (``waiting``: not_computing over its GPUs, None without GPM) its GPUs busy
    but not computing while the busiest interface carries steady traffic, judged against its own level (a TCP
    transport reaches only a fraction of line rate, so saturation is the wrong test there). ``busy``: its GPUs'
    mean busy ratio, for the evidence of GPUs without GPM."""
    if not distributed:
        return Scored(0.0, "not a distributed workload", False)
    if h.net_ratio is None and h.net_busiest_bytes_per_second is None:
        return Scored(0.0, "network throughput unknown", False)
    saturated, parts = 0.0, []
    if h.net_ratio is not None:
        saturated = starved * ramp(h.net_ratio, t["net_low"], t["net_high"])
        parts.append(f"{h.net_device} at {(h.net_bytes_per_second or 0) * 8 / 1e9:.1f} Gbit/s, "
                     f"{pct(h.net_ratio)} of link speed")
    text = _join(busy_text, parts) if parts else busy_text
    rate = h.net_busiest_bytes_per_second
    if waiting is None:
        if busy is not None and ramp(busy, t["busy_low"], t["busy_high"]) > 0 and saturated < 1.0:
            text += f"; {NO_GPM}: busy GPUs count as waiting on the network only while its link is saturated"
        return Scored(saturated, text, False)
    bound = 0.0
    if waiting[0] > 0 and rate is not None:
        level = ramp(rate / 2**20, t["net_active_low_mib"], t["net_active_high_mib"])
        steadiness = ramp(h.net_steady, t["link_steady_low"], t["link_steady_high"])
        bound = waiting[0] * level * steadiness
        if level > 0:
            speed = "" if h.net_device != h.net_busiest_device or h.net_ratio is None else \
                f", {pct(h.net_ratio)} of link speed"
            steady = (f"at that level {pct(h.net_steady)} of the window" if steadiness > 0
                      else f"only {pct(h.net_steady)} of the window: bursts, not steady traffic")
            link = (f"{h.net_busiest_device} carries {rate / 1e6:.0f} MB/s ({rate * 8 / 1e9:.1f} Gbit/s{speed}), "
                    f"{steady}")
            if bound > saturated:
                return Scored(bound, f"{waiting[1]}; {link}: the ranks wait on collectives over the network (a TCP "
                                     "transport reaches only a fraction of line rate, so saturation is not the test)",
                              True)
            text += f"; {link}"
    return Scored(saturated, text, False)


# resource -> (what a neighbour uses of it, its share, how to say it): the evidence names who else presses
NEIGHBOUR_RESOURCES: dict[str, tuple[str, str, str]] = {
    "cpu": ("cpu_cores", "cpu_share", "of the CPUs"),
    "disk_io": ("io_bytes_per_second", "io_share", "of the processes' disk I/O"),
    "host_memory": ("rss_bytes", "memory_share", "of RAM"),
}
NEIGHBOUR_MIN = {"cpu": 0.1, "disk_io": 1e6, "host_memory": 256 * 2**20}  # as sources/neighbours.py names them


# (id of a neighbours tuple, resource) -> (that tuple, its neighbours above NEIGHBOUR_MIN for the resource, largest
# first): ranked once per scan, not once per workload scored (50 pods a tick, each asking for three resources twice)
_RANKED: dict[tuple[int, str], tuple[tuple[Any, ...], tuple[Any, ...]]] = {}
RANKED_MAX = 64  # entries kept (a scan's short and long host signals share its tuple; three resources each)
NEIGHBOUR_TEXTS = 256  # evidence texts kept (neighbour_text): one per resource and top 3 in the windows scored


def neighbours_of(h: HostSignals, resource: str, workload: str | None) -> list[Any]:
    """The top 3 processes outside ``workload`` pressing on ``resource``, largest first (issue 12, class 8):
    what sources/neighbours.py found while the host was under pressure; empty on a calm host."""
    everyone = h.neighbours
    if not everyone:
        return []
    key = (id(everyone), resource)
    known = _RANKED.get(key)
    if known is None or known[0] is not everyone:
        amount, floor = NEIGHBOUR_RESOURCES[resource][0], NEIGHBOUR_MIN[resource]
        if len(_RANKED) >= RANKED_MAX:
            _RANKED.clear()
        known = _RANKED[key] = (everyone, tuple(sorted(
            (n for n in everyone if (getattr(n, amount) or 0) >= floor), key=lambda n: -(getattr(n, amount) or 0))))
    out = []  # a stable sort then a filter: the order filtering first and sorting then gives
    for n in known[1]:
        if n.workload != workload:
            out.append(n)
            if len(out) == 3:
                break
    return out


def neighbour_text(resource: str, found: Sequence[Any]) -> str:
    """'outside the workload: stress-ng (user bob, pid 4242) 7.90 cores, 49 % of the CPUs; ...'. The same
    neighbours (equal values) make the same text: kept (NEIGHBOUR_TEXTS), since every workload scored while they
    press on the host names them."""
    try:
        return _neighbour_text(resource, tuple(found))
    except TypeError:  # an unhashable field: made each time
        return _neighbour_text.__wrapped__(resource, tuple(found))


@functools.lru_cache(maxsize=NEIGHBOUR_TEXTS)
def _neighbour_text(resource: str, found: tuple[Any, ...]) -> str:
    amount, share, of = NEIGHBOUR_RESOURCES[resource]
    parts = []
    for n in found:
        value = getattr(n, amount)
        used = {"cpu": f"{value:.2f} {'core' if value == 1 else 'cores'}", "disk_io": f"{value / 1e6:.0f} MB/s",
                "host_memory": gib(value)}[resource]
        owner = f"workload {n.workload}, " if n.workload else ""
        ratio = getattr(n, share)
        parts.append(f"{n.name} ({owner}user {n.user}, pid {n.pid}) {used}"
                     + (f", {pct(ratio)} {of}" if ratio is not None else ""))
    return "outside the workload: " + "; ".join(parts)


def _name_neighbours(results: dict[str, Result], h: HostSignals, workload: str) -> None:
    for resource in NEIGHBOUR_RESOURCES:
        found = neighbours_of(h, resource, workload)
        if found:
            res = results[resource]  # keep a Scored's direct-evidence flag (ties, decide)
            results[resource] = Scored(res[0], f"{res[1]}; {neighbour_text(resource, found)}",
                                       getattr(res, "direct", False))


def _join(busy_text: str, parts: Sequence[str], standalone: bool = False) -> str:
    if not parts:
        return f"{busy_text}; no corroborating signal"
    return ("" if standalone else f"{busy_text} while ") + "; ".join(parts)


# --------------------------------------------------------------------------------------- scoring
Result = tuple  # (score, evidence), a Scored where the rule tells direct evidence from host-wide (see decide)
STARVATION_RULES = ("cpu", "host_memory", "shared_memory", "disk_io", "network")


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
        return Verdict({r: 0.0 for r in RESOURCES}, {r: f"GPU {g.index} is down" for r in RESOURCES}, NONE)
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


def cpu_demand(w: WorkloadSignals, serving: Any, t: Mapping[str, float]) -> tuple[float, str | None]:
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


def score_workload(profile: Any, w: WorkloadSignals, gpus: list[GpuSignals], h: HostSignals,
                   t: Mapping[str, float], expected_peak: float | None = None, serving: Any = None,
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


def _serving_verdict(results: dict[str, Result], t: Mapping[str, float], serving: Any,
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


def _verdict(results: Mapping[str, Result], t: Mapping[str, float],
             precedes: Mapping[str, tuple[str, ...]] | None = None) -> Verdict:
    scores = {r: round(results[r][0], 4) for r in RESOURCES}
    evidence = {r: results[r][1] for r in RESOURCES}
    direct = {r for r in RESOURCES if getattr(results[r], "direct", r not in STARVATION_RULES)}
    candidate, why = decide(scores, t, direct, precedes)
    if why and " precedes " in why:
        evidence[candidate] = f"{evidence[candidate]} (decided by causal evidence: {why}: {PRECEDENCE_WHY[candidate]})"
    elif why:
        evidence[candidate] = f"{evidence[candidate]} (a tie decided by causal evidence: {why})"
    return Verdict(scores=scores, evidence=evidence, candidate=candidate)


# ------------------------------------------------------------------------------------- hysteresis
@dataclass
class Hysteresis:
    """The primary changes only after a new candidate has held for ``hold`` seconds."""

    hold: float
    primary: str = NONE
    candidate: str = NONE
    since: float | None = None

    def update(self, candidate: str, now: float) -> tuple[str, bool]:
        """(primary, changed) after seeing ``candidate`` at monotonic time ``now``."""
        if candidate == self.primary:
            self.candidate, self.since = candidate, None
            return self.primary, False
        if candidate != self.candidate or self.since is None:
            self.candidate, self.since = candidate, now
        if now - self.since >= self.hold:
            self.primary, self.since = candidate, None
            return self.primary, True
        return self.primary, False

    def pending(self, now: float) -> tuple[str, float, float] | None:
        """(candidate, seconds it has held, seconds it must still hold) while a candidate other than the primary
        waits out its hold, else None. Called after :meth:`update` with the same ``now``."""
        if self.since is None or self.candidate == self.primary:
            return None
        held = max(0.0, now - self.since)
        return self.candidate, held, max(0.0, self.hold - held)

    def interrupt(self) -> None:
        """A tick without a verdict (the GPU or workload was not seen): a pending candidate must start its
        hold again when it comes back; the primary stays."""
        self.candidate, self.since = self.primary, None


def thresholds_markdown() -> str:
    """The thresholds table of docs/analysis.md (a test keeps them equal)."""
    lines = ["| threshold (`analysis.thresholds.<name>`) | default | meaning |", "|---|---|---|"]
    lines += [f"| `{name}` | {default:g} | {meaning} |" for name, (default, meaning) in THRESHOLDS.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(thresholds_markdown(), end="")

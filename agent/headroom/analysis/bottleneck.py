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
    "nvlink_low": (0.6, "NVLink throughput / capability of the active links where nvlink starts to score"),
    "nvlink_high": (0.85, "NVLink throughput / capability of the active links where nvlink scores 1"),
    "net_low": (0.70, "busiest NIC's throughput / link speed where network starts to score"),
    "net_high": (0.90, "busiest NIC's throughput / link speed where network scores 1"),
    "kv_usage_low": (0.80, "serving runtime's KV cache usage where kv_cache starts to score"),
    "kv_usage_high": (0.95, "serving runtime's KV cache usage where kv_cache scores 1 (with requests waiting)"),
    "serving_waiting_high": (1.0, "mean requests waiting over the window at which queueing counts fully"),
    "preemptions_per_minute_high": (1.0, "preemptions per minute at which KV eviction counts fully"),
    "demand_busy": (0.05, "GPU busy ratio below which the GPU shows no demand (idle for lack of work): no starvation "
                          "rule (cpu, host_memory, shared_memory, disk_io, network) scores, whatever the host does"),
    "own_cpu_cores": (0.5, "cores the workload's own processes use from which host-wide CPU signals (host busy, PSI "
                           "cpu) count for it in full (in proportion below; in full when its processes are unknown)"),
    "own_io_mib_per_second": (1.0, "MiB/s of the workload's own block I/O from which host-wide disk signals (busy, "
                                   "PSI io, iowait) count for it in full (in proportion below; in full when unknown)"),
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
}


def candidate_of(scores: Mapping[str, float], t: Mapping[str, float],
                 direct: frozenset[str] | set[str] | None = None) -> str:
    """The top-scoring resource at or above primary_min_score, else none; ties are decided by :func:`decide`."""
    return decide(scores, t, direct)[0]


def decide(scores: Mapping[str, float], t: Mapping[str, float],
           direct: frozenset[str] | set[str] | None = None) -> tuple[str, str]:
    """(candidate, why the tie went its way or ""). Scores within ``tie_margin`` of the top tie; among them
    (1) a cause beats the effects it explains (EXPLAINS), (2) direct evidence (the GPU's own counters, the
    workload's own consumption or stall) beats a host-wide correlation, (3) the higher score wins, and only
    an exact tie left after all that falls back to the fixed order of RESOURCES."""
    top = max(scores.get(r, 0.0) for r in RESOURCES)
    if top < t["primary_min_score"]:
        return NONE, ""
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
def rule_gpu_compute(g: GpuSignals, t: Mapping[str, float]) -> tuple[float, str]:
    busy = ramp(g.busy, t["compute_busy_low"], t["compute_busy_high"])
    throttled = max(g.thermal_share, g.power_cap_share)
    score = busy * (1.0 - throttled)
    clocks = "" if g.sm_clock_ratio is None else f", SM clock {pct(g.sm_clock_ratio)} of max"
    share = max(throttled, g.throttled_share or 0.0)
    busy_text = ("busy unknown (MIG mode: NVML reports no utilization for the GPU)" if g.busy is None and g.mig_enabled
                 else f"busy {pct(g.busy)}")
    text = f"GPU {g.index} {busy_text}{clocks}, " + (f"throttled {pct(share)} of the window" if share > 0
                                                      else "not throttled")
    if g.sm_active is not None:  # GPM: how much of the GPU the kernels used, not just that one ran
        score *= ramp(g.sm_active, t["sm_active_low"], t["sm_active_high"])
        text += f", SMs active {pct(g.sm_active)}"
        if busy > 0 and g.sm_active < t["sm_active_low"]:
            text += (": launch- or latency-bound (small kernels, synchronisation, or waits on the host, memory "
                     "or the interconnect), not compute-bound")
    return score, text


def rule_gpu_memory(g: GpuSignals, t: Mapping[str, float], expected_peak: float | None = None,
                    reserved_by_runtime: bool | str = False) -> tuple[float, str]:
    """``reserved_by_runtime``: the serving runtime (its name, or True) that reserves the card up front."""
    scope = f" ({g.memory_scope})" if g.memory_scope else ""
    if reserved_by_runtime:
        runtime = reserved_by_runtime if isinstance(reserved_by_runtime, str) else "vLLM"
        return 0.0, (f"GPU {g.index}{scope} VRAM {pct(g.memory_used_ratio)} used, reserved up front by the runtime "
                     f"({runtime}): NVML cannot see how full its KV cache is")
    score = ramp(g.memory_used_ratio, t["vram_low"], t["vram_high"])
    growth = g.memory_growth_bytes_per_second
    text = (f"GPU {g.index}{scope} VRAM {gib(g.memory_used_bytes)} of {gib(g.memory_total_bytes)} "
            f"({pct(g.memory_used_ratio)})")
    filling = (g.memory_used_ratio or 0.0) >= t["vram_low"]
    if growth and growth > 0 and g.memory_used_bytes is not None and g.memory_total_bytes:
        to_full = (g.memory_total_bytes - g.memory_used_bytes) / growth
        steady = "" if g.memory_growth_r2 is None else f", a steady trend: R² {g.memory_growth_r2:.2f}"
        text += f", growing {growth / 2**20:.0f} MiB/s{steady} (full in {to_full / 60:.0f} min at this rate)"
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


def rule_pcie(g: GpuSignals, t: Mapping[str, float]) -> tuple[float, str]:
    not_saturated = 1.0 - ramp(g.busy, t["compute_busy_low"], t["compute_busy_high"])
    score = ramp(g.pcie_ratio, t["pcie_low"], t["pcie_high"]) * not_saturated
    if g.pcie_bytes_per_second is None or not g.pcie_capability_bytes_per_second:
        return 0.0, f"GPU {g.index} PCIe throughput unknown"
    return score, (f"GPU {g.index} PCIe {g.pcie_bytes_per_second / 1e9:.1f} of "
                   f"{g.pcie_capability_bytes_per_second / 1e9:.1f} GB/s ({pct(g.pcie_ratio)}) while busy {pct(g.busy)}")


def rule_nvlink(g: GpuSignals, t: Mapping[str, float]) -> tuple[float, str]:
    """The GPU-to-GPU interconnect near its capacity. Where GPM says the SMs are busy anyway, compute is
    the limit, not the links: the score is scaled down by SM activity (tensor-parallel all-reduce time
    shows as "utilization" too, so busy alone cannot say that)."""
    if g.nvlink_bytes_per_second is None or not g.nvlink_capability_bytes_per_second:
        return 0.0, f"GPU {g.index} NVLink throughput unknown (no NVLink, or not yet two samples)"
    score = ramp(g.nvlink_ratio, t["nvlink_low"], t["nvlink_high"])
    text = (f"GPU {g.index} NVLink {g.nvlink_bytes_per_second / 1e9:.1f} of "
            f"{g.nvlink_capability_bytes_per_second / 1e9:.0f} GB/s ({pct(g.nvlink_ratio)})")
    if g.sm_active is not None:
        score *= 1.0 - ramp(g.sm_active, t["sm_active_low"], t["sm_active_high"])
        text += f" while SMs active {pct(g.sm_active)}"
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

    cpu: tuple[float, tuple[str, ...]]  # host CPU busy and PSI cpu: (score, evidence parts)
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
    if w is not None and w.cores_used is not None:
        capacity = w.cores_allowed
        who = f"the workload's {plural(w.processes, 'process')}"
        of_what = "it may use (cgroup quota, else logical CPUs)"
        if w.dataloader_workers:
            by_workers = float(w.dataloader_workers)
            capacity = min(capacity or by_workers, by_workers)
            # cores_used counts every process of the workload, its main process too: say so (issue 29: "4
            # DataLoader workers used 4.70 of 4 cores" read as more than all of them)
            who = f"the workload's main process and {plural(w.dataloader_workers, 'DataLoader worker')}"
            of_what = ("its workers can use (one each)" if capacity == by_workers
                       else "it may use (cgroup quota, else logical CPUs)")  # fmt: skip
        if capacity:
            saturation = w.cores_used / capacity
            own = max(own, ramp(saturation, t["cpu_saturation_low"], t["cpu_saturation_high"]))
            cores = f"{capacity:.2f}".rstrip("0").rstrip(".")  # a quota may be 0.5 or 1.5 cores
            parts.append(f"{who} used {w.cores_used:.2f} {'core' if round(w.cores_used, 2) == 1 else 'cores'}, "
                         f"of the {cores} {of_what}")
    # one process at a full core: a thread that cannot go faster (the GIL of a DataLoader with 0 workers, a
    # single-threaded decoder or tokenizer) while the host looks idle. Declared DataLoader workers work in
    # parallel, so one hot worker among idle ones is not the limit (their sum above is): there only the main
    # process counts, the one that feeds the GPU
    critical = w is not None and (not w.dataloader_workers or w.busiest_is_main)
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
    host, host_parts = view.cpu if view is not None else _host_cpu(h, t)
    parts.extend(host_parts)
    own_cores = w.cores_used if w is not None else None
    involved = _involvement(own_cores, t["own_cpu_cores"])
    if host > 0 and own_cores is not None and involved < 1.0:
        parts.append(f"host-wide CPU counts {pct(involved)}: the workload itself uses {own_cores:.2f} cores")
    signal = max(own, host * involved)
    factor = 1.0 if cpu_is_compute else starved
    return Scored(factor * signal, _join(busy_text, parts, cpu_is_compute), own > 0 and own >= host * involved)


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
                       workers_declared: bool, view: HostView | None = None) -> Scored:
    fill, text = view.shm if view is not None else _host_shm(h, t)
    # a full /dev/shm kills DataLoader workers ("No space left on device", "Bus error"): it limits a
    # workload that declares workers even before the GPU starves
    factor = max(starved, 0.8 if workers_declared else 0.0)
    if text is None:
        return Scored(0.0, "shared memory unknown", False)
    if workers_declared:
        text += " while the workload declares DataLoader workers"
    return Scored(fill * factor, _join(busy_text, [text]), workers_declared)  # its workers pass batches through it


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
                 distributed: bool) -> tuple[float, str]:
    if not distributed:
        return 0.0, "not a distributed workload"
    if h.net_ratio is None:
        return 0.0, "network throughput unknown"
    text = f"{h.net_device} at {(h.net_bytes_per_second or 0) * 8 / 1e9:.1f} Gbit/s, {pct(h.net_ratio)} of link speed"
    return starved * ramp(h.net_ratio, t["net_low"], t["net_high"]), _join(busy_text, [text])


# resource -> (what a neighbour uses of it, its share, how to say it): the evidence names who else presses
NEIGHBOUR_RESOURCES: dict[str, tuple[str, str, str]] = {
    "cpu": ("cpu_cores", "cpu_share", "of the CPUs"),
    "disk_io": ("io_bytes_per_second", "io_share", "of the processes' disk I/O"),
    "host_memory": ("rss_bytes", "memory_share", "of RAM"),
}
NEIGHBOUR_MIN = {"cpu": 0.1, "disk_io": 1e6, "host_memory": 256 * 2**20}  # as sources/neighbours.py names them


def neighbours_of(h: HostSignals, resource: str, workload: str | None) -> list[Any]:
    """The top 3 processes outside ``workload`` pressing on ``resource``, largest first (issue 12, class 8):
    what sources/neighbours.py found while the host was under pressure; empty on a calm host."""
    amount, _, _ = NEIGHBOUR_RESOURCES[resource]
    found = [n for n in h.neighbours if n.workload != workload and (getattr(n, amount) or 0) >= NEIGHBOUR_MIN[resource]]
    return sorted(found, key=lambda n: -(getattr(n, amount) or 0))[:3]


def neighbour_text(resource: str, found: list[Any]) -> str:
    """'outside the workload: stress-ng (user bob, pid 4242) 7.90 cores, 49 % of the CPUs; ...'."""
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


def score_gpu(g: GpuSignals, h: HostSignals, t: Mapping[str, float], reserved_by: str | None = None,
              view: HostView | None = None, rules: GpuRules | None = None) -> Verdict:
    """Scores for one GPU on its own (also for GPUs no profile claims): host rules use host signals only.
    ``reserved_by``: the serving runtime on this GPU that reserves its memory up front (vLLM, SGLang).
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
        "gpu_memory": rule_gpu_memory(g, t, None, reserved_by or False),
        "gpu_thermal": own["gpu_thermal"],
        "gpu_power": own["gpu_power"],
        "pcie": own["pcie"],
        "nvlink": own["nvlink"],
        "cpu": rule_cpu(starved, busy_text, h, None, t, view=view),
        "host_memory": rule_host_memory(starved, busy_text, h, t, view),
        "shared_memory": rule_shared_memory(starved, busy_text, h, t, workers_declared=False, view=view),
        "disk_io": rule_disk_io(starved, busy_text, h, t, view=view),
        "network": (0.0, "network is judged per distributed workload"),
        "kv_cache": (0.0, "the KV cache is judged per serving workload"),
    }
    idle = _no_demand(g.busy, t, str(g.index))
    if idle is not None:
        v = _verdict(_without_demand(results, idle), t)
        return replace(v, evidence={**v.evidence, NONE: idle})
    return _verdict(results, t)


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
                   kv_alternatives: str = "", view: HostView | None = None, rules: GpuRules | None = None) -> Verdict:
    """Scores for one declared workload from its GPUs, its processes and the host (``view``, ``rules``: as
    score_gpu)."""
    kind = getattr(profile.kind, "value", str(profile.kind))
    cpu_only = kind == "cpu-inference"
    up = [g for g in gpus if g.up]
    busy_values = [g.busy for g in up if g.busy is not None]
    busy = sum(busy_values) / len(busy_values) if busy_values else None
    starved = starvation(busy, t) if busy is not None else (1.0 if cpu_only else 0.0)
    names = ", ".join(str(g.index) for g in up)
    busy_text = (f"GPU {names} busy {pct(busy)}" if busy is not None
                 else ("CPU inference" if cpu_only else "no GPU attributed to the workload"))
    runtime = getattr(profile, "runtime", None)
    reserved = reserving_runtime(runtime)
    workers = bool(getattr(profile, "dataloader_workers", None))
    parallel = getattr(profile, "parallel", None)
    # distributed: replicas or stages that exchange data every step (we cannot see whether peers share the host)
    distributed = bool(parallel and (parallel.data > 1 or parallel.pipeline > 1))

    own = [GpuRules.for_thresholds(rules, t)(g) for g in up]

    def best(pairs: list[tuple[float, str]]) -> tuple[float, str]:
        return max(pairs, key=lambda p: p[0]) if pairs else (0.0, "no GPU attributed to the workload")

    per_gpu_peak = (expected_peak / max(1, len(up))) if expected_peak else None
    results: dict[str, Result] = {
        "gpu_compute": best([r["gpu_compute"] for r in own]),
        "gpu_memory": best([rule_gpu_memory(g, t, per_gpu_peak, reserved or False) for g in up]),
        "gpu_thermal": best([r["gpu_thermal"] for r in own]),
        "gpu_power": best([r["gpu_power"] for r in own]),
        "pcie": best([r["pcie"] for r in own]),
        "nvlink": best([r["nvlink"] for r in own]),
        "cpu": rule_cpu(starved, busy_text, h, w, t, cpu_is_compute=cpu_only, view=view),
        "host_memory": rule_host_memory(starved, busy_text, h, t, view),
        "shared_memory": rule_shared_memory(starved, busy_text, h, t, workers_declared=workers, view=view),
        "disk_io": rule_disk_io(starved, busy_text, h, t, w, view),
        "network": rule_network(starved, busy_text, h, t, distributed),
        "kv_cache": serving_rules.rule_kv_cache(serving, t, busy, kv_alternatives),
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
    idle = None if (cpu_only or demanded) else _no_demand(busy, t, names)
    if idle is not None:
        results = _without_demand(results, idle)
    _name_neighbours(results, h, profile.name)
    v = _serving_verdict(results, t, serving, busy)
    if idle is not None and v.candidate == NONE and NONE not in v.evidence:
        v = replace(v, evidence={**v.evidence, NONE: idle})
    return v


def reserving_runtime(runtime: Any) -> str | None:
    """The name of a serving runtime that reserves the GPU's memory up front (vLLM's gpu_memory_utilization,
    SGLang's mem_fraction_static), so a full card is its normal state; else None."""
    name = getattr(runtime, "name", None)
    return {"vllm": "vLLM", "sglang": "SGLang"}.get(name or "")


def _serving_verdict(results: dict[str, Result], t: Mapping[str, float], serving: Any,
                     busy: float | None) -> Verdict:
    """The verdict, with what the serving runtime says about demand (analysis/serving.py): a server with
    nothing running or waiting is idle for lack of demand whatever the host does (every score 0); one
    whose requests queue while the GPU is busy says so under gpu_compute; one whose requests queue
    while KV cache and GPU have room is held back by its own limits (evidence for none)."""
    idle = serving_rules.idle_for_demand(serving)
    if idle is not None:
        results = {r: (0.0, f"{res[1]}; not limiting: {idle}") for r, res in results.items()}
        v = _verdict(results, t)
        return replace(v, evidence={**v.evidence, NONE: idle})
    if serving is not None and serving.up and (serving.waiting or 0) > 0:
        res = results["gpu_compute"]
        results["gpu_compute"] = (res[0], f"{res[1]}; {serving_rules.describe(serving)}")
    v = _verdict(results, t)
    limited = serving_rules.runtime_limited(serving, t, busy)
    return replace(v, evidence={**v.evidence, NONE: limited}) if limited is not None else v


def _verdict(results: Mapping[str, Result], t: Mapping[str, float]) -> Verdict:
    scores = {r: round(results[r][0], 4) for r in RESOURCES}
    evidence = {r: results[r][1] for r in RESOURCES}
    direct = {r for r in RESOURCES if getattr(results[r], "direct", r not in STARVATION_RULES)}
    candidate, why = decide(scores, t, direct)
    if why:
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

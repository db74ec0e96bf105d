"""Bottleneck classification: a score in [0, 1] per resource, with evidence, for each GPU and workload.

Each rule below is a small function of the signals (signals.py) returning (score, evidence). A score
says how sure the rule is that this resource limits the work now. Rules that explain an under-used GPU
(cpu, shared_memory, disk_io, host_memory, network) multiply a *starvation* term (the GPU is less busy
than it could be) by the corroborating signal, so low GPU use alone never names a culprit, and an idle
GPU with a calm host is `none`: idle for lack of demand is not a bottleneck. docs/analysis.md documents
every rule, threshold, source and blind spot; thresholds come from config.yaml (analysis.thresholds).
"""

from __future__ import annotations

from collections.abc import Mapping
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
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


@dataclass(frozen=True)
class Verdict:
    """Scores and evidence for one GPU or workload, and the primary after hysteresis."""

    scores: Mapping[str, float]
    evidence: Mapping[str, str]
    candidate: str  # the top-scoring resource this tick (or none)
    primary: str = NONE  # after hysteresis
    long_scores: Mapping[str, float] = field(default_factory=dict)


def candidate_of(scores: Mapping[str, float], t: Mapping[str, float]) -> str:
    best = max(RESOURCES, key=lambda r: scores.get(r, 0.0))
    return best if scores.get(best, 0.0) >= t["primary_min_score"] else NONE


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
                    reserved_by_runtime: bool = False) -> tuple[float, str]:
    if reserved_by_runtime:
        return 0.0, (f"GPU {g.index} VRAM {pct(g.memory_used_ratio)} used, reserved up front by the runtime "
                     "(vLLM): NVML cannot see how full its KV cache is")
    score = ramp(g.memory_used_ratio, t["vram_low"], t["vram_high"])
    growth = g.memory_growth_bytes_per_second
    text = f"GPU {g.index} VRAM {gib(g.memory_used_bytes)} of {gib(g.memory_total_bytes)} ({pct(g.memory_used_ratio)})"
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


# --------------------------------------------------------------------------- starvation rules
def starvation(busy: float | None, t: Mapping[str, float]) -> float:
    """1 when the GPUs are at or below busy_low, 0 at or above busy_high; 0 when unknown."""
    if busy is None:
        return 0.0
    return 1.0 - ramp(busy, t["busy_low"], t["busy_high"])


def rule_cpu(starved: float, busy_text: str, h: HostSignals, w: WorkloadSignals | None,
             t: Mapping[str, float], cpu_is_compute: bool = False) -> tuple[float, str]:
    parts, signal = [], 0.0
    if w is not None and w.cores_used is not None:
        capacity = w.cores_allowed
        who = f"the workload's {plural(w.processes, 'process')}"
        if w.dataloader_workers:
            capacity = min(capacity or w.dataloader_workers, float(w.dataloader_workers))
            who = f"the workload's {plural(w.dataloader_workers, 'DataLoader worker')}"
        if capacity:
            saturation = w.cores_used / capacity
            signal = max(signal, ramp(saturation, t["cpu_saturation_low"], t["cpu_saturation_high"]))
            cores = f"{capacity:.2f}".rstrip("0").rstrip(".")  # a quota may be 0.5 or 1.5 cores
            parts.append(f"{who} used {w.cores_used:.2f} of {cores} {'core' if capacity == 1 else 'cores'}")
    if h.cpu_busy is not None:
        signal = max(signal, ramp(h.cpu_busy, t["host_cpu_low"], t["host_cpu_high"]))
        parts.append(f"host CPU {pct(h.cpu_busy)} busy")
    psi = h.psi.get("cpu.some")
    if psi is not None:
        signal = max(signal, ramp(psi, t["psi_cpu_low"], t["psi_cpu_high"]))
        parts.append(f"PSI cpu some avg10 {pct(psi)}")
    factor = 1.0 if cpu_is_compute else starved
    return factor * signal, _join(busy_text, parts, cpu_is_compute)


def rule_host_memory(starved: float, busy_text: str, h: HostSignals, t: Mapping[str, float]) -> tuple[float, str]:
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
    # memory pressure slows everything on the host: it needs no starved GPU to count, but a starved one
    # makes it more certain that it costs the workload throughput
    return signal * (0.6 + 0.4 * starved), _join(busy_text, parts)


def rule_shared_memory(starved: float, busy_text: str, h: HostSignals, t: Mapping[str, float],
                       workers_declared: bool) -> tuple[float, str]:
    fill = ramp(h.shm_fill, t["shm_low"], t["shm_high"])
    # a full /dev/shm kills DataLoader workers ("No space left on device", "Bus error"): it limits a
    # workload that declares workers even before the GPU starves
    factor = max(starved, 0.8 if workers_declared else 0.0)
    if h.shm_fill is None:
        return 0.0, "shared memory unknown"
    text = f"{h.shm_mountpoint} {pct(h.shm_fill)} full ({gib(h.shm_available_bytes)} left of {gib(h.shm_size_bytes)})"
    if workers_declared:
        text += " while the workload declares DataLoader workers"
    return fill * factor, _join(busy_text, [text])


def rule_disk_io(starved: float, busy_text: str, h: HostSignals, t: Mapping[str, float]) -> tuple[float, str]:
    parts, signal = [], 0.0
    if h.disk_busy is not None:
        signal = max(signal, ramp(h.disk_busy, t["disk_busy_low"], t["disk_busy_high"]))
        queue = "" if h.disk_queue is None else f", queue depth {h.disk_queue:.1f}"
        parts.append(f"{h.disk_device} busy {pct(h.disk_busy)}{queue}")
    psi = h.psi.get("io.some")
    if psi is not None:
        signal = max(signal, ramp(psi, t["psi_io_low"], t["psi_io_high"]))
        parts.append(f"PSI io some avg10 {pct(psi)}")
    if h.cpu_iowait is not None and h.cpu_iowait > 0.05:
        signal = max(signal, t["iowait_weight"] * ramp(h.cpu_iowait, 0.05, 0.5))
        parts.append(f"iowait {pct(h.cpu_iowait)} (weak signal)")
    return starved * signal, _join(busy_text, parts)


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


def _name_neighbours(results: dict[str, tuple[float, str]], h: HostSignals, workload: str) -> None:
    for resource in NEIGHBOUR_RESOURCES:
        found = neighbours_of(h, resource, workload)
        if found:
            score, text = results[resource]
            results[resource] = (score, f"{text}; {neighbour_text(resource, found)}")


def _join(busy_text: str, parts: list[str], standalone: bool = False) -> str:
    if not parts:
        return f"{busy_text}; no corroborating signal"
    return ("" if standalone else f"{busy_text} while ") + "; ".join(parts)


# --------------------------------------------------------------------------------------- scoring
def score_gpu(g: GpuSignals, h: HostSignals, t: Mapping[str, float]) -> Verdict:
    """Scores for one GPU on its own (also for GPUs no profile claims): host rules use host signals only."""
    if not g.up:
        return Verdict({r: 0.0 for r in RESOURCES}, {r: f"GPU {g.index} is down" for r in RESOURCES}, NONE)
    starved = starvation(g.busy, t)
    busy_text = f"GPU {g.index} busy {pct(g.busy)}"
    results = {
        "gpu_compute": rule_gpu_compute(g, t),
        "gpu_memory": rule_gpu_memory(g, t),
        "gpu_thermal": rule_gpu_thermal(g, t),
        "gpu_power": rule_gpu_power(g, t),
        "pcie": rule_pcie(g, t),
        "nvlink": rule_nvlink(g, t),
        "cpu": rule_cpu(starved, busy_text, h, None, t),
        "host_memory": rule_host_memory(starved, busy_text, h, t),
        "shared_memory": rule_shared_memory(starved, busy_text, h, t, workers_declared=False),
        "disk_io": rule_disk_io(starved, busy_text, h, t),
        "network": (0.0, "network is judged per distributed workload"),
        "kv_cache": (0.0, "the KV cache is judged per serving workload"),
    }
    return _verdict(results, t)


def score_workload(profile: Any, w: WorkloadSignals, gpus: list[GpuSignals], h: HostSignals,
                   t: Mapping[str, float], expected_peak: float | None = None, serving: Any = None,
                   kv_alternatives: str = "") -> Verdict:
    """Scores for one declared workload from its GPUs, its processes and the host."""
    kind = getattr(profile.kind, "value", str(profile.kind))
    cpu_only = kind == "cpu-inference"
    up = [g for g in gpus if g.up]
    busy_values = [g.busy for g in up if g.busy is not None]
    busy = sum(busy_values) / len(busy_values) if busy_values else None
    starved = starvation(busy, t) if busy is not None else (1.0 if cpu_only else 0.0)
    names = ", ".join(str(g.index) for g in up)
    busy_text = (f"GPU {names} busy {pct(busy)}" if busy is not None
                 else ("CPU inference" if cpu_only else "no GPU attributed to the workload"))
    vllm = getattr(getattr(profile, "runtime", None), "is_vllm", False)
    workers = bool(getattr(profile, "dataloader_workers", None))
    parallel = getattr(profile, "parallel", None)
    # distributed: replicas or stages that exchange data every step (we cannot see whether peers share the host)
    distributed = bool(parallel and (parallel.data > 1 or parallel.pipeline > 1))

    def best(rule, *args) -> tuple[float, str]:
        pairs = [rule(g, t, *args) for g in up]
        return max(pairs, key=lambda p: p[0]) if pairs else (0.0, "no GPU attributed to the workload")

    per_gpu_peak = (expected_peak / max(1, len(up))) if expected_peak else None
    results = {
        "gpu_compute": best(rule_gpu_compute),
        "gpu_memory": best(rule_gpu_memory, per_gpu_peak, vllm),
        "gpu_thermal": best(rule_gpu_thermal),
        "gpu_power": best(rule_gpu_power),
        "pcie": best(rule_pcie),
        "nvlink": best(rule_nvlink),
        "cpu": rule_cpu(starved, busy_text, h, w, t, cpu_is_compute=cpu_only),
        "host_memory": rule_host_memory(starved, busy_text, h, t),
        "shared_memory": rule_shared_memory(starved, busy_text, h, t, workers_declared=workers),
        "disk_io": rule_disk_io(starved, busy_text, h, t),
        "network": rule_network(starved, busy_text, h, t, distributed),
        "kv_cache": serving_rules.rule_kv_cache(serving, t, busy, kv_alternatives),
    }
    _name_neighbours(results, h, profile.name)
    return _serving_verdict(results, t, serving, busy)


def _serving_verdict(results: dict[str, tuple[float, str]], t: Mapping[str, float], serving: Any,
                     busy: float | None) -> Verdict:
    """The verdict, with what the serving runtime says about demand (analysis/serving.py): a server with
    nothing running or waiting is idle for lack of demand whatever the host does (every score 0); one
    whose requests queue while the GPU is busy says so under gpu_compute; one whose requests queue
    while KV cache and GPU have room is held back by its own limits (evidence for none)."""
    idle = serving_rules.idle_for_demand(serving)
    if idle is not None:
        results = {r: (0.0, f"{text}; not limiting: {idle}") for r, (_, text) in results.items()}
        v = _verdict(results, t)
        return replace(v, evidence={**v.evidence, NONE: idle})
    if serving is not None and serving.up and (serving.waiting or 0) > 0:
        score, text = results["gpu_compute"]
        results["gpu_compute"] = (score, f"{text}; {serving_rules.describe(serving)}")
    v = _verdict(results, t)
    limited = serving_rules.runtime_limited(serving, t, busy)
    return replace(v, evidence={**v.evidence, NONE: limited}) if limited is not None else v


def _verdict(results: Mapping[str, tuple[float, str]], t: Mapping[str, float]) -> Verdict:
    scores = {r: round(results[r][0], 4) for r in RESOURCES}
    evidence = {r: results[r][1] for r in RESOURCES}
    return Verdict(scores=scores, evidence=evidence, candidate=candidate_of(scores, t))


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

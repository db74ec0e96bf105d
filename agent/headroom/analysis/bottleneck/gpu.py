"""The rules that read one GPU's own signals: gpu_compute, gpu_memory (with ``Reserved``: a serving runtime that
reserves the card up front), gpu_thermal, gpu_power, pcie and nvlink, GPM's busy-but-not-computing reading
(``not_computing``, ``bound_link``) and ``GpuRules``, which runs a GPU's rules once per tick for every verdict that
reads them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from headroom.analysis.bottleneck.evidence import NO_GPM, gib, pct
from headroom.analysis.signals import (
    AMBIGUOUS_REASONS,
    POWER_REASONS,
    REASON_LABELS,
    THERMAL_NEAR_CELSIUS,
    THERMAL_REASONS,
    GpuSignals,
)
from headroom.analysis.thresholds import ramp

if TYPE_CHECKING:
    from headroom.analysis.serving import ServingSignals
    from headroom.samples import ServingEndpoint
    from headroom.workload.profiles.types import WorkloadProfile


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


def reserved_by(profile: WorkloadProfile, serving: ServingEndpoint | ServingSignals | None = None, auto: bool = False) -> Reserved | None:
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


def _resident(serving: ServingEndpoint | ServingSignals | None) -> str:
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

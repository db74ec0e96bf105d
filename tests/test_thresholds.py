"""Every documented analysis threshold, on both sides: just below, at, and just above its default.

The defaults are written here as docs/analysis.md documents them, not read from the code: moving a
threshold (busy_high 0.85 -> 0.95) or turning "at or above" into "above" fails the row that names the
behaviour that changed. Each probe scores one resource from signals built for it, through the thresholds
the agent runs with (the Analysis built from a configuration that sets none).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from headroom.analysis import bottleneck
from headroom.analysis.bottleneck import NONE, THRESHOLDS, candidate_of, score_gpu
from headroom.analysis.headroom import workload_headroom
from headroom.analysis.pipeline import Analysis
from headroom.analysis.signals import GpuSignals, HostSignals, WorkloadSignals
from headroom.config import check_config_text

ANALYSIS = Analysis(check_config_text("", "c.yaml"))
T = ANALYSIS.thresholds
SETTINGS = ANALYSIS.settings


def gpu(**over) -> GpuSignals:
    """An up GPU with nothing remarkable: idle, cool, half-empty VRAM, no PCIe figures."""
    base = dict(index=0, uuid="GPU-0", name="NVIDIA H100 80GB HBM3", up=True, busy=0.0, samples=15)
    return GpuSignals(**{**base, **over})


def starved_gpu_with(host: HostSignals, resource: str) -> float:
    """The score of a host resource for a fully starved GPU that still shows demand (busy 20 %: below busy_low,
    above demand_busy), so the host signal alone decides."""
    return score_gpu(gpu(busy=0.2), host, T).scores[resource]


def ratio_host(**over) -> HostSignals:
    return HostSignals(logical_cpus=16, **over)


# ------------------------------------------------------------------------------------------ probes
# Each probe maps the threshold's input quantity to the observable score (or decision) it governs.
def p_primary(x):
    return 1.0 if candidate_of({"cpu": x}, T) == "cpu" else 0.0


def p_starvation(x):  # cpu scores through the starvation term: host CPU saturated, GPU busy x
    return score_gpu(gpu(busy=x), ratio_host(cpu_busy=1.0), T).scores["cpu"]


def p_compute(x):
    return score_gpu(gpu(busy=x), HostSignals(), T).scores["gpu_compute"]


def p_vram(x):  # VRAM used ratio x of 10 000 bytes, not growing
    used = round(x * 10_000)
    return score_gpu(gpu(memory_used_bytes=used, memory_total_bytes=10_000, memory_used_ratio=used / 10_000),
                     HostSignals(), T).scores["gpu_memory"]


def p_vram_gate(x):  # VRAM used ratio x and growing fast (full in a minute): the fill rule applies from vram_low
    total = 10_000
    used = round(x * total)
    return score_gpu(gpu(memory_used_bytes=used, memory_total_bytes=total, memory_used_ratio=used / total,
                         memory_growth_bytes_per_second=(total - used) / 60), HostSignals(), T).scores["gpu_memory"]


def p_fill_seconds(x):  # at vram_low exactly (so the level ramp gives 0), full in x seconds
    total, used = 9000, 8100  # 0.9 = vram_low
    return score_gpu(gpu(memory_used_bytes=used, memory_total_bytes=total, memory_used_ratio=used / total,
                         memory_growth_bytes_per_second=(total - used) / x), HostSignals(), T).scores["gpu_memory"]


def p_thermal(x):
    return score_gpu(gpu(busy=1.0, thermal_share=x), HostSignals(), T).scores["gpu_thermal"]


def p_power(x):
    return score_gpu(gpu(busy=1.0, power_cap_share=x), HostSignals(), T).scores["gpu_power"]


def p_work(x):  # throttled all the time, GPU busy x
    return score_gpu(gpu(busy=x, thermal_share=1.0), HostSignals(), T).scores["gpu_thermal"]


def p_pcie(x):  # an idle GPU (not compute-saturated) moving x of its link's capability
    return score_gpu(gpu(busy=0.0, pcie_ratio=x, pcie_bytes_per_second=x * 32e9,
                         pcie_capability_bytes_per_second=32e9), HostSignals(), T).scores["pcie"]


def p_cpu_saturation(x):  # the workload uses x of the 10 cores it may use, its GPU starved
    w = WorkloadSignals(name="w", processes=3, cores_used=x * 10, cores_allowed=10.0)
    return bottleneck.rule_cpu(1.0, "GPU 0 busy 0 %", HostSignals(), w, T)[0]


def p_host_cpu(x):
    return starved_gpu_with(ratio_host(cpu_busy=x), "cpu")


def p_psi_cpu(x):
    return starved_gpu_with(ratio_host(psi={"cpu.some": x}), "cpu")


def p_psi_memory(x):
    return starved_gpu_with(ratio_host(psi={"memory.full": x}), "host_memory")


def p_mem_available(x):  # MemAvailable / MemTotal = x
    return starved_gpu_with(ratio_host(memory_total_bytes=10_000, memory_available_bytes=round(x * 10_000)),
                            "host_memory")


def p_shm(x):
    size = 10_000
    used = round(x * size)
    return starved_gpu_with(ratio_host(shm_fill=used / size, shm_mountpoint="/dev/shm", shm_size_bytes=size,
                                       shm_available_bytes=size - used), "shared_memory")


def p_disk(x):
    return starved_gpu_with(ratio_host(disk_busy=x, disk_device="nvme0n1", disk_queue=1.0), "disk_io")


def p_psi_io(x):
    return starved_gpu_with(ratio_host(psi={"io.some": x}), "disk_io")


def p_iowait_weight(x):  # iowait alone, as high as it goes: disk_io scores at most iowait_weight
    return starved_gpu_with(ratio_host(cpu_iowait=1.0), "disk_io") / x


def p_net(x):  # a distributed workload's busiest NIC at x of its link speed, its GPU starved
    h = ratio_host(net_ratio=x, net_device="ib0", net_bytes_per_second=x * 50e9)
    return bottleneck.rule_network(1.0, "GPU 0 busy 0 %", h, T, distributed=True)[0]


def p_sm_active(x):  # a fully busy GPU whose SMs (GPM) are active x of the time
    return score_gpu(gpu(busy=1.0, sm_active=x), HostSignals(), T).scores["gpu_compute"]


def p_nvlink(x):  # NVLink at x of its capability, SMs barely active
    return score_gpu(gpu(busy=1.0, sm_active=0.1, nvlink_ratio=x, nvlink_bytes_per_second=x * 450e9,
                         nvlink_capability_bytes_per_second=450e9), HostSignals(), T).scores["nvlink"]


def p_nvlink_compute(x):  # NVLink saturated while the SMs are active x of the time: compute, not the links
    return score_gpu(gpu(busy=1.0, sm_active=x, nvlink_ratio=1.0, nvlink_bytes_per_second=450e9,
                         nvlink_capability_bytes_per_second=450e9), HostSignals(), T).scores["nvlink"]


def _serving(**over):
    from headroom.analysis.serving import ServingSignals

    base = dict(workload="chat", endpoint="http://127.0.0.1:8000/metrics", up=True, runtime="vllm", usage=0.97,
                running=8.0, waiting=0.0, preemptions_per_minute=0.0, capacity_tokens=65536.0)
    return ServingSignals(**{**base, **over})


def p_kv_usage(x):  # KV cache x full, requests waiting in full measure
    from headroom.analysis.serving import rule_kv_cache

    return rule_kv_cache(_serving(usage=x, waiting=5.0), T, gpu_busy=0.5)[0]


def p_serving_waiting(x):  # KV cache full, x requests waiting on average, no preemption
    from headroom.analysis.serving import rule_kv_cache

    return rule_kv_cache(_serving(waiting=x), T, gpu_busy=0.5)[0]


def p_preemptions(x):  # KV cache full, nothing waiting, x preemptions per minute
    from headroom.analysis.serving import rule_kv_cache

    return rule_kv_cache(_serving(preemptions_per_minute=x), T, gpu_busy=0.5)[0]


def p_demand(x):  # host CPU saturated, the GPU busy x: below demand_busy it is idle for lack of work, not starved
    return score_gpu(gpu(busy=x), ratio_host(cpu_busy=1.0), T).scores["cpu"]


def p_own_cpu(x):  # host CPU saturated, the starved workload's own processes use x cores (of 64: not saturated)
    w = WorkloadSignals(name="w", processes=3, cores_used=x, cores_allowed=64.0)
    return bottleneck.rule_cpu(1.0, "GPU 0 busy 20 %", ratio_host(cpu_busy=1.0), w, T)[0]


def p_own_io(x):  # the busiest disk saturated, the starved workload's own block I/O x MiB/s
    w = WorkloadSignals(name="w", io_bytes_per_second=x * 2**20)
    h = ratio_host(disk_busy=1.0, disk_device="sda", disk_queue=4.0)
    return bottleneck.rule_disk_io(1.0, "GPU 0 busy 20 %", h, T, w)[0]


def p_tie(x):  # cpu at 1, host_memory (which explains cpu) x below it: 1 when the tie goes to host_memory
    return 1.0 if candidate_of({"cpu": 1.0, "host_memory": 1.0 - x}, T) == "host_memory" else 0.0


# ------------------------------------------------------------------------------------------- table
ZERO, SOME, FULL, PARTIAL = "scores 0", "scores above 0", "scores 1", "scores below 1"
EXPECT: dict[str, Callable[[float], bool]] = {
    ZERO: lambda s: s == 0.0,
    SOME: lambda s: s > 0.0,
    FULL: lambda s: s == 1.0,
    PARTIAL: lambda s: 0.0 <= s < 1.0,
}


@dataclass(frozen=True)
class Row:
    threshold: str
    documented: float  # the default docs/analysis.md states
    behaviour: str  # what the threshold decides, in words
    probe: Callable[[float], float]
    below: str
    at: str
    above: str
    step: float = 0.0  # "just": the default +- step (1 % of the default when 0)


ROWS = [
    Row("primary_min_score", 0.5, "a resource scoring at least this becomes the candidate (1: it does)",
        p_primary, ZERO, FULL, FULL),
    Row("busy_low", 0.50, "at or below it the GPU counts as fully starved, so cpu (host saturated) scores 1",
        p_starvation, FULL, FULL, PARTIAL),
    Row("busy_high", 0.85, "at or above it the GPU is not starved: cpu scores 0 however busy the host",
        p_starvation, SOME, ZERO, ZERO),
    Row("compute_busy_low", 0.80, "gpu_compute starts to score above it", p_compute, ZERO, ZERO, SOME),
    Row("compute_busy_high", 0.95, "gpu_compute scores 1 from it on", p_compute, PARTIAL, FULL, FULL),
    Row("vram_low", 0.90, "gpu_memory (VRAM level) starts to score above it", p_vram, ZERO, ZERO, SOME),
    Row("vram_low", 0.90, "from it on, VRAM still growing (full in a minute) makes gpu_memory score 1",
        p_vram_gate, ZERO, FULL, FULL),
    Row("vram_high", 0.98, "gpu_memory scores 1 from it on", p_vram, PARTIAL, FULL, FULL),
    Row("vram_fill_seconds_low", 900.0, "gpu_memory (time to full) starts to score below it",
        p_fill_seconds, SOME, ZERO, ZERO),
    Row("vram_fill_seconds_high", 120.0, "gpu_memory scores 1 when VRAM is full in this or less",
        p_fill_seconds, FULL, FULL, PARTIAL),
    Row("throttle_share_low", 0.2, "gpu_thermal starts to score above this share of the window",
        p_thermal, ZERO, ZERO, SOME),
    Row("throttle_share_low", 0.2, "gpu_power starts to score above this share of the window",
        p_power, ZERO, ZERO, SOME),
    Row("throttle_share_high", 0.7, "gpu_thermal scores 1 from this share on", p_thermal, PARTIAL, FULL, FULL),
    Row("throttle_share_high", 0.7, "gpu_power scores 1 from this share on", p_power, PARTIAL, FULL, FULL),
    Row("work_busy", 0.3, "throttling counts in full only for a GPU at least this busy",
        p_work, PARTIAL, FULL, FULL),
    Row("pcie_low", 0.6, "pcie starts to score above it", p_pcie, ZERO, ZERO, SOME),
    Row("pcie_high", 0.85, "pcie scores 1 from it on", p_pcie, PARTIAL, FULL, FULL),
    Row("cpu_saturation_low", 0.80, "cpu (workload cores) starts to score above it",
        p_cpu_saturation, ZERO, ZERO, SOME),
    Row("cpu_saturation_high", 0.95, "cpu (workload cores) scores 1 from it on", p_cpu_saturation,
        PARTIAL, FULL, FULL),
    Row("host_cpu_low", 0.85, "cpu (host busy) starts to score above it", p_host_cpu, ZERO, ZERO, SOME),
    Row("host_cpu_high", 0.97, "cpu (host busy) scores 1 from it on", p_host_cpu, PARTIAL, FULL, FULL),
    Row("psi_cpu_low", 0.10, "cpu (PSI) starts to score above it", p_psi_cpu, ZERO, ZERO, SOME),
    Row("psi_cpu_high", 0.40, "cpu (PSI) scores 1 from it on", p_psi_cpu, PARTIAL, FULL, FULL),
    Row("psi_memory_low", 0.05, "host_memory (PSI full) starts to score above it", p_psi_memory, ZERO, ZERO, SOME),
    Row("psi_memory_high", 0.20, "host_memory (PSI full) scores 1 from it on", p_psi_memory, PARTIAL, FULL, FULL),
    Row("mem_available_low", 0.10, "host_memory starts to score when less than this share is available",
        p_mem_available, SOME, ZERO, ZERO),
    Row("mem_available_high", 0.02, "host_memory scores 1 when this share or less is available",
        p_mem_available, FULL, FULL, PARTIAL),
    Row("shm_low", 0.85, "shared_memory starts to score above it", p_shm, ZERO, ZERO, SOME),
    Row("shm_high", 0.97, "shared_memory scores 1 from it on", p_shm, PARTIAL, FULL, FULL),
    Row("disk_busy_low", 0.70, "disk_io (busy) starts to score above it", p_disk, ZERO, ZERO, SOME),
    Row("disk_busy_high", 0.95, "disk_io (busy) scores 1 from it on", p_disk, PARTIAL, FULL, FULL),
    Row("psi_io_low", 0.20, "disk_io (PSI) starts to score above it", p_psi_io, ZERO, ZERO, SOME),
    Row("psi_io_high", 0.60, "disk_io (PSI) scores 1 from it on", p_psi_io, PARTIAL, FULL, FULL),
    # a weight, not a boundary: the probe divides iowait's best score by x, which is 1 only at the weight
    Row("iowait_weight", 0.3, "iowait alone scores disk_io at most this (probe: that score / x)",
        p_iowait_weight, SOME, FULL, PARTIAL),
    Row("sm_active_low", 0.50, "a busy GPU's gpu_compute starts to score above this SM activity (GPM)",
        p_sm_active, ZERO, ZERO, SOME),
    Row("sm_active_low", 0.50, "nvlink saturated scores in full while SM activity is at or below it",
        p_nvlink_compute, FULL, FULL, PARTIAL),
    Row("sm_active_high", 0.80, "gpu_compute scores 1 from this SM activity on (GPM)", p_sm_active, PARTIAL, FULL, FULL),
    Row("sm_active_high", 0.80, "from this SM activity on, saturated NVLink is compute's doing: nvlink scores 0",
        p_nvlink_compute, SOME, ZERO, ZERO),
    Row("nvlink_low", 0.6, "nvlink starts to score above it", p_nvlink, ZERO, ZERO, SOME),
    Row("nvlink_high", 0.85, "nvlink scores 1 from it on", p_nvlink, PARTIAL, FULL, FULL),
    Row("net_low", 0.70, "network starts to score above it (distributed workload)", p_net, ZERO, ZERO, SOME),
    Row("net_high", 0.90, "network scores 1 from it on (distributed workload)", p_net, PARTIAL, FULL, FULL),
    Row("kv_usage_low", 0.80, "kv_cache starts to score above it (requests waiting)", p_kv_usage, ZERO, ZERO, SOME),
    Row("kv_usage_high", 0.95, "kv_cache scores 1 from it on (requests waiting)", p_kv_usage, PARTIAL, FULL, FULL),
    Row("serving_waiting_high", 1.0, "with the KV cache full, this many requests waiting make kv_cache score 1",
        p_serving_waiting, PARTIAL, FULL, FULL),
    Row("preemptions_per_minute_high", 1.0, "with the KV cache full, this many preemptions a minute make "
        "kv_cache score 1", p_preemptions, PARTIAL, FULL, FULL),
    Row("demand_busy", 0.05, "a GPU below it is idle for lack of work: a saturated host CPU is not its bottleneck",
        p_demand, ZERO, FULL, FULL),
    Row("own_cpu_cores", 0.5, "host-wide CPU saturation counts in full for a workload using this many cores itself",
        p_own_cpu, PARTIAL, FULL, FULL),
    Row("own_io_mib_per_second", 1.0, "a saturated disk counts in full for a workload doing this much I/O itself",
        p_own_io, PARTIAL, FULL, FULL),
    Row("tie_margin", 0.05, "a cause scoring this much below its effect still ties with it and wins (1: it does)",
        p_tie, FULL, FULL, ZERO),
]


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.threshold}: {r.behaviour}" for r in ROWS])
@pytest.mark.parametrize("side", ["below", "at", "above"])
def test_threshold_behaviour(row: Row, side: str):
    step = row.step or row.documented * 0.01
    x = {"below": row.documented - step, "at": row.documented, "above": row.documented + step}[side]
    expected = getattr(row, side)
    score = row.probe(x)
    assert EXPECT[expected](score), (
        f"{row.threshold} (documented {row.documented:g}): {row.behaviour}; "
        f"just {side} it ({x:g}) it should have {expected}, got {score:.4f}")


def test_every_threshold_has_rows():
    assert {r.threshold for r in ROWS} == set(THRESHOLDS), "add below/at/above rows for every threshold"


# ------------------------------------------------------------------- the other analysis settings
@pytest.mark.parametrize("busy, idle", [(0.0495, True), (0.05, False), (0.0505, False)],
                         ids=["just below idle_busy_ratio: idle", "at it: not idle", "just above: not idle"])
def test_idle_busy_ratio(busy, idle):
    """idle_busy_ratio (documented 0.05): a GPU below it counts as idle (headroom_gpus_idle, idle cost)."""
    from headroom.simulation.situations import Gpu, Host, build_window

    findings = None
    analysis = Analysis(check_config_text("", "c.yaml"))
    window = build_window(Host(), [Gpu(util=busy)], seconds=5)
    for i in range(1, len(window) + 1):
        _, findings = analysis(window[:i])
    assert findings.gpu_findings[0].idle is idle
    assert SETTINGS["idle_busy_ratio"] == 0.05


@pytest.mark.parametrize("temperature, room", [(86.0, 1.0), (87.0, 0.0), (88.0, -1.0)],
                         ids=["below gpu_slowdown_celsius: room", "at it: none", "above it: over"])
def test_gpu_slowdown_celsius(temperature, room):
    """gpu_slowdown_celsius (documented 87): thermal headroom is measured against it."""
    from types import SimpleNamespace

    profile = SimpleNamespace(kind="training", runtime=None)
    w = WorkloadSignals(name="w")
    h = workload_headroom(profile, w, [gpu(temperature_celsius=temperature)], HostSignals(), None,
                          SETTINGS["gpu_slowdown_celsius"])
    assert h.thermal_celsius == room


def test_no_resource_scores_on_an_idle_gpu_on_a_calm_host():
    """The probes start from a neutral point: every score 0, so each row sees only its own signal."""
    v = score_gpu(gpu(), ratio_host(), T)
    assert set(v.scores.values()) == {0.0} and v.candidate == NONE

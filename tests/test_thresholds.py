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


def waiting(share: float, runnable: float = 4.0, cores_used: float = 2.0, cores_allowed: float = 16.0,
            **over) -> WorkloadSignals:
    """A workload whose processes' main threads waited ``share`` of their runnable time for a CPU (schedstat)."""
    return WorkloadSignals(name="w", processes=4, cores_used=cores_used, cores_allowed=cores_allowed,
                           cpu_wait_share=share, runnable_main_threads=runnable, **over)


def p_cpu_wait(x):  # its main threads waited x of their runnable time for a CPU, its GPU starved, the host calm
    return bottleneck.rule_cpu(1.0, "GPU 0 busy 20 %", HostSignals(), waiting(x), T)[0]


def p_cpu_wait_damp(x):  # host CPU saturated, the workload's own threads waited x: how much the host counts for it
    return bottleneck.rule_cpu(1.0, "GPU 0 busy 20 %", ratio_host(cpu_busy=1.0), waiting(x), T)[0]


def p_cpu_wait_runnable(x):  # its main threads waited 90 %, x of them runnable on average
    return bottleneck.rule_cpu(1.0, "GPU 0 busy 20 %", HostSignals(), waiting(0.9, runnable=x), T)[0]


def p_threads_per_core(x):  # x runnable threads per core it may use (10): 1 when the evidence says they are its own
    w = waiting(0.5, cores_used=x * 10 * 0.5, cores_allowed=10.0)
    text = bottleneck.rule_cpu(1.0, "GPU 0 busy 20 %", HostSignals(), w, T)[1]
    return 1.0 if "its own threads outnumber its cores" in text else 0.0


def p_run_queue(x):  # x runnable tasks per logical CPU (16), nothing else known
    return starved_gpu_with(ratio_host(run_queue=x * 16), "cpu")


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


def p_dram(x):  # a fully busy GPU whose SMs are barely active (GPM) while its DRAM is active x: memory-bound compute
    return score_gpu(gpu(busy=1.0, sm_active=0.1, dram_active=x), HostSignals(), T).scores["gpu_compute"]


def p_compute_power(x):  # a fully busy GPU without GPM drawing x of its power limit, PCIe at its capacity
    return score_gpu(gpu(busy=1.0, power_ratio=x, pcie_ratio=1.0, pcie_bytes_per_second=32e9,
                         pcie_capability_bytes_per_second=32e9), HostSignals(), T).scores["pcie"]


def p_link_active(x):  # a fully busy GPU whose SMs are barely active (GPM), steady PCIe traffic at x of capacity
    return score_gpu(gpu(busy=1.0, sm_active=0.1, pcie_ratio=x, pcie_bytes_per_second=x * 32e9,
                         pcie_mean_bytes_per_second=x * 32e9, pcie_steady=1.0,
                         pcie_capability_bytes_per_second=32e9), HostSignals(), T).scores["pcie"]


def p_net_active(x):  # a distributed workload's GPUs busy, not computing (GPM); x MiB/s of steady traffic on eth0
    h = ratio_host(net_busiest_device="eth0", net_busiest_bytes_per_second=x * 2**20, net_steady=1.0)
    return bottleneck.rule_network(0.0, "GPU 0 busy 100 %", h, T, True, (1.0, "GPU 0 not computing"))[0]


def p_link_steady(x):  # as p_net_active at 100 MiB/s, carried x of the window
    h = ratio_host(net_busiest_device="eth0", net_busiest_bytes_per_second=100 * 2**20, net_steady=x)
    return bottleneck.rule_network(0.0, "GPU 0 busy 100 %", h, T, True, (1.0, "GPU 0 not computing"))[0]


def _serving(scrape, n: int = 15):
    """A vLLM endpoint whose window holds ``n`` scrapes, each as ``scrape`` (a dict of serving.Scrape's fields) says,
    or as the ``scrape(i)`` of each index."""
    from headroom.analysis.serving import Scrape, ServingSignals

    make = scrape if callable(scrape) else (lambda i: scrape)
    scrapes = tuple(Scrape(**{"usage": 0.97, "running": 8.0, "waiting": 0.0, "preemptions_per_minute": 0.0, **make(i)})
                    for i in range(n))
    return ServingSignals(workload="chat", endpoint="http://127.0.0.1:8000/metrics", up=True, runtime="vllm",
                          capacity_tokens=65536.0, scrapes=scrapes, samples=n)


def p_kv_usage(x):  # KV cache x full in every scrape, requests waiting in full measure
    from headroom.analysis.serving import rule_kv_cache

    return rule_kv_cache(_serving({"usage": x, "waiting": 5.0}), T, gpu_busy=0.5)[0]


def p_serving_waiting(x):  # KV cache full, x requests waiting in every scrape, no preemption
    from headroom.analysis.serving import rule_kv_cache

    return rule_kv_cache(_serving({"waiting": x}), T, gpu_busy=0.5)[0]


def p_preemptions(x):  # KV cache full, nothing waiting, x preemptions per minute between scrapes
    from headroom.analysis.serving import rule_kv_cache

    return rule_kv_cache(_serving({"preemptions_per_minute": x}), T, gpu_busy=0.5)[0]


def p_recent(x):  # the cache just filled: the latest x of 15 scrapes full with a queue, the ones before idle
    from headroom.analysis.serving import rule_kv_cache

    filled = round(x)
    s = _serving(lambda i: {"waiting": 5.0} if i >= 15 - filled else {"usage": 0.0, "running": 0.0})
    return rule_kv_cache(s, T, gpu_busy=0.5)[0]


def p_scrape_share(x):  # requests waited while the cache had room in x of the window's scrapes: 1 when the
    # evidence blames the runtime's own limits
    from headroom.analysis.serving import runtime_limited

    room = round(x * 1000)
    s = _serving(lambda i: {"usage": 0.2, "waiting": 4.0 if i < room else 0.0}, n=1000)
    return 1.0 if runtime_limited(s, T, gpu_busy=0.5) else 0.0


def p_down(x):  # the endpoint answered until x seconds before the newest scrape, refused since: 1 when down
    from headroom.analysis.serving import serving_signals
    from headroom.samples import Sample, ServingEndpoint, ServingSample, SourceResult

    newest, window = 30, []
    for t in range(newest + 1):
        if t <= newest - round(x):
            e = ServingEndpoint("chat", "http://127.0.0.1:8000/metrics", up=True, runtime="vllm",
                                kv_cache_usage_ratio=0.3, requests_running=2.0, requests_waiting=0.0)
        else:
            e = ServingEndpoint("chat", "http://127.0.0.1:8000/metrics", up=False, error="timed out")
        window.append(Sample(timestamp=1e9 + t, monotonic=float(t),
                             sources={"serving": SourceResult("serving", True, 0.0, ServingSample((e,)))}))
    return 1.0 if serving_signals(window, 31.0, "chat", T).state == "down" else 0.0


def p_unresponsive(x):  # the endpoint answered until x seconds before the newest scrape; since, every scrape
    # connected and timed out (a runtime saturated by its load): 1 when down
    from headroom.analysis.serving import serving_signals
    from headroom.samples import Sample, ServingEndpoint, ServingSample, SourceResult

    newest, window = 60, []
    for t in range(newest + 1):
        if t <= newest - round(x):
            e = ServingEndpoint("chat", "http://127.0.0.1:8000/metrics", up=True, runtime="vllm",
                                kv_cache_usage_ratio=0.3, requests_running=2.0, requests_waiting=0.0)
        else:
            e = ServingEndpoint("chat", "http://127.0.0.1:8000/metrics", up=False, timed_out=True,
                                error="no answer within 2000 ms (collectors.serving.timeout)")
        window.append(Sample(timestamp=1e9 + t, monotonic=float(t),
                             sources={"serving": SourceResult("serving", True, 0.0, ServingSample((e,)))}))
    return 1.0 if serving_signals(window, 61.0, "chat", T).state == "down" else 0.0


def p_restart(x):  # the endpoint restarted (its counters went down) x seconds before the newest scrape: 1 while
    # it is reported restarting
    from headroom.analysis.serving import serving_signals
    from headroom.samples import Sample, ServingEndpoint, ServingSample, SourceResult

    newest, window = 30, []
    for t in range(newest + 1):
        restarted = t >= newest - round(x)
        e = ServingEndpoint("chat", "http://127.0.0.1:8000/metrics", up=True, runtime="vllm", kv_cache_usage_ratio=0.3,
                            requests_running=2.0, requests_waiting=0.0,
                            generation_tokens_total=float(t - (newest - round(x)) if restarted else 1000 + t))
        window.append(Sample(timestamp=1e9 + t, monotonic=float(t),
                             sources={"serving": SourceResult("serving", True, 0.0, ServingSample((e,)))}))
    s = serving_signals(window, 31.0, "chat", T)
    return 1.0 if s.state == "restarting" else 0.0


def p_bucket_width(x):  # a percentile in the bucket (1 - x, 1 s]: x of its upper bound wide; 1 when it is a bound
    from headroom.analysis.latency import percentile_of

    return 1.0 if percentile_of(0.9, 1.0 - x, 1.0, width_max=T["latency_bucket_width_max"]).bounded else 0.0


def p_demand(x):  # host CPU saturated, the GPU busy x: below demand_busy it is idle for lack of work, not starved
    return score_gpu(gpu(busy=x), ratio_host(cpu_busy=1.0), T).scores["cpu"]


def p_demand_cores(x):  # host memory saturated, a cpu-inference workload (no GPU) whose processes use x cores
    from types import SimpleNamespace

    p = SimpleNamespace(name="w", kind=SimpleNamespace(value="cpu-inference"), runtime=None, parallel=None)
    w = WorkloadSignals(name="w", processes=1, cores_used=x, cores_allowed=64.0)
    host = ratio_host(memory_total_bytes=64 << 30, memory_available_bytes=1 << 20)
    return bottleneck.score_workload(p, w, [], host, T).scores["host_memory"]


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


# GPU health (analysis/health.py): 1 when the condition holds after the probed time or at the probed clock ratio
def _health(conditions_at):
    from headroom.analysis.health import HealthTracker
    from headroom.samples import GpuSample

    tracker = HealthTracker(T)
    held = set()
    for now, over in conditions_at:
        base = dict(index=0, uuid="GPU-0", name="H100", pci_bus_id="0", utilization_ratio=0.9,
                    sm_clock_hertz=1980e6, sm_clock_max_hertz=1980e6)
        (h,) = tracker([GpuSample(**{**base, **over})], now)
        held = {c.condition for c in h.conditions}
    return held


def p_xid_clear(x):  # an XID 48 at 0, no reset: still held x seconds later
    return 1.0 if "xid_reset_required" in _health([(0.0, {"xid_errors_total": {48: 1}}),
                                                   (x, {"xid_errors_total": {48: 1}})]) else 0.0


def p_clocks_stuck(x):  # a hardware slowdown for x seconds
    slow = {"clock_events_active": {"hw_slowdown": True}, "sm_clock_hertz": 600e6}
    return 1.0 if "clocks_stuck" in _health([(0.0, slow), (x, slow)]) else 0.0


def p_clock_low(x):  # a busy GPU's SM clock at x of its maximum, no reason, for health_clocks_stuck_seconds
    low = {"sm_clock_hertz": x * 1980e6, "clock_events_active": {"gpu_idle": False}}
    return 1.0 if "clocks_stuck" in _health([(0.0, low), (T["health_clocks_stuck_seconds"], low)]) else 0.0



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
    Row("cpu_wait_low", 0.20, "cpu (its threads' run-queue wait) starts to score above it", p_cpu_wait,
        ZERO, ZERO, SOME),
    Row("cpu_wait_low", 0.20, "below it a saturated host counts for the workload in proportion to its threads' wait",
        p_cpu_wait_damp, PARTIAL, FULL, FULL),
    Row("cpu_wait_high", 0.50, "cpu (its threads' run-queue wait) scores 1 from it on", p_cpu_wait, PARTIAL, FULL, FULL),
    Row("cpu_wait_runnable_min", 0.5, "the wait share is judged only with this many main threads runnable",
        p_cpu_wait_runnable, ZERO, FULL, FULL),
    Row("threads_per_core_over", 1.5, "from this many runnable threads per core the evidence says they are its own",
        p_threads_per_core, ZERO, FULL, FULL),
    Row("run_queue_low", 1.5, "cpu (host run queue per CPU) starts to score above it", p_run_queue, ZERO, ZERO, SOME),
    Row("run_queue_high", 3.0, "cpu (host run queue per CPU) scores 1 from it on", p_run_queue, PARTIAL, FULL, FULL),
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
    Row("dram_active_low", 0.60, "a busy GPU with idle SMs scores gpu_compute above this DRAM activity (GPM)",
        p_dram, ZERO, ZERO, SOME),
    Row("dram_active_high", 0.85, "gpu_compute scores 1 from this DRAM activity on (GPM)", p_dram, PARTIAL, FULL, FULL),
    Row("compute_power_low", 0.35, "a busy GPU without GPM drawing this or less: saturated PCIe scores in full",
        p_compute_power, FULL, FULL, PARTIAL),
    Row("compute_power_high", 0.55, "a busy GPU without GPM drawing this or more computes: saturated PCIe scores 0",
        p_compute_power, SOME, ZERO, ZERO),
    Row("link_active_low", 0.10, "a busy GPU that does not compute is bound by steady PCIe traffic above this share",
        p_link_active, ZERO, ZERO, SOME),
    Row("link_active_high", 0.30, "pcie scores 1 from this share of steady traffic on (GPU busy, not computing)",
        p_link_active, PARTIAL, FULL, FULL),
    Row("net_active_low_mib", 8.0, "busy GPUs that do not compute wait on steady network traffic above this MiB/s",
        p_net_active, ZERO, ZERO, SOME),
    Row("net_active_high_mib", 64.0, "network scores 1 from this MiB/s of steady traffic on (GPUs not computing)",
        p_net_active, PARTIAL, FULL, FULL),
    Row("link_steady_low", 0.5, "the traffic counts as steady above this share of the window", p_link_steady,
        ZERO, ZERO, SOME),
    Row("link_steady_high", 0.8, "network scores 1 from this share of the window on", p_link_steady, PARTIAL, FULL, FULL),
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
    Row("latency_bucket_width_max", 0.4, "a latency percentile in a bucket wider than this share of its upper bound "
        "is a bound, not a value (1: it is)", p_bucket_width, ZERO, ZERO, FULL),

    Row("kv_recent_scrapes", 3, "kv_cache scores 1 once this many of the latest scrapes had the cache full with a "
        "queue, the window before them idle (a cache that just filled)", p_recent, PARTIAL, FULL, FULL, step=1),
    Row("serving_scrape_share", 0.5, "requests waiting while the cache had room in this share of the scrapes blame "
        "the runtime's own limits (1: they do)", p_scrape_share, ZERO, FULL, FULL),
    Row("serving_down_seconds", 3.0, "a serving endpoint whose scrapes have failed this long since its last answer "
        "is reported down (1: it is)", p_down, ZERO, FULL, FULL, step=1),
    Row("serving_unresponsive_seconds", 30.0, "a serving endpoint whose every scrape since its last answer connected "
        "and timed out this long is reported down (1: it is)", p_unresponsive, ZERO, FULL, FULL, step=1),
    Row("serving_restart_seconds", 15.0, "a serving endpoint is reported restarting for this long after its "
        "counters went down (1: it is)", p_restart, FULL, ZERO, ZERO, step=1),
    Row("demand_busy", 0.05, "a GPU below it is idle for lack of work: a saturated host CPU is not its bottleneck",
        p_demand, ZERO, FULL, FULL),
    Row("demand_cores", 0.05, "work without a GPU below it (no request in flight) is idle: a saturated host's memory "
        "is not its bottleneck", p_demand_cores, ZERO, FULL, FULL),
    Row("own_cpu_cores", 0.5, "host-wide CPU saturation counts in full for a workload using this many cores itself",
        p_own_cpu, PARTIAL, FULL, FULL),
    Row("own_io_mib_per_second", 1.0, "a saturated disk counts in full for a workload doing this much I/O itself",
        p_own_io, PARTIAL, FULL, FULL),
    Row("health_xid_clear_seconds", 3600.0, "an XID that needs a reset stops counting this long after it last "
        "recurred when no reset was seen (1: still held)", p_xid_clear, FULL, ZERO, ZERO, step=1.0),
    Row("health_clocks_stuck_seconds", 300.0, "a hardware slowdown held this long makes the clocks stuck (1: it does)",
        p_clocks_stuck, ZERO, FULL, FULL, step=1.0),
    Row("health_clock_low_ratio", 0.5, "a busy GPU's SM clock at or below this share of its maximum counts as low "
        "(1: stuck)", p_clock_low, FULL, FULL, ZERO),
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
@pytest.mark.parametrize(("busy", "idle"), [(0.0495, True), (0.05, False), (0.0505, False)],
                         ids=["just below idle_busy_ratio: idle", "at it: not idle", "just above: not idle"])
def test_idle_busy_ratio(busy, idle):
    """idle_busy_ratio (documented 0.05): a GPU below it counts as idle (headroom_gpus_idle, idle cost)."""
    from situations import Gpu, Host, build_window

    findings = None
    analysis = Analysis(check_config_text("", "c.yaml"))
    window = build_window(Host(), [Gpu(util=busy)], seconds=5)
    for i in range(1, len(window) + 1):
        _, findings = analysis(window[:i])
    assert findings.gpu_findings[0].idle is idle
    assert SETTINGS["idle_busy_ratio"] == 0.05


@pytest.mark.parametrize(("temperature", "room"), [(86.0, 1.0), (87.0, 0.0), (88.0, -1.0)],
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

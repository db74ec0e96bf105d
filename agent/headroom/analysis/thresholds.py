"""The thresholds of the analysis (config.yaml ``analysis.thresholds``; docs/analysis.md lists them): ``THRESHOLDS``
(name -> (default, meaning)), ``DEFAULT_THRESHOLDS`` and ``ramp``, the linear step every rule scores with;
``thresholds_markdown`` is the table of docs/analysis.md (``python -m headroom.analysis.bottleneck``). It sits
below every analysis module (it imports none): the rules (analysis/bottleneck/) and the serving analysis both read it."""

from __future__ import annotations

# the widest bucket, as a share of its upper bound, in which an interpolated latency percentile is a value and not
# a bound (analysis/serving.py reads it; here, below both the rules and the serving analysis, so neither imports
# the other for it)
BUCKET_WIDTH_MAX = 0.4

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
    "latency_bucket_width_max": (BUCKET_WIDTH_MAX,
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


def thresholds_markdown() -> str:
    """The thresholds table of docs/analysis.md (a test keeps them equal)."""
    lines = ["| threshold (`analysis.thresholds.<name>`) | default | meaning |", "|---|---|---|"]
    lines += [f"| `{name}` | {default:g} | {meaning} |" for name, (default, meaning) in THRESHOLDS.items()]
    return "\n".join(lines) + "\n"

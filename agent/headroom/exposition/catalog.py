"""The metric catalogue: the single source of every exported name.

Each entry says name, type, unit, labels, help, and where the value comes from. ``render.py`` may only
emit names listed here (the writer refuses others), ``docs/metrics.md`` is generated from this table
(``python -m headroom.exposition.catalog > docs/metrics.md``; a test fails when they differ) and
dashboards and rules may only use these names (a test checks that too).

Windowed gauges say their window in HELP, because the agent samples every second while Prometheus
scrapes every 15-60 s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

GAUGE = "gauge"
COUNTER = "counter"

G = ("gpu", "uuid")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    type: str  # gauge | counter
    unit: str  # bytes, seconds, ratio, watts, celsius, hertz, joules, "" (count or info)
    labels: tuple[str, ...]
    help: str
    source: str  # where the value comes from (collector and call/file), for newcomers and docs
    group: str  # section in docs/metrics.md


def _m(group: str, source: str) -> Callable[[str, str, str, Iterable[str], str], MetricSpec]:
    def make(name: str, type_: str, unit: str, labels: Iterable[str], help_: str) -> MetricSpec:
        return MetricSpec(name, type_, unit, tuple(labels), help_, source, group)

    return make


_self = _m("agent", "sampler")
_gpu = _m("gpu", "nvml collector (sources/nvml/)")
_cpu = _m("cpu", "cpu collector (sources/cpu.py): /proc/stat, /proc/loadavg, /proc/pressure")
_mem = _m("memory", "memory collector (sources/memory.py): /proc/meminfo, /proc/vmstat")
_shm = _m("shm", "shm collector (sources/shm.py): statvfs of each configured tmpfs mount")
_disk = _m("disk", "disk collector (sources/disk.py): /proc/diskstats")
_net = _m("network", "net collector (sources/net.py): /proc/net/dev, /sys/class/net/<device>/speed")
_ib = _m("network", "infiniband collector (sources/infiniband.py): /sys/class/infiniband/<device>/ports/<port>/")
IB = ("device", "port")

_wl = _m("workload", "processes collector (sources/processes/) joined with NVML process lists and the memory "
         "model (workload/attribution.py)")
_srv = _m("serving", "serving collector (sources/serving/): each workload's runtime /metrics (endpoint:), "
          "normalized across vLLM, SGLang, TGI and Triton (docs/serving.md)")
_slat = _m("serving", "analysis (analysis/serving.py) over the serving collector's histograms in the short window")
_probe = _m("serving", "probe collector (sources/probe.py): the last `headroom probe` result, probe-last.json in "
            "the state directory (docs/probe.md)")
_ana = _m("analysis", "analysis (analysis/pipeline.py, bottleneck.py, headroom.py) over the sampled window")
W = ("workload",)
# The catalogue is a table read row by row (name, type, unit, labels; the help wrapped under them): ruff format
# keeps it as written from here to the node_exporter table.
# fmt: off
CATALOG: tuple[MetricSpec, ...] = (
    # --- the agent itself
    _self("headroom_build_info", GAUGE, "", ("version", "python_version"),
          "Always 1; labels carry the agent version and the Python version."),
    _self("headroom_simulation_info", GAUGE, "", ("scenario",),
          "1 when GPUs are simulated (--simulate): their values come from a scenario, not a driver."),
    _self("headroom_collector_success", GAUGE, "", ("collector",),
          "1 when the collector's last read succeeded, 0 when it failed or is stuck."),
    _self("headroom_collector_duration_seconds", GAUGE, "seconds", ("collector",),
          "Wall time of the collector's last read."),
    _self("headroom_last_sample_timestamp_seconds", GAUGE, "seconds", (),
          "Unix time of the last completed sample (tick). Compare with time() to see staleness."),
    _self("headroom_sample_duration_seconds", GAUGE, "seconds", (),
          "Wall time of the last tick: all collectors, analysis and rendering."),
    _self("headroom_sample_duration_max_seconds", GAUGE, "seconds", (),
          "Longest tick over the last 60 s (sampler.TIMING_WINDOW_SECONDS): a slow tick between two scrapes."),
    _self("headroom_sample_lateness_seconds", GAUGE, "seconds", (),
          "How late the last tick started after its slot (one every interval): the sampler thread woke late, e.g. "
          "on a host whose every core is busy. Absent until the first scheduled tick."),
    _self("headroom_sample_lateness_max_seconds", GAUGE, "seconds", (),
          "Largest headroom_sample_lateness_seconds over the last 60 s (sampler.TIMING_WINDOW_SECONDS); median, p95 "
          "and max are in /api/v1/status (agent). A few ms normally; docs/deploy.md \"CPU priority\" says how the "
          "unit and the DaemonSet keep it so when every core is busy."),
    _self("headroom_samples_missed_total", COUNTER, "", (),
          "Schedule slots skipped because a tick started or ran past them (no tick was taken for them)."),
    _self("headroom_samples_total", COUNTER, "", (),
          "Ticks completed since the agent started."),
    _self("headroom_sample_interval_seconds", GAUGE, "seconds", (),
          "Configured sampling interval."),
    _self("headroom_config_last_reload_successful", GAUGE, "", (),
          "1 when the last configuration load (start-up or SIGHUP) succeeded; 0 while an invalid file is "
          "ignored and the previous configuration keeps running."),
    _self("headroom_config_last_reload_success_timestamp_seconds", GAUGE, "seconds", (),
          "Unix time of the last successful configuration load."),
    _self("headroom_record_success", GAUGE, "", (),
          "With --record: 1 when the last sample was written to the recording, 0 while writes fail "
          "(read-only or full disk); sampling and serving go on either way."),
    _self("headroom_record_written_bytes_total", COUNTER, "bytes", (), "Bytes written to the recording."),
    _self("headroom_web_config_last_reload_successful", GAUGE, "", (),
          "With a web config file: 1 when its last (re)load succeeded; 0 while a changed file is refused "
          "(invalid, empty, or turning TLS or basic auth off, which needs a restart) and the previous "
          "TLS and auth settings keep applying."),
    _self("headroom_exposition_refused_samples", GAUGE, "", (),
          "Samples left out of the last exposition because Prometheus could not parse their value (an integer "
          "beyond a float's range, which would fail the whole scrape); 0 normally. The agent logs "
          "exposition_value_refused with the series names."),
    MetricSpec("headroom_agent_cpu_seconds_total", COUNTER, "seconds", ("mode",),
               "CPU time the agent process used, mode user or system.", "agent collector (sources/agent.py): psutil",
               "agent"),
    MetricSpec("headroom_agent_resident_memory_bytes", GAUGE, "bytes", (), "Resident memory of the agent process.",
               "agent collector (sources/agent.py): psutil", "agent"),
    MetricSpec("headroom_agent_threads", GAUGE, "", (), "Threads of the agent process.",
               "agent collector (sources/agent.py): psutil", "agent"),
    MetricSpec("headroom_agent_open_fds", GAUGE, "", (), "Open file descriptors of the agent process.",
               "agent collector (sources/agent.py): psutil", "agent"),
    MetricSpec("headroom_agent_start_time_seconds", GAUGE, "seconds", (), "Unix time the agent process started.",
               "agent collector (sources/agent.py): psutil", "agent"),
    # --- NVML and GPUs
    _gpu("headroom_nvml_up", GAUGE, "", (),
         "1 when NVML is initialised and answering, 0 when the library or driver is unavailable."),
    _gpu("headroom_gpu_info", GAUGE, "", ("gpu", "uuid", "name", "pci_bus_id", "driver_version"),
         "Always 1 per GPU; labels carry its identity."),
    _gpu("headroom_gpu_up", GAUGE, "", G,
         "1 when the GPU answers NVML, 0 when it is lost or failing (see logs for the reason)."),
    _gpu("headroom_gpu_utilization_ratio", GAUGE, "ratio", G,
         "Share of the last NVML sample period (1/6 s to 1 s) in which any kernel ran. Not SM occupancy."),
    _gpu("headroom_gpu_memory_utilization_ratio", GAUGE, "ratio", G,
         "Share of the last NVML sample period in which device memory was read or written."),
    _gpu("headroom_gpu_busy_seconds_total", COUNTER, "seconds", G,
         "Seconds the GPU was busy, integrated from utilization at every tick; rate() gives exact busy ratio."),
    _gpu("headroom_gpu_memory_size_bytes", GAUGE, "bytes", G, "Device memory capacity."),
    _gpu("headroom_gpu_memory_used_bytes", GAUGE, "bytes", G, "Device memory in use (allocated by processes and the driver)."),
    _gpu("headroom_gpu_memory_free_bytes", GAUGE, "bytes", G, "Device memory free."),
    _gpu("headroom_gpu_memory_reserved_bytes", GAUGE, "bytes", G,
         "Device memory reserved by the driver and firmware (NVML memory info v2)."),
    _gpu("headroom_gpu_power_watts", GAUGE, "watts", G, "Power draw."),
    _gpu("headroom_gpu_power_limit_watts", GAUGE, "watts", G,
         "Enforced power limit, read every 10 s (not every tick): a new limit shows within 10 s."),
    _gpu("headroom_gpu_energy_joules_total", COUNTER, "joules", G,
         "Energy consumed since the driver was loaded."),
    _gpu("headroom_gpu_temperature_celsius", GAUGE, "celsius", G, "GPU core temperature."),
    _gpu("headroom_gpu_memory_temperature_celsius", GAUGE, "celsius", G, "HBM/memory temperature."),
    _gpu("headroom_gpu_sm_clock_hertz", GAUGE, "hertz", G, "Current SM clock."),
    _gpu("headroom_gpu_sm_clock_max_hertz", GAUGE, "hertz", G, "Maximum SM clock."),
    _gpu("headroom_gpu_memory_clock_hertz", GAUGE, "hertz", G, "Current memory clock."),
    _gpu("headroom_gpu_memory_clock_max_hertz", GAUGE, "hertz", G, "Maximum memory clock."),
    _gpu("headroom_gpu_performance_state", GAUGE, "", G, "Performance state: 0 (P0, maximum) to 15 (minimum)."),
    _gpu("headroom_gpu_fan_speed_ratio", GAUGE, "ratio", G, "Fan speed as a share of its maximum."),
    _gpu("headroom_gpu_clock_event_active", GAUGE, "", (*G, "reason"),
         "1 while the clock-event (throttle) reason is active. sw_power_cap, hw_slowdown, sw_thermal_slowdown, "
         "hw_thermal_slowdown and hw_power_brake_slowdown mean the GPU runs slower than it could."),
    _gpu("headroom_gpu_clock_event_seconds_total", COUNTER, "seconds", (*G, "reason"),
         "Seconds the clock-event reason was active, accumulated at every tick."),
    _gpu("headroom_gpu_pcie_throughput_bytes_per_second", GAUGE, "bytes", (*G, "direction"),
         "PCIe throughput (direction tx: GPU to host, rx: host to GPU). Where the GPU counts PCIe bytes "
         "(headroom_gpu_pcie_bytes_total present) the exact average over the last tick; otherwise a sampled "
         "estimate: one blocking 20 ms NVML window per direction every collectors.nvml.pcie_poll_interval "
         "(0.4 % of the time at 5 s), polled outside the tick, so short bursts can be missed or over-weighted."),
    _gpu("headroom_gpu_pcie_bytes_total", COUNTER, "bytes", (*G, "direction"),
         "PCIe bytes moved since the driver was loaded (NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES); absent where the "
         "GPU does not count them."),
    _gpu("headroom_gpu_pcie_link_generation", GAUGE, "", G, "Current PCIe link generation."),
    _gpu("headroom_gpu_pcie_link_max_generation", GAUGE, "", G, "Maximum PCIe link generation of GPU and slot."),
    _gpu("headroom_gpu_pcie_link_width", GAUGE, "", G, "Current PCIe link width (lanes)."),
    _gpu("headroom_gpu_pcie_link_max_width", GAUGE, "", G, "Maximum PCIe link width (lanes)."),
    _gpu("headroom_gpu_sm_active_ratio", GAUGE, "ratio", G,
         "Share of SMs busy, averaged over the last tick (GPM, Hopper and later). Utilization says a kernel "
         "ran; this says how much of the GPU it used."),
    _gpu("headroom_gpu_sm_occupancy_ratio", GAUGE, "ratio", G,
         "Resident warps over the SMs' maximum, averaged over the last tick (GPM, Hopper and later)."),
    _gpu("headroom_gpu_tensor_active_ratio", GAUGE, "ratio", G,
         "Share of time the tensor cores were busy, averaged over the last tick (GPM, Hopper and later)."),
    _gpu("headroom_gpu_dram_active_ratio", GAUGE, "ratio", G,
         "Device memory bandwidth used over its peak, averaged over the last tick (GPM, Hopper and later)."),
    _gpu("headroom_gpu_nvlink_bytes_total", COUNTER, "bytes", (*G, "link", "direction"),
         "NVLink data bytes sent (tx) and received (rx) on an active link (NVML field values, per link)."),
    _gpu("headroom_gpu_nvlink_link_up", GAUGE, "", (*G, "link"),
         "1 when the NVLink link is active, 0 when it is down; absent without NVLink. Re-read every 30 s."),
    _gpu("headroom_gpu_processes", GAUGE, "", G, "Compute processes running on the GPU."),
    _gpu("headroom_gpu_process_memory_used_bytes", GAUGE, "bytes", G,
         "Device memory used by compute processes, summed (per-process figures go to workload metrics)."),
    _gpu("headroom_gpu_processes_stale", GAUGE, "", G,
         "1 when this tick's process query failed and the process figures are the last list read; 0 when fresh."),
    _gpu("headroom_gpu_mig_enabled", GAUGE, "", G, "1 when MIG mode is enabled."),
    _gpu("headroom_gpu_mig_processes", GAUGE, "", (*G, "gpu_instance", "mig_uuid"),
         "Compute processes running in a MIG instance (queried through its MIG device handle)."),
    _gpu("headroom_gpu_mig_process_memory_used_bytes", GAUGE, "bytes", (*G, "gpu_instance", "mig_uuid"),
         "Device memory used by the compute processes of a MIG instance, summed."),
    _gpu("headroom_gpu_mig_memory_used_bytes", GAUGE, "bytes", (*G, "gpu_instance", "mig_uuid"),
         "Device memory used by a MIG instance."),
    _gpu("headroom_gpu_mig_memory_size_bytes", GAUGE, "bytes", (*G, "gpu_instance", "mig_uuid"),
         "Device memory of a MIG instance."),
    _gpu("headroom_gpu_xid_errors_total", COUNTER, "", (*G, "xid"),
         "XID errors reported by the driver since the agent started, per XID code."),
    _gpu("headroom_gpu_ecc_uncorrected_errors_total", COUNTER, "", (*G, "scope"),
         "Uncorrected ECC errors; scope volatile (since driver load) or aggregate (lifetime)."),
    _gpu("headroom_gpu_remapped_rows", GAUGE, "", (*G, "kind"),
         "Rows remapped after memory errors, kind correctable or uncorrectable."),
    _gpu("headroom_gpu_remapped_rows_pending", GAUGE, "", G, "1 when a row remap awaits a GPU reset."),
    _gpu("headroom_gpu_remapped_rows_failure", GAUGE, "", G, "1 when a row remap failed (the GPU needs service)."),
    # --- bottleneck and headroom analysis
    _ana("headroom_gpu_bottleneck_score", GAUGE, "", (*G, "resource"),
         "How sure the analysis is (0-1) that the resource limits this GPU's work, over the short window "
         "(analysis.short_window, default 15s of 1 s samples). Rules and evidence: docs/analysis.md, /api/v1/status."),
    _ana("headroom_gpu_bottleneck_long_score", GAUGE, "", (*G, "resource"),
         "The same score over the long window (analysis.long_window, default 5m; at most 60 evenly spaced "
         "samples of it), refreshed every 5 s."),
    _ana("headroom_gpu_bottleneck", GAUGE, "", (*G, "resource"),
         "1 for the GPU's current primary bottleneck (resource none when nothing limits), 0 for the others. "
         "The primary changes only after a new verdict held for analysis.hold (default 20s)."),
    _ana("headroom_gpu_bottleneck_pending_seconds", GAUGE, "seconds", (*G, "resource"),
         "While a candidate other than the primary waits out analysis.hold: the seconds it has held (resource: the "
         "candidate, none for a return to nothing); it becomes the primary at analysis.hold if it holds. Absent "
         "when nothing is pending."),
    _ana("headroom_gpu_idle", GAUGE, "", G,
         "1 when the GPU's utilization stayed below analysis.idle_busy_ratio over the short window."),
    _ana("headroom_gpu_healthy", GAUGE, "", G,
         "1 when no health condition holds on the GPU, 0 when one does (headroom_gpu_health_condition says which; "
         "/api/v1/status gives the reason and the action: reset, reboot, service or inspect). About the GPU, not the "
         "agent (/healthz). docs/analysis.md, GPU health."),
    _ana("headroom_gpu_health_condition", GAUGE, "", (*G, "condition"),
         "1 while the condition holds on the GPU (absent otherwise), for each of gpu_lost, xid_reset_required, "
         "ecc_uncorrectable, row_remap_pending, row_remap_failed and clocks_stuck; each clears when its cause does "
         "(a reset, the GPU answering again, clocks moving). docs/analysis.md, GPU health."),
    _ana("headroom_gpus_idle", GAUGE, "", (), "GPUs idle over the short window."),
    _ana("headroom_gpu_idle_seconds_total", COUNTER, "seconds", (),
         "GPU-seconds spent idle, summed over all GPUs (a GPU idle for 1 s adds 1)."),
    _ana("headroom_gpu_idle_cost_total", COUNTER, "", ("currency",),
         "Cost of idle GPU time at the configured cost_per_gpu_hour (workload profiles, else "
         "analysis.cost_per_gpu_hour), in the currency the label names (analysis.currency, an ISO 4217 code, "
         "default USD); absent when no cost is configured."),
    _ana("headroom_gpu_cost_per_hour", GAUGE, "", G,
         "What an hour of this GPU costs (the cost_per_gpu_hour of the workload profile on it, else "
         "analysis.cost_per_gpu_hour), in the currency of headroom_gpu_idle_cost_total; absent when no cost is "
         "configured. The fleet idle-cost rules use it."),
    _ana("headroom_workload_bottleneck_score", GAUGE, "", (*W, "resource"),
         "How sure the analysis is (0-1) that the resource limits the workload now, over the short window "
         "(analysis.short_window, default 15s). Rules and evidence: docs/analysis.md, /api/v1/status."),
    _ana("headroom_workload_bottleneck_long_score", GAUGE, "", (*W, "resource"),
         "The same score over the long window (analysis.long_window, default 5m; at most 60 evenly spaced "
         "samples of it), refreshed every 5 s."),
    _ana("headroom_workload_bottleneck", GAUGE, "", (*W, "resource"),
         "1 for the workload's current primary bottleneck (resource none when nothing limits), 0 for the others, "
         "so a Grafana state timeline shows it. Changes only after holding for analysis.hold (default 20s)."),
    _ana("headroom_workload_bottleneck_pending_seconds", GAUGE, "seconds", (*W, "resource"),
         "While a candidate other than the workload's primary waits out analysis.hold: the seconds it has held "
         "(resource: the candidate); it becomes the primary at analysis.hold if it holds. Absent when nothing is "
         "pending (a scrape every 15-60 s sees it once or twice at the default 20s hold)."),
    _ana("headroom_workload_headroom_gpu_memory_bytes", GAUGE, "bytes", W,
         "Free VRAM on the workload's GPUs, summed (for vLLM, which reserves its pool up front, see sequences)."),
    _ana("headroom_workload_headroom_sequences", GAUGE, "", (*W, "basis"),
         "More concurrent sequences that fit at the profile's max context; basis says where from: runtime (the "
         "serving runtime's free KV tokens / context.max, beyond what runs now), memory_model (the model's KV "
         "budget in the vLLM reservation against the declared concurrency; negative: the declared load does not "
         "fit) or free_vram (measured free VRAM / the model's KV bytes per token). docs/analysis.md, Headroom. "
         "Beside it, basis measured: a recent `headroom probe`'s capacity at the SLO (at the probe's lengths, "
         "not max context) minus the requests running now (docs/probe.md)."),
    _ana("headroom_workload_headroom_context_tokens", GAUGE, "", (*W, "basis"),
         "More tokens per sequence that fit at the declared concurrency (negative: over); basis as for "
         "headroom_workload_headroom_sequences (runtime: free KV tokens / the declared concurrency)."),
    _ana("headroom_workload_headroom_cpu_cores", GAUGE, "", W,
         "Idle CPU cores the workload's processes could still use (bounded by its cgroup quota when known)."),
    _ana("headroom_workload_headroom_host_memory_bytes", GAUGE, "bytes", W, "Host memory available (MemAvailable)."),
    _ana("headroom_workload_headroom_shared_memory_bytes", GAUGE, "bytes", W,
         "Bytes still writable in the fullest shared-memory mount (DataLoader workers pass batches through it)."),
    _ana("headroom_workload_headroom_power_watts", GAUGE, "watts", W,
         "Power limit minus draw, summed over the workload's GPUs."),
    _ana("headroom_workload_headroom_thermal_celsius", GAUGE, "celsius", W,
         "Degrees left before thermal slowdown on the workload's tightest GPU: each GPU's own limit (NVML's max "
         "operating, else slowdown temperature, else analysis.gpu_slowdown_celsius) minus its temperature."),
    # --- CPU and pressure
    _cpu("headroom_cpu_seconds_total", COUNTER, "seconds", ("mode",),
         "CPU time of all logical CPUs per mode (guest time is also counted in user and nice, as the kernel does)."),
    _cpu("headroom_cpu_logical_cpus", GAUGE, "", (), "Logical CPUs online."),
    _cpu("headroom_cpu_utilization_ratio", GAUGE, "ratio", (),
         "Share of all CPUs busy (not idle, not iowait) over the analysis short window (agent samples every tick)."),
    _cpu("headroom_load1", GAUGE, "", (), "1-minute load average."),
    _cpu("headroom_load5", GAUGE, "", (), "5-minute load average."),
    _cpu("headroom_load15", GAUGE, "", (), "15-minute load average."),
    _cpu("headroom_procs_running", GAUGE, "", (), "Runnable tasks."),
    _cpu("headroom_procs_blocked", GAUGE, "", (), "Tasks blocked on I/O."),
    _cpu("headroom_pressure_stalled_seconds_total", COUNTER, "seconds", ("resource", "kind"),
         "PSI: seconds in which some (or all, kind full) non-idle tasks were stalled on the resource."),
    _cpu("headroom_pressure_ratio", GAUGE, "ratio", ("resource", "kind", "window"),
         "PSI: share of time stalled, averaged by the kernel over the window (10s, 60s, 300s)."),
    # --- memory
    _mem("headroom_memory_size_bytes", GAUGE, "bytes", (), "Physical memory (MemTotal)."),
    _mem("headroom_memory_available_bytes", GAUGE, "bytes", (),
         "Memory available for new work without swapping (MemAvailable)."),
    _mem("headroom_memory_free_bytes", GAUGE, "bytes", (), "Unused memory (MemFree)."),
    _mem("headroom_memory_buffers_bytes", GAUGE, "bytes", (), "Buffers."),
    _mem("headroom_memory_cached_bytes", GAUGE, "bytes", (), "Page cache (Cached)."),
    _mem("headroom_memory_shmem_bytes", GAUGE, "bytes", (), "Shared memory and tmpfs pages (Shmem), incl. /dev/shm."),
    _mem("headroom_memory_dirty_bytes", GAUGE, "bytes", (), "Dirty pages waiting to be written."),
    _mem("headroom_memory_writeback_bytes", GAUGE, "bytes", (), "Pages being written back."),
    _mem("headroom_memory_swap_size_bytes", GAUGE, "bytes", (), "Swap space."),
    _mem("headroom_memory_swap_free_bytes", GAUGE, "bytes", (), "Unused swap space."),
    _mem("headroom_memory_major_faults_total", COUNTER, "", (), "Major page faults (pages read from disk)."),
    # --- shared memory
    _shm("headroom_shm_present", GAUGE, "", ("mountpoint",),
         "1 when the configured shared-memory mount exists, 0 when it is missing."),
    _shm("headroom_shm_size_bytes", GAUGE, "bytes", ("mountpoint",), "Size of the shared-memory mount."),
    _shm("headroom_shm_used_bytes", GAUGE, "bytes", ("mountpoint",), "Bytes used in the shared-memory mount."),
    _shm("headroom_shm_available_bytes", GAUGE, "bytes", ("mountpoint",),
         "Bytes still writable in the shared-memory mount."),
    # --- disks
    _disk("headroom_disk_reads_completed_total", COUNTER, "", ("device",), "Reads completed."),
    _disk("headroom_disk_read_bytes_total", COUNTER, "bytes", ("device",), "Bytes read."),
    _disk("headroom_disk_writes_completed_total", COUNTER, "", ("device",), "Writes completed."),
    _disk("headroom_disk_written_bytes_total", COUNTER, "bytes", ("device",), "Bytes written."),
    _disk("headroom_disk_io_time_seconds_total", COUNTER, "seconds", ("device",),
          "Seconds the device had I/O in flight; rate() is the busy ratio."),
    _disk("headroom_disk_io_time_weighted_seconds_total", COUNTER, "seconds", ("device",),
          "Sum of the time every request spent queued and in service; rate() is the average queue depth."),
    _disk("headroom_disk_io_in_flight", GAUGE, "", ("device",), "Requests in flight now."),
    # --- network
    _net("headroom_network_receive_bytes_total", COUNTER, "bytes", ("device",), "Bytes received."),
    _net("headroom_network_transmit_bytes_total", COUNTER, "bytes", ("device",), "Bytes transmitted."),
    _net("headroom_network_receive_drops_total", COUNTER, "", ("device",),
         "Received packets dropped (no buffer space, full queues): a saturated host or link drops here."),
    _net("headroom_network_transmit_drops_total", COUNTER, "", ("device",), "Packets dropped on transmit."),
    _net("headroom_network_speed_bytes", GAUGE, "bytes", ("device",),
         "Negotiated link speed in bytes per second (sysfs speed in Mb/s x 125000); absent when unknown "
         "(virtual interfaces, link down)."),
    _ib("headroom_infiniband_port_receive_bytes_total", COUNTER, "bytes", IB,
        "Bytes received on an RDMA port (InfiniBand or RoCE): counters/port_rcv_data, which counts 4-byte words, "
        "x 4. RDMA traffic (NCCL over verbs) bypasses the network stack: /proc/net/dev does not count it. The "
        "port series have node_exporter's infiniband values (node_infiniband_port_data_received_bytes_total ...; "
        "tests/test_infiniband.py compares them)."),
    _ib("headroom_infiniband_port_transmit_bytes_total", COUNTER, "bytes", IB,
        "Bytes transmitted on an RDMA port: counters/port_xmit_data x 4."),
    _ib("headroom_infiniband_port_receive_packets_total", COUNTER, "", IB, "Packets received (port_rcv_packets)."),
    _ib("headroom_infiniband_port_transmit_packets_total", COUNTER, "", IB,
        "Packets transmitted (port_xmit_packets)."),
    _ib("headroom_infiniband_port_rate_bytes", GAUGE, "bytes", IB,
        "The port's link rate in bytes per second (ports/<port>/rate in Gb/s x 125000000)."),
    _ib("headroom_infiniband_port_active", GAUGE, "", ("device", "port", "link_layer"),
        "1 when the port's state is ACTIVE; link_layer InfiniBand, or Ethernet for RoCE."),
    _ib("headroom_infiniband_port_events_total", COUNTER, "", ("device", "port", "counter"),
        "Error and congestion counters the port has, by file name: symbol_error, link_downed, port_rcv_errors, "
        "port_xmit_discards, port_xmit_wait (counters/); out_of_sequence, packet_seq_err, local_ack_timeout_err, "
        "roce_adp_retrans, np_cnp_sent, rp_cnp_handled, out_of_buffer (hw_counters/, mlx5)."),
    # --- declared workloads: measured against expected
    _wl("headroom_workload_info", GAUGE, "", ("workload", "kind", "model", "precision", "runtime", "source"),
        "Always 1 per workload; labels carry its profile (empty when the profile does not say); source is declared "
        "(a profile) or auto (a pod, Slurm job, container or systemd unit holding a GPU: kind pod, job, container, "
        "unit; or a serving or training launcher found by its command line, such as vllm serve or torchrun: kind "
        "inference, embedding or training, with the model and runtime it names; docs/workload-identity.md)."),
    _wl("headroom_workload_fleet_info", GAUGE, "", ("workload", "team", "training_job"),
        "Always 1 for a workload whose profile names a team or a job (a job spanning hosts; label training_job, "
        "as job is Prometheus' scrape job). The fleet rules group GPUs by these across hosts."),
    _wl("headroom_workload_processes", GAUGE, "", ("workload",),
        "Live processes of the workload: its match rules, plus their descendants (DataLoader workers)."),
    _wl("headroom_workload_threads", GAUGE, "", ("workload",), "Threads of the workload's processes."),
    _wl("headroom_workload_cpu_seconds_total", COUNTER, "seconds", ("workload", "mode"),
        "CPU time of the workload's processes (mode user or system); exited members keep their share, time "
        "after a member's last 1 s sample is lost."),
    _wl("headroom_workload_resident_memory_bytes", GAUGE, "bytes", ("workload",),
        "Resident memory of the workload's processes, summed (pages shared by forked workers count per process)."),
    _wl("headroom_workload_read_bytes_total", COUNTER, "bytes", ("workload",),
        "Bytes its processes read from block devices (/proc/PID/io); absent when no member's io is readable "
        "(other users' processes without CAP_SYS_PTRACE)."),
    _wl("headroom_workload_written_bytes_total", COUNTER, "bytes", ("workload",),
        "Bytes its processes wrote to block devices (/proc/PID/io); absent like read_bytes."),
    _wl("headroom_workload_cpu_wait_seconds_total", COUNTER, "seconds", ("workload",),
        "Seconds its processes' main threads were runnable but waited for a CPU (/proc/PID/schedstat, summed; each "
        "member counted from its first read): its rate over that of headroom_workload_cpu_run_seconds_total plus "
        "itself is the share of their runnable time they waited (oversubscribed CPUs). Absent where schedstat is "
        "unreadable (a kernel without CONFIG_SCHED_INFO) and for a simulation's stand-ins."),
    _wl("headroom_workload_cpu_run_seconds_total", COUNTER, "seconds", ("workload",),
        "Seconds its processes' main threads ran on a CPU (/proc/PID/schedstat, summed like cpu_wait_seconds)."),
    _wl("headroom_workload_cpus_allowed", GAUGE, "", ("workload",),
        "CPUs its main process may run on (sched_getaffinity: a cpuset from Slurm, Kubernetes' static CPU manager, "
        "taskset or docker --cpuset-cpus); absent where unknown."),
    _wl("headroom_workload_dataloader_workers", GAUGE, "", ("workload",),
        "PyTorch DataLoader worker processes found under the workload's ranks (the children of its torchrun, "
        "accelerate or deepspeed launcher, else its main processes), summed over its ranks; each rank's count is in "
        "/api/v1/status. Measured, not the profile's dataloader_workers; absent for serving workloads without any "
        "and where its processes are not measured."),
    _wl("headroom_workload_cgroup_cpu_seconds_total", COUNTER, "seconds", ("workload", "mode"),
        "CPU time of the cgroup the workload maps to (systemd unit, cgroup glob or container id), cpu.stat. "
        "An automatic workload's (pod, job ...) is read when it appears, then at least every 10 s."),
    _wl("headroom_workload_cgroup_memory_bytes", GAUGE, "bytes", ("workload",),
        "Memory charged to the workload's cgroup (memory.current): anonymous memory, page cache, kernel memory. "
        "An automatic workload's is read when it appears, then at least every 10 s."),
    _wl("headroom_workload_cgroup_pressure_ratio", GAUGE, "ratio", ("workload", "resource"),
        "PSI of the workload's cgroup: share of time some of its tasks stalled on the resource, kernel avg10."),
    _wl("headroom_workload_gpu_memory_used_bytes", GAUGE, "bytes", ("workload", "gpu"),
        "GPU memory NVML attributes to the workload's processes on the GPU (0 on a declared GPU it does not "
        "use); sum by workload to compare with the expected peak."),
    _wl("headroom_workload_gpu_utilization_ratio", GAUGE, "ratio", ("workload", "gpu"),
        "SM utilization of the workload's processes on the GPU, from NVML per-process samples since the "
        "previous 1 s tick; absent where the GPU does not support them."),
    _wl("headroom_workload_memory_expected_bytes", GAUGE, "bytes", ("workload", "component"),
        "Memory the profile should need per GPU, by component of the memory model (weights, kv_cache, "
        "activations, cuda_context ...; host memory for cpu-inference). docs/sizing.md."),
    _wl("headroom_workload_gpu_memory_expected_peak_bytes", GAUGE, "bytes", ("workload",),
        "GPU memory the workload should show in NVML, summed over its GPUs: per-GPU need (the vLLM "
        "reservation for vLLM) x GPUs used. Compare with sum of headroom_workload_gpu_memory_used_bytes."),
    _wl("headroom_workload_gpu_memory_capacity_bytes", GAUGE, "bytes", ("workload",),
        "Memory of the GPUs the workload uses (attributed or declared), summed."),
    # --- serving runtimes (workloads with an endpoint)
    _srv("headroom_workload_serving_up", GAUGE, "", W,
         "1 when the last scrape of the workload's serving endpoint returned a runtime's metrics, 0 when it "
         "failed (the reason is in the log and /api/v1/status)."),
    _srv("headroom_workload_serving_info", GAUGE, "", (*W, "runtime"),
         "Always 1 while the endpoint answers; runtime is the one detected from its metric names "
         "(vllm, sglang, tgi, triton)."),
    _srv("headroom_workload_serving_scrape_duration_seconds", GAUGE, "seconds", W,
         "Wall time of the last scrape of the serving endpoint (off the tick, in the endpoint's own thread)."),
    _srv("headroom_workload_serving_dropped_series_total", COUNTER, "", (*W, "reason"),
         "Runtime series of the serving endpoint's answers that were not read for being over a cap of one scrape "
         "(docs/serving.md, Bounded): reason series (over serving.MAX_SERIES, MAX_LINES or MAX_LINE_CHARS: the "
         "scrape is refused, up 0, the endpoint reported oversized in /api/v1/status), reason buckets (bucket lines "
         "of a histogram over serving.MAX_HISTOGRAM_BUCKETS: that histogram is not read). Since the endpoint's "
         "worker started."),
    _srv("headroom_workload_kv_cache_usage_ratio", GAUGE, "ratio", W,
         "Share of the runtime's KV cache in use (the fullest engine), as the runtime reports it."),
    _srv("headroom_workload_requests_running", GAUGE, "", W, "Requests the runtime is running now (in batches)."),
    _srv("headroom_workload_requests_waiting", GAUGE, "", W, "Requests queued in the runtime, not yet scheduled."),
    _srv("headroom_workload_preemptions_total", COUNTER, "", W,
         "Sequences the runtime evicted from its KV cache to make room (vLLM preemptions, SGLang retractions)."),
    _srv("headroom_workload_kv_cache_capacity_tokens", GAUGE, "", W,
         "Tokens the runtime's KV cache holds (vLLM num_gpu_blocks x block_size, SGLang max_total_num_tokens ...)."),
    _srv("headroom_workload_prompt_tokens_total", COUNTER, "", W, "Prompt (prefill) tokens the runtime processed."),
    _srv("headroom_workload_generation_tokens_total", COUNTER, "", W, "Tokens the runtime generated."),
    _srv("headroom_workload_time_to_first_token_seconds_total", COUNTER, "seconds", W,
         "Sum of the runtime's time-to-first-token observations (its histogram's _sum); divide rates by "
         "headroom_workload_time_to_first_token_observations_total for the mean."),
    _srv("headroom_workload_time_to_first_token_observations_total", COUNTER, "", W,
         "Time-to-first-token observations (requests) of the runtime's histogram (_count)."),
    _srv("headroom_workload_inter_token_latency_seconds_total", COUNTER, "seconds", W,
         "Sum of the runtime's inter-token latency observations (its histogram's _sum)."),
    _srv("headroom_workload_inter_token_latency_observations_total", COUNTER, "", W,
         "Inter-token latency observations of the runtime's histogram (_count)."),
    _srv("headroom_workload_requests_waiting_deferred", GAUGE, "", W,
         "Of the requests waiting, those deferred by a transient constraint (a LoRA budget, an async KV transfer, a "
         "blocked request), not waiting for scheduling capacity (vLLM num_requests_waiting_by_reason{reason="
         "\"deferred\"}); absent where the runtime does not tell."),
    _srv("headroom_workload_admission_rejections_total", COUNTER, "", W,
         "Requests the runtime refused at admission for a full queue (vLLM admission_rejections_total: "
         "max_num_queued_reqs / max_num_queued_tokens); they never appear as waiting."),
    _srv("headroom_workload_request_queue_time_seconds_total", COUNTER, "seconds", W,
         "Sum of the runtime's queue time observations (time a request waited before it was scheduled; vLLM "
         "request_queue_time_seconds _sum)."),
    _srv("headroom_workload_request_queue_time_observations_total", COUNTER, "", W,
         "Queue time observations (requests) of the runtime's histogram (_count)."),
    _srv("headroom_workload_resident_models", GAUGE, "", W,
         "Models the runtime holds loaded, where it lists them (Ollama's /api/ps; a profile declaring runtime "
         "ollama with endpoint http://HOST:11434/api/ps)."),
    _srv("headroom_workload_resident_model_bytes", GAUGE, "bytes", W,
         "Bytes of the models the runtime holds loaded, in all (Ollama /api/ps size, summed)."),
    _srv("headroom_workload_resident_model_vram_bytes", GAUGE, "bytes", W,
         "Of headroom_workload_resident_model_bytes, those in GPU memory (Ollama /api/ps size_vram, summed; the "
         "rest runs on the CPU)."),
    _srv("headroom_workload_serving_sleep_level", GAUGE, "", W,
         "0 while the runtime's engine is awake, 1 or 2 while it sleeps (vLLM sleep mode, engine_sleep_state: 1 "
         "weights offloaded, 2 weights and KV cache discarded): idle on purpose, not broken."),
    _slat("headroom_workload_time_to_first_token_seconds", GAUGE, "seconds", (*W, "percentile"),
          "Time to first token percentile (p50, p95, p99) of the requests observed in the short window "
          "(analysis.short_window), read from the runtime's histogram buckets like histogram_quantile."),
    _slat("headroom_workload_inter_token_latency_seconds", GAUGE, "seconds", (*W, "percentile"),
          "Inter-token latency percentile (p50, p95, p99) over the short window, from the runtime's buckets."),
    _slat("headroom_workload_latency_percentile_bounded", GAUGE, "", (*W, "latency", "percentile"),
          "1 when the latency percentile (latency ttft, itl or queue; p50, p95, p99) fell in a bucket too coarse to be a "
          "value: the runtime's first bucket, its +Inf bucket, or one wider than analysis.latency_bucket_width_max "
          "of its upper bound; the percentile gauge is then only known to lie in that bucket "
          "(headroom_workload_latency_percentile_bucket_seconds). 0: a value."),
    _slat("headroom_workload_latency_percentile_bucket_seconds", GAUGE, "seconds",
          (*W, "latency", "percentile", "edge"),
          "The bucket a bounded latency percentile fell in: edge lower (0 for the first bucket) and upper (+Inf for "
          "the last); absent while the percentile is a value."),
    _slat("headroom_workload_slo_met", GAUGE, "", (*W, "objective"),
          "1 when the workload's latency objective (profile slo:, e.g. ttft_p95) held over the short window, 0 "
          "when the window's percentile was above it; a percentile that is a bound decides only when its bucket "
          "lies wholly at or below (1) or above (0) the objective. Absent while no request was observed and while "
          "undecided (headroom_workload_slo_decided 0)."),
    _slat("headroom_workload_slo_decided", GAUGE, "", (*W, "objective"),
          "0 while the runtime's buckets cannot tell whether the latency objective held (it lies inside the coarse "
          "bucket the percentile fell in, or below the runtime's first bucket) and no recent probe of the workload "
          "decided it (/api/v1/status says which); 1 when headroom_workload_slo_met is present. Absent while no "
          "request was observed."),
    _slat("headroom_workload_slo_target_seconds", GAUGE, "seconds", (*W, "objective"),
          "The latency objective the profile declares (slo:), for dashboards and alert texts."),
    _probe("headroom_workload_capacity_concurrency", GAUGE, "", (*W, "bound_by", "input_tokens", "output_tokens"),
           "Concurrent sequences the last `headroom probe` measured within the SLO (absent: no level met it); "
           "bound_by: the resource that broke it (kv_cache, gpu_compute, cpu ... ; client: the load generator "
           "itself saturated; none: the SLO held at every level tried), input_tokens/output_tokens: the typical "
           "lengths of its load. Compare live load with it (headroom_workload_requests_running)."),
    _probe("headroom_workload_capacity_requests_per_second", GAUGE, "", (*W, "bound_by", "input_tokens",
                                                                          "output_tokens"),
           "Requests per second completed at the capacity level of the last `headroom probe` (labels as "
           "headroom_workload_capacity_concurrency)."),
    _probe("headroom_workload_capacity_measured_timestamp_seconds", GAUGE, "seconds", W,
           "Unix time the last `headroom probe` finished: alert on an old measurement with time() - this."),
    _probe("headroom_workload_capacity_partial", GAUGE, "", W,
           "1 when the last `headroom probe` was interrupted or stopped by an error: its capacity is a partial "
           "result."),
    _slat("headroom_workload_kv_capacity_tokens", GAUGE, "", (*W, "source"),
          "KV cache capacity in tokens: source runtime as the runtime reports it, source estimate as the memory "
          "model (headroom estimate) computes it for the profile."),
    _slat("headroom_workload_kv_headroom_sequences", GAUGE, "", (*W, "basis"),
          "More concurrent sequences the free KV cache holds: basis observed at the mean tokens each running "
          "sequence holds now, basis max_context at the profile's context.max."),
)

_id = _m("identity", "identity collector (sources/identity/): cgroup paths of GPU processes, the kubelet's "
         "pod-resources API (sources/kubelet.py), the HPC job mapping directory")
CATALOG += (
    _id("headroom_identity_source_up", GAUGE, "", ("source",),
        "1 when the identity source answered its last call, 0 when it failed (source kubelet: the pod-resources "
        "API, with --kubernetes; hpc_job_mapping: --hpc-job-mapping-dir); the reason is logged and in /api/v1/status."),
    _id("headroom_identity_unknown_devices", GAUGE, "", ("source",),
        "Devices the source assigned that match no GPU or MIG instance on this host (kubelet: device IDs; "
        "hpc_job_mapping: GPU indices)."),
    _id("headroom_workload_identities", GAUGE, "", (),
        "Automatic workloads (pods, jobs, containers, units, launchers holding a GPU) exported this tick: not the "
        "identities a declared profile takes the place of (same processes or name), identities of one name once."),
    _id("headroom_workload_identities_max", GAUGE, "", (),
        "The cap on automatic workloads (collectors.identity.max_workloads); identities beyond it are not exported."),
    _id("headroom_workload_identities_dropped_total", COUNTER, "", (),
        "Identities not exported because the cap was reached, each counted once while it lasts."),
)

# Labels added to every series whose labels start with gpu, uuid, when the GPU is held by a pod (--kubernetes)
# or a Slurm job: several holders are joined with "," (docs/workload-identity.md).
GPU_IDENTITY_LABELS = ("namespace", "pod", "container", "hpc_job")

# Series that equal node_exporter's (same kernel file and field, same unit; tests/test_node_exporter_parity.py
# compares them with a running node_exporter), so users can join them or drop one side. (headroom series, its
# labels, node_exporter series)
NODE_EXPORTER_EQUIVALENTS: tuple[tuple[str, str, str], ...] = (
    ("headroom_pressure_stalled_seconds_total", 'resource="cpu",kind="some"', "node_pressure_cpu_waiting_seconds_total"),
    ("headroom_pressure_stalled_seconds_total", 'resource="memory",kind="some"',
     "node_pressure_memory_waiting_seconds_total"),
    ("headroom_pressure_stalled_seconds_total", 'resource="memory",kind="full"',
     "node_pressure_memory_stalled_seconds_total"),
    ("headroom_pressure_stalled_seconds_total", 'resource="io",kind="some"', "node_pressure_io_waiting_seconds_total"),
    ("headroom_pressure_stalled_seconds_total", 'resource="io",kind="full"', "node_pressure_io_stalled_seconds_total"),
    ("headroom_memory_size_bytes", "", "node_memory_MemTotal_bytes"),
    ("headroom_memory_swap_size_bytes", "", "node_memory_SwapTotal_bytes"),
)
# fmt: on

BY_NAME: dict[str, MetricSpec] = {m.name: m for m in CATALOG}
if len(BY_NAME) != len(CATALOG):  # pragma: no cover - guarded by a test too
    raise RuntimeError("duplicate metric name in catalogue")


def markdown() -> str:
    """docs/metrics.md, generated from the catalogue."""
    lines = [
        "# Metrics",
        "",
        "Generated from `agent/headroom/exposition/catalog.py` by",
        "`python -m headroom.exposition.catalog > docs/metrics.md`; do not edit by hand (a test compares them).",
        "",
        "Series whose source cannot answer (NVML NOT_SUPPORTED, a kernel without PSI ...) are absent, never 0.",
        "",
        "Series labelled gpu, uuid also carry " + ", ".join(GPU_IDENTITY_LABELS) + " when a Kubernetes pod "
        "(--kubernetes) or a Slurm job holds the GPU (several holders joined with \",\"); "
        "see docs/workload-identity.md.",
        "",
    ]
    group = None
    for m in CATALOG:
        if m.group != group:
            group = m.group
            lines += [f"## {group}", "", f"Source: {m.source}.", "",
                      "| name | type | unit | labels | meaning |", "|---|---|---|---|---|"]
        labels = ", ".join(m.labels) if m.labels else ""
        lines.append(f"| `{m.name}` | {m.type} | {m.unit or '-'} | {labels} | {m.help} |")
        nxt = CATALOG.index(m) + 1
        if nxt == len(CATALOG) or CATALOG[nxt].group != group:
            lines.append("")
    lines += [
        "## Same as node_exporter",
        "",
        "These series carry the same value as node_exporter's (the same kernel file and field, the same unit), so",
        "where both run you can join on them or drop one side with `metric_relabel_configs`. headroom keeps its",
        "own names (one `headroom_pressure_stalled_seconds_total` family with `resource` and `kind` labels, where",
        "node_exporter has one name per resource and kind). node_exporter exports no PSI averages:",
        "`headroom_pressure_ratio` is headroom's alone.",
        "",
        "| headroom | node_exporter |",
        "|---|---|",
    ]
    lines += [f"| `{name}{{{labels}}}` | `{node}` |" if labels else f"| `{name}` | `{node}` |"
              for name, labels, node in NODE_EXPORTER_EQUIVALENTS]
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")

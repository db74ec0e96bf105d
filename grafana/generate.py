"""Writes the Grafana dashboards in grafana/dashboards/ from the panel lists below.

Run ``.venv/bin/python grafana/generate.py`` after changing a panel (or after a metric a pending panel
needs lands in the catalogue); ``--check`` exits 1 when a committed file differs from what this script
writes (tests/test_dashboards.py runs it).

Panels name the catalogue metrics they need (``needs``). A panel whose metrics are not in
``headroom.exposition.catalog`` yet is left out and listed by ``--pending``, so the dashboards never
query a name the agent does not export.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from headroom.exposition.catalog import BY_NAME

HERE = Path(__file__).resolve().parent
OUT = HERE / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
THROTTLE_REASONS = "sw_power_cap|hw_slowdown|sw_thermal_slowdown|hw_thermal_slowdown|hw_power_brake_slowdown"


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    kind: str  # timeseries | stat | table | state-timeline | bargauge | piechart
    unit: str
    targets: tuple[Target, ...]
    width: int = 12
    height: int = 8
    needs: tuple[str, ...] = ()  # catalogue names that are pending elsewhere; the panel waits for them
    options: dict = field(default_factory=dict)
    custom: dict = field(default_factory=dict)
    mappings: tuple = ()
    thresholds: tuple = ()
    minmax: tuple = (None, None)


@dataclass(frozen=True)
class Row:
    title: str


def t(expr: str, legend: str = "", instant: bool = False) -> Target:
    """One PromQL target."""
    return Target(expr, legend, instant)


ACTIVE = ({"type": "value", "options": {"0": {"text": "off", "color": "transparent"},
                                         "1": {"text": "active", "color": "orange"}}},)
UP = ({"type": "value", "options": {"0": {"text": "down", "color": "red"}, "1": {"text": "up", "color": "green"}}},)
BOTTLENECK = ({"type": "value", "options": {"0": {"text": "-", "color": "transparent"},
                                             "1": {"text": "primary", "color": "red"}}},)
RED_ABOVE_0 = ({"color": "green", "value": None}, {"color": "red", "value": 1})
PCT_STEPS = ({"color": "green", "value": None}, {"color": "orange", "value": 0.8}, {"color": "red", "value": 0.95})
MET = ({"type": "value", "options": {"0": {"text": "missed", "color": "red"},
                                      "1": {"text": "met", "color": "green"},
                                      "2": {"text": "undecided", "color": "yellow"}}},)
STACKED = {"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 30}

# ---------------------------------------------------------------- Fleet overview
FI = 'instance=~"$instance"'
FLEET = (
    Row("At a glance"),
    Panel("Hosts reporting", "Agents whose metrics Prometheus currently has (one per host).", "stat", "none",
          (t(f'count(headroom_build_info{{{FI}}})'),), width=4, height=4),
    Panel("GPUs", "GPUs the agents see through NVML.", "stat", "none",
          (t(f'count(headroom_gpu_info{{{FI}}})'),), width=4, height=4),
    Panel("GPUs busy", "GPUs that ran kernels at least 5 % of the last 5 minutes "
          "(recording rule instance_gpu:headroom_gpu_busy:rate5m).", "stat", "none",
          (t(f'count(instance_gpu:headroom_gpu_busy:rate5m{{{FI}}} >= 0.05) or vector(0)'),), width=4, height=4),
    Panel("GPUs idle", "GPUs whose utilization stayed below the agent's idle threshold (analysis.idle_busy_ratio) "
          "over its short window: capacity paid for and unused.", "stat", "none",
          (t(f'sum(headroom_gpus_idle{{{FI}}})'),), width=4, height=4,
          thresholds=({"color": "green", "value": None}, {"color": "orange", "value": 1})),
    Panel("Idle GPU-hours (range)", "GPU-hours spent idle over the dashboard's time range, summed over all GPUs "
          "(a GPU idle for one hour adds 1).", "stat", "h",
          (t(f'sum(increase(headroom_gpu_idle_seconds_total{{{FI}}}[$__range])) / 3600'),), width=4, height=4),
    Panel("Idle cost (range)", "Cost of the idle GPU time over the time range at the configured cost_per_gpu_hour, "
          "per currency (analysis.currency). Empty when no cost is configured.", "stat", "none",
          (t(f'sum by (currency) (increase(headroom_gpu_idle_cost_total{{{FI}}}[$__range]))', "{{currency}}"),),
          width=4, height=4,
          options={"decimals": 2}),
    Panel("Lost GPUs", "GPUs that stopped answering NVML (fallen off the bus, reset required). "
          "Any value above 0 needs a person.", "stat", "none",
          (t(f'count(headroom_gpu_up{{{FI}}} == 0) or vector(0)'),), width=4, height=4, thresholds=RED_ABOVE_0),
    Panel("Hosts with GPU throttling", "Hosts where at least one GPU spent over 10 % of the last 5 minutes slowed "
          "by power or thermal limits (clock-event reasons).", "stat", "none",
          (t(f'count(count by (instance) (instance_gpu:headroom_gpu_throttled:rate5m{{{FI}}} > 0.1)) or vector(0)'),),
          width=4, height=4, thresholds=({"color": "green", "value": None}, {"color": "orange", "value": 1})),
    Panel("GPUs with XID errors", "GPUs that reported XID errors since their agent started. XID 48, 63, 64, 74, "
          "79, 92, 94, 95, 119, 120 and 140 mean hardware or driver trouble; 13, 31 and 43 usually an application "
          "fault.", "stat", "none",
          (t(f'count(sum by (instance, gpu) (headroom_gpu_xid_errors_total{{{FI}}}) > 0) or vector(0)'),),
          width=4, height=4, thresholds=RED_ABOVE_0),
    Panel("Agents not sampling", "Agents whose last sample is older than 30 s or whose NVML access is down.",
          "stat", "none",
          (t(f'count((time() - headroom_last_sample_timestamp_seconds{{{FI}}}) > 30 or headroom_nvml_up{{{FI}}} == 0)'
             ' or vector(0)'),), width=4, height=4, thresholds=RED_ABOVE_0),
    Row("GPUs"),
    Panel("GPU busy per host", "Average share of time the host's GPUs ran kernels (NVML utilization integrated "
          "every second). This is not SM occupancy: 100 % can still be a poorly fed GPU.", "timeseries",
          "percentunit", (t(f'avg by (instance) (instance_gpu:headroom_gpu_busy:rate5m{{{FI}}})', "{{instance}}"),),
          minmax=(0, 1)),
    Panel("VRAM used per GPU", "Device memory in use against capacity, per GPU. Serving runtimes such as vLLM "
          "reserve most of the card up front, so high is normal for them.", "bargauge", "percentunit",
          (t(f'instance_gpu:headroom_gpu_memory_used:ratio{{{FI}}}', "{{instance}} GPU {{gpu}}", instant=True),),
          minmax=(0, 1), thresholds=PCT_STEPS,
          options={"orientation": "horizontal", "displayMode": "gradient"}),
    Panel("Lowest free VRAM", "The ten GPUs with the least free device memory: the first to fail an allocation.",
          "bargauge", "bytes",
          (t(f'bottomk(10, headroom_gpu_memory_free_bytes{{{FI}}})', "{{instance}} GPU {{gpu}}", instant=True),),
          options={"orientation": "horizontal", "displayMode": "basic"}),
    Panel("Throttled share per GPU", "Share of the last 5 minutes each GPU ran slower than it could because of a "
          "power cap, thermal slowdown or hardware slowdown (largest single reason).", "timeseries", "percentunit",
          (t(f'instance_gpu:headroom_gpu_throttled:rate5m{{{FI}}} > 0', "{{instance}} GPU {{gpu}}"),),
          minmax=(0, 1)),
    Panel("XID errors", "XID errors per GPU and code since the agent started. See docs/runbook.md "
          "(HeadroomGpuCriticalXid) for what the codes mean.", "table", "none",
          (t(f'sum by (instance, gpu, xid) (headroom_gpu_xid_errors_total{{{FI}}})', instant=True),)),
    Panel("GPU health", "Per GPU: 1 while it answers NVML, 0 when lost. Rows with uncorrectable ECC errors or a "
          "failed row remap need service.", "table", "none",
          (t(f'headroom_gpu_up{{{FI}}}', instant=True),), mappings=UP),
    Row("Bottlenecks"),
    Panel("GPUs by primary bottleneck", "How many GPUs are limited by each resource right now, according to the "
          "agent's analysis (none = nothing limits them; an idle GPU is not a bottleneck).", "piechart", "none",
          (t(f'count by (resource) (headroom_gpu_bottleneck{{{FI}}} == 1)', "{{resource}}", instant=True),),
          options={"pieType": "donut", "legend": {"displayMode": "table", "placement": "right", "values": ["value"]},
                   "reduceOptions": {"calcs": ["lastNotNull"]}}),
    Panel("GPUs with a bottleneck", "Every GPU whose primary bottleneck is a resource (not none), with "
          "that resource. Open the Host dashboard for the evidence.", "table", "none",
          (t(f'headroom_gpu_bottleneck{{{FI}, resource!="none"}} == 1', instant=True),)),
    Panel("Workloads by primary bottleneck", "How many declared workloads are limited by each resource right now "
          "(none = nothing limits them).", "piechart", "none",
          (t(f'count by (resource) (headroom_workload_bottleneck{{{FI}}} == 1)', "{{resource}}", instant=True),),
          needs=("headroom_workload_bottleneck",),
          options={"pieType": "donut", "legend": {"displayMode": "table", "placement": "right", "values": ["value"]},
                   "reduceOptions": {"calcs": ["lastNotNull"]}}),
    Panel("Lowest VRAM headroom per workload", "The workloads with the least GPU memory left before their next "
          "allocation fails (memory model against measured use).", "bargauge", "bytes",
          (t(f'bottomk(10, headroom_workload_headroom_gpu_memory_bytes{{{FI}}})', "{{instance}} {{workload}}",
             instant=True),),
          needs=("headroom_workload_headroom_gpu_memory_bytes",),
          options={"orientation": "horizontal", "displayMode": "basic"}),
    Row("Idle cost and training jobs"),
    Panel("Idle cost per team (24 h)", "What idle GPUs cost each team over the last day (recording rule "
          "instance_team_workload:headroom_gpu_idle_cost:increase1d; team from the workload profile's team key, GPUs no workload "
          "holds under workload unclaimed). Needs cost_per_gpu_hour configured.", "bargauge", "none",
          (t(f'sort_desc(sum by (team, currency) (instance_team_workload:headroom_gpu_idle_cost:increase1d{{{FI}}}))',
             "{{team}} ({{currency}})", instant=True),),
          needs=("headroom_gpu_cost_per_hour", "headroom_workload_fleet_info"),
          options={"orientation": "horizontal", "displayMode": "basic", "decimals": 2}),
    Panel("Idle cost per workload (7 days)", "What idle GPUs cost per team and workload over the last week "
          "(instance_team_workload:headroom_gpu_idle_cost:increase1w). `headroom fleet-report` lists the GPUs behind it.",
          "table", "none",
          (t(f'sort_desc(sum by (team, workload, currency) (instance_team_workload:headroom_gpu_idle_cost:increase1w{{{FI}}}))',
             instant=True),),
          needs=("headroom_gpu_cost_per_hour", "headroom_workload_fleet_info"), options={"decimals": 2}),
    Panel("Idle cost rate per team", "Money per hour that idle GPUs waste right now, per team (5-minute average).",
          "timeseries", "none",
          (t(f'sum by (team) (instance_team_workload:headroom_gpu_idle_cost_per_hour:sum{{{FI}}})', "{{team}}"),),
          needs=("headroom_gpu_cost_per_hour", "headroom_workload_fleet_info"), custom=STACKED),
    Panel("Training jobs: GPUs against the job's median", "For each job spanning hosts (profile key job), every "
          "GPU's effective speed (busy share x SM clock against max) divided by the job's median GPU. A GPU well "
          "below 1 holds back every synchronous step: HeadroomTrainingJobStraggler fires under 0.8 for 10 minutes.",
          "timeseries", "percentunit",
          (t(f'training_job_instance_gpu:headroom_gpu_relative_speed:ratio5m{{{FI}}}',
             "{{training_job}} {{instance}} GPU {{gpu}}"),),
          needs=("headroom_workload_fleet_info",), minmax=(0, 1.2)),
    Panel("Slowest GPU per training job", "The GPU with the lowest speed against its job's median, per job, "
          "and the host it is on.", "table", "percentunit",
          (t(f'bottomk by (training_job) (1, training_job_instance_gpu:headroom_gpu_relative_speed:ratio5m{{{FI}}})',
             instant=True),),
          needs=("headroom_workload_fleet_info",)),
)

# ---------------------------------------------------------------- Host
H = 'instance="$instance"'
HG = 'instance="$instance", gpu=~"$gpu"'
HOST = (
    Row("GPUs"),
    Panel("GPU utilization", "Share of time each GPU ran any kernel (busy), and share of time its memory "
          "controller was reading or writing. Busy is not SM occupancy.", "timeseries", "percentunit",
          (t(f'rate(headroom_gpu_busy_seconds_total{{{HG}}}[$__rate_interval])', "GPU {{gpu}} busy"),
           t(f'headroom_gpu_memory_utilization_ratio{{{HG}}}', "GPU {{gpu}} memory controller")), minmax=(0, 1)),
    Panel("GPU memory against capacity", "Device memory used per GPU (solid) against its capacity (dashed).",
          "timeseries", "bytes",
          (t(f'headroom_gpu_memory_used_bytes{{{HG}}}', "GPU {{gpu}} used"),
           t(f'headroom_gpu_memory_size_bytes{{{HG}}}', "GPU {{gpu}} capacity"))),
    Panel("Power against limit", "Power draw per GPU against its enforced limit. Running at the limit means the "
          "driver caps clocks (sw_power_cap).", "timeseries", "watt",
          (t(f'headroom_gpu_power_watts{{{HG}}}', "GPU {{gpu}} draw"),
           t(f'headroom_gpu_power_limit_watts{{{HG}}}', "GPU {{gpu}} limit"))),
    Panel("Temperature", "GPU core and HBM temperature. Data-centre GPUs slow down from about 85 C (core) and 95 C "
          "(HBM).", "timeseries", "celsius",
          (t(f'headroom_gpu_temperature_celsius{{{HG}}}', "GPU {{gpu}} core"),
           t(f'headroom_gpu_memory_temperature_celsius{{{HG}}}', "GPU {{gpu}} memory"))),
    Panel("SM clock against max", "Streaming-multiprocessor clock per GPU against its maximum. A clock below max "
          "under load means a clock-event reason is holding it back.", "timeseries", "hertz",
          (t(f'headroom_gpu_sm_clock_hertz{{{HG}}}', "GPU {{gpu}} SM clock"),
           t(f'headroom_gpu_sm_clock_max_hertz{{{HG}}}', "GPU {{gpu}} max"))),
    Panel("Clock-event reasons", "Why each GPU's clocks were lowered, over time (reasons active at least once in "
          "the range). sw_power_cap, hw_slowdown, sw/hw_thermal_slowdown and hw_power_brake_slowdown mean it ran "
          "slower than it could; gpu_idle and applications_clocks_setting do not.", "state-timeline", "none",
          (t(f'max by (gpu, reason) (headroom_gpu_clock_event_active{{{HG}}}) and on (gpu, reason) '
             f'(max by (gpu, reason) (max_over_time(headroom_gpu_clock_event_active{{{HG}}}[$__range])) > 0)',
             "GPU {{gpu}} {{reason}}"),), mappings=ACTIVE,
          options={"showValue": "never", "mergeValues": True, "rowHeight": 0.8}),
    Panel("PCIe throughput", "Host-GPU traffic per GPU: rx is host to GPU (inputs, weights), tx GPU to host. "
          "Exact per tick where the GPU counts PCIe bytes; otherwise a 20 ms sample polled every few seconds "
          "outside the sampling tick (bursts can be missed).", "timeseries", "Bps",
          (t(f'headroom_gpu_pcie_throughput_bytes_per_second{{{HG}}}', "GPU {{gpu}} {{direction}}"),)),
    Panel("SM activity (GPM)", "What utilization hides (Hopper and later): the share of SMs busy, warp occupancy, "
          "tensor-core and DRAM-bandwidth activity, against busy. Busy near 100 % with low SM activity is a "
          "launch- or latency-bound workload, not a compute-bound one. Empty on GPUs without GPM.",
          "timeseries", "percentunit",
          (t(f'headroom_gpu_sm_active_ratio{{{HG}}}', "GPU {{gpu}} SM active"),
           t(f'headroom_gpu_sm_occupancy_ratio{{{HG}}}', "GPU {{gpu}} SM occupancy"),
           t(f'headroom_gpu_tensor_active_ratio{{{HG}}}', "GPU {{gpu}} tensor active"),
           t(f'headroom_gpu_dram_active_ratio{{{HG}}}', "GPU {{gpu}} DRAM active"),
           t(f'rate(headroom_gpu_busy_seconds_total{{{HG}}}[$__rate_interval])', "GPU {{gpu}} busy")), minmax=(0, 1)),
    Panel("NVLink throughput", "GPU-to-GPU traffic over NVLink per GPU and direction, summed over its active "
          "links (a link that is down raises HeadroomGpuNvlinkDown). Empty without NVLink.", "timeseries", "Bps",
          (t(f'sum by (gpu, direction) (rate(headroom_gpu_nvlink_bytes_total{{{HG}}}[$__rate_interval]))',
             "GPU {{gpu}} {{direction}}"),)),
    Panel("PCIe link", "Current PCIe link width and generation against the maximum the GPU and slot support. A "
          "narrower or older link than the maximum caps host-GPU bandwidth.", "table", "none",
          (t(f'headroom_gpu_pcie_link_width{{{HG}}}', "width", instant=True),
           t(f'headroom_gpu_pcie_link_max_width{{{HG}}}', "max width", instant=True),
           t(f'headroom_gpu_pcie_link_generation{{{HG}}}', "generation", instant=True),
           t(f'headroom_gpu_pcie_link_max_generation{{{HG}}}', "max generation", instant=True)),
          options={"showHeader": True}),
    Panel("GPU errors", "XID errors since the agent started, uncorrected ECC errors (volatile: since driver load) "
          "and remapped rows. Any non-zero value here deserves a look at docs/runbook.md.", "table", "none",
          (t(f'sum by (gpu, xid) (headroom_gpu_xid_errors_total{{{HG}}})', "XID", instant=True),
           t(f'headroom_gpu_ecc_uncorrected_errors_total{{{HG}}}', "ECC", instant=True),
           t(f'headroom_gpu_remapped_rows{{{HG}}}', "remapped rows", instant=True),
           t(f'headroom_gpu_remapped_rows_failure{{{HG}}}', "remap failure", instant=True))),
    Panel("GPU up", "1 while the GPU answers NVML, 0 when lost or failing.", "state-timeline", "none",
          (t(f'headroom_gpu_up{{{HG}}}', "GPU {{gpu}}"),), mappings=UP, options={"showValue": "never"}),
    Row("GPU bottlenecks"),
    Panel("Primary bottleneck per GPU", "Which resource the agent's analysis says limits each GPU's work, over "
          "time (resources that were primary at least once in the range). 'none' means nothing limits it; the "
          "evidence is on the agent's landing page and /api/v1/status.", "state-timeline", "none",
          (t(f'headroom_gpu_bottleneck{{{HG}}} and on (gpu, resource) '
             f'(max_over_time(headroom_gpu_bottleneck{{{HG}}}[$__range]) > 0)', "GPU {{gpu}} {{resource}}"),),
          mappings=BOTTLENECK, options={"showValue": "never", "mergeValues": True}),
    Panel("Bottleneck scores per GPU", "How sure the analysis is (0-1) that each resource limits the GPU, over "
          "its short window (default 15 s). Only scores above 0 are drawn.", "timeseries", "percentunit",
          (t(f'headroom_gpu_bottleneck_score{{{HG}}} > 0', "GPU {{gpu}} {{resource}}"),), minmax=(0, 1)),
    Row("Host"),
    Panel("CPU by mode", "CPU time per mode in cores (1 = one core fully used). A GPU host short of CPU shows "
          "user + system near the core count while the GPUs wait.", "timeseries", "none",
          (t(f'sum by (mode) (rate(headroom_cpu_seconds_total{{{H}, mode!~"idle|guest|guest_nice"}}'
             '[$__rate_interval]))', "{{mode}}"),
           t(f'headroom_cpu_logical_cpus{{{H}}}', "logical CPUs")), custom=STACKED),
    Panel("Pressure (PSI avg10)", "Linux pressure stall information: share of the last 10 s in which some (or all, "
          "full) tasks waited for CPU, memory or I/O. The best single host saturation signal.", "timeseries",
          "percentunit",
          (t(f'headroom_pressure_ratio{{{H}, window="10s"}}', "{{resource}} {{kind}}"),), minmax=(0, 1)),
    Panel("Memory", "Physical memory: available for new work (without swapping) against total, plus page cache "
          "and shared memory (tmpfs, /dev/shm).", "timeseries", "bytes",
          (t(f'headroom_memory_size_bytes{{{H}}}', "total"),
           t(f'headroom_memory_available_bytes{{{H}}}', "available"),
           t(f'headroom_memory_cached_bytes{{{H}}}', "page cache"),
           t(f'headroom_memory_shmem_bytes{{{H}}}', "shmem"))),
    Panel("Shared memory (/dev/shm)", "Used against size of each shared-memory mount. PyTorch DataLoader workers "
          "pass batches through it; when it fills they die with 'Bus error'.", "timeseries", "bytes",
          (t(f'headroom_shm_used_bytes{{{H}}}', "{{mountpoint}} used"),
           t(f'headroom_shm_size_bytes{{{H}}}', "{{mountpoint}} size"))),
    Panel("Disk throughput", "Bytes read (positive) and written (negative) per second per block device.",
          "timeseries", "Bps",
          (t(f'rate(headroom_disk_read_bytes_total{{{H}}}[$__rate_interval])', "{{device}} read"),
           t(f'-rate(headroom_disk_written_bytes_total{{{H}}}[$__rate_interval])', "{{device}} write"))),
    Panel("Disk busy", "Share of time each device had I/O in flight. Near 100 % on a single disk means it is "
          "saturated (less so on NVMe and RAID, which serve requests in parallel).", "timeseries", "percentunit",
          (t(f'rate(headroom_disk_io_time_seconds_total{{{H}}}[$__rate_interval])', "{{device}}"),), minmax=(0, 1)),
    Panel("Network throughput", "Bytes received (positive) and transmitted (negative) per second per "
          "interface. Distributed training and multi-host serving need this to stay below the link speed.",
          "timeseries", "Bps",
          (t(f'rate(headroom_network_receive_bytes_total{{{H}}}[$__rate_interval])', "{{device}} receive"),
           t(f'-rate(headroom_network_transmit_bytes_total{{{H}}}[$__rate_interval])', "{{device}} transmit"))),
    Row("Agent"),
    Panel("Collectors", "1 while each collector's last read succeeded, 0 while it fails or is stuck.",
          "state-timeline", "none", (t(f'headroom_collector_success{{{H}}}', "{{collector}}"),), mappings=UP,
          options={"showValue": "never"}),
    Panel("Sample age and duration", "Seconds since the agent's last completed sample (should stay below a few "
          "intervals) and how long a sample takes.", "timeseries", "s",
          (t(f'time() - headroom_last_sample_timestamp_seconds{{{H}}}', "age of last sample"),
           t(f'headroom_sample_duration_seconds{{{H}}}', "sample duration"))),
)

# ---------------------------------------------------------------- Workload
W = 'instance="$instance", workload="$workload"'
WORKLOAD = (
    Row("Bottleneck"),
    Panel("Primary bottleneck", "Which resource limits the workload, over time. 'none' means nothing limits it "
          "(idle for lack of demand is not a bottleneck).", "state-timeline", "none",
          (t(f'headroom_workload_bottleneck{{{W}}} and on (resource) '
             f'(max_over_time(headroom_workload_bottleneck{{{W}}}[$__range]) > 0)', "{{resource}}"),),
          width=24, height=6, needs=("headroom_workload_bottleneck",), mappings=BOTTLENECK,
          options={"showValue": "never", "mergeValues": True}),
    Panel("Bottleneck scores", "Score 0-1 per resource; the primary is the one that held the highest score long "
          "enough. See docs/analysis.md for what feeds each score.", "timeseries", "percentunit",
          (t(f'headroom_workload_bottleneck_score{{{W}}}', "{{resource}}"),), width=24,
          needs=("headroom_workload_bottleneck_score",), minmax=(0, 1)),
    Row("Headroom"),
    Panel("VRAM headroom", "GPU memory the workload can still grow into before an allocation fails.", "stat",
          "bytes", (t(f'headroom_workload_headroom_gpu_memory_bytes{{{W}}}'),), width=6, height=5,
          needs=("headroom_workload_headroom_gpu_memory_bytes",)),
    Panel("Extra sequences", "How many more concurrent sequences fit at the declared maximum context; the label "
          "says where from: runtime (the serving runtime's own KV cache), memory_model (the memory model's budget "
          "inside the vLLM reservation) or free_vram (free VRAM / the model's KV bytes per token).", "stat",
          "none", (t(f'headroom_workload_headroom_sequences{{{W}}}', "{{basis}}"),), width=6, height=5,
          needs=("headroom_workload_headroom_sequences",)),
    Panel("Context tokens that fit", "How much more context fits at the declared concurrency (basis as for Extra "
          "sequences).", "stat", "none",
          (t(f'headroom_workload_headroom_context_tokens{{{W}}}', "{{basis}}"),), width=6, height=5,
          needs=("headroom_workload_headroom_context_tokens",)),
    Panel("Spare CPU cores", "CPU cores the workload's processes could still use.", "stat", "none",
          (t(f'headroom_workload_headroom_cpu_cores{{{W}}}'),), width=6, height=5,
          needs=("headroom_workload_headroom_cpu_cores",)),
    Panel("Host memory left", "Host memory available to the workload (MemAvailable).", "stat", "bytes",
          (t(f'headroom_workload_headroom_host_memory_bytes{{{W}}}'),), width=6, height=5),
    Panel("Shared memory left", "Bytes still writable in the fullest shared-memory mount; DataLoader workers "
          "pass batches through it.", "stat", "bytes",
          (t(f'headroom_workload_headroom_shared_memory_bytes{{{W}}}'),), width=6, height=5),
    Panel("Power margin", "Power limit minus draw, summed over the workload's GPUs. Near 0 (or below) the "
          "driver caps clocks.", "stat", "watt",
          (t(f'headroom_workload_headroom_power_watts{{{W}}}'),), width=6, height=5),
    Panel("Thermal margin", "Degrees left before thermal slowdown on the workload's hottest GPU.", "stat",
          "celsius", (t(f'headroom_workload_headroom_thermal_celsius{{{W}}}'),), width=6, height=5,
          thresholds=({"color": "red", "value": None}, {"color": "orange", "value": 0},
                      {"color": "green", "value": 5})),
    Row("Memory: expected against measured"),
    Panel("Expected memory breakdown", "What the memory model says the workload needs, per component (weights, KV "
          "cache, activations, optimizer state, overhead ...).", "bargauge", "bytes",
          (t(f'headroom_workload_memory_expected_bytes{{{W}}}', "{{component}}", instant=True),),
          needs=("headroom_workload_memory_expected_bytes",),
          options={"orientation": "horizontal", "displayMode": "basic"}),
    Panel("GPU memory: measured against expected peak", "Device memory the workload's processes use, summed over "
          "its GPUs, against the profile's expected peak and the capacity of its GPUs. Measured far above expected "
          "means a leak or a wrong profile.", "timeseries", "bytes",
          (t(f'sum by (workload) (headroom_workload_gpu_memory_used_bytes{{{W}}})', "measured"),
           t(f'headroom_workload_gpu_memory_expected_peak_bytes{{{W}}}', "expected peak"),
           t(f'headroom_workload_gpu_memory_capacity_bytes{{{W}}}', "capacity")),
          needs=("headroom_workload_gpu_memory_used_bytes", "headroom_workload_gpu_memory_expected_peak_bytes",
                 "headroom_workload_gpu_memory_capacity_bytes")),
    Row("Processes"),
    Panel("Process CPU", "CPU time of the workload's processes (children included) in cores, per mode.",
          "timeseries", "none",
          (t(f'rate(headroom_workload_cpu_seconds_total{{{W}}}[$__rate_interval])', "{{mode}}"),), custom=STACKED,
          needs=("headroom_workload_cpu_seconds_total",)),
    Panel("Process resident memory", "Resident host memory (RSS) of the workload's processes, summed.",
          "timeseries", "bytes", (t(f'headroom_workload_resident_memory_bytes{{{W}}}', "RSS"),),
          needs=("headroom_workload_resident_memory_bytes",)),
    Panel("Processes", "Processes attributed to the workload (DataLoader workers count with their trainer).",
          "timeseries", "none", (t(f'headroom_workload_processes{{{W}}}', "processes"),),
          needs=("headroom_workload_processes",)),
    Row("Its GPUs"),
    Panel("GPU memory per GPU", "Device memory the workload uses on each of its GPUs.", "timeseries", "bytes",
          (t(f'headroom_workload_gpu_memory_used_bytes{{{W}}}', "GPU {{gpu}}"),),
          needs=("headroom_workload_gpu_memory_used_bytes",)),
    Panel("Its share of the GPUs", "SM utilization of the workload's own processes on each GPU, from NVML "
          "per-process samples (absent where the GPU does not support them). Compare with the whole GPU's busy "
          "share: the difference is other processes.", "timeseries", "percentunit",
          (t(f'headroom_workload_gpu_utilization_ratio{{{W}}}', "GPU {{gpu}}"),), minmax=(0, 1)),
    Panel("Its GPUs busy", "Busy share of the GPUs the workload uses (NVML utilization integrated every second).",
          "timeseries", "percentunit",
          (t(f'rate(headroom_gpu_busy_seconds_total{{instance="$instance"}}[$__rate_interval]) * on (instance, gpu) '
             f'group_left () (max by (instance, gpu) (headroom_workload_gpu_memory_used_bytes{{{W}}}) * 0 + 1)',
             "GPU {{gpu}}"),), needs=("headroom_workload_gpu_memory_used_bytes",), minmax=(0, 1)),
    Row("Serving runtime (profiles with an endpoint)"),
    Panel("Time to first token", "Percentiles of the requests the runtime served in the analysis short window, "
          "from its own histogram buckets, and the mean over the panel's rate interval (docs/serving.md).",
          "timeseries", "s",
          (t(f'headroom_workload_time_to_first_token_seconds{{{W}}}', "{{percentile}}"),
           t(f'rate(headroom_workload_time_to_first_token_seconds_total{{{W}}}[$__rate_interval]) / '
             f'rate(headroom_workload_time_to_first_token_observations_total{{{W}}}[$__rate_interval])', "mean")),
          width=8),
    Panel("Inter-token latency", "Time between output tokens: percentiles over the short window and the mean. "
          "A percentile in the runtime's first, +Inf or a wide bucket is only known to lie in it "
          "(headroom_workload_latency_percentile_bounded 1; vLLM's first ITL bucket ends at 10 ms).",
          "timeseries", "s",
          (t(f'headroom_workload_inter_token_latency_seconds{{{W}}}', "{{percentile}}"),
           t(f'rate(headroom_workload_inter_token_latency_seconds_total{{{W}}}[$__rate_interval]) / '
             f'rate(headroom_workload_inter_token_latency_observations_total{{{W}}}[$__rate_interval])', "mean")),
          width=8),
    Panel("Requests running and waiting", "Requests in the runtime's batches and in its queue. A queue that "
          "does not drain is the first sign of too little capacity.", "timeseries", "none",
          (t(f'headroom_workload_requests_running{{{W}}}', "running"),
           t(f'headroom_workload_requests_waiting{{{W}}}', "waiting")), width=8),
    Panel("KV cache beside the GPU", "Share of the runtime's KV cache in use, next to how busy its GPUs are: "
          "a full KV cache with an idle GPU is kv_cache, a busy GPU with free KV is gpu_compute.",
          "timeseries", "percentunit",
          (t(f'headroom_workload_kv_cache_usage_ratio{{{W}}}', "KV cache used"),
           t(f'avg(rate(headroom_gpu_busy_seconds_total{{instance="$instance"}}[$__rate_interval]) * on '
             f'(instance, gpu) group_left () (max by (instance, gpu) (headroom_workload_gpu_memory_used_bytes'
             f'{{{W}}}) * 0 + 1))', "GPU busy")), minmax=(0, 1), width=8),
    Panel("Preemptions per minute", "Sequences the runtime evicted from its KV cache to make room (vLLM "
          "preemptions, SGLang retractions); they are recomputed later, at the cost of latency.",
          "timeseries", "none",
          (t(f'rate(headroom_workload_preemptions_total{{{W}}}[$__rate_interval]) * 60', "preemptions/min"),),
          width=8),
    Panel("Tokens per second", "Prompt tokens processed and tokens generated by the runtime.", "timeseries",
          "none",
          (t(f'rate(headroom_workload_prompt_tokens_total{{{W}}}[$__rate_interval])', "prompt"),
           t(f'rate(headroom_workload_generation_tokens_total{{{W}}}[$__rate_interval])', "generated")),
          width=8),
    Panel("Latency objectives", "Each objective of the profile (slo:) over the short window: met or missed; "
          "undecided while the runtime's buckets cannot tell (the objective inside the coarse bucket the "
          "percentile fell in, or below the runtime's first bucket: docs/serving.md, Resolution); empty while no "
          "request was observed. Alert: HeadroomWorkloadSloBreached.", "stat", "none",
          (t(f'headroom_workload_slo_met{{{W}}} or (headroom_workload_slo_decided{{{W}}} == 0) + 2',
             "{{objective}}"),), width=8, height=5, mappings=MET),
    Panel("KV capacity: runtime against estimate", "Tokens the KV cache holds as the runtime reports it and as "
          "the memory model computes it for the profile (headroom estimate).", "stat", "none",
          (t(f'headroom_workload_kv_capacity_tokens{{{W}}}', "{{source}}"),), width=12, height=5),
    Panel("More sequences that fit", "Free KV cache in sequences: at the mean tokens a running sequence holds "
          "now (observed) and at the profile's max context.", "stat", "none",
          (t(f'headroom_workload_kv_headroom_sequences{{{W}}}', "{{basis}}"),), width=8, height=5),
)


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    tags: tuple[str, ...]
    variables: tuple[str, ...]  # instance / instance_multi, gpu, workload
    items: tuple


DASHBOARDS = (
    Dashboard("headroom-fleet", "Headroom / Fleet overview",
              "Every host and GPU at a glance: busy and idle GPUs, idle GPU-hours, throttling, XID and lost GPUs, "
              "workloads by bottleneck.", ("headroom", "gpu", "fleet"), ("instance_multi",), FLEET),
    Dashboard("headroom-host", "Headroom / Host",
              "One GPU host: per-GPU utilization, memory, power, temperature, clocks and their reasons, PCIe, "
              "errors; host CPU, pressure, memory, shared memory and disks.", ("headroom", "gpu", "host"),
              ("instance", "gpu"), HOST),
    Dashboard("headroom-workload", "Headroom / Workload",
              "One declared workload: its bottleneck over time, headroom, expected against measured memory, its "
              "processes and GPUs.", ("headroom", "gpu", "workload"), ("instance", "workload"), WORKLOAD),
)


def missing(panel: Panel) -> tuple[str, ...]:
    """The catalogue names the panel needs that the catalogue does not have yet."""
    return tuple(n for n in panel.needs if n not in BY_NAME)


def _variable(kind: str) -> dict:
    if kind == "datasource":
        return {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
                "current": {}, "hide": 0, "refresh": 1, "regex": "", "options": []}
    multi = kind == "instance_multi"
    name = "instance" if multi else kind
    query = {
        "instance": "label_values(headroom_build_info, instance)",
        "gpu": 'label_values(headroom_gpu_info{instance="$instance"}, gpu)',
        "workload": 'label_values(headroom_workload_bottleneck{instance="$instance"}, workload)',
    }[name]
    many = multi or name == "gpu"
    return {"name": name, "label": name.capitalize() if name != "gpu" else "GPU", "type": "query",
            "datasource": DS, "definition": query, "query": {"query": query, "refId": "PrometheusVariableQueryEditor"},
            "refresh": 2, "sort": 3 if name == "gpu" else 1, "includeAll": many, "multi": many,
            "allValue": ".*" if many else None, "current": {}, "hide": 0, "options": [], "regex": ""}


def _panel(p: Panel, pid: int, x: int, y: int) -> dict:
    defaults: dict = {"unit": p.unit, "mappings": list(p.mappings),
                      "thresholds": {"mode": "absolute",
                                     "steps": list(p.thresholds) or [{"color": "green", "value": None}]}}
    if p.minmax[0] is not None:
        defaults["min"], defaults["max"] = p.minmax
    if p.kind in ("timeseries", "state-timeline"):
        defaults["custom"] = dict(p.custom)
    if p.kind == "timeseries":
        defaults["color"] = {"mode": "palette-classic"}
    elif p.kind in ("stat", "bargauge"):
        defaults["color"] = {"mode": "thresholds"}
    options = {"stat": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "value", "graphMode": "area", "textMode": "auto"},
               "bargauge": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
               "timeseries": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                              "tooltip": {"mode": "multi", "sort": "desc"}},
               "table": {"showHeader": True},
               "state-timeline": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
               }.get(p.kind, {})
    options = {**options, **p.options}
    if "decimals" in options:
        defaults["decimals"] = options.pop("decimals")
    targets = []
    for i, tg in enumerate(p.targets):
        target = {"datasource": DS, "refId": chr(ord("A") + i), "expr": tg.expr, "legendFormat": tg.legend or "__auto",
                  "range": not tg.instant, "instant": tg.instant}
        if p.kind == "table":
            target["format"] = "table"
        targets.append(target)
    panel = {"id": pid, "type": p.kind, "title": p.title, "description": p.description, "datasource": DS,
             "gridPos": {"h": p.height, "w": p.width, "x": x, "y": y},
             "fieldConfig": {"defaults": defaults, "overrides": []}, "options": options, "targets": targets}
    if p.kind == "table" and len(p.targets) > 1:
        panel["transformations"] = [{"id": "merge", "options": {}}]
    return panel


def build(d: Dashboard) -> dict | None:
    """The dashboard's JSON model, or None when none of its panels can be built yet."""
    panels, pid, x, y, row_h = [], 1, 0, 0, 0
    pending_row = None
    for item in d.items:
        if isinstance(item, Row):
            pending_row = item
            continue
        if missing(item):
            continue
        if pending_row is not None:  # a row header only once one of its panels exists
            if x:
                x, y = 0, y + row_h
            panels.append({"id": pid, "type": "row", "title": pending_row.title, "collapsed": False,
                           "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
            pid, y, row_h, pending_row = pid + 1, y + 1, 0, None
        if x + item.width > 24:
            x, y, row_h = 0, y + row_h, 0
        panels.append(_panel(item, pid, x, y))
        pid, x, row_h = pid + 1, x + item.width, max(row_h, item.height)
    if not any(p["type"] != "row" for p in panels):
        return None
    variables = [_variable("datasource")] + [_variable(v) for v in d.variables]
    return {
        "uid": d.uid, "title": d.title, "description": d.description, "tags": list(d.tags),
        "editable": True, "graphTooltip": 1, "schemaVersion": 39, "version": 1, "timezone": "",
        "time": {"from": "now-1h", "to": "now"}, "refresh": "30s", "fiscalYearStartMonth": 0, "liveNow": False,
        "annotations": {"list": []},
        "links": [{"title": "Headroom dashboards", "type": "dashboards", "tags": ["headroom"], "asDropdown": True,
                   "includeVars": True, "keepTime": True}],
        "templating": {"list": variables}, "panels": panels,
    }


def render() -> dict[str, str]:
    """File name -> JSON text for every dashboard that can be built with today's catalogue."""
    out = {}
    for d in DASHBOARDS:
        model = build(d)
        if model is not None:
            out[d.uid.removeprefix("headroom-") + ".json"] = json.dumps(model, indent=2) + "\n"
    return out


def pending() -> list[str]:
    """'Dashboard / panel: missing names' for every panel left out for lack of catalogue names."""
    lines = []
    for d in DASHBOARDS:
        for item in d.items:
            if isinstance(item, Panel) and missing(item):
                lines.append(f"{d.title} / {item.title}: {', '.join(missing(item))}")
    return lines


def main(argv: list[str]) -> int:
    files = render()
    if "--pending" in argv:
        print("\n".join(pending()) or "nothing pending")
        return 0
    if "--check" in argv:
        stale = [name for name, text in files.items()
                 if not (OUT / name).exists() or (OUT / name).read_text() != text]
        extra = [p.name for p in OUT.glob("*.json") if p.name not in files]
        if stale or extra:
            print(f"dashboards out of date: {', '.join(stale + extra)}; run: .venv/bin/python grafana/generate.py")
            return 1
        return 0
    OUT.mkdir(exist_ok=True)
    for name, text in files.items():
        (OUT / name).write_text(text)
    for p in OUT.glob("*.json"):
        if p.name not in files:
            p.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

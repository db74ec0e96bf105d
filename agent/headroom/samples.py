"""Sample types: what one tick of every source produced.

Frozen dataclasses in base units (bytes, seconds, ratios 0-1, watts, hertz, celsius) holding raw
counters as read. ``None`` always means "not supported / not readable here": exposition omits the
series, analysis treats it as unknown. Never use 0 for "unknown".

Sources (``headroom.sources.*``) build these; analysis and exposition read them. This module imports
nothing from either side, so it is the contract between them. It also holds what crosses the other seams of a
tick: ``PreviousTick`` (the one input a collector may read of the tick before: docs/architecture.md),
``Findings`` (the analysis's result as the sampler, the recorder and the snapshot see it: a Protocol that
``headroom.analysis.pipeline.Findings`` satisfies, so this module imports no analysis) and ``Snapshot``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, TypeVar, overload

# a shared read-only empty mapping (Any: it stands for any one's)
EMPTY: Mapping[Any, Any] = MappingProxyType({})
_MAPS = (dict, MappingProxyType)
_T = TypeVar("_T")
_set = object.__setattr__  # share_unchanged: a field of a frozen dataclass that has not been published yet


# --------------------------------------------------------------------------------------------- host
@dataclass(frozen=True, slots=True)
class PressureLine:
    """One line of /proc/pressure/<resource>: the share of wall time tasks were stalled."""

    avg10: float  # ratio 0-1
    avg60: float
    avg300: float
    total_seconds: float  # monotonic counter


@dataclass(frozen=True, slots=True)
class Pressure:
    some: PressureLine
    full: PressureLine | None  # "full" is absent for cpu on kernels before 5.13


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """Aggregate CPU time per mode in seconds (first line of /proc/stat), as counters.

    Modes missing from an old kernel's /proc/stat layout are None.
    """

    user: float
    nice: float
    system: float
    idle: float
    iowait: float | None = None
    irq: float | None = None
    softirq: float | None = None
    steal: float | None = None
    guest: float | None = None
    guest_nice: float | None = None

    def modes(self) -> dict[str, float]:
        """Mode name -> seconds, for the modes this kernel reports."""
        out: dict[str, float] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@dataclass(frozen=True, slots=True)
class CpuSample:
    times: CpuTimes
    logical_cpus: int
    load1: float
    load5: float
    load15: float
    procs_running: int | None = None
    procs_blocked: int | None = None
    # PSI, keyed "cpu", "memory", "io"; empty when /proc/pressure does not exist (kernel < 4.20 or psi=0)
    pressure: Mapping[str, Pressure] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MemorySample:
    total_bytes: int
    available_bytes: int | None  # MemAvailable appeared in 3.14
    free_bytes: int
    buffers_bytes: int | None = None
    cached_bytes: int | None = None
    shmem_bytes: int | None = None
    dirty_bytes: int | None = None
    writeback_bytes: int | None = None
    swap_total_bytes: int | None = None
    swap_free_bytes: int | None = None
    major_faults_total: int | None = None  # /proc/vmstat pgmajfault


@dataclass(frozen=True, slots=True)
class MountUsage:
    mountpoint: str
    fstype: str
    size_bytes: int
    used_bytes: int
    available_bytes: int  # what an unprivileged writer can still use


@dataclass(frozen=True, slots=True)
class ShmSample:
    mounts: tuple[MountUsage, ...]
    # configured mountpoints that were not found (so a missing /dev/shm is visible, not silent)
    missing: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DiskStats:
    """One block device from /proc/diskstats, counters since boot."""

    device: str
    reads_completed: int
    read_bytes: int
    writes_completed: int
    written_bytes: int
    io_time_seconds: float  # time the device had I/O in flight ("busy")
    weighted_io_time_seconds: float  # sum of per-request time: queue depth x time
    in_flight: int
    discards_completed: int | None = None
    discarded_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class DiskSample:
    devices: tuple[DiskStats, ...]


@dataclass(frozen=True, slots=True)
class NetDevice:
    """One network interface from /proc/net/dev (counters since the interface appeared) plus its link speed."""

    device: str
    receive_bytes: int
    receive_packets: int
    receive_errors: int
    receive_drops: int
    transmit_bytes: int
    transmit_packets: int
    transmit_errors: int
    transmit_drops: int
    speed_bytes_per_second: int | None = None  # /sys/class/net/<dev>/speed; None: unknown (virtual, link down)


@dataclass(frozen=True, slots=True)
class NetSample:
    devices: tuple[NetDevice, ...]


@dataclass(frozen=True, slots=True)
class InfinibandPort:
    """One port of an RDMA device (InfiniBand, or RoCE on Ethernet) from /sys/class/infiniband: the traffic of
    RDMA transports (NCCL over verbs), which bypasses the kernel's network stack and so /proc/net/dev. Counters
    are the port's since the device appeared; ``device`` is "<hca>/<port>" (the analysis names a link by it)."""

    device: str  # "mlx5_0/1"
    hca: str  # mlx5_0
    port: int
    link_layer: str  # InfiniBand | Ethernet (RoCE)
    state: str  # ACTIVE, DOWN, ... (ports/<n>/state)
    receive_bytes: int | None  # counters/port_rcv_data x 4 (the kernel counts 4-byte words); None: N/A (no PMA)
    transmit_bytes: int | None  # counters/port_xmit_data x 4
    receive_packets: int | None
    transmit_packets: int | None
    speed_bytes_per_second: int | None = None  # ports/<n>/rate ("200 Gb/sec (4X HDR)") in bytes/s
    # error and congestion counters the port has (sources/infiniband.EVENT_COUNTERS): file name -> count
    events: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InfinibandSample:
    devices: tuple[InfinibandPort, ...]


@dataclass(frozen=True, slots=True)
class CgroupStats:
    """cgroup files of the cgroup a workload maps to (v2; an automatic workload's on a v1 hierarchy: their v1
    equivalents, sources/identity.py); None = file absent."""

    path: str  # relative to its hierarchy's root, e.g. "/system.slice/vllm.service", "/slurm/uid_0/job_5" (v1)
    cpu_user_seconds_total: float | None = None  # cpu.stat user_usec
    cpu_system_seconds_total: float | None = None  # cpu.stat system_usec
    memory_bytes: int | None = None  # memory.current: anonymous + page cache + kernel memory of the cgroup
    read_bytes_total: int | None = None  # io.stat rbytes summed over devices
    written_bytes_total: int | None = None  # io.stat wbytes
    pressure_some_avg10: Mapping[str, float] = field(default_factory=lambda: EMPTY)  # cpu/memory/io -> ratio
    cpu_quota_cores: float | None = None  # cpu.max quota / period; None when "max" (unlimited) or absent


@dataclass(frozen=True, slots=True)
class WorkloadProcesses:
    """The live processes of one workload this tick, declared or automatic (the same measurement: an automatic
    workload's members are its cgroup's, its GPU processes and their descendants, sources/processes.py), with
    counters that survive member exits.

    CPU and I/O counters add each member's growth since the previous tick (a new member counts from its
    start), so a worker that exits does not make them go down; time a member spent after its last tick
    is lost. I/O is None when /proc/PID/io was never readable for any member (other users' processes
    without CAP_SYS_PTRACE); otherwise it counts only the readable members. RSS sums members' resident
    pages, so pages shared between a parent and its forked workers count once per process.
    """

    name: str
    pids: tuple[int, ...]  # for the join with NVML process lists; never exported
    threads: int
    cpu_user_seconds_total: float
    cpu_system_seconds_total: float
    resident_memory_bytes: int
    read_bytes_total: int | None = None  # /proc/PID/io read_bytes (block layer)
    written_bytes_total: int | None = None  # /proc/PID/io write_bytes
    main_pid: int | None = None  # the oldest member whose parent is not a member (the trainer, the server)
    # rank pid -> the pids of its DataLoader worker processes, found in the process tree (workload/launchers.py,
    # ``dataloader_ranks``): the launcher's (torchrun, accelerate, deepspeed) children, else the main processes
    ranks: Mapping[int, tuple[int, ...]] = field(default_factory=lambda: EMPTY)
    # when a systemd_unit, cgroup or container_id rule maps it to one; an automatic workload's: its identity's
    cgroup: CgroupStats | None = None
    # member pid -> its own user+system CPU seconds (since it started): per-process saturation (one process
    # pinned at one core while the workload's total looks modest: a DataLoader with 0 workers, a decoder)
    process_cpu_seconds: Mapping[int, float] = field(default_factory=lambda: EMPTY)
    # rank pid -> tid -> CPU seconds of each thread of that rank, for the ranks that ran at 0.8 cores or more since
    # the previous tick (their threads are read only then): one saturated thread (the GIL) or the work spread
    rank_thread_cpu_seconds: Mapping[int, Mapping[int, float]] = field(default_factory=lambda: EMPTY)
    # its members' main threads (/proc/PID/schedstat): seconds on a CPU and seconds runnable but waiting for one,
    # counted from when each was first read (None: never readable): how long its threads wait for a CPU
    sched_run_seconds_total: float | None = None
    sched_wait_seconds_total: float | None = None
    cpus_allowed: int | None = None  # CPUs its main process may run on (sched_getaffinity: a cpuset); None: unknown

    @property
    def processes(self) -> int:
        return len(self.pids)

    @property
    def dataloader_workers(self) -> int:
        """The DataLoader worker processes found under its ranks, summed over them."""
        return sum(len(w) for w in self.ranks.values())


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A process that presses on the host's CPU, disks or memory (sources/neighbours.py): one of the top
    consumers of some resource while the host is under pressure. Shown in evidence, never a label."""

    pid: int
    name: str  # comm (the kernel's 15-byte process name)
    user: str  # the owner's user name, or its uid where it has none
    workload: str | None  # the declared workload it belongs to; None: outside every workload
    cpu_cores: float  # CPU seconds per second between the last two scans
    cpu_share: float | None  # of the host's logical CPUs
    io_bytes_per_second: float | None  # read + write bytes/s at the block layer; None: /proc/PID/io denied
    io_share: float | None  # of the block I/O of every process whose /proc/PID/io was readable
    rss_bytes: int
    memory_share: float | None  # of MemTotal


@dataclass(frozen=True, slots=True)
class ProcessesSample:
    """What the processes collector saw: one entry per declared workload, in declaration order, then one per
    automatic workload of the previous tick's identity sample (by its workload name) that no declared profile
    takes the place of."""

    workloads: tuple[WorkloadProcesses, ...] = ()
    # the host's top consumers of CPU, disk I/O and memory, refreshed only while the host is under pressure
    neighbours: tuple[Neighbour, ...] = ()


@dataclass(frozen=True, slots=True)
class AgentSample:
    """The agent's own process."""

    cpu_user_seconds_total: float
    cpu_system_seconds_total: float
    resident_memory_bytes: int
    threads: int
    open_fds: int
    start_time_seconds: float


# ---------------------------------------------------------------------------------------------- GPU
@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int | None  # None: NVML could not say (e.g. no permission, Windows WDDM)
    kind: str = "compute"  # compute | graphics
    # share of time this process's kernels occupied the SMs, averaged over NVML's samples since the
    # previous tick (nvmlDeviceGetProcessUtilization); None when unsupported or no sample this tick
    sm_utilization_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class NvLink:
    """One NVLink link of a GPU: state and cumulative data bytes (NVML field values, per link)."""

    link: int
    up: bool
    tx_bytes_total: int | None = None
    rx_bytes_total: int | None = None


@dataclass(frozen=True, slots=True)
class MigInstance:
    gpu_instance_id: int
    compute_instance_id: int | None
    uuid: str
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    # compute processes in this instance (queried through the MIG device handle), with their memory
    processes: tuple[GpuProcess, ...] = ()
    # its GPU instance's profile id and placement start (nvmlGpuInstanceGetInfo): how the NVIDIA DRA driver names
    # it (gpu-<minor>-mig-<profile>-<profile id>-<placement start>); None: NVML did not say (it needs privilege)
    profile_id: int | None = None
    placement_start: int | None = None


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU as NVML saw it this tick. ``up`` False: lost or failing; only identity is then set."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    up: bool = True
    error: str | None = None  # why it is down
    minor_number: int | None = None  # /dev/nvidiaN: how the NVIDIA DRA driver names the GPU (gpu-N)
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_reserved_bytes: int | None = None  # v2 memory info only
    utilization_ratio: float | None = None  # share of time a kernel ran (NVML "GPU utilization")
    memory_utilization_ratio: float | None = None  # share of time the memory controller was busy
    busy_seconds_total: float | None = None  # integral of utilization over time (internal sampling)
    power_watts: float | None = None
    power_limit_watts: float | None = None  # enforced limit
    power_limit_max_watts: float | None = None  # the highest limit the board accepts (nvidia-smi -pl)
    energy_joules_total: float | None = None
    temperature_celsius: float | None = None
    memory_temperature_celsius: float | None = None
    sm_clock_hertz: float | None = None
    sm_clock_max_hertz: float | None = None
    memory_clock_hertz: float | None = None
    memory_clock_max_hertz: float | None = None
    performance_state: int | None = None  # 0 (P0, max) .. 15; None when unknown
    fan_speed_ratio: float | None = None
    # clock-event ("throttle") reasons this GPU reports: reason name -> active now
    clock_events_active: Mapping[str, bool] = field(default_factory=dict)
    # seconds each reason was active, accumulated from internal sampling (counters)
    clock_events_seconds_total: Mapping[str, float] = field(default_factory=dict)
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    # cumulative PCIe bytes (NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES) where the GPU counts them; the rates above
    # are then exact averages over the last tick instead of a polled 20 ms sample
    pcie_tx_bytes_total: int | None = None
    pcie_rx_bytes_total: int | None = None
    pcie_link_generation: int | None = None
    pcie_link_width: int | None = None
    pcie_link_max_generation: int | None = None
    pcie_link_max_width: int | None = None
    # GPM (Hopper and later), averaged over the last tick; None where the GPU has no GPM
    sm_active_ratio: float | None = None  # share of SMs busy: what "utilization" does not say
    sm_occupancy_ratio: float | None = None  # resident warps / the SMs' maximum
    tensor_active_ratio: float | None = None  # share of time tensor cores were busy
    dram_active_ratio: float | None = None  # memory bandwidth used / peak
    nvlink_links: tuple[NvLink, ...] = ()  # empty without NVLink
    nvlink_version: int | None = None  # NVLink generation (sets the per-link bandwidth)
    processes: tuple[GpuProcess, ...] = ()
    # True when this tick's process query failed and ``processes`` is the last list read (None: no list)
    processes_stale: bool | None = None
    mig_enabled: bool | None = None
    mig_instances: tuple[MigInstance, ...] = ()
    xid_errors_total: Mapping[int, int] = field(default_factory=dict)  # XID code -> count since the agent started
    ecc_uncorrected_volatile_total: int | None = None
    ecc_uncorrected_aggregate_total: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    # the GPU's own temperature thresholds (nvmlDeviceGetTemperatureThreshold, read once); None where NVML
    # gives none: max operating (software thermal slowdown starts), slowdown (hardware), shutdown, memory max
    temperature_max_operating_celsius: float | None = None
    temperature_slowdown_celsius: float | None = None
    temperature_shutdown_celsius: float | None = None
    memory_temperature_max_operating_celsius: float | None = None


@dataclass(frozen=True, slots=True)
class NvmlSample:
    """What the nvml source saw: library state plus one GpuSample per device."""

    up: bool  # NVML initialised and answering
    gpus: tuple[GpuSample, ...] = ()
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_driver_version: int | None = None
    error: str | None = None  # why NVML is down
    simulated: bool = False  # True when a scenario's driver stand-in is under the binding


# ------------------------------------------------------------------------------------------ serving
@dataclass(frozen=True, slots=True)
class Histogram:
    """A latency histogram as a serving runtime exports it: cumulative counts per upper bound (seconds).

    Label sets of one family (engines, data-parallel ranks, Triton models) are merged by bound."""

    bounds: tuple[float, ...]  # ascending upper bounds, the last one +Inf
    counts: tuple[float, ...]  # cumulative observations <= each bound (counter)
    sum: float  # seconds, counter
    count: float  # observations, counter


# a ServingEndpoint's fields by name as a runtime's normalizer reads them (sources/serving/): Any, each value of
# its own field's type (a float, a tuple of model names, a Histogram); ServingEndpoint(**fields) takes them
ServingFields = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ServingEndpoint:
    """One workload's serving runtime as its /metrics endpoint answered, normalized across runtimes.

    ``up`` None: no scrape has finished yet. Values are None where the runtime (or its version) does not
    export them; counters are the runtime's own (they restart with the runtime)."""

    workload: str
    endpoint: str
    up: bool | None
    error: str | None = None  # why it is down, for people (log, status API)
    # the scrape failed by its deadline after the endpoint accepted the connection: slow (a saturated runtime), not gone
    timed_out: bool = False
    runtime: str | None = None  # vllm | sglang | tgi | triton | llama.cpp, detected from the exposition
    scrape_duration_seconds: float | None = None
    kv_cache_usage_ratio: float | None = None  # share of the KV cache in use (the fullest engine)
    requests_running: float | None = None
    requests_waiting: float | None = None
    preemptions_total: float | None = None  # requests evicted from the KV cache (vLLM preempted, SGLang retracted)
    kv_cache_capacity_tokens: float | None = None  # tokens the KV cache holds (blocks x block size), all engines
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    time_to_first_token: Histogram | None = None
    inter_token_latency: Histogram | None = None
    oversized: str | None = None  # what of the answer was over a cap of one scrape and not read (sources/serving.py)
    dropped_series_total: int = 0  # runtime series not read over MAX_SERIES / MAX_LINES, since the endpoint was set up
    dropped_buckets_total: int = 0  # bucket lines of histograms over MAX_HISTOGRAM_BUCKETS, since then
    process_start_time_seconds: float | None = None  # when the runtime's process started, where it exposes it
    # of requests_waiting, those deferred by a transient constraint (LoRA budget, a KV transfer, a blocked request),
    # not waiting for scheduling capacity (vLLM 0.2x vllm:num_requests_waiting_by_reason{reason="deferred"})
    requests_waiting_deferred: float | None = None
    admission_rejections_total: float | None = None  # requests refused by the runtime's queue limit (never queued)
    request_queue_time: Histogram | None = None  # seconds requests spent waiting before they were scheduled
    sleep_level: int | None = None  # 0 awake, 1 asleep with its weights offloaded, 2 asleep with all discarded
    # models the runtime holds loaded, where it lists them (Ollama's /api/ps): names, bytes in all and in GPU memory
    resident_models: tuple[str, ...] = ()
    resident_bytes: float | None = None
    resident_vram_bytes: float | None = None


@dataclass(frozen=True, slots=True)
class ServingSample:
    """What the serving collector saw: one entry per workload profile with an endpoint, in declaration order,
    then one per automatic server (a serving launcher the identity collector found), by name."""

    endpoints: tuple[ServingEndpoint, ...] = ()


# ---------------------------------------------------------------------------------------- probe
@dataclass(frozen=True, slots=True)
class ProbeSample:
    """The last `headroom probe` result in the state directory (sources/probe.py), as the capacity gauges and the
    measured headroom need it; the full result (steps, chart) stays in the file (probe/store.py)."""

    path: str  # the probe-last.json looked at
    found: bool = False  # a valid result is there
    error: str | None = None  # why the file there is not used (one line); None: fine or absent
    workload: str | None = None  # the workload probed (None: a bare --url)
    url: str | None = None
    schedule: str | None = None  # concurrency | rate
    measured_at: float | None = None  # unix seconds the probe finished
    concurrency: float | None = None  # capacity at the SLO
    requests_per_second: float | None = None
    bound_by: str | None = None
    from_step: int | None = None
    input_tokens: float | None = None  # the load's typical lengths
    output_tokens: float | None = None
    partial: bool = False
    # the capacity step's client-side percentiles ("ttft_p95", "itl_p50" ... -> seconds; the last step within the
    # SLO): exact per-request latencies at ``concurrency``, which can show an objective met that the runtime's
    # buckets cannot decide (analysis/serving.py slo_status)
    latency: Mapping[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------- identity
@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """Who a process belongs to, read from its cgroup path (sources/identity.py); "" = not applicable."""

    kind: str  # "pod" | "job" | "container" | "unit"
    cgroup: str  # the identity's own cgroup (a prefix of the process's path): the pod, job, container or unit
    pod_uid: str = ""
    container_id: str = ""  # 64 hex digits
    runtime: str = ""  # containerd | cri-o | docker | podman | "" (unknown)
    job_id: str = ""  # Slurm job
    step: str = ""  # Slurm step (batch, extern, 0, 1 ...)
    unit: str = ""  # innermost systemd unit (foo.service)
    # a user's own container or unit: the delegated subtree it is below ("user@1000.service"), "" for the system's
    delegated: str = ""


@dataclass(frozen=True, slots=True)
class Launcher:
    """A serving or training launcher read from a command line (workload/launchers.py): what it was told.
    None: not on the command line (the runtime's default applies)."""

    runtime: str  # vllm | sglang | tgi | triton | tensorrt-llm | llama.cpp | ollama | torchrun | deepspeed | accelerate
    role: str  # serving | training
    model: str = ""  # as given: a hub name (ORG/NAME) or a path; "" when none
    script: str = ""  # training: the script (or module) launched
    host: str = ""  # the bind address given, "" for the default
    port: int | None = None  # the API port (the runtime's default when not given)
    metrics_url: str = ""  # where it serves /metrics (serving runtimes)
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None  # vLLM
    mem_fraction_static: float | None = None  # SGLang
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    data_parallel: int | None = None
    dtype: str = ""
    quantization: str = ""
    kv_cache_dtype: str = ""
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    nproc_per_node: int | None = None  # training launchers
    nnodes: int | None = None
    world_size: int | None = None
    micro_batch: int | None = None  # training scripts' --per_device_train_batch_size
    gradient_checkpointing: bool = False  # training scripts' --gradient_checkpointing
    sharding: str = ""  # training: a profile sharding value (zero1..3, fsdp-*) read from the command line
    sharding_unknown: str = ""  # training: where the sharding is set when it is not on the command line
    problems: tuple[str, ...] = ()  # flags whose values could not be read (ignored, named here)


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """The config.json of a launcher's model, as the identity collector found it (offline, never downloaded)."""

    source: str = ""  # the config.json read, "" when none
    error: str = ""  # why none was read (not found, unreadable, malformed), "" when read
    fields_json: str = ""  # modelconfig's profile fragment (architecture, params, precision ...), JSON
    max_context: int | None = None  # max_position_embeddings
    encoder_only: bool = False


@dataclass(frozen=True, slots=True)
class IdentityGroup:
    """One identity that holds a GPU (an automatic workload): a pod, a Slurm job, a container or a unit."""

    kind: str  # pod | job | container | unit | launcher (a serving or training launcher outside those)
    name: str  # the workload name: "<namespace>/<pod>", "job_<id>", the container's name, the unit
    pids: tuple[int, ...] = ()  # its processes that NVML lists on a GPU, or its launcher holding none (never exported)
    gpus: tuple[str, ...] = ()  # GPU or MIG UUIDs (and "index:N" from a job mapping file) assigned to it
    namespace: str = ""
    pod: str = ""
    container: str = ""  # Kubernetes container name(s), "," joined; or the Docker/Podman container name
    pod_uid: str = ""
    job_id: str = ""
    cgroup: CgroupStats | None = None  # its cgroup's files (v2, or v1's equivalents), when known and readable
    processes: int | None = None  # pids.current of its cgroup (all its tasks, not only the GPU processes)
    launcher: Launcher | None = None  # the serving or training launcher its processes run under, if any
    model: ModelInfo | None = None  # the launcher's model config, when it names a model
    # the processes its cgroup and every cgroup below listed at the last read (a launcher of its own: the
    # launcher's pid); with ``pids`` and their descendants, what the processes collector measures (never exported)
    members: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class IdentitySource:
    """The state of one identity source (the kubelet pod-resources API, the job mapping directory)."""

    name: str  # "kubelet" | "hpc_job_mapping"
    up: bool
    error: str | None = None
    unknown_devices: tuple[str, ...] = ()  # device IDs it assigned that no GPU or MIG instance here has
    # one line each: what it was given that does not make an identity (a pod it does not list, a file refused)
    refused: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IdentitySample:
    """Automatic workloads this tick (only identities that hold a GPU) and the state of their sources."""

    groups: tuple[IdentityGroup, ...] = ()
    sources: tuple[IdentitySource, ...] = ()
    dropped_total: int = 0  # identities not exported because of the cap (counter)
    max_groups: int = 0


# -------------------------------------------------------------------------------------------- tick
@dataclass(frozen=True, slots=True)
class SourceResult:
    """One collector's outcome in one tick. ``data`` is None when it failed."""

    name: str
    ok: bool
    duration_seconds: float
    # the collector's frozen value (a CpuSample, an NvmlSample ...: each collector's ``collect()`` says which); Any
    # here because the mapping below is keyed by name: ``Sample.data`` and ``PreviousTick`` give it its type back
    data: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Sample:
    """Everything one tick read, keyed by collector name."""

    timestamp: float  # wall clock, seconds since the epoch
    monotonic: float  # for rates and windows
    sources: Mapping[str, SourceResult] = field(default_factory=dict)

    def data(self, name: str) -> Any:  # Any: the collector's own value, by name (as SourceResult.data)
        """The data of collector ``name`` if it ran and succeeded this tick, else None."""
        result = self.sources.get(name)
        return result.data if result is not None and result.ok else None


def _of(kind: type[_T], value: object) -> _T | None:
    return value if isinstance(value, kind) else None


@dataclass(frozen=True, slots=True)
class PreviousTick:
    """What a collector may read of the tick before this one: ``SourceContext.previous()`` returns it (None
    before the first tick). It is the one feedback in the otherwise one-way flow (docs/architecture.md, the
    dotted arrow): these fields and nothing else of the last tick reach a collector, each typed, each read by
    the collectors named beside it. A collector that failed last tick gives None (for ``identity``, the
    processes and serving collectors then keep what its last answer named: unknown is not gone).
    """

    cpu: CpuSample | None = None  # processes (sources/neighbours.py ``pressured``): PSI and load say "pressure"
    memory: MemorySample | None = None  # processes (``pressured``): MemAvailable says "pressure"
    nvml: NvmlSample | None = None  # identity: the GPU processes NVML listed are the automatic workloads' seeds
    processes: ProcessesSample | None = None  # identity, serving: the pids the declared workloads claimed
    identity: IdentitySample | None = None  # processes (their members are measured), serving (launchers' URLs)
    # from the last tick's analysis (processes, sources/neighbours.py ``scored``): each workload's verdict scores
    # (resource -> 0-1), None when no analysis is at hand (a bare sampler, a collector test) ...
    workload_scores: tuple[Mapping[str, float], ...] | None = None
    # ... and the host-wide starvation pressures ("cpu", "disk_io", "host_memory" -> 0-1)
    host_pressure: Mapping[str, float] = field(default_factory=lambda: EMPTY)

    @overload
    @classmethod
    def of(cls, sample: Sample, workload_scores: tuple[Mapping[str, float], ...] | None = None,
           host_pressure: Mapping[str, float] = EMPTY) -> PreviousTick: ...
    @overload
    @classmethod
    def of(cls, sample: None, workload_scores: tuple[Mapping[str, float], ...] | None = None,
           host_pressure: Mapping[str, float] = EMPTY) -> None: ...
    @classmethod
    def of(cls, sample: Sample | None, workload_scores: tuple[Mapping[str, float], ...] | None = None,
           host_pressure: Mapping[str, float] = EMPTY) -> PreviousTick | None:
        """The fields of ``sample`` (its collectors that succeeded) and of its analysis; None for None (no tick
        yet)."""
        if sample is None:
            return None
        return cls(cpu=_of(CpuSample, sample.data("cpu")), memory=_of(MemorySample, sample.data("memory")),
                   nvml=_of(NvmlSample, sample.data("nvml")), processes=_of(ProcessesSample, sample.data("processes")),
                   identity=_of(IdentitySample, sample.data("identity")), workload_scores=workload_scores,
                   host_pressure=host_pressure)


# Any: a source's frozen dataclass, of whichever type (``old`` the last tick's, of the same type or None)
def share_unchanged(new: Any, old: Any, names: Iterable[str] | None = None) -> Any:
    """``new`` with each field (``names``, default all) that equals ``old``'s holding ``old``'s object, or ``old``
    itself when every field equals it (``names`` None): a value that does not change between ticks (a GPU's
    limits, thresholds and clock-event totals, an idle process's CPU seconds, an empty map) is then kept once in
    the window instead of once per sample.

    Equal means same type and ``==`` (a map's values too: 1 and 1.0 stay apart; -0.0 and 0.0 too). ``new`` is a
    frozen dataclass changed in place, so call it only on a value no other thread has seen yet (a source
    does, just after building it). What it returns equals what was built."""
    if old is None or new is old:
        return new
    same = names is None and type(new) is type(old)
    for name in names if names is not None else new.__dataclass_fields__:
        a = getattr(new, name)
        b = getattr(old, name)
        if a is b:
            continue
        if type(a) is not type(b) or a != b:
            same = False
            continue
        kind = type(a)
        if kind is float:
            if a == 0.0 and math.copysign(1.0, a) != math.copysign(1.0, b):
                same = False
                continue
        elif kind in _MAPS and any(type(v) is not type(b[k]) for k, v in a.items()):
            same = False
            continue
        _set(new, name, b)
    return old if same else new


# Any: samples and findings of any type in, a JSON value out (jsontypes.JsonValue; samples.py imports nothing
# of headroom)
def to_jsonable(obj: Any) -> Any:
    """Plain JSON-able data (dicts, lists, numbers, strings) from samples and findings."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if hasattr(obj, "__dataclass_fields__"):
        return {name: to_jsonable(getattr(obj, name)) for name in obj.__dataclass_fields__}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "value") and hasattr(obj, "name"):  # enums
        return obj.value
    return str(obj)


@dataclass(frozen=True, slots=True)
class TickTiming:
    """How well the sampler kept its schedule: a tick is due every interval from the loop's start; on a saturated
    host (the situation the agent must diagnose) the sampler thread wakes late, and a tick that overruns makes
    the loop skip the slots it ran over (sampler.Sampler.run)."""

    lateness_seconds: float | None  # how late this tick started after its slot; None: not run by the schedule
    missed_total: int  # slots skipped since the start because a tick started or ran past them
    window_seconds: float  # the span the recent figures cover (sampler.TIMING_WINDOW_SECONDS)
    recent_lateness_seconds: tuple[float, ...] = ()  # the scheduled ticks of that span, oldest first
    recent_duration_seconds: tuple[float, ...] = ()  # every tick of that span (this one included)


class Change(Protocol):
    """A primary bottleneck that changed this tick, as the sampler logs it (``analysis.pipeline.Change``)."""

    @property
    def entity(self) -> str: ...  # "workload" | "gpu"
    @property
    def name(self) -> str: ...
    @property
    def before(self) -> str: ...
    @property
    def after(self) -> str: ...
    @property
    def evidence(self) -> str: ...
    @property
    def remedy(self) -> str: ...
    @property
    def runbook_url(self) -> str: ...
    @property
    def runbook_path(self) -> str: ...


class Findings(Protocol):
    """The analysis's result of a tick as the sampler, the recorder and ``Snapshot`` see it: what changed, which
    workloads' analysis failed, the primaries replay compares. ``headroom.analysis.pipeline.Findings`` (frozen)
    is the one implementation; the renderer and the daemon read it as that type."""

    @property
    def changes(self) -> Sequence[Change]: ...
    @property
    def errors(self) -> Sequence[tuple[str, str]]: ...  # (entity, reason) of each workload whose analysis failed
    def primaries(self) -> Mapping[str, str]: ...  # {"workload/<name>": primary, "gpu/<index>": primary}


@dataclass(frozen=True)
class Snapshot:
    """What the exposition layer serves: the latest Sample, its findings and the rendered bytes."""

    sample: Sample
    ticks: int
    interval: float
    tick_duration_seconds: float
    scenario: str | None = None
    rates: Mapping[str, float | None] = field(default_factory=dict)  # analysis/rates.py derive()
    findings: Findings | None = None  # the analysis of this tick (None: none configured, or it failed)
    config_reload_ok: bool = True  # the last configuration (re)load succeeded
    config_reload_success_timestamp: float | None = None  # when the configuration last loaded successfully
    record_ok: bool | None = None  # --record: the last write succeeded (None: not recording)
    record_written_bytes_total: int | None = None
    web_config_reload_ok: bool | None = None  # the last web config (re)load succeeded (None: no web config)
    timing: TickTiming | None = None  # the schedule kept (lateness, missed slots); None for a snapshot built by hand
    exposition: bytes = b""
    extras: Mapping[str, object] = field(default_factory=dict)

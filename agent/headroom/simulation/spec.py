"""What a scenario declares: the spec types a scenario file is parsed into, and the names it may use.

The frozen dataclasses of one GPU (``GpuSpec``, with its processes, MIG instances and XIDs), an injected NVML
fault (``FaultSpec``), a workload and its stand-in processes (``WorkloadSpec``, ``StandInSpec``,
``ServingSpec``, ``StandInGpu``) and an ``attach:`` rule (``AttachSpec``); the vocabulary of GPU signals,
clock-event reasons, unsupportable queries and serving signals; and ``ScenarioError``. Imports only
``simulation.signals``, so the driver stand-in reads these types without importing the scenario package.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from headroom.simulation.signals import Signal, constant

if TYPE_CHECKING:
    from headroom.jsontypes import JsonDoc

# Clock-event reasons in NVML bit order; the same names the collector reports.
CLOCK_EVENT_REASONS: tuple[str, ...] = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
)

# Queries a scenario may declare NOT_SUPPORTED on one GPU (``unsupported: [...]``).
UNSUPPORTABLE_QUERIES: frozenset[str] = frozenset({
    "utilization", "memory_info", "power", "power_limit", "energy", "temperature", "memory_temperature",
    "clocks", "performance_state", "fan_speed", "clock_events", "pcie_link", "pcie_throughput",
    "processes", "process_utilization", "mig", "ecc", "remapped_rows", "xid_events",
    "pcie_counters",  # cumulative PCIe byte counters (field values); without them the 20 ms sample is polled
})  # fmt: skip

# GPU signal name -> unit kind (see _parse_unit)
GPU_SIGNALS: dict[str, str] = {
    "utilization": "ratio",
    "memory_utilization": "ratio",
    "memory_used": "size",
    "power": "number",
    "temperature": "number",
    "memory_temperature": "number",
    "sm_clock": "frequency",
    "memory_clock": "frequency",
    "performance_state": "number",
    "fan_speed": "ratio",
    "pcie_tx": "size",
    "pcie_rx": "size",
    # GPM (Hopper and later): the GPU answers GPM queries only when it declares one of these
    "sm_active": "ratio",
    "sm_occupancy": "ratio",
    "tensor_active": "ratio",
    "dram_active": "ratio",
    # NVLink bytes per second over all active links (spread evenly); needs ``nvlink: {links: N}``
    "nvlink_tx": "size",
    "nvlink_rx": "size",
}
GPM_SIGNALS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")


class ScenarioError(ValueError):
    """A scenario file is missing or invalid. The message reads FILE:LINE:COLUMN: field.path: message."""


# ------------------------------------------------------------------------------------- scenario types
@dataclass(frozen=True, slots=True)
class ProcessSpec:
    pid: int
    used_memory: Signal | None  # None: NVML reports "not available"
    sm_utilization: Signal | None = None  # per-process samples (nvmlDeviceGetProcessUtilization); None: none


@dataclass(frozen=True, slots=True)
class StandInGpu:
    """A stand-in's use of one GPU, reported in that GPU's process lists under the stand-in's real pid."""

    gpu: int
    memory: Signal
    utilization: Signal | None = None  # SM utilization (nvmlDeviceGetProcessUtilization); None: no samples


@dataclass(frozen=True, slots=True)
class AttachSpec:
    """``attach:``: real processes of this host, found by a pid file (a glob; each file holds pids) or an RE2
    pattern over their command line, listed on simulated GPU ``use.gpu`` with ``use``'s memory: a real job
    (a Slurm step, a container, a torchrun rank) seen as a GPU process, so that identity, membership and
    verdicts run on it as on a GPU host (docs/scenario-format.md, "attach")."""

    use: StandInGpu
    pid_file: str = ""
    cmdline: str = ""




@dataclass(frozen=True, slots=True)
class StandInSpec:
    """One stand-in process: its exact argv, what it uses (CPU, memory, I/O, network, threads), its GPUs and
    children.

    With a synthetic host (``host:``) these are simulated values the collectors read from the synthetic
    /proc (``headroom.simulation.host``); without one the stand-in is a real process that burns ``cpu`` (at
    most one core) and holds ``rss`` for real, and the rest is not simulated.
    """

    argv: tuple[str, ...]
    cpu: Signal = field(default_factory=lambda: constant(0.0))  # cores used (CPU seconds per second)
    rss: Signal = field(default_factory=lambda: constant(0.0))  # resident bytes
    gpus: tuple[StandInGpu, ...] = ()
    children: tuple[StandInSpec, ...] = ()
    read: Signal = field(default_factory=lambda: constant(0.0))  # bytes/s read from block devices
    write: Signal = field(default_factory=lambda: constant(0.0))  # bytes/s written
    network: tuple[Signal, Signal] | None = None  # (rx, tx) bytes/s in a network namespace of its own; None: the host's
    threads: tuple[Signal, ...] | None = None  # per-thread cores (explicit); None: ``thread_count`` threads share cpu
    thread_count: int = 1
    cgroup: str | None = None  # cgroup v2 path (main process only; children inherit it)
    cpu_quota: float | None = None  # cores the cgroup may use (cpu.max); None: "max"

    def cores(self, t: float) -> float:
        """Cores used at scenario time ``t``: the sum of the declared threads, else ``cpu``."""
        if self.threads is not None:
            return sum(max(0.0, s.at(t)) for s in self.threads)
        return max(0.0, self.cpu.at(t))

    def thread_cores(self, t: float) -> list[float]:
        """Cores per thread at ``t`` (main thread first): declared, else ``cpu`` spread evenly."""
        if self.threads is not None:
            return [min(1.0, max(0.0, s.at(t))) for s in self.threads]
        n = max(1, self.thread_count)
        return [min(1.0, self.cores(t) / n)] * n

    def launch_spec(self) -> JsonDoc:
        """The JSON-able spec ``headroom.standin`` runs as a real process (real load: at most one core)."""
        return {"argv": list(self.argv), "cpu": min(1.0, self.cores(0.0)), "rss": int(self.rss.at(0.0)),
                "children": [c.launch_spec() for c in self.children]}


# serving signal name -> unit kind; what a stand-in runtime reports (docs/scenario-format.md, `serving`)
SERVING_SIGNALS: dict[str, str] = {
    "running": "number", "waiting": "number", "kv_usage": "ratio", "arrivals": "number", "ttft": "number",
    "itl": "number", "preemptions": "number", "prompt_tokens": "number", "output_tokens": "number",
}  # fmt: skip
SERVING_DEFAULTS = {"running": 0.0, "waiting": 0.0, "kv_usage": 0.0, "arrivals": 0.0, "ttft": 0.2, "itl": 0.02,
                    "preemptions": 0.0, "prompt_tokens": 512.0, "output_tokens": 256.0}


@dataclass(frozen=True, slots=True)
class ServingSpec:
    """A stand-in that serves /metrics as a serving runtime prints it (simulation/runtime_metrics.py)."""

    runtime: str
    version: str
    port: int  # 0: a free port chosen when the scenario first needs it
    signals: Mapping[str, Signal]  # SERVING_SIGNALS names
    kv_blocks: int = 2048
    block_size: int = 16
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    api: tuple[tuple[str, float], ...] = ()  # the OpenAI-compatible API's timings (simulation/openai_api.py)

    def launch_spec(self, port: int) -> JsonDoc:
        from dataclasses import asdict

        return {"runtime": self.runtime, "version": self.version, "port": port, "kv_blocks": self.kv_blocks,
                "block_size": self.block_size, "model": self.model, "api": dict(self.api),
                "signals": {k: asdict(v) for k, v in self.signals.items()}}


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """A scenario workload: a main stand-in process (with its children) started by ``start_processes``."""

    name: str
    process: StandInSpec
    serving: ServingSpec | None = None  # the main process also serves a runtime's /metrics
    env: tuple[tuple[str, str], ...] = ()  # environment variables of its stand-ins (e.g. HF_HOME)


@dataclass(frozen=True, slots=True)
class MigInstanceSpec:
    gpu_instance_id: int
    compute_instance_id: int
    uuid: str
    memory_total: int
    memory_used: Signal
    processes: tuple[int, ...] = ()  # pids (of the GPU's processes) running in this instance
    # its GPU instance's profile id and placement start (nvmlGpuInstanceGetInfo); None: that call answers
    # NOT_SUPPORTED
    profile_id: int | None = None
    placement_start: int | None = None


@dataclass(frozen=True, slots=True)
class XidSpec:
    at: float  # seconds since scenario start
    code: int


@dataclass(frozen=True, slots=True)
class GpuSpec:
    index: int
    name: str
    uuid: str
    pci_bus_id: str
    memory_total: int  # bytes
    memory_reserved: int
    power_limit: float  # watts
    sm_clock_max: float  # hertz
    memory_clock_max: float
    pcie_generation: int
    pcie_width: int
    pcie_max_generation: int
    pcie_max_width: int
    signals: Mapping[str, Signal]  # GPU_SIGNALS names
    clock_events: Mapping[str, Signal]  # reason -> active when > 0.5
    supported_clock_events: tuple[str, ...]
    processes: tuple[ProcessSpec, ...]
    mig_enabled: bool | None  # None: the GPU has no MIG support
    mig_instances: tuple[MigInstanceSpec, ...]
    xids: tuple[XidSpec, ...]
    ecc_uncorrected_volatile: int
    ecc_uncorrected_aggregate: int
    remapped_rows: tuple[int, int, bool, bool]  # correctable, uncorrectable, pending, failure
    unsupported: frozenset[str]  # UNSUPPORTABLE_QUERIES answered NOT_SUPPORTED
    nvlink_links: int = 0  # NVLink links (0: no NVLink)
    nvlink_version: int = 4
    nvlink_down: tuple[int, ...] = ()  # links that are not active
    reset_at: float | None = None  # scenario seconds of a GPU reset: volatile ECC back to 0, pending remaps done
    power_limit_max: float | None = None  # watts: the highest limit the board accepts (default: power_limit)

    @property
    def power_limit_range(self) -> tuple[float, float]:
        """(min, max) watts NVML accepts as a power limit (nvmlDeviceGetPowerManagementLimitConstraints): max is
        power_limit_max (else power_limit, an SXM board's default being its maximum), min a quarter of it."""
        high = self.power_limit_max or self.power_limit
        return high / 4, high


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """An injected NVML failure: calls named ``call`` (on ``gpu``, or any) fail or hang."""

    call: str  # pynvml function name, or an NVML_FI_* field name for one field of nvmlDeviceGetFieldValues
    gpu: int | None = None
    error: str | None = None  # NVML_ERROR_* name without the prefix, e.g. GPU_IS_LOST
    hang: float | None = None  # seconds to block inside the call before answering
    start: float | None = None  # active from (scenario seconds)
    until: float | None = None  # active until (exclusive)
    calls: int | None = None  # only the next N matching calls



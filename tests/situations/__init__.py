"""Situations: labelled windows of Samples that the analysis must classify, the corpus of docs/analysis.md.

A situation is what a user meets on a host (a starved GPU, a throttled card, an idle server beside a
busy neighbour...), built as a window of Samples from per-second rates and levels (``Host``, ``Gpu``,
extra sources), with the verdict a careful engineer would give and the real-world report it models
(``source``: an issue, forum thread, postmortem or vendor document). ``tests/test_analysis.py`` runs
every situation through the same ``Analysis`` the agent runs each tick; ``bench/accuracy.py``
tabulates them per class. Each module of this package holds a theme; ``ALL`` gathers every module's
``SITUATIONS`` (add a module, not an edit here).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

from headroom.samples import (
    CpuSample,
    CpuTimes,
    DiskSample,
    DiskStats,
    GpuSample,
    MemorySample,
    MigInstance,
    MountUsage,
    Neighbour,
    NvLink,
    NvmlSample,
    Pressure,
    PressureLine,
    Sample,
    ServingEndpoint,
    ServingSample,
    ShmSample,
    SourceResult,
)

GIB = 2**30


@dataclass
class Host:
    """Per-second rates and levels the synthetic window is built from."""

    cpus: int = 16
    cpu_busy: float = 0.2  # share of all CPU time
    iowait: float = 0.0
    psi: dict = field(default_factory=dict)  # "cpu.some" -> avg10
    mem_total: int = 256 * GIB
    mem_available: int = 200 * GIB
    shm_size: int = 64 * GIB
    shm_used: int = 1 * GIB
    disk_busy: float = 0.05  # share of time with I/O in flight
    disk_queue: float = 0.1
    disk_bytes: float = 0.0  # bytes/s read + written on the disk (all of it, whoever does it)
    nic: tuple | None = None  # (bytes/s, link speed bytes/s or None: unknown) of the one NIC, when the situation has one
    nic_duty: float = 1.0  # share of each 10 s the NIC carries its traffic (from the start; 1: steady)
    neighbours: tuple = ()  # samples.Neighbour: the top consumers the processes collector found (class 8)
    run_queue: float | None = None  # runnable tasks (/proc/stat procs_running), when the situation says


@dataclass
class Gpu:
    util: float = 0.9
    mem_used: int = 30 * GIB
    mem_total: int = 80 * GIB
    power: float = 400.0
    power_limit: float = 700.0
    temperature: float = 60.0
    sm_clock_ratio: float = 1.0
    reasons: tuple = ()
    pcie: float | None = None  # bytes/s
    processes: tuple = ()
    util_alternates: float | None = None  # every other tick, for variance
    # optional, for the clock, trend and MIG situations (issue 12 classes 5, 7)
    name: str = "NVIDIA H100 80GB HBM3"
    memory_temperature: float | None = None
    thresholds: tuple | None = None  # (max operating, slowdown, shutdown, memory max operating) degC, NVML's
    reasons_share: float = 1.0  # the reasons are active this share of the window (each 10 s, from the start)
    mem_growth: float = 0.0  # bytes/s added to mem_used each second (mem_used is the first sample's)
    mem_jitter: int = 0  # bytes added and taken away on alternate seconds (allocator noise)
    mig: bool = False  # MIG mode on: NVML reports no utilization for the whole GPU
    sm_active: float | None = None  # GPM SM activity (Hopper and later); None: no GPM
    tensor_active: float | None = None  # GPM tensor-core activity; None: not given
    dram_active: float | None = None  # GPM DRAM activity (bandwidth used / peak); None: not given
    pcie_duty: float = 1.0  # share of each 10 s PCIe carries its traffic (0 the rest; 1: steady)
    nvlink_duty: float = 1.0  # likewise for NVLink
    nvlink: float | None = None  # NVLink bytes/s per direction over all its links; None: no NVLink
    nvlink_links: int = 18  # active links (H100 SXM: 18 of NVLink 4)
    # MIG instances as (uuid, memory used, memory total): "MIG-<uuid>" devices of this GPU; mem_used stays the
    # whole GPU's (NVML's device-level figure: what every slice holds, summed)
    mig_slices: tuple = ()


def pressure(avg10: float) -> Pressure:
    line = PressureLine(avg10, avg10, avg10, 0.0)
    return Pressure(some=line, full=line)


def _on(t: int, duty: float) -> bool:
    """Whether a link with this duty cycle carries its traffic in second ``t`` (the first share of each 10 s)."""
    return (t % 10) < round(duty * 10)


def _carried(t: int, duty: float) -> int:
    """Seconds before ``t`` in which a link with this duty cycle carried its traffic (its counters grow then)."""
    return sum(_on(s, duty) for s in range(t))


def build_window(host: Host, gpus: list[Gpu], seconds: int = 20, extra=None) -> list[Sample]:
    window = []
    for t in range(seconds):
        total = host.cpus * t
        busy = total * host.cpu_busy
        iowait = total * host.iowait
        times = CpuTimes(user=busy, nice=0.0, system=0.0, idle=total - busy - iowait, iowait=iowait)
        psi = {}
        for key, value in host.psi.items():
            resource, kind = key.split(".")
            line = PressureLine(value, value, value, 0.0)
            p = psi.get(resource) or Pressure(some=PressureLine(0, 0, 0, 0), full=PressureLine(0, 0, 0, 0))
            psi[resource] = replace(p, **{kind: line})
        cpu = CpuSample(times=times, logical_cpus=host.cpus, load1=1, load5=1, load15=1, pressure=psi,
                        procs_running=None if host.run_queue is None else round(host.run_queue))
        mem = MemorySample(total_bytes=host.mem_total, available_bytes=host.mem_available, free_bytes=host.mem_available,
                           major_faults_total=0)
        shm = ShmSample(mounts=(MountUsage("/dev/shm", "tmpfs", host.shm_size, host.shm_used,
                                           host.shm_size - host.shm_used),))
        disk = DiskSample(devices=(DiskStats("nvme0n1", 0, int(host.disk_bytes * t), 0, 0,
                                             io_time_seconds=host.disk_busy * t,
                                             weighted_io_time_seconds=host.disk_queue * t, in_flight=0),))
        gpu_samples = []
        for i, g in enumerate(gpus):
            util = g.util if (g.util_alternates is None or t % 2 == 0) else g.util_alternates
            used = int(g.mem_used + g.mem_growth * t + (g.mem_jitter if t % 2 else -g.mem_jitter))
            active = (t % 10) < round(g.reasons_share * 10)
            limits = dict(zip(("temperature_max_operating_celsius", "temperature_slowdown_celsius",
                               "temperature_shutdown_celsius", "memory_temperature_max_operating_celsius"),
                              g.thresholds or (None, None, None, None), strict=True))
            gpu_samples.append(GpuSample(
                index=i, uuid=f"GPU-{i}", name=g.name, pci_bus_id=f"0000:{i:02x}:00.0",
                memory_total_bytes=g.mem_total, memory_used_bytes=used,
                utilization_ratio=None if g.mig else util, power_watts=g.power, power_limit_watts=g.power_limit,
                temperature_celsius=g.temperature, sm_clock_hertz=1.98e9 * g.sm_clock_ratio, sm_clock_max_hertz=1.98e9,
                clock_events_active={r: (active and r in g.reasons) for r in (
                    "sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                    "hw_power_brake_slowdown")},
                memory_temperature_celsius=g.memory_temperature, mig_enabled=True if g.mig else None, **limits,
                pcie_tx_bytes_per_second=None if g.pcie is None else g.pcie * _on(t, g.pcie_duty),
                pcie_rx_bytes_per_second=None if g.pcie is None else g.pcie * _on(t, g.pcie_duty),
                pcie_link_generation=4, pcie_link_width=16, processes=g.processes,
                mig_instances=tuple(MigInstance(k + 1, 0, uuid, used_, total_) for k, (uuid, used_, total_)
                                    in enumerate(g.mig_slices)),
                sm_active_ratio=g.sm_active, tensor_active_ratio=g.tensor_active, dram_active_ratio=g.dram_active,
                nvlink_version=4 if g.nvlink is not None else None,
                nvlink_links=() if g.nvlink is None else tuple(
                    NvLink(link=k, up=True, tx_bytes_total=int(g.nvlink / g.nvlink_links * _carried(t, g.nvlink_duty)),
                           rx_bytes_total=int(g.nvlink / g.nvlink_links * _carried(t, g.nvlink_duty)))
                    for k in range(g.nvlink_links)),
            ))  # fmt: skip
        sources = {
            "nvml": SourceResult("nvml", True, 0.001, NvmlSample(up=True, gpus=tuple(gpu_samples))),
            "cpu": SourceResult("cpu", True, 0.001, cpu),
            "memory": SourceResult("memory", True, 0.001, mem),
            "shm": SourceResult("shm", True, 0.001, shm),
            "disk": SourceResult("disk", True, 0.001, disk),
        }
        if host.nic is not None:
            carried = _carried(t, host.nic_duty)
            nic = SimpleNamespace(device="eth0", speed_bytes_per_second=host.nic[1],
                                  receive_bytes=int(host.nic[0] * carried), transmit_bytes=int(host.nic[0] * carried / 10))
            sources["net"] = SourceResult("net", True, 0.001, SimpleNamespace(devices=(nic,)))
        if extra:
            sources.update(extra(t))
        if host.neighbours:  # the processes collector's scan of who else presses on the host
            procs = sources.get("processes")
            workloads = getattr(procs.data, "workloads", ()) if procs is not None else ()
            sources["processes"] = SourceResult("processes", True, 0.001, SimpleNamespace(
                workloads=workloads, neighbours=tuple(host.neighbours)))
        window.append(Sample(timestamp=1e9 + t, monotonic=float(t), sources=sources))
    return window


def neighbour(pid: int, name: str, user: str, *, cores: float = 0.0, cpus: int = 16, io: float | None = None,
              io_share: float | None = None, rss: int = 0, mem_total: int = 256 * GIB,
              workload: str | None = None) -> Neighbour:
    """A process the processes collector found pressing on the host (shares as it computes them)."""
    return Neighbour(pid=pid, name=name, user=user, workload=workload, cpu_cores=cores, cpu_share=cores / cpus,
                     io_bytes_per_second=io, io_share=io_share, rss_bytes=rss, memory_share=rss / mem_total)


def processes_source(name: str, cores: float, io: float | None = None, per_process: Mapping[int, float] | None = None,
                     main_pid: int | None = None, cgroup_pressure: Mapping[str, float] | None = None,
                     main_threads: Mapping[int, float] | None = None, ranks: Mapping[int, tuple[int, ...]] | None = None,
                     waits: tuple[float, float] | None = None, threads: int | None = None,
                     cpu_quota: float | None = None, cpus_allowed: int | None = None):
    """A 'processes' source whose workload burns ``cores`` CPU cores; optionally ``io`` bytes/s of its own block
    I/O (None: unknown, as when /proc/PID/io is denied), ``per_process`` {pid: cores} (its members' own rates),
    ``main_pid``, its cgroup's PSI some avg10 {"cpu"|"memory"|"io": ratio}, ``main_threads`` {tid: cores}
    (the main process's threads, as the collector reads them while it is hot) and ``ranks`` {rank pid: its
    DataLoader worker pids} as the collector finds them (default: the main process alone, with no workers);
    ``waits`` (seconds per second its members' main threads ran, and waited runnable for a CPU: /proc/PID/schedstat
    summed; None: unread), ``threads`` (its processes' threads, all states), ``cpu_quota`` (its cgroup's cpu.max in
    cores) and ``cpus_allowed`` (its main process's CPU affinity: a cpuset)."""
    if ranks is None:
        ranks = {main_pid: ()} if main_pid is not None else {}
    def make(t: int):
        cgroup = None if cgroup_pressure is None and cpu_quota is None else SimpleNamespace(
            pressure_some_avg10=dict(cgroup_pressure or {}), cpu_quota_cores=cpu_quota)
        w = SimpleNamespace(name=name, processes=max(1, len(per_process or {}) or 5), cpu_user_seconds_total=cores * t,
                            cpu_system_seconds_total=0.0,
                            read_bytes_total=None if io is None else int(io * t),
                            written_bytes_total=None if io is None else 0,
                            process_cpu_seconds={pid: c * t for pid, c in (per_process or {}).items()},
                            rank_thread_cpu_seconds={main_pid: {tid: c * t for tid, c in main_threads.items()}}
                            if main_threads and main_pid is not None else {},
                            main_pid=main_pid, ranks=dict(ranks), dataloader_workers=sum(map(len, ranks.values())),
                            pids=tuple(per_process or ()), cgroup=cgroup, threads=threads, cpus_allowed=cpus_allowed,
                            sched_run_seconds_total=None if waits is None else waits[0] * t,
                            sched_wait_seconds_total=None if waits is None else waits[1] * t)
        return {"processes": SourceResult("processes", True, 0.001, SimpleNamespace(workloads=(w,)))}
    return make


def serving_source(usage=0.5, running=8.0, waiting=0.0, preemptions_per_second=0.0, capacity=65536.0, up=True,
            ttft=None, deferred=None, rejections_per_second=None, sleep_level=None, queue_time=None):
    """A serving source per tick: gauges as given, preemptions, rejections and histograms growing with t (vLLM 0.2x
    families: ``deferred`` of the waiting requests, admission rejections, ``sleep_level``, ``queue_time``(t))."""
    def extra(t):
        e = ServingEndpoint(
            "chat", "http://127.0.0.1:8000/metrics", up=up, runtime="vllm" if up else None,
            error=None if up else "cannot connect: Connection refused",
            kv_cache_usage_ratio=usage, requests_running=running, requests_waiting=waiting,
            preemptions_total=preemptions_per_second * t, kv_cache_capacity_tokens=capacity,
            time_to_first_token=ttft(t) if ttft else None, requests_waiting_deferred=deferred,
            admission_rejections_total=None if rejections_per_second is None else rejections_per_second * t,
            sleep_level=sleep_level, request_queue_time=queue_time(t) if queue_time else None,
        ) if up else ServingEndpoint("chat", "http://127.0.0.1:8000/metrics", up=False,
                                     error="cannot connect: Connection refused")
        return {"serving": SourceResult("serving", True, 0.0, ServingSample((e,)))}
    return extra


def together(*makers):
    """Several workloads' 'processes' sources (and any other extra sources) as one ``extra``."""
    def make(t: int):
        out: dict = {}
        workloads: list = []
        for m in makers:
            part = dict(m(t))
            procs = part.pop("processes", None)
            if procs is not None:
                workloads.extend(procs.data.workloads)
            out.update(part)
        if workloads:
            out["processes"] = SourceResult("processes", True, 0.001, SimpleNamespace(workloads=tuple(workloads)))
        return out
    return make


TRAINER = """
workloads:
  - name: trainer
    kind: finetune-lora
    params: 7B
    precision: bf16
    lora: {rank: 16}
    dataloader_workers: 4
    gpus: [0]
"""
def chat(runtime: str = "{name: tgi}", concurrency: int = 8, gpus: str = "[0]", extra: str = "") -> str:
    """The profile entry of the corpus's serving workload ``chat`` (an 8B model, 8k context), with its runtime,
    concurrency, GPUs and any further lines (``extra``, each ``key: value``) as the situation needs."""
    lines = "".join(f"    {line}\n" for line in extra.splitlines() if line)
    return f"""  - name: chat
    kind: inference
    params: 8B
    precision: bf16
    runtime: {runtime}
    architecture: {{layers: 32, heads: 32, kv_heads: 8, head_dim: 128}}
    context: {{max: 8192}}
    concurrency: {concurrency}
    gpus: {gpus}
{lines}"""


SERVER = "\nworkloads:\n" + chat()
DISTRIBUTED = TRAINER.replace("gpus: [0]", "match: {cmdline: train.py}\n    parallel: {data: 8}")


def analyse(config_text: str, window: list[Sample], hold: float = 0.0, analysis: str = "", gpus_of=None):
    """Run the Analysis over the window; ``gpus_of`` {workload: (gpu indices)} stands in for attribution."""
    from headroom.analysis.pipeline import Analysis
    from headroom.config import check_config_text

    config = check_config_text(config_text + f"\nanalysis:\n  hold: {hold}s\n{analysis}", "c.yaml")
    analysis = Analysis(config)
    if gpus_of:
        # private: the attribution stands in (Analysis takes no attribution argument; the situation names the workloads' GPUs)
        analysis._attribute = lambda sample: tuple(
            SimpleNamespace(name=n, gpu_indices=g, processes=1, estimate=None, expected_peak_bytes=None)
            for n, g in gpus_of.items())
    findings = None
    for i in range(1, len(window) + 1):
        _, findings = analysis(window[:i])
    return findings


@dataclass
class Situation:
    """One labelled situation. ``expected``: the primary bottleneck of the workload (the only one, or
    ``workload``'s), or a mapping workload -> primary when the config declares several."""

    name: str
    config: str
    host: Host
    gpus: list
    expected: str | Mapping[str, str]
    source: str = ""  # the real-world report this models (URL or document)
    extra: Callable[[int], Mapping[str, Any]] | None = None
    seconds: int = 20
    gpus_of: Mapping[str, tuple[int, ...]] | None = None  # stands in for attribution (see analyse)
    tags: tuple[str, ...] = ()  # the issue-12 classes or themes it exercises
    gpu_expected: Mapping[int, str] | None = None  # GPU index -> its own primary, where the situation says
    evidence: Mapping[str, str] | None = None  # workload ("*" for the only one) -> text its primary's evidence holds
    ties: tuple[str, ...] = ()  # resources that tie with the expected one (scoring high too): causal evidence decides

    def window(self) -> list[Sample]:
        return build_window(self.host, self.gpus, seconds=self.seconds, extra=self.extra)

    def expectations(self) -> dict[str, str]:
        if isinstance(self.expected, str):
            return {"*": self.expected}
        return dict(self.expected)


def _discover() -> list[Situation]:
    out: list[Situation] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        out.extend(getattr(module, "SITUATIONS", ()))
    names = [s.name for s in out]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ValueError(f"duplicate situation names: {sorted(dupes)}")
    return out


ALL: list[Situation] = _discover()

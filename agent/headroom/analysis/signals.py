"""Signals: what the window says about each GPU, the host and each workload, as plain numbers.

Pure functions of the window of Samples (and the workload statuses of the newest tick). Every value is
an average or a rate over the window's span; None when the window cannot tell (too short, unsupported).
The bottleneck rules (bottleneck.py) read only these, so each rule's inputs are explicit. The window's
arithmetic (its recent span, counter rates across resets, trends) is window.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from headroom.analysis.window import (
    _mean,
    _rate,
    _rate_of,
    _stdev,
    interval_rates,
    recent,
    steady_share,
    sustained_growth,
)
from headroom.samples import (
    CgroupStats,
    CpuSample,
    DiskSample,
    GpuSample,
    MemorySample,
    NvmlSample,
    Sample,
    ShmSample,
    WorkloadProcesses,
)

if TYPE_CHECKING:
    from headroom.workload.attribution import WorkloadStatus
    from headroom.workload.profiles.types import WorkloadProfile

if TYPE_CHECKING:
    from headroom.samples import Neighbour

THERMAL_REASONS = ("sw_thermal_slowdown", "hw_thermal_slowdown")
POWER_REASONS = ("sw_power_cap", "hw_power_brake_slowdown")
# hw_slowdown is raised for heat *and* for an external power brake (the board's power supply, a BMC): it
# counts as thermal only while the GPU (or its memory) is within THERMAL_NEAR_CELSIUS of its limit, else as power
AMBIGUOUS_REASONS = ("hw_slowdown",)
THERMAL_NEAR_CELSIUS = 5.0
# what each clock-event reason is, in the evidence
REASON_LABELS = {
    "sw_thermal_slowdown": "software thermal slowdown",
    "hw_thermal_slowdown": "hardware thermal slowdown",
    "hw_slowdown": "hardware slowdown",
    "sw_power_cap": "software power cap",
    "hw_power_brake_slowdown": "hardware power brake",
}
# PCIe bytes/s per lane per direction after line coding, by generation
PCIE_LANE_BYTES_PER_SECOND = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969.2e6, 5: 3938.5e6, 6: 7877e6}
# NVLink data bandwidth per link and direction, by NVLink generation (bytes/s): NVLink 2-4 25 GB/s, 5 50 GB/s
NVLINK_LINK_BYTES_PER_SECOND = {1: 20e9, 2: 25e9, 3: 25e9, 4: 25e9, 5: 50e9}


# ---------------------------------------------------------------------------------------------- GPU
@dataclass(frozen=True)
class GpuSignals:
    index: int
    uuid: str
    name: str
    up: bool
    busy: float | None = None  # mean utilization ratio over the window
    busy_stdev: float | None = None
    sm_clock_ratio: float | None = None  # mean SM clock / max
    thermal_share: float = 0.0  # share of samples slowed for heat (thermal reasons, hw_slowdown while hot)
    power_cap_share: float = 0.0  # share of samples slowed for power (power reasons, hw_slowdown while cool)
    power_ratio: float | None = None  # mean power / limit
    power_watts: float | None = None
    power_limit_watts: float | None = None
    power_limit_max_watts: float | None = None  # the board's highest settable limit (NVML limit constraints)
    temperature_celsius: float | None = None  # newest
    memory_used_bytes: int | None = None  # newest
    memory_total_bytes: int | None = None
    memory_used_ratio: float | None = None
    memory_growth_bytes_per_second: float | None = None
    # "" for the whole GPU; "MIG instance MIG-..." when the memory figures are those of the MIG instances a
    # workload holds (mig_memory): a workload on a MIG slice runs out of its slice, not of the GPU
    memory_scope: str = ""
    pcie_ratio: float | None = None  # max(tx, rx) / link capability, newest
    pcie_bytes_per_second: float | None = None
    pcie_capability_bytes_per_second: float | None = None
    # (generation, width) of the PCIe link now and at most (GPU and slot), newest; None where unknown
    pcie_link: tuple[int | None, int | None, int | None, int | None] = (None, None, None, None)
    samples: int = 0
    sm_active: float | None = None  # mean GPM SM activity over the window (Hopper+); None without GPM
    tensor_active: float | None = None  # mean GPM tensor-core activity over the window; None without GPM
    dram_active: float | None = None  # mean GPM DRAM bandwidth used / peak over the window; None without GPM
    pcie_mean_bytes_per_second: float | None = None  # max(tx, rx), averaged over the window's samples
    pcie_steady: float | None = None  # share of the window's samples carrying its PCIe traffic (steady_share)
    nvlink_steady: float | None = None  # share of the window's intervals carrying its NVLink traffic
    nvlink_bytes_per_second: float | None = None  # max(tx, rx) over all active links, over the window
    nvlink_capability_bytes_per_second: float | None = None  # active links x per-link bandwidth
    nvlink_ratio: float | None = None
    # clock-event reason -> share of the window it was active (every reason the GPU reports)
    reason_shares: Mapping[str, float] = field(default_factory=dict)
    throttled_share: float | None = None  # share of samples with any slowdown reason active; None: unknown
    temperature_peak_celsius: float | None = None  # hottest over the window
    memory_temperature_celsius: float | None = None  # newest HBM/GDDR temperature, where the board has it
    thermal_limit_celsius: float | None = None  # the GPU's own max operating (else slowdown) temperature
    thermal_limit_source: str = ""  # "max operating", "slowdown" or "configured" (analysis.gpu_slowdown_celsius)
    memory_thermal_limit_celsius: float | None = None  # the memory's max operating temperature
    memory_growth_r2: float | None = None  # how straight the VRAM trend is (R² of the least-squares fit)
    mig_enabled: bool | None = None  # MIG mode on: NVML reports no utilization for the whole GPU


def thermal_limit(g: GpuSample, default_celsius: float | None) -> tuple[float | None, str]:
    """The temperature the GPU starts slowing down at: its max operating temperature where NVML gives one
    (software thermal slowdown), else its slowdown threshold (hardware), else the configured default."""
    if g.temperature_max_operating_celsius:
        return g.temperature_max_operating_celsius, "max operating"
    if g.temperature_slowdown_celsius:
        return g.temperature_slowdown_celsius, "slowdown"
    return default_celsius, "configured"


def _hot(x: GpuSample, limit: float | None, memory_limit: float | None) -> bool:
    """The GPU or its memory within THERMAL_NEAR_CELSIUS of its limit in this sample."""
    if limit is not None and x.temperature_celsius is not None and x.temperature_celsius >= limit - THERMAL_NEAR_CELSIUS:
        return True
    return (memory_limit is not None and x.memory_temperature_celsius is not None
            and x.memory_temperature_celsius >= memory_limit - THERMAL_NEAR_CELSIUS)


def _gpus_by_uuid(sample: Sample) -> dict[str, GpuSample]:
    nvml = sample.data("nvml")
    if not isinstance(nvml, NvmlSample):
        return {}
    return {g.uuid: g for g in nvml.gpus}


def _nvlink(timed: Sequence[tuple[float, GpuSample]],
            g: GpuSample) -> tuple[float | None, float | None, float | None]:
    """(max of tx and rx bytes/s summed over the newest sample's active links, their capability, the share of
    the window's intervals in which the busiest of them carried its traffic: steady_share). The sums read the
    first and last samples that have every active link; the steadiness reads one link per sample (collectives
    stripe their traffic over the links alike), so a tick's cost stays that of two samples per GPU."""
    active = [link.link for link in g.nvlink_links if link.up]
    per_link = NVLINK_LINK_BYTES_PER_SECOND.get(g.nvlink_version or 0)
    if not active:
        return None, None, None

    def total(direction: str) -> Callable[[tuple[float, GpuSample]], float | None]:
        def read(point: tuple[float, GpuSample]) -> float | None:
            values = {link.link: getattr(link, f"{direction}_bytes_total") for link in point[1].nvlink_links}
            if any(values.get(n) is None for n in active):
                return None
            return float(sum(values[n] for n in active))

        return read

    rates: list[tuple[float, str]] = []
    for direction in ("tx", "rx"):
        read = total(direction)
        first = next(((t, v) for t, gs in timed if (v := read((t, gs))) is not None), None)
        last = next(((t, v) for t, gs in reversed(timed) if (v := read((t, gs))) is not None), None)
        if first and last and last[0] > first[0] and last[1] >= first[1]:
            rates.append(((last[1] - first[1]) / (last[0] - first[0]), direction))
    if not rates:
        return None, (per_link * len(active) if per_link else None), None
    rate, direction = max(rates)
    return rate, (per_link * len(active) if per_link else None), _link_steadiness(timed, g, direction)


def _link_steadiness(timed: Sequence[tuple[float, GpuSample]], g: GpuSample, direction: str) -> float | None:
    """steady_share of the newest sample's busiest active link (its largest ``direction`` counter), read at its
    position in each sample's link tuple (a sample whose link there is another one is skipped)."""
    attr = f"{direction}_bytes_total"
    up = [(i, link) for i, link in enumerate(g.nvlink_links) if link.up and getattr(link, attr) is not None]
    if not up:
        return None
    pos, busiest = max(up, key=lambda p: getattr(p[1], attr))
    points = []
    for t, gs in timed:
        links = gs.nvlink_links
        if pos < len(links) and links[pos].link == busiest.link and (v := getattr(links[pos], attr)) is not None:
            points.append((t, float(v)))
    return steady_share(interval_rates(points))


def gpu_signals(window: Sequence[Sample], seconds: float, default_limit_celsius: float | None = 87.0) -> list[GpuSignals]:
    """One GpuSignals per GPU present in the newest sample. ``default_limit_celsius``: the thermal limit of
    GPUs whose NVML gives no temperature threshold (analysis.gpu_slowdown_celsius)."""
    span = recent(window, seconds)
    maps = [(s.monotonic, _gpus_by_uuid(s)) for s in span]  # once per sample, not once per GPU
    newest = maps[-1][1] if maps else {}
    out = []
    for uuid, g in newest.items():
        timed = [(t, gs) for t, m in maps if (gs := m.get(uuid)) is not None]
        series = [gs for _, gs in timed if gs.up]
        if not g.up or not series:
            out.append(GpuSignals(g.index, uuid, g.name, up=False))
            continue
        utils = [x.utilization_ratio for x in series if x.utilization_ratio is not None]
        clocks = [x.sm_clock_hertz / x.sm_clock_max_hertz for x in series
                  if x.sm_clock_hertz is not None and x.sm_clock_max_hertz]
        power = [x.power_watts / x.power_limit_watts for x in series
                 if x.power_watts is not None and x.power_limit_watts]
        limit, limit_source = thermal_limit(g, default_limit_celsius)
        memory_limit = g.memory_temperature_max_operating_celsius
        thermal = capped = throttled = 0
        counts = dict.fromkeys(g.clock_events_active, 0)
        reported = bool(counts)
        for x in series:
            active = x.clock_events_active
            if True not in active.values():  # most samples: nothing active (a C-level scan, no per-reason work)
                reported = reported or bool(active)
                continue
            reported = True
            on = {r for r, v in active.items() if v}
            for r in on:
                counts[r] = counts.get(r, 0) + 1
            ambiguous = not on.isdisjoint(AMBIGUOUS_REASONS)
            hot = ambiguous and _hot(x, limit, memory_limit)
            heat = hot or not on.isdisjoint(THERMAL_REASONS)
            braked = (ambiguous and not hot) or not on.isdisjoint(POWER_REASONS)
            thermal += heat
            capped += braked
            throttled += heat or braked
        temps = [x.temperature_celsius for x in series if x.temperature_celsius is not None]
        used = g.memory_used_bytes
        total = g.memory_total_bytes
        mem_points = [(t, float(gs.memory_used_bytes)) for t, gs in timed if gs.memory_used_bytes is not None]
        growth, growth_r2 = sustained_growth(mem_points)
        capability = None
        if g.pcie_link_generation and g.pcie_link_width:
            lane = PCIE_LANE_BYTES_PER_SECOND.get(g.pcie_link_generation)
            capability = lane * g.pcie_link_width if lane else None
        pcie = max((v for v in (g.pcie_tx_bytes_per_second, g.pcie_rx_bytes_per_second) if v is not None),
                   default=None)
        sm_active = [x.sm_active_ratio for x in series if x.sm_active_ratio is not None]
        tensor = [x.tensor_active_ratio for x in series if x.tensor_active_ratio is not None]
        dram = [x.dram_active_ratio for x in series if x.dram_active_ratio is not None]
        pcie_series = [max(v for v in (x.pcie_tx_bytes_per_second, x.pcie_rx_bytes_per_second) if v is not None)
                       for x in series
                       if x.pcie_tx_bytes_per_second is not None or x.pcie_rx_bytes_per_second is not None]
        nvlink, nvlink_capability, nvlink_steady = _nvlink(timed, g)
        out.append(GpuSignals(
            index=g.index, uuid=uuid, name=g.name, up=True,
            busy=_mean(utils), busy_stdev=_stdev(utils), sm_clock_ratio=_mean(clocks),
            thermal_share=thermal / len(series), power_cap_share=capped / len(series),
            power_ratio=_mean(power), power_watts=g.power_watts, power_limit_watts=g.power_limit_watts,
            power_limit_max_watts=g.power_limit_max_watts,
            temperature_celsius=g.temperature_celsius,
            memory_used_bytes=used, memory_total_bytes=total,
            memory_used_ratio=(used / total) if used is not None and total else None,
            memory_growth_bytes_per_second=growth,
            pcie_ratio=(pcie / capability) if pcie is not None and capability else None,
            pcie_bytes_per_second=pcie, pcie_capability_bytes_per_second=capability,
            pcie_link=(g.pcie_link_generation, g.pcie_link_width, g.pcie_link_max_generation, g.pcie_link_max_width),
            samples=len(series),
            sm_active=_mean(sm_active), tensor_active=_mean(tensor), dram_active=_mean(dram),
            pcie_mean_bytes_per_second=_mean(pcie_series), pcie_steady=steady_share(pcie_series),
            nvlink_steady=nvlink_steady, nvlink_bytes_per_second=nvlink, nvlink_capability_bytes_per_second=nvlink_capability,
            nvlink_ratio=(nvlink / nvlink_capability) if nvlink is not None and nvlink_capability else None,
            reason_shares={r: c / len(series) for r, c in counts.items()},
            throttled_share=(throttled / len(series)) if reported else None,
            temperature_peak_celsius=max(temps) if temps else None,
            memory_temperature_celsius=g.memory_temperature_celsius,
            thermal_limit_celsius=limit, thermal_limit_source=limit_source if limit is not None else "",
            memory_thermal_limit_celsius=memory_limit, memory_growth_r2=growth_r2, mig_enabled=g.mig_enabled,
        ))  # fmt: skip
    return sorted(out, key=lambda s: s.index)


def mig_memory(g: GpuSignals, window: Sequence[Sample], seconds: float, instances: Sequence[str]) -> GpuSignals:
    """``g`` with its memory figures (used, total, ratio, sustained growth) those of the MIG ``instances`` of it
    that a workload holds, summed: MIG partitions memory, so a full slice is full whatever the rest of the
    GPU holds, and a roomy slice is roomy on a GPU whose other slices are full. ``g`` as it is when the newest
    sample does not give every instance's memory."""
    wanted = set(instances)
    points = []
    newest: tuple[int, int] | None = None
    for s in recent(window, seconds):
        gs = _gpus_by_uuid(s).get(g.uuid)
        if gs is None:
            continue
        found = [m for m in gs.mig_instances if m.uuid in wanted]
        if len(found) != len(wanted) or any(m.memory_used_bytes is None or m.memory_total_bytes is None
                                            for m in found):
            newest = None
            continue
        used = sum(m.memory_used_bytes or 0 for m in found)  # (none is None: just checked)
        newest = (used, sum(m.memory_total_bytes or 0 for m in found))
        points.append((s.monotonic, float(used)))
    if newest is None or not newest[1]:
        return g
    growth, r2 = sustained_growth(points)
    names = ", ".join(sorted(wanted))
    return replace(g, memory_used_bytes=newest[0], memory_total_bytes=newest[1],
                   memory_used_ratio=newest[0] / newest[1], memory_growth_bytes_per_second=growth,
                   memory_growth_r2=r2, memory_scope=f"MIG instance{'s' if len(wanted) > 1 else ''} {names}")


# --------------------------------------------------------------------------------------------- host
@dataclass(frozen=True)
class HostSignals:
    logical_cpus: int | None = None
    cpu_busy: float | None = None  # share of all CPU time not idle and not iowait
    cpu_iowait: float | None = None  # share of all CPU time in iowait (a weak signal)
    run_queue: float | None = None  # runnable tasks (/proc/stat procs_running, running and waiting), over the span
    psi: dict[str, float] = field(default_factory=dict)  # "cpu.some" -> avg10 ratio, "memory.full" ...
    memory_total_bytes: int | None = None
    memory_available_bytes: int | None = None
    major_faults_per_second: float | None = None
    shm_fill: float | None = None  # the fullest configured shm mount: used / size
    shm_mountpoint: str | None = None
    shm_available_bytes: int | None = None
    shm_size_bytes: int | None = None
    disk_busy: float | None = None  # the busiest device: share of time with I/O in flight
    disk_device: str | None = None
    disk_queue: float | None = None  # its average queue depth
    net_ratio: float | None = None  # the busiest interface: max(rx, tx) / link speed
    net_device: str | None = None
    net_bytes_per_second: float | None = None
    # the interface carrying the most bytes/s (with or without a known speed: a TCP transport reaches a fraction of
    # its line rate, so the traffic's steadiness against its own level says more), its rate and steady_share
    net_busiest_device: str | None = None
    net_busiest_bytes_per_second: float | None = None
    net_steady: float | None = None
    disk_bytes_per_second: float | None = None  # the busiest device: read + written bytes/s
    # the host's top consumers of CPU, disk I/O and memory (samples.Neighbour), newest scan; empty on a calm host
    neighbours: tuple[Neighbour, ...] = ()


def host_signals(window: Sequence[Sample], seconds: float) -> HostSignals:
    span = recent(window, seconds)
    if not span:
        return HostSignals()
    last = span[-1]
    out: dict[str, Any] = {}  # HostSignals' keyword arguments, as each is found (its constructor names them)
    cpu = last.data("cpu")
    if isinstance(cpu, CpuSample):
        out["logical_cpus"] = cpu.logical_cpus
        out["psi"] = {f"{res}.{kind}": line.avg10 for res, p in cpu.pressure.items()
                      for kind, line in (("some", p.some), ("full", p.full)) if line is not None}
        running = [c.procs_running for s in span if isinstance(c := s.data("cpu"), CpuSample)
                   and c.procs_running is not None]
        if running:  # an instant count each tick: its mean over the span
            out["run_queue"] = sum(running) / len(running)
        first = next((s.data("cpu") for s in span if isinstance(s.data("cpu"), CpuSample)), None)
        if first is not None and first is not cpu:
            a, b = first.times.modes(), cpu.times.modes()
            total = sum(b[k] - a.get(k, 0.0) for k in b if k not in ("guest", "guest_nice"))
            if total > 0:
                idle = b.get("idle", 0.0) - a.get("idle", 0.0)
                iowait = b.get("iowait", 0.0) - a.get("iowait", 0.0)
                out["cpu_busy"] = max(0.0, min(1.0, (total - idle - iowait) / total))
                out["cpu_iowait"] = max(0.0, min(1.0, iowait / total))
    mem = last.data("memory")
    if isinstance(mem, MemorySample):
        out["memory_total_bytes"] = mem.total_bytes
        out["memory_available_bytes"] = mem.available_bytes
        out["major_faults_per_second"] = _rate(
            span, lambda s: getattr(s.data("memory"), "major_faults_total", None))
    shm = last.data("shm")
    if isinstance(shm, ShmSample) and shm.mounts:
        fullest = max(shm.mounts, key=lambda m: (m.used_bytes / m.size_bytes) if m.size_bytes else 0.0)
        if fullest.size_bytes:
            out.update(shm_fill=fullest.used_bytes / fullest.size_bytes, shm_mountpoint=fullest.mountpoint,
                       shm_available_bytes=fullest.available_bytes, shm_size_bytes=fullest.size_bytes)
    disk = last.data("disk")
    if isinstance(disk, DiskSample):
        disks = _devices(span, "disk")
        best = None
        for d in disk.devices:
            busy = _device_rate(disks, d.device, "io_time_seconds")
            if busy is not None and (best is None or busy > best[0]):
                best = (min(1.0, busy), d.device)
        if best is not None:
            out.update(disk_busy=best[0], disk_device=best[1],
                       disk_queue=_device_rate(disks, best[1], "weighted_io_time_seconds"),
                       disk_bytes_per_second=_device_rate(disks, best[1], "read_bytes", "written_bytes"))
    out["neighbours"] = tuple(getattr(last.data("processes"), "neighbours", ()) or ())
    # the links a distributed job's collectives may cross: the NICs (/proc/net/dev) and the RDMA ports (RDMA
    # traffic bypasses the network stack), each with its speed, judged alike
    best_net = None
    busiest: tuple[float, str, str, list[tuple[float, dict[str, object]]]] | None = None  # (bytes/s, device, its busier direction's counter, series)
    for source in NET_SOURCES:
        devices = getattr(last.data(source), "devices", None)
        if not devices:
            continue
        nets = _devices(span, source)
        for d in devices:
            speed = getattr(d, "speed_bytes_per_second", None)
            rx = _device_rate(nets, d.device, "receive_bytes")
            tx = _device_rate(nets, d.device, "transmit_bytes")
            rate = max((v for v in (rx, tx) if v is not None), default=None)
            if rate is not None and (busiest is None or rate > busiest[0]):
                busiest = (rate, d.device, "receive_bytes" if rate == rx else "transmit_bytes", nets)
            if rate is not None and speed:
                ratio = rate / speed
                if best_net is None or ratio > best_net[0]:
                    best_net = (ratio, d.device, rate)
    if best_net is not None:
        out.update(net_ratio=best_net[0], net_device=best_net[1], net_bytes_per_second=best_net[2])
    if busiest is not None:
        rate, device, counter, nets = busiest
        points = [(t, float(v)) for t, m in nets if (v := getattr(m.get(device), counter, None)) is not None]
        out.update(net_busiest_device=device, net_busiest_bytes_per_second=rate,
                   net_steady=steady_share(interval_rates(points)))
    return HostSignals(**out)


NET_SOURCES = ("net", "infiniband")  # samples whose devices are links: receive_bytes, transmit_bytes, speed


def _devices(span: Sequence[Sample], source: str) -> list[tuple[float, dict[str, object]]]:
    """(monotonic, device name -> that device's entry) for each sample of the span with ``source``'s devices:
    one pass over the span, so each device's rate below is a dict lookup per sample, not a device scan."""
    out = []
    for s in span:
        devices = getattr(s.data(source), "devices", None)
        if devices is not None:
            out.append((s.monotonic, {d.device: d for d in devices}))
    return out


def _device_rate(maps: Sequence[tuple[float, Mapping[str, object]]], device: str, *fields: str) -> float | None:
    """Per-second increase (``_rate_of``) of one device's counter, or of the sum of several (all present)."""
    def value(d: object) -> float | None:
        if d is None:
            return None
        total = 0.0
        for name in fields:
            v = getattr(d, name, None)
            if v is None:
                return None
            total += v
        return total

    return _rate_of((t, value(m.get(device))) for t, m in maps)


# ----------------------------------------------------------------------------------------- workload
@dataclass(frozen=True)
class RankSignals:
    """One rank of a workload (a child of its torchrun/accelerate/deepspeed launcher, else a main process) and its
    DataLoader workers, measured (WorkloadProcesses.ranks): the figures that say whether this rank starves its GPU."""

    pid: int
    launched: bool  # a child of a training launcher (else the workload's main process)
    workers: int  # its DataLoader worker processes now
    cores: float | None = None  # CPU seconds per second of the rank's own process over the window
    workers_cores: float | None = None  # of its workers, summed (None: no worker has two readings yet)
    thread_cores: float | None = None  # its busiest thread, where its threads were read (it ran hot)
    thread_tid: int | None = None


@dataclass(frozen=True)
class WorkloadSignals:
    name: str
    processes: int | None = None
    cores_used: float | None = None  # CPU seconds per second of its processes over the window
    cores_allowed: float | None = None  # what it may use: cgroup quota or CPU affinity (the fewer), else logical CPUs
    dataloader_workers: int | None = None  # measured: the DataLoader workers under its ranks, summed (None: unknown)
    gpus: tuple[int, ...] = ()  # GPU indices it uses (attributed or declared)
    # its own block I/O (/proc/PID/io read_bytes + write_bytes of its processes); None when unknown
    io_bytes_per_second: float | None = None
    busiest_process_cores: float | None = None  # the CPU seconds per second of its busiest process
    busiest_process_pid: int | None = None
    busiest_is_main: bool = False  # the busiest process is one of its ranks (else, ranks unknown: its main process)
    main_thread_cores: float | None = None  # the busiest thread of the main process, where its threads were read
    main_thread_tid: int | None = None
    cgroup_pressure: Mapping[str, float] = field(default_factory=dict)  # its cgroup's PSI some avg10: cpu/memory/io
    cpu_quota_cores: float | None = None  # its cgroup's cpu.max in cores; None when unlimited or unknown
    cgroup_path: str | None = None  # relative to the cgroup v2 root, where the workload maps to one
    ranks: tuple[RankSignals, ...] = ()  # each rank's own figures, where its processes are measured
    threads: int | None = None  # threads of its processes, newest sample (running, runnable or asleep)
    # its processes' main threads (/proc/PID/schedstat) over the span: share of their runnable time spent waiting for
    # a CPU, and how many of them were runnable (on a CPU or waiting), on average; None where unread
    cpu_wait_share: float | None = None
    runnable_main_threads: float | None = None

    @property
    def runnable_threads(self) -> float | None:
        """Its runnable threads (on a CPU or waiting for one), estimated: the cores they got over the share of their
        runnable time they ran, its main threads' wait share standing in for every thread's (a fair scheduler makes
        runnable threads wait alike); None when either is unknown. A share near 1 counts as RUN_SHARE_FLOOR."""
        if self.cpu_wait_share is None or self.cores_used is None:
            return None
        return self.cores_used / max(1.0 - self.cpu_wait_share, RUN_SHARE_FLOOR)


RUN_SHARE_FLOOR = 0.05  # the least share of their runnable time threads are taken to run (runnable_threads)


def _cpu_total(w: WorkloadProcesses | CgroupStats | None) -> float | None:
    user, system = getattr(w, "cpu_user_seconds_total", None), getattr(w, "cpu_system_seconds_total", None)
    return None if user is None or system is None else user + system


_ENTRIES: dict[int, tuple[object, dict[str, WorkloadProcesses]]] = {}  # id(ProcessesSample) -> (it, its entries by name)
ENTRY_INDEXES = 1024  # ProcessesSamples whose index is kept (a window of 300 and the long span's 60, with room)


def _entry(s: Sample, name: str) -> WorkloadProcesses | None:
    """The processes collector's entry of workload ``name`` in ``s``: a dict lookup (built once per sample; with
    50 automatic workloads beside the declared ones a scan per workload and sample would cost milliseconds)."""
    data = s.data("processes")
    workloads: tuple[WorkloadProcesses, ...] | None = getattr(data, "workloads", None)
    if not workloads:
        return None
    if len(workloads) < 4:
        for w in workloads:
            if w.name == name:
                return w
        return None
    known = _ENTRIES.get(id(data))
    if known is None or known[0] is not data:
        if len(_ENTRIES) >= ENTRY_INDEXES:
            del _ENTRIES[next(iter(_ENTRIES))]
        index: dict[str, WorkloadProcesses] = {}
        for w in workloads:
            index.setdefault(w.name, w)
        known = _ENTRIES[id(data)] = (data, index)
    return known[1].get(name)


def _io_total(w: WorkloadProcesses) -> float | None:
    owner: WorkloadProcesses | CgroupStats | None
    for owner in (getattr(w, "cgroup", None), w):  # the cgroup's io.stat counts what /proc/PID/io may not
        r, wr = getattr(owner, "read_bytes_total", None), getattr(owner, "written_bytes_total", None)
        if r is not None and wr is not None:
            return float(r + wr)
    return None


def _rates(entries: Sequence[tuple[float, Mapping[int, float]]]) -> dict[int, float]:
    """id -> CPU seconds per second over the span of each counter of the newest map (process or thread): its
    growth from the oldest sample that has it to the newest (a counter that went down is a reused id: left out),
    so the cost is per id, not per id and sample."""
    if len(entries) < 2:
        return {}
    newest_t, todo = entries[-1][0], dict(entries[-1][1])
    out = {}
    for t, seen in entries[:-1]:
        if not todo:
            break
        for pid in [p for p in todo if p in seen]:
            now = todo.pop(pid)
            if newest_t > t and now >= seen[pid]:
                out[pid] = (now - seen[pid]) / (newest_t - t)
    return out


def _busiest(rates: Mapping[int, float]) -> tuple[float, int] | None:
    """(cores, id) of the highest rate: one process pinned at a core is a saturated thread (Python's GIL, a
    single-threaded decoder) whatever the workload's sum says."""
    return max(((r, pid) for pid, r in rates.items()), default=None)


def _rank_signals(entries: Sequence[tuple[float, WorkloadProcesses]], newest: WorkloadProcesses | None, rates: Mapping[int, float]
                  ) -> tuple[RankSignals, ...]:
    """Each rank of the newest entry (WorkloadProcesses.ranks) with its own process's rate, its workers' summed
    rate and, where its threads were read on two ticks of the span, its busiest thread's."""
    ranks = getattr(newest, "ranks", None) or {}
    if not ranks:
        return ()
    launched = len(ranks) > 1 or getattr(newest, "main_pid", None) not in ranks
    out = []
    for pid, workers in sorted(ranks.items()):
        known = [rates[w] for w in workers if w in rates]
        hot = [(t, th) for t, e in entries if (th := (getattr(e, "rank_thread_cpu_seconds", None) or {}).get(pid))]
        thread = _busiest(_rates(hot)) if len(hot) >= 2 else None
        out.append(RankSignals(pid=pid, launched=launched, workers=len(workers), cores=rates.get(pid),
                               workers_cores=sum(known) if known else None,
                               thread_cores=thread[0] if thread else None, thread_tid=thread[1] if thread else None))
    return tuple(out)


def workload_signals(window: Sequence[Sample], seconds: float, status: WorkloadStatus | None, profile: WorkloadProfile,
                     logical_cpus: int | None) -> WorkloadSignals:
    """Signals of one workload from its processes' counters and its attributed GPUs."""
    span = recent(window, seconds)
    entries = [(s.monotonic, e) for s in span if (e := _entry(s, profile.name)) is not None]  # one lookup a sample
    cores = _rate_of((t, _cpu_total(e)) for t, e in entries)
    newest = entries[-1][1] if entries and entries[-1][0] == span[-1].monotonic else None
    rates = _rates([(t, getattr(e, "process_cpu_seconds", None) or {}) for t, e in entries])
    busiest = _busiest(rates)
    # a rank's threads are read only on its hot ticks: their rate between the first and last of those
    ranks = _rank_signals(entries, newest, rates)
    ranked = {r.pid: r for r in ranks}
    thread = None
    if busiest is not None and busiest[1] in ranked and ranked[busiest[1]].thread_cores is not None:
        thread = (ranked[busiest[1]].thread_cores, ranked[busiest[1]].thread_tid)
    cgroup = getattr(newest, "cgroup", None)
    ran = _rate_of((t, getattr(e, "sched_run_seconds_total", None)) for t, e in entries)
    waited = _rate_of((t, getattr(e, "sched_wait_seconds_total", None)) for t, e in entries)
    runnable = None if ran is None or waited is None else ran + waited
    quota = getattr(status, "cpu_quota_cores", None) if status is not None else None
    allowed = quota if quota else (float(logical_cpus) if logical_cpus else None)
    affinity = getattr(newest, "cpus_allowed", None)  # a cpuset (Slurm, Kubernetes' static CPU manager, taskset)
    if affinity and (allowed is None or affinity < allowed):
        allowed = float(affinity)
    return WorkloadSignals(
        name=profile.name,
        processes=getattr(status, "processes", None),
        cores_used=cores,
        cores_allowed=allowed,
        # measured (attribution's: None for a serving workload without any), never the profile's declared count
        dataloader_workers=(getattr(status, "dataloader_workers", None) if status is not None
                            else getattr(newest, "dataloader_workers", None)),
        gpus=tuple(getattr(status, "gpu_indices", ()) or ()),
        io_bytes_per_second=_rate_of((t, _io_total(e)) for t, e in entries),
        busiest_process_cores=busiest[0] if busiest else None,
        busiest_process_pid=busiest[1] if busiest else None,
        busiest_is_main=busiest is not None and (busiest[1] in ranked if ranked else busiest[1] == getattr(newest, "main_pid", None)),
        main_thread_cores=thread[0] if thread else None,
        main_thread_tid=thread[1] if thread else None,
        cgroup_pressure=dict(getattr(cgroup, "pressure_some_avg10", None) or {}),
        cpu_quota_cores=quota or None,
        cgroup_path=getattr(cgroup, "path", None),
        ranks=ranks,
        threads=getattr(newest, "threads", None),
        cpu_wait_share=(waited / runnable) if runnable and waited is not None else None,
        runnable_main_threads=runnable,
    )

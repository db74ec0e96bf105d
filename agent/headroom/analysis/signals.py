"""Signals: what the window says about each GPU, the host and each workload, as plain numbers.

Pure functions of the window of Samples (and the workload statuses of the newest tick). Every value is
an average or a rate over the window's span; None when the window cannot tell (too short, unsupported).
The bottleneck rules (bottleneck.py) read only these, so each rule's inputs are explicit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from headroom.samples import CpuSample, DiskSample, GpuSample, MemorySample, NvmlSample, Sample, ShmSample

THERMAL_REASONS = ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown")
POWER_REASONS = ("sw_power_cap", "hw_power_brake_slowdown")
# PCIe bytes/s per lane per direction after line coding, by generation
PCIE_LANE_BYTES_PER_SECOND = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969.2e6, 5: 3938.5e6, 6: 7877e6}
# NVLink data bandwidth per link and direction, by NVLink generation (bytes/s): NVLink 2-4 25 GB/s, 5 50 GB/s
NVLINK_LINK_BYTES_PER_SECOND = {1: 20e9, 2: 25e9, 3: 25e9, 4: 25e9, 5: 50e9}


def recent(window: Sequence[Sample], seconds: float) -> list[Sample]:
    """The samples within ``seconds`` of the newest (at least the newest one)."""
    if not window:
        return []
    newest = window[-1].monotonic
    out = [s for s in window if newest - s.monotonic <= seconds + 1e-9]
    return out or [window[-1]]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _stdev(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def _rate(samples: Sequence[Sample], read: Callable[[Sample], float | None]) -> float | None:
    """Per-second increase of a counter over the samples that have it.

    A counter that goes down was reset (a device re-attached, a driver reloaded, a /proc counter that
    wrapped, a workload process that exited): the interval it went down in is left out, increase and
    time alike, and the rest of the window still counts. None with no interval left."""
    return _rate_of((s.monotonic, read(s)) for s in samples)


def _rate_of(points: Iterable[tuple[float, float | None]]) -> float | None:
    """_rate over (monotonic, counter or None) points."""
    increase = elapsed = 0.0
    previous = None
    for t, v in points:
        if v is None:
            continue
        if previous is not None and t > previous[0] and v >= previous[1]:
            increase += v - previous[1]
            elapsed += t - previous[0]
        previous = (t, v)
    return increase / elapsed if elapsed > 0 else None


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
    thermal_share: float = 0.0  # share of samples with a thermal slowdown reason active
    power_cap_share: float = 0.0  # share of samples with a power cap reason active
    power_ratio: float | None = None  # mean power / limit
    power_watts: float | None = None
    power_limit_watts: float | None = None
    temperature_celsius: float | None = None  # newest
    memory_used_bytes: int | None = None  # newest
    memory_total_bytes: int | None = None
    memory_used_ratio: float | None = None
    memory_growth_bytes_per_second: float | None = None
    pcie_ratio: float | None = None  # max(tx, rx) / link capability, newest
    pcie_bytes_per_second: float | None = None
    pcie_capability_bytes_per_second: float | None = None
    samples: int = 0
    sm_active: float | None = None  # mean GPM SM activity over the window (Hopper+); None without GPM
    nvlink_bytes_per_second: float | None = None  # max(tx, rx) over all active links, over the window
    nvlink_capability_bytes_per_second: float | None = None  # active links x per-link bandwidth
    nvlink_ratio: float | None = None


def _gpus_by_uuid(sample: Sample) -> dict[str, GpuSample]:
    nvml = sample.data("nvml")
    if not isinstance(nvml, NvmlSample):
        return {}
    return {g.uuid: g for g in nvml.gpus}


def _nvlink(timed: Sequence[tuple[float, GpuSample]], g: GpuSample) -> tuple[float | None, float | None]:
    """(max of tx and rx bytes/s summed over the newest sample's active links, their capability)."""
    active = [link.link for link in g.nvlink_links if link.up]
    per_link = NVLINK_LINK_BYTES_PER_SECOND.get(g.nvlink_version or 0)
    if not active:
        return None, None

    def total(direction: str) -> Callable[[tuple[float, GpuSample]], float | None]:
        def read(point: tuple[float, GpuSample]) -> float | None:
            values = {link.link: getattr(link, f"{direction}_bytes_total") for link in point[1].nvlink_links}
            if any(values.get(n) is None for n in active):
                return None
            return float(sum(values[n] for n in active))

        return read

    rates = []
    for direction in ("tx", "rx"):
        read = total(direction)
        first = next(((t, v) for t, gs in timed if (v := read((t, gs))) is not None), None)
        last = next(((t, v) for t, gs in reversed(timed) if (v := read((t, gs))) is not None), None)
        if first and last and last[0] > first[0] and last[1] >= first[1]:
            rates.append((last[1] - first[1]) / (last[0] - first[0]))
    return (max(rates) if rates else None), (per_link * len(active) if per_link else None)


def gpu_signals(window: Sequence[Sample], seconds: float) -> list[GpuSignals]:
    """One GpuSignals per GPU present in the newest sample."""
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
        thermal = sum(1 for x in series if any(x.clock_events_active.get(r) for r in THERMAL_REASONS))
        capped = sum(1 for x in series if any(x.clock_events_active.get(r) for r in POWER_REASONS))
        used = g.memory_used_bytes
        total = g.memory_total_bytes
        mem_points = [(t, gs.memory_used_bytes) for t, gs in timed if gs.memory_used_bytes is not None]
        growth = None
        if len(mem_points) >= 2 and mem_points[-1][0] > mem_points[0][0]:
            growth = (mem_points[-1][1] - mem_points[0][1]) / (mem_points[-1][0] - mem_points[0][0])
        capability = None
        if g.pcie_link_generation and g.pcie_link_width:
            lane = PCIE_LANE_BYTES_PER_SECOND.get(g.pcie_link_generation)
            capability = lane * g.pcie_link_width if lane else None
        pcie = max((v for v in (g.pcie_tx_bytes_per_second, g.pcie_rx_bytes_per_second) if v is not None),
                   default=None)
        sm_active = [x.sm_active_ratio for x in series if x.sm_active_ratio is not None]
        nvlink, nvlink_capability = _nvlink(timed, g)
        out.append(GpuSignals(
            index=g.index, uuid=uuid, name=g.name, up=True,
            busy=_mean(utils), busy_stdev=_stdev(utils), sm_clock_ratio=_mean(clocks),
            thermal_share=thermal / len(series), power_cap_share=capped / len(series),
            power_ratio=_mean(power), power_watts=g.power_watts, power_limit_watts=g.power_limit_watts,
            temperature_celsius=g.temperature_celsius,
            memory_used_bytes=used, memory_total_bytes=total,
            memory_used_ratio=(used / total) if used is not None and total else None,
            memory_growth_bytes_per_second=growth,
            pcie_ratio=(pcie / capability) if pcie is not None and capability else None,
            pcie_bytes_per_second=pcie, pcie_capability_bytes_per_second=capability,
            samples=len(series),
            sm_active=_mean(sm_active),
            nvlink_bytes_per_second=nvlink, nvlink_capability_bytes_per_second=nvlink_capability,
            nvlink_ratio=(nvlink / nvlink_capability) if nvlink is not None and nvlink_capability else None,
        ))  # fmt: skip
    return sorted(out, key=lambda s: s.index)


# --------------------------------------------------------------------------------------------- host
@dataclass(frozen=True)
class HostSignals:
    logical_cpus: int | None = None
    cpu_busy: float | None = None  # share of all CPU time not idle and not iowait
    cpu_iowait: float | None = None  # share of all CPU time in iowait (a weak signal)
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
    disk_bytes_per_second: float | None = None  # the busiest device: read + written bytes/s


def host_signals(window: Sequence[Sample], seconds: float) -> HostSignals:
    span = recent(window, seconds)
    if not span:
        return HostSignals()
    last = span[-1]
    out: dict[str, Any] = {}
    cpu = last.data("cpu")
    if isinstance(cpu, CpuSample):
        out["logical_cpus"] = cpu.logical_cpus
        out["psi"] = {f"{res}.{kind}": line.avg10 for res, p in cpu.pressure.items()
                      for kind, line in (("some", p.some), ("full", p.full)) if line is not None}
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
        best = None
        for d in disk.devices:
            busy = _rate(span, _disk_reader(d.device, "io_time_seconds"))
            if busy is not None and (best is None or busy > best[0]):
                best = (min(1.0, busy), d.device)
        if best is not None:
            out.update(disk_busy=best[0], disk_device=best[1],
                       disk_queue=_rate(span, _disk_reader(best[1], "weighted_io_time_seconds")),
                       disk_bytes_per_second=_rate(span, _disk_bytes(best[1])))
    net = last.data("net")
    devices = getattr(net, "devices", None)
    if devices:
        best_net = None
        for d in devices:
            speed = getattr(d, "speed_bytes_per_second", None)
            rx = _rate(span, _net_reader(d.device, "receive_bytes"))
            tx = _rate(span, _net_reader(d.device, "transmit_bytes"))
            rate = max((v for v in (rx, tx) if v is not None), default=None)
            if rate is not None and speed:
                ratio = rate / speed
                if best_net is None or ratio > best_net[0]:
                    best_net = (ratio, d.device, rate)
        if best_net is not None:
            out.update(net_ratio=best_net[0], net_device=best_net[1], net_bytes_per_second=best_net[2])
    return HostSignals(**out)


def _disk_reader(device: str, field_name: str) -> Callable[[Sample], float | None]:
    def read(s: Sample) -> float | None:
        disk = s.data("disk")
        if not isinstance(disk, DiskSample):
            return None
        for d in disk.devices:
            if d.device == device:
                return getattr(d, field_name)
        return None

    return read


def _disk_bytes(device: str) -> Callable[[Sample], float | None]:
    read, written = _disk_reader(device, "read_bytes"), _disk_reader(device, "written_bytes")

    def total(s: Sample) -> float | None:
        r, w = read(s), written(s)
        return None if r is None or w is None else float(r + w)

    return total


def _net_reader(device: str, field_name: str) -> Callable[[Sample], float | None]:
    def read(s: Sample) -> float | None:
        for d in getattr(s.data("net"), "devices", ()) or ():
            if d.device == device:
                return getattr(d, field_name, None)
        return None

    return read


# ----------------------------------------------------------------------------------------- workload
@dataclass(frozen=True)
class WorkloadSignals:
    name: str
    processes: int | None = None
    cores_used: float | None = None  # CPU seconds per second of its processes over the window
    cores_allowed: float | None = None  # what it may use: cgroup quota, else logical CPUs
    dataloader_workers: int | None = None  # declared
    gpus: tuple[int, ...] = ()  # GPU indices it uses (attributed or declared)
    # its own block I/O (/proc/PID/io read_bytes + write_bytes of its processes); None when unknown
    io_bytes_per_second: float | None = None
    busiest_process_cores: float | None = None  # the CPU seconds per second of its busiest process
    busiest_process_pid: int | None = None
    busiest_is_main: bool = False  # the busiest process is the workload's main process (the trainer, the server)
    main_thread_cores: float | None = None  # the busiest thread of the main process, where its threads were read
    main_thread_tid: int | None = None
    cgroup_pressure: Mapping[str, float] = field(default_factory=dict)  # its cgroup's PSI some avg10: cpu/memory/io


def _cpu_total(w: Any) -> float | None:
    user, system = getattr(w, "cpu_user_seconds_total", None), getattr(w, "cpu_system_seconds_total", None)
    return None if user is None or system is None else user + system


def _entry(s: Sample, name: str) -> Any:
    for w in getattr(s.data("processes"), "workloads", ()) or ():
        if w.name == name:
            return w
    return None


def _io_total(w: Any) -> float | None:
    for owner in (getattr(w, "cgroup", None), w):  # the cgroup's io.stat counts what /proc/PID/io may not
        r, wr = getattr(owner, "read_bytes_total", None), getattr(owner, "written_bytes_total", None)
        if r is not None and wr is not None:
            return float(r + wr)
    return None


def _busiest_process(entries: Sequence[tuple[float, Any]], field_name: str = "process_cpu_seconds"
                     ) -> tuple[float, int] | None:
    """(cores, pid) of the workload's process with the highest CPU rate over the span: one process pinned at a
    core is a saturated thread (Python's GIL, a single-threaded decoder) whatever the workload's sum says.
    Each member's rate is its counter's growth from the oldest sample that has it to the newest (a counter
    that went down is a reused pid: left out), so the cost is per member, not per member and sample."""
    if len(entries) < 2:
        return None
    newest_t, newest = entries[-1][0], getattr(entries[-1][1], field_name, None) or {}
    todo = dict(newest)
    best = None
    for t, e in entries[:-1]:
        if not todo:
            break
        seen = getattr(e, field_name, None) or {}
        for pid in [p for p in todo if p in seen]:
            now = todo.pop(pid)
            if newest_t > t and now >= seen[pid]:
                rate = (now - seen[pid]) / (newest_t - t)
                if best is None or rate > best[0]:
                    best = (rate, pid)
    return best


def workload_signals(window: Sequence[Sample], seconds: float, status: Any, profile: Any,
                     logical_cpus: int | None) -> WorkloadSignals:
    """Signals of one workload from its processes' counters and its attributed GPUs."""
    span = recent(window, seconds)
    entries = [(s.monotonic, e) for s in span if (e := _entry(s, profile.name)) is not None]  # one lookup a sample
    cores = _rate_of((t, _cpu_total(e)) for t, e in entries)
    newest = entries[-1][1] if entries and entries[-1][0] == span[-1].monotonic else None
    busiest = _busiest_process(entries)
    # the main process's threads are read only on its hot ticks: their rate between the first and last of those
    hot = [(t, e) for t, e in entries if getattr(e, "main_thread_cpu_seconds", None)]
    thread = _busiest_process(hot, "main_thread_cpu_seconds") if len(hot) >= 2 else None
    cgroup = getattr(newest, "cgroup", None)
    quota = getattr(status, "cpu_quota_cores", None) if status is not None else None
    allowed = quota if quota else (float(logical_cpus) if logical_cpus else None)
    return WorkloadSignals(
        name=profile.name,
        processes=getattr(status, "processes", None),
        cores_used=cores,
        cores_allowed=allowed,
        dataloader_workers=profile.dataloader_workers,
        gpus=tuple(getattr(status, "gpu_indices", ()) or ()),
        io_bytes_per_second=_rate_of((t, _io_total(e)) for t, e in entries),
        busiest_process_cores=busiest[0] if busiest else None,
        busiest_process_pid=busiest[1] if busiest else None,
        busiest_is_main=bool(busiest) and busiest[1] == getattr(newest, "main_pid", None),
        main_thread_cores=thread[0] if thread else None,
        main_thread_tid=thread[1] if thread else None,
        cgroup_pressure=dict(getattr(cgroup, "pressure_some_avg10", None) or {}),
    )

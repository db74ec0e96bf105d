"""A scenario's ``host:`` section: the spec types it is parsed into (``HostSpec`` with its PSI lines, disks,
network interfaces and shared-memory mounts) and ``parse_host``, which reads the section with the scenario's node
reader and fills what it leaves out with the calm defaults of docs/scenario-format.md ("Synthetic host").

host.py's ``SyntheticHost`` writes a HostSpec as a procfs/sysfs tree; the scenario parser (simulation/scenario/)
calls ``parse_host`` with its parser, which this module never imports.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from headroom.simulation.signals import Signal, constant

if TYPE_CHECKING:  # the scenario parser calls parse_host with itself; this module never imports it
    import yaml

    from headroom.simulation.scenario.nodes import NodeReader

PSI_RESOURCES = ("cpu", "memory", "io")  # the files of /proc/pressure
_SPEED = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kKMGT]?)(?:bit|b)(?:/s|ps)?\s*")
_SPEED_FACTORS = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


# ------------------------------------------------------------------------------------------ spec
@dataclass(frozen=True, slots=True)
class PsiLineSpec:
    avg10: Signal  # the share of time stalled now; its integral is the total
    avg60: Signal | None = None  # None: the kernel's exponential average of avg10 over 60 s
    avg300: Signal | None = None


@dataclass(frozen=True, slots=True)
class DiskSpec:
    name: str
    busy: Signal  # ratio of time with I/O in flight
    read: Signal  # bytes per second
    write: Signal
    queue_depth: Signal  # average requests in flight (iostat aqu-sz)
    request_size: int  # bytes per request, for the completed-request counters


@dataclass(frozen=True, slots=True)
class NicSpec:
    name: str
    speed_bytes_per_second: int | None  # None: sysfs says -1 (unknown)
    rx: Signal  # bytes per second
    tx: Signal


@dataclass(frozen=True, slots=True)
class ShmSpec:
    mountpoint: str
    size: int
    used: Signal  # bytes


@dataclass(frozen=True, slots=True)
class HostSpec:
    """A parsed ``host:`` section. Memory signals left None follow the documented defaults."""

    logical_cpus: int
    utilization: Signal
    iowait: Signal
    load: Signal | None  # None: derived from utilization, iowait and PSI cpu
    pressure: Mapping[str, tuple[PsiLineSpec, PsiLineSpec | None]]  # resource -> (some, full or None)
    memory_total: int
    memory: Mapping[str, Signal]  # available, free, cached, buffers, shmem, dirty, writeback, swap_free
    swap_total: int
    major_faults: Signal  # per second
    disks: tuple[DiskSpec, ...]
    network: tuple[NicSpec, ...]
    shm: tuple[ShmSpec, ...]
    psi: bool = True  # False: a kernel without PSI (built without CONFIG_PSI or booted psi=0): no pressure files


# --------------------------------------------------------------------------------------- parsing
_HOST_KEYS = {"cpu", "pressure", "memory", "disks", "network", "shm", "psi"}
_CPU_KEYS = {"logical_cpus", "utilization", "iowait", "load"}
_MEMORY_SIZES = ("available", "free", "cached", "buffers", "shmem", "dirty", "writeback", "swap_free")
_MEMORY_KEYS = {"total", "swap_total", "major_faults", *_MEMORY_SIZES}
_DISK_KEYS = {"name", "busy", "read", "write", "queue_depth", "request_size"}
_NIC_KEYS = {"name", "speed", "rx", "tx"}
_SHM_KEYS = {"mountpoint", "size", "used"}


def parse_link_speed(value: object) -> int | None:
    """Bytes per second from a link speed such as 25Gbit, 100Gbps, 10000Mbit/s (whole Mb/s); None for null.

    Raises ValueError for anything else (bytes are not a link speed: write bits).
    """
    if value is None:
        return None
    m = _SPEED.fullmatch(value) if isinstance(value, str) else None
    if not m:
        raise ValueError(f"invalid link speed {value!r}: expected e.g. 25Gbit, 100Gbit, 400Gbps or 10000Mbit")
    mbits = float(m.group(1)) * _SPEED_FACTORS[m.group(2)] / 1e6
    if mbits < 1 or not mbits.is_integer():
        raise ValueError(f"invalid link speed {value!r}: sysfs reports whole megabits per second (at least 1Mbit)")
    return int(mbits) * 125_000


def parse_host(p: NodeReader, node: yaml.Node, path: str = "host") -> HostSpec:
    """Parse a scenario's ``host:`` node with the scenario parser ``p`` (its errors carry file:line:column).

    Returns a HostSpec; absent keys take the calm defaults documented in docs/scenario-format.md.
    """
    top = p.mapping(node, path, _HOST_KEYS)

    def sig(section: Mapping[str, yaml.Node], key: str, sub: str, kind: str, default: float | None) -> Signal | None:
        if key in section:
            return p.signal(section[key], f"{sub}.{key}", kind)
        return None if default is None else constant(default)

    cpu = p.mapping(top["cpu"], f"{path}.cpu", _CPU_KEYS) if "cpu" in top else {}
    logical = p.integer(cpu["logical_cpus"], f"{path}.cpu.logical_cpus", minimum=1) if "logical_cpus" in cpu else 32

    pressure: dict[str, tuple[PsiLineSpec, PsiLineSpec | None]] = {}
    psi = p.mapping(top["pressure"], f"{path}.pressure", set(PSI_RESOURCES)) if "pressure" in top else {}
    for resource, calm in (("cpu", 0.01), ("memory", 0.0), ("io", 0.005)):
        rpath = f"{path}.pressure.{resource}"
        kinds = p.mapping(psi[resource], rpath, {"some", "full"}) if resource in psi else {}
        some = _psi_line(p, kinds["some"], f"{rpath}.some") if "some" in kinds else PsiLineSpec(constant(calm))
        full = _psi_line(p, kinds["full"], f"{rpath}.full") if "full" in kinds else None
        pressure[resource] = (some, full)

    psi_enabled = p.boolean(top["psi"], f"{path}.psi") if "psi" in top else True
    if not psi_enabled and "pressure" in top:
        raise p.error(top["pressure"], f"{path}.pressure", "a host with psi: false has no pressure to declare")

    mem = p.mapping(top["memory"], f"{path}.memory", _MEMORY_KEYS) if "memory" in top else {}
    mpath = f"{path}.memory"
    total = int(p.unit(mem["total"], f"{mpath}.total", "size")) if "total" in mem else 256 * 2**30
    if total <= 0:
        raise p.error(mem["total"], f"{mpath}.total", "must be > 0")
    memory = {k: p.signal(mem[k], f"{mpath}.{k}", "size") for k in _MEMORY_SIZES if k in mem}

    disks = tuple(_disk(p, n, f"{path}.disks[{i}]") for i, n in enumerate(p.sequence(top["disks"], f"{path}.disks"))) \
        if "disks" in top else (DiskSpec("nvme0n1", constant(0.02), constant(4 * 2**20), constant(2 * 2**20),
                                         constant(0.05), 128 * 2**10),)
    network = tuple(_nic(p, n, f"{path}.network[{i}]") for i, n in enumerate(p.sequence(top["network"], f"{path}.network"))) \
        if "network" in top else (NicSpec("eth0", 25_000 * 125_000, constant(8 * 2**20), constant(6 * 2**20)),)
    shm = tuple(_shm(p, n, f"{path}.shm[{i}]") for i, n in enumerate(p.sequence(top["shm"], f"{path}.shm"))) \
        if "shm" in top else (ShmSpec("/dev/shm", total // 2, constant(64 * 2**20)),)
    for what, names, items_node in (("disks", [d.name for d in disks], top.get("disks")),
                                    ("network", [n.name for n in network], top.get("network")),
                                    ("shm", [s.mountpoint for s in shm], top.get("shm"))):
        if len(set(names)) != len(names):
            raise p.error(items_node, f"{path}.{what}", "names must be unique")
    return HostSpec(
        logical_cpus=logical,
        utilization=sig(cpu, "utilization", f"{path}.cpu", "ratio", 0.10),  # type: ignore[arg-type]
        iowait=sig(cpu, "iowait", f"{path}.cpu", "ratio", 0.005),  # type: ignore[arg-type]
        load=sig(cpu, "load", f"{path}.cpu", "number", None),
        pressure=pressure,
        memory_total=total,
        memory=memory,
        swap_total=int(p.unit(mem["swap_total"], f"{mpath}.swap_total", "size")) if "swap_total" in mem else 0,
        major_faults=sig(mem, "major_faults", mpath, "number", 2.0),  # type: ignore[arg-type]
        disks=disks,
        network=network,
        shm=shm,
        psi=psi_enabled,
    )


def _psi_line(p: NodeReader, node: yaml.Node, path: str) -> PsiLineSpec:
    """A PSI line: a ratio signal (avg10; avg60/avg300 derived) or {avg10, avg60, avg300} signals."""
    import yaml

    if isinstance(node, yaml.MappingNode) and any(
        getattr(k, "value", None) in ("avg10", "avg60", "avg300") for k, _ in node.value
    ):
        m = p.mapping(node, path, {"avg10", "avg60", "avg300"}, ("avg10",))
        def average(k: str) -> Signal | None:
            return p.signal(m[k], f"{path}.{k}", "ratio") if k in m else None

        # avg10 is required; the three read in this order (the first bad one is the error)
        return PsiLineSpec(p.signal(m["avg10"], f"{path}.avg10", "ratio"), average("avg60"), average("avg300"))
    return PsiLineSpec(p.signal(node, path, "ratio"))


def _name(p: NodeReader, node: yaml.Node, path: str) -> str:
    name = p.string(node, path)
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", name):
        raise p.error(node, path, f"not a device name the kernel could use: {name!r}")
    return name


def _disk(p: NodeReader, node: yaml.Node, path: str) -> DiskSpec:
    d = p.mapping(node, path, _DISK_KEYS, ("name",))

    def s(key: str, kind: str, default: float) -> Signal:
        return p.signal(d[key], f"{path}.{key}", kind) if key in d else constant(default)

    size = int(p.unit(d["request_size"], f"{path}.request_size", "size")) if "request_size" in d else 128 * 2**10
    if size < 512:
        raise p.error(d["request_size"], f"{path}.request_size", "must be at least one 512-byte sector")
    return DiskSpec(_name(p, d["name"], f"{path}.name"), s("busy", "ratio", 0.0), s("read", "size", 0.0),
                    s("write", "size", 0.0), s("queue_depth", "number", 0.0), size)


def _nic(p: NodeReader, node: yaml.Node, path: str) -> NicSpec:
    n = p.mapping(node, path, _NIC_KEYS, ("name",))
    speed = None
    if "speed" in n:
        try:
            speed = parse_link_speed(p.scalar(n["speed"], f"{path}.speed"))
        except ValueError as exc:
            raise p.error(n["speed"], f"{path}.speed", str(exc)) from None
    rx = p.signal(n["rx"], f"{path}.rx", "size") if "rx" in n else constant(0)
    tx = p.signal(n["tx"], f"{path}.tx", "size") if "tx" in n else constant(0)
    return NicSpec(_name(p, n["name"], f"{path}.name"), speed, rx, tx)


def _shm(p: NodeReader, node: yaml.Node, path: str) -> ShmSpec:
    s = p.mapping(node, path, _SHM_KEYS, ("mountpoint", "size"))
    mountpoint = p.string(s["mountpoint"], f"{path}.mountpoint")
    if not mountpoint.startswith("/") or ".." in mountpoint.split("/") or any(c.isspace() for c in mountpoint):
        raise p.error(s["mountpoint"], f"{path}.mountpoint", f"expected an absolute path without spaces, got {mountpoint!r}")
    size = int(p.unit(s["size"], f"{path}.size", "size"))
    if size <= 0:
        raise p.error(s["size"], f"{path}.size", "must be > 0")
    used = p.signal(s["used"], f"{path}.used", "size") if "used" in s else constant(0)
    return ShmSpec(mountpoint, size, used)

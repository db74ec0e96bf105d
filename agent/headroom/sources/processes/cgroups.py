"""A workload's cgroup v2 figures under ``--path.sysfs``: ``read_cgroup`` (cpu.stat, cpu.max, memory.current,
io.stat and the pressure files into ``samples.CgroupStats``), ``cgroup_root`` and the parsers of those files."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from headroom.samples import CgroupStats
from headroom.sources import procfs


def parse_cpu_stat(text: str) -> dict[str, int]:
    """Parse a cgroup v2 cpu.stat ("usage_usec 123" lines); returns key -> value."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                raise ValueError(f"{parts[0]} is not an integer: {parts[1]!r}") from None
    return out


def parse_cpu_max(text: str) -> float | None:
    """Parse a cgroup v2 cpu.max ("QUOTA PERIOD" in microseconds, QUOTA "max" = no limit); returns cores."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if period > 0 else None


def parse_io_stat(text: str) -> tuple[int, int]:
    """Parse a cgroup v2 io.stat ("MAJ:MIN rbytes=.. wbytes=.." lines); returns (rbytes, wbytes) summed."""
    read = written = 0
    for line in text.splitlines():
        for item in line.split()[1:]:
            key, _, value = item.partition("=")
            if key == "rbytes":
                read += int(value)
            elif key == "wbytes":
                written += int(value)
    return read, written


def cgroup_root(sysfs: Path, path: str) -> Path | None:
    """The directory of cgroup ``path`` in the v2 hierarchy (``fs/cgroup``, or ``fs/cgroup/unified`` on a
    hybrid v1 host) under ``sysfs``; None when it does not exist."""
    rel = path.lstrip("/")
    for base in (sysfs / "fs" / "cgroup", sysfs / "fs" / "cgroup" / "unified"):
        d = base / rel if rel else base
        if (d / "cgroup.procs").exists() or (d / "cpu.stat").exists() or (d / "memory.current").exists():
            return d
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def read_cgroup(sysfs: Path, path: str) -> CgroupStats | None:
    """Read cpu.stat, cpu.max, memory.current, io.stat and the pressure files of a cgroup v2 cgroup.

    Returns None when the cgroup does not exist; a file that is absent (controller not enabled) or
    garbled leaves its fields None.
    """
    d = cgroup_root(sysfs, path)
    if d is None:
        return None
    user = system = None
    text = _read(d / "cpu.stat")
    if text is not None:
        try:
            cpu = parse_cpu_stat(text)
            user = cpu["user_usec"] / 1e6 if "user_usec" in cpu else None
            system = cpu["system_usec"] / 1e6 if "system_usec" in cpu else None
        except ValueError:
            pass
    quota = None
    text = _read(d / "cpu.max")
    if text is not None:
        quota = parse_cpu_max(text)
    memory = None
    text = _read(d / "memory.current")
    if text is not None and text.strip().isdigit():
        memory = int(text)
    read = written = None
    text = _read(d / "io.stat")
    if text is not None:
        try:
            read, written = parse_io_stat(text)
        except ValueError:
            pass
    pressure = {}
    for resource in procfs.PRESSURE_RESOURCES:
        text = _read(d / f"{resource}.pressure")
        if text is not None:
            try:
                pressure[resource] = procfs.parse_pressure(text).some.avg10
            except ValueError:
                pass
    return CgroupStats(path=path, cpu_user_seconds_total=user, cpu_system_seconds_total=system,
                       memory_bytes=memory, read_bytes_total=read, written_bytes_total=written,
                       pressure_some_avg10=MappingProxyType(pressure), cpu_quota_cores=quota)

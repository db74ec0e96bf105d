"""Host-wide /proc parsers (text in, typed values out; never the filesystem): /proc/stat, loadavg, pressure, meminfo,
vmstat, diskstats, net/dev, class/net/<dev>/speed (under ``--path.sysfs``) and mounts, with ``mount_usage``
(statvfs) for shm. A text that is not what the kernel writes is a ``ValueError`` with a specific message."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from headroom.samples import CpuTimes, DiskStats, MemorySample, MountUsage, NetDevice, Pressure, PressureLine

USER_HZ_DEFAULT = 100  # the value of sysconf(_SC_CLK_TCK) on every mainstream Linux architecture
SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors whatever the device's block size

# Devices /proc/diskstats lists that are not whole physical disks: partitions (sda1, vda2, xvdb1,
# nvme0n1p1, mmcblk0p1), ram/zram disks, loop devices, floppies and optical drives (sr0). Modelled on
# node_exporter's --collector.diskstats.device-exclude default, plus sr and mmcblk partitions.
# Device-mapper (dm-0), md RAID (md0) and whole disks are kept. Matched with re.search, like
# node_exporter: the pattern itself is anchored.
DEFAULT_DISK_EXCLUDE = r"^(z?ram|loop|fd|sr|(h|s|v|xv)d[a-z]+|nvme\d+n\d+p|mmcblk\d+p)\d+$"

# Network interfaces that are not the host's own links: loopback, container and VM bridges and veth
# pairs, CNI overlays (node_exporter's habits). Matched with re.search; the pattern is anchored.
DEFAULT_NET_EXCLUDE = r"^(lo|veth.*|docker.*|br-.*|virbr.*|cali.*|flannel.*|cni.*)$"

PRESSURE_RESOURCES = ("cpu", "memory", "io")

_CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")


# -------------------------------------------------------------------------------------- /proc/stat
@dataclass(frozen=True, slots=True)
class StatInfo:
    """What /proc/stat says: aggregate CPU times, online logical CPUs, run queue, boot time."""

    times: CpuTimes
    logical_cpus: int
    procs_running: int | None  # absent before 2.6.x
    procs_blocked: int | None
    boot_time: int | None  # seconds since the epoch ("btime")


_STAT_UNREAD = ("intr ", "softirq ", "ctxt ", "processes ")


def parse_stat(text: str, user_hz: int = USER_HZ_DEFAULT) -> StatInfo:
    """Parse /proc/stat; returns a StatInfo with CPU times in seconds (ticks / ``user_hz``).

    The aggregate "cpu " line has 4 fields on 2.4 kernels (user nice system idle), 7 from 2.6 (iowait
    irq softirq), 8 from 2.6.11 (steal), 9 from 2.6.24 (guest) and 10 from 2.6.33 (guest_nice); modes
    a kernel does not report are None. guest and guest_nice are ALREADY included in user and nice
    (the kernel accounts guest time twice); they are kept as read, like node_exporter exports them,
    so never add them to the others. ``logical_cpus`` counts the cpuN lines (online CPUs).
    """
    times: CpuTimes | None = None
    logical = 0
    running = blocked = btime = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith(_STAT_UNREAD):
            continue  # interrupt and softirq counts: the longest lines, never read
        parts = line.split()
        if not parts:
            continue
        key = parts[0]
        try:
            if key == "cpu":
                values = [int(v) for v in parts[1:]]
                if len(values) < 4:
                    raise ValueError(f"{len(values)} fields, at least 4 expected")
                seconds = [v / user_hz for v in values[: len(_CPU_MODES)]]
                times = CpuTimes(**dict(zip(_CPU_MODES, seconds, strict=False)))
            elif key.startswith("cpu") and key[3:].isdigit():
                logical += 1
            elif key == "procs_running":
                running = int(parts[1])
            elif key == "procs_blocked":
                blocked = int(parts[1])
            elif key == "btime":
                btime = int(parts[1])
        except (ValueError, IndexError) as exc:
            raise ValueError(f"line {lineno} ({key}): {exc}") from None
    if times is None:
        raise ValueError('no aggregate "cpu" line')
    return StatInfo(times, logical, running, blocked, btime)


def parse_loadavg(text: str) -> tuple[float, float, float]:
    """Parse /proc/loadavg; returns (load1, load5, load15)."""
    parts = text.split()
    try:
        return float(parts[0]), float(parts[1]), float(parts[2])
    except (ValueError, IndexError):
        raise ValueError(f"expected three load averages, got {text.strip()[:60]!r}") from None


# ---------------------------------------------------------------------------------------------- PSI
def parse_pressure(text: str) -> Pressure:
    """Parse one /proc/pressure/<resource> file; returns Pressure with ratios 0-1 and seconds.

    The file holds avg10/avg60/avg300 as percents and total as microseconds. The "full" line is
    absent for cpu before 5.13 (-> ``full`` None).
    """
    lines: dict[str, PressureLine] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        kind = parts[0]
        try:
            kv = dict(p.split("=", 1) for p in parts[1:])
            lines[kind] = PressureLine(
                avg10=float(kv["avg10"]) / 100.0,
                avg60=float(kv["avg60"]) / 100.0,
                avg300=float(kv["avg300"]) / 100.0,
                total_seconds=int(kv["total"]) / 1e6,
            )
        except (ValueError, KeyError) as exc:
            raise ValueError(f"bad {kind!r} line {line.strip()!r}: {exc!r}") from None
    if "some" not in lines:
        raise ValueError('no "some" line')
    return Pressure(some=lines["some"], full=lines.get("full"))


# ------------------------------------------------------------------------------------ memory, vmstat
def _parse_kv_kb(text: str) -> dict[str, int]:
    """Parse "Name:   123 kB" lines; returns name -> bytes (values without a unit stay as counts)."""
    out: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts:
            raise ValueError(f"line {lineno}: expected 'Name: value [kB]', got {line.strip()!r}")
        try:
            value = int(parts[0])
        except ValueError:
            raise ValueError(f"line {lineno}: {name} is not an integer: {parts[0]!r}") from None
        out[name.strip()] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    return out


def parse_meminfo(text: str) -> MemorySample:
    """Parse /proc/meminfo; returns a MemorySample in bytes (``major_faults_total`` None: see vmstat).

    MemAvailable appeared in 3.14: older kernels give ``available_bytes`` None (never an estimate).
    """
    kv = _parse_kv_kb(text)
    missing = [k for k in ("MemTotal", "MemFree") if k not in kv]
    if missing:
        raise ValueError(f"no {', '.join(missing)}")
    return MemorySample(
        total_bytes=kv["MemTotal"],
        available_bytes=kv.get("MemAvailable"),
        free_bytes=kv["MemFree"],
        buffers_bytes=kv.get("Buffers"),
        cached_bytes=kv.get("Cached"),
        shmem_bytes=kv.get("Shmem"),
        dirty_bytes=kv.get("Dirty"),
        writeback_bytes=kv.get("Writeback"),
        swap_total_bytes=kv.get("SwapTotal"),
        swap_free_bytes=kv.get("SwapFree"),
    )


def parse_vmstat(text: str) -> dict[str, int]:
    """Parse /proc/vmstat; returns counter name -> value (e.g. "pgmajfault": major faults since boot)."""
    out: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise ValueError(f"line {lineno}: expected 'name value', got {line.strip()!r}")
        try:
            out[parts[0]] = int(parts[1])
        except ValueError:
            raise ValueError(f"line {lineno}: {parts[0]} is not an integer: {parts[1]!r}") from None
    return out


def vmstat_counter(text: str, name: str) -> int | None:
    """One counter of /proc/vmstat (e.g. "pgmajfault"), None when the file has no such line; the other
    lines (about 180) are not parsed. ValueError, as parse_vmstat words it, when its value is not an integer."""
    at = 0 if text.startswith(name + " ") else text.find("\n" + name + " ") + 1
    if at == 0 and not text.startswith(name + " "):
        return None
    end = text.find("\n", at)
    parts = text[at:end if end >= 0 else len(text)].split()
    lineno = text.count("\n", 0, at) + 1
    if len(parts) != 2:
        raise ValueError(f"line {lineno}: expected 'name value', got {' '.join(parts)!r}")
    try:
        return int(parts[1])
    except ValueError:
        raise ValueError(f"line {lineno}: {name} is not an integer: {parts[1]!r}") from None


# --------------------------------------------------------------------------------------- diskstats
def parse_diskstats(text: str) -> list[DiskStats]:
    """Parse /proc/diskstats; returns one DiskStats per device line, in file order, unfiltered.

    Layouts: 14 fields (major minor name + 11 counters, before 4.18), 18 (+ 4 discard counters, 4.18)
    and 20 (+ 2 flush counters, 5.5). Discard fields are None on the 14-field layout. Sectors are
    always 512 bytes; times are milliseconds in the file and seconds here. The 7-field partition lines
    of 2.6.0-2.6.24 carry no timing and are skipped (partitions are excluded anyway).
    """
    out: list[DiskStats] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts or len(parts) == 7:
            continue
        if len(parts) < 14:
            raise ValueError(f"line {lineno}: {len(parts)} fields, 14, 18 or 20 expected")
        name = sys.intern(parts[2])  # one string per device for the whole window, not one per sample
        try:
            v = [int(x) for x in parts[3:]]
        except ValueError:
            raise ValueError(f"line {lineno} ({name}): non-integer counter") from None
        has_discards = len(v) >= 15
        out.append(
            DiskStats(
                device=name,
                reads_completed=v[0],
                read_bytes=v[2] * SECTOR_BYTES,
                writes_completed=v[4],
                written_bytes=v[6] * SECTOR_BYTES,
                in_flight=v[8],
                io_time_seconds=v[9] / 1000.0,
                weighted_io_time_seconds=v[10] / 1000.0,
                discards_completed=v[11] if has_discards else None,
                discarded_bytes=v[13] * SECTOR_BYTES if has_discards else None,
            )
        )
    return out


# ------------------------------------------------------------------------------------------ network
def parse_net_dev(text: str) -> list[NetDevice]:
    """Parse /proc/net/dev; returns one NetDevice per interface in file order (speed None), unfiltered.

    Two header lines, then "name: 8 receive counters 8 transmit counters" (bytes packets errs drop fifo
    frame compressed multicast | bytes packets errs drop fifo colls carrier compressed). Old kernels
    write no space after the colon once the byte counter is wide ("eth0:123456").
    """
    out: list[NetDevice] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        name, sep, rest = line.partition(":")
        if not sep or "|" in line:
            continue  # the two header lines
        name = sys.intern(name.strip())  # one string per interface for the whole window, not one per sample
        parts = rest.split()
        if not name or len(parts) < 16:
            raise ValueError(f"line {lineno}: expected 'name: 16 counters', got {line.strip()!r}")
        try:
            v = [int(x) for x in parts[:16]]
        except ValueError:
            raise ValueError(f"line {lineno} ({name}): non-integer counter") from None
        out.append(NetDevice(
            device=name,
            receive_bytes=v[0], receive_packets=v[1], receive_errors=v[2], receive_drops=v[3],
            transmit_bytes=v[8], transmit_packets=v[9], transmit_errors=v[10], transmit_drops=v[11],
        ))  # fmt: skip
    return out


def parse_net_speed(text: str) -> int | None:
    """Parse /sys/class/net/<dev>/speed (megabits per second); returns bytes per second, None when unknown.

    The kernel writes -1 (or 4294967295, SPEED_UNKNOWN as unsigned on old drivers) for virtual interfaces
    and links without a negotiated speed; 0 is no better.
    """
    try:
        mbits = int(text.strip())
    except ValueError:
        raise ValueError(f"expected megabits per second, got {text.strip()[:40]!r}") from None
    if mbits <= 0 or mbits >= 0xFFFFFFFF:
        return None
    return mbits * 1_000_000 // 8


# ------------------------------------------------------------------------------------------ mounts
class MountEntry(NamedTuple):
    device: str
    mountpoint: str
    fstype: str
    options: tuple[str, ...]


_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape_mount_field(value: str) -> str:
    """Decode the kernel's octal escapes (\\040 space, \\011 tab, \\012 newline, \\134 backslash)."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), value)


def parse_mounts(text: str) -> list[MountEntry]:
    """Parse /proc/self/mounts (or /proc/mounts); returns MountEntry per line in mount order.

    Later entries at the same mountpoint hide earlier ones (the last one is what a path resolves to).
    """
    out: list[MountEntry] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 4:
            raise ValueError(f"line {lineno}: expected 'device mountpoint fstype options ...', got {line!r}")
        device, mountpoint, fstype, options = (_unescape_mount_field(p) for p in parts[:4])
        out.append(MountEntry(device, mountpoint, sys.intern(fstype), tuple(options.split(","))))  # fstype: a label
    return out


def mount_usage(path: str | Path, *, mountpoint: str | None = None, fstype: str = "unknown") -> MountUsage:
    """statvfs ``path``; returns MountUsage in bytes labelled ``mountpoint`` (default: ``path``).

    size = blocks x frsize, used = (blocks - bfree) x frsize, available = bavail x frsize (what an
    unprivileged writer can still use; root may see more). Raises OSError when statvfs fails.
    """
    st = os.statvfs(path)
    return MountUsage(
        mountpoint=str(path) if mountpoint is None else mountpoint,
        fstype=fstype,
        size_bytes=st.f_blocks * st.f_frsize,
        used_bytes=(st.f_blocks - st.f_bfree) * st.f_frsize,
        available_bytes=st.f_bavail * st.f_frsize,
    )

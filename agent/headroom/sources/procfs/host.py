"""Pure /proc parsers (text in, typed values out) and thin readers that take a root path.

Parsers never touch the filesystem: tests feed them strings and fixture files. They raise
``ValueError`` with a specific message when the text is not what the kernel writes. Readers take the
``--path.procfs`` root (``Path("/proc")`` on a live host) and return what the parser returns; they
let ``OSError`` through, except where a missing file has a documented meaning (no PSI, vanished pid).

Host-wide: ``parse_stat``, ``parse_loadavg``, ``parse_pressure``, ``parse_meminfo``,
``parse_vmstat``, ``parse_diskstats``, ``parse_net_dev``, ``parse_mounts``; ``mount_usage`` (statvfs)
for shm. Under ``--path.sysfs``: ``parse_net_speed`` / ``read_net_speed`` (class/net/<dev>/speed).
Per process (workload attribution): ``parse_pid_stat``, ``parse_pid_status``, ``parse_pid_io``,
``parse_pid_cmdline``, ``parse_pid_cgroup`` and their ``read_pid_*`` readers, which raise
``ProcessGone`` when the pid vanished and return None when the kernel denies access.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from headroom.samples import (
    EMPTY,
    CpuTimes,
    DiskStats,
    MemorySample,
    MountUsage,
    NetDevice,
    Pressure,
    PressureLine,
)
from headroom.sources import CollectorError

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


class ProcessGone(Exception):
    """The pid exited (or was reaped) while, or before, we read its /proc entry."""


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


# ------------------------------------------------------------------------------------- per process
@dataclass(frozen=True, slots=True)
class PidStat:
    """The fields of /proc/PID/stat that attribution needs."""

    pid: int
    comm: str  # up to 15 bytes, may contain spaces and parentheses
    state: str  # R S D Z T t X I ...
    ppid: int
    utime_seconds: float
    stime_seconds: float
    num_threads: int
    starttime_ticks: int  # clock ticks after boot: (pid, starttime) identifies a process across pid reuse
    rss_pages: int  # resident pages (x os.sysconf("SC_PAGE_SIZE") for bytes)


def parse_pid_stat(text: str, user_hz: int = USER_HZ_DEFAULT) -> PidStat:
    """Parse /proc/PID/stat; returns a PidStat. comm is split off at the LAST ')'."""
    open_ = text.find("(")
    close = text.rfind(")")
    if open_ < 0 or close < open_:
        raise ValueError(f"no '(comm)' in {text[:80]!r}")
    rest = text[close + 1 :].split(None, 22)  # the fields up to rss (the 22nd after comm): the rest stays whole
    if len(rest) < 22:
        raise ValueError(f"{len(rest)} fields after comm, at least 22 expected")
    try:
        return PidStat(
            pid=int(text[:open_]),
            comm=text[open_ + 1 : close],
            state=rest[0],
            ppid=int(rest[1]),
            utime_seconds=int(rest[11]) / user_hz,
            stime_seconds=int(rest[12]) / user_hz,
            num_threads=int(rest[17]),
            starttime_ticks=int(rest[19]),
            rss_pages=int(rest[21]),
        )
    except ValueError as exc:
        raise ValueError(f"bad field in /proc/PID/stat: {exc}") from None


@dataclass(frozen=True, slots=True)
class PidStatus:
    """Useful fields of /proc/PID/status. Kernel threads and zombies have no Vm* lines (-> None)."""

    name: str
    uid: int  # real uid
    threads: int
    vm_rss_bytes: int | None
    vm_swap_bytes: int | None


def parse_pid_status(text: str) -> PidStatus:
    """Parse /proc/PID/status; returns a PidStatus (Name, real Uid, Threads, VmRSS, VmSwap)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key] = value.strip()

    def kb(key: str) -> int | None:
        value = fields.get(key)
        return None if value is None else int(value.split()[0]) * 1024

    try:
        return PidStatus(
            name=fields["Name"],
            uid=int(fields["Uid"].split()[0]),
            threads=int(fields["Threads"]),
            vm_rss_bytes=kb("VmRSS"),
            vm_swap_bytes=kb("VmSwap"),
        )
    except (KeyError, ValueError, IndexError) as exc:
        raise ValueError(f"bad /proc/PID/status: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class PidIo:
    """/proc/PID/io counters in bytes. read/write_bytes hit the block layer; rchar/wchar are syscalls."""

    rchar: int
    wchar: int
    read_bytes: int
    write_bytes: int


@dataclass(frozen=True, slots=True)
class PidSchedstat:
    """/proc/PID/schedstat of the process's main thread (the kernel keeps it per thread, CONFIG_SCHED_INFO): seconds it
    ran on a CPU and seconds it waited runnable on a run queue for one."""

    run_seconds: float
    wait_seconds: float


def parse_pid_schedstat(text: str) -> PidSchedstat:
    """Parse /proc/PID/schedstat ("<ran ns> <waited ns> <timeslices>"); returns a PidSchedstat."""
    fields = text.split()
    if len(fields) < 2:
        raise ValueError(f"/proc/PID/schedstat has {len(fields)} fields, not 3: {text.strip()[:40]!r}")
    try:
        return PidSchedstat(int(fields[0]) / 1e9, int(fields[1]) / 1e9)
    except ValueError:
        raise ValueError(f"/proc/PID/schedstat is not integers: {text.strip()[:40]!r}") from None


def parse_pid_io(text: str) -> PidIo:
    """Parse /proc/PID/io; returns a PidIo."""
    kv: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            try:
                kv[key.strip()] = int(value)
            except ValueError:
                raise ValueError(f"{key.strip()} is not an integer: {value.strip()!r}") from None
    try:
        return PidIo(kv["rchar"], kv["wchar"], kv["read_bytes"], kv["write_bytes"])
    except KeyError as exc:
        raise ValueError(f"no {exc.args[0]} in /proc/PID/io") from None


def parse_pid_cmdline(data: bytes) -> list[str]:
    """Parse /proc/PID/cmdline (NUL-separated, usually NUL-terminated); returns argv.

    Empty for kernel threads and zombies. Undecodable bytes survive as surrogate escapes.
    """
    if not data:
        return []
    if data.endswith(b"\0"):
        data = data[:-1]
    return [arg.decode("utf-8", "surrogateescape") for arg in data.split(b"\0")]


@dataclass(frozen=True, slots=True)
class PidCgroups:
    """/proc/PID/cgroup: the cgroup v2 path (the "0::" line) and the v1 controller -> path map."""

    unified: str | None  # e.g. "/system.slice/vllm.service"; None on a pure v1 host
    controllers: Mapping[str, str] = field(default_factory=lambda: EMPTY)  # "memory" -> "/docker/abc"; "name=systemd" too


def parse_pid_cgroup(text: str) -> PidCgroups:
    """Parse /proc/PID/cgroup ("hierarchy-id:controllers:path" lines); returns PidCgroups."""
    unified: str | None = None
    controllers: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(":", 2)
        if len(parts) != 3:
            raise ValueError(f"expected 'id:controllers:path', got {line!r}")
        hierarchy, names, path = parts
        if hierarchy == "0" and names == "":
            unified = path
        else:
            for name in names.split(","):
                controllers[name] = path
    return PidCgroups(unified, MappingProxyType(controllers))


# ------------------------------------------------------------------------------------ kept files
def is_live_procfs(root: str | Path) -> bool:
    """True when ``root`` is a live procfs mounted for the agent's own pid namespace (its ``self`` names
    the agent's pid)."""
    try:
        return os.readlink(os.path.join(root, "self")) == str(os.getpid())
    except OSError:
        return False


class ProcFile:
    """One /proc or /sys file that a collector reads whole on every tick.

    ``keep``: the descriptor stays open and every read starts again at offset 0 (pread): procfs and sysfs
    regenerate a file's text when it is read from offset 0 (seq_file and kernfs restart at position 0), so
    this reads what a fresh open would, without the open, fstat and close (and Python's file object) each
    time. Only for a live procfs or sysfs: in a tree of plain files (fixtures) a file replaced by another
    would keep being read through the old descriptor, so there every read opens the path again. A failed
    read closes the descriptor: the next one opens the path afresh (a sysfs attribute of a device that went
    away answers ENODEV through its old descriptor; the path then tells what is there now).

    Errors are the OSErrors of open and read, as with ``Path.read_text``.
    """

    __slots__ = ("path", "keep", "_fd", "_chunk")

    def __init__(self, path: str | Path, keep: bool) -> None:
        self.path = str(path)
        self.keep = keep
        self._fd: int | None = None
        self._chunk = 4096  # grows to the file's size, so one read usually takes it all

    def read(self) -> bytes:
        """The file's whole content, read from offset 0 until end of file."""
        fd = self._fd
        if fd is None:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            if self.keep:
                self._fd = fd
        try:
            data = os.pread(fd, self._chunk, 0)
            if data:  # a seq_file may stop short of the requested size before its end: read until 0 bytes
                more = os.pread(fd, self._chunk, len(data))
                if more:
                    parts = [data, more]
                    while more:
                        more = os.pread(fd, self._chunk, sum(map(len, parts)))
                        parts.append(more)
                    data = b"".join(parts)
                    self._chunk = max(self._chunk, 1 << len(data).bit_length())
        except OSError:
            if self.keep:
                self.close()
            raise
        finally:
            if not self.keep:
                os.close(fd)
        return data

    def text(self, errors: str = "strict") -> str:
        """``read()`` decoded as UTF-8 (``errors`` as for bytes.decode: a bad byte raises ValueError)."""
        return self.read().decode("utf-8", errors)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:  # a collector dropped without close() (tests, a reload) leaks no descriptor
        try:
            self.close()
        except Exception:  # interpreter shutdown: os may be gone already
            pass


# ----------------------------------------------------------------------------------------- readers
def read_failure(path: Path, exc: Exception) -> CollectorError:
    """Returns the CollectorError a collector raises when reading or parsing ``path`` failed.

    "cannot read /proc/stat: No such file or directory" for an OSError, "cannot parse /proc/stat:
    <what>" for a ValueError from a parser.
    """
    if isinstance(exc, OSError):
        return CollectorError(f"cannot read {path}: {exc.strerror or exc}")
    return CollectorError(f"cannot parse {path}: {exc}")


def read_pressure(procfs: Path) -> dict[str, Pressure]:
    """Read <procfs>/pressure/{cpu,memory,io}; returns resource -> Pressure for those present.

    Empty when the kernel has no PSI (no /proc/pressure before 4.20 or without CONFIG_PSI); a file
    that exists but fails with EOPNOTSUPP (booted with psi=0) counts as absent too.
    """
    return read_pressure_files({r: ProcFile(procfs / "pressure" / r, keep=False) for r in PRESSURE_RESOURCES})


def _psi_absent(exc: OSError) -> bool:
    """A PSI file that is missing (no PSI before 4.20 or without CONFIG_PSI) or EOPNOTSUPP (booted psi=0)."""
    return isinstance(exc, FileNotFoundError) or exc.errno == errno.EOPNOTSUPP


def read_pressure_files(files: Mapping[str, ProcFile]) -> dict[str, Pressure]:
    """``read_pressure`` through kept files (resource -> ProcFile of <procfs>/pressure/<resource>)."""
    out: dict[str, Pressure] = {}
    for resource, f in files.items():
        try:
            text = f.text()
        except OSError as exc:
            if _psi_absent(exc):
                continue
            raise
        out[resource] = parse_pressure(text)
    return out


def read_net_dev(procfs: Path) -> list[NetDevice]:
    """Read and parse <procfs>/net/dev (the network namespace of the reading process). A device name
    that is not UTF-8 is kept with its bad bytes written as ``\\xNN`` (it affects only that device)."""
    return parse_net_dev((procfs / "net" / "dev").read_text(encoding="utf-8", errors="backslashreplace"))


def net_speed(f: ProcFile) -> int | None:
    """``read_net_speed`` through a kept file (<sysfs>/class/net/<device>/speed)."""
    try:
        return parse_net_speed(f.text())
    except (OSError, ValueError):
        return None


def read_net_speed(sysfs: Path, device: str) -> int | None:
    """Read <sysfs>/class/net/<device>/speed; returns bytes per second, None when absent or unknown.

    Reading it fails with EINVAL while the link is down, and virtual interfaces may lack the file:
    both mean "unknown", as does text the parser rejects.
    """
    return net_speed(ProcFile(sysfs / "class" / "net" / device / "speed", keep=False))


def read_mounts(procfs: Path) -> list[MountEntry]:
    """Read and parse <procfs>/self/mounts, falling back to <procfs>/mounts (kernels before 2.6.25)."""
    try:
        text = (procfs / "self" / "mounts").read_text(errors="surrogateescape")
    except FileNotFoundError:
        text = (procfs / "mounts").read_text(errors="surrogateescape")
    return parse_mounts(text)


def _pid_read_error(exc: OSError, pid: int, path: str) -> None:
    """Returns for a denied read (PermissionError: the caller's None); raises ProcessGone for a vanished pid
    (ENOENT, ESRCH: what a kept descriptor answers once its process was reaped), the OSError itself otherwise."""
    if isinstance(exc, PermissionError):
        return
    if isinstance(exc, (FileNotFoundError, ProcessLookupError)) or exc.errno == errno.ESRCH:
        raise ProcessGone(f"pid {pid} is gone ({path}: {exc.strerror})") from None
    raise exc


def _read_record(fd: int) -> bytes:
    """A /proc/PID file of one record (stat, status, io, cgroup: seq_file single_open, or a plain file in a
    fixture tree) from offset 0: a read that did not fill the buffer had all of it, a full one reads on."""
    data = os.pread(fd, 4096, 0)
    if len(data) == 4096:
        parts = [data]
        while parts[-1]:
            parts.append(os.pread(fd, 65536, sum(map(len, parts))))
        data = b"".join(parts)
    return data


class PidFiles:
    """The /proc/PID files of one process that a collector reads on every tick (stat, io), each opened once and
    read again from offset 0 (pread: procfs regenerates the record), without the open and close each time.

    A kept descriptor belongs to that process instance: once it is reaped, a read answers ESRCH
    (ProcessGone), never what a process that reused the pid holds. Only for a live procfs: in a tree of plain
    files (fixtures) a file replaced by another would keep being read through the old descriptor. A failed
    read closes that file's descriptor (the caller forgets a gone process, and stops reading a denied file)."""

    __slots__ = ("root", "pid", "_fds")

    def __init__(self, root: str | Path, pid: int) -> None:
        self.root, self.pid = str(root), pid
        self._fds: dict[str, int] = {}

    def text(self, name: str) -> str | None:
        """The file's text; None if access is denied; raises ProcessGone if the process is gone."""
        fd = self._fds.get(name)
        try:
            if fd is None:
                fd = self._fds[name] = os.open(f"{self.root}/{self.pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
            data = _read_record(fd)
        except OSError as exc:
            self._close(name)
            _pid_read_error(exc, self.pid, f"{self.root}/{self.pid}/{name}")
            return None
        return data.decode("utf-8", "surrogateescape")

    def stat(self, user_hz: int = USER_HZ_DEFAULT) -> PidStat | None:
        text = self.text("stat")
        return None if text is None else parse_pid_stat(text, user_hz)

    def io(self) -> PidIo | None:
        text = self.text("io")
        return None if text is None else parse_pid_io(text)

    def schedstat(self) -> PidSchedstat | None:
        text = self.text("schedstat")
        return None if text is None else parse_pid_schedstat(text)

    @property
    def open_descriptors(self) -> int:
        return len(self._fds)

    def _close(self, name: str) -> None:
        fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for name in list(self._fds):
            self._close(name)

    def __del__(self) -> None:  # dropped without close() (tests, a reload): no descriptor leaks
        try:
            self.close()
        except Exception:  # interpreter shutdown: os may be gone already
            pass


def _read_pid_file(procfs: Path, pid: int, name: str, binary: bool = False,
                   limit: int = -1) -> str | bytes | None:
    """Read <procfs>/<pid>/<name> (binary: at most ``limit`` bytes); raises ProcessGone if the pid
    vanished, None if access is denied. One open, reads until end of file (or ``limit``), one close: no
    Python file object, which costs more than the read for files of a few hundred bytes."""
    path = f"{procfs}/{pid}/{name}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if binary and limit >= 0:  # argv (at discovery only): read until the limit or the end
                data = os.read(fd, limit)
                while 0 < len(data) < limit:
                    more = os.read(fd, limit - len(data))
                    if not more:
                        break
                    data += more
            else:  # stat, status, io and cgroup: one record each
                data = _read_record(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        _pid_read_error(exc, pid, path)
        return None
    return data if binary else data.decode("utf-8", "surrogateescape")


def read_pid_stat(procfs: Path, pid: int, user_hz: int = USER_HZ_DEFAULT) -> PidStat | None:
    """Read /proc/PID/stat; returns PidStat, None if denied; raises ProcessGone if the pid vanished."""
    text = _read_pid_file(procfs, pid, "stat")
    return None if text is None else parse_pid_stat(str(text), user_hz)


def read_pid_status(procfs: Path, pid: int) -> PidStatus | None:
    """Read /proc/PID/status; returns PidStatus, None if denied; raises ProcessGone if it vanished."""
    text = _read_pid_file(procfs, pid, "status")
    return None if text is None else parse_pid_status(str(text))


def read_pid_io(procfs: Path, pid: int) -> PidIo | None:
    """Read /proc/PID/io; returns PidIo, None if denied (other users' pids); ProcessGone if vanished."""
    text = _read_pid_file(procfs, pid, "io")
    return None if text is None else parse_pid_io(str(text))


def read_pid_schedstat(procfs: Path, pid: int) -> PidSchedstat | None:
    """Read /proc/PID/schedstat; returns PidSchedstat, None if denied; raises ProcessGone if vanished."""
    text = _read_pid_file(procfs, pid, "schedstat")
    return None if text is None else parse_pid_schedstat(str(text))


def read_pid_cmdline(procfs: Path, pid: int, limit: int = -1) -> list[str] | None:
    """Read /proc/PID/cmdline (its first ``limit`` bytes when given; the last argument may be cut);
    returns argv, None if denied; raises ProcessGone if the pid vanished."""
    data = _read_pid_file(procfs, pid, "cmdline", binary=True, limit=limit)
    return None if data is None else parse_pid_cmdline(bytes(data))  # type: ignore[arg-type]


def read_pid_cgroup(procfs: Path, pid: int) -> PidCgroups | None:
    """Read /proc/PID/cgroup; returns PidCgroups, None if denied; raises ProcessGone if it vanished."""
    text = _read_pid_file(procfs, pid, "cgroup")
    return None if text is None else parse_pid_cgroup(str(text))

"""Per-process /proc/PID parsers (workload attribution): stat, status, io, schedstat, cmdline and cgroup into
``PidStat``, ``PidStatus``, ``PidIo``, ``PidSchedstat``, argv and ``PidCgroups``; and ``ProcessGone``, what a reader
raises for a pid that exited. Text in, typed values out: never the filesystem."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from headroom.samples import EMPTY
from headroom.sources.procfs.host import USER_HZ_DEFAULT


class ProcessGone(Exception):
    """The pid exited (or was reaped) while, or before, we read its /proc entry."""


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

"""Readers that take the ``--path.procfs`` (or ``--path.sysfs``) root and return what the parsers return: kept files
(``ProcFile``, ``PidFiles``: a descriptor opened once, read again from offset 0), the host-wide readers
(``read_pressure``, ``read_net_dev``, ``read_net_speed``, ``read_mounts``, ``read_failure``) and the
``read_pid_*`` readers, which raise ``ProcessGone`` when the pid vanished and return None when the kernel denies
access. They let ``OSError`` through, except where a missing file has a documented meaning (no PSI, vanished pid)."""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from pathlib import Path

from headroom.samples import NetDevice, Pressure
from headroom.sources import CollectorError
from headroom.sources.procfs.host import (
    PRESSURE_RESOURCES,
    USER_HZ_DEFAULT,
    MountEntry,
    parse_mounts,
    parse_net_dev,
    parse_net_speed,
    parse_pressure,
)
from headroom.sources.procfs.pid import (
    PidCgroups,
    PidIo,
    PidSchedstat,
    PidStat,
    PidStatus,
    ProcessGone,
    parse_pid_cgroup,
    parse_pid_cmdline,
    parse_pid_io,
    parse_pid_schedstat,
    parse_pid_stat,
    parse_pid_status,
)


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

    @property
    def descriptor(self) -> int | None:
        """The descriptor kept open between reads (``keep``), or None: none is open (PidFiles.open_descriptors)."""
        return self._fd

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

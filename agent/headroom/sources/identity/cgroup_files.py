"""Cgroup files: an identity's figures read from its cgroup directory (cgroup v2's cpu.stat, memory.current,
pids.current, cpu.max, io.stat and PSI, or their v1 equivalents in each controller's hierarchy: ``_CgroupDir``,
``read_identity_cgroup``), its member processes (``list_members``), and which identities' directories the tick
reads (``_CgroupReads``, the collector's part that opens them and spreads their refreshes over
CGROUP_REFRESH_SECONDS).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from headroom.samples import EMPTY, CgroupStats
from headroom.sources import SourceContext, procfs
from headroom.sources.cpu import clock_ticks_per_second
from headroom.sources.processes import parse_cpu_max, parse_io_stat

# an identity's cgroup v2 files: CPU, memory and processes (every refresh), its limit, I/O and pressure (the same
# figures a declared workload's cgroup gives, sources/processes.read_cgroup)
_STAT_FILES = ("cpu.stat", "memory.current", "pids.current", "cpu.max", "io.stat", "cpu.pressure",
               "memory.pressure", "io.pressure")
# their cgroup v1 equivalents, each in its own hierarchy at the identity's path there (Slurm's task/cgroup and
# Docker's cgroupfs driver use the same path in every controller): file -> (hierarchy under fs/cgroup)
_V1_FILES = {"cpuacct.stat": "cpuacct", "memory.usage_in_bytes": "memory", "pids.current": "pids",
             "cpu.cfs_quota_us": "cpu", "cpu.cfs_period_us": "cpu", "blkio.throttle.io_service_bytes": "blkio"}


# an identity's cgroup files are read when it appears, then again within CGROUP_REFRESH_SECONDS of ticks (the ones
# read longest ago first, as many a tick as that takes), and every tick while there are no more than
# CGROUP_EVERY_TICK identities: 50 pods cost 5 reads a tick instead of 50 (docs/workload-identity.md). cAdvisor,
# which the kubelet's own container metrics come from, reads them every 10 to 15 s. Its member processes
# (cgroup.procs of its cgroup and every cgroup below) are listed at the same reads
CGROUP_REFRESH_SECONDS = 10.0
CGROUP_EVERY_TICK = 5
MEMBER_PIDS = 4096  # member processes listed per identity (the lowest directories first are not preferred: walk order)
MEMBER_DIRS = 256  # cgroup directories walked per identity (its own and those below: a pod's containers, a job's
# steps and tasks)
OPEN_CGROUP_DIRS = 64  # identity cgroups whose files are kept open (up to 8 descriptors each); the rest are read by path


@dataclass(slots=True)
class _CgroupDir:
    """An identity cgroup's files (of _STAT_FILES, or _V1_FILES on a cgroup v1 hierarchy: those it has; a
    controller that is not enabled there has none, and is not asked for every tick), kept open while the
    identity lives and read again from their start at each refresh (one pread instead of a walk down the
    cgroup's long path, an open and a close: cgroupfs regenerates a file's text at offset 0), for the first
    OPEN_CGROUP_DIRS identities on a live kernel; later ones, and fixture trees, are read by path (the cap allows
    10 000 identities, descriptors are fewer). ``path`` is the directory whose tree lists its member processes."""

    path: str
    files: dict[str, str]  # file -> its path (v2: in ``path``; v1: in its controller's hierarchy)
    fds: dict[str, int]  # file -> open descriptor ({} : read by path)
    cgroup: str = ""  # the identity's cgroup path (relative to its hierarchy's root), as CgroupStats.path says it
    v1: bool = False
    stats: CgroupStats | None = None  # what the last read found (kept, the same object, until the next read)
    processes: int | None = None
    members: tuple[int, ...] = ()  # the processes in its cgroup and every cgroup below, at the last read
    read_at: int = -1  # the collector's tick of that read (-1: never read)
    owners: set[tuple[str, str]] = field(default_factory=set)  # the identities that show these figures

    @classmethod
    def open(cls, directory: str, keep_open: bool, cgroup: str = "",
             files: Mapping[str, str] | None = None, v1_base: str = "") -> _CgroupDir:
        """The cgroup v2 directory ``directory`` (``files`` None), or a v1 identity listed in ``directory`` with
        its ``files`` in their hierarchies. ``v1_base`` (the v1 mounts of a hybrid host, ``fs/cgroup``): a v2
        directory's figures that its hierarchy lacks (no memory controller in a hybrid host's unified tree) are
        read from the v1 hierarchies at the same path (``v1/<file>``)."""
        v1 = files is not None
        wanted = dict(files) if files is not None else {name: f"{directory}/{name}" for name in _STAT_FILES}
        if v1_base and files is None:
            wanted.update({f"v1/{name}": f"{v1_base}/{hierarchy}{cgroup}/{name}"
                           for name, hierarchy in _V1_FILES.items()})
        found, fds = {}, {}
        for name, path in wanted.items():
            if not keep_open or name.startswith("v1/"):  # a hybrid host's v1 figures: read by path (descriptors)
                if os.path.exists(path):
                    found[name] = path
                continue
            try:
                fds[name] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            except OSError:  # out of descriptors, or denied: read by path, as later ones are
                pass
            found[name] = path
        return cls(directory, found, fds, cgroup, v1)

    def refresh(self, tick: int) -> bool:
        """Read the files again (``stats``, ``processes`` and ``members``; the previous objects are kept when
        equal); True when they changed. The members are listed again only when the cgroup's CPU or process count
        moved since the last read (or either is unknown): a process cannot join a cgroup, or leave it, without
        one of them moving (it runs there, and ``pids.current`` counts it), so an idle pod costs its files'
        reads and no walk of its tree."""
        stats, processes = read_identity_cgroup(self, self.cgroup)
        last = self.stats
        if self.read_at < 0 or processes is None or processes != self.processes or stats is None or last is None \
                or stats.cpu_user_seconds_total is None \
                or stats.cpu_user_seconds_total != last.cpu_user_seconds_total \
                or stats.cpu_system_seconds_total != last.cpu_system_seconds_total:
            members = list_members(self.path)
        else:
            members = self.members
        self.read_at = tick
        if processes == self.processes and stats == self.stats and members == self.members:
            return False
        self.stats, self.processes = stats, processes
        self.members = members
        return True

    def read(self, name: str) -> str | None:
        """A small kernel file's text from its start, or None when absent or unreadable (the cgroup removed)."""
        fd = self.fds.get(name)
        try:
            if fd is not None:
                return os.pread(fd, 4096, 0).decode("ascii", "replace")
            path = self.files.get(name)
            if path is None:
                return None
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return os.read(fd, 4096).decode("ascii", "replace")
        except OSError:
            return None
        finally:
            os.close(fd)

    def close(self) -> None:
        fds, self.fds = self.fds, {}
        for fd in fds.values():
            os.close(fd)


def list_members(directory: str) -> tuple[int, ...]:
    """The processes (ascending pids) in cgroup ``directory`` and every cgroup below it (a pod's containers, a
    Slurm job's steps and tasks): each directory's ``cgroup.procs`` (cgroup v2, and v1, where it lists thread
    group leaders; where a v1 hierarchy has only ``tasks``, its thread ids, of which a thread group leader's id is
    its process's). At most MEMBER_DIRS directories and MEMBER_PIDS processes; () when unreadable (the cgroup
    removed)."""
    found: set[int] = set()
    todo, walked = [directory], 0
    while todo and walked < MEMBER_DIRS and len(found) < MEMBER_PIDS:
        d = todo.pop()
        walked += 1
        try:
            with os.scandir(d) as entries:
                subdirs = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        todo.extend(sorted(subdirs, reverse=True))
        text = None
        for name in ("cgroup.procs", "tasks"):
            try:
                fd = os.open(f"{d}/{name}", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                chunks = []
                while chunk := os.read(fd, 65536):
                    chunks.append(chunk)
                text = b"".join(chunks)
            except OSError:
                text = None
            finally:
                os.close(fd)
            if text is not None:
                break
        if text:
            found.update(int(x) for x in text.split() if x.isdigit())
    return tuple(sorted(found)[:MEMBER_PIDS])


def _cgroup_dir(sysfs: str, path: str, first: int = 0) -> str | None:
    """The directory of cgroup ``path`` in the v2 hierarchy (``fs/cgroup``, or ``fs/cgroup/unified`` on a hybrid
    v1 host) under ``sysfs``; None when it does not exist. processes.cgroup_root with strings: it runs in the
    tick for each new identity. ``first``: the base to try first (1: unified, where the last one was)."""
    rel = path.lstrip("/")
    bases = (f"{sysfs}/fs/cgroup", f"{sysfs}/fs/cgroup/unified")
    for base in bases[first:] + bases[:first]:
        d = f"{base}/{rel}" if rel else base
        if os.path.exists(f"{d}/cgroup.procs") or os.path.exists(f"{d}/cpu.stat") \
                or os.path.exists(f"{d}/memory.current"):
            return d
    return None


def _cpu_seconds(text: str) -> tuple[float | None, float | None]:
    """(user, system) seconds from a cgroup v2 cpu.stat (``user_usec N`` lines; the kernel writes them
    second and third); None for a field that is absent or not a number. Two searches, not a split of every
    line: it runs for every automatic workload every tick."""
    return _usec(text, "user_usec "), _usec(text, "system_usec ")


def _usec(text: str, key: str) -> float | None:
    """The number after ``key`` at the start of a line of ``text``, in seconds (from microseconds)."""
    if text.startswith(key):
        start = len(key)
    else:
        at = text.find("\n" + key)
        if at < 0:
            return None
        start = at + 1 + len(key)
    end = text.find("\n", start)
    try:
        return int(text[start:end] if end >= 0 else text[start:]) / 1e6
    except ValueError:
        return None


def read_identity_cgroup(directory: _CgroupDir, path: str) -> tuple[CgroupStats | None, int | None]:
    """(its CgroupStats, pids.current) of an identity's cgroup: cgroup v2's cpu.stat, memory.current, cpu.max,
    io.stat and PSI, or cgroup v1's equivalents (cpuacct.stat, memory.usage_in_bytes, cpu.cfs_quota_us /
    cfs_period_us, blkio.throttle.io_service_bytes; v1 has no PSI); a file it lacks leaves its field None."""
    if directory.v1:
        return _read_v1(directory, path)
    cpu = directory.read("cpu.stat")
    memory = directory.read("memory.current")
    if cpu is None and memory is None:
        return None, None
    stats, processes = _read_v2(directory, path, cpu, memory)
    if any(name.startswith("v1/") for name in directory.files):
        # a hybrid host: what its unified tree has no controller for, from the v1 hierarchies at the same path
        v1, v1_processes = _read_v1(directory, path, "v1/")
        if v1 is not None:
            stats = replace(stats, **{f: getattr(v1, f) for f in _V1_FILLED if getattr(stats, f) is None})
        processes = processes if processes is not None else v1_processes
    return stats, processes


_V1_FILLED = ("cpu_user_seconds_total", "cpu_system_seconds_total", "memory_bytes", "read_bytes_total",
              "written_bytes_total", "cpu_quota_cores")


def _read_v2(directory: _CgroupDir, path: str, cpu: str | None, memory: str | None
             ) -> tuple[CgroupStats, int | None]:
    user, system = _cpu_seconds(cpu) if cpu is not None else (None, None)
    memory_bytes = int(memory) if memory is not None and memory.strip().isdigit() else None
    pids = directory.read("pids.current")
    processes = int(pids) if pids is not None and pids.strip().isdigit() else None
    quota = text = None
    if (text := directory.read("cpu.max")) is not None:
        quota = parse_cpu_max(text)
    read = written = None
    if (text := directory.read("io.stat")) is not None:
        try:
            read, written = parse_io_stat(text)
        except ValueError:
            pass
    pressure = {}
    for resource in procfs.PRESSURE_RESOURCES:
        if (text := directory.read(f"{resource}.pressure")) is not None and (avg := _some_avg10(text)) is not None:
            pressure[resource] = avg
    return CgroupStats(path=path, cpu_user_seconds_total=user, cpu_system_seconds_total=system,
                       memory_bytes=memory_bytes, read_bytes_total=read, written_bytes_total=written,
                       pressure_some_avg10=MappingProxyType(pressure) if pressure else EMPTY,
                       cpu_quota_cores=quota), processes


def _some_avg10(text: str) -> float | None:
    """The "some avg10" of a PSI file as a ratio (``some avg10=1.50 ...`` -> 0.015); None when garbled. One slice
    where the kernel's layout is the usual one (the whole file parsed otherwise): identities' figures are read
    every tick."""
    if text.startswith("some avg10="):
        end = text.find(" ", 11)
        try:
            return float(text[11:end]) / 100.0
        except ValueError:
            pass
    try:
        return procfs.parse_pressure(text).some.avg10
    except ValueError:
        return None


def _read_v1(directory: _CgroupDir, path: str, key: str = "") -> tuple[CgroupStats | None, int | None]:
    """A cgroup v1 identity's figures (``key``: the prefix its files have in ``directory.files``)."""
    user = system = None
    if (text := directory.read(f"{key}cpuacct.stat")) is not None:  # "user N\nsystem N" in USER_HZ ticks
        ticks = {k: v for k, _, v in (line.partition(" ") for line in text.splitlines())}
        hz = clock_ticks_per_second()
        try:
            user = int(ticks["user"]) / hz if "user" in ticks else None
            system = int(ticks["system"]) / hz if "system" in ticks else None
        except ValueError:
            user = system = None
    memory = directory.read(f"{key}memory.usage_in_bytes")
    memory_bytes = int(memory) if memory is not None and memory.strip().isdigit() else None
    pids = directory.read(f"{key}pids.current")
    processes = int(pids) if pids is not None and pids.strip().isdigit() else None
    quota = None
    q, period = directory.read(f"{key}cpu.cfs_quota_us"), directory.read(f"{key}cpu.cfs_period_us")
    if q is not None and period is not None:
        quota = parse_cpu_max(f"{q.strip() if q.strip() != '-1' else 'max'} {period.strip()}")
    read = written = None
    if (text := directory.read(f"{key}blkio.throttle.io_service_bytes")) is not None:  # "MAJ:MIN Read N" lines
        read = written = 0
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[2].isdigit():
                if parts[1] == "Read":
                    read += int(parts[2])
                elif parts[1] == "Write":
                    written += int(parts[2])
    if user is None and memory_bytes is None and processes is None:
        return None, None
    return CgroupStats(path=path, cpu_user_seconds_total=user, cpu_system_seconds_total=system,
                       memory_bytes=memory_bytes, read_bytes_total=read, written_bytes_total=written,
                       cpu_quota_cores=quota), processes


class _CgroupReads:
    """The identity collector's reads of its identities' cgroup directories (a mixin of ``IdentityCollector``, whose
    ``__init__`` sets this state)."""

    ctx: SourceContext
    _dirs: dict[str, _CgroupDir]  # identity cgroup -> its directory, while the identity lives
    _dirs_seen: set[str]  # the cgroups of this tick's identities
    _keep_cgroup_files: bool  # files kept open (a live kernel's trees only)
    _open_dirs: int  # of _dirs, those whose files are kept open
    _unified: int  # 1: the last identity's cgroup was under fs/cgroup/unified (a hybrid host): look there first
    _tick: int
    refresh_ticks: int  # each identity's files are read again within this many ticks (CGROUP_REFRESH_SECONDS)

    def _read_cgroups(self, paths: list[str]) -> set[str]:
        """Read the cgroup files (and list the member processes) of this tick's identities: a new identity's at
        once, then the ones read longest ago, CGROUP_EVERY_TICK of them per tick or more, as many as it takes to
        read each identity's
        again within CGROUP_REFRESH_SECONDS of ticks (``refresh_ticks``): all of them every tick while there are
        no more than CGROUP_EVERY_TICK; with 50 pods, 5 a tick and each every 10 ticks. Directories are looked
        up and their files opened once (kept while the identity lives); ``_dirs`` is kept in the order they
        were last read. Returns the cgroups whose figures changed."""
        dirs, tick = self._dirs, self._tick
        seen = self._dirs_seen = set(paths)
        refreshed = set()
        for path in sorted(seen - dirs.keys()):  # new identities
            directory = self._open_cgroup(path)
            if directory is not None:
                directory.refresh(tick)
                refreshed.add(path)
        budget = max(CGROUP_EVERY_TICK, -(-len(seen) // self.refresh_ticks))
        for path in list(dirs):
            if budget <= 0:
                break
            directory = dirs[path]
            if directory.read_at == tick or path not in seen:
                continue
            if directory.refresh(tick):
                refreshed.add(path)
            dirs[path] = dirs.pop(path)  # to the end: read most recently
            budget -= 1
        return refreshed

    def _open_cgroup(self, path: str) -> _CgroupDir | None:
        """The identity cgroup ``path``'s directory: a cgroup v2 path (``/kubepods.slice/...``), or a v1 one as
        ``CONTROLLER:PATH`` (``v1_identity_cgroup``: its members listed there, its figures read from the
        _V1_FILES hierarchies at the same path); None when it does not exist."""
        keep_open = self._keep_cgroup_files and self._open_dirs < OPEN_CGROUP_DIRS
        if not path.startswith("/"):
            controller, _, rel = path.partition(":")
            base = f"{self.ctx.paths.sysfs}/fs/cgroup"
            where = f"{base}/{controller.removeprefix('name=')}{rel}".rstrip("/")
            if not os.path.isdir(where):
                return None
            files = {name: f"{base}/{hierarchy}{rel}/{name}" for name, hierarchy in _V1_FILES.items()}
            directory = self._dirs[path] = _CgroupDir.open(where, keep_open, rel, files)
            self._open_dirs += bool(directory.fds)
            return directory
        if keep_open:  # the files opened where the last identity's were, without looking first (a cgroup v2
            # directory always has cpu.stat); elsewhere looked up
            base = f"{self.ctx.paths.sysfs}/fs/cgroup/unified" if self._unified else f"{self.ctx.paths.sysfs}/fs/cgroup"
            directory = _CgroupDir.open(f"{base}/{path.lstrip('/')}".rstrip("/"), True, path,
                                        v1_base=f"{self.ctx.paths.sysfs}/fs/cgroup" if self._unified else "")
            if directory.fds:
                self._dirs[path] = directory
                self._open_dirs += 1
                return directory
        found = _cgroup_dir(str(self.ctx.paths.sysfs), path, self._unified)
        if found is None:
            return None
        self._unified = int(found.startswith(f"{self.ctx.paths.sysfs}/fs/cgroup/unified/"))
        directory = self._dirs[path] = _CgroupDir.open(
            found, keep_open, path, v1_base=f"{self.ctx.paths.sysfs}/fs/cgroup" if self._unified else "")
        self._open_dirs += bool(directory.fds)
        return directory

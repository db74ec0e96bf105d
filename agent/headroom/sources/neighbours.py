"""Who else presses on the host: the top consumers of CPU, disk I/O and memory, for the evidence.

When a workload is short of CPU, disk or memory because of processes outside it, the evidence names them
(issue 12, class 8): process name, user, share. Finding them means reading /proc/PID/stat and io of
every process (~60 us each with the parsing, ~60 ms per 1 000 processes on the 2-core development
machine), far too much for every tick; so the processes collector calls ``NeighbourScan.update`` each tick
and it reads /proc only while the previous tick's sample shows the host under pressure (``pressured``: PSI
cpu/io/memory or MemAvailable past the analysis' own starting thresholds, or, without PSI, a load average
above 85 % of the CPUs), in passes that read at most ``CHUNK`` pids per tick, one pass every ``interval``
seconds (the first two back to back, for rates). A calm host costs nothing. Rates are the difference
between a pid's readings in the last two passes; a pid whose start time changed was reused and is left
out; the owner is looked up only for the few named. Processes that vanish or deny their entries are
skipped.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from headroom.samples import Neighbour, PreviousTick
from headroom.sources import procfs

TOP = 3  # offenders named per resource
CHUNK = 64  # pids read per tick at most (~50-60 us each: stat and io): <= ~4 ms a tick, 16 ticks per 1 000
# pressure that triggers a scan: the lowest levels at which the analysis starts to score (its psi_cpu_low,
# psi_io_low, psi_memory_low, mem_available_low and host_cpu_low defaults, docs/analysis.md)
PSI_SOME = {"cpu": 0.10, "io": 0.20}
PSI_MEMORY_FULL = 0.05
MEM_AVAILABLE_LOW = 0.10
LOAD_PER_CPU = 0.85
# the least a process must use to be named: a tenth of a core, 1 MB/s of I/O, 256 MiB of RAM
MIN_CORES, MIN_IO_BYTES_PER_SECOND, MIN_RSS_BYTES = 0.1, 1e6, 256 * 2**20


SCORED = 0.25  # a workload's cpu, disk_io or host_memory score from which its neighbours are worth naming
RESOURCES = ("cpu", "disk_io", "host_memory")


def scored(previous: PreviousTick | None) -> bool | None:
    """Whether the previous tick's analysis scored CPU, disk or memory pressure for some workload (at least
    SCORED), or found that much host-wide pressure while there are workloads (one that uses little of it is not
    blamed, but its evidence names who causes it); None when no analysis is at hand (then ``pressured`` alone
    decides)."""
    workloads = previous.workload_scores if previous is not None else None
    if previous is None or workloads is None:
        return None
    if any(scores.get(r, 0.0) >= SCORED for scores in workloads for r in RESOURCES):
        return True
    # host-wide pressure that the workloads' own use discounted (a job using 0.005 cores of a saturated host):
    # who causes it is what their evidence names
    pressure = previous.host_pressure
    return bool(workloads) and any(pressure.get(r, 0.0) >= SCORED for r in RESOURCES)


def pressured(previous: PreviousTick | None) -> bool:
    """Whether the previous tick's sample shows CPU, I/O or memory pressure worth naming neighbours for."""
    if previous is None:
        return False
    cpu = previous.cpu
    if cpu is not None:
        for resource, low in PSI_SOME.items():
            p = cpu.pressure.get(resource)
            if p is not None and p.some is not None and p.some.avg10 >= low:
                return True
        memory = cpu.pressure.get("memory")
        if memory is not None and memory.full is not None and memory.full.avg10 >= PSI_MEMORY_FULL:
            return True
        if not cpu.pressure and cpu.logical_cpus and cpu.load1 >= LOAD_PER_CPU * cpu.logical_cpus:
            return True
    mem = previous.memory
    return (mem is not None and mem.available_bytes is not None and mem.total_bytes > 0
            and mem.available_bytes / mem.total_bytes < MEM_AVAILABLE_LOW)


@dataclass(slots=True)
class _Seen:
    at: float  # when this pid was read (a pass spreads over several ticks)
    starttime: int
    name: str
    cpu_seconds: float
    io_bytes: int | None
    rss_bytes: int


class NeighbourScan:
    """Reads /proc for the top consumers while the host is under pressure; keeps the last answer.

    A pass reads every pid once, ``CHUNK`` pids per tick at most, so the tick's cost stays bounded on a host
    with thousands of processes (a pass then spans several ticks; each pid's rate uses its own two reading
    times). The answer compares the last two passes; a new pass starts ``interval`` seconds after the last
    one started, at once while there is no answer yet."""

    def __init__(self, procfs_root: Path, user_hz: int, page_size: int, interval: float = 10.0) -> None:
        self.root, self.user_hz, self.page_size, self.interval = procfs_root, user_hz, page_size, interval
        self._queue: list[int] = []  # pids still to read in this pass
        self._current: dict[int, _Seen] = {}
        self._last: dict[int, _Seen] | None = None  # the previous complete pass
        self._started: float | None = None  # when the current (or last) pass started
        self._answer: tuple[Neighbour, ...] = ()
        self._users: dict[int, str] = {}
        self.scans = 0  # passes started (for tests and the benchmark)
        self.reads = 0  # pids read

    def update(self, now: float, previous: PreviousTick | None, workload_of: dict[int, str]) -> tuple[Neighbour, ...]:
        """This tick's neighbours; ``previous``: the previous tick's input (its host pressure, and its analysis's
        scores where at hand, so that only pressure a workload's score shows is paid for); ``workload_of``: pid ->
        name of the declared workload it belongs to."""
        if previous is None or not pressured(previous) or scored(previous) is False:
            self._queue, self._current, self._last, self._started, self._answer = [], {}, None, None, ()
            return ()
        if not self._queue:
            due = self._started is None or not self._answer or now - self._started >= self.interval
            if not due:
                return self._answer
            try:
                self._queue = sorted((int(e.name) for e in os.scandir(self.root) if e.name.isdigit()), reverse=True)
            except OSError:
                return self._answer
            self._current, self._started = {}, now
            self.scans += 1
        chunk, self._queue = self._queue[-CHUNK:], self._queue[:-CHUNK]
        for pid in chunk:
            seen = self._read(pid, now)
            if seen is not None:
                self._current[pid] = seen
        if not self._queue:  # the pass is complete
            if self._last is not None:
                self._answer = self._rank(self._last, self._current, previous, workload_of)
            self._last, self._current = self._current, {}
        return self._answer

    def _read(self, pid: int, now: float) -> _Seen | None:
        self.reads += 1
        try:
            st = procfs.read_pid_stat(self.root, pid, self.user_hz)
            if st is None:
                return None
            try:
                io = procfs.read_pid_io(self.root, pid)
            except (OSError, ValueError):
                io = None
        except (procfs.ProcessGone, OSError, ValueError):
            return None
        return _Seen(now, st.starttime_ticks, st.comm, st.utime_seconds + st.stime_seconds,
                     None if io is None else io.read_bytes + io.write_bytes, st.rss_pages * self.page_size)

    def _user(self, pid: int) -> str:
        try:
            uid = os.stat(self.root / str(pid)).st_uid  # the owner of /proc/PID: only for the few named
        except OSError:
            return "?"
        if uid not in self._users:
            try:
                self._users[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                self._users[uid] = str(uid)
        return self._users[uid]

    def _rank(self, before: dict[int, _Seen], after: dict[int, _Seen], previous: PreviousTick,
              workload_of: dict[int, str]) -> tuple[Neighbour, ...]:
        cpu, mem = previous.cpu, previous.memory
        cpus = cpu.logical_cpus if cpu is not None and cpu.logical_cpus else None
        mem_total = mem.total_bytes if mem is not None and mem.total_bytes else None
        rates: dict[int, tuple[float, float | None]] = {}
        for pid, s in after.items():
            b = before.get(pid)
            if b is None or b.starttime != s.starttime or s.at <= b.at:
                continue
            dt = s.at - b.at
            io = (max(0, s.io_bytes - b.io_bytes) / dt) if s.io_bytes is not None and b.io_bytes is not None else None
            rates[pid] = (max(0.0, s.cpu_seconds - b.cpu_seconds) / dt, io)
        io_total = sum(io for _, io in rates.values() if io is not None)
        chosen: set[int] = set()
        chosen.update(p for p in sorted(rates, key=lambda p: -rates[p][0])[:TOP] if rates[p][0] >= MIN_CORES)
        chosen.update(p for p in sorted(rates, key=lambda p: -(rates[p][1] or 0.0))[:TOP]
                      if (rates[p][1] or 0.0) >= MIN_IO_BYTES_PER_SECOND)
        chosen.update(p for p in sorted(after, key=lambda p: -after[p].rss_bytes)[:TOP]
                      if after[p].rss_bytes >= MIN_RSS_BYTES)
        out = []
        for pid in sorted(chosen):
            s = after[pid]
            cores, io = rates.get(pid, (0.0, None))
            out.append(Neighbour(
                pid=pid, name=s.name, user=self._user(pid), workload=workload_of.get(pid),
                cpu_cores=round(cores, 3), cpu_share=round(cores / cpus, 4) if cpus else None,
                io_bytes_per_second=None if io is None else round(io, 1),
                io_share=round(io / io_total, 4) if io is not None and io_total > 0 else None,
                rss_bytes=s.rss_bytes, memory_share=round(s.rss_bytes / mem_total, 4) if mem_total else None,
            ))  # fmt: skip
        return tuple(out)

"""Who else presses on the host: the top consumers of CPU, disk I/O and memory, for the evidence.

When a workload is short of CPU, disk or memory because of processes outside it, the evidence names them
(issue 12, class 8): process name, user, share. Finding them means reading /proc/PID/stat (and io) of
every process, ~22 ms per 1 000 processes (docs/architecture.md, "Cost facts"), far too much for every
tick; so the processes collector calls ``NeighbourScan.update`` each tick and it scans only while the
previous tick's sample shows the host under pressure (``pressured``: PSI cpu/io/memory or MemAvailable
past the analysis' own starting thresholds, or, without PSI, a load average above the CPU count), at most
once every ``interval`` seconds, plus one extra scan a tick after the first to get rates sooner. A calm
host costs nothing. Rates are the difference between the last two scans; a pid whose start time changed
was reused and is left out. Processes that vanish or deny their entries are skipped.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headroom.samples import CpuSample, MemorySample, Neighbour
from headroom.sources import procfs

TOP = 3  # offenders named per resource
# pressure that triggers a scan: the lowest levels at which the analysis starts to score (its psi_cpu_low,
# psi_io_low, psi_memory_low, mem_available_low and host_cpu_low defaults, docs/analysis.md)
PSI_SOME = {"cpu": 0.10, "io": 0.20}
PSI_MEMORY_FULL = 0.05
MEM_AVAILABLE_LOW = 0.10
LOAD_PER_CPU = 0.85
# the least a process must use to be named: a tenth of a core, 1 MB/s of I/O, 256 MiB of RAM
MIN_CORES, MIN_IO_BYTES_PER_SECOND, MIN_RSS_BYTES = 0.1, 1e6, 256 * 2**20


def pressured(previous: Any) -> bool:
    """Whether the previous tick's sample shows CPU, I/O or memory pressure worth naming neighbours for."""
    if previous is None:
        return False
    cpu = previous.data("cpu")
    if isinstance(cpu, CpuSample):
        for resource, low in PSI_SOME.items():
            p = cpu.pressure.get(resource)
            if p is not None and p.some is not None and p.some.avg10 >= low:
                return True
        memory = cpu.pressure.get("memory")
        if memory is not None and memory.full is not None and memory.full.avg10 >= PSI_MEMORY_FULL:
            return True
        if not cpu.pressure and cpu.logical_cpus and cpu.load1 >= LOAD_PER_CPU * cpu.logical_cpus:
            return True
    mem = previous.data("memory")
    return (isinstance(mem, MemorySample) and mem.available_bytes is not None and mem.total_bytes > 0
            and mem.available_bytes / mem.total_bytes < MEM_AVAILABLE_LOW)


@dataclass(slots=True)
class _Seen:
    starttime: int
    name: str
    uid: int
    cpu_seconds: float
    io_bytes: int | None
    rss_bytes: int


class NeighbourScan:
    """Scans /proc for the top consumers while the host is under pressure; keeps the last answer."""

    def __init__(self, procfs_root: Path, user_hz: int, page_size: int, interval: float = 10.0) -> None:
        self.root, self.user_hz, self.page_size, self.interval = procfs_root, user_hz, page_size, interval
        self._previous: tuple[float, dict[int, _Seen]] | None = None
        self._answer: tuple[Neighbour, ...] = ()
        self._users: dict[int, str] = {}
        self.scans = 0  # for tests and the benchmark: how often /proc was read in full

    def update(self, now: float, previous_sample: Any, workload_of: dict[int, str]) -> tuple[Neighbour, ...]:
        """This tick's neighbours; ``workload_of``: pid -> name of the declared workload it belongs to."""
        if not pressured(previous_sample):
            self._previous, self._answer = None, ()
            return ()
        gap = self.interval if self._answer else 0.5  # the first answer needs two scans: take them a tick apart
        if self._previous is not None and now - self._previous[0] < gap:
            return self._answer
        seen = self._scan()
        if self._previous is not None and now > self._previous[0]:
            self._answer = self._rank(self._previous[1], seen, now - self._previous[0], previous_sample, workload_of)
        self._previous = (now, seen)
        return self._answer

    def _scan(self) -> dict[int, _Seen]:
        self.scans += 1
        out: dict[int, _Seen] = {}
        try:
            entries = [e for e in os.scandir(self.root) if e.name.isdigit()]
        except OSError:
            return out
        for e in entries:
            pid = int(e.name)
            try:
                st = procfs.read_pid_stat(self.root, pid, self.user_hz)
                if st is None:
                    continue
                uid = e.stat().st_uid
                try:
                    io = procfs.read_pid_io(self.root, pid)
                except (OSError, ValueError):
                    io = None
            except (procfs.ProcessGone, OSError, ValueError):
                continue
            out[pid] = _Seen(st.starttime_ticks, st.comm, uid, st.utime_seconds + st.stime_seconds,
                             None if io is None else io.read_bytes + io.write_bytes, st.rss_pages * self.page_size)
        return out

    def _user(self, uid: int) -> str:
        if uid not in self._users:
            try:
                self._users[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                self._users[uid] = str(uid)
        return self._users[uid]

    def _rank(self, before: dict[int, _Seen], after: dict[int, _Seen], dt: float, sample: Any,
              workload_of: dict[int, str]) -> tuple[Neighbour, ...]:
        cpu = sample.data("cpu")
        cpus = cpu.logical_cpus if isinstance(cpu, CpuSample) and cpu.logical_cpus else None
        mem = sample.data("memory")
        mem_total = mem.total_bytes if isinstance(mem, MemorySample) and mem.total_bytes else None
        rates: dict[int, tuple[float, float | None]] = {}
        for pid, s in after.items():
            b = before.get(pid)
            if b is None or b.starttime != s.starttime:
                continue
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
                pid=pid, name=s.name, user=self._user(s.uid), workload=workload_of.get(pid),
                cpu_cores=round(cores, 3), cpu_share=round(cores / cpus, 4) if cpus else None,
                io_bytes_per_second=None if io is None else round(io, 1),
                io_share=round(io / io_total, 4) if io is not None and io_total > 0 else None,
                rss_bytes=s.rss_bytes, memory_share=round(s.rss_bytes / mem_total, 4) if mem_total else None,
            ))  # fmt: skip
        return tuple(out)

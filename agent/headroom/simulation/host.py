"""Synthetic host signals: a scenario's ``host:`` section, written as a procfs/sysfs tree.

A scenario may declare how the host around its GPUs behaves over time: CPU utilization and iowait,
load, PSI, memory, major faults, disks, network interfaces and shared-memory mounts, each with the
same signals as the GPU readings (constants, sine, steps, ramp, noise; docs/scenario-format.md,
"Synthetic host"). ``SyntheticHost`` writes them as the files the kernel writes (stat, loadavg,
pressure/*, meminfo, vmstat, diskstats, net/dev, self/mounts, mounts, class/net/*/speed) into a
private temporary directory, integrating the declared rates into COUNTERS over the simulation clock,
so the real cpu, memory, disk and net collectors read it unchanged through their ``--path.*`` roots. The
section's spec types (``HostSpec``) and its parsing (``parse_host``) are host_spec.py's.

Shared memory is a statvfs() result, which no tree of files can fake: ``SyntheticHost.statvfs`` is the
documented stand-in for that one syscall (the shm collector asks ``ctx.scenario.host_statvfs``).

The scenario's workload stand-ins are simulated processes of that tree (``add_processes``): /proc/PID/{stat,
status,io,cgroup,cmdline,net/dev,task/TID/stat, ns/net (the agent's own network namespace)} and their cgroup's v2 files (cgroup.procs, cpu.max, cpu.stat,
memory.current, io.stat) follow the cores, threads, memory, I/O, network and CPU quota the scenario declares,
so the real processes and identity collectors read the same values on any machine under any load.
``host: {psi: false}`` leaves /proc/pressure out, as a kernel without PSI does.
"""

from __future__ import annotations

import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from headroom.samples import MountUsage
from headroom.simulation.host_spec import PSI_RESOURCES, HostSpec
from headroom.sources import Paths

if TYPE_CHECKING:
    from headroom.simulation.spec import StandInSpec

log = structlog.get_logger("headroom.simulation.host")

# Collectors that read the synthetic tree (shm through host_statvfs); every other collector keeps its paths
# (nvml has its driver stand-in, serving scrapes the stand-ins' HTTP, agent measures the agent itself).
HOST_COLLECTORS = frozenset({"cpu", "memory", "disk", "net", "infiniband", "shm", "processes", "identity"})

try:
    _OWN_NET_NS = os.readlink("/proc/self/ns/net")  # what /proc/PID/ns/net of a process in this one reads
except OSError:  # no procfs: no namespace to share (then no simulated process is reached on the loopback)
    _OWN_NET_NS = "net:[0]"
BOOT_UPTIME_SECONDS = 86_400.0  # counters start as if the host had run a day at the t=0 rates
USER_HZ = 100
PACKET_BYTES = 1500  # packets counted from bytes at a full Ethernet MTU
# How CPU busy time splits into modes (sums to 1): user, system, irq, softirq.
_BUSY_SPLIT = (("user", 0.80), ("system", 0.15), ("irq", 0.01), ("softirq", 0.04))
_CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")


# -------------------------------------------------------------------------------------- the tree
@dataclass
class _Counters:
    """Everything that accumulates, in base units (seconds, bytes, counts) as floats."""

    cpu: dict[str, float] = field(default_factory=lambda: dict.fromkeys(_CPU_MODES, 0.0))
    psi_total: dict[tuple[str, str], float] = field(default_factory=dict)  # (resource, some|full) -> seconds
    psi_avg: dict[tuple[str, str, int], float] = field(default_factory=dict)  # derived avg60/avg300
    load: list[float] = field(default_factory=lambda: [0.0, 0.0])  # load5, load15 (exponential averages)
    pgmajfault: float = 0.0
    pgfault: float = 0.0
    disks: dict[str, dict[str, float]] = field(default_factory=dict)
    nics: dict[str, dict[str, float]] = field(default_factory=dict)


def _ema(previous: float, value: float, dt: float, tau: float) -> float:
    """Exponential average after ``dt`` seconds at ``value`` (time constant ``tau``), as the kernel keeps."""
    return value + (previous - value) * math.exp(-dt / tau)


class SyntheticHost:
    """A procfs/sysfs tree in a private temporary directory that follows a HostSpec over time.

    ``update()`` brings every file to the clock's current time (counters integrate the declared rates
    since the previous update); ``paths_for(collector)`` is where a host collector reads;
    ``statvfs(mountpoint)`` stands in for the syscall on declared shm mounts; ``close()`` removes the tree.
    """

    def __init__(self, spec: HostSpec, clock: Callable[[], float] | None = None, user_hz: int = USER_HZ) -> None:
        if clock is None:
            started = time.monotonic()
            clock = lambda: time.monotonic() - started  # noqa: E731
        self.spec = spec
        self.clock = clock
        self.user_hz = user_hz
        self._lock = threading.Lock()
        # in memory where the machine has a tmpfs (a procfs lives in memory too): rewriting ~40 files a tick
        # on a disk-backed /tmp costs a millisecond each
        memory = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self._tmp = tempfile.TemporaryDirectory(prefix="headroom-host-", dir=memory)
        root = Path(self._tmp.name)
        self.paths = Paths(procfs=root / "proc", sysfs=root / "sys", rootfs=root / "rootfs")
        self._t: float | None = None
        self._c = _Counters()
        self._procs: dict[int, _Process] = {}  # simulated processes (workload stand-ins), by pid
        self._cgroups: dict[str, _Cgroup] = {}
        self._write_static()
        self.update()
        log.info("synthetic_host_started", root=str(root), disks=[d.name for d in spec.disks],
                 network=[n.name for n in spec.network], shm=[s.mountpoint for s in spec.shm])

    # -- public
    def paths_for(self, collector: str) -> Paths | None:
        """The Paths collector ``collector`` should read, or None when it reads the real host."""
        return self.paths if collector in HOST_COLLECTORS else None

    def statvfs(self, mountpoint: str) -> MountUsage | None:
        """The declared shm mount at ``mountpoint`` now, as statvfs would report it; None if not declared."""
        for s in self.spec.shm:
            if s.mountpoint == mountpoint:
                t = self._t if self._t is not None else self._now()  # the time the tree shows
                used = min(s.size, max(0, int(s.used.at(t))))
                return MountUsage(mountpoint=mountpoint, fstype="tmpfs", size_bytes=s.size, used_bytes=used,
                                  available_bytes=s.size - used)
        return None

    def close(self) -> None:
        """Remove the tree (idempotent)."""
        self._tmp.cleanup()

    def add_processes(self, processes: list[tuple[int, int, StandInSpec, str, float | None, dict[str, str]]]) -> None:
        """Simulate these processes from now on: (pid, ppid, StandInSpec, cgroup path, cgroup CPU quota in
        cores or None, environment), parents before their children. Their /proc/PID files appear at once;
        /proc/PID/root and cwd point at this machine's / (the files a process names, e.g. a model cache in
        HF_HOME, are real)."""
        with self._lock:
            t = self._t if self._t is not None else 0.0
            for order, (pid, ppid, spec, cgroup, quota, env) in enumerate(processes):
                start = round((BOOT_UPTIME_SECONDS + t) * self.user_hz) + order
                proc = self._procs[pid] = _Process(pid, ppid, spec, cgroup, start)
                group = self._cgroups.setdefault(cgroup, _Cgroup(cgroup, quota))
                group.quota = quota if quota is not None else group.quota
                group.pids.append(pid)
                base = f"proc/{pid}"
                (Path(self._tmp.name) / base / "net").mkdir(parents=True, exist_ok=True)
                for tid in proc.tids:
                    (Path(self._tmp.name) / base / "task" / str(tid)).mkdir(parents=True, exist_ok=True)
                (Path(self._tmp.name) / "sys/fs/cgroup" / cgroup.lstrip("/")).mkdir(parents=True, exist_ok=True)
                self._put(f"{base}/cmdline", _cmdline(spec.argv))
                self._put(f"{base}/comm", proc.comm + "\n")
                self._put(f"{base}/cgroup", f"0::{cgroup}\n")
                self._put(f"{base}/environ", "".join(f"{k}={v}\0" for k, v in env.items()))
                for link in ("root", "cwd"):
                    (Path(self._tmp.name) / base / link).symlink_to("/")
                # the agent's own network namespace: a simulated runtime's /metrics is served in this process, on
                # the agent's loopback (identity.same_network_namespace reads this link as the kernel's)
                (Path(self._tmp.name) / base / "ns").mkdir(exist_ok=True)
                (Path(self._tmp.name) / base / "ns" / "net").symlink_to(_OWN_NET_NS)
            self._write(t)

    def remove_processes(self, pids: Iterable[int]) -> None:
        """Stop simulating these pids: their /proc/PID directories go, as when a process exits."""
        import shutil

        with self._lock:
            for pid in pids:
                proc = self._procs.pop(pid, None)
                if proc is None:
                    continue
                group = self._cgroups.get(proc.cgroup)
                if group is not None and pid in group.pids:
                    group.pids.remove(pid)
                shutil.rmtree(Path(self._tmp.name) / "proc" / str(pid), ignore_errors=True)
            if self._t is not None:
                self._write(self._t)

    def update(self) -> None:
        """Integrate counters up to the clock's time and rewrite every file."""
        with self._lock:
            now = self._now()
            if self._t is None:
                self._start(now)
                self._t = now
            elif now > self._t:
                self._integrate(self._t, now)
                self._t = now
            self._write(self._t)

    # -- time
    def _now(self) -> float:
        return max(0.0, float(self.clock()))

    def _start(self, t: float) -> None:
        """Counters as if the host had run BOOT_UPTIME_SECONDS at the rates of time ``t``."""
        c = self._c
        for resource in PSI_RESOURCES:
            for kind in ("some", "full"):
                for window in (60, 300):
                    c.psi_avg[(resource, kind, window)] = self._psi10(resource, kind, t)
        load1 = self._load1(t)
        c.load = [load1, load1]
        self._accumulate(t, BOOT_UPTIME_SECONDS)

    def _integrate(self, t0: float, t1: float) -> None:
        """Accumulate [t0, t1] in pieces cut at whole seconds (noise holds per second), at most 600."""
        cuts = [t0, *range(math.floor(t0) + 1, math.ceil(t1)), t1]
        if len(cuts) > 601:
            step = (t1 - t0) / 600
            cuts = [t0 + i * step for i in range(601)]
        for a, b in pairwise(cuts):
            if b > a:
                mid = (a + b) / 2
                self._accumulate(mid, b - a)
                self._average(mid, b - a)

    def _average(self, t: float, dt: float) -> None:
        c = self._c
        for resource in PSI_RESOURCES:
            for kind in ("some", "full"):
                value = self._psi10(resource, kind, t)
                for window in (60, 300):
                    key = (resource, kind, window)
                    c.psi_avg[key] = _ema(c.psi_avg[key], value, dt, float(window))
        load1 = self._load1(t)
        c.load = [_ema(c.load[0], load1, dt, 300.0), _ema(c.load[1], load1, dt, 900.0)]

    def _accumulate(self, t: float, dt: float) -> None:
        """Add ``dt`` seconds at the rates of time ``t`` to every counter."""
        spec, c = self.spec, self._c
        busy, iowait = self._cpu_shares(t)
        cpu_seconds = spec.logical_cpus * dt
        for mode, share in _BUSY_SPLIT:
            c.cpu[mode] += busy * share * cpu_seconds
        c.cpu["iowait"] += iowait * cpu_seconds
        c.cpu["idle"] += max(0.0, 1.0 - busy - iowait) * cpu_seconds
        for resource in PSI_RESOURCES:
            for kind in ("some", "full"):
                key = (resource, kind)
                c.psi_total[key] = c.psi_total.get(key, 0.0) + self._psi10(resource, kind, t) * dt
        majors = max(0.0, spec.major_faults.at(t))
        c.pgmajfault += majors * dt
        c.pgfault += (majors * 20 + 4000) * dt
        for d in spec.disks:
            acc = c.disks.setdefault(d.name, dict.fromkeys(
                ("read", "written", "reads", "writes", "io_time", "weighted", "read_time", "write_time"), 0.0))
            r, w = max(0.0, d.read.at(t)), max(0.0, d.write.at(t))
            queue = max(0.0, d.queue_depth.at(t))
            acc["read"] += r * dt
            acc["written"] += w * dt
            acc["reads"] += r * dt / d.request_size
            acc["writes"] += w * dt / d.request_size
            acc["io_time"] += min(1.0, max(0.0, d.busy.at(t))) * dt
            acc["weighted"] += queue * dt
            read_share = r / (r + w) if r + w > 0 else 1.0
            acc["read_time"] += queue * dt * read_share
            acc["write_time"] += queue * dt * (1 - read_share)
        for n in spec.network:
            acc = c.nics.setdefault(n.name, dict.fromkeys(("rx", "tx"), 0.0))
            acc["rx"] += max(0.0, n.rx.at(t)) * dt
            acc["tx"] += max(0.0, n.tx.at(t)) * dt
        for proc in self._procs.values():
            proc.accumulate(t, dt)
        for group in self._cgroups.values():
            group.accumulate(t, dt, [self._procs[pid] for pid in group.pids if pid in self._procs])

    # -- instantaneous values
    def _cpu_shares(self, t: float) -> tuple[float, float]:
        busy = min(1.0, max(0.0, self.spec.utilization.at(t)))
        iowait = min(1.0 - busy, max(0.0, self.spec.iowait.at(t)))
        return busy, iowait

    def _psi10(self, resource: str, kind: str, t: float) -> float:
        some, full = self.spec.pressure[resource]
        if kind == "some":
            return min(1.0, max(0.0, some.avg10.at(t)))
        if full is not None:
            return min(1.0, max(0.0, full.avg10.at(t)))
        # undeclared "full": 0 for cpu (what the kernel writes at system level), half of "some" otherwise
        return 0.0 if resource == "cpu" else self._psi10(resource, "some", t) / 2

    def _psi_avg(self, resource: str, kind: str, window: int, t: float) -> float:
        some, full = self.spec.pressure[resource]
        line = some if kind == "some" else full
        declared = None if line is None else (line.avg60 if window == 60 else line.avg300)
        if declared is not None:
            return min(1.0, max(0.0, declared.at(t)))
        return self._c.psi_avg[(resource, kind, window)]

    def _load1(self, t: float) -> float:
        if self.spec.load is not None:
            return max(0.0, self.spec.load.at(t))
        busy, iowait = self._cpu_shares(t)
        return self.spec.logical_cpus * (busy * (1 + self._psi10("cpu", "some", t)) + iowait)

    def _memory(self, t: float) -> dict[str, int]:
        """meminfo values in bytes at time ``t``, defaults filled in and clamped to MemTotal."""
        spec = self.spec
        total = spec.memory_total

        def value(key: str, default: float) -> int:
            sig = spec.memory.get(key)
            return int(min(total, max(0.0, sig.at(t) if sig is not None else default)))

        available = value("available", 0.75 * total)
        cached = value("cached", 0.5 * available)
        buffers = value("buffers", min(0.005 * total, max(0, available - cached)))
        shm_used = sum(min(s.size, max(0, int(s.used.at(t)))) for s in spec.shm)
        return {
            "MemTotal": total,
            "MemFree": value("free", max(0, available - cached - buffers)),
            "MemAvailable": available,
            "Buffers": buffers,
            "Cached": cached,
            "SwapCached": 0,
            "Shmem": value("shmem", shm_used + 128 * 2**20),
            "Dirty": value("dirty", 32 * 2**20),
            "Writeback": value("writeback", 0),
            "SwapTotal": spec.swap_total,
            "SwapFree": min(spec.swap_total, value("swap_free", spec.swap_total)),
        }

    def _write_processes(self, t: float, host_net_dev: str) -> None:
        """/proc/PID/{stat,status,io,net/dev,task/TID/stat} of every simulated process, and the cgroup v2
        files (cgroup.procs, cpu.max, cpu.stat, memory.current, io.stat) of their cgroups."""
        hz = self.user_hz
        for proc in self._procs.values():
            base = f"proc/{proc.pid}"
            cores = proc.spec.cores(t)
            state = "R" if cores >= 0.5 else "S"
            rss = proc.rss(t)
            cpu = sum(proc.thread_seconds)
            threads = len(proc.tids)
            self._put(f"{base}/stat", _pid_stat(proc.pid, proc.comm, state, proc.ppid, round(cpu * _USER * hz),
                                                round(cpu * (1 - _USER) * hz), threads, proc.starttime, rss))
            for tid, seconds, share in zip(proc.tids, proc.thread_seconds, proc.spec.thread_cores(t), strict=True):
                self._put(f"{base}/task/{tid}/stat", _pid_stat(
                    tid, proc.comm, "R" if share >= 0.5 else "S", proc.ppid, round(seconds * _USER * hz),
                    round(seconds * (1 - _USER) * hz), threads, proc.starttime, rss))
            self._put(f"{base}/status", (
                f"Name:\t{proc.comm}\nState:\t{state}\nTgid:\t{proc.pid}\nPid:\t{proc.pid}\nPPid:\t{proc.ppid}\n"
                f"Uid:\t{_UID}\t{_UID}\t{_UID}\t{_UID}\nGid:\t{_GID}\t{_GID}\t{_GID}\t{_GID}\n"
                f"VmRSS:\t{rss // 1024} kB\nVmSwap:\t0 kB\nThreads:\t{threads}\n"))
            read, written = round(proc.read), round(proc.written)
            self._put(f"{base}/io", (
                f"rchar: {read + 4096 * round(cpu)}\nwchar: {written}\nsyscr: {read // 65536}\nsyscw: {written // 65536}\n"
                f"read_bytes: {read}\nwrite_bytes: {written}\ncancelled_write_bytes: 0\n"))
            if proc.spec.network is None:  # the host's network namespace
                self._put(f"{base}/net/dev", host_net_dev)
            else:
                rx, tx = round(proc.rx), round(proc.tx)
                self._put(f"{base}/net/dev", host_net_dev.split("\n", 2)[0] + "\n" + host_net_dev.split("\n", 2)[1] + (
                    f"\n    lo: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n  eth0: {rx} {rx // PACKET_BYTES} 0 0 0 0 0 0 "
                    f"{tx} {tx // PACKET_BYTES} 0 0 0 0 0 0\n"))
        for group in self._cgroups.values():
            members = [self._procs[pid] for pid in group.pids if pid in self._procs]
            base = "sys/fs/cgroup/" + group.path.lstrip("/")
            cpu = sum(sum(m.thread_seconds) for m in members)
            quota = "max" if group.quota is None else str(round(group.quota * 100_000))
            self._put(f"{base}/cgroup.procs", "".join(f"{m.pid}\n" for m in members))
            self._put(f"{base}/cpu.max", f"{quota} 100000\n")
            self._put(f"{base}/cpu.stat", (
                f"usage_usec {round(cpu * 1e6)}\nuser_usec {round(cpu * _USER * 1e6)}\n"
                f"system_usec {round(cpu * (1 - _USER) * 1e6)}\nnr_periods {round(group.periods)}\n"
                f"nr_throttled {round(group.throttled_periods)}\nthrottled_usec {round(group.throttled * 1e6)}\n"))
            self._put(f"{base}/memory.current", f"{sum(m.rss(t) for m in members)}\n")
            self._put(f"{base}/io.stat", (f"259:0 rbytes={round(sum(m.read for m in members))} "
                                          f"wbytes={round(sum(m.written for m in members))} rios=0 wios=0 dbytes=0 dios=0\n"))

    # -- files
    def _put(self, relative: str, text: str) -> None:
        """Write one file atomically (a reader sees the old or the new text, never half)."""
        path = Path(self._tmp.name) / relative
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)

    def _write_static(self) -> None:
        spec, paths = self.spec, self.paths
        for folder in (paths.procfs / "self", paths.procfs / "net", paths.sysfs / "fs" / "cgroup"):
            folder.mkdir(parents=True, exist_ok=True)
        if spec.psi:
            (paths.procfs / "pressure").mkdir()
        for nic in spec.network:
            (paths.sysfs / "class" / "net" / nic.name).mkdir(parents=True, exist_ok=True)
            speed = -1 if nic.speed_bytes_per_second is None else nic.speed_bytes_per_second // 125_000
            self._put(f"sys/class/net/{nic.name}/speed", f"{speed}\n")
        for s in spec.shm:
            paths.host(s.mountpoint).mkdir(parents=True, exist_ok=True)
        root_disk = spec.disks[0].name if spec.disks else "vda"
        mounts = [
            "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0",
            "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0",
            f"/dev/{root_disk} / ext4 rw,relatime 0 0",
            *(f"tmpfs {s.mountpoint} tmpfs rw,nosuid,nodev,size={s.size // 1024}k,inode64 0 0" for s in spec.shm),
        ]
        text = "\n".join(mounts) + "\n"
        self._put("proc/self/mounts", text)
        self._put("proc/mounts", text)

    def _write(self, t: float) -> None:
        spec, c, hz = self.spec, self._c, self.user_hz
        n = spec.logical_cpus
        ticks = [round(c.cpu[m] * hz) for m in _CPU_MODES]
        busy, iowait = self._cpu_shares(t)
        stat = ["cpu  " + " ".join(map(str, ticks))]
        stat += [f"cpu{i} " + " ".join(str(v // n) for v in ticks) for i in range(n)]
        stat += [
            "intr 0", f"ctxt {round(c.pgfault * 7)}", f"btime {int(time.time() - BOOT_UPTIME_SECONDS - t)}",
            f"processes {40_000 + int(t)}", f"procs_running {max(1, round(busy * n))}",
            f"procs_blocked {round(iowait * n)}",
        ]
        self._put("proc/stat", "\n".join(stat) + "\n")
        load1 = self._load1(t)
        self._put("proc/loadavg", f"{load1:.2f} {c.load[0]:.2f} {c.load[1]:.2f} {max(1, round(busy * n))}/1234 {40_000 + int(t)}\n")
        for resource in PSI_RESOURCES if spec.psi else ():
            lines = []
            for kind in ("some", "full"):
                avg10 = self._psi10(resource, kind, t)
                avg60, avg300 = (self._psi_avg(resource, kind, w, t) for w in (60, 300))
                total = round(c.psi_total[(resource, kind)] * 1e6)
                lines.append(f"{kind} avg10={avg10 * 100:.2f} avg60={avg60 * 100:.2f} avg300={avg300 * 100:.2f} total={total}")
            self._put(f"proc/pressure/{resource}", "\n".join(lines) + "\n")
        memory = self._memory(t)
        self._put("proc/meminfo", "".join(f"{k + ':':<16}{v // 1024:>8} kB\n" for k, v in memory.items()))
        self._put("proc/vmstat", (
            f"nr_free_pages {memory['MemFree'] // 4096}\nnr_dirty {memory['Dirty'] // 4096}\n"
            f"pgfault {round(c.pgfault)}\npgmajfault {round(c.pgmajfault)}\npswpin 0\npswpout 0\n"
        ))
        disk_lines = []
        for i, d in enumerate(spec.disks):
            a = c.disks[d.name]
            queue = max(0.0, d.queue_depth.at(t))
            fields = [
                round(a["reads"]), 0, round(a["read"] / 512), round(a["read_time"] * 1000),
                round(a["writes"]), 0, round(a["written"] / 512), round(a["write_time"] * 1000),
                round(queue), round(a["io_time"] * 1000), round(a["weighted"] * 1000),
                0, 0, 0, 0, 0, 0,  # discards: completed, merged, sectors, ms; flushes: completed, ms
            ]
            disk_lines.append(f"{259:4d} {i:7d} {d.name} " + " ".join(str(v) for v in fields))
        self._put("proc/diskstats", "\n".join(disk_lines) + ("\n" if disk_lines else ""))
        net = [
            "Inter-|   Receive                                                |  Transmit",
            " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed",
            f"    lo: {4096 * round(t + BOOT_UPTIME_SECONDS)} {4 * round(t + BOOT_UPTIME_SECONDS)} 0 0 0 0 0 0 "
            f"{4096 * round(t + BOOT_UPTIME_SECONDS)} {4 * round(t + BOOT_UPTIME_SECONDS)} 0 0 0 0 0 0",
        ]
        for nic in spec.network:
            a = c.nics[nic.name]
            rx, tx = round(a["rx"]), round(a["tx"])
            net.append(f"{nic.name:>6}: {rx} {rx // PACKET_BYTES} 0 0 0 0 0 0 {tx} {tx // PACKET_BYTES} 0 0 0 0 0 0")
        self._put("proc/net/dev", "\n".join(net) + "\n")
        self._write_processes(t, "\n".join(net) + "\n")


# ------------------------------------------------------------------------------- simulated processes
_USER = 0.85  # share of a process's CPU time in user mode (the rest: system)
_UID = os.getuid()  # simulated processes belong to the agent's user (so ``user:``/``uid:`` rules behave)
_GID = os.getgid()
try:
    _PAGE = int(os.sysconf("SC_PAGE_SIZE"))
except (ValueError, OSError, AttributeError):  # pragma: no cover - every Linux has it
    _PAGE = 4096


def _cmdline(argv: tuple[str, ...]) -> str:
    return "".join(a + "\0" for a in argv)


def _pid_stat(pid: int, comm: str, state: str, ppid: int, utime: int, stime: int, threads: int, starttime: int,
              rss: int) -> str:
    """A /proc/PID/stat line (52 fields) with the given values and zeros (or plausible constants) elsewhere."""
    rest = [state, ppid, pid, pid, 0, -1, 4194560, 1000, 0, 0, 0, utime, stime, 0, 0, 20, 0, threads, 0, starttime,
            rss * 2 + 2**30, rss // _PAGE, 2**64 - 1]
    rest += [0] * (50 - len(rest))
    return f"{pid} ({comm}) " + " ".join(str(v) for v in rest) + "\n"


class _Process:
    """One simulated process: its spec (cores, rss, I/O, network, threads) and what it has used so far."""

    def __init__(self, pid: int, ppid: int, spec: StandInSpec, cgroup: str, starttime: int) -> None:
        self.pid, self.ppid, self.spec, self.cgroup, self.starttime = pid, ppid, spec, cgroup, starttime
        self.comm = (os.path.basename(spec.argv[0]) or spec.argv[0])[:15]
        count = len(spec.thread_cores(0.0))
        self.tids = (pid, *(pid * 100 + i for i in range(1, count)))  # made-up thread ids, unique per process
        self.thread_seconds = [0.0] * count
        self.read = self.written = self.rx = self.tx = 0.0

    def rss(self, t: float) -> int:
        return max(0, int(self.spec.rss.at(t)))

    def accumulate(self, t: float, dt: float) -> None:
        for i, cores in enumerate(self.spec.thread_cores(t)):
            self.thread_seconds[i] += cores * dt
        self.read += max(0.0, self.spec.read.at(t)) * dt
        self.written += max(0.0, self.spec.write.at(t)) * dt
        if self.spec.network is not None:
            self.rx += max(0.0, self.spec.network[0].at(t)) * dt
            self.tx += max(0.0, self.spec.network[1].at(t)) * dt


class _Cgroup:
    """A cgroup v2 group of simulated processes: its CPU quota and throttling counters."""

    def __init__(self, path: str, quota: float | None) -> None:
        self.path, self.quota = path, quota
        self.pids: list[int] = []
        self.periods = self.throttled_periods = self.throttled = 0.0

    def accumulate(self, t: float, dt: float, members: list[_Process]) -> None:
        if self.quota is None or not members:
            return
        used = sum(sum(m.spec.thread_cores(t)) for m in members)
        self.periods += dt * 10  # 100 ms periods
        if used >= 0.95 * self.quota:  # at its quota: throttled in every period, a few ms each
            self.throttled_periods += dt * 10
            self.throttled += dt * 0.05

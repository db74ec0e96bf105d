"""The machine under test: what it is, how busy a process is, and a farm of real idle processes.

``ProcessFarm`` spawns real ``sleep`` processes (argv[0] renamed so workload match rules can find
some of them), bounded by ``MAX_PROCESSES``, and kills exactly the ones it started (by pid) on exit,
on SIGTERM/SIGINT and at interpreter exit.
"""

from __future__ import annotations

import atexit
import os
import platform
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
MAX_PROCESSES = 6000  # the farm refuses to grow past this many processes of its own
WORKLOAD_PROCESSES = 4  # processes per bench workload (one "server", three "workers")
SLEEP = "/usr/bin/sleep" if Path("/usr/bin/sleep").exists() else "/bin/sleep"


def workload_argv0(k: int, role: str) -> str:
    """argv[0] of a process of bench workload ``k`` (1-based): ``headroom-bench-wl03-server``."""
    return f"headroom-bench-wl{k:02d}-{role}"


def workload_cmdline_regex(k: int) -> str:
    """The ``match.cmdline`` regex that finds the processes of bench workload ``k`` and nothing else."""
    return f"^headroom-bench-wl{k:02d}-"


@dataclass(frozen=True)
class Machine:
    cpu_model: str
    cores: int
    memory_bytes: int
    kernel: str
    python: str
    os_release: str


def machine(procfs: Path = Path("/proc")) -> Machine:
    """A description of this machine from <procfs>/cpuinfo and meminfo, uname and the interpreter."""
    model = "unknown"
    try:
        for line in (procfs / "cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in (procfs / "meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    release = "unknown"
    try:
        fields = dict(
            line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line
        )
        release = fields.get("PRETTY_NAME", release).strip('"')
    except OSError:
        pass
    return Machine(model, os.cpu_count() or 0, mem, platform.release(), platform.python_version(), release)


def parse_stat_cpu_seconds(text: str) -> float:
    """utime + stime in seconds from the text of /proc/PID/stat (fields 14 and 15, after the comm)."""
    rest = text[text.rindex(")") + 2:].split()
    # rest[0] is field 3 (state): utime is field 14 -> rest[11], stime field 15 -> rest[12]
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def cpu_seconds(pid: int, procfs: Path = Path("/proc")) -> float:
    """CPU seconds (user + system, all threads, 1/CLK_TCK resolution) process ``pid`` has used."""
    return parse_stat_cpu_seconds((procfs / str(pid) / "stat").read_text())


def rss_bytes(pid: int, procfs: Path = Path("/proc")) -> tuple[int, int]:
    """(VmRSS, VmHWM) of process ``pid`` in bytes."""
    values = {}
    for line in (procfs / str(pid) / "status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) * 1024
    return values.get("VmRSS", 0), values.get("VmHWM", 0)


def count_processes(procfs: Path = Path("/proc")) -> int:
    """How many processes <procfs> lists now."""
    return sum(1 for name in os.listdir(procfs) if name.isdigit())


class ProcessFarm:
    """Real idle processes: ``workloads`` x WORKLOAD_PROCESSES named ones plus anonymous fillers."""

    def __init__(self) -> None:
        self._workload: dict[int, list[subprocess.Popen]] = {}
        self._fillers: list[subprocess.Popen] = []
        atexit.register(self.close)
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(sig)

            def handler(signum, frame, previous=previous):  # noqa: ANN001
                self.close()
                if callable(previous):
                    previous(signum, frame)
                raise SystemExit(128 + signum)

            signal.signal(sig, handler)

    def _spawn(self, argv0: str) -> subprocess.Popen:
        if self.size >= MAX_PROCESSES:
            raise RuntimeError(f"process farm is capped at {MAX_PROCESSES} processes")
        return subprocess.Popen([argv0, "86400"], executable=SLEEP, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)

    @property
    def size(self) -> int:
        """Processes this farm started and still holds."""
        return len(self._fillers) + sum(len(v) for v in self._workload.values())

    def ensure_workloads(self, count: int) -> None:
        """Make sure bench workloads 1..count each have their processes running."""
        for k in range(1, count + 1):
            if k not in self._workload:
                roles = ["server"] + [f"worker{i}" for i in range(1, WORKLOAD_PROCESSES)]
                self._workload[k] = [self._spawn(workload_argv0(k, role)) for role in roles]

    def workload_pids(self, k: int) -> list[int]:
        """Pids of bench workload ``k``'s processes (server first)."""
        return [p.pid for p in self._workload.get(k, [])]

    def resize_host(self, total: int, procfs: Path = Path("/proc")) -> int:
        """Spawn or kill fillers until the host lists about ``total`` processes; return the count seen."""
        others = count_processes(procfs) - len(self._fillers)
        want = max(0, total - others)
        while len(self._fillers) < want:
            self._fillers.append(self._spawn("headroom-bench-idle"))
        excess, self._fillers = self._fillers[want:], self._fillers[:want]
        _stop(excess)
        return count_processes(procfs)

    def close(self) -> None:
        """Kill and reap every process this farm started."""
        procs = self._fillers + [p for v in self._workload.values() for p in v]
        self._fillers, self._workload = [], {}
        _stop(procs)


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                p.kill()
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            print(f"bench: process {p.pid} did not exit", file=sys.stderr)


def listening_port(proc: subprocess.Popen, timeout: float = 30.0, what: str = "the child") -> int:
    """The TCP port ``proc`` listens on, once it does; raises RuntimeError when it exits or does not listen
    within ``timeout`` seconds.

    Children are started on port 0 (``127.0.0.1:0``), so the kernel picks a free port at their own bind.
    Picking a free port here and passing its number instead races: between this process closing its probe
    socket and the child binding the port, any client socket on the machine (a parallel test's thousand
    connections) can be given that same ephemeral port, and the child then fails to start, or a server of
    someone else answers on it."""
    import time

    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening")
        try:
            ports = sorted(c.laddr.port for c in psutil.Process(proc.pid).net_connections(kind="tcp")
                           if c.status == psutil.CONN_LISTEN)
        except psutil.Error:
            ports = []
        if ports:
            return ports[0]
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start listening within {timeout:g} s")

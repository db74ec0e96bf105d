"""The runtime of a loaded scenario: ``Scenario``, and what it makes and starts as it is used.

A Scenario (built by ``simulation.scenario.parse``) hands out its synthetic host (``simulation.host``), its
NVML driver stand-in (``simulation.nvml_driver``), its stand-in processes (``simulation.standin``, real or
simulated, with the serving runtimes' /metrics of ``simulation.runtime_metrics``) and the real processes its
``attach:`` rules find. Each piece is imported as it is first used; this module never imports the parser.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from headroom.simulation.signals import Signal
from headroom.simulation.spec import (
    AttachSpec,
    FaultSpec,
    GpuSpec,
    ScenarioError,
    StandInGpu,
    StandInSpec,
    WorkloadSpec,
)

if TYPE_CHECKING:  # each piece is imported where it is first used (see the module docstring)
    from http.server import ThreadingHTTPServer

    from headroom.jsontypes import JsonMapping, YamlValue
    from headroom.samples import MountUsage
    from headroom.simulation.host import SyntheticHost
    from headroom.simulation.host_spec import HostSpec
    from headroom.simulation.nvml_driver import NvmlDriver
    from headroom.sources import Paths

SIMULATED_PID_BASE = 4101  # the first made-up pid of a synthetic host's stand-ins
DEFAULT_CGROUP = "/user.slice/user-1000.slice/session-1.scope"  # a stand-in's cgroup unless declared: a login shell
ATTACH_REFRESH_SECONDS = 0.5  # how often the attach rules look again for their processes
ATTACH_MAX_PIDS = 256  # processes one rule lists at most (a pattern that matches every process stops there)


@dataclass(frozen=True)
class Scenario:
    """A simulated host, as loaded from a scenario file. Treat as immutable."""

    name: str
    source: str  # file it came from
    description: str
    seed: int
    driver_version: str
    nvml_version: str
    cuda_driver_version: int
    gpus: tuple[GpuSpec, ...]
    faults: tuple[FaultSpec, ...] = ()
    missing_functions: frozenset[str] = frozenset()
    workloads: tuple[WorkloadSpec, ...] = ()  # stand-in processes, started by start_processes()
    host: HostSpec | None = None  # synthetic host signals, or None (the real host)
    profiles: YamlValue = None  # raw `profiles:` data: workload profiles in the config.yaml `workloads:` format
    profiles_node: yaml.Node | None = field(default=None, compare=False, repr=False)  # its YAML node, for positions
    expected: Mapping[str, str] = field(default_factory=dict)  # profile name -> the primary it demonstrates
    fits: Mapping[str, bool] = field(default_factory=dict)  # profile name -> False: its declared load is meant not to fit
    attach: tuple[AttachSpec, ...] = ()  # real processes listed on simulated GPUs
    # what the scenario made as it was used, each key its own type: host (SyntheticHost), nvml (NvmlDriver), standins
    # (the running stand-ins), serving_drivers, serving_ports, serving_lock, attach_rules, attached
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    # -- synthetic host (headroom.simulation.host)
    def synthetic_host(self, clock: Callable[[], float] | None = None) -> SyntheticHost | None:
        """The SyntheticHost of the ``host:`` section (one per Scenario, made on first use), or None without one.

        ``clock`` as for nvml_library; passing one to a later call replaces the host's clock.
        """
        if self.host is None:
            return None
        from headroom.simulation.host import SyntheticHost

        with self._lock:
            host = self._cache.get("host")
            if host is None:
                host = self._cache["host"] = SyntheticHost(self.host, clock=clock)
            elif clock is not None:
                host.clock = clock
            return host

    def host_paths(self, collector: str) -> Paths | None:
        """The Paths (synthetic tree) collector ``collector`` reads under this scenario; None: the real host's."""
        host = self.synthetic_host()
        return None if host is None else host.paths_for(collector)

    def host_statvfs(self, mountpoint: str) -> MountUsage | None:
        """Stand-in for statvfs(2) on a declared shm mount: a MountUsage, or None (use the real syscall)."""
        host = self.synthetic_host()
        return None if host is None else host.statvfs(mountpoint)

    def update_host(self) -> None:
        """Bring the synthetic host tree, and the serving stand-ins' metrics, to the current simulation time
        (called before every tick)."""
        host = self.synthetic_host()
        if host is not None:
            host.update()
            for driver in self._cache.get("serving_drivers", ()):
                with driver.lock:
                    driver.advance(host.clock())

    def close(self) -> None:
        """Remove the synthetic host tree, if one was made. Idempotent."""
        with self._lock:
            host = self._cache.pop("host", None)
        if host is not None:
            host.close()

    def nvml_library(self, clock: Callable[[], float] | None = None) -> NvmlDriver:
        """The NVML driver stand-in of this scenario (``headroom.simulation.nvml_driver.NvmlDriver``, one per
        Scenario, created on first use), installed as the real pynvml binding's library.

        ``clock`` returns seconds since the scenario started; by default the wall time since creation.
        Passing a clock to a later call replaces the library's clock.
        """
        from headroom.simulation.nvml_driver import NvmlDriver

        with self._lock:
            lib = self._cache.get("nvml")
            if lib is None:
                lib = self._cache["nvml"] = NvmlDriver(self, clock=clock)
            elif clock is not None:
                lib.clock = clock
            return lib.install()

    # -- stand-in processes
    def start_processes(self, timeout: float = 20.0) -> dict[str, tuple[int, ...]]:
        """Start every workload's stand-in processes (once; later calls return the same pids).

        Returns workload name -> pids, main process first, then its children. With a synthetic host they are
        simulated processes of its /proc (``_start_simulated``); without one they are real, children of the
        calling thread, die with it (PR_SET_PDEATHSIG). ``stop_processes`` stops them. Raises ScenarioError
        when one does not start in ``timeout`` seconds (or a serving stand-in cannot listen).
        """
        from headroom.simulation import standin

        if self.host is not None:
            self.synthetic_host()  # made outside the lock (it takes it)
        with self._lock:
            running = self._cache.get("standins")
            if running is not None:
                return {name: pids for name, _, pids in running["workloads"]}
            if self.host is not None:
                return self._start_simulated()
            directory = str(Path(standin.__file__).parent)
            started: list[subprocess.Popen[bytes]] = []
            workloads: list[tuple[str, subprocess.Popen[bytes], tuple[int, ...]]] = []
            gpu_pids: list[tuple[int, StandInGpu]] = []
            try:
                for w in self.workloads:
                    spec = w.process.launch_spec()
                    if w.env:
                        spec["env"] = dict(w.env)
                    if w.serving is not None:  # it imports prometheus-client and headroom from the agent's path
                        import sys

                        spec["serving"] = {**w.serving.launch_spec(self._serving_port(w)), "sys_path": sys.path}
                    proc = standin.launch(spec, directory)
                    started.append(proc)
                    ready = standin.read_ready(proc, timeout)
                    pids = _pair_pids(w.process, ready, gpu_pids)
                    workloads.append((w.name, proc, tuple(pids)))
            except (RuntimeError, OSError, ValueError) as exc:
                _stop(started)
                raise ScenarioError(f"{self.source}: workloads: cannot start stand-in processes: {exc}") from None
            self._cache["standins"] = {"workloads": workloads, "gpus": gpu_pids}
            return {name: pids for name, _, pids in workloads}

    def _start_simulated(self) -> dict[str, tuple[int, ...]]:
        """With a synthetic host: the stand-ins are simulated processes in its /proc (made-up pids from
        SIMULATED_PID_BASE, in declaration order), using what the scenario declares whatever the machine does.
        A workload that serves a runtime's /metrics gets a real HTTP server in this process, whose counters and
        gauges follow the scenario clock (advanced with the host before every tick)."""
        host = self._cache["host"]
        pids = iter(range(SIMULATED_PID_BASE, SIMULATED_PID_BASE + 1_000_000))
        workloads: list[tuple[str, ThreadingHTTPServer | None, tuple[int, ...]]] = []
        gpu_pids: list[tuple[int, StandInGpu]] = []
        entries: list[tuple[int, int, StandInSpec, str, float | None, dict[str, str]]] = []
        started: list[ThreadingHTTPServer] = []
        try:
            for w in self.workloads:
                tree: list[tuple[int, int, StandInSpec]] = []
                _simulated_tree(w.process, 1, pids, tree)
                cgroup = w.process.cgroup or DEFAULT_CGROUP
                entries.extend((pid, ppid, spec, cgroup, w.process.cpu_quota, dict(w.env)) for pid, ppid, spec in tree)
                gpu_pids.extend((pid, use) for pid, _, spec in tree for use in spec.gpus)
                server = None
                if w.serving is not None:  # its runtime's /metrics over real HTTP, following scenario time
                    from headroom.simulation.runtime_metrics import serve

                    server, driver = serve(w.serving.launch_spec(self._serving_port(w)), Signal)
                    started.append(server)
                    with driver.lock:
                        driver.advance(host.clock())
                    self._cache.setdefault("serving_drivers", []).append(driver)
                workloads.append((w.name, server, tuple(pid for pid, _, _ in tree)))
        except OSError as exc:
            _close_servers(started)
            self._cache.pop("serving_drivers", None)
            raise ScenarioError(f"{self.source}: workloads: cannot serve a runtime's /metrics: {exc}") from None
        host.add_processes(entries)
        self._cache["standins"] = {"workloads": workloads, "gpus": gpu_pids, "simulated": True}
        return {name: pids for name, _, pids in workloads}

    def standin_pids(self) -> frozenset[int] | None:
        """The pids of the running stand-ins (empty before start_processes), or None for a scenario that
        declares no workloads. The processes collector counts no other process under a scenario that has some."""
        if not self.workloads:
            return None
        running = self._cache.get("standins")
        return frozenset() if running is None else frozenset(p for _, _, pids in running["workloads"] for p in pids)

    def _serving_port(self, w: WorkloadSpec) -> int:
        """The port workload ``w`` serves on: declared, or a free one chosen once (callers hold no lock)."""
        assert w.serving is not None
        if w.serving.port:
            return w.serving.port
        ports = self._cache.setdefault("serving_ports", {})
        with self._cache.setdefault("serving_lock", threading.Lock()):  # not _lock: start_processes holds it
            if w.name not in ports:
                import socket

                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", 0))
                    ports[w.name] = sock.getsockname()[1]
            return ports[w.name]

    def serving_endpoints(self) -> dict[str, str]:
        """Workload name -> the /metrics URL its stand-in serves (for workloads with ``serving:``)."""
        return {w.name: f"http://127.0.0.1:{self._serving_port(w)}/metrics" for w in self.workloads
                if w.serving is not None}

    def standin_workload(self, pid: int) -> str | None:
        """The scenario workload name of the running stand-in ``pid`` (its main process or a child), or None."""
        running = self._cache.get("standins")
        for name, _, pids in (running or {}).get("workloads", ()):
            if pid in pids:
                return name
        return None

    def standin_endpoint(self, pid: int) -> str | None:
        """The /metrics URL the stand-in ``pid`` (a workload's main process or one of its children) serves: its
        workload's when it declares ``serving:``, "" when it serves none; None when ``pid`` is no running stand-in.
        A stand-in's command line may name any port (``--port 8001``): this is where it really serves."""
        running = self._cache.get("standins")
        if running is None:
            return None
        for name, _, pids in running["workloads"]:
            if pid in pids:
                w = next((w for w in self.workloads if w.name == name), None)
                return "" if w is None or w.serving is None else \
                    f"http://127.0.0.1:{self._serving_port(w)}/metrics"
        return None

    def profile_nodes(self) -> yaml.Node | None:
        """The ``profiles:`` YAML node, where a profile named like a serving workload and without an
        ``endpoint`` gets the stand-in's URL (so scenarios need no fixed ports)."""
        node = self.profiles_node
        endpoints = self.serving_endpoints()
        if node is None or not endpoints or not isinstance(node, yaml.SequenceNode):
            return node
        import copy

        node = copy.deepcopy(node)
        for item in node.value:
            if not isinstance(item, yaml.MappingNode):
                continue
            keys = {k.value: v for k, v in item.value if isinstance(k, yaml.ScalarNode)}
            name = getattr(keys.get("name"), "value", None)
            if name in endpoints and "endpoint" not in keys:
                item.value.append((yaml.ScalarNode("tag:yaml.org,2002:str", "endpoint", item.start_mark, item.end_mark),
                                   yaml.ScalarNode("tag:yaml.org,2002:str", endpoints[name], item.start_mark,
                                                   item.end_mark)))
        return node

    def stop_processes(self) -> None:
        """Stop the stand-ins started by start_processes (SIGTERM, then SIGKILL after 2 s). Idempotent."""
        with self._lock:
            running = self._cache.pop("standins", None)
            host = self._cache.get("host")
            self._cache.pop("serving_drivers", None)
        if running is not None and running.get("simulated"):
            _close_servers([server for _, server, _ in running["workloads"] if server is not None])
        elif running is not None:
            _stop([proc for _, proc, _ in running["workloads"]])
        if running is not None and host is not None:
            host.remove_processes([pid for _, _, pids in running["workloads"] for pid in pids])

    def standin_processes(self, gpu: int) -> list[tuple[int, StandInGpu]]:
        """(pid, use) of the running stand-ins on GPU index ``gpu``, then of the attached processes; empty
        when none run."""
        running = self._cache.get("standins")
        out = [] if running is None else [(pid, use) for pid, use in running["gpus"] if use.gpu == gpu]
        out += [(pid, use) for pid, use in self._attached_by_rules() if use.gpu == gpu]
        return out + [(pid, use) for pid, use, _ in self._cache.get("attached", ()) if use.gpu == gpu]

    def _attached_by_rules(self) -> list[tuple[int, StandInGpu]]:
        """(pid, use) of the live processes the ``attach:`` rules find, looked for again every
        ATTACH_REFRESH_SECONDS (a process that ended leaves the list within that)."""
        if not self.attach:
            return []
        import time

        now = time.monotonic()
        with self._lock:
            found = self._cache.get("attach_rules")
            if found is not None and now - found[0] < ATTACH_REFRESH_SECONDS:
                return found[1]
        out = [(pid, spec.use) for spec in self.attach for pid in _attach_pids(spec)]
        with self._lock:
            self._cache["attach_rules"] = (now, out)
        return out

    def attach_processes(self, processes: tuple[tuple[int, StandInGpu, int | None], ...]) -> None:
        """Processes the caller runs itself, listed on their GPUs like stand-ins (the bench's churning pods):
        (pid, use, MIG instance: an index into that GPU's instances, or None). Replaces the previous set."""
        self._cache["attached"] = processes

    def attached_instances(self, gpu: int) -> dict[int, int]:
        """pid -> MIG instance index of the attached processes on GPU index ``gpu`` that run in one."""
        return {pid: mig for pid, use, mig in self._cache.get("attached", ()) if use.gpu == gpu and mig is not None}


def _pair_pids(spec: StandInSpec, ready: JsonMapping, gpu_pids: list[tuple[int, StandInGpu]]) -> list[int]:
    """Pids of a started stand-in tree (depth first, parent before children); records their GPU uses."""
    pid = int(ready["pid"])
    gpu_pids.extend((pid, use) for use in spec.gpus)
    out = [pid]
    for child, child_ready in zip(spec.children, ready["children"], strict=True):
        out.extend(_pair_pids(child, child_ready, gpu_pids))
    return out


def _simulated_tree(spec: StandInSpec, ppid: int, pids: Iterator[int], out: list[tuple[int, int, StandInSpec]]) -> None:
    """(pid, ppid, spec) of a simulated stand-in and its children, depth first, parent first."""
    pid = next(pids)
    out.append((pid, ppid, spec))
    for child in spec.children:
        _simulated_tree(child, pid, pids, out)


def _close_servers(servers: list[ThreadingHTTPServer]) -> None:
    for server in servers:
        server.shutdown()
        server.server_close()


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _attach_pids(spec: AttachSpec, proc: Path = Path("/proc")) -> list[int]:
    """The live thread-group leaders ``spec`` names (at most ATTACH_MAX_PIDS), in pid order."""
    pids: set[int] = set()
    if spec.pid_file:
        import glob

        for name in sorted(glob.glob(spec.pid_file))[:ATTACH_MAX_PIDS]:
            try:
                text = Path(name).read_text(encoding="ascii", errors="replace")[:4096]
            except OSError:
                continue  # written as we look, or gone
            pids.update(int(w) for w in text.split() if w.isdigit() and len(w) <= 9)
    if spec.cmdline:
        from headroom.workload.profiles import compile_cmdline_pattern

        pattern = compile_cmdline_pattern(spec.cmdline)
        for entry in proc.iterdir():
            if not entry.name.isdigit() or int(entry.name) in pids:
                continue
            try:
                argv = (entry / "cmdline").read_bytes()[:4096].split(b"\0")
            except OSError:
                continue
            if pattern.search(" ".join(a.decode(errors="replace") for a in argv if a)):
                pids.add(int(entry.name))
            if len(pids) >= ATTACH_MAX_PIDS:
                break
    live = [pid for pid in sorted(pids) if pid > 0 and _is_leader(proc, pid)]
    return live[:ATTACH_MAX_PIDS]


def _is_leader(proc: Path, pid: int) -> bool:
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("Tgid:"):
                return line.split()[1] == str(pid)
    except (OSError, IndexError):
        return False
    return False



"""Assembles the agent from a Config and flags, and runs it: sampler, HTTP listeners, signals, sd_notify."""

from __future__ import annotations

import errno
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import structlog

from headroom import __version__
from headroom.analysis.pipeline import Analysis, Findings
from headroom.config import Config
from headroom.exposition import render
from headroom.exposition.server import HeadroomHTTPServer
from headroom.jsontypes import Settings
from headroom.sampler import Sampler
from headroom.samples import Findings as FindingsView
from headroom.samples import PreviousTick, Sample, Snapshot
from headroom.schema import parse_listen_address
from headroom.sources import Collector, Paths, SourceContext, load_all

if TYPE_CHECKING:
    from headroom.exposition.webconfig import WebConfig, WebConfigWatcher
    from headroom.record import Recorder
    from headroom.simulation import Scenario

log = structlog.get_logger("headroom.daemon")

DEFAULT_LISTEN_ADDRESS = ":9843"
DEFAULT_TELEMETRY_PATH = "/metrics"
RELOAD_TIMEOUT_SECONDS = 30.0  # a SIGHUP reload still running after this is reported as stuck


EXIT_STARTUP = 1  # the agent cannot start (a file it cannot read or write, the driver ...)
EXIT_USAGE = 2  # bad input: an unknown scenario, a scenario file that does not parse (as configuration errors)
EXIT_ADDRESS_IN_USE = 3  # --web.listen-address is taken: `make demo` suggests another ADDRESS on this one only


class StartupError(Exception):
    """The agent cannot start; the message says why and what to do, ``code`` the exit status (EXIT_*)."""

    def __init__(self, message: str, code: int = EXIT_STARTUP):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Options:
    """Flags that override the configuration file (None: not given on the command line)."""

    paths: Paths = field(default_factory=Paths)
    collectors: Mapping[str, bool] = field(default_factory=dict)  # --collector.X / --no-collector.X
    sample_interval: float | None = None
    simulate: str | None = None
    listen_addresses: Sequence[str] = ()
    telemetry_path: str | None = None
    web_config_file: str | None = None
    record: str | None = None  # --record FILE
    record_max_bytes: int | None = None
    # --kubernetes, --kubernetes.pod-resources-socket, --hpc-job-mapping-dir, --workloads.auto: settings of
    # the identity collector that override ``collectors.identity`` in the configuration
    identity: Settings = field(default_factory=dict)
    state_dir: str | None = None  # --state.dir: where the last probe result is (probe/store.py)


class LatestSample:
    """``SourceContext.previous``: the previous tick's input to the collectors (``samples.PreviousTick``), built
    from the sampler's newest Snapshot (None until the first tick): its Sample's fields, and of its Findings each
    workload's verdict scores and the host's pressures (the processes collector names neighbours only while a
    workload's cpu, disk_io or host_memory scores: sources/neighbours.py). Built once per Snapshot, however many
    collectors ask."""

    def __init__(self, sampler: Sampler | None = None) -> None:
        self.sampler = sampler
        # (the Snapshot, its PreviousTick): one pair, swapped by one assignment (collector lanes call this)
        self._last: tuple[Snapshot, PreviousTick] | None = None

    def __call__(self) -> PreviousTick | None:
        snap = self.sampler.snapshot if self.sampler is not None else None
        if snap is None:
            return None
        last = self._last
        if last is not None and last[0] is snap:
            return last[1]
        tick = previous_tick(snap.sample, snap.findings)
        self._last = (snap, tick)
        return tick


def previous_tick(sample: Sample, findings: FindingsView | None) -> PreviousTick:
    """What the collectors read of a tick: its Sample's fields, and of its Findings each workload's verdict
    scores and the host's pressures (``workload_scores`` None: no analysis, or it failed, that tick)."""
    if isinstance(findings, Findings):
        return PreviousTick.of(sample, tuple(w.verdict.scores for w in findings.workload_findings),
                               findings.host.host_pressure)
    return PreviousTick.of(sample)


def enabled_collectors(config: Config, options: Options) -> list[str]:
    """Collector names to run, in registry order: flag, else config, else the collector's default."""
    names = []
    for name, cls in load_all().items():
        flag = options.collectors.get(name)
        enabled = flag if flag is not None else config.collector_enabled(name, cls.default_enabled)
        if enabled:
            names.append(name)
    return names


def build_collectors(config: Config, options: Options, scenario: Scenario | None,
                     previous: LatestSample | None = None,
                     monotonic: Callable[[], float] | None = None) -> list[Collector]:
    """The enabled collectors; ``monotonic``: their clock (None: time.monotonic; a simulation on a manual clock
    passes that clock, so rates the collectors compute follow scenario time)."""
    registry = load_all()
    interval = options.sample_interval or config.sample_interval
    out = []
    for name in enabled_collectors(config, options):
        settings = {k: v for k, v in (config.collectors.get(name) or {}).items() if v is not None and k != "enabled"}
        if name == "identity":
            settings.update({k: v for k, v in options.identity.items() if v is not None})
        if name == "probe" and options.state_dir:
            settings["state_dir"] = options.state_dir
        # a scenario with a host: section hands the host collectors its synthetic /proc and /sys tree
        paths = (scenario.host_paths(name) if scenario is not None else None) or options.paths
        ctx = SourceContext(paths=paths, settings=settings, scenario=scenario, interval=interval,
                            workloads=tuple(config.workloads), previous=previous, monotonic=monotonic)
        out.append(registry[name](ctx))
    return out


def load_scenario(name: str | None) -> Scenario | None:
    if name is None:
        return None
    from headroom.simulation import ScenarioError, load_scenario

    try:
        return load_scenario(name)
    except ScenarioError as exc:
        raise StartupError(str(exc), EXIT_USAGE) from None


def with_scenario_profiles(config: Config, scenario: Scenario | None) -> Config:
    """The configuration plus the workload profiles the simulation scenario declares (``profiles:``)."""
    from headroom.config import ConfigError, with_profiles

    if scenario is None or getattr(scenario, "profiles_node", None) is None:
        return config
    try:
        return with_profiles(config, scenario.profile_nodes(), scenario.source)
    except ConfigError as exc:
        raise StartupError(str(exc)) from None


AUTO_WORKLOADS_NOTE = ("none declared: workloads found on their own (pods, jobs, units, recognised launchers such "
                       "as vllm serve) are logged as auto_workload_found when they appear")


def workloads_fields(config: Config) -> dict[str, list[str] | str]:
    """The started / config_reloaded event's workload fields: the declared profiles (the configuration's and the
    scenario's), or, with none, a note that automatic ones come later (never ``workloads=[]``)."""
    names = [w.name for w in config.workloads]
    return {"workloads": names} if names else {"workloads_note": AUTO_WORKLOADS_NOTE}


def build_sampler(config: Config, options: Options) -> Sampler:
    scenario = load_scenario(options.simulate)
    config = with_scenario_profiles(config, scenario)
    interval = options.sample_interval or config.sample_interval
    latest = LatestSample()
    collectors = build_collectors(config, options, scenario, latest)
    sampler = Sampler(
        collectors,
        interval=interval,
        window_seconds=config.agent["window"],
        collector_timeout=config.agent.get("collector_timeout"),
        scenario=getattr(scenario, "name", options.simulate) if scenario is not None else None,
        analyse=make_analysis(config),
        render=render.render,
        before_tick=scenario.update_host if scenario is not None and scenario.host is not None else None,
        on_snapshot=HeapTrim(),
    )
    latest.sampler = sampler
    sampler.scenario_object = scenario
    if options.record:
        sampler.recorder = make_recorder(config, options, sampler)
    return sampler


def make_recorder(config: Config, options: Options, sampler: Sampler) -> Recorder:
    """A Recorder for --record; a path that cannot be opened stops start-up with a clear message."""
    import time as _time

    from headroom.record import DEFAULT_MAX_BYTES, Recorder

    path = Path(options.record)
    try:
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        sampler.stop()
        raise StartupError(f"cannot record to {path}: {exc.strerror or exc}") from None
    text = None
    if config.source:
        try:
            text = Path(config.source).read_text(encoding="utf-8")
        except OSError:
            text = None
    scenario = sampler.scenario_object
    header = {"interval": sampler.interval, "window": config.agent["window"], "scenario": sampler.scenario,
              "config": text, "config_file": config.source, "started": _time.time(),
              "scenario_file": getattr(scenario, "source", None),
              "scenario_profiles": getattr(scenario, "profiles", None)}
    return Recorder(path, header, options.record_max_bytes or DEFAULT_MAX_BYTES)


def cap_window(sampler: Sampler, window_seconds: float) -> int | None:
    """After the first tick, with the GPUs actually present: shrink the sample window to the memory
    budget (config.WINDOW_MEMORY_BUDGET_BYTES) when validation's assumption of 8 GPUs was too low.
    Returns the new length in samples, or None when the window fits."""
    from collections import deque

    from headroom.config import (
        SAMPLE_BYTES_BASE,
        SAMPLE_BYTES_PER_GPU,
        WINDOW_MEMORY_BUDGET_BYTES,
        window_budget_problem,
    )

    snap = sampler.snapshot
    nvml = snap.sample.data("nvml") if snap is not None else None
    gpus = len(getattr(nvml, "gpus", ()) or ())
    problem = window_budget_problem(window_seconds, sampler.interval, gpus)
    if problem is None:
        return None
    fits = max(2, WINDOW_MEMORY_BUDGET_BYTES // (SAMPLE_BYTES_BASE + SAMPLE_BYTES_PER_GPU * gpus))
    sampler.window = deque(sampler.window, maxlen=fits)
    log.warning("window_capped", reason=problem, samples=fits, seconds=round(fits * sampler.interval, 1))
    return fits


def make_analysis(config: Config) -> Analysis:
    """The per-tick analysis for this configuration: window -> (derived values, findings)."""
    return Analysis(config)


def _listen(addresses: Sequence[str], sampler: Sampler, telemetry_path: str,
            web_config: Callable[[], WebConfig] | None = None) -> list[HeadroomHTTPServer]:
    from headroom.exposition.webconfig import WebConfig

    servers = []
    for address in addresses:
        try:
            host, port, family = parse_listen_address(address)
        except ValueError as exc:
            raise StartupError(str(exc)) from None
        try:
            servers.append(HeadroomHTTPServer((host, port), sampler, telemetry_path, family=family,
                                              web_config=web_config or WebConfig))
        except OSError as exc:
            for s in servers:
                s.server_close()
            if exc.errno != errno.EADDRINUSE:
                raise StartupError(f"cannot listen on {address}: {exc.strerror or exc}") from None
            raise StartupError(f"cannot listen on {address}: {exc.strerror or exc}; {port_holder_text(port)}; choose "
                               "another with --web.listen-address HOST:PORT", EXIT_ADDRESS_IN_USE) from None
    return servers


MAX_PROC_SCAN = 100_000  # processes port_holder looks at, at most (a start-up error path, bounded anyway)


def port_holder(port: int, proc: str | Path = "/proc") -> tuple[int, str] | None:
    """(pid, command line) of the process listening on TCP ``port``, or None when this user cannot see it: the
    listening socket's inode from /proc/net/tcp and tcp6, then the process with a ``socket:[inode]`` descriptor."""
    root = Path(proc)
    inodes = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (root / table).read_text(encoding="ascii", errors="replace").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            # sl local_address rem_address st ... inode: state 0A is LISTEN
            if len(f) > 9 and f[3] == "0A" and f[1].rsplit(":", 1)[-1].upper() == f"{port:04X}" and f[9] != "0":
                inodes.add(f"socket:[{f[9]}]")
    if not inodes:
        return None
    for n, entry in enumerate(root.iterdir()):
        if n >= MAX_PROC_SCAN:
            break
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:  # another user's process, or gone
            continue
        for fd in fds:
            try:
                target = fd.readlink()
            except OSError:
                continue
            if str(target) in inodes:
                try:
                    raw = (entry / "cmdline").read_bytes()[:4096]
                except OSError:
                    raw = b""
                return int(entry.name), raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
    return None


def port_holder_text(port: int, proc: str | Path = "/proc") -> str:
    """'another headroom (pid 4242) listens there', 'pid 77 (nginx: master process) listens there', or, when the
    listener belongs to a process this user cannot see, 'another process uses it'."""
    from headroom.safeio import clip

    found = port_holder(port, proc)
    if found is None:
        return "another process uses it"
    pid, cmdline = found
    if "headroom" in cmdline.split(" run", 1)[0]:
        return f"another headroom (pid {pid}) listens there (stop it with kill {pid})"
    return f"pid {pid} ({clip(cmdline, 80) or '?'}) listens there"


def listening_url(host: str, port: int) -> str:
    """The URL to open for a listener: wildcard addresses as localhost, IPv6 in brackets."""
    if host in ("0.0.0.0", "::", ""):
        host = "localhost"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/"


def _web_config(options: Options, config: Config) -> Callable[[], WebConfig]:
    """The callable the listeners ask for TLS/auth settings; fails start-up on an invalid file."""
    from headroom.exposition.webconfig import WebConfig, WebConfigError, WebConfigWatcher

    path = options.web_config_file or config.web.get("config_file")
    if not path:
        return WebConfig
    try:
        return WebConfigWatcher(path).current
    except WebConfigError as exc:
        raise StartupError(str(exc)) from None


def _watcher_of(web_config: Callable[[], WebConfig] | None) -> WebConfigWatcher | None:
    """The WebConfigWatcher behind a web_config callable (its bound ``current``), or None."""
    return getattr(web_config, "__self__", None)


def start_standins(scenario: Scenario | None) -> None:
    """Start a simulation scenario's stand-in workload processes; StartupError when they cannot start."""
    if scenario is None or not getattr(scenario, "workloads", ()):
        return
    from headroom.simulation import ScenarioError

    try:
        started = scenario.start_processes()
    except ScenarioError as exc:
        raise StartupError(str(exc)) from None
    log.info("standins_started", workloads={name: len(pids) for name, pids in started.items()})


def stop_standins(scenario: Scenario | None) -> None:
    """Stop the stand-ins start_standins started (idempotent; they also die with the agent)."""
    if scenario is not None and getattr(scenario, "workloads", ()):
        scenario.stop_processes()


class Agent:
    """The running agent: its sampler, listeners and signal-driven life cycle."""

    def __init__(self, config: Config, options: Options, config_path: Path | None) -> None:
        from headroom.notify import Notifier, Watchdog

        self.config = config
        self.options = options
        self.config_path = config_path
        self.notifier = Notifier()
        self.sampler = build_sampler(config, options)
        self._scenario = self.sampler.scenario_object
        addresses = list(options.listen_addresses) or list(config.web.get("listen_address") or
                                                          [DEFAULT_LISTEN_ADDRESS])
        self.addresses = addresses
        self.telemetry_path = options.telemetry_path or config.web.get("telemetry_path") or DEFAULT_TELEMETRY_PATH
        try:
            web_config = _web_config(options, config)
            self.sampler.web_config_watcher = _watcher_of(web_config)
            self.servers = _listen(addresses, self.sampler, self.telemetry_path, web_config)
        except StartupError:
            self.sampler.stop()
            raise
        try:
            start_standins(self._scenario)
        except StartupError:
            for srv in self.servers:
                srv.server_close()
            self.sampler.stop()
            raise
        self.watchdog = Watchdog(self.notifier, lambda: self.sampler.healthy()[0])
        self._stop = threading.Event()
        self._stop_signal: str | None = None  # the signal that asked to stop (request_stop), logged by _serve_signals
        self._reload = threading.Event()

    def request_stop(self, signum: int, _frame: FrameType | None = None) -> None:
        # a signal handler runs between two bytecodes of the main thread, which may be inside a log line, holding the
        # logger's (non-reentrant) write lock: logging here deadlocked a Ctrl-C about 1 in 15 times. It only records
        # the signal; _serve_signals logs it once the wait wakes
        self._stop_signal = signal.Signals(signum).name
        self._stop.set()

    def request_reload(self, signum: int = signal.SIGHUP, _frame: FrameType | None = None) -> None:
        self._reload.set()

    def reload(self) -> bool:
        """Re-read the configuration and workload drop-ins; keep the running one when invalid."""
        from headroom.config import ConfigError, load_config

        self.notifier.reloading("reloading configuration")
        try:
            config = load_config(self.config_path)
        except ConfigError as exc:
            self.sampler.config_reload_ok = False
            log.error("config_reload_failed", config=str(self.config_path), errors=[str(i) for i in exc.issues])
            self.notifier.ready("configuration reload failed; previous configuration still running")
            return False
        try:
            merged = with_scenario_profiles(config, self._scenario)
        except StartupError as exc:  # cannot happen for a scenario that loaded at start, but never crash
            log.error("config_reload_failed", config=str(self.config_path), errors=[str(exc)])
            self.sampler.config_reload_ok = False
            return False
        collectors = build_collectors(merged, self.options, self._scenario, LatestSample(self.sampler))
        self.sampler.reconfigure(collectors, analyse=make_analysis(merged))
        self.config = config
        self.sampler.config_reload_ok = True
        self.sampler.config_reload_success_timestamp = time.time()
        log.info("config_reloaded", config=str(self.config_path or "(defaults)"), **workloads_fields(merged))
        self.notifier.ready("configuration reloaded")
        return True

    def _serve_signals(self) -> None:
        """Wait for SIGTERM; run each SIGHUP's reload in a worker thread, one at a time (SIGHUPs that
        arrive meanwhile are folded into one more reload), so that a reload stuck on a file never
        keeps SIGTERM from stopping the agent; one stuck past RELOAD_TIMEOUT_SECONDS is reported."""
        worker: threading.Thread | None = None
        started = 0.0
        reported = False
        while not self._stop.wait(0.1):
            if worker is not None and not worker.is_alive():
                worker = None
            if worker is None and self._reload.is_set():
                self._reload.clear()
                worker = threading.Thread(target=self.reload, name="config-reload", daemon=True)
                started, reported = time.monotonic(), False
                worker.start()
            elif worker is not None and not reported and time.monotonic() - started > RELOAD_TIMEOUT_SECONDS:
                reported = True
                self.sampler.config_reload_ok = False
                log.error("config_reload_stuck", config=str(self.config_path), seconds=RELOAD_TIMEOUT_SECONDS,
                          effect="the previous configuration keeps running; SIGTERM still stops the agent")
                self.notifier.ready("configuration reload stuck; previous configuration still running")
        log.info("signal_received", signal=self._stop_signal)

    def serve(self) -> int:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGHUP, self.request_reload)
        self.sampler.tick()  # the first sample before serving, so /metrics never starts empty
        cap_window(self.sampler, self.config.agent["window"])
        self.sampler.start()
        for srv in self.servers:
            threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.5}, name="http",
                             daemon=True).start()
            host, port = srv.server_address[:2]
            log.info("listening", address=f"{host}:{port}", telemetry_path=self.telemetry_path,
                     url=listening_url(host, port))
        log.info("started", version=__version__, collectors=self.sampler.collector_names,
                 interval_seconds=self.sampler.interval, config=self.config.source or "(defaults)",
                 simulate=self.sampler.scenario, **workloads_fields(with_scenario_profiles(self.config, self._scenario)))
        self.notifier.ready(f"sampling every {self.sampler.interval:g}s, serving {', '.join(self.addresses)}")
        self.watchdog.start()
        self._serve_signals()
        self.notifier.stopping("shutting down")
        self.watchdog.stop()
        for srv in self.servers:
            srv.shutdown()
            srv.server_close()
        self.sampler.stop()
        stop_standins(self._scenario)
        log.info("stopped")
        return 0


M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


def limit_malloc_arenas(arenas: int = 1) -> bool:
    """Ask glibc's malloc for at most ``arenas`` arenas, as MALLOC_ARENA_MAX does; before any thread starts.

    glibc gives each thread that allocates its own arena (up to 8 per core), and memory freed in one is not
    reused by another: the collector lane, the tick and the HTTP threads each kept their own partly free heap
    (about 2 MiB more resident with a full window, docs/benchmarks.md). Python allocates under the GIL, so one
    arena costs no contention. A MALLOC_ARENA_MAX the user set wins; elsewhere than glibc nothing changes.
    Returns True when the limit was set."""
    import ctypes
    import os

    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(M_ARENA_MAX, arenas) == 1


class HeapTrim:
    """After a tick, at most every ``every`` seconds: hand the C heap's free pages back to the system (glibc's
    malloc_trim). Each tick frees what it allocated, but the pages stay resident, scattered between what the
    window keeps; about 2-3 MiB with a full window (docs/benchmarks.md), for ~0.5 ms per call. Does nothing where
    the C library has no malloc_trim."""

    def __init__(self, every: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        import ctypes

        try:
            # Any: a ctypes foreign function (its class is private)
            self.trim: Any = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            self.trim = None
        else:
            self.trim.argtypes, self.trim.restype = (ctypes.c_size_t,), ctypes.c_int
        self.every, self._clock, self._next = every, clock, 0.0

    def __call__(self, _snapshot: Snapshot | None = None) -> None:
        now = self._clock()
        if self.trim is not None and now >= self._next:
            self._next = now + self.every
            self.trim(0)


def run(config: Config, options: Options, config_path: Path | None = None) -> int:
    """Run until SIGTERM/SIGINT; SIGHUP reloads. Returns the process exit code."""
    limit_malloc_arenas()
    return Agent(config, options, config_path).serve()


def pending_notes(snap: Snapshot, samples: int) -> list[str]:
    """One line per verdict still pending after the snapshot's ticks: what it would be, and how many samples
    would pass analysis.hold (a snapshot of 2 samples never does at the default 20 s)."""
    import math

    f = snap.findings
    verdicts = [(f"workload {w.name}", w.verdict) for w in getattr(f, "workload_findings", ())]
    verdicts += [(f"GPU {g.index}", g.verdict) for g in getattr(f, "gpu_findings", ())]
    out = []
    for who, v in verdicts:
        if not getattr(v, "is_pending", False):
            continue
        score = v.scores.get(v.pending)
        held = v.pending_seconds or 0.0
        hold = held + (v.confirm_in_seconds or 0.0)
        needed = samples + math.ceil((v.confirm_in_seconds or 0.0) / max(snap.interval, 1e-9))
        out.append(f"{who}: pending {v.pending}" + ("" if score is None else f" (score {score:.2f})")
                   + f", held {held:.0f} s of the {hold:.0f} s hold (analysis.hold); the primary stays {v.primary}"
                   f" in this snapshot: {needed} samples (--samples {needed}) would confirm it if it holds")
    return out


def snapshot(config: Config, options: Options, samples: int, fmt: str, notes: list[str] | None = None) -> bytes:
    """Run ``samples`` ticks at the interval and return the last exposition (or JSON). ``notes``: gets one line
    per verdict still pending (pending_notes); the JSON carries them too."""
    import json
    import time

    from headroom.samples import to_jsonable

    sampler = build_sampler(config, options)
    try:
        start_standins(sampler.scenario_object)
        snap = None
        for i in range(samples):
            if i:
                time.sleep(sampler.interval)
            snap = sampler.tick()
    finally:
        sampler.stop()
        stop_standins(sampler.scenario_object)
    assert snap is not None
    pending = pending_notes(snap, samples)
    if notes is not None:
        notes.extend(pending)
    if fmt == "json":
        doc = {
            "version": __version__,
            "timestamp": snap.sample.timestamp,
            "scenario": snap.scenario,
            "sources": to_jsonable(snap.sample.sources),
            "derived": to_jsonable(snap.rates),
            "findings": to_jsonable(snap.findings),
            "pending": pending,
        }
        return (json.dumps(doc, indent=1) + "\n").encode()
    return snap.exposition


def resolve_config_path(flag: str | None) -> Path | None:
    from headroom.config import default_config_path

    return Path(flag) if flag else default_config_path()


def found_gpus(config: Config, options: Options) -> tuple[int | None, int | None, str, str]:
    """(memory per GPU, GPU count, where from, GPU name) from one NVML read (real or simulated)."""
    from headroom.sources import CollectorError, load_all

    load_all()
    scenario = load_scenario(options.simulate)
    from dataclasses import replace

    collectors = [c for c in build_collectors(config, replace(options, collectors={"nvml": True}), scenario)
                  if c.name == "nvml"]
    if not collectors:
        return None, None, "no NVML collector", ""
    nvml = collectors[0]
    from headroom import logs

    try:
        with logs.expected("nvml_down"):  # no driver is an answer here, printed below, not an error
            data = nvml.collect()
    except (CollectorError, OSError) as exc:
        return None, None, f"no GPU found ({exc})", ""
    finally:
        nvml.close()
    totals = [g.memory_total_bytes for g in data.gpus if g.up and g.memory_total_bytes]
    if not totals:
        return None, None, "no GPU found" + (f" ({data.error})" if data.error else ""), ""
    where = f"{len(totals)} x {data.gpus[0].name} found by NVML" + (" (simulated)" if data.simulated else "")
    return min(totals), len(totals), where, data.gpus[0].name or ""

"""Assembles the agent from a Config and flags, and runs it: sampler, HTTP listeners, signals, sd_notify."""

from __future__ import annotations

import signal
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from headroom import __version__
from headroom.config import Config
from headroom.exposition.server import HeadroomHTTPServer, parse_listen_address
from headroom.sampler import Sampler
from headroom.sources import Collector, Paths, SourceContext, load_all

log = structlog.get_logger("headroom.daemon")

DEFAULT_LISTEN_ADDRESS = ":9843"
DEFAULT_TELEMETRY_PATH = "/metrics"


class StartupError(Exception):
    """The agent cannot start; the message says why and what to do."""


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


def enabled_collectors(config: Config, options: Options) -> list[str]:
    """Collector names to run, in registry order: flag, else config, else the collector's default."""
    names = []
    for name, cls in load_all().items():
        flag = options.collectors.get(name)
        enabled = flag if flag is not None else config.collector_enabled(name, cls.default_enabled)
        if enabled:
            names.append(name)
    return names


def build_collectors(config: Config, options: Options, scenario: Any) -> list[Collector]:
    registry = load_all()
    interval = options.sample_interval or config.sample_interval
    out = []
    for name in enabled_collectors(config, options):
        settings = {k: v for k, v in (config.collectors.get(name) or {}).items() if v is not None and k != "enabled"}
        ctx = SourceContext(paths=options.paths, settings=settings, scenario=scenario, interval=interval)
        out.append(registry[name](ctx))
    return out


def load_scenario(name: str | None) -> Any:
    if name is None:
        return None
    from headroom.simulation import ScenarioError, load_scenario

    try:
        return load_scenario(name)
    except ScenarioError as exc:
        raise StartupError(str(exc)) from None


def build_sampler(config: Config, options: Options) -> Sampler:
    scenario = load_scenario(options.simulate)
    interval = options.sample_interval or config.sample_interval
    collectors = build_collectors(config, options, scenario)
    return Sampler(
        collectors,
        interval=interval,
        window_seconds=config.agent["window"],
        collector_timeout=config.agent.get("collector_timeout"),
        scenario=getattr(scenario, "name", options.simulate) if scenario is not None else None,
    )


def _listen(addresses: Sequence[str], sampler: Sampler, telemetry_path: str) -> list[HeadroomHTTPServer]:
    servers = []
    for address in addresses:
        try:
            host, port, family = parse_listen_address(address)
        except ValueError as exc:
            raise StartupError(str(exc)) from None
        try:
            servers.append(HeadroomHTTPServer((host, port), sampler, telemetry_path, family=family))
        except OSError as exc:
            for s in servers:
                s.server_close()
            raise StartupError(f"cannot listen on {address}: {exc.strerror or exc}") from None
    return servers


def run(config: Config, options: Options) -> int:
    """Run until SIGTERM/SIGINT. Returns the process exit code."""
    from headroom.notify import Notifier, Watchdog

    notifier = Notifier()
    sampler = build_sampler(config, options)
    addresses = list(options.listen_addresses) or list(config.web.get("listen_address") or [DEFAULT_LISTEN_ADDRESS])
    telemetry_path = options.telemetry_path or config.web.get("telemetry_path") or DEFAULT_TELEMETRY_PATH
    try:
        servers = _listen(addresses, sampler, telemetry_path)
    except StartupError:
        sampler.stop()
        raise
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal_received", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    sampler.tick()  # the first sample before serving, so /metrics never starts empty
    sampler.start()
    threads = []
    for srv in servers:
        t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.5}, name="http", daemon=True)
        t.start()
        threads.append(t)
        host, port = srv.server_address[:2]
        log.info("listening", address=f"{host}:{port}", telemetry_path=telemetry_path)
    log.info("started", version=__version__, collectors=sampler.collector_names,
             interval_seconds=sampler.interval, config=config.source or "(defaults)",
             simulate=sampler.scenario)
    watchdog = Watchdog(notifier, lambda: sampler.healthy()[0])
    notifier.ready(f"sampling every {sampler.interval:g}s, serving {', '.join(addresses)}")
    watchdog.start()
    stop.wait()
    notifier.stopping("shutting down")
    watchdog.stop()
    for srv in servers:
        srv.shutdown()
        srv.server_close()
    sampler.stop()
    log.info("stopped")
    return 0


def snapshot(config: Config, options: Options, samples: int, fmt: str) -> bytes:
    """Run ``samples`` ticks at the interval and return the last exposition (or JSON)."""
    import json
    import time

    from headroom.samples import to_jsonable

    sampler = build_sampler(config, options)
    try:
        snap = None
        for i in range(samples):
            if i:
                time.sleep(sampler.interval)
            snap = sampler.tick()
    finally:
        sampler.stop()
    assert snap is not None
    if fmt == "json":
        doc = {
            "version": __version__,
            "timestamp": snap.sample.timestamp,
            "scenario": snap.scenario,
            "sources": to_jsonable(snap.sample.sources),
            "derived": to_jsonable(snap.rates),
            "findings": to_jsonable(snap.findings),
        }
        return (json.dumps(doc, indent=1) + "\n").encode()
    return snap.exposition


def resolve_config_path(flag: str | None) -> Path | None:
    from headroom.config import default_config_path

    return Path(flag) if flag else default_config_path()

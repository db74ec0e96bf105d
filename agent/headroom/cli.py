"""Command line: Prometheus-style flags (``--config.file``, ``--web.listen-address`` ...).

Every bad input ends in one clear message on stderr and exit status 2 (usage, configuration, an unknown
scenario), 1 (start-up failed) or 3 (the listen address is taken), never a traceback. ``probe`` has its own:
0 a capacity measured, 1 none, 2 bad input, 130 interrupted (headroom/probe/command.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from headroom import __version__, units
from headroom.config import ConfigError, load_config
from headroom.logs import FORMATS
from headroom.sources import Paths, load_all


def _duration(text: str) -> float:
    try:
        value = units.parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not 0.05 <= value <= 60:
        raise argparse.ArgumentTypeError(f"must be between 50ms and 60s, got {text}")
    return value


def _size(text: str) -> int:
    try:
        value = units.parse_bytes(text, "size")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value < 4096:
        raise argparse.ArgumentTypeError(f"must be at least 4KiB, got {text}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _add_config_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config.file", dest="config_file", metavar="FILE",
                   help="configuration file (default: ./config.yaml when present, else /etc/headroom/config.yaml, "
                        "else built-in defaults)")


def _add_source_flags(p: argparse.ArgumentParser) -> None:
    _add_config_flag(p)
    p.add_argument("--path.procfs", dest="procfs", default="/proc", metavar="PATH", help="procfs mountpoint")
    p.add_argument("--path.sysfs", dest="sysfs", default="/sys", metavar="PATH", help="sysfs mountpoint")
    p.add_argument("--path.rootfs", dest="rootfs", default="/", metavar="PATH",
                   help="host root filesystem (for /dev/shm and other mounts seen from a container)")
    p.add_argument("--sample.interval", dest="sample_interval", type=_duration, metavar="DURATION",
                   help="sampling interval (default 1s, or agent.sample_interval in the configuration)")
    p.add_argument("--simulate", metavar="NAME|FILE",
                   help="simulate GPUs from a built-in scenario (e.g. demo) or a scenario file instead of NVML")
    p.add_argument("--state.dir", dest="state_dir", metavar="DIR",
                   help="the agent's state directory, where `headroom probe` leaves its last result (default "
                        "$STATE_DIRECTORY as systemd sets it, else /var/lib/headroom; with --simulate "
                        "$TMPDIR/headroom-UID; or collectors.probe.state_dir)")
    p.add_argument("--collector.disable-defaults", dest="collector_disable_defaults", action="store_true",
                   help="run only the collectors enabled with --collector.NAME (as node_exporter's flag)")
    for name, cls in load_all().items():
        what = cls.description or f"the {name} collector"
        state = "on" if cls.default_enabled else "off"
        p.add_argument(f"--collector.{name}", dest=f"collector_{name}", action="store_const", const=True,
                       default=None, help=f"enable {what} (default {state})")
        p.add_argument(f"--no-collector.{name}", dest=f"collector_{name}", action="store_const", const=False,
                       help=f"disable {what}")
    _add_log_flags(p)


def _auto_kinds(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    allowed = ("pods", "jobs", "containers", "units", "launchers")
    bad = [k for k in kinds if k not in allowed]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown kind {bad[0]!r}; choose from {', '.join(allowed)} "
                                         "(comma-separated, e.g. units,containers)")
    return kinds


def _add_identity_flags(p: argparse.ArgumentParser) -> None:
    """Automatic workloads (docs/workload-identity.md); each overrides collectors.identity in config.yaml."""
    p.add_argument("--kubernetes", dest="kubernetes", action="store_const", const=True, default=None,
                   help="label GPU series with the pod holding the GPU (kubelet pod-resources API) and make "
                        "every pod holding a GPU a workload (default off)")
    p.add_argument("--kubernetes.pod-resources-socket", dest="pod_resources_socket", metavar="PATH",
                   help="the kubelet's pod-resources socket (default /var/lib/kubelet/pod-resources/kubelet.sock)")
    p.add_argument("--hpc-job-mapping-dir", dest="hpc_job_mapping_dir", metavar="DIR",
                   help="dcgm-exporter's job mapping directory: a file per GPU index listing Slurm job IDs")
    p.add_argument("--workloads.auto", dest="workloads_auto", type=_auto_kinds, metavar="KINDS",
                   help="identities that become workloads when they hold a GPU: pods,jobs,containers,units,"
                        "launchers (serving and training launchers such as vllm serve or torchrun; default "
                        "pods,jobs,launchers; pods need --kubernetes)")


def _add_log_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log.level", dest="log_level", default=None, choices=("debug", "info", "warn", "error"),
                   help="log level (default: info for run, warn for one-shot commands)")
    p.add_argument("--log.format", dest="log_format", default=None, choices=FORMATS,
                   help="log format: logfmt or json (node_exporter's values) or console (default: console on a "
                        "terminal, json otherwise)")


def _add_estimate_flags(p: argparse.ArgumentParser) -> None:
    """estimate reads the configuration and at most one NVML sample: no collector or path flags."""
    _add_config_flag(p)
    p.add_argument("--simulate", metavar="NAME|FILE",
                   help="find the GPUs of a built-in scenario (e.g. demo) or a scenario file instead of NVML's")
    _add_log_flags(p)


def _add_probe_flags(p: argparse.ArgumentParser) -> None:
    """probe reads the configuration (its profiles, the agent's address) and logs: no collector or path flags."""
    _add_config_flag(p)
    _add_log_flags(p)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="headroom",
        description="GPU host monitoring agent: exports GPU, host, workload bottleneck and headroom metrics "
                    "for Prometheus.",
    )
    parser.add_argument("--version", action="version", version=f"headroom {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser("run", help="run the agent (the daemon)")
    _add_source_flags(run)
    run.add_argument("--web.listen-address", dest="listen_addresses", action="append", default=[],
                     metavar="HOST:PORT", help="address to listen on, repeatable (default :9843)")
    run.add_argument("--web.telemetry-path", dest="telemetry_path", metavar="PATH",
                     help="path of the metrics endpoint (default /metrics)")
    run.add_argument("--web.config.file", dest="web_config_file", metavar="FILE",
                     help="TLS and basic-auth configuration in the exporter-toolkit web-config.yml format")
    _add_identity_flags(run)
    run.add_argument("--record", metavar="FILE",
                     help="append every sample to FILE (JSON Lines, docs/trace-format.md; about 13 kB per tick "
                          "for the demo) for `headroom replay`")
    run.add_argument("--record.max-size", dest="record_max_size", type=_size, default=None, metavar="SIZE",
                     help="past this size rotate the recording to FILE.1, compressed to FILE.1.gz "
                          "(default 64MiB)")

    rep = sub.add_parser("replay", help="run the analysis over a recording and print the timeline of verdicts")
    rep.add_argument("files", nargs="+", metavar="FILE", help="recordings, oldest first (e.g. rec.jsonl.1.gz rec.jsonl; gzip "
                     "is read as such)")
    _add_config_flag(rep)
    rep.add_argument("--format", choices=("table", "json"), default="table")
    _add_log_flags(rep)

    snap = sub.add_parser("snapshot", help="sample a few ticks, print the exposition or JSON, and exit")
    _add_source_flags(snap)
    _add_identity_flags(snap)
    snap.add_argument("--samples", type=_positive_int, default=2, help="ticks to take (default 2, so rates exist)")
    snap.add_argument("--format", choices=("prometheus", "json"), default="prometheus",
                      help="prometheus: the exposition a scrape gets (text format); json: the raw samples, derived "
                           "values and analysis findings (default prometheus)")

    check = sub.add_parser("check-config", help="validate a configuration file; exit 0 when valid, 2 when not")
    _add_config_flag(check)

    from headroom.workload import estimate

    estimate.add_parser(sub, _add_estimate_flags)
    from headroom.fleet import report

    report.add_parser(sub)
    from headroom.probe import command as probe_command

    probe_command.add_parser(sub, _add_probe_flags)
    from headroom import check as check_command

    check_command.add_parser(sub)
    return parser


def _options(args: argparse.Namespace):
    from headroom.daemon import Options

    collectors = {}
    for name in load_all():
        value = getattr(args, f"collector_{name}", None)
        if value is not None:
            collectors[name] = value
        elif getattr(args, "collector_disable_defaults", False):
            collectors[name] = False
    return Options(
        paths=Paths(procfs=Path(getattr(args, "procfs", "/proc")), sysfs=Path(getattr(args, "sysfs", "/sys")),
                    rootfs=Path(getattr(args, "rootfs", "/"))),
        collectors=collectors,
        sample_interval=getattr(args, "sample_interval", None),
        simulate=args.simulate,
        listen_addresses=tuple(getattr(args, "listen_addresses", ()) or ()),
        telemetry_path=getattr(args, "telemetry_path", None),
        web_config_file=getattr(args, "web_config_file", None),
        record=getattr(args, "record", None),
        record_max_bytes=getattr(args, "record_max_size", None),
        state_dir=getattr(args, "state_dir", None),
        identity={"kubernetes": getattr(args, "kubernetes", None),
                  "pod_resources_socket": getattr(args, "pod_resources_socket", None),
                  "hpc_job_mapping_dir": getattr(args, "hpc_job_mapping_dir", None),
                  "auto": getattr(args, "workloads_auto", None)},
    )


def _error(message: str, code: int = 2) -> int:
    print(f"headroom: {message}", file=sys.stderr)
    return code


def _replay(args: argparse.Namespace) -> int:
    import json

    from headroom import record

    config = None
    if args.config_file:
        try:
            config = load_config(args.config_file)
        except ConfigError as exc:
            print(str(exc), file=sys.stderr)
            return 2
    try:
        result = record.replay(args.files, config)
    except record.TraceError as exc:
        return _error(str(exc), 2)
    if args.format == "json":
        doc = {"ticks": result.ticks, "changes": result.changes, "final": result.final,
               "compared": result.compared, "mismatches": result.mismatches}
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        sys.stdout.write(record.format_table(result))
    return 0


def _check_config(config) -> int:
    """check-config: the configuration is valid (load_config checked it), and so is what `run` reads next."""
    web_config_file = config.web.get("config_file")
    if web_config_file:
        from headroom.exposition.webconfig import WebConfigError, load_web_config

        try:
            load_web_config(web_config_file)
        except WebConfigError as exc:
            from headroom.config import issue_at

            print(issue_at(config.source, ["web", "config_file"], str(exc)), file=sys.stderr)
            return 2
    print(f"{config.source or '(built-in defaults)'}: configuration is valid")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from headroom import daemon, logs

    level = getattr(args, "log_level", None) or ("info" if args.command == "run" else "warn")
    logs.configure(level, getattr(args, "log_format", None))
    if args.command == "replay":
        return _replay(args)
    if args.command == "check":  # a node-problem-detector plugin: its exit status and one line (headroom/check.py)
        from headroom import check as check_command

        code, text = check_command.run(args)
        sys.stdout.write(text)
        return code
    if args.command == "fleet-report":
        from headroom.fleet import report

        try:
            code, text = report.run(args)
        except report.ReportError as exc:
            return _error(str(exc), 2)
        sys.stdout.write(text)
        return code
    config_path = daemon.resolve_config_path(args.config_file)
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if args.command == "check-config":
        return _check_config(config)
    if args.command == "probe":  # a command only: the daemon never drives load (docs/probe.md)
        from headroom.probe import command as probe_command

        try:
            code, text = probe_command.run(args, config)
        except probe_command.ProbeInputError as exc:
            return _error(f"probe: {exc}", probe_command.EXIT_BAD_INPUT)
        except KeyboardInterrupt:
            return probe_command.EXIT_INTERRUPTED
        sys.stdout.write(text)
        return code
    options = _options(args)
    try:
        if args.command == "run":
            return daemon.run(config, options, config_path)
        if args.command == "estimate":
            from headroom.workload import estimate

            try:  # every refusal here is bad input, exit 2: exit 1 means "does not fit" (scripts tell them apart)
                if options.simulate:  # a scenario's profiles can be sized too, as `run --simulate` adds them
                    config = daemon.with_scenario_profiles(config, daemon.load_scenario(options.simulate))
                code, text = estimate.run(args, config, lambda: daemon.found_gpus(config, options))
            except estimate.EstimateError as exc:
                return _error(str(exc).replace("\n", "\nheadroom: "), estimate.EXIT_BAD_INPUT)
            except daemon.StartupError as exc:
                return _error(str(exc), estimate.EXIT_BAD_INPUT)
            sys.stdout.write(text)
            return code
        if args.command == "snapshot":
            notes: list[str] = []
            sys.stdout.buffer.write(daemon.snapshot(config, options, args.samples, args.format, notes))
            sys.stdout.flush()
            for note in notes:  # stderr: the output stays the exposition (or JSON) a script expects
                print(f"headroom: snapshot: {note}", file=sys.stderr)
            return 0
    except daemon.StartupError as exc:
        return _error(str(exc), exc.code)
    except KeyboardInterrupt:
        return 130
    return _error(f"unknown command {args.command}")

"""Load and validate config.yaml. Every error says FILE:LINE:COLUMN: field.path: message.

The YAML is composed into nodes (which carry positions) and checked against a small declarative
schema (``Map``, ``Seq``, ``Str`` ...). Validation collects every error before failing, so a user fixes
a file in one pass; the agent never starts on a half-valid configuration.

Workload profiles (``workloads:`` and the drop-in directory) are checked by
``headroom.workload.profiles.profile_from_dict``; its field paths are mapped back to YAML positions here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from headroom import units
from headroom.jsontypes import Settings, YamlValue
from headroom.schema import (  # ConfigError, ConfigIssue, compose_file, compose_text: imported from here too
    BadScalar,
    ConfigError,
    ConfigIssue,
    compose_file,
    compose_text,
    construct,
    format_path,
    kind,
    node_at,
    parse_listen_address,
    position,
    to_python,
    unknown_key,
)

if TYPE_CHECKING:
    from headroom.workload.profiles.types import WorkloadProfile
    from headroom.workload.sizing.types import OverheadConstants

DEFAULT_PATHS = (Path("config.yaml"), Path("/etc/headroom/config.yaml"))


# ------------------------------------------------------------------------------------------ errors
class _Ctx:
    """Collects issues while walking one file."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.issues: list[ConfigIssue] = []

    def error(self, node: yaml.Node | None, path: Sequence[str | int], message: str) -> None:
        line, col = position(node)
        self.issues.append(ConfigIssue(self.file, line, col, format_path(path), message))


_INVALID = object()  # returned by a spec when the value was rejected (the issue is recorded)
# What a spec's check returns: the checked value, of the type that spec declares (a float, a str, a tuple of
# strings, a mapping of checked values, a WorkloadProfile ...), or _INVALID; the Map holding it keeps it under its
# key, so a validated section is a jsontypes.Settings
Checked = Any


# ------------------------------------------------------------------------------------------ schema
class Spec:
    """A schema node: converts a YAML node to a Python value or records an issue."""

    def check(self, node: yaml.Node, path: list[str | int], ctx: _Ctx) -> Checked:
        raise NotImplementedError


Field = Spec | tuple[Spec, object]  # a Map's field: its spec, or its spec and the default it gives when unset


def _scalar(node: yaml.Node, path: list, ctx: _Ctx, what: str) -> Checked:
    if not isinstance(node, yaml.ScalarNode):
        kind = "a mapping" if isinstance(node, yaml.MappingNode) else "a list"
        ctx.error(node, path, f"expected {what}, got {kind}")
        return _INVALID
    try:
        return construct(node)
    except BadScalar as exc:
        ctx.error(node, path, str(exc))
        return _INVALID


@dataclass
class Str(Spec):
    choices: Sequence[str] | None = None
    pattern: str | None = None  # the value itself must be a valid regex when pattern == "regex"
    nonempty: bool = True
    coerce: bool = False  # accept numbers and write them as strings (versions such as 0.8)
    validate: Callable[[str], str | None] | None = None  # returns an error message or None

    def check(self, node, path, ctx):
        value = _scalar(node, path, ctx, "a string")
        if value is _INVALID:
            return value
        if not isinstance(value, str) and not (self.coerce and isinstance(value, (int, float))
                                               and not isinstance(value, bool)):
            ctx.error(node, path, f"expected a string, got {kind(value)}")
            return _INVALID
        value = node.value if not isinstance(value, str) else value  # 0.10 stays "0.10"
        if self.nonempty and not value:
            ctx.error(node, path, "must not be empty")
            return _INVALID
        if self.choices is not None and value not in self.choices:
            ctx.error(node, path, f"must be one of {', '.join(self.choices)}; got {value!r}")
            return _INVALID
        if self.pattern == "regex":
            try:
                re.compile(value)
            except re.error as exc:
                ctx.error(node, path, f"invalid regular expression: {exc}")
                return _INVALID
        if self.validate is not None:
            problem = self.validate(value)
            if problem:
                ctx.error(node, path, problem)
                return _INVALID
        return value


@dataclass
class Bool(Spec):
    def check(self, node, path, ctx):
        value = _scalar(node, path, ctx, "true or false")
        if value is _INVALID:
            return value
        if not isinstance(value, bool):
            ctx.error(node, path, f"expected true or false, got {kind(value)} {node.value!r}")
            return _INVALID
        return value


@dataclass
class Number(Spec):
    minimum: float | None = None
    maximum: float | None = None
    integer: bool = False
    exclusive_minimum: bool = False

    def check(self, node, path, ctx):
        value = _scalar(node, path, ctx, "a number")
        if value is _INVALID:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            ctx.error(node, path, f"expected {'an integer' if self.integer else 'a number'}, got {kind(value)}")
            return _INVALID
        if isinstance(value, float) and not math.isfinite(value):
            ctx.error(node, path, "must be a finite number")
            return _INVALID
        if isinstance(value, int) and abs(value) > 10**300:  # float() of it would raise OverflowError
            ctx.error(node, path, f"a number of {len(str(abs(value)))} digits is too large")
            return _INVALID
        if self.integer and not (isinstance(value, int) or float(value).is_integer()):
            ctx.error(node, path, f"expected an integer, got {value}")
            return _INVALID
        return _bounded(self, int(value) if self.integer else float(value), node, path, ctx)


def _bounded(spec, value, node, path, ctx):
    lo, hi = spec.minimum, spec.maximum
    if lo is not None and (value < lo or (spec.exclusive_minimum and value == lo)):
        op = ">" if spec.exclusive_minimum else ">="
        ctx.error(node, path, f"must be {op} {_human(spec, lo)}; got {_human(spec, value)}")
        return _INVALID
    if hi is not None and value > hi:
        ctx.error(node, path, f"must be <= {_human(spec, hi)}; got {_human(spec, value)}")
        return _INVALID
    return value


def _human(spec, value) -> str:
    if isinstance(spec, Duration):
        return units.format_duration(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass
class _Quantity(Spec):
    """A value written with a unit and parsed by ``units`` (durations, sizes), then bounded."""

    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    what = "a value"

    @staticmethod
    def parse(value: YamlValue) -> float:
        raise NotImplementedError

    def check(self, node, path, ctx):
        value = _scalar(node, path, ctx, self.what)
        if value is _INVALID:
            return value
        try:
            parsed = self.parse(value)
        except (ValueError, TypeError) as exc:
            ctx.error(node, path, str(exc))
            return _INVALID
        except ArithmeticError:
            ctx.error(node, path, f"{self.what.removeprefix('a ')} is too large")
            return _INVALID
        if isinstance(parsed, float) and not math.isfinite(parsed):
            ctx.error(node, path, f"{self.what.removeprefix('a ')} is too large")
            return _INVALID
        return _bounded(self, parsed, node, path, ctx)


@dataclass
class Duration(_Quantity):
    """Seconds, written as 1s, 500ms, 5m, 1h or a number of seconds."""

    what = "a duration"
    parse = staticmethod(units.parse_duration)


@dataclass
class Bytes(_Quantity):
    """A size: 80GiB, 512MiB, 1e9 or a number of bytes."""

    what = "a size"
    parse = staticmethod(units.parse_bytes)


@dataclass
class Seq(Spec):
    item: Spec
    min_items: int = 0
    max_items: int | None = None

    def check(self, node, path, ctx):
        if not isinstance(node, yaml.SequenceNode):
            ctx.error(node, path, "expected a list")
            return _INVALID
        if len(node.value) < self.min_items:
            ctx.error(node, path, f"needs at least {self.min_items} item(s)")
        if self.max_items is not None and len(node.value) > self.max_items:
            ctx.error(node, path, f"takes at most {self.max_items} items; got {len(node.value)}")
            return _INVALID
        out = []
        for i, child in enumerate(node.value):
            v = self.item.check(child, [*path, i], ctx)
            if v is not _INVALID:
                out.append(v)
        return out


@dataclass
class Map(Spec):
    """A mapping with known keys; unknown keys are errors. ``fields`` values are Spec or (Spec, default)."""

    fields: Mapping[str, Field]
    required: Sequence[str] = ()
    open_values: Spec | None = None  # a mapping of arbitrary keys to this spec (e.g. headers)

    def check(self, node, path, ctx):
        if isinstance(node, yaml.ScalarNode) and node.value in ("", "~", "null") and node.tag.endswith(":null"):
            node = yaml.MappingNode("tag:yaml.org,2002:map", [], node.start_mark, node.end_mark)
        if not isinstance(node, yaml.MappingNode):
            ctx.error(node, path, "expected a mapping")
            return _INVALID
        out: dict[str, Checked] = {}
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is None:
                ctx.error(key_node, path, "keys must be strings")
                continue
            if key in seen:
                ctx.error(key_node, [*path, key], "duplicate key")
                continue
            seen.add(key)
            if self.open_values is not None:
                v = self.open_values.check(value_node, [*path, key], ctx)
            elif key not in self.fields:
                ctx.error(key_node, [*path, key], unknown_key(key, self.fields))
                continue
            else:
                spec = self.fields[key]
                spec = spec[0] if isinstance(spec, tuple) else spec
                v = spec.check(value_node, [*path, key], ctx)
            if v is not _INVALID:
                out[key] = v
        for name in self.required:
            if name not in seen:
                ctx.error(node, [*path, name], "is required")
        for name, spec in self.fields.items():
            if name not in seen and isinstance(spec, tuple):
                default = spec[1]
                if isinstance(spec[0], Map) and default is dict:  # a section left out: its own defaults
                    empty = yaml.MappingNode("tag:yaml.org,2002:map", [], node.start_mark, node.end_mark)
                    out[name] = spec[0].check(empty, [*path, name], ctx)
                else:
                    out[name] = default() if callable(default) else default
        return out


class Profiles(Spec):
    """``workloads:``: a list of workload profiles, each checked by headroom.workload.profiles.profile_from_dict."""

    def check(self, node, path, ctx):
        if not isinstance(node, yaml.SequenceNode):
            ctx.error(node, path, "expected a list of workload profiles")
            return _INVALID
        return [p for i, item in enumerate(node.value)
                if (p := check_profile(item, [*path, i], ctx)) is not _INVALID]


def check_profile(node: yaml.Node, path: list[str | int], ctx: _Ctx) -> Checked:
    """One workload profile from its YAML node; errors are placed at the offending field's position."""
    from headroom.workload.profiles import ProfileErrors, profile_from_dict

    if not isinstance(node, yaml.MappingNode):
        ctx.error(node, path, "expected a workload profile (a mapping with at least name and kind)")
        return _INVALID
    try:
        return profile_from_dict(to_python(node))
    except BadScalar as exc:
        ctx.error(exc.node, path, str(exc))
        return _INVALID
    except ProfileErrors as exc:
        for e in exc.errors:
            at = node_at(node, e.path)
            if e.message.startswith("unknown key") and e.path:  # point at the key, not its value
                parent = node_at(node, e.path[:-1])
                if isinstance(parent, yaml.MappingNode):
                    at = next((k for k, _ in parent.value if getattr(k, "value", None) == e.path[-1]), at)
            ctx.error(at, [*path, *e.path], e.message)
        return _INVALID


# ------------------------------------------------------------------------------------------ config
@dataclass(frozen=True)
class Config:
    """The validated configuration. ``source`` is the file it came from (None: built-in defaults)."""

    source: str | None
    agent: Settings
    web: Settings
    collectors: Mapping[str, Settings]
    workloads: tuple[WorkloadProfile, ...] = ()  # config file first, then drop-ins
    sizing: OverheadConstants | None = None
    analysis: Settings = field(default_factory=dict)
    workloads_dir: str | None = None

    def workload(self, name: str) -> WorkloadProfile | None:
        """The profile called ``name``, or None."""
        return next((w for w in self.workloads if w.name == name), None)

    @property
    def sample_interval(self) -> float:
        return self.agent["sample_interval"]

    def collector_enabled(self, name: str, default: bool) -> bool:
        section = self.collectors.get(name) or {}
        value = section.get("enabled")
        return default if value is None else bool(value)


def _collector_spec(extra: Mapping[str, Field] | None = None) -> Map:
    fields: dict[str, Field] = {"enabled": (Bool(), None)}
    fields.update(extra or {})
    return Map(fields)


def _analysis_spec() -> Map:
    from headroom.analysis.bottleneck import THRESHOLDS

    return Map(
        {
            "short_window": (Duration(minimum=2, maximum=600), None),
            "long_window": (Duration(minimum=10, maximum=24 * 3600), None),
            "hold": (Duration(minimum=0, maximum=3600), None),
            "idle_busy_ratio": (Number(minimum=0.0, maximum=1.0), None),
            "gpu_slowdown_celsius": (Number(minimum=0, maximum=150), None),
            "cost_per_gpu_hour": (Number(minimum=0, maximum=1e6), None),
            "currency": (Str(validate=_currency), None),
            "thresholds": (Map({name: (_threshold_spec(name), None) for name in THRESHOLDS}), dict),
        }
    )


def _threshold_spec(name: str) -> Spec:
    """Thresholds are ratios 0-1, except the ``*_seconds_*`` and ``*_seconds`` ones (durations)."""
    seconds = "_seconds_" in name or name.endswith("_seconds")
    return Duration(minimum=0, maximum=86400) if seconds else Number(minimum=0.0, maximum=1.0)


def _url_path(value: str) -> str | None:
    if not value.startswith("/") or any(c in value for c in " ?#"):
        return f"must be a URL path starting with / (e.g. /metrics); got {value!r}"
    return None


def _currency(value: str) -> str | None:
    if not re.fullmatch(r"[A-Z]{3}", value):
        return f"must be an ISO 4217 currency code such as USD or EUR; got {value!r}"
    return None


def _listen_address(value: str) -> str | None:
    """The check `run` applies before binding, so check-config refuses what run would (with FILE:LINE)."""
    try:
        parse_listen_address(value)
    except ValueError as exc:
        return str(exc)
    return None


def _schema() -> Map:
    collectors = {
        "nvml": (_collector_spec({"pcie_poll_interval": (Duration(minimum=0.1), 5.0)}), dict),
        "cpu": (_collector_spec(), dict),
        "memory": (_collector_spec(), dict),
        "shm": (_collector_spec({"mountpoints": (Seq(Str(), min_items=1), lambda: ["/dev/shm"])}), dict),
        "disk": (
            _collector_spec(
                {"device_exclude": (Str(pattern="regex", nonempty=False), None),
                 "device_include": (Str(pattern="regex", nonempty=False), None)}
            ),
            dict,
        ),
        "agent": (_collector_spec(), dict),
        # the last `headroom probe` result (sources/probe.py); --state.dir overrides state_dir
        "probe": (_collector_spec({"state_dir": (Str(), None)}), dict),
        "processes": (_collector_spec(), dict),
        "serving": (
            _collector_spec({"timeout": (Duration(minimum=0.01, maximum=30), 0.5),
                             "max_body": (Bytes(minimum=4096, maximum=256 * 2**20), 8 * 2**20),
                             "detect": (Bool(), True),
                             "detect_interval": (Duration(minimum=1, maximum=3600), 30.0)}),
            dict,
        ),
        # automatic workloads (docs/workload-identity.md); flags --kubernetes ... override these
        "identity": (
            _collector_spec({
                "kubernetes": (Bool(), None),
                "pod_resources_socket": (Str(), None),
                "pod_resources_timeout": (Duration(minimum=0.05, maximum=60), None),
                "pod_resources_refresh": (Duration(minimum=0.1, maximum=3600), None),
                "hpc_job_mapping_dir": (Str(), None),
                "auto": (Seq(Str(choices=("pods", "jobs", "containers", "units", "launchers"))), None),
                "max_workloads": (Number(minimum=1, maximum=10_000, integer=True), None),
            }),
            dict,
        ),
        "net": (
            _collector_spec(
                {"device_exclude": (Str(pattern="regex", nonempty=False), None),
                 "device_include": (Str(pattern="regex", nonempty=False), None)}
            ),
            dict,
        ),
        # RDMA ports from /sys/class/infiniband (sources/infiniband.py); the filters apply to the HCA name
        "infiniband": (
            _collector_spec(
                {"device_exclude": (Str(pattern="regex", nonempty=False), None),
                 "device_include": (Str(pattern="regex", nonempty=False), None)}
            ),
            dict,
        ),
    }
    fields: dict[str, Field] = {
        "agent": (
            Map(
                {
                    "sample_interval": (Duration(minimum=0.05, maximum=60), 1.0),
                    "window": (Duration(minimum=10, maximum=24 * 3600), 600.0),
                    "collector_timeout": (Duration(minimum=0.05, maximum=300), None),
                }
            ),
            dict,
        ),
        "web": (
            Map(
                {
                    "listen_address": (Seq(Str(validate=_listen_address), min_items=1), None),
                    "telemetry_path": (Str(validate=_url_path), None),
                    "config_file": (Str(), None),
                }
            ),
            dict,
        ),
        "collectors": (Map(collectors), dict),
        "workloads": (Profiles(), list),
        "workloads_dir": (Str(), None),
        "analysis": (_analysis_spec(), dict),
        "sizing": (
            Map(
                {
                    "cuda_context": (Bytes(minimum=0, maximum=64 * 2**30), None),
                    "runtime_overhead": (Bytes(minimum=0, maximum=1024 * 2**30), None),
                    "cpu_runtime_overhead": (Bytes(minimum=0, maximum=1024 * 2**30), None),
                    "vllm_gpu_memory_utilization": (Number(minimum=0.0, maximum=1.0, exclusive_minimum=True), None),
                }
            ),
            dict,
        ),
    }
    return Map(fields)


def default_config_path() -> Path | None:
    """./config.yaml when present, else /etc/headroom/config.yaml when present, else None (defaults)."""
    for candidate in DEFAULT_PATHS:
        if candidate.is_file():
            return candidate
    return None


def load_config(path: str | Path | None) -> Config:
    """Load, validate and return the configuration; raise ConfigError listing every problem.

    ``path`` None means built-in defaults (no file)."""
    if path is None:
        return _validate(None, "(defaults)", Path())
    path = Path(path)
    return _validate(compose_file(path), str(path), path.parent)


def check_config_text(text: str | bytes, name: str = "config.yaml") -> Config:
    """Validate configuration given as text (tests and fuzzing)."""
    return _validate(compose_text(text, name), name, Path())


def _validate(node: yaml.Node | None, name: str, base: Path) -> Config:
    ctx = _Ctx(name)
    if node is None:  # empty file or built-in defaults
        node = yaml.MappingNode("tag:yaml.org,2002:map", [], yaml.Mark(name, 0, 0, 0, None, None), None)
    try:
        data = _schema().check(node, [], ctx)
    except RecursionError:
        raise ConfigError([ConfigIssue(name, 1, 1, "", "YAML nesting is too deep")]) from None
    if data is _INVALID:
        raise ConfigError(ctx.issues or [ConfigIssue(name, 1, 1, "", "invalid configuration")])
    workloads = list(data.get("workloads") or [])
    seen = {w.name: name for w in workloads}
    issues = list(ctx.issues)
    dropin_dir = data.get("workloads_dir")
    if dropin_dir:
        directory = Path(dropin_dir) if Path(dropin_dir).is_absolute() else base / dropin_dir
        for profile, file, issue in _load_dropins(directory, node, name):
            if issue is not None:
                issues.append(issue)
            elif profile.name in seen:
                issues.append(ConfigIssue(file, 1, 1, "name", f"workload {profile.name!r} is already declared in "
                                                               f"{seen[profile.name]}"))
            else:
                seen[profile.name] = file
                workloads.append(profile)
    issues += _duplicate_names(node, name)
    issues += _window_budget(node, name, data.get("agent"))
    if issues:
        raise ConfigError(issues)
    return Config(
        source=None if name == "(defaults)" else name,
        agent=data["agent"],
        web=data["web"],
        collectors=data["collectors"],
        workloads=tuple(workloads),
        sizing=_overhead(data["sizing"]),
        analysis=data["analysis"],
        workloads_dir=dropin_dir,
    )


def with_profiles(config: Config, node: yaml.Node | None, source: str) -> Config:
    """``config`` plus the workload profiles of a simulation scenario's ``profiles:`` list.

    Errors are positioned in the scenario file. A profile whose name the configuration already declares
    is left out: the configuration wins (so a user can override a scenario's profile).
    """
    if node is None:
        return config
    ctx = _Ctx(source)
    profiles = Profiles().check(node, ["profiles"], ctx)
    if ctx.issues or profiles is _INVALID:
        raise ConfigError(ctx.issues or [ConfigIssue(source, 1, 1, "profiles", "invalid profiles")])
    declared = {w.name for w in config.workloads}
    extra = tuple(p for p in profiles if p.name not in declared)
    from dataclasses import replace

    return replace(config, workloads=tuple(config.workloads) + extra)


def issue_at(file: str, path: Sequence[str | int], message: str) -> ConfigIssue:
    """A ConfigIssue at the position of ``path`` in ``file`` (for checks made after loading, e.g. check-config
    reading web.config_file); line 1 when the file cannot be read again."""
    ctx = _Ctx(file)
    try:
        node = compose_file(Path(file))
    except ConfigError:
        node = None
    ctx.error(node_at(node, path) if node is not None else None, path, message)
    return ctx.issues[0]


def _overhead(section: Settings) -> OverheadConstants:
    from dataclasses import replace

    from headroom.workload.sizing import DEFAULTS

    names = {"cuda_context": "cuda_context_bytes", "runtime_overhead": "runtime_overhead_bytes",
             "cpu_runtime_overhead": "cpu_runtime_overhead_bytes",
             "vllm_gpu_memory_utilization": "vllm_gpu_memory_utilization"}
    return replace(DEFAULTS, **{names[k]: v for k, v in section.items() if v is not None})


WINDOW_MEMORY_BUDGET_BYTES = 256 * 2**20  # the sample window's share of the unit's MemoryMax (512M)
SAMPLE_BYTES_BASE = 4096  # one Sample without GPUs (host collectors), measured: docs/reliability.md
SAMPLE_BYTES_PER_GPU = 2048  # and per GPU (1.85 KiB measured with every NVML field set)
ASSUMED_GPUS = 8  # what validation assumes; the agent checks again with the GPUs it finds


def window_memory_bytes(window: float, interval: float, gpus: int) -> int:
    """The memory the sample window needs: its samples (window / interval + 1) times a sample's size."""
    return int((window / interval + 1) * (SAMPLE_BYTES_BASE + SAMPLE_BYTES_PER_GPU * gpus))


def window_budget_problem(window: float, interval: float, gpus: int) -> str | None:
    """Why ``agent.window`` at ``agent.sample_interval`` does not fit the memory budget, or None."""
    need = window_memory_bytes(window, interval, gpus)
    if need <= WINDOW_MEMORY_BUDGET_BYTES:
        return None
    fits = (WINDOW_MEMORY_BUDGET_BYTES / (SAMPLE_BYTES_BASE + SAMPLE_BYTES_PER_GPU * gpus) - 1) * interval
    return (f"a window of {units.format_duration(window)} sampled every {units.format_duration(interval)} with "
            f"{gpus} GPUs needs about {need / 2**20:,.0f} MiB, above the {WINDOW_MEMORY_BUDGET_BYTES // 2**20} MiB "
            f"budget; at this interval at most {units.format_duration(max(fits, 0))} fits (or sample less often)")


def _window_budget(node: yaml.Node, file: str, agent: Checked) -> list[ConfigIssue]:
    window, interval = (agent.get("window"), agent.get("sample_interval")) if isinstance(agent, dict) else (None, None)
    if not isinstance(window, float) or not isinstance(interval, float):
        return []  # already reported as invalid
    problem = window_budget_problem(window, interval, ASSUMED_GPUS)
    if problem is None:
        return []
    ctx = _Ctx(file)
    ctx.error(node_at(node, ["agent", "window"]), ["agent", "window"],
              problem + f" (validation assumes {ASSUMED_GPUS} GPUs)")
    return ctx.issues


def _duplicate_names(node: yaml.Node, file: str) -> list[ConfigIssue]:
    """Two profiles with one name in the config file itself."""
    ctx = _Ctx(file)
    workloads = node_at(node, ["workloads"])
    if isinstance(workloads, yaml.SequenceNode):
        first: dict[str, int] = {}
        for i, item in enumerate(workloads.value):
            name_node = node_at(item, ["name"])
            if isinstance(name_node, yaml.ScalarNode) and name_node is not item:
                if name_node.value in first:
                    ctx.error(name_node, ["workloads", i, "name"],
                              f"duplicate workload name {name_node.value!r} (also workloads[{first[name_node.value]}])")
                else:
                    first[name_node.value] = i
    return ctx.issues


def _load_dropins(directory: Path, config_node: yaml.Node, config_name: str):
    """Yield (profile, file, None) or (None, file, issue) for every *.yaml in the drop-in directory.

    Each file is read like the configuration itself (``headroom.safeio``): a FIFO, a device, a
    directory named *.yaml or a file over MAX_CONFIG_BYTES is an issue for that file."""
    if not directory.is_dir():
        ctx = _Ctx(config_name)
        ctx.error(node_at(config_node, ["workloads_dir"]), ["workloads_dir"],
                  f"{directory} is not a directory" if directory.exists() else f"directory {directory} does not exist")
        yield None, config_name, ctx.issues[0]
        return
    for file in sorted(directory.glob("*.yaml")):
        try:
            node = compose_file(file)
        except ConfigError as exc:
            for issue in exc.issues:
                yield None, str(file), issue
            continue
        ctx = _Ctx(str(file))
        if node is None:
            ctx.error(None, [], "empty file: expected one workload profile")
        else:
            profile = check_profile(node, [], ctx)
            if profile is not _INVALID and not ctx.issues:
                yield profile, str(file), None
                continue
        for issue in ctx.issues:
            yield None, str(file), issue

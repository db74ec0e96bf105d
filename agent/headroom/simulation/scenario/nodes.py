"""The readers of a scenario's YAML nodes: ``NodeReader`` turns a composed node into a typed value (a mapping
of known keys, a string, a whole number, a duration, a number in base units, a ``Signal``), each error a
``ScenarioError("FILE:LINE:COLUMN: field.path: message")`` at the node; and ``parse_frequency``.

parse.py's parser reads a scenario's sections with them, and ``simulation.host_spec.parse_host`` the ``host:`` section.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, TypedDict

import yaml

from headroom.schema import BadScalar, ConfigIssue, node_kind, position, to_python, unknown_key
from headroom.simulation.signals import Signal
from headroom.simulation.spec import ScenarioError
from headroom.units import parse_bytes, parse_duration

if TYPE_CHECKING:
    from headroom.jsontypes import YamlValue

_SIGNAL_BOUNDS = {"ratio": (0.0, 1.0), "bool": (0.0, 1.0), "size": (0.0, None), "frequency": (0.0, None),
                  "cores": (0.0, None)}
_FREQ_UNITS = {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}


class _Common(TypedDict):
    """What every shape of one node's Signal shares: the noise's seed and key, the kind's clamp."""

    seed: int
    key: str
    lower: float | None
    upper: float | None


class NodeReader:
    """Walks a composed YAML node tree; every error carries the node's mark and the field path."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.seed = 0

    # -- plumbing
    def error(self, node: yaml.Node | None, path: str, message: str) -> ScenarioError:
        """``FILE:LINE:COLUMN: path: message`` as config.yaml's issues are written (one line, long quotes cut)."""
        if node is None:
            return ScenarioError(f"{self.filename}: {path or '(document)'}: {message}")
        line, column = position(node)
        return ScenarioError(str(ConfigIssue(self.filename, line, column, path, message)))

    def plain(self, node: yaml.Node, path: str = "") -> YamlValue:
        """The Python value of a node (for scalars and raw sections); a scalar YAML cannot construct (a
        timestamp such as 2024-13-01) is a ScenarioError at that scalar."""
        try:
            return to_python(node)
        except BadScalar as exc:
            raise self.error(exc.node, path, str(exc)) from None

    def mapping(self, node: yaml.Node, path: str, allowed: set[str], required: tuple[str, ...] = ()) -> dict[str, yaml.Node]:
        """Key -> value node of a mapping; rejects unknown, duplicate and missing keys."""
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, path, "expected a mapping")
        out: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = self.plain(key_node, path) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                raise self.error(key_node, path, "keys must be strings")
            sub = f"{path}.{key}" if path else key
            if key in out:
                raise self.error(key_node, sub, "duplicate key")
            if key not in allowed:
                raise self.error(key_node, sub, unknown_key(key, allowed))
            out[key] = value_node
        for key in required:
            if key not in out:
                raise self.error(node, f"{path}.{key}" if path else key, "is required")
        return out

    def sequence(self, node: yaml.Node, path: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, path, "expected a list")
        return list(node.value)

    def scalar(self, node: yaml.Node, path: str) -> YamlValue:
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(node, path, f"expected a single value, got {node_kind(node)}")
        return self.plain(node, path)

    def string(self, node: yaml.Node, path: str) -> str:
        value = self.scalar(node, path)
        if not isinstance(value, str) or not value:
            raise self.error(node, path, f"expected a non-empty string, got {value!r}")
        return value

    def integer(self, node: yaml.Node, path: str, minimum: int | None = 0) -> int:
        value = self.scalar(node, path)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(node, path, f"expected a whole number, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.error(node, path, f"must be >= {minimum}, got {value}")
        return value

    def boolean(self, node: yaml.Node, path: str) -> bool:
        value = self.scalar(node, path)
        if not isinstance(value, bool):
            raise self.error(node, path, f"expected true or false, got {value!r}")
        return value

    def duration(self, node: yaml.Node, path: str) -> float:
        try:
            return parse_duration(self.scalar(node, path))
        except ValueError as exc:
            raise self.error(node, path, str(exc)) from None

    def unit(self, node: yaml.Node, path: str, kind: str) -> float:
        """A number in base units. Kinds: ratio (0-1), number, size (bytes), frequency (Hz), bool."""
        value = self.scalar(node, path)
        try:
            if kind == "size":
                return float(parse_bytes(value))
            if kind == "frequency":
                return parse_frequency(value)
            if kind == "bool" and isinstance(value, bool):
                return 1.0 if value else 0.0
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"expected a number, got {value!r}")
            if kind in ("ratio", "bool") and not 0.0 <= value <= 1.0:
                raise ValueError(f"expected a ratio between 0 and 1, got {value!r}")
            if kind == "cores" and value < 0:
                raise ValueError(f"expected a number of cores >= 0, got {value!r}")
            return float(value)
        except ValueError as exc:
            raise self.error(node, path, str(exc)) from None

    # -- signals
    def signal(self, node: yaml.Node, path: str, kind: str) -> Signal:
        """A signal: a constant, or {sine|steps|ramp|value: ..., noise: ...}."""
        lower, upper = _SIGNAL_BOUNDS.get(kind, (None, None))
        common: _Common = {"seed": self.seed, "key": path, "lower": lower, "upper": upper}
        if not isinstance(node, yaml.MappingNode):
            return Signal("constant", value=self.unit(node, path, kind), **common)
        keys = self.mapping(node, path, {"value", "sine", "steps", "ramp", "noise", "repeat", "period"})
        shapes = [k for k in ("value", "sine", "steps", "ramp") if k in keys]
        if len(shapes) != 1:
            raise self.error(node, path, "expected exactly one of value, sine, steps, ramp")
        shape = shapes[0]
        noise = self.unit(keys["noise"], f"{path}.noise", "number" if kind == "bool" else kind) if "noise" in keys else 0.0
        if noise < 0:
            raise self.error(keys["noise"], f"{path}.noise", "must not be negative")
        if shape != "steps":
            for extra in ("repeat", "period"):
                if extra in keys:
                    raise self.error(keys[extra], f"{path}.{extra}", "only allowed with steps")
        sub = f"{path}.{shape}"
        if shape == "value":
            return Signal("constant", value=self.unit(keys["value"], sub, kind), noise=noise, **common)
        if shape == "sine":
            s = self.mapping(keys["sine"], sub, {"min", "max", "period", "phase"}, ("min", "max", "period"))
            low, high = self.unit(s["min"], f"{sub}.min", kind), self.unit(s["max"], f"{sub}.max", kind)
            if low > high:
                raise self.error(s["max"], f"{sub}.max", f"must be >= min ({low:g})")
            period = self.duration(s["period"], f"{sub}.period")
            if period <= 0:
                raise self.error(s["period"], f"{sub}.period", "must be > 0")
            phase = self.duration(s["phase"], f"{sub}.phase") if "phase" in s else 0.0
            return Signal("sine", low=low, high=high, period=period, phase=phase, noise=noise, **common)
        if shape == "ramp":
            r = self.mapping(keys["ramp"], sub, {"from", "to", "over", "start"}, ("from", "to", "over"))
            return Signal(
                "ramp",
                low=self.unit(r["from"], f"{sub}.from", kind),
                high=self.unit(r["to"], f"{sub}.to", kind),
                over=self.duration(r["over"], f"{sub}.over"),
                start=self.duration(r["start"], f"{sub}.start") if "start" in r else 0.0,
                noise=noise,
                **common,
            )
        steps: list[tuple[float, float]] = []
        for i, item in enumerate(self.sequence(keys["steps"], sub)):
            ipath = f"{sub}[{i}]"
            pair = self.sequence(item, ipath)
            if len(pair) != 2:
                raise self.error(item, ipath, "expected [time, value]")
            t = self.duration(pair[0], f"{ipath}[0]")
            if steps and t <= steps[-1][0]:
                raise self.error(pair[0], f"{ipath}[0]", f"step times must increase (previous {steps[-1][0]:g}s)")
            steps.append((t, self.unit(pair[1], f"{ipath}[1]", kind)))
        if not steps:
            raise self.error(keys["steps"], sub, "needs at least one [time, value] step")
        repeat = self.boolean(keys["repeat"], f"{path}.repeat") if "repeat" in keys else False
        period = 0.0
        if repeat:
            if "period" not in keys:
                raise self.error(node, path, "repeat: true needs a period (the cycle length)")
            period = self.duration(keys["period"], f"{path}.period")
            if period <= steps[-1][0]:
                raise self.error(keys["period"], f"{path}.period", f"must be longer than the last step time ({steps[-1][0]:g}s)")
        elif "period" in keys:
            raise self.error(keys["period"], f"{path}.period", "only allowed with repeat: true")
        return Signal("steps", steps=tuple(steps), repeat=repeat, period=period, noise=noise, **common)


def parse_frequency(value: object) -> float:
    """Hertz from "1980MHz", "1.98GHz", "500kHz", "100Hz" or a bare number of hertz. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"invalid frequency {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"invalid frequency {value!r}: must not be negative")
        return float(value)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*", value)
        if m and m.group(2).lower() in _FREQ_UNITS:
            return float(m.group(1)) * _FREQ_UNITS[m.group(2).lower()]
    raise ValueError(f"invalid frequency {value!r}: expected e.g. 1980MHz, 1.98GHz or a number of hertz")

"""Record and replay: every Sample as a line of JSON, and the analysis run again over a recording.

The format (docs/trace-format.md) is versioned: a header line, then one line per tick with the
Sample's sources and the live verdicts. Replay decodes the Samples back into the same frozen
dataclasses and feeds them, in order, to the same Analysis the agent runs, so a replay of a live
recording reproduces the live verdicts (the test suite checks it).
"""

from __future__ import annotations

import json
import os
import types
import typing
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import structlog

from headroom import __version__, samples
from headroom.samples import Sample, SourceResult

log = structlog.get_logger("headroom.record")

FORMAT = "headroom-trace"
VERSION = 1
DEFAULT_MAX_BYTES = 64 * 2**20

# source name -> the dataclass its ``data`` holds
SOURCE_TYPES: dict[str, type] = {
    "nvml": samples.NvmlSample,
    "cpu": samples.CpuSample,
    "memory": samples.MemorySample,
    "shm": samples.ShmSample,
    "disk": samples.DiskSample,
    "net": samples.NetSample,
    "processes": samples.ProcessesSample,
    "identity": samples.IdentitySample,
    "agent": samples.AgentSample,
}


class TraceError(Exception):
    """A recording that cannot be read; the message names the file and line."""


# ------------------------------------------------------------------------------------------ encode
def _compact(obj: Any) -> Any:
    """JSON-able data with None fields and empty mappings/tuples left out (the decoder restores defaults)."""
    if is_dataclass(obj):
        out = {}
        for f in fields(obj):
            value = getattr(obj, f.name)
            if value is None or (isinstance(value, (tuple, list, Mapping)) and not value):
                continue
            out[f.name] = _compact(value)
        return out
    if isinstance(obj, Mapping):
        return {str(k): _compact(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_compact(v) for v in obj]
    return obj


def encode_sample(sample: Sample, verdicts: Mapping[str, str] | None = None) -> str:
    line: dict[str, Any] = {"t": sample.timestamp, "m": sample.monotonic, "s": {}}
    for name, r in sample.sources.items():
        entry: dict[str, Any] = {"ok": r.ok, "d": round(r.duration_seconds, 6)}
        if r.error:
            entry["e"] = r.error
        if r.ok and r.data is not None:
            entry["data"] = _compact(r.data)
        line["s"][name] = entry
    if verdicts:
        line["v"] = dict(verdicts)
    return json.dumps(line, separators=(",", ":"))


# ------------------------------------------------------------------------------------------ decode
_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def decode(tp: Any, value: Any) -> Any:
    """Rebuild a value of type ``tp`` (dataclasses, tuples, mappings, optionals) from JSON data."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return decode(args[0], value) if len(args) == 1 else value
    if isinstance(tp, type) and is_dataclass(tp):
        hints = _hints(tp)
        kwargs = {k: decode(hints[k], v) for k, v in value.items() if k in hints}
        return tp(**kwargs)
    if origin is tuple:
        args = typing.get_args(tp)
        item = args[0] if args else Any
        return tuple(decode(item, v) for v in value)
    if origin in (Mapping, dict, typing.Mapping) or (origin is not None and issubclass(origin, Mapping)):
        key_t, val_t = typing.get_args(tp) or (str, Any)
        return {decode(key_t, k) if key_t is not str else k: decode(val_t, v) for k, v in value.items()}
    if tp is int and isinstance(value, str):
        return int(value)
    if tp is float and isinstance(value, int):
        return float(value)
    return value


def decode_sample(line: Mapping[str, Any]) -> Sample:
    sources = {}
    for name, entry in line.get("s", {}).items():
        data = entry.get("data")
        tp = SOURCE_TYPES.get(name)
        if data is not None and tp is not None:
            data = decode(tp, data)
        sources[name] = SourceResult(name, bool(entry.get("ok")), float(entry.get("d", 0.0)), data, entry.get("e"))
    return Sample(timestamp=float(line["t"]), monotonic=float(line["m"]), sources=sources)


@dataclass(frozen=True)
class Trace:
    header: Mapping[str, Any]
    lines: Sequence[Mapping[str, Any]]


def read_traces(paths: Sequence[str | Path]) -> Iterator[tuple[Mapping[str, Any], Sample, Mapping[str, str]]]:
    """(header, sample, live verdicts) for every tick of the recordings, in the order given."""
    for path in paths:
        path = Path(path)
        try:
            handle = path.open("r", encoding="utf-8")
        except OSError as exc:
            raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
        with handle:
            header = None
            for number, text in enumerate(handle, 1):
                if not text.strip():
                    continue
                try:
                    line = json.loads(text)
                except json.JSONDecodeError as exc:
                    if number > 1 and not text.endswith("\n"):
                        break  # a torn last line (the agent stopped mid-write): ignore it
                    raise TraceError(f"{path}:{number}: not JSON: {exc.msg}") from None
                if header is None:
                    if not isinstance(line, dict) or line.get("format") != FORMAT:
                        raise TraceError(f"{path}:{number}: not a headroom recording (no '{FORMAT}' header)")
                    if line.get("version") != VERSION:
                        raise TraceError(f"{path}:{number}: recording format version {line.get('version')} "
                                         f"is not supported (this agent reads version {VERSION})")
                    header = line
                    continue
                try:
                    sample = decode_sample(line)
                except (KeyError, TypeError, ValueError) as exc:
                    raise TraceError(f"{path}:{number}: invalid sample: {exc}") from None
                yield header, sample, line.get("v") or {}
            if header is None:
                raise TraceError(f"{path}: empty recording")


# ------------------------------------------------------------------------------------------ record
class Recorder:
    """Appends each tick to FILE; past ``max_bytes`` FILE becomes FILE.1 (the previous FILE.1 is dropped).

    A write that fails (read-only or full disk) never stops sampling: the recorder reports
    ``ok`` False with the error, logs once, and retries on later ticks; it logs once again on recovery.
    """

    def __init__(self, path: str | Path, header: Mapping[str, Any], max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.header = {"format": FORMAT, "version": VERSION, "agent_version": __version__, **header}
        self.ok = True
        self.error: str | None = None
        self.written_bytes_total = 0
        self._handle: Any = None
        self._size = 0

    def _open(self) -> None:
        self._handle = self.path.open("a", encoding="utf-8")
        self._size = self._handle.tell()
        if self._size == 0:
            self._write_raw(json.dumps(self.header, separators=(",", ":")) + "\n")

    def _write_raw(self, text: str) -> None:
        self._handle.write(text)
        self._handle.flush()
        n = len(text.encode())
        self._size += n
        self.written_bytes_total += n

    def write(self, sample: Sample, verdicts: Mapping[str, str] | None = None) -> None:
        line = encode_sample(sample, verdicts) + "\n"
        good = None
        try:
            if self._handle is None:
                self._open()
            if self._size + len(line) > self.max_bytes and self._size > 0:
                self._rotate()
            good = self._size
            self._write_raw(line)
        except OSError as exc:
            self._fail(f"cannot write {self.path}: {exc.strerror or exc}", good)
            return
        if not self.ok:
            log.info("record_recovered", path=str(self.path))
        self.ok, self.error = True, None

    def _rotate(self) -> None:
        self._handle.close()
        self._handle = None
        os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        self._open()

    def _fail(self, message: str, good_size: int | None = None) -> None:
        if self.ok:
            log.error("record_failing", path=str(self.path), error=message)
        self.ok, self.error = False, message
        self.close()
        if good_size is not None:
            try:  # a line the disk took only part of would corrupt the file: cut it off
                os.truncate(self.path, good_size)
            except OSError:
                pass

    def close(self) -> None:
        if self._handle is not None:
            try:
                self._handle.close()
            except OSError:
                pass
            self._handle = None


# ------------------------------------------------------------------------------------------ replay
@dataclass(frozen=True)
class ReplayResult:
    ticks: int
    changes: list[dict[str, Any]]  # every primary change: time, entity, name, before, after, evidence
    final: dict[str, str]  # primaries after the last tick
    compared: int  # ticks that carried live verdicts
    mismatches: list[dict[str, Any]]  # ticks where the replayed primaries differ from the live ones


def replay(paths: Sequence[str | Path], config: Any = None) -> ReplayResult:
    """Run the analysis over recordings. ``config`` None: the configuration stored in the first header."""
    from headroom.analysis.pipeline import Analysis
    from headroom.config import ConfigError, check_config_text, load_config

    analysis = None
    window: deque[Sample] = deque()
    changes: list[dict[str, Any]] = []
    mismatches: list[dict[str, Any]] = []
    ticks = compared = 0
    final: dict[str, str] = {}
    for header, sample, live in read_traces(paths):
        if analysis is None:
            if config is None:
                text = header.get("config")
                try:
                    config = check_config_text(text, "(recorded configuration)") if text else load_config(None)
                except ConfigError as exc:
                    raise TraceError(f"the recorded configuration is invalid here: {exc}") from None
            if header.get("scenario_profiles"):
                config = _with_recorded_profiles(config, header)
            analysis = Analysis(config)
            interval = float(header.get("interval") or 1.0)
            window = deque(maxlen=max(2, int(float(header.get("window") or 600.0) / interval) + 1))
        window.append(sample)
        _, findings = analysis(window)
        ticks += 1
        for c in findings.changes:
            changes.append({"timestamp": sample.timestamp, "entity": c.entity, "name": c.name, "before": c.before,
                            "after": c.after, "evidence": c.evidence})
        final = findings.primaries()
        if live:
            compared += 1
            if final != dict(live):
                mismatches.append({"timestamp": sample.timestamp, "live": dict(live), "replayed": final})
    if analysis is None:
        raise TraceError("no samples in the recording")
    return ReplayResult(ticks, changes, final, compared, mismatches)


def _with_recorded_profiles(config: Any, header: Mapping[str, Any]) -> Any:
    """The simulation scenario's profiles the live agent merged into its configuration."""
    import yaml

    from headroom.config import ConfigError, with_profiles

    node = yaml.compose(yaml.safe_dump(header["scenario_profiles"]))
    try:
        return with_profiles(config, node, str(header.get("scenario_file") or "(recorded scenario)"))
    except ConfigError as exc:
        raise TraceError(f"the recorded scenario profiles are invalid here: {exc}") from None


def format_table(result: ReplayResult) -> str:
    import time as _time

    lines = [f"{'time (UTC)':<20} {'entity':<22} {'before':<14} {'after':<14} evidence"]
    for c in result.changes:
        when = _time.strftime("%Y-%m-%d %H:%M:%S", _time.gmtime(c["timestamp"]))
        lines.append(f"{when:<20} {c['entity'] + ' ' + c['name']:<22} {c['before']:<14} {c['after']:<14} "
                     f"{c['evidence']}")
    lines.append("")
    lines.append(f"{result.ticks} ticks replayed; final primaries: "
                 + (", ".join(f"{k}={v}" for k, v in sorted(result.final.items())) or "none"))
    if result.compared:
        same = result.compared - len(result.mismatches)
        lines.append(f"live verdicts reproduced on {same} of {result.compared} ticks")
    return "\n".join(lines) + "\n"

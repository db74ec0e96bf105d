"""Record and replay: every Sample as a line of JSON, and the analysis run again over a recording.

The format (docs/trace-format.md) is versioned: a header line, then one line per tick with the
Sample's sources and the live verdicts. Replay decodes the Samples back into the same frozen
dataclasses and feeds them, in order, to the same Analysis the agent runs, so a replay of a live
recording reproduces the live verdicts (the test suite checks it).
"""

from __future__ import annotations

import json
import math
import os
import sys
import types
import typing
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields, is_dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TextIO

import structlog

from headroom import __version__, samples
from headroom.jsontypes import JsonDoc, JsonMapping, JsonValue
from headroom.safeio import shorten_quoted
from headroom.samples import Sample, SourceResult

if TYPE_CHECKING:
    import threading

    from headroom.config import Config

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
    "serving": samples.ServingSample,
    "identity": samples.IdentitySample,
    "agent": samples.AgentSample,
    "probe": samples.ProbeSample,
}


class TraceError(Exception):
    """A recording that cannot be read; the message names the file and line."""


# a type expression as typing.get_type_hints gives a dataclass field's (a class, int | None, tuple[X, ...],
# Mapping[str, X]): decode walks it with typing.get_origin/get_args; typing has no type for it
TypeForm = Any


# ------------------------------------------------------------------------------------------ encode
def _compact(obj: object) -> JsonValue:
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
    line: JsonDoc = {"t": sample.timestamp, "m": sample.monotonic, "s": {}}
    for name, r in sample.sources.items():
        entry: JsonDoc = {"ok": r.ok, "d": round(r.duration_seconds, 6)}
        if r.error:
            entry["e"] = r.error
        if r.ok and r.data is not None:
            entry["data"] = _compact(r.data)
        line["s"][name] = entry
    if verdicts:
        line["v"] = dict(verdicts)
    return json.dumps(line, separators=(",", ":"))


# ------------------------------------------------------------------------------------------ decode
MAX_LINE_BYTES = 2**20  # one tick of a large host is tens of KiB; a longer line is refused, not read
MAX_WINDOW_SAMPLES = 1_000_000  # header window / interval: the replay window's length in samples
# the recorded bytes of the samples the replay window holds at once (the lines they were decoded from; decoded,
# they take about 5 times as much memory): a recording that needs more is refused at the line that overflows it
MAX_WINDOW_BYTES = 64 * 2**20
MAX_INTERVAL_SECONDS = 3600.0
_HINTS: dict[type, dict[str, TypeForm]] = {}
_MISSING = object()


class _Invalid(ValueError):
    """A value of the wrong shape; the message names the field path inside the line."""


def _hints(cls: type) -> dict[str, TypeForm]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


_LEAVES: dict[TypeForm, type | None] = {}


def _leaf(tp: TypeForm) -> type | None:
    """For a field type whose JSON value of exactly one Python type is taken as it is (int, float, str, bool,
    or one of them Optional): that type; None for anything else. The fast path of ``decode`` for big lines."""
    try:
        return _LEAVES[tp]
    except KeyError:
        pass
    except TypeError:  # an unhashable type expression
        return None
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    tp_ = args[0] if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1 else tp
    leaf = tp_ if tp_ in (int, float, str, bool) else None
    _LEAVES[tp] = leaf
    return leaf


def _what(value: JsonValue) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {value[:20]!r}" + ("..." if len(value) > 20 else "")
    return f"{type(value).__name__} {value!r}"


def decode(tp: TypeForm, value: JsonValue, where: str = "data") -> Any:  # Any: a value of the type ``tp``
    """Rebuild a value of type ``tp`` (dataclasses, tuples, mappings, optionals) from JSON data.

    Strict: a value of the wrong JSON type raises ValueError naming ``where`` (the field path); a
    required tuple or mapping field left out (the recorder drops empty ones) decodes as empty."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return decode(args[0], value, where) if len(args) == 1 else value
    if value is None:
        raise _Invalid(f"{where}: null where {getattr(tp, '__name__', tp)} belongs")
    if isinstance(tp, type) and is_dataclass(tp):
        if not isinstance(value, dict):
            raise _Invalid(f"{where}: expected an object, got {_what(value)}")
        hints = _hints(tp)
        kwargs = {}
        for k, v in value.items():
            hint = hints.get(k, _MISSING)
            if hint is _MISSING:
                continue
            kwargs[k] = v if type(v) is _leaf(hint) else decode(hint, v, f"{where}.{k}")
        for f in fields(tp):
            if f.name in kwargs or f.default is not MISSING or f.default_factory is not MISSING:
                continue
            kind = typing.get_origin(hints[f.name])
            if kind in (typing.Union, types.UnionType) and type(None) in typing.get_args(hints[f.name]):
                kwargs[f.name] = None  # the recorder leaves None out
            elif kind is tuple:
                kwargs[f.name] = ()
            elif kind is not None and isinstance(kind, type) and issubclass(kind, Mapping):
                kwargs[f.name] = {}
            else:
                raise _Invalid(f"{where}.{f.name}: missing")
        return tp(**kwargs)
    if origin is tuple:
        if not isinstance(value, list):
            raise _Invalid(f"{where}: expected a list, got {_what(value)}")
        args = typing.get_args(tp)
        item = args[0] if args else Any  # a bare tuple: items of any type, decoded as they are
        leaf = _leaf(item)
        if leaf is not None and all(type(v) is leaf for v in value):
            return tuple(value)
        return tuple(decode(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is not None and isinstance(origin, type) and issubclass(origin, Mapping):
        if not isinstance(value, dict):
            raise _Invalid(f"{where}: expected an object, got {_what(value)}")
        key_t, val_t = typing.get_args(tp) or (str, Any)  # a bare Mapping: str keys, values as they are
        out = {}
        for k, v in value.items():
            key = decode(key_t, k, f"{where} key") if key_t is not str else k
            out[key] = decode(val_t, v, f"{where}[{k!r}]")
        return out
    if tp is bool:
        if not isinstance(value, bool):
            raise _Invalid(f"{where}: expected true or false, got {_what(value)}")
        return value
    if tp is int:
        if isinstance(value, str) and value.isascii() and value.lstrip("-").isdigit() and len(value) < 40:
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"{where}: expected an integer, got {_what(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Invalid(f"{where}: expected a number, got {_what(value)}")
        try:
            return float(value)
        except OverflowError:
            raise _Invalid(f"{where}: {value} is out of range") from None
    if tp is str:
        if not isinstance(value, str):
            raise _Invalid(f"{where}: expected a string, got {_what(value)}")
        return value
    return value


def _finite(value: JsonValue, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid(f"{where}: expected a number, got {_what(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise _Invalid(f"{where}: {value} is out of range") from None
    if not math.isfinite(number):
        raise _Invalid(f"{where}: expected a finite number, got {value}")
    return number


def decode_sample(line: JsonMapping) -> Sample:
    if not isinstance(line, dict):
        raise _Invalid(f"expected an object, got {_what(line)}")
    if "t" not in line or "m" not in line:
        raise _Invalid("missing 't' or 'm' (timestamps)")
    entries = line.get("s", {})
    if not isinstance(entries, dict):
        raise _Invalid(f"s: expected an object, got {_what(entries)}")
    verdicts = line.get("v", {})
    if not isinstance(verdicts, dict) or not all(isinstance(v, str) for v in verdicts.values()):
        raise _Invalid("v: expected an object of strings")
    sources = {}
    for name, entry in entries.items():
        where = f"s.{name}"
        if not isinstance(entry, dict):
            raise _Invalid(f"{where}: expected an object, got {_what(entry)}")
        data = entry.get("data")
        tp = SOURCE_TYPES.get(name)
        if data is not None and tp is not None:
            data = decode(tp, data, f"{where}.data")
        error = entry.get("e")
        if error is not None and not isinstance(error, str):
            raise _Invalid(f"{where}.e: expected a string, got {_what(error)}")
        sources[name] = SourceResult(name, bool(entry.get("ok")), _finite(entry.get("d", 0.0), f"{where}.d"), data,
                                     error)
    return Sample(timestamp=_finite(line["t"], "t"), monotonic=_finite(line["m"], "m"), sources=sources)


def _check_header(line: JsonMapping) -> None:
    """The header's interval and window must give a replay window of bounded length."""
    interval = _finite(line.get("interval", 1.0) if line.get("interval") is not None else 1.0, "interval")
    window = _finite(line.get("window", 600.0) if line.get("window") is not None else 600.0, "window")
    if not 0 < interval <= MAX_INTERVAL_SECONDS:
        raise _Invalid(f"interval: must be above 0 and at most {MAX_INTERVAL_SECONDS:g} s, got {interval:g}")
    if not 0 < window or window / interval > MAX_WINDOW_SAMPLES:
        raise _Invalid(f"window: must be above 0 and at most {MAX_WINDOW_SAMPLES} intervals, got {window:g} s")
    for key in ("config", "config_file", "scenario", "scenario_file"):
        if line.get(key) is not None and not isinstance(line[key], str):
            raise _Invalid(f"{key}: expected a string, got {_what(line[key])}")


@dataclass(frozen=True)
class Trace:
    header: JsonMapping
    lines: Sequence[JsonMapping]


def _open_trace(path: Path) -> IO[bytes]:
    """The recording opened for reading in binary: a gzip file (a rotated FILE.1.gz, by its magic bytes, whatever
    its name) is decompressed as it is read."""
    import gzip

    handle = path.open("rb")
    if handle.read(2) == b"\x1f\x8b":
        handle.close()
        return gzip.open(path, "rb")
    handle.seek(0)
    return handle


def _lines(handle: IO[bytes], path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """(number, line, complete) for each line, each read with a bounded buffer (also after decompression)."""
    import zlib

    number = 0
    while True:
        try:
            raw = handle.readline(MAX_LINE_BYTES + 1)
        except (EOFError, zlib.error, OSError) as exc:  # gzip.BadGzipFile is an OSError
            if isinstance(exc, EOFError) and number > 0:
                return  # a gzip file cut short (the copy was interrupted): what it held so far counts
            raise TraceError(f"{path}:{number + 1}: cannot decompress: {shorten_quoted(str(exc)) or 'truncated'}"
                             ) from None
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE_BYTES:
            raise TraceError(f"{path}:{number}: line longer than {MAX_LINE_BYTES} bytes: not a headroom recording line")
        yield number, raw, raw.endswith(b"\n")


def read_traces(paths: Sequence[str | Path]) -> Iterator[tuple[JsonMapping, Sample, Mapping[str, str]]]:
    """(header, sample, live verdicts) for every tick of the recordings, in the order given.

    Any malformed content raises TraceError "FILE:LINE: message"; lines are read with a bounded
    buffer (MAX_LINE_BYTES), so memory does not grow with a hostile file."""
    for _path, _number, _size, header, sample, live in _read_located(paths):
        yield header, sample, live


def _read_located(paths: Sequence[str | Path]) -> Iterator[tuple[Path, int, int, JsonMapping, Sample,
                                                                 Mapping[str, str]]]:
    """(path, line number, line bytes, header, sample, live verdicts) for every tick."""
    for path in paths:
        path = Path(path)
        try:
            handle = _open_trace(path)
        except OSError as exc:
            raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
        with handle:
            header = None
            for number, raw, complete in _lines(handle, path):
                if not raw.strip():
                    continue
                try:
                    line = json.loads(raw.decode("utf-8"))
                except UnicodeDecodeError as exc:
                    raise TraceError(f"{path}:{number}: not UTF-8 at byte {exc.start} of the line") from None
                except json.JSONDecodeError as exc:
                    if number > 1 and not complete:
                        break  # a torn last line (the agent stopped mid-write): ignore it
                    raise TraceError(f"{path}:{number}: not JSON: {exc.msg}") from None
                except RecursionError:
                    raise TraceError(f"{path}:{number}: JSON nested too deeply") from None
                except ValueError:  # int(): "Exceeds the limit (4300 digits) for integer string conversion"
                    raise TraceError(f"{path}:{number}: not JSON this reader takes: an integer of more than "
                                     f"{sys.get_int_max_str_digits()} digits") from None
                if header is None:
                    if not isinstance(line, dict) or line.get("format") != FORMAT:
                        raise TraceError(f"{path}:{number}: not a headroom recording (no '{FORMAT}' header)")
                    if line.get("version") != VERSION:
                        raise TraceError(f"{path}:{number}: recording format version "
                                         f"{shorten_quoted(repr(line.get('version')))} is not supported "
                                         f"(this agent reads version {VERSION})")
                    try:
                        _check_header(line)
                    except ValueError as exc:
                        raise TraceError(f"{path}:{number}: invalid header: {shorten_quoted(str(exc))}") from None
                    header = line
                    continue
                try:
                    sample = decode_sample(line)
                except (KeyError, TypeError, ValueError, RecursionError) as exc:
                    raise TraceError(f"{path}:{number}: invalid sample: {shorten_quoted(str(exc))}") from None
                yield path, number, len(raw), header, sample, line.get("v") or {}
            if header is None:
                raise TraceError(f"{path}: empty recording")


# ------------------------------------------------------------------------------------------ record
GZIP_LEVEL = 6  # rotated files: a recording compresses to about 6 % (the demo: 13 kB per tick -> 0.8 kB)
COMPRESS_JOIN_SECONDS = 30.0  # close() waits at most this long for a rotated file's compression to finish


def compress_rotated(path: Path) -> None:
    """``path`` (a rotated FILE.1) -> FILE.1.gz, replacing an older one, then ``path`` removed. Written to a temporary
    name first, so a FILE.1.gz is always whole; on failure FILE.1 stays (replay reads it too)."""
    import gzip
    import shutil

    target = path.with_name(path.name + ".gz")
    tmp = path.with_name(path.name + ".gz.tmp")
    try:
        with path.open("rb") as src, gzip.open(tmp, "wb", compresslevel=GZIP_LEVEL) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, target)
        os.unlink(path)
    except OSError as exc:
        log.warning("record_compress_failed", path=str(path), error=exc.strerror or str(exc))
        try:
            os.unlink(tmp)
        except OSError:
            pass


class Recorder:
    """Appends each tick to FILE; past ``max_bytes`` FILE becomes FILE.1, compressed in the background to FILE.1.gz
    (the previous FILE.1.gz is dropped; the tick never waits for the compression).

    A write that fails (read-only or full disk) never stops sampling: the recorder reports
    ``ok`` False with the error, logs once, and retries on later ticks; it logs once again on recovery.
    Every tick it also checks that the open file is still FILE (link count, device and inode): a file
    deleted or replaced, or a directory removed, is reopened, or reported when that fails.
    """

    def __init__(self, path: str | Path, header: JsonMapping, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.header = {"format": FORMAT, "version": VERSION, "agent_version": __version__, **header}
        self.ok = True
        self.error: str | None = None
        self.written_bytes_total = 0
        self._handle: TextIO | None = None
        self._size = 0
        self._compressing: threading.Thread | None = None  # the thread compressing the last rotated file

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

    def _gone(self) -> bool:
        """True when the open file is no longer FILE: deleted (its directory too, perhaps) or replaced.

        Writing on would "succeed" into an unlinked inode until the next rotation, hours later."""
        try:
            st = os.fstat(self._handle.fileno())
            if st.st_nlink == 0:
                return True
            now = os.stat(self.path)
        except OSError:
            return True
        return (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino)

    def write(self, sample: Sample, verdicts: Mapping[str, str] | None = None) -> None:
        line = encode_sample(sample, verdicts) + "\n"
        if len(line) > MAX_LINE_BYTES:  # replay refuses such a line: do not write a recording it cannot read
            if self.ok:
                log.error("record_failing", path=str(self.path), error=f"a tick of {len(line)} bytes is over the "
                          f"{MAX_LINE_BYTES}-byte line cap replay reads: not recorded")  # fmt: skip
            self.ok, self.error = False, f"a tick of {len(line)} bytes is over the {MAX_LINE_BYTES}-byte line cap"
            return
        good = None
        if self._handle is not None and self._gone():
            log.warning("record_file_gone", path=str(self.path), action="reopening it")
            self.close()
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
        import threading

        self._handle.close()
        self._handle = None
        if self._compressing is not None:  # the one before (64 MiB ago): long done, unless the disk is very slow
            self._compressing.join()
        rotated = self.path.with_name(self.path.name + ".1")
        os.replace(self.path, rotated)
        self._compressing = threading.Thread(target=compress_rotated, args=(rotated,), name="record-gzip",
                                             daemon=True)
        self._compressing.start()
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

    def finish(self) -> None:
        """close(), and wait (at most COMPRESS_JOIN_SECONDS) for a rotated file's compression: the agent stopping."""
        self.close()
        if self._compressing is not None:
            self._compressing.join(COMPRESS_JOIN_SECONDS)


# ------------------------------------------------------------------------------------------ replay
@dataclass(frozen=True)
class ReplayResult:
    ticks: int
    changes: list[JsonDoc]  # every primary change: time, entity, name, before, after, evidence
    final: dict[str, str]  # primaries after the last tick
    compared: int  # ticks that carried live verdicts
    mismatches: list[JsonDoc]  # ticks where the replayed primaries differ from the live ones


def replay(paths: Sequence[str | Path], config: Config | None = None) -> ReplayResult:
    """Run the analysis over recordings. ``config`` None: the configuration stored in the first header."""
    from headroom.analysis.pipeline import Analysis
    from headroom.config import ConfigError, check_config_text, load_config

    analysis = None
    window: deque[Sample] = deque()
    sizes: deque[int] = deque()  # the recorded bytes of each sample in the window
    held = 0  # their sum, at most MAX_WINDOW_BYTES
    changes: list[JsonDoc] = []
    mismatches: list[JsonDoc] = []
    ticks = compared = 0
    final: dict[str, str] = {}
    for path, number, size, header, sample, live in _read_located(paths):
        if analysis is None:
            if config is None:
                text = header.get("config")
                try:
                    config = check_config_text(text, "(recorded configuration)") if text else load_config(None)
                except ConfigError as exc:
                    raise TraceError(f"{path}:1: the recorded configuration is invalid here: {exc}") from None
            if header.get("scenario_profiles"):
                try:
                    config = _with_recorded_profiles(config, header)
                except TraceError as exc:
                    raise TraceError(f"{path}:1: {exc}") from None
            analysis = Analysis(config)
            interval = float(header.get("interval") or 1.0)  # checked by the reader: finite, bounded
            window = deque(maxlen=max(2, int(float(header.get("window") or 600.0) / interval) + 1))
        if len(window) == window.maxlen:
            held -= sizes.popleft()
        window.append(sample)
        sizes.append(size)
        held += size
        if held > MAX_WINDOW_BYTES:
            raise TraceError(f"{path}:{number}: the replay window ({len(window)} samples) would hold {held} bytes "
                             f"of samples, more than the {MAX_WINDOW_BYTES} allowed: not a recording of a real host")
        try:
            _, findings = analysis(window)
        except Exception as exc:  # a well-formed line whose values the analysis cannot take: still FILE:LINE
            raise TraceError(f"{path}:{number}: the analysis cannot use this sample: "
                             f"{type(exc).__name__}: {shorten_quoted(str(exc))}") from None
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


def _with_recorded_profiles(config: Config, header: JsonMapping) -> Config:
    """The simulation scenario's profiles the live agent merged into its configuration."""
    import yaml

    from headroom.config import ConfigError, with_profiles

    try:
        node = yaml.compose(yaml.safe_dump(header["scenario_profiles"]))
        return with_profiles(config, node, str(header.get("scenario_file") or "(recorded scenario)"))
    except ConfigError as exc:
        raise TraceError(f"the recorded scenario profiles are invalid here: {exc}") from None
    except (yaml.YAMLError, RecursionError, ValueError, TypeError) as exc:
        raise TraceError(f"the recorded scenario profiles cannot be read: {type(exc).__name__}") from None


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

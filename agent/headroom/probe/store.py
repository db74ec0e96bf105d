"""The last probe result on disk: ``probe-last.json`` in the agent's state directory (docs/probe.md).

``headroom probe`` writes it (``save``: atomically, through a temporary file in the same directory and a rename,
so the agent never reads half a file); the agent reads it (``load``, and ``LastResult`` which re-reads it only
when the file changed) to export the ``headroom_workload_capacity_*`` gauges and draw the landing page's chart.

The file is input from another process, maybe another user: ``load`` takes nothing on trust. It refuses a
symbolic link, anything but a regular file, a file over MAX_RESULT_BYTES, JSON that does not parse (NaN and
Infinity included), and a result that does not follow the version-1 format (PROBE_CONTRACT / docs/probe.md);
each refusal is one line (``StoreError``), never a traceback. What it returns is a new dict of only the known
keys, numbers finite, strings clipped, lists bounded, so what draws or exports it needs no check of its own.

The state directory: ``--state.dir`` (``state_dir``), else ``$STATE_DIRECTORY`` (systemd sets it for
``StateDirectory=headroom``), else DEFAULT_STATE_DIR; under ``--simulate`` the default is a directory of this
user's under the temporary directory (SIMULATION_STATE_DIR), so the demo needs no root.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from headroom.jsontypes import JsonDoc, JsonMapping, JsonValue
from headroom.safeio import clip

FILENAME = "probe-last.json"
VERSION = 1
DEFAULT_STATE_DIR = "/var/lib/headroom"  # the systemd unit's StateDirectory=headroom
SIMULATION_STATE_DIR = "headroom-{uid}"  # under tempfile.gettempdir(): the default with --simulate
MAX_RESULT_BYTES = 1 * 2**20  # a probe-last.json larger than this is refused (save and load)
MAX_STEPS = 256  # steps a result may hold (the engine's ramp has far fewer)
MAX_TEXT = 2000  # characters kept of a free-text field (evidence, message)
MAX_NAME = 200  # characters kept of a name (workload, model, url, resource)
MAX_ERROR_CLASSES = 32  # error classes kept per step
SCHEDULES = ("concurrency", "rate")
STOPS = ("slo", "max", "duration", "interrupted", "error", "done")
SOURCES = ("status_api", "in_process", "none")
OBJECTIVE = re.compile(r"(ttft|itl|e2e)_p(50|90|95|99|99\.9)")


class StoreError(Exception):
    """The result cannot be saved or loaded; the message is one line, for people."""


def state_dir(flag: str | None = None, simulate: bool = False, environ: Mapping[str, str] | None = None) -> Path:
    """Where the agent keeps its state (the last probe result): the flag, else systemd's $STATE_DIRECTORY (its
    first entry), else DEFAULT_STATE_DIR, or, under the simulation, SIMULATION_STATE_DIR in the temp directory."""
    env = os.environ if environ is None else environ
    if flag:
        return Path(flag)
    if env.get("STATE_DIRECTORY"):
        return Path(env["STATE_DIRECTORY"].split(":")[0])
    if simulate:
        return Path(tempfile.gettempdir()) / SIMULATION_STATE_DIR.format(uid=os.getuid())
    return Path(DEFAULT_STATE_DIR)


def path_in(directory: str | os.PathLike[str]) -> Path:
    return Path(directory) / FILENAME


# -------------------------------------------------------------------------------------------- validation
class _Bad(ValueError):
    pass


def _num(value: JsonValue, where: str, optional: bool = True, minimum: float | None = None) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad(f"{where}: expected a number, got {_what(value)}")
    v = float(value)
    if not math.isfinite(v):
        raise _Bad(f"{where}: expected a finite number, got {value}")
    if minimum is not None and v < minimum:
        raise _Bad(f"{where}: must be at least {minimum:g}, got {v:g}")
    return v


def _int(value: JsonValue, where: str, optional: bool = True) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -2**53 <= value <= 2**53:
        raise _Bad(f"{where}: expected a whole number, got {_what(value)}")
    return value


def _text(value: JsonValue, where: str, limit: int = MAX_NAME, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _Bad(f"{where}: expected a string, got {_what(value)}")
    return clip(value, limit)


def _choice(value: JsonValue, where: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise _Bad(f"{where}: expected one of {', '.join(choices)}, got {_what(value)}")
    return value


def _obj(value: JsonValue, where: str, optional: bool = True) -> JsonDoc | None:
    if value is None and optional:
        return None
    if not isinstance(value, dict):
        raise _Bad(f"{where}: expected an object, got {_what(value)}")
    return value


def _what(value: JsonValue) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {clip(value, 20)!r}"
    return f"{type(value).__name__} {clip(repr(value), 20)}"


def _resource(value: JsonValue, where: str) -> str:
    """A resource name (kv_cache, client, none ...): a short identifier, as the analysis names them."""
    text = _text(value, where, 64, optional=False) or ""
    if not text or not all(c.isascii() and (c.isalnum() or c == "_") for c in text):
        raise _Bad(f"{where}: expected a resource name such as kv_cache, got {_what(value)}")
    return text


def _objective(key: JsonValue) -> str:
    """An SLO objective's name: ttft_p95, itl_p99, e2e_p50 ... or error_rate."""
    if not (isinstance(key, str) and (key == "error_rate" or OBJECTIVE.fullmatch(key))):
        raise _Bad(f"slo: {_what(key)} is not an objective (ttft_p95, itl_p99, e2e_p50 ..., error_rate)")
    return key


def _quantiles(value: JsonValue, where: str) -> dict[str, float | None]:
    q = _obj(value, where) or {}
    return {k: _num(q.get(k), f"{where}.{k}", minimum=0) for k in ("p50", "p95", "p99") if k in q}


def _values(value: JsonValue, where: str) -> dict[str, float | None]:
    d = _obj(value, where) or {}
    if len(d) > 64:
        raise _Bad(f"{where}: more than 64 values")
    return {_resource(k, f"{where} key"): _num(v, f"{where}.{k}") for k, v in d.items()}


def _host(value: JsonValue, where: str) -> JsonDoc | None:
    h = _obj(value, where)
    if h is None:
        return None
    source = h.get("source", "none")
    return {
        "bottleneck": _resource(h.get("bottleneck") or "none", f"{where}.bottleneck"),
        "confidence": _num(h.get("confidence"), f"{where}.confidence", minimum=0),
        "evidence": _text(h.get("evidence"), f"{where}.evidence", MAX_TEXT) or "",
        "peaks": _values(h.get("peaks"), f"{where}.peaks"),
        "means": _values(h.get("means"), f"{where}.means"),
        "samples": _int(h.get("samples", 0), f"{where}.samples", optional=False),
        "source": _choice(source, f"{where}.source", SOURCES),
        # each resource's highest score in the step and its newest evidence (what the engine judged rose)
        "scores": _values(h.get("scores"), f"{where}.scores"),
        "evidence_by": _texts(h.get("evidence_by"), f"{where}.evidence_by"),
        **({"errors": _int(h["errors"], f"{where}.errors")} if h.get("errors") is not None else {}),
        **({"error": _text(h["error"], f"{where}.error", MAX_TEXT)} if h.get("error") else {}),
    }


def _texts(value: JsonValue, where: str) -> dict[str, str]:
    d = _obj(value, where) or {}
    if len(d) > 64:
        raise _Bad(f"{where}: more than 64 values")
    return {_resource(k, f"{where} key"): _text(v, f"{where}.{k}", MAX_TEXT, optional=False) for k, v in d.items()}


def _step(value: JsonValue, where: str) -> JsonDoc:
    s = _obj(value, where, optional=False) or {}
    errors = _obj(s.get("errors"), f"{where}.errors") or {}
    if len(errors) > MAX_ERROR_CLASSES:
        raise _Bad(f"{where}.errors: more than {MAX_ERROR_CLASSES} error classes")
    examples = _obj(s.get("error_examples"), f"{where}.error_examples") or {}
    if len(examples) > MAX_ERROR_CLASSES:
        raise _Bad(f"{where}.error_examples: more than {MAX_ERROR_CLASSES} error classes")
    broken = s.get("slo_broken") or []
    if not isinstance(broken, list) or len(broken) > 16:
        raise _Bad(f"{where}.slo_broken: expected a list of at most 16 objectives")
    return {
        "index": _int(s.get("index"), f"{where}.index", optional=False),
        "level": _num(s.get("level"), f"{where}.level", optional=False, minimum=0),
        "started_at": _num(s.get("started_at"), f"{where}.started_at"),
        "seconds": _num(s.get("seconds"), f"{where}.seconds", minimum=0),
        "requests": _int(s.get("requests", 0), f"{where}.requests", optional=False),
        "completed": _int(s.get("completed", 0), f"{where}.completed", optional=False),
        "errors": {_text(k, f"{where}.errors key", 64): _int(v, f"{where}.errors.{k}", optional=False)
                   for k, v in errors.items()},
        "input_tokens_mean": _num(s.get("input_tokens_mean"), f"{where}.input_tokens_mean", minimum=0),
        "output_tokens_mean": _num(s.get("output_tokens_mean"), f"{where}.output_tokens_mean", minimum=0),
        "lengths_exact": bool(s.get("lengths_exact", False)),
        **{k: _quantiles(s.get(k), f"{where}.{k}") for k in ("ttft", "itl", "e2e")},
        **{k: _num(s.get(k), f"{where}.{k}", minimum=0) for k in (
            "requests_per_second", "output_tokens_per_second", "goodput_requests_per_second", "error_rate",
            "client_cpu_seconds_per_request")},
        "slo_ok": bool(s.get("slo_ok", False)),
        "slo_broken": [_resource(b, f"{where}.slo_broken[{i}]") for i, b in enumerate(broken)],
        "client_saturated": bool(s.get("client_saturated", False)),
        "client_starved": bool(s.get("client_starved", False)),
        "client_cpu_wait_ratio": _num(s.get("client_cpu_wait_ratio"), f"{where}.client_cpu_wait_ratio", minimum=0),
        "client_cpu_ratio": _num(s.get("client_cpu_ratio"), f"{where}.client_cpu_ratio", minimum=0),
        "client_loop_lag_p95": _num(s.get("client_loop_lag_p95"), f"{where}.client_loop_lag_p95", minimum=0),
        "aborted": _text(s.get("aborted"), f"{where}.aborted", MAX_TEXT),
        "error_examples": {_text(k, f"{where}.error_examples key", 64): _text(v, f"{where}.error_examples.{k}",
                                                                            MAX_NAME, optional=False)
                           for k, v in list(examples.items())},
        "host": _host(s.get("host"), f"{where}.host"),
    }


def _lengths(value: JsonValue, where: str) -> JsonDoc | None:  # typical, max: numbers; distribution: a name
    d = _obj(value, where)
    if d is None:
        return None
    out: JsonDoc = {k: _num(d.get(k), f"{where}.{k}", minimum=0) for k in ("typical", "max") if k in d}
    if d.get("distribution") is not None:
        out["distribution"] = _resource(d["distribution"], f"{where}.distribution")
    return out


def validate(doc: JsonValue) -> JsonDoc:
    """The result as a new dict of only the known keys, checked (module docstring); StoreError when it is not a
    version-1 probe result."""
    try:
        return _validate(doc)
    except _Bad as exc:
        raise StoreError(f"not a probe result: {exc}") from None


def _validate(doc: JsonValue) -> JsonDoc:
    d = _obj(doc, "the result", optional=False) or {}
    if d.get("version") != VERSION:
        raise _Bad(f"version: expected {VERSION}, got {_what(d.get('version'))}")
    steps = d.get("steps") or []
    if not isinstance(steps, list):
        raise _Bad(f"steps: expected a list, got {_what(steps)}")
    if len(steps) > MAX_STEPS:
        raise _Bad(f"steps: more than {MAX_STEPS}")
    load = _obj(d.get("load"), "load") or {}
    levels = load.get("levels") or []
    if not isinstance(levels, list) or len(levels) > MAX_STEPS:
        raise _Bad(f"load.levels: expected a list of at most {MAX_STEPS} levels")
    slo = _obj(d.get("slo"), "slo") or {}
    cap = _obj(d.get("capacity"), "capacity") or {}
    est = _obj(d.get("estimate"), "estimate")
    return {
        "version": VERSION,
        "workload": _text(d.get("workload"), "workload"),
        "url": _text(d.get("url"), "url"),
        "model": _text(d.get("model"), "model"),
        "started_at": _num(d.get("started_at"), "started_at", optional=False),
        "finished_at": _num(d.get("finished_at"), "finished_at", optional=False),
        "schedule": _choice(d.get("schedule"), "schedule", SCHEDULES),
        "api": _text(d.get("api"), "api", 32),
        "lengths": _text(d.get("lengths"), "lengths", MAX_NAME),  # how the prompt lengths were made
        "load": {
            "input_tokens": _lengths(load.get("input_tokens"), "load.input_tokens"),
            "output_tokens": _lengths(load.get("output_tokens"), "load.output_tokens"),
            "levels": [_num(v, f"load.levels[{i}]", optional=False, minimum=0) for i, v in enumerate(levels)],
            "step_seconds": _num(load.get("step_seconds"), "load.step_seconds", minimum=0),
            "warmup_seconds": _num(load.get("warmup_seconds"), "load.warmup_seconds", minimum=0),
        },
        "slo": {_objective(k): _num(v, f"slo.{k}", minimum=0) for k, v in slo.items() if v is not None},
        "steps": [_step(s, f"steps[{i}]") for i, s in enumerate(steps)],
        "capacity": {
            "concurrency": _num(cap.get("concurrency"), "capacity.concurrency", minimum=0),
            "requests_per_second": _num(cap.get("requests_per_second"), "capacity.requests_per_second", minimum=0),
            "bound_by": _resource(cap.get("bound_by") or "none", "capacity.bound_by"),
            "from_step": _int(cap.get("from_step"), "capacity.from_step"),
            "evidence": _text(cap.get("evidence"), "capacity.evidence", MAX_TEXT) or "",
        },
        "estimate": None if est is None else {
            "kv_capacity_tokens": _num(est.get("kv_capacity_tokens"), "estimate.kv_capacity_tokens", minimum=0),
            "kv_capacity_estimate_tokens": _num(est.get("kv_capacity_estimate_tokens"),
                                                "estimate.kv_capacity_estimate_tokens", minimum=0),
            "headroom_sequences": _num(est.get("headroom_sequences"), "estimate.headroom_sequences"),
            "basis": _resource(est.get("basis") or "estimate", "estimate.basis"),
        },
        "stopped": _choice(d.get("stopped"), "stopped", STOPS),
        "partial": bool(d.get("partial", False)),
        "message": _text(d.get("message"), "message", MAX_TEXT) or "",
    }


def _reject_constant(name: str) -> NoReturn:
    raise _Bad(f"{name} is not a number JSON allows")


def parse(data: bytes) -> JsonDoc:
    """A probe result from the bytes of a file: StoreError (one line) when they are not one."""
    if len(data) > MAX_RESULT_BYTES:
        raise StoreError(f"larger than {MAX_RESULT_BYTES} bytes")
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise StoreError(f"not UTF-8 (byte {exc.start})") from None
    except _Bad as exc:
        raise StoreError(f"not valid JSON: {exc}") from None
    except json.JSONDecodeError as exc:
        raise StoreError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise StoreError("not valid JSON: nested too deeply") from None
    return validate(doc)


# -------------------------------------------------------------------------------------------- files
def save(result: JsonMapping, directory: str | os.PathLike[str]) -> Path:
    """Write ``result`` as probe-last.json in ``directory`` (created 0700 when missing), atomically: a temporary
    file beside it, fsync, rename. Returns the path; StoreError (one line, what to do) when it cannot."""
    doc = validate(result)  # what the agent would refuse is refused here, where the user sees why
    data = (json.dumps(doc, indent=1, allow_nan=False) + "\n").encode()
    if len(data) > MAX_RESULT_BYTES:
        raise StoreError(f"the result is {len(data)} bytes, over the {MAX_RESULT_BYTES} the agent reads")
    folder = Path(directory)
    target = folder / FILENAME
    tmp = None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{FILENAME}.", dir=folder)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)  # the agent may run as another user (headroom) than the probe
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise StoreError(f"cannot write {target}: {exc.strerror or exc}; run the probe as the agent's user "
                         "(e.g. sudo -u headroom) or choose a directory with --state.dir") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return target


def read_bytes(path: Path) -> tuple[bytes, os.stat_result]:
    """The file's bytes (at most MAX_RESULT_BYTES + 1) and its stat; StoreError for a link, a non-regular file or
    one that cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        if os.path.islink(path):
            raise StoreError(f"{path}: a symbolic link, not read") from None
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StoreError(f"{path}: not a regular file")
        if st.st_size > MAX_RESULT_BYTES:
            raise StoreError(f"{path}: {st.st_size} bytes, larger than {MAX_RESULT_BYTES}")
        chunks, left = [], MAX_RESULT_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), st
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def load(directory: str | os.PathLike[str]) -> JsonDoc | None:
    """The last result saved in ``directory``, validated; None when there is none; StoreError (one line naming
    the file) when the file is there but is not one."""
    path = path_in(directory)
    try:
        data, _ = read_bytes(path)
    except FileNotFoundError:
        return None
    try:
        return parse(data)
    except StoreError as exc:
        raise StoreError(f"{path}: {exc}") from None


class LastResult:
    """The last result of a state directory, re-read only when the file changed (its inode, size or mtime):
    ``get()`` costs one stat while it did not. ``error`` says why the file there is not used (None: fine or
    absent)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = path_in(directory)
        self._key: tuple[int, int, int] | None = None
        self.result: JsonDoc | None = None
        self.error: str | None = None

    def get(self) -> JsonDoc | None:
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            self._key, self.result, self.error = None, None, None
            return None
        except OSError as exc:
            self._key, self.result, self.error = None, None, f"cannot read {self.path}: {exc.strerror or exc}"
            return None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key == self._key:
            return self.result
        self._key = key
        try:
            data, _ = read_bytes(self.path)
            self.result, self.error = parse(data), None
        except FileNotFoundError:
            self._key, self.result, self.error = None, None, None
        except StoreError as exc:  # read_bytes names the file; parse does not
            text = str(exc)
            self.result, self.error = None, text if text.startswith(str(self.path)) else f"{self.path}: {text}"
        return self.result

"""Hostile recordings for `headroom replay`, and every sample type round-tripped (issue 11 item 6).

Each malformed trace must end in ``FILE:LINE: message`` and exit status 2, never a traceback; memory
stays bounded by the line cap. A recording in which a declared workload has no processes replays.
The round trip is a Hypothesis property over every sample type, empty ones included.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import subprocess
import sys
import time
import types
import typing
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headroom import record
from headroom.record import (
    SOURCE_TYPES,
    Recorder,
    TraceError,
    decode_sample,
    encode_sample,
    read_traces,
    replay,
)
from headroom.samples import ProcessesSample, Sample, SourceResult, WorkloadProcesses

from conftest import ROOT, http_get

HEADER = {"format": "headroom-trace", "version": 1, "interval": 1.0, "window": 60.0, "config": None}
GOOD = {"t": 1000.0, "m": 5.0, "s": {"memory": {"ok": True, "d": 0.001, "data": {"total_bytes": 100, "available_bytes": 60, "free_bytes": 50}}}}


def trace(tmp_path: Path, *lines: object, header: object = HEADER, raw: bytes | None = None) -> Path:
    path = tmp_path / "t.jsonl"
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text("".join(json.dumps(x) + "\n" for x in (header, *lines)))
    return path


def _deep(n: int) -> str:
    return "[" * n + "]" * n


GPU = {"index": 0, "uuid": "GPU-1", "name": "H100", "pci_bus_id": "00000000:01:00.0", "up": True}
HOSTILE = {
    "a list where the sample belongs": ([[1, 2, 3]], "invalid sample: expected an object, got a list"),
    "a list where a source entry belongs": ([{"t": 1, "m": 1, "s": {"cpu": [1]}}], "s.cpu: expected an object"),
    "a list where the GPU list's item belongs": ([{"t": 1, "m": 1, "s": {"nvml": {"ok": True, "data": {
        "up": True, "gpus": [[0]]}}}}], "s.nvml.data.gpus[0]: expected an object, got a list"),
    "a string utilization": ([{"t": 1, "m": 1, "s": {"nvml": {"ok": True, "data": {
        "up": True, "gpus": [{**GPU, "utilization_ratio": "high"}]}}}}],
        "s.nvml.data.gpus[0].utilization_ratio: expected a number, got the string 'high'"),
    "a string timestamp": ([{"t": "noon", "m": 1, "s": {}}], "t: expected a number"),
    "a NaN timestamp": ([{"t": float("nan"), "m": 1, "s": {}}], "t: expected a finite number"),
    "no timestamps": ([{"s": {}}], "missing 't' or 'm'"),
    "a number where the error text belongs": ([{"t": 1, "m": 1, "s": {"cpu": {"ok": False, "e": 7}}}],
                                              "s.cpu.e: expected a string"),
    "verdicts that are not strings": ([{"t": 1, "m": 1, "s": {}, "v": {"gpu/0": 1}}], "v: expected an object"),
    "true where a count belongs": ([{"t": 1, "m": 1, "s": {"memory": {"ok": True, "data": {"total_bytes": True}}}}],
                                   "s.memory.data.total_bytes: expected an integer, got bool True"),
    "a workload without its name": ([{"t": 1, "m": 1, "s": {"processes": {"ok": True, "data": {
        "workloads": [{"threads": 1}]}}}}], "s.processes.data.workloads[0].name: missing"),
}
HOSTILE_HEADERS = {
    "interval 'abc'": ({**HEADER, "interval": "abc"}, "invalid header: interval: expected a number"),
    "interval NaN": ({**HEADER, "interval": float("nan")}, "invalid header: interval: expected a finite number"),
    "interval 0": ({**HEADER, "interval": 0}, "invalid header: interval: must be above 0"),
    "window 1e300": ({**HEADER, "window": 1e300}, "invalid header: window: must be above 0 and at most 1000000"),
    "window -1": ({**HEADER, "window": -1}, "invalid header: window: must be above 0"),
    "a list as configuration": ({**HEADER, "config": ["agent"]}, "invalid header: config: expected a string"),
    "version 2": ({**HEADER, "version": 2}, "recording format version 2 is not supported"),
    "a list as header": ([HEADER], "not a headroom recording"),
}


def run_replay(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headroom", "replay", str(path)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


@pytest.mark.parametrize(("lines", "message"), HOSTILE.values(), ids=HOSTILE.keys())
def test_malformed_samples_are_named_by_file_and_line(tmp_path, lines, message):
    path = trace(tmp_path, GOOD, *lines)
    with pytest.raises(TraceError) as info:
        replay([path])
    assert str(info.value).startswith(f"{path}:3: ") and message in str(info.value)


@pytest.mark.parametrize(("header", "message"), HOSTILE_HEADERS.values(), ids=HOSTILE_HEADERS.keys())
def test_malformed_headers_are_named_by_file_and_line(tmp_path, header, message):
    path = trace(tmp_path, GOOD, header=header)
    with pytest.raises(TraceError) as info:
        replay([path])
    assert str(info.value).startswith(f"{path}:1: ") and message in str(info.value)


@pytest.mark.parametrize(("raw", "message"), [
    (json.dumps(HEADER).encode() + b"\n" + _deep(100_000).encode() + b"\n", ":2: JSON nested too deeply"),
    (json.dumps(HEADER).encode() + b'\n{"t": 1, "m": 1, "s": {"\xff\xfe": {}}}\n', ":2: not UTF-8 at byte 24"),
    (b"\xef\xbb\xbf" + json.dumps(HEADER).encode() + b"\n", ":1: not JSON"),
    (json.dumps(HEADER).encode() + b"\n{not json}\n" + json.dumps(GOOD).encode() + b"\n", ":2: not JSON"),
], ids=["100 000-deep JSON", "invalid UTF-8", "a byte order mark", "garbage line"])
def test_malformed_bytes_are_named_by_file_and_line(tmp_path, raw, message):
    path = trace(tmp_path, raw=raw)
    r = run_replay(path)
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{path}{message}" in r.stderr and "Traceback" not in r.stderr


def test_every_hostile_trace_exits_2_with_file_line_and_no_traceback(tmp_path):
    """The CLI over the whole corpus: the figure docs/reliability.md quotes."""
    cases = [(lines, GOOD and HEADER) for lines, _ in HOSTILE.values()] + [([], h) for h, _ in HOSTILE_HEADERS.values()]
    start = time.monotonic()
    for i, (lines, header) in enumerate(cases):
        d = tmp_path / str(i)
        d.mkdir()
        path = trace(d, GOOD, *lines, header=header)
        r = run_replay(path)
        assert r.returncode == 2 and r.stderr.startswith(f"headroom: {path}:"), (i, r.stderr[-1000:])
        assert "Traceback" not in r.stderr
    print(f"\nhostile corpus: {len(cases)} traces, each exit 2 with FILE:LINE, {time.monotonic() - start:.1f} s")


def test_a_line_over_the_cap_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "MAX_LINE_BYTES", 1024)
    path = trace(tmp_path, raw=json.dumps(HEADER).encode() + b"\n" + b'{"t": "' + b"x" * 100_000 + b'"}\n')
    with pytest.raises(TraceError, match=r":2: line longer than 1024 bytes"):
        list(read_traces([path]))


def test_a_1_gib_single_line_trace_is_refused_with_bounded_memory(tmp_path):
    path = tmp_path / "huge.jsonl"
    with path.open("wb") as f:  # sparse: 1 GiB of NUL bytes that take no disk
        f.write(json.dumps(HEADER).encode() + b"\n")
        f.truncate(2**30)
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child forked from a large pytest
    # process would report the parent's size (a full-suite run measured ~305 MiB that way)
    r = subprocess.run([sys.executable, "-c", "import sys\nfrom headroom.cli import main\n"
                        "code = main(['replay', sys.argv[1]])\n"
                        "hwm = [line for line in open('/proc/self/status') if line.startswith('VmHWM:')]\n"
                        "print(hwm[0].split()[1])\nsys.exit(code)", str(path)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and f"{path}:2: line longer than" in r.stderr, r.stderr[-2000:]
    peak_kib = int(r.stdout.split()[-1])
    print(f"\n1 GiB single-line trace: refused, peak RSS {peak_kib / 1024:.0f} MiB")
    assert peak_kib < 300 * 1024


def test_a_5000_digit_integer_is_named_by_file_and_line(tmp_path):
    # Python 3.11's json raises ValueError "Exceeds the limit (4300 digits) for integer string conversion"
    path = trace(tmp_path, raw=json.dumps(HEADER).encode() + b"\n" + json.dumps(GOOD).encode() + b"\n"
                 + b'{"t": 1, "m": ' + b"7" * 5000 + b', "s": {}}\n')
    r = run_replay(path)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr == f"headroom: {path}:3: not JSON this reader takes: an integer of more than 4300 digits\n"


def _replay_measured(path: Path, timeout: float) -> tuple[subprocess.CompletedProcess, float, float]:
    """`headroom replay PATH` in a child: (result, wall seconds, peak RSS MiB from getrusage of the child)."""
    code = ("import resource, subprocess, sys, time\n"
            "start = time.monotonic()\n"
            "try:\n"
            "    r = subprocess.run([sys.executable, '-m', 'headroom', 'replay', sys.argv[1]], capture_output=True,"
            " text=True, timeout=float(sys.argv[2]))\n"
            "    code, err = r.returncode, r.stderr\n"
            "except subprocess.TimeoutExpired:\n"
            "    code, err = 124, 'still running at the timeout'\n"
            "wall = time.monotonic() - start\n"
            "sys.stdout.write(f'{wall} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n')\n"
            "sys.stderr.write(err)\n"
            "sys.exit(code)")
    r = subprocess.run([sys.executable, "-c", code, str(path), str(timeout)], capture_output=True, text=True,
                       timeout=timeout + 30, cwd=ROOT)
    wall, rss_kib = r.stdout.split()[-2:]
    return r, float(wall), int(rss_kib) / 1024


def _workloads_line(i: int, target_bytes: int) -> bytes:
    """A valid sample line of about ``target_bytes``: a processes sample with that many small workloads."""
    one = {"name": "w00000000", "pids": [1], "threads": 1, "cpu_user_seconds_total": 1.0,
           "cpu_system_seconds_total": 1.0, "resident_memory_bytes": 1}
    count = target_bytes // (len(json.dumps(one, separators=(",", ":"))) + 1)
    workloads = [{**one, "name": f"w{j:08d}"} for j in range(count)]
    line = {"t": 1000.0 + i, "m": 5.0 + i, "s": {"processes": {"ok": True, "d": 0.001, "data": {
        "workloads": workloads}}}}
    return json.dumps(line, separators=(",", ":")).encode() + b"\n"


def test_40_lines_near_the_cap_are_refused_or_replayed_in_bounded_time_and_memory(tmp_path):
    """Lines just under the line cap must not add up: 40 lines of 16 MiB took 228 s and 1.07 GiB before
    (each decoded and held in the window); the window's recorded bytes are bounded by MAX_WINDOW_BYTES."""
    old_cap = 16 * 2**20 - 4096  # just under the cap before
    path = tmp_path / "big.jsonl"
    with path.open("wb") as f:
        f.write(json.dumps(HEADER).encode() + b"\n")
        line = _workloads_line(0, old_cap)
        for _ in range(40):
            f.write(line)
    r, wall, rss = _replay_measured(path, timeout=60)
    print(f"\n40 lines of {len(line) / 2**20:.1f} MiB: exit {r.returncode}, {wall:.1f} s, peak RSS {rss:.0f} MiB")
    assert r.returncode == 2 and r.stderr.startswith(f"headroom: {path}:2: line longer than"), r.stderr[-500:]
    assert wall < 10 and rss < 150

    near = record.MAX_LINE_BYTES - 4096  # just under today's cap: 40 of them go through the window
    path = tmp_path / "near.jsonl"
    with path.open("wb") as f:
        f.write(json.dumps(HEADER).encode() + b"\n")
        for i in range(40):
            f.write(_workloads_line(i, near))
    r, wall, rss = _replay_measured(path, timeout=120)
    print(f"40 lines of {near / 2**20:.1f} MiB: exit {r.returncode}, {wall:.1f} s, peak RSS {rss:.0f} MiB")
    assert r.returncode == 0, r.stderr[-500:]
    assert wall < 60 and rss < 400


def test_a_window_over_its_byte_budget_is_refused_at_the_line_that_overflows_it(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "MAX_WINDOW_BYTES", 10_000)
    line = _workloads_line(0, 3000)
    path = trace(tmp_path, raw=json.dumps(HEADER).encode() + b"\n" + line * 5)
    with pytest.raises(TraceError) as info:
        replay([path])
    assert str(info.value).startswith(f"{path}:5: the replay window (4 samples) would hold ")
    assert "more than the 10000 allowed" in str(info.value)
    short = trace(tmp_path, raw=json.dumps({**HEADER, "window": 2.0}).encode() + b"\n" + line * 8)
    assert replay([short]).ticks == 8  # samples that leave the window give their bytes back


# ------------------------------------------------------------------- the recorder drops, the reader needs
def test_a_workload_without_processes_round_trips():
    empty = WorkloadProcesses(name="chat", pids=(), threads=0, cpu_user_seconds_total=0.0,
                              cpu_system_seconds_total=0.0, resident_memory_bytes=0)
    sample = Sample(timestamp=1.0, monotonic=1.0,
                    sources={"processes": SourceResult("processes", True, 0.0, ProcessesSample(workloads=(empty,)))})
    assert decode_sample(json.loads(encode_sample(sample))) == sample


def test_a_live_recording_with_a_workload_that_has_no_processes_replays(tmp_path, agent_factory):
    config = tmp_path / "config.yaml"
    config.write_text("agent:\n  sample_interval: 200ms\nworkloads:\n  - name: absent\n    kind: inference\n"
                      "    params: 7B\n    precision: bf16\n    match: {cmdline: no-such-process-anywhere-x1y2}\n")
    rec = tmp_path / "rec.jsonl"
    agent = agent_factory("--config.file", str(config), "--simulate", "demo", "--record", str(rec))
    deadline = time.monotonic() + 20
    while b'headroom_workload_processes{workload="absent"} 0' not in http_get(agent.url + "/metrics")[2]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(0.5)
    assert agent.stop()[0] == 0
    r = run_replay(rec)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ticks replayed" in r.stdout


# ----------------------------------------------------------------------- round trip: every sample type
def _strategy(tp: typing.Any) -> st.SearchStrategy:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return st.none() | _strategy(args[0])
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return st.builds(tp, **{f.name: _strategy(hints[f.name]) for f in dataclasses.fields(tp)})
    if origin is tuple:
        return st.lists(_strategy(typing.get_args(tp)[0]), max_size=3).map(tuple)
    if origin is not None and issubclass(origin, Mapping):
        key, value = typing.get_args(tp)
        return st.dictionaries(_strategy(key), _strategy(value), max_size=3)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    return {bool: st.booleans(), int: st.integers(-(2**63), 2**64),
            float: st.floats(allow_nan=False, allow_infinity=False), str: st.text(max_size=20)}[tp]


_SAMPLES = st.fixed_dictionaries({}, optional={name: st.builds(
    lambda data, ok, name=name: SourceResult(name, ok, 0.001, data if ok else None, None if ok else "failed"),
    _strategy(tp), st.booleans()) for name, tp in SOURCE_TYPES.items()})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sources=_SAMPLES, t=st.floats(0, 4e9), m=st.floats(0, 1e9))
def test_every_sample_type_round_trips(sources, t, m):
    sample = Sample(timestamp=t, monotonic=m, sources=sources)
    assert decode_sample(json.loads(encode_sample(sample))) == sample


def _empty(tp: typing.Any) -> typing.Any:
    """The emptiest value of a type: what the recorder leaves out (None, (), {}) or zero."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return None
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: _empty(hints[f.name]) for f in dataclasses.fields(tp)
                     if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING})
    if origin is tuple:
        return ()
    if origin is not None and issubclass(origin, Mapping):
        return {}
    return tp()


@pytest.mark.parametrize("name", sorted(SOURCE_TYPES))
def test_empty_samples_round_trip(name):
    data = _empty(SOURCE_TYPES[name])
    sample = Sample(timestamp=1.0, monotonic=1.0, sources={name: SourceResult(name, True, 0.0, data)})
    assert decode_sample(json.loads(encode_sample(sample))) == sample


# ------------------------------------------------------------------------------ fuzzing the reader
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=20)


def _mutations() -> st.SearchStrategy:
    keys = st.sampled_from(["t", "m", "s", "v", "ok", "d", "e", "data", "gpus", "workloads", "pids", "cores",
                            "utilization_gpu", "name", "threads", "up"])
    return st.recursive(
        st.fixed_dictionaries({"t": _JSON | st.floats(0, 1e9), "m": _JSON | st.floats(0, 1e9)}),
        lambda inner: st.dictionaries(keys, inner | _JSON, max_size=5), max_leaves=10)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(line=_mutations() | _JSON, header=st.just(HEADER) | st.dictionaries(st.sampled_from(list(HEADER)), _JSON))
def test_fuzzed_traces_replay_or_fail_with_file_and_line(tmp_path, line, header):
    path = tmp_path / "fuzz.jsonl"
    path.write_text(json.dumps(header if isinstance(header, dict) and header.get("format") else HEADER) + "\n"
                    + json.dumps(line) + "\n")
    try:
        replay([path])
    except TraceError as exc:
        assert str(exc).startswith(f"{path}:"), str(exc)


def test_a_recorder_file_is_replayable(tmp_path):
    path = tmp_path / "r.jsonl"
    rec = Recorder(path, {"interval": 1.0, "window": 60.0})
    rec.write(Sample(timestamp=1.0, monotonic=1.0, sources={}))
    rec.close()
    assert replay([path]).ticks == 1


# ------------------------------------------------------------------ 7: the recording's directory removed
def _tick(i: float) -> Sample:
    return Sample(timestamp=i, monotonic=i, sources={})


def test_a_removed_recording_directory_is_reported_on_the_next_tick(tmp_path):
    import shutil

    d = tmp_path / "rec"
    d.mkdir()
    rec = Recorder(d / "r.jsonl", {"interval": 1.0})
    rec.write(_tick(1))
    assert rec.ok
    shutil.rmtree(d)
    rec.write(_tick(2))  # the next tick
    assert rec.ok is False and "No such file or directory" in rec.error
    d.mkdir()
    rec.write(_tick(3))
    assert rec.ok and [s.timestamp for _, s, _ in read_traces([d / "r.jsonl"])] == [3]


def test_a_deleted_or_replaced_recording_is_reopened(tmp_path):
    path = tmp_path / "r.jsonl"
    rec = Recorder(path, {"interval": 1.0})
    rec.write(_tick(1))
    path.unlink()
    rec.write(_tick(2))
    assert rec.ok and [s.timestamp for _, s, _ in read_traces([path])] == [2]
    path.rename(tmp_path / "moved.jsonl")  # logrotate's move-and-create
    path.write_text("")
    rec.write(_tick(3))
    assert [s.timestamp for _, s, _ in read_traces([path])] == [3]


def test_the_agent_reports_a_removed_recording_directory(tmp_path, agent_factory):
    import shutil

    d = tmp_path / "rec"
    d.mkdir()
    agent = agent_factory("--simulate", "demo", "--record", str(d / "r.jsonl"))
    assert b"headroom_record_success 1" in http_get(agent.url + "/metrics")[2]
    shutil.rmtree(d)
    deadline = time.monotonic() + 10
    while b"headroom_record_success 0" not in http_get(agent.url + "/metrics")[2]:
        assert time.monotonic() < deadline, "still 'writing' to a deleted file"
        time.sleep(0.1)
    _status, _, body = http_get(agent.url + "/healthz")
    assert b"degraded: record: cannot write" in body and b"No such file or directory" in body

"""Record and replay: a simulated run recorded live replays to the same verdicts; bad recordings fail clearly."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import time

from headroom.record import Recorder, read_traces, replay
from headroom.samples import Sample, SourceResult

from conftest import ROOT, http_get

SCENARIO = """\
description: a GPU that is compute bound for 3 s, then held down by its power cap
gpus:
  - name: NVIDIA H100 80GB HBM3
    memory_total: 80GiB
    power_limit: 700
    sm_clock_max: 1980MHz
    memory_clock_max: 2619MHz
    memory_used: 40GiB
    utilization: {steps: [[0s, 0.99], [3s, 0.9]]}
    power: {steps: [[0s, 500], [3s, 699]]}
    sm_clock: {steps: [[0s, 1980MHz], [3s, 1400MHz]]}
    clock_events:
      sw_power_cap: {steps: [[0s, false], [3s, true]]}
"""
CONFIG = """\
agent:
  sample_interval: 200ms
analysis:
  short_window: 2s
  long_window: 10s
  hold: 600ms
"""


def test_a_live_recording_replays_to_the_same_verdicts(tmp_path, agent_factory):
    scenario = tmp_path / "power.yaml"
    scenario.write_text(SCENARIO)
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    rec = tmp_path / "rec.jsonl"
    agent = agent_factory("--config.file", str(config), "--simulate", str(scenario), "--record", str(rec))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        body = http_get(agent.url + "/metrics")[2].decode()
        # the primary itself (headroom_gpu_bottleneck), not its score: the score reaches 1 before the hold
        # has passed, and on a loaded machine the agent may be stopped inside that gap
        if re.search(r'^headroom_gpu_bottleneck\{gpu="0",[^}]*resource="gpu_power"\} 1$', body, re.M):
            break
        time.sleep(0.2)
    time.sleep(0.5)
    code, err = agent.stop()
    assert code == 0, err
    live_changes = [json.loads(x) for x in err.splitlines() if '"bottleneck_changed"' in x]
    assert [(c["before"], c["after"]) for c in live_changes] == [("none", "gpu_compute"), ("gpu_compute", "gpu_power")]

    result = replay([rec])  # the configuration recorded in the header
    assert result.compared == result.ticks > 20
    assert result.mismatches == []
    assert [(c["before"], c["after"]) for c in result.changes] == [("none", "gpu_compute"), ("gpu_compute", "gpu_power")]
    assert result.final == {"gpu/0": "gpu_power"}

    r = subprocess.run([sys.executable, "-m", "headroom", "replay", str(rec), "--format", "json"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["mismatches"] == []
    table = subprocess.run([sys.executable, "-m", "headroom", "replay", str(rec)], capture_output=True, text=True,
                           timeout=60, cwd=ROOT).stdout
    assert "gpu 0" in table and "gpu_compute" in table and "gpu_power" in table
    assert f"live verdicts reproduced on {result.ticks} of {result.ticks} ticks" in table


def test_rotation_keeps_the_size_bounded(tmp_path):
    path = tmp_path / "r.jsonl"
    rec = Recorder(path, {"interval": 1.0}, max_bytes=4096)
    payload = SourceResult("x", False, 0.0, None, "e" * 300)
    for i in range(100):
        rec.write(Sample(timestamp=float(i), monotonic=float(i), sources={"x": payload}))
    rec.finish()
    assert path.stat().st_size <= 4096
    # the rotated file is compressed (issue 29), the uncompressed one gone
    rotated = tmp_path / "r.jsonl.1.gz"
    assert rotated.read_bytes()[:2] == b"\x1f\x8b" and not (tmp_path / "r.jsonl.1").exists()
    assert len(gzip.decompress(rotated.read_bytes())) <= 4096 and rotated.stat().st_size < 1024
    # both files are complete recordings (each starts with its own header)
    ticks = [s.timestamp for _, s, _ in read_traces([rotated, path])]
    assert ticks == sorted(ticks) and ticks[-1] == 99.0


def test_a_tick_over_the_line_cap_is_not_recorded_so_the_recording_stays_replayable(tmp_path):
    from headroom.record import MAX_LINE_BYTES

    path = tmp_path / "r.jsonl"
    rec = Recorder(path, {"interval": 1.0})
    rec.write(Sample(timestamp=1.0, monotonic=1.0, sources={}))
    rec.write(Sample(timestamp=2.0, monotonic=2.0,
                     sources={"x": SourceResult("x", False, 0.0, None, "e" * MAX_LINE_BYTES)}))
    assert not rec.ok and "line cap" in rec.error
    rec.write(Sample(timestamp=3.0, monotonic=3.0, sources={}))
    rec.close()
    assert rec.ok
    assert [s.timestamp for _, s, _ in read_traces([path])] == [1.0, 3.0]


def test_replay_reads_a_rotated_gzip_file_and_refuses_a_broken_one_in_one_line(tmp_path):
    path = tmp_path / "r.jsonl"
    rec = Recorder(path, {"interval": 1.0}, max_bytes=4096)
    for i in range(20):  # one rotation: about 11 ticks of 350 bytes per 4 KiB file
        rec.write(Sample(timestamp=float(i), monotonic=float(i), sources={"x": SourceResult("x", False, 0.0, None,
                                                                                            "e" * 300)}))
    rec.finish()
    rotated = tmp_path / "r.jsonl.1.gz"
    r = subprocess.run([sys.executable, "-m", "headroom", "replay", str(rotated), str(path), "--format", "json"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    first = sum(1 for _ in read_traces([rotated]))
    assert json.loads(r.stdout)["ticks"] == 20 and 0 < first < 20
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(b"\x1f\x8b" + b"\x00" * 40)
    r = subprocess.run([sys.executable, "-m", "headroom", "replay", str(broken)], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"headroom: {broken}:1: cannot decompress") and len(r.stderr.splitlines()) == 1
    cut = tmp_path / "cut.jsonl.gz"  # a copy interrupted: the whole lines it holds are read
    cut.write_bytes(rotated.read_bytes()[: rotated.stat().st_size // 2])
    assert sum(1 for _ in read_traces([cut])) < first  # no traceback: the torn end is dropped


def test_a_write_failure_degrades_and_recovers(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    rec = Recorder(d / "r.jsonl", {"interval": 1.0})
    sample = Sample(timestamp=1.0, monotonic=1.0, sources={})
    rec.write(sample)
    assert rec.ok
    rec.close()
    os.chmod(d, 0o500)
    (d / "r.jsonl").chmod(0o400)
    try:
        if os.geteuid() == 0:  # root ignores permissions: make the file unwritable another way
            rec.path = tmp_path / "missing-dir" / "r.jsonl"
        rec.write(sample)
        assert not rec.ok and rec.error.startswith("cannot write")
    finally:
        os.chmod(d, 0o700)
        (d / "r.jsonl").chmod(0o600)
    rec.path = d / "r.jsonl"
    rec.write(sample)
    assert rec.ok


def test_bad_recordings_get_clear_errors(tmp_path):
    cases = {
        "empty.jsonl": ("", "empty recording"),
        "other.jsonl": ('{"hello": 1}\n', "not a headroom recording"),
        "future.jsonl": ('{"format": "headroom-trace", "version": 99}\n', "format version 99 is not supported"),
        "garbage.jsonl": ('{"format": "headroom-trace", "version": 1}\n{oops\n{"t": 1}\n', ":2: not JSON"),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_text(content)
        r = subprocess.run([sys.executable, "-m", "headroom", "replay", str(tmp_path / name)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, (name, r.stderr)
    r = subprocess.run([sys.executable, "-m", "headroom", "replay", str(tmp_path / "nope.jsonl")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "cannot read" in r.stderr


def test_record_to_an_impossible_path_stops_start_up(tmp_path):
    r = subprocess.run([sys.executable, "-m", "headroom", "run", "--simulate", "demo", "--record",
                        str(tmp_path / "no" / "such" / "dir" / "r.jsonl")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "cannot record to" in r.stderr and "No such file or directory" in r.stderr


def test_the_documented_bytes_per_tick_match_a_demo_recording():
    """docs/trace-format.md says how large a tick is (issue 29: `--record` did not say): the demo's, measured."""
    from headroom.config import load_config
    from headroom.record import encode_sample
    from headroom.simulation.runner import running

    doc = (ROOT / "docs" / "trace-format.md").read_text()
    documented = int(re.search(r"\(([0-9 ]+) bytes measured over 40 ticks", doc).group(1).replace(" ", ""))
    assert f"about {round(documented / 1000)} kB per tick" in doc
    with running("demo", load_config(ROOT / "config.yaml")) as run:
        lines = [encode_sample(run.tick().sample, {}) for _ in range(60)][20:]  # past the first samples' gaps
    measured = sum(len(x) + 1 for x in lines) / len(lines)
    assert abs(measured - documented) / documented < 0.15, f"measured {measured:.0f} bytes per tick"

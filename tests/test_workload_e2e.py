"""End to end: real processes counted under their workload by a real agent, and the simulator's stand-ins.

The stand-in tests use command lines with a random marker, so agents or demos running at the same time on
this machine never match them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from headroom.simulation import ManualClock, ScenarioError, parse_scenario
from headroom.units import parse_bytes

from conftest import ROOT

GPU = """gpus:
  - name: NVIDIA A100-SXM4-80GB
    memory_total: 80GiB
    power_limit: 400
    memory_used: 1GiB
"""


def headroom(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headroom", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def series(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def children_of(pid: int) -> list[int]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry.name))
            except (OSError, ValueError):
                pass
    return out


def cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


def wait_gone(pids, timeout: float = 5.0) -> list[int]:
    """The pids still alive (not zombies) after up to ``timeout`` s. A pid taken by a process that started after
    this call (the suite's other workers start many processes, so a pid is reused within seconds once the pid
    space wraps) is not the one asked about: gone."""
    since = time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if os.path.exists(f"/proc/{p}") and b"" != _state(p) and _started(p) <= since]
        time.sleep(0.05)
    return alive


def describe(pids: list[int]) -> str:
    """What the kernel says of each pid (state, parent, command line): why a stand-in outlived its stop."""
    out = []
    for pid in pids:
        try:
            status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                          if ":" in line)
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            out.append(f"{pid}: state {status.get('State', '?').strip()}, ppid {status.get('PPid', '?').strip()}, "
                       f"{cmdline[:200]!r}")
        except OSError as exc:
            out.append(f"{pid}: {exc}")
    return "; ".join(out)


def _started(pid: int) -> float:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22); +inf once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return float(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return float("inf")


def _state(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return b"" if state == b"Z" else state
    except OSError:
        return b""


# -------------------------------------------------------------------------------- a real process
def test_a_real_process_with_a_distinctive_command_line_is_counted_under_its_workload(tmp_path: Path):
    marker = f"headroom-e2e-{uuid.uuid4().hex[:12]}"
    code = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code, marker])
    try:
        cfg = tmp_path / "c.yaml"
        cfg.write_text("workloads:\n"
                       f"  - {{name: marked, kind: inference, params: 1B, precision: fp16, match: {{cmdline: '{marker}'}}}}\n")
        deadline = time.monotonic() + 5
        while not children_of(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        r = headroom("snapshot", "--config.file", str(cfg), "--no-collector.nvml", "--samples", "2",
                     "--sample.interval", "300ms")
        assert r.returncode == 0, r.stderr
        s = series(r.stdout)
        assert s[("headroom_workload_processes", (("workload", "marked"),))] == 2  # python and its sleep child
        assert s[("headroom_workload_threads", (("workload", "marked"),))] >= 2
        assert s[("headroom_workload_resident_memory_bytes", (("workload", "marked"),))] > 1 << 20
        assert ("headroom_workload_cpu_seconds_total", (("mode", "user"), ("workload", "marked"))) in s
        assert s[("headroom_collector_success", (("collector", "processes"),))] == 1
        # no per-process label: the pid is no label value of any workload series (a substring test of the
        # text matched the pid inside a byte count)
        assert not [k for k in s if k[0].startswith("headroom_workload") and str(proc.pid) in (v for _, v in k[1])]
    finally:
        for child in children_of(proc.pid):
            os.kill(child, signal.SIGTERM)
        proc.terminate()
        proc.wait()


# ---------------------------------------------------------------------------- scenario workloads
def scenario_text(marker: str) -> str:
    return GPU + f"""workloads:
  - name: stand
    cmdline: "python3 serve.py --marker {marker} --label 'two words'"
    cpu: 0.05
    rss: 8MiB
    children:
      - {{cmdline: "worker-{marker} rank=0", gpus: {{0: {{memory: 6GiB, utilization: 0.4}}}}}}
      - {{gpus: {{0: 2GiB}}}}
"""


def test_scenario_workloads_parse_with_children_and_gpu_uses():
    (w,) = parse_scenario(scenario_text("m")).workloads
    assert w.process.argv == ("python3", "serve.py", "--marker", "m", "--label", "two words")
    assert w.process.cpu.at(0) == 0.05 and w.process.rss.at(0) == 8 << 20
    first, second = w.process.children
    assert first.argv == ("worker-m", "rank=0") and second.argv == w.process.argv  # default: the parent's
    assert [(u.gpu, u.memory.at(0), u.utilization.at(0) if u.utilization else None) for u in first.gpus] == [
        (0, 6 << 30, 0.4)]
    assert parse_scenario(GPU + "workloads:\n  - {name: w, cmdline: 'a long enough line', children: 3}\n"
                          ).workloads[0].process.children[2].argv == ("a", "long", "enough", "line")


@pytest.mark.parametrize(("workloads", "message"), [
    ("  - {name: w, cmdline: 'long enough command', gpus: {1: 1GiB}}", r"s.yaml:7:54: workloads\[0\]\.gpus\.1: no such GPU"),
    ("  - {name: w, cmdline: 'short'}", r"workloads\[0\]\.cmdline: a stand-in command line needs at least 12"),
    ("  - {name: w, cmdline: 'unterminated \"quote here'}", r"workloads\[0\]\.cmdline: cannot split like a shell"),
    ("  - {name: w, cmdline: 'long enough command', pids: [1]}", r"workloads\[0\]\.pids: unknown key"),
    ("  - {name: w, cmdline: 'long enough command', cpu: -1}", r"workloads\[0\]\.cpu: expected a number of cores >= 0"),
    ("  - {name: w, cmdline: 'long enough command', cpu: 1, threads: [1, 0.2]}",
     r"workloads\[0\]\.cpu: give cpu or per-thread cores in threads, not both"),
    ("  - {name: w, cmdline: 'long enough command', children: [{cpu_quota: 2}]}",
     r"workloads\[0\]\.children\[0\]\.cpu_quota: only the workload's main process has a cgroup of its own"),
    ("  - {name: w, cmdline: 'long enough command', cgroup: relative/path}",
     r"workloads\[0\]\.cgroup: expected an absolute cgroup path"),
    ("  - {cmdline: 'long enough command'}", r"workloads\[0\]\.name: is required"),
    ("  - {name: w, cmdline: 'long enough command', children: [{children: 1}]}",
     r"workloads\[0\]\.children\[0\]\.children: unknown key"),
])
def test_scenario_workload_errors_point_at_the_line(workloads, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(GPU + "workloads:\n" + workloads + "\n", filename="s.yaml")


def test_stand_ins_have_the_declared_command_lines_and_the_fake_gpu_lists_their_real_pids():
    marker = uuid.uuid4().hex[:12]
    scenario = parse_scenario(scenario_text(marker))
    pids = scenario.start_processes()["stand"]
    try:
        main, worker, twin = pids
        assert cmdline(main) == f"python3\0serve.py\0--marker\0{marker}\0--label\0two words\0".encode()
        assert cmdline(worker) == f"worker-{marker}\0rank=0\0".encode()
        assert cmdline(twin) == cmdline(main)
        assert sorted(children_of(main)) == sorted([worker, twin])
        assert scenario.start_processes()["stand"] == pids  # once

        import pynvml  # the real binding, over the scenario's driver stand-in

        scenario.nvml_library(clock=ManualClock(5.0))
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        listed = {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}
        assert listed == {worker: 6 << 30, twin: 2 << 30}
        assert {s.pid: s.smUtil for s in pynvml.nvmlDeviceGetProcessUtilization(h, 0)} == {worker: 40}
        assert pynvml.nvmlDeviceGetMemoryInfo(h).used >= 8 << 30  # the scenario says 1GiB; its processes hold 8
        pynvml.nvmlShutdown()
    finally:
        scenario.stop_processes()
    assert wait_gone(pids) == []
    assert scenario.standin_processes(0) == []


def test_stand_ins_die_with_a_killed_agent(tmp_path: Path, agent_factory):
    marker = uuid.uuid4().hex[:12]
    path = tmp_path / "s.yaml"
    path.write_text(scenario_text(marker))
    (tmp_path / "empty.yaml").write_text("{}\n")
    agent = agent_factory("--simulate", str(path), "--config.file", str(tmp_path / "empty.yaml"))
    deadline = time.monotonic() + 10
    mine: list[int] = []
    while time.monotonic() < deadline and not mine:
        mine = [p for p in children_of(agent.proc.pid) if marker.encode() in cmdline(p)]
        time.sleep(0.1)
    assert len(mine) == 1
    family = mine + children_of(mine[0])
    assert len(family) == 3
    agent.proc.send_signal(signal.SIGKILL)
    agent.proc.wait()
    assert wait_gone(family) == []  # PR_SET_PDEATHSIG, no explicit stop ran


# ------------------------------------------------------------------------------------------ the demo
def test_demo_shows_the_stand_in_vllm_under_its_workload_with_gpu_memory_from_the_fake_nvml():
    r = headroom("snapshot", "--config.file", str(ROOT / "config.yaml"), "--simulate", "demo", "--samples", "2",
                 "--sample.interval", "300ms", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    gpus = doc["sources"]["nvml"]["data"]["gpus"]
    on_gpu = [p["pid"] for g in gpus for p in g["processes"]]
    # the two tensor-parallel worker stand-ins and the undeclared server's engine core, with their real pids
    assert len(on_gpu) == 3
    (chat,) = [w for w in doc["findings"]["workloads"] if w["name"] == "chat"]
    assert len(set(on_gpu) & set(chat["measured"]["pids"])) == 2  # joined through the parent's workload
    # the undeclared `vllm serve Qwen/Qwen3-0.6B --gpu-memory-utilization 0.08` on GPU 1: found by its command
    # line, sized from the config.json in its HF_HOME: vLLM reserves 0.08 of the card
    # (its expected memory, once its config.json is read off the tick: tests/test_e2e.py)
    (auto,) = [w for w in doc["findings"]["workloads"] if w["source"] == "auto"]
    assert (auto["name"], auto["model"], auto["runtime"]) == ("vllm/Qwen3-0.6B:8001", "Qwen/Qwen3-0.6B", "vllm")
    assert auto["expected_peak_bytes"] in (None, int(81559 * (1 << 20) * 0.08))
    assert {g["index"]: g["memory_used_bytes"] for g in auto["gpus"]} == {1: int(parse_bytes("6.3GiB"))}
    assert chat["processes"] >= 3
    per_gpu = {g["index"]: g["memory_used_bytes"] for g in chat["gpus"]}
    assert per_gpu == {0: int(parse_bytes("70.4GiB")), 1: int(parse_bytes("70.4GiB"))}
    assert chat["expected_peak_bytes"] == 2 * int(81559 * (1 << 20) * 0.9)
    assert chat["gpu_memory_capacity_bytes"] == 2 * 81559 * (1 << 20)
    assert chat["estimate_error"] is None
    left = wait_gone(on_gpu)
    assert left == [], describe(left)  # snapshot stopped its stand-ins on the way out


# ------------------------------------------------------------------- per-process GPU utilization
@pytest.mark.parametrize(("situation", "extra", "expected", "calls"), [
    # 102 is listed on the GPU but has no sample: idle (the driver samples only processes that ran), so 0
    # one call a tick into the array kept for the GPU (the binding's wrapper asks the size first: two)
    ("samples since the last tick become the process's ratio", "", {101: 0.25, 102: 0.0}, 2),
    ("NOT_SUPPORTED is remembered: absent, and not asked again", "    unsupported: [process_utilization]\n",
     {101: None, 102: None}, 1),
])
def test_nvml_collector_reads_per_process_sm_utilization(situation, extra, expected, calls):
    from headroom.sources import SourceContext
    from headroom.sources.nvml import NvmlCollector

    text = GPU + ("    processes:\n      - {pid: 101, used_memory: 1GiB, sm_utilization: 0.25}\n"
                  "      - {pid: 102, used_memory: 2GiB}\n") + extra
    scenario = parse_scenario(text)
    clock = ManualClock(1.0)
    scenario.nvml_library(clock=clock)
    c = NvmlCollector(SourceContext(scenario=scenario, monotonic=clock))
    try:
        first = c.collect().gpus[0]
        clock.advance(1.0)
        second = c.collect().gpus[0]
    finally:
        c.close()
    for g in (first, second):
        assert {p.pid: p.sm_utilization_ratio for p in g.processes} == expected, situation
    assert scenario.nvml_library().calls[("nvmlDeviceGetProcessUtilization", 0)] == calls

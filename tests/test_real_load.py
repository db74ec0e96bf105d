"""Bottleneck classification under REAL load on this machine, with a simulated GPU that waits.

- Real processes saturating the CPU (a trainer and its DataLoader workers burning their cores) while
  the simulated GPU is mostly idle are classified `cpu`.
- A real tmpfs filled to its limit while the workload declares DataLoader workers is classified
  `shared_memory`.
Both go through `headroom run` as a user runs it: the processes collector reads the real /proc, the shm
collector statvfs()es the real mount, the analysis scores them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import http_get

GPU_WAITING = """\
description: one GPU that mostly waits for its input
gpus:
  - name: NVIDIA H100 80GB HBM3
    memory_total: 80GiB
    memory_used: 30GiB
    power_limit: 700
    power: 200
    sm_clock_max: 1980MHz
    memory_clock_max: 2619MHz
    utilization: {steps: [[0s, 0.2], [1s, 0.05], [2s, 0.3]], repeat: true, period: 3s}
"""
BURN = "import sys, time\nwhile True:\n    pass\n"


def forking_trainer(workers: int, burn: bool) -> str:
    """Python code for a trainer that forks ``workers`` children without exec (a fork-started DataLoader's workers:
    the trainer's own argv and comm), each burning a core or sleeping, and sleeps; its process group ends them."""
    work = "while True:\n                pass" if burn else "time.sleep(120)"
    return ("import os, time\n"
            f"for _ in range({workers}):\n"
            "    if os.fork() == 0:\n"
            "        try:\n"
            f"            {work}\n"
            "        finally:\n"
            "            os._exit(0)\n"
            "time.sleep(120)\n")


def config(tmp_path: Path, extra: str = "") -> Path:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"""\
agent:
  sample_interval: 250ms
analysis:
  short_window: 4s
  long_window: 20s
  hold: 1s
workloads:
  - name: trainer
    kind: finetune-lora
    params: 7B
    precision: bf16
    lora: {{rank: 16}}
    dataloader_workers: 2
    gpus: [0]
    match: {{cmdline: "headroom-test-trainer-{os.getpid()}"}}
{extra}""")
    return cfg


def primary(agent) -> tuple[str, dict]:
    doc = json.loads(http_get(agent.url + "/api/v1/status")[2])
    (w,) = doc["workloads"]
    return w["primary_bottleneck"], w


def wait_primary(agent, expected: str, timeout: float = 40.0) -> dict:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        p, w = primary(agent)
        last = w
        if p == expected:
            return w
        time.sleep(0.5)
    raise AssertionError(f"never classified {expected}: {json.dumps(last, indent=1)[:3000]}")


@pytest.fixture
def gpu_scenario(tmp_path):
    path = tmp_path / "waiting.yaml"
    path.write_text(GPU_WAITING)
    return path


def test_real_processes_saturating_the_cpu_while_the_gpu_waits_is_cpu(tmp_path, gpu_scenario, agent_factory):
    marker = f"headroom-test-trainer-{os.getpid()}"
    # the trainer and its two DataLoader workers: real processes forked by the trainer (as a DataLoader forks them:
    # no exec, the trainer's own command line), burning CPU; found as its workers (docs/workload-identity.md)
    trainer = subprocess.Popen([sys.executable, "-c", forking_trainer(2, burn=True), marker], start_new_session=True)
    try:
        # other disk traffic on this machine is not the test's to control: disk_io must not read it
        cfg = config(tmp_path, "collectors:\n  disk:\n    enabled: false\n")
        agent = agent_factory("--config.file", str(cfg), "--simulate", str(gpu_scenario))
        w = wait_primary(agent, "cpu")
        assert "DataLoader workers used" in w["evidence"]["cpu"]
        assert w["scores"]["cpu"] >= 0.5
        for unrelated in ("shared_memory", "disk_io", "gpu_memory", "gpu_thermal", "gpu_power", "pcie", "network"):
            assert w["scores"][unrelated] < 0.5, (unrelated, w["scores"])
    finally:
        os.killpg(trainer.pid, signal.SIGKILL)  # the trainer and its workers
        trainer.wait()


def test_a_real_tmpfs_filled_to_its_limit_with_dataloader_workers_is_shared_memory(tmp_path, gpu_scenario,
                                                                                    agent_factory):
    shm = tmp_path / "shm"
    shm.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(shm)], check=True)
    marker = f"headroom-test-trainer-{os.getpid()}"
    # a sleeping trainer with two forked DataLoader workers (they would pass batches through the tmpfs)
    trainer = subprocess.Popen([sys.executable, "-c", forking_trainer(2, burn=False), marker], start_new_session=True)
    # neighbours saturating the host's CPUs (as other test runs on a CI host do): the sleeping trainer uses none of
    # it, so the host-wide CPU is not its bottleneck and cannot tie with the full tmpfs (issue 12, classes 1 and 6)
    neighbours = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(os.cpu_count() or 1)]
    try:
        cfg = config(tmp_path, f"collectors:\n  shm:\n    mountpoints: [{shm}]\n")
        agent = agent_factory("--config.file", str(cfg), "--simulate", str(gpu_scenario))
        assert primary(agent)[0] != "shared_memory"
        # fill it like DataLoader workers passing batches: until the kernel says no space left
        with open(shm / "batch", "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError as exc:
                assert exc.errno == 28  # ENOSPC, what the workers would hit
        w = wait_primary(agent, "shared_memory")
        assert f"{shm} 100 % full" in w["evidence"]["shared_memory"]
        assert "DataLoader workers" in w["evidence"]["shared_memory"]
        assert w["headroom"]["shared_memory_bytes"] == 0
        assert w["scores"]["cpu"] < 0.5, w["evidence"]["cpu"]
    finally:
        for n in neighbours:
            n.kill()
            n.wait()
        os.killpg(trainer.pid, signal.SIGKILL)  # the trainer and its workers
        trainer.wait()
        subprocess.run(["umount", str(shm)], check=False)

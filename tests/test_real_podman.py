"""An automatic container workload from a real rootful Podman container (tests/real_podman.py), issue 25.

A busybox container runs 3 processes (its PID 1 `sleep`, a second `sleep` and a shell running `yes`, which
burns a core). The agent runs as a user runs it, `headroom run --simulate SCENARIO --workloads.auto
containers`, the scenario listing the container's PID 1 on a simulated GPU with `attach:`
(docs/scenario-format.md): it must name the workload from Podman's on-disk state (the container's name, not its
ID), count all 3 processes, measure them as /proc does and read the container's cgroup (CPU, memory) as the
kernel's files say. About 15 s here, 35 to 50 s when the figures it waits for never come (docs/testing.md,
"Real components").
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import http_get
from real_components import (
    INTERVAL,
    cgroup_cpu_seconds,
    cgroup_memory_bytes,
    cgroup_mismatches,
    member_figures,
    member_mismatches,
    metric_samples,
    metric_value,
    proc_figures,
    wait_for,
)
from real_podman import container, podman_image

CORES = 1.1  # what the container burns at most: `yes` on one core, plus the sleepers' crumbs
GONE_SECONDS = 2.0
COMMAND = "sleep 1000 & yes > /dev/null & exec sleep 1001"  # PID 1 becomes `sleep 1001`


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> str:
    with podman_image(tmp_path_factory.mktemp("podman")) as ref:
        yield ref


def metrics(agent) -> str:
    return http_get(agent.url + "/metrics")[2].decode()


def identity_of(agent, name: str) -> dict | None:
    doc = json.loads(http_get(agent.url + "/api/v1/status")[2])
    return next((w for w in (doc.get("identity") or {}).get("workloads", []) if w["name"] == name), None)


def cgroup_files(ctr) -> tuple[float | None, int | None]:
    """The container cgroup's CPU seconds and memory as the kernel's files say: v2 where the unified hierarchy has
    them (cpu.stat always, memory.current only with the memory controller there), else v1 cpuacct and memory."""
    return (cgroup_cpu_seconds(ctr.cgroup_file("unified", "cpu.stat"), ctr.cgroup_file("cpuacct", "cpuacct.stat")),
            cgroup_memory_bytes(ctr.cgroup_file("unified", "memory.current"),
                                ctr.cgroup_file("memory", "memory.usage_in_bytes")))


def test_a_podman_container_is_named_from_its_state_with_all_its_processes_and_its_cgroup(image, tmp_path,
                                                                                       agent_factory):
    name = f"headroom-test-{os.getpid()}"
    with container(image, name, COMMAND) as ctr:
        wait_for("the container's 3 processes", lambda: len(proc_figures(ctr.pids()).pids) == 3)
        members = proc_figures(ctr.pids()).pids
        (tmp_path / "ctr.pid").write_text(f"{ctr.pid}\n")
        scenario = tmp_path / "host.yaml"
        scenario.write_text(f"""\
description: a host with one GPU; a Podman container's PID 1 on it
gpus:
  - {{name: NVIDIA L4, memory_total: 24GiB, power_limit: 72, utilization: 0.5, memory_used: 2GiB}}
attach:
  - {{pid_file: "{tmp_path}/ctr.pid", gpu: 0, memory: 2GiB, utilization: 0.5}}
""")
        cfg = tmp_path / "config.yaml"
        cfg.write_text("agent:\n  sample_interval: 250ms\n")
        agent = agent_factory("--config.file", str(cfg), "--simulate", str(scenario), "--workloads.auto", "containers")

        ident = wait_for(f"{name} among the identities (named from Podman's containers.json)",
                         lambda: identity_of(agent, name))
        assert ident["kind"] == "container", ident
        assert metric_value(metrics(agent), "headroom_workload_info", workload=name, kind="container",
                            source="auto") == 1

        deadline = time.monotonic() + 20
        checked, bad = 0, []
        while checked < 3:
            before, (cg_cpu_before, _) = proc_figures(ctr.pids()), cgroup_files(ctr)
            text = metrics(agent)
            after, (cg_cpu_after, cg_memory) = proc_figures(ctr.pids()), cgroup_files(ctr)
            assert before.pids == after.pids == members
            got = member_figures(text, name)
            if None in got.values() and time.monotonic() < deadline:
                time.sleep(INTERVAL)
                continue
            # all 3 processes (its cgroup.procs lists them) and their figures, as /proc says; its cgroup's figures
            bad += [f"check {checked + 1}: {m}" for m in member_mismatches(got, before, after, CORES)
                    + cgroup_mismatches(text, name, cg_cpu_before, cg_cpu_after, cg_memory, CORES)]
            checked += 1
            time.sleep(2 * INTERVAL)
        assert not bad, f"{name} against /proc and its cgroup:\n" + "\n".join(bad)
    ended = time.monotonic()  # `podman rm -f -t 0` returned: its processes are gone
    wait_for(f"{name} gone from /metrics", lambda: not any(
        lab.get("workload") == name for lab, _ in metric_samples(metrics(agent), "headroom_workload_info")),
        timeout=10, every=0.05)
    assert time.monotonic() - ended <= GONE_SECONDS
    assert not Path(f"/proc/{ctr.pid}").exists()

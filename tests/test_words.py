"""Numbers and words (issue 29, item 5): what a count counts, sizes in a unit that fits them, means called means,
one spelling of degrees, verbs that agree, the started event's workloads, and a health that says "degraded" while
the GPU library is down. The page's own words are checked in the real browser too (tests/test_landing_browser.py)."""

from __future__ import annotations

import json

import pytest

from headroom.analysis.bottleneck import gib

# private: one card or line of the landing page; status()/page() need a whole agent's state (server.health, the window)
from headroom.exposition.landing import _fmt_gib
from headroom.units import GIB, format_size

from conftest import http_get
from situations import SERVER, Gpu, Host, analyse, build_window

MIB = 2**20


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"), (512, "512 B"), (1536, "1.50 KiB"), (64 * MIB, "64.0 MiB"), (int(0.1 * GIB), "102 MiB"),
    (int(1.5 * GIB), "1.50 GiB"), (80 * GIB, "80.0 GiB"), (123 * GIB, "123 GiB"), (1023.9 * MIB, "1.00 GiB"),
    (2 * 2**40, "2.00 TiB"), (-3 * MIB, "-3.00 MiB"), (None, "?"), (float("nan"), "an unknown number of bytes"),
])
def test_format_size_chooses_the_unit_by_the_size(n, text):
    assert format_size(n) == text


def test_evidence_and_page_sizes_never_read_zero_gib_of_a_small_mount():
    """Before: '/dev/shm 99 % full (0.0 GiB left of 0.1 GiB)'."""
    assert gib(1 * MIB) == "1.00 MiB" and gib(int(0.1 * GIB)) == "102 MiB"
    assert _fmt_gib(int(0.1 * GIB)) == "102 MiB" and _fmt_gib(None) == "-"


def test_the_shared_memory_evidence_of_docker_s_64_mib_default_says_mib():
    from headroom.config import load_config
    from headroom.simulation.runner import running

    from conftest import ROOT

    with running("bottleneck-shared_memory", load_config(ROOT / "config.yaml")) as run:
        for _ in range(8):
            snap = run.tick()
    (wf,) = snap.findings.workload_findings
    text = wf.verdict.evidence["shared_memory"]
    assert "KiB left of 64.0 MiB" in text and "GiB" not in text, text


def test_a_single_waiting_gpu_waits_and_several_wait():
    config = SERVER.replace("gpus: [0]", "gpus: [0, 1]")
    capped = Gpu(util=0.97, power=699, power_limit=700, reasons=("sw_power_cap",), sm_clock_ratio=0.7)
    (wf,) = analyse(config, build_window(Host(), [capped, Gpu(util=0.6)], seconds=20)).workload_findings
    assert "GPU 0 is the straggler: GPU 1 (busy 60 %) waits for it in every collective" in \
        wf.verdict.evidence["gpu_power"]
    three = SERVER.replace("gpus: [0]", "gpus: [0, 1, 2]")
    (wf,) = analyse(three, build_window(Host(), [capped, Gpu(util=0.6), Gpu(util=0.6)], seconds=20)).workload_findings
    assert "GPUs 1, 2 (busy 60 %) wait for it in every collective" in wf.verdict.evidence["gpu_power"]


NO_DRIVER = """\
gpus:
  - {name: NVIDIA L4, memory_total: 23034MiB, power_limit: 72}
faults:
  - {call: nvmlInit, error: DRIVER_NOT_LOADED}
"""


def test_health_says_degraded_in_the_status_too_and_started_names_the_workloads(tmp_path, agent_factory):
    """Before: /healthz said 'ok; degraded: nvml: ...' while /api/v1/status and the page said 'health: ok'; and
    every demo logged `workloads=[]` in its started event (the scenario's profiles were left out)."""
    scenario = tmp_path / "no-driver.yaml"
    scenario.write_text(NO_DRIVER)
    agent = agent_factory("--simulate", str(scenario))
    body = http_get(agent.url + "/healthz")[2].decode()
    doc = json.loads(http_get(agent.url + "/api/v1/status")[2])
    assert body.startswith("ok; degraded: nvml: ") and doc["health"] == body.strip()
    assert doc["healthy"] is True and doc["degraded"][0].startswith("nvml: ")
    page = http_get(agent.url + "/")[2].decode()
    assert "health: <b>ok; degraded: nvml: " in page
    _code, err = agent.stop()
    started = next(json.loads(x) for x in err.splitlines() if x.startswith("{") and '"started"' in x)
    assert "workloads" not in started and "auto_workload_found" in started["workloads_note"]
    demo = agent_factory("--simulate", "demo")
    _code, err = demo.stop()
    started = next(json.loads(x) for x in err.splitlines() if x.startswith("{") and '"started"' in x)
    assert started["workloads"] == ["chat"]

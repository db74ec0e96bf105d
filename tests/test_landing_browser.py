"""The landing page in a real headless browser (Debian chromium): it renders, names the simulated
bottleneck, draws its charts inline, and a screenshot is written to artifacts/landing.png."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

from conftest import ROOT, http_get

SCENARIO = """\
description: a GPU held down by its power cap, serving a declared workload
gpus:
  - name: NVIDIA H100 80GB HBM3
    memory_total: 80GiB
    power_limit: 700
    sm_clock_max: 1980MHz
    memory_clock_max: 2619MHz
    memory_used: 60GiB
    utilization: {sine: {min: 0.9, max: 0.98, period: 20s}}
    power: 699
    sm_clock: 1400MHz
    clock_events: {sw_power_cap: true}
"""
CONFIG = """\
agent:
  sample_interval: 250ms
analysis:
  short_window: 3s
  hold: 500ms
workloads:
  - name: chat
    kind: inference
    params: 8B
    precision: bf16
    architecture: {layers: 32, heads: 32, kv_heads: 8, head_dim: 128}
    context: {max: 8192}
    concurrency: 8
    gpus: [0]
"""
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]


def test_landing_page_in_chromium(tmp_path, agent_factory):
    chromium = shutil.which("chromium")
    assert chromium, "chromium missing: `make test` installs Debian's chromium package"
    (tmp_path / "s.yaml").write_text(SCENARIO)
    (tmp_path / "c.yaml").write_text(CONFIG)
    agent = agent_factory("--config.file", str(tmp_path / "c.yaml"), "--simulate", str(tmp_path / "s.yaml"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        doc = json.loads(http_get(agent.url + "/api/v1/status")[2])
        if doc["workloads"] and doc["workloads"][0]["primary_bottleneck"] == "gpu_power":
            break
        time.sleep(0.25)
    time.sleep(2)  # a few more samples for the charts
    flags = [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([chromium, *flags, "--dump-dom", agent.url + "/"], capture_output=True, text=True,
                         timeout=60).stdout
    assert "<h1>headroom</h1>" in dom
    assert 'data-bottleneck="gpu_power"' in dom, dom[:3000]
    assert "power cap active" in dom  # the evidence, in words with numbers
    assert "more sequences at max context" in dom  # headroom figures
    assert dom.count("<polyline") >= 3  # utilization, memory and power charts, inline SVG
    assert "http://" not in dom.replace(agent.url, "").split("</style>")[0]  # no external assets
    artifacts = ROOT / "artifacts"
    artifacts.mkdir(exist_ok=True)
    shot = artifacts / "landing.png"
    shot.unlink(missing_ok=True)
    subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1200,1400", agent.url + "/"],
                   capture_output=True, timeout=60)
    assert shot.exists() and shot.stat().st_size > 10_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

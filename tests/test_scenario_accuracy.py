"""Every built-in bottleneck scenario is classified as what it demonstrates, through `headroom run`.

Each scenario runs as a user would run it (`headroom run --simulate bottleneck-<resource>`), with a
configuration that only speeds the analysis up (250 ms samples, 4 s short window, 1 s hold) so the
whole table takes about a minute; the scenario's own workload profile is checked, and `healthy` must
stay `none`. The table (expected, classified, time to detection) is written to
artifacts/accuracy.md; docs/analysis.md carries the per-class table measured with the default settings, in
process on a manual clock (`make accuracy`, pinned by tests/test_simulation_machine.py).
"""

from __future__ import annotations

import json
import time

import pytest

from headroom.analysis.bottleneck import RESOURCES
from headroom.simulation import load_scenario

from conftest import ROOT, http_get

FAST = """\
agent:
  sample_interval: 250ms
analysis:
  short_window: 4s
  long_window: 20s
  hold: 1s
"""
# kv_cache is demonstrated by the serving scenarios (a stand-in vLLM serving /metrics), not a bottleneck-* file
SERVING_SCENARIOS = [("serving-kv-bound", "kv_cache"), ("serving-queue-compute-bound", "gpu_compute"),
                     ("serving-idle", "none")]
SCENARIOS = ([(f"bottleneck-{r}", r) for r in RESOURCES if r != "kv_cache"] + [("healthy", "none")]
             + SERVING_SCENARIOS)
RESULTS: dict[str, tuple[str, str, float | None]] = {}


def classify(agent, workload: str, expected: str, timeout: float, settle: float) -> tuple[str, float | None]:
    """(primary at the end, seconds until the primary first equalled ``expected``)."""
    start = time.monotonic()
    detected = None
    primary = "?"
    while time.monotonic() - start < timeout:
        doc = json.loads(http_get(agent.url + "/api/v1/status")[2])
        w = next((w for w in doc["workloads"] if w["name"] == workload), None)
        if w is not None:
            primary = w["primary_bottleneck"]
            if primary == expected and detected is None:
                detected = time.monotonic() - start
            if detected is not None and time.monotonic() - start >= detected + settle:
                break
        time.sleep(0.25)
    return primary, detected


@pytest.mark.parametrize(("scenario", "expected"), SCENARIOS, ids=[s for s, _ in SCENARIOS])
def test_builtin_scenario_is_classified(scenario, expected, tmp_path, agent_factory):
    cfg = tmp_path / "fast.yaml"
    cfg.write_text(FAST)
    workload = load_scenario(scenario).profiles[0]["name"]
    agent = agent_factory("--config.file", str(cfg), "--simulate", scenario)
    # healthy must stay none for a while; the others must be detected and stay detected
    primary, detected = classify(agent, workload, expected, timeout=30 if expected != "none" else 8,
                                 settle=2.0 if expected != "none" else 8)
    RESULTS[scenario] = (expected, primary, detected)
    doc = json.loads(http_get(agent.url + "/api/v1/status")[2])
    w = next(w for w in doc["workloads"] if w["name"] == workload)
    assert primary == expected, json.dumps(w, indent=1)[:4000]
    if expected != "none":
        assert w["evidence"][expected]
    if scenario == "serving-idle":  # none because the runtime says nobody asks, not by default
        assert "idle for lack of demand" in w["evidence"]["none"], json.dumps(w, indent=1)[:4000]


@pytest.fixture(scope="module", autouse=True)
def accuracy_table():
    """After the module's scenarios ran: the table (expected, classified, time to detection) to artifacts/."""
    yield
    if not RESULTS:
        return
    lines = ["| scenario | expected | classified | time to detection |", "|---|---|---|---|"]
    for scenario, (expected, primary, detected) in RESULTS.items():
        t = "-" if detected is None else f"{detected:.1f} s"
        lines.append(f"| {scenario} | {expected} | {primary} | {t} |")
    out = ROOT / "artifacts"
    out.mkdir(exist_ok=True)
    (out / "accuracy.md").write_text("\n".join(lines) + "\n")

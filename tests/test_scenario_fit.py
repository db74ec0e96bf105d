"""Every built-in scenario is self-consistent: each workload it declares fits its simulated GPUs by the agent's
own memory model, unless the scenario says it means it not to (``fits: {profile: false}``,
docs/scenario-format.md); the workloads the agent sizes on its own (a recognised launcher) fit as well.

The estimate is the one the running agent makes (the scenario runs in process, headroom.simulation.runner,
a few ticks on a manual clock), so the GPUs, their memory and the runtime's accounting are those the page
and the status API show. Before issue 29 the `healthy` scenario's 70B model was short by 122.89 GiB per
GPU at its declared 32 sequences x 32 768 tokens (its page: -25 more sequences).
"""

from __future__ import annotations

import pytest

from headroom.config import load_config
from headroom.simulation import list_scenarios, load_scenario, parse_scenario
from headroom.simulation.scenario import ScenarioError
from headroom.units import format_bytes

from conftest import ROOT

TICKS = 3  # enough for NVML to list the stand-ins' processes and for attribution to size them


def _estimates(name: str) -> dict[str, tuple[str, object]]:
    from headroom.simulation.runner import running

    with running(load_scenario(name), load_config(ROOT / "config.yaml")) as run:
        for _ in range(TICKS):
            snap = run.tick()
    return {s.name: (s.source, s.estimate) for s in snap.findings.workloads}


@pytest.mark.parametrize("name", list_scenarios())
def test_every_builtin_workload_fits_its_gpus_as_the_scenario_intends(name):
    scenario = load_scenario(name)
    declared = {p["name"] for p in scenario.profiles or ()}
    estimates = _estimates(name)
    assert declared <= set(estimates), f"{name}: declared {sorted(declared)}, sized {sorted(estimates)}"
    wrong = []
    for workload, (source, est) in sorted(estimates.items()):
        if est is None or est.fits is None:
            wrong.append(f"{workload}: not sized")
            continue
        intended = scenario.fits.get(workload, True) if source == "declared" else True
        if est.fits != intended:
            margin = (f"{format_bytes(-est.margin_bytes)} short" if est.margin_bytes < 0
                      else f"{format_bytes(est.margin_bytes)} to spare")
            wrong.append(f"{workload} ({source}): fits {est.fits}, the scenario intends {intended}: {margin} per GPU "
                         f"of {format_bytes(est.budget_bytes)} at {est.concurrency} x {est.context} tokens "
                         f"(largest at that context: {est.max_concurrency_at_max_context})")
    assert not wrong, f"{name}: " + "; ".join(wrong)
    # a stand-in no profile claims is named as the agent names what it finds on its own (issue 29: the demo's log
    # said `summarizer`, its page `vllm/Qwen3-0.6B:8001`)
    unprofiled = {w.name for w in scenario.workloads} - declared
    assert unprofiled <= {w for w, (source, _) in estimates.items() if source == "auto"}, unprofiled


def test_a_scenario_that_means_a_workload_not_to_fit_says_why_in_its_description():
    """Every `fits: false` is a demonstration, and the scenario's description says so (the user reads it)."""
    for name in list_scenarios():
        scenario = load_scenario(name)
        for workload, fits in scenario.fits.items():
            assert fits is False, f"{name}: fits.{workload}: true is the default, leave it out"
            assert "fit" in scenario.description, f"{name}: fits.{workload} false, the description does not say so"


GPU = """\
gpus:
  - {name: NVIDIA H100 80GB HBM3, memory_total: 80GiB, power_limit: 700}
profiles:
  - {name: llm, kind: inference, params: 8B, precision: bf16, gpus: [0], match: {cmdline: vllm}}
"""


def test_fits_names_a_profile_and_takes_a_boolean():
    assert parse_scenario(GPU + "fits: {llm: false}\n").fits == {"llm": False}
    assert parse_scenario(GPU).fits == {}
    with pytest.raises(ScenarioError, match=r"fits\.chat: not a profile of this scenario"):
        parse_scenario(GPU + "fits: {chat: false}\n")
    with pytest.raises(ScenarioError, match=r"fits\.llm: expected true or false"):
        parse_scenario(GPU + "fits: {llm: maybe}\n")


def test_the_scenario_format_lists_every_builtin_scenario():
    """docs/scenario-format.md, "Every built-in scenario": one row per file of simulation/scenarios/, no more."""
    import re

    text = (ROOT / "docs" / "scenario-format.md").read_text()
    section = text.split("### Every built-in scenario", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `([a-z0-9_.-]+)` \|", section, re.M)
    assert sorted(listed) == list_scenarios()
    assert len(listed) == len(set(listed))

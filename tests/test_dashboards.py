"""The Grafana dashboards in grafana/dashboards/ and their provisioning: what file provisioning needs (fixed
uid, a datasource variable, no __inputs), what a newcomer needs (units, descriptions), the variables that
apply, catalogue names only, and the committed JSON equal to what grafana/generate.py writes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_rules import recording_names, unknown_names

ROOT = Path(__file__).resolve().parent.parent
DASHBOARDS = ROOT / "grafana" / "dashboards"
FILES = sorted(DASHBOARDS.glob("*.json"))
EXPECTED_VARIABLES = {
    "fleet.json": ["datasource", "instance"],
    "host.json": ["datasource", "instance", "gpu"],
    "workload.json": ["datasource", "instance", "workload"],
}


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def panels(dash: dict) -> list[dict]:
    """Every panel that shows data (rows excluded, nested row panels included)."""
    out = []
    for p in dash["panels"]:
        if p["type"] == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def queries(dash: dict) -> list[str]:
    """Every PromQL text of the dashboard: panel targets and query variables."""
    exprs = [t["expr"] for p in panels(dash) for t in p["targets"]]
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            exprs.append(v["query"]["query"] if isinstance(v["query"], dict) else v["query"])
    return exprs


def test_the_three_dashboards_exist():
    assert [p.name for p in FILES] == sorted(EXPECTED_VARIABLES)


def test_committed_dashboards_equal_the_generator_output():
    r = subprocess.run([sys.executable, str(ROOT / "grafana" / "generate.py"), "--check"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_dashboard_is_ready_for_file_provisioning(path):
    text = path.read_text()
    dash = json.loads(text)
    assert "__inputs" not in dash and "${DS_" not in text, "file provisioning cannot resolve __inputs"
    assert re.fullmatch(r"headroom-[a-z]+", dash["uid"])
    assert "headroom" in dash["tags"] and len(dash["tags"]) >= 2
    assert 36 <= dash["schemaVersion"] <= 41
    assert dash["title"].startswith("Headroom / ") and dash["description"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_uids_differ_between_dashboards():
    uids = [load(p)["uid"] for p in FILES]
    assert len(uids) == len(set(uids))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_dashboard_has_the_variables_that_apply(path):
    variables = load(path)["templating"]["list"]
    assert [v["name"] for v in variables] == EXPECTED_VARIABLES[path.name]
    ds = variables[0]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    for v in variables[1:]:
        assert v["type"] == "query" and v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_panel_has_a_unit_a_description_and_the_datasource_variable(path):
    bad = []
    for p in panels(load(path)):
        if not p["fieldConfig"]["defaults"].get("unit"):
            bad.append(f"{p['title']}: no unit")
        if len(p.get("description", "")) < 30:
            bad.append(f"{p['title']}: description missing or too short for a newcomer")
        if p["datasource"] != {"type": "prometheus", "uid": "${datasource}"}:
            bad.append(f"{p['title']}: datasource is not the variable")
        if not p["targets"] or any(t["datasource"]["uid"] != "${datasource}" for t in p["targets"]):
            bad.append(f"{p['title']}: targets missing or not on the variable")
    assert not bad


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_panels_filter_by_the_dashboard_variables(path):
    names = EXPECTED_VARIABLES[path.name]
    bad = [p["title"] for p in panels(load(path)) for t in p["targets"]
           if "instance" in names and "$instance" not in t["expr"]]
    assert not bad, f"panels that ignore the instance variable: {bad}"


def test_host_dashboard_shows_clock_event_reasons_and_bottlenecks_as_state_timelines():
    by_title = {p["title"]: p for p in panels(load(DASHBOARDS / "host.json"))}
    assert by_title["Clock-event reasons"]["type"] == "state-timeline"
    assert "headroom_gpu_clock_event_active" in by_title["Clock-event reasons"]["targets"][0]["expr"]
    assert by_title["Primary bottleneck per GPU"]["type"] == "state-timeline"


def test_workload_dashboard_shows_the_bottleneck_as_a_state_timeline():
    by_title = {p["title"]: p for p in panels(load(DASHBOARDS / "workload.json"))}
    assert by_title["Primary bottleneck"]["type"] == "state-timeline"
    assert "headroom_workload_bottleneck{" in by_title["Primary bottleneck"]["targets"][0]["expr"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_metric_in_the_dashboard_is_catalogued_or_recorded(path):
    recorded = recording_names()
    bad = {e: unknown_names(e, recorded) for e in queries(load(path))}
    assert not {k: v for k, v in bad.items() if v}


def test_provisioning_files_use_api_version_1_and_file_providers():
    prov = yaml.safe_load((ROOT / "grafana" / "provisioning" / "dashboards" / "headroom.yml").read_text())
    assert prov["apiVersion"] == 1
    assert [p["type"] for p in prov["providers"]] == ["file"]
    assert prov["providers"][0]["options"]["path"]
    ds = yaml.safe_load((ROOT / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert ds["apiVersion"] == 1 and ds["datasources"][0]["type"] == "prometheus"

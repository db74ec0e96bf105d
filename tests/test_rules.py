"""The Prometheus rules in grafana/rules/: promtool accepts and tests them, every alert has a firing and a
non-firing unit test, names and annotations follow the conventions, runbook links land on a section of
docs/runbook.md, and every metric they use is in the catalogue."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from headroom.exposition.catalog import BY_NAME

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "grafana" / "rules"
RULE_FILES = sorted(RULES.glob("*.yml"))
TEST_FILES = sorted((RULES / "tests").glob("*.yml"))
RUNBOOK = ROOT / "docs" / "runbook.md"
RUNBOOK_BASE = "https://github.com/headroom-agent/headroom/blob/main/docs/runbook.md#"
RECORDING_NAME = re.compile(r"^[a-z][a-z0-9_]*:[a-z][a-z0-9_]*:[a-z0-9_]+$")
ALERT_NAME = re.compile(r"^Headroom(?:[A-Z][a-z0-9]*)+$")
# identifiers in PromQL: metric names (may hold colons: recording rules), label names, functions, keywords
_TOKEN = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_RANGE = re.compile(r"\[[0-9a-z:]+\]")  # [5m], and subquery ranges [1d:5m], whose colon is no rule name


def rules() -> list[dict]:
    """Every rule (recording and alerting) of every rule file."""
    out = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            out.extend(group["rules"])
    return out


def alerts() -> dict[str, dict]:
    """Alert name -> its rule."""
    return {r["alert"]: r for r in rules() if "alert" in r}


def recording_names() -> set[str]:
    """Names of the recording rules."""
    return {r["record"] for r in rules() if "record" in r}


def unknown_names(expr: str, recorded: set[str]) -> list[str]:
    """Names in a PromQL expression that are neither catalogue metrics nor recording rules.

    Crude on purpose: string literals are dropped, then every identifier that starts with `headroom_`
    must be a catalogue name and every identifier with a colon must be a recording rule.
    """
    bad = []
    for token in _TOKEN.findall(_RANGE.sub("", _STRING.sub('""', expr))):
        if ":" in token:
            if token not in recorded:
                bad.append(token)
        elif token.startswith("headroom_") and token not in BY_NAME:
            bad.append(token)
    return bad


def runbook_anchors() -> set[str]:
    """GitHub anchors of every heading in docs/runbook.md."""
    anchors = set()
    for line in RUNBOOK.read_text().splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


@pytest.mark.parametrize(("expr", "recorded", "expected"), [
    ("rate(headroom_gpu_busy_seconds_total[5m])", set(), []),
    ("rate(headroom_gpu_busy_secondz_total[5m])", set(), ["headroom_gpu_busy_secondz_total"]),
    ("instance_gpu:headroom_gpu_busy:rate5m > 0", {"instance_gpu:headroom_gpu_busy:rate5m"}, []),
    ("instance_gpu:headroom_gpu_bussy:rate5m > 0", {"instance_gpu:headroom_gpu_busy:rate5m"},
     ["instance_gpu:headroom_gpu_bussy:rate5m"]),
    ('up{job=~"headroom_not_a_metric"} == 0', set(), []),
    ('sum by (mode) (headroom_cpu_seconds_total{mode!~"idle"}) / headroom_cpu_logical_cpus', set(), []),
], ids=["catalogue counter", "misspelt counter", "recording rule", "misspelt recording rule",
        "name inside a label string", "labels and functions"])
def test_name_check_tells_catalogue_names_from_unknown_ones(expr, recorded, expected):
    assert unknown_names(expr, recorded) == expected


def test_there_are_rule_files_and_unit_test_files():
    assert [p.name for p in RULE_FILES] == ["headroom-alerts.yml", "headroom-recording.yml"]
    assert TEST_FILES, "no promtool unit tests in grafana/rules/tests/"


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_promtool_check_rules_accepts_the_file(path):
    assert shutil.which("promtool"), "promtool missing: `make test` installs Debian's prometheus package"
    r = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(path):
    assert shutil.which("promtool"), "promtool missing: `make test` installs Debian's prometheus package"
    r = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=120,
                       cwd=path.parent)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_has_a_firing_and_a_non_firing_unit_test():
    firing, quiet = set(), set()
    for path in TEST_FILES:
        for case in yaml.safe_load(path.read_text()).get("tests", []):
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = set(alerts())
    assert not names - firing, f"alerts without a firing test case: {sorted(names - firing)}"
    assert not names - quiet, f"alerts without a non-firing test case: {sorted(names - quiet)}"
    assert not (firing | quiet) - names, f"tests of alerts that do not exist: {sorted((firing | quiet) - names)}"


def test_every_recording_rule_has_a_unit_test():
    tested = set()
    for path in TEST_FILES:
        for case in yaml.safe_load(path.read_text()).get("tests", []):
            tested |= {check["expr"].split("{")[0] for check in case.get("promql_expr_test", [])}
    assert not recording_names() - tested, f"recording rules without a test: {sorted(recording_names() - tested)}"


def test_recording_rules_are_named_level_metric_operations():
    bad = [n for n in recording_names() if not RECORDING_NAME.match(n) or ":headroom_" not in n]
    assert not bad


@pytest.mark.parametrize("name", sorted(alerts()))
def test_alert_follows_the_conventions(name):
    rule = alerts()[name]
    assert ALERT_NAME.match(name), "alert names are CamelCase with the Headroom prefix"
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    assert {"summary", "description", "runbook_url", "remedy"} <= set(rule["annotations"])
    url = rule["annotations"]["runbook_url"]
    assert url.startswith(RUNBOOK_BASE), url
    anchor = url.removeprefix(RUNBOOK_BASE)
    assert anchor == name.lower(), "the runbook anchor is the alert name in lower case"
    assert anchor in runbook_anchors(), f"docs/runbook.md has no section '## {name}'"


def test_every_metric_in_the_rules_is_catalogued_or_recorded():
    recorded = recording_names()
    bad = {r.get("alert") or r["record"]: unknown_names(r["expr"], recorded) for r in rules()}
    assert not {k: v for k, v in bad.items() if v}


def test_runbook_has_no_section_for_an_alert_that_does_not_exist():
    sections = {a for a in runbook_anchors() if a.startswith("headroom")}
    assert sections == {n.lower() for n in alerts()}

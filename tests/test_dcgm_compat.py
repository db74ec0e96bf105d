"""The optional dcgm-exporter compatibility rules (grafana/rules/compat/) and the migration guide
(docs/migrating-from-dcgm-exporter.md): promtool accepts and tests the rules, they use catalogue names only,
and the guide maps every counter dcgm-exporter enables by default. The queries of the popular Grafana DCGM
dashboard run against the rules on a real Prometheus in test_prometheus_integration.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from test_rules import unknown_names

ROOT = Path(__file__).resolve().parent.parent
COMPAT = ROOT / "grafana" / "rules" / "compat"
COMPAT_RULE_FILES = sorted(COMPAT.glob("*.yml"))
COMPAT_TEST_FILES = sorted((COMPAT / "tests").glob("*.yml"))
GUIDE = ROOT / "docs" / "migrating-from-dcgm-exporter.md"
# the counters NVIDIA/dcgm-exporter enables in etc/default-counters.csv (uncommented lines, as of d5e5f51)
DCGM_DEFAULT_COUNTERS = (
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DRIVER_VERSION", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
)
LABELS_HELPER = "instance_gpu:dcgm_exporter_labels:info"


def compat_rules() -> list[dict]:
    """Every rule of the compatibility rule files."""
    return [r for path in COMPAT_RULE_FILES for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]


def guide_rows() -> dict[str, list[str]]:
    """dcgm-exporter name -> the cells of its row in the guide's counter table."""
    rows = {}
    for line in GUIDE.read_text().splitlines():
        m = re.match(r"^\| `(DCGM_[A-Z0-9_]+)` \|(.*)\|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def test_there_is_one_compat_rule_file_with_its_unit_tests():
    assert [p.name for p in COMPAT_RULE_FILES] == ["dcgm-exporter-compat.yml"]
    assert COMPAT_TEST_FILES


@pytest.mark.parametrize("path", COMPAT_RULE_FILES, ids=lambda p: p.name)
def test_promtool_check_rules_accepts_the_compat_file(path):
    assert shutil.which("promtool"), "promtool missing: `make test` installs Debian's prometheus package"
    r = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("path", COMPAT_TEST_FILES, ids=lambda p: p.name)
def test_promtool_unit_tests_of_the_compat_rules_pass(path):
    assert shutil.which("promtool"), "promtool missing: `make test` installs Debian's prometheus package"
    r = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=120,
                       cwd=path.parent)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_compat_rule_has_a_unit_test():
    tested = set()
    for path in COMPAT_TEST_FILES:
        for case in yaml.safe_load(path.read_text())["tests"]:
            tested |= {re.split(r"[{\[]", check["expr"].removeprefix("rate("))[0]
                       for check in case.get("promql_expr_test", [])}
    assert {r["record"] for r in compat_rules()} <= tested


def test_compat_rules_use_catalogue_names_only():
    recorded = {r["record"] for r in compat_rules()}
    bad = {r["record"]: unknown_names(r["expr"], recorded) for r in compat_rules()}
    assert not {k: v for k, v in bad.items() if v}


def test_guide_maps_every_default_dcgm_exporter_counter():
    rows = guide_rows()
    assert set(DCGM_DEFAULT_COUNTERS) <= set(rows), sorted(set(DCGM_DEFAULT_COUNTERS) - set(rows))
    for name, cells in rows.items():
        unit, series, conversion, compat = cells
        assert unit and conversion, f"{name}: unit and conversion (or why there is none) are required"
        if series != "none":
            assert re.search(r"`headroom_[a-z_]+", series), f"{name}: name the headroom series"


def test_guide_and_rule_file_agree_on_which_counters_have_a_compat_rule():
    rows = guide_rows()
    said = {name for name, cells in rows.items() if cells[3] == "yes"}
    recorded = {r["record"] for r in compat_rules()} - {LABELS_HELPER}
    assert said == recorded
    for rule in compat_rules():
        if rule["record"] in rows:
            series = re.search(r"`(headroom_[a-z_]+)", rows[rule["record"]][1]).group(1)
            assert series in rule["expr"], f"{rule['record']}: the guide names {series}, the rule uses {rule['expr']}"

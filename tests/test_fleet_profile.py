"""The profile keys the fleet groups by (job, team) and the per-GPU price: parsed, validated, exported."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from headroom.config import ConfigError, check_config_text
from headroom.simulation.fleet import fleet
from headroom.workload.profiles import ProfileErrors, profile_from_dict

BASE = {"name": "pretrain", "kind": "training", "gpus": [0]}


def test_job_and_team_are_optional_names():
    p = profile_from_dict({**BASE, "job": "llama-pretrain", "team": "research"})
    assert (p.job, p.team) == ("llama-pretrain", "research")
    assert (profile_from_dict(BASE).job, profile_from_dict(BASE).team) == (None, None)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("job", "llama pretrain", "job: 'llama pretrain' must match"),
    ("team", 7, 'team: expected a string; got 7 (quote it: team: "7")'),
    ("team", "-research", "team: '-research' must match"),
])
def test_bad_job_or_team_says_which_and_why(key, value, message):
    with pytest.raises(ProfileErrors) as exc:
        profile_from_dict({**BASE, key: value})
    assert message in str(exc.value)


def test_the_config_loader_points_at_the_line():
    text = "workloads:\n  - name: a\n    kind: training\n    gpus: [0]\n    job: 'two words'\n"
    with pytest.raises(ConfigError) as exc:
        check_config_text(text, "c.yaml")
    assert "c.yaml:5:" in str(exc.value) and "job" in str(exc.value)


def _snapshot(tmp_path, host) -> str:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(host.scenario))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(host.config))
    out = subprocess.run([sys.executable, "-m", "headroom", "snapshot", "--simulate", str(tmp_path / "s.yaml"),
                          "--config.file", str(tmp_path / "c.yaml"), "--samples", "2"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_fleet_info_and_gpu_price_are_exported(tmp_path):
    host = next(h for h in fleet(12) if h.archetype == "idle-batch")
    text = _snapshot(tmp_path, host)
    assert 'headroom_workload_fleet_info{workload="batch-embed",team="vision",training_job=""} 1' in text
    prices = [line for line in text.splitlines() if line.startswith("headroom_gpu_cost_per_hour{")]
    assert len(prices) == 4 and all(line.endswith(" 1.2") for line in prices)


def test_no_price_and_no_group_no_series(tmp_path):
    host = next(h for h in fleet(12) if h.archetype == "idle-batch")
    host.scenario["profiles"][0].pop("team")
    unpriced = type(host)(host.name, host.archetype, host.scenario, {})
    text = _snapshot(tmp_path, unpriced)
    assert "headroom_workload_fleet_info{" not in text and "headroom_gpu_cost_per_hour{" not in text
    assert 'headroom_workload_info{workload="batch-embed"' in text


def test_an_eight_gpu_host_stays_within_the_series_budget(tmp_path):
    """The fast form of test_fleet.py's budget check: one 8-GPU host's exposition, no Prometheus."""
    from test_fleet import BUDGET_HOST, BUDGET_PER_GPU, BUDGET_PER_WORKLOAD

    host = next(h for h in fleet(12) if h.archetype == "train-straggler")
    text = _snapshot(tmp_path, host)
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    budget = BUDGET_HOST + BUDGET_PER_GPU * host.gpus + BUDGET_PER_WORKLOAD * len(host.scenario["profiles"])
    assert 700 < len(series) <= budget  # 915 measured (903 before issues 26 and 30)

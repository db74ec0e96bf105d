"""The long-term store: `make fleet`'s Prometheus remote-writes (deploy/prometheus/remote-write.yml's
`victoria-metrics` entry, its write_relabel_configs included) to a real VictoriaMetrics single node (Debian's
package, installed by tests/install-system-deps.sh), the stand-in for the Thanos/Mimir/VictoriaMetrics clusters
fleets keep their history in. Six simulated hosts; at one instant, every Fleet dashboard query and
`headroom fleet-report` answer the same from VictoriaMetrics' Prometheus query API as from Prometheus.

Same means: the same series (label sets) and, for everything computed from the stored samples as they are
(gauges, recording rules, which Prometheus evaluates and ships, *_over_time, counts and sums), the same values
to float rounding (RELATIVE_EXACT). Only an increase() taken at query time differs, by design: Prometheus
extrapolates the window's first and last samples to its edges, VictoriaMetrics takes the last sample before
the window as the base and does not extrapolate (docs.victoriametrics.com/MetricsQL.html, "increase"). Both are
estimates of the counter's growth over the window, each off by at most the growth between two of its samples
at each edge; the counter itself moves in agent ticks. So they agree within the growth over one scrape interval
plus one agent tick, relative to the window: INCREASE_TOLERANCE = (2 s + 2 s) / 30 s here; with a 15 s scrape
over a 7-day report, 5e-5. About a minute on 2 cores."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time

import pytest
import yaml

from headroom.simulation.fleet import fleet as sim_fleet
from test_dashboards import DASHBOARDS, load, panels

from conftest import ROOT
from real_vllm import unavailable

sys.path.insert(0, str(ROOT))
from bench.fleet import REMOTE_WRITE_EXAMPLE, REMOTE_WRITE_NAME, VM_BINARY, VM_LATENCY_OFFSET_S, Fleet

# two training hosts (one GPU throttled: the straggler), the oversized inference host, the idle batch host, the
# CPU-starved host and the unclaimed H100s: every panel and every answer of the report has data
ARCHETYPES = ("train", "train-straggler", "serve-oversized", "idle-batch", "cpu-starved", "unclaimed")
HOSTS = [h for h in sim_fleet(9) if h.archetype in ARCHETYPES]
INTERVAL_S = 2  # scrape, rule evaluation and agent sampling
WINDOW_S = 30  # Grafana's $__range and the report's --since: older data is not needed for the comparison
RELATIVE_EXACT = 1e-9  # sums and averages of the same samples, added in another order
INCREASE_TOLERANCE = (INTERVAL_S + INTERVAL_S) / WINDOW_S  # module docstring


class ComparedFleet(Fleet):
    at = 0.0  # the instant (Unix seconds) both stores are asked about


def substitute_all(expr: str) -> str:
    """The PromQL Grafana sends with every host selected ($instance = All) over the last WINDOW_S."""
    return (expr.replace("$__rate_interval", "10s").replace("$__interval", f"{INTERVAL_S}s")
            .replace("$__range", f"{WINDOW_S}s").replace("$instance", ".*"))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    for binary in ("prometheus", VM_BINARY):
        if not shutil.which(binary):
            unavailable(f"{binary} is not installed (tests/install-system-deps.sh installs it)")
    f = ComparedFleet(len(HOSTS), tmp_path_factory.mktemp("fleet"), scrape_interval=f"{INTERVAL_S}s",
                      sample_interval=f"{INTERVAL_S}s", long_term_store=True, hosts=HOSTS)
    try:
        f.start()
        f.wait_ready(timeout=120)
        ready = time.time()
        for expr in ('count(headroom_gpu_bottleneck{resource="cpu"} == 1) >= 1',
                     'training_job_instance_gpu:headroom_gpu_relative_speed:ratio5m < 0.8',
                     'instance_team_workload:headroom_gpu_idle_cost:increase1d > 0'):
            if not f.wait_for(expr, timeout=120):
                pytest.fail(f"no data in Prometheus for {expr}")
        # the instant compared: older than the store's latency offset (a query for a later time is evaluated at
        # now - offset), with a sample of every counter before the window (so neither engine guesses where the
        # counter started) ...
        lag = VM_LATENCY_OFFSET_S + INTERVAL_S
        time.sleep(max(0.0, ready + WINDOW_S + 2 * INTERVAL_S + lag - time.time()))
        f.at = time.time() - lag
        # ... and everything Prometheus had then has reached the store
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            newest = [f.store_query(f"min(timestamp({name}))", f.at + 2 * INTERVAL_S)
                      for name in ("up", "instance_gpu:headroom_gpu_busy:rate5m")]
            if all(r and float(r[0]["value"][1]) > f.at for r in newest):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"VictoriaMetrics has no samples after the compared instant; log: "
                        f"{(f.workdir / 'victoria-metrics.log').read_text()[-1000:]}")
        yield f
    finally:
        f.stop()


def vector(result: list[dict]) -> dict[tuple, float]:
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in result}


def differences(expr: str, prom: list[dict], vm: list[dict]) -> list[str]:
    """Where the store's answer is not Prometheus' (empty: the same), for a message."""
    a, b = vector(prom), vector(vm)
    tolerance = INCREASE_TOLERANCE if "increase(" in expr else RELATIVE_EXACT
    if set(a) != set(b):
        # bottomk/topk pick any of equal values: the same values, possibly other series among the ties
        if re.search(r"\b(bottomk|topk)\b", expr) and sorted(a.values()) == sorted(b.values()):
            return []
        only_prom, only_vm = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        return [f"{expr}: {len(only_prom)} series only in Prometheus {[dict(k) for k in only_prom[:2]]}, "
                f"{len(only_vm)} only in VictoriaMetrics {[dict(k) for k in only_vm[:2]]}"]
    return [f"{expr} {dict(k)}: Prometheus {a[k]}, VictoriaMetrics {b[k]}" for k in a
            if a[k] != pytest.approx(b[k], rel=tolerance, abs=1e-12)]


def shipped(name: str, relabel_configs: list[dict]) -> bool:
    """Whether a series named NAME passes the remote write's keep/drop rules on __name__ (as Prometheus'
    relabelling matches: the regex anchored at both ends)."""
    for rule in relabel_configs:
        if (rule.get("source_labels") == ["__name__"] and rule["action"] in ("keep", "drop")
                and bool(re.fullmatch(rule["regex"], name)) != (rule["action"] == "keep")):
            return False
    return True


def test_the_remote_write_filter_ships_every_series_the_dashboard_and_the_report_read():
    """Without the fleet (its comparison finds a missing series too, except under `or vector(0)`, which answers 0
    from both): every metric name in a Fleet dashboard query and a fleet-report query passes the filter, and no
    rule drops a subset of their rows."""
    [entry] = [e for e in yaml.safe_load(REMOTE_WRITE_EXAMPLE.read_text())["remote_write"]
               if e["name"] == REMOTE_WRITE_NAME]
    source = "\n".join([t["expr"] for p in panels(load(DASHBOARDS / "fleet.json")) for t in p["targets"]]
                       + [(ROOT / "agent" / "headroom" / "fleet" / "report.py").read_text()])
    names = set(re.findall(r"\b(?:headroom_[a-z_]+|[a-z_]+:[a-z_]+:[a-z0-9_]+)\b(?=[{\[)\s]|$)", source))
    assert {"headroom_gpu_up", "headroom_gpu_idle_cost_total", "instance_gpu:headroom_gpu_busy:rate5m"} <= names
    assert not sorted(n for n in names if not shipped(n, entry["write_relabel_configs"]))
    assert [r for r in entry["write_relabel_configs"] if r.get("source_labels", ["__name__"]) != ["__name__"]] == []


def test_the_store_gets_what_the_remote_write_example_ships(store):
    """The fleet ships through deploy/prometheus/remote-write.yml's entry, filters included, to the store."""
    [entry] = [e for e in yaml.safe_load(REMOTE_WRITE_EXAMPLE.read_text())["remote_write"]
               if e["name"] == REMOTE_WRITE_NAME]
    assert entry["url"].endswith(":8428/api/v1/write")
    config = yaml.safe_load((store.workdir / "prometheus.yml").read_text())
    assert [(r["name"], r["write_relabel_configs"]) for r in config["remote_write"]] == [
        (REMOTE_WRITE_NAME, entry["write_relabel_configs"])]
    hosts = store.store_query('count by (instance) (up{job="headroom"} == 1)', store.at)
    assert sorted(r["metric"]["instance"] for r in hosts) == sorted(h.name for h in HOSTS)
    # the filter keeps what the dashboard and the report read, not everything: the agents' self-metrics stay local
    assert store.query("count(headroom_collector_success)")
    assert store.store_query("count(headroom_collector_success)", store.at) == []


def test_every_fleet_dashboard_query_answers_the_same_from_the_store(store):
    dashboard = load(DASHBOARDS / "fleet.json")
    wrong, empty = [], []
    for p in panels(dashboard):
        for t in p["targets"]:
            expr = substitute_all(t["expr"])
            prom = store.api("/api/v1/query", query=expr, time=f"{store.at:.3f}")["result"]
            if not prom:
                empty.append(p["title"])
            wrong += differences(expr, prom, store.store_query(expr, store.at))
    assert not empty, f"Fleet panels without data in Prometheus: {empty}"
    assert not wrong, "\n".join(wrong)


def fleet_report(url: str, at: float) -> dict:
    out = subprocess.run([sys.executable, "-m", "headroom", "fleet-report", "--prometheus", url, "--since",
                          f"{WINDOW_S}s", "--at", f"{at:.3f}", "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_fleet_report_answers_the_same_from_the_store(store):
    prom = fleet_report(store.prometheus_url, store.at)
    vm = fleet_report(store.victoria_metrics_url, store.at)
    assert (vm["hosts"], vm["gpus"]) == (prom["hosts"], prom["gpus"]) == (len(HOSTS), sum(h.gpus for h in HOSTS))
    assert vm["at"] == prom["at"] and vm["at"].endswith("Z")
    # what the report found: right-sizing, idle ratios and host-bound shares are of the same samples
    assert vm["right_sizing"] == prom["right_sizing"] and prom["right_sizing"]
    assert vm["host_bound"] == prom["host_bound"] and prom["host_bound"]
    key = ("instance", "gpu", "gpu_model", "workload", "team", "currency")
    idle_prom = {tuple(r[k] for k in key): r for r in prom["idle"]}
    idle_vm = {tuple(r[k] for k in key): r for r in vm["idle"]}
    assert set(idle_vm) == set(idle_prom) and idle_prom
    for k, r in idle_prom.items():
        assert idle_vm[k]["idle_ratio"] == pytest.approx(r["idle_ratio"], rel=RELATIVE_EXACT)
        # hours and cost split the counters' increase over --since: the one estimate the engines make apart
        assert idle_vm[k]["idle_hours"] == pytest.approx(r["idle_hours"], rel=INCREASE_TOLERANCE), k
        assert idle_vm[k]["cost"] == pytest.approx(r["cost"], rel=INCREASE_TOLERANCE), k

"""Alerts end to end: the agent runs the `showcase` scenario, a real Prometheus (as in
tests/test_prometheus_integration.py) evaluates grafana/rules/ and sends what fires to a real Alertmanager (Debian's
prometheus-alertmanager, installed by tests/install-system-deps.sh) running deploy/alertmanager/alertmanager.yml
(Prometheus sending with deploy/alertmanager/prometheus-alerting.yml's `alerting` block),
whose webhook receivers are an HTTP server in this process. A receiver must get each alert with the labels the
rule and the agent set and the annotations Prometheus rendered: summary, runbook_url, remedy (the "what to do" of
docs/runbook.md and analysis/remedies.py). Then the agent reloads its configuration (SIGHUP) with a looser latency
objective for workload chat, and the receiver must hear that the SLO alert resolved (send_resolved) while the agent
kept running and being scraped.

Only timing is changed for the test: the example's group_wait and group_interval are 1 s, and the alerts in
FOR_SHORTENED lose their `for:` (minutes of persistence a test cannot wait for); their expressions, labels and
annotations are the project's."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from headroom.analysis import remedies
from test_prometheus_integration import CONFIG, STANDIN, LoopbackServer, Prometheus, serving_runtime, wait_for
from test_rules import RULES, RUNBOOK_BASE, alerts

from conftest import ROOT, Agent, free_port
from real_components import require_commands

EXAMPLE = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
PROMETHEUS_EXAMPLE = ROOT / "deploy" / "alertmanager" / "prometheus-alerting.yml"
# severity -> the example's receiver for it
RECEIVER = {"critical": "gpu-oncall", "warning": "gpu-team", "info": "gpu-review"}
# alert -> the remedies.SUMMARY resource whose text its remedy annotation is, where it has one resource
FOR_SHORTENED = {"HeadroomGpuMemoryFillingUp": "gpu_memory", "HeadroomWorkloadSloBreached": None}
# at once in the showcase (no `for:`): GPU 1's failed row remap; it clears in the healthy scenario
AT_ONCE = "HeadroomGpuRowRemapFailure"
SHOWCASE_GPU0, SHOWCASE_GPU1 = "GPU-0a5e1c2d-1111-4c1e-9a2f-0d6b8e4c7a11", "GPU-1b6f2d3e-2222-4f8c-b5d3-2e8f1a6c9b47"
# what must never reach a receiver from a healthy agent
HEALTHY_ONLY = {"HeadroomNvmlDown", "HeadroomAgentDown", "HeadroomSamplesStale", "HeadroomConfigReloadFailed"}
TIMEOUT_S = 40  # for each notification on a loaded 2-core machine; typically a few seconds
# chat's inter-token latency objective, and the one the reload sets: its runtime reports 30 ms
SLO_MISSED, SLO_MET = "itl_p95: 10ms", "itl_p95: 100ms"


def amtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["amtool", *args], capture_output=True, text=True, timeout=60)


class Webhook:
    """An HTTP server on a free loopback port recording every Alertmanager webhook notification it receives as
    (path, decoded JSON body)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.received: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with hook.lock:
                    hook.received.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def alerts(self) -> list[tuple[str, dict]]:
        """(receiver path, alert) of every alert in every notification so far."""
        with self.lock:
            return [(path, a) for path, doc in self.received for a in doc["alerts"]]

    def wait(self, what: str, match, prom: Prometheus, since: int = 0, timeout: float = TIMEOUT_S) -> tuple[str, dict]:
        """The first (path, alert) ``match`` accepts among the notifications from the ``since``-th on, polling until
        ``timeout``; fails with what arrived and what Prometheus holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                docs = self.received[since:]
            for path, alert in ((p, a) for p, doc in docs for a in doc["alerts"]):
                if match(path, alert):
                    return path, alert
            time.sleep(0.2)
        got = sorted({(p, a["labels"]["alertname"], a["status"]) for p, a in self.alerts()})
        held = sorted((a["labels"]["alertname"], a["state"]) for a in prom.api("/api/v1/alerts")["data"]["alerts"])
        raise AssertionError(f"no notification of {what} after {timeout} s; received {got}; Prometheus: {held}")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Alertmanager(LoopbackServer):
    """A real `prometheus-alertmanager` on a free loopback port, clustering off, storing into a temporary directory."""

    name = "alertmanager"

    def __init__(self, tmp: Path, config: dict) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (tmp / "alertmanager.yml").write_text(yaml.safe_dump(config))
        self._start(["prometheus-alertmanager", f"--config.file={tmp / 'alertmanager.yml'}",
                     f"--storage.path={tmp / 'am-data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                     "--cluster.listen-address="], tmp / "alertmanager.log")

    def wait_ready(self, timeout: float = 30.0) -> None:
        super().wait_ready(timeout)


def test_amtool_accepts_the_example_config():
    require_commands("Alertmanager", "amtool")
    r = amtool("check-config", str(EXAMPLE))
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_promtool_accepts_the_prometheus_side():
    assert shutil.which("promtool"), "promtool missing: `make test` installs Debian's prometheus package"
    r = subprocess.run(["promtool", "check", "config", str(PROMETHEUS_EXAMPLE)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def prometheus_alerting(am_port: int) -> dict:
    """The example's `alerting` block, sending to the test's Alertmanager."""
    alerting = yaml.safe_load(PROMETHEUS_EXAMPLE.read_text())["alerting"]
    [am] = alerting["alertmanagers"]
    am["static_configs"] = [{"targets": [f"127.0.0.1:{am_port}"]}]
    return alerting


def test_the_example_routes_every_alert_to_the_receiver_of_its_severity():
    """amtool's own routing tree test, for every alert the rules define, with the labels the rule gives it."""
    require_commands("Alertmanager", "amtool")
    wrong = {}
    for name, rule in alerts().items():
        severity = rule["labels"]["severity"]
        r = amtool("config", "routes", "test", f"--config.file={EXAMPLE}", f"alertname={name}",
                   f"severity={severity}")
        got = r.stdout.split()
        if r.returncode != 0 or got != [RECEIVER[severity]]:
            wrong[name] = (severity, r.stdout.strip() or r.stderr.strip())
    assert not wrong, wrong


def alertmanager_config(webhook: Webhook) -> dict:
    """The example with each receiver's webhook pointed at the test server (path: the receiver's name) and the
    group timings at 1 s (group_wait, group_interval: the test waits seconds, not minutes)."""
    config = yaml.safe_load(EXAMPLE.read_text())
    for receiver in config["receivers"]:
        for hook in receiver["webhook_configs"]:
            hook["url"] = f"{webhook.url}/{receiver['name']}"
    for route in (config["route"], *config["route"].get("routes", ())):
        route["group_wait"], route["group_interval"] = "1s", "1s"
    return config


def rules_with_for_shortened(tmp: Path) -> list[Path]:
    """The project's rule files, the alerts of FOR_SHORTENED without their `for:`."""
    doc = yaml.safe_load((RULES / "headroom-alerts.yml").read_text())
    shortened = [r for g in doc["groups"] for r in g["rules"] if r.get("alert") in FOR_SHORTENED]
    assert {r["alert"] for r in shortened} == set(FOR_SHORTENED) and all("for" in r for r in shortened)
    for rule in shortened:
        del rule["for"]
    (tmp / "headroom-alerts.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return [tmp / "headroom-alerts.yml", RULES / "headroom-recording.yml"]


@pytest.fixture(scope="module")
def alerting(tmp_path_factory):
    require_commands("Alertmanager", "prometheus-alertmanager", "amtool")
    tmp = tmp_path_factory.mktemp("alertmanager")
    webhook = Webhook()
    serving_url, stop_serving = serving_runtime()
    config = CONFIG.replace("SERVING_URL", serving_url)
    assert SLO_MISSED in config
    (tmp / "config.yaml").write_text(config)
    standin = subprocess.Popen([sys.executable, *STANDIN])
    am = Alertmanager(tmp, alertmanager_config(webhook))
    agent = Agent("--simulate", "showcase", "--sample.interval", "200ms", "--config.file", str(tmp / "config.yaml"),
                  "--log.level", "warn")
    prom = None
    try:
        am.wait_ready()
        agent.wait_ready()
        target = f"127.0.0.1:{agent.port}"
        # a 2 s scrape timeout: a scrape that times out on a loaded machine marks every series stale, which
        # resolves every alert for one evaluation
        prom = Prometheus(tmp, target, config={
            "global": {"scrape_interval": "2s", "evaluation_interval": "1s", "scrape_timeout": "2s"},
            "rule_files": [str(p) for p in rules_with_for_shortened(tmp)],
            "scrape_configs": [{"job_name": "headroom", "static_configs": [{"targets": [target]}]}],
            "alerting": prometheus_alerting(am.port),
        })
        prom.wait_ready()

        def meet_the_objective() -> None:
            """Reload the agent (SIGHUP) with an objective chat's latency meets."""
            (tmp / "config.yaml").write_text(config.replace(SLO_MISSED, SLO_MET))
            agent.proc.send_signal(signal.SIGHUP)

        yield webhook, prom, target, meet_the_objective
    finally:
        if prom is not None:
            prom.stop()
        agent.stop()
        am.stop()
        webhook.stop()
        standin.kill()
        standin.wait()
        stop_serving()


def firing(name: str):
    return lambda path, alert: alert["labels"]["alertname"] == name and alert["status"] == "firing"


def test_a_firing_alert_reaches_the_receiver_of_its_severity_with_labels_and_annotations(alerting):
    webhook, prom, instance, _ = alerting
    rule = alerts()[AT_ONCE]
    path, alert = webhook.wait(f"{AT_ONCE} firing", firing(AT_ONCE), prom)
    assert path == "/" + RECEIVER["critical"]
    assert alert["labels"] == {"alertname": AT_ONCE, "instance": instance, "job": "headroom", "gpu": "1",
                               "uuid": SHOWCASE_GPU1, "severity": "critical"}
    ann = alert["annotations"]
    assert ann["summary"] == f"GPU 1 on {instance} failed to remap a memory row"  # rendered by Prometheus
    assert SHOWCASE_GPU1 in ann["description"] and "{{" not in ann["description"]
    assert ann["runbook_url"] == RUNBOOK_BASE + AT_ONCE.lower() == rule["annotations"]["runbook_url"]
    assert ann["remedy"] == rule["annotations"]["remedy"] and "RMA" in ann["remedy"]
    assert f":{prom.port}/graph?g0.expr=" in alert["generatorURL"]  # the Prometheus that sent it (its hostname)


def test_a_resource_alert_carries_the_remedy_of_its_resource(alerting):
    """HeadroomGpuMemoryFillingUp (GPU 0's memory ramps towards full): its remedy is remedies.SUMMARY's for
    gpu_memory, the text the agent's own verdict gives in /api/v1/status."""
    webhook, prom, instance, _ = alerting
    name = "HeadroomGpuMemoryFillingUp"
    path, alert = webhook.wait(f"{name} firing", firing(name), prom)
    assert path == "/" + RECEIVER["warning"]
    assert {k: alert["labels"].get(k) for k in ("instance", "gpu", "uuid", "severity")} == {
        "instance": instance, "gpu": "0", "uuid": SHOWCASE_GPU0, "severity": "warning"}
    assert alert["annotations"]["summary"] == f"GPU 0 on {instance} will run out of memory within the hour"
    assert alert["annotations"]["remedy"] == remedies.SUMMARY[FOR_SHORTENED[name]]
    assert alert["annotations"]["runbook_url"] == RUNBOOK_BASE + name.lower()


def test_a_workload_alert_carries_its_workload(alerting):
    """HeadroomWorkloadSloBreached: workload chat's inter-token latency (30 ms from its runtime) misses its 10 ms
    objective."""
    webhook, prom, instance, _ = alerting
    name = "HeadroomWorkloadSloBreached"
    rule = alerts()[name]
    path, alert = webhook.wait(f"{name} firing", firing(name), prom)
    assert path == "/" + RECEIVER["warning"]
    assert {k: alert["labels"].get(k) for k in ("instance", "workload", "objective", "severity")} == {
        "instance": instance, "workload": "chat", "objective": "itl_p95", "severity": "warning"}
    assert alert["annotations"]["summary"] == f"workload chat on {instance} misses its itl_p95 objective"
    assert alert["annotations"]["remedy"] == rule["annotations"]["remedy"]
    assert alert["annotations"]["runbook_url"] == RUNBOOK_BASE + name.lower()


def test_the_receiver_hears_when_the_condition_clears(alerting):
    """The agent reloads with an objective chat meets: Prometheus resolves HeadroomWorkloadSloBreached and
    Alertmanager sends the resolved notification (send_resolved) to the receiver that had the firing one; no alert
    of a sick agent was ever sent."""
    webhook, prom, instance, meet_the_objective = alerting
    name = "HeadroomWorkloadSloBreached"
    webhook.wait(f"{name} firing", firing(name), prom)
    since = len(webhook.received)
    meet_the_objective()
    # the condition cleared in the agent, its series still scraped (a resolve by staleness would not count)
    wait_for(prom, f'headroom_workload_slo_met{{instance="{instance}", workload="chat", objective="itl_p95"}} == 1',
             timeout=TIMEOUT_S)
    path, alert = webhook.wait(f"{name} resolved", lambda p, a: a["labels"]["alertname"] == name
                               and a["status"] == "resolved", prom, since=since)
    assert path == "/" + RECEIVER["warning"]
    assert alert["labels"]["workload"] == "chat" and alert["endsAt"] > alert["startsAt"]
    sent = {a["labels"]["alertname"] for _, a in webhook.alerts()}
    assert not sent & HEALTHY_ONLY, sorted(sent & HEALTHY_ONLY)

"""Proof against a real Prometheus: the agent runs the `showcase` scenario, Prometheus (Debian package, installed
by tests/install-system-deps.sh) scrapes it every second with grafana/rules/ loaded, and every dashboard
query and every rule expression is evaluated through the HTTP API: no error, and data for every panel
except the ones listed in NO_DATA_YET with the reason."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml

from test_dashboards import FILES as DASHBOARD_FILES
from test_dashboards import load, panels
from test_dcgm_compat import COMPAT_RULE_FILES, compat_rules
from test_rules import RULE_FILES, rules

from conftest import Agent, free_port, http_get

# (dashboard file, panel title, refId) -> why it has no data in this run; a listed query that returns data fails
# the test, so the list shrinks as the missing pieces land.
_ONE_HOST = "one host's job whose GPUs run under 5 % of full speed; tests/test_fleet.py has the multi-host job"
NO_DATA_YET: dict[tuple[str, str, str], str] = {
    ("fleet.json", "Training jobs: GPUs against the job's median", "A"): _ONE_HOST,
    ("fleet.json", "Slowest GPU per training job", "A"): _ONE_HOST,
}
# recording rules without data in this run, with the reason (tests/test_fleet.py evaluates them with data)
RULES_WITHOUT_DATA = {"training_job_instance_gpu:headroom_gpu_relative_speed:ratio5m": _ONE_HOST}
# a real process for workload chat (cmdline match), so its process panels have data
STANDIN = ["-c", "import time; time.sleep(600)", "headroom-showcase-chat-server"]
# alerts the showcase scenario makes fire at once (no `for:`): XID 79 at 3 s, a failed row remap from the start
MUST_FIRE = {"HeadroomGpuCriticalXid", "HeadroomGpuRowRemapFailure"}
CONFIG = """
analysis:
  short_window: 3s
  long_window: 20s
  hold: 2s
  cost_per_gpu_hour: 2.5
collectors:
  nvml:
    pcie_poll_interval: 1s
workloads:
  - name: chat
    kind: inference
    params: 7B
    precision: fp16
    architecture: {layers: 32, heads: 32, kv_heads: 8, head_dim: 128}
    context: {max: 8192}
    concurrency: 16
    gpus: [0]
    match: {cmdline: "headroom-showcase-chat-server"}
    endpoint: SERVING_URL
    slo: {ttft_p95: 1s, itl_p95: 10ms}
    team: ml
    job: showcase-job
  - name: trainer
    kind: finetune-lora
    params: 7B
    precision: bf16
    gpus: [1]
    team: ml
    job: showcase-job
"""
RANGE_S = 30
# chat's serving runtime: a vLLM /metrics served over real HTTP, moved along by these scenario signals
SERVING = {"running": 24, "waiting": 3, "kv_usage": 0.82, "arrivals": 5, "ttft": 0.4, "itl": 0.03,
           "preemptions": 1, "prompt_tokens": 800, "output_tokens": 200}


def serving_runtime():
    """(url, stop) of a stand-in vLLM runtime serving /metrics on a free loopback port."""
    import threading
    from dataclasses import asdict

    from headroom.simulation.runtime_metrics import serve
    from headroom.simulation.scenario import Signal, constant

    spec = {"runtime": "vllm", "version": "v1-itl", "port": free_port(), "kv_blocks": 4096, "block_size": 16,
            "model": "showcase", "signals": {k: asdict(constant(v)) for k, v in SERVING.items()}}
    server, driver = serve(spec, Signal)
    stop = threading.Event()
    start = time.monotonic()

    def advance():
        while not stop.wait(0.1):
            with driver.lock:
                driver.advance(time.monotonic() - start)

    threading.Thread(target=advance, daemon=True).start()

    def close():
        stop.set()
        server.shutdown()
        server.server_close()

    return f"http://127.0.0.1:{spec['port']}/metrics", close


class LoopbackServer:
    """A real server process on a free loopback port, logging to a file, ready when ``/-/ready`` answers 200 (as
    Prometheus and Alertmanager do); stopped with SIGTERM, then SIGKILL."""

    name = "server"

    def _start(self, argv: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self.log = log_path.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"{self.name} exited: " + self.log_path.read_text()[-3000:]
            try:
                if http_get(self.url + "/-/ready", timeout=1)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"{self.name} not ready: " + self.log_path.read_text()[-3000:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Prometheus(LoopbackServer):
    """A real `prometheus` on a free loopback port, storing into a temporary directory."""

    name = "prometheus"

    def __init__(self, tmp: Path, target: str, config: dict | None = None) -> None:
        assert shutil.which("prometheus"), "prometheus missing: `make test` installs Debian's prometheus package"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = config or {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
            "rule_files": [str(p) for p in (*RULE_FILES, *COMPAT_RULE_FILES)],
            "scrape_configs": [{"job_name": "headroom", "static_configs": [{"targets": [target]}]}],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        self._start(["prometheus", f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                     f"--web.listen-address=127.0.0.1:{self.port}"], tmp / "prometheus.log")

    def api(self, path: str, **params: str) -> dict:
        """The decoded JSON answer of a Prometheus API call (errors included, for the caller to judge)."""
        status, _, body = http_get(f"{self.url}{path}?{urllib.parse.urlencode(params)}", timeout=10)
        doc = json.loads(body)
        doc["http_status"] = status
        return doc

    def query(self, expr: str) -> dict:
        return self.api("/api/v1/query", query=expr)


def wait_for(prom: Prometheus, expr: str, timeout: float) -> None:
    """Waits until the expression returns data; fails with the last answer."""
    deadline = time.monotonic() + timeout
    answer: dict = {}
    while time.monotonic() < deadline:
        answer = prom.query(expr)
        if answer.get("status") == "success" and answer["data"]["result"]:
            return
        time.sleep(0.5)
    raise AssertionError(f"no data for {expr} after {timeout} s: {answer}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prometheus")
    serving_url, stop_serving = serving_runtime()
    (tmp / "config.yaml").write_text(CONFIG.replace("SERVING_URL", serving_url))
    standin = subprocess.Popen([sys.executable, *STANDIN])
    agent = Agent("--simulate", "showcase", "--sample.interval", "200ms", "--config.file", str(tmp / "config.yaml"),
                  "--log.level", "warn")
    prom = None
    try:
        agent.wait_ready()
        target = f"127.0.0.1:{agent.port}"
        prom = Prometheus(tmp, target)
        prom.wait_ready()
        # the slowest signal: a GPU's primary bottleneck (GPU 1 runs hot) after the analysis window and hold, then a few evaluations
        wait_for(prom, 'headroom_gpu_bottleneck{resource!="none"} == 1', timeout=40)
        wait_for(prom, 'count(instance_gpu:headroom_gpu_throttled:rate5m) >= 2', timeout=15)
        wait_for(prom, 'ALERTS{alertname="HeadroomGpuCriticalXid"}', timeout=10)
        # workload chat's process series (the stand-in found by its command line): missing once in a 4-worker
        # run on a loaded machine when the dashboards were queried, so they are waited for like the others
        wait_for(prom, 'headroom_workload_resident_memory_bytes{workload="chat"}', timeout=40)
        wait_for(prom, 'headroom_workload_gpu_utilization_ratio{workload="chat"}', timeout=40)
        time.sleep(3)
        yield prom, target
    finally:
        if prom is not None:
            prom.stop()
        agent.stop()
        standin.kill()
        standin.wait()
        stop_serving()


def substitute(expr: str, instance: str) -> str:
    """The PromQL Grafana sends for a panel with the variables set (one instance, all GPUs, workload chat)."""
    return (expr.replace("$__rate_interval", "5s").replace("$__interval", "1s")
            .replace("$__range_s", str(RANGE_S)).replace("$__range", f"{RANGE_S}s")
            .replace("$instance", instance).replace("$gpu", ".*").replace("$workload", "chat"))


def dashboard_targets() -> list[tuple[str, str, str, str]]:
    """(file, panel title, refId, expr) of every dashboard query."""
    return [(path.name, p["title"], t["refId"], t["expr"])
            for path in DASHBOARD_FILES for p in panels(load(path)) for t in p["targets"]]


# The queries of Grafana dashboard 12239, "NVIDIA DCGM Exporter Dashboard" (grafana/dcgm-exporter-dashboard.json in
# NVIDIA/dcgm-exporter, as of cffaeb8): (panel title, expr). They must find data through the compatibility rules
# (grafana/rules/compat/), except the panels listed in DCGM_NO_EQUIVALENT with the reason.
DCGM_DASHBOARD_QUERIES = (
    ("GPU Temperature", 'DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"}'),
    ("GPU Avg. Temp", 'avg(DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"})'),
    ("GPU Power Usage", 'DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"}'),
    ("GPU Power Total", 'sum(DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"})'),
    ("GPU SM Clocks", 'DCGM_FI_DEV_SM_CLOCK{instance=~"$instance", gpu=~"$gpu"} * 1000000'),
    ("GPU Utilization", 'DCGM_FI_DEV_GPU_UTIL{instance=~"$instance", gpu=~"$gpu"}'),
    ("GPU Framebuffer Mem Used", 'DCGM_FI_DEV_FB_USED{instance=~"$instance", gpu=~"$gpu"}'),
    ("Tensor Core Utilization", 'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{instance=~"$instance", gpu=~"$gpu"}'),
)
# The same panels under dcgm-exporter 4.9's names and base units (hertz: no "* 1000000"; a 0-1 ratio; bytes), the
# form a dashboard moved to 4.9 queries; 4.10's dashboard adds {{hostname}} to its legends, so the series must
# carry hostname.
DCGM_4_9_DASHBOARD_QUERIES = (
    ("GPU Temperature", 'DCGM_FI_DEV_GPU_TEMP_CELSIUS{instance=~"$instance", gpu=~"$gpu"}'),
    ("GPU Avg. Temp", 'avg(DCGM_FI_DEV_GPU_TEMP_CELSIUS{instance=~"$instance", gpu=~"$gpu"})'),
    ("GPU Power Usage", 'DCGM_FI_DEV_BOARD_POWER_WATTS{instance=~"$instance", gpu=~"$gpu"}'),
    ("GPU Power Total", 'sum(DCGM_FI_DEV_BOARD_POWER_WATTS{instance=~"$instance", gpu=~"$gpu"})'),
    ("GPU SM Clocks", 'DCGM_FI_DEV_SM_CLOCK_HERTZ{instance=~"$instance", gpu=~"$gpu"}'),
    ("GPU Utilization", 'DCGM_FI_DEV_GPU_UTIL_RATIO{instance=~"$instance", gpu=~"$gpu"}'),
    ("GPU Framebuffer Mem Used", 'DCGM_FI_DEV_FB_USED_BYTES{instance=~"$instance", gpu=~"$gpu"}'),
    ("Tensor Core Utilization", 'DCGM_FI_PROF_TENSOR_UTIL_RATIO{instance=~"$instance", gpu=~"$gpu"}'),
)
DCGM_GENERATIONS = {
    "pre-4.9": (DCGM_DASHBOARD_QUERIES, ("label_values(DCGM_FI_DEV_GPU_TEMP, instance)",
                                         "label_values(DCGM_FI_DEV_GPU_TEMP, gpu)")),
    "4.9": (DCGM_4_9_DASHBOARD_QUERIES, ("label_values(DCGM_FI_DEV_GPU_TEMP_CELSIUS, instance)",
                                         "label_values(DCGM_FI_DEV_GPU_TEMP_CELSIUS, gpu)",
                                         "label_values(DCGM_FI_DEV_GPU_TEMP_CELSIUS, hostname)")),
}
DCGM_NO_EQUIVALENT = {"Tensor Core Utilization": "tensor pipe activity is a DCGM profiling metric headroom does not read "
                                                 "(docs/migrating-from-dcgm-exporter.md)"}
# recorded dcgm-exporter series -> (the headroom series it comes from, the factor into dcgm-exporter's unit), by hand:
# MHz = Hz / 1e6, MiB = bytes / 2^20, % = ratio * 100, mJ = J * 1000; from 4.9 the units are headroom's own
DCGM_VALUES = {
    "pre-4.9": {
        "DCGM_FI_DEV_SM_CLOCK": ("headroom_gpu_sm_clock_hertz", 1e-6),
        "DCGM_FI_DEV_MEM_CLOCK": ("headroom_gpu_memory_clock_hertz", 1e-6),
        "DCGM_FI_DEV_FB_USED": ("headroom_gpu_memory_used_bytes", 1 / 1048576),
        "DCGM_FI_DEV_FB_FREE": ("headroom_gpu_memory_free_bytes", 1 / 1048576),
        "DCGM_FI_DEV_GPU_UTIL": ("headroom_gpu_utilization_ratio", 100),
        "DCGM_FI_DEV_MEM_COPY_UTIL": ("headroom_gpu_memory_utilization_ratio", 100),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("headroom_gpu_energy_joules_total", 1000),
        "DCGM_FI_DEV_POWER_USAGE": ("headroom_gpu_power_watts", 1),
        "DCGM_FI_DEV_GPU_TEMP": ("headroom_gpu_temperature_celsius", 1),
    },
    "4.9": {
        "DCGM_FI_DEV_SM_CLOCK_HERTZ": ("headroom_gpu_sm_clock_hertz", 1),
        "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ": ("headroom_gpu_memory_clock_hertz", 1),
        "DCGM_FI_DEV_FB_USED_BYTES": ("headroom_gpu_memory_used_bytes", 1),
        "DCGM_FI_DEV_FB_CAPACITY_BYTES": ("headroom_gpu_memory_size_bytes", 1),
        "DCGM_FI_DEV_GPU_UTIL_RATIO": ("headroom_gpu_utilization_ratio", 1),
        "DCGM_FI_DEV_MEMORY_UTIL_RATIO": ("headroom_gpu_memory_utilization_ratio", 1),
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL": ("headroom_gpu_energy_joules_total", 1),
        "DCGM_FI_DEV_BOARD_POWER_WATTS": ("headroom_gpu_power_watts", 1),
        "DCGM_FI_DEV_GPU_TEMP_CELSIUS": ("headroom_gpu_temperature_celsius", 1),
    },
}
# the labels of each generation's series (dcgm-exporter's own), beside instance, job and gpu
DCGM_LABELS = {"pre-4.9": {"UUID", "modelName", "device", "DCGM_FI_DRIVER_VERSION", "Hostname", "hostname"},
               "4.9": {"UUID", "modelName", "device", "DCGM_FI_SYSTEM_DRIVER_VERSION", "hostname"}}


@pytest.mark.parametrize("generation", DCGM_GENERATIONS)
def test_dcgm_exporter_dashboard_queries_find_data_through_the_compat_rules(stack, generation):
    prom, instance = stack
    queries, variables = DCGM_GENERATIONS[generation]
    for variable in variables:
        selector, label = variable.removeprefix("label_values(").removesuffix(")").split(", ")
        values = {s["metric"].get(label) for s in prom.query(selector)["data"]["result"]} - {None}
        assert values, f"dashboard variable {variable} finds no values"
    errors, empty, stale = [], [], []
    for title, expr in queries:
        answer = prom.query(expr.replace("$instance", instance).replace("$gpu", ".*"))
        if answer.get("status") != "success":
            errors.append(f"{title}: {answer.get('error')}")
        elif not answer["data"]["result"] and title not in DCGM_NO_EQUIVALENT:
            empty.append(title)
        elif answer["data"]["result"] and title in DCGM_NO_EQUIVALENT:
            stale.append(f"{title} has data now: remove it from DCGM_NO_EQUIVALENT")
    assert not errors and not empty and not stale, (errors, empty, stale)
    # dcgm-exporter's labels, not headroom's
    name = next(iter(DCGM_VALUES[generation]))
    series = prom.query(f'{name}{{instance="{instance}"}}')["data"]["result"]
    other = set().union(*DCGM_LABELS.values()) - DCGM_LABELS[generation]
    assert series and all(DCGM_LABELS[generation] <= set(s["metric"]) for s in series), series
    assert all(not other & set(s["metric"]) and "uuid" not in s["metric"] for s in series), series
    assert all(s["metric"]["hostname"] == "127.0.0.1" for s in series)


@pytest.mark.parametrize("generation", DCGM_VALUES)
def test_dcgm_exporter_compat_values_are_headrooms_in_dcgm_exporters_unit(stack, generation):
    """Each recorded value, at its evaluation time, is the headroom sample it was computed from times the unit
    factor (one of the last samples: a scrape may land just after the evaluation read)."""
    prom, instance = stack
    nonzero = 0
    for name, (source, factor) in DCGM_VALUES[generation].items():
        recorded = prom.query(f'{name}{{instance="{instance}"}}')["data"]["result"]
        assert recorded, f"{name}: no data"
        for s in recorded:
            gpu, at = s["metric"]["gpu"], s["value"][0]
            stamp = prom.api("/api/v1/query", query=f'timestamp({name}{{instance="{instance}", gpu="{gpu}"}})',
                             time=str(at))["data"]["result"][0]["value"][1]
            value = float(prom.api("/api/v1/query", query=f'{name}{{instance="{instance}", gpu="{gpu}"}}',
                                   time=stamp)["data"]["result"][0]["value"][1])
            raw = prom.api("/api/v1/query", query=f'max by (gpu) ({source}{{instance="{instance}", gpu="{gpu}"}})',
                           time=stamp)["data"]["result"]
            window = prom.api("/api/v1/query", query=f'{source}{{instance="{instance}", gpu="{gpu}"}}[3s]',
                              time=stamp)["data"]["result"]
            candidates = [float(raw[0]["value"][1])] + [float(v) for w in window for _, v in w["values"]]
            assert any(abs(value - c * factor) <= 1e-9 * max(1.0, abs(c * factor)) for c in candidates), (
                f"{name} gpu {gpu} = {value}, headroom {source} x {factor} = {[c * factor for c in candidates]}")
            nonzero += value != 0
    assert nonzero, "every value was 0: the check proves nothing"


def test_every_dashboard_query_returns_data(stack):
    prom, instance = stack
    errors, empty, stale_exceptions = [], [], []
    for name, title, ref, expr in dashboard_targets():
        answer = prom.query(substitute(expr, instance))
        key = (name, title, ref)
        if answer.get("status") != "success":
            errors.append(f"{name} / {title} / {ref}: {answer.get('error')}")
        elif not answer["data"]["result"] and key not in NO_DATA_YET:
            empty.append(f"{name} / {title} / {ref}: {substitute(expr, instance)}")
        elif answer["data"]["result"] and key in NO_DATA_YET:
            stale_exceptions.append(f"{name} / {title} / {ref} has data now: remove it from NO_DATA_YET")
    assert not errors, errors
    assert not empty, empty
    assert not stale_exceptions, stale_exceptions


def test_every_no_data_exception_names_a_real_query():
    keys = {(name, title, ref) for name, title, ref, _ in dashboard_targets()}
    assert set(NO_DATA_YET) <= keys


def test_every_variable_query_finds_values(stack):
    prom, instance = stack
    missing = []
    for path in DASHBOARD_FILES:
        for v in load(path)["templating"]["list"]:
            if v["type"] != "query":
                continue
            selector, label = v["query"]["query"].removeprefix("label_values(").removesuffix(")").rsplit(",", 1)
            answer = prom.query(substitute(selector, instance))
            values = {s["metric"].get(label.strip()) for s in answer["data"]["result"]} - {None}
            if not values:
                missing.append(f"{path.name}: ${v['name']}")
    assert not missing


def test_prometheus_loaded_every_rule_and_evaluates_it_without_error(stack):
    prom, _ = stack
    groups = prom.api("/api/v1/rules")["data"]["groups"]
    loaded = {(r.get("name")): r for g in groups for r in g["rules"]}
    expected = {r.get("alert") or r["record"] for r in (*rules(), *compat_rules())}
    assert set(loaded) == expected
    unhealthy = {name: r.get("lastError") for name, r in loaded.items() if r["health"] != "ok"}
    assert not unhealthy


def test_every_rule_expression_evaluates_and_recording_rules_have_data(stack):
    prom, _ = stack
    errors, empty = [], []
    for rule in (*rules(), *compat_rules()):
        name = rule.get("alert") or rule["record"]
        answer = prom.query(rule["expr"])
        if answer.get("status") != "success":
            errors.append(f"{name}: {answer.get('error')}")
            continue
        if "record" in rule:
            recorded = prom.query(rule["record"])
            has_data = bool(answer["data"]["result"] and recorded["data"]["result"])
            if has_data == (name in RULES_WITHOUT_DATA):
                empty.append(name)
    assert not errors, errors
    assert not empty, f"recording rules without data, or listed in RULES_WITHOUT_DATA with data: {empty}"


def test_the_showcase_fires_the_alerts_it_should(stack):
    prom, _ = stack
    firing = {a["labels"]["alertname"] for a in prom.api("/api/v1/alerts")["data"]["alerts"]
              if a["state"] == "firing"}
    assert MUST_FIRE <= firing, f"firing: {sorted(firing)}"
    healthy_only = {"HeadroomNvmlDown", "HeadroomAgentDown", "HeadroomSamplesStale", "HeadroomConfigReloadFailed"}
    assert not firing & healthy_only, "alerts for a healthy agent fired"


def test_prometheus_scraped_openmetrics(stack):
    """Prometheus asks for OpenMetrics first; its metadata then names counter families without `_total`
    (with the text format it would list `headroom_samples_total`)."""
    prom, _ = stack
    meta = prom.api("/api/v1/targets/metadata", metric="headroom_samples")["data"]
    assert [m["type"] for m in meta] == ["counter"], meta
    assert not prom.api("/api/v1/targets/metadata", metric="headroom_samples_total")["data"]

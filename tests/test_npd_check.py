"""`headroom check` as node-problem-detector runs a custom plugin: the command, its exit status (0 OK, 1 NonOK,
anything else Unknown: pkg/custompluginmonitor/plugin/plugin.go) and its one line of output, against the demo agent
(`headroom run --simulate`) with scenarios that make each check true and false; and the example monitor config in
deploy/ as node-problem-detector's config validation reads it (pkg/custompluginmonitor/types/config.go)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from conftest import ROOT, Agent, http_get

OK, NON_OK, UNKNOWN = 0, 1, 3
MONITOR = ROOT / "deploy" / "node-problem-detector" / "headroom-gpu-monitor.json"

SICK = """
description: a GPU with an XID that needs a reset, an uncorrected ECC error and a pending row remap; one lost
seed: 5
gpus:
  - name: NVIDIA H100 80GB HBM3
    memory_total: 80GiB
    power_limit: 700
    utilization: 0.7
    xids: [{at: 1s, code: 48}, {at: 1s, code: 13}]
    ecc: {uncorrected_volatile: 1, uncorrected_aggregate: 1}
    remapped_rows: {uncorrectable: 1, pending: true}
  - name: NVIDIA H100 80GB HBM3
    memory_total: 80GiB
    power_limit: 700
    utilization: 0.7
faults:
  - {call: nvmlDeviceGetUtilizationRates, gpu: 1, error: GPU_IS_LOST}
"""


def check(agent_url: str, *args: str) -> tuple[int, str]:
    p = subprocess.run([sys.executable, "-m", "headroom", "check", *args, "--agent", agent_url],
                       cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert p.stderr == "", p.stderr  # never a traceback
    lines = p.stdout.splitlines()
    limit = int(args[args.index("--max-length") + 1]) if "--max-length" in args else 80
    assert len(lines) == 1 and len(lines[0]) <= limit, p.stdout
    return p.returncode, lines[0]


def until(agent: Agent, want: int, *args: str, timeout: float = 30.0) -> tuple[int, str]:
    """The check's answer once it is ``want`` (verdicts take analysis.hold to settle), else its last answer."""
    deadline = time.monotonic() + timeout
    while True:
        got = check(agent.url, *args)
        if got[0] == want or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


@pytest.fixture(scope="module")
def agents(tmp_path_factory):
    d = tmp_path_factory.mktemp("npd")
    (d / "sick.yaml").write_text(SICK)
    config = d / "config.yaml"
    config.write_text("analysis: {hold: 1s, short_window: 2s}\n")
    common = ("--config.file", str(config), "--sample.interval", "200ms")
    scenarios = {"healthy": "healthy", "sick": str(d / "sick.yaml"), "cpu": "bottleneck-cpu",
                 "thermal": "bottleneck-gpu_thermal", "idle": "serving-idle"}
    started = {name: Agent(*common, "--simulate", s) for name, s in scenarios.items()}
    try:
        for a in started.values():
            a.wait_ready(60)
        time.sleep(4)  # past analysis.hold and the short window: an OK below is a verdict, not a start-up
        yield started
    finally:
        for a in started.values():
            a.stop()


def test_gpu_health(agents):
    assert check(agents["healthy"].url, "gpu-health") == (OK, "2 GPU(s) healthy")
    code, message = until(agents["sick"], NON_OK, "gpu-health")
    assert code == NON_OK
    # the first GPU's conditions in order, then the lost one (cut at 80 characters, as node-problem-detector would)
    assert message.startswith("GPU 0: XID 48 needs a GPU reset; 1 uncorrected ECC error(s) since the driver"), message
    code, message = check(agents["sick"].url, "gpu-health", "--max-length", "400")
    assert message.endswith("GPU 1: does not answer NVML: nvmlDeviceGetUtilizationRates: GPU is lost (GPU_IS_LOST)")
    assert "a row remap awaits a GPU reset" in message and "XID 13" not in message
    # the same in the status API, on the landing page and in /metrics; /healthz stays about the agent
    status = json.loads(http_get(agents["sick"].url + "/api/v1/status")[2])
    gpu0 = status["gpus"][0]["health"]
    assert gpu0["status"] == "unhealthy" and [c["condition"] for c in gpu0["conditions"]] == [
        "xid_reset_required", "ecc_uncorrectable", "row_remap_pending"]
    assert [c["action"] for c in gpu0["conditions"]] == ["reset", "reset", "reset"]
    assert status["gpus"][1]["health"]["conditions"][0]["condition"] == "gpu_lost"
    page = http_get(agents["sick"].url + "/")[2].decode()
    assert "UNHEALTHY" in page and "unhealthy: XID 48 needs a GPU reset (action: reset)" in page
    metrics = http_get(agents["sick"].url + "/metrics")[2].decode()
    assert re.search(r'headroom_gpu_health_condition\{gpu="0",uuid="[^"]+",condition="ecc_uncorrectable"\} 1', metrics)
    assert re.search(r'headroom_gpu_healthy\{gpu="1",uuid="[^"]+"\} 0', metrics)
    assert http_get(agents["sick"].url + "/healthz")[0] == 200
    healthy = json.loads(http_get(agents["healthy"].url + "/api/v1/status")[2])
    assert [g["health"] for g in healthy["gpus"]] == [{"status": "healthy", "reason": "healthy", "conditions": []}] * 2


def test_gpu_idle_while_allocated(agents):
    code, message = until(agents["idle"], NON_OK, "gpu-idle", "--for", "2s")
    # its idle time as check.py writes it: seconds, minutes past a minute, hours past an hour (the agent may have been
    # idle for over a minute when this runs late on a loaded machine)
    assert code == NON_OK and re.fullmatch(r"GPU 0 idle (\d+s|\d+m|\d+\.\dh), held by \S+", message), message
    assert check(agents["idle"].url, "gpu-idle", "--for", "1h") == (OK, "no allocated GPU idle for 1.0h (1 allocated)")
    code, message = check(agents["healthy"].url, "gpu-idle", "--for", "2s")  # busy GPUs, held
    assert code == OK and message.startswith("no allocated GPU idle for 2s ("), message


def test_gpu_starved(agents):
    code, message = until(agents["cpu"], NON_OK, "gpu-starved")
    assert code == NON_OK and message.startswith("starved: GPU 0 cpu"), message
    assert check(agents["healthy"].url, "gpu-starved") == (OK, "no GPU starved by the host")
    assert check(agents["thermal"].url, "gpu-starved") == (OK, "no GPU starved by the host")


def test_gpu_throttled(agents):
    code, message = until(agents["thermal"], NON_OK, "gpu-throttled")
    assert code == NON_OK and message.startswith("throttled: GPU 0 gpu_thermal"), message
    assert check(agents["healthy"].url, "gpu-throttled") == (OK, "no GPU throttled")
    assert check(agents["cpu"].url, "gpu-throttled") == (OK, "no GPU throttled")


def test_an_agent_that_cannot_be_reached_is_unknown(tmp_path):
    from conftest import free_port

    code, message = check(f"http://127.0.0.1:{free_port()}", "gpu-health")
    assert code == UNKNOWN and message.startswith("unknown: agent unreachable (Connection refused)"), message
    code, message = check("ftp://example", "gpu-starved")
    assert (code, message) == (UNKNOWN, "unknown: --agent 'ftp://example' is not an http(s) URL")


def test_the_example_monitor_config_is_one_node_problem_detector_accepts():
    """The checks config.go's ApplyConfiguration and Validate make, and each rule a valid `headroom check`."""
    from headroom.cli import build_parser

    cfg = json.loads(MONITOR.read_text())
    assert cfg["plugin"] == "custom" and cfg["source"]
    duration = re.compile(r"^[0-9]+(ms|s|m|h)$")
    glob = cfg["pluginConfig"]
    assert duration.match(glob["invoke_interval"]) and duration.match(glob["timeout"])
    seconds = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}

    def secs(text):
        m = re.match(r"^([0-9]+)(ms|s|m|h)$", text)
        return int(m.group(1)) * seconds[m.group(2)]

    defaults = {c["type"] for c in cfg["conditions"]}
    checks = set()
    for rule in cfg["rules"]:
        assert rule["type"] in ("temporary", "permanent") and rule["reason"]
        assert secs(rule["timeout"]) <= secs(glob["timeout"])  # a rule timeout above the global one is refused
        if rule["type"] == "permanent":
            assert rule["condition"] in defaults  # a permanent problem needs a preset default condition
        assert rule["path"].endswith("/headroom")
        args = build_parser().parse_args(rule["args"])  # a usage error would exit 2: Unknown
        assert args.command == "check" and args.timeout < secs(rule["timeout"])
        assert args.max_length <= glob["max_output_length"]
        checks.add(args.check)
    assert checks == {"gpu-health", "gpu-idle", "gpu-starved", "gpu-throttled"}


@pytest.fixture
def answering():
    """A local HTTP server that answers every GET with the body given (not the agent: what a wrong --agent gets)."""
    import http.server
    import threading

    body = {"data": b""}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body["data"])

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def serve(data: bytes) -> str:
        body["data"] = data
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield serve
    server.shutdown()


@pytest.mark.parametrize(("body", "message"), [
    (b"<html>not the agent</html>", "unknown: agent status is not JSON"),
    (b'{"gpus": "many"}', "unknown: agent status has no gpus list"),
    (b'{"gpus": [], "collectors": {"nvml": {"ok": false, "error": "NVML unavailable: Driver Not Loaded"}}}',
     "unknown: no GPU figures: NVML unavailable: Driver Not Loaded"),
    (b'{"gpus": [{"index": 0, "idle": true, "idle_seconds": "long", "allocated_to": ["x"]}]}',
     "no allocated GPU idle for 1.0h (1 allocated)"),
    (b'{"gpus": [{"index": 0, "health": {"status": "healthy"}}], "workloads": [7, {"primary_bottleneck": []}]}', None),
])
def test_a_status_that_is_not_the_agents_is_unknown_never_a_traceback(answering, body, message):
    url = answering(body)
    for name in ("gpu-health", "gpu-idle", "gpu-starved", "gpu-throttled"):
        code, line = check(url, name)
        assert code in (OK, UNKNOWN), (name, line)
        if message is not None and (name == "gpu-idle" or message.startswith("unknown")):
            assert line == message, (name, line)

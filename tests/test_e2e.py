"""End to end: `headroom run --simulate demo` as a real process, scraped over real HTTP."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from headroom.exposition.catalog import BY_NAME

from conftest import ROOT, http_get


@pytest.fixture(scope="module")
def demo():
    from conftest import Agent

    a = Agent("--config.file", str(ROOT / "config.yaml"), "--simulate", "demo", "--sample.interval", "200ms")
    a.wait_ready()
    yield a
    code, err = a.stop()
    assert code == 0, err
    assert "Traceback" not in err


def test_metrics_are_conventional_and_catalogued(demo):
    status, headers, body = http_get(demo.url + "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    for name in families:
        full = name + "_total" if BY_NAME.get(name + "_total") else name
        assert full in BY_NAME, f"{name} is not catalogued"
    gpu_up = list(families["headroom_gpu_up"].samples)
    assert len(gpu_up) == 2 and all(s.value == 1 for s in gpu_up)
    assert families["headroom_nvml_up"].samples[0].value == 1
    assert families["headroom_simulation_info"].samples[0].labels["scenario"] == "demo"
    for name in ("headroom_gpu_utilization_ratio", "headroom_gpu_memory_used_bytes", "headroom_gpu_power_watts",
                 "headroom_cpu_seconds_total", "headroom_memory_size_bytes", "headroom_shm_size_bytes"):
        assert name.removesuffix("_total") in families, name


def test_promtool_check_metrics_passes_on_the_live_exposition(demo):
    assert shutil.which("promtool"), "promtool missing: `make test` installs Debian's prometheus package"
    _, _, body = http_get(demo.url + "/metrics")
    r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30)
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


def test_gzip_when_asked(demo):
    status, headers, body = http_get(demo.url + "/metrics", headers={"Accept-Encoding": "gzip"})
    assert status == 200 and headers.get("Content-Encoding") == "gzip"
    assert b"headroom_build_info" in gzip.decompress(body)


def test_landing_page_lists_the_gpus(demo):
    status, headers, body = http_get(demo.url + "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    page = body.decode()
    assert "headroom" in page and 'href="/metrics"' in page
    assert page.count("H100") >= 2


def test_healthz_and_status(demo):
    status, _, body = http_get(demo.url + "/healthz")
    assert status == 200, body
    status, _, body = http_get(demo.url + "/api/v1/status")
    doc = json.loads(body)
    assert status == 200 and len(doc["gpus"]) == 2 and doc["simulated_scenario"] == "demo"


def test_the_demo_shows_an_auto_detected_server_beside_the_declared_one(demo):
    """`make demo`'s undeclared `vllm serve Qwen/Qwen3-0.6B ... --port 8001`: a workload with source="auto",
    sized from its model's config.json (found in the HF_HOME of its environment), with a bottleneck verdict,
    on /metrics, /api/v1/status and the landing page."""
    import time

    name = "vllm/Qwen3-0.6B:8001"
    deadline = time.monotonic() + 30
    while True:  # an identity appears one tick after its process reaches a GPU
        text = http_get(demo.url + "/metrics")[2].decode()
        if f'headroom_workload_gpu_memory_expected_peak_bytes{{workload="{name}"}}' in text \
                or time.monotonic() > deadline:  # its model config is read off the tick: a tick or two later
            break
        time.sleep(0.2)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    info = {s.labels["workload"]: s.labels for s in families["headroom_workload_info"].samples}
    assert info["chat"]["source"] == "declared"
    assert {k: info[name][k] for k in ("kind", "model", "precision", "runtime", "source")} == {
        "kind": "inference", "model": "Qwen/Qwen3-0.6B", "precision": "bf16", "runtime": "vllm", "source": "auto"}
    peak = {s.labels["workload"]: s.value for s in families["headroom_workload_gpu_memory_expected_peak_bytes"].samples}
    assert peak[name] == int(81559 * 2**20 * 0.08)  # --gpu-memory-utilization 0.08 of the H100
    verdicts = [s for s in families["headroom_workload_bottleneck"].samples if s.labels["workload"] == name]
    assert len(verdicts) > 1 and sum(s.value for s in verdicts) == 1
    doc = json.loads(http_get(demo.url + "/api/v1/status")[2])
    (w,) = [w for w in doc["workloads"] if w["name"] == name]
    assert w["source"] == "auto" and w["expected"]["estimate_error"] is None and w["primary_bottleneck"]
    (ident,) = [g for g in doc["identity"]["workloads"] if g["name"] == name]
    assert ident["launcher"]["max_model_len"] == 16000 and ident["launcher"]["max_num_seqs"] == 32
    assert ident["launcher"]["model_config"].endswith("models--Qwen--Qwen3-0.6B/snapshots/"
                                                      "c1899de289a04d12100db370d81485cdf75e47ca/config.json")
    page = http_get(demo.url + "/")[2].decode()
    assert f'id="workload-{name}"' in page and "found automatically (vllm Qwen/Qwen3-0.6B; no profile declared)" in page


@pytest.mark.parametrize("path", ["/nope", "/metrics/extra", "/favicon.ico"])
def test_unknown_paths_are_404(demo, path):
    assert http_get(demo.url + path)[0] == 404


def test_unknown_methods_are_405_and_malformed_requests_4xx(demo):
    port = demo.port

    def raw(data: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(data)
            return s.recv(4096)

    assert raw(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").startswith(b"HTTP/1.1 405")
    assert raw(b"BREW /metrics HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 405")
    assert raw(b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n")[:12] in (b"HTTP/1.1 414", b"HTTP/1.0 414")
    assert raw(b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * 200 + b"\r\n")[9:12] == b"431"
    assert raw(b"garbage\r\n\r\n")[9:10] == b"4"


def test_port_in_use_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "headroom", "run", "--simulate", "demo",
                            "--web.listen-address", f"127.0.0.1:{port}"], capture_output=True, text=True,
                           timeout=60, cwd=ROOT)
    assert r.returncode == 3  # the address is taken (daemon.EXIT_ADDRESS_IN_USE): `make demo` hints on this one only
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use; pid {os.getpid()} (" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--sample.interval", "fast"], "argument --sample.interval: invalid duration"),
        (["run", "--web.listen-address", "nope"], "listen address 'nope' must be HOST:PORT"),
        (["run", "--simulate", "no-such-scenario"], "no-such-scenario"),
        (["snapshot", "--samples", "0"], "must be at least 1"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_flags_get_one_clear_message(args, message):
    r = subprocess.run([sys.executable, "-m", "headroom", *args], capture_output=True, text=True, timeout=60,
                       cwd=ROOT)
    assert r.returncode in (1, 2)
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_version():
    r = subprocess.run([sys.executable, "-m", "headroom", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("headroom ")


def test_snapshot_json_and_prometheus():
    # the interval is also each collector's deadline: at 100 ms, a fresh-clone run with 4 test workers on 2 cores
    # saw the NVML collector miss it (its data None, reported stuck) on the snapshot's sample
    r = subprocess.run([sys.executable, "-m", "headroom", "snapshot", "--simulate", "demo", "--samples", "2",
                        "--sample.interval", "1s", "--format", "json"], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert len(doc["sources"]["nvml"]["data"]["gpus"]) == 2
    assert doc["derived"]["cpu_utilization_ratio"] is not None, "two samples give rates"
    r = subprocess.run([sys.executable, "-m", "headroom", "snapshot", "--simulate", "demo", "--samples", "1",
                        "--no-collector.disk"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "headroom_gpu_up" in r.stdout and "headroom_disk_" not in r.stdout

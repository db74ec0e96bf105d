"""The serving collector over real HTTP on loopback: every runtime's exposition, and every bad endpoint.

Good endpoints are real ``http.server`` servers serving the runtimes' exposition text (the golden
fixtures in tests/fixtures/serving, built like each runtime's own registry prints them); bad ones are
raw sockets doing what broken servers do. No assertion depends on how fast this machine is: a scrape's
outcome is awaited (bounded), and "never delays a tick" is checked as "collect() answered with the
previous result while the endpoint was still hanging", not with a stopwatch.
"""

from __future__ import annotations

import dataclasses
import math
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import structlog

from headroom.samples import ServingEndpoint
from headroom.simulation.runtime_metrics import VERSIONS, ServingState, exposition
from headroom.sources import SourceContext
from headroom.sources.serving import ScrapeError, ServingCollector, read_exposition
from headroom.workload.profiles import profile_from_dict

from situations.serving import VLLM

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "serving"
CASES = [(r, v) for r, versions in VERSIONS.items() for v in versions]


def fixture_state(runtime: str, version: str) -> ServingState:
    """The state every golden fixture prints: numbers chosen so each field is distinguishable."""
    s = ServingState(runtime, version, running=12, waiting=5, kv_usage=0.875, kv_blocks=4096, block_size=16,
                     preemptions=17, prompt_tokens=123456, generation_tokens=65432, requests=900)
    s.observe("ttft", 0.18, 600)
    s.observe("ttft", 0.7, 300)
    s.observe("itl", 0.021, 40000)
    s.observe("itl", 0.09, 5000)
    s.observe("e2e", 3.2, 900)
    return s


# what each runtime (version) exports beyond running, waiting, KV usage and capacity: None = not at all
PREEMPTIONS = {"vllm": 17.0, "sglang": 17.0, "tgi": None, "triton": None}  # older SGLang: a gauge, not read
HAS_TTFT = {"vllm": True, "sglang": True, "tgi": False, "triton": True}
HAS_TOKENS = {"vllm": True, "sglang": True, "tgi": True, "triton": False}


@pytest.mark.parametrize(("runtime", "version"), CASES, ids=[f"{r}-{v}" for r, v in CASES])
def test_golden_fixture_is_what_the_stand_in_prints(runtime, version, update_golden):
    path = FIXTURES / f"{runtime}-{version}.prom"
    body = exposition(fixture_state(runtime, version))
    if update_golden:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    assert path.read_bytes() == body, f"{path.name} is stale: run pytest tests/test_serving.py --update-golden"


@pytest.mark.parametrize(("runtime", "version"), CASES, ids=[f"{r}-{v}" for r, v in CASES])
def test_each_runtime_exposition_normalizes_to_the_same_fields(runtime, version):
    body = (FIXTURES / f"{runtime}-{version}.prom").read_bytes()
    detected, f = read_exposition(body, "text/plain; version=0.0.4; charset=utf-8", None)
    assert detected == runtime
    assert f["requests_running"] == 12 and f["requests_waiting"] == 5
    assert f["kv_cache_usage_ratio"] == pytest.approx(0.875, abs=1e-3)
    assert f["kv_cache_capacity_tokens"] == 4096 * 16
    preemptions = None if (runtime, version) == ("sglang", "tpot") else PREEMPTIONS[runtime]
    assert f.get("preemptions_total") == preemptions
    if HAS_TOKENS[runtime]:
        assert f["prompt_tokens_total"] == 123456 and f["generation_tokens_total"] == 65432
    ttft = f.get("time_to_first_token")
    if HAS_TTFT[runtime]:
        assert ttft.count == 900 and ttft.sum == pytest.approx(0.18 * 600 + 0.7 * 300)
        assert ttft.bounds[-1] == math.inf and ttft.counts[-1] == 900
    else:
        assert ttft is None
    if runtime != "triton":
        itl = f["inter_token_latency"]
        assert itl.count == 45000 and itl.sum == pytest.approx(0.021 * 40000 + 0.09 * 5000)


def test_vllm_v1_prefers_the_new_kv_name_and_sums_engines():
    text = (FIXTURES / "vllm-v1.prom").read_text()
    # a second data-parallel engine, emptier than the first; the deprecated gauge says something else
    extra = text.replace('engine="0"', 'engine="1"')
    extra = re.sub(r'^(vllm:kv_cache_usage_perc\{[^}]*\}) .*$', r"\1 0.5", extra, flags=re.M)
    text = re.sub(r'^(vllm:gpu_cache_usage_perc\{[^}]*\}) .*$', r"\1 0.99", text, flags=re.M)
    merged = _merge_expositions(text, extra)
    assert 'vllm:kv_cache_usage_perc{engine="1",' in merged and "} 0.99" in merged
    _, f = read_exposition(merged.encode(), "text/plain", None)
    assert f["requests_running"] == 24 and f["requests_waiting"] == 10
    assert f["kv_cache_usage_ratio"] == pytest.approx(0.875)  # the fullest engine, by the current name
    assert f["kv_cache_capacity_tokens"] == 2 * 4096 * 16
    assert f["time_to_first_token"].count == 1800


def _merge_expositions(a: str, b: str) -> str:
    """Two expositions of the same families as one (samples of b appended under a's HELP/TYPE)."""
    families: dict[str, list[str]] = {}
    order = []
    for text in (a, b):
        current = None
        for line in text.splitlines():
            if line.startswith("# HELP "):
                current = line.split()[2]
                if current not in families:
                    families[current] = [line]
                    order.append(current)
                continue
            if line.startswith("# TYPE "):
                if len(families[current]) == 1:
                    families[current].append(line)
                continue
            families[current].append(line)
    return "\n".join(line for name in order for line in families[name]) + "\n"


# ----------------------------------------------------------------------------------------- servers
class Exposition:
    """A real HTTP server on loopback answering /metrics with whatever ``reply`` holds now."""

    def __init__(self) -> None:
        self.reply: tuple[int, str, bytes] = (200, "text/plain; version=0.0.4; charset=utf-8", b"")
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                status, ctype, body = owner.reply
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RawServer:
    """A loopback socket server whose connections ``behave(conn)`` handles (hang, trickle, flood)."""

    def __init__(self, behave) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/metrics"
        self.behave = behave
        self.stop = threading.Event()
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        try:
            conn.recv(4096)
            self.behave(conn, self.stop)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def served():
    servers = []

    def make(kind=Exposition, *args):
        s = kind(*args)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


def collector(url: str, runtime: str | None = None, **settings) -> ServingCollector:
    profile = {"name": "chat", "kind": "inference", "gpus": [0], "endpoint": url}
    if runtime:
        profile["runtime"] = runtime
    return ServingCollector(SourceContext(settings=settings, workloads=(profile_from_dict(profile),)))


def outcome(c: ServingCollector, after: ServingEndpoint | None = None, limit: float = 20.0) -> ServingEndpoint:
    """The first finished scrape (after ``after``), driving collect() like ticks do; bounded, not timed."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        e = c.collect().endpoints[0]
        if e.up is not None and e is not after:
            return e
        time.sleep(0.02)
    raise AssertionError("no scrape finished")


def body_of(runtime: str, version: str | None = None) -> bytes:
    from headroom.simulation.runtime_metrics import DEFAULT_VERSION

    return exposition(fixture_state(runtime, version or DEFAULT_VERSION[runtime]))


# ------------------------------------------------------------------------------------ good endpoints
def scraped(served, body: bytes):
    """The endpoint the serving collector reads from a real HTTP server answering ``body`` as text format."""
    s = served()
    s.reply = (200, "text/plain; version=0.0.4; charset=utf-8", body)
    c = collector(s.url)
    try:
        return outcome(c)
    finally:
        c.close()


@pytest.mark.parametrize("runtime", list(VERSIONS))
def test_a_runtime_endpoint_is_read_over_http_and_detected(served, runtime):
    e = scraped(served, body_of(runtime))
    assert e.up is True, e.error
    assert e.runtime == runtime and e.requests_running == 12 and e.kv_cache_capacity_tokens == 65536


def test_collect_never_waits_for_a_scrape(served):
    """A hanging endpoint: collect() answers from what it has (nothing yet), the worker is still busy."""
    gate = threading.Event()
    s = served(RawServer, lambda conn, stop: gate.wait(30))
    c = collector(s.url, timeout=10.0)
    try:
        first = c.collect().endpoints[0]
        for _ in range(50):  # many ticks while the only request in flight hangs
            again = c.collect().endpoints[0]
        assert first.up is None and again.up is None and again.error == "no scrape finished yet"
        assert s.connections <= 1, "one request in flight per endpoint"
    finally:
        gate.set()
        c.close()


def test_a_sampler_tick_stays_healthy_with_a_hanging_endpoint(served):
    from headroom.exposition.render import render as render_exposition
    from headroom.sampler import Sampler

    gate = threading.Event()
    s = served(RawServer, lambda conn, stop: gate.wait(30))
    c = collector(s.url, timeout=10.0)
    sampler = Sampler(render=render_exposition, collectors=[c], interval=0.2, collector_timeout=5.0)
    try:
        for _ in range(3):
            snap = sampler.tick()
            result = snap.sample.sources["serving"]
            assert result.ok and "stuck" not in (result.error or "")
        assert b"headroom_collector_success{collector=\"serving\"} 1" in snap.exposition
    finally:
        gate.set()
        sampler.stop()


# ------------------------------------------------------------------------------------- bad endpoints
def test_connection_refused(served):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    c = collector(f"http://127.0.0.1:{port}/metrics")
    try:
        e = outcome(c)
    finally:
        c.close()
    assert e.up is False and e.error.startswith("cannot connect") and "refused" in e.error.lower()


def test_accepts_and_never_answers(served):
    s = served(RawServer, lambda conn, stop: stop.wait(30))
    c = collector(s.url, timeout=0.3)
    try:
        e = outcome(c)
    finally:
        c.close()
    assert e.up is False and e.error == "no answer within 300 ms (collectors.serving.timeout)"


def _trickle(conn, stop):
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n")
    for _ in range(100):  # 10 s of one line every 100 ms
        if stop.wait(0.1):
            return
        conn.sendall(b"vllm:num_requests_running 1\n")


def test_a_ten_second_trickle_is_cut_at_the_deadline(served):
    s = served(RawServer, _trickle)
    c = collector(s.url, timeout=0.3)
    try:
        e = outcome(c)
    finally:
        c.close()
    assert e.up is False and e.error.startswith("answer incomplete after ")
    assert e.error.endswith("within 300 ms (collectors.serving.timeout)")


def test_a_failure_that_differs_only_in_its_numbers_is_logged_once(served):
    sizes = iter(range(9 * 2**20, 10 * 2**20))

    def oversized(conn, stop):  # each answer announces a different size over the cap
        conn.sendall(f"HTTP/1.0 200 OK\r\nContent-Length: {next(sizes)}\r\n\r\n".encode())

    s = served(RawServer, oversized)
    c = collector(s.url)
    try:
        with structlog.testing.capture_logs() as logs:
            first = e = outcome(c)
            for _ in range(3):
                e = outcome(c, after=e)
    finally:
        c.close()
    assert first.error != e.error and e.error.endswith("over the 8 MiB cap (collectors.serving.max_body)")
    assert len([x for x in logs if x["event"] == "serving_endpoint_down"]) == 1


def _flood(with_length: bool):
    def behave(conn, stop):
        size = 100 * 2**20
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
        head += f"Content-Length: {size}\r\n".encode() if with_length else b""
        conn.sendall(head + b"\r\n")
        line = b"vllm:num_requests_running 1\n" * 2000
        sent = 0
        while sent < size and not stop.is_set():
            conn.sendall(line)
            sent += len(line)
    return behave


@pytest.mark.parametrize("with_length", [True, False], ids=["content-length", "until-close"])
def test_a_100_mib_body_is_refused_at_the_cap(served, with_length):
    s = served(RawServer, _flood(with_length))
    c = collector(s.url, timeout=5.0)
    try:
        e = outcome(c)
    finally:
        c.close()
    assert e.up is False
    if with_length:
        assert e.error == "body of 104857600 bytes is over the 8 MiB cap (collectors.serving.max_body)"
    else:
        assert e.error == "body over the 8 MiB cap (collectors.serving.max_body)"


@pytest.mark.parametrize(("status", "ctype", "body", "message"), [
    (500, "text/html", b"<html><body><h1>500 Internal Server Error</h1></body></html>",
     "HTTP 500 Internal Server Error"),
    (200, "text/html; charset=utf-8", b"<!DOCTYPE html><html><head><title>Login</title></head></html>",
     "answered an HTML page (text/html), not a Prometheus exposition; is the endpoint the runtime's /metrics?"),
    (401, "text/plain", b"unauthorized",
     "HTTP 401 Unauthorized: the endpoint wants credentials; headroom sends none (expose /metrics without auth "
     "on a local address)"),
    (403, "text/plain", b"forbidden",
     "HTTP 403 Forbidden: the endpoint wants credentials; headroom sends none (expose /metrics without auth "
     "on a local address)"),
    (200, "text/plain", b"vllm:num_requests_running 1\n\xff\xfe broken\n",
     "body is not UTF-8 text (byte 0xff at offset 28)"),
    (200, "text/plain", b"vllm:num_requests_running{model_name=\"m\" 1\n",
     None),
], ids=["html-500", "html-200", "401", "403", "non-utf8", "malformed"])
def test_bad_answers_get_a_clear_status(served, status, ctype, body, message):
    s = served()
    s.reply = (status, ctype, body)
    c = collector(s.url)
    try:
        e = outcome(c)
    finally:
        c.close()
    assert e.up is False
    if message is None:
        assert e.error.startswith("not a valid Prometheus text exposition: ")
    else:
        assert e.error == message
    assert "Traceback" not in e.error


def test_a_prometheus_exposition_that_is_not_a_serving_runtime(served):
    from prometheus_client import CollectorRegistry, Counter, generate_latest
    from prometheus_client.platform_collector import PlatformCollector

    registry = CollectorRegistry()
    PlatformCollector(registry=registry)
    Counter("http_requests", "Requests.", registry=registry).inc()
    s = served()
    s.reply = (200, "text/plain; version=0.0.4; charset=utf-8", generate_latest(registry))
    c = collector(s.url)
    try:
        e = outcome(c)
    finally:
        c.close()
    assert e.up is False
    assert e.error == ("not a serving runtime's metrics: 3 metric families, none from vLLM (vllm:/ray_vllm_), SGLang "
                       "(sglang:/ray_sglang_), TGI (tgi_), Triton (nv_inference_/nv_trt_llm_), llama.cpp (llamacpp:)")


def test_a_runtime_switch_mid_run_is_logged_and_followed(served):
    s = served()
    s.reply = (200, "text/plain", body_of("vllm"))
    c = collector(s.url)
    try:
        with structlog.testing.capture_logs() as logs:
            first = outcome(c)
            s.reply = (200, "text/plain", body_of("sglang"))
            e = first
            for _ in range(200):
                e = outcome(c, after=e)
                if e.runtime == "sglang":
                    break
    finally:
        c.close()
    assert first.runtime == "vllm" and e.up and e.runtime == "sglang"
    changed = [x for x in logs if x["event"] == "serving_runtime_changed"]
    assert changed and changed[0]["before"] == "vllm" and changed[0]["after"] == "sglang"


def test_a_declared_runtime_that_the_endpoint_contradicts_is_down(served):
    s = served()
    s.reply = (200, "text/plain", body_of("sglang"))
    c = collector(s.url, runtime="vllm")
    try:
        with structlog.testing.capture_logs() as logs:
            e = outcome(c)
    finally:
        c.close()
    assert e.up is False and e.error == "endpoint serves SGLang metrics but the profile declares runtime vllm"
    down = [x for x in logs if x["event"] == "serving_endpoint_down"]
    assert down and down[0]["error"] == e.error


# ------------------------------------------------------------------------------------------ golden
GOLDEN = Path(__file__).resolve().parent / "golden" / "serving.prom"
# the vLLM profile of the serving situations, its endpoint filled in per test
SERVING_CONFIG = VLLM.replace("http://127.0.0.1:8000/metrics", "URL")


def render_serving_golden(served) -> str:
    """Two scrapes of a vLLM fixture one simulated second apart through the real sampler, analysis and
    renderer: the workload's serving families (durations filtered) as they appear in /metrics."""
    from headroom.analysis.pipeline import Analysis
    from headroom.config import check_config_text
    from headroom.exposition.render import render as render_exposition
    from headroom.sampler import Sampler
    from headroom.simulation import ManualClock

    s = served()
    a = fixture_state("vllm", "v1-itl")
    s.reply = (200, "text/plain; version=0.0.4; charset=utf-8", exposition(a))
    config = check_config_text(SERVING_CONFIG.replace("URL", s.url), "c.yaml")
    c = ServingCollector(SourceContext(workloads=tuple(config.workloads)))
    clock = ManualClock(1000.0)
    sampler = Sampler(render=render_exposition, collectors=[c], interval=1.0, collector_timeout=5.0, analyse=Analysis(config), clock=clock,
                      wall_clock=lambda: 1_700_000_000.0 + clock() - 1000.0)
    try:
        sampler.tick()  # wakes the first scrape
        outcome(c)
        b = fixture_state("vllm", "v1-itl")
        b.running, b.preemptions, b.generation_tokens = 13, 19, 70000
        b.observe("ttft", 2.0, 100)  # the window's 100 new requests were slow
        clock.advance(1.0)
        assert sampler.tick().sample.sources["serving"].data.endpoints[0].requests_running == 12
        s.reply = (200, "text/plain; version=0.0.4; charset=utf-8", exposition(b))
        deadline = time.monotonic() + 20
        while c.collect().endpoints[0].requests_running != 13 and time.monotonic() < deadline:
            time.sleep(0.02)
        clock.advance(1.0)
        body = sampler.tick().exposition.decode()
    finally:
        sampler.stop()
    keep = ("headroom_workload_serving_", "headroom_workload_kv_", "headroom_workload_requests_",
            "headroom_workload_preemptions", "headroom_workload_prompt_tokens", "headroom_workload_generation_tokens",
            "headroom_workload_time_to_first_token", "headroom_workload_inter_token_latency")
    lines = []
    for line in body.splitlines():
        name = line.split()[2] if line.startswith("#") else line.split("{")[0].split()[0]
        if name.startswith(keep) and "scrape_duration" not in name:
            lines.append(line)
    return "\n".join(lines) + "\n"


def test_serving_golden_exposition(served, update_golden):
    body = render_serving_golden(served)
    if update_golden or not GOLDEN.exists():
        GOLDEN.write_text(body)
    assert body == GOLDEN.read_text(), "serving exposition changed: pytest tests/test_serving.py --update-golden"
    # the window saw 100 requests at 2 s: its TTFT p50 sits in vLLM's (1, 2.5] bucket
    assert 'headroom_workload_time_to_first_token_seconds{workload="chat",percentile="p50"} 1.75' in body
    assert 'headroom_workload_kv_capacity_tokens{workload="chat",source="runtime"} 65536' in body


def test_promtool_accepts_the_serving_golden_file():
    import shutil
    import subprocess

    assert shutil.which("promtool"), "promtool missing: `make test` installs Debian's prometheus package"
    r = subprocess.run(["promtool", "check", "metrics"], input=GOLDEN.read_bytes(), capture_output=True, timeout=30)
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


@pytest.mark.parametrize(("slo", "message"), [
    ({"ttft_p96": "1s"}, "slo.ttft_p96: unknown key (did you mean 'ttft_p99'?)"),
    ({"itl_p95": "fast"}, "slo.itl_p95: invalid duration 'fast'"),
    ({"ttft_p95": 0}, "slo.ttft_p95: must be more than 0"),
])
def test_bad_latency_objectives_are_named(slo, message):
    from headroom.workload.profiles import ProfileErrors

    with pytest.raises(ProfileErrors) as err:
        profile_from_dict({"name": "chat", "kind": "inference", "gpus": [0], "endpoint": "http://h:8000/metrics",
                           "slo": slo})
    assert any(str(e).startswith(message) for e in err.value.errors), [str(e) for e in err.value.errors]


def test_objectives_need_an_endpoint_and_parse_to_seconds():
    from headroom.workload.profiles import ProfileErrors

    p = profile_from_dict({"name": "chat", "kind": "inference", "gpus": [0], "endpoint": "http://h:8000/metrics",
                           "slo": {"ttft_p95": "500ms", "itl_p99": 0.05}})
    assert p.slo == (("ttft_p95", 0.5), ("itl_p99", 0.05))
    with pytest.raises(ProfileErrors) as err:
        profile_from_dict({"name": "chat", "kind": "inference", "gpus": [0], "slo": {"ttft_p95": "1s"}})
    assert [str(e) for e in err.value.errors] == [
        "slo: latency objectives are read from the serving runtime: set endpoint (its /metrics URL), or a "
        "match.cmdline rule that finds the runtime's process (its --host/--port)"]
    detected = profile_from_dict({"name": "chat", "kind": "inference", "match": {"cmdline": "vllm serve"},
                                  "slo": {"ttft_p95": "1s"}})
    assert detected.slo == (("ttft_p95", 1.0),)


def test_the_python_client_layout_is_the_python_clients():
    """vLLM and SGLang print through prometheus-client: the fixtures' layout (label order, _total and _created
    families, bucket/count/sum order, number format) must be byte for byte what the library prints."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    # private: the simulated runtime's text metric, the one the test builds from
    from headroom.simulation.runtime_metrics import Hist, _Text

    registry = CollectorRegistry()
    labels = {"model_name": "m", "engine": "0"}
    Gauge("vllm:num_requests_running", "Running.", list(labels), registry=registry).labels(**labels).set(3)
    c = Counter("vllm:num_preemptions", "Preempted.", list(labels), registry=registry).labels(**labels)
    c.inc(4)
    h = Histogram("vllm:e2e_request_latency_seconds", "E2E.", list(labels), buckets=(0.5, 1.0),
                  registry=registry).labels(**labels)
    for v in (0.2, 0.7, 0.7, 3.0):
        h.observe(v)
    # creation stamps are the clock's: compare them as one fixed value, printed the library's way
    expected = re.sub(r"(_created\{[^}]*\}) \S+", r"\1 1.7e+09", generate_latest(registry).decode())

    t = _Text(1.7e9)
    t.gauge("vllm:num_requests_running", "Running.", labels, 3)
    t.counter("vllm:num_preemptions", "Preempted.", labels, 4)
    hist = Hist((0.5, 1.0))
    for v in (0.2, 0.7, 0.7, 3.0):
        hist.observe(v)
    t.histogram("vllm:e2e_request_latency_seconds", "E2E.", labels, hist)
    assert t.text() == expected


# --------------------------------------------------------------------------------------- detection
@pytest.mark.parametrize(("argv", "expected"), [
    ("vllm serve meta-llama/Llama-3.1-8B-Instruct --host 0.0.0.0 --port 8001", ("vllm", "http://127.0.0.1:8001/metrics")),
    ("/opt/venv/bin/vllm serve m", ("vllm", "http://127.0.0.1:8000/metrics")),
    ("python3 -m vllm.entrypoints.openai.api_server --model m --port=9000 --host 10.1.2.3",
     ("vllm", "http://10.1.2.3:9000/metrics")),
    ("python -m sglang.launch_server --model-path m --enable-metrics", ("sglang", "http://127.0.0.1:30000/metrics")),
    ("python -m sglang.launch_server --model-path m --port 31000 --host ::", ("sglang", "http://127.0.0.1:31000/metrics")),
    ("text-generation-launcher --model-id m --port 80 --prometheus-port 9100", ("tgi", "http://127.0.0.1:9100/metrics")),
    ("/usr/local/bin/text-generation-router --port 8080", ("tgi", "http://127.0.0.1:9000/metrics")),
    ("tritonserver --model-repository /models --metrics-port 8102 --metrics-address fd00::5",
     ("triton", "http://[fd00::5]:8102/metrics")),
    ("python train.py --port 8000", None),
    ("vllm serve m --port eighty", None),
    ("vllm serve m --port 70000", None),
], ids=lambda v: v.replace(" ", "_").replace("/", "|") if isinstance(v, str) else "")
def test_the_endpoint_is_read_from_a_runtimes_command_line(argv, expected):
    from headroom.sources.serving import endpoint_from_argv

    assert endpoint_from_argv(argv.split()) == expected


SERVE_FILE = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
body = open(sys.argv[sys.argv.index("--body") + 1], "rb").read()
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), H).serve_forever()
"""


def test_a_profile_without_endpoint_finds_its_runtime_by_command_line(tmp_path):
    """A real process whose command line reads `... vllm serve MODEL --port P` and serves vLLM metrics on P:
    the profile's match.cmdline finds it and the collector scrapes the port its flags name."""
    import subprocess
    import sys

    from conftest import free_port

    port = free_port()
    body = tmp_path / "metrics.prom"
    body.write_bytes(body_of("vllm"))
    proc = subprocess.Popen([sys.executable, "-c", SERVE_FILE, "vllm", "serve", "detect-test-model",
                             "--port", str(port), "--body", str(body)])
    profile = profile_from_dict({"name": "chat", "kind": "inference", "match": {"cmdline": "detect-test-model"}})
    c = ServingCollector(SourceContext(settings={"detect_interval": 3600}, workloads=(profile,)))
    try:
        deadline = time.monotonic() + 20
        found = {}
        while not found and time.monotonic() < deadline:  # the process may still be starting
            found = c.detect()
            time.sleep(0.05)
        assert found == {"chat": f"http://127.0.0.1:{port}/metrics"}
        e = outcome(c)
        while not e.up and time.monotonic() < deadline:  # until its server listens
            e = outcome(c, after=e)
        assert e.up and e.runtime == "vllm" and e.endpoint == f"http://127.0.0.1:{port}/metrics"
    finally:
        c.close()
        proc.kill()
        proc.wait()


def test_a_profile_without_a_runtime_process_gets_no_endpoint():
    profile = profile_from_dict({"name": "chat", "kind": "inference", "match": {"cmdline": "no-such-process-xyz"}})
    c = ServingCollector(SourceContext(settings={"detect_interval": 3600}, workloads=(profile,)))
    try:
        assert c.detect() == {}
        assert c.collect().endpoints == ()
    finally:
        c.close()


def test_training_profiles_are_never_searched_for_an_endpoint():
    """A trainer whose rule happens to match a `vllm serve` process still gets no serving endpoint."""
    profile = profile_from_dict({"name": "trainer", "kind": "training", "match": {"cmdline": "."}})
    c = ServingCollector(SourceContext(settings={"detect_interval": 3600}, workloads=(profile,)))
    try:
        # private: the detector is made lazily: that none was made is what is tested
        assert c.detect() == {} and c._detector is None
    finally:
        c.close()


def test_under_simulation_a_stand_ins_url_stands_in_for_detection():
    from headroom.simulation import load_scenario

    scenario = load_scenario("serving-idle")
    profile = profile_from_dict({"name": "chat", "kind": "inference", "match": {"cmdline": "vllm serve"}})
    c = ServingCollector(SourceContext(settings={"detect_interval": 3600}, workloads=(profile,), scenario=scenario))
    try:
        assert c.detect() == {"chat": scenario.serving_endpoints()["chat"]}
    finally:
        c.close()


# ------------------------------------------------------------------------------------ the real agent
def test_the_agent_reports_a_bad_endpoint_in_status_log_and_metrics(tmp_path, agent_factory, served):
    """`headroom run` with one good and one refusing endpoint: the bad one is down with its reason in
    /api/v1/status and the log, the good one is read, and the scrape and the collector stay healthy."""
    import json

    from conftest import free_port, http_get

    good = served()
    good.reply = (200, "text/plain; version=0.0.4", body_of("sglang"))
    refused = f"http://127.0.0.1:{free_port()}/metrics"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"""
agent: {{sample_interval: 200ms}}
workloads:
  - {{name: good, kind: inference, gpus: [0], endpoint: "{good.url}"}}
  - {{name: bad, kind: inference, gpus: [1], endpoint: "{refused}"}}
""")
    agent = agent_factory("--config.file", str(cfg), "--simulate", "healthy")
    deadline = time.monotonic() + 20
    doc = {}
    while time.monotonic() < deadline:
        doc = json.loads(http_get(agent.url + "/api/v1/status")[2])
        serving = {w["name"]: w.get("serving") or {} for w in doc["workloads"]}
        if serving.get("good", {}).get("up") and serving.get("bad", {}).get("up") is False:
            break
        time.sleep(0.2)
    serving = {w["name"]: w.get("serving") for w in doc["workloads"]}
    assert serving["llm"] is None  # the scenario's own profile: no endpoint, and its stand-in serves none
    assert serving["good"]["up"] is True and serving["good"]["runtime"] == "sglang"
    assert serving["bad"]["up"] is False and serving["bad"]["error"].startswith("cannot connect: ")
    assert doc["collectors"]["serving"]["ok"] is True
    _, _, body = http_get(agent.url + "/metrics")
    text = body.decode()
    assert 'headroom_workload_serving_up{workload="good"} 1' in text
    assert 'headroom_workload_serving_up{workload="bad"} 0' in text
    assert 'headroom_workload_requests_running{workload="good"} 12' in text
    page = http_get(agent.url + "/")[2].decode()  # the landing page's workload cards say the same
    assert '<p class="serving">sglang: KV cache <b>88 %</b> used, <b>12</b> running, <b>5</b> waiting' in page
    assert f'<p class="serving warn">Serving endpoint {refused} <b>down</b>: cannot connect: ' in page
    _, err = agent.stop()
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    down = [e for e in events if e.get("event") == "serving_endpoint_down"]
    assert [e["workload"] for e in down] == ["bad"] and down[0]["error"] == serving["bad"]["error"]
    assert "Traceback" not in err


def test_a_serving_sample_survives_a_recording():
    """--record writes the serving collector's sample and replay reads it back equal (+Inf bounds too)."""
    import json

    from headroom.record import decode_sample, encode_sample
    from headroom.samples import Histogram, Sample, ServingSample, SourceResult

    h = Histogram((0.1, math.inf), (1.0, 2.0), 0.5, 2.0)
    e = ServingEndpoint("chat", "http://h:8000/metrics", True, runtime="vllm", requests_running=3.0,
                        kv_cache_usage_ratio=0.5, time_to_first_token=h)
    down = ServingEndpoint("batch", "http://h:9000/metrics", False, error="cannot connect: Connection refused")
    sample = Sample(1.0, 2.0, {"serving": SourceResult("serving", True, 0.001, ServingSample((e, down)))})
    assert decode_sample(json.loads(encode_sample(sample))).sources["serving"].data == ServingSample((e, down))


def test_a_gzip_answer_is_read_and_a_gzip_bomb_is_capped(served):
    """Servers should honour Accept-Encoding: identity; one that gzips anyway is read, within the cap."""
    import gzip

    def gzipped(payload: bytes):
        data = gzip.compress(payload, compresslevel=1)  # once, before any request

        def behave(conn, stop):
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\n"
                         + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        return behave

    good = served(RawServer, gzipped(body_of("vllm")))
    bomb = served(RawServer, gzipped(b"#" * (64 * 2**20)))  # 64 MiB of comments in ~290 KiB on the wire
    a, b = collector(good.url), collector(bomb.url)
    try:
        ea, eb = outcome(a), outcome(b)
    finally:
        a.close()
        b.close()
    assert ea.up is True and ea.requests_running == 12
    assert eb.up is False and eb.error == "body over the 8 MiB cap once decompressed (collectors.serving.max_body)"


# ------------------------------------------------------------------------- parsing shortcuts (speed)
def messy(body: bytes) -> bytes:
    """The same samples in the worst legal order: every sample line reversed (families split apart, buckets
    out of order), other families' samples and comments (one saying TYPE in its text) between each, and a
    timestamp after some values."""
    samples = [line for line in body.decode().splitlines() if line and not line.startswith("#")]
    out = ["# HELP http_requests_total Requests. TYPE is a word here too", "# TYPE http_requests_total counter"]
    for i, line in enumerate(reversed(samples)):
        out.append(line + (" 1700000000000" if i % 3 == 0 else ""))
        out.append(f'http_requests_total{{handler="/v1/x{i}"}} {i}.0')
        out.append("# a comment between the samples of one family")
        out.append(f"process_open_fds {i}")
    return ("\n".join(out) + "\n").encode()


@pytest.mark.parametrize("runtime", list(VERSIONS))
def test_families_split_and_interleaved_with_others_parse_as_the_tidy_exposition(served, runtime):
    tidy = read_exposition(body_of(runtime), "text/plain", None)
    assert read_exposition(messy(body_of(runtime)), "text/plain", None) == tidy
    e = scraped(served, messy(body_of(runtime)))
    assert e.up is True, e.error
    assert e.runtime == runtime and e.requests_running == 12 and e.kv_cache_capacity_tokens == 65536


def test_an_exposition_without_type_lines_counts_its_families_by_sample_name(served):
    s = served()
    s.reply = (200, "text/plain", b"process_open_fds 7\nhttp_requests_total{code=\"200\"} 3\n"
                                  b"http_requests_total{code=\"500\"} 1\n_private_gauge 2\n\n")
    c = collector(s.url)
    try:
        e = outcome(c)
    finally:
        c.close()
    assert e.up is False
    assert e.error.startswith("not a serving runtime's metrics: 3 metric families, none from vLLM")


def test_a_runtime_sample_with_an_unusual_name_still_counts_for_detection():
    """Names the fast path does not take (a leading blank, a character outside the name grammar) go the
    general way: counted for their runtime, read when they are a family the normalizer reads."""
    body = body_of("vllm").decode().replace("vllm:num_requests_running{", "  vllm:num_requests_running{", 1)
    runtime, fields = read_exposition(body.encode() + b"vllm:odd-name 1\n", "text/plain", None)
    assert runtime == "vllm" and fields == read_exposition(body_of("vllm"), "text/plain", None)[1]


def test_a_series_seen_before_reads_its_new_value_and_its_garbage_like_a_new_one():
    """The second scrape of an endpoint looks its series up by the line up to the value (parse()'s cache):
    the values it reads are the new ones, and a garbled value reads as it would in a first scrape."""
    series: dict = {}
    first = exposition(fixture_state("vllm", "v1"))
    read_exposition(first, "text/plain", None, series)
    assert series, "the first scrape remembers its series"
    later_state = fixture_state("vllm", "v1")
    later_state.running, later_state.waiting = 30, 9
    later = exposition(later_state)
    assert read_exposition(later, "text/plain", None, series) == read_exposition(later, "text/plain", None)
    garbled = re.sub(rb"(vllm:num_requests_running\{[^\n]*\}) \S+", rb"\1 many", later, count=1)
    errors = []
    for cache in (series, {}):
        with pytest.raises(ScrapeError) as caught:
            read_exposition(garbled, "text/plain", None, cache)
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and errors[0].startswith("not a valid Prometheus text exposition")
    cut = re.sub(rb"(vllm:num_requests_running\{[^\n]*\}) \S+", rb"\1", later, count=1)
    for cache in (series, {}):  # no value: refused either way (the parser's words differ, as before)
        with pytest.raises(ScrapeError, match=r"^not a valid Prometheus text exposition: "):
            read_exposition(cut, "text/plain", None, cache)


def test_the_simulated_runtime_prints_no_traceback_when_a_client_gives_up(capfd):
    """Issue 29: a scraper that resets its connection before reading the answer made socketserver print a
    BrokenPipe / ConnectionReset traceback on the agent's stderr (the stand-in serves in the agent's process)."""
    import socket
    import struct
    from dataclasses import asdict

    from headroom.simulation.runtime_metrics import serve
    from headroom.simulation.scenario import Signal, constant

    from conftest import free_port, http_get

    port = free_port()
    spec = {"runtime": "vllm", "version": "v1-itl", "port": port, "kv_blocks": 4096, "block_size": 16,
            "model": "m", "signals": {k: asdict(constant(v)) for k, v in {"running": 3, "kv_usage": 0.5}.items()}}
    server, _ = serve(spec, Signal)
    try:
        for i in range(20):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
                if i % 2:
                    c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                else:
                    c.sendall(b"GET /metr")  # gave up mid-request
        status, _, body = http_get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and b"vllm:num_requests_running" in body
        time.sleep(0.5)  # the handler threads of the reset connections have finished
    finally:
        server.shutdown()
        server.server_close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Error" not in err, err[-2000:]


# -------------------------------------------- vLLM 0.2x families and vLLM under Ray Serve LLM (renamed families)
# The families vllm 0.32 adds, as its registry prints them: names, labels and label values from its released
# vllm/v1/metrics/loggers.py (num_requests_waiting_by_reason 547-566 with reason capacity|deferred, engine_sleep_state
# 593-616 with sleep_state awake|weights_offloaded|discard_all, admission_rejections 847-859 with model_name and
# reason max_num_queued_reqs|max_num_queued_tokens and no engine label, request_queue_time_seconds 970-978); the
# values are this test's (not a captured exposition: the real ones quoted in docs/serving.md carry elided labels).
VLLM_032_FAMILIES = """\
# HELP vllm:num_requests_waiting_by_reason Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",reason="capacity"} 3.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",reason="deferred"} 2.0
# HELP vllm:engine_sleep_state Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.
# TYPE vllm:engine_sleep_state gauge
vllm:engine_sleep_state{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",sleep_state="awake"} AWAKE
vllm:engine_sleep_state{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",sleep_state="weights_offloaded"} L1
vllm:engine_sleep_state{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",sleep_state="discard_all"} L2
# HELP vllm:admission_rejections_total Number of admission attempts rejected by a queue limit, by reason.
# TYPE vllm:admission_rejections_total counter
vllm:admission_rejections_total{model_name="meta-llama/Llama-3.1-8B-Instruct",reason="max_num_queued_reqs"} 7.0
vllm:admission_rejections_total{model_name="meta-llama/Llama-3.1-8B-Instruct",reason="max_num_queued_tokens"} 4.0
# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{engine="0",le="0.3",model_name="meta-llama/Llama-3.1-8B-Instruct"} 100.0
vllm:request_queue_time_seconds_bucket{engine="0",le="0.5",model_name="meta-llama/Llama-3.1-8B-Instruct"} 150.0
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 160.0
vllm:request_queue_time_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 160.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 48.5
"""


@pytest.mark.parametrize(("awake", "l1", "l2", "level"), [("1.0", "0.0", "0.0", 0), ("0.0", "1.0", "0.0", 1),
                                                          ("0.0", "0.0", "1.0", 2)])
def test_vllm_032_families_are_read(awake, l1, l2, level):
    """Requests deferred (not waiting for capacity), admission rejections summed over reasons, the queue-time
    histogram and the sleep level, beside the V1 families every vLLM prints."""
    extra = VLLM_032_FAMILIES.replace("AWAKE", awake).replace("L1", l1).replace("L2", l2)
    body = (FIXTURES / "vllm-v1-itl.prom").read_text() + extra
    detected, f = read_exposition(body.encode(), "text/plain", None)
    assert detected == "vllm" and f["requests_waiting"] == 5
    assert f["requests_waiting_deferred"] == 2.0
    assert f["admission_rejections_total"] == 11.0
    q = f["request_queue_time"]
    assert (q.bounds, q.counts, q.count, q.sum) == ((0.3, 0.5, math.inf), (100.0, 150.0, 160.0), 160.0, 48.5)
    assert f["sleep_level"] == level
    _old, g = read_exposition((FIXTURES / "vllm-v1-itl.prom").read_bytes(), "text/plain", None)
    assert (g["requests_waiting_deferred"], g["admission_rejections_total"], g["request_queue_time"],
            g["sleep_level"]) == (None, None, None, None)  # absent where the release does not export them, never 0


# One line of a real Ray Serve LLM exposition (Ray 2.52.0, vLLM with RayPrometheusStatLogger), quoted verbatim in
# https://github.com/vllm-project/vllm/pull/24267 ("curl localhost:8085 | grep vllm_time_to"): the label set Ray adds.
RAY_LINE = ('ray_vllm_time_to_first_token_seconds_count{Component="core_worker",NodeAddress="10.1.113.171",'
            'ReplicaId="3r4e76ag",SessionName="session_2025-12-01_11-05-34_460418_3579",Version="2.52.0",'
            'WorkerId="6f8b9bc4ba0fda1ef6769ce262129be2b522f90a31a593ec37379267",engine="0",model_name="qwen-0.5b"} 266.0')


def _as_ray(text: str, runtime: str = "vllm") -> str:
    """An exposition as Ray Serve LLM re-exports it: vLLM's RayPrometheusStatLogger replaces every character outside
    [a-zA-Z0-9_] of a name by "_" (vllm/v1/metrics/ray_wrappers.py, _get_sanitized_opentelemetry_name), Ray's
    metrics agent prefixes "ray_", and Ray's own labels come first (those of RAY_LINE)."""
    ray_labels = RAY_LINE[RAY_LINE.index("{") + 1:RAY_LINE.index(",engine=")]
    out = []
    for line in text.splitlines():
        line = re.sub(rf"^(# (?:HELP|TYPE) ){runtime}:", rf"\1ray_{runtime}_", line)
        line = re.sub(rf"^{runtime}:", f"ray_{runtime}_", line)
        if line.startswith(f"ray_{runtime}_"):
            line = line.replace("{", "{" + ray_labels + ",", 1) if "{" in line else line
        out.append(line)
    return "\n".join(out) + "\n"


def test_vllm_under_ray_serve_is_read_as_vllm():
    """ray_vllm_num_requests_running{Component=...,ReplicaId=...,engine="0",...}: the same fields as vLLM's own
    exposition, detected as vLLM (a profile declaring runtime vllm accepts it); the real Ray line is detected too."""
    own = (FIXTURES / "vllm-v1-itl.prom").read_text()
    ray = _as_ray(own)
    assert "ray_vllm_num_requests_running{Component=" in ray and not re.search(r"^vllm:", ray, flags=re.M)
    _, mine = read_exposition(own.encode(), "text/plain", None)
    detected, f = read_exposition(ray.encode(), "text/plain", "vllm")
    assert detected == "vllm"
    assert f == mine and f["requests_running"] == 12 and f["kv_cache_capacity_tokens"] == 4096 * 16
    assert f["time_to_first_token"].count == 900
    assert read_exposition((RAY_LINE + "\n").encode(), "text/plain", None)[0] == "vllm"


def test_sglang_under_ray_serve_is_read_as_sglang():
    """SGLang's Ray metric backend (python/sglang/srt/observability/ray_wrappers.py) sanitizes names as vLLM's does:
    ray_sglang_num_running_reqs{...,ReplicaId=...} is sglang:num_running_reqs."""
    own = (FIXTURES / "sglang-itl.prom").read_text()
    ray = _as_ray(own, "sglang")
    assert "ray_sglang_num_running_reqs{Component=" in ray and not re.search(r"^sglang:", ray, flags=re.M)
    _, mine = read_exposition(own.encode(), "text/plain", None)
    detected, f = read_exposition(ray.encode(), "text/plain", "sglang")
    assert detected == "sglang" and f == mine and f["requests_running"] == 12 and f["preemptions_total"] == 17


def test_the_benchmarks_exposition_is_of_real_size_and_read_right():
    """bench/serving.py prices a scrape on a vLLM 0.32 exposition of the size real ones have (48-52 KiB, issue 27),
    every family it adds read as the runtime prints it."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.serving import vllm_032_body

    body = vllm_032_body()
    assert 48 * 1024 <= len(body) <= 53 * 1024
    runtime, f = read_exposition(body, "text/plain", "vllm")
    assert runtime == "vllm" and f["requests_running"] == 40 and f["requests_waiting"] == 3
    assert (f["requests_waiting_deferred"], f["sleep_level"], f["admission_rejections_total"]) == (0.0, 0, 0.0)
    assert f["request_queue_time"].count == 20000 and f["inter_token_latency"].count == 3_000_000


# ------------------------------------------------------------------ real expositions, one per runtime generation
# tests/fixtures/serving/real/: lines from public issues and pull requests, each file naming its source URL and
# version in its header, trimmed to the complete lines quoted there. Every field the mapping reads is asserted: the
# value it has there, or absent (None) where the exposition does not carry it.
REAL = {
    "vllm-v0-0.5.3.prom": ("vllm", dict(requests_waiting=0.0)),
    "vllm-v1-2025-03.prom": ("vllm", dict(requests_running=0.0, requests_waiting=0.0, kv_cache_usage_ratio=0.0,
                                          process_start_time_seconds=1.74262400557e9)),
    "vllm-0.10.prom": ("vllm", dict(kv_cache_usage_ratio=9.75010481363281e-06)),
    "vllm-0.2x-metal.prom": ("vllm", dict(requests_running=0.0, requests_waiting=6.0, kv_cache_usage_ratio=0.0)),
    "vllm-ray-serve.prom": ("vllm", {}),  # a _count alone: no histogram without its buckets
    "sglang-0.3.prom": ("sglang", dict(kv_cache_capacity_tokens=570979.0, prompt_tokens_total=230794.0)),
    "sglang-0.3-branch.prom": ("sglang", dict(requests_running=0.0, requests_waiting=0.0, kv_cache_usage_ratio=0.0)),
    "sglang-0.4.prom": ("sglang", dict(requests_running=0.0, kv_cache_usage_ratio=0.0)),
    "sglang-0.5.1.prom": ("sglang", dict(requests_running=1.0, kv_cache_usage_ratio=0.0)),
    "llamacpp-2025-01.prom": ("llama.cpp", dict(requests_running=0.0, requests_waiting=0.0)),
    "llamacpp-2025-06.prom": ("llama.cpp", dict(prompt_tokens_total=143.0, generation_tokens_total=673.0)),
    "triton-trtllm-23.11.prom": ("triton", dict(requests_running=0.0, kv_cache_usage_ratio=1 / 6239,
                                                kv_cache_capacity_tokens=6239.0 * 64)),
    "triton-2.x.prom": ("triton", {}),  # without the TensorRT-LLM backend: no KV, running or pending figures
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_expositions_are_read_right(name):
    path = FIXTURES / "real" / name
    head = [line for line in path.read_text().splitlines() if line.startswith("# ") and not line.startswith(
        ("# HELP", "# TYPE"))]
    assert head[0].startswith("# source: https://github.com/") and any(h.startswith("# version: ") for h in head)
    assert any(h.startswith(("# trimmed: ", "# whole: ")) for h in head)  # says whether it is all of the answer
    runtime, expected = REAL[name]
    detected, f = read_exposition(path.read_bytes(), "text/plain; version=0.0.4", None)
    assert detected == runtime
    read = {k: v for k, v in f.items() if v is not None}
    assert read == expected


def test_every_real_exposition_is_asserted():
    assert sorted(p.name for p in (FIXTURES / "real").glob("*.prom")) == sorted(REAL)


# ------------------------------------------------------------------------- Ollama: its /api/ps, not a /metrics
def ollama_ps() -> bytes:
    """The real /api/ps answer of tests/fixtures/serving/real/ollama-ps.txt, without the file's header lines."""
    text = (FIXTURES / "real" / "ollama-ps.txt").read_text()
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("# ")).encode()


def test_ollama_api_ps_is_read_as_its_resident_models():
    """Ollama has no Prometheus endpoint; a profile declaring runtime ollama reads its /api/ps: the models it holds
    loaded and their bytes in all and in GPU memory (the real answer of nirmato-ollama#13)."""
    runtime, f = read_exposition(ollama_ps(), "application/json; charset=utf-8", "ollama")
    assert runtime == "ollama"
    assert f == dict(resident_models=("gemma3:latest",), resident_bytes=5964735424.0, resident_vram_bytes=5964735424.0)
    # size_vram left out when 0 (ollama#4840): all on the CPU; a model partly offloaded adds what it has in VRAM
    cpu = b'{"models":[{"name":"llama4:latest","size":70000000000},{"name":"m","size":10,"size_vram":4}]}'
    assert read_exposition(cpu, "application/json", "ollama")[1]["resident_vram_bytes"] == 4.0
    assert read_exposition(b'{"models":[]}', "application/json", "ollama")[1] == dict(
        resident_models=(), resident_bytes=0.0, resident_vram_bytes=0.0)


@pytest.mark.parametrize(("body", "message"), [
    (b"<html>", "answered an HTML page"),
    (b"# HELP vllm:x y\n", "not the JSON Ollama's status endpoint answers: Expecting value"),
    (b'{"model": "x"}', 'not an Ollama /api/ps answer: no "models" list'),
    (b'{"models": [{"name": "x", "size": "big"}]}', "models[0] has no byte counts size and size_vram"),
    (b'{"models": [{"name": "x", "size": true}]}', "models[0] has no byte counts size and size_vram"),
    (b"\xff", "body is not UTF-8 text (byte 0xff at offset 0)"),
])
def test_a_bad_ollama_answer_is_one_line(body, message):
    from headroom.sources.serving import ScrapeError

    with pytest.raises(ScrapeError) as exc:
        read_exposition(body, "application/json", "ollama")
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_json_without_a_declared_ollama_runtime_says_how_it_is_read():
    from headroom.sources.serving import ScrapeError

    with pytest.raises(ScrapeError, match="an Ollama /api/ps is read for a profile that declares runtime ollama"):
        read_exposition(ollama_ps(), "application/json", None)


def test_an_ollama_endpoint_is_scraped_over_http_and_exported(served):
    """A real HTTP server answering /api/ps; the collector's worker reads it like a /metrics endpoint, and the
    resident models are exported."""
    from headroom.exposition.render import Writer
    from headroom.exposition.render.collectors import _render_serving  # private: no public name
    from headroom.samples import ServingSample

    s = served()
    s.reply = (200, "application/json; charset=utf-8", ollama_ps())
    c = collector(s.url.replace("/metrics", "/api/ps"), runtime={"name": "ollama"})
    try:
        e = outcome(c)
    finally:
        c.close()
    assert (e.up, e.runtime, e.resident_models, e.resident_vram_bytes) == (True, "ollama", ("gemma3:latest",),
                                                                           5964735424.0)
    assert e.requests_running is None and e.kv_cache_usage_ratio is None  # Ollama exports neither
    w = Writer()
    _render_serving(w, ServingSample((e,)), None)
    text = w.render().decode()
    assert 'headroom_workload_resident_models{workload="chat"} 1' in text
    assert 'headroom_workload_resident_model_vram_bytes{workload="chat"} 5964735424' in text


def test_an_automatic_servers_endpoint_outlives_a_tick_the_identity_collector_failed(served):
    """The endpoints of automatic serving launchers come from the identity collector's last tick. On a host
    saturated by the serving load itself that collector misses a deadline now and then; the endpoint was dropped
    and made anew, read "no scrape finished yet" (down) and its kv_cache hold began again. A failed identity tick
    leaves the endpoints as they are (the same scraper, its last answer); an answer without the launcher ends it."""
    from headroom.samples import IdentityGroup, IdentitySample, PreviousTick, Sample, SourceResult
    from headroom.workload.launchers import parse

    server = served()
    server.reply = (200, "text/plain; version=0.0.4", body_of("vllm"))
    launcher = dataclasses.replace(parse(["vllm", "serve", "/m"]), metrics_url=server.url)
    group = IdentityGroup(kind="launcher", name="vllm/m:8000", pids=(4242,), launcher=launcher)

    def tick(identity: SourceResult) -> Sample:
        return Sample(1.0, 1.0, {"identity": identity})

    holder = {"s": tick(SourceResult("identity", True, 0.0, IdentitySample(groups=(group,))))}
    c = ServingCollector(SourceContext(settings={"detect": False}, previous=lambda: PreviousTick.of(holder["s"])))
    try:
        answered = outcome(c)
        assert answered.up and answered.workload == "vllm/m:8000", answered.error
        holder["s"] = tick(SourceResult("identity", False, 0.6, None, "stuck: collect() has not returned for 0.6s"))
        (kept,) = c.collect().endpoints
        assert kept.up and kept.error is None and kept.endpoint == server.url, kept.error  # not "no scrape finished"
        holder["s"] = tick(SourceResult("identity", True, 0.0, IdentitySample(groups=())))
        assert c.collect().endpoints == ()  # the launcher ended: its endpoint with it
    finally:
        c.close()

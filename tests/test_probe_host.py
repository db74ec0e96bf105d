"""probe/host.py HostWatch: what the agent sees during a probe step, from a real agent's status API (a
`headroom run --simulate demo` process) and from the agent's collectors in process."""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.parse

import pytest

from headroom.probe.host import HostWatch, find_workload

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


def _status(agent) -> dict:
    _, _, body = http_get(agent.url + "/api/v1/status")
    return json.loads(body)


def _watch_one_step(watch: HostWatch, seconds: float) -> dict:
    try:
        watch.begin()
        time.sleep(seconds)
        return watch.end()
    finally:
        watch.close()


def test_the_status_api_has_the_newest_ticks_values(demo):
    time.sleep(0.5)  # two ticks: rates exist
    doc = _status(demo)
    assert 0 <= doc["now"]["cpu_busy_ratio"] <= 1
    assert doc["now"]["host_memory_used_bytes"] > 0
    chat = find_workload(doc, "chat", None)
    assert chat["now"]["gpu_memory_used_bytes"] > 0
    assert 0 <= chat["now"]["kv_cache_usage_ratio"] <= 1 and chat["now"]["kv_cache_capacity_tokens"] > 0


def test_a_step_from_a_running_agent_has_peaks_means_and_the_bottleneck(demo):
    host = _watch_one_step(HostWatch("chat", demo.url, interval=0.2), 2.0)
    assert host["source"] == "status_api"
    assert 6 <= host["samples"] <= 12  # about one poll per interval
    for key in ("gpu_memory_used_bytes", "gpu_busy_ratio", "kv_cache_usage_ratio", "requests_running",
                "host_memory_used_bytes", "cpu_busy_ratio", "shm_used_bytes", "network_bytes_per_second"):
        assert host["means"][key] <= host["peaks"][key], key
    assert host["peaks"]["preemptions"] >= 0
    # the demo's chat workload is held by its GPU's power cap (the scenario says so): the step names it
    assert host["bottleneck"] == _status(demo)["workloads"][0]["candidate"] == "gpu_power"
    assert 0.5 <= host["confidence"] <= 1 and "power" in host["evidence"] and "polls" in host["evidence"]


def test_the_workload_is_found_by_its_serving_endpoint_url(demo):
    endpoint = find_workload(_status(demo), "chat", None)["serving"]["endpoint"]
    port = urllib.parse.urlsplit(endpoint).port
    doc = _status(demo)
    assert find_workload(doc, f"http://localhost:{port}/v1", None)["name"] == "chat"
    assert find_workload(doc, None, f"http://127.0.0.1:{port}/v1/chat/completions")["name"] == "chat"
    assert find_workload(doc, None, f"http://127.0.0.1:{port + 1}/v1") is None
    host = _watch_one_step(HostWatch(None, demo.url, interval=0.2, url=f"http://localhost:{port}/v1"), 1.0)
    assert host["peaks"]["kv_cache_capacity_tokens"] > 0 and "error" not in host


def test_an_unknown_workload_is_said_not_guessed(demo):
    host = _watch_one_step(HostWatch("no-such-workload", demo.url, interval=0.2), 0.8)
    assert host["samples"] > 0 and host["bottleneck"] == "none"
    assert "does not see this workload" in host["error"]
    assert "kv_cache_usage_ratio" not in host["peaks"] and "cpu_busy_ratio" in host["peaks"]  # the host still


def test_in_process_without_an_agent_reads_the_agents_own_collectors():
    from headroom.config import load_config
    from headroom.daemon import Options

    watch = HostWatch("chat", None, interval=0.2, config=load_config(ROOT / "config.yaml"),
                      options=Options(simulate="demo", sample_interval=0.2))
    host = _watch_one_step(watch, 1.5)
    assert host["source"] == "in_process" and host["samples"] >= 4
    assert host["peaks"]["gpu_memory_used_bytes"] > 0 and host["peaks"]["host_memory_used_bytes"] > 0
    assert host["bottleneck"] in ("gpu_power", "none")  # the verdict needs the window the short step may not hold
    # private: the in-process agent's sampler: that it stopped with the watch is what is tested
    assert watch._sampler is None  # closed: the in-process agent stopped with it


class _Hostile(http.server.BaseHTTPRequestHandler):
    mode = "html"

    def do_GET(self):  # noqa: N802
        if self.mode == "hang":
            time.sleep(5)
        body = {"html": b"<html>not json</html>", "list": b"[1, 2]",
                "weird": json.dumps({"now": {"cpu_busy_ratio": "high", "x": float("nan")}, "workloads": [
                    "chat", {"name": "chat", "candidate": ["x"], "scores": {"cpu": "1"}, "now": []}]}).encode()
                }.get(self.mode, b"")
        try:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the watch gave up on a hung answer: expected
            pass

    def log_message(self, *a):
        pass


@pytest.mark.parametrize("mode", ["html", "list", "weird", "hang"])
def test_a_hostile_or_hung_status_api_costs_the_step_nothing_but_its_readings(mode):
    handler = type("H", (_Hostile,), {"mode": mode})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        watch = HostWatch("chat", f"http://127.0.0.1:{srv.server_address[1]}", interval=0.2)
        started = time.monotonic()
        host = _watch_one_step(watch, 0.6)
        assert time.monotonic() - started < 4.5  # end() and close() return: one poll's timeout at most
        if mode == "weird":  # it answers, with nonsense values: none of them is taken
            assert host["samples"] >= 1 and host["peaks"] == {} and host["bottleneck"] == "none"
        else:
            assert host["samples"] == 0 and host["source"] == "none"
            if mode != "hang":
                assert host["errors"] >= 1 and host["error"]
    finally:
        srv.shutdown()
        srv.server_close()


def test_an_agent_that_is_not_there_is_an_error_per_poll_not_a_hang():
    from conftest import free_port

    host = _watch_one_step(HostWatch("chat", f"http://127.0.0.1:{free_port()}", interval=0.2), 0.7)
    assert host["samples"] == 0 and host["errors"] >= 2 and "refused" in host["error"].lower()


def test_an_in_process_agent_that_cannot_start_leaves_the_probe_without_host_figures(tmp_path):
    from headroom.config import load_config
    from headroom.daemon import Options

    watch = HostWatch("chat", None, interval=0.2, config=load_config(ROOT / "config.yaml"),
                      options=Options(simulate=str(tmp_path / "no-such-scenario.yaml")))
    host = _watch_one_step(watch, 0.3)
    assert host["samples"] == 0 and host["source"] == "none"
    assert host["error"].startswith("cannot watch the host in process: ") and "\n" not in host["error"]

"""`headroom fleet-report` when Prometheus is not there or not Prometheus: one clear line, exit status 2, no
traceback. The report's answers are tested against the 20-host fleet in tests/test_fleet.py."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import free_port


def report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headroom", "fleet-report", *args], capture_output=True, text=True,
                          timeout=60)


class _Server:
    def __init__(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("args,message", [
    (["--prometheus", "prometheus:9090"], "--prometheus must be an http(s) URL"),
    (["--prometheus", "http://127.0.0.1:99999"], "--prometheus has an invalid port"),
    (["--prometheus", "http://127.0.0.1:9090", "--since", "a week"], "--since must be a Prometheus duration"),
])
def test_bad_arguments(args, message):
    out = report(*args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_prometheus_down():
    url = f"http://127.0.0.1:{free_port()}"
    out = report("--prometheus", url)
    assert out.returncode == 2
    assert f"headroom: cannot reach Prometheus at {url}: " in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("status,body,message", [
    (200, b"<html>Grafana</html>", "did not answer with Prometheus API JSON: is it Prometheus?"),
    (404, b"404 page not found", "answered HTTP 404 to the query API: is it Prometheus?"),
    (400, b'{"status":"error","errorType":"bad_data","error":"parse error"}', "rejected a query (parse error)"),
    (200, b'{"status":"success","data":{"resultType":"matrix","result":[]}}', "unexpected answer"),
])
def test_something_else_answers(status, body, message):
    server = _Server(status, body)
    try:
        out = report("--prometheus", server.url)
    finally:
        server.close()
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr


def test_an_empty_prometheus_gives_an_empty_report():
    server = _Server(200, b'{"status":"success","data":{"resultType":"vector","result":[]}}')
    try:
        out = report("--prometheus", server.url, "--format", "markdown")
    finally:
        server.close()
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("# Fleet report: 0 hosts, 0 GPUs, last 7d") and out.stdout.count("None.") == 3

"""`headroom fleet-report` when Prometheus is not there or not Prometheus: one clear line, exit status 2, no
traceback. The report's answers are tested against the 20-host fleet in tests/test_fleet.py."""

from __future__ import annotations

import subprocess
import sys
import threading
import urllib.parse
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
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize(("args", "message"), [
    (["--prometheus", "prometheus:9090"], "--prometheus must be an http(s) URL"),
    (["--prometheus", "http://127.0.0.1:99999"], "--prometheus has an invalid port"),
    (["--prometheus", "http://127.0.0.1:9090", "--since", "a week"], "--since must be a Prometheus duration"),
    (["--prometheus", "http://127.0.0.1:9090", "--at", "yesterday"], "argument --at: expected an RFC 3339 time"),
    (["--prometheus", "http://127.0.0.1:9090", "--at", "2026-11-30T00:00:00"], "RFC 3339 time with its offset"),
    (["--prometheus", "http://127.0.0.1:9090", "--at", "1e20"], "argument --at: expected a time after 1970"),
    (["--prometheus", "http://127.0.0.1:9090", "--at", "nan"], "argument --at: expected a time after 1970"),
])
def test_bad_arguments(args, message):
    out = report(*args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_prometheus_down():
    url = f"http://127.0.0.1:{free_port()}"
    out = report("--prometheus", url)
    assert out.returncode == 2
    assert f"headroom: cannot reach Prometheus at {url}: " in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(("status", "body", "message"), [
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


@pytest.mark.parametrize(("at", "unix", "title"), [
    ("2026-11-30T00:00:00Z", "1795996800.000", "2026-11-30T00:00:00.000Z"),
    ("2026-11-30T01:00:00+01:00", "1795996800.000", "2026-11-30T00:00:00.000Z"),
    ("1796000400", "1796000400.000", "2026-11-30T01:00:00.000Z"),
])
def test_at_evaluates_every_query_at_that_instant(at, unix, title):
    """--at: the `time` of every query (the same report from Prometheus and from a long-term store,
    tests/test_longterm_store.py), named in the report's title."""
    paths: list[str] = []
    body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            paths.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        out = report("--prometheus", f"http://127.0.0.1:{httpd.server_address[1]}", "--at", at, "--format",
                     "markdown")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert out.returncode == 0, out.stderr
    assert paths and all(urllib.parse.parse_qs(urllib.parse.urlsplit(p).query)["time"] == [unix] for p in paths)
    assert out.stdout.startswith(f"# Fleet report: 0 hosts, 0 GPUs, last 7d to {title}\n")


def test_without_at_the_server_picks_the_time():
    server = _Server(200, b'{"status":"success","data":{"resultType":"vector","result":[]}}')
    try:
        out = report("--prometheus", server.url, "--format", "json")
    finally:
        server.close()
    assert out.returncode == 0 and '"at": null' in out.stdout


def test_an_empty_prometheus_gives_an_empty_report():
    server = _Server(200, b'{"status":"success","data":{"resultType":"vector","result":[]}}')
    try:
        out = report("--prometheus", server.url, "--format", "markdown")
    finally:
        server.close()
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("# Fleet report: 0 hosts, 0 GPUs, last 7d") and out.stdout.count("None.") == 3


# --------------------------------------------------------------------------- hostile answers (issue 24)
class _Scripted:
    """A loopback HTTP server whose handler is ``respond(handler)``; it counts the requests it got."""

    def __init__(self, respond) -> None:
        hits = self.hits = []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):  # noqa: N802
                hits.append(self.path)
                try:
                    respond(self)
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _json_answer(doc: bytes):
    def respond(h):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(doc)))
        h.end_headers()
        h.wfile.write(doc)
    return respond


VECTOR = b'{"status":"success","data":{"resultType":"vector","result":%s}}'


@pytest.mark.parametrize(("body", "message"), [
    (b'[{"status":"success"}]', "unexpected answer from URL: a list where the API's object belongs"),
    (b'{"status":"success"}', "unexpected answer from URL: data is missing or null, not an object"),
    (b'{"status":"success","data":[1]}', "unexpected answer from URL: data is a list, not an object"),
    (b'{"status":"success","data":{"resultType":"vector","result":"x"}}', "result is a string, not a list"),
    (b'{"status":"success","data":{"resultType":"vector"}}', "result is missing or null, not a list"),
    (VECTOR % b'["x"]', "result[0] is a string, not an object"),
    (VECTOR % b'[{"metric":[],"value":[1,"2"]}]', "result[0] metric is not an object of label values"),
    (VECTOR % b'[{"metric":{"instance":7},"value":[1,"2"]}]', "result[0] metric is not an object of label values"),
    (VECTOR % b'[{"metric":{},"value":"2"}]', "result[0] value is not [time, value]"),
    (VECTOR % b'[{"metric":{},"value":[1,"many"]}]', "result[0] value 'many' is not a number"),
    (VECTOR % b'[{"metric":{},"value":[1,{"a":1}]}]', "result[0] value is an object, not a number"),
    (VECTOR % b'[{"metric":{},"value":[1,true]}]', "result[0] value is a boolean, not a number"),
    (VECTOR % (b'[{"metric":{},"value":[1,' + b"9" * 5000 + b']}]'), "did not answer with Prometheus API JSON"),
    (b'{"status":"error","error":["x"]}', "failed a query: a list"),
    (b'{"status":"success","data":{"resultType":{"a":1}}}', "unexpected answer from URL: resultType an object"),
    (b"\x1b[2J<html><body>login</body></html>", "did not answer with Prometheus API JSON"),
], ids=["list", "no data", "data a list", "result a string", "no result", "item a string", "metric a list",
        "label a number", "value a string", "value not a number", "value an object", "value a boolean",
        "a 5000-digit number", "error a list", "resultType an object", "HTML"])
def test_malformed_api_answers_give_one_line_and_exit_2(body, message):
    server = _Scripted(_json_answer(body))
    try:
        out = report("--prometheus", server.url)
    finally:
        server.close()
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1, out.stderr[-2000:]
    assert message.replace("URL", server.url) in out.stderr


def test_timeout_bounds_the_whole_request_not_each_read():
    """A server that trickles one byte every 0.5 s: each read is quick, the answer never ends."""
    import time

    def trickle(h):
        h.send_response(200)
        h.send_header("Content-Length", "100000")
        h.end_headers()
        h.wfile.flush()
        for _ in range(120):  # at most 60 s
            h.wfile.write(b" ")
            h.wfile.flush()
            time.sleep(0.5)

    server = _Scripted(trickle)
    start = time.monotonic()
    try:
        out = report("--prometheus", server.url, "--timeout", "2")
    except subprocess.TimeoutExpired:
        out = None
    finally:
        elapsed = time.monotonic() - start
        server.close()
    assert out is not None, f"still reading after {elapsed:.0f} s with --timeout 2"
    assert out.returncode == 2 and "did not answer a query within --timeout 2 s" in out.stderr, out.stderr[-2000:]
    assert elapsed < 10, elapsed  # 2 s + the interpreter's start, on a loaded machine


def test_an_endless_body_is_cut_at_the_cap_with_bounded_memory():
    import time

    from headroom.fleet.report import MAX_RESPONSE_BYTES

    def endless(h):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()  # HTTP/1.0, no Content-Length: the body ends when the server closes
        chunk = b" " * 2**20
        for _ in range(4096):  # at most 4 GiB
            h.wfile.write(chunk)

    server = _Scripted(endless)
    # the child is capped at 1 GiB of address space: before the cap it took 6.2 GiB for a 3 GiB body
    code = ("import resource, subprocess, sys\n"
            "def limit():\n"
            "    resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))\n"
            "r = subprocess.run([sys.executable, '-m', 'headroom', 'fleet-report', '--prometheus', sys.argv[1]],"
            " capture_output=True, text=True, timeout=60, preexec_fn=limit)\n"
            "sys.stderr.write(r.stderr)\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
            "sys.exit(r.returncode)")
    start = time.monotonic()
    try:
        out = subprocess.run([sys.executable, "-c", code, server.url], capture_output=True, text=True, timeout=90)
    finally:
        elapsed = time.monotonic() - start
        server.close()
    peak_mib = int(out.stdout.split()[-1]) / 1024
    print(f"\nendless body: exit {out.returncode} after {elapsed:.1f} s, peak RSS {peak_mib:.0f} MiB")
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"answered with more than {MAX_RESPONSE_BYTES} bytes" in out.stderr and "Traceback" not in out.stderr
    assert peak_mib < MAX_RESPONSE_BYTES / 2**20 + 150 and elapsed < 30


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_redirects_are_not_followed(status):
    target = _Scripted(_json_answer(VECTOR % b"[]"))
    location = target.url + "/api/v1/query?query=" + "x" * 500 + "\x1b[31m"

    def redirect(h):
        h.send_response(status)
        h.send_header("Location", location)
        h.send_header("Content-Length", "0")
        h.end_headers()

    server = _Scripted(redirect)
    try:
        out = report("--prometheus", server.url)
    finally:
        server.close()
        target.close()
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert f"answered HTTP {status} redirecting to '{target.url}/api/v1/query?query=xxx" in out.stderr
    assert "'... (547 characters): redirects are not followed" in out.stderr
    assert "\x1b" not in out.stderr
    assert target.hits == []


HOSTILE_LABELS = {"instance": "host\x1b[2J\x1b]0;pwned\x07", "gpu": "0\r\nfake row", "name": "A100|80GB\n| x | y |",
                  "workload": "w\x00\u202egpj.exe", "team": "t\x9b31m", "currency": "EUR\x1b[5m", "resource": "cpu"}


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_label_values_are_escaped_for_terminals_and_markdown(fmt):
    import json

    body = VECTOR % json.dumps([{"metric": HOSTILE_LABELS, "value": [1, "0.9"]}]).encode()
    server = _Scripted(_json_answer(body))
    try:
        out = report("--prometheus", server.url, "--format", fmt)
    finally:
        server.close()
    assert out.returncode == 0, out.stderr[-2000:]
    assert not any(c in out.stdout for c in "\x1b\x07\x00\r\x9b\u202e"), out.stdout
    assert "host\\x1b[2J\\x1b]0;pwned\\x07" in out.stdout and "0\\x0d\\x0afake row" in out.stdout
    assert "w\\x00\\u202egpj.exe" in out.stdout
    rows = [line for line in out.stdout.splitlines() if "pwned" in line]
    assert len(rows) == 2  # one idle GPU, one host-bound host: each on one line
    if fmt == "markdown":
        assert "A100\\|80GB\\x0a\\| x \\| y \\|" in out.stdout
        for row in rows:  # as many cells as the header has columns
            cells = row.replace("\\|", "").count("|") - 1
            head = out.stdout.splitlines()[out.stdout.splitlines().index(row) - 2]
            assert cells == head.count("|") - 1, (row, head)

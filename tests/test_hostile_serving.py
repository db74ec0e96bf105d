"""A hostile serving endpoint (issue 24 item 8 and its "Low" reason-phrase item, docs/reliability.md).

Whoever runs a process that the serving collector scrapes controls its /metrics: 140 k series once cost
the agent 15.6 s of CPU per 20 s, four such endpoints 432 MiB RSS, and an honest endpoint beside them
took 0.30 s of its 0.5 s deadline. The caps (sources/serving.py: MAX_LINES, MAX_SERIES, MAX_LINE_CHARS,
MAX_HISTOGRAM_BUCKETS), the deadline over parsing and the CPU share (MAX_CPU_SHARE) bound what one
endpoint can take; what was not read is counted and the endpoint reported oversized.
"""

from __future__ import annotations

import json
import os
import random
import string
import subprocess
import sys
import textwrap
import time

import pytest
import structlog

from headroom.exposition.render import Writer
from headroom.exposition.render.collectors import _render_serving  # private: no public name
from headroom.sources import serving
from headroom.sources.serving import Oversized, ScrapeError, read_exposition
from test_serving import Exposition, RawServer, body_of, collector, outcome

from conftest import ROOT, free_port, report


@pytest.fixture
def served():
    """Loopback servers (test_serving's Exposition or RawServer), closed after the test."""
    servers = []

    def make(kind=Exposition, *args):
        servers.append(kind(*args))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def hostile_body(series: int, salt: str = "", family: str = "vllm:num_requests_running") -> bytes:
    lines = [f"# TYPE {family} gauge"] + [f'{family}{{engine="{salt}{i}"}} 1' for i in range(series)]
    return ("\n".join(lines) + "\n").encode()


# --------------------------------------------------------------------------- the caps, on the parser
def test_series_over_the_cap_are_refused_before_any_is_parsed(request):
    body = hostile_body(serving.MAX_SERIES + 1)
    cpu = time.thread_time()
    with pytest.raises(Oversized) as caught:
        read_exposition(body, "text/plain", None, {})
    spent = time.thread_time() - cpu
    report(request, f"{serving.MAX_SERIES + 1} new series refused in {spent * 1000:.1f} ms CPU")
    assert caught.value.dropped == serving.MAX_SERIES + 1
    assert str(caught.value) == (f"oversized: {serving.MAX_SERIES + 1} runtime series, more than the "
                                 f"{serving.MAX_SERIES} read per scrape (serving.MAX_SERIES); not read")
    assert spent < 0.1  # parsing them (prometheus-client's parser, ~50 us a new series) would take 0.2 s
    runtime, fields = read_exposition(hostile_body(serving.MAX_SERIES), "text/plain", None, {})
    assert runtime == "vllm" and fields["requests_running"] == serving.MAX_SERIES  # at the cap: read


def test_an_answer_over_the_line_cap_is_refused_without_being_split():
    body = b"# x\n" * (serving.MAX_LINES - 10) + hostile_body(100)
    with pytest.raises(Oversized, match=r"^oversized: \d+ lines, more than the 65536 read per scrape") as caught:
        read_exposition(body, "text/plain", None, {})
    assert caught.value.dropped == 100
    # \r, \x1c and \u2028 are no line ends of the text format: they do not make lines past the count
    _, fields = read_exposition(body_of("vllm") + b"process_x{a=\"\x1c\x1d\"} 1\n", "text/plain", None, {})
    assert fields["requests_running"] == 12


def test_a_runtime_line_over_the_length_cap_is_refused():
    body = body_of("vllm") + b'vllm:num_requests_running{engine="' + b"x" * serving.MAX_LINE_CHARS + b'"} 1\n'
    with pytest.raises(Oversized, match=r"more than 16384 \(serving\.MAX_LINE_CHARS\)"):
        read_exposition(body, "text/plain", None, {})


def _many_buckets(body: bytes, family: str, bounds: int) -> bytes:
    """``body`` with ``family``'s buckets replaced by ``bounds`` distinct ones (and +Inf)."""
    lines = [line for line in body.decode().splitlines() if not line.startswith(f"{family}_bucket")]
    lines += [f'{family}_bucket{{le="{i / 1000:.3f}"}} {i}' for i in range(1, bounds + 1)]
    lines.append(f'{family}_bucket{{le="+Inf"}} {bounds}')
    return ("\n".join(lines) + "\n").encode()


def test_a_histogram_over_the_bucket_cap_is_not_read_and_the_rest_is():
    family = "vllm:time_to_first_token_seconds"
    body = _many_buckets(body_of("vllm"), family, 1000)
    runtime, fields = read_exposition(body, "text/plain", None, {})
    assert runtime == "vllm" and fields["requests_running"] == 12 and fields["inter_token_latency"] is not None
    assert fields["time_to_first_token"] is None
    assert fields["oversized"] == f"{family}: more than 64 buckets (serving.MAX_HISTOGRAM_BUCKETS), not read"
    assert fields["dropped_buckets"] == 1001
    at_cap = _many_buckets(body_of("vllm"), family, serving.MAX_HISTOGRAM_BUCKETS - 1)
    assert len(read_exposition(at_cap, "text/plain", None, {})[1]["time_to_first_token"].bounds) == 64


def test_the_deadline_covers_parsing_not_only_the_http_read():
    body = hostile_body(serving.MAX_SERIES)  # within the caps, every series new: ~0.2 s of parsing
    with pytest.raises(ScrapeError, match=r"^the answer was not parsed by the deadline \(collectors.serving.timeout\)"):
        read_exposition(body, "text/plain", None, {}, deadline=time.monotonic() + 0.01)


# ------------------------------------------------------------------- the endpoint: status and counters
def test_an_oversized_endpoint_is_down_reported_oversized_counted_and_retried_later(served, monkeypatch):
    # OVERSIZED_RETRY: patched in the module whose endpoint worker reads it
    from headroom.sources.serving import collector as endpoint_worker

    monkeypatch.setattr(endpoint_worker, "OVERSIZED_RETRY", 0.5)
    s = served()
    s.reply = (200, "text/plain", hostile_body(serving.MAX_SERIES + 1))
    c = collector(s.url)
    try:
        first = outcome(c)
        at = time.monotonic()
        second = outcome(c, after=first)
        waited = time.monotonic() - at
    finally:
        c.close()
    assert first.up is False and first.oversized == first.error and first.error.startswith("oversized: 4097 runtime")
    assert first.dropped_series_total == 4097 and second.dropped_series_total == 2 * 4097
    assert waited >= 0.4  # not every tick (outcome() ticks every 20 ms)


def test_an_endpoint_with_an_oversized_histogram_stays_up_and_says_so(served):
    from headroom.analysis.serving import serving_signals
    from headroom.samples import Sample, ServingSample, SourceResult

    s = served()
    s.reply = (200, "text/plain", _many_buckets(body_of("vllm"), "vllm:time_to_first_token_seconds", 1000))
    c = collector(s.url, timeout=5.0)  # the bucket cap is the point, not the deadline (a loaded CI machine)
    try:
        e = outcome(c)
    finally:
        c.close()
    assert e.up is True and e.requests_running == 12 and e.time_to_first_token is None
    assert "vllm:time_to_first_token_seconds: more than 64 buckets" in e.oversized and e.dropped_buckets_total == 1001
    sample = Sample(1.0, 1.0, {"serving": SourceResult("serving", True, 0.0, ServingSample((e,)))})
    assert serving_signals([sample], 15.0, "chat").oversized == e.oversized  # the workload's serving status
    w = Writer()
    _render_serving(w, ServingSample((e,)), None)
    text = w.render().decode()
    assert 'headroom_workload_serving_dropped_series_total{workload="chat",reason="buckets"} 1001' in text
    assert 'headroom_workload_serving_dropped_series_total{workload="chat",reason="series"} 0' in text


def _fresh_series(conn, stop):
    """Every answer 4000 series never seen before: each costs prometheus-client's parser, ~0.2 s a scrape."""
    salt = "".join(random.choices(string.ascii_lowercase, k=8))
    body = hostile_body(4000, salt=salt)
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


def test_an_endpoint_whose_answers_cost_cpu_is_read_less_often(served):
    s = served(RawServer, _fresh_series)
    c = collector(s.url, timeout=5.0)
    try:
        e = outcome(c)
        assert e.up is True, e.error
        start = time.monotonic()
        while time.monotonic() - start < 2.0:  # ticks every 20 ms
            c.collect()
            time.sleep(0.02)
    finally:
        c.close()
    # a scrape of c CPU seconds holds the next back c / MAX_CPU_SHARE (0.2 s -> 4 s): not one per tick
    assert s.connections <= 2, s.connections


def test_the_wait_after_a_costly_answer_follows_the_ticks_clock(served):
    """The wait after a scrape that cost CPU is counted on the collectors' clock (the sampler's: a simulation's
    manual clock), not in real seconds: on a manual clock a real-time wait skipped as many ticks as the machine was
    slow, so a scenario's kv_cache was detected 16 s later under a CPU hog than idle. While the clock stands still
    the endpoint is not read again; once it has moved past the wait it is, however little real time passed."""
    from headroom.sources import SourceContext
    from headroom.sources.serving import ServingCollector
    from headroom.workload.profiles import profile_from_dict

    s = served(RawServer, _fresh_series)
    now = [1000.0]
    profile = profile_from_dict({"name": "chat", "kind": "inference", "gpus": [0], "endpoint": s.url})
    c = ServingCollector(SourceContext(settings={"timeout": 5.0}, workloads=(profile,), monotonic=lambda: now[0]))
    try:
        first = outcome(c)
        assert first.up is True, first.error
        for _ in range(20):  # ticks on a clock that does not move: held back
            c.collect()
            time.sleep(0.02)
        assert s.connections == 1, s.connections
        now[0] += 3600.0  # past any wait c / MAX_CPU_SHARE
        # within 2 s of real time: a wait counted in real seconds is c / 0.05 (0.2 s of parsing: 4 s)
        second = outcome(c, after=first, limit=2.0)
        assert second.up is True and s.connections == 2, (second.error, s.connections)
    finally:
        c.close()


# ------------------------------------------------------------------ four hostile endpoints and an honest one
_SERVER = textwrap.dedent("""
    import sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    body = open(sys.argv[1], "rb").read()
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), H).serve_forever()
""")

_AGENT = textwrap.dedent("""
    import json, resource, sys, time
    from headroom.sources import SourceContext
    from headroom.sources.serving import ServingCollector
    from headroom.workload.profiles import profile_from_dict

    urls = json.loads(sys.argv[1])
    profiles = [profile_from_dict({"name": name, "kind": "inference", "gpus": [0], "endpoint": url}) for name, url in urls.items()]
    c = ServingCollector(SourceContext(workloads=tuple(profiles)))
    cpu0, wall0 = time.process_time(), time.monotonic()
    ticks, slowest, honest = 0, 0.0, []
    while time.monotonic() - wall0 < float(sys.argv[2]):
        t = time.perf_counter()
        sample = c.collect()
        slowest = max(slowest, time.perf_counter() - t)
        ticks += 1
        e = sample.endpoints[-1]
        if e.up is not None:
            honest.append((e.up, e.requests_running, e.scrape_duration_seconds))
        time.sleep(0.25)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    hostile = [e for e in sample.endpoints[:-1]]
    c.close()
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    print(json.dumps({"cpu_per_second": cpu / wall, "hwm_mib": hwm, "slowest_collect": slowest, "honest": honest,
                      "hostile": [(e.up, e.oversized, e.dropped_series_total) for e in hostile]}))
""")


def test_four_endpoints_of_140k_series_cost_little_and_an_honest_one_beside_them_reads_right(tmp_path, request):
    hostile = tmp_path / "hostile.prom"
    hostile.write_bytes(hostile_body(140_000))
    honest = tmp_path / "honest.prom"
    honest.write_bytes(body_of("vllm"))
    ports = [free_port() for _ in range(5)]
    servers = [subprocess.Popen([sys.executable, "-c", _SERVER, str(path), str(port)])
               for path, port in zip([hostile] * 4 + [honest], ports, strict=True)]
    try:
        for port in ports:  # until each listens
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    __import__("socket").create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.05)
        urls = {f"hostile{i}": f"http://127.0.0.1:{port}/metrics" for i, port in enumerate(ports[:4])}
        urls["honest"] = f"http://127.0.0.1:{ports[4]}/metrics"
        r = subprocess.run([sys.executable, "-c", _AGENT, json.dumps(urls), "6"], capture_output=True, text=True,
                           timeout=120, cwd=ROOT, env={**os.environ, "MALLOC_ARENA_MAX": "2"})
    finally:
        for p in servers:
            p.kill()
            p.wait()
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    scrapes = sorted({d for up, _, d in out["honest"][1:] if up} - {out["honest"][0][2]})  # after the first
    report(request, f"4 x 140k-series endpoints + 1 honest: agent CPU {out['cpu_per_second']:.3f} s/s, VmHWM "
           f"{out['hwm_mib']:.0f} MiB, honest scrape median {scrapes[len(scrapes) // 2] * 1000 if scrapes else 0:.1f} ms, "
           f"max {max(scrapes, default=0) * 1000:.1f} ms, slowest collect() "
           f"{out['slowest_collect'] * 1000:.2f} ms")
    assert all(up is False and oversized and oversized.startswith("oversized: 140001 lines") and dropped >= 140_000
               for up, oversized, dropped in out["hostile"]), out["hostile"]
    assert out["honest"] and all(up and running == 12 for up, running, _ in out["honest"]), out["honest"]
    # before (this test on the code without the caps): 0.37 s/s (0.85 s/s over 20 s at 1 s ticks), the honest
    # scrapes' median 182 ms and max 520 ms, 166 MiB; after: 0.04 s/s, 2 ms and 74 ms, 80 MiB (wall times on a
    # loaded 2-core machine: the bounds are generous)
    assert out["cpu_per_second"] < 0.15
    # the median is what tells before from after; one slow outlier in ten is the machine (a fresh-clone CI run with
    # 4 test workers on 2 cores saw one honest scrape of 0.51 s among a median of 16 ms)
    assert scrapes and scrapes[len(scrapes) // 2] < 0.05, scrapes
    assert sum(d > 0.4 for d in scrapes) <= len(scrapes) // 10, scrapes
    assert out["hwm_mib"] < 150  # before: 166 MiB here, 314 MiB over 20 s (the issue saw 432 MiB)


# ------------------------------------------------------------------------ the reason phrase (Low item)
def _long_reason(conn, stop):
    reason = "".join(random.choices(string.ascii_letters, k=60_000))  # a different one every answer
    conn.sendall(f"HTTP/1.0 500 {reason}\r\nContent-Length: 0\r\n\r\n".encode())


def test_a_60_kb_reason_phrase_is_cut_and_logged_once(served):
    s = served(RawServer, _long_reason)
    c = collector(s.url)
    try:
        with structlog.testing.capture_logs() as logs:
            e = first = outcome(c)
            for _ in range(4):
                e = outcome(c, after=e)
    finally:
        c.close()
    assert e.up is False and e.error.startswith("HTTP 500 '") and e.error.endswith("... (60000 characters)")
    assert len(e.error) <= serving.MAX_ERROR_CHARS and first.error != e.error
    logged = sum(len(json.dumps(x, default=str)) for x in logs)
    assert len([x for x in logs if x["event"] == "serving_endpoint_down"]) == 1 and logged < 2000, logged


@pytest.mark.parametrize("head", [
    b"HTTP/1.0 200 OK\r\nContent-Length: " + b"9" * 60_000 + b"\r\n\r\n",
    b"HTTP/1.0 500 \x1b[2J\x1b[31mred\x1b[0m\x85OK\r\nContent-Length: 0\r\n\r\n",
], ids=["60kb-content-length", "control-characters"])
def test_odd_headers_give_a_short_one_line_error(served, head):
    s = served(RawServer, lambda conn, stop: conn.sendall(head))
    c = collector(s.url)
    try:
        e = outcome(c)
    finally:
        c.close()
    assert e.up is False and len(e.error) <= 240  # serving.MAX_ERROR_CHARS
    assert "\n" not in e.error and "\x1b" not in e.error and "\x85" not in e.error

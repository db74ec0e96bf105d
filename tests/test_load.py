"""Load and bad input against a real `headroom run --simulate demo` on loopback.

- 200 concurrent keep-alive scrapers for 30 s: zero errors; p50/p99 latency and requests/s printed
  (docs/reliability.md, "Load and bad input").
- 100 half-open connections (a partial request line, never finished) while 200 scrapers run: scrapes
  still answer within 1 s; the half-open ones are dropped after the handler timeout, and the agent's
  threads come back down.
- Oversized request lines and headers, unknown methods, paths and garbage get a 4xx, never a traceback.
- 1 000 slow connections (a header byte every 2 s, reconnecting when cut) held for 15 s from 20
  client addresses: a scraper from another address gets every scrape (docs/reliability.md).
  The connection cap itself is tested in-process in tests/test_hostile_http.py.
- The soak command (bench/soak.py) in a short run, as a smoke test of flatness.
"""

from __future__ import annotations

import asyncio
import re
import socket
import statistics
import subprocess
import sys
import time
from itertools import pairwise

import pytest

from headroom.exposition.server import REQUEST_HEAD_TIMEOUT_SECONDS

from conftest import ROOT, Agent, http_get, report

REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: load-test\r\n\r\n"
_LENGTH = re.compile(rb"(?im)^content-length:\s*(\d+)\s*$")


@pytest.fixture(scope="module")
def demo():
    a = Agent("--config.file", str(ROOT / "config.yaml"), "--simulate", "demo")
    a.wait_ready()
    yield a
    code, err = a.stop()
    assert code == 0, err[-3000:]
    assert "Traceback" not in err and "http_handler_error" not in err, err[-3000:]


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


# ------------------------------------------------------------------------------------ scrapers
async def _scraper(port: int, deadline: float, latencies: list[float], errors: list[str],
                   source: str = "127.0.0.1", pause: float = 0.0) -> None:
    """One keep-alive client scraping /metrics from ``source`` until ``deadline``, ``pause`` s apart."""
    reader = writer = None
    while time.monotonic() < deadline:
        if pause and latencies:
            await asyncio.sleep(pause)
        try:
            if writer is None:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), 10)
            start = time.perf_counter()
            writer.write(REQUEST)
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            status = int(head.split(b" ", 2)[1])
            m = _LENGTH.search(head)
            body = await asyncio.wait_for(reader.readexactly(int(m.group(1)) if m else 0), 10)
            latencies.append(time.perf_counter() - start)
            if status != 200 or b"headroom_build_info" not in body:
                errors.append(f"HTTP {status}")
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            if writer is not None:
                writer.close()
            reader = writer = None
    if writer is not None:
        writer.close()


def scrape_concurrently(port: int, clients: int, seconds: float) -> tuple[list[float], list[str], float]:
    """``clients`` keep-alive scrapers for ``seconds``; returns (latencies, errors, elapsed seconds)."""
    latencies: list[float] = []
    errors: list[str] = []

    async def main() -> float:
        start = time.monotonic()
        deadline = start + seconds
        # ten client addresses, as several Prometheus servers would be (each under the per-address cap)
        tasks = [_scraper(port, deadline, latencies, errors, f"127.0.0.{i % 10 + 1}") for i in range(clients)]
        await asyncio.wait_for(asyncio.gather(*tasks), seconds + 30)
        return time.monotonic() - start

    elapsed = asyncio.run(main())
    return latencies, errors, elapsed


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def test_200_concurrent_scrapers_for_30_seconds(demo, request):
    latencies, errors, elapsed = scrape_concurrently(demo.port, clients=200, seconds=30)
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    report(request, f"load: 200 concurrent keep-alive scrapers for {elapsed:.1f}s: {len(latencies)} scrapes, "
           f"{len(latencies) / elapsed:.0f} req/s, p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
           f"max {max(latencies) * 1000:.1f} ms, {len(errors)} errors")
    assert errors == [], errors[:5]
    assert len(latencies) >= 200 * 10  # every client got answers the whole time, not just once
    # Prometheus' default scrape timeout is 10 s: 200 at once stay inside half of it even on a machine loaded by
    # other test workers (p99 ~1.2 s seen there; a few ms when idle)
    assert p99 < 5.0
    status, _, _ = http_get(demo.url + "/healthz")
    assert status == 200


def settled_threads(pid: int, quiet: float = 1.0, limit: float = REQUEST_HEAD_TIMEOUT_SECONDS + 2) -> int:
    """The agent's thread count once it has not fallen for ``quiet`` seconds: a connection thread left by an
    earlier test (a keep-alive scraper) ends up to the head timeout later, and a baseline that counted it
    made the half-open count look one short."""
    count, since, deadline = threads_of(pid), time.monotonic(), time.monotonic() + limit
    while time.monotonic() - since < quiet and time.monotonic() < deadline:
        time.sleep(0.1)
        now = threads_of(pid)
        if now < count:
            count, since = now, time.monotonic()
    return count


def test_half_open_connections_do_not_block_scrapes_and_are_dropped(demo, request):
    base_threads = settled_threads(demo.proc.pid)
    idle = []
    for _ in range(100):
        s = socket.create_connection(("127.0.0.1", demo.port), timeout=5)
        s.sendall(b"GET /metr")  # never finished
        idle.append(s)
    opened = time.monotonic()
    deadline = opened + 30  # each holds a handler thread, however long this machine takes to start them
    while threads_of(demo.proc.pid) < base_threads + 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threads_of(demo.proc.pid) >= base_threads + 100

    start = time.perf_counter()
    status, _, body = http_get(demo.url + "/metrics", timeout=5)
    alone = time.perf_counter() - start
    # a scrape held up by the half-open connections would wait for their 10 s head timeout; a loaded machine
    # (other test workers) slows a free one to at most a second or two
    assert status == 200 and b"headroom_build_info" in body and alone < REQUEST_HEAD_TIMEOUT_SECONDS / 2
    latencies, errors, _ = scrape_concurrently(demo.port, clients=200, seconds=5)  # 300 connections at once
    assert errors == [] and percentile(latencies, 99) < REQUEST_HEAD_TIMEOUT_SECONDS / 2

    for s in idle:  # each is closed by the agent after the handler timeout, without an answer
        s.settimeout(max(0.1, opened + REQUEST_HEAD_TIMEOUT_SECONDS + 5 - time.monotonic()))
        assert s.recv(100) == b""
        s.close()
    dropped_after = time.monotonic() - opened
    assert dropped_after >= REQUEST_HEAD_TIMEOUT_SECONDS - 0.5
    deadline = time.monotonic() + 5
    while threads_of(demo.proc.pid) > base_threads + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    report(request, f"half-open: 100 idle + 200 active connections, scrape alone {alone * 1000:.1f} ms, p99 under load "
           f"{percentile(latencies, 99) * 1000:.1f} ms; all 100 dropped after {dropped_after:.1f}s; "
           f"threads {base_threads} -> {threads_of(demo.proc.pid)}")
    assert threads_of(demo.proc.pid) <= base_threads + 2


# ----------------------------------------------------------------------------------- bad input
def raw(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send ``data`` on a fresh connection; returns everything the agent sends before closing."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks) and b"Connection: close" not in b"".join(chunks):
                break  # a keep-alive answer: the first response is enough
        return b"".join(chunks)


BAD_REQUESTS = [
    ("request line over 64 KiB", b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
    ("header line over 64 KiB", b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
    ("more than 100 headers", b"GET /metrics HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(150))
     + b"\r\n", 431),
    ("unknown method", b"BREW /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 405),
    ("POST with a huge announced body", b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n", 405),
    ("DELETE", b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n", 405),
    ("unknown path", b"GET /admin HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    ("path traversal", b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    ("non-UTF-8 path", b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    ("NUL in the path", b"GET /\xff\xfe\x00 HTTP/1.1\r\nHost: x\r\n\r\n", 400),  # as Go: a control character
    ("absolute-form target for another host", b"GET http://evil.example/metrics HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    ("binary garbage", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n", 400),
    ("malformed version", b"GET /metrics HTTP/x.y\r\n\r\n", 400),
    ("too many words in the request line", b"GET /metrics HTTP/1.1 extra\r\n\r\n", 400),
    # a version the server does not speak: 505 is the status RFC 9110 prescribes (the one 5xx here)
    ("HTTP/2.0 on the request line", b"GET /metrics HTTP/2.0\r\n\r\n", 505),
    ("HTTP/1.1 without Host", b"GET /metrics HTTP/1.1\r\n\r\n", 400),
    ("conflicting Content-Length", b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
     b"Content-Length: 2\r\n\r\nab", 400),
    ("Content-Length -1", b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
]


@pytest.mark.parametrize(("data", "expected"), [pytest.param(d, e, id=n) for n, d, e in BAD_REQUESTS])
def test_bad_requests_get_a_precise_status(demo, data, expected):
    start = time.perf_counter()
    answer = raw(demo.port, data)
    assert time.perf_counter() - start < 2.0
    status_line = answer.split(b"\r\n", 1)[0]
    assert re.fullmatch(rb"HTTP/1\.[01] \d{3} .*", status_line), answer[:200]
    assert int(status_line.split()[1]) == expected, status_line
    assert b"Traceback" not in answer
    assert http_get(demo.url + "/metrics")[0] == 200  # and the agent serves on


# ------------------------------------------------------------------------------- slow clients
async def _slow_client(port: int, source: str, deadline: float, cuts: list[int]) -> None:
    """Holds a connection open with a request head trickled one byte every 2 s; reconnects when cut."""
    while time.monotonic() < deadline:
        writer = None
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
            writer.write(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
            while time.monotonic() < deadline:
                await asyncio.sleep(2)
                if reader.at_eof():
                    break
                writer.write(b"a")
                await writer.drain()
            cuts.append(1)
        except (TimeoutError, OSError):
            cuts.append(1)
            await asyncio.sleep(0.5)
        finally:
            if writer is not None:
                writer.close()


def test_scrapes_are_served_while_1000_slow_connections_are_held(demo, request):
    latencies: list[float] = []
    errors: list[str] = []
    cuts: list[int] = []

    async def main() -> None:
        deadline = time.monotonic() + 15  # past the 10 s head deadline: the slow ones are cut and come back
        slow = [_slow_client(demo.port, f"127.0.1.{i % 20 + 1}", deadline, cuts) for i in range(1000)]
        await asyncio.sleep(0)
        scraper = _scraper(demo.port, deadline, latencies, errors, source="127.0.2.1", pause=0.5)
        await asyncio.wait_for(asyncio.gather(*slow, scraper), 60)

    asyncio.run(main())
    report(request, f"slow clients: 1000 slow connections held for 15 s, {len(latencies)} scrapes from another address, "
           f"p50 {percentile(latencies, 50) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms, {len(errors)} errors, "
           f"{len(cuts)} slow connections cut or replaced")
    assert errors == [], errors[:5]
    assert len(latencies) >= 10
    assert percentile(latencies, 50) < 1.0
    assert http_get(demo.url + "/healthz")[0] == 200


# -------------------------------------------------------------------------------------- soak
def test_the_soak_command_stays_flat_in_a_short_run():
    """bench/soak.py as documented, shortened: 8 GPUs at 10 ticks/s, 12 s warm-up, 20 s measured."""
    # the tick rate is a benchmark's business (make soak asks for 90 % of 10/s); on a shared test machine
    # the agent only has to keep ticking, so flatness is judged whatever rate the machine allows
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--duration", "20", "--warmup", "12",
                        "--window", "10", "--every", "5", "--min-tick-ratio", "0.05"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "flat" in r.stdout.splitlines()[-1]
    rows = [line.split() for line in r.stdout.splitlines() if re.match(r"\s+\d+\s+[\d.]+\s+\d+\s+\d+\s+\d+\s+\d+$", line)]
    assert len(rows) >= 4  # readings every 5 s over 20 s
    ticks = [int(row[4]) for row in rows]
    assert all(b > a for a, b in pairwise(ticks)), f"the agent stopped ticking: {ticks}"

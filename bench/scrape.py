"""What a scrape costs: real servers on loopback, scraped the way Prometheus does.

Each server is a separate process: ``headroom run`` (simulated GPUs, real host), node_exporter with its
default collectors, and the bare prometheus-client exporter (bench/promclient_exporter.py). The client
keeps one HTTP/1.1 connection open (as Prometheus does) and asks for the text format, with or without
``Accept-Encoding: gzip``. Server CPU comes from /proc/PID/stat (utime + stime, all threads) over a
window of N scrapes, minus the same server's idle CPU rate (measured just before, same length order)
times the window's length; that leaves what the scrapes themselves cost.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.host import cpu_seconds, rss_bytes
from bench.stats import Spread, percentile
from bench.ticks import exposition_samples

ROOT = Path(__file__).resolve().parent.parent
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A server process under test, with its metrics URL."""

    name: str
    proc: subprocess.Popen
    port: int
    path: str = "/metrics"
    log: Path | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Return once the metrics path answers 200; raise RuntimeError if the process dies or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text()[-2000:] if self.log and self.log.exists() else ""
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {tail}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", self.path)
                if conn.getresponse().status == 200:
                    conn.close()
                    return
                conn.close()
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not answer on 127.0.0.1:{self.port}{self.path} in {timeout:g}s")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; waits for the process."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _spawn(name: str, cmd: list[str], port: int, workdir: Path) -> Server:
    log = workdir / f"{name}-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT / "agent")})
    return Server(name, proc, port, log=log)


def start_headroom(config: Path, scenario: Path, workdir: Path) -> Server:
    """``headroom run`` on a free loopback port, simulating ``scenario`` with ``config``."""
    port = free_port()
    cmd = [sys.executable, "-m", "headroom", "run", "--config.file", str(config), "--simulate", str(scenario),
           "--web.listen-address", f"127.0.0.1:{port}", "--log.format", "json", "--log.level", "warn"]
    return _spawn("headroom", cmd, port, workdir)


def node_exporter_version() -> str | None:
    """node_exporter's version line, or None when it is not installed."""
    if not Path(NODE_EXPORTER).exists():
        return None
    r = subprocess.run([NODE_EXPORTER, "--version"], capture_output=True, text=True, timeout=10)
    text = (r.stdout or r.stderr).splitlines()
    return text[0].strip() if text else "unknown version"


def start_node_exporter(workdir: Path) -> Server:
    """node_exporter with its default collectors on a free loopback port."""
    port = free_port()
    return _spawn("node_exporter", [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}"], port, workdir)


def start_promclient(exposition: Path, workdir: Path) -> Server:
    """The bare prometheus-client exporter serving the samples of ``exposition``."""
    port = free_port()
    cmd = [sys.executable, str(ROOT / "bench" / "promclient_exporter.py"), str(exposition), str(port)]
    return _spawn("prometheus-client", cmd, port, workdir)


@dataclass(frozen=True)
class ScrapeResult:
    server: str
    encoding: str  # identity | gzip
    latencies: tuple[float, ...] = field(repr=False)  # seconds, every scrape of every round
    cpu_per_scrape: Spread  # seconds of server CPU per scrape, one value per round
    idle_cpu_per_second: Spread  # the server's CPU rate with nobody scraping
    body_bytes: int  # as sent (compressed when gzip)
    samples: int
    rss_after_warmup: int
    rss_end: int
    hwm_end: int

    @property
    def p50(self) -> float:
        return percentile(self.latencies, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 99)


def _scrape_window(server: Server, conn: http.client.HTTPConnection, scrapes: int, gap: float,
                   gzip: bool) -> tuple[list[float], float, float, bytes]:
    headers = {"Accept": ACCEPT, "Accept-Encoding": "gzip" if gzip else "identity"}
    latencies = []
    body = b""
    c0, t0 = cpu_seconds(server.pid), time.perf_counter()
    conn.close()  # servers drop idle keep-alive connections: each window starts on a fresh one
    for _ in range(scrapes):
        s = time.perf_counter()
        try:
            conn.request("GET", server.path, headers=headers)
            resp = conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            conn.close()  # closed between two scrapes: reconnect once, as Prometheus does
            conn.request("GET", server.path, headers=headers)
            resp = conn.getresponse()
        body = resp.read()
        latencies.append(time.perf_counter() - s)
        if resp.status != 200:
            raise RuntimeError(f"{server.name} answered {resp.status}")
        if resp.getheader("Connection", "").lower() == "close":
            conn.close()
        time.sleep(gap)
    return latencies, cpu_seconds(server.pid) - c0, time.perf_counter() - t0, body


def measure(server: Server, encodings: tuple[str, ...] = ("gzip", "identity"), rounds: int = 3,
            scrapes: int = 300, gap: float = 0.005, idle_seconds: float = 4.0,
            warmup_seconds: float = 3.0) -> list[ScrapeResult]:
    """Scrape ``server`` in ``rounds`` rounds of (idle window, one scrape window per encoding)."""
    server.wait_ready()
    time.sleep(warmup_seconds)
    rss_warm, _ = rss_bytes(server.pid)
    conns = {e: http.client.HTTPConnection("127.0.0.1", server.port, timeout=10) for e in encodings}
    latencies: dict[str, list[float]] = {e: [] for e in encodings}
    per_scrape: dict[str, list[float]] = {e: [] for e in encodings}
    idle_rates: list[float] = []
    bodies: dict[str, bytes] = {}
    identity_body = b""
    try:
        for e in encodings:  # open the connections and let the server settle before the first window
            _scrape_window(server, conns[e], 5, gap, e == "gzip")
        for _ in range(rounds):
            c0, t0 = cpu_seconds(server.pid), time.perf_counter()
            time.sleep(idle_seconds)
            idle = (cpu_seconds(server.pid) - c0) / (time.perf_counter() - t0)
            idle_rates.append(idle)
            for e in encodings:
                lat, cpu, elapsed, body = _scrape_window(server, conns[e], scrapes, gap, e == "gzip")
                latencies[e] += lat
                per_scrape[e].append(max(0.0, cpu - idle * elapsed) / scrapes)
                bodies[e] = body
        if "identity" not in encodings:
            identity_body = fetch_identity(server)
    finally:
        for c in conns.values():
            c.close()
    rss_end, hwm_end = rss_bytes(server.pid)
    identity_body = bodies.get("identity", identity_body)
    return [
        ScrapeResult(server.name, e, tuple(latencies[e]), Spread.of(per_scrape[e]), Spread.of(idle_rates),
                     len(bodies[e]), exposition_samples(identity_body), rss_warm, rss_end, hwm_end)
        for e in encodings
    ]


def fetch_identity(server: Server) -> bytes:
    """The uncompressed exposition the server sends now."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", server.path, headers={"Accept": ACCEPT})
        return conn.getresponse().read()
    finally:
        conn.close()


def have_node_exporter() -> bool:
    """True when the Debian node_exporter binary is installed."""
    return Path(NODE_EXPORTER).exists() or shutil.which("prometheus-node-exporter") is not None

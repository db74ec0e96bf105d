"""Soak: run `headroom run` for a long time at a high tick rate and check that it does not grow.

The issue's soak (10 minutes at 10 ticks per second with 8 simulated GPUs, scraped every second):

    .venv/bin/python bench/soak.py

A quick look: ``--duration 60``. The agent runs as a real child process on a free loopback port with a
generated 8-GPU scenario, one workload over every GPU, and ``agent.window`` and
``analysis.long_window`` both 60 s: the history the agent keeps fills during the warm-up, so the
baseline is taken with it full (with the defaults, 10 m and 5 m, at 10 ticks/s the agent holds 6001
samples and keeps growing for the first 10 minutes by design). After the warm-up the agent's RSS, threads and
open file descriptors are read from /proc every ``--every`` seconds and printed as a table.

Exit status: 0 flat; 1 growth beyond tolerance, a failed scrape, or a tick rate under 90 % of the
asked rate (``--min-tick-ratio``); 2 the agent did not start. Tolerances (end minus start): RSS ``--rss-tolerance-mib``
(default 4 MiB), threads 2, fds 2 (one scrape connection may be open while we count).
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script (bench/soak.py): the bench package is beside it
    sys.path.insert(0, str(ROOT))
from bench.host import listening_port  # noqa: E402


def scenario_yaml(gpus: int) -> str:
    """A scenario with ``gpus`` busy H100s (every signal moving, processes, PCIe), as YAML text."""
    out = [f"description: soak host, {gpus} busy H100s", "seed: 11", "gpus:"]
    for i in range(gpus):
        out += [
            "  - name: NVIDIA H100 80GB HBM3",
            "    memory_total: 81559MiB",
            "    power_limit: 700",
            "    fan_speed: {sine: {min: 0.3, max: 0.6, period: 90s}}",
            "    memory_temperature: {sine: {min: 60, max: 80, period: 2m}, noise: 0.5}",
            f"    utilization: {{sine: {{min: 0.4, max: 0.98, period: 60s, phase: {i * 7}s}}, noise: 0.05}}",
            "    memory_utilization: {sine: {min: 0.2, max: 0.7, period: 45s}, noise: 0.05}",
            "    memory_used: {value: 70GiB, noise: 256MiB}",
            "    power: {sine: {min: 300, max: 700, period: 60s}, noise: 10}",
            "    temperature: {sine: {min: 50, max: 80, period: 2m}, noise: 1}",
            "    sm_clock: {steps: [[0s, 1980MHz], [20s, 1755MHz], [40s, 1980MHz]], repeat: true, period: 60s}",
            "    clock_events:",
            "      sw_power_cap: {steps: [[0s, false], [20s, true], [40s, false]], repeat: true, period: 60s}",
            "    pcie_tx: {sine: {min: 100MiB, max: 2GiB, period: 30s}, noise: 50MiB}",
            "    pcie_rx: {sine: {min: 100MiB, max: 2GiB, period: 30s}, noise: 50MiB}",
            "    processes:",
            f"      - {{pid: {50000 + 2 * i}, used_memory: 60GiB}}",
            f"      - {{pid: {50001 + 2 * i}, used_memory: {{sine: {{min: 1GiB, max: 8GiB, period: 40s}}}}}}",
        ]
    return "\n".join(out) + "\n"


def config_yaml(interval: float, window: float, gpus: int) -> str:
    """The agent's configuration: the tick rate, the window, and one workload over every GPU (so the
    processes collector and the per-workload analysis run on each tick too)."""
    return (f"agent:\n  sample_interval: {interval}\n  window: {window}\nanalysis:\n  long_window: {window}\n"
            "collectors:\n  nvml:\n    pcie_poll_interval: 1s\n"
            "workloads:\n  - name: soak\n    kind: inference\n    params: 70B\n    precision: bf16\n"
            f"    gpus: [{', '.join(str(i) for i in range(gpus))}]\n    match: {{cmdline: 'vllm serve'}}\n")


@dataclass(frozen=True)
class Reading:
    """One look at the agent: seconds since the baseline, RSS bytes, threads, open fds, ticks so far,
    and the host's process count (the processes collector tracks every pid: its memory follows it)."""

    t: float
    rss_bytes: int
    threads: int
    fds: int
    ticks: int | None
    host_pids: int


def read_process(pid: int) -> tuple[int, int, int]:
    """(RSS bytes, threads, open file descriptors) of ``pid`` from /proc."""
    rss = threads = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, threads, len(os.listdir(f"/proc/{pid}/fd"))


_TICKS = re.compile(rb"^headroom_samples_total (\d+)", re.M)


class Scraper(threading.Thread):
    """Scrapes /metrics every ``period`` seconds over one keep-alive connection until stopped."""

    def __init__(self, port: int, period: float = 1.0) -> None:
        super().__init__(name="soak-scraper", daemon=True)
        self.port, self.period = port, period
        self.scrapes = 0
        self.errors: list[str] = []
        self.last_ticks: int | None = None
        self.worst_seconds = 0.0
        self.stopped = threading.Event()

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        while not self.stopped.wait(self.period):
            start = time.monotonic()
            try:
                conn.request("GET", "/metrics")
                resp = conn.getresponse()
                body = resp.read()
                if resp.status != 200:
                    self.errors.append(f"HTTP {resp.status}")
                    continue
            except (OSError, http.client.HTTPException) as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                continue
            self.worst_seconds = max(self.worst_seconds, time.monotonic() - start)
            self.scrapes += 1
            m = _TICKS.search(body)
            if m:
                self.last_ticks = int(m.group(1))
        conn.close()


@dataclass
class Result:
    readings: list[Reading]
    scrapes: int
    scrape_errors: list[str]
    worst_scrape_seconds: float
    tick_rate: float | None  # ticks per second achieved between the first and last reading
    collector_failures: int  # collector_failing events in the agent's log (a collector late or failing)
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def soak(duration: float, warmup: float, interval: float = 0.1, gpus: int = 8, every: float = 30.0,
         window: float = 60.0, rss_tolerance: int = 4 << 20, thread_tolerance: int = 2, fd_tolerance: int = 2,
         report=print, min_tick_ratio: float = 0.9) -> Result:
    """Run the agent for ``warmup`` + ``duration`` seconds; returns the readings and what grew too much.

    Raises RuntimeError when the agent does not start.
    """
    with tempfile.TemporaryDirectory(prefix="headroom-soak-") as tmp:
        scenario, config, log = Path(tmp, "soak.yaml"), Path(tmp, "config.yaml"), Path(tmp, "agent.log")
        scenario.write_text(scenario_yaml(gpus))
        config.write_text(config_yaml(interval, window, gpus))
        # port 0: the agent binds a port the kernel picks, and we read which (no free-port race)
        cmd = [sys.executable, "-m", "headroom", "run", "--config.file", str(config), "--simulate", str(scenario),
               "--web.listen-address", "127.0.0.1:0", "--log.format", "json"]
        with open(log, "wb") as log_file:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log_file)
        try:
            port = listening_port(proc, 30, "agent")
            scraper = Scraper(port)
            scraper.start()
            report(f"soak: {gpus} simulated GPUs, {1 / interval:g} ticks/s, window {window:g}s, "
                   f"warm-up {warmup:g}s, then {duration:g}s; pid {proc.pid}, port {port}")
            time.sleep(warmup)
            readings: list[Reading] = []
            start = time.monotonic()
            report(f"{'t (s)':>7} {'RSS (MiB)':>10} {'threads':>8} {'fds':>5} {'ticks':>8} {'host pids':>10}")
            while True:
                t = time.monotonic() - start
                if proc.poll() is not None:
                    raise RuntimeError(f"agent exited with {proc.returncode} during the soak")
                rss, threads, fds = read_process(proc.pid)
                pids = sum(1 for name in os.listdir("/proc") if name.isdigit())
                readings.append(Reading(t, rss, threads, fds, scraper.last_ticks, pids))
                r = readings[-1]
                report(f"{r.t:7.0f} {r.rss_bytes / 2**20:10.1f} {r.threads:8d} {r.fds:5d} {r.ticks or 0:8d} "
                       f"{r.host_pids:10d}")
                if t >= duration:
                    break
                time.sleep(min(every, duration - t) if duration - t > 0.5 else 0.5)
            scraper.stopped.set()
            scraper.join(10)
        finally:
            proc.terminate()
            try:
                code = proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            stderr = log.read_text(errors="replace")
    problems = []
    first, last = readings[0], readings[-1]
    if last.rss_bytes - first.rss_bytes > rss_tolerance:
        problems.append(f"RSS grew {(last.rss_bytes - first.rss_bytes) / 2**20:.1f} MiB "
                        f"(tolerance {rss_tolerance / 2**20:g} MiB)")
    # a collector late past agent.collector_timeout is isolated in a lane of its own and the others go on in a
    # new one (sampler.py, "collector_isolated"): one thread more per isolation, at most one per collector,
    # by design; a loaded machine at 10 ticks/s (a 100 ms deadline) can cause a few. Beyond those: a leak.
    isolated = stderr.count('"event": "collector_isolated"')
    if last.threads - first.threads > thread_tolerance + isolated:
        problems.append(f"threads grew from {first.threads} to {last.threads} "
                        f"({isolated} collector isolations account for {isolated} of them)")
    if last.fds - first.fds > fd_tolerance:
        problems.append(f"open fds grew from {first.fds} to {last.fds}")
    if scraper.errors:
        problems.append(f"{len(scraper.errors)} failed scrapes, first: {scraper.errors[0]}")
    rate = None
    if first.ticks is not None and last.ticks is not None and last.t > first.t:
        rate = (last.ticks - first.ticks) / (last.t - first.t)
        if rate < min_tick_ratio / interval:
            problems.append(f"ticked {rate:.2f}/s, asked {1 / interval:g}/s")
    if code != 0:
        problems.append(f"agent exited {code} on SIGTERM")
    if "Traceback" in stderr:
        problems.append("a traceback in the agent's log")
    failures = stderr.count('"event": "collector_failing"')
    return Result(readings, scraper.scrapes, scraper.errors, scraper.worst_seconds, rate, failures, problems)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=600.0, help="seconds measured after the warm-up (600)")
    p.add_argument("--warmup", type=float, default=70.0, help="seconds before the baseline (70: window + 10 s)")
    p.add_argument("--interval", type=float, default=0.1, help="tick interval in seconds (0.1 = 10 ticks/s)")
    p.add_argument("--gpus", type=int, default=8, help="simulated GPUs (8)")
    p.add_argument("--every", type=float, default=30.0, help="seconds between readings (30)")
    p.add_argument("--window", type=float, default=60.0, help="the agent's analysis window in seconds (60)")
    p.add_argument("--rss-tolerance-mib", type=float, default=4.0, help="allowed RSS growth, MiB (4)")
    p.add_argument("--min-tick-ratio", type=float, default=0.9,
                   help="the least share of the asked tick rate that passes (0.9; the test suite, on a shared "
                        "machine, asks only that it keeps ticking)")
    args = p.parse_args(argv)
    try:
        result = soak(args.duration, args.warmup, args.interval, args.gpus, args.every, args.window,
                      rss_tolerance=int(args.rss_tolerance_mib * 2**20), min_tick_ratio=args.min_tick_ratio)
    except RuntimeError as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return 2
    first, last = result.readings[0], result.readings[-1]
    print(f"first: RSS {first.rss_bytes / 2**20:.1f} MiB, {first.threads} threads, {first.fds} fds; "
          f"last: RSS {last.rss_bytes / 2**20:.1f} MiB, {last.threads} threads, {last.fds} fds")
    rate = f"{result.tick_rate:.2f}/s" if result.tick_rate is not None else "unknown"
    print(f"ticks {rate}; {result.scrapes} scrapes, {len(result.scrape_errors)} errors, "
          f"slowest {result.worst_scrape_seconds * 1000:.1f} ms; {result.collector_failures} collector_failing events")
    for problem in result.problems:
        print(f"FAIL: {problem}")
    print("flat" if result.ok else "NOT flat")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""What scraping serving runtimes adds to a tick, per endpoint, at the reference scale.

    python -m bench.serving          # ~2 minutes on 2 cores; prints the markdown for docs/benchmarks.md

The reference host of ``python -m bench`` (8 simulated GPUs, 1000 real processes, 3 workloads) is ticked
by the product's sampler (bench/ticks.py) twice per round: as is, and with each workload's profile
pointing ``endpoint:`` at a real HTTP server in another process serving a vLLM V1 exposition of
realistic size (the runtime's families from simulation/runtime_metrics.py plus the process, Python and
HTTP-instrumentator families a vLLM server also prints). Rounds alternate so drift hits both sides.

Two costs: the tick's own CPU (``time.process_time`` across ``Sampler.tick``: every thread while the
tick runs, so it includes whatever part of a scrape overlaps it), and the worker's CPU per scrape
(``_Endpoint.scrape`` timed with ``time.thread_time`` in its own thread: HTTP, parsing and mapping),
which runs off the tick once per tick per endpoint.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent.parent / "agent")]

from bench import host, ticks  # noqa: E402
from headroom import logs  # noqa: E402
from headroom.config import check_config_text  # noqa: E402

SERVER = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
body = open(sys.argv[1], "rb").read()
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def vllm_body() -> bytes:
    """A vLLM V1 /metrics of realistic size: the runtime's families plus process, GC and HTTP families."""
    from headroom.simulation.runtime_metrics import ServingState, exposition

    s = ServingState("vllm", "v1-itl", running=40, waiting=3, kv_usage=0.7, preemptions=12, prompt_tokens=9e6,
                     generation_tokens=3e6, requests=20000)
    for v, n in ((0.08, 12000), (0.3, 6000), (1.2, 2000)):
        s.observe("ttft", v, n)
        s.observe("e2e", v * 20, n)
    s.observe("itl", 0.025, 2_900_000)
    s.observe("itl", 0.09, 100_000)
    lines = [exposition(s).decode()]
    lines.append("# HELP python_gc_objects_collected_total Objects collected during gc\n"
                 "# TYPE python_gc_objects_collected_total counter\n"
                 + "".join(f'python_gc_objects_collected_total{{generation="{g}"}} 1234.0\n' for g in range(3)))
    lines.append("# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
                 "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 2.1e+09\n")
    bounds = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 7.5, 10.0,
              30.0, 60.0)
    lines.append("# HELP http_request_duration_highr_seconds Latency with many buckets but no API specific labels.\n"
                 "# TYPE http_request_duration_highr_seconds histogram\n"
                 + "".join(f'http_request_duration_highr_seconds_bucket{{le="{b}"}} {i * 100}.0\n'
                           for i, b in enumerate((*bounds, "+Inf"))))
    handlers = ("/v1/chat/completions", "/v1/completions", "/metrics", "/health", "/v1/models", "/tokenize")
    text = ["# HELP http_request_duration_seconds Latency with only few buckets by handler.\n"
            "# TYPE http_request_duration_seconds histogram\n"]
    for h in handlers:
        for m in ("GET", "POST"):
            for b in ("0.1", "0.5", "1.0", "+Inf"):
                text.append(f'http_request_duration_seconds_bucket{{handler="{h}",le="{b}",method="{m}"}} 10.0\n')
    lines.append("".join(text))
    return "".join(lines).encode()


def with_endpoints(config_text: str, urls: list[str]) -> str:
    out, k = [], 0
    for line in config_text.splitlines():
        out.append(line)
        if line.strip().startswith("match:") and k < len(urls):
            out.append(f"    endpoint: {urls[k]}")
            k += 1
    return "\n".join(out) + "\n"


def scrape_cpu(url: str, n: int = 200) -> tuple[float, float]:
    """(median thread CPU, median wall) seconds of one scrape of ``url`` by the product's endpoint worker."""
    from headroom.sources.serving import _Endpoint

    e = _Endpoint("bench", url, None, 0.5, 8 * 2**20)
    cpu, wall = [], []
    try:
        for _ in range(n):
            c, w = time.thread_time(), time.perf_counter()
            r = e.scrape()
            cpu.append(time.thread_time() - c)
            wall.append(time.perf_counter() - w)
            assert r.up, r.error
    finally:
        e.stop()
    return statistics.median(cpu), statistics.median(wall)


@dataclass(frozen=True)
class ServingCost:
    endpoints: int
    body_bytes: int
    tick_without: list[float]  # median tick CPU per round (process CPU across Sampler.tick), seconds
    tick_with: list[float]
    tick_thread_without: list[float]  # serving collect() + analysis + render, tick thread only
    tick_thread_with: list[float]
    scrape_cpu: float  # one scrape in its worker thread
    scrape_wall: float

    @property
    def per_endpoint_tick_thread(self) -> float:
        return (statistics.median(self.tick_thread_with) - statistics.median(self.tick_thread_without)) / self.endpoints

    @property
    def per_endpoint_total(self) -> float:
        """Tick-thread cost plus the scrape the endpoint's worker makes once per tick."""
        return self.per_endpoint_tick_thread + self.scrape_cpu

    @property
    def per_endpoint_process(self) -> float:
        return (statistics.median(self.tick_with) - statistics.median(self.tick_without)) / self.endpoints


def _tick_thread(r: ticks.TickResult) -> float:
    serving = r.collector_cpu.get("serving")
    return r.analysis_cpu.median + r.render_cpu.median + (serving.median if serving is not None else 0.0)


def measure(farm: host.ProcessFarm, inputs: Any, rounds: int = 3, n_ticks: int = 40, warmup: int = 60) -> ServingCost:
    """The reference scale ticked without and with one endpoint per workload, ``rounds`` times each
    (``inputs``: bench.run.Inputs)."""
    from bench.run import REFERENCE  # bench.run imports this module

    gpus, processes, workloads = REFERENCE
    body = vllm_body()
    path = inputs.workdir / "vllm.prom"
    path.write_bytes(body)
    servers = [subprocess.Popen([sys.executable, "-c", SERVER, str(path)], stdout=subprocess.PIPE, text=True)
               for _ in range(workloads)]
    try:
        urls = [f"http://127.0.0.1:{s.stdout.readline().strip()}/metrics" for s in servers]
        seen = farm.resize_host(processes)
        text = inputs.config(workloads).read_text()
        plain = check_config_text(text, "plain.yaml")
        served = check_config_text(with_endpoints(text, urls), "served.yaml")
        assert sum(1 for w in served.workloads if w.endpoint) == workloads
        out: dict[str, list[float]] = {"without": [], "with": [], "thread_without": [], "thread_with": []}
        for _ in range(rounds):
            for config, key in ((plain, "without"), (served, "with")):
                r = ticks.measure(config, inputs.scenario(gpus), gpus, seen, ticks=n_ticks, warmup=warmup)
                out[key].append(r.tick_cpu.median)
                out[f"thread_{key}"].append(_tick_thread(r))
        cpu, wall = scrape_cpu(urls[0])
    finally:
        for s in servers:
            s.kill()
            s.wait()
    return ServingCost(workloads, len(body), out["without"], out["with"], out["thread_without"], out["thread_with"],
                       cpu, wall)


def main() -> int:
    from bench.run import REFERENCE, Inputs

    logs.configure("warn", "console")
    workdir = Path(tempfile.mkdtemp(prefix="headroom-bench-serving-"))
    farm = host.ProcessFarm()
    try:
        farm.ensure_workloads(REFERENCE[2])
        cost = measure(farm, Inputs(farm, workdir))
    finally:
        farm.close()
        shutil.rmtree(workdir, ignore_errors=True)
    from bench.report import serving_section

    serving_section(cost, print)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

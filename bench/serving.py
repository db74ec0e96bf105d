"""What scraping serving runtimes adds to a tick, per endpoint, at the reference scale.

    python -m bench.serving          # ~2 minutes on 2 cores; prints the markdown for docs/benchmarks.md
    python -m bench.serving --scrape # seconds: one endpoint's scrape CPU, the 21 KiB body and a real-size 52 KiB one

The reference host of ``python -m bench`` (8 simulated GPUs, 1000 real processes, 3 workloads) is ticked
by the product's sampler (bench/ticks.py) twice per round: as is, and with each workload's profile
pointing ``endpoint:`` at a real HTTP server in another process serving a vLLM 0.32 exposition of the
size real ones have, 52 KiB (``vllm_032_body``: the runtime's families from simulation/runtime_metrics.py, the
histograms and counters vllm 0.32's loggers.py adds, and the process, Python and HTTP-instrumentator families a
vLLM server also prints). Rounds alternate so drift hits both sides.

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

from bench import host, ticks
from headroom import logs
from headroom.config import check_config_text

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


# vllm 0.32's bucket bounds (vllm/v1/metrics/buckets.py) and the histograms its PrometheusStatLogger registers beyond
# the ones simulation/runtime_metrics.py prints (vllm/v1/metrics/loggers.py 864-1030), with max_model_len 32768
_LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
            960.0, 1920.0, 7680.0)
_TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)  # build_1_2_5_buckets(32768)
_ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
VLLM_032_HISTOGRAMS = (
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", _TOKENS, 900.0),
    ("vllm:request_generation_tokens", "Number of generation tokens processed.", _TOKENS, 300.0),
    ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
     (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384), 120.0),
    ("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.",
     _TOKENS, 1024.0),
    ("vllm:request_params_n", "Histogram of the n request parameter.", (1, 2, 5, 10, 20), 1.0),
    ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", _TOKENS, 1024.0),
    ("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", _ITL,
     0.03),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", _LATENCY, 0.4),
    ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", _LATENCY, 8.0),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", _LATENCY, 0.2),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", _LATENCY, 7.8),
    ("vllm:request_num_preemptions", "Number of preemptions per request.", (1, 2, 3, 4, 5, 10, 20), 0.0),
    ("vllm:request_prefill_kv_computed_tokens",
     "Histogram of new KV tokens computed during prefill (excluding cached tokens).", _TOKENS, 600.0),
)


def vllm_032_body() -> bytes:
    """A vLLM 0.32 /metrics of the size real ones have (48-52 KiB: issue 27): vllm_body() plus the families vllm 0.32
    registers beyond those (the histograms above, waiting by reason, sleep state, admission rejections, prefix and
    multimodal cache counters), printed as its prometheus-client prints them (_created samples included)."""
    from headroom.simulation.runtime_metrics import Hist, _Text

    t = _Text(1.7e9)
    labels = {"model_name": "meta-llama/Llama-3.1-8B-Instruct", "engine": "0"}
    for name, doc, bounds, typical in VLLM_032_HISTOGRAMS:
        h = Hist(tuple(float(b) for b in bounds))
        h.observe(typical, 20000)
        t.histogram(name, doc, labels, h)
    for reason, n in (("capacity", 3.0), ("deferred", 0.0)):
        t.gauge("vllm:num_requests_waiting_by_reason", "Number of waiting requests by reason.",
                {**labels, "reason": reason}, n)
    for state, n in (("awake", 1.0), ("weights_offloaded", 0.0), ("discard_all", 0.0)):
        t.gauge("vllm:engine_sleep_state", "Engine sleep state.", {**labels, "sleep_state": state}, n)
    for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
        t.counter("vllm:admission_rejections", "Number of admission attempts rejected by a queue limit, by reason.",
                  {"model_name": labels["model_name"], "reason": reason}, 0.0)
    for name in ("prefix_cache_queries", "prefix_cache_hits", "prompt_tokens_cached"):  # no KV connector, text only
        t.counter(f"vllm:{name}", name.replace("_", " ").capitalize() + ".", labels, 123456.0)
    for source in ("local_compute", "local_cache_hit", "external_kv_transfer"):
        t.counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", {**labels, "source": source},
                  3e6)
    for reason in ("stop", "length", "abort"):
        t.counter("vllm:request_success", "Count of successfully processed requests.",
                  {**labels, "finished_reason": reason}, 5000.0)
    # later releases print no vllm:time_per_output_token_seconds (renamed in 0.11), and the HTTP instrumentator
    # prints only the handler and method pairs that were called (a chat server: POST chat, GET metrics and health)
    called = ('handler="/v1/chat/completions",le', 'handler="/metrics",le', 'handler="/health",le')
    base = [line for line in vllm_body().decode().splitlines(keepends=True)
            if "vllm:time_per_output_token_seconds" not in line
            and not (line.startswith("http_request_duration_seconds_bucket")
                     and not (any(c in line for c in called) and ('method="POST"' in line) == ("chat" in line)))]
    return "".join(base).encode() + t.text().encode()


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
    from headroom.sources.serving.collector import _Endpoint  # private: the endpoint worker itself, timed

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
    body = vllm_032_body()  # real expositions are 48-52 KiB (issue 27); vllm_body() was 18-21 KiB
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


def scrape_sizes(n: int = 400) -> list[tuple[str, int, float, float]]:
    """(body, bytes, median scrape CPU, median wall) of one endpoint's worker on the 21 KiB body docs/serving.md once
    priced (18 KiB then) and on a real-size (vLLM 0.32) one: the scrape's cost alone, without the tick (``--scrape``)."""
    out = []
    with tempfile.TemporaryDirectory(prefix="headroom-bench-scrape-") as workdir:
        for label, body in (("vLLM V1 (0.11)", vllm_body()), ("vLLM 0.32, real size", vllm_032_body())):
            path = Path(workdir) / "body.prom"
            path.write_bytes(body)
            server = subprocess.Popen([sys.executable, "-c", SERVER, str(path)], stdout=subprocess.PIPE, text=True)
            try:
                url = f"http://127.0.0.1:{server.stdout.readline().strip()}/metrics"
                cpu, wall = scrape_cpu(url, n)
            finally:
                server.kill()
                server.wait()
            out.append((label, len(body), cpu, wall))
    return out


def main() -> int:
    from bench.run import REFERENCE, Inputs

    logs.configure("warn", "console")
    if "--scrape" in sys.argv[1:]:
        print("| exposition | size | scrape CPU (median) | scrape wall (median) |\n|---|---|---|---|")
        for label, size, cpu, wall in scrape_sizes():
            print(f"| {label} | {size / 1024:.1f} KiB | {cpu * 1000:.2f} ms | {wall * 1000:.2f} ms |")
        return 0
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

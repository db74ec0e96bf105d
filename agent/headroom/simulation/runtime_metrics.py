"""Serving runtimes' /metrics as the runtimes themselves print them, for stand-ins and test fixtures.

Each runtime's families (names, HELP texts, types, label sets, histogram bounds) follow what its own
source registers (docs/serving.md names the file and versions): vLLM and SGLang print through the
Python prometheus-client (counters as ``_total``, plus ``_created`` outside multiprocess mode, floats as
``1.0``), TGI through
the Rust ``metrics-exporter-prometheus`` (no labels, no ``_created``), Triton through prometheus-cpp
(``model`` and ``version`` labels). Values come from a ``ServingState`` that a stand-in drives from
scenario signals.

Standard library and prometheus-client only (a stand-in process imports it with the agent's sys.path).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.utils import floatToGoString

if TYPE_CHECKING:  # names only: serve() imports them when it starts
    import threading
    from http.server import ThreadingHTTPServer

    from headroom.simulation.openai_api import Api

# (runtime, version) -> what that version exports. Versions are the mapping generations of
# docs/serving.md, not single releases.
VERSIONS: dict[str, tuple[str, ...]] = {
    "vllm": ("v0", "v1", "v1-itl"),
    "sglang": ("tpot", "itl"),
    "tgi": ("v3",),
    "triton": ("trtllm",),
}
DEFAULT_VERSION = {"vllm": "v1-itl", "sglang": "itl", "tgi": "v3", "triton": "trtllm"}

_TGI_DURATION = tuple(0.0001 * 1.5 ** (i + 1) for i in range(35))  # the router's geometric duration buckets
BOUNDS: dict[tuple[str, str], tuple[float, ...]] = {
    ("vllm-v0", "ttft"): (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0),
    ("vllm-v0", "itl"): (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5),
    ("vllm-v0", "e2e"): (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0),
    ("vllm", "ttft"): (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                       20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
    ("vllm", "itl"): (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                      40.0, 80.0),
    ("vllm", "e2e"): (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                      480.0, 960.0, 1920.0, 7680.0),
    ("sglang", "ttft"): (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400),
    ("sglang", "itl"): (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
                        0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000),
    ("sglang", "e2e"): (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800,
                        2400),
    ("tgi", "itl"): _TGI_DURATION,
    ("tgi", "e2e"): _TGI_DURATION,
    ("triton", "ttft"): (100.0, 500.0, 2000.0, 5000.0),  # milliseconds, as configured in the docs' example
}


@dataclass
class Hist:
    """A cumulative histogram over fixed upper bounds (+Inf implied)."""

    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)
    sum: float = 0.0
    count: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0.0] * (len(self.bounds) + 1)

    def observe(self, value: float, n: float = 1.0) -> None:
        """``n`` observations of ``value``."""
        for i, bound in enumerate((*self.bounds, math.inf)):
            if value <= bound:
                self.counts[i] += n
        self.sum += value * n
        self.count += n


@dataclass
class ServingState:
    """What a stand-in runtime reports; counters and histograms only grow."""

    runtime: str
    version: str
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0  # ratio 0-1
    kv_blocks: int = 2048  # vLLM num_gpu_blocks (others: capacity_tokens / block_size)
    block_size: int = 16
    preemptions: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    requests: float = 0.0  # finished successfully
    created: float = 1_700_000_000.0  # the _created stamp prometheus-client prints
    hists: dict[str, Hist] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.version not in VERSIONS.get(self.runtime, ()):
            raise ValueError(f"unknown serving runtime {self.runtime!r} version {self.version!r}; known: "
                             + ", ".join(f"{r} {'/'.join(v)}" for r, v in VERSIONS.items()))
        key = "vllm-v0" if (self.runtime, self.version) == ("vllm", "v0") else self.runtime
        for metric in ("ttft", "itl", "e2e"):
            bounds = BOUNDS.get((key, metric))
            if bounds is not None:
                self.hists[metric] = Hist(bounds)

    @property
    def capacity_tokens(self) -> int:
        return self.kv_blocks * self.block_size

    def observe(self, metric: str, seconds: float, n: float = 1.0) -> None:
        """Observations of ttft / itl / e2e (seconds; Triton's histogram is in milliseconds)."""
        h = self.hists.get(metric)
        if h is not None:
            h.observe(seconds * 1000.0 if self.runtime == "triton" else seconds, n)


def _f(value: float) -> str:
    """A number as the Python client prints it: 1.0, 0.25, +Inf."""
    return floatToGoString(value)


def _plain(value: float) -> str:
    """A number as Rust's and prometheus-cpp's exporters print it: 3, 0.25, +Inf, never 1e-05."""
    value = float(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer():
        return str(int(value))
    text = repr(value)
    return f"{value:.20f}".rstrip("0") if "e" in text else text


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return "{" + inner + "}"


class _Text:
    """Families laid out as the runtime's exporter prints them.

    The Python prometheus-client (vLLM, SGLang; ``python_client``) sorts label names, names a counter's
    HELP/TYPE after its ``_total`` sample and prints each ``_created`` stamp as a gauge family of its
    own after the family. The Rust and C++ exporters print labels as given and no ``_created``."""

    def __init__(self, created: float | None, number=_f, python_client: bool = True) -> None:
        self.lines: list[str] = []
        self.created = created  # None: no _created samples (vLLM V0, SGLang multiprocess, Rust, C++)
        self.n = number
        self.python_client = python_client

    def labels(self, labels: dict[str, str]) -> str:
        return _labels(dict(sorted(labels.items())) if self.python_client else labels)

    def family(self, name: str, kind: str, doc: str) -> None:
        self.lines += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]

    def _created(self, name: str, doc: str, labels: dict[str, str]) -> None:
        if self.created is not None:
            self.gauge(f"{name}_created", doc, labels, self.created)

    def gauge(self, name: str, doc: str, labels: dict[str, str], value: float) -> None:
        self.family(name, "gauge", doc)
        self.lines.append(f"{name}{self.labels(labels)} {self.n(value)}")

    def counter(self, name: str, doc: str, labels: dict[str, str], value: float) -> None:
        self.family(f"{name}_total" if self.python_client else name, "counter", doc)
        self.lines.append(f"{name}_total{self.labels(labels)} {self.n(value)}")
        self._created(name, doc, labels)

    def histogram(self, name: str, doc: str, labels: dict[str, str], h: Hist) -> None:
        self.family(name, "histogram", doc)
        for bound, count in zip((*h.bounds, math.inf), h.counts, strict=True):
            self.lines.append(f"{name}_bucket{self.labels({**labels, 'le': self.n(float(bound))})} {self.n(count)}")
        count = f"{name}_count{self.labels(labels)} {self.n(h.count)}"
        total = f"{name}_sum{self.labels(labels)} {self.n(h.sum)}"
        self.lines += [count, total] if self.python_client else [total, count]  # the Rust exporter: sum first
        self._created(name, doc, labels)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _vllm(s: ServingState) -> str:
    v0 = s.version == "v0"
    t = _Text(None if v0 else s.created)
    labels = {"model_name": s.model} if v0 else {"model_name": s.model, "engine": "0"}
    cache = {"block_size": str(s.block_size), "cache_dtype": "auto", "enable_prefix_caching": str(not v0),
             "gpu_memory_utilization": "0.9", "num_cpu_blocks": "0" if not v0 else "2048",
             "num_gpu_blocks": str(s.kv_blocks)}
    if v0:
        t.gauge("vllm:cache_config_info", "information of cache_config", cache, 1.0)
    t.gauge("vllm:num_requests_running", "Number of requests currently running on GPU." if v0
            else "Number of requests in model execution batches.", labels, s.running)
    t.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels, s.waiting)
    if v0:
        t.gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", labels, s.kv_usage)
    elif s.version == "v1":
        t.gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage."
                "DEPRECATED: Use vllm:kv_cache_usage_perc instead.", labels, s.kv_usage)
    if not v0:
        t.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels, s.kv_usage)
    t.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels, s.preemptions)
    t.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, s.prompt_tokens)
    t.counter("vllm:generation_tokens", "Number of generation tokens processed.", labels, s.generation_tokens)
    t.counter("vllm:request_success", "Count of successfully processed requests.",
              {**labels, "finished_reason": "stop" if v0 else "FinishReason.STOP"}, s.requests)
    t.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels,
                s.hists["ttft"])
    if s.version == "v1-itl":  # 0.11: the old name stays beside the new one, deprecated, fed the same values
        t.histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds."
                    "DEPRECATED: Use vllm:inter_token_latency_seconds instead.", labels, s.hists["itl"])
        t.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", labels,
                    s.hists["itl"])
    else:
        t.histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", labels,
                    s.hists["itl"])
    t.histogram("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds." if v0
                else "Histogram of e2e request latency in seconds.", labels, s.hists["e2e"])
    if not v0:
        t.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", {**cache, "engine": "0"}, 1.0)
    return t.text()


def _sglang(s: ServingState) -> str:
    # SGLang sets PROMETHEUS_MULTIPROC_DIR: the multiprocess collector prints no _created samples
    t = _Text(None)
    if s.version == "tpot":  # older releases: one `name` label (as their expositions show)
        sched = tok = {"name": s.model}
    else:
        sched = {"model_name": s.model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        tok = {"model_name": s.model}
    t.gauge("sglang:num_running_reqs", "The number of running requests.", sched, s.running)
    t.gauge("sglang:num_used_tokens", "The number of used tokens.", sched, round(s.kv_usage * s.capacity_tokens))
    t.gauge("sglang:token_usage", "The token usage.", sched, s.kv_usage)
    t.gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", sched, s.waiting)
    t.gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", sched,
            s.capacity_tokens)
    if s.version == "itl":
        t.counter("sglang:num_retracted_requests", "Total number of retracted requests.", sched, s.preemptions)
    t.counter("sglang:prompt_tokens", "Number of prefill tokens processed.", tok, s.prompt_tokens)
    t.counter("sglang:generation_tokens", "Number of generation tokens processed.", tok, s.generation_tokens)
    t.counter("sglang:num_requests", "Number of requests processed.", tok, s.requests)
    t.histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", tok,
                s.hists["ttft"])
    if s.version == "itl":
        t.histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", tok,
                    s.hists["itl"])
    else:
        t.histogram("sglang:time_per_output_token_seconds", "Histogram of time per output token in seconds.", tok,
                    s.hists["itl"])
    t.histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", tok,
                s.hists["e2e"])
    return t.text()


def _tgi(s: ServingState) -> str:
    # metrics-exporter-prometheus: HELP from describe_*!, no labels on these, no _created; gauges as integers
    t = _Text(None, _plain, python_client=False)
    capacity = s.capacity_tokens
    t.gauge("tgi_batch_max_total_tokens", "Maximum amount of tokens in total.", {}, capacity)
    t.gauge("tgi_batch_current_size", "Current batch size", {}, s.running)
    t.gauge("tgi_batch_current_max_tokens", "Maximum tokens for the current batch", {}, round(s.kv_usage * capacity))
    t.gauge("tgi_queue_size", "Current queue size", {}, s.waiting)
    t.family("tgi_request_success", "counter", "Number of successful requests")
    t.lines.append(f"tgi_request_success {int(s.requests)}")
    t.histogram("tgi_request_duration", "Request duration", {}, s.hists["e2e"])
    t.histogram("tgi_request_mean_time_per_token_duration", "Mean time per token per request", {}, s.hists["itl"])
    for name, doc, total in (("tgi_request_input_length", "Input token length per request", s.prompt_tokens),
                             ("tgi_request_generated_tokens", "Generated tokens per request", s.generation_tokens)):
        t.family(name, "histogram", doc)
        t.lines.append(f"{name}_bucket{{le=\"+Inf\"}} {int(s.requests)}")
        t.lines.append(f"{name}_sum {int(total)}")
        t.lines.append(f"{name}_count {int(s.requests)}")
    return t.text()


def _triton(s: ServingState) -> str:
    # prometheus-cpp: HELP then TYPE, labels model/version sorted, integers as integers
    t = _Text(None, _plain)
    ids = {"model": "tensorrt_llm", "version": "1"}
    t.family("nv_inference_request_success", "counter",
             "Number of successful inference requests, all batch sizes")
    t.lines.append(f"nv_inference_request_success{_labels(ids)} {int(s.requests)}")
    t.family("nv_inference_pending_request_count", "gauge",
             "Instantaneous number of pending requests awaiting execution per-model.")
    t.lines.append(f"nv_inference_pending_request_count{_labels(ids)} {int(s.waiting)}")
    t.family("nv_inference_first_response_histogram_ms", "histogram",
             "Duration from request to first response in milliseconds")
    h = s.hists["ttft"]
    t.lines.append(f"nv_inference_first_response_histogram_ms_count{_labels(ids)} {int(h.count)}")
    t.lines.append(f"nv_inference_first_response_histogram_ms_sum{_labels(ids)} {_plain(h.sum)}")
    for bound, count in zip((*h.bounds, math.inf), h.counts, strict=True):
        le = _plain(bound)
        t.lines.append(f"nv_inference_first_response_histogram_ms_bucket{_labels({**ids, 'le': le})} {int(count)}")
    t.family("nv_trt_llm_request_metrics", "gauge", "TRT LLM request metrics")
    for kind, value in (("context", 0), ("scheduled", s.running), ("max", 256), ("active", s.running),
                        ("waiting", s.waiting)):
        t.lines.append(f"nv_trt_llm_request_metrics{_labels({'model': 'tensorrt_llm', 'request_type': kind, 'version': '1'})} {int(value)}")
    t.family("nv_trt_llm_kv_cache_block_metrics", "gauge", "TRT LLM KV cache block metrics")
    used = round(s.kv_usage * s.kv_blocks)
    for kind, value in (("max", s.kv_blocks), ("free", s.kv_blocks - used), ("used", used),
                        ("tokens_per", s.block_size)):
        t.lines.append(f"nv_trt_llm_kv_cache_block_metrics{_labels({'kv_cache_block_type': kind, 'model': 'tensorrt_llm', 'version': '1'})} {int(value)}")
    return t.text()


_RENDER = {"vllm": _vllm, "sglang": _sglang, "tgi": _tgi, "triton": _triton}


def exposition(state: ServingState) -> bytes:
    """The /metrics body the runtime of ``state`` would print now."""
    return _RENDER[state.runtime](state).encode("utf-8")


# ------------------------------------------------------------------------------------- stand-in
class Driver:
    """Moves a ServingState along scenario signals: gauges follow them, counters and histograms grow
    with the requests that arrive (``arrivals`` per second, each with ``prompt_tokens`` in and
    ``output_tokens`` out, a ``ttft`` and an ``itl`` in seconds). Whole requests only: fractions carry."""

    lock: threading.Lock  # set by serve(): the stand-in advances the driver under it
    started: float  # set by a stand-in process (standin.py): when it started serving (time.monotonic)

    def __init__(self, state: ServingState, signals) -> None:
        self.state = state
        self.signals = signals  # name -> object with .at(t)
        self._carry = {"requests": 0.0, "preemptions": 0.0}
        self.t = 0.0
        self.api: Api | None = None  # simulation/openai_api.Api: the load a client drives, beside the signals'

    def value(self, name: str, t: float) -> float:
        signal = self.signals.get(name)  # a signal the spec leaves out holds at 0
        return 0.0 if signal is None else float(signal.at(t))

    def advance(self, t: float) -> None:
        dt = max(0.0, t - self.t)
        self.t = t
        s = self.state
        s.running, s.waiting = round(self.value("running", t)), round(self.value("waiting", t))
        s.kv_usage = round(min(1.0, self.value("kv_usage", t)), 4)
        if self.api is not None:  # the background share of the cache that the API's requests cannot use
            self.api.model.background_usage = s.kv_usage
        for key, rate in (("requests", self.value("arrivals", t)), ("preemptions", self.value("preemptions", t))):
            self._carry[key] += rate * dt
        n = int(self._carry["requests"])
        self._carry["requests"] -= n
        p = int(self._carry["preemptions"])
        self._carry["preemptions"] -= p
        s.preemptions += p
        if n:
            prompt, output = round(self.value("prompt_tokens", t)), round(self.value("output_tokens", t))
            ttft, itl = self.value("ttft", t), self.value("itl", t)
            s.requests += n
            s.prompt_tokens += n * prompt
            s.generation_tokens += n * output
            s.observe("ttft", ttft, n)
            s.observe("itl", itl, n * max(0, output - 1))
            s.observe("e2e", ttft + itl * max(0, output - 1), n)


def serve(spec: dict, signal_type) -> tuple[ThreadingHTTPServer, Driver]:
    """Start serving ``spec`` (ServingSpec.launch_spec) on 127.0.0.1; returns (server, driver).

    ``signal_type`` rebuilds the scenario's signals from their fields. The caller advances the driver."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    signals = {k: signal_type(**{**v, "steps": tuple(tuple(x) for x in v.get("steps", ()))})
               for k, v in spec["signals"].items()}
    state = ServingState(spec["runtime"], spec["version"], model=spec["model"], kv_blocks=spec["kv_blocks"],
                         block_size=spec["block_size"])
    from headroom.simulation.openai_api import Api, LoadModel

    driver = Driver(state, signals)
    lock = threading.Lock()
    # the runtime's OpenAI-compatible API on the same port (simulation/openai_api.py): what `headroom probe` drives
    api = Api(LoadModel(state.capacity_tokens, state.block_size, **spec.get("api", {})), state, lock)
    driver.api = api
    driver.advance(driver.t)  # the gauges hold their signals' first values from the first scrape on, not zeros

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            if not api.post(self, self.path.split("?", 1)[0]):
                self.send_error(404)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0]
            if path != "/metrics":
                if not api.get(self, path):
                    self.send_error(404)
                return
            extra = api.overlay()
            with lock:  # the signals' values plus the API's own load
                saved = state.running, state.waiting, state.kv_usage
                state.running += extra["running"]
                state.waiting += extra["waiting"]
                state.kv_usage = round(min(1.0, state.kv_usage + extra["kv_usage"]), 4)
                body = exposition(state)
                state.running, state.waiting, state.kv_usage = saved
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 1024  # a probe opens hundreds of connections at once (the default backlog is 5)

        def handle_error(self, request, client_address) -> None:
            """A client that gave up (closed or reset before it read the answer) is no error of the runtime's:
            socketserver would print a traceback on the agent's stderr. Anything else: one line."""
            exc = sys.exc_info()[1]
            if isinstance(exc, (ConnectionError, TimeoutError)):
                return
            print(f"simulated runtime /metrics: {type(exc).__name__}: {exc}", file=sys.stderr)

    server = Server(("127.0.0.1", int(spec["port"])), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="serving", daemon=True).start()
    driver.lock = lock  # the stand-in advances under it
    return server, driver

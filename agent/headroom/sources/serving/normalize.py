"""From an exposition's samples to ``samples.ServingEndpoint``'s fields, per runtime: ``Metrics`` (the samples by
name: totals, highest values, histograms merged by bound) and one normalizer per runtime (``NORMALIZERS``: vLLM,
SGLang, TGI, Triton, llama.cpp; docs/serving.md maps each field to the runtime's metric, per version). ``_KEEP``
names every sample a normalizer reads, found by running them on an empty table: the parser reads only those."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from headroom.samples import Histogram, ServingFields

MAX_HISTOGRAM_BUCKETS = 64  # distinct bounds of one histogram (vLLM's have 22); more: that histogram is not read


class Metrics:
    """The samples of an exposition, by sample name: ``name -> [(labels, value), ...]``."""

    def __init__(self, samples: Mapping[str, list[tuple[dict[str, str], float]]]) -> None:
        self.samples = samples
        self.oversized: list[str] = []  # histograms not read for their buckets (MAX_HISTOGRAM_BUCKETS)
        self.dropped_buckets = 0  # their bucket lines

    def total(self, *names: str, where: Mapping[str, str] | None = None) -> float | None:
        """The sum over label sets of the first name present (engines, ranks and models add up)."""
        for name in names:
            rows = self._rows(name, where)
            if rows:
                return float(sum(v for _, v in rows))
        return None

    def highest(self, *names: str) -> float | None:
        """The largest value over label sets of the first name present (the fullest engine)."""
        for name in names:
            rows = self._rows(name, None)
            if rows:
                return float(max(v for _, v in rows))
        return None

    def histogram(self, *names: str, scale: float = 1.0) -> Histogram | None:
        """The first histogram family present, label sets merged by bound, bounds and sum times ``scale``."""
        for name in names:
            rows = self.samples.get(f"{name}_bucket")
            if not rows:
                continue
            by_bound: dict[float, float] = {}
            for labels, value in rows:
                try:
                    bound = float(labels.get("le", "nan"))
                except ValueError:
                    continue
                if not math.isnan(bound):
                    by_bound[bound] = by_bound.get(bound, 0.0) + value
            if len(by_bound) > MAX_HISTOGRAM_BUCKETS:  # each sample would keep them all in the window
                self.oversized.append(f"{name}: more than {MAX_HISTOGRAM_BUCKETS} buckets "
                                      "(serving.MAX_HISTOGRAM_BUCKETS), not read")
                self.dropped_buckets += len(rows)
                continue
            if not by_bound or math.inf not in by_bound:
                continue
            bounds = sorted(by_bound)
            total = sum(v for _, v in self.samples.get(f"{name}_sum", ()))
            count = sum(v for _, v in self.samples.get(f"{name}_count", ()))
            return Histogram(bounds=tuple(b * scale if b != math.inf else b for b in bounds),
                             counts=tuple(by_bound[b] for b in bounds), sum=total * scale, count=count)
        return None

    def _rows(self, name: str, where: Mapping[str, str] | None) -> list[tuple[dict[str, str], float]]:
        rows = self.samples.get(name) or []
        if where:
            rows = [(labels, v) for labels, v in rows if all(labels.get(k) == x for k, x in where.items())]
        return [(labels, v) for labels, v in rows if not math.isnan(v)]


def _vllm(m: Metrics) -> ServingFields:
    capacity = None
    engines: dict[str, float] = {}
    for labels, _ in m.samples.get("vllm:cache_config_info", ()):
        try:
            engines[labels.get("engine", "")] = float(labels["num_gpu_blocks"]) * float(labels["block_size"])
        except (KeyError, ValueError):  # "None" until the engine has profiled its memory
            continue
    if engines:
        capacity = sum(engines.values())
    return dict(
        kv_cache_usage_ratio=m.highest("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        requests_running=m.total("vllm:num_requests_running"),
        requests_waiting=m.total("vllm:num_requests_waiting"),
        # 0.2x (vllm/v1/metrics/loggers.py): reason "capacity" is the scheduler's waiting queue (num_waiting_reqs),
        # "deferred" the requests it skipped for a transient constraint (num_skipped_waiting_reqs: LoRA budget, an
        # async KV transfer, a blocked request); their sum is vllm:num_requests_waiting
        requests_waiting_deferred=m.total("vllm:num_requests_waiting_by_reason", where={"reason": "deferred"}),
        admission_rejections_total=m.total("vllm:admission_rejections_total"),  # by reason: max_num_queued_reqs/_tokens
        request_queue_time=m.histogram("vllm:request_queue_time_seconds"),
        sleep_level=_vllm_sleep_level(m),
        preemptions_total=m.total("vllm:num_preemptions_total"),
        kv_cache_capacity_tokens=capacity,
        prompt_tokens_total=m.total("vllm:prompt_tokens_total"),
        generation_tokens_total=m.total("vllm:generation_tokens_total"),
        time_to_first_token=m.histogram("vllm:time_to_first_token_seconds"),
        inter_token_latency=m.histogram("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    )


def _vllm_sleep_level(m: Metrics) -> int | None:
    """vllm:engine_sleep_state (sleep mode, POST /sleep): 0 while any engine is awake (its awake series 1), else the
    deepest level asleep (weights_offloaded 1: level 1, discard_all 1: level 2); None where it is not exported."""
    rows = m.samples.get("vllm:engine_sleep_state") or []
    state: dict[str, float] = {}
    for labels, value in rows:
        name = labels.get("sleep_state", "")
        if not math.isnan(value):
            state[name] = max(state.get(name, 0.0), value)
    if "awake" not in state:
        return None
    if state["awake"] >= 1:
        return 0
    return 2 if state.get("discard_all", 0.0) >= 1 else 1


def _sglang(m: Metrics) -> ServingFields:
    return dict(
        kv_cache_usage_ratio=m.highest("sglang:token_usage"),
        # 0.3.x (python/sglang/srt/metrics/metrics_collector.py): num_requests_running / num_requests_waiting
        requests_running=m.total("sglang:num_running_reqs", "sglang:num_requests_running"),
        requests_waiting=m.total("sglang:num_queue_reqs", "sglang:num_requests_waiting"),
        preemptions_total=m.total("sglang:num_retracted_requests_total"),
        kv_cache_capacity_tokens=m.total("sglang:max_total_num_tokens"),
        prompt_tokens_total=m.total("sglang:prompt_tokens_total"),
        generation_tokens_total=m.total("sglang:generation_tokens_total"),
        time_to_first_token=m.histogram("sglang:time_to_first_token_seconds"),
        inter_token_latency=m.histogram("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    )


def _tgi(m: Metrics) -> ServingFields:
    capacity = m.total("tgi_batch_max_total_tokens")
    reserved = m.total("tgi_batch_current_max_tokens")
    return dict(
        kv_cache_usage_ratio=(min(1.0, reserved / capacity) if reserved is not None and capacity else None),
        requests_running=m.total("tgi_batch_current_size"),
        requests_waiting=m.total("tgi_queue_size"),
        kv_cache_capacity_tokens=capacity,
        prompt_tokens_total=m.total("tgi_request_input_length_sum"),
        generation_tokens_total=m.total("tgi_request_generated_tokens_sum"),
        inter_token_latency=m.histogram("tgi_request_mean_time_per_token_duration"),
    )


def _triton(m: Metrics) -> ServingFields:
    kv = "nv_trt_llm_kv_cache_block_metrics"
    used, most = m.total(kv, where={"kv_cache_block_type": "used"}), m.total(kv, where={"kv_cache_block_type": "max"})
    per_block = m.total(kv, where={"kv_cache_block_type": "tokens_per"})
    rq = "nv_trt_llm_request_metrics"
    waiting = m.total(rq, where={"request_type": "waiting"})
    return dict(
        kv_cache_usage_ratio=(used / most if used is not None and most else None),
        requests_running=m.total(rq, where={"request_type": "active"}),
        requests_waiting=waiting if waiting is not None else m.total("nv_inference_pending_request_count"),
        kv_cache_capacity_tokens=(most * per_block if most is not None and per_block else None),
        time_to_first_token=m.histogram("nv_inference_first_response_histogram_ms", scale=1e-3),
    )


def _llamacpp(m: Metrics) -> ServingFields:
    """llama.cpp's llama-server (``--metrics``): slots processing and deferred requests; its KV cache usage
    gauge only in the releases that export it (llamacpp:kv_cache_usage_ratio, removed in 2025)."""
    return dict(
        kv_cache_usage_ratio=m.highest("llamacpp:kv_cache_usage_ratio"),
        requests_running=m.total("llamacpp:requests_processing"),
        requests_waiting=m.total("llamacpp:requests_deferred"),
        prompt_tokens_total=m.total("llamacpp:prompt_tokens_total"),
        generation_tokens_total=m.total("llamacpp:tokens_predicted_total"),
    )


NORMALIZERS: dict[str, Callable[[Metrics], ServingFields]] = {
    "vllm": _vllm, "sglang": _sglang, "tgi": _tgi, "triton": _triton, "llama.cpp": _llamacpp,
}  # fmt: skip


class _Asked(dict[str, list[tuple[dict[str, str], float]]]):
    """An empty sample table that remembers every name a normalizer asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:  # Any: whatever default the normalizer passes
        self.asked.add(key)
        return default


def _names_read() -> frozenset[str]:
    """The sample names the normalizers read, found by running them on an empty table."""
    asked: set[str] = set()
    for normalize in NORMALIZERS.values():
        table = _Asked()
        normalize(Metrics(table))
        asked |= table.asked
    samples = set(asked)
    for name in asked:
        if name.endswith("_bucket"):
            samples |= {name[:-7] + "_sum", name[:-7] + "_count"}
    return frozenset(samples)


_KEEP = _names_read()

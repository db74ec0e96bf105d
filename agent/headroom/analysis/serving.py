"""Serving signals, the ``kv_cache`` rule and headroom in users, from the serving runtime's own metrics.

Pure functions of the window (the serving collector's ``ServingEndpoint`` per tick), the profile and its
memory estimate. docs/analysis.md ("Serving runtimes") explains each rule; docs/serving.md the inputs.

Latency quantiles: the runtime's histogram buckets are cumulative counters, so the observations made
during the window are the difference between the newest and the oldest scrape in it, bucket by bucket;
the quantile is then read as Prometheus' ``histogram_quantile`` does (linear inside the bucket that
holds the rank; the lowest bucket starts at 0; a rank in the +Inf bucket gives the highest finite
bound). A counter that went down (the runtime restarted) restarts the window at the newest scrape.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from headroom.analysis.signals import recent
from headroom.samples import Histogram, Sample, ServingEndpoint

QUANTILES = (0.5, 0.95, 0.99)
LIMIT_HINTS = {
    "vllm": "max_num_seqs / max_num_batched_tokens",
    "sglang": "max_running_requests / chunked_prefill_size",
    "tgi": "max_batch_total_tokens / max_concurrent_requests",
    "triton": "max_batch_size / the TensorRT-LLM batch scheduler",
}


@dataclass(frozen=True)
class ServingSignals:
    workload: str
    endpoint: str
    up: bool | None
    error: str | None = None
    runtime: str | None = None
    oversized: str | None = None  # the newest scrape's answer was over a cap (sources/serving.py): what was not read
    usage: float | None = None  # mean KV cache usage over the window
    running: float | None = None  # mean requests running
    waiting: float | None = None  # mean requests waiting
    preemptions_per_minute: float | None = None
    capacity_tokens: float | None = None  # newest
    ttft: Mapping[float, float] = field(default_factory=dict)  # quantile -> seconds, over the window
    itl: Mapping[float, float] = field(default_factory=dict)
    tokens_per_sequence: float | None = None  # KV tokens held per running sequence (mean)
    idle: bool = False  # up, and nothing ran or waited in any scrape of the window
    samples: int = 0


def _endpoint(sample: Sample, workload: str) -> ServingEndpoint | None:
    for e in getattr(sample.data("serving"), "endpoints", ()) or ():
        if e.workload == workload:
            return e
    return None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def histogram_quantile(q: float, h: Histogram) -> float | None:
    """The q-quantile of a cumulative histogram (Prometheus' method); None without observations."""
    total = h.counts[-1] if h.counts else 0.0
    if total <= 0:
        return None
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for bound, count in zip(h.bounds, h.counts, strict=True):
        if count >= rank:
            if math.isinf(bound):
                return previous_bound
            if count == previous_count:
                return bound
            if bound <= 0:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (count - previous_count)
        previous_bound, previous_count = bound, count
    return previous_bound


def window_delta(first: Histogram | None, last: Histogram) -> Histogram:
    """The observations between two scrapes of one histogram; ``last`` itself after a reset or re-bucketing."""
    if first is None or first.bounds != last.bounds or any(b < a for a, b in zip(first.counts, last.counts,
                                                                                    strict=True)):
        return last
    return Histogram(last.bounds, tuple(b - a for a, b in zip(first.counts, last.counts, strict=True)),
                     last.sum - first.sum, last.count - first.count)


def _quantiles(points: Sequence[Histogram]) -> dict[float, float]:
    if not points:
        return {}
    delta = window_delta(points[0] if len(points) > 1 else None, points[-1])
    out = {}
    for q in QUANTILES:
        v = histogram_quantile(q, delta)
        if v is not None:
            out[q] = v
    return out


def serving_signals(window: Sequence[Sample], seconds: float, workload: str) -> ServingSignals | None:
    """What the runtime said over the last ``seconds``; None when the workload has no endpoint."""
    if not window:
        return None
    # only the samples within ``seconds`` of the newest: walked back from it, not filtered out of the whole window
    timed = [(s.monotonic, e) for s in recent(window, seconds) if (e := _endpoint(s, workload)) is not None]
    if not timed:
        return None
    now = timed[-1][1]
    base = ServingSignals(workload, now.endpoint, now.up, now.error, now.runtime, now.oversized)
    ups = [(t, e) for t, e in timed if e.up]
    if not now.up or not ups:
        return base
    # a runtime switch inside the window: only the current runtime's scrapes count
    ups = [(t, e) for t, e in ups if e.runtime == now.runtime]
    usage = [e.kv_cache_usage_ratio for _, e in ups if e.kv_cache_usage_ratio is not None]
    running = [e.requests_running for _, e in ups if e.requests_running is not None]
    waiting = [e.requests_waiting for _, e in ups if e.requests_waiting is not None]
    pre = [(t, e.preemptions_total) for t, e in ups if e.preemptions_total is not None]
    ppm = None
    if len(pre) >= 2 and pre[-1][0] > pre[0][0]:
        grown = pre[-1][1] - pre[0][1]
        ppm = max(0.0, grown) / (pre[-1][0] - pre[0][0]) * 60.0 if grown >= 0 else None
    elif len(pre) == 1:
        ppm = 0.0
    tokens = None
    if now.kv_cache_usage_ratio is not None and now.kv_cache_capacity_tokens and now.requests_running:
        tokens = now.kv_cache_usage_ratio * now.kv_cache_capacity_tokens / now.requests_running
    # idle needs the runtime to say what runs (Triton without TensorRT-LLM reports only pending requests)
    idle = bool(running) and not any(running) and not any(waiting)
    return replace(
        base, usage=_mean(usage), running=_mean(running), waiting=_mean(waiting), preemptions_per_minute=ppm,
        capacity_tokens=now.kv_cache_capacity_tokens,
        ttft=_quantiles([e.time_to_first_token for _, e in ups if e.time_to_first_token is not None]),
        itl=_quantiles([e.inter_token_latency for _, e in ups if e.inter_token_latency is not None]),
        tokens_per_sequence=tokens, idle=idle, samples=len(ups),
    )


# ----------------------------------------------------------------------------------------- rule
def _ramp(x: float | None, low: float, high: float) -> float:
    if x is None:
        return 0.0
    if high == low:
        return 1.0 if x >= high else 0.0
    return max(0.0, min(1.0, (x - low) / (high - low)))


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x * 100:.0f} %"


def describe(s: ServingSignals) -> str:
    """One line: usage, queue, preemptions (the facts every serving verdict quotes)."""
    cap = f" of {s.capacity_tokens:,.0f} tokens" if s.capacity_tokens else ""
    ppm = "" if s.preemptions_per_minute is None else f", {s.preemptions_per_minute:.1f} preemptions/min"
    # the usage, queue and batch are means over the window's scrapes (a fractional request is one): say so
    return (f"KV cache {_pct(s.usage)} used{cap}, on average over the window {s.waiting or 0:.1f} requests "
            f"waiting and {s.running or 0:.1f} running{ppm} ({s.runtime})")


def rule_kv_cache(s: ServingSignals | None, t: Mapping[str, float], gpu_busy: float | None,
                  alternatives: str = "") -> tuple[float, str]:
    """KV memory limits the server: KV usage high while requests wait or sequences are preempted."""
    if s is None:
        return 0.0, "no serving endpoint declared (endpoint: in the profile)"
    if not s.up:
        return 0.0, f"serving endpoint down: {s.error}"
    full = _ramp(s.usage, t["kv_usage_low"], t["kv_usage_high"])
    pressure = max(_ramp(s.waiting, 0.0, t["serving_waiting_high"]),
                   _ramp(s.preemptions_per_minute, 0.0, t["preemptions_per_minute_high"]))
    text = describe(s)
    if (s.waiting or 0) >= t["serving_waiting_high"] * 0.5 and full == 0.0 and \
            (gpu_busy is None or gpu_busy < t["compute_busy_low"]):
        hint = LIMIT_HINTS.get(s.runtime or "", "its batch limits")
        busy = "" if gpu_busy is None else f" and the GPU {_pct(gpu_busy)} busy"
        text += (f"; requests wait while the KV cache has room{busy}: the runtime's own limits "
                 f"({hint}) hold them back")
    elif full * pressure > 0 and alternatives:
        text += f"; {alternatives}"
    return full * pressure, text


def runtime_limited(s: ServingSignals | None, t: Mapping[str, float], gpu_busy: float | None) -> str | None:
    """Evidence when requests queue while both the KV cache and the GPU have room, else None."""
    if s is None or not s.up or (s.waiting or 0) < t["serving_waiting_high"] * 0.5:
        return None
    if _ramp(s.usage, t["kv_usage_low"], t["kv_usage_high"]) > 0:
        return None
    if gpu_busy is not None and gpu_busy >= t["compute_busy_low"]:
        return None
    return rule_kv_cache(s, t, gpu_busy)[1]


def idle_for_demand(s: ServingSignals | None) -> str | None:
    """Evidence for ``none`` when the server had nothing to do, else None."""
    if s is None or not s.up or not s.idle:
        return None
    return f"no requests running or waiting at {s.endpoint} ({s.runtime}): idle for lack of demand"


# ------------------------------------------------------------------------------------- headroom
@dataclass(frozen=True)
class ServingHeadroom:
    kv_capacity_runtime_tokens: float | None = None
    kv_capacity_estimate_tokens: int | None = None
    sequences_observed: int | None = None  # more sequences at the observed mean tokens per running sequence
    sequences_max_context: int | None = None  # more sequences at the profile's max context


def serving_headroom(s: ServingSignals | None, profile: Any, estimate: Any) -> ServingHeadroom | None:
    if s is None:
        return None
    estimate_tokens = getattr(estimate, "kv_capacity_tokens", None) if estimate is not None else None
    if not s.up or not s.capacity_tokens or s.usage is None:
        return ServingHeadroom(kv_capacity_estimate_tokens=estimate_tokens)
    free = s.capacity_tokens * max(0.0, 1.0 - s.usage)
    observed = int(free // s.tokens_per_sequence) if s.tokens_per_sequence else None
    context = getattr(getattr(profile, "context", None), "max", None)
    at_max = int(free // context) if context else None
    return ServingHeadroom(s.capacity_tokens, estimate_tokens, observed, at_max)


@lru_cache(maxsize=64)
def alternatives(profile: Any, gpu_memory_bytes: int | None, gpus: int | None, measured: float | None) -> str:
    """What the memory model says more KV room would give: higher gpu_memory_utilization, fp8 KV, one more GPU.

    Gains are the model's ratios applied to the measured capacity when the runtime reports one."""
    from headroom.workload.profiles import Precision
    from headroom.workload.sizing import SizingError, estimate

    try:
        base = estimate(profile, gpu_memory_bytes=gpu_memory_bytes, gpus=gpus).kv_capacity_tokens
    except SizingError:
        return ""
    if not base:
        return ""
    variants = []
    rt = profile.runtime
    if rt.is_vllm:
        util = rt.gpu_memory_utilization or 0.9
        if util < 0.95:
            variants.append((f"gpu_memory_utilization {min(0.95, util + 0.05):.2f}",
                             replace(profile, runtime=replace(rt, gpu_memory_utilization=min(0.95, util + 0.05))),
                             gpus))
    if profile.kv_cache_precision not in (Precision.FP8, Precision.INT8, Precision.INT4):
        variants.append(("fp8 KV cache", replace(profile, kv_cache_precision=Precision.FP8), gpus))
    n = gpus or profile.parallel.gpus
    variants.append((f"one more GPU (tensor {profile.parallel.tensor + 1})",
                     replace(profile, parallel=replace(profile.parallel, tensor=profile.parallel.tensor + 1)), n + 1))
    parts = []
    for label, p, g in variants:
        try:
            cap = estimate(p, gpu_memory_bytes=gpu_memory_bytes, gpus=g).kv_capacity_tokens
        except SizingError:
            continue
        if cap is None:
            continue
        ratio = cap / base
        tokens = (measured or base) * ratio
        parts.append(f"{label}: {tokens:,.0f} tokens ({ratio:.2f}x)")
    return ("headroom estimate: " + ", ".join(parts)) if parts else ""


# ------------------------------------------------------------------------------------------ SLOs
@dataclass(frozen=True)
class SloStatus:
    objective: str  # ttft_p95, itl_p99 ...
    target_seconds: float
    observed_seconds: float | None  # the window's percentile; None: no request observed in the window
    met: bool | None  # None with no observation: neither met nor breached


def slo_status(profile: Any, s: ServingSignals | None) -> tuple[SloStatus, ...]:
    """Each latency objective of the profile against the short window's percentile."""
    out = []
    for objective, target in getattr(profile, "slo", ()) or ():
        metric, _, q = objective.partition("_p")
        observed = None
        if s is not None and s.up:
            observed = (s.ttft if metric == "ttft" else s.itl).get(int(q) / 100)
        out.append(SloStatus(objective, target, observed, None if observed is None else observed <= target))
    return tuple(out)

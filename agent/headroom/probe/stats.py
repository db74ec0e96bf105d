"""A probe step's figures from its requests: percentiles, throughput, goodput, errors, the SLO verdict.

Percentiles interpolate linearly between the closest ranks (numpy's default, which ``vllm bench serve`` uses),
so both tools report the same p95 of the same latencies.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from headroom.jsontypes import JsonDoc

if TYPE_CHECKING:
    from headroom.probe.client import Result  # not at run time: client.py imports aiohttp

QUANTILES = (0.5, 0.95, 0.99)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0-1) of ``values`` by linear interpolation; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """{"p50": ..., "p95": ..., "p99": ...} (seconds, rounded to microseconds)."""
    out = {}
    for q in QUANTILES:
        v = percentile(values, q)
        out[f"p{round(q * 100)}"] = None if v is None else round(v, 6)
    return out


def within(r: Result, slo: Mapping[str, float]) -> bool:
    """A completed request within every per-request objective (its TTFT, its mean inter-token latency):
    goodput counts these (as ``vllm bench serve --goodput``)."""
    if r.error is not None:
        return False
    for key, target in slo.items():
        metric = key.partition("_p")[0]
        if metric == "ttft" and (r.ttft is None or r.ttft > target):
            return False
        if metric == "itl" and r.itl and sum(r.itl) / len(r.itl) > target:
            return False
    return True


def summarize(results: Sequence[Result], seconds: float, slo: Mapping[str, float], error_budget: float) -> dict:
    """The step's figures (the contract's step keys but index/level/host), from the requests counted in it."""
    counted = [r for r in results if not r.cancelled]
    done = [r for r in counted if r.error is None]
    errors = Counter(r.error for r in counted if r.error is not None)
    ttft = [r.ttft for r in done if r.ttft is not None]
    itl = [g for r in done for g in r.itl]
    e2e = [r.e2e for r in done if r.e2e is not None]
    out_tokens = sum(r.output_tokens for r in done)
    seconds = max(seconds, 1e-9)
    error_rate = len(counted) and sum(errors.values()) / len(counted)
    step: JsonDoc = {
        "requests": len(counted), "completed": len(done), "errors": dict(sorted(errors.items())),
        "input_tokens_mean": _mean([r.prompt_tokens if r.prompt_tokens is not None else r.input_tokens
                                    for r in done]),
        "output_tokens_mean": _mean([r.output_tokens for r in done]),
        "lengths_exact": bool(done) and all(r.prompt_tokens == r.input_tokens and r.output_tokens == r.max_tokens
                                            for r in done),
        "ttft": spread(ttft), "itl": spread(itl), "e2e": spread(e2e),
        "requests_per_second": round(len(done) / seconds, 3),
        "output_tokens_per_second": round(out_tokens / seconds, 2),
        "goodput_requests_per_second": round(sum(1 for r in done if within(r, slo)) / seconds, 3),
        "error_rate": round(float(error_rate), 4),
    }
    broken = []
    for key, target in slo.items():
        metric, _, q = key.partition("_p")
        observed = step.get(metric, {}).get(f"p{q}")
        if observed is None or observed > target:
            broken.append(key)
    if step["error_rate"] > error_budget:
        broken.append("error_rate")
    if not done and "error_rate" not in broken:
        broken.append("error_rate")
    step["slo_ok"] = not broken
    step["slo_broken"] = broken
    return step


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None

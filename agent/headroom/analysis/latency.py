"""Latency percentiles from a serving runtime's histograms: the quantile, and the bucket it fell in.

The runtime's histogram buckets are cumulative counters, so the observations made during the window are the
difference between the newest and the oldest scrape in it, bucket by bucket (``window_delta``); the quantile is
then read as Prometheus' ``histogram_quantile`` does (linear inside the bucket that holds the rank; the lowest
bucket starts at 0; a rank in the +Inf bucket gives the highest finite bound).

Resolution: each percentile keeps the bucket it fell in (``Percentile``). Inside the first bucket (lower
bound 0), the +Inf bucket, or a bucket wider than ``latency_bucket_width_max`` of its upper bound
(BUCKET_WIDTH_MAX by default), the interpolated value is not a measurement: the answer is the bucket, a
bound ("< 10 ms", "between 1 and 2.5 s", "> 80 s"). serving.py judges the objectives from them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from headroom.analysis.thresholds import BUCKET_WIDTH_MAX
from headroom.samples import Histogram

QUANTILES = (0.5, 0.95, 0.99)
# a percentile read inside a bucket wider than this share of the bucket's upper bound (upper - lower > 0.4 x
# upper: an upper bound above 1.67 x the lower one) is a bound, not a value; the first bucket (lower 0) and the
# +Inf bucket always are: BUCKET_WIDTH_MAX (analysis/thresholds.py), the default of latency_bucket_width_max
# (docs/serving.md)


def seconds_text(x: float) -> str:
    """A latency for a sentence: 9.5 ms, 250 ms, 2.5 s."""
    return f"{x * 1000:.3g} ms" if x < 1.0 else f"{x:.3g} s"


@dataclass(frozen=True)
class Percentile:
    """A latency percentile read from a runtime's histogram, with the bucket ``(lower, upper]`` it fell in.

    ``value``: histogram_quantile's linear estimate inside the bucket. ``lower``: 0 for the first bucket;
    ``upper``: None for the +Inf bucket. ``bounded``: the bucket is too coarse for the estimate to be a value
    (first or +Inf bucket, or wider than the width threshold): the answer is then ``text``'s bound."""

    value: float
    lower: float
    upper: float | None
    bounded: bool
    text: str  # "9.5 ms" for a value; "< 10 ms", "between 1 and 2.5 s", "> 80 s" for a bound


def percentile_of(value: float, lower: float, upper: float, width_max: float = BUCKET_WIDTH_MAX) -> Percentile:
    """The percentile ``value`` found in the bucket (lower, upper] (upper +Inf for the last bucket)."""
    top = None if math.isinf(upper) else upper
    if top is None:
        return Percentile(value, lower, None, True, f"> {seconds_text(lower)}")
    if lower <= 0 and top > 0:
        return Percentile(value, 0.0, top, True, f"< {seconds_text(top)}")
    if top > 0 and top - lower > width_max * top:
        low, high = seconds_text(lower), seconds_text(top)
        if low.split()[1] == high.split()[1]:  # one unit: "between 1 and 2.5 s"
            low = low.split()[0]
        return Percentile(value, lower, top, True, f"between {low} and {high}")
    return Percentile(value, lower, top, False, seconds_text(value))


def histogram_quantile(q: float, h: Histogram) -> float | None:
    """The q-quantile of a cumulative histogram (Prometheus' method); None without observations."""
    found = histogram_bucket(q, h)
    return None if found is None else found[0]


def histogram_bucket(q: float, h: Histogram) -> tuple[float, float, float] | None:
    """(value, lower, upper): the q-quantile as ``histogram_quantile`` reads it and the bounds of the bucket
    holding its rank (lower 0 for the first bucket, upper +Inf for the last); None without observations."""
    total = h.counts[-1] if h.counts else 0.0
    if total <= 0:
        return None
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for bound, count in zip(h.bounds, h.counts, strict=True):
        if count >= rank:
            lower = min(previous_bound, bound)
            if math.isinf(bound):
                return previous_bound, lower, bound
            if count == previous_count or bound <= 0:
                return bound, lower, bound
            return (previous_bound + (bound - previous_bound) * (rank - previous_count) / (count - previous_count),
                    lower, bound)
        previous_bound, previous_count = bound, count
    return previous_bound, previous_bound, math.inf


def window_delta(first: Histogram | None, last: Histogram) -> Histogram:
    """The observations between two scrapes of one histogram; ``last`` itself after a reset or re-bucketing."""
    if first is None or first.bounds != last.bounds or any(b < a for a, b in zip(first.counts, last.counts,
                                                                                    strict=True)):
        return last
    return Histogram(last.bounds, tuple(b - a for a, b in zip(first.counts, last.counts, strict=True)),
                     last.sum - first.sum, last.count - first.count)


def window_quantiles(points: Sequence[Histogram], width_max: float) -> dict[float, Percentile]:
    """QUANTILES over the observations between the first and the last of ``points`` (scrapes of one histogram)."""
    if not points:
        return {}
    delta = window_delta(points[0] if len(points) > 1 else None, points[-1])
    out = {}
    for q in QUANTILES:
        found = histogram_bucket(q, delta)
        if found is not None:
            out[q] = percentile_of(*found, width_max=width_max)
    return out

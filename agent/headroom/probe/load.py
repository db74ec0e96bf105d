"""Schedules: the levels a probe steps through and when each request of a step starts.

- ``concurrency`` (closed loop): N workers, each sending its next request when the last one ends. The levels
  double from 1 (1, 2, 4, ...) up to the maximum, with the profile's normal and peak concurrency added.
- ``rate`` (open loop): requests start at Poisson arrivals of the step's rate, whatever the server does, so
  queueing in the server shows in TTFT instead of being hidden by a client that waits. The levels double from
  a quarter of the normal rate (or 1 request/s) up to the maximum, with normal and peak added.

A step holds its level ``step_seconds``; the requests started in its first ``warmup_seconds`` are sent but
not counted (the server's batch and queue fill up first), and the requests started in the rest are waited
for and counted. The next step starts from an idle server.
"""

from __future__ import annotations

import random
from collections.abc import Iterable


def ramp(start: float, maximum: float, extra: Iterable[float | None] = (), integer: bool = True,
         limit: int = 64) -> list[float]:
    """``start``, doubling, up to ``maximum`` (included), with ``extra`` levels (normal, peak) added; sorted."""
    levels: set[float] = set()
    level = start
    while level < maximum and len(levels) < limit:
        levels.add(level)
        level *= 2
    levels.add(maximum)
    for x in extra:
        if x is not None and 0 < x <= maximum:
            levels.add(x)
    out = sorted(int(x) if integer else round(x, 4) for x in levels)
    return sorted(set(out))[:limit]


def arrivals(rate: float, seconds: float, rng: random.Random) -> list[float]:
    """Start times (seconds from the step's start) of a Poisson process of ``rate`` requests/s."""
    out: list[float] = []
    t = rng.expovariate(rate)
    while t < seconds:
        out.append(t)
        t += rng.expovariate(rate)
    return out


def length(rng: random.Random, typical: int, maximum: int | None, distribution: str) -> int:
    """One request's token length: ``typical`` (fixed), or exponential with mean ``typical`` capped at ``maximum``."""
    if distribution != "exponential":
        return typical
    n = max(1, round(rng.expovariate(1.0 / typical)))
    return min(n, maximum) if maximum else n

"""The arithmetic of a window of Samples: its recent span (``recent``, ``thinned``), means, the per-second rate
of a counter across resets, a link's steadiness, and the least-squares trend a sustained rise is judged by.

Pure functions of Samples and (time, value) points; signals.py (and serving.py, pipeline.py) read the window
through them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from headroom.samples import Sample

# a VRAM trend must be sustained: a least-squares slope over at least this many samples, with a t-statistic
# (slope / its standard error) of at least VRAM_TREND_MIN_T and at least VRAM_TREND_MIN_BYTES_PER_SECOND;
# allocator jitter (+-64 MiB up and down) is not growth
VRAM_TREND_MIN_POINTS = 5
VRAM_TREND_MIN_T = 4.0
VRAM_TREND_MIN_BYTES_PER_SECOND = float(2**20)
VRAM_TREND_MAX_POINTS = 60  # a longer window is thinned to this many points (the fit runs every tick)
# a link's interval "carries its traffic" when its rate is at least this share of the window's mean rate
# (steady_share): steadiness is judged against the link's own recent level, never against its line rate
LINK_STEADY_LEVEL = 0.5


def recent(window: Sequence[Sample], seconds: float) -> list[Sample]:
    """The samples within ``seconds`` of the newest (at least the newest one)."""
    if not window:
        return []
    newest = window[-1].monotonic
    out = []
    for s in reversed(window):  # the window is in time order: walk back from the newest, stop at the first too old
        if newest - s.monotonic > seconds + 1e-9:
            break
        out.append(s)
    out.reverse()
    return out or [window[-1]]


def thinned(window: Sequence[Sample], seconds: float, points: int) -> list[Sample]:
    """The samples within ``seconds`` of the newest, thinned to at most ``points`` evenly spaced ones: every k-th
    counted back from the newest, and the oldest. Both ends are kept, so a counter's rate over them is the
    same (the increase between kept samples is the sum of the increases between them; only a reset's interval
    grows); means and shares become those of the kept samples."""
    span = recent(window, seconds)
    if len(span) <= points:
        return span
    step = -(-(len(span) - 1) // max(1, points - 2))
    kept = span[::-1][::step]
    if kept[-1] is not span[0]:
        kept.append(span[0])
    kept.reverse()
    return kept


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _stdev(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def _rate(samples: Sequence[Sample], read: Callable[[Sample], float | None]) -> float | None:
    """Per-second increase of a counter over the samples that have it.

    A counter that goes down was reset (a device re-attached, a driver reloaded, a /proc counter that
    wrapped, a workload process that exited): the interval it went down in is left out, increase and
    time alike, and the rest of the window still counts. None with no interval left."""
    return _rate_of((s.monotonic, read(s)) for s in samples)


def steady_share(rates: Sequence[float]) -> float | None:
    """The share of a link's intervals (per-second rates over the window) that carry its traffic: at least
    LINK_STEADY_LEVEL of the window's mean rate. 1 for steady traffic, the duty cycle for bursts (a checkpoint
    copy, a scrape), None with fewer than two intervals or no traffic at all."""
    if len(rates) < 2:
        return None
    mean = sum(rates) / len(rates)
    if mean <= 0:
        return None
    return sum(1 for r in rates if r >= LINK_STEADY_LEVEL * mean) / len(rates)


def interval_rates(points: Sequence[tuple[float, float]]) -> list[float]:
    """Per-second rates between consecutive (time, cumulative counter) points (a counter reset is skipped)."""
    return [(b - a) / (tb - ta) for (ta, a), (tb, b) in pairwise(points) if tb > ta and b >= a]


def _rate_of(points: Iterable[tuple[float, float | None]]) -> float | None:
    """_rate over (monotonic, counter or None) points."""
    increase = elapsed = 0.0
    previous = None
    for t, v in points:
        if v is None:
            continue
        if previous is not None and t > previous[0] and v >= previous[1]:
            increase += v - previous[1]
            elapsed += t - previous[0]
        previous = (t, v)
    return increase / elapsed if elapsed > 0 else None


def trend(points: Sequence[tuple[float, float]]) -> tuple[float, float, float] | None:
    """(slope per second, its t-statistic, R²) of a least-squares line through (t, value) points; None
    with fewer than two distinct times. A perfect line has an infinite t-statistic and R² 1."""
    n = len(points)
    if n < 2:
        return None
    t0, v0 = points[0]  # shifted to the first point: the sums stay small, no cancellation on large byte counts
    st = sv = stt = stv = svv = 0.0
    for t, v in points:  # one pass: this runs over minutes of samples on the long window
        t, v = t - t0, v - v0
        st += t
        sv += v
        stt += t * t
        stv += t * v
        svv += v * v
    stt -= st * st / n
    if stt <= 0:
        return None
    stv -= st * sv / n
    svv -= sv * sv / n
    slope = stv / stt
    residual = max(0.0, svv - slope * stv)
    r2 = 1.0 if svv <= 0 else max(0.0, min(1.0, 1.0 - residual / svv))
    if n <= 2 or residual <= 0:
        return slope, (math.inf if slope else 0.0), r2
    stderr = math.sqrt(residual / (n - 2) / stt)
    return slope, slope / stderr, r2


def sustained_growth(points: Sequence[tuple[float, float]]) -> tuple[float | None, float | None]:
    """(growth in units per second, R² of the fit) where the window shows a sustained rise (see
    VRAM_TREND_*), (0.0, R²) where it shows none, (None, None) with too few points to tell."""
    if len(points) < VRAM_TREND_MIN_POINTS:
        return None, None
    if len(points) > VRAM_TREND_MAX_POINTS:  # the long window: evenly spaced points, ending at the newest
        step = -(-len(points) // VRAM_TREND_MAX_POINTS)
        points = points[::-1][::step][::-1]
    fit = trend(points)
    if fit is None:
        return None, None
    slope, t_stat, r2 = fit
    if slope >= VRAM_TREND_MIN_BYTES_PER_SECOND and t_stat >= VRAM_TREND_MIN_T:
        return slope, r2
    return 0.0, r2

"""Rates from the window: pure functions of consecutive Samples' counters.

The window holds one Sample per tick; a rate is (last - first) / elapsed over the newest samples that
span at most ``seconds``. The counter rates the bottleneck rules read (disk, network, a workload's CPU
time, major faults) are in signals.py (``_rate``: a counter that went down yields no rate, never a
negative one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from headroom.samples import CpuSample, Sample

SHORT_WINDOW_SECONDS = 15.0  # analysis.short_window's default; the analysis passes the configured one


def span(window: Sequence[Sample], seconds: float) -> tuple[Sample, Sample] | None:
    """The oldest and newest Samples within ``seconds`` of the newest, or None with fewer than two."""
    if len(window) < 2:
        return None
    last = window[-1]
    first = None
    for s in reversed(window):
        if last.monotonic - s.monotonic > seconds + 1e-9:
            break
        first = s
    if first is None or first is last:
        first = window[-2]
    return first, last


def cpu_utilization(window: Sequence[Sample], seconds: float = SHORT_WINDOW_SECONDS) -> float | None:
    """Share of all CPU time that was busy (not idle and not iowait) over the span."""
    pair = span(window, seconds)
    if pair is None:
        return None
    a, b = (s.data("cpu") for s in pair)
    if not isinstance(a, CpuSample) or not isinstance(b, CpuSample):
        return None
    ma, mb = a.times.modes(), b.times.modes()
    ignore = {"guest", "guest_nice"}  # already included in user and nice
    total = sum(mb[k] - ma.get(k, 0.0) for k in mb if k not in ignore)
    idle = (mb.get("idle", 0.0) - ma.get("idle", 0.0)) + (mb.get("iowait", 0.0) - ma.get("iowait", 0.0))
    if total <= 0:
        return None
    return min(1.0, max(0.0, (total - idle) / total))


def derive(window: Sequence[Sample], seconds: float = SHORT_WINDOW_SECONDS) -> Mapping[str, float | None]:
    """The derived values the exposition needs every tick, over the analysis short window."""
    return {"cpu_utilization_ratio": cpu_utilization(window, seconds)}

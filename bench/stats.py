"""Summaries of repeated measurements: median with min and max, and nearest-rank percentiles."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    """The median, min and max of ``n`` repeated measurements (same unit as the inputs)."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        """The spread of ``values``; raises ValueError on an empty sequence."""
        if not values:
            raise ValueError("no measurements")
        return cls(statistics.median(values), min(values), max(values), len(values))

    def scaled(self, factor: float) -> Spread:
        """The same spread with every value multiplied by ``factor`` (e.g. 1e3 for seconds -> ms)."""
        return Spread(self.median * factor, self.low * factor, self.high * factor, self.n)

    def text(self, digits: int = 2) -> str:
        """``median (min-max)`` rounded to ``digits`` decimals."""
        return f"{self.median:.{digits}f} ({self.low:.{digits}f}-{self.high:.{digits}f})"


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``; raises ValueError when empty."""
    if not values:
        raise ValueError("no measurements")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of ys over xs (cost per unit of scale)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0

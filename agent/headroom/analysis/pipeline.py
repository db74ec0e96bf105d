"""The analysis stage of every tick: window + configuration -> (derived values, Findings).

Pure: reads Samples and workload profiles, never a source, never Prometheus. Each step lives in its
own module (rates, workloads, bottleneck, headroom) and is table-tested on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from headroom.analysis import rates
from headroom.samples import Sample


@dataclass(frozen=True)
class Findings:
    """What analysis concluded this tick. Exposition renders it; record/replay compares it."""

    workloads: tuple[Any, ...] = ()  # analysis.workloads.WorkloadStatus, one per declared workload


class Analysis:
    """Holds the configuration analysis needs (profiles, sizing constants, thresholds) and any state
    that must persist across ticks (hysteresis). Called once per tick with the window."""

    def __init__(self, config: Any) -> None:
        self.config = config

    def __call__(self, window: Sequence[Sample]) -> tuple[Mapping[str, Any], Findings]:
        derived = rates.derive(window)
        return derived, Findings()

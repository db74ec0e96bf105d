"""The NVML collector (``collector.py``): the one choke point for every NVML call (architecture principle 3).

This package re-exports what the rest of the agent, the tests and the benchmarks import from
``headroom.sources.nvml``; importing it registers the collector.
"""

from __future__ import annotations

from headroom.sources.nvml.collector import (
    BINDING_ERROR,
    CLOCK_EVENT_REASONS,
    MIN_BINDING,
    NvmlCollector,
    describe,
    library_reason,
)

__all__ = ["BINDING_ERROR", "CLOCK_EVENT_REASONS", "MIN_BINDING", "NvmlCollector", "describe", "library_reason"]

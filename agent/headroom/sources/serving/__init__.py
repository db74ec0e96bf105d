"""The serving collector (``collector.py``): each workload's serving runtime read from its /metrics.

This module re-exports what the rest of the agent, the tests and the benchmarks import from
``headroom.sources.serving``; importing it registers the collector.
"""

from __future__ import annotations

from headroom.sources.serving.collector import (
    MAX_ERROR_CHARS,
    MAX_HISTOGRAM_BUCKETS,
    MAX_LINE_CHARS,
    MAX_LINES,
    MAX_RESIDENT_MODELS,
    MAX_SERIES,
    Oversized,
    ScrapeError,
    ScrapeTimeout,
    ServingCollector,
    discover,
    endpoint_from_argv,
    read_exposition,
)

__all__ = ["MAX_ERROR_CHARS", "MAX_HISTOGRAM_BUCKETS", "MAX_LINES", "MAX_LINE_CHARS", "MAX_RESIDENT_MODELS",
           "MAX_SERIES", "Oversized", "ScrapeError", "ScrapeTimeout", "ServingCollector", "discover",
           "endpoint_from_argv", "read_exposition"]

"""Render a Snapshot as Prometheus text exposition (format 0.0.4), once per tick, one purpose a module:

- ``text.py``: the text format: escaping, label sets, a sample's value (``format_value``, ``ValueRefused``), each
  family's HELP and TYPE lines in catalogue order;
- ``writer.py``: the ``Writer`` (series checked against the catalogue, each line kept across ticks while its value
  and labels hold), the ``Renderer`` that owns those caches, ``render_into`` and ``render``;
- ``collectors.py``: the series of each collector's data in the Sample (the agent itself, NVML, identity, host
  collectors, serving endpoints, the last probe);
- ``findings.py``: the series of the analysis (verdicts, GPU idle time and health, headroom, serving findings, the
  workloads measured against expected).

The modules import one way (text <- collectors, findings <- writer; the families name the Writer only for type
checking). This module re-exports what the rest of the agent, the tests and the benchmarks import from
``headroom.exposition.render``.
"""

from __future__ import annotations

from headroom.exposition.render.text import CONTENT_TYPE, ValueRefused, format_value
from headroom.exposition.render.writer import (
           Renderer,
           UnknownMetric,
           Writer,
           clear_caches,
           render,
           render_into,
)

__all__ = ["CONTENT_TYPE", "Renderer", "UnknownMetric", "ValueRefused", "Writer", "clear_caches", "format_value",
           "render", "render_into"]

"""Prometheus text exposition (exposition/render/): ``writer.py`` holds it, moved unchanged from
exposition/render.py; this module re-exports what the rest of the agent, the tests and the benchmarks import
from ``headroom.exposition.render``."""

from __future__ import annotations

from headroom.exposition.render.writer import (
    CONTENT_TYPE,
    Renderer,
    UnknownMetric,
    ValueRefused,
    Writer,
    clear_caches,
    format_value,
    render,
    render_into,
)

__all__ = ["CONTENT_TYPE", "Renderer", "UnknownMetric", "ValueRefused", "Writer", "clear_caches", "format_value",
           "render", "render_into"]

"""structlog set-up: JSON lines when stderr is not a terminal (journald, files), key=value on one."""

from __future__ import annotations

import logging
import sys

import structlog

LEVELS = ("debug", "info", "warn", "error")


def configure(level: str = "info", fmt: str | None = None, stream=None) -> None:
    """Configure structlog once. ``fmt`` json|console; None picks by whether stderr is a terminal."""
    stream = stream or sys.stderr
    if fmt is None:
        fmt = "console" if stream.isatty() else "json"
    numeric = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
               "error": logging.ERROR}[level]
    processors = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if fmt == "json":
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        processors += [structlog.dev.ConsoleRenderer(colors=False)]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )

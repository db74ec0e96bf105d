"""structlog set-up: JSON lines when stderr is not a terminal (journald, files), key=value on one.

``--log.format`` takes node_exporter's values, ``logfmt`` (``ts=... level=info msg=...``) and ``json``, plus
``console`` (aligned, for a terminal).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import structlog

LEVELS = ("debug", "info", "warn", "error")
FORMATS = ("logfmt", "json", "console")

# events the code running now reports to the user itself (e.g. `estimate` printing "no GPU found"): not logged
_EXPECTED: ContextVar[frozenset[str]] = ContextVar("headroom_expected_events", default=frozenset())


@contextmanager
def expected(*events: str) -> Iterator[None]:
    """Within the block (same thread), drop log events named ``events``: the caller reports that outcome."""
    token = _EXPECTED.set(_EXPECTED.get() | frozenset(events))
    try:
        yield
    finally:
        _EXPECTED.reset(token)


def _drop_expected(_logger, _method, event_dict):
    if event_dict.get("event") in _EXPECTED.get():
        raise structlog.DropEvent
    return event_dict


class _Stderr:
    """Writes to whatever ``sys.stderr`` is when a line is logged, not the one at ``configure`` time: a thread
    that outlives the code which configured logging (the collectors a ``headroom probe`` runs in process, a
    test's captured stderr) never writes into a stream its owner has closed."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


def configure(level: str = "info", fmt: str | None = None, stream=None) -> None:
    """Configure structlog once. ``fmt`` logfmt|json|console; None picks console on a terminal, else json.
    ``stream`` None: standard error as it is at each line (``_Stderr``)."""
    stream = stream or _Stderr()
    if fmt is None:
        fmt = "console" if stream.isatty() else "json"
    numeric = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
               "error": logging.ERROR}[level]
    processors = [
        _drop_expected,
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts" if fmt == "logfmt" else "timestamp"),
    ]
    if fmt == "json":
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    elif fmt == "logfmt":
        # node_exporter's layout: ts, level, msg first, then the event's fields
        processors += [structlog.processors.format_exc_info, structlog.processors.EventRenamer("msg"),
                       structlog.processors.LogfmtRenderer(key_order=["ts", "level", "msg"], drop_missing=True,
                                                           bool_as_flag=False)]
    else:
        processors += [structlog.dev.ConsoleRenderer(colors=False)]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )

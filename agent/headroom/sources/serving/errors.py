"""What a scrape's failure is and how its message is kept: ``ScrapeError`` (shown to users as is),
``ScrapeTimeout`` (connected, answered late), ``Oversized`` (over a cap of one scrape, with the series not read)
and ``one_line``, which makes any message one line of at most MAX_ERROR_CHARS for the status API and the log."""

from __future__ import annotations

import re

from headroom.safeio import EXCERPT_CHARS, excerpt, shorten_quoted

MAX_ERROR_CHARS = 240  # an error message kept for the status API and the log (a reason phrase can be 60 KB)


class ScrapeError(Exception):
    """The endpoint could not be read or is not a serving runtime. The message is shown to users as is."""


class ScrapeTimeout(ScrapeError):
    """Connected, but the answer did not come (or was not read) within the scrape's deadline: a runtime that accepts
    connections and answers late (its event loop saturated) is slow, not gone (analysis/serving.py's
    ``serving_unresponsive_seconds``)."""


class Oversized(ScrapeError):
    """The answer is over a cap of what one scrape reads; ``dropped``: the runtime series not read."""

    def __init__(self, message: str, dropped: int) -> None:
        super().__init__(message)
        self.dropped = dropped


_QUOTED = re.compile(r"""'(?:[^'\\\n]|\\.)*'(?:\.\.\. \(\d+ characters\))?|"(?:[^"\\\n]|\\.)*"(?:\.\.\. \(\d+ characters\))?""")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _reason(reason: str) -> str:
    """An HTTP reason phrase for a message: as sent when it is a short printable one (every standard one is),
    else a quoted excerpt (safeio.excerpt): an endpoint's 60 KB reason phrase is not repeated."""
    if len(reason) <= EXCERPT_CHARS and reason.isprintable():
        return reason
    return excerpt(reason)


def one_line(message: str) -> str:
    """An error message as the status API and the log keep it: one line, quoted values cut to excerpts
    (safeio.shorten_quoted), at most MAX_ERROR_CHARS."""
    message = shorten_quoted(_CONTROL.sub(" ", message))
    return message if len(message) <= MAX_ERROR_CHARS else message[:MAX_ERROR_CHARS - 25] + f"... ({len(message)} characters)"

"""OpenMetrics 1.0 for scrapers that ask for it (``Accept: application/openmetrics-text``).

The sampler renders the Prometheus text format 0.0.4 once per tick (``render.py``). OpenMetrics differs
from it only in the metadata lines: a counter's family is named without ``_total`` (its samples keep
it), HELP escapes double quotes, a UNIT line may name the unit, and the exposition ends with ``# EOF``.
So the OpenMetrics body is derived from the text body by rewriting the comment lines, at most once per
snapshot, on the first scrape that asks for it (``Converter``): a scrape still only sends bytes.

Prometheus asks for OpenMetrics first by default; browsers and curl get the text format.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from headroom.exposition.catalog import BY_NAME, COUNTER

if TYPE_CHECKING:
    from headroom.samples import Snapshot

CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
_VERSIONS = {None, "1.0.0", "0.0.1"}  # the OpenMetrics versions this body satisfies
_UNIT_SUFFIXES = {"bytes", "seconds", "ratio", "watts", "celsius", "hertz", "joules"}


def _media_ranges(accept: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """(type/subtype, params, q) of each media range in an Accept header."""
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        media = fields[0].lower()
        params: dict[str, str] = {}
        for f in fields[1:]:
            key, _, value = f.partition("=")
            params[key.strip().lower()] = value.strip().strip('"')
        try:
            q = float(params.pop("q", "1"))
        except ValueError:
            q = 0.0  # a malformed weight: ignore the range rather than guess
        if media:
            yield media, params, q


def prefers_openmetrics(accept: str | None) -> bool:
    """True when the Accept header ranks OpenMetrics (a version we speak) at least as high as the text format.

    Prometheus sends ``application/openmetrics-text;version=1.0.0,...,text/plain;version=0.0.4;q=0.5,...``;
    a browser's ``text/html,...,*/*;q=0.8`` or curl's ``*/*`` gets the text format."""
    if not accept:
        return False
    om, text = 0.0, 0.0
    for media, params, q in _media_ranges(accept):
        if media == "application/openmetrics-text":
            if params.get("version") in _VERSIONS:
                om = max(om, q)
        elif media in ("text/plain", "text/*", "*/*"):
            text = max(text, q)
    return om > 0 and om >= text


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _metadata(name: str) -> list[bytes]:
    spec = BY_NAME[name]
    family = name.removesuffix("_total") if spec.type == COUNTER else name
    lines = [f"# HELP {family} {_escape_help(spec.help)}", f"# TYPE {family} {spec.type}"]
    if spec.unit in _UNIT_SUFFIXES and family.endswith("_" + spec.unit):
        lines.append(f"# UNIT {family} {spec.unit}")
    return [line.encode("utf-8") for line in lines]


def from_text(text: bytes) -> bytes:
    """The OpenMetrics form of a text-format exposition written by ``render.Writer``."""
    out: list[bytes] = []
    for line in text.split(b"\n"):
        if line.startswith(b"# HELP "):
            out.extend(_metadata(line[7:].split(b" ", 1)[0].decode()))
        elif line.startswith(b"# TYPE ") or not line:
            continue  # written with the HELP line; blank lines are not allowed
        else:
            out.append(line)
    out.append(b"# EOF\n")
    return b"\n".join(out)


class Converter:
    """The OpenMetrics body of the newest snapshot, converted on the first request for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None  # held, so its id cannot be reused by a later snapshot while cached
        self._body = b""

    def get(self, snapshot: Snapshot) -> bytes:
        with self._lock:
            if self._snapshot is not snapshot:
                self._body = from_text(snapshot.exposition)
                self._snapshot = snapshot
            return self._body

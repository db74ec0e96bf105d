"""The text format (Prometheus exposition 0.0.4): label values escaped (``_escape``) and label sets rendered once
(``_label_text``, a bounded cache), a sample's value (``format_value``; ``ValueRefused`` for one Prometheus cannot
parse), each family's HELP and TYPE lines and position in the catalogue (``_HEADERS``, ``_ORDER``), and ``_r``, the
rounding every family applies. Imports no other module of the package."""

from __future__ import annotations

import math
import sys

from headroom.exposition.catalog import CATALOG

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_ORDER = {m.name: i for i, m in enumerate(CATALOG)}


def _escape(value: str) -> str:
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # undecodable bytes kept as surrogates (a mountpoint): write them escaped
            value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


# rendered label sets, reused across families and ticks (a GPU's ``gpu="0",uuid="GPU-..."`` appears in
# ~40 families per tick); cleared when it grows past the bound, so changing label values cannot leak
# a series' label values, in the catalogue's label order: anything str() renders (str, int, an enum member ...)
Labels = tuple[object, ...]

_LABEL_TEXT: dict[tuple[tuple[str, ...], Labels], str] = {}
_LABEL_TEXT_MAX = 20_000


def _label_text(names: tuple[str, ...], values: Labels) -> str:
    """``k1="v1",k2="v2"`` with values escaped for the text format."""
    key = (names, values)
    cached = True
    try:
        text = _LABEL_TEXT.get(key)
    except TypeError:  # an unhashable label value: render it, don't cache it
        cached, text = False, None
    if text is None:
        text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in zip(names, values, strict=True))
        if not cached:
            return text
        if len(_LABEL_TEXT) >= _LABEL_TEXT_MAX:
            _LABEL_TEXT.clear()
        _LABEL_TEXT[key] = text
    return text


class ValueRefused(ValueError):
    """A value the exposition cannot carry: Prometheus' parser rejects the whole scrape over it."""


# An integer beyond a float's range fails Prometheus' ParseFloat ("value out of range") and with it the whole
# scrape: the host drops out of Prometheus. Such a sample is left out and counted (headroom_exposition_refused_samples).
_INT_LIMIT = int(sys.float_info.max)


def format_value(value: float | int | bool) -> str:
    """The sample's text; ValueRefused for an integer Prometheus could not parse."""
    if type(value) is float:  # most values: tested first, by exact type (a float subclass takes the general path)
        if value.is_integer():
            if abs(value) < 1e15:
                return str(int(value))
        elif value != value:
            return "NaN"
        elif value in _INFINITIES:
            return "+Inf" if value > 0 else "-Inf"
        return repr(value)
    if type(value) is int:
        if -_INT_LIMIT <= value <= _INT_LIMIT:
            return str(value)
        raise ValueRefused("an integer beyond a float's range")
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        if -_INT_LIMIT <= value <= _INT_LIMIT:
            return str(value)
        raise ValueRefused("an integer beyond a float's range")
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


_INFINITIES = (math.inf, -math.inf)


# each family's HELP and TYPE lines, in catalogue order
_HEADERS = tuple(f"# HELP {m.name} {m.help.replace(chr(92), chr(92) * 2)}\n# TYPE {m.name} {m.type}" for m in CATALOG)


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)

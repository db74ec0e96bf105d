"""Human-written sizes, counts and durations, shared by config.yaml, workload profiles and the CLI.

Pure functions. Each parser accepts the YAML scalar as loaded (int, float or str) and returns a value in
base units, or raises ``ValueError`` with a message that quotes the input and says what is accepted.
Arithmetic goes through ``Decimal`` so that "7e9" and "1.5B" are exact, never float-rounded.

| function          | accepts                                              | returns           |
|-------------------|------------------------------------------------------|-------------------|
| parse_count       | 7B, 1.5B, 70M, 7e9, 70000000000, 7_000_000_000, 7000 | int               |
| parse_bytes       | 80GiB, 512MiB, 80GB, 1.5 GiB, 80Gi, 1073741824       | int bytes         |
| parse_duration    | 30s, 5m, 1h30m, 500ms, 2d, 0.5, 30                   | float seconds     |
| format_duration   | seconds                                              | "1m30s", "500ms"  |
| format_bytes      | bytes                                                | "13.04 GiB"       |

Count suffixes are decimal (K = 1e3, M = 1e6, B or G = 1e9, T = 1e12), as model cards write "7B".
Byte units follow IEC/SI: KiB/MiB/GiB/TiB (also Ki/Mi/Gi/Ti) are powers of 1024; kB/KB/MB/GB/TB are
powers of 1000. A bare number of bytes is taken as is.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

GIB = 1024**3

_COUNT_SUFFIXES = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}
_BYTE_UNITS = {
    "": 1,
    "B": 1,
    "KIB": 1024, "KI": 1024,
    "MIB": 1024**2, "MI": 1024**2,
    "GIB": 1024**3, "GI": 1024**3,
    "TIB": 1024**4, "TI": 1024**4,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
}  # fmt: skip
_DURATION_UNITS = {
    "ms": Decimal("0.001"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
    "d": Decimal(86400),
}

_NUMBER = r"[0-9][0-9_]*(?:\.[0-9_]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+"
_NUMBER_WITH_UNIT = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-z]*)\s*$")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")


def _decimal(value: object, what: str, accepted: str) -> tuple[Decimal, str]:
    """Split a scalar into (number, unit suffix); raise ValueError naming ``what`` and ``accepted``."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"invalid {what} {value!r}: expected {accepted}")
    if isinstance(value, int):
        return Decimal(value), ""
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"invalid {what} {value!r}: expected {accepted}")
        return Decimal(repr(value)), ""
    text = value.strip()
    negative = text.startswith("-")
    match = _NUMBER_WITH_UNIT.match(text[1:] if negative else text)
    if not match:
        raise ValueError(f"invalid {what} {value!r}: expected {accepted}")
    try:
        number = Decimal(match.group(1).replace("_", ""))
    except InvalidOperation:
        raise ValueError(f"invalid {what} {value!r}: expected {accepted}") from None
    return (-number if negative else number), match.group(2)


MAX_QUANTITY = 10**18  # the largest count or size parsed: 1e400 or 1e999999999 is refused, never expanded


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:40]}... ({len(text)} characters)"


def parse_count(value: object, what: str = "count") -> int:
    """Return a non-negative integer count from 7B, 1.5B, 70M, 7e9, 70000000000 or an int.

    Raises ValueError when the text is malformed, negative or not a whole number (7.5 or 1.0000000001B).
    """
    accepted = "a whole number such as 7000000000, 7e9 or 7B (suffixes K, M, B, T)"
    number, suffix = _decimal(value, what, accepted)
    factor = _COUNT_SUFFIXES.get(suffix.upper())
    if factor is None:
        raise ValueError(f"invalid {what} {value!r}: unknown suffix {suffix!r}; expected {accepted}")
    if number.is_finite() and number.adjusted() > 18:  # before any arithmetic: 1e999999999 overflows Decimal
        raise ValueError(f"invalid {what} {_brief(value)}: more than 10^18")
    total = number * factor
    if total < 0:
        raise ValueError(f"invalid {what} {value!r}: must not be negative")
    if total > MAX_QUANTITY:
        raise ValueError(f"invalid {what} {_brief(value)}: more than 10^18")
    if total != total.to_integral_value():
        raise ValueError(f"invalid {what} {value!r}: not a whole number ({total.normalize():f})")
    return int(total)


def parse_bytes(value: object, what: str = "size") -> int:
    """Return a non-negative number of bytes from 80GiB, 512MiB, 80GB, 1.5 GiB or a bare int.

    Fractional results (0.3GiB) are rounded to the nearest byte. Raises ValueError on malformed text,
    unknown units and negative sizes.
    """
    accepted = "a size such as 80GiB, 512MiB, 80GB or a number of bytes"
    number, unit = _decimal(value, what, accepted)
    factor = _BYTE_UNITS.get(unit.upper())
    if unit.endswith("b") and len(unit) > 1:
        raise ValueError(
            f"invalid {what} {value!r}: {unit!r} reads as bits; write bytes as B, e.g. 512MiB or 80GB"
        )
    if factor is None:
        raise ValueError(f"invalid {what} {value!r}: unknown unit {unit!r}; expected {accepted}")
    if number < 0:
        raise ValueError(f"invalid {what} {value!r}: must not be negative")
    if number.adjusted() > 18 or number * factor > MAX_QUANTITY:
        raise ValueError(f"invalid {what} {_brief(value)}: more than 10^18 bytes")
    return int((number * factor).to_integral_value(rounding=ROUND_HALF_EVEN))


def parse_duration(value: object, what: str = "duration") -> float:
    """Return seconds from 30s, 5m, 1h30m, 500ms, 2d, or a bare number of seconds.

    Units: ms, s, m, h, d; parts may be chained largest first (1h30m). Raises ValueError on malformed
    text and negative durations.
    """
    accepted = "a duration such as 30s, 5m, 1h30m, 500ms or a number of seconds"
    if isinstance(value, str) and _DURATION_PART.search(value):
        text = value.replace(" ", "")
        if text.startswith("-"):
            raise ValueError(f"invalid {what} {value!r}: must not be negative")
        pos, seconds, last_scale = 0, Decimal(0), None
        for match in _DURATION_PART.finditer(text):
            if match.start() != pos:
                break
            scale = _DURATION_UNITS[match.group(2)]
            if last_scale is not None and scale >= last_scale:
                raise ValueError(f"invalid {what} {value!r}: units must go from largest to smallest (1h30m)")
            last_scale = scale
            seconds += Decimal(match.group(1)) * scale
            pos = match.end()
        if pos != len(text):
            raise ValueError(f"invalid {what} {value!r}: expected {accepted}")
        return float(seconds)
    number, unit = _decimal(value, what, accepted)
    if unit:
        raise ValueError(f"invalid {what} {value!r}: unknown unit {unit!r}; expected {accepted}")
    if number < 0:
        raise ValueError(f"invalid {what} {value!r}: must not be negative")
    return float(number)


def format_duration(seconds: float) -> str:
    """Return a compact duration: 500ms, 30s, 1m30s, 2h, 1d2h; fractions of a second as 1.5s."""
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds == 0:
        return "0s"
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:g}ms"
    whole = int(seconds)
    if whole != seconds:
        return f"{seconds:g}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
    return "".join(parts)


def format_bytes(n: int | float) -> str:
    """Return bytes as GiB with two decimals ("13.04 GiB"), or MiB below one GiB ("512.00 MiB"). Never raises: a
    value too large for a float (a hostile config.json's product) reads "more than 10^300 bytes"."""
    if (isinstance(n, int) and abs(n) > 10**300) or (isinstance(n, float) and not math.isfinite(n)):
        return f"{'-' if n < 0 else ''}more than 10^300 bytes" if n == n else "an unknown number of bytes"
    if abs(n) >= GIB:
        return f"{n / GIB:.2f} GiB"
    return f"{n / 1024**2:.2f} MiB"


_SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def format_size(n: int | float | None) -> str:
    """Bytes in prose, the unit chosen by the size, three significant digits: '0 B', '512 B', '64.0 MiB',
    '1.50 GiB', '123 GiB' ('?' for None). Evidence, the landing page and log text use it, so a small size never
    reads '0.0 GiB' (format_bytes keeps its fixed two decimals for the sizing tables). Never raises."""
    if n is None:
        return "?"
    if (isinstance(n, int) and abs(n) > 10**300) or (isinstance(n, float) and not math.isfinite(n)):
        return format_bytes(n)
    sign, v, i = "-" if n < 0 else "", float(abs(n)), 0
    while v >= 1024 and i < len(_SIZE_UNITS) - 1:
        v, i = v / 1024, i + 1
    if i == 0:
        return f"{sign}{round(v)} B"
    text = f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}"
    if float(text) >= 1024 and i < len(_SIZE_UNITS) - 1:  # 1023.7 MiB rounds to 1024: say 1.00 GiB
        text, i = "1.00", i + 1
    return f"{sign}{text} {_SIZE_UNITS[i]}"

"""Checked reading of one YAML mapping: the converters every section of a profile is read with, and its errors.

``ProfileError`` (a field path relative to the profile and a message) and ``ProfileErrors`` (all of them);
``_Reader`` records every problem and hands back ``_BAD`` for a value that failed, so validation goes on and
reports them all. No profile key is known here (``schema.py`` names them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from headroom import units
from headroom.jsontypes import YamlMapping, YamlValue
from headroom.schema import kind as _kind_of  # a mapping, a list, null, a string ...: every validator's words
from headroom.schema import unknown_key

# ----------------------------------------------------------------------------------------- errors
Path = tuple[str | int, ...]


def format_path(path: Path) -> str:
    """("gpus", 1, "x") -> "gpus[1].x"."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


class ProfileError(ValueError):
    """One problem in a profile: ``path`` (relative to the profile mapping) and a human ``message``."""

    def __init__(self, path: Path, message: str):
        super().__init__(f"{format_path(path) or '<profile>'}: {message}")
        self.path = tuple(path)
        self.message = message


class ProfileErrors(ValueError):
    """Every problem found in one profile, in document order as far as possible."""

    def __init__(self, errors: Sequence[ProfileError]):
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = list(errors)


# ---------------------------------------------------------------------------------------- reading
_BAD = object()  # a value that failed validation; its error is already recorded
# What a converter or section reader returns: the checked value (of the type its key or section declares: a str,
# an int, an enum member, a frozen section), None where the key is not given, or _BAD; the caller narrows it
Checked = Any

# Every integer of a profile (declared, or made from another user's command line and config.json) is at most 2^53:
# exact as a float, so every figure the memory model derives stays a finite float that Prometheus can parse.
MAX_INTEGER = 2**53


def _short(v: YamlValue) -> str:
    """A value as an error message quotes it: a 400-digit number is not repeated."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10**15:
        return f"a {len(str(abs(v)))}-digit number"
    text = repr(v)
    return text if len(text) <= 40 else f"{text[:40]}... ({len(text)} characters)"


class _Reader:
    def __init__(self) -> None:
        self.errors: list[ProfileError] = []

    def error(self, path: Path, message: str) -> object:
        self.errors.append(ProfileError(path, message))
        return _BAD

    def mapping(self, value: YamlValue, path: Path, allowed: Sequence[str]) -> YamlMapping | None:
        """The mapping with unknown keys reported, or None (error recorded) when it is not a mapping."""
        if not isinstance(value, Mapping):
            self.error(path, f"expected a mapping with keys {', '.join(allowed)}; got {_kind_of(value)}")
            return None
        for key in value:
            if key not in allowed:
                self.error(path + (str(key),), unknown_key(str(key), allowed))
        return value

    # each converter returns the converted value, None when absent, or _BAD after recording an error
    def string(self, m: YamlMapping, key: str, path: Path) -> Checked:
        if key not in m or m[key] is None:
            return None
        v = m[key]
        if isinstance(v, bool | int | float):
            return self.error(path + (key,), f'expected a string; got {v!r} (quote it: {key}: "{v}")')
        if not isinstance(v, str) or not v.strip():
            got = "an empty string" if isinstance(v, str) else _kind_of(v)
            return self.error(path + (key,), f"expected a non-empty string; got {got}")
        return v.strip()

    def integer(self, m: YamlMapping, key: str, path: Path, minimum: int) -> Checked:
        if key not in m or m[key] is None:
            return None
        v = m[key]
        if isinstance(v, bool) or not isinstance(v, int):
            return self.error(path + (key,), f"expected an integer >= {minimum}; got {_short(v)}")
        if v < minimum:
            return self.error(path + (key,), f"must be >= {minimum}; got {_short(v)}")
        if v > MAX_INTEGER:
            return self.error(path + (key,), f"must be <= 2^53 ({MAX_INTEGER}); got {_short(v)}")
        return v

    def number(self, m: YamlMapping, key: str, path: Path, minimum: float, maximum: float | None = None,
               exclusive_minimum: bool = False) -> Checked:  # fmt: skip
        if key not in m or m[key] is None:
            return None
        v = m[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
            return self.error(path + (key,), f"expected a number; got {v!r}")
        if abs(v) > 1e300:  # also keeps huge integers away from float() and :g (OverflowError)
            return self.error(path + (key,), "expected a finite number of a sensible size")
        if v < minimum or (exclusive_minimum and v == minimum):
            return self.error(
                path + (key,), f"must be {'>' if exclusive_minimum else '>='} {minimum:g}; got {v:g}"
            )
        if maximum is not None and v > maximum:
            return self.error(path + (key,), f"must be <= {maximum:g}; got {v:g}")
        return float(v)

    def boolean(self, m: YamlMapping, key: str, path: Path) -> Checked:
        if key not in m or m[key] is None:
            return None
        v = m[key]
        if not isinstance(v, bool):
            return self.error(path + (key,), f"expected true or false; got {v!r}")
        return v

    def count(self, m: YamlMapping, key: str, path: Path) -> Checked:
        if key not in m or m[key] is None:
            return None
        try:
            n = units.parse_count(m[key], what=key)
        except ValueError as exc:
            return self.error(path + (key,), str(exc))
        if n == 0:
            return self.error(path + (key,), "must be > 0")
        if n > MAX_INTEGER:
            return self.error(path + (key,), f"must be <= 2^53 ({MAX_INTEGER}); got {_short(n)}")
        return n

    def choice(
        self, m: YamlMapping, key: str, path: Path, enum: type[StrEnum], allowed: Sequence[StrEnum] | None = None
    ) -> Checked:
        if key not in m or m[key] is None:
            return None
        v = m[key]
        options = [e.value for e in (allowed if allowed is not None else list(enum))]
        if not isinstance(v, str) or v.strip().lower() not in options:
            return self.error(path + (key,), f"expected one of {', '.join(options)}; got {v!r}")
        return enum(v.strip().lower())


def _ok(*values: Checked) -> bool:
    """True when every value is present and valid (neither None nor _BAD)."""
    return all(v is not None and v is not _BAD for v in values)


def _val(v: Checked, default: Checked = None) -> Checked:
    return default if v is None or v is _BAD else v

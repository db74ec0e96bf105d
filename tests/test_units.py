"""Human sizes, counts and durations: what config.yaml and the CLI accept, and what they refuse."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headroom import units


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7B", 7_000_000_000),
        ("7b", 7_000_000_000),
        ("1.5B", 1_500_000_000),
        ("70M", 70_000_000),
        ("7e9", 7_000_000_000),
        ("7E9", 7_000_000_000),
        ("70000000000", 70_000_000_000),
        ("7_000_000_000", 7_000_000_000),
        (70_000_000_000, 70_000_000_000),
        (7e9, 7_000_000_000),
        ("0.5T", 500_000_000_000),
        ("405B", 405_000_000_000),
        (" 8K ", 8_000),
    ],
)
def test_parameter_counts_as_model_cards_write_them(text, expected):
    assert units.parse_count(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("7X", "unknown suffix 'X'"),
        ("seven", "expected a whole number"),
        ("7.5", "not a whole number"),
        ("1.0000000001B", "not a whole number"),
        ("-7B", "must not be negative"),
        (True, "expected a whole number"),
        (None, "expected a whole number"),
        ("", "expected a whole number"),
        (float("nan"), "expected a whole number"),
    ],
)
def test_bad_counts_say_what_is_accepted(text, fragment):
    with pytest.raises(ValueError, match=fragment) as exc:
        units.parse_count(text, what="params")
    assert "params" in str(exc.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80GiB", 80 * 1024**3),
        ("80 GiB", 80 * 1024**3),
        ("80Gi", 80 * 1024**3),
        ("512MiB", 512 * 1024**2),
        ("80GB", 80_000_000_000),
        ("1.5GiB", 1_610_612_736),
        ("64kB", 64_000),
        ("1TiB", 1024**4),
        ("1073741824", 1024**3),
        (1073741824, 1024**3),
        ("0.3GiB", 322_122_547),  # 322122547.2 rounded to the nearest byte
        ("100B", 100),
    ],
)
def test_sizes_in_binary_and_decimal_units(text, expected):
    assert units.parse_bytes(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("80Gb", "reads as bits"),
        ("80 parsecs", "unknown unit"),
        ("-1GiB", "must not be negative"),
        ("GiB", "expected a size"),
        ([80], "expected a size"),
    ],
)
def test_bad_sizes(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        units.parse_bytes(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("500ms", 0.5),
        ("2d", 172800.0),
        ("1.5s", 1.5),
        ("1m 30s", 90.0),
        ("30", 30.0),
        (30, 30.0),
        (0.25, 0.25),
    ],
)
def test_durations(text, expected):
    assert units.parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("30x", "unknown unit"),
        ("5m1h", "largest to smallest"),
        ("-5s", "must not be negative"),
        ("-5", "must not be negative"),
        ("5s garbage", "expected a duration"),
        ("soon", "expected a duration"),
        (False, "expected a duration"),
    ],
)
def test_bad_durations(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        units.parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.5, "500ms"),
        (30, "30s"),
        (90, "1m30s"),
        (3600, "1h"),
        (86400 + 7200, "1d2h"),
        (1.5, "1.5s"),
    ],
)
def test_format_duration(seconds, text):
    assert units.format_duration(seconds) == text


@given(st.integers(min_value=0, max_value=10 * 86400))
def test_formatted_durations_parse_back(seconds):
    assert units.parse_duration(units.format_duration(seconds)) == seconds


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (14_000_000_000, "13.04 GiB"),
        (1024**3, "1.00 GiB"),
        (512 * 1024**2, "512.00 MiB"),
        (-2 * 1024**3, "-2.00 GiB"),
    ],
)
def test_format_bytes(n, text):
    assert units.format_bytes(n) == text

"""Slurm time-limit parsing and duration formatting."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.errors import Invalid
from phalanx.timefmt import format_duration, parse_span, parse_time_limit


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10", 600),
        ("0:30", 60),  # seconds are rounded up to a whole minute, as in Slurm
        ("5:00", 300),
        ("1:02:03", 3780),
        ("2-0", 172800),
        ("1-2", 93600),
        ("1-2:30", 95400),
        ("1-02:03:04", 93840),
        (" 90 ", 5400),
        ("100:00:00", 360000),
        # slurm.md section 8, derived examples (in minutes)
        ("30", 30 * 60),
        ("30:15", 31 * 60),
        ("1:00:00", 60 * 60),
        ("2-0", 2880 * 60),
        ("2-12", 3600 * 60),
        ("2-12:30", 3630 * 60),
        ("2-12:30:15", 3631 * 60),
    ],
)
def test_parses_every_slurm_form(text: str, seconds: int) -> None:
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize(
    "text", ["infinite", "unlimited", "UNLIMITED", "INFINITE", "Infinite", "-1", "0", "0:00"]
)
def test_unlimited_is_none(text: str) -> None:
    assert parse_time_limit(text) is None


@pytest.mark.parametrize("text", ["", "abc", "1h", "1:2:3:4", "1-2-3", "-5", "1-", "1.5", "-2"])
def test_rejects_with_value_and_formats(text: str) -> None:
    with pytest.raises(Invalid) as info:
        parse_time_limit(text)
    assert repr(text) in info.value.detail


def test_error_names_accepted_forms() -> None:
    with pytest.raises(Invalid, match="days-hours:minutes:seconds"):
        parse_time_limit("soon")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "00:00:00"),
        (59, "00:00:59"),
        (3723, "01:02:03"),
        (93784, "1-02:03:04"),
        (1.9, "00:00:01"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_format_rejects_negative() -> None:
    with pytest.raises(ValueError):
        format_duration(-1)


@given(st.integers(min_value=1, max_value=10**8))
def test_round_trip_rounds_up_to_minutes(seconds: int) -> None:
    assert parse_time_limit(format_duration(seconds)) == -(-seconds // 60) * 60


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("45s", 45),
        ("90m", 5400),
        ("12h", 43200),
        ("30d", 30 * 86400),
        ("2w", 14 * 86400),
        ("30 d", 30 * 86400),
        ("30D", 30 * 86400),
        ("90", 5400),  # a bare number is minutes, as in Slurm
        ("1-12", 36 * 3600),
        ("1-00:00:00", 86400),
        ("1:30:00", 5400),
    ],
)
def test_parse_span(text: str, seconds: int) -> None:
    assert parse_span(text) == seconds


@pytest.mark.parametrize(
    "text", ["soon", "", "d", "30x", "-5d", "3.5h", "0", "0d", "\u0661\u0662h", "1e3s"]
)
def test_parse_span_refuses(text: str) -> None:
    with pytest.raises(Invalid):
        parse_span(text)

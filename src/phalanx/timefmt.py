"""Slurm time limits: parse ``--time`` values and format durations as ``[D-]HH:MM:SS``.

Slurm's accepted forms (``man sbatch``, ``--time``; ``src/common/parse_time.c``
``time_str2mins``): ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``,
``days-hours``, ``days-hours:minutes`` and ``days-hours:minutes:seconds``. A bare
number is *minutes* (``10`` is ten minutes), which is the one thing users most
often get wrong. Slurm's resolution is one minute and seconds are rounded **up**
(``30:15`` is 31 minutes). ``0``, ``-1``, ``infinite`` and ``unlimited`` mean no
limit. Standard library only, so the CLI can parse ``--time`` without loading the
model. Also the server's RFC 3339 timestamps back to epoch seconds (:func:`epoch`),
by hand for the server's own form: the CLI's tables need it and nothing of
:mod:`datetime`.
"""

from __future__ import annotations

from phalanx.errors import Invalid

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re

__all__ = [
    "FORMATS",
    "epoch",
    "format_duration",
    "parse_duration_seconds",
    "parse_span",
    "parse_time_limit",
]

FORMATS = (
    "minutes, minutes:seconds, hours:minutes:seconds, days-hours, "
    "days-hours:minutes, days-hours:minutes:seconds, or 'unlimited'"
)
"""The accepted forms, as error messages name them."""

_UNLIMITED = frozenset({"infinite", "unlimited", "-1"})
_WITH_DAYS = r"([0-9]+)-([0-9]+)(?::([0-9]+))?(?::([0-9]+))?"
_CLOCK = r"([0-9]+)(?::([0-9]+))?(?::([0-9]+))?"
_MAX_DIGITS = 10
"""A field of more digits is refused (Slurm keeps time limits in 32 bits of minutes)."""
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SPAN = r"([0-9]{1,10}) ?([smhdw])"


def _fullmatch(pattern: str, text: str) -> re.Match[str] | None:
    """``re.fullmatch``, with :mod:`re` imported on first use: the tools that only print
    durations (``squeue``, ``sacct``) never load it."""
    import re

    return re.fullmatch(pattern, text)


def parse_time_limit(value: str) -> int | None:
    """Seconds in the Slurm time limit ``value`` (whole minutes); ``None`` for no limit.

    Like Slurm, the result is rounded up to a whole minute, and a limit of zero
    (``0``, ``0:00``) means no limit.

    >>> parse_time_limit("10"), parse_time_limit("1:30"), parse_time_limit("1-2")
    (600, 120, 93600)
    """
    text = value.strip()
    if text.lower() in _UNLIMITED:
        return None
    seconds = _parse(text)
    if seconds is None:
        raise Invalid(f"time limit {value!r} is not a Slurm time; expected {FORMATS}")
    minutes = -(-seconds // 60)
    return minutes * 60 if minutes else None


def parse_duration_seconds(value: str) -> int | None:
    """Exact seconds in the Slurm time ``value`` (no rounding); ``None`` for no limit.

    Slurm's ``time_str2secs``, used where a duration is not a time limit (e.g.
    ``--switches=N@TIME``): a bare number is still minutes.
    """
    text = value.strip()
    if text.lower() in _UNLIMITED:
        return None
    seconds = _parse(text)
    if seconds is None:
        raise Invalid(f"time {value!r} is not a Slurm time; expected {FORMATS}")
    return seconds


def parse_span(value: str) -> int:
    """Seconds in a span such as ``30d``, ``12h``, ``90m``, ``45s`` or ``2w`` (one number
    and one unit), or in a Slurm time (``1-00:00:00``; a bare number is minutes); more
    than zero (token lifetimes: ``phalanx token create --expires``).

    >>> parse_span("30d"), parse_span("12h"), parse_span("1-12"), parse_span("90")
    (2592000, 43200, 129600, 5400)
    """
    text = value.strip().lower()
    if m := _fullmatch(_SPAN, text):
        seconds: int | None = int(m.group(1)) * _UNITS[m.group(2)]
    else:
        seconds = _parse(text)
    if seconds is None:
        raise Invalid(
            f"{value!r} is not a duration; expected a number and a unit (30d, 12h, 90m, 45s, "
            "2w) or a Slurm time (days-hours:minutes:seconds, hours:minutes:seconds, minutes)"
        )
    if seconds <= 0:
        raise Invalid(f"{value!r}: a duration must be longer than zero")
    return seconds


def _parse(text: str) -> int | None:
    m = _fullmatch(_WITH_DAYS, text) or _fullmatch(_CLOCK, text)
    if m is not None and any(g is not None and len(g) > _MAX_DIGITS for g in m.groups()):
        raise Invalid(
            f"time {text[:40]!r}{'...' if len(text) > 40 else ''}: a number of more than "
            f"{_MAX_DIGITS} digits is too large (expected at most {_MAX_DIGITS} per number)"
        )
    if m := _fullmatch(_WITH_DAYS, text):
        days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
        return ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if m := _fullmatch(_CLOCK, text):
        parts = [int(g) for g in m.groups() if g is not None]
        if len(parts) == 1:
            return parts[0] * 60
        if len(parts) == 2:
            return parts[0] * 60 + parts[1]
        return (parts[0] * 60 + parts[1]) * 60 + parts[2]
    return None


def format_duration(seconds: float) -> str:
    """``seconds`` as Slurm prints times: ``[D-]HH:MM:SS`` (whole seconds, rounded down).

    >>> format_duration(93784)
    '1-02:03:04'
    """
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative: {seconds}")
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def epoch(stamp: str | None) -> float | None:
    """RFC 3339 (``...Z``) to epoch seconds."""
    if not stamp:
        return None
    text = str(stamp)
    seconds = _utc_seconds(text)
    if seconds is not None:
        return seconds
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _utc_seconds(text: str) -> float | None:
    """``YYYY-MM-DDTHH:MM:SS[.fff[fff]]Z`` (the server's form) to epoch seconds, as
    ``datetime.timestamp`` computes them; ``None`` for any other form."""
    size = len(text)
    if size not in (20, 24, 27) or text[-1] != "Z" or text[10] != "T":
        return None
    if text[4] != "-" or text[7] != "-" or text[13] != ":" or text[16] != ":":
        return None
    fields = (text[0:4], text[5:7], text[8:10], text[11:13], text[14:16], text[17:19])
    if not all(f.isascii() and f.isdigit() for f in fields):
        return None
    micro = 0
    if size > 20:
        fraction = text[20:-1]
        if text[19] != "." or not (fraction.isascii() and fraction.isdigit()):
            return None
        micro = int(fraction) * (1000 if len(fraction) == 3 else 1)
    year, month, day, hour, minute, second = (int(f) for f in fields)
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 60):
        return None
    # Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    if day > 28 and _past_month_end(year, month, day):
        return None
    return ((days * 86400 + hour * 3600 + minute * 60 + second) * 10**6 + micro) / 10**6


def _past_month_end(year: int, month: int, day: int) -> bool:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return day > (29 if leap else 28)
    return day > 30 and month in (4, 6, 9, 11)

"""Scenario tables for Kubernetes quantities: parse_quantity / format_quantity.

Quantities are parsed to exact integers in the resource's base unit: milli-cores for
``cpu`` and whole units (bytes, devices) for everything else, rounding a fraction up
the way Kubernetes' ``Quantity.MilliValue()`` / ``Quantity.Value()`` do.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.model import CPU, GPU, MEMORY, QuantityError, format_quantity, parse_quantity

Ki, Mi, Gi, Ti, Pi, Ei = (2**10 * 1024**n for n in range(6))


@pytest.mark.parametrize(
    ("value", "resource", "expected"),
    [
        # plain integers as strings
        ("8", CPU, 8_000),
        ("96", CPU, 96_000),
        ("8", GPU, 8),
        ("96", MEMORY, 96),
        ("0", CPU, 0),
        ("0", MEMORY, 0),
        ("+1", CPU, 1_000),
        # milli and fractional cpu
        ("500m", CPU, 500),
        ("0.5", CPU, 500),
        (".5", CPU, 500),
        ("1500m", CPU, 1_500),
        ("2.25", CPU, 2_250),
        # binary suffixes
        ("1Ki", MEMORY, Ki),
        ("1Mi", MEMORY, Mi),
        ("1000Gi", MEMORY, 1000 * Gi),
        ("1.5Ti", MEMORY, 1_649_267_441_664),
        ("1.5Ti", MEMORY, 3 * Ti // 2),
        ("2Pi", MEMORY, 2 * Pi),
        ("1Ei", MEMORY, Ei),
        # decimal suffixes
        ("1k", MEMORY, 1_000),
        ("100M", MEMORY, 100_000_000),
        ("3G", MEMORY, 3 * 10**9),
        ("4T", MEMORY, 4 * 10**12),
        ("1P", MEMORY, 10**15),
        ("1E", MEMORY, 10**18),
        ("1k", CPU, 1_000_000),
        # decimal exponents
        ("2e3", MEMORY, 2_000),
        ("2e3", CPU, 2_000_000),
        ("1E3", MEMORY, 1_000),
        ("5e+2", GPU, 500),
        ("25e-1", CPU, 2_500),
        # Python ints are counted in the resource's natural unit (cores for cpu)
        (8, GPU, 8),
        (2, CPU, 2_000),
        (0, MEMORY, 0),
        (1024, MEMORY, Ki),
    ],
)
def test_parse_quantity(value: str | int, resource: str, expected: int) -> None:
    got = parse_quantity(value, resource)
    assert type(got) is int
    assert got == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # cpu is counted in milli-cores; a fraction of a milli-core rounds up (MilliValue)
        ("0.0001", 1),
        ("1.0001", 1_001),
        ("2500u", 3),
        ("1n", 1),
        ("100n", 1),
        ("1e-3", 1),
        ("1e-4", 1),
        ("0.0015", 2),
        ("1m", 1),
    ],
)
def test_cpu_milli_rounding_up(value: str, expected: int) -> None:
    assert parse_quantity(value, CPU) == expected


@pytest.mark.parametrize(
    ("value", "resource", "expected"),
    [
        # whole-unit resources round a fraction up (Value())
        ("0.5", MEMORY, 1),
        ("1.5", MEMORY, 2),
        ("1m", MEMORY, 1),
        ("1500m", MEMORY, 2),
        ("1u", MEMORY, 1),
        ("0.1", GPU, 1),
        ("1e-3", GPU, 1),
        ("0.5Ki", MEMORY, 512),
        ("0.0001Ki", MEMORY, 1),
    ],
)
def test_whole_units_round_up(value: str, resource: str, expected: int) -> None:
    assert parse_quantity(value, resource) == expected


@pytest.mark.parametrize(
    "value",
    [
        "-1",
        "-500m",
        "-1Gi",
        -1,
        "abc",
        "1.2.3",
        "5X",
        "1K",
        "1KI",
        "1ki",
        "Gi",
        "m",
        "1 Gi",
        "1e",
        "1e3m",
        "1Gim",
        ".",
        "",
        "   ",
        True,
        False,
        None,
        [],
        {"value": 1},
        float("nan"),
        float("inf"),
    ],
)
@pytest.mark.parametrize("resource", [CPU, MEMORY, GPU])
def test_parse_quantity_rejects(value: Any, resource: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value, resource)


def test_quantity_error_is_a_value_error_naming_the_input() -> None:
    with pytest.raises(ValueError, match=r"'5X'"):
        parse_quantity("5X", MEMORY)
    with pytest.raises(QuantityError, match="non-negative"):
        parse_quantity("-1", CPU)


@pytest.mark.parametrize(
    ("amount", "resource", "expected"),
    [
        (2_000, CPU, "2"),
        (96_000, CPU, "96"),
        (500, CPU, "500m"),
        (1_500, CPU, "1500m"),
        (1, CPU, "1m"),
        (0, CPU, "0"),
        (8, GPU, "8"),
        (0, MEMORY, "0"),
        (1_000, MEMORY, "1000"),
        (1_023, MEMORY, "1023"),
        (Ki, MEMORY, "1Ki"),
        (1_536, MEMORY, "1536"),
        (1000 * Gi, MEMORY, "1000Gi"),
        (3 * Ti // 2, MEMORY, "1536Gi"),
        (Ti, MEMORY, "1Ti"),
        (Ei, MEMORY, "1Ei"),
        (3 * Ei, MEMORY, "3Ei"),
    ],
)
def test_format_quantity(amount: int, resource: str, expected: str) -> None:
    assert format_quantity(amount, resource) == expected


@pytest.mark.parametrize(
    ("amount", "resource"),
    [
        (0, CPU),
        (1, CPU),
        (999, CPU),
        (1_000, CPU),
        (123_456, CPU),
        (0, MEMORY),
        (1, MEMORY),
        (Ki - 1, MEMORY),
        (Ki, MEMORY),
        (1000 * Gi, MEMORY),
        (3 * Ti // 2, MEMORY),
        (Ei + Ki, MEMORY),
        (7, GPU),
        (4096, GPU),
    ],
)
def test_format_then_parse_round_trip(amount: int, resource: str) -> None:
    assert parse_quantity(format_quantity(amount, resource), resource) == amount


@given(
    amount=st.integers(min_value=0, max_value=2**70),
    resource=st.sampled_from([CPU, MEMORY, GPU, "example.com/fpga"]),
)
def test_format_then_parse_round_trip_property(amount: int, resource: str) -> None:
    text = format_quantity(amount, resource)
    assert isinstance(text, str)
    assert parse_quantity(text, resource) == amount


@pytest.mark.parametrize(
    ("value", "resource"),
    [("1.5Ti", MEMORY), ("0.5", CPU), ("2e3", MEMORY), ("100M", MEMORY), ("1k", CPU)],
)
def test_parse_format_parse_is_stable(value: str, resource: str) -> None:
    amount = parse_quantity(value, resource)
    assert parse_quantity(format_quantity(amount, resource), resource) == amount

"""Kubernetes resource quantities parsed to exact integers.

Quota arithmetic never touches floats. A quantity string such as ``8``,
``96``, ``500m``, ``1000Gi``, ``1.5Ti`` or ``2e3`` is parsed with
:class:`fractions.Fraction` and converted to an integer in the resource's
*base unit*:

* ``cpu`` is counted in milli-cores (``"2"`` -> ``2000``, ``"500m"`` -> ``500``);
* every other resource (``memory`` in bytes, ``nvidia.com/gpu`` in devices,
  ``phalanx.io/gpu-milli`` in thousandths of one GPU, any extended resource) is
  counted in whole units.

Like Kubernetes' ``Quantity.Value()``, a fractional amount of a whole-unit
resource is rounded *up* (``"0.5"`` bytes is one byte); a fractional number of
milli-cores is rounded up as ``MilliValue()`` does.
"""

from __future__ import annotations

import re
from fractions import Fraction

from phalanx.errors import Invalid

__all__ = [
    "CPU",
    "GPU",
    "GPU_MILLI",
    "MEMORY",
    "QuantityError",
    "format_quantity",
    "gpu_share",
    "is_milli_resource",
    "parse_quantity",
]

CPU = "cpu"
MEMORY = "memory"
GPU = "nvidia.com/gpu"
GPU_MILLI = "phalanx.io/gpu-milli"
PODS = "pods"
"""Kueue's special resource: a ClusterQueue that covers it is charged one per pod."""
"""A task's share of one GPU device in thousandths (1 to 1000): GPU sharing. A node
offers 1000 per GPU it has; a device serves whole-GPU tasks or shares, never both."""

_MILLI_RESOURCES = frozenset({CPU})

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_MAX_EXPONENT = 30
_MAX_DIGITS = 100
"""Longer numbers are refused (they are never meant, and ``Fraction`` of a very long
string is slow or fails)."""
_QUANTITY_RE = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exp>[+-]?[0-9]+))?$"
)


class QuantityError(Invalid, ValueError):
    """A string that is not a Kubernetes quantity, or a negative one.

    An :class:`~phalanx.errors.Invalid`, and a :class:`ValueError` so that pydantic
    validators report it as a validation error of the field."""


def is_milli_resource(resource: str) -> bool:
    """True for resources counted in milli-units (``cpu``)."""
    return resource in _MILLI_RESOURCES


def _shown(value: str) -> str:
    """``value`` as an error message quotes it: at most 40 characters of it."""
    return repr(value) if len(value) <= 40 else f"{value[:40]!r}... ({len(value)} characters)"


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def _fraction(value: str | int | float) -> Fraction:
    """The exact non-negative amount a quantity spells, in its written unit."""
    if isinstance(value, bool):
        raise QuantityError(f"expected a quantity such as 8, 500m or 16Gi, got {value!r}")
    if isinstance(value, int):
        amount = Fraction(value)
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"expected a finite quantity, got {value!r}")
        amount = Fraction(repr(value))
    elif isinstance(value, str):
        match = _QUANTITY_RE.match(value.strip())
        if match is None or len(match["num"]) > _MAX_DIGITS:
            raise QuantityError(
                f"expected a quantity such as 8, 500m, 16Gi or 1.5Ti, got {_shown(value)}"
            )
        amount = Fraction(match["num"])
        suffix, exp = match["suffix"], match["exp"]
        if exp is not None:
            if len(exp) > 4 or abs(int(exp)) > _MAX_EXPONENT:
                raise QuantityError(f"exponent out of range in quantity {_shown(value)}")
            amount *= Fraction(10) ** int(exp)
        elif suffix in _BINARY:
            amount *= _BINARY[suffix]
        else:
            amount *= _DECIMAL[suffix or ""]
        if match["sign"] == "-":
            amount = -amount
    else:
        raise QuantityError(f"expected a quantity such as 8, 500m or 16Gi, got {value!r}")
    if amount < 0:
        raise QuantityError(f"expected a non-negative quantity, got {value!r}")
    return amount


def parse_quantity(value: str | int, resource: str) -> int:
    """Parse ``value`` into the integer base unit of ``resource``.

    >>> parse_quantity("500m", "cpu")
    500
    >>> parse_quantity("1.5Ti", "memory")
    1649267441664
    >>> parse_quantity(8, "nvidia.com/gpu")
    8
    """
    amount = _fraction(value)
    if is_milli_resource(resource):
        amount *= 1000
    return _ceil(amount)


def gpu_share(value: str | int | float) -> int | None:
    """Thousandths of one GPU when ``value`` is a fraction of one GPU (``0.5``,
    ``500m``), None when it is a whole number of GPUs.

    >>> gpu_share("0.25"), gpu_share("2")
    (250, None)
    """
    amount = _fraction(value)
    if amount.denominator == 1:
        return None
    if amount > 1:
        raise QuantityError(
            f"expected whole GPUs or a share of one GPU (0.001 to 1), got {value!r}"
        )
    return _ceil(amount * 1000)


def _is_bytes(resource: str) -> bool:
    return resource in ("memory", "ephemeral-storage", "storage") or resource.startswith(
        "hugepages-"
    )


def format_quantity(amount: int, resource: str) -> str:
    """Render an integer base-unit amount back into Kubernetes notation."""
    if is_milli_resource(resource):
        if amount % 1000 == 0:
            return str(amount // 1000)
        return f"{amount}m"
    if amount != 0 and _is_bytes(resource):
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            unit = _BINARY[suffix]
            if amount % unit == 0:
                return f"{amount // unit}{suffix}"
    return str(amount)

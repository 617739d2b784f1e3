"""Slurm job array specifications (``--array``; sbatch.1, job_array.shtml).

``0-15``, ``0,6,16-32``, ``1,3,5,7``, ``0-15:4`` (0, 4, 8, 12), and a ``%N``
suffix that throttles how many tasks run at once (``0-15%4``). Indices run from
0 to ``MaxArraySize - 1``; with Slurm's default ``MaxArraySize=1001`` that is
0..1000, so at most 1001 tasks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from phalanx.errors import Invalid

__all__ = ["MAX_ARRAY_SIZE", "array_step", "parse_array"]

MAX_ARRAY_SIZE = 1001
"""Slurm's default ``MaxArraySize``: indices must be below it."""
MAX_THROTTLE = 2**32 - 1
"""The largest ``%N`` (Slurm keeps it in 32 bits)."""
_BIG = 10**12
"""Numbers of more than 12 digits are read as this: they are all far beyond any limit."""

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?")
_ERROR = "sbatch: error: Invalid job array specification"


def _invalid(text: str, why: str) -> Invalid:
    return Invalid(f"{_ERROR}\nsbatch: error: --array={text}: {why}")


def _number(digits: str) -> int:
    """``digits`` (ASCII) as an int; more than 12 digits as :data:`_BIG`, without ``int()``
    of an arbitrarily long string."""
    return int(digits) if len(digits) <= 12 else _BIG


@dataclass(frozen=True, slots=True)
class ArrayRequest:
    """A parsed ``--array`` (the wire form is :class:`phalanx.model.ArraySpec`)."""

    indices: list[int]
    throttle: int | None
    text: str

    def to_dict(self) -> dict[str, object]:
        return {"indices": list(self.indices), "throttle": self.throttle, "text": self.text}


def parse_array(text: str) -> ArrayRequest:
    """The indices and throttle of the Slurm array specification ``text``.

    >>> parse_array("1-3,8,10-20:5%2").indices
    [1, 2, 3, 8, 10, 15, 20]
    """
    spec, throttle_text = text, None
    if "%" in text:
        spec, _, throttle_text = text.partition("%")
    throttle: int | None = None
    if throttle_text is not None:
        if not throttle_text.isdigit() or not throttle_text.isascii():
            raise _invalid(text, f"the throttle after % must be a number, got {throttle_text!r}")
        throttle = _number(throttle_text) or None  # %0: no limit
        if throttle is not None and throttle > MAX_THROTTLE:
            raise _invalid(text, f"the throttle after % must be at most {MAX_THROTTLE}")
    if not spec:
        raise _invalid(text, "no indices")
    marks = bytearray(MAX_ARRAY_SIZE)  # a bitmap: a long list of ranges costs no more
    for part in spec.split(","):
        m = _RANGE.fullmatch(part)
        if m is None or not part.isascii():
            raise _invalid(text, f"{part!r} is not an index, a range N-M or a stepped range N-M:S")
        first = _number(m.group(1))
        last = _number(m.group(2)) if m.group(2) is not None else first
        step = _number(m.group(3)) if m.group(3) is not None else 1
        if last < first:
            raise _invalid(text, f"{part!r}: the range ends before it starts")
        if step < 1:
            raise _invalid(text, f"{part!r}: the step must be at least 1")
        if last >= MAX_ARRAY_SIZE:
            shown = m.group(2) or m.group(1)
            if len(shown) > 24:
                shown = f"{shown[:12]}...({len(shown)} digits)"
            raise _invalid(
                text, f"index {shown} is above the maximum {MAX_ARRAY_SIZE - 1} (MaxArraySize)"
            )
        marks[first : last + 1 : step] = b"\x01" * len(range(first, last + 1, step))
    indices = [i for i, marked in enumerate(marks) if marked]
    return ArrayRequest(indices=indices, throttle=throttle, text=text)


def array_step(text: str) -> int:
    """``SLURM_ARRAY_TASK_STEP`` for the specification ``text``: the number after the
    first ``:``, or 1 when there is none (even for ``1,3,5``)."""
    spec = text.partition("%")[0]
    for part in spec.split(","):
        if ":" in part:
            step = part.partition(":")[2]
            return _number(step) if step.isascii() and step.isdigit() else 1
    return 1

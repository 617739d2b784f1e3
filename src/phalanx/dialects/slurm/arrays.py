"""Slurm job array specifications (``--array``; sbatch.1, job_array.shtml).

``0-15``, ``0,6,16-32``, ``1,3,5,7``, ``0-15:4`` (0, 4, 8, 12), and a ``%N``
suffix that throttles how many tasks run at once (``0-15%4``). Indices run from
0 to ``MaxArraySize - 1``; with Slurm's default ``MaxArraySize=1001`` that is
0..1000, so at most 1001 tasks. slurm.conf may set ``MaxArraySize`` up to
4000001 (0 disables arrays): the server checks its own
(:func:`index_limit_problem`, :mod:`phalanx.control.submissions`), and the client
parses up to the largest any server could accept (:data:`MAX_ARRAY_SIZE_LIMIT`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import compress

from phalanx.errors import Invalid

__all__ = [
    "MAX_ARRAY_SIZE",
    "MAX_ARRAY_SIZE_LIMIT",
    "MAX_ARRAY_WORK",
    "array_step",
    "index_limit_problem",
    "parse_array",
]

MAX_ARRAY_SIZE = 1001
"""Slurm's default ``MaxArraySize``: indices must be below it."""
MAX_ARRAY_SIZE_LIMIT = 4_000_001
"""The largest ``MaxArraySize`` Slurm accepts in slurm.conf: no index is ever 4000001 or more."""
MAX_ARRAY_WORK = 1 << 26
"""The most indices the ranges of one specification may name in all, counting an index
each time a range names it (67,108,864): far beyond any real one, it bounds the work of
``0-4000000,0-4000000,...``."""
MAX_THROTTLE = 2**32 - 1
"""The largest ``%N`` (Slurm keeps it in 32 bits)."""
_BIG = 10**12
"""Numbers of more than 12 digits are read as this: they are all far beyond any limit."""

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?")
_ERROR = "sbatch: error: Invalid job array specification"


def _invalid(text: str, why: str) -> Invalid:
    shown = text if len(text) <= 100 else f"{text[:80]}...({len(text)} characters)"
    return Invalid(f"{_ERROR}\nsbatch: error: --array={shown}: {why}")


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


def index_limit_problem(index: int | str, max_size: int) -> str:
    """Why the index ``index`` (a number, or its digits as written) is refused under
    ``MaxArraySize=max_size``."""
    if max_size <= 0:
        return "job arrays are disabled (MaxArraySize=0)"
    shown = str(index)
    if len(shown) > 24:
        shown = f"{shown[:12]}...({len(shown)} digits)"
    return f"index {shown} is above the maximum {max_size - 1} (MaxArraySize={max_size})"


def parse_array(text: str, max_size: int = MAX_ARRAY_SIZE_LIMIT) -> ArrayRequest:
    """The indices and throttle of the Slurm array specification ``text``, each index
    below ``max_size`` (``MaxArraySize``).

    The default is the largest ``MaxArraySize`` any slurm.conf may set: ``phalanx
    sbatch`` does not know its server's, and leaves that check to the server.

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
    # A bitmap as long as the largest index so far: ranges that repeat indices cost
    # one byte written per index named, bounded by MAX_ARRAY_WORK in all.
    marks = bytearray()
    work = 0
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
        if last >= max_size:
            raise _invalid(text, index_limit_problem(m.group(2) or m.group(1), max_size))
        count = len(range(first, last + 1, step))
        work += count
        if work > MAX_ARRAY_WORK:
            raise _invalid(
                text,
                f"its ranges name more than {MAX_ARRAY_WORK} indices in all, counting "
                "repeats; name each index once",
            )
        if last >= len(marks):
            marks.extend(bytes(last + 1 - len(marks)))
        marks[first : last + 1 : step] = b"\x01" * count
    indices = list(compress(range(len(marks)), marks))
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

"""Slurm's compressed host ranges (``tux[1-3,7]``), written in the order given.

The writing half of hostlists, apart from :mod:`phalanx.dialects.slurm.hostlists`
(which expands them with python-hostlist): ``squeue``, ``sinfo`` and ``sacct``
print a node list on every line and start in a fresh interpreter each time, so
this module imports nothing, not even :mod:`re`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["compress_hostlist"]


def _numbered(name: str) -> tuple[str, str] | None:
    """``(prefix, digits)`` of a name ending in digits, as ``re.match(r"^(.*?)(\\d+)$")``
    splits it (``$`` also before a final newline; ``.`` never across one)."""
    body = name[:-1] if name.endswith("\n") else name
    cut = len(body)
    while cut and body[cut - 1].isdecimal():
        cut -= 1
    if cut == len(body) or "\n" in body[:cut]:
        return None
    return body[:cut], body[cut:]


def compress_hostlist(names: Sequence[str]) -> str:
    """``scontrol show hostlist``: compress in the given order, without sorting or dedup.

    ``tux2,tux1,tux2`` -> ``tux[2,1-2]`` (Slurm's hostlist_ranged_string).
    """
    # Ranges: (prefix, lo, hi, width) or (name, None, None, 0) for unnumbered names.
    ranges: list[tuple[str, int | None, int | None, int]] = []
    for name in names:
        match = _numbered(name)
        if match is None:
            ranges.append((name, None, None, 0))
            continue
        prefix, digits = match
        number = int(digits)
        if ranges:
            last_prefix, lo, hi, width = ranges[-1]
            if (
                lo is not None
                and hi is not None
                and last_prefix == prefix
                and number == hi + 1
                and f"{number:0{width}d}" == digits
            ):
                ranges[-1] = (prefix, lo, number, width)
                continue
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        ranges.append((prefix, number, number, width))
    out: list[str] = []
    i = 0
    while i < len(ranges):
        prefix, lo, hi, width = ranges[i]
        if lo is None or hi is None:
            out.append(prefix)
            i += 1
            continue
        group = [ranges[i]]
        j = i + 1
        while j < len(ranges) and ranges[j][0] == prefix and ranges[j][1] is not None:
            group.append(ranges[j])
            j += 1
        if len(group) == 1 and lo == hi:
            out.append(f"{prefix}{lo:0{width}d}")
        else:
            items = [
                f"{a:0{w}d}" if a == b else f"{a:0{w}d}-{b:0{w}d}"
                for _, a, b, w in group
                if a is not None and b is not None
            ]
            out.append(f"{prefix}[{','.join(items)}]")
        i = j
    return ",".join(out)

"""Slurm hostlist expressions (``gpu[01-16]``, ``a[1-3]b[1-2],c``), expanded with a bound.

python-hostlist does the expanding. It refuses a single range of more than
100,000 names, but not many of them: ``n[0-99999,0-99999,...]`` or
``a[0-99999],b[0-99999],...`` would expand to as many names as the text has
ranges, and a range bound too long for ``int()`` raises :class:`ValueError`.
:func:`expand_hostlist` counts the names an expression stands for before it
expands anything, refuses more than :data:`MAX_HOSTS`, and turns every failure
into :class:`BadHostlist` (an :class:`~phalanx.errors.Invalid`), whose detail
says what is wrong; callers add where the expression came from.

Standard library, :mod:`hostlist` and :mod:`phalanx.errors` only: the in-job
``scontrol`` imports it.
"""

from __future__ import annotations

import re

import hostlist

from phalanx.errors import Invalid

__all__ = ["MAX_HOSTS", "BadHostlist", "count_hosts", "expand_hostlist"]

MAX_HOSTS = 100_000
"""The most names one expression may stand for (python-hostlist's limit for one range)."""

_MAX_DIGITS = 18
"""Range bounds longer than this are refused (python-hostlist would fail in ``int()``)."""

_GROUP = re.compile(r"\[([^\]]*)\]")


class BadHostlist(Invalid):
    """A hostlist expression that cannot be expanded; the detail says why."""


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _group_size(body: str) -> int:
    """How many names one ``[...]`` stands for (0 where python-hostlist will object)."""
    total = 0
    for item in body.split(","):
        low, dash, high = item.partition("-")
        for bound in (low, high) if dash else (low,):
            if len(bound) > _MAX_DIGITS:
                raise BadHostlist(
                    f"the range bound {bound[:24]}... has more than {_MAX_DIGITS} digits"
                )
            if not (bound.isascii() and bound.isdigit()):
                return 0
        total += int(high) - int(low) + 1 if dash else 1
    return max(total, 0)


def count_hosts(text: str) -> int:
    """How many names (duplicates included) the expression ``text`` stands for, at most.

    >>> count_hosts("gpu[01-16],cpu[1-2]x[1-3]")
    22
    """
    count = 0
    for part in _split_top(text):
        if not part:
            continue
        size = 1
        for body in _GROUP.findall(part):
            size *= _group_size(body)
            if size > MAX_HOSTS:
                break
        count += size
    return count


def expand_hostlist(text: str, *, allow_duplicates: bool = False) -> list[str]:
    """Every name in the hostlist expression ``text``, in order.

    Whitespace separates like a comma, as in Slurm. Raises :class:`BadHostlist`
    for a malformed expression or one of more than :data:`MAX_HOSTS` names.

    >>> expand_hostlist("tux[1-3] gpu07")
    ['tux1', 'tux2', 'tux3', 'gpu07']
    """
    joined = ",".join(text.split())
    count = count_hosts(joined)
    if count > MAX_HOSTS:
        raise BadHostlist(f"it names more than {MAX_HOSTS} nodes")
    try:
        return list(hostlist.expand_hostlist(joined, allow_duplicates=allow_duplicates))
    except (hostlist.BadHostlist, ValueError) as exc:
        raise BadHostlist(str(exc) or "malformed") from None

"""Slurm memory sizes (``--mem``, ``--mem-per-cpu``, ``--mem-per-gpu``, ``RealMemory``) in MB.

Slurm's ``str_to_mbytes`` (src/common/proc_args.c): a whole number with an
optional unit ``K``, ``M``, ``G`` or ``T`` (either case, optionally followed by
``B``); no unit means megabytes. Units are binary (``1G`` is 1024 MB) and a
kilobyte amount is rounded up to whole megabytes.
"""

from __future__ import annotations

import re

from phalanx.errors import Invalid

__all__ = ["MB", "format_memory_mb", "parse_memory_mb"]

MB = 1 << 20
"""Bytes in one of Slurm's megabytes (MiB)."""

_SIZE = re.compile(r"([0-9]+)([kKmMgGtT]?)[bB]?")
_FACTOR = {"": 1, "m": 1, "g": 1024, "t": 1024 * 1024}
MAX_MB = (1 << 43) - 1
"""The largest size taken: its bytes fit in 63 bits, as a Kubernetes quantity's do."""


def parse_memory_mb(text: str, option: str = "--mem") -> int:
    """Megabytes in the Slurm memory size ``text``; ``option`` names it in the error.

    >>> parse_memory_mb("1000G"), parse_memory_mb("512"), parse_memory_mb("1500K")
    (1024000, 512, 2)
    """
    m = _SIZE.fullmatch(text.strip())
    if m is None or (m.group(2) == "" and text.strip()[-1:] in "bB"):
        raise Invalid(
            f"sbatch: error: invalid memory constraint {option}={text}: expected a whole "
            "number of megabytes, or a number with a K, M, G or T suffix (e.g. 64G)"
        )
    digits, unit = m.group(1).lstrip("0") or "0", m.group(2).lower()
    mb = 0
    if len(digits) <= 20:  # longer is too large whatever the unit; int() is never asked
        amount = int(digits)
        mb = -(-amount // 1024) if unit == "k" else amount * _FACTOR[unit]
    if len(digits) > 20 or mb > MAX_MB:
        raise Invalid(
            f"sbatch: error: invalid memory constraint {option}={text}: too large (at most "
            f"{MAX_MB >> 20}T)"
        )
    return mb


def format_memory_mb(mb: int) -> str:
    """``mb`` as Slurm prints memory: ``1000G`` when a whole number of G, else ``1500M``."""
    if mb and mb % (1024 * 1024) == 0:
        return f"{mb // (1024 * 1024)}T"
    if mb and mb % 1024 == 0:
        return f"{mb // 1024}G"
    return f"{mb}M"

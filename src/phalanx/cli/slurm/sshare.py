"""``phalanx sshare``: the tenant (account) tree with its shares, in sshare's layout.

RawShares is a tenant's ``allocation``; NormShares its fraction of its
siblings' total. phalanx's usage ledger is not exposed yet, so RawUsage,
EffectvUsage and FairShare are printed blank rather than invented.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["COLUMNS", "format_tenants", "run"]

COLUMNS: list[tuple[str, int]] = [
    ("Account", -20),
    ("User", 10),
    ("RawShares", 10),
    ("NormShares", 11),
    ("RawUsage", 11),
    ("EffectvUsage", 13),
    ("FairShare", 10),
]
"""Header and width (negative: left-justified), each field followed by a space."""


def _cell(text: str, size: int) -> str:
    text = text[: abs(size)]
    return text.ljust(-size) if size < 0 else text.rjust(size)


def _shares(tenant: dict[str, Any]) -> float:
    value = (tenant.get("spec") or {}).get("allocation", 1)
    try:
        return float(value)
    except (TypeError, ValueError):
        return 1.0


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def format_tenants(
    tenants: Sequence[dict[str, Any]], *, header: bool = True, parsable: bool = False
) -> str:
    """The tree: parents before children, children indented one space per level."""
    by_parent: dict[str | None, list[dict[str, Any]]] = {}
    names = {t["metadata"]["name"] for t in tenants}
    for tenant in sorted(tenants, key=lambda t: t["metadata"]["name"]):
        parent = (tenant.get("spec") or {}).get("parent")
        by_parent.setdefault(parent if parent in names else None, []).append(tenant)
    rows: list[list[str]] = []

    def walk(parent: str | None, depth: int) -> None:
        siblings = by_parent.get(parent, [])
        total = sum(_shares(t) for t in siblings) or 1.0
        for tenant in siblings:
            name = tenant["metadata"]["name"]
            shares = _shares(tenant)
            rows.append(
                [" " * depth + name, "", _number(shares), f"{shares / total:.6f}", "", "", ""]
            )
            walk(name, depth + 1)

    walk(None, 0)
    lines = []
    if parsable:
        if header:
            lines.append("|".join(c[0] for c in COLUMNS) + "|")
        lines += ["|".join(r) + "|" for r in rows]
    else:
        if header:
            lines.append("".join(_cell(c[0], c[1]) + " " for c in COLUMNS))
            lines.append("".join("-" * abs(c[1]) + " " for c in COLUMNS))
        lines += [
            "".join(_cell(v, c[1]) + " " for v, c in zip(r, COLUMNS, strict=True)) for r in rows
        ]
    return "".join(line + "\n" for line in lines)


def run(*, noheader: bool, parsable: bool, accounts: list[str] | None) -> int:
    import sys

    from phalanx.cli.slurm.common import tool_error
    from phalanx.client import Client
    from phalanx.errors import PhalanxError

    try:
        with Client() as client:
            tenants = client.tenants()
    except PhalanxError as exc:
        tool_error("sshare", exc.detail)
        return 1
    if accounts:
        tenants = [t for t in tenants if t["metadata"]["name"] in accounts]
    sys.stdout.write(format_tenants(tenants, header=not noheader, parsable=parsable))
    return 0

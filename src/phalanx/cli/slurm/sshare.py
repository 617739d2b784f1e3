"""``phalanx sshare``: the fair-share tree from the usage ledger, in sshare's layout.

One row per association, in Slurm's order: ``root``, then each tenant (Slurm
account), its users and then its child tenants, the Account column indented
one space per level. RawShares is a tenant's ``allocation`` (users have 1);
RawUsage the decayed billable TRES-seconds; EffectvUsage and FairShare come
from Fair Tree (Slurm's default: accounts have no FairShare) or from the
classic ``2^(-UE/S)`` under ``NO_FAIR_TREE``. As in Slurm, user rows are
shown for the calling user only, unless ``-a`` (all users) or ``-u USERS``;
``-A ACCOUNTS`` keeps those accounts' rows. ``-l`` adds NormUsage, LevelFS and
the GrpTRESMins and TRESRunMins columns (printed empty). ``-p`` ends every
field with ``|``, ``-P`` separates them with it; ``-n`` drops the header.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    Getter = Callable[[dict[str, Any]], str]

__all__ = ["COLUMNS", "LONG_COLUMNS", "format_usage", "select_rows"]


def _fixed(value: Any) -> str:
    return "" if value is None else f"{float(value):.6f}"


def _account(row: dict[str, Any]) -> str:
    # A user row shows its account one level deeper than the account's own row.
    return " " * int(row.get("depth") or 0) + str(row["account"])


def _raw_shares(row: dict[str, Any]) -> str:
    shares = row.get("raw_shares")
    if shares is None:
        return ""
    return str(int(shares)) if float(shares).is_integer() else f"{float(shares):g}"


def _level_fs(row: dict[str, Any]) -> str:
    value = row.get("level_fs")
    if value is None:
        return ""
    return "inf" if value == "inf" else f"{float(value):.6f}"


_FIELDS: dict[str, tuple[int, Getter]] = {
    "Account": (-20, _account),
    "User": (10, lambda r: str(r.get("user") or "")),
    "RawShares": (10, _raw_shares),
    "NormShares": (11, lambda r: _fixed(r.get("norm_shares"))),
    "RawUsage": (11, lambda r: str(int(float(r.get("raw_usage") or 0)))),
    "NormUsage": (11, lambda r: _fixed(r.get("norm_usage"))),
    "EffectvUsage": (13, lambda r: _fixed(r.get("effective_usage"))),
    "FairShare": (10, lambda r: _fixed(r.get("fair_share"))),
    "LevelFS": (10, _level_fs),
    "GrpTRESMins": (30, lambda r: ""),
    "TRESRunMins": (30, lambda r: ""),
}
"""sshare fields: width (negative: left-justified) and value."""

COLUMNS: list[str] = [
    "Account",
    "User",
    "RawShares",
    "NormShares",
    "RawUsage",
    "EffectvUsage",
    "FairShare",
]
LONG_COLUMNS: list[str] = [
    "Account",
    "User",
    "RawShares",
    "NormShares",
    "RawUsage",
    "NormUsage",
    "EffectvUsage",
    "FairShare",
    "LevelFS",
    "GrpTRESMins",
    "TRESRunMins",
]


def _cell(text: str, size: int) -> str:
    text = text[: abs(size)]
    return text.ljust(-size) if size < 0 else text.rjust(size)


def select_rows(
    rows: Sequence[dict[str, Any]],
    *,
    accounts: Sequence[str] | None = None,
    users: Sequence[str] | None = None,
    all_users: bool = False,
    me: str | None = None,
) -> list[dict[str, Any]]:
    """The rows sshare shows: every account row (those of ``accounts`` if given) and
    the user rows of ``users``, of everyone with ``all_users``, else of ``me``."""
    out = []
    for row in rows:
        if accounts and row.get("account") not in accounts:
            continue
        user = row.get("user")
        if user and not all_users and user not in (users or ([me] if me else [])):
            continue
        out.append(row)
    return out


def format_usage(
    rows: Sequence[dict[str, Any]],
    *,
    long: bool = False,
    header: bool = True,
    parsable: str | None = None,
) -> str:
    """sshare text; ``parsable``: ``"trailing"`` (``-p``) or ``"plain"`` (``-P``)."""
    names = LONG_COLUMNS if long else COLUMNS
    fields = [(name, *_FIELDS[name]) for name in names]
    values = [[get(row) for _, _, get in fields] for row in rows]
    lines: list[str] = []
    if parsable is not None:
        end = "|" if parsable == "trailing" else ""
        if header:
            lines.append("|".join(names) + end)
        lines += ["|".join(v) + end for v in values]
    else:
        if header:
            lines.append("".join(_cell(name, size) + " " for name, size, _ in fields))
            lines.append("".join("-" * abs(size) + " " for _, size, _ in fields))
        lines += [
            "".join(_cell(v, f[1]) + " " for v, f in zip(vals, fields, strict=True))
            for vals in values
        ]
    return "".join(line + "\n" for line in lines)


def run(
    *,
    noheader: bool,
    parsable: bool,
    parsable2: bool = False,
    accounts: list[str] | None = None,
    users: list[str] | None = None,
    all_users: bool = False,
    long: bool = False,
) -> int:
    import sys

    from phalanx.cli.slurm.common import tool_error
    from phalanx.client import Client
    from phalanx.errors import PhalanxError

    try:
        with Client() as client:
            report = client.usage()
            me = None if all_users or users else str(client.whoami().get("user") or "")
    except PhalanxError as exc:
        tool_error("sshare", exc.detail)
        return 1
    rows = select_rows(
        report.get("associations") or [],
        accounts=accounts,
        users=users,
        all_users=all_users,
        me=me,
    )
    mode = "plain" if parsable2 else "trailing" if parsable else None
    sys.stdout.write(format_usage(rows, long=long, header=not noheader, parsable=mode))
    return 0

"""``phalanx sprio``: pending jobs' priorities and their factors in sprio's layout.

The factors come from ``GET /api/v1/priority``. Jobs ordered by the ``slurm``
preset show Slurm's weighted factors (site, age, association, fair-share, job
size, partition, QOS, nice, TRES) as integers; jobs of a ``phalanx`` queue show
its four terms (age, share under FAIRSHARE, size under JOBSIZE, QOS) and jobs
of a ``kueue`` queue their priority value alone. ``-n`` prints each factor
before its weight, ``-w`` the weights, ``-l`` adds USER and NICE.
"""

from __future__ import annotations

from phalanx.cli.slurm.common import fit, job_display_id, slurm_state

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

__all__ = ["COLUMNS", "LONG_COLUMNS", "format_jobs", "format_weights", "run"]

Column = tuple[str, int, bool, str]
"""``(header, width, right-aligned, factor key)``."""

COLUMNS: list[Column] = [
    ("JOBID", 15, True, ""),
    ("PARTITION", 9, False, ""),
    ("PRIORITY", 10, True, ""),
    ("SITE", 10, True, "site"),
    ("AGE", 10, True, "age"),
    ("ASSOC", 10, True, "assoc"),
    ("FAIRSHARE", 10, True, "fairshare"),
    ("JOBSIZE", 10, True, "jobsize"),
    ("PARTITION", 10, True, "partition"),
    ("QOS", 10, True, "qos"),
    ("TRES", 20, False, "tres"),
]
"""sprio's default ``%.15i %9r %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %20T``."""

LONG_COLUMNS: list[Column] = [
    *COLUMNS[:2],
    ("USER", 8, True, ""),
    *COLUMNS[2:-1],
    ("NICE", 6, True, "nice"),
    COLUMNS[-1],
]
"""sprio ``-l``: ``%.15i %9r %.8u %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %.6N %20T``."""

_PHALANX_KEYS = {"age": "age", "fairshare": "share", "jobsize": "size", "qos": "qos"}
"""sprio column key -> the phalanx preset's term shown there."""

_SLURM_WEIGHTS = {
    "site": None,
    "age": "age",
    "assoc": "assoc",
    "fairshare": "fairshare",
    "jobsize": "jobsize",
    "partition": "partition",
    "qos": "qos",
}


def _row(values: list[str], columns: list[Column]) -> str:
    return " ".join(fit(v, w, r) for v, (_, w, r, _k) in zip(values, columns, strict=True))


def _number(value: float, decimals: int) -> str:
    if decimals == 0:
        return f"{value:.0f}"
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _tres_weights(spec: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, _, raw = item.partition("=")
        try:
            out[name.strip().lower()] = float(raw)
        except ValueError:
            continue
    return out


def _factor(item: Mapping[str, Any], key: str, weights: Mapping[str, Any], norm: bool) -> str:
    """One factor column of one job, as its preset defines it."""
    factors: Mapping[str, float] = item.get("factors") or {}
    preset = item.get("preset")
    if preset == "slurm":
        slurm = weights.get("slurm") or {}
        if key == "tres":
            tres = [(k[5:], v) for k, v in factors.items() if k.startswith("tres:") and v]
            if norm:
                tw = _tres_weights(str(slurm.get("tres") or ""))
                tres = [(n, v / tw[n]) for n, v in tres if tw.get(n)]
                return ",".join(f"{n}={_number(v, 7)}" for n, v in tres)
            return ",".join(f"{n}={_number(v, 0)}" for n, v in tres)
        if key not in factors:
            return ""
        value = float(factors[key])
        if norm and key in _SLURM_WEIGHTS and _SLURM_WEIGHTS[key] is not None:
            weight = float(slurm.get(_SLURM_WEIGHTS[key] or "", 0) or 0)
            return _number(value / weight, 7) if weight else "0"
        return _number(value, 0)
    if preset == "phalanx":
        term = _PHALANX_KEYS.get(key)
        if term is None or term not in factors:
            return ""
        value = float(factors[term])
        if norm:
            weight = float((weights.get("phalanx") or {}).get(term, 0) or 0)
            return _number(value / weight, 7) if weight else "0"
        return _number(value, 4)
    return ""


def _priority(item: Mapping[str, Any], norm: bool) -> str:
    value = item.get("priority")
    if value is None:
        return ""
    if norm and item.get("preset") == "slurm":
        return _number(float(value) / (2**32 - 1), 7)
    value = float(value)
    return _number(value, 0) if value == int(value) else _number(value, 4)


def format_jobs(
    jobs: Iterable[Mapping[str, Any]],
    weights: Mapping[str, Any] | None = None,
    *,
    header: bool = True,
    long: bool = False,
    norm: bool = False,
) -> str:
    """One line per job: ``jobs`` are ``/api/v1/priority`` items, with ``display_id``
    (the array spelling) where known."""
    columns = LONG_COLUMNS if long else COLUMNS
    weights = weights or {}
    lines = [_row([c[0] for c in columns], columns)] if header else []
    for item in jobs:
        values: list[str] = []
        for name, _, _, key in columns:
            if name == "JOBID":
                values.append(str(item.get("display_id") or item.get("id", "")))
            elif name == "PARTITION" and not key:
                values.append(str(item.get("partition") or ""))
            elif name == "USER":
                values.append(str(item.get("user") or ""))
            elif name == "PRIORITY":
                values.append(_priority(item, norm))
            else:
                values.append(_factor(item, key, weights, norm))
        lines.append(_row(values, columns))
    return "".join(line + "\n" for line in lines)


def format_weights(weights: Mapping[str, Any], *, header: bool = True, long: bool = False) -> str:
    """sprio ``-w``: the header and one ``Weights`` line (the cluster-wide preset's)."""
    columns = LONG_COLUMNS if long else COLUMNS
    preset = weights.get("preset")
    values: list[str] = []
    for name, _, _, key in columns:
        if name == "JOBID":
            values.append("Weights")
        elif preset == "slurm" and key == "site":
            values.append("1")
        elif preset == "slurm" and key == "tres":
            values.append(str((weights.get("slurm") or {}).get("tres") or "").lower())
        elif preset == "slurm" and key in _SLURM_WEIGHTS:
            values.append(str((weights.get("slurm") or {}).get(key, "")))
        elif preset == "phalanx" and key in _PHALANX_KEYS:
            value = (weights.get("phalanx") or {}).get(_PHALANX_KEYS[key])
            values.append("" if value is None else _number(float(value), 4))
        else:
            values.append("")
    lines = [_row([c[0] for c in columns], columns)] if header else []
    lines.append(_row(values, columns))
    return "".join(line + "\n" for line in lines)


def _wanted_ids(jobs: list[str] | None) -> set[int] | None:
    if not jobs:
        return None
    return {int(j) for v in jobs for j in v.split(",") if j.strip().isdigit()}


def run(
    *,
    jobs: list[str] | None,
    users: list[str] | None,
    noheader: bool,
    long: bool = False,
    norm: bool = False,
    weights: bool = False,
) -> int:
    import sys

    from phalanx.cli.slurm.common import tool_error
    from phalanx.client import Client
    from phalanx.errors import PhalanxError

    try:
        with Client() as client:
            answer = client.priority(users=users)
            if weights:
                sys.stdout.write(
                    format_weights(answer.get("weights") or {}, header=not noheader, long=long)
                )
                return 0
            views = {
                int(j["id"]): j
                for j in client.jobs(state="PENDING", user=users)
                if slurm_state(j) == "PENDING"
            }
    except PhalanxError as exc:
        tool_error("sprio", exc.detail)
        return 1
    wanted = _wanted_ids(jobs)
    items: list[dict[str, Any]] = []
    for item in answer.get("jobs") or []:
        view = views.get(int(item["id"]))
        if view is None:
            continue
        if wanted is not None and not (
            int(item["id"]) in wanted or view.get("array_job_id") in wanted
        ):
            continue
        items.append({**item, "display_id": job_display_id(view)})
    if not items and jobs:
        sys.stderr.write("Unable to find jobs matching user/id(s) specified\n")
        return 1
    sys.stdout.write(
        format_jobs(items, answer.get("weights"), header=not noheader, long=long, norm=norm)
    )
    return 0

"""``phalanx sprio``: pending jobs' priorities in sprio's layout.

phalanx does not expose its priority factors (age, fair-share, job size,
partition, QOS) yet, so only JOBID, PARTITION and PRIORITY have values; the
factor columns are printed blank rather than invented.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from phalanx.cli.slurm.common import fit, job_display_id, slurm_state

__all__ = ["COLUMNS", "format_jobs", "run"]

COLUMNS: list[tuple[str, int, bool]] = [
    ("JOBID", 15, True),
    ("PARTITION", 9, False),
    ("PRIORITY", 10, True),
    ("SITE", 10, True),
    ("AGE", 10, True),
    ("ASSOC", 10, True),
    ("FAIRSHARE", 10, True),
    ("JOBSIZE", 10, True),
    ("PARTITION", 10, True),
    ("QOS", 10, True),
    ("TRES", 20, False),
]
"""sprio's default ``%.15i %9r %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %20T``."""


def _row(values: list[str]) -> str:
    return " ".join(fit(v, w, r) for v, (_, w, r) in zip(values, COLUMNS, strict=True))


def format_jobs(jobs: Iterable[dict[str, Any]], *, header: bool = True) -> str:
    lines = [_row([c[0] for c in COLUMNS])] if header else []
    for job in jobs:
        priority = "" if job.get("priority") is None else str(job["priority"])
        partition = str(job.get("partition") or job.get("cluster_queue") or "")
        lines.append(_row([job_display_id(job), partition, priority] + [""] * 8))
    return "".join(line + "\n" for line in lines)


def run(*, jobs: list[str] | None, users: list[str] | None, noheader: bool) -> int:
    import sys

    from phalanx.cli.slurm.common import tool_error
    from phalanx.client import Client
    from phalanx.errors import PhalanxError

    try:
        with Client() as client:
            listed = [
                j for j in client.jobs(state="PENDING", user=users) if slurm_state(j) == "PENDING"
            ]
    except PhalanxError as exc:
        tool_error("sprio", exc.detail)
        return 1
    if jobs:
        wanted = {int(j) for v in jobs for j in v.split(",") if j.strip().isdigit()}
        listed = [j for j in listed if int(j["id"]) in wanted or j.get("array_job_id") in wanted]
    if not listed and jobs:
        sys.stderr.write("Unable to find jobs matching user/id(s) specified\n")
        return 1
    sys.stdout.write(format_jobs(listed, header=not noheader))
    return 0

"""Microsoft's Philly trace (Jeon et al., ATC'19), as the Pollux authors derived it.

``philly_jobs_pollux.csv``: ``timestamp,duration,num_gpus,gpu_time,cluster``, one
row per job (82,247), not sorted; ``cluster`` is the hashed virtual cluster
(VC), which becomes the job's tenant. ``philly_vc_nodes.csv``: ``vc,node num``,
the 11 VCs and their 8-GPU nodes of the Helios simulator's Philly setting
(352 nodes, 2,816 GPUs).

:func:`load_jobs` keeps the rows in a submission window and in a set of VCs
(the Helios setting: 2017-10-01 to 2017-11-30, the 11 VCs of
``philly_vc_nodes.csv``, 68,503 jobs), sorted by submission with file order
for ties, ids in file order from 1.
"""

from __future__ import annotations

import csv
from collections.abc import Collection
from pathlib import Path

from phalanx.errors import Invalid
from phalanx.sim.trace import TraceJob, parse_time, rebase

__all__ = ["HELIOS_WINDOW", "load_jobs", "load_vc_nodes"]

HELIOS_WINDOW = ("2017-10-01 00:00:00", "2017-11-30 23:59:59")
"""The submission window of the Helios simulator's Philly setting (inclusive)."""
JOB_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")


def load_vc_nodes(path: Path) -> dict[str, int]:
    """VC -> its number of 8-GPU nodes, in file order."""
    out: dict[str, int] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        for row in reader:
            vc = (row.get("vc") or "").strip()
            try:
                nodes = int(row.get("node num") or "")
            except ValueError:
                raise Invalid(f"{path}:{reader.line_num}: node num: expected an integer") from None
            if not vc or nodes <= 0:
                raise Invalid(f"{path}:{reader.line_num}: expected a VC and a node count > 0")
            out[vc] = nodes
    return out


def load_jobs(
    path: Path,
    *,
    window: tuple[str, str] | None = None,
    vcs: Collection[str] | None = None,
) -> list[TraceJob]:
    """The jobs (see the module docstring); times from the first kept submission."""
    start = parse_time(window[0]) if window else None
    end = parse_time(window[1]) if window else None
    jobs: list[TraceJob] = []
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in JOB_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise Invalid(f"{path}:1: the header lacks the column(s) {', '.join(missing)}")
        for number, row in enumerate(reader, start=1):
            if not row.get("timestamp"):
                continue  # the file ends with a blank line
            line = reader.line_num
            try:
                submit = parse_time(row["timestamp"])
                duration = float(row["duration"])
                gpus = int(row["num_gpus"])
            except ValueError as exc:
                raise Invalid(f"{path}:{line}: {exc}") from None
            vc = row["cluster"].strip()
            if (start is not None and submit < start) or (end is not None and submit > end):
                continue
            if vcs is not None and vc not in vcs:
                continue
            jobs.append(TraceJob(number, submit, max(duration, 1.0), gpus, vc))
    return rebase(jobs)

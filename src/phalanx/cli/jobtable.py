"""``phalanx get jobs``: the job table's cells, and a plain writer for them.

``render.print_table`` lays tables out with rich, which costs more to import than
the rest of the command. When standard output is not a terminal, rich prints a
table with no box as each cell left-justified to its column's width, two spaces
between columns; :func:`write` prints exactly that itself whenever rich would do
nothing more (every cell printable ASCII without markup or emoji codes, no
variable forcing colours), and hands anything else to rich.
"""

from __future__ import annotations

import os
import sys
import time

from phalanx.timefmt import epoch, format_duration

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

__all__ = ["age", "job_rows", "plain_table", "write"]

_RICH_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")
"""Variables that make rich colour a table that does not go to a terminal."""
_PLAIN = frozenset(chr(c) for c in range(32, 127)) - frozenset("[]\\")
"""Characters rich prints as they are (no markup or escape; ``:`` see :func:`_emoji_free`)."""
_MAX_WIDTH = 100_000
"""The width rich is given when not printing to a terminal."""


def age(seconds: float) -> str:
    """kubectl-style ages: 45s, 12m, 3h, 2d."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def _nodelist(nodes: Sequence[str]) -> str:
    if not nodes:
        return ""
    if len(nodes) <= 3:
        return ",".join(nodes)
    return f"{','.join(nodes[:2])},+{len(nodes) - 2}"


def _run_time(job: dict[str, Any], now: float) -> str:
    start = epoch(job.get("start_time"))
    if start is None:
        return "0:00"
    end = epoch(job.get("end_time")) or now
    return format_duration(max(0.0, end - start))


def job_rows(
    jobs: Iterable[dict[str, Any]], *, wide: bool = False
) -> tuple[list[str], list[list[str]]]:
    """Header and cells of ``phalanx get jobs`` (``wide``: more columns)."""
    now = time.time()
    header = ["ID", "NAME", "TENANT", "USER", "QUEUE", "STATE", "REASON", "GPUS", "NODES"]
    header += ["AGE", "TIME"]
    if wide:
        header += ["CLUSTER_QUEUE", "FLAVOR", "PRIORITY", "EXIT", "COMMAND"]
    rows = []
    for job in jobs:
        submitted = epoch(job.get("submit_time")) or now
        nodes = job.get("nodes") or []
        row = [
            str(job["id"]),
            job.get("name") or "",
            job.get("tenant") or "",
            job.get("user") or "",
            job.get("queue") or job.get("cluster_queue") or "",
            job.get("state", ""),
            job.get("reason") or "",
            str(job.get("gpus", 0)),
            ",".join(nodes) if wide else _nodelist(nodes),
            age(now - submitted),
            _run_time(job, now),
        ]
        if wide:
            exit_code = job.get("exit_code")
            row += [
                job.get("cluster_queue") or "",
                job.get("flavor") or "",
                "" if job.get("priority") is None else str(job["priority"]),
                "" if exit_code is None else str(exit_code),
                " ".join(job.get("command") or []),
            ]
        rows.append(row)
    return header, rows


def _emoji_free(cell: str) -> bool:
    """Whether rich leaves the ``:`` of ``cell`` alone: it reads ``:name:`` as an emoji
    code, and no emoji's name is two digits, which is what lies between the colons of
    a duration (``1-02:03:04``)."""
    inner = cell.split(":")[1:-1]
    return all(len(p) == 2 and p.isascii() and p.isdigit() for p in inner)


def plain_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str | None:
    """The table as rich prints it to a file or pipe; ``None`` when rich might print it
    otherwise (colours forced, a cell it would read as markup, a wide character...)."""
    if sys.stdout.isatty() or any(os.environ.get(name) for name in _RICH_ENV):
        return None
    lines = [header, *rows]
    for line in lines:
        if len(line) != len(header):
            return None
        for cell in line:
            if not _PLAIN.issuperset(cell) or (":" in cell and not _emoji_free(cell)):
                return None
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    if sum(widths) + 2 * (len(widths) - 1) > _MAX_WIDTH:
        return None
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + "\n" for line in lines
    )


def write(jobs: list[dict[str, Any]], output: str) -> int:
    """Print ``jobs`` as ``get jobs -o OUTPUT`` does (``table``, ``wide`` or ``json``)."""
    if output == "json":
        import json

        sys.stdout.write(json.dumps(jobs, indent=2) + "\n")
        return 0
    header, rows = job_rows(jobs, wide=output == "wide")
    if not rows:
        sys.stderr.write("No jobs found.\n")
        return 0
    text = plain_table(header, rows)
    if text is None:
        from phalanx.cli import render

        render.print_table(header, rows, state_col=5)
    else:
        sys.stdout.write(text)
    sys.stdout.flush()
    return 0

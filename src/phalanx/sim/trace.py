"""A trace: the jobs a simulation replays, and the generic file format for them.

Every loader turns its source into :class:`TraceJob` records, sorted by
submission time (ties keep file order): when, how long, how many GPUs, whose.
The generic format is CSV (with a header) or JSON Lines, one job per row:

``submit`` (required)
    Seconds from any origin (``3600``, ``12.5``), or an ISO 8601 time
    (``2017-10-01 08:00:00``); the first submission becomes time 0.
``duration`` (required)
    Run time in seconds, > 0.
``gpus`` (required)
    GPUs per job, an integer >= 0.
``tenant``
    Whose job (default ``default``): a virtual cluster, a team, an account.
``id``
    A job id (default: the row number); ids must be unique.
``time_limit``
    Seconds the user asked for; missing or empty: the trace's time-limit rule.
``cpus``
    CPUs per task (default 0: not modelled).
``memory_mib``
    Memory per task in MiB (default 0: not modelled).
``gpu_milli``
    Thousandths of each GPU a task uses (default 1000: whole GPUs); below
    1000 the job shares one GPU (``gpus`` must be 1).
``gpu_models``
    GPU models the job may run on, ``|``-separated (``V100M16|V100M32``);
    matched against the nodes' ``nvidia.com/gpu.product`` label.

A trace without time limits (Philly, openb) gets them from a
:class:`TimeLimitRule`, the same for every policy: by default the true duration
rounded up to the next hour (``--time-limit ceil:3600``); ``scale:2`` doubles
it; ``exact`` gives the true duration (an oracle user).

Bad rows raise :class:`~phalanx.errors.Invalid` naming the file, the line and
the field.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from phalanx.errors import Invalid

__all__ = ["TimeLimitRule", "TraceJob", "load_generic", "rebase"]


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace; times in seconds from the trace's start."""

    id: int
    submit: float
    duration: float
    gpus: int
    tenant: str = "default"
    time_limit: float | None = None
    cpus: float = 0
    """CPUs per task (0: not modelled)."""
    memory_mib: int = 0
    """Memory per task in MiB (0: not modelled)."""
    gpu_milli: int = 1000
    """Thousandths of each GPU; below 1000 a share of one GPU."""
    gpu_models: tuple[str, ...] = ()
    """GPU models the job may run on (any when empty)."""

    @property
    def gpu_equivalents(self) -> float:
        """The GPUs the job holds, a share counted as its fraction of one GPU."""
        return self.gpus * self.gpu_milli / 1000


@dataclass(frozen=True, slots=True)
class TimeLimitRule:
    """How a job without a time limit gets one: ``ceil:S`` (the duration rounded up to
    a multiple of S seconds), ``scale:F`` (F times the duration) or ``exact``."""

    kind: str = "ceil"
    value: float = 3600.0

    @classmethod
    def parse(cls, text: str) -> TimeLimitRule:
        kind, _, value = text.partition(":")
        if kind == "exact" and not value:
            return cls("exact", 1.0)
        if kind in ("ceil", "scale"):
            try:
                number = float(value)
            except ValueError:
                number = 0.0
            if number > 0:
                return cls(kind, number)
        raise Invalid(f"--time-limit: expected ceil:SECONDS, scale:FACTOR or exact, got {text!r}")

    def limit(self, duration: float) -> float:
        if self.kind == "ceil":
            return max(self.value, math.ceil(duration / self.value) * self.value)
        if self.kind == "scale":
            return duration * self.value
        return duration

    def apply(self, jobs: Iterable[TraceJob]) -> list[TraceJob]:
        """Every job with a time limit: its own, or this rule's."""
        return [
            job if job.time_limit is not None else replace(job, time_limit=self.limit(job.duration))
            for job in jobs
        ]

    def __str__(self) -> str:
        return "exact" if self.kind == "exact" else f"{self.kind}:{self.value:g}"


def rebase(jobs: Iterable[TraceJob]) -> list[TraceJob]:
    """Sorted by submission (stable), the first at time 0."""
    ordered = sorted(jobs, key=lambda j: j.submit)
    if not ordered:
        return []
    origin = ordered[0].submit
    return [replace(j, submit=j.submit - origin) for j in ordered]


def parse_time(value: str) -> float:
    """Seconds, or an ISO 8601 time as seconds since the epoch (naive: UTC)."""
    try:
        return float(value)
    except ValueError:
        pass
    moment = datetime.fromisoformat(value.strip())
    if moment.tzinfo is None:
        from datetime import UTC

        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _rows(path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise Invalid(f"{path}: cannot read the trace ({exc.strerror or exc})") from None
    with handle:
        if path.suffix in (".jsonl", ".ndjson"):
            for line, text in enumerate(handle, start=1):
                if not text.strip():
                    continue
                try:
                    row = json.loads(text)
                except ValueError as exc:
                    raise Invalid(f"{path}:{line}: not a JSON object: {exc}") from None
                if not isinstance(row, dict):
                    raise Invalid(f"{path}:{line}: expected a JSON object per line")
                yield line, row
            return
        reader = csv.DictReader(handle)
        missing = [c for c in ("submit", "duration", "gpus") if c not in (reader.fieldnames or [])]
        if missing:
            raise Invalid(f"{path}:1: the header lacks the column(s) {', '.join(missing)}")
        for row in reader:
            yield reader.line_num, row


def _field(path: Path, line: int, row: Mapping[str, Any], name: str, kind: str) -> Any:
    value = row.get(name)
    text = "" if value is None else str(value).strip()
    try:
        if kind == "time":
            return parse_time(text)
        if kind == "seconds":
            number = float(text)
            if not number > 0 or math.isinf(number):
                raise ValueError
            return number
        number = int(text)
        if number < 0:
            raise ValueError
        return number
    except ValueError:
        expected = {
            "time": "seconds or an ISO 8601 time",
            "seconds": "a number of seconds > 0",
            "count": "an integer >= 0",
        }[kind]
        raise Invalid(f"{path}:{line}: {name}: expected {expected}, got {text!r}") from None


def load_generic(path: Path) -> list[TraceJob]:
    """A trace in the generic CSV / JSON Lines format (see the module docstring)."""
    jobs: list[TraceJob] = []
    seen: dict[int, int] = {}
    for line, row in _rows(path):
        job_id = _field(path, line, row, "id", "count") if row.get("id") not in (None, "") else None
        if job_id is None:
            job_id = len(jobs) + 1
        if job_id in seen:
            raise Invalid(f"{path}:{line}: id: {job_id} was used on line {seen[job_id]}")
        seen[job_id] = line
        limit = row.get("time_limit")
        jobs.append(
            TraceJob(
                id=job_id,
                submit=_field(path, line, row, "submit", "time"),
                duration=_field(path, line, row, "duration", "seconds"),
                gpus=_field(path, line, row, "gpus", "count"),
                tenant=str(row.get("tenant") or "default").strip() or "default",
                time_limit=None
                if limit in (None, "")
                else _field(path, line, row, "time_limit", "seconds"),
                cpus=_field(path, line, row, "cpus", "count")
                if row.get("cpus") not in (None, "")
                else 0,
                memory_mib=_field(path, line, row, "memory_mib", "count")
                if row.get("memory_mib") not in (None, "")
                else 0,
                gpu_milli=_gpu_milli(path, line, row),
                gpu_models=tuple(
                    m.strip() for m in str(row.get("gpu_models") or "").split("|") if m.strip()
                ),
            )
        )
    return rebase(jobs)


def _gpu_milli(path: Path, line: int, row: Mapping[str, Any]) -> int:
    if row.get("gpu_milli") in (None, ""):
        return 1000
    milli: int = _field(path, line, row, "gpu_milli", "count")
    if not 1 <= milli <= 1000:
        raise Invalid(f"{path}:{line}: gpu_milli: expected 1 to 1000, got {milli}")
    if milli < 1000 and _field(path, line, row, "gpus", "count") != 1:
        raise Invalid(f"{path}:{line}: gpu_milli: a share of a GPU needs gpus = 1")
    return milli

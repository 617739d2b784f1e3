"""Job list pages rendered cheaply: JSON by orjson, and each job's view kept while it is unchanged.

A page of 500 full job views used to cost about 20 ms of one core on an idle
server (decoding the stored JSON, building 500 dicts, encoding them with the
standard library) and several times that under load, since the API shares one
interpreter lock with the control loop. Pollers (``squeue``, the dashboard,
scripts) read the same pages again and again, and most of the jobs on them have
not changed in between: :class:`JobViewCache` keeps each job's rendered JSON
together with the store revision of the row it came from (every change of a stored
job takes a new one) and the estimate it showed (or why there was none), and reuses
it only while both are equal, so a reused view is exactly what rendering anew would
give.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from phalanx.api.plane import ControlPlane
from phalanx.api.views import job_view
from phalanx.store.records import JobRow
from phalanx.store.store import job_from_record

__all__ = ["JobViewCache", "dumps", "list_body"]

Estimate = tuple[float | None, str | None]
"""A pending job's planned start, or why it has none."""

CACHE_SIZE = 50_000
"""Job views kept: about 1.2 KB each. A queue of up to this many jobs is listed
(``squeue``, one page after another) from views already made; past it, a first-in,
first-out cache would miss on every job of every listing."""

_REVISION = [f.name for f in dataclasses.fields(JobRow)].index("revision")


def dumps(content: Any) -> bytes:
    """Compact UTF-8 JSON, as Starlette's ``JSONResponse`` writes it (orjson; the standard
    library for what orjson refuses: integers past 64 bits, keys that are not strings)."""
    try:
        return orjson.dumps(content)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(
            content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
        ).encode("utf-8")


class JobViewCache:
    """Rendered job views (JSON bytes) by job id, reused while the job is unchanged.

    An entry holds the store revision of the job's record
    (:meth:`Store.list_job_records`; the record itself where it has none, as rows
    written before revisions), the estimated start it was rendered with, and the
    JSON. Entries leave first in, first out past ``size``. Safe to share between the
    API's worker threads.
    """

    def __init__(self, plane: ControlPlane, size: int = CACHE_SIZE) -> None:
        self.plane = plane
        self.size = size
        self._entries: dict[int, tuple[object, Estimate, bytes]] = {}
        self._lock = threading.Lock()

    def render(self, records: Sequence[tuple[Any, ...]]) -> list[bytes]:
        """Each record's job view as JSON, in order."""
        plane, entries = self.plane, self._entries
        out: list[bytes] = []
        fresh: list[tuple[int, tuple[object, Estimate, bytes]]] = []
        for record in records:
            job_id = record[0]
            at = plane.estimated_start(job_id)
            estimate = (at, plane.no_estimate(job_id) if at is None else None)
            version: object = record[_REVISION] or record
            entry = entries.get(job_id)
            if entry is not None and entry[1] == estimate and entry[0] == version:
                out.append(entry[2])
                continue
            row = job_from_record(record)
            # A copy: orjson's bytes keep the whole buffer it wrote into (16 KB).
            body = bytes(memoryview(dumps(job_view(row, plane.output_paths(row), *estimate))))
            out.append(body)
            fresh.append((job_id, (version, estimate, body)))
        if fresh:
            with self._lock:
                for job_id, entry in fresh:
                    entries.pop(job_id, None)  # re-inserted last: it leaves last
                    entries[job_id] = entry
                while len(entries) > self.size:
                    del entries[next(iter(entries))]
        return out


def list_body(
    views: Sequence[bytes], token: str | None, extra: Mapping[str, Any] | None = None
) -> bytes:
    """``{"items": [...], "continue": token, **extra}`` from views already encoded."""
    tail = b"".join(b"," + dumps(k) + b":" + dumps(v) for k, v in (extra or {}).items())
    return b'{"items":[' + b",".join(views) + b'],"continue":' + dumps(token) + tail + b"}"

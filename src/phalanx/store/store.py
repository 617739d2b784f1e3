"""The durable store: one SQLAlchemy engine, Core statements, plain records out.

Writes happen only inside ``with store.begin() as tx:`` (one transaction: commit on
normal exit, rollback on an exception). Reads on :class:`Store` each take a pooled
connection for one short transaction, so they see everything committed before they
start, whichever thread committed it.

SQLite (the default, ``STATE/phalanx.db``) runs in WAL mode so readers never block the
writer; write transactions start with ``BEGIN IMMEDIATE`` so that concurrent writers
queue on ``busy_timeout`` instead of failing on a lock upgrade. PostgreSQL is reached
through psycopg 3 (``postgresql+psycopg://...``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from alembic import command
from alembic.config import Config
from sqlalchemy import (
    Boolean,
    ColumnElement,
    Connection,
    Engine,
    Float,
    Integer,
    Select,
    Text,
    and_,
    bindparam,
    case,
    cast,
    create_engine,
    delete,
    event,
    func,
    insert,
    or_,
    select,
    text,
    true,
    update,
)
from sqlalchemy.engine import make_url
from sqlalchemy.sql.elements import BindParameter

from phalanx.model.job import JobState
from phalanx.store.records import (
    ApplyOutcome,
    JobChargeRow,
    JobEventRow,
    JobRow,
    NewJob,
    ObjectRow,
    TokenRow,
    TombstoneRow,
    UsageRow,
    with_submission,
)
from phalanx.store.schema import (
    job_charges,
    job_events,
    jobs,
    object_meta,
    objects,
    revisions,
    tokens,
    tombstones,
    usage,
)

__all__ = ["EventTuple", "Store", "Tx"]

EventTuple = tuple[int, str, float, str, str, "dict[str, Any] | None"]
"""``(job_id, kind, time, reason, message, data)`` as taken by :meth:`Tx.add_events`."""

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
"""Alembic script directory shipped inside the package."""

_SQLITE_DB_NAME = "phalanx.db"
_WRITE_OPTION = "phalanx_write"
_PG_MIGRATION_LOCK = 0x7068616C616E78  # "phalanx": serialises concurrent Store.open calls

_JOB_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(JobRow))
_JOB_COLUMNS = tuple(jobs.c[name] for name in _JOB_FIELDS)
_UPDATABLE_JOB_FIELDS: frozenset[str] = frozenset(_JOB_FIELDS) - {"id"}
_EVENT_COLUMNS = tuple(job_events.c[f.name] for f in dataclasses.fields(JobEventRow))
_EVENT_INSERT_FIELDS = ("job_id", "kind", "time", "reason", "message", "data")
_JOB_JSON_POSITIONS = tuple(
    i for i, name in enumerate(_JOB_FIELDS) if name in ("nodes", "submission", "assignment")
)
_AT_SUBMISSION = _JOB_FIELDS.index("submission")
_NEW_JOB_JSON_POSITIONS = tuple(i for i in _JOB_JSON_POSITIONS if i != _AT_SUBMISSION)
"""What :meth:`Tx.insert_jobs` serialises on insert: it writes each submission's JSON
text itself, once, and reads the cached row's copy back from that text."""
_BULK_MIN_ROWS = 64
_OBJECT_COLUMNS = tuple(objects.c[f.name] for f in dataclasses.fields(ObjectRow))
_TOKEN_COLUMNS = tuple(tokens.c[f.name] for f in dataclasses.fields(TokenRow))
_USAGE_FIELDS = tuple(f.name for f in dataclasses.fields(UsageRow))
_CHARGE_FIELDS = tuple(f.name for f in dataclasses.fields(JobChargeRow))
_SELECT_USAGE: Select[Any] = select(*(usage.c[name] for name in _USAGE_FIELDS))
_SELECT_CHARGES: Select[Any] = select(*(job_charges.c[name] for name in _CHARGE_FIELDS))
_SELECT_CHARGE_BY_JOB: Select[Any] = _SELECT_CHARGES.where(
    job_charges.c.job_id == bindparam("_job_id")
)
_INSERT_CHARGES = insert(job_charges)
_UPDATE_CHARGES = (
    update(job_charges)
    .where(job_charges.c.job_id == bindparam("_job_id"))
    .values({name: bindparam(name) for name in _CHARGE_FIELDS[1:]})
)

UNFINISHED_STATES: tuple[str, ...] = (
    JobState.PENDING.value,
    JobState.ADMITTED.value,
    JobState.RUNNING.value,
    JobState.COMPLETING.value,
)
"""States of jobs that recovery must rebuild into the engine."""

_SELECT_JOBS: Select[Any] = select(*_JOB_COLUMNS)
_SELECT_EVENTS: Select[Any] = select(*_EVENT_COLUMNS)
_SELECT_OBJECTS: Select[Any] = select(*_OBJECT_COLUMNS)
_SELECT_TOKENS: Select[Any] = select(*_TOKEN_COLUMNS)
_EVENTS_OF: Select[Any] = _SELECT_EVENTS.where(
    job_events.c.job_id.in_(bindparam("ids", expanding=True))
).order_by(job_events.c.id)
_EVENTS_OF_KINDS: Select[Any] = _EVENTS_OF.where(
    job_events.c.kind.in_(bindparam("kinds", expanding=True))
)
""":meth:`Store.events_of`'s statements, built once (the job ids and kinds bound per call)."""
_NEXT_REVISIONS: Any = (
    update(revisions)
    .where(revisions.c.id == 1)
    .values(value=revisions.c.value + bindparam("n"))
    .returning(revisions.c.value)
)
_LAST_JOB_ID: Any = text(
    "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0), "
    "coalesce((SELECT max(id) FROM jobs), 0))"
)
"""Statements of every write transaction, built once: SQLAlchemy's statement cache is
keyed by a statement's structure, which it would otherwise build and hash each time."""


_JSON_DECODER = json.JSONDecoder()
_scan_json = json.scanner.make_scanner(_JSON_DECODER)  # type: ignore[attr-defined]


def _json_loads(value: str) -> Any:
    """``json.loads`` without its wrapper overhead (JSON columns are decoded per row)."""
    try:
        return _scan_json(value, 0)[0]
    except StopIteration:
        return json.loads(value)  # leading whitespace or invalid: let json say why


def _job(row: Any) -> JobRow:
    return JobRow(*row)


_JOB_RECORD_COLUMNS = tuple(
    cast(column, Text) if i in _JOB_JSON_POSITIONS else column
    for i, column in enumerate(_JOB_COLUMNS)
)


_FRACTION_SCALE = 2**52
_REAL_POSITIONS = tuple(i for i, c in enumerate(_JOB_COLUMNS) if isinstance(c.type, Float))
_BOOL_POSITIONS = tuple(i for i, c in enumerate(_JOB_COLUMNS) if isinstance(c.type, Boolean))


def _page_query(stmt: Select[Any]) -> Select[Any]:
    """``stmt`` (a jobs query) as one row: ``(JSON array of its rows, out_of_range)``.

    Python's sqlite3 lets go of the interpreter lock around every row it steps to
    and must win it back for the next: while another thread keeps the lock busy (the
    control loop under load), each row waits for that thread's switch interval, and
    a page of 500 rows took most of a second. One row does not. Rows are arrays in
    :class:`JobRow` field order, the JSON columns as their text; REALs, which SQLite
    writes into JSON with 15 digits only, come as two integers, the integer part and
    the fraction times 2**52, exact for 1 <= |x| < 2**62 (``out_of_range``: some
    value was not, and the page must be read row by row).
    """
    values: list[Any] = []
    outside: list[ColumnElement[bool]] = []
    for i, column in enumerate(_JOB_RECORD_COLUMNS):
        if i in _REAL_POSITIONS:
            whole = cast(column, Integer)
            values += [whole, cast((column - whole) * float(_FRACTION_SCALE), Integer)]
            size = func.abs(column)
            outside.append(and_(column.is_not(None), or_(size < 1, size >= 2**62)))
        else:
            values.append(column)
    flag = case((or_(*outside), 1), else_=0)
    inner = stmt.with_only_columns(func.json_array(*values), flag).subquery()
    row, bad = inner.c
    return select(func.json_group_array(func.json(row)), func.coalesce(func.max(bad), 0))


def _records_of_page(text: str) -> list[tuple[Any, ...]]:
    """The records of a :func:`_page_query` array."""
    records = []
    for values in orjson.loads(text):
        for i in _REAL_POSITIONS:  # the two integers back into the REAL, exactly
            whole, fraction = values[i], values.pop(i + 1)
            if whole is not None:
                values[i] = float(whole) + fraction / _FRACTION_SCALE
        for i in _BOOL_POSITIONS:
            values[i] = bool(values[i])
        records.append(tuple(values))
    return records


def _record_id(record: tuple[Any, ...]) -> Any:
    return record[0]


def job_from_record(record: Sequence[Any]) -> JobRow:
    """The :class:`JobRow` of a :meth:`Store.list_job_records` record (its JSON decoded)."""
    values = list(record)
    for i in _JOB_JSON_POSITIONS:
        if values[i] is not None:
            values[i] = _json_loads(values[i])
    return JobRow(*values)


def _event(row: Any) -> JobEventRow:
    return JobEventRow(*row)


def _object(row: Any) -> ObjectRow:
    return ObjectRow(*row)


def _token(row: Any) -> TokenRow:
    return TokenRow(*row)


def _check_job_fields(fields: Iterable[str]) -> None:
    unknown = sorted(set(fields) - _UPDATABLE_JOB_FIELDS)
    if unknown:
        raise ValueError(f"not updatable job fields: {', '.join(unknown)}")


_SELECT_JOB_BY_ID: Select[Any] = _SELECT_JOBS.where(jobs.c.id == bindparam("_job_id"))


def _get_job(conn: Connection, job_id: int) -> JobRow | None:
    row = conn.execute(_SELECT_JOB_BY_ID, {"_job_id": job_id}).first()
    return None if row is None else _job(row)


_PREFETCH_CHUNK = 500
"""Job ids per ``IN`` list of :meth:`Tx.prefetch_jobs` (SQLite binds at most 999)."""


def _updated(row: JobRow, fields: Mapping[str, Any]) -> JobRow:
    """``row`` with ``fields`` set; its parsed submission kept when that did not change."""
    new = dataclasses.replace(row, **fields)
    parsed = getattr(row, "_parsed", None)
    if parsed is not None and "submission" not in fields:
        with_submission(new, parsed)
    return new


_UPDATE_STATEMENTS: dict[tuple[str, ...], Any] = {}


def _update_statement(columns: tuple[str, ...]) -> Any:
    """``UPDATE jobs SET <columns> WHERE id = :_job_id``, built once per set of columns."""
    stmt = _UPDATE_STATEMENTS.get(columns)
    if stmt is None:
        stmt = (
            update(jobs)
            .where(jobs.c.id == bindparam("_job_id"))
            .values({name: bindparam(name) for name in columns})
        )
        _UPDATE_STATEMENTS[columns] = stmt
    return stmt


def _json_rows(rows: Iterable[Sequence[Any]], json_at: Sequence[int]) -> Iterator[Sequence[Any]]:
    """Rows with the values at ``json_at`` serialised to JSON text (``None`` stays NULL)."""
    if not json_at:
        yield from rows
        return
    dumps = json.dumps
    for row in rows:
        values = list(row)
        for i in json_at:
            if values[i] is not None:
                values[i] = dumps(values[i])
        yield values


def _bulk_insert(
    conn: Connection,
    table: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    json_at: Sequence[int] = (),
) -> None:
    """Insert many rows at driver level: COPY on PostgreSQL, executemany on SQLite.

    Bypasses SQLAlchemy's per-row parameter processing (and, on PostgreSQL, psycopg
    parsing every placeholder of a multi-row INSERT in Python), which dominates the
    cost of large batches. ``json_at`` names the positions holding JSON values.
    """
    preparer = conn.dialect.identifier_preparer
    column_list = ", ".join(preparer.quote(c) for c in columns)
    if conn.dialect.name == "postgresql":
        _pg_copy(conn, f"COPY {preparer.quote(table)} ({column_list}) FROM STDIN", rows, json_at)
        return
    placeholders = ", ".join("?" for _ in columns)
    conn.exec_driver_sql(
        f"INSERT INTO {preparer.quote(table)} ({column_list}) VALUES ({placeholders})",
        [tuple(r) for r in _json_rows(rows, json_at)],
    )


def _with_array_ids(
    rows: list[tuple[Any, ...]], new_jobs: Sequence[NewJob], fields: Sequence[str]
) -> list[tuple[Any, ...]]:
    """Fill ``array_job_id``: the id of the array's first task, for each of its tasks."""
    at_array = fields.index("array_job_id")
    out: list[tuple[Any, ...]] = []
    first: int | None = None
    for row, job in zip(rows, new_jobs, strict=True):
        if job.array_task_id is None:
            first = None
            out.append(row)
            continue
        if job.array_start or first is None:
            first = row[0]
        values = list(row)
        values[at_array] = first
        out.append(tuple(values))
    return out


def _pg_copy(
    conn: Connection, statement: str, rows: Iterable[Sequence[Any]], json_at: Sequence[int]
) -> None:
    driver = conn.connection.driver_connection
    assert driver is not None
    with driver.cursor() as cursor, cursor.copy(statement) as copy:
        for row in _json_rows(rows, json_at):
            copy.write_row(row)


class Tx:
    """One write transaction, handed out by :meth:`Store.begin`; not thread-safe.

    Job updates and events are buffered and written together (one executemany per
    set of updated columns, one insert for the events) before any other read of the
    jobs table and at commit: the control loop changes a few columns of each of many
    jobs per transaction, and one statement per change cost more than the rest of the
    loop. :meth:`get_job` sees the buffered updates.
    """

    __slots__ = ("_charges", "_conn", "_events", "_inserted", "_open", "_rows", "_updates")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._open = True
        self._updates: dict[int, dict[str, Any]] = {}
        """Job id -> the columns to set, merged in call order (the later value wins)."""
        self._events: list[EventTuple] = []
        self._inserted: set[int] = set()
        """Jobs inserted here and not yet given their first revision."""
        self._rows: dict[int, JobRow] = {}
        """Jobs read here, as written so far (buffered updates not merged): each is read
        from the database once per transaction, and keeps its parsed submission."""
        self._charges: dict[int, JobChargeRow | None] = {}
        """Job charge rows read or written here (None: the job has none)."""

    @property
    def connection(self) -> Connection:
        """The underlying connection (for tests and diagnostics), buffered writes written."""
        self._check()
        self.flush()
        return self._conn

    def flush(self) -> None:
        """Write the buffered job updates and events now.

        Every job updated or given an event takes the next store revision."""
        self._check()
        touched = list(dict.fromkeys([*self._updates, *(e[0] for e in self._events)]))
        if touched:
            first = self._next_revisions(len(touched))
            for i, job_id in enumerate(touched):
                fields = self._updates.setdefault(job_id, {})
                fields["revision"] = first + i
                if job_id in self._inserted:
                    fields["created_revision"] = first + i
            self._inserted.clear()
        if self._updates:
            groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
            for job_id, fields in self._updates.items():
                groups.setdefault(tuple(sorted(fields)), []).append({"_job_id": job_id, **fields})
            for job_id, fields in self._updates.items():
                if job_id in self._rows:
                    self._rows[job_id] = _updated(self._rows[job_id], fields)
            self._updates = {}
            for key, params in groups.items():
                self._conn.execute(_update_statement(key), params)
        if self._events:
            rows, self._events = self._events, []
            self._insert_events(rows)

    def _check(self) -> None:
        if not self._open:
            raise RuntimeError("transaction is finished")

    def _next_revisions(self, n: int) -> int:
        """The first of ``n`` fresh store revisions. The counter's row stays locked until
        this transaction ends, so revisions are taken in commit order: a reader that has
        seen revision N has seen every change numbered below it."""
        value = self._conn.execute(_NEXT_REVISIONS, {"n": n}).scalar()
        if value is None:
            raise RuntimeError("the store's revision counter is missing: migrate the database")
        return int(value) - n + 1

    def touch_job(self, job_id: int) -> None:
        """Give a job the next revision at flush, though none of its columns changed."""
        self._check()
        self._updates.setdefault(job_id, {})

    def _close(self) -> None:
        self._open = False

    # -- jobs ---------------------------------------------------------------------

    def insert_jobs(self, new_jobs: Sequence[NewJob]) -> list[int]:
        """Insert PENDING jobs; return their database ids in input order.

        A job with an ``id_span`` above 1 (a heterogeneous job) also takes the ids after
        its own, which no other job gets (its components' ids, as in Slurm).

        The ids come from the database (PostgreSQL: the ``jobs.id`` sequence; SQLite:
        the AUTOINCREMENT counter, read under the write lock this transaction holds)
        and are increasing in input order. Each job also gets a ``Submitted`` event at
        its ``submit_time``.
        """
        self._check()
        if not new_jobs:
            return []
        spans = [max(1, j.id_span) for j in new_jobs]
        reserved = self._allocate_job_ids(sum(spans))
        ids = [reserved[at] for at in itertools.accumulate([0, *spans[:-1]])]
        pending = JobState.PENDING.value
        texts = [json.dumps(j.submission) for j in new_jobs]
        # Tuples in _JOB_FIELDS order.
        rows: list[tuple[Any, ...]] = [
            (
                job_id,
                j.name,
                j.tenant,
                j.user,
                j.queue,
                j.cluster_queue,
                j.priority_class,
                j.priority,
                pending,
                "",
                "",
                None,
                [],
                j.gpus,
                submission,
                None,
                j.submit_time,
                None,
                None,
                None,
                None,
                False,
                0,
                None,
                j.array_task_id,
                j.hold,
                0,  # revision: set at flush, with the Submitted event
                0,  # created_revision: likewise
            )
            for job_id, j, submission in zip(ids, new_jobs, texts, strict=True)
        ]
        if any(j.array_task_id is not None for j in new_jobs):
            # A job array's id is its first task's; tasks of one array are contiguous.
            rows = _with_array_ids(rows, new_jobs, _JOB_FIELDS)
        events: list[EventTuple] = [
            (job_id, "Submitted", j.submit_time, "", "", None)
            for job_id, j in zip(ids, new_jobs, strict=True)
        ]
        _bulk_insert(self._conn, "jobs", _JOB_FIELDS, rows, json_at=_NEW_JOB_JSON_POSITIONS)
        if reserved[-1] > ids[-1] and self._conn.dialect.name != "postgresql":
            # The ids a heterogeneous job's components take after the last row: SQLite's
            # counter must not hand them out again (PostgreSQL's sequence is past them).
            top = {"top": reserved[-1]}
            counted = self._conn.execute(
                text("SELECT count(*) FROM sqlite_sequence WHERE name = 'jobs'")
            ).scalar()
            if counted:
                self._conn.execute(
                    text(
                        "UPDATE sqlite_sequence SET seq = :top WHERE name = 'jobs' AND seq < :top"
                    ),
                    top,
                )
            else:
                self._conn.execute(
                    text("INSERT INTO sqlite_sequence (name, seq) VALUES ('jobs', :top)"), top
                )
        self.add_events(events)
        self._inserted.update(ids)
        for values, j, written in zip(rows, new_jobs, texts, strict=True):
            # As a read would give it back: the submission through JSON (the caller's
            # dict stays the caller's), parsed already when the caller had it parsed.
            values = (
                *values[:_AT_SUBMISSION],
                json.loads(written),
                *values[_AT_SUBMISSION + 1 :],
            )
            row = JobRow(*values)
            if j.parsed is not None:
                with_submission(row, j.parsed)
            self._rows[row.id] = row
        return ids

    def _allocate_job_ids(self, n: int) -> list[int]:
        if self._conn.dialect.name == "postgresql":
            values = self._conn.execute(
                text(
                    "SELECT nextval(pg_get_serial_sequence('jobs', 'id')) "
                    "FROM generate_series(1, :n)"
                ),
                {"n": n},
            ).scalars()
            return sorted(int(v) for v in values)
        # SQLite: the transaction began with BEGIN IMMEDIATE, so nobody else can insert
        # until it ends; AUTOINCREMENT would hand out exactly these ids. Inserting them
        # explicitly keeps sqlite_sequence up to date, and a wrong guess would fail on
        # the primary key rather than return wrong ids.
        last = self._conn.execute(_LAST_JOB_ID).scalar()
        first = int(last or 0) + 1
        return list(range(first, first + n))

    def update_job(self, job_id: int, **fields: Any) -> None:
        """Set some of a job's columns (names as in :class:`JobRow`, except ``id``)."""
        self._check()
        _check_job_fields(fields)
        if fields:
            self._updates.setdefault(job_id, {}).update(fields)

    def update_jobs(self, updates: Sequence[tuple[int, Mapping[str, Any]]]) -> None:
        """Apply many :meth:`update_job` calls."""
        self._check()
        for job_id, fields in updates:
            _check_job_fields(fields)
            if fields:
                self._updates.setdefault(job_id, {}).update(fields)

    def get_job(self, job_id: int) -> JobRow | None:
        """Read a job inside this transaction (sees this transaction's own writes)."""
        self._check()
        row = self._rows.get(job_id)
        if row is None:
            row = _get_job(self._conn, job_id)
            if row is None:
                return None
            self._rows[job_id] = row
        pending = self._updates.get(job_id)
        if not pending:
            return row
        return _updated(row, pending)

    def prefetch_jobs(self, job_ids: Iterable[int]) -> None:
        """Read these jobs in a few statements, for the :meth:`get_job` calls to come (the
        control loop's per-job steps of an iteration read many jobs one by one)."""
        self._check()
        missing = sorted({job_id for job_id in job_ids if job_id not in self._rows})
        for at in range(0, len(missing), _PREFETCH_CHUNK):
            chunk = missing[at : at + _PREFETCH_CHUNK]
            for found in self._conn.execute(_SELECT_JOBS.where(jobs.c.id.in_(chunk))).all():
                row = _job(found)
                self._rows[row.id] = row

    def list_jobs(self, **filters: Any) -> list[JobRow]:
        """:meth:`Store.list_jobs` inside this transaction (sees its own writes)."""
        self.flush()
        return [_job(row) for row in self._conn.execute(_jobs_query(**filters)).all()]

    # -- events -------------------------------------------------------------------

    def add_event(
        self,
        job_id: int,
        kind: str,
        time: float,
        reason: str = "",
        message: str = "",
        data: dict[str, Any] | None = None,
    ) -> None:
        """Append one event to a job's history."""
        self.add_events([(job_id, kind, time, reason, message, data)])

    def add_events(self, rows: Sequence[EventTuple]) -> None:
        """Append many events: ``(job_id, kind, time, reason, message, data)`` each."""
        self._check()
        self._events.extend(rows)

    def _insert_events(self, rows: Sequence[EventTuple]) -> None:
        # SQLite's executemany costs nothing to start; PostgreSQL's COPY pays off in bulk.
        if len(rows) >= _BULK_MIN_ROWS or self._conn.dialect.name == "sqlite":
            _bulk_insert(
                self._conn,
                "job_events",
                _EVENT_INSERT_FIELDS,
                [(j, k, t, r, m, {} if d is None else d) for j, k, t, r, m, d in rows],
                json_at=(5,),
            )
            return
        self._conn.execute(
            insert(job_events),
            [
                {
                    "job_id": job_id,
                    "kind": kind,
                    "time": t,
                    "reason": reason,
                    "message": message,
                    "data": {} if data is None else data,
                }
                for job_id, kind, t, reason, message, data in rows
            ],
        )

    # -- configuration objects ----------------------------------------------------

    def put_object(self, kind: str, name: str, spec: dict[str, Any]) -> ApplyOutcome:
        """Create or replace an object; a changed spec bumps its generation."""
        self._check()
        now = time.time()
        row = self._conn.execute(
            select(objects.c.spec, objects.c.generation)
            .where(objects.c.kind == kind, objects.c.name == name)
            .with_for_update()
        ).first()
        if row is None:
            revision = self._next_revisions(1)
            self._conn.execute(
                insert(objects).values(
                    kind=kind,
                    name=name,
                    spec=spec,
                    generation=1,
                    created=now,
                    updated=now,
                    revision=revision,
                    created_revision=revision,
                )
            )
            return "created"
        # Compare as stored: tuples become lists, keys become strings, and so on.
        if row.spec == json.loads(json.dumps(spec)):
            return "unchanged"
        self._conn.execute(
            update(objects)
            .where(objects.c.kind == kind, objects.c.name == name)
            .values(
                spec=spec,
                generation=row.generation + 1,
                updated=now,
                revision=self._next_revisions(1),
            )
        )
        return "configured"

    def delete_object(self, kind: str, name: str) -> bool:
        """Delete an object; return whether it existed. A tombstone keeps it for watches."""
        self._check()
        row = self._conn.execute(
            select(objects.c.spec, objects.c.created)
            .where(objects.c.kind == kind, objects.c.name == name)
            .with_for_update()
        ).first()
        if row is None:
            return False
        meta = self._conn.execute(
            select(object_meta.c.meta).where(object_meta.c.kind == kind, object_meta.c.name == name)
        ).scalar()
        self._conn.execute(delete(objects).where(objects.c.kind == kind, objects.c.name == name))
        self._conn.execute(
            delete(object_meta).where(object_meta.c.kind == kind, object_meta.c.name == name)
        )
        self._conn.execute(
            insert(tombstones).values(
                revision=self._next_revisions(1),
                kind=kind,
                name=name,
                time=time.time(),
                spec=row.spec,
                meta=meta,
                created=row.created,
            )
        )
        return True

    def put_meta(self, kind: str, name: str, meta: Mapping[str, Any]) -> None:
        """Set the Kubernetes metadata of an object (``kind``, ``name``) or of a job
        (``"job"``, its id); the object or job takes the next revision."""
        self._check()
        key = (object_meta.c.kind == kind, object_meta.c.name == name)
        exists = self._conn.execute(select(object_meta.c.kind).where(*key)).first()
        if exists is None:
            self._conn.execute(insert(object_meta).values(kind=kind, name=name, meta=dict(meta)))
        else:
            self._conn.execute(update(object_meta).where(*key).values(meta=dict(meta)))
        if kind == "job":
            self.touch_job(int(name))
        else:
            self._conn.execute(
                update(objects)
                .where(objects.c.kind == kind, objects.c.name == name)
                .values(revision=self._next_revisions(1))
            )

    def compact(self, before: float) -> int:
        """Drop tombstones older than ``before`` (epoch seconds); returns how many."""
        self._check()
        last = self._conn.execute(
            select(func.max(tombstones.c.revision)).where(tombstones.c.time < before)
        ).scalar()
        if last is None:
            return 0
        result = self._conn.execute(delete(tombstones).where(tombstones.c.revision <= last))
        self._conn.execute(
            update(revisions)
            .where(revisions.c.id == 1, revisions.c.compacted < last)
            .values(compacted=last)
        )
        return int(result.rowcount)

    # -- tokens -------------------------------------------------------------------

    def create_token(
        self,
        *,
        name: str,
        user: str,
        tenants: Sequence[str],
        admin: bool,
        token_hash: str,
        created: float,
        expires: float | None = None,
    ) -> TokenRow:
        """Store a new token (its hash only) and return it with its id."""
        self._check()
        row = self._conn.execute(
            insert(tokens)
            .values(
                name=name,
                user=user,
                tenants=list(tenants),
                admin=admin,
                token_hash=token_hash,
                created=created,
                expires=expires,
                revoked=False,
            )
            .returning(*_TOKEN_COLUMNS)
        ).one()
        return _token(row)

    # -- usage ledger -------------------------------------------------------------

    def put_usage(self, rows: Sequence[UsageRow]) -> None:
        """Create or replace ledger rows, keyed by (tenant, user)."""
        self._check()
        if not rows:
            return
        existing = {(r.tenant, r.user) for r in self._conn.execute(_SELECT_USAGE)}
        fresh = [dataclasses.asdict(r) for r in rows if (r.tenant, r.user) not in existing]
        changed = [
            {**dataclasses.asdict(r), "_tenant": r.tenant, "_user": r.user}
            for r in rows
            if (r.tenant, r.user) in existing
        ]
        if fresh:
            self._conn.execute(insert(usage), fresh)
        if changed:
            self._conn.execute(
                update(usage)
                .where(usage.c.tenant == bindparam("_tenant"), usage.c.user == bindparam("_user"))
                .values({name: bindparam(name) for name in _USAGE_FIELDS[2:]}),
                [{k: v for k, v in r.items() if k not in ("tenant", "user")} for r in changed],
            )

    def get_job_charge(self, job_id: int) -> JobChargeRow | None:
        """A job's charges so far, or None if it was never charged."""
        self._check()
        if job_id in self._charges:
            return self._charges[job_id]
        row = self._conn.execute(_SELECT_CHARGE_BY_JOB, {"_job_id": job_id}).first()
        charge = self._charges[job_id] = None if row is None else JobChargeRow(*row)
        return charge

    def prefetch_job_charges(self, job_ids: Iterable[int]) -> None:
        """Read these jobs' charge rows in a few statements, for the
        :meth:`get_job_charge` calls to come."""
        self._check()
        missing = sorted({job_id for job_id in job_ids if job_id not in self._charges})
        for at in range(0, len(missing), _PREFETCH_CHUNK):
            chunk = missing[at : at + _PREFETCH_CHUNK]
            self._charges.update(dict.fromkeys(chunk))
            stmt = _SELECT_CHARGES.where(job_charges.c.job_id.in_(chunk))
            for found in self._conn.execute(stmt).all():
                charge = JobChargeRow(*found)
                self._charges[charge.job_id] = charge

    def put_job_charges(self, rows: Sequence[JobChargeRow], *, new: bool) -> None:
        """Insert (``new``) or replace jobs' charge rows."""
        self._check()
        if not rows:
            return
        self._charges.update((r.job_id, r) for r in rows)
        if new:
            # Not dataclasses.asdict: it deep-copies every row, the statement only reads it.
            params = [{name: getattr(r, name) for name in _CHARGE_FIELDS} for r in rows]
            self._conn.execute(_INSERT_CHARGES, params)
            return
        self._conn.execute(
            _UPDATE_CHARGES,
            [{"_job_id": r.job_id, **{n: getattr(r, n) for n in _CHARGE_FIELDS[1:]}} for r in rows],
        )

    def revoke_token(self, token_id: int) -> bool:
        """Mark a token revoked; return whether it exists (revoking twice is fine)."""
        self._check()
        result = self._conn.execute(
            update(tokens).where(tokens.c.id == token_id).values(revoked=True)
        )
        return result.rowcount > 0


def _in(column: Any, values: Iterable[Any] | None) -> ColumnElement[bool] | None:
    if values is None:
        return None
    if isinstance(values, BindParameter):
        return column.in_(values)  # type: ignore[no-any-return]
    if isinstance(values, str):
        values = [values]
    condition: ColumnElement[bool] = column.in_(list(values))
    return condition


def _jobs_query(
    *,
    states: Iterable[str] | None = None,
    tenants: Iterable[str] | None = None,
    users: Iterable[str] | None = None,
    queue: str | None = None,
    cluster_queue: str | None = None,
    ids: Iterable[int] | None = None,
    names: Iterable[str] | None = None,
    array_job_id: int | None = None,
    after_id: int | None = None,
    limit: int | None = None,
    descending: bool = False,
    sort: str = "id",
    offset: int = 0,
    search: str | None = None,
) -> Any:
    conditions = [
        c
        for c in (
            _in(jobs.c.state, states),
            _in(jobs.c.tenant, tenants),
            _in(jobs.c.user, users),
            _in(jobs.c.id, ids),
            _in(jobs.c.name, names),
        )
        if c is not None
    ]
    if array_job_id is not None:
        conditions.append(jobs.c.array_job_id == array_job_id)
    if queue is not None:
        conditions.append(jobs.c.queue == queue)
    if cluster_queue is not None:
        conditions.append(jobs.c.cluster_queue == cluster_queue)
    if after_id is not None:
        conditions.append(jobs.c.id < after_id if descending else jobs.c.id > after_id)
    if search:
        conditions.append(_search(search))
    stmt = _SELECT_JOBS
    if conditions:
        stmt = stmt.where(and_(*conditions))
    column = SORT_COLUMNS.get(sort)
    if column is None:
        raise ValueError(f"jobs sort by one of {', '.join(SORT_COLUMNS)}, not {sort!r}")
    keys = [column] if column is not jobs.c.id else []
    stmt = stmt.order_by(*(k.desc() if descending else k.asc() for k in [*keys, jobs.c.id]))
    if offset:
        stmt = stmt.offset(offset)
    if limit is not None:
        stmt = stmt.limit(limit)
    return stmt


SORT_COLUMNS: dict[str, Any] = {
    "id": jobs.c.id,
    "name": jobs.c.name,
    "state": jobs.c.state,
    "tenant": jobs.c.tenant,
    "user": jobs.c.user,
    "queue": jobs.c.queue,
    "gpus": jobs.c.gpus,
    "submit": jobs.c.submit_time,
    "start": jobs.c.start_time,
}
"""What :meth:`Store.list_jobs` sorts by (ties by id, in the same direction)."""


_BOUND_LISTS = frozenset({"states", "tenants", "users", "ids", "names"})
_BOUND_VALUES: dict[str, Any] = {
    "array_job_id": Integer(),
    "queue": Text(),
    "cluster_queue": Text(),
    "after_id": Integer(),
    "limit": Integer(),
}
_RECORD_QUERIES: dict[tuple[Any, ...], tuple[Select[Any], Select[Any]]] = {}
""":meth:`Store.list_job_records`'s statements (rows, and the page of them as one JSON
row) by the filters given and how they sort: built once per such shape, with the values
bound at each call. Building the page statement (and SQLAlchemy's cache key of it)
cost more than reading 50 jobs."""
_RECORD_QUERY_SHAPES = 256
"""At most this many shapes are kept (there are far fewer in practice)."""


def _record_queries(
    filters: Mapping[str, Any],
) -> tuple[Select[Any], Select[Any], dict[str, Any]]:
    """The row and page statements of :meth:`Store.list_job_records` for ``filters``,
    and the values to bind."""
    shape: dict[str, Any] = {}
    params: dict[str, Any] = {}
    key: list[Any] = []
    cacheable = not filters.get("search") and not filters.get("offset")
    for name, value in sorted(filters.items()):
        if value is None:
            continue
        if name in _BOUND_LISTS and cacheable:
            params[name] = [value] if isinstance(value, str) else list(value)
            shape[name] = bindparam(name, expanding=True)
            key.append(name)
        elif name in _BOUND_VALUES and cacheable:
            params[name] = value
            shape[name] = bindparam(name, type_=_BOUND_VALUES[name])
            key.append(name)
        else:
            shape[name] = value
            key.append((name, value))
    if not cacheable:
        stmt = _jobs_query(**filters).with_only_columns(*_JOB_RECORD_COLUMNS)
        return stmt, _page_query(stmt), {}
    found = _RECORD_QUERIES.get(tuple(key))
    if found is None:
        stmt = _jobs_query(**shape).with_only_columns(*_JOB_RECORD_COLUMNS)
        found = (stmt, _page_query(stmt))
        if len(_RECORD_QUERIES) >= _RECORD_QUERY_SHAPES:
            _RECORD_QUERIES.clear()
        _RECORD_QUERIES[tuple(key)] = found
    return found[0], found[1], params


def _search(text: str) -> ColumnElement[bool]:
    """Jobs whose id is ``text`` or whose name contains it."""
    pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    condition: ColumnElement[bool] = jobs.c.name.like(pattern, escape="\\")
    if text.isdigit() and len(text) < 19:
        condition = or_(jobs.c.id == int(text), condition)
    return condition


class Store:
    """The durable store; open it with :meth:`Store.open`. Safe to share between threads."""

    def __init__(self, engine: Engine) -> None:
        """Wrap an engine whose database is already migrated; use :meth:`open` instead."""
        self._engine = engine
        self._closed = False
        self._lock = threading.Lock()
        self.committed: list[Callable[[], None]] = []
        """Called after every write transaction commits (a watch's wake-up); must not block."""
        self.fence: Callable[[Connection], None] | None = None
        """Called first in every write transaction (the leader lease's fence,
        :meth:`phalanx.store.lease.Lease.fence`): it raises to refuse the transaction."""

    # -- lifecycle ----------------------------------------------------------------

    @classmethod
    def open(cls, url: str | None = None, *, state_dir: Path) -> Store:
        """Open (creating and migrating as needed) the database at ``url``.

        ``url`` defaults to ``sqlite:///{state_dir}/phalanx.db``; ``state_dir`` is
        created if missing. Pending Alembic revisions are applied before returning.
        """
        state_dir = Path(state_dir)
        state_dir.mkdir(parents=True, exist_ok=True)
        if url is None:
            url = f"sqlite:///{state_dir / _SQLITE_DB_NAME}"
        engine = _create_engine(url)
        try:
            _migrate(engine)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine)

    def close(self) -> None:
        """Release every pooled connection; the store is unusable afterwards."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        """The database URL (password hidden)."""
        return self._engine.url.render_as_string(hide_password=True)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for tests and diagnostics)."""
        return self._engine

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._engine.dialect.name

    @contextmanager
    def begin(self, *, fenced: bool = True) -> Iterator[Tx]:
        """One write transaction: commits on normal exit, rolls back on an exception.

        With a :attr:`fence` it is refused unless this server leads (``fenced=False``:
        a write any server may make, such as a new token).
        """
        if self._closed:
            raise RuntimeError("store is closed")
        with self._engine.connect() as conn:
            conn.execution_options(**{_WRITE_OPTION: True})
            tx = Tx(conn)
            try:
                with conn.begin():
                    if fenced and self.fence is not None:
                        self.fence(conn)
                    yield tx
                    tx.flush()
            finally:
                tx._close()
        for listener in self.committed:
            listener()

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        if self._closed:
            raise RuntimeError("store is closed")
        with self._engine.connect() as conn:
            yield conn

    # -- jobs ---------------------------------------------------------------------

    def get_job(self, job_id: int) -> JobRow | None:
        """One job by id, or None."""
        with self._read() as conn:
            return _get_job(conn, job_id)

    def list_jobs(
        self,
        *,
        states: Iterable[str] | None = None,
        tenants: Iterable[str] | None = None,
        users: Iterable[str] | None = None,
        queue: str | None = None,
        cluster_queue: str | None = None,
        ids: Iterable[int] | None = None,
        names: Iterable[str] | None = None,
        array_job_id: int | None = None,
        after_id: int | None = None,
        limit: int | None = None,
        descending: bool = False,
        sort: str = "id",
        offset: int = 0,
        search: str | None = None,
    ) -> list[JobRow]:
        """Jobs matching every given filter, in id order (or by ``sort``, a key of
        :data:`SORT_COLUMNS`, ties by id).

        ``after_id`` is a keyset cursor: ids greater than it ascending, smaller than it
        when ``descending``. ``search``: the job of that id, or names containing it.
        """
        stmt = _jobs_query(
            states=states,
            tenants=tenants,
            users=users,
            queue=queue,
            cluster_queue=cluster_queue,
            ids=ids,
            names=names,
            array_job_id=array_job_id,
            after_id=after_id,
            limit=limit,
            descending=descending,
            sort=sort,
            offset=offset,
            search=search,
        )
        with self._read() as conn:
            rows = conn.execute(stmt).all()
        return [_job(row) for row in rows]

    def list_job_records(self, **filters: Any) -> list[tuple[Any, ...]]:
        """:meth:`list_jobs` (same filters) as plain tuples in :class:`JobRow` field
        order, with ``nodes``, ``submission`` and ``assignment`` left as their JSON text.

        For callers that keep what they made of a row: two equal records are the same
        stored job, so only the ones that changed need decoding (:func:`job_from_record`).
        """
        stmt, page, params = _record_queries(filters)
        with self._read() as conn:
            if conn.dialect.name == "sqlite" and filters.get("sort", "id") == "id":
                text, out_of_range = conn.execute(page, params).one()
                if not out_of_range:
                    # json_group_array's order is not the query's: put it back.
                    records = _records_of_page(text)
                    records.sort(key=_record_id, reverse=bool(filters.get("descending")))
                    return records
            return [tuple(row) for row in conn.execute(stmt, params).all()]

    def count_matching(
        self,
        *,
        states: Iterable[str] | None = None,
        tenants: Iterable[str] | None = None,
        users: Iterable[str] | None = None,
        queue: str | None = None,
        search: str | None = None,
    ) -> int:
        """How many jobs :meth:`list_jobs` would list with these filters."""
        inner = _jobs_query(
            states=states, tenants=tenants, users=users, queue=queue, search=search
        ).order_by(None)
        stmt = select(func.count()).select_from(inner.with_only_columns(jobs.c.id).subquery())
        with self._read() as conn:
            return int(conn.execute(stmt).scalar() or 0)

    def gpu_spans(self, since: float) -> list[tuple[float, float | None, int]]:
        """``(start, end, gpus)`` of every job that held GPUs at or after ``since``
        (``end`` None: still holds them)."""
        stmt = select(jobs.c.start_time, jobs.c.end_time, jobs.c.gpus).where(
            jobs.c.start_time.is_not(None),
            jobs.c.gpus > 0,
            or_(jobs.c.end_time.is_(None), jobs.c.end_time >= since),
        )
        with self._read() as conn:
            return [
                (float(a), None if b is None else float(b), int(g))
                for a, b, g in conn.execute(stmt)
            ]

    def started_since(self, since: float, tenants: Iterable[str] | None = None) -> int:
        """Jobs whose (last) start is at or after ``since``."""
        stmt = select(func.count()).where(jobs.c.start_time >= since)
        condition = _in(jobs.c.tenant, tenants)
        if condition is not None:
            stmt = stmt.where(condition)
        with self._read() as conn:
            return int(conn.execute(stmt).scalar() or 0)

    def pending_by_queue(self) -> dict[str, int]:
        """Pending jobs per LocalQueue, as ``namespace/name`` (the tenant is the namespace)."""
        stmt = (
            select(jobs.c.tenant, jobs.c.queue, func.count())
            .where(jobs.c.state == "PENDING", jobs.c.queue.is_not(None))
            .group_by(jobs.c.tenant, jobs.c.queue)
        )
        with self._read() as conn:
            return {f"{t}/{q}": int(n) for t, q, n in conn.execute(stmt)}

    def queue_counts(self) -> dict[str, dict[str, int]]:
        """Unfinished jobs per LocalQueue (``namespace/name``) and state."""
        stmt = (
            select(jobs.c.tenant, jobs.c.queue, jobs.c.state, func.count())
            .where(jobs.c.state.in_(UNFINISHED_STATES), jobs.c.queue.is_not(None))
            .group_by(jobs.c.tenant, jobs.c.queue, jobs.c.state)
        )
        out: dict[str, dict[str, int]] = {}
        with self._read() as conn:
            for tenant, queue, state, n in conn.execute(stmt):
                out.setdefault(f"{tenant}/{queue}", {})[str(state)] = int(n)
        return out

    def count_jobs(
        self,
        *,
        states: Iterable[str] | None = None,
        tenants: Iterable[str] | None = None,
        users: Iterable[str] | None = None,
        priority_classes: Iterable[str] | None = None,
    ) -> dict[str, int]:
        """Number of jobs per state (states with none are absent)."""
        stmt = select(jobs.c.state, func.count()).group_by(jobs.c.state)
        for condition in (
            _in(jobs.c.state, states),
            _in(jobs.c.tenant, tenants),
            _in(jobs.c.user, users),
            _in(jobs.c.priority_class, priority_classes),
        ):
            if condition is not None:
                stmt = stmt.where(condition)
        with self._read() as conn:
            return {state: int(n) for state, n in conn.execute(stmt)}

    def unfinished_jobs(self) -> list[JobRow]:
        """PENDING, ADMITTED, RUNNING and COMPLETING jobs in id order (for recovery)."""
        return self.list_jobs(states=UNFINISHED_STATES)

    def job_tenants(self) -> dict[str, float]:
        """The tenants that have jobs, with their first job's submit time."""
        stmt = select(jobs.c.tenant, func.min(jobs.c.submit_time)).group_by(jobs.c.tenant)
        with self._read() as conn:
            return {str(t): float(first) for t, first in conn.execute(stmt)}

    def max_job_id(self) -> int:
        """The largest job id so far, 0 when there are no jobs."""
        with self._read() as conn:
            value = conn.execute(select(func.max(jobs.c.id))).scalar()
        return int(value or 0)

    def job_events(self, job_id: int) -> list[JobEventRow]:
        """A job's history, oldest first."""
        return self.events_of([job_id]).get(job_id, [])

    def events_of(
        self, job_ids: Sequence[int], kinds: Sequence[str] | None = None
    ) -> dict[int, list[JobEventRow]]:
        """The histories of several jobs, oldest first, in one query per 500 jobs
        (``kinds``: only the events of those kinds)."""
        out: dict[int, list[JobEventRow]] = {}
        ids = list(dict.fromkeys(job_ids))
        stmt = _EVENTS_OF if kinds is None else _EVENTS_OF_KINDS
        with self._read() as conn:
            for start in range(0, len(ids), 500):
                params: dict[str, Any] = {"ids": ids[start : start + 500]}
                if kinds is not None:
                    params["kinds"] = list(kinds)
                for row in conn.execute(stmt, params):
                    event = _event(row)
                    out.setdefault(event.job_id, []).append(event)
        return out

    def recent_events(self, kinds: Sequence[str], since: float) -> list[JobEventRow]:
        """The events of ``kinds`` at ``since`` or later, oldest first. Read back from the
        newest, a batch at a time, until a batch holds no event that recent (an event's
        time follows its id closely: it is written when it happens)."""
        wanted = set(kinds)
        out: list[JobEventRow] = []
        cursor: int | None = None
        with self._read() as conn:
            while True:
                stmt = _SELECT_EVENTS
                if cursor is not None:
                    stmt = stmt.where(job_events.c.id < cursor)
                batch = [
                    _event(r)
                    for r in conn.execute(stmt.order_by(job_events.c.id.desc()).limit(1000))
                ]
                if not batch:
                    break
                out.extend(e for e in batch if e.kind in wanted and e.time >= since)
                if max(e.time for e in batch) < since:
                    break
                cursor = batch[-1].id
        out.sort(key=lambda e: (e.time, e.id))
        return out

    # -- configuration objects ----------------------------------------------------

    def objects(self, kind: str | None = None) -> list[ObjectRow]:
        """Every object (of ``kind``), ordered by kind then name."""
        stmt = _SELECT_OBJECTS
        if kind is not None:
            stmt = stmt.where(objects.c.kind == kind)
        stmt = stmt.order_by(objects.c.kind, objects.c.name)
        with self._read() as conn:
            return [_object(row) for row in conn.execute(stmt)]

    def get_object(self, kind: str, name: str) -> ObjectRow | None:
        """One object, or None."""
        stmt = _SELECT_OBJECTS.where(objects.c.kind == kind, objects.c.name == name)
        with self._read() as conn:
            row = conn.execute(stmt).first()
        return None if row is None else _object(row)

    # -- revisions (the Kubernetes API's resourceVersion) ---------------------------

    def revision(self) -> tuple[int, int]:
        """The newest store revision, and the one up to which tombstones are compacted."""
        with self._read() as conn:
            row = conn.execute(select(revisions.c.value, revisions.c.compacted)).first()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def changed_since(
        self, revision: int, *, upto: int | None = None
    ) -> tuple[list[JobRow], list[ObjectRow], list[TombstoneRow]]:
        """Jobs and objects whose last change is after ``revision`` (and at most ``upto``),
        and the objects deleted in that span, each in revision order."""
        with self._read() as conn:
            job_where = [jobs.c.revision > revision]
            obj_where = [objects.c.revision > revision]
            tomb_where = [tombstones.c.revision > revision]
            if upto is not None:
                job_where.append(jobs.c.revision <= upto)
                obj_where.append(objects.c.revision <= upto)
                tomb_where.append(tombstones.c.revision <= upto)
            changed_jobs = [
                _job(r)
                for r in conn.execute(_SELECT_JOBS.where(*job_where).order_by(jobs.c.revision))
            ]
            changed_objects = [
                _object(r)
                for r in conn.execute(
                    _SELECT_OBJECTS.where(*obj_where).order_by(objects.c.revision)
                )
            ]
            gone = [
                TombstoneRow(*r)
                for r in conn.execute(
                    select(*tombstones.c).where(*tomb_where).order_by(tombstones.c.revision)
                )
            ]
        return changed_jobs, changed_objects, gone

    def meta(self, kind: str, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """The Kubernetes metadata stored for objects of ``kind`` (``"job"``: jobs, by id
        as text), by name; only those that have some."""
        stmt = select(object_meta.c.name, object_meta.c.meta).where(object_meta.c.kind == kind)
        wanted = None if names is None else list(names)
        out: dict[str, dict[str, Any]] = {}
        with self._read() as conn:
            if wanted is None:
                return {name: meta for name, meta in conn.execute(stmt)}
            for start in range(0, len(wanted), 500):
                part = stmt.where(object_meta.c.name.in_(wanted[start : start + 500]))
                out.update({name: meta for name, meta in conn.execute(part)})
        return out

    # -- usage ledger -------------------------------------------------------------

    def usage(self) -> list[UsageRow]:
        """Every ledger row, ordered by tenant then user."""
        stmt = _SELECT_USAGE.order_by(usage.c.tenant, usage.c.user)
        with self._read() as conn:
            return [UsageRow(*row) for row in conn.execute(stmt)]

    def job_charges(
        self, ids: Iterable[int] | None = None, *, running: bool = False
    ) -> list[JobChargeRow]:
        """Jobs' charges (those of ``ids``; only running ones with ``running``), by job id."""
        stmt = _SELECT_CHARGES
        if running:
            stmt = stmt.where(job_charges.c.charged_until.is_not(None))
        out: list[JobChargeRow] = []
        with self._read() as conn:
            if ids is None:
                rows = conn.execute(stmt.order_by(job_charges.c.job_id)).all()
                return [JobChargeRow(*row) for row in rows]
            wanted = list(dict.fromkeys(ids))
            for start in range(0, len(wanted), 500):
                chunk = stmt.where(job_charges.c.job_id.in_(wanted[start : start + 500]))
                out.extend(JobChargeRow(*row) for row in conn.execute(chunk))
        return sorted(out, key=lambda r: r.job_id)

    # -- tokens -------------------------------------------------------------------

    def find_token(self, token_hash: str) -> TokenRow | None:
        """The token with this hash, revoked or expired ones included (callers check)."""
        stmt = _SELECT_TOKENS.where(tokens.c.token_hash == token_hash)
        with self._read() as conn:
            row = conn.execute(stmt).first()
        return None if row is None else _token(row)

    def tokens(self) -> list[TokenRow]:
        """Every token, in id order."""
        with self._read() as conn:
            return [_token(row) for row in conn.execute(_SELECT_TOKENS.order_by(tokens.c.id))]

    def has_admin_token(self) -> bool:
        """Whether some admin token is neither revoked nor expired."""
        now = time.time()
        stmt = (
            select(tokens.c.id)
            .where(
                tokens.c.admin == true(),
                tokens.c.revoked == False,  # noqa: E712 - SQL comparison
                or_(tokens.c.expires.is_(None), tokens.c.expires > now),
            )
            .limit(1)
        )
        with self._read() as conn:
            return conn.execute(stmt).first() is not None


# -- engine and migrations ------------------------------------------------------------


def _create_engine(url: str) -> Engine:
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            raise ValueError("the store needs a file database, not an in-memory SQLite")
        # No pre-ping: a connection to a local file does not drop, and the ping was a
        # statement per transaction (6 % of the server's time under sixteen submitters).
        engine = create_engine(
            parsed,
            connect_args={"check_same_thread": False, "timeout": 5.0},
            json_deserializer=_json_loads,
            pool_size=8,
            max_overflow=16,
        )
        _configure_sqlite(engine)
        return engine
    if backend == "postgresql":
        if parsed.get_driver_name() != "psycopg":
            raise ValueError(f"PostgreSQL URLs must use psycopg 3 (postgresql+psycopg://): {url}")
        engine = create_engine(parsed, pool_pre_ping=True, pool_size=8, max_overflow=16)
        _configure_postgresql(engine)
        return engine
    raise ValueError(f"unsupported database URL (use sqlite:// or postgresql+psycopg://): {url}")


IDLE_IN_TRANSACTION_TIMEOUT_MS = 15_000
"""PostgreSQL ends a session left idle inside a transaction this long: a server paused
mid-transaction (or cut off) does not keep its row locks, and so does not stop a standby
from taking the leader lease, for longer."""


def _configure_postgresql(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        with dbapi_connection.cursor() as cursor:
            cursor.execute(
                f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_TIMEOUT_MS}"
            )
        dbapi_connection.commit()


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy (below) emit BEGIN itself instead of pysqlite's implicit one.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=5000")
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Writers take the write lock up front: a deferred transaction that reads and
        # then writes fails with SQLITE_BUSY on the upgrade instead of waiting.
        write = conn.get_execution_options().get(_WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _alembic_config(conn: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = conn
    return config


def _migrate(engine: Engine) -> None:
    """Bring the database to the newest revision, in one transaction."""
    with engine.connect() as conn:
        conn.execution_options(**{_WRITE_OPTION: True})
        with conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK}
                )
            command.upgrade(_alembic_config(conn), "head")


def head_revision() -> str:
    """The newest revision shipped with this package."""
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    head = ScriptDirectory.from_config(config).get_current_head()
    if head is None:  # pragma: no cover - the package always ships revisions
        raise RuntimeError("no migrations found")
    return head

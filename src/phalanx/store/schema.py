"""The durable schema: SQLAlchemy 2.0 declarative tables shared by SQLite and PostgreSQL.

The tables are declared with the ORM's declarative syntax for readability, but the
store reads and writes them only through SQLAlchemy Core (``Base.metadata`` and the
``Table`` objects exported below), never by loading ORM objects.

Every change here needs a matching Alembic revision in ``migrations/versions``; the
test suite checks that the migrated database and this metadata do not differ.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "NAMING_CONVENTION",
    "Base",
    "Job",
    "JobCharge",
    "JobEvent",
    "LeaderLease",
    "Object",
    "ObjectMeta",
    "Revision",
    "Token",
    "Tombstone",
    "Usage",
    "job_charges",
    "job_events",
    "jobs",
    "leader_lease",
    "metadata",
    "object_meta",
    "objects",
    "revisions",
    "tokens",
    "tombstones",
    "usage",
]

NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base holding the store's :class:`~sqlalchemy.MetaData`."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Job(Base):
    """One job; column order follows :class:`~phalanx.store.records.JobRow`."""

    __tablename__ = "jobs"
    __table_args__: Any = (
        Index("ix_jobs_tenant_state", "tenant", "state"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String, nullable=False)
    tenant: Mapped[str] = mapped_column(String, nullable=False)
    user: Mapped[str] = mapped_column(String, nullable=False)
    queue: Mapped[str | None] = mapped_column(String, nullable=True)
    cluster_queue: Mapped[str | None] = mapped_column(String, nullable=True)
    priority_class: Mapped[str | None] = mapped_column(String, nullable=True)
    priority: Mapped[int | None] = mapped_column(Integer, nullable=True)
    state: Mapped[str] = mapped_column(String, nullable=False, index=True)
    reason: Mapped[str] = mapped_column(String, nullable=False, default="")
    message: Mapped[str] = mapped_column(String, nullable=False, default="")
    flavor: Mapped[str | None] = mapped_column(String, nullable=True)
    nodes: Mapped[list[str]] = mapped_column(JSON, nullable=False, default=list)
    gpus: Mapped[int] = mapped_column(Integer, nullable=False)
    submission: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    assignment: Mapped[dict[str, Any] | None] = mapped_column(
        JSON(none_as_null=True), nullable=True
    )
    submit_time: Mapped[float] = mapped_column(Float, nullable=False)
    start_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    end_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    signal: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(
        Boolean, nullable=False, default=False, server_default=false()
    )
    attempt: Mapped[int] = mapped_column(
        Integer, nullable=False, default=0, server_default=text("0")
    )
    array_job_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    array_task_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    hold: Mapped[bool] = mapped_column(
        Boolean, nullable=False, default=False, server_default=false()
    )
    revision: Mapped[int] = mapped_column(
        Integer, nullable=False, default=0, server_default=text("0"), index=True
    )
    """The store revision of the job's last change (the Kubernetes API's resourceVersion)."""
    created_revision: Mapped[int] = mapped_column(
        Integer, nullable=False, default=0, server_default=text("0")
    )
    """The store revision that created the job (a watch tells ADDED from MODIFIED by it)."""


class JobEvent(Base):
    """One entry of a job's append-only history."""

    __tablename__ = "job_events"
    __table_args__: Any = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False, index=True
    )
    time: Mapped[float] = mapped_column(Float, nullable=False)
    kind: Mapped[str] = mapped_column(String, nullable=False)
    reason: Mapped[str] = mapped_column(String, nullable=False, default="")
    message: Mapped[str] = mapped_column(String, nullable=False, default="")
    data: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)


class Object(Base):
    """A configuration object (flavor, ClusterQueue, node, ...) keyed by kind and name."""

    __tablename__ = "objects"

    kind: Mapped[str] = mapped_column(String, primary_key=True)
    name: Mapped[str] = mapped_column(String, primary_key=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    generation: Mapped[int] = mapped_column(Integer, nullable=False)
    created: Mapped[float] = mapped_column(Float, nullable=False)
    updated: Mapped[float] = mapped_column(Float, nullable=False)
    revision: Mapped[int] = mapped_column(
        Integer, nullable=False, default=0, server_default=text("0"), index=True
    )
    """The store revision of the object's last change."""
    created_revision: Mapped[int] = mapped_column(
        Integer, nullable=False, default=0, server_default=text("0")
    )
    """The store revision that created the object."""


class Revision(Base):
    """The store's revision counter (one row): every change to a job or an object takes
    the next number, in commit order, so that "what changed after revision N" is a
    query (the Kubernetes API's resourceVersion and watch). ``compacted``: tombstones
    up to this revision are gone, so a watch from before it must list again."""

    __tablename__ = "revisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    value: Mapped[int] = mapped_column(Integer, nullable=False)
    compacted: Mapped[int] = mapped_column(Integer, nullable=False)


class ObjectMeta(Base):
    """Kubernetes metadata a job or an object carries beyond its model: labels and
    annotations set through the Kubernetes API, managed fields, a job's deletion.

    ``kind`` is the object's kind, or ``job`` (then ``name`` is the job id)."""

    __tablename__ = "object_meta"

    kind: Mapped[str] = mapped_column(String, primary_key=True)
    name: Mapped[str] = mapped_column(String, primary_key=True)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)


class Tombstone(Base):
    """A deleted object, kept for the watches that resume from before its deletion."""

    __tablename__ = "tombstones"

    revision: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    kind: Mapped[str] = mapped_column(String, nullable=False)
    name: Mapped[str] = mapped_column(String, nullable=False)
    time: Mapped[float] = mapped_column(Float, nullable=False)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    meta: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    created: Mapped[float] = mapped_column(Float, nullable=False)


class Token(Base):
    """An API token; only its hash is stored."""

    __tablename__ = "tokens"
    __table_args__: Any = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String, nullable=False)
    user: Mapped[str] = mapped_column(String, nullable=False)
    tenants: Mapped[list[str]] = mapped_column(JSON, nullable=False, default=list)
    admin: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    token_hash: Mapped[str] = mapped_column(String, nullable=False, unique=True, index=True)
    created: Mapped[float] = mapped_column(Float, nullable=False)
    expires: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)


class Usage(Base):
    """The usage ledger: one association's decayed usage, its descendants' included.

    ``user`` is empty for a tenant's own row; the root's row has both empty.
    """

    __tablename__ = "usage"

    tenant: Mapped[str] = mapped_column(String, primary_key=True)
    user: Mapped[str] = mapped_column(String, primary_key=True)
    gpu_seconds: Mapped[float] = mapped_column(Float, nullable=False)
    billing_seconds: Mapped[float] = mapped_column(Float, nullable=False)
    last_decay: Mapped[float] = mapped_column(Float, nullable=False)
    last_reset: Mapped[float] = mapped_column(Float, nullable=False)


class JobCharge(Base):
    """What the usage ledger charged one job (undecayed), and up to when."""

    __tablename__ = "job_charges"

    job_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    tenant: Mapped[str] = mapped_column(String, nullable=False)
    user: Mapped[str] = mapped_column(String, nullable=False)
    gpus: Mapped[int] = mapped_column(Integer, nullable=False)
    billing: Mapped[float] = mapped_column(Float, nullable=False)
    alloc_tres: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    gpu_seconds: Mapped[float] = mapped_column(Float, nullable=False)
    billing_seconds: Mapped[float] = mapped_column(Float, nullable=False)
    charged_until: Mapped[float | None] = mapped_column(Float, nullable=True)


class LeaderLease(Base):
    """Who leads: the one row of the leader lease that several servers on one
    PostgreSQL contend for (:mod:`phalanx.store.lease`).

    ``epoch`` is the fencing token: it grows with every change of leader, and a
    leader's writes are refused once it is not the row's. ``expires`` and
    ``renewed`` are the database's clock (epoch seconds); ``backend_pid`` and
    ``backend_start`` name the leader's lease session, so that a standby sees at
    once that a killed leader's session is gone.
    """

    __tablename__ = "leader_lease"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    holder: Mapped[str | None] = mapped_column(String, nullable=True)
    epoch: Mapped[int] = mapped_column(Integer, nullable=False)
    url: Mapped[str] = mapped_column(String, nullable=False, default="")
    backend_pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    backend_start: Mapped[float | None] = mapped_column(Float, nullable=True)
    acquired: Mapped[float | None] = mapped_column(Float, nullable=True)
    renewed: Mapped[float | None] = mapped_column(Float, nullable=True)
    expires: Mapped[float | None] = mapped_column(Float, nullable=True)


metadata: MetaData = Base.metadata
jobs: Table = Job.__table__  # type: ignore[assignment]
job_events: Table = JobEvent.__table__  # type: ignore[assignment]
objects: Table = Object.__table__  # type: ignore[assignment]
tokens: Table = Token.__table__  # type: ignore[assignment]
usage: Table = Usage.__table__  # type: ignore[assignment]
job_charges: Table = JobCharge.__table__  # type: ignore[assignment]
leader_lease: Table = LeaderLease.__table__  # type: ignore[assignment]
revisions: Table = Revision.__table__  # type: ignore[assignment]
object_meta: Table = ObjectMeta.__table__  # type: ignore[assignment]
tombstones: Table = Tombstone.__table__  # type: ignore[assignment]

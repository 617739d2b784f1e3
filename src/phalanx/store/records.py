"""What the store hands out and takes in: plain frozen records, no ORM objects.

Rows leave the store as these records so that nothing outside ``store/`` ever
holds a session or lazily loads an attribute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from phalanx.model.slurmrequest import SlurmRequest
from phalanx.model.submission import JobSubmission
from phalanx.usage.records import JobChargeRow, UsageRow

__all__ = [
    "ApplyOutcome",
    "JobChargeRow",
    "JobEventRow",
    "JobRow",
    "NewJob",
    "ObjectRow",
    "TokenRow",
    "TombstoneRow",
    "UsageRow",
]

ApplyOutcome = Literal["created", "configured", "unchanged"]


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job to insert; the store gives it its id (from the database)."""

    name: str
    tenant: str
    user: str
    queue: str | None
    cluster_queue: str | None
    priority_class: str | None
    priority: int | None
    gpus: int
    submission: dict[str, Any]
    """``JobSubmission.to_dict()`` with tenant, user and queue resolved."""
    submit_time: float
    array_task_id: int | None = None
    """Set for the tasks of a job array; their ``array_job_id`` is the first task's id."""
    array_start: bool = False
    """The first task of an array (the tasks of one array follow it, in order)."""
    hold: bool = False
    id_span: int = 1
    """How many ids the job takes: a heterogeneous job's components have the ids after
    its own (``SLURM_JOB_ID_HET_GROUP_N`` is the job's id + N, as in Slurm)."""
    parsed: JobSubmission | None = field(default=None, compare=False, repr=False)
    """``submission`` as the caller has it parsed (the row read back in the same
    transaction then needs no parse)."""


class _Parsed:
    """A slot for what a record parses from its columns on first use: not a dataclass
    field, so neither a column of the table nor part of the record's equality or repr."""

    __slots__ = ("_parsed",)


@dataclass(frozen=True, slots=True)
class JobRow(_Parsed):
    id: int
    name: str
    tenant: str
    user: str
    queue: str | None
    cluster_queue: str | None
    priority_class: str | None
    priority: int | None
    state: str
    """A :class:`~phalanx.model.JobState` value."""
    reason: str
    message: str
    flavor: str | None
    nodes: list[str]
    gpus: int
    submission: dict[str, Any]
    """The stored form (``JobSubmission.to_dict()``); typed: :attr:`parsed_submission`."""
    assignment: dict[str, Any] | None
    """``{"admit": Admit.to_dict(), "gpus": {node: [index, ...]}, "attempt": n}`` once admitted."""
    submit_time: float
    start_time: float | None
    end_time: float | None
    exit_code: int | None
    signal: int | None
    cancel_requested: bool
    attempt: int
    """0 before the first admission; each admission (first run, rerun after a requeue) adds one."""
    array_job_id: int | None = None
    """For a task of a job array: the id of the array (its first task's id)."""
    array_task_id: int | None = None
    hold: bool = False
    """Held (Slurm's ``--hold`` / ``scontrol hold``): not eligible until released."""
    revision: int = field(default=0, compare=False)
    """The store revision of the job's last change (:class:`~phalanx.store.Store`);
    bookkeeping, so not compared: two rows of the same job state are equal."""
    created_revision: int = field(default=0, compare=False)
    """The store revision that created the job."""

    @property
    def parsed_submission(self) -> JobSubmission:
        """``submission`` as a :class:`~phalanx.model.JobSubmission`: validated on first
        use and kept with the row, so that every reader of this row shares one parse."""
        parsed: JobSubmission | None = getattr(self, "_parsed", None)
        if parsed is None:
            parsed = JobSubmission.model_validate(self.submission)
            object.__setattr__(self, "_parsed", parsed)
        return parsed

    @property
    def slurm_request(self) -> SlurmRequest | None:
        """The submission's Slurm part (``parsed_submission.slurm``). Parsed on its own
        while the whole submission is not: a job list needs only this of each row."""
        parsed: JobSubmission | None = getattr(self, "_parsed", None)
        if parsed is not None:
            return parsed.slurm
        stored = self.submission.get("slurm")
        return None if stored is None else SlurmRequest.model_validate(stored)


def with_submission(row: JobRow, parsed: JobSubmission) -> JobRow:
    """``row``, its :attr:`~JobRow.parsed_submission` being ``parsed`` (the caller's parse
    of the same ``submission``): a row made with :func:`dataclasses.replace` from one
    already parsed need not be parsed again."""
    object.__setattr__(row, "_parsed", parsed)
    return row


@dataclass(frozen=True, slots=True)
class JobEventRow:
    """One entry of a job's append-only history."""

    id: int
    job_id: int
    time: float
    kind: str
    """Submitted, Admitted, Started, Finished, Cancelled, Requeued, Pending."""
    reason: str = ""
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ObjectRow:
    """A configuration object: ``spec`` is the model's ``to_dict()``."""

    kind: str
    name: str
    spec: dict[str, Any]
    generation: int
    created: float
    updated: float
    revision: int = field(default=0, compare=False)
    """The store revision of the object's last change (not compared)."""
    created_revision: int = field(default=0, compare=False)
    """The store revision that created the object."""


@dataclass(frozen=True, slots=True)
class TombstoneRow:
    """A deleted object as it was: its spec and Kubernetes metadata, when and at which
    revision it went, and when it was created."""

    revision: int
    kind: str
    name: str
    time: float
    spec: dict[str, Any]
    meta: dict[str, Any] | None
    created: float


@dataclass(frozen=True, slots=True)
class TokenRow:
    id: int
    name: str
    user: str
    tenants: list[str]
    admin: bool
    created: float
    expires: float | None
    revoked: bool
    token_hash: str = field(default="", repr=False)
    """The SHA-256 of the token, as stored (never shown)."""

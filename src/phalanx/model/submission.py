"""What a user submits: the gang to schedule and how to run it.

A :class:`JobSubmission` is a :class:`~phalanx.model.job.Job` without the
fields the control plane assigns (id, submit time), plus a :class:`RunSpec`:
the command, its working directory and environment, the time limit and the
output files. The engine never sees the RunSpec; the runtime never needs the
quota fields.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from phalanx.model.base import PhalanxModel
from phalanx.model.job import PodSet

__all__ = ["DEFAULT_KILL_WAIT_S", "ArraySpec", "JobSubmission", "RunSpec", "SignalSpec"]

MAX_ARRAY_TASKS = 1001
"""Slurm's default MaxArraySize is 1001 (indices 0..1000)."""

DEFAULT_KILL_WAIT_S = 30.0
"""Seconds between SIGTERM and SIGKILL at a time limit or cancel (Slurm's KillWait)."""


class SignalSpec(PhalanxModel):
    """Send ``signal`` ``seconds`` before the time limit (Slurm's ``--signal=[B:]SIG@secs``)."""

    signal: int = Field(ge=1, le=64)
    seconds: int = Field(default=60, ge=0, le=65535)
    batch_only: bool = False
    """Only to the batch shell (``B:``), not to every task."""


class RunSpec(PhalanxModel):
    """How every task of a job runs.

    ``output`` and ``error`` are file paths (relative ones are taken from
    ``workingDir``); ``%j`` in them is the job id. Without ``output`` the
    control plane keeps the output under its state directory; without
    ``error`` standard error goes to the output file, as in Slurm.
    """

    script: str | None = Field(default=None, max_length=4 << 20)
    """A batch script (Slurm): run once, on the first node of the allocation, with
    ``command`` as its arguments; ``srun`` inside it starts the tasks."""
    command: list[str] = Field(default_factory=list, validate_default=True)
    """The program and its arguments; with ``script``, the script's arguments."""
    working_dir: str = "/"
    env: dict[str, str] = Field(default_factory=dict)
    time_limit: int | None = Field(default=None, ge=1)
    """Seconds; ``None`` is no limit."""
    kill_wait: float = Field(default=DEFAULT_KILL_WAIT_S, ge=0)
    output: str | None = None
    error: str | None = None
    open_mode: Literal["append", "truncate"] = "append"
    """Whether the output files are appended to or truncated when the job starts."""
    signal: SignalSpec | None = None

    @field_validator("command")
    @classmethod
    def _something_to_run(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if info.data.get("script") is None:
            if not value:
                raise ValueError("required: the program and its arguments (or a script)")
            if not value[0]:
                raise ValueError("the program (its first word) is empty")
        return value


class ArraySpec(PhalanxModel):
    """A job array: one job per index, at most ``throttle`` running at once."""

    indices: list[int] = Field(min_length=1, max_length=MAX_ARRAY_TASKS)
    throttle: int | None = Field(default=None, ge=1)
    text: str = ""
    """The specification as written (``0-15%4``), for display."""

    @field_validator("indices")
    @classmethod
    def _sorted_unique(cls, value: list[int]) -> list[int]:
        if any(i < 0 for i in value):
            raise ValueError("array indices must be >= 0")
        return sorted(set(value))


class JobSubmission(PhalanxModel):
    """A job as submitted; see :class:`~phalanx.model.job.Job` for the scheduling fields.

    ``tenant`` and ``user`` default to the caller's token; ``queue`` to the
    tenant's LocalQueue named ``default`` (or its only LocalQueue).
    """

    name: str = ""
    tenant: str | None = None
    user: str | None = None
    queue: str | None = None
    cluster_queue: str | None = None
    priority_class: str | None = None
    priority: int | None = None
    pod_sets: list[PodSet] = Field(min_length=1, max_length=18)
    labels: dict[str, str] = Field(default_factory=dict)
    run: RunSpec
    array: ArraySpec | None = None
    dependency: str | None = None
    """Slurm's ``--dependency`` (``afterok:12:13,afterany:14``, ``singleton``, ``?`` for any)."""
    begin_time: float | None = None
    """Not eligible before this time (epoch seconds)."""
    hold: bool = False
    """Submitted held: waits for ``release`` (Slurm's ``--hold``, reason JobHeldUser)."""
    requeue: bool = False
    """Requeued rather than failed when its node fails or it is preempted."""
    nice: int = Field(default=0, ge=-(2**31) + 1, le=2**31 - 1)
    comment: str = Field(default="", max_length=4096)
    mail: dict[str, str] = Field(default_factory=dict)
    """Recorded only (``type``, ``user``)."""
    slurm: dict[str, Any] | None = None
    """The Slurm request as the user gave it (``ntasks``, ``cpusPerTask``, ``gpusPerNode``, ...):
    what the job's ``SLURM_*`` environment is made from. See ``dialects/slurm``."""

"""What a user submits: the gang to schedule and how to run it.

A :class:`JobSubmission` is a :class:`~phalanx.model.job.Job` without the
fields the control plane assigns (id, submit time), plus a :class:`RunSpec`:
the command, its working directory and environment, the time limit and the
output files. The engine never sees the RunSpec; the runtime never needs the
quota fields.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from phalanx.model.base import PhalanxModel
from phalanx.model.job import PodSet

__all__ = ["DEFAULT_KILL_WAIT_S", "JobSubmission", "RunSpec"]

DEFAULT_KILL_WAIT_S = 30.0
"""Seconds between SIGTERM and SIGKILL at a time limit or cancel (Slurm's KillWait)."""


class RunSpec(PhalanxModel):
    """How every task of a job runs.

    ``output`` and ``error`` are file paths (relative ones are taken from
    ``workingDir``); ``%j`` in them is the job id. Without ``output`` the
    control plane keeps the output under its state directory; without
    ``error`` standard error goes to the output file, as in Slurm.
    """

    command: list[str] = Field(min_length=1)
    working_dir: str = "/"
    env: dict[str, str] = Field(default_factory=dict)
    time_limit: int | None = Field(default=None, ge=1)
    """Seconds; ``None`` is no limit."""
    kill_wait: float = Field(default=DEFAULT_KILL_WAIT_S, ge=0)
    output: str | None = None
    error: str | None = None

    @field_validator("command")
    @classmethod
    def _non_empty_program(cls, value: list[str]) -> list[str]:
        if not value[0]:
            raise ValueError("the command's program (its first word) is empty")
        return value


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

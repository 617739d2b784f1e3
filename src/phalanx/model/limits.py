"""Limits on what a PriorityClass (Slurm's QOS) or a Tenant (Slurm's account) may run.

Field names follow Slurm's ``sacctmgr`` spelling (``maxTRESPerUser``,
``grpTRES``, ``maxWall``, ...); a resource limit is a resource list in
Kubernetes notation (``{nvidia.com/gpu: 16, cpu: 256}``). A field left out
means no limit. Run-time limits (``maxTRESPerUser``, ``maxJobsPerUser``,
``grpTRES``, ``maxJobs``) make a job wait with Slurm's reason code; per-job
limits (``maxTRESPerJob``, ``maxWall``) and submit limits
(``maxSubmitJobsPerUser``, ``maxSubmitJobs``) refuse a submission.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from phalanx.errors import Invalid
from phalanx.model.base import PhalanxModel
from phalanx.model.resources import ResourceList, parse_resources
from phalanx.timefmt import FORMATS, parse_time_limit

__all__ = ["PriorityClassLimits", "TenantLimits", "parse_wall"]


def parse_wall(value: Any) -> int | None:
    """``maxWall`` in seconds: an integer is seconds, a string is a Slurm time
    (``"90"`` is ninety minutes, ``"1-12:00:00"``, ``"unlimited"``)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"expected seconds or a Slurm time such as '2-00:00:00', got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"expected a positive number of seconds, got {value}")
        return value
    try:
        return parse_time_limit(value)
    except Invalid:
        raise ValueError(f"{value!r} is not a Slurm time; expected {FORMATS}") from None


def _resources(value: Any) -> dict[str, int] | None:
    return None if value is None else parse_resources(value)


class PriorityClassLimits(PhalanxModel):
    """A QOS's limits (sacctmgr's ``MaxTRESPerUser``, ``GrpTRES``, ``MaxWall``, ...)."""

    max_tres_per_user: ResourceList | None = Field(default=None, alias="maxTRESPerUser")
    """Resources one user's running jobs of the class may hold together."""
    max_tres_per_job: ResourceList | None = Field(default=None, alias="maxTRESPerJob")
    """Resources one job of the class may request."""
    max_jobs_per_user: int | None = Field(default=None, ge=0)
    """Running jobs of the class per user."""
    max_submit_jobs_per_user: int | None = Field(default=None, ge=0)
    """Pending and running jobs of the class per user; more are refused at submission."""
    max_wall: int | None = None
    """The longest time limit a job of the class may have, in seconds."""
    grp_tres: ResourceList | None = Field(default=None, alias="grpTRES")
    """Resources all running jobs of the class may hold together."""

    @field_validator("max_tres_per_user", "max_tres_per_job", "grp_tres", mode="before")
    @classmethod
    def _parse_resources(cls, value: Any) -> dict[str, int] | None:
        return _resources(value)

    @field_validator("max_wall", mode="before")
    @classmethod
    def _parse_wall(cls, value: Any) -> int | None:
        return parse_wall(value)


class TenantLimits(PhalanxModel):
    """An account's limits, over the jobs of the tenant and of its descendants."""

    grp_tres: ResourceList | None = Field(default=None, alias="grpTRES")
    """Resources the running jobs of the tenant and its sub-tenants may hold together."""
    max_jobs: int | None = Field(default=None, ge=0)
    """Running jobs of the tenant and its sub-tenants."""
    max_submit_jobs: int | None = Field(default=None, ge=0)
    """Pending and running jobs of the tenant and its sub-tenants; more are refused."""

    @field_validator("grp_tres", mode="before")
    @classmethod
    def _parse_resources(cls, value: Any) -> dict[str, int] | None:
        return _resources(value)

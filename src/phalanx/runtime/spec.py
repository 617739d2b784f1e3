"""What the control plane asks of a runtime, and what a runtime reports back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Account",
    "AlreadyLaunched",
    "Checkpointed",
    "Exited",
    "LaunchSpec",
    "RuntimeEvent",
    "Started",
    "StepsReported",
    "TaskSpec",
]


class AlreadyLaunched(Exception):
    """A supervisor for this job attempt exists already: launching again would run it twice."""


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One task (rank) of a job: where it runs and which GPU indices it sees."""

    node: str
    rank: int
    gpus: tuple[int, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    """Per-task additions to the job environment."""
    pod_set: str = ""
    """The pod set the task belongs to."""


@dataclass(frozen=True, slots=True)
class Account:
    """The Unix account a job runs as (see :mod:`phalanx.runtime.accounts`)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    """Every group of the account, its primary group included (``os.getgrouplist``)."""
    home: str


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    job_id: int
    attempt: int
    command: tuple[str, ...]
    working_dir: str
    env: dict[str, str]
    tasks: tuple[TaskSpec, ...]
    output: str
    """Absolute path; every task appends to it."""
    error: str | None = None
    """Absolute path for standard error; ``None`` sends it to ``output``."""
    time_limit_s: float | None = None
    kill_wait_s: float = 30.0
    script: str | None = None
    """A batch script: written to ``JOBDIR/script`` and run (with ``command`` as its
    arguments) as the only task, ``tasks[0]``; ``srun`` inside it starts the others."""
    open_mode: str = "append"
    """``append`` or ``truncate`` the output files when the attempt starts."""
    signal: tuple[int, float, bool] | None = None
    """``(signal, seconds before the time limit, batch shell only)`` (Slurm's ``--signal``)."""
    preemption_notice: tuple[int, float, bool] | None = None
    """``(signal, seconds before the end of the grace period, batch shell only)``: sent
    when the job is preempted (Slurm's ``--signal``, the ``phalanx.io/preemption-notice``
    annotation of a Kubernetes job)."""
    slurm: dict[str, Any] | None = None
    """The Slurm context of the job (``dialects/slurm/environment.py``): written to
    ``JOBDIR/slurm.json``; the batch environment and ``srun`` are made from it."""
    kube: dict[str, Any] | None = None
    """A Kubernetes job: ``{"tasks": [[pod, ...] per rank], "backoffLimit", "podNames"}``
    (see :func:`phalanx.dialects.kueue.jobs.pod_plan`); every task runs
    :mod:`phalanx.runtime.kubepod`, which runs its pods' containers."""
    requests: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per pod set, what one task requests (base units): what a runtime that reserves
    resources itself (Ray's placement groups) asks for."""
    allocation: tuple[TaskSpec, ...] = ()
    """Every task the engine placed, when ``tasks`` holds fewer (a batch job's holds only
    its batch shell; ``srun`` starts the others): what a runtime that reserves nodes
    itself (Ray's placement groups) reserves. Empty: ``tasks``."""
    user: str = ""
    """The phalanx user the job belongs to."""
    account: Account | None = None
    """The Unix account the supervisor and the tasks run as (the local runtime sets it
    when the server runs as root and not ``--single-user``); ``None``: the supervisor's
    own user."""


@dataclass(frozen=True, slots=True)
class Started:
    job_id: int
    attempt: int
    time: float


@dataclass(frozen=True, slots=True)
class Exited:
    job_id: int
    attempt: int
    state: str
    """COMPLETED, FAILED, CANCELLED, PREEMPTED, TIMEOUT or NODE_FAIL (a
    :class:`~phalanx.model.JobState`)."""
    exit_code: int | None
    signal: int | None
    start_time: float | None
    end_time: float
    message: str = ""
    lost_nodes: tuple[str, ...] = ()
    """With ``NODE_FAIL``: the nodes found lost (a runtime that knows names them; the
    control plane also treats the job's nodes that are down as lost)."""


@dataclass(frozen=True, slots=True)
class Checkpointed:
    """The attempt reported a checkpoint at ``time`` (it touched its
    ``PHALANX_CHECKPOINT_FILE``; ``phalanx checkpoint`` does that)."""

    job_id: int
    attempt: int
    time: float


@dataclass(frozen=True, slots=True)
class StepsReported:
    """The records of the attempt's job steps changed (Slurm's ``srun`` steps: each a
    dict as :mod:`phalanx.runtime.srun` writes it, ``{"step", "name", "state", ...}``)."""

    job_id: int
    attempt: int
    steps: tuple[dict[str, Any], ...]


RuntimeEvent = Started | Exited | Checkpointed | StepsReported

"""What a user submits: the gang to schedule and how to run it.

A :class:`JobSubmission` is a :class:`~phalanx.model.job.Job` without the
fields the control plane assigns (id, submit time), plus a :class:`RunSpec`:
the command, its working directory and environment, the time limit and the
output files. The engine never sees the RunSpec; the runtime never needs the
quota fields.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from phalanx.model.base import PhalanxModel
from phalanx.model.job import PodSet
from phalanx.model.slurmrequest import SlurmRequest

__all__ = [
    "DEFAULT_KILL_WAIT_S",
    "ArraySpec",
    "Container",
    "EnvVar",
    "JobSubmission",
    "KubePodSet",
    "KubeRun",
    "RunSpec",
    "SignalSpec",
    "VolumeMount",
]

MAX_ARRAY_TASKS = 4_000_001
"""The largest MaxArraySize a slurm.conf may set (indices 0..4000000): no array is larger.
The server's own MaxArraySize (Slurm's default 1001) is checked when the job is submitted
(:mod:`phalanx.control.submissions`)."""

DEFAULT_KILL_WAIT_S = 30.0
"""Seconds between SIGTERM and SIGKILL at a time limit or cancel (Slurm's KillWait)."""


class SignalSpec(PhalanxModel):
    """Send ``signal`` ``seconds`` before the time limit (Slurm's ``--signal=[B:]SIG@secs``)."""

    signal: int = Field(ge=1, le=64)
    seconds: int = Field(default=60, ge=0, le=65535)
    batch_only: bool = False
    """Only to the batch shell (``B:``), not to every task."""


class EnvVar(PhalanxModel):
    """A container's environment variable: a ``value``, or a pod field (``fieldPath``)."""

    name: str = Field(min_length=1)
    value: str = ""
    field_path: str | None = None
    """``metadata.name`` or ``metadata.namespace`` (Kubernetes' ``valueFrom.fieldRef``)."""


class VolumeMount(PhalanxModel):
    """A container's ``volumeMounts`` entry, with the pod's volume it names resolved."""

    name: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    """``hostPath`` or ``emptyDir`` (mounted), or the volume's other kind (refused when
    the pod runs in its image)."""
    mount_path: str = Field(min_length=1)
    read_only: bool = False
    source: str = ""
    """``hostPath``: the host path."""
    sub_path: str = ""
    field: str = ""
    """The manifest path of the volume (for errors)."""


class Container(PhalanxModel):
    """A Kubernetes container as phalanx runs it: in its image (the container runtime)
    or, with ``--container-runtime host``, as a process on the host.

    ``command`` is the container's ``command`` followed by its ``args`` (their
    ``$(VAR)`` references are expanded when the pod starts): what runs on the host.
    Empty when the manifest gives no ``command``: there the image's entrypoint is
    unknown, and the pod fails at start with a message naming ``field`` (the
    manifest path of the container). In its image, ``entrypoint`` (the manifest's
    ``command``) replaces the image's ENTRYPOINT and ``args`` its CMD (Kubernetes'
    rules).
    """

    name: str = ""
    image: str = ""
    command: list[str] = Field(default_factory=list)
    field: str = ""
    working_dir: str | None = None
    env: list[EnvVar] = Field(default_factory=list)
    ports: dict[str, int] = Field(default_factory=dict)
    """Named container ports (``pytorchjob-port``)."""
    entrypoint: list[str] | None = None
    args: list[str] | None = None
    image_pull_policy: str | None = None
    volume_mounts: list[VolumeMount] = Field(default_factory=list)
    run_as_user: int | None = None
    run_as_group: int | None = None


class KubePodSet(PhalanxModel):
    """How the pods of one pod set run: ``jobs`` child Jobs of ``parallelism`` pods each.

    A batch/v1 Job is one child Job; a JobSet replicatedJob is ``replicas`` of them.
    Each child Job needs ``completions`` successful pods (indices
    ``0..completions-1`` when ``indexed``); its ``parallelism`` slots run their
    share of the indices one after the other.
    """

    name: str = Field(min_length=1)
    role: str = ""
    """``Master``/``Worker`` (PyTorchJob), ``head``/``worker`` (RayJob), the replicatedJob name."""
    jobs: int = Field(default=1, ge=1)
    parallelism: int = Field(default=1, ge=1)
    completions: int = Field(default=1, ge=1)
    indexed: bool = False
    containers: list[Container] = Field(min_length=1)
    init_containers: list[Container] = Field(default_factory=list)


class KubeRun(PhalanxModel):
    """A Kubernetes job (Job, JobSet, PyTorchJob, RayJob, Workload) and how its pods run."""

    kind: str = Field(min_length=1)
    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    manifest: dict[str, Any] = Field(default_factory=dict)
    """The document as applied (``metadata.name`` filled in when it had ``generateName``)."""
    pod_sets: list[KubePodSet] = Field(min_length=1)
    backoff_limit: int = Field(default=6, ge=0)
    """Failed pods the job tolerates: it fails when its failures exceed this."""
    entrypoint: str | None = None
    """RayJob: the shell command the head pod runs; the workers wait for it to end."""
    suspend: bool = False


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
    kube: KubeRun | None = None
    """A Kubernetes job: each task is one of its pods, running the pod's containers."""
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
    preemption_notice: SignalSpec | None = None
    """A Kubernetes job's ``phalanx.io/preemption-notice``: ``signal`` ``seconds`` before
    the end of the grace period when it is preempted (a Slurm job's is its ``signal``)."""

    @field_validator("command")
    @classmethod
    def _something_to_run(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if info.data.get("script") is None and info.data.get("kube") is None:
            if not value:
                raise ValueError("required: the program and its arguments (or a script)")
            if not value[0]:
                raise ValueError("the program (its first word) is empty")
        return value

    @model_validator(mode="after")
    def _no_nul(self) -> RunSpec:
        """A NUL character can be neither in a file name nor in a process's arguments or
        environment: refused here rather than when the job starts."""
        fields: list[tuple[str, str | None]] = [
            ("workingDir", self.working_dir),
            ("output", self.output),
            ("error", self.error),
        ]
        fields += [(f"command[{i}]", word) for i, word in enumerate(self.command)]
        fields += [(f"env.{name}", f"{name}={value}") for name, value in self.env.items()]
        for name, value in fields:
            if value is not None and "\0" in value:
                raise ValueError(f"{name}: contains a NUL character")
        return self


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
        if any(i >= MAX_ARRAY_TASKS for i in value):
            raise ValueError(
                f"array indices must be below {MAX_ARRAY_TASKS}, the largest MaxArraySize"
            )
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
    requeue_expedite: bool | None = None
    """True for Slurm 25.11's ``--requeue=expedite`` (``phalanx.io/requeue: expedite`` on a
    Kubernetes job): when its node fails it is requeued at once, ahead of every
    other pending job, and restarts on its healthy nodes (held for it) plus
    replacements for the lost ones. Implies ``requeue``. (None, not False, when unset:
    stored submissions keep their form.)"""
    no_requeue: bool | None = None
    """True for Slurm's ``--no-requeue``: never requeued, not even when an administrator
    takes its node DOWN (it ends ``NODE_FAIL``, where a job without either flag is
    requeued, as Slurm's ``JobRequeue=1`` does). None when unset."""
    nice: int = Field(default=0, ge=-(2**31) + 1, le=2**31 - 1)
    comment: str = Field(default="", max_length=4096)
    mail: dict[str, str] = Field(default_factory=dict)
    """Recorded only (``type``, ``user``)."""
    slurm: SlurmRequest | None = None
    """The Slurm request as the user gave it (``ntasks``, ``cpusPerTask``, ``gpusPerNode``, ...):
    what the job's ``SLURM_*`` environment is made from; ``None`` for a job that did not come
    in as a batch script. See :mod:`phalanx.model.slurmrequest`."""

"""Jobs: gangs of one or more pod sets, each ``count`` tasks with per-task requests."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import Field, field_validator, model_validator

from phalanx.model.affinity import NodeSelectorTerm
from phalanx.model.base import PhalanxModel
from phalanx.model.node import Toleration
from phalanx.model.quantity import GPU, GPU_MILLI, QuantityError, gpu_share
from phalanx.model.resources import ResourceList, parse_resources

__all__ = ["Job", "JobState", "PodSet", "TopologyRequest"]


class JobState(StrEnum):
    """Job lifecycle; the Slurm code of each state is :attr:`code`."""

    PENDING = "PENDING"
    ADMITTED = "ADMITTED"
    RUNNING = "RUNNING"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    PREEMPTED = "PREEMPTED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"

    @property
    def code(self) -> str:
        return _SLURM_CODES[self]

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_SLURM_CODES = {
    JobState.PENDING: "PD",
    JobState.ADMITTED: "CF",
    JobState.RUNNING: "R",
    JobState.COMPLETING: "CG",
    JobState.COMPLETED: "CD",
    JobState.FAILED: "F",
    JobState.CANCELLED: "CA",
    JobState.TIMEOUT: "TO",
    JobState.PREEMPTED: "PR",
    JobState.NODE_FAIL: "NF",
    JobState.OUT_OF_MEMORY: "OOM",
}
_FINISHED = frozenset(
    {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.PREEMPTED,
        JobState.NODE_FAIL,
        JobState.OUT_OF_MEMORY,
    }
)


class TopologyRequest(PhalanxModel):
    """Where a pod set's tasks go in its flavor's Topology (Kueue's ``topologyRequest``).

    ``required``: all within one domain of that level (a node label of the Topology),
    or the pod set does not start; ``preferred``: within one domain of that level if
    any can hold it, else of the lowest level above that can; ``unconstrained``: no
    constraint; ``switches``: Slurm's ``--switches=N@wait``, on at most ``N`` domains
    of the lowest level above the nodes (the leaf switches), waiting up to ``waitS``
    seconds from submission for that (as long as it takes without ``waitS``), then
    placed as without a request (and as without one in a flavor without a
    Topology). Without a request, a pod set in a flavor with a Topology goes to the
    lowest domain that can hold it (best fit among those).
    """

    required: str | None = Field(default=None, min_length=1)
    preferred: str | None = Field(default=None, min_length=1)
    unconstrained: bool = False
    switches: int | None = Field(default=None, ge=1)
    wait_s: float | None = Field(default=None, ge=0)
    slice_required: str | None = Field(default=None, min_length=1)
    """Kueue's ``podset-slice-required-topology``: every slice of ``sliceSize`` tasks
    within one domain of this level (with or without a request for the whole pod set;
    alone, the pod set is otherwise ``unconstrained``)."""
    slice_size: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_kind(self) -> TopologyRequest:
        kinds = (
            (self.required is not None)
            + (self.preferred is not None)
            + self.unconstrained
            + (self.switches is not None)
        )
        if (self.slice_required is None) != (self.slice_size is None):
            raise ValueError("sliceRequired and sliceSize go together")
        if kinds > 1 or (kinds == 0 and self.slice_required is None):
            raise ValueError(
                "expected exactly one of required, preferred, unconstrained or switches "
                "(or a slice request alone)"
            )
        if self.switches is not None and self.slice_required is not None:
            raise ValueError("switches and topology slices do not go together")
        if self.wait_s is not None and self.switches is None:
            raise ValueError("waitS goes with switches")
        return self


class PodSet(PhalanxModel):
    """``count`` identical tasks, each requesting ``requests``.

    ``tasksPerNode`` places tasks in groups of exactly that many per node (Slurm's
    ``--nodes N --ntasks-per-node K``); ``exclusive`` gives every node used the
    whole node (Slurm's ``--exclusive``).

    A task asks for whole GPUs (``nvidia.com/gpu``) or for a share of one GPU
    (``phalanx.io/gpu-milli``, thousandths: ``500`` is half a GPU); ``nvidia.com/gpu``
    written as a fraction below one (``0.5``, ``500m``) is taken as that share.
    """

    name: str = Field(default="main", min_length=1)
    count: int = Field(default=1, ge=1)
    requests: ResourceList = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    tasks_per_node: int | None = Field(default=None, ge=1)
    exclusive: bool = False
    node_names: list[str] | None = Field(default=None, min_length=1)
    """Only these nodes may take the pod set's tasks (Slurm's ``--nodelist``)."""
    exclude_nodes: list[str] = Field(default_factory=list)
    """These nodes may not (Slurm's ``--exclude``)."""
    min_count: int | None = Field(default=None, ge=1)
    """Kueue's ``minCount``: the pod set may be admitted with as few as this many tasks
    (partial admission) when the full ``count`` does not fit."""
    topology: TopologyRequest | None = None
    """Where its tasks go in the flavor's Topology (see :class:`TopologyRequest`)."""
    node_affinity: list[NodeSelectorTerm] | None = Field(default=None, max_length=64)
    """Required node affinity: only nodes matching one of these terms (Kubernetes'
    ``requiredDuringSchedulingIgnoredDuringExecution``), e.g. any of several GPU models."""

    @field_validator("requests", mode="before")
    @classmethod
    def _parse_requests(cls, value: Any) -> dict[str, int]:
        if isinstance(value, Mapping) and GPU in value and GPU_MILLI not in value:
            try:
                share = gpu_share(value[GPU])
            except QuantityError as exc:
                raise ValueError(f"{GPU}: {exc}") from None
            if share is not None:
                value = {k: v for k, v in value.items() if k != GPU}
                value[GPU_MILLI] = share
        return parse_resources(value)

    @field_validator("requests", mode="after")
    @classmethod
    def _one_kind_of_gpu(cls, value: dict[str, int]) -> dict[str, int]:
        share = value.get(GPU_MILLI)
        if share is not None:
            if not 1 <= share <= 1000:
                raise ValueError(
                    f"{GPU_MILLI}: a task's share of one GPU is 1 to 1000 thousandths, "
                    f"got {share}; ask for whole GPUs with {GPU}"
                )
            if value.get(GPU, 0) > 0:
                raise ValueError(
                    f"a task asks for whole GPUs ({GPU}) or a share of one ({GPU_MILLI}), not both"
                )
        return value

    @model_validator(mode="after")
    def _tasks_per_node_divides(self) -> PodSet:
        if self.tasks_per_node is not None and self.count % self.tasks_per_node:
            raise ValueError(
                f"count ({self.count}) must be a multiple of tasksPerNode ({self.tasks_per_node})"
            )
        if self.min_count is not None and self.min_count > self.count:
            raise ValueError(
                f"minCount ({self.min_count}) must be less than or equal to count ({self.count})"
            )
        size = self.topology.slice_size if self.topology is not None else None
        if size is not None:
            if size > self.count or self.count % size:
                raise ValueError(
                    f"topology.sliceSize ({size}) must divide count ({self.count}): "
                    "every slice is whole"
                )
            if self.tasks_per_node is not None and size % self.tasks_per_node:
                raise ValueError(
                    f"topology.sliceSize ({size}) must be a multiple of tasksPerNode "
                    f"({self.tasks_per_node})"
                )
            if self.min_count is not None:
                raise ValueError(
                    "minCount (partial admission) and topology slices do not go together"
                )
        return self

    def total(self, resource: str) -> int:
        return self.count * self.requests.get(resource, 0)


class Job(PhalanxModel):
    """A gang: every task of every pod set is placed, or none is.

    A job reaches a ClusterQueue through its LocalQueue (``queue`` in the
    ``tenant`` namespace) or directly (``clusterQueue``, Slurm's partition).
    Times are seconds since the Unix epoch.
    """

    id: int = Field(ge=0)
    name: str = ""
    tenant: str = Field(default="default", min_length=1)
    user: str = ""
    queue: str | None = None
    cluster_queue: str | None = None
    priority_class: str | None = None
    priority: int | None = None
    pod_sets: list[PodSet] = Field(min_length=1, max_length=18)
    submit_time: float = 0.0
    labels: dict[str, str] = Field(default_factory=dict)
    time_limit: float | None = Field(default=None, gt=0)
    """Seconds the job may run once started (``None``: no limit). Backfill plans with it."""
    nice: int = 0
    """Slurm's ``--nice``: subtracted from the job's priority under the ``slurm`` preset."""

    @model_validator(mode="after")
    def _valid(self) -> Job:
        names = [p.name for p in self.pod_sets]
        if len(set(names)) != len(names):
            raise ValueError("podSets: names must be unique")
        if self.queue is None and self.cluster_queue is None:
            raise ValueError("a job needs a queue (LocalQueue) or a clusterQueue")
        return self

    @property
    def gpus(self) -> int:
        """Total whole GPUs over every pod set."""
        return sum(p.total(GPU) for p in self.pod_sets)

    @property
    def gpu_amount(self) -> float:
        """GPUs over every pod set, a share counting as its fraction of one GPU."""
        return self.gpus + sum(p.total(GPU_MILLI) for p in self.pod_sets) / 1000

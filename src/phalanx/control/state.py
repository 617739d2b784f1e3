"""What the control loop keeps in memory between iterations, all of it rebuilt from the store.

One :class:`LoopState` holds the engine, the configuration registry, the GPU
indices, the gate and the usage ledger, plus the :class:`Attempts` of the jobs
the runtime runs. The loop replaces it whole on start and after a failed commit
(nothing of an iteration that did not commit survives in memory); the parts
the loop drives are built around the state of the moment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from phalanx.control.gate import Gate
from phalanx.control.gpus import GpuAllocator
from phalanx.control.registry import Registry
from phalanx.engine import Delete, Engine, EngineConfig, Evict, Upsert
from phalanx.model import GPU, Job, JobSubmission
from phalanx.store import JobRow
from phalanx.usage.ledger import UsageLedger

__all__ = ["Attempts", "LoopState", "job_from_row", "target_queue"]


@dataclass
class Attempts:
    """The admitted or running jobs' attempts, and how each one's stop is to be handled."""

    active: dict[int, int] = field(default_factory=dict)
    """Admitted or running job id -> its current attempt."""
    running: set[int] = field(default_factory=set)
    """Active jobs whose start is recorded (a re-attached supervisor reports it again)."""
    evicting: dict[int, str] = field(default_factory=dict)
    """Jobs being stopped to go back to the queue: the reason they are requeued with."""
    deactivating: dict[int, tuple[str, str]] = field(default_factory=dict)
    """Jobs the engine deactivated while they ran: (reason, message) once they stop."""
    preempting: dict[int, Evict] = field(default_factory=dict)
    """Jobs being preempted: the engine's Evict (preemptor, mode), until they stop."""
    checkpoints: dict[int, float] = field(default_factory=dict)
    """Active job id -> the last checkpoint of its current attempt that is recorded."""
    admitted: dict[int, JobRow] = field(default_factory=dict)
    """Admitted jobs whose start is not recorded yet: the row as the admission wrote it
    (its parsed submission with it), so that recording the start reads nothing back."""


class LoopState:
    """The loop's memory: the engine and what is kept beside it.

    One object for the control plane's life; :meth:`reset` empties it (a rebuild
    from the store fills it again), so every part holding it sees the new memory.
    """

    def __init__(self, config: EngineConfig) -> None:
        self.reset(config)

    def reset(self, config: EngineConfig) -> None:
        self.config = config
        """The engine's configuration: the server's, with a Kueue ``Configuration``'s
        overrides."""
        self.engine = Engine(config)
        self.registry = Registry()
        self.gpus = GpuAllocator()
        self.gate = Gate()
        self.usage = UsageLedger(config)
        self.attempts = Attempts()
        self.dirty = True
        """Something changed since the last cycle: run one."""
        self.nodes_changed = False
        """The Nodes changed: tell the runtime their names."""

    def put_object(self, kind: str, name: str, obj: Any) -> None:
        """A configuration object created or changed: the engine, the registry, the GPUs."""
        self.engine.apply(Upsert(obj))
        self.registry.put(kind, name, obj)
        if kind == "Node":
            self.gpus.set_capacity(obj.name, obj.capacity.get(GPU, 0))
            self.nodes_changed = True

    def delete_object(self, kind: str, name: str) -> None:
        self.engine.apply(Delete(kind, name))  # type: ignore[arg-type]
        self.registry.remove(kind, name)
        if kind == "Node":
            self.gpus.remove_node(name)
            self.nodes_changed = True


def target_queue(registry: Registry, job: Job) -> str | None:
    """The ClusterQueue a job is headed for, for display while it is pending."""
    if job.cluster_queue is not None:
        return job.cluster_queue
    lq = registry.get("LocalQueue", f"{job.tenant}/{job.queue}")
    return lq.cluster_queue if lq is not None else None


def job_from_row(row: JobRow, submission: JobSubmission) -> Job:
    return Job(
        id=row.id,
        name=row.name,
        tenant=row.tenant,
        user=row.user,
        queue=row.queue,
        cluster_queue=submission.cluster_queue,
        priority_class=row.priority_class,
        priority=row.priority,
        pod_sets=submission.pod_sets,
        submit_time=row.submit_time,
        labels=submission.labels,
        time_limit=submission.run.time_limit,
        nice=submission.nice,
    )

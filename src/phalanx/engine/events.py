"""Events: everything the engine knows arrives as one of these.

Objects are upserted (created or replaced) and deleted by name; jobs are
submitted, cancelled, finished and requeued by id. Usage figures for the
fair-share priority come in as :class:`TenantUsage`. Events carry no wall
clock: times inside them are the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from phalanx.engine.decisions import Admit
from phalanx.model import (
    ClusterQueue,
    Cohort,
    Job,
    JobState,
    LocalQueue,
    Node,
    PriorityClass,
    ResourceFlavor,
    Tenant,
    Topology,
)

__all__ = [
    "Adopt",
    "Cancel",
    "Checkpoint",
    "Delete",
    "Event",
    "Expedite",
    "Finish",
    "ObjectKind",
    "PodsReady",
    "ReplaceNodes",
    "Requeue",
    "Submit",
    "TenantUsage",
    "Upsert",
]

ConfigObject = (
    Node | ResourceFlavor | Topology | Cohort | ClusterQueue | LocalQueue | Tenant | PriorityClass
)
ObjectKind = Literal[
    "Node",
    "ResourceFlavor",
    "Topology",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
    "Tenant",
    "PriorityClass",
]


@dataclass(frozen=True, slots=True)
class Upsert:
    """Create or replace a configuration object (a Node, a flavor, a queue, ...)."""

    obj: ConfigObject


@dataclass(frozen=True, slots=True)
class Delete:
    """Remove a configuration object. LocalQueues are named ``namespace/name``."""

    kind: ObjectKind
    name: str


@dataclass(frozen=True, slots=True)
class Submit:
    job: Job


@dataclass(frozen=True, slots=True)
class Cancel:
    """Withdraw a pending job. An admitted job releases its quota on :class:`Finish`."""

    job_id: int


@dataclass(frozen=True, slots=True)
class Finish:
    """An admitted job ended (or a pending one was removed): its quota and nodes are free."""

    job_id: int
    state: JobState = JobState.COMPLETED


@dataclass(frozen=True, slots=True)
class Requeue:
    """An admitted job was evicted and goes back to pending, keeping its id.

    ``expedite`` (Slurm's ``--requeue=expedite``, after a node failure): no backoff,
    first in the order, and ``nodes`` (its previous nodes that are still healthy)
    held for it until it restarts (:mod:`phalanx.engine.expedite`)."""

    job_id: int
    reason: str = "Requeued"
    expedite: bool = False
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplaceNodes:
    """Failed nodes of an admitted, topology-placed job are replaced as ``replaced``
    (``(failed, replacement)`` pairs, a plan of :meth:`Engine.node_replacement
    <phalanx.engine.engine.Engine.node_replacement>`); the job keeps its admission and
    restarts on its new nodes (:mod:`phalanx.engine.hotswap`)."""

    job_id: int
    replaced: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Expedite:
    """A pending job is expedited again: the state an expedited :class:`Requeue` gave it,
    for an engine rebuilt after it (recovery after a restart).

    First in the order, and ``nodes`` (its previous nodes that are still up) held for
    it until ``since`` (the requeue's time, the caller's clock) plus the hold's bound.
    Ignored for a job that is not pending."""

    job_id: int
    nodes: tuple[str, ...]
    since: float


@dataclass(frozen=True, slots=True)
class PodsReady:
    """Every pod of an admitted job is running (Kueue's ``PodsReady=True``), at ``time``."""

    job_id: int
    time: float


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """An admitted job saved its work at ``at`` (the caller's clock): preempting it loses
    only what it did since. Ignored for a job that is not admitted; a checkpoint older
    than the last one known, or than the admission, changes nothing."""

    job_id: int
    at: float


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """A tenant's decayed usage, its descendants' included: GPU-hours ``usage`` (U) and
    billable TRES-seconds ``billing`` (Slurm's RawUsage); optionally a new ``allocation`` (L)."""

    tenant: str
    usage: float
    allocation: float | None = None
    billing: float = 0.0


@dataclass(frozen=True, slots=True)
class Adopt:
    """A job admitted before (by an earlier engine, say before a restart) keeps its admission.

    Its quota is charged and its nodes are taken as ``admission`` records, without
    placing it again: this is how recovery rebuilds the engine from the store.
    Pod sets of ``admission`` on nodes or in a ClusterQueue that no longer exist
    hold nothing there.
    """

    job: Job
    admission: Admit
    admitted_at: float | None = None
    """When it was admitted (its minimum runtime and planned end count from then);
    None: its submit time."""


Event = (
    Upsert
    | Delete
    | Submit
    | Cancel
    | Finish
    | Requeue
    | Expedite
    | TenantUsage
    | Adopt
    | PodsReady
    | Checkpoint
    | ReplaceNodes
)

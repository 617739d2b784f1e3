"""Job shapes: the part of a job that decides whether it fits.

Two jobs with the same shape in the same ClusterQueue get the same answer from
quota and placement, so the queue manager keeps one sub-queue per shape and a
shape that does not fit is set aside as a whole (Kueue's scheduling-equivalence
hashing, without the per-job bookkeeping). Shapes are interned: equal shapes
are the same object, which also keeps 100k pending jobs small in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from phalanx.model import GPU_MILLI, PODS, Job, NodeSelectorTerm, PodSet, Toleration

__all__ = ["JobShape", "PodSetShape", "ShapeInterner"]


@dataclass(frozen=True, slots=True)
class PodSetShape:
    """``count`` tasks of one request vector, with their node constraints."""

    name: str
    count: int
    requests: tuple[tuple[str, int], ...]
    node_selector: tuple[tuple[str, str], ...]
    tolerations: tuple[Toleration, ...]
    tasks_per_node: int | None
    exclusive: bool
    node_names: frozenset[str] | None = None
    exclude_nodes: frozenset[str] = frozenset()
    min_count: int | None = None
    topology: tuple[str, str] | None = None
    """``("required" | "preferred", level)``, ``("switches", count)`` or
    ``("unconstrained", "")``."""
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    """Required node affinity terms (a node must match one)."""
    slice: tuple[str, int] | None = None
    """``(level, units)``: every slice of that many units within one domain of the level."""
    _hash: int = field(default=0, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # The hash the dataclass would compute on every call, computed once: shapes key
        # the assigner's and the queues' dictionaries on every head.
        fields = (
            self.name,
            self.count,
            self.requests,
            self.node_selector,
            self.tolerations,
            self.tasks_per_node,
            self.exclusive,
            self.node_names,
            self.exclude_nodes,
            self.min_count,
            self.topology,
            self.node_affinity,
            self.slice,
        )
        object.__setattr__(self, "_hash", hash(fields))

    def __hash__(self) -> int:
        return self._hash

    @property
    def units(self) -> int:
        """Placement units: groups of ``tasks_per_node`` tasks, or single tasks."""
        return self.count // self.tasks_per_node if self.tasks_per_node else self.count

    @property
    def unit_size(self) -> int:
        return self.tasks_per_node or 1

    @property
    def one_unit_per_node(self) -> bool:
        return self.tasks_per_node is not None or self.exclusive

    def request(self, resource: str) -> int:
        for name, amount in self.requests:
            if name == resource:
                return amount
        return 0

    def per_task(self, resource: str) -> int:
        """What each task counts against quota: its request, and one of Kueue's ``pods``."""
        return 1 if resource == PODS else self.request(resource)

    def total(self, resource: str) -> int:
        return self.count * self.per_task(resource)

    @property
    def share(self) -> tuple[int, int] | None:
        """``(thousandths per task, tasks per unit)`` when each task asks for a share of
        one GPU, else None."""
        milli = self.request(GPU_MILLI)
        return (milli, self.unit_size) if milli else None

    def unit_request(self) -> dict[str, int]:
        size = self.unit_size
        return {name: amount * size for name, amount in self.requests if amount}


@dataclass(frozen=True, slots=True)
class JobShape:
    pod_sets: tuple[PodSetShape, ...]
    time_limit: float | None = None
    """Part of the shape only under backfill, where jobs with shorter limits may start
    where longer ones of the same pod sets may not."""
    partial: PodSetShape | None = field(default=None, init=False, compare=False, repr=False)
    """The pod set that may be admitted with fewer tasks (``minCount``), if any."""
    totals: tuple[tuple[str, int], ...] = field(default=(), init=False, compare=False, repr=False)
    """What a job of this shape counts against quota, per resource its pod sets ask for."""
    _hash: int = field(default=0, init=False, compare=False, repr=False)

    def __hash__(self) -> int:
        return self._hash

    def __post_init__(self) -> None:
        for p in self.pod_sets:
            if p.min_count is not None and p.min_count < p.count:
                object.__setattr__(self, "partial", p)
                break
        totals: dict[str, int] = {}
        for p in self.pod_sets:
            for name, _ in p.requests:
                totals[name] = totals.get(name, 0) + p.total(name)
        object.__setattr__(self, "totals", tuple(totals.items()))
        object.__setattr__(self, "_hash", hash((self.pod_sets, self.time_limit)))


def _topology(pod_set: PodSet) -> tuple[str, str] | None:
    request = pod_set.topology
    if request is None:
        return None
    if request.slice_required is not None and not (
        request.required or request.preferred or request.unconstrained
    ):
        # Kueue: a slice request alone leaves the pod set unconstrained.
        return ("unconstrained", "")
    if request.required is not None:
        return ("required", request.required)
    if request.preferred is not None:
        return ("preferred", request.preferred)
    if request.switches is not None:
        return ("switches", str(request.switches))
    return ("unconstrained", "")


def _slice(pod_set: PodSet) -> tuple[str, int] | None:
    request = pod_set.topology
    if request is None or request.slice_required is None or request.slice_size is None:
        return None
    return (request.slice_required, request.slice_size // (pod_set.tasks_per_node or 1))


class ShapeInterner:
    """Maps pod sets and jobs to shared shape objects."""

    def __init__(self, with_time_limits: bool = False) -> None:
        self.with_time_limits = with_time_limits
        self._pod_sets: dict[PodSetShape, PodSetShape] = {}
        self._jobs: dict[JobShape, JobShape] = {}

    def pod_set(self, pod_set: PodSet) -> PodSetShape:
        shape = PodSetShape(
            name=pod_set.name,
            count=pod_set.count,
            requests=tuple(sorted((k, v) for k, v in pod_set.requests.items())),
            node_selector=tuple(sorted(pod_set.node_selector.items())),
            tolerations=tuple(pod_set.tolerations),
            tasks_per_node=pod_set.tasks_per_node,
            exclusive=pod_set.exclusive,
            node_names=frozenset(pod_set.node_names) if pod_set.node_names is not None else None,
            exclude_nodes=frozenset(pod_set.exclude_nodes),
            min_count=pod_set.min_count,
            topology=_topology(pod_set),
            node_affinity=tuple(pod_set.node_affinity) if pod_set.node_affinity else None,
            slice=_slice(pod_set),
        )
        return self._pod_sets.setdefault(shape, shape)

    def reduced(self, job: JobShape, pod_set: PodSetShape, count: int) -> JobShape:
        """``job`` with ``pod_set`` scaled down to ``count`` tasks (partial admission)."""
        small = self._pod_sets.setdefault(
            replace(pod_set, count=count), replace(pod_set, count=count)
        )
        shape = JobShape(tuple(small if p is pod_set else p for p in job.pod_sets), job.time_limit)
        return self._jobs.setdefault(shape, shape)

    def relaxed(self, job: JobShape) -> JobShape:
        """``job`` without its pod sets' ``switches`` requests (their wait is over)."""
        pod_sets = []
        for p in job.pod_sets:
            if p.topology is not None and p.topology[0] == "switches":
                p = replace(p, topology=None)
                p = self._pod_sets.setdefault(p, p)
            pod_sets.append(p)
        shape = JobShape(tuple(pod_sets), job.time_limit)
        return self._jobs.setdefault(shape, shape)

    def job(self, job: Job) -> JobShape:
        limit = job.time_limit if self.with_time_limits else None
        shape = JobShape(tuple(self.pod_set(p) for p in job.pod_sets), limit)
        return self._jobs.setdefault(shape, shape)

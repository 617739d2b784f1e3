"""Builders for engine tests: compact constructors for nodes, queues and jobs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from phalanx.engine import (
    Admit,
    Decision,
    Engine,
    EngineConfig,
    Event,
    Pending,
    Reason,
    Submit,
    Upsert,
)
from phalanx.model import (
    AdminState,
    ClusterQueue,
    Cohort,
    Job,
    LocalQueue,
    Node,
    PodSet,
    ResourceFlavor,
    Taint,
    Toleration,
)

GPU = "nvidia.com/gpu"


def node(name: str, gpus: int = 8, cpu: str = "96", memory: str = "1000Gi", **labels: str) -> Node:
    return Node(
        name=name,
        labels={k.replace("_", "/"): v for k, v in labels.items()},
        capacity={GPU: gpus, "cpu": cpu, "memory": memory},
    )


def flavor(name: str, **labels: str) -> ResourceFlavor:
    return ResourceFlavor(
        name=name, node_labels={k.replace("_", "/"): v for k, v in labels.items()}
    )


def quota(
    resource: str,
    nominal: Any,
    borrowing: Any | None = None,
    lending: Any | None = None,
) -> dict[str, Any]:
    q: dict[str, Any] = {"name": resource, "nominalQuota": nominal}
    if borrowing is not None:
        q["borrowingLimit"] = borrowing
    if lending is not None:
        q["lendingLimit"] = lending
    return q


def cluster_queue(
    name: str,
    flavors: Mapping[str, Any],
    cohort: str | None = None,
    strategy: str = "BestEffortFIFO",
    resources: tuple[str, ...] = (GPU,),
    **extra: Any,
) -> ClusterQueue:
    """``flavors`` maps flavor name to a GPU nominal quota, or to a list of quota dicts."""
    fl = []
    for fname, spec in flavors.items():
        if isinstance(spec, list):
            fl.append({"name": fname, "resources": spec})
        else:
            fl.append({"name": fname, "resources": [quota(r, spec) for r in resources]})
    covered = [q["name"] for q in fl[0]["resources"]] if fl else list(resources)
    data: dict[str, Any] = {
        "name": name,
        "queueingStrategy": strategy,
        "resourceGroups": [{"coveredResources": covered, "flavors": fl}],
        **extra,
    }
    if cohort:
        data["cohortName"] = cohort
    return ClusterQueue.model_validate(data)


def cohort(
    name: str, parent: str | None = None, flavors: Mapping[str, Any] | None = None
) -> Cohort:
    data: dict[str, Any] = {"name": name}
    if parent:
        data["parentName"] = parent
    if flavors:
        data["resourceGroups"] = [
            {
                "coveredResources": [GPU],
                "flavors": [
                    {"name": f, "resources": [quota(GPU, q) if not isinstance(q, dict) else q]}
                    for f, q in flavors.items()
                ],
            }
        ]
    return Cohort.model_validate(data)


def local_queue(name: str, cq: str, namespace: str = "default") -> LocalQueue:
    return LocalQueue(name=name, namespace=namespace, cluster_queue=cq)


_ids = iter(range(1, 10**9))


def job(
    cq: str | None = None,
    gpus: int = 1,
    count: int = 1,
    id: int | None = None,
    submit: float = 0.0,
    tenant: str = "default",
    queue: str | None = None,
    priority: int | None = None,
    **podset: Any,
) -> Job:
    """A one-pod-set job of ``count`` tasks with ``gpus`` GPUs each."""
    requests = {GPU: gpus, **podset.pop("requests", {})}
    return Job(
        id=id if id is not None else next(_ids),
        tenant=tenant,
        queue=queue,
        cluster_queue=cq,
        priority=priority,
        submit_time=submit,
        pod_sets=[PodSet(count=count, requests=requests, **podset)],
    )


def engine_with(*objects: Any, preset: str = "kueue", jobs: tuple[Job, ...] = ()) -> Engine:
    engine = Engine(EngineConfig(preset=preset))
    for obj in objects:
        engine.apply(Upsert(obj))
    for j in jobs:
        engine.apply(Submit(j))
    return engine


# --------------------------------------------------------------------------- extras


def make_node(
    name: str,
    gpus: int = 8,
    cpu: str = "96",
    memory: str = "1000Gi",
    labels: Mapping[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    state: str = "up",
) -> Node:
    """A node with explicit labels, taints and admin state (``up``, ``drain``, ``down``)."""
    return Node(
        name=name,
        labels=dict(labels or {}),
        taints=list(taints),
        capacity={GPU: gpus, "cpu": cpu, "memory": memory},
        state=AdminState(state),
    )


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> Taint:
    return Taint.model_validate({"key": key, "value": value, "effect": effect})


def toleration(key: str, value: str | None = None) -> Toleration:
    """``Exists`` when ``value`` is None, else ``Equal``."""
    if value is None:
        return Toleration(key=key, operator="Exists")
    return Toleration(key=key, operator="Equal", value=value)


def cq_groups(
    name: str,
    groups: list[tuple[list[str], dict[str, list[dict[str, Any]]]]],
    cohort: str | None = None,
    **extra: Any,
) -> ClusterQueue:
    """A ClusterQueue with several resource groups: ``[(covered, {flavor: [quota...]}), ...]``."""
    data: dict[str, Any] = {
        "name": name,
        "resourceGroups": [
            {
                "coveredResources": covered,
                "flavors": [{"name": f, "resources": qs} for f, qs in fl.items()],
            }
            for covered, fl in groups
        ],
        **extra,
    }
    if cohort:
        data["cohortName"] = cohort
    return ClusterQueue.model_validate(data)


def gang(
    cq: str,
    id: int,
    pod_sets: list[PodSet],
    submit: float = 0.0,
    priority: int | None = None,
    tenant: str = "default",
) -> Job:
    """A job of several pod sets."""
    return Job(
        id=id,
        tenant=tenant,
        cluster_queue=cq,
        priority=priority,
        submit_time=submit,
        pod_sets=pod_sets,
    )


def admits(decisions: list[Decision]) -> dict[int, Admit]:
    """The Admit decisions by job id (in decision order)."""
    return {d.job_id: d for d in decisions if isinstance(d, Admit)}


def pendings(decisions: list[Decision]) -> dict[int, Reason]:
    """The reasons of the Pending decisions by job id."""
    return {d.job_id: d.reason for d in decisions if isinstance(d, Pending)}


def admitted_ids(decisions: list[Decision]) -> list[int]:
    return [d.job_id for d in decisions if isinstance(d, Admit)]


def decisions_json(decisions: list[Decision]) -> str:
    return json.dumps([d.to_dict() for d in decisions], sort_keys=True)


def step(engine: Engine, now: float, *events: Event) -> list[Decision]:
    """Apply ``events`` then run one cycle at ``now``."""
    for event in events:
        engine.apply(event)
    return engine.cycle(now)


def node_gpus_used(engine: Engine) -> dict[str, int]:
    return {name: slot.used.get(GPU, 0) for name, slot in engine.cache.nodes.items()}


def quota_usage(engine: Engine) -> dict[str, dict[tuple[str, str], int]]:
    """Non-zero usage of every ClusterQueue and Cohort quota node."""
    out: dict[str, dict[tuple[str, str], int]] = {}
    for name, info in engine.cache.cluster_queues.items():
        out["cq:" + name] = {fr: v for fr, v in info.node.usage.items() if v}
    for name, qnode in engine.cache.cohort_nodes.items():
        out["cohort:" + name] = {fr: v for fr, v in qnode.usage.items() if v}
    return out

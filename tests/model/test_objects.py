"""Model validation for the phalanx vocabulary, against Kueue's v1beta2 API shapes.

Covers the camelCase <-> snake_case mapping of a Kueue ClusterQueue spec, the
validation errors Kueue's CEL rules and webhooks raise (re-expressed as pydantic
``ValidationError``), ``to_dict()`` round trips for every model kind, Kubernetes
toleration semantics and the Slurm codes of job states.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from pydantic import ValidationError

import phalanx.model as model
from phalanx.model import (
    GPU,
    MEMORY,
    AdminState,
    ArraySpec,
    BorrowWithinCohort,
    ClusterQueue,
    ClusterQueuePreemption,
    Cohort,
    FairSharing,
    FlavorFungibility,
    FlavorQuotas,
    FungibilityPreference,
    Job,
    JobState,
    JobSubmission,
    LocalQueue,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodSet,
    PriorityClass,
    PriorityClassLimits,
    QueueingStrategy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    RunSpec,
    SignalSpec,
    SlurmComponent,
    SlurmRequest,
    SlurmSwitches,
    StopPolicy,
    Taint,
    Tenant,
    TenantLimits,
    Toleration,
    Topology,
    TopologyLevel,
    TopologyRequest,
    WhenCanBorrow,
    WhenCanPreempt,
    tolerates,
)
from phalanx.model.base import PhalanxModel

Gi = 2**30

# A ClusterQueue spec spelled the way a Kueue v1beta2 manifest spells it, with
# every field set to a non-default value.
KUEUE_CQ: dict[str, Any] = {
    "name": "team-a",
    "cohortName": "research",
    "queueingStrategy": "StrictFIFO",
    "resourceGroups": [
        {
            "coveredResources": ["cpu", "memory"],
            "flavors": [
                {
                    "name": "default",
                    "resources": [
                        {
                            "name": "cpu",
                            "nominalQuota": "96",
                            "borrowingLimit": "500m",
                            "lendingLimit": "16",
                        },
                        {"name": "memory", "nominalQuota": "1000Gi"},
                    ],
                }
            ],
        },
        {
            "coveredResources": ["nvidia.com/gpu"],
            "flavors": [
                {
                    "name": "h100",
                    "resources": [
                        {"name": "nvidia.com/gpu", "nominalQuota": "8", "borrowingLimit": "4"}
                    ],
                },
                {
                    "name": "a100",
                    "resources": [
                        {"name": "nvidia.com/gpu", "nominalQuota": "16", "lendingLimit": "0"}
                    ],
                },
            ],
        },
    ],
    "flavorFungibility": {
        "whenCanBorrow": "TryNextFlavor",
        "whenCanPreempt": "TryNextFlavor",
        "preference": "PreemptionOverBorrowing",
    },
    "preemption": {
        "withinClusterQueue": "LowerPriority",
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},
    },
    "stopPolicy": "Hold",
    "namespaceSelector": {"matchLabels": {"team": "a"}},
    "fairSharing": {"weight": 2.5},
    "annotations": {"owner": "ml-platform"},
}

SNAKE_CQ: dict[str, Any] = {
    "name": "team-a",
    "cohort_name": "research",
    "queueing_strategy": "StrictFIFO",
    "resource_groups": [
        {
            "covered_resources": ["cpu", "memory"],
            "flavors": [
                {
                    "name": "default",
                    "resources": [
                        {
                            "name": "cpu",
                            "nominal_quota": "96",
                            "borrowing_limit": "500m",
                            "lending_limit": "16",
                        },
                        {"name": "memory", "nominal_quota": "1000Gi"},
                    ],
                }
            ],
        },
        {
            "covered_resources": ["nvidia.com/gpu"],
            "flavors": [
                {
                    "name": "h100",
                    "resources": [
                        {"name": "nvidia.com/gpu", "nominal_quota": 8, "borrowing_limit": 4}
                    ],
                },
                {
                    "name": "a100",
                    "resources": [
                        {"name": "nvidia.com/gpu", "nominal_quota": 16, "lending_limit": 0}
                    ],
                },
            ],
        },
    ],
    "flavor_fungibility": {
        "when_can_borrow": "TryNextFlavor",
        "when_can_preempt": "TryNextFlavor",
        "preference": "PreemptionOverBorrowing",
    },
    "preemption": {
        "within_cluster_queue": "LowerPriority",
        "reclaim_within_cohort": "Any",
        "borrow_within_cohort": {"policy": "LowerPriority", "max_priority_threshold": 100},
    },
    "stop_policy": "Hold",
    "namespace_selector": {"matchLabels": {"team": "a"}},
    "fair_sharing": {"weight": 2.5},
    "annotations": {"owner": "ml-platform"},
}


# --- ClusterQueue mapping ------------------------------------------------------------


def test_cluster_queue_from_kueue_spec_maps_every_field() -> None:
    cq = ClusterQueue.model_validate(KUEUE_CQ)
    assert cq.name == "team-a"
    assert cq.cohort_name == "research"
    assert cq.queueing_strategy is QueueingStrategy.STRICT_FIFO
    assert cq.stop_policy is StopPolicy.HOLD
    assert cq.namespace_selector == {"matchLabels": {"team": "a"}}
    assert cq.fair_sharing == FairSharing(weight=2.5)
    assert cq.annotations == {"owner": "ml-platform"}

    ff = cq.flavor_fungibility
    assert ff.when_can_borrow is WhenCanBorrow.TRY_NEXT_FLAVOR
    assert ff.when_can_preempt is WhenCanPreempt.TRY_NEXT_FLAVOR
    assert ff.preference is FungibilityPreference.PREEMPTION_OVER_BORROWING

    assert cq.preemption.within_cluster_queue == "LowerPriority"
    assert cq.preemption.reclaim_within_cohort == "Any"
    assert cq.preemption.borrow_within_cohort == BorrowWithinCohort(
        policy="LowerPriority", max_priority_threshold=100
    )

    cpu_mem, gpus = cq.resource_groups
    assert cpu_mem.covered_resources == ["cpu", "memory"]
    (default,) = cpu_mem.flavors
    cpu, mem = default.resources
    assert (cpu.name, cpu.nominal_quota, cpu.borrowing_limit, cpu.lending_limit) == (
        "cpu",
        96_000,
        500,
        16_000,
    )
    assert (mem.name, mem.nominal_quota, mem.borrowing_limit, mem.lending_limit) == (
        "memory",
        1000 * Gi,
        None,
        None,
    )
    assert gpus.covered_resources == [GPU]
    h100, a100 = gpus.flavors
    assert (h100.name, h100.resources[0].nominal_quota, h100.resources[0].borrowing_limit) == (
        "h100",
        8,
        4,
    )
    assert (a100.name, a100.resources[0].nominal_quota, a100.resources[0].lending_limit) == (
        "a100",
        16,
        0,
    )
    assert cq.flavor_names() == ["default", "h100", "a100"]


def test_cluster_queue_to_dict_is_the_kueue_spec() -> None:
    assert ClusterQueue.model_validate(KUEUE_CQ).to_dict() == KUEUE_CQ


def test_cluster_queue_snake_case_is_accepted_and_equal() -> None:
    assert ClusterQueue.model_validate(SNAKE_CQ) == ClusterQueue.model_validate(KUEUE_CQ)


def test_cluster_queue_defaults_match_kueue() -> None:
    cq = ClusterQueue.model_validate({"name": "q"})
    assert cq.cohort_name is None
    assert cq.queueing_strategy is QueueingStrategy.BEST_EFFORT_FIFO
    assert cq.flavor_fungibility.when_can_borrow is WhenCanBorrow.MAY_STOP_SEARCH
    assert cq.flavor_fungibility.when_can_preempt is WhenCanPreempt.TRY_NEXT_FLAVOR
    assert cq.flavor_fungibility.preference is None
    assert cq.preemption.within_cluster_queue == "Never"
    assert cq.preemption.reclaim_within_cohort == "Never"
    assert cq.stop_policy is StopPolicy.NONE
    assert cq.namespace_selector is None


def test_models_are_frozen() -> None:
    cq = ClusterQueue.model_validate(KUEUE_CQ)
    with pytest.raises(ValidationError):
        cq.name = "other"  # type: ignore[misc]


# --- validation errors ----------------------------------------------------------------


def _cq(**changes: Any) -> dict[str, Any]:
    """A valid one-group cpu/gpu ClusterQueue spec, with top-level keys replaced."""
    spec: dict[str, Any] = {
        "name": "q",
        "cohortName": "c",
        "resourceGroups": [
            {
                "coveredResources": ["cpu", GPU],
                "flavors": [
                    {
                        "name": "f1",
                        "resources": [
                            {"name": "cpu", "nominalQuota": "8"},
                            {"name": GPU, "nominalQuota": "4"},
                        ],
                    }
                ],
            }
        ],
    }
    spec.update(changes)
    return spec


def _group(covered: list[str], *flavors: tuple[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {
        "coveredResources": covered,
        "flavors": [{"name": name, "resources": res} for name, res in flavors],
    }


def _rq(name: str, nominal: Any = "1", **limits: Any) -> dict[str, Any]:
    return {"name": name, "nominalQuota": nominal, **limits}


def test_valid_base_spec() -> None:
    ClusterQueue.model_validate(_cq())


CQ_ERRORS: list[tuple[str, dict[str, Any], str]] = [
    (
        "flavor misses a covered resource",
        _cq(resourceGroups=[_group(["cpu", GPU], ("f1", [_rq("cpu")]))]),
        "must list exactly the coveredResources",
    ),
    (
        "flavor lists an uncovered resource",
        _cq(resourceGroups=[_group(["cpu"], ("f1", [_rq("cpu"), _rq(GPU)]))]),
        "must list exactly the coveredResources",
    ),
    (
        "flavor names another resource",
        _cq(resourceGroups=[_group(["cpu"], ("f1", [_rq(MEMORY)]))]),
        "must list exactly the coveredResources",
    ),
    (
        "second flavor does not match",
        _cq(resourceGroups=[_group(["cpu"], ("f1", [_rq("cpu")]), ("f2", [_rq("cpu"), _rq(GPU)]))]),
        r"flavors\[1\] \(f2\)",
    ),
    (
        "coveredResources twice",
        _cq(resourceGroups=[_group(["cpu", "cpu"], ("f1", [_rq("cpu"), _rq("cpu")]))]),
        "coveredResources lists a resource twice",
    ),
    (
        "resource in two groups",
        _cq(
            resourceGroups=[
                _group(["cpu"], ("f1", [_rq("cpu")])),
                _group(["cpu", GPU], ("f2", [_rq("cpu"), _rq(GPU)])),
            ]
        ),
        "resource 'cpu' is covered by more than one group",
    ),
    (
        "flavor in two groups",
        _cq(
            resourceGroups=[
                _group(["cpu"], ("f1", [_rq("cpu")])),
                _group([GPU], ("f1", [_rq(GPU)])),
            ]
        ),
        "flavor 'f1' appears in more than one group",
    ),
    (
        "borrowingLimit without cohortName",
        _cq(
            cohortName=None,
            resourceGroups=[_group(["cpu"], ("f1", [_rq("cpu", borrowingLimit="1")]))],
        ),
        r"borrowingLimit: only allowed when cohortName is set",
    ),
    (
        "borrowingLimit with an empty cohortName",
        _cq(
            cohortName="",
            resourceGroups=[_group(["cpu"], ("f1", [_rq("cpu", borrowingLimit="0")]))],
        ),
        r"borrowingLimit: only allowed when cohortName is set",
    ),
    (
        "lendingLimit without cohortName",
        _cq(
            cohortName=None,
            resourceGroups=[_group(["cpu"], ("f1", [_rq("cpu", "4", lendingLimit="1")]))],
        ),
        r"lendingLimit: only allowed when cohortName is set",
    ),
    (
        "lendingLimit above nominalQuota (Kueue webhook)",
        _cq(resourceGroups=[_group(["cpu"], ("f1", [_rq("cpu", "4", lendingLimit="5")]))]),
        r"lendingLimit: must be less than or equal to the nominalQuota",
    ),
    (
        "lendingLimit above nominalQuota by one milli-core",
        _cq(resourceGroups=[_group(["cpu"], ("f1", [_rq("cpu", "4", lendingLimit="4001m")]))]),
        r"lendingLimit: must be less than or equal to the nominalQuota",
    ),
    ("unknown top-level field (v1beta1 'cohort')", _cq(cohort="c"), "Extra inputs"),
    (
        "unknown field in a resource quota",
        _cq(resourceGroups=[_group(["cpu"], ("f1", [_rq("cpu", guaranteed="1")]))]),
        "Extra inputs",
    ),
    (
        "bad nominalQuota",
        _cq(resourceGroups=[_group(["cpu"], ("f1", [_rq("cpu", "ten")]))]),
        r"nominalQuota: expected a quantity",
    ),
    (
        "negative nominalQuota",
        _cq(resourceGroups=[_group(["cpu"], ("f1", [_rq("cpu", "-1")]))]),
        r"nominalQuota: expected a non-negative quantity",
    ),
    (
        "bad borrowingLimit",
        _cq(resourceGroups=[_group(["cpu"], ("f1", [_rq("cpu", borrowingLimit="5X")]))]),
        r"borrowingLimit: expected a quantity",
    ),
    (
        "bad lendingLimit",
        _cq(resourceGroups=[_group(["cpu"], ("f1", [_rq("cpu", lendingLimit="1.2.3")]))]),
        r"lendingLimit: expected a quantity",
    ),
    (
        "missing nominalQuota",
        _cq(resourceGroups=[_group(["cpu"], ("f1", [{"name": "cpu"}]))]),
        r"nominalQuota\n  Field required",
    ),
    ("bad queueingStrategy", _cq(queueingStrategy="FIFO"), "queueingStrategy"),
    ("bad stopPolicy", _cq(stopPolicy="Pause"), "stopPolicy"),
    (
        "preference without TryNextFlavor (Kueue CEL)",
        _cq(flavorFungibility={"preference": "BorrowingOverPreemption"}),
        "preference can only be set when both whenCanBorrow and whenCanPreempt",
    ),
    (
        "preference with only whenCanBorrow TryNextFlavor",
        _cq(
            flavorFungibility={
                "whenCanBorrow": "TryNextFlavor",
                "whenCanPreempt": "MayStopSearch",
                "preference": "PreemptionOverBorrowing",
            }
        ),
        "preference can only be set",
    ),
    (
        "borrowWithinCohort without reclaimWithinCohort (Kueue CEL)",
        _cq(preemption={"borrowWithinCohort": {"policy": "LowerPriority"}}),
        r"reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
    ),
    (
        "unknown withinClusterQueue policy",
        _cq(preemption={"withinClusterQueue": "Always"}),
        "withinClusterQueue",
    ),
    (
        "unknown reclaimWithinCohort policy",
        _cq(preemption={"reclaimWithinCohort": "Sometimes"}),
        "reclaimWithinCohort",
    ),
    (
        "unknown borrowWithinCohort policy",
        _cq(preemption={"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "Any"}}),
        "policy",
    ),
    (
        "more than 16 resource groups",
        _cq(resourceGroups=[_group([f"r{i}"], (f"f{i}", [_rq(f"r{i}")])) for i in range(17)]),
        "at most 16 items",
    ),
    ("empty name", _cq(name=""), "name"),
]


@pytest.mark.parametrize(
    ("spec", "message"), [c[1:] for c in CQ_ERRORS], ids=[c[0] for c in CQ_ERRORS]
)
def test_cluster_queue_rejects(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ClusterQueue.model_validate(spec)


CQ_ACCEPTS: list[tuple[str, dict[str, Any]]] = [
    (
        "lendingLimit equal to nominalQuota",
        _cq(resourceGroups=[_group(["cpu"], ("f1", [_rq("cpu", "4", lendingLimit="4000m")]))]),
    ),
    (
        "limits with a cohort",
        _cq(
            resourceGroups=[
                _group(["cpu"], ("f1", [_rq("cpu", "4", borrowingLimit="0", lendingLimit="0")]))
            ]
        ),
    ),
    (
        "preference with both TryNextFlavor",
        _cq(
            flavorFungibility={
                "whenCanBorrow": "TryNextFlavor",
                "whenCanPreempt": "TryNextFlavor",
                "preference": "BorrowingOverPreemption",
            }
        ),
    ),
    (
        "borrowWithinCohort Never with reclaim Never",
        _cq(preemption={"borrowWithinCohort": {"policy": "Never"}}),
    ),
    (
        "borrowWithinCohort with reclaim LowerPriority",
        _cq(
            preemption={
                "reclaimWithinCohort": "LowerPriority",
                "borrowWithinCohort": {"policy": "LowerPriority"},
            }
        ),
    ),
    (
        "resources in another order than coveredResources",
        _cq(resourceGroups=[_group(["cpu", GPU], ("f1", [_rq(GPU), _rq("cpu")]))]),
    ),
]


@pytest.mark.parametrize("spec", [c[1] for c in CQ_ACCEPTS], ids=[c[0] for c in CQ_ACCEPTS])
def test_cluster_queue_accepts(spec: dict[str, Any]) -> None:
    ClusterQueue.model_validate(spec)


def test_bad_quantity_error_names_the_field_and_location() -> None:
    spec = _cq(resourceGroups=[_group(["cpu"], ("f1", [_rq("cpu", borrowingLimit="lots")]))])
    with pytest.raises(ValidationError) as info:
        ClusterQueue.model_validate(spec)
    (error,) = info.value.errors()
    assert error["loc"][:6] == ("resourceGroups", 0, "flavors", 0, "resources", 0)
    assert "borrowingLimit" in error["msg"]
    assert "'lots'" in error["msg"]


def _cohort(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "child",
        "parentName": "root",
        "resourceGroups": [_group([GPU], ("f1", [_rq(GPU, "4")]))],
    }
    spec.update(changes)
    return spec


COHORT_ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("own parent", _cohort(parentName="child"), "cannot be its own parent"),
    (
        "borrowingLimit without parentName",
        _cohort(
            parentName=None, resourceGroups=[_group([GPU], ("f1", [_rq(GPU, borrowingLimit="1")]))]
        ),
        r"borrowingLimit: only allowed when parentName is set",
    ),
    (
        "lendingLimit without parentName",
        _cohort(
            parentName=None, resourceGroups=[_group([GPU], ("f1", [_rq(GPU, lendingLimit="1")]))]
        ),
        r"lendingLimit: only allowed when parentName is set",
    ),
    (
        "flavor in two groups",
        _cohort(
            resourceGroups=[
                _group([GPU], ("f1", [_rq(GPU)])),
                _group(["cpu"], ("f1", [_rq("cpu")])),
            ]
        ),
        "appears in more than one group",
    ),
    ("unknown field", _cohort(cohortName="x"), "Extra inputs"),
]


@pytest.mark.parametrize(
    ("spec", "message"), [c[1:] for c in COHORT_ERRORS], ids=[c[0] for c in COHORT_ERRORS]
)
def test_cohort_rejects(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Cohort.model_validate(spec)


def test_cohort_may_lend_more_than_its_nominal_quota() -> None:
    # Kueue's cohort webhook does not enforce lendingLimit <= nominalQuota: a cohort's
    # lendable pool includes its children's quota.
    cohort = Cohort.model_validate(
        _cohort(resourceGroups=[_group([GPU], ("f1", [_rq(GPU, "0", lendingLimit="5")]))])
    )
    assert cohort.resource_groups[0].flavors[0].resources[0].lending_limit == 5


def _job(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"id": 1, "queue": "lq", "podSets": [{"name": "main", "count": 2}]}
    spec.update(changes)
    return spec


OTHER_ERRORS: list[tuple[str, type[PhalanxModel], dict[str, Any], str]] = [
    (
        "hostname above the lowest level",
        Topology,
        {
            "name": "t",
            "levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "rack"}],
        },
        "kubernetes.io/hostname may only be the lowest level",
    ),
    (
        "duplicate topology levels",
        Topology,
        {"name": "t", "levels": [{"nodeLabel": "rack"}, {"nodeLabel": "rack"}]},
        "levels must be unique",
    ),
    ("no topology levels", Topology, {"name": "t", "levels": []}, "levels"),
    (
        "17 topology levels",
        Topology,
        {"name": "t", "levels": [{"nodeLabel": f"l{i}"} for i in range(17)]},
        "levels",
    ),
    (
        "topologyName without nodeLabels",
        ResourceFlavor,
        {"name": "f", "topologyName": "t"},
        "topologyName requires at least one nodeLabel",
    ),
    (
        "nine nodeLabels",
        ResourceFlavor,
        {"name": "f", "nodeLabels": {f"k{i}": "v" for i in range(9)}},
        "nodeLabels",
    ),
    (
        "count not a multiple of tasksPerNode",
        PodSet,
        {"count": 6, "tasksPerNode": 4},
        r"count \(6\) must be a multiple of tasksPerNode \(4\)",
    ),
    ("zero count", PodSet, {"count": 0}, "count"),
    ("zero tasksPerNode", PodSet, {"count": 4, "tasksPerNode": 0}, "tasksPerNode"),
    ("bad request quantity", PodSet, {"requests": {"memory": "16GB"}}, r"memory: expected"),
    ("negative request", PodSet, {"requests": {"cpu": "-1"}}, r"cpu: expected a non-negative"),
    ("empty resource name", PodSet, {"requests": {"": "1"}}, "non-empty strings"),
    ("requests not a mapping", PodSet, {"requests": ["cpu"]}, "expected a mapping"),
    (
        "job without queue nor clusterQueue",
        Job,
        {"id": 1, "podSets": [{"count": 1}]},
        "a job needs a queue",
    ),
    (
        "duplicate pod set names",
        Job,
        _job(podSets=[{"name": "a"}, {"name": "a", "count": 2}]),
        "podSets: names must be unique",
    ),
    ("duplicate default pod set names", Job, _job(podSets=[{}, {}]), "names must be unique"),
    ("no pod sets", Job, _job(podSets=[]), "podSets"),
    ("negative job id", Job, _job(id=-1), "id"),
    ("unknown job field", Job, _job(partition="gpu"), "Extra inputs"),
    ("bad node capacity", Node, {"name": "n", "capacity": {"cpu": "lots"}}, r"cpu: expected"),
    ("bad node state", Node, {"name": "n", "state": "broken"}, "state"),
    ("bad taint effect", Taint, {"key": "k", "effect": "NoRun"}, "effect"),
    ("taint without key", Taint, {"key": ""}, "key"),
    ("bad toleration operator", Toleration, {"key": "k", "operator": "In"}, "operator"),
    ("priority above int32", PriorityClass, {"name": "p", "value": 2**31}, "value"),
    ("priority below int32", PriorityClass, {"name": "p", "value": -(2**31) - 1}, "value"),
    ("local queue without clusterQueue", LocalQueue, {"name": "lq"}, "clusterQueue"),
    ("negative tenant allocation", Tenant, {"name": "t", "allocation": -1}, "allocation"),
    ("negative fair-sharing weight", FairSharing, {"weight": -1}, "weight"),
]


@pytest.mark.parametrize(
    ("kind", "spec", "message"),
    [c[1:] for c in OTHER_ERRORS],
    ids=[c[0] for c in OTHER_ERRORS],
)
def test_other_models_reject(kind: type[PhalanxModel], spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        kind.model_validate(spec)


def test_job_with_only_a_cluster_queue_is_valid() -> None:
    job = Job.model_validate({"id": 7, "clusterQueue": "gpu", "podSets": [{"count": 1}]})
    assert (job.queue, job.cluster_queue) == (None, "gpu")


def test_topology_with_hostname_lowest_is_valid() -> None:
    topo = Topology.model_validate(
        {"name": "t", "levels": [{"nodeLabel": "rack"}, {"nodeLabel": "kubernetes.io/hostname"}]}
    )
    assert [lvl.node_label for lvl in topo.levels] == ["rack", "kubernetes.io/hostname"]


def test_pod_set_requests_and_totals() -> None:
    ps = PodSet.model_validate(
        {"count": 4, "tasksPerNode": 2, "requests": {"cpu": "500m", "memory": "2Gi", GPU: 2}}
    )
    assert ps.requests == {"cpu": 500, "memory": 2 * Gi, GPU: 2}
    assert ps.total("cpu") == 2_000
    assert ps.total(GPU) == 8
    assert ps.total("example.com/fpga") == 0
    job = Job(id=1, queue="q", pod_sets=[ps, PodSet(name="aux", count=3, requests={GPU: 1})])
    assert job.gpus == 11


# --- to_dict round trips ------------------------------------------------------------

TAINT = Taint(key="gpu", value="h100", effect="NoExecute")
TOLERATION = Toleration(
    key="gpu", operator="Exists", effect="NoExecute", toleration_seconds=30, value=""
)
RESOURCE_QUOTA = ResourceQuota.model_validate(
    {"name": "cpu", "nominalQuota": "1500m", "borrowingLimit": "2", "lendingLimit": "1"}
)
FLAVOR_QUOTAS = FlavorQuotas(name="h100", resources=[RESOURCE_QUOTA])
RESOURCE_GROUP = ResourceGroup(covered_resources=["cpu"], flavors=[FLAVOR_QUOTAS])
BORROW = BorrowWithinCohort(policy="LowerPriority", max_priority_threshold=-5)
PREEMPTION = ClusterQueuePreemption(
    within_cluster_queue="LowerOrNewerEqualPriority",
    reclaim_within_cohort="LowerPriority",
    borrow_within_cohort=BORROW,
)
FUNGIBILITY = FlavorFungibility(
    when_can_borrow=WhenCanBorrow.TRY_NEXT_FLAVOR,
    when_can_preempt=WhenCanPreempt.TRY_NEXT_FLAVOR,
    preference=FungibilityPreference.BORROWING_OVER_PREEMPTION,
)
TOPOLOGY_LEVEL = TopologyLevel(node_label="cloud.provider.com/rack")
POD_SET = PodSet.model_validate(
    {
        "name": "workers",
        "count": 16,
        "requests": {"cpu": "7500m", "memory": "1.5Ti", GPU: 8, "example.com/nic": "1"},
        "nodeSelector": {"gpu": "h100"},
        "tolerations": [TOLERATION.to_dict()],
        "tasksPerNode": 8,
        "exclusive": True,
    }
)

ROUND_TRIP: list[PhalanxModel] = [
    Node(
        name="gpu-001",
        labels={"kubernetes.io/hostname": "gpu-001", "rack": "r1"},
        taints=[TAINT, Taint(key="spot", effect="PreferNoSchedule")],
        capacity={"cpu": "96500m", "memory": "1000Gi", GPU: 8, "pods": 110},
        state=AdminState.DRAIN,
        reason="maintenance",
    ),
    TAINT,
    TOLERATION,
    ResourceFlavor(
        name="h100",
        node_labels={"gpu": "h100"},
        node_taints=[TAINT],
        tolerations=[TOLERATION],
        topology_name="default",
    ),
    TOPOLOGY_LEVEL,
    Topology(
        name="default", levels=[TOPOLOGY_LEVEL, TopologyLevel(node_label="kubernetes.io/hostname")]
    ),
    RESOURCE_QUOTA,
    FLAVOR_QUOTAS,
    RESOURCE_GROUP,
    Cohort(
        name="org",
        parent_name="root",
        resource_groups=[RESOURCE_GROUP],
        fair_sharing=FairSharing(weight=0.5),
    ),
    ClusterQueue.model_validate(KUEUE_CQ),
    FUNGIBILITY,
    PREEMPTION,
    BORROW,
    FairSharing(weight=0),
    LocalQueue(
        name="lq",
        namespace="team-a",
        cluster_queue="team-a",
        stop_policy=StopPolicy.HOLD_AND_DRAIN,
        fair_sharing=FairSharing(weight=3),
    ),
    Tenant(name="team-a", parent="org", allocation=2.5, users=["alice", "bob"]),
    PriorityClass(name="high", value=1000, description="production"),
    PriorityClassLimits.model_validate(
        {
            "maxTRESPerUser": {GPU: 16, "memory": "1Ti"},
            "maxTRESPerJob": {"cpu": "500m"},
            "maxJobsPerUser": 4,
            "maxSubmitJobsPerUser": 10,
            "maxWall": "1-00:00:00",
            "grpTRES": {GPU: 64},
        }
    ),
    TenantLimits.model_validate({"grpTRES": {GPU: 8}, "maxJobs": 2, "maxSubmitJobs": 0}),
    POD_SET,
    Job(
        id=42,
        name="train",
        tenant="team-a",
        user="alice",
        queue="lq",
        cluster_queue="team-a",
        priority_class="high",
        priority=1000,
        pod_sets=[POD_SET, PodSet(name="launcher", requests={"cpu": "1"})],
        submit_time=1_700_000_000.25,
        labels={"kueue.x-k8s.io/queue-name": "lq"},
    ),
    RunSpec(command=["python", "train.py"], working_dir="/tmp", env={"A": "1"}, time_limit=3600),
    JobSubmission(
        name="train",
        tenant="team-a",
        queue="lq",
        pod_sets=[POD_SET],
        run=RunSpec(command=["sleep", "1"], output="out-%j.log"),
    ),
    SignalSpec(signal=10, seconds=120, batch_only=True),
    SlurmRequest(
        job_name="train",
        submit_dir="/home/u",
        nodes=2,
        ntasks_per_node=4,
        gpus_per_node=8,
        gpu_type="h100",
        switches=SlurmSwitches(count=1),
        kill_on_invalid_dep=True,
        array_step=1,
    ),
    SlurmSwitches(count=2, wait_seconds=600),
    SlurmRequest(
        job_name="het",
        nodes=1,
        gpus_per_node=2,
        components=[
            SlurmComponent(nodes=1, gpus_per_node=2),
            SlurmComponent(nodes=2, ntasks_per_node=1, switches=SlurmSwitches(count=1)),
        ],
    ),
    SlurmComponent(nodes=2, gpus_per_node=4, partition="gpu"),
    ArraySpec(indices=[3, 1, 2], throttle=2, text="1-3%2"),
    TopologyRequest(switches=2, wait_s=300),
    NodeSelectorRequirement(key="nvidia.com/gpu.product", operator="In", values=("A100", "H100")),
    NodeSelectorTerm.model_validate(
        {
            "matchExpressions": [{"key": "rack", "operator": "Exists"}],
            "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}],
        }
    ),
    PodSet(
        name="shared",
        count=4,
        requests={"cpu": "2", GPU: "0.5"},
        node_affinity=[
            {
                "matchExpressions": [
                    {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["T4"]}
                ]
            }
        ],
    ),
]


@pytest.mark.parametrize("obj", ROUND_TRIP, ids=lambda o: type(o).__name__)
def test_to_dict_round_trip(obj: PhalanxModel) -> None:
    data = obj.to_dict()
    assert type(obj).model_validate(data) == obj
    # JSON-compatible, and stable through JSON text.
    text = json.dumps(data)
    assert type(obj).model_validate_json(text) == obj
    # Re-validating does not mutate the wire form (quantities are not scaled twice).
    assert type(obj).model_validate(copy.deepcopy(data)).to_dict() == data


def test_round_trip_covers_every_model_kind() -> None:
    exported = {
        getattr(model, name)
        for name in model.__all__
        if isinstance(getattr(model, name), type) and issubclass(getattr(model, name), PhalanxModel)
    }
    assert exported, "no models exported"
    assert exported == {type(obj) for obj in ROUND_TRIP}


def test_to_dict_uses_wire_names_and_quantities() -> None:
    data = POD_SET.to_dict()
    assert data["tasksPerNode"] == 8
    assert data["nodeSelector"] == {"gpu": "h100"}
    assert data["requests"] == {
        "cpu": "7500m",
        "memory": "1536Gi",
        GPU: "8",
        "example.com/nic": "1",
    }
    assert data["tolerations"] == [
        {
            "key": "gpu",
            "operator": "Exists",
            "value": "",
            "effect": "NoExecute",
            "tolerationSeconds": 30,
        }
    ]
    assert RESOURCE_QUOTA.to_dict() == {
        "name": "cpu",
        "nominalQuota": "1500m",
        "borrowingLimit": "2",
        "lendingLimit": "1",
    }
    assert "borrowingLimit" not in ResourceQuota(name=GPU, nominal_quota=1).to_dict()


# --- tolerations --------------------------------------------------------------------

TOLERATION_CASES: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("Equal key and value", {"key": "k", "value": "v"}, {"key": "k", "value": "v"}, True),
    ("Equal value differs", {"key": "k", "value": "v"}, {"key": "k", "value": "w"}, False),
    ("Equal key differs", {"key": "k", "value": "v"}, {"key": "j", "value": "v"}, False),
    ("Equal empty values", {"key": "k"}, {"key": "k"}, True),
    ("Equal empty value vs set", {"key": "k"}, {"key": "k", "value": "v"}, False),
    ("Exists any value", {"key": "k", "operator": "Exists"}, {"key": "k", "value": "x"}, True),
    ("Exists key differs", {"key": "k", "operator": "Exists"}, {"key": "j"}, False),
    (
        "empty key Exists matches any key",
        {"operator": "Exists"},
        {"key": "any", "value": "x"},
        True,
    ),
    ("empty key Equal is no wildcard", {"value": "v"}, {"key": "k", "value": "w"}, False),
    (
        "empty key Exists, any effect",
        {"operator": "Exists"},
        {"key": "a", "effect": "NoExecute"},
        True,
    ),
    (
        "empty key Exists, effect must match",
        {"operator": "Exists", "effect": "NoSchedule"},
        {"key": "a", "effect": "NoExecute"},
        False,
    ),
    (
        "effect matches",
        {"key": "k", "value": "v", "effect": "NoExecute"},
        {"key": "k", "value": "v", "effect": "NoExecute"},
        True,
    ),
    (
        "effect differs",
        {"key": "k", "value": "v", "effect": "NoSchedule"},
        {"key": "k", "value": "v", "effect": "NoExecute"},
        False,
    ),
    (
        "empty effect matches every effect",
        {"key": "k", "operator": "Exists"},
        {"key": "k", "effect": "PreferNoSchedule"},
        True,
    ),
    (
        "Exists with effect, key differs",
        {"key": "k", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "j", "effect": "NoSchedule"},
        False,
    ),
]


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [c[1:] for c in TOLERATION_CASES],
    ids=[c[0] for c in TOLERATION_CASES],
)
def test_toleration_tolerates(
    toleration: dict[str, Any], taint: dict[str, Any], expected: bool
) -> None:
    tol = Toleration.model_validate(toleration)
    tnt = Taint.model_validate(taint)
    assert tol.tolerates(tnt) is expected
    assert tolerates([tol], [tnt]) is (expected or tnt.effect == "PreferNoSchedule")


NO_SCHEDULE = Taint(key="gpu", value="h100", effect="NoSchedule")
NO_EXECUTE = Taint(key="maint", effect="NoExecute")
PREFER = Taint(key="spot", value="yes", effect="PreferNoSchedule")
TOL_GPU = Toleration(key="gpu", value="h100")
TOL_MAINT = Toleration(key="maint", operator="Exists", effect="NoExecute")
TOL_ALL = Toleration(operator="Exists")

TOLERATES_CASES: list[tuple[str, list[Toleration], list[Taint], bool]] = [
    ("no taints", [], [], True),
    ("PreferNoSchedule is ignored", [], [PREFER], True),
    ("untolerated NoSchedule", [], [NO_SCHEDULE], False),
    ("untolerated NoExecute", [TOL_GPU], [NO_EXECUTE], False),
    ("tolerated NoSchedule", [TOL_GPU], [NO_SCHEDULE], True),
    ("one of two tolerated", [TOL_GPU], [NO_SCHEDULE, NO_EXECUTE], False),
    ("both tolerated", [TOL_MAINT, TOL_GPU], [NO_SCHEDULE, NO_EXECUTE, PREFER], True),
    ("Exists-all tolerates everything", [TOL_ALL], [NO_SCHEDULE, NO_EXECUTE], True),
    ("extra tolerations are harmless", [TOL_GPU, TOL_MAINT, TOL_ALL], [], True),
]


@pytest.mark.parametrize(
    ("tolerations", "taints", "expected"),
    [c[1:] for c in TOLERATES_CASES],
    ids=[c[0] for c in TOLERATES_CASES],
)
def test_tolerates(tolerations: list[Toleration], taints: list[Taint], expected: bool) -> None:
    assert tolerates(tolerations, taints) is expected
    assert tolerates(tuple(tolerations), taints) is expected


# --- job states ---------------------------------------------------------------------

SLURM_CODES: dict[JobState, str] = {
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


@pytest.mark.parametrize(("state", "code"), list(SLURM_CODES.items()), ids=str)
def test_job_state_slurm_code(state: JobState, code: str) -> None:
    assert state.code == code


def test_every_job_state_has_a_code() -> None:
    assert set(SLURM_CODES) == set(JobState)


@pytest.mark.parametrize(
    ("state", "finished"),
    [
        (JobState.PENDING, False),
        (JobState.ADMITTED, False),
        (JobState.RUNNING, False),
        (JobState.COMPLETING, False),
        (JobState.COMPLETED, True),
        (JobState.FAILED, True),
        (JobState.CANCELLED, True),
        (JobState.TIMEOUT, True),
        (JobState.PREEMPTED, True),
        (JobState.NODE_FAIL, True),
        (JobState.OUT_OF_MEMORY, True),
    ],
)
def test_job_state_finished(state: JobState, finished: bool) -> None:
    assert state.finished is finished


def test_job_state_values_are_slurm_names() -> None:
    assert JobState("NODE_FAIL") is JobState.NODE_FAIL
    assert str(JobState.OUT_OF_MEMORY) == "OUT_OF_MEMORY"


@pytest.mark.parametrize(
    "data",
    [{}, {"required": "rack", "preferred": "rack"}, {"waitS": 3}, {"required": "r", "waitS": 1}],
)
def test_a_topology_request_is_one_kind(data: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        TopologyRequest.model_validate(data)

"""Flavor assignment (Kueue's flavorassigner, §2.4 and §2.12.2).

Flavors are tried in the ClusterQueue's order. With the default
``whenCanBorrow: MayStopSearch`` the search stops at the first flavor that
fits, even by borrowing (Kueue scenario borrow-in-first-flavor-instead-of-
next-flavor); ``TryNextFlavor`` keeps looking for one that fits without
borrowing. A flavor whose quota is short or whose nodes cannot hold the gang
falls through to the next. Node selectors are matched against a flavor's own
label keys, and its node taints must be tolerated (by the pod set or by the
flavor's tolerations). A ClusterQueue naming a missing flavor is inactive.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from phalanx.engine import Delete, ReasonCode, Submit, Upsert
from phalanx.model import CPU, MEMORY, Job, PodSet, ResourceFlavor
from tests.engine.helpers import (
    GPU,
    admits,
    admitted_ids,
    cluster_queue,
    cq_groups,
    engine_with,
    flavor,
    gang,
    job,
    make_node,
    pendings,
    quota,
    step,
    taint,
    toleration,
)

A100 = flavor("a100", gpu="a100")
H100 = flavor("h100", gpu="h100")


def _pool(prefix: str, count: int = 2, gpus: int = 8) -> list[Any]:
    return [make_node(f"{prefix}{i}", gpus=gpus, labels={"gpu": prefix}) for i in range(count)]


NODES = [*_pool("a100"), *_pool("h100")]


@dataclass
class FlavorCase:
    objects: list[Any]
    job: Job
    flavor: str | None
    """The flavor the job is admitted in; None: it stays pending."""
    borrowing: bool = False
    code: ReasonCode | None = None
    extra_nodes: list[Any] = field(default_factory=list)
    nodes: list[Any] | None = None


FLAVOR_CASES: dict[str, FlavorCase] = {
    "first-flavor-in-cq-order": FlavorCase(
        objects=[cluster_queue("cq", {"a100": 8, "h100": 8})],
        job=job("cq", gpus=8, id=1),
        flavor="a100",
    ),
    "first-flavor-in-cq-order-reversed": FlavorCase(
        objects=[cluster_queue("cq", {"h100": 8, "a100": 8})],
        job=job("cq", gpus=8, id=1),
        flavor="h100",
    ),
    # Kueue borrow-in-first-flavor-instead-of-next-flavor.
    "may-stop-search-borrows-in-first-flavor": FlavorCase(
        objects=[
            cluster_queue("cq", {"a100": 0, "h100": 8}, cohort="co"),
            cluster_queue("lender", {"a100": 16, "h100": 0}, cohort="co"),
        ],
        job=job("cq", gpus=8, id=1),
        flavor="a100",
        borrowing=True,
    ),
    "explicit-may-stop-search-borrows-in-first-flavor": FlavorCase(
        objects=[
            cluster_queue(
                "cq",
                {"a100": 0, "h100": 8},
                cohort="co",
                flavorFungibility={"whenCanBorrow": "MayStopSearch"},
            ),
            cluster_queue("lender", {"a100": 16, "h100": 0}, cohort="co"),
        ],
        job=job("cq", gpus=8, id=1),
        flavor="a100",
        borrowing=True,
    ),
    "try-next-flavor-prefers-nominal-quota-of-second": FlavorCase(
        objects=[
            cluster_queue(
                "cq",
                {"a100": 0, "h100": 8},
                cohort="co",
                flavorFungibility={"whenCanBorrow": "TryNextFlavor"},
            ),
            cluster_queue("lender", {"a100": 16, "h100": 0}, cohort="co"),
        ],
        job=job("cq", gpus=8, id=1),
        flavor="h100",
        borrowing=False,
    ),
    # Kueue "borrow try next flavor, found the first flavor": the second can never fit.
    "try-next-flavor-falls-back-to-borrowing-in-first": FlavorCase(
        objects=[
            cluster_queue(
                "cq",
                {"a100": 0, "h100": 4},
                cohort="co",
                flavorFungibility={"whenCanBorrow": "TryNextFlavor"},
            ),
            cluster_queue("lender", {"a100": 16, "h100": 0}, cohort="co"),
        ],
        job=job("cq", gpus=8, id=1),
        flavor="a100",
        borrowing=True,
    ),
    "try-next-flavor-every-flavor-borrows-first-wins": FlavorCase(
        objects=[
            cluster_queue(
                "cq",
                {"a100": 0, "h100": 0},
                cohort="co",
                flavorFungibility={"whenCanBorrow": "TryNextFlavor"},
            ),
            cluster_queue("lender", {"a100": 16, "h100": 16}, cohort="co"),
        ],
        job=job("cq", gpus=8, id=1),
        flavor="a100",
        borrowing=True,
    ),
    "fallback-when-first-has-no-quota": FlavorCase(
        objects=[cluster_queue("cq", {"a100": 0, "h100": 8})],
        job=job("cq", gpus=8, id=1),
        flavor="h100",
    ),
    "fallback-when-first-quota-too-small": FlavorCase(
        objects=[cluster_queue("cq", {"a100": 4, "h100": 8})],
        job=job("cq", gpus=8, id=1),
        flavor="h100",
    ),
    "fallback-when-first-has-no-nodes": FlavorCase(
        objects=[cluster_queue("cq", {"a100": 8, "h100": 8})],
        job=job("cq", gpus=8, id=1),
        flavor="h100",
        nodes=_pool("h100"),
    ),
    "fallback-when-first-nodes-too-small": FlavorCase(
        objects=[cluster_queue("cq", {"a100": 16, "h100": 16})],
        job=job("cq", gpus=8, id=1),
        flavor="h100",
        nodes=[*_pool("a100", gpus=4), *_pool("h100")],
    ),
    "no-flavor-fits-quota": FlavorCase(
        objects=[cluster_queue("cq", {"a100": 4, "h100": 4})],
        job=job("cq", gpus=8, id=1),
        flavor=None,
        code=ReasonCode.EXCEEDS_MAX_QUOTA,
    ),
    "selector-picks-matching-flavor": FlavorCase(
        objects=[cluster_queue("cq", {"a100": 8, "h100": 8})],
        job=job("cq", gpus=8, id=1, node_selector={"gpu": "h100"}),
        flavor="h100",
    ),
    "selector-matching-no-flavor": FlavorCase(
        objects=[cluster_queue("cq", {"a100": 8, "h100": 8})],
        job=job("cq", gpus=8, id=1, node_selector={"gpu": "b200"}),
        flavor=None,
        code=ReasonCode.NO_MATCHING_FLAVOR,
    ),
    # Kueue "multiple flavors with different label keys, selector only uses flavor's own keys".
    "selector-only-checks-flavor-own-keys": FlavorCase(
        objects=[cluster_queue("cq", {"a100": 8, "h100": 8})],
        job=job("cq", gpus=8, id=1, node_selector={"gpu": "h100", "zone": "z1"}),
        flavor="h100",
        nodes=[
            *_pool("a100"),
            make_node("h100-z1", labels={"gpu": "h100", "zone": "z1"}),
        ],
    ),
}


@pytest.mark.parametrize("case", FLAVOR_CASES.values(), ids=FLAVOR_CASES.keys())
def test_flavor_choice(case: FlavorCase) -> None:
    nodes = case.nodes if case.nodes is not None else NODES
    engine = engine_with(A100, H100, *nodes, *case.objects, jobs=(case.job,))
    out = engine.cycle(0.0)
    if case.flavor is None:
        assert admitted_ids(out) == []
        assert pendings(out)[case.job.id].code is case.code
        return
    adm = admits(out)[case.job.id]
    assert adm.flavor == case.flavor
    assert adm.pod_sets[0].flavors == ((GPU, case.flavor),)
    assert adm.borrowing is case.borrowing
    # Every task landed on a node of that flavor.
    by_name = {n.name: n for n in nodes}
    for name in adm.nodes:
        assert by_name[name].labels["gpu"] == case.flavor


def test_fallback_to_second_flavor_once_first_fills_up() -> None:
    engine = engine_with(
        A100,
        H100,
        *NODES,
        cluster_queue("cq", {"a100": 8, "h100": 8}),
        jobs=(job("cq", gpus=8, id=1), job("cq", gpus=8, id=2), job("cq", gpus=8, id=3)),
    )
    out = engine.cycle(0.0)
    assert [admits(out)[i].flavor for i in (1, 2)] == ["a100", "h100"]
    reason = pendings(out)[3]
    assert reason.code is ReasonCode.INSUFFICIENT_QUOTA
    # The message accounts for every flavor tried.
    assert "flavor a100" in reason.message and "flavor h100" in reason.message


def test_quota_in_first_flavor_but_nodes_busy_falls_through() -> None:
    """Nodes of the first flavor are used by another queue: the second flavor is taken."""
    engine = engine_with(
        A100,
        H100,
        *NODES,
        cluster_queue("cq", {"a100": 16, "h100": 16}),
        cluster_queue("other", {"a100": 16}),
        jobs=(job("other", gpus=8, count=2, id=1),),
    )
    assert admitted_ids(engine.cycle(0.0)) == [1]
    out = step(engine, 1.0, Submit(job("cq", gpus=8, id=2)))
    assert admits(out)[2].flavor == "h100"


# --------------------------------------------------------------------------- taints


SPOT = ResourceFlavor(
    name="spot", node_labels={"pool": "spot"}, node_taints=[taint("spot", "true")]
)
SPOT_TOLERATING = ResourceFlavor(
    name="spot",
    node_labels={"pool": "spot"},
    node_taints=[taint("spot", "true")],
    tolerations=[toleration("spot", "true")],
)
ON_DEMAND = flavor("on-demand", pool="on-demand")


def _taint_nodes() -> list[Any]:
    return [
        make_node("spot0", labels={"pool": "spot"}, taints=(taint("spot", "true"),)),
        make_node("od0", labels={"pool": "on-demand"}),
    ]


@pytest.mark.parametrize(
    ("flavors", "tolerations", "expected"),
    [
        pytest.param([SPOT, ON_DEMAND], [], "on-demand", id="untolerated-skipped"),
        pytest.param(
            [SPOT, ON_DEMAND], [toleration("spot")], "spot", id="exists-toleration-first-flavor"
        ),
        pytest.param(
            [SPOT, ON_DEMAND], [toleration("spot", "true")], "spot", id="equal-toleration"
        ),
        pytest.param(
            [SPOT, ON_DEMAND], [toleration("spot", "false")], "on-demand", id="wrong-value"
        ),
        pytest.param([SPOT], [], None, id="only-tainted-flavor"),
        pytest.param([SPOT_TOLERATING, ON_DEMAND], [], "spot", id="flavor-tolerations-count"),
    ],
)
def test_flavor_node_taints_need_tolerations(
    flavors: list[ResourceFlavor], tolerations: list[Any], expected: str | None
) -> None:
    names = {f.name: 8 for f in flavors}
    engine = engine_with(
        *flavors,
        *_taint_nodes(),
        cluster_queue("cq", names),
        jobs=(job("cq", gpus=4, id=1, tolerations=tolerations),),
    )
    out = engine.cycle(0.0)
    if expected is None:
        reason = pendings(out)[1]
        assert reason.code is ReasonCode.NO_MATCHING_FLAVOR
        assert "flavor spot" in reason.message
    else:
        adm = admits(out)[1]
        assert adm.flavor == expected
        assert adm.nodes == [f"{'spot' if expected == 'spot' else 'od'}0"]


def test_prefer_no_schedule_taint_needs_no_toleration() -> None:
    soft = ResourceFlavor(name="soft", node_taints=[taint("soft", "x", effect="PreferNoSchedule")])
    engine = engine_with(
        soft,
        make_node("n0", taints=(taint("soft", "x", effect="PreferNoSchedule"),)),
        cluster_queue("cq", {"soft": 8}),
        jobs=(job("cq", gpus=4, id=1),),
    )
    assert admits(engine.cycle(0.0))[1].flavor == "soft"


# --------------------------------------------------------------------------- inactive


def test_missing_flavor_makes_cluster_queue_inactive() -> None:
    engine = engine_with(
        *NODES,
        cluster_queue("cq", {"a100": 8}),
        jobs=(job("cq", gpus=8, id=1),),
    )
    out = engine.cycle(0.0)
    assert admitted_ids(out) == []
    reason = engine.explain(1)
    assert reason is not None
    assert reason.code is ReasonCode.INACTIVE
    assert "a100" in reason.message and "cq" in reason.message
    assert reason.details["flavor"] == "a100"
    # The decision stream says so too.
    assert pendings(out)[1] == reason
    # Creating the flavor activates the queue.
    out = step(engine, 1.0, Upsert(A100))
    assert admits(out)[1].flavor == "a100"


def test_one_missing_flavor_of_several_makes_queue_inactive() -> None:
    engine = engine_with(
        A100,
        *NODES,
        cluster_queue("cq", {"a100": 8, "h100": 8}),
        jobs=(job("cq", gpus=8, id=1),),
    )
    out = engine.cycle(0.0)
    assert admitted_ids(out) == []
    reason = engine.explain(1)
    assert reason is not None and reason.code is ReasonCode.INACTIVE
    assert reason.details["flavor"] == "h100"


def test_deleting_a_flavor_makes_queue_inactive() -> None:
    engine = engine_with(
        A100,
        *NODES,
        cluster_queue("cq", {"a100": 16}),
        jobs=(job("cq", gpus=8, id=1),),
    )
    assert admitted_ids(engine.cycle(0.0)) == [1]
    out = step(engine, 1.0, Delete("ResourceFlavor", "a100"), Submit(job("cq", gpus=8, id=2)))
    assert admitted_ids(out) == []
    assert engine.explain(2).code is ReasonCode.INACTIVE  # type: ignore[union-attr]


# --------------------------------------------------------------------------- resource groups


def test_each_resource_group_gets_its_own_flavor() -> None:
    cpu_flavor = flavor("cpu-pool")
    cq = cq_groups(
        "cq",
        [
            ([CPU, MEMORY], {"cpu-pool": [quota(CPU, 64), quota(MEMORY, "512Gi")]}),
            ([GPU], {"a100": [quota(GPU, 8)], "h100": [quota(GPU, 16)]}),
        ],
    )
    engine = engine_with(
        cpu_flavor,
        A100,
        H100,
        *NODES,
        cq,
        jobs=(job("cq", gpus=8, count=2, id=1, requests={CPU: "8", MEMORY: "64Gi"}),),
    )
    adm = admits(engine.cycle(0.0))[1]
    assert dict(adm.pod_sets[0].flavors) == {CPU: "cpu-pool", MEMORY: "cpu-pool", GPU: "h100"}


def test_all_resources_of_a_group_share_one_flavor() -> None:
    """Kueue "multiple resources in a group": memory short in flavor 1 moves cpu too."""
    small = flavor("small")
    big = flavor("big")
    cq = cq_groups(
        "cq",
        [
            (
                [CPU, MEMORY, GPU],
                {
                    "small": [quota(CPU, 64), quota(MEMORY, "8Gi"), quota(GPU, 8)],
                    "big": [quota(CPU, 64), quota(MEMORY, "512Gi"), quota(GPU, 8)],
                },
            )
        ],
    )
    engine = engine_with(
        small,
        big,
        make_node("n0"),
        cq,
        jobs=(job("cq", gpus=1, id=1, requests={CPU: "1", MEMORY: "16Gi"}),),
    )
    adm = admits(engine.cycle(0.0))[1]
    assert dict(adm.pod_sets[0].flavors) == {CPU: "big", MEMORY: "big", GPU: "big"}


def test_pod_sets_accumulate_usage_in_a_flavor() -> None:
    """Kueue ``val`` = earlier pod sets' usage on the flavor + this pod set's request."""
    cq = cluster_queue("cq", {"a100": 8, "h100": 8})
    j = gang(
        "cq",
        1,
        [
            PodSet(name="first", count=1, requests={GPU: 6}),
            PodSet(name="second", count=1, requests={GPU: 6}),
        ],
    )
    engine = engine_with(A100, H100, *NODES, cq, jobs=(j,))
    adm = admits(engine.cycle(0.0))[1]
    assert [dict(p.flavors)[GPU] for p in adm.pod_sets] == ["a100", "h100"]

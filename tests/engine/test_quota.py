"""Scenario tables and properties for the Kueue quota tree (phalanx.engine.cache.quota).

Expected values follow Kueue's ``pkg/cache/scheduler/resource_node.go`` semantics
(reference: /work/shared/reference/kueue.md section 2.1). The ``KUEUE_AVAILABLE``
table re-expresses Kueue's own ``TestAvailable`` (``resource_test.go``) and
``LENDING_SNAPSHOT`` its ``TestSnapshotAddRemoveWorkloadWithLendingLimit``.
The hypothesis properties check incremental usage against ``rebuild()``, and
``available`` / ``potential_available`` against an independent brute-force oracle
that re-derives cohort usage from the formulas and tests every limit on the path.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phalanx.engine.cache.cluster import ClusterCache
from phalanx.engine.cache.quota import (
    FlavorResource,
    QuotaNode,
    Shortage,
    available,
    find_shortage,
    potential_available,
)
from phalanx.model import ClusterQueue, Cohort, ResourceFlavor

RED: FlavorResource = ("red", "cpu")
BLUE: FlavorResource = ("blue", "cpu")
FR: FlavorResource = ("f", "r")


# --- hand-built trees ---------------------------------------------------------------


def qn(
    name: str,
    parent: QuotaNode | None = None,
    *,
    cq: bool = True,
    nominal: int | None = 0,
    borrowing: int | None = None,
    lending: int | None = None,
    fr: FlavorResource = FR,
) -> QuotaNode:
    """A QuotaNode with one flavor-resource quota, linked under ``parent``."""
    node = QuotaNode(name, is_cluster_queue=cq)
    if nominal is not None:
        node.nominal[fr] = nominal
    if borrowing is not None:
        node.borrowing_limit[fr] = borrowing
    if lending is not None:
        node.lending_limit[fr] = lending
    if parent is not None:
        node.parent = parent
        parent.children.append(node)
    return node


def walk(node: QuotaNode) -> Iterator[QuotaNode]:
    yield node
    for child in node.children:
        yield from walk(child)


def by_name(root: QuotaNode) -> dict[str, QuotaNode]:
    return {n.name: n for n in walk(root)}


def usages(nodes: Mapping[str, QuotaNode], fr: FlavorResource = FR) -> dict[str, int]:
    return {name: n.usage.get(fr, 0) for name, n in nodes.items()}


def free(node: QuotaNode, fr: FlavorResource = FR) -> int:
    """ClusterQueueSnapshot.Available: ``available`` clamped at 0."""
    return max(0, available(node, fr))


# Each scenario: a builder returning the root, the CQ usage to add, and the expected
# available (clamped) / potential per CQ, and the expected usage of every node.
@dataclass(frozen=True)
class Scenario:
    build: Any
    add: dict[str, int]
    want_available: dict[str, int]
    want_potential: dict[str, int]
    want_usage: dict[str, int]


def _nominal_only() -> QuotaNode:
    return qn("cq", nominal=10)


def _unlimited_borrowing() -> QuotaNode:
    co = qn("co", cq=False, nominal=None)
    qn("cq1", co, nominal=10)
    qn("cq2", co, nominal=10)
    return co


def _borrowing_limit() -> QuotaNode:
    co = qn("co", cq=False, nominal=None)
    qn("cq1", co, nominal=10, borrowing=3)
    qn("cq2", co, nominal=10)
    return co


def _borrowing_limit_zero() -> QuotaNode:
    co = qn("co", cq=False, nominal=None)
    qn("cq1", co, nominal=10, borrowing=0)
    qn("cq2", co, nominal=10)
    return co


def _lending_limit() -> QuotaNode:
    co = qn("co", cq=False, nominal=None)
    qn("cq1", co, nominal=10, lending=4)  # keeps 6 private
    qn("cq2", co, nominal=10)
    return co


def _lending_and_borrowing() -> QuotaNode:
    co = qn("co", cq=False, nominal=None)
    qn("cq1", co, nominal=10, lending=4, borrowing=2)
    qn("cq2", co, nominal=10)
    return co


def _cohort_own_quota() -> QuotaNode:
    co = qn("co", cq=False, nominal=5)
    qn("cq1", co, nominal=10)
    qn("cq2", co, nominal=0)
    return co


def _nested() -> QuotaNode:
    #        root(0)
    #       /       \
    #   left(5, BL 2) cq3(10)
    #    /      \
    # cq1(10)  cq2(10, LL 0)
    root = qn("root", cq=False, nominal=0)
    left = qn("left", root, cq=False, nominal=5, borrowing=2)
    qn("cq1", left, nominal=10)
    qn("cq2", left, nominal=10, lending=0)
    qn("cq3", root, nominal=10)
    return root


def _nested_lending_cohort() -> QuotaNode:
    #        root(0)
    #       /       \
    #   left(4, LL 3)  cq3(0)
    #    /      \
    # cq1(10)  cq2(6, LL 2)
    root = qn("root", cq=False, nominal=0)
    left = qn("left", root, cq=False, nominal=4, lending=3)
    qn("cq1", left, nominal=10)
    qn("cq2", left, nominal=6, lending=2)
    qn("cq3", root, nominal=0)
    return root


SCENARIOS: dict[str, Scenario] = {
    "nominal only": Scenario(_nominal_only, {"cq": 4}, {"cq": 6}, {"cq": 10}, {"cq": 4}),
    "nominal only, in debt": Scenario(_nominal_only, {"cq": 12}, {"cq": 0}, {"cq": 10}, {"cq": 12}),
    # cq1 borrows 5 of cq2's unused quota: cq2 can only get 5 back without preemption.
    "borrowing unlimited": Scenario(
        _unlimited_borrowing,
        {"cq1": 15},
        {"cq1": 5, "cq2": 5},
        {"cq1": 20, "cq2": 20},
        {"co": 15, "cq1": 15, "cq2": 0},
    ),
    # cq1 may use nominal 10 + borrowingLimit 3; it has used 12, so 1 more.
    "borrowingLimit caps": Scenario(
        _borrowing_limit,
        {"cq1": 12},
        {"cq1": 1, "cq2": 8},
        {"cq1": 13, "cq2": 20},
        {"co": 12, "cq1": 12, "cq2": 0},
    ),
    "borrowingLimit 0 forbids borrowing but lends": Scenario(
        _borrowing_limit_zero,
        {"cq2": 14},
        {"cq1": 6, "cq2": 6},
        {"cq1": 10, "cq2": 20},
        {"co": 14, "cq1": 0, "cq2": 14},
    ),
    # cq1 keeps 6 private: its first 6 of usage never reach the cohort, and cq2 can
    # only borrow the 4 it lends.
    "lendingLimit, usage within local quota": Scenario(
        _lending_limit,
        {"cq1": 5},
        {"cq1": 15, "cq2": 14},
        {"cq1": 20, "cq2": 14},
        {"co": 0, "cq1": 5, "cq2": 0},
    ),
    "lendingLimit, usage above local quota": Scenario(
        _lending_limit,
        {"cq1": 8, "cq2": 11},
        {"cq1": 1, "cq2": 1},
        {"cq1": 20, "cq2": 14},
        {"co": 13, "cq1": 8, "cq2": 11},
    ),
    "lendingLimit, borrower takes all the lent quota": Scenario(
        _lending_limit,
        {"cq2": 14},
        {"cq1": 6, "cq2": 0},
        {"cq1": 20, "cq2": 14},
        {"co": 14, "cq1": 0, "cq2": 14},
    ),
    # stored 4 + borrowingLimit 2: at most 6 in the cohort, on top of 6 private.
    "lendingLimit and borrowingLimit": Scenario(
        _lending_and_borrowing,
        {"cq1": 9},
        {"cq1": 3, "cq2": 11},
        {"cq1": 12, "cq2": 14},
        {"co": 3, "cq1": 9, "cq2": 0},
    ),
    "cohort with its own quota": Scenario(
        _cohort_own_quota,
        {"cq2": 7},
        {"cq1": 8, "cq2": 8},
        {"cq1": 15, "cq2": 15},
        {"co": 7, "cq1": 0, "cq2": 7},
    ),
    # left: subtree 5 + 10 + 0 = 15 (cq2 keeps all 10 private); root: 15 + 10 = 25.
    # left may take at most subtree 15 + borrowingLimit 2 = 17 from root.
    "nested cohorts, no usage": Scenario(
        _nested,
        {},
        {"cq1": 17, "cq2": 27, "cq3": 25},
        {"cq1": 17, "cq2": 27, "cq3": 25},
        {"root": 0, "left": 0, "cq1": 0, "cq2": 0, "cq3": 0},
    ),
    "nested cohorts, left borrows from root": Scenario(
        _nested,
        {"cq1": 16, "cq2": 4, "cq3": 3},
        {"cq1": 1, "cq2": 7, "cq3": 6},
        {"cq1": 17, "cq2": 27, "cq3": 25},
        {"root": 19, "left": 16, "cq1": 16, "cq2": 4, "cq3": 3},
    ),
    # cq2 local 4, lends 2; left: subtree 4 + 10 + 2 = 16, local 13, lends 3;
    # root: 0 + 3 + 0 = 3.
    # cq2 pushes 1 into left (usage 11, 2 of its 13 private still free); cq3 uses 1 of
    # the 3 root has; cq1 may use left's 2 free plus root's 2.
    "nested cohort with lendingLimit": Scenario(
        _nested_lending_cohort,
        {"cq1": 10, "cq2": 5, "cq3": 1},
        {"cq1": 4, "cq2": 4, "cq3": 2},
        {"cq1": 16, "cq2": 20, "cq3": 3},
        {"root": 1, "left": 11, "cq1": 10, "cq2": 5, "cq3": 1},
    ),
    # left's usage goes 2 past its private 13 and lands in root.
    "nested cohort with lendingLimit, spilling into root": Scenario(
        _nested_lending_cohort,
        {"cq1": 14, "cq2": 5},
        {"cq1": 1, "cq2": 1, "cq3": 1},
        {"cq1": 16, "cq2": 20, "cq3": 3},
        {"root": 2, "left": 15, "cq1": 14, "cq2": 5, "cq3": 0},
    ),
}


@pytest.mark.parametrize("scenario", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_quota_scenarios(scenario: Scenario) -> None:
    root = scenario.build()
    root.rebuild()
    nodes = by_name(root)
    cqs = {n for n, node in nodes.items() if node.is_cluster_queue}
    assert set(scenario.want_available) == cqs
    # On an empty tree, available == potential.
    assert {n: free(nodes[n]) for n in cqs} == scenario.want_potential
    for name, amount in scenario.add.items():
        nodes[name].add_usage(FR, amount)
    assert usages(nodes) == scenario.want_usage
    assert {n: free(nodes[n]) for n in cqs} == scenario.want_available
    assert {n: potential_available(nodes[n], FR) for n in cqs} == scenario.want_potential
    for name, amount in scenario.add.items():
        nodes[name].remove_usage(FR, amount)
    assert set(usages(nodes).values()) == {0}
    assert {n: free(nodes[n]) for n in cqs} == scenario.want_potential


def test_available_is_negative_in_debt() -> None:
    co = _unlimited_borrowing()
    co.rebuild()
    nodes = by_name(co)
    nodes["cq1"].add_usage(FR, 23)
    assert available(nodes["cq1"], FR) == -3
    assert available(nodes["cq2"], FR) == -3
    assert available(co, FR) == -3


def test_subtree_and_local_quota() -> None:
    root = _nested_lending_cohort()
    root.rebuild()
    nodes = by_name(root)
    assert {n: node.subtree.get(FR, 0) for n, node in nodes.items()} == {
        "root": 3,
        "left": 16,
        "cq1": 10,
        "cq2": 6,
        "cq3": 0,
    }
    assert {n: node.local(FR) for n, node in nodes.items()} == {
        "root": 0,
        "left": 13,
        "cq1": 0,
        "cq2": 4,
        "cq3": 0,
    }


def test_lending_limit_above_subtree_keeps_nothing_private() -> None:
    # A cohort may set lendingLimit above its own nominal quota; local = max(0, ...).
    root = qn("root", cq=False, nominal=0)
    mid = qn("mid", root, cq=False, nominal=0, lending=50)
    cq = qn("cq", mid, nominal=10)
    root.rebuild()
    assert mid.local(FR) == 0
    assert root.subtree[FR] == 10
    cq.add_usage(FR, 4)
    assert (mid.usage[FR], root.usage[FR]) == (4, 4)


def test_cluster_queue_without_cohort_is_its_own_root() -> None:
    cq = qn("cq", nominal=8)
    cq.rebuild()
    assert cq.root() is cq
    assert list(cq.ancestors()) == []
    cq.add_usage(FR, 3)
    assert (available(cq, FR), potential_available(cq, FR)) == (5, 8)
    assert cq.borrowing_height(FR, 100) == 0


def test_missing_flavor_resource_has_no_quota() -> None:
    co = _unlimited_borrowing()
    co.rebuild()
    other: FlavorResource = ("other", "r")
    assert available(by_name(co)["cq1"], other) == 0
    assert potential_available(by_name(co)["cq1"], other) == 0


# --- Kueue's TestAvailable, via ClusterCache and the API models ----------------------


@dataclass(frozen=True)
class Q:
    """cpu quota of one flavor: nominal, borrowingLimit, lendingLimit (quantities)."""

    nominal: str
    borrowing: str | None = None
    lending: str | None = None


def _groups(flavors: Mapping[str, Q]) -> list[dict[str, Any]]:
    if not flavors:
        return []
    resources = []
    for name, q in flavors.items():
        rq: dict[str, Any] = {"name": "cpu", "nominalQuota": q.nominal}
        if q.borrowing is not None:
            rq["borrowingLimit"] = q.borrowing
        if q.lending is not None:
            rq["lendingLimit"] = q.lending
        resources.append({"name": name, "resources": [rq]})
    return [{"coveredResources": ["cpu"], "flavors": resources}]


def cq_model(name: str, cohort: str | None, flavors: Mapping[str, Q]) -> ClusterQueue:
    data: dict[str, Any] = {"name": name, "resourceGroups": _groups(flavors)}
    if cohort:
        data["cohortName"] = cohort
    return ClusterQueue.model_validate(data)


def cohort_model(name: str, parent: str | None, flavors: Mapping[str, Q]) -> Cohort:
    data: dict[str, Any] = {"name": name, "resourceGroups": _groups(flavors)}
    if parent:
        data["parentName"] = parent
    return Cohort.model_validate(data)


def build_cache(cohorts: list[Cohort], cqs: list[ClusterQueue]) -> ClusterCache:
    cache = ClusterCache()
    for flavor in ("red", "blue"):
        cache.upsert_flavor(ResourceFlavor(name=flavor))
    for cohort in cohorts:
        cache.cohorts[cohort.name] = cohort
    for cq in cqs:
        cache.upsert_cluster_queue(cq)
    cache.rebuild_quota()
    return cache


FrMap = dict[FlavorResource, int]


@dataclass(frozen=True)
class KueueCase:
    cohorts: list[Cohort]
    cqs: list[ClusterQueue]
    usage: dict[str, FrMap]
    want_available: dict[str, FrMap]
    want_potential: dict[str, FrMap]


KUEUE_AVAILABLE: dict[str, KueueCase] = {
    "base cqs": KueueCase(
        cohorts=[],
        cqs=[
            cq_model("cq1", None, {"red": Q("0")}),
            cq_model("cq2", None, {"red": Q("5"), "blue": Q("10")}),
        ],
        usage={"cq1": {RED: 1_000}, "cq2": {RED: 2_500, BLUE: 1_000}},
        want_available={"cq1": {RED: 0}, "cq2": {RED: 2_500, BLUE: 9_000}},
        want_potential={"cq1": {RED: 0}, "cq2": {RED: 5_000, BLUE: 10_000}},
    ),
    "cqs with cohort": KueueCase(
        cohorts=[cohort_model("cohort", None, {"red": Q("10")})],
        cqs=[
            cq_model("cq1", "cohort", {"red": Q("10")}),
            cq_model("cq2", "cohort", {"red": Q("10", lending="9")}),
        ],
        usage={"cq1": {RED: 1_000}, "cq2": {RED: 500}},
        want_available={"cq1": {RED: 28_000}, "cq2": {RED: 28_500}},
        want_potential={"cq1": {RED: 29_000}, "cq2": {RED: 30_000}},
    ),
    "cq borrows from cohort": KueueCase(
        cohorts=[cohort_model("cohort", None, {"red": Q("10")})],
        cqs=[cq_model("cq1", "cohort", {"red": Q("10")})],
        usage={"cq1": {RED: 11_000}},
        want_available={"cq1": {RED: 9_000}},
        want_potential={"cq1": {RED: 20_000}},
    ),
    # cq2 neither borrows nor lends, yet cq1's over-admission shows up as 0 available
    # for it too, so (red, cpu) is not over-admitted further within the tree.
    "cq oversubscription spills into cohort": KueueCase(
        cohorts=[cohort_model("cohort", None, {"red": Q("10")})],
        cqs=[
            cq_model("cq1", "cohort", {"red": Q("10")}),
            cq_model("cq2", "cohort", {"red": Q("10", borrowing="0", lending="0")}),
        ],
        usage={"cq1": {RED: 31_000}},
        want_available={"cq1": {RED: 0}, "cq2": {RED: 0}},
        want_potential={"cq1": {RED: 20_000}, "cq2": {RED: 10_000}},
    ),
    # cohort has 40 in total; cq1 reaches 35 (cq3 keeps 5), cq2 12 (borrowingLimit),
    # cq3 all 40.
    "lending and borrowing limits respected": KueueCase(
        cohorts=[cohort_model("cohort", None, {"red": Q("10")})],
        cqs=[
            cq_model("cq1", "cohort", {"red": Q("10")}),
            cq_model("cq2", "cohort", {"red": Q("10", borrowing="2")}),
            cq_model("cq3", "cohort", {"red": Q("10", lending="5")}),
        ],
        usage={"cq1": {RED: 20_000}, "cq2": {RED: 10_000}, "cq3": {RED: 6_000}},
        want_available={"cq1": {RED: 4_000}, "cq2": {RED: 2_000}, "cq3": {RED: 4_000}},
        want_potential={"cq1": {RED: 35_000}, "cq2": {RED: 12_000}, "cq3": {RED: 40_000}},
    ),
    "hierarchical cohort": KueueCase(
        cohorts=[
            cohort_model("root", None, {}),
            cohort_model("left", "root", {"red": Q("10")}),
            cohort_model("right", "root", {"red": Q("10")}),
        ],
        cqs=[
            cq_model("cq1", "left", {"red": Q("10")}),
            cq_model("cq2", "right", {"red": Q("10", lending="0")}),
        ],
        usage={"cq1": {RED: 10_000}, "cq2": {RED: 5_000}},
        want_available={"cq1": {RED: 20_000}, "cq2": {RED: 25_000}},
        want_potential={"cq1": {RED: 30_000}, "cq2": {RED: 40_000}},
    ),
    "hierarchical cohort respects borrowing limit": KueueCase(
        cohorts=[
            cohort_model("root", None, {}),
            cohort_model("left", "root", {"red": Q("10", borrowing="5")}),
            cohort_model("right", "root", {"red": Q("10")}),
        ],
        cqs=[
            cq_model("left-cq1", "left", {"red": Q("10")}),
            cq_model("left-cq2", "left", {"red": Q("10", borrowing="5")}),
            cq_model("right-cq", "right", {"red": Q("10")}),
        ],
        usage={},
        want_available={
            "left-cq1": {RED: 35_000},
            "left-cq2": {RED: 15_000},
            "right-cq": {RED: 50_000},
        },
        want_potential={
            "left-cq1": {RED: 35_000},
            "left-cq2": {RED: 15_000},
            "right-cq": {RED: 50_000},
        },
    ),
    "hierarchical cohort respects lending limit": KueueCase(
        cohorts=[
            cohort_model("root", None, {}),
            cohort_model("left", "root", {"red": Q("0", lending="5")}),
            cohort_model("right", "root", {"red": Q("0")}),
        ],
        cqs=[
            cq_model("left-cq1", "left", {"red": Q("10", lending="5")}),
            cq_model("left-cq2", "left", {"red": Q("10")}),
            cq_model("right-cq", "right", {"red": Q("0")}),
            cq_model("root-cq", "root", {"red": Q("0")}),
        ],
        usage={},
        want_available={
            "left-cq1": {RED: 20_000},
            "left-cq2": {RED: 15_000},
            "right-cq": {RED: 5_000},
            "root-cq": {RED: 5_000},
        },
        want_potential={
            "left-cq1": {RED: 20_000},
            "left-cq2": {RED: 15_000},
            "right-cq": {RED: 5_000},
            "root-cq": {RED: 5_000},
        },
    ),
}


def _measure(cache: ClusterCache, fn: Any) -> dict[str, FrMap]:
    return {
        name: {fr: fn(info.node, fr) for fr in info.node.nominal}
        for name, info in cache.cluster_queues.items()
    }


@pytest.mark.parametrize("case", KUEUE_AVAILABLE.values(), ids=KUEUE_AVAILABLE.keys())
def test_kueue_available_table(case: KueueCase) -> None:
    cache = build_cache(case.cohorts, case.cqs)
    assert _measure(cache, lambda n, fr: max(0, available(n, fr))) == case.want_potential
    assert _measure(cache, potential_available) == case.want_potential

    for name, usage in case.usage.items():
        for fr, amount in usage.items():
            cache.cluster_queues[name].node.add_usage(fr, amount)
    assert _measure(cache, lambda n, fr: max(0, available(n, fr))) == case.want_available
    assert _measure(cache, potential_available) == case.want_potential

    for name, usage in case.usage.items():
        for fr, amount in usage.items():
            cache.cluster_queues[name].node.remove_usage(fr, amount)
    assert _measure(cache, lambda n, fr: max(0, available(n, fr))) == case.want_potential
    assert _measure(cache, potential_available) == case.want_potential
    for node in [*cache.cohort_nodes.values(), *(i.node for i in cache.cluster_queues.values())]:
        assert set(node.usage.values()) <= {0}


# --- Kueue's lending-limit snapshot: add/remove and rebuild --------------------------

LEND_WORKLOADS = {"a1": ("lend-a", 1_000), "a2": ("lend-a", 9_000), "a3": ("lend-a", 6_000)}
LEND_WORKLOADS["b1"] = ("lend-b", 4_000)
DEFAULT_CPU: FlavorResource = ("default", "cpu")


def _lend_cache() -> ClusterCache:
    cache = ClusterCache()
    cache.upsert_flavor(ResourceFlavor(name="default"))
    for name, lending in (("lend-a", "4"), ("lend-b", "6")):
        cache.upsert_cluster_queue(
            ClusterQueue.model_validate(
                {
                    "name": name,
                    "cohortName": "lend",
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [
                                {
                                    "name": "default",
                                    "resources": [
                                        {
                                            "name": "cpu",
                                            "nominalQuota": "10",
                                            "lendingLimit": lending,
                                        }
                                    ],
                                }
                            ],
                        }
                    ],
                }
            )
        )
    for cq, amount in LEND_WORKLOADS.values():
        cache.cluster_queues[cq].node.add_usage(DEFAULT_CPU, amount)
    return cache


def _lend_usage(cache: ClusterCache) -> dict[str, int]:
    got = {n: i.node.usage.get(DEFAULT_CPU, 0) for n, i in cache.cluster_queues.items()}
    got["lend"] = cache.cohort_nodes["lend"].usage.get(DEFAULT_CPU, 0)
    return got


LENDING_SNAPSHOT: dict[str, tuple[list[str], list[str], dict[str, int]]] = {
    "initial": ([], [], {"lend-a": 16_000, "lend-b": 4_000, "lend": 10_000}),
    "remove all then add all": (
        ["a1", "a2", "a3", "b1"],
        ["a1", "a2", "a3", "b1"],
        {"lend-a": 16_000, "lend-b": 4_000, "lend": 10_000},
    ),
    "remove all": (["a1", "a2", "a3", "b1"], [], {"lend-a": 0, "lend-b": 0, "lend": 0}),
    "remove, still above local quota": (
        ["a2"],
        [],
        {"lend-a": 7_000, "lend-b": 4_000, "lend": 1_000},
    ),
    "remove, down to local quota": (
        ["a1", "a2"],
        [],
        {"lend-a": 6_000, "lend-b": 4_000, "lend": 0},
    ),
    "remove, below local quota": (
        ["a2", "a3"],
        [],
        {"lend-a": 1_000, "lend-b": 4_000, "lend": 0},
    ),
    "remove in another order, add back": (
        ["b1", "a3", "a1"],
        ["a3", "b1"],
        {"lend-a": 15_000, "lend-b": 4_000, "lend": 9_000},
    ),
}


@pytest.mark.parametrize(
    ("remove", "add", "want"), LENDING_SNAPSHOT.values(), ids=LENDING_SNAPSHOT.keys()
)
def test_lending_limit_add_remove(remove: list[str], add: list[str], want: dict[str, int]) -> None:
    cache = _lend_cache()
    for key in remove:
        cq, amount = LEND_WORKLOADS[key]
        cache.cluster_queues[cq].node.remove_usage(DEFAULT_CPU, amount)
    for key in add:
        cq, amount = LEND_WORKLOADS[key]
        cache.cluster_queues[cq].node.add_usage(DEFAULT_CPU, amount)
    assert _lend_usage(cache) == want
    # The cohort's SubtreeQuota is what the CQs lend: 4 + 6.
    assert cache.cohort_nodes["lend"].subtree[DEFAULT_CPU] == 10_000
    # A full rebuild derives the same cohort usage from the ClusterQueues.
    cache.rebuild_quota()
    assert _lend_usage(cache) == want


def test_quota_change_rebuild_recomputes_cohort_usage() -> None:
    cache = _lend_cache()
    assert _lend_usage(cache)["lend"] == 10_000
    # lend-a now lends everything: nothing private, all 16 of its usage reaches the cohort.
    cache.upsert_cluster_queue(cq_model("lend-a", "lend", {"default": Q("10", lending="10")}))
    assert _lend_usage(cache) == {"lend-a": 16_000, "lend-b": 4_000, "lend": 16_000}
    assert cache.cohort_nodes["lend"].subtree[DEFAULT_CPU] == 16_000


# --- add/remove walk ------------------------------------------------------------------


class CountingDict(dict[FlavorResource, int]):
    """A usage dict that counts reads and writes."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.touched = 0

    def get(self, key: Any, default: Any = None) -> Any:
        self.touched += 1
        return super().get(key, default)

    def __getitem__(self, key: Any) -> int:
        self.touched += 1
        return super().__getitem__(key)

    def __setitem__(self, key: Any, value: int) -> None:
        self.touched += 1
        super().__setitem__(key, value)


def _wide_deep_tree(depth: int, width: int) -> tuple[QuotaNode, QuotaNode, list[QuotaNode]]:
    """A chain of ``depth`` cohorts ending in one CQ, every cohort with ``width`` siblings."""
    root = qn("c0", cq=False, nominal=100)
    chain = [root]
    others: list[QuotaNode] = []
    for d in range(1, depth):
        chain.append(qn(f"c{d}", chain[-1], cq=False, nominal=1))
    for d, cohort in enumerate(chain):
        for w in range(width):
            others.append(qn(f"s{d}-{w}", cohort, nominal=5))
    leaf = qn("leaf", chain[-1], nominal=2)
    root.rebuild()
    for node in walk(root):
        node.usage = CountingDict(node.usage)
    return root, leaf, others


@pytest.mark.parametrize("depth", [1, 3, 8])
def test_add_remove_walk_only_the_path(depth: int) -> None:
    root, leaf, others = _wide_deep_tree(depth, width=20)
    path = [leaf, *leaf.ancestors()]
    assert path[-1] is root
    assert len(path) == depth + 1
    leaf.add_usage(FR, 7)
    leaf.remove_usage(FR, 7)
    leaf.add_usage(FR, 3)
    for node in others:
        assert isinstance(node.usage, CountingDict)
        assert node.usage.touched == 0, node.name
    for node in path:
        assert isinstance(node.usage, CountingDict)
        # a constant number of dict operations per node per call
        assert 0 < node.usage.touched <= 3 * 4, node.name
        assert node.usage[FR] == 3


def test_add_usage_absorbed_by_local_quota_stops_early() -> None:
    co = qn("co", cq=False, nominal=None)
    cq = qn("cq", co, nominal=10, lending=2)  # local 8
    co.rebuild()
    co.usage = CountingDict()
    cq.add_usage(FR, 8)
    cq.remove_usage(FR, 5)
    assert co.usage.touched == 0
    cq.add_usage(FR, 6)  # usage 9: 1 above local
    assert co.usage[FR] == 1


INVERSE_CASES: list[tuple[str, Any, list[tuple[str, int]], tuple[str, int]]] = [
    ("within nominal", _unlimited_borrowing, [], ("cq1", 4)),
    ("borrowing", _unlimited_borrowing, [("cq1", 8)], ("cq1", 9)),
    ("straddles local quota", _lending_limit, [("cq1", 4)], ("cq1", 5)),
    ("from above local quota", _lending_limit, [("cq1", 7)], ("cq1", 2)),
    ("inside local quota", _lending_limit, [("cq1", 1)], ("cq1", 3)),
    ("nested with lending cohort", _nested_lending_cohort, [("cq1", 12), ("cq2", 3)], ("cq2", 9)),
    ("nested borrow through limit", _nested, [("cq1", 14), ("cq3", 2)], ("cq2", 30)),
    ("in debt", _nominal_only, [("cq", 30)], ("cq", 5)),
]


@pytest.mark.parametrize(
    ("build", "before", "op"), [c[1:] for c in INVERSE_CASES], ids=[c[0] for c in INVERSE_CASES]
)
def test_add_then_remove_is_identity(
    build: Any, before: list[tuple[str, int]], op: tuple[str, int]
) -> None:
    root = build()
    root.rebuild()
    nodes = by_name(root)
    for name, amount in before:
        nodes[name].add_usage(FR, amount)
    snapshot = usages(nodes)
    name, amount = op
    nodes[name].add_usage(FR, amount)
    assert usages(nodes) != snapshot
    nodes[name].remove_usage(FR, amount)
    assert usages(nodes) == snapshot
    # and the other way round
    nodes[name].add_usage(FR, amount)
    nodes[name].remove_usage(FR, amount)
    assert usages(nodes) == snapshot


# --- borrowing height -----------------------------------------------------------------


def _height_tree() -> dict[str, QuotaNode]:
    #            root(0)
    #          /    |    \
    #     left(5)  cq3(10)  empty
    #     /    \
    #  cq1(10)  cq2(10, LL 4)
    root = qn("root", cq=False, nominal=0)
    left = qn("left", root, cq=False, nominal=5)
    qn("cq1", left, nominal=10)
    qn("cq2", left, nominal=10, lending=4)
    qn("cq3", root, nominal=10)
    qn("empty", root, cq=False, nominal=None)
    root.rebuild()
    return by_name(root)


HEIGHT_CASES: list[tuple[str, dict[str, int], str, int, int]] = [
    # (name, usage, cq, request, expected height)
    ("within nominal", {}, "cq1", 10, 0),
    ("within nominal with usage", {"cq1": 4}, "cq1", 6, 0),
    ("zero request", {"cq1": 10}, "cq1", 0, 0),
    ("fits in left", {}, "cq1", 15, 1),
    ("fits exactly in left", {}, "cq1", 19, 1),  # left: 5 + 10 + 4 lent
    ("needs root", {}, "cq1", 20, 2),
    ("fits exactly in root", {}, "cq1", 29, 2),
    ("fits nowhere", {}, "cq1", 100, 2),
    ("left busy, needs root", {"cq2": 8}, "cq1", 18, 2),  # left usage 2: 19 < 2 + 18
    ("left busy, still fits in left", {"cq2": 8}, "cq1", 17, 1),
    # cq2 keeps 6 private: with usage 2, 4 more are local, so only 18 of 22 go to left.
    ("local quota counted first", {"cq2": 2}, "cq2", 22, 1),
    ("local quota counted first, then root", {"cq2": 2}, "cq2", 24, 2),
    ("cq3 borrows from root", {}, "cq3", 11, 2),
]


@pytest.mark.parametrize(
    ("usage", "cq", "amount", "height"),
    [c[1:] for c in HEIGHT_CASES],
    ids=[c[0] for c in HEIGHT_CASES],
)
def test_borrowing_height(usage: dict[str, int], cq: str, amount: int, height: int) -> None:
    nodes = _height_tree()
    for name, used in usage.items():
        nodes[name].add_usage(FR, used)
    assert nodes[cq].borrowing_height(FR, amount) == height


def test_node_heights() -> None:
    nodes = _height_tree()
    assert nodes["empty"].height() == 0
    assert nodes["left"].height() == 1
    assert nodes["root"].height() == 2
    top = qn("top", cq=False, nominal=0)
    nodes["root"].parent = top
    top.children.append(nodes["root"])
    assert top.height() == 3


def test_borrowing_height_deep_chain_reports_lowest_fitting_subtree() -> None:
    # c0 <- c1 <- c2 <- cq, each cohort adds 10 of its own
    c0 = qn("c0", cq=False, nominal=10)
    c1 = qn("c1", c0, cq=False, nominal=10)
    c2 = qn("c2", c1, cq=False, nominal=10)
    cq = qn("cq", c2, nominal=10)
    c0.rebuild()
    assert [cq.borrowing_height(FR, r) for r in (10, 11, 20, 21, 30, 31, 40, 41)] == [
        0,
        1,
        1,
        2,
        2,
        3,
        3,
        3,
    ]


def test_borrowing_height_counts_cohort_local_quota() -> None:
    # top <- r <- mid <- cq: mid keeps all its 10 private (lendingLimit 0), so a request of
    # 15 from cq takes 10 there and only 5 from r, which r holds: the subtree at r fits.
    top = qn("top", cq=False, nominal=0)
    r = qn("r", top, cq=False, nominal=0)
    mid = qn("mid", r, cq=False, nominal=10, lending=0)
    cq = qn("cq", mid, nominal=0)
    qn("rq", r, nominal=5)
    qn("tq", top, nominal=100)
    top.rebuild()
    assert (mid.height(), r.height(), top.height()) == (1, 2, 3)
    assert cq.borrowing_height(FR, 10) == 1
    assert cq.borrowing_height(FR, 15) == 2
    assert cq.borrowing_height(FR, 16) == 3
    cq.add_usage(FR, 4)  # 6 private left in mid
    assert cq.borrowing_height(FR, 11) == 2
    assert cq.borrowing_height(FR, 12) == 3


# --- find_shortage --------------------------------------------------------------------


def _shortage_tree() -> dict[str, QuotaNode]:
    #               root(0)
    #             /        \
    #      left(0, BL 3)   right(20)
    #      /       \           \
    # capped(10,BL 2) free(10)  rcq(0)
    root = qn("root", cq=False, nominal=0)
    left = qn("left", root, cq=False, nominal=0, borrowing=3)
    qn("capped", left, nominal=10, borrowing=2)
    qn("free", left, nominal=10)
    right = qn("right", root, cq=False, nominal=20)
    qn("rcq", right, nominal=0)
    root.rebuild()
    return by_name(root)


SHORTAGE_CASES: list[tuple[str, dict[str, int], str, int, Shortage]] = [
    # CQ's own borrowingLimit binds: 10 - 10 + 2 = 2 < what left can give.
    (
        "cq borrowingLimit",
        {"capped": 10},
        "capped",
        5,
        Shortage("capped", "ClusterQueue", "borrowingLimit", 3),
    ),
    # left's borrowingLimit binds: left may take 20 + 3 from root.
    (
        "cohort borrowingLimit",
        {"free": 18},
        "free",
        10,
        Shortage("left", "Cohort", "borrowingLimit", 5),
    ),
    # capped could take 12 more by its own limit, but left may only take 2 more from root.
    (
        "cq limit not binding, cohort limit binds",
        {"free": 21},
        "capped",
        12,
        Shortage("left", "Cohort", "borrowingLimit", 10),
    ),
    # root runs out: right's 20 are used by rcq, left's 20 by capped and free.
    (
        "root quota",
        {"capped": 10, "free": 10, "rcq": 20},
        "rcq",
        1,
        Shortage("root", "Cohort", "quota", 1),
    ),
    (
        "root quota for a cq without limits",
        {"rcq": 38},
        "rcq",
        5,
        Shortage("root", "Cohort", "quota", 3),
    ),
]


@pytest.mark.parametrize(
    ("usage", "cq", "amount", "want"),
    [c[1:] for c in SHORTAGE_CASES],
    ids=[c[0] for c in SHORTAGE_CASES],
)
def test_find_shortage(usage: dict[str, int], cq: str, amount: int, want: Shortage) -> None:
    nodes = _shortage_tree()
    for name, used in usage.items():
        nodes[name].add_usage(FR, used)
    assert amount > available(nodes[cq], FR)
    assert find_shortage(nodes[cq], FR, amount) == want


def test_find_shortage_without_cohort_names_nominal_quota() -> None:
    cq = qn("solo", nominal=10)
    cq.rebuild()
    cq.add_usage(FR, 8)
    assert find_shortage(cq, FR, 5) == Shortage("solo", "ClusterQueue", "nominalQuota", 3)
    # in debt: nothing is free, the whole request is short
    cq.add_usage(FR, 4)
    assert find_shortage(cq, FR, 5) == Shortage("solo", "ClusterQueue", "nominalQuota", 5)


def test_find_shortage_via_cache_names_cluster_queue_then_cohort() -> None:
    cache = build_cache(
        [cohort_model("pool", None, {"red": Q("4")})],
        [
            cq_model("a", "pool", {"red": Q("10", borrowing="1")}),
            cq_model("b", "pool", {"red": Q("10")}),
        ],
    )
    a, b = cache.cluster_queues["a"].node, cache.cluster_queues["b"].node
    a.add_usage(RED, 10_000)
    assert find_shortage(a, RED, 3_000) == Shortage("a", "ClusterQueue", "borrowingLimit", 2_000)
    b.add_usage(RED, 13_500)
    # pool: 24 - 23.5 = 0.5 left, below a's borrowing limit of 1
    assert find_shortage(a, RED, 3_000) == Shortage("pool", "Cohort", "quota", 2_500)
    assert find_shortage(b, RED, 3_000) == Shortage("pool", "Cohort", "quota", 2_500)


# --- properties -----------------------------------------------------------------------

FRS: list[FlavorResource] = [("f", "gpu"), ("g", "gpu")]


@dataclass
class Tree:
    """A random quota tree: cohorts ``c*`` and cluster queues ``q*`` with quotas."""

    cohort_parent: dict[str, str | None]
    cq_parent: dict[str, str | None]
    quotas: dict[str, dict[FlavorResource, tuple[int, int | None, int | None]]]

    def build(self) -> dict[str, QuotaNode]:
        nodes: dict[str, QuotaNode] = {}
        for name in self.cohort_parent:
            nodes[name] = QuotaNode(name, is_cluster_queue=False)
        for name in self.cq_parent:
            nodes[name] = QuotaNode(name, is_cluster_queue=True)
        for name, parent in [*self.cohort_parent.items(), *self.cq_parent.items()]:
            if parent is not None:
                nodes[name].parent = nodes[parent]
                nodes[parent].children.append(nodes[name])
        for name, per_fr in self.quotas.items():
            node = nodes[name]
            for fr, (nominal, borrowing, lending) in per_fr.items():
                node.nominal[fr] = nominal
                if borrowing is not None:
                    node.borrowing_limit[fr] = borrowing
                if lending is not None:
                    node.lending_limit[fr] = lending
        for node in nodes.values():
            if node.parent is None:
                node.rebuild()
        return nodes


@st.composite
def trees(draw: st.DrawFn) -> Tree:
    n_cohorts = draw(st.integers(0, 4))
    cohort_parent: dict[str, str | None] = {}
    for i in range(n_cohorts):
        parent = draw(st.sampled_from([None, *cohort_parent]))
        cohort_parent[f"c{i}"] = parent
    cq_parent: dict[str, str | None] = {}
    for i in range(draw(st.integers(1, 5))):
        cq_parent[f"q{i}"] = draw(st.sampled_from([None, *cohort_parent]))
    quotas: dict[str, dict[FlavorResource, tuple[int, int | None, int | None]]] = {}
    for name, parent in [*cohort_parent.items(), *cq_parent.items()]:
        per_fr: dict[FlavorResource, tuple[int, int | None, int | None]] = {}
        for fr in FRS:
            if name in cohort_parent and not draw(st.booleans()):
                continue  # cohorts often have no quota of their own
            nominal = draw(st.integers(0, 12))
            borrowing = lending = None
            if parent is not None:
                borrowing = draw(st.none() | st.integers(0, 8))
                top = nominal if name in cq_parent else 20
                lending = draw(st.none() | st.integers(0, top))
            per_fr[fr] = (nominal, borrowing, lending)
        quotas[name] = per_fr
    return Tree(cohort_parent, cq_parent, quotas)


def _usage_state(nodes: Mapping[str, QuotaNode]) -> dict[str, dict[FlavorResource, int]]:
    return {n: {fr: v for fr, v in node.usage.items() if v} for n, node in nodes.items()}


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), data=st.data())
def test_incremental_usage_equals_rebuild(tree: Tree, data: st.DataObject) -> None:
    nodes = tree.build()
    cqs = sorted(tree.cq_parent)
    admitted: list[tuple[str, FlavorResource, int]] = []
    for _ in range(data.draw(st.integers(1, 25), label="steps")):
        if admitted and data.draw(st.booleans(), label="remove"):
            index = data.draw(st.integers(0, len(admitted) - 1), label="which")
            name, fr, amount = admitted.pop(index)
            nodes[name].remove_usage(fr, amount)
        else:
            name = data.draw(st.sampled_from(cqs), label="cq")
            fr = data.draw(st.sampled_from(FRS), label="fr")
            amount = data.draw(st.integers(1, 15), label="amount")
            nodes[name].add_usage(fr, amount)
            admitted.append((name, fr, amount))
        incremental = _usage_state(nodes)
        for node in nodes.values():
            if node.parent is None:
                node.rebuild()
        assert _usage_state(nodes) == incremental
        for node in nodes.values():
            assert all(v >= 0 for v in node.usage.values()), node.name
    for name, fr, amount in reversed(data.draw(st.permutations(admitted), label="order")):
        nodes[name].remove_usage(fr, amount)
    assert _usage_state(nodes) == {n: {} for n in nodes}


def _oracle_fits(
    tree: Tree, nodes: Mapping[str, QuotaNode], leaf_usage: Mapping[str, int], fr: FlavorResource
) -> bool:
    """Every limit on every path holds for these CQ usages (formulas re-derived here)."""
    children: dict[str, list[str]] = {n: [] for n in nodes}
    parents = {**tree.cohort_parent, **tree.cq_parent}
    for name, parent in parents.items():
        if parent is not None:
            children[parent].append(name)

    def quota(name: str) -> tuple[int, int | None, int | None]:
        return tree.quotas.get(name, {}).get(fr, (0, None, None))

    subtree: dict[str, int] = {}
    local: dict[str, int] = {}
    usage: dict[str, int] = {}

    def visit(name: str) -> None:
        nominal, _, lending = quota(name)
        for child in children[name]:
            visit(child)
        subtree[name] = nominal + sum(subtree[c] - local[c] for c in children[name])
        local[name] = 0 if lending is None else max(0, subtree[name] - lending)
        if name in tree.cq_parent:
            usage[name] = leaf_usage.get(name, 0)
        else:
            usage[name] = sum(max(0, usage[c] - local[c]) for c in children[name])

    for name, parent in parents.items():
        if parent is None:
            visit(name)
    for name, parent in parents.items():
        _, borrowing, _ = quota(name)
        if parent is None:
            if usage[name] > subtree[name]:
                return False
        elif borrowing is not None:
            in_parent = max(0, usage[name] - local[name])
            if in_parent > subtree[name] - local[name] + borrowing:
                return False
    return True


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), data=st.data())
def test_available_matches_brute_force_oracle(tree: Tree, data: st.DataObject) -> None:
    nodes = tree.build()
    cqs = sorted(tree.cq_parent)
    fr = data.draw(st.sampled_from(FRS), label="fr")
    leaf_usage = dict.fromkeys(cqs, 0)

    def is_max_fit(cq: str, usage: Mapping[str, int], amount: int) -> bool:
        """``amount`` more fits at ``cq`` and one more does not (fitting is monotone)."""
        return _oracle_fits(tree, nodes, {**usage, cq: usage[cq] + amount}, fr) and not (
            _oracle_fits(tree, nodes, {**usage, cq: usage[cq] + amount + 1}, fr)
        )

    # potential: the most each CQ could use on an empty tree
    for cq in cqs:
        potential = potential_available(nodes[cq], fr)
        assert potential >= 0, cq
        assert is_max_fit(cq, leaf_usage, potential), cq
        assert available(nodes[cq], fr) == potential, cq
    # admit random requests that fit (by the oracle), then compare available
    for _ in range(data.draw(st.integers(0, 12), label="requests")):
        cq = data.draw(st.sampled_from(cqs), label="cq")
        amount = data.draw(st.integers(1, 10), label="amount")
        trial = {**leaf_usage, cq: leaf_usage[cq] + amount}
        if _oracle_fits(tree, nodes, trial, fr):
            leaf_usage = trial
            nodes[cq].add_usage(fr, amount)
    for cq in cqs:
        got = available(nodes[cq], fr)
        assert got >= 0, cq
        assert is_max_fit(cq, leaf_usage, got), cq
        assert got <= potential_available(nodes[cq], fr)

"""Property tests of the admission engine over random clusters and random job streams.

Hypothesis draws a cluster (flavors selecting nodes by a ``pool`` label, nodes
with GPUs, CPU, memory, zone labels, taints and drained/down states, a cohort
forest with optional cohort quota, ClusterQueues with one or two resource
groups, borrowing/lending limits and flavor fungibility) and a stream of
operations (submit, cycle, finish, cancel, requeue, tenant usage). The stream
runs against both presets.

Every property is judged by an *independent* checker: it rebuilds node usage,
ClusterQueue usage and the cohort arithmetic (Kueue's ``resource_node.go``
formulas, written out again from the configuration objects) from nothing but
the events it saw and the ``Admit`` decisions the engine made. The engine's
own counters are only ever compared against the checker, never used by it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from phalanx.engine import (
    Admit,
    Cancel,
    Decision,
    Engine,
    EngineConfig,
    Event,
    Evict,
    Finish,
    Pending,
    Requeue,
    Submit,
    TenantUsage,
    Upsert,
    export_state,
    load_state,
)
from phalanx.model import (
    CPU,
    GPU,
    GPU_MILLI,
    MEMORY,
    AdminState,
    ClusterQueue,
    Cohort,
    Job,
    LocalQueue,
    Node,
    PodSet,
    QueueingStrategy,
    ResourceFlavor,
    Taint,
    Toleration,
)

FR = tuple[str, str]
"""``(flavor, resource)``."""

POOLS = ("a", "b")
CPU_POOL = "c"
"""The pool of the GPU-less nodes: a flavor selecting it counts whole CPU cores."""
ZONES = ("z1", "z2")
TENANTS = ("t0", "t1")
SPOT = "spot"
SPOT_TOLERATION = Toleration(key=SPOT, operator="Exists")

PROPERTY_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --------------------------------------------------------------------------- strategies


@st.composite
def flavors_st(draw: st.DrawFn) -> list[ResourceFlavor]:
    """1-3 flavors, each selecting one ``pool`` (or, sometimes, every node)."""
    out = []
    for i in range(draw(st.integers(1, 3))):
        pool = draw(st.sampled_from((None, *POOLS, None, *POOLS, CPU_POOL, CPU_POOL)))
        tolerant = draw(st.integers(0, 5)) == 0
        out.append(
            ResourceFlavor(
                name=f"f{i}",
                node_labels={"pool": pool} if pool else {},
                tolerations=[SPOT_TOLERATION] if tolerant else [],
            )
        )
    return out


@st.composite
def node_st(draw: st.DrawFn, index: int) -> Node:
    gpus = draw(st.sampled_from((8, 4, 2, 1, 6, 3, 0, 0)))
    labels = {"pool": draw(st.sampled_from(POOLS)) if gpus else CPU_POOL}
    zone = draw(st.sampled_from((None, *ZONES)))
    if zone:
        labels["zone"] = zone
    taints = draw(
        st.sampled_from(
            ((), (), (), (Taint(key=SPOT),), (Taint(key=SPOT, effect="PreferNoSchedule"),))
        )
    )
    state = draw(st.sampled_from((AdminState.UP,) * 6 + (AdminState.DRAIN, AdminState.DOWN)))
    return Node(
        name=f"n{index:02d}",
        labels=labels,
        taints=list(taints),
        capacity={
            GPU: gpus,
            CPU: str(draw(st.sampled_from((4, 8, 16, 32)))),
            MEMORY: f"{draw(st.sampled_from((16, 64, 256)))}Gi",
        },
        state=state,
    )


@st.composite
def _quota_st(draw: st.DrawFn, resource: str, limits: bool) -> dict[str, Any]:
    """A resource quota; with ``limits``, maybe a borrowingLimit and a lendingLimit <= nominal."""
    unit, scale = {GPU: ("", 1), CPU: ("", 4), MEMORY: ("Gi", 64)}[resource]
    if resource == GPU:
        nominal = draw(st.sampled_from((4, 8, 2, 0, 16)))
    else:
        nominal = draw(st.sampled_from((16, 32, 8, 4, 0)))
    q: dict[str, Any] = {"name": resource, "nominalQuota": f"{nominal * scale}{unit}"}
    if limits and draw(st.booleans()):
        q["borrowingLimit"] = f"{draw(st.sampled_from((4, 0, 1, 16))) * scale}{unit}"
    if limits and draw(st.booleans()):
        q["lendingLimit"] = f"{draw(st.integers(0, nominal)) * scale}{unit}"
    return q


@st.composite
def group_st(
    draw: st.DrawFn, covered: list[str], flavor_names: list[str], limits: bool
) -> dict[str, Any]:
    return {
        "coveredResources": covered,
        "flavors": [
            {"name": f, "resources": [draw(_quota_st(r, limits)) for r in covered]}
            for f in flavor_names
        ],
    }


@st.composite
def cohorts_st(draw: st.DrawFn, flavor_names: list[str]) -> list[Cohort]:
    """0-3 cohorts forming a forest (parents are earlier cohorts or an implicit one)."""
    out: list[Cohort] = []
    for j in range(draw(st.integers(0, 3))):
        parent = draw(st.sampled_from((None, "coX", *(c.name for c in out))))
        data: dict[str, Any] = {"name": f"co{j}"}
        if parent:
            data["parentName"] = parent
        if draw(st.booleans()):
            names = draw(st.permutations(flavor_names))[: draw(st.integers(1, len(flavor_names)))]
            data["resourceGroups"] = [draw(group_st([GPU], names, limits=bool(parent)))]
        out.append(Cohort.model_validate(data))
    return out


@st.composite
def cluster_queues_st(
    draw: st.DrawFn, flavor_names: list[str], cohort_names: list[str]
) -> list[ClusterQueue]:
    out = []
    for i in range(draw(st.integers(1, 5))):
        cohort = draw(st.sampled_from(("coX", None, *cohort_names)))
        order = draw(st.permutations(flavor_names))
        limits = cohort is not None
        if len(order) >= 2 and draw(st.integers(0, 3)) == 0:
            split = draw(st.integers(1, len(order) - 1))
            second = draw(st.sampled_from(([CPU, MEMORY], [CPU])))
            groups = [
                draw(group_st([GPU], list(order[:split]), limits)),
                draw(group_st(second, list(order[split:]), limits)),
            ]
        else:
            covered = draw(st.sampled_from(([GPU, CPU, MEMORY], [GPU, CPU], [GPU, CPU, MEMORY])))
            names = list(order[: draw(st.integers(1, len(order)))])
            groups = [draw(group_st(covered, names, limits))]
        data: dict[str, Any] = {
            "name": f"cq{i}",
            "queueingStrategy": draw(st.sampled_from(("BestEffortFIFO", "StrictFIFO"))),
            "resourceGroups": groups,
            "flavorFungibility": {
                "whenCanBorrow": draw(st.sampled_from(("MayStopSearch", "TryNextFlavor")))
            },
        }
        if cohort:
            data["cohortName"] = cohort
        out.append(ClusterQueue.model_validate(data))
    return out


@st.composite
def pod_set_st(draw: st.DrawFn, index: int) -> PodSet:
    count = draw(st.sampled_from((1, 2, 1, 2, 1, 4, 3, 6, 8)))
    requests: dict[str, Any] = {
        GPU: draw(st.sampled_from((1, 0, 1, 2, 0, 1, 2, 4, 8))),
        CPU: draw(st.sampled_from(("500m", "1", "2", "1500m", "4"))),
    }
    memory = draw(st.sampled_from((None,) * 7 + ("1Gi", "8Gi", "32Gi")))
    if memory:
        requests[MEMORY] = memory
    divisors = [d for d in range(1, count + 1) if count % d == 0]
    selector = draw(
        st.sampled_from(
            ({},) * 4 + tuple({"zone": z} for z in ZONES) + tuple({"pool": p} for p in POOLS)
        )
    )
    return PodSet(
        name=f"ps{index}",
        count=count,
        requests=requests,
        node_selector=selector,
        tolerations=[SPOT_TOLERATION] if draw(st.integers(0, 3)) == 0 else [],
        tasks_per_node=draw(st.sampled_from((None, None, *divisors))),
        exclusive=draw(st.integers(0, 5)) == 0,
    )


@dataclass(frozen=True)
class JobDraft:
    """A job without its id and submit time (the driver assigns both)."""

    cq: int
    via_local_queue: bool
    tenant: str
    priority: int | None
    pod_sets: tuple[PodSet, ...]


@st.composite
def job_draft_st(draw: st.DrawFn, n_cqs: int) -> JobDraft:
    n_pod_sets = draw(st.sampled_from((1, 1, 1, 2, 3)))
    return JobDraft(
        cq=draw(st.integers(0, n_cqs - 1)),
        via_local_queue=draw(st.booleans()),
        tenant=draw(st.sampled_from(TENANTS)),
        priority=draw(st.sampled_from((None, 0, 1, 2, 5))),
        pod_sets=tuple(draw(pod_set_st(i)) for i in range(n_pod_sets)),
    )


Op = tuple[Any, ...]
OP_KINDS = (
    ("cycle",) * 3
    + ("submit",) * 6
    + ("finish",) * 2
    + ("finish_pending", "cancel", "cancel_admitted", "requeue", "usage", "node")
)


@st.composite
def op_st(draw: st.DrawFn, n_cqs: int, templates: list[JobDraft]) -> Op:
    kind = draw(st.sampled_from(OP_KINDS))
    if kind == "submit":
        # Mostly copies of a few templates (maybe into another queue), so that jobs share
        # shapes: shape queues, FIFO order within a shape and shared failures get exercised.
        how = draw(st.integers(0, 5))
        if how == 0:
            return (kind, draw(job_draft_st(n_cqs)))
        template = templates[draw(st.integers(0, len(templates) - 1))]
        if how == 1:
            template = replace(template, cq=draw(st.integers(0, n_cqs - 1)))
        return (kind, template)
    if kind == "cycle":
        return (kind, draw(st.sampled_from((0.0, 5.0, 60.0, 400.0))))
    if kind == "usage":
        allocation = draw(st.one_of(st.none(), st.sampled_from((0.0, 0.5, 2.0))))
        return (kind, draw(st.sampled_from(TENANTS)), draw(st.integers(0, 50)) / 4, allocation)
    if kind == "node":
        # An operator drains, downs or resumes a node; what runs there keeps running.
        return (kind, draw(st.integers(0, 11)), draw(st.sampled_from(tuple(AdminState))))
    return (kind, draw(st.integers(0, 63)))


@dataclass
class Scenario:
    preset: str
    flavors: list[ResourceFlavor]
    nodes: list[Node]
    cohorts: list[Cohort]
    cluster_queues: list[ClusterQueue]
    ops: list[Op]
    snapshot_at: int

    @property
    def local_queues(self) -> list[LocalQueue]:
        return [
            LocalQueue(name=f"lq-{cq.name}", namespace=t, cluster_queue=cq.name)
            for cq in self.cluster_queues
            for t in TENANTS
        ]

    def config_events(self) -> list[Event]:
        objects: list[Any] = [
            *self.flavors,
            *self.nodes,
            *self.cohorts,
            *self.cluster_queues,
            *self.local_queues,
        ]
        return [Upsert(o) for o in objects]


@st.composite
def scenario_st(draw: st.DrawFn) -> Scenario:
    flavors = draw(flavors_st())
    names = [f.name for f in flavors]
    nodes = [draw(node_st(i)) for i in range(draw(st.integers(1, 12)))]
    cohorts = draw(cohorts_st(names))
    cqs = draw(cluster_queues_st(names, [c.name for c in cohorts]))
    templates = draw(st.lists(job_draft_st(len(cqs)), min_size=1, max_size=4))
    ops = draw(st.lists(op_st(len(cqs), templates), min_size=10, max_size=48))
    return Scenario(
        preset=draw(st.sampled_from(("kueue", "phalanx"))),
        flavors=flavors,
        nodes=nodes,
        cohorts=cohorts,
        cluster_queues=cqs,
        ops=ops,
        snapshot_at=draw(st.integers(0, len(ops))),
    )


# --------------------------------------------------------------------------- the checker


def _tolerated(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> bool:
    tolerations = list(tolerations)
    for taint in taints:
        if taint.effect == "PreferNoSchedule":
            continue
        ok = False
        for t in tolerations:
            if t.effect and t.effect != taint.effect:
                continue
            if (not t.key and t.operator == "Exists") or (
                t.key == taint.key and (t.operator == "Exists" or t.value == taint.value)
            ):
                ok = True
        if not ok:
            return False
    return True


def _add(into: dict[Any, int], key: Any, amount: int) -> None:
    into[key] = into.get(key, 0) + amount


def _nonzero(d: dict[Any, int]) -> dict[Any, int]:
    return {k: v for k, v in d.items() if v}


class QuotaTree:
    """Kueue's quota arithmetic, recomputed from the ClusterQueue and Cohort objects.

    Nodes are ``cq:<name>`` and ``co:<name>``; a cohort named by a ClusterQueue
    or as a parent but never defined is an implicit root without quota.
    """

    def __init__(self, cohorts: list[Cohort], cqs: list[ClusterQueue]) -> None:
        self.parent: dict[str, str | None] = {}
        self.nominal: dict[str, dict[FR, int]] = {}
        self.borrowing: dict[str, dict[FR, int]] = {}
        self.lending: dict[str, dict[FR, int]] = {}
        objects: list[tuple[str, Any, str | None]] = [
            ("co:" + c.name, c, c.parent_name) for c in cohorts
        ] + [("cq:" + q.name, q, q.cohort_name) for q in cqs]
        for key, obj, parent in objects:
            self.parent[key] = "co:" + parent if parent else None
            nominal, borrowing, lending = {}, {}, {}
            for group in obj.resource_groups:
                for fq in group.flavors:
                    for q in fq.resources:
                        fr = (fq.name, q.name)
                        nominal[fr] = q.nominal_quota
                        if q.borrowing_limit is not None:
                            borrowing[fr] = q.borrowing_limit
                        if q.lending_limit is not None:
                            lending[fr] = q.lending_limit
            self.nominal[key], self.borrowing[key], self.lending[key] = nominal, borrowing, lending
        for parent in list(self.parent.values()):
            if parent is not None and parent not in self.parent:
                self.parent[parent] = None
                self.nominal[parent], self.borrowing[parent], self.lending[parent] = {}, {}, {}
        self.children: dict[str, list[str]] = {k: [] for k in self.parent}
        for key, parent in self.parent.items():
            if parent is not None:
                self.children[parent].append(key)
        self.frs = sorted({fr for quotas in self.nominal.values() for fr in quotas})
        self.subtree: dict[str, dict[FR, int]] = {}
        self.local: dict[str, dict[FR, int]] = {}
        for key in self.parent:
            self._subtree(key)
        self.potential: dict[str, dict[FR, int]] = {k: self._potential(k) for k in self.parent}

    def root(self, key: str) -> str:
        while (parent := self.parent[key]) is not None:
            key = parent
        return key

    def members(self, root: str) -> list[str]:
        out, stack = [], [root]
        while stack:
            key = stack.pop()
            out.append(key)
            stack.extend(self.children[key])
        return out

    def _subtree(self, key: str) -> dict[FR, int]:
        if key in self.subtree:
            return self.subtree[key]
        result = {fr: self.nominal[key].get(fr, 0) for fr in self.frs}
        for child in self.children[key]:
            child_subtree = self._subtree(child)
            for fr in self.frs:
                result[fr] += child_subtree[fr] - self.local[child][fr]
        self.subtree[key] = result
        self.local[key] = {
            fr: max(0, result[fr] - self.lending[key][fr]) if fr in self.lending[key] else 0
            for fr in self.frs
        }
        return result

    def _potential(self, key: str) -> dict[FR, int]:
        parent = self.parent[key]
        if parent is None:
            return dict(self.subtree[key])
        above = self._potential(parent)
        out = {}
        for fr in self.frs:
            value = self.local[key][fr] + above[fr]
            if fr in self.borrowing[key]:
                value = min(value, self.subtree[key][fr] + self.borrowing[key][fr])
            out[fr] = value
        return out

    def usage(self, cq_usage: dict[str, dict[FR, int]]) -> dict[str, dict[FR, int]]:
        """Usage of every node: a cohort carries what exceeds each child's private quota."""
        out: dict[str, dict[FR, int]] = {}

        def walk(key: str) -> dict[FR, int]:
            if key.startswith("cq:"):
                mine = {fr: cq_usage.get(key[3:], {}).get(fr, 0) for fr in self.frs}
            else:
                mine = dict.fromkeys(self.frs, 0)
                for child in self.children[key]:
                    used = walk(child)
                    for fr in self.frs:
                        mine[fr] += max(0, used[fr] - self.local[child][fr])
            out[key] = mine
            return mine

        for key, parent in self.parent.items():
            if parent is None:
                walk(key)
        return out

    def available(self, key: str, fr: FR, usage: dict[str, dict[FR, int]]) -> int:
        """How much more of ``fr`` node ``key`` may use now, given every node's usage."""
        used = usage[key].get(fr, 0)
        subtree = self.subtree[key].get(fr, 0)
        parent = self.parent[key]
        if parent is None:
            return subtree - used
        local = self.local[key].get(fr, 0)
        from_parent = self.available(parent, fr, usage)
        if fr in self.borrowing[key]:
            in_pool = subtree - local
            from_parent = min(from_parent, in_pool - max(0, used - local) + self.borrowing[key][fr])
        return max(0, local - used) + from_parent

    def violations(self, cq_usage: dict[str, dict[FR, int]]) -> list[str]:
        usage = self.usage(cq_usage)
        bad: list[str] = []
        for key in self.parent:
            for fr in self.frs:
                used = usage[key][fr]
                if used > self.potential[key][fr]:
                    bad.append(f"{key} uses {used} of {fr}, potential {self.potential[key][fr]}")
                if fr in self.borrowing[key]:
                    cap = self.subtree[key][fr] + self.borrowing[key][fr]
                    if used > cap:
                        bad.append(f"{key} uses {used} of {fr} > quota+borrowingLimit {cap}")
                if self.parent[key] is None and used > self.subtree[key][fr]:
                    bad.append(f"root {key} carries {used} of {fr} > its subtree quota")
        # Lenders: everybody's usage plus every lender's unused private quota must fit in
        # the tree's nominal quota, i.e. nobody ate into a lender's private part.
        for root in (k for k, p in self.parent.items() if p is None):
            members = self.members(root)
            for fr in self.frs:
                total_nominal = sum(self.nominal[k].get(fr, 0) for k in members)
                used = sum(usage[k][fr] for k in members if k.startswith("cq:"))
                unused_private = sum(
                    max(0, self.local[k][fr] - usage[k][fr]) for k in members if k != root
                )
                if used + unused_private > total_nominal:
                    bad.append(
                        f"tree {root}, {fr}: usage {used} + unused private quota "
                        f"{unused_private} > nominal {total_nominal}"
                    )
        return bad


def _shape(job: Job) -> tuple[Any, ...]:
    return tuple(
        (
            p.name,
            p.count,
            tuple(sorted(p.requests.items())),
            tuple(sorted(p.node_selector.items())),
            tuple(p.tolerations),
            p.tasks_per_node,
            p.exclusive,
        )
        for p in job.pod_sets
    )


def _requested(pod_set: PodSet) -> dict[str, int]:
    return {r: a for r, a in pod_set.requests.items() if a > 0}


class Checker:
    """Recomputes everything from events and ``Admit`` decisions; asserts the invariants."""

    def __init__(self, scn: Scenario) -> None:
        self.preset = scn.preset
        self.flavors = {f.name: f for f in scn.flavors}
        self.nodes = {n.name: n for n in scn.nodes}
        self.cqs = {q.name: q for q in scn.cluster_queues}
        self.lqs = {f"{lq.namespace}/{lq.name}": lq for lq in scn.local_queues}
        self.tree = QuotaTree(scn.cohorts, scn.cluster_queues)
        self.jobs: dict[int, Job] = {}
        self.pending: dict[int, None] = {}
        self.admitted: dict[int, Admit] = {}
        self.admissions = 0

    # events --------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        if isinstance(event, Submit):
            self.jobs[event.job.id] = event.job
            self.pending[event.job.id] = None
        elif isinstance(event, Finish):
            self.admitted.pop(event.job_id, None)
            self.pending.pop(event.job_id, None)
        elif isinstance(event, Cancel):
            self.pending.pop(event.job_id, None)
        elif isinstance(event, Requeue) and self.admitted.pop(event.job_id, None) is not None:
            self.pending[event.job_id] = None
        elif isinstance(event, Upsert) and isinstance(event.obj, Node):
            self.nodes[event.obj.name] = event.obj

    def cluster_queue_of(self, job: Job) -> str:
        if job.cluster_queue:
            return job.cluster_queue
        return self.lqs[f"{job.tenant}/{job.queue}"].cluster_queue

    # decisions -----------------------------------------------------------

    def on_decisions(self, decisions: list[Decision], engine: Engine) -> None:
        for d in decisions:
            if isinstance(d, Admit):
                self.check_admit(d)
                self.pending.pop(d.job_id)
                self.admitted[d.job_id] = d
                self.admissions += 1
            elif isinstance(d, Pending):
                assert d.job_id in self.pending, f"Pending for job {d.job_id}, not pending"
            else:
                assert not isinstance(d, Evict), f"unexpected eviction {d}"
        self.check_nodes()
        self.check_quota()
        self.check_engine_counters(engine)

    def job_usage(self, admit: Admit) -> dict[FR, int]:
        job = self.jobs[admit.job_id]
        out: dict[FR, int] = {}
        for pod_set, psa in zip(job.pod_sets, admit.pod_sets, strict=True):
            flavors = dict(psa.flavors)
            for r, a in _requested(pod_set).items():
                _add(out, (flavors[r], r), a * pod_set.count)
        return out

    def cq_usage(self) -> dict[str, dict[FR, int]]:
        out: dict[str, dict[FR, int]] = {}
        for admit in self.admitted.values():
            into = out.setdefault(admit.cluster_queue, {})
            for fr, amount in self.job_usage(admit).items():
                _add(into, fr, amount)
        return out

    def check_admit(self, admit: Admit) -> None:
        jid = admit.job_id
        assert jid in self.pending, f"job {jid} admitted while not pending"
        job = self.jobs[jid]
        cq_name = self.cluster_queue_of(job)
        assert admit.cluster_queue == cq_name, f"job {jid} admitted in the wrong queue"
        cq = self.cqs[cq_name]
        group_of = {r: g for g in cq.resource_groups for r in g.covered_resources}
        assert [p.name for p in admit.pod_sets] == [p.name for p in job.pod_sets]
        for pod_set, psa in zip(job.pod_sets, admit.pod_sets, strict=True):
            flavors = dict(psa.flavors)
            # Flavors: one per requested resource, from the group covering it, one per group.
            assert set(flavors) == set(_requested(pod_set)), (jid, psa)
            for r, f in flavors.items():
                group = group_of[r]
                assert f in [fq.name for fq in group.flavors], (jid, r, f)
                for other in group.covered_resources:
                    assert flavors.get(other, f) == f, (jid, "one flavor per group")
            # The gang: exactly count tasks, tasksPerNode per node, distinct schedulable
            # nodes that carry every assigned flavor's labels and the node selector.
            assert sum(n.count for n in psa.nodes) == pod_set.count, (jid, psa)
            names = [n.node for n in psa.nodes]
            assert len(set(names)) == len(names), (jid, "a node listed twice", psa)
            tolerations = [*pod_set.tolerations]
            for f in set(flavors.values()):
                tolerations.extend(self.flavors[f].tolerations)
            for na in psa.nodes:
                assert na.count > 0, (jid, psa)
                if pod_set.tasks_per_node:
                    assert na.count == pod_set.tasks_per_node, (jid, "tasksPerNode", psa)
                elif pod_set.exclusive:
                    assert na.count == 1, (jid, "exclusive takes one task per node", psa)
                node = self.nodes[na.node]
                assert node.state is AdminState.UP, (jid, f"{node.name} is {node.state}")
                labels = node.labels
                for f in flavors.values():
                    for k, v in self.flavors[f].node_labels.items():
                        assert labels.get(k) == v, (jid, f"{node.name} is not in flavor {f}")
                for k, v in pod_set.node_selector.items():
                    assert labels.get(k) == v, (jid, f"{node.name} misses selector {k}={v}")
                assert _tolerated(node.taints, tolerations), (jid, f"taint on {node.name}")
        # Borrowing: the flag says whether the job takes the queue past its nominal quota.
        before = self.cq_usage().get(cq_name, {})
        nominal = self.tree.nominal["cq:" + cq_name]
        borrows = any(
            before.get(fr, 0) + amount > nominal.get(fr, 0)
            for fr, amount in self.job_usage(admit).items()
        )
        assert admit.borrowing == borrows, (jid, "borrowing flag", admit.borrowing)
        self.check_fifo(job, cq)

    def check_fifo(self, job: Job, cq: ClusterQueue) -> None:
        """Admission order inside a queue: StrictFIFO admits its head; BestEffortFIFO the
        head of each shape. With ``phalanx`` priorities only compare within one tenant, one
        priority value and one size, where they grow with age."""
        strict = cq.queueing_strategy is QueueingStrategy.STRICT_FIFO

        def key(j: Job) -> tuple[Any, ...]:
            return (-(j.priority or 0), j.submit_time, j.id)

        def comparable(other: Job) -> bool:
            if not strict and _shape(other) != _shape(job):
                return False
            if self.preset == "kueue":
                return True
            return (other.tenant, other.priority or 0, other.gpus) == (
                job.tenant,
                job.priority or 0,
                job.gpus,
            )

        for jid in self.pending:
            other = self.jobs[jid]
            if jid == job.id or self.cluster_queue_of(other) != cq.name:
                continue
            if comparable(other):
                assert key(other) > key(job), (
                    f"job {job.id} admitted ahead of job {jid} in {cq.queueing_strategy} {cq.name}"
                )

    def node_usage(self) -> tuple[dict[str, dict[str, int]], dict[str, list[tuple[int, bool]]]]:
        used: dict[str, dict[str, int]] = {}
        holders: dict[str, list[tuple[int, bool]]] = {}
        for admit in self.admitted.values():
            job = self.jobs[admit.job_id]
            for pod_set, psa in zip(job.pod_sets, admit.pod_sets, strict=True):
                for na in psa.nodes:
                    into = used.setdefault(na.node, {})
                    holders.setdefault(na.node, []).append((admit.job_id, pod_set.exclusive))
                    if pod_set.exclusive:
                        for r, a in self.nodes[na.node].capacity.items():
                            _add(into, r, a)
                        for r, a in _requested(pod_set).items():
                            assert a * na.count <= self.nodes[na.node].capacity.get(r, 0), (
                                admit.job_id,
                                f"exclusive tasks do not fit {na.node}",
                            )
                    else:
                        for r, a in _requested(pod_set).items():
                            _add(into, r, a * na.count)
        return used, holders

    def check_nodes(self) -> None:
        """No node is over-committed; an exclusive holder is alone on its node."""
        used, holders = self.node_usage()
        for name, amounts in used.items():
            capacity = self.nodes[name].capacity
            for r, a in amounts.items():
                assert a <= capacity.get(r, 0), f"{name} over-committed on {r}: {a}"
            if any(exclusive for _, exclusive in holders[name]):
                assert len(holders[name]) == 1, f"{name} is shared by {holders[name]}"

    def check_quota(self) -> None:
        bad = self.tree.violations(self.cq_usage())
        assert not bad, bad

    def check_engine_counters(self, engine: Engine) -> None:
        """The engine's incremental counters agree with the recomputation."""
        cq_usage = self.cq_usage()
        tree_usage = self.tree.usage(cq_usage)
        cache = engine.cache
        for name, info in cache.cluster_queues.items():
            assert _nonzero(info.node.usage) == _nonzero(cq_usage.get(name, {})), name
        for name, qnode in cache.cohort_nodes.items():
            assert _nonzero(qnode.usage) == _nonzero(tree_usage["co:" + name]), name
        used, holders = self.node_usage()
        for name, slot in cache.nodes.items():
            expected = dict(used.get(name, {}))
            # A node counts its GPUs in thousandths too (no shares in these scenarios).
            expected[GPU_MILLI] = 1000 * expected.get(GPU, 0)
            assert _nonzero(slot.used) == _nonzero(expected), name
            assert set(slot.jobs) == {j for j, _ in holders.get(name, [])}, name

    # liveness --------------------------------------------------------------

    def fits_now(self, job: Job) -> bool:
        """A sufficient condition for the job to fit the cluster as it is now.

        Only for single-group ClusterQueues: some flavor F holds the whole job within
        the queue's current availability of F (Kueue's ``available``, recomputed), and
        every pod set fits the free capacity of F's eligible nodes even if each earlier
        pod set of the job had taken ``units`` of the best of them. On an empty cluster
        availability is at least the nominal quota.
        """
        cq = self.cqs[self.cluster_queue_of(job)]
        if len(cq.resource_groups) != 1:
            return False
        group = cq.resource_groups[0]
        requested = [_requested(p) for p in job.pod_sets]
        if not all(req and set(req) <= set(group.covered_resources) for req in requested):
            return False
        totals: dict[str, int] = {}
        for pod_set, req in zip(job.pod_sets, requested, strict=True):
            for r, a in req.items():
                _add(totals, r, a * pod_set.count)
        usage = self.tree.usage(self.cq_usage())
        used, holders = self.node_usage()
        for fq in group.flavors:
            key = "cq:" + cq.name
            if any(totals[r] > self.tree.available(key, (fq.name, r), usage) for r in totals):
                continue
            if self._places(job, self.flavors[fq.name], requested, used, holders):
                return True
        return False

    def _places(
        self,
        job: Job,
        flavor: ResourceFlavor,
        requested: list[dict[str, int]],
        used: dict[str, dict[str, int]],
        holders: dict[str, list[tuple[int, bool]]],
    ) -> bool:
        taken = 0
        for pod_set, req in zip(job.pod_sets, requested, strict=True):
            size = pod_set.tasks_per_node or 1
            units = pod_set.count // size
            fits: list[int] = []
            for node in self.nodes.values():
                labels = node.labels
                if node.state is not AdminState.UP:
                    continue
                if any(labels.get(k) != v for k, v in flavor.node_labels.items()):
                    continue
                if any(labels.get(k) != v for k, v in pod_set.node_selector.items()):
                    continue
                if not _tolerated(node.taints, [*pod_set.tolerations, *flavor.tolerations]):
                    continue
                if pod_set.exclusive and holders.get(node.name):
                    continue
                free = {r: node.capacity.get(r, 0) - used.get(node.name, {}).get(r, 0) for r in req}
                n = min(free[r] // (a * size) for r, a in req.items())
                if pod_set.exclusive or pod_set.tasks_per_node:
                    n = min(n, 1)
                fits.append(n)
            fits.sort(reverse=True)
            if sum(fits[taken:]) < units:
                return False
            taken += units
        return True

    def starving(self) -> list[int]:
        """Pending jobs that fit now although the cycle that just ran left them pending.

        A cycle admits everything that fits: in a BestEffortFIFO queue no pending job may
        fit afterwards. In a StrictFIFO queue only the head can be admitted; with ``kueue``
        ordering the head is the job with the lowest ``(-priority, submit time, id)``; with
        ``phalanx`` ordering it is not known from outside, so a StrictFIFO queue only
        starves when every one of its pending jobs fits.
        """
        by_cq: dict[str, list[Job]] = {}
        for jid in self.pending:
            job = self.jobs[jid]
            by_cq.setdefault(self.cluster_queue_of(job), []).append(job)
        starved: list[int] = []
        for name, jobs in by_cq.items():
            if self.cqs[name].queueing_strategy is QueueingStrategy.BEST_EFFORT_FIFO:
                starved.extend(j.id for j in jobs if self.fits_now(j))
            elif self.preset == "kueue":
                head = min(jobs, key=lambda j: (-(j.priority or 0), j.submit_time, j.id))
                if self.fits_now(head):
                    starved.append(head.id)
            elif all(self.fits_now(j) for j in jobs):
                starved.extend(j.id for j in jobs)
        return sorted(starved)


# --------------------------------------------------------------------------- the driver

Step = tuple[str, Any]
"""``("event", event)`` or ``("cycle", now)``."""


def _dump(decisions: list[Decision]) -> str:
    return json.dumps([d.to_dict() for d in decisions])


@dataclass
class Run:
    """One scenario driven through an engine, with every step recorded for replay."""

    scn: Scenario
    engine: Engine
    checker: Checker
    trace: list[Step] = field(default_factory=list)
    cycles: list[str] = field(default_factory=list)
    now: float = 1000.0
    next_id: int = 1
    snapshot: str | None = None
    snapshot_step: int = 0
    snapshot_cycle: int = 0
    zero_checks: list[str] = field(default_factory=list)
    unsound_parking: list[str] = field(default_factory=list)
    starved: list[str] = field(default_factory=list)

    def apply(self, event: Event) -> None:
        self.engine.apply(event)
        self.checker.on_event(event)
        self.trace.append(("event", event))

    def cycle(self, advance: float = 1.0) -> list[Decision]:
        self.now += advance
        decisions = self.engine.cycle(self.now)
        self.trace.append(("cycle", self.now))
        self.cycles.append(_dump(decisions))
        self.checker.on_decisions(decisions, self.engine)
        starving = self.checker.starving()
        if starving:
            self.starved.append(f"after cycle {len(self.cycles)} at {self.now}: {starving} fit")
        if self.checker.pending:
            self.parking_is_sound(f"after cycle {len(self.cycles)}")
        return decisions

    def pick(self, ids: Iterable[int], k: int) -> int | None:
        ordered = sorted(ids)
        return ordered[k % len(ordered)] if ordered else None

    def finish_all(self) -> None:
        for jid in sorted(self.checker.admitted):
            self.apply(Finish(jid))

    def do(self, op: Op) -> None:
        kind = op[0]
        c = self.checker
        if kind == "submit":
            draft: JobDraft = op[1]
            cq = self.scn.cluster_queues[draft.cq].name
            job = Job(
                id=self.next_id,
                tenant=draft.tenant,
                queue=f"lq-{cq}" if draft.via_local_queue else None,
                cluster_queue=None if draft.via_local_queue else cq,
                priority=draft.priority,
                pod_sets=list(draft.pod_sets),
                submit_time=self.now,
            )
            self.next_id += 1
            self.apply(Submit(job))
        elif kind == "cycle":
            self.cycle(op[1])
        elif kind == "usage":
            self.apply(TenantUsage(op[1], op[2], op[3]))
        elif kind == "node":
            node = self.scn.nodes[op[1] % len(self.scn.nodes)]
            self.apply(Upsert(c.nodes[node.name].model_copy(update={"state": op[2]})))
        else:
            pool = c.pending if kind in ("finish_pending", "cancel") else c.admitted
            jid = self.pick(pool, op[1])
            if jid is None:
                return
            if kind in ("finish", "finish_pending"):
                self.apply(Finish(jid))
            elif kind in ("cancel", "cancel_admitted"):
                self.apply(Cancel(jid))
            else:
                self.apply(Requeue(jid))

    def engine_is_empty(self, when: str) -> None:
        """All quota and node usage in the engine is back to zero."""
        cache = self.engine.cache
        for name, info in cache.cluster_queues.items():
            if any(info.node.usage.values()):
                self.zero_checks.append(f"{when}: cq {name} usage {info.node.usage}")
        for name, qnode in cache.cohort_nodes.items():
            if any(qnode.usage.values()):
                self.zero_checks.append(f"{when}: cohort {name} usage {qnode.usage}")
        for name, slot in cache.nodes.items():
            if any(slot.used.values()) or slot.jobs or slot.exclusive_jobs:
                self.zero_checks.append(f"{when}: node {name} used {slot.used} {slot.jobs}")

    def parking_is_sound(self, when: str) -> None:
        """Right after a cycle, waking every parked queue and cycling again at the same
        time admits nothing: whatever is parked really does not fit now."""
        copy = load_state(json.loads(json.dumps(export_state(self.engine))))
        for cq in self.scn.cluster_queues:
            copy.apply(Upsert(cq))
        admitted = [d.job_id for d in copy.cycle(self.now) if isinstance(d, Admit)]
        if admitted:
            self.unsound_parking.append(f"{when}: a forced wake-up admits {admitted}")

    def run(self) -> Run:
        for event in self.scn.config_events():
            self.apply(event)
        for i, op in enumerate(self.scn.ops):
            if i == self.scn.snapshot_at:
                self.take_snapshot()
            self.do(op)
        if self.scn.snapshot_at == len(self.scn.ops):
            self.take_snapshot()
        self.cycle()
        # Everything admitted finishes: usage is back to zero.
        self.finish_all()
        self.engine_is_empty("after finishing every admitted job")
        # Liveness: on an emptied cluster, cycle until nothing more is admitted.
        for _ in range(200):
            if not any(isinstance(d, Admit) for d in self.cycle()):
                break
            self.finish_all()
        else:
            raise AssertionError("the liveness loop did not settle")
        for jid in sorted(self.checker.pending):
            self.apply(Cancel(jid))
        self.cycle()
        self.finish_all()
        self.engine_is_empty("after every job left")
        if self.engine.jobs or self.engine.pending_count() or self.engine.admitted_count():
            self.zero_checks.append("jobs remain in the engine after every job left")
        return self

    def take_snapshot(self) -> None:
        self.snapshot = json.dumps(export_state(self.engine))
        self.snapshot_step = len(self.trace)
        self.snapshot_cycle = len(self.cycles)


def run_scenario(scn: Scenario) -> Run:
    return Run(scn, Engine(EngineConfig(preset=scn.preset)), Checker(scn)).run()


def replay(engine: Engine, steps: Iterable[Step]) -> list[str]:
    out = []
    for kind, payload in steps:
        if kind == "event":
            engine.apply(payload)
        else:
            out.append(_dump(engine.cycle(payload)))
    return out


# --------------------------------------------------------------------------- regressions
# Minimal scenarios of bugs these properties found, kept as explicit examples.


def _one_group_queue(name: str, flavors: Iterable[str], gpus: int = 32) -> ClusterQueue:
    return ClusterQueue.model_validate(
        {
            "name": name,
            "resourceGroups": [
                {
                    "coveredResources": [GPU, CPU],
                    "flavors": [
                        {
                            "name": f,
                            "resources": [
                                {"name": GPU, "nominalQuota": gpus},
                                {"name": CPU, "nominalQuota": "64"},
                            ],
                        }
                        for f in flavors
                    ],
                }
            ],
        }
    )


def _draft(*pod_sets: PodSet, tenant: str = "t0") -> JobDraft:
    return JobDraft(cq=0, via_local_queue=False, tenant=tenant, priority=None, pod_sets=pod_sets)


def _node(name: str, pool: str, gpus: int, cpu: str = "16") -> Node:
    return Node(name=name, labels={"pool": pool}, capacity={GPU: gpus, CPU: cpu, MEMORY: "64Gi"})


def regression_tenant_usage_loses_head() -> Scenario:
    """TenantUsage re-sorted a tenant's jobs after changing their keys; the old head then
    looked like a follower, its shape was never re-offered and the queue had no head
    until the next priority recalculation (engine.py ``_reprioritize``)."""
    job = _draft(PodSet(name="ps0", count=1, requests={GPU: 1, CPU: "500m"}), tenant="t1")
    return Scenario(
        preset="phalanx",
        flavors=[ResourceFlavor(name="f0")],
        nodes=[_node("n00", "a", 8)],
        cohorts=[],
        cluster_queues=[_one_group_queue("cq0", ["f0"])],
        ops=[("cycle", 0.0), ("submit", job), ("submit", job), ("usage", "t1", 0.25, None)],
        snapshot_at=0,
    )


def regression_cpu_buckets_round_up() -> Scenario:
    """On a flavor of GPU-less nodes (whole-core buckets) placement rounded a 500m task up
    to a core: eight 500m tasks were "at most 4 fit" on an idle 4-core node
    (placement.py, capacity.py ``upper_bound_units``)."""
    return Scenario(
        preset="kueue",
        flavors=[ResourceFlavor(name="f0", node_labels={"pool": CPU_POOL})],
        nodes=[_node("n00", CPU_POOL, 0, cpu="4")],
        cohorts=[],
        cluster_queues=[_one_group_queue("cq0", ["f0"])],
        ops=[("submit", _draft(PodSet(name="ps0", count=8, requests={GPU: 0, CPU: "500m"})))],
        snapshot_at=0,
    )


def regression_earlier_pod_set_wakes() -> Scenario:
    """A two-pod-set job whose first pod set fell back to the second flavor's node (the
    first flavor's was busy) left no room for the second pod set; it was parked on the
    second flavor only, so the first flavor's node coming free never woke it and it
    stayed pending on an empty cluster (explain.py ``wake_conditions``)."""
    blocker = _draft(
        PodSet(name="ps0", count=1, requests={GPU: 8, CPU: "1"}, node_selector={"pool": "a"})
    )
    pair = _draft(
        PodSet(name="ps0", count=1, requests={GPU: 8, CPU: "1"}),
        PodSet(name="ps1", count=1, requests={GPU: 8, CPU: "1"}, node_selector={"pool": "b"}),
    )
    return Scenario(
        preset="kueue",
        flavors=[
            ResourceFlavor(name="f0", node_labels={"pool": "a"}),
            ResourceFlavor(name="f1", node_labels={"pool": "b"}),
        ],
        nodes=[_node("n00", "a", 8), _node("n01", "b", 8)],
        cohorts=[],
        cluster_queues=[_one_group_queue("cq0", ["f0", "f1"])],
        ops=[
            ("submit", blocker),
            ("cycle", 1.0),
            ("submit", pair),
            ("cycle", 1.0),
            ("finish", 0),
            ("cycle", 1.0),
        ],
        snapshot_at=0,
    )


# --------------------------------------------------------------------------- properties


@PROPERTY_SETTINGS
@given(scenario_st())
def test_admissions_respect_nodes_quota_cohorts_and_gangs(scn: Scenario) -> None:
    # Checked after every cycle by the checker: no node over-committed (exclusive holders
    # alone); queue usage within nominal+borrowingLimit and potential availability; cohort
    # usage within what the tree can lend, lenders' private quota untouched; every Admit
    # places whole gangs on eligible nodes, with a truthful borrowing flag and FIFO order;
    # the engine's incremental counters equal the recomputation.
    run = run_scenario(scn)
    assert run.checker.admissions >= 0


@PROPERTY_SETTINGS
@given(scenario_st())
def test_replay_gives_identical_decisions(scn: Scenario) -> None:
    # Determinism: the same events into a fresh engine give byte-identical decisions.
    run = run_scenario(scn)
    again = replay(Engine(EngineConfig(preset=scn.preset)), run.trace)
    assert again == run.cycles


@PROPERTY_SETTINGS
@given(scenario_st())
def test_snapshot_round_trip_continues_identically(scn: Scenario) -> None:
    # export_state -> JSON -> load_state mid-stream, then the rest of the stream: the
    # loaded engine decides exactly what the original decided, and re-exports the same state.
    run = run_scenario(scn)
    assert run.snapshot is not None
    state = json.loads(run.snapshot)
    loaded = load_state(state)
    assert json.dumps(export_state(loaded)) == run.snapshot
    rest = replay(loaded, run.trace[run.snapshot_step :])
    assert rest == run.cycles[run.snapshot_cycle :]


@PROPERTY_SETTINGS
@given(scenario_st())
def test_usage_returns_to_zero(scn: Scenario) -> None:
    # When every admitted job has finished, every QuotaNode usage and NodeSlot allocation in
    # the engine is exactly zero (and nothing is left behind once all jobs are gone).
    run = run_scenario(scn)
    assert run.zero_checks == []


@PROPERTY_SETTINGS
@given(scenario_st())
@example(regression_tenant_usage_loses_head())
@example(regression_cpu_buckets_round_up())
@example(regression_earlier_pod_set_wakes())
def test_liveness_and_work_conservation(scn: Scenario) -> None:
    # Liveness: after every cycle no pending job that fits the cluster as it is (its queue's
    # availability, free node capacity) is left behind; in particular, cycling an emptied
    # cluster until nothing changes leaves no job that fits it within nominal quota. And no
    # parked job is one that a forced wake-up would admit.
    run = run_scenario(scn)
    assert run.starved == []
    assert run.unsound_parking == []

"""Kueue conformance: table-driven admission scenarios run against the engine.

Every ``scenarios/*.yaml`` file is one case transcribed from Kueue's own unit
tests (``pkg/scheduler/scheduler_test.go``, ``pkg/scheduler/preemption/*_test.go``,
``pkg/scheduler/flavorassigner/*_test.go``, ``pkg/scheduler/scheduler_fs_test.go``,
...); its ``source`` names the file and the case. A file holds:

``name``, ``description``, ``source``
    what the case shows and where in Kueue it comes from.
``covers``
    the admission rules it exercises (see :data:`RULES`; every rule has a case).
``config``
    optional Kueue ``Configuration`` blocks: ``fairSharing`` (``preemptionStrategies``)
    and ``waitForPodsReady`` (``timeout``, ``blockAdmission``, ``recoveryTimeout``,
    ``requeuingStrategy: {timestamp, backoffLimitCount, backoffBaseSeconds,
    backoffMaxSeconds}``). The engine always starts from ``EngineConfig.for_preset("kueue")``.
``setup``
    real Kueue YAML (ResourceFlavor, Cohort, ClusterQueue, LocalQueue,
    WorkloadPriorityClass), phalanx Tenants for namespace labels, and v1 Nodes large
    enough that node capacity never decides a quota case; loaded with
    :func:`phalanx.dialects.kueue.load_text`.
``workloads``
    each with ``name``, ``queue`` (``namespace/localqueue``), ``priority`` or
    ``priorityClass``, ``created`` (seconds), and either ``requests`` + ``count``
    (+ ``minCount``) for a single pod set or ``podSets``. One with ``admission:
    {clusterQueue, flavors: {resource: flavor}, at, count}`` is already admitted and
    is fed to the engine with ``Adopt`` (in order of ``at``); the rest are submitted,
    unless ``deferred: true`` (then a ``submit`` step submits it).
``steps``
    optional; default ``[{run: <now>}]``. ``run: T`` cycles at time T until nothing
    changes, applying ``Requeue`` for every evicted job as the control plane does
    (Kueue's preemption is asynchronous: victims keep their quota until requeued, the
    preemptor is admitted a cycle later). ``cycle: T`` runs exactly one cycle and
    requeues nothing. ``requeue: [names]`` / ``requeue: evicted``, ``finish: [names]``,
    ``podsReady: [names]`` (with ``at``), ``submit: [names]``, ``apply: <yaml>`` and
    ``expect: {...}`` (checked at that point) are the other steps.
``expect``
    one entry per workload, checked after the steps: ``untouched`` (admitted before and
    never evicted), ``admitted: {clusterQueue, flavors, count}`` (or ``podSets: {name:
    {flavors, count}}``), ``preempted: {reason, by}`` (an ``Evict`` with reason
    ``Preempted``, that preemption reason and that preemptor), ``evicted: {reason}``,
    ``deactivated: {reason}``, ``finished: {}`` (ended by a ``finish`` step), ``pending:
    {reason}`` (a reason code, or a case-insensitive substring of the pending message; ``{}``
    for any reason).

A failure names the scenario, the workload, what was expected and what happened.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

import phalanx.engine as engine_api
from phalanx.dialects.kueue import load_text
from phalanx.engine import (
    Admit,
    Adopt,
    Engine,
    EngineConfig,
    Evict,
    Finish,
    NodeAssignment,
    PodSetAssignment,
    Requeue,
    Submit,
    Upsert,
)
from phalanx.model import (
    ClusterQueue,
    Cohort,
    Job,
    JobState,
    LocalQueue,
    Node,
    PodSet,
    PriorityClass,
    ResourceFlavor,
    Tenant,
    Topology,
)

SCENARIOS = Path(__file__).parent / "scenarios"
MIN_SCENARIOS = 25
MAX_CYCLES_PER_RUN = 40

RULES = frozenset(
    {
        "borrow-in-first-flavor",
        "when-can-borrow-try-next-flavor",
        "when-can-preempt-may-stop-search",
        "when-can-preempt-try-next-flavor",
        "fungibility-preference",
        "borrowing-limit",
        "lending-limit",
        "hierarchical-cohorts",
        "non-borrowing-first",
        "one-head-per-cluster-queue",
        "strict-fifo",
        "best-effort-fifo",
        "within-cluster-queue-never",
        "within-cluster-queue-lower-priority",
        "within-cluster-queue-lower-or-newer-equal-priority",
        "reclaim-within-cohort-never",
        "reclaim-within-cohort-lower-priority",
        "reclaim-within-cohort-any",
        "borrow-within-cohort-threshold",
        "minimal-victims-fill-back",
        "hold-nominal-when-lender-cannot-reclaim",
        "fair-sharing-weights",
        "fair-sharing-drs-ordering",
        "fair-sharing-less-than-or-equal-to-final-share",
        "fair-sharing-less-than-initial-share",
        "partial-admission",
        "wait-for-pods-ready-timeout",
        "wait-for-pods-ready-backoff",
        "stop-policy-hold",
        "stop-policy-hold-and-drain",
        "namespace-selector",
    }
)
"""Every admission rule the suite must exercise at least once."""

_ENGINE_OBJECTS = (
    Node,
    ResourceFlavor,
    Topology,
    Cohort,
    ClusterQueue,
    LocalQueue,
    Tenant,
    PriorityClass,
)
_KIND_ORDER = {
    "Node": 0,
    "ResourceFlavor": 1,
    "Topology": 2,
    "PriorityClass": 3,
    "Tenant": 4,
    "Cohort": 5,
    "ClusterQueue": 6,
    "LocalQueue": 7,
}


class ScenarioError(Exception):
    """A scenario file that does not say what the runner needs (a bug in the file)."""


class MissingFeature(Exception):
    """The engine does not offer an interface the scenario needs yet."""


def _scenario_files() -> list[Path]:
    return sorted(SCENARIOS.glob("*.yaml"))


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ScenarioError(f"{path.name}: expected a mapping at the top level")
    for key in ("name", "description", "source", "covers", "setup", "workloads", "expect"):
        if key not in data:
            raise ScenarioError(f"{path.name}: missing {key!r}")
    return data


# --------------------------------------------------------------------------- configuration


def _seconds(value: Any, where: str) -> float:
    """A duration as Kueue writes it (``5m``, ``300s``, ``1h``) or a number of seconds."""
    if isinstance(value, int | float):
        return float(value)
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", str(value))
    if not match:
        raise ScenarioError(f"{where}: expected a duration such as 300s or 5m, got {value!r}")
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[match.group(2)]
    return float(match.group(1)) * scale


def _engine_class(name: str) -> Any:
    cls = getattr(engine_api, name, None)
    if cls is None:
        import phalanx.engine.config as config_module

        cls = getattr(config_module, name, None)
    if cls is None:
        raise MissingFeature(f"phalanx.engine has no {name}")
    return cls


def _config_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(EngineConfig)}


def build_config(spec: Mapping[str, Any]) -> EngineConfig:
    """``EngineConfig.for_preset("kueue")`` plus the scenario's Configuration blocks."""
    for_preset = getattr(EngineConfig, "for_preset", None)
    if for_preset is None:
        raise MissingFeature("EngineConfig.for_preset")
    base: EngineConfig = for_preset("kueue")
    fields = _config_fields()
    changes: dict[str, Any] = {}
    if "fairSharing" in spec:
        if "fair_sharing" not in fields:
            raise MissingFeature("EngineConfig.fair_sharing")
        fs = spec["fairSharing"] or {}
        kwargs: dict[str, Any] = {}
        if "preemptionStrategies" in fs:
            kwargs["preemption_strategies"] = tuple(fs["preemptionStrategies"])
        changes["fair_sharing"] = _engine_class("FairSharingConfig")(**kwargs)
    if "waitForPodsReady" in spec:
        if "wait_for_pods_ready" not in fields:
            raise MissingFeature("EngineConfig.wait_for_pods_ready")
        w = spec["waitForPodsReady"] or {}
        kwargs = {}
        if "timeout" in w:
            kwargs["timeout_s"] = _seconds(w["timeout"], "config.waitForPodsReady.timeout")
        if "recoveryTimeout" in w:
            kwargs["recovery_timeout_s"] = _seconds(
                w["recoveryTimeout"], "config.waitForPodsReady.recoveryTimeout"
            )
        if "blockAdmission" in w:
            kwargs["block_admission"] = bool(w["blockAdmission"])
        rq = w.get("requeuingStrategy") or {}
        if "timestamp" in rq:
            kwargs["requeuing_timestamp"] = rq["timestamp"]
        if "backoffLimitCount" in rq:
            kwargs["backoff_limit_count"] = int(rq["backoffLimitCount"])
        if "backoffBaseSeconds" in rq:
            kwargs["backoff_base_s"] = float(rq["backoffBaseSeconds"])
        if "backoffMaxSeconds" in rq:
            kwargs["backoff_max_s"] = float(rq["backoffMaxSeconds"])
        changes["wait_for_pods_ready"] = _engine_class("WaitForPodsReadyConfig")(**kwargs)
    return dataclasses.replace(base, **changes) if changes else base


# --------------------------------------------------------------------------- workloads


@dataclass
class Workload:
    """One workload of a scenario and what the engine did with it."""

    name: str
    id: int
    job: Job
    spec: dict[str, Any]
    admission: Admit | None = None
    evictions: list[Evict] = field(default_factory=list)
    requeued: int = 0
    deactivated: Any = None
    finished: bool = False
    adopted: bool = False


def _pod_sets(spec: Mapping[str, Any], where: str) -> list[PodSet]:
    raw = spec.get("podSets")
    if raw is None:
        if "requests" not in spec:
            raise ScenarioError(f"{where}: needs requests (and count) or podSets")
        raw = [
            {
                "name": "main",
                "count": spec.get("count", 1),
                "requests": spec["requests"],
                **({"minCount": spec["minCount"]} if "minCount" in spec else {}),
            }
        ]
    pod_sets = []
    for p in raw:
        data = {
            "name": p.get("name", "main"),
            "count": p.get("count", 1),
            "requests": p["requests"],
        }
        if "minCount" in p:
            if "min_count" not in PodSet.model_fields:
                raise MissingFeature("PodSet.min_count (partial admission)")
            data["min_count"] = p["minCount"]
        pod_sets.append(PodSet.model_validate(data))
    return pod_sets


def _job(job_id: int, spec: Mapping[str, Any], where: str) -> Job:
    queue = spec.get("queue")
    if not isinstance(queue, str) or "/" not in queue:
        raise ScenarioError(f"{where}.queue: expected namespace/localqueue, got {queue!r}")
    namespace, local_queue = queue.split("/", 1)
    return Job(
        id=job_id,
        name=spec["name"],
        tenant=namespace,
        queue=local_queue,
        priority=spec.get("priority"),
        priority_class=spec.get("priorityClass"),
        pod_sets=_pod_sets(spec, where),
        submit_time=float(spec.get("created", 0)),
    )


def _flavor_node(flavors: Mapping[str, ResourceFlavor], nodes: list[Node], flavor: str) -> str:
    rf = flavors.get(flavor)
    labels = rf.node_labels if rf is not None else {}
    for n in nodes:
        if all(n.labels.get(k) == v for k, v in labels.items()):
            return n.name
    raise ScenarioError(f"no Node carries the labels of flavor {flavor!r}")


def _adoption(
    w: Workload,
    flavors: Mapping[str, ResourceFlavor],
    nodes: list[Node],
    priority: int,
    where: str,
) -> Admit:
    adm = w.spec["admission"]
    default_flavors: dict[str, str] = dict(adm.get("flavors") or {})
    per_pod_set: Mapping[str, Any] = adm.get("podSets") or {}
    counts = adm.get("count")
    has_count = "count" in {f.name for f in dataclasses.fields(PodSetAssignment)}
    pod_sets = []
    for ps in w.job.pod_sets:
        own = per_pod_set.get(ps.name) or {}
        fl = {**default_flavors, **(own.get("flavors") or {})}
        missing = [r for r in ps.requests if r not in fl]
        if missing:
            raise ScenarioError(f"{where}.admission: no flavor for {', '.join(missing)}")
        count = own.get("count", counts.get(ps.name) if isinstance(counts, dict) else counts)
        count = ps.count if count is None else int(count)
        if count != ps.count and not has_count:
            raise MissingFeature("PodSetAssignment.count (partially admitted workloads)")
        node = _flavor_node(flavors, nodes, next(iter(fl.values())))
        kwargs: dict[str, Any] = {
            "name": ps.name,
            "flavors": tuple(sorted((r, fl[r]) for r in ps.requests)),
            "nodes": (NodeAssignment(node, count),),
        }
        if has_count:
            kwargs["count"] = count
        pod_sets.append(PodSetAssignment(**kwargs))
    return Admit(
        job_id=w.id,
        cluster_queue=adm["clusterQueue"],
        pod_sets=tuple(pod_sets),
        borrowing=bool(adm.get("borrowing", False)),
        priority=float(priority),
    )


# --------------------------------------------------------------------------- the run


class Run:
    """One scenario driven through a real engine."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = _load(path)
        self.name: str = self.data["name"]
        self.engine = Engine(build_config(self.data.get("config") or {}))
        self.flavors: dict[str, ResourceFlavor] = {}
        self.priority_classes: dict[str, int] = {}
        self.nodes: list[Node] = []
        self.apply_manifests(self.data["setup"])
        self.step_index = 0
        self.workloads: dict[str, Workload] = {}
        self.by_id: dict[int, Workload] = {}
        for i, spec in enumerate(self.data["workloads"]):
            where = f"workloads[{i}]"
            w = Workload(spec["name"], i + 1, _job(i + 1, spec, where), dict(spec))
            if w.name in self.workloads:
                raise ScenarioError(f"{where}: duplicate workload name {w.name!r}")
            self.workloads[w.name] = w
            self.by_id[w.id] = w
        adopted = [w for w in self.workloads.values() if "admission" in w.spec]
        adopted.sort(key=lambda w: (float(w.spec["admission"].get("at", w.job.submit_time)), w.id))
        for w in adopted:
            admit = _adoption(w, self.flavors, self.nodes, self.priority(w), f"workload {w.name}")
            self.engine.apply(_adopt_event(w.job, admit, w.spec["admission"]))
            w.admission, w.adopted = admit, True
        for w in self.workloads.values():
            if "admission" not in w.spec and not w.spec.get("deferred"):
                self.engine.apply(Submit(w.job))

    def apply_manifests(self, text: str) -> None:
        manifests = load_text(text, source=f"{self.path.name}:setup")
        manifests.sort(key=lambda m: _KIND_ORDER.get(m.kind, 99))
        for m in manifests:
            obj = m.obj
            if not isinstance(obj, _ENGINE_OBJECTS):
                raise ScenarioError(f"{self.name}: setup may not hold a {m.kind}")
            if isinstance(obj, ResourceFlavor):
                self.flavors[obj.name] = obj
            if isinstance(obj, Node):
                self.nodes.append(obj)
            if isinstance(obj, PriorityClass):
                self.priority_classes[obj.name] = obj.value
            self.engine.apply(Upsert(obj))

    def priority(self, w: Workload) -> int:
        """The workload's priority: its own, else its WorkloadPriorityClass's value, else 0."""
        if w.job.priority is not None:
            return w.job.priority
        if w.job.priority_class is not None:
            if w.job.priority_class not in self.priority_classes:
                raise ScenarioError(f"{self.name}: no WorkloadPriorityClass {w.job.priority_class}")
            return self.priority_classes[w.job.priority_class]
        return 0

    def names(self, value: Any) -> list[Workload]:
        names = [value] if isinstance(value, str) else list(value)
        try:
            return [self.workloads[n] for n in names]
        except KeyError as exc:
            raise ScenarioError(f"{self.name}: no workload named {exc.args[0]!r}") from None

    # ------------------------------------------------------------------ cycles

    def cycle(self, now: float) -> bool:
        """One engine cycle; True when it decided anything (a pending reason included)."""
        decisions = self.engine.cycle(now)
        changed = bool(decisions)
        for d in decisions:
            w = self.by_id.get(d.job_id)
            if w is None:
                continue
            if isinstance(d, Admit):
                w.admission = d
            elif isinstance(d, Evict):
                w.evictions.append(d)
            elif type(d).__name__ == "Deactivate":
                # The control plane ends a deactivated job (state FAILED), which frees
                # whatever it still holds.
                w.deactivated = d
                if w.admission is not None:
                    self.engine.apply(Finish(w.id, JobState.FAILED))
                w.admission = None
        return changed

    def requeue_evicted(self) -> None:
        for w in self.workloads.values():
            if len(w.evictions) > w.requeued and w.admission is not None:
                self.engine.apply(Requeue(w.id, w.evictions[-1].reason))
                w.requeued = len(w.evictions)
                w.admission = None

    def run(self, now: float) -> None:
        """Cycle until two cycles in a row decide nothing.

        Kueue's scheduler never stops cycling; with one head per ClusterQueue per cycle, a
        queue can take a cycle that decides nothing visible before its next head comes up.
        """
        quiet = 0
        for _ in range(MAX_CYCLES_PER_RUN):
            changed = self.cycle(now)
            self.requeue_evicted()
            quiet = 0 if changed else quiet + 1
            if quiet == 2:
                return

    def step(self, step: Mapping[str, Any]) -> None:
        if "run" in step:
            self.run(float(step["run"]))
        elif "cycle" in step:
            self.cycle(float(step["cycle"]))
        elif "requeue" in step:
            if step["requeue"] == "evicted":
                self.requeue_evicted()
            else:
                for w in self.names(step["requeue"]):
                    self.engine.apply(Requeue(w.id, w.evictions[-1].reason if w.evictions else ""))
                    w.requeued, w.admission = len(w.evictions), None
        elif "finish" in step:
            for w in self.names(step["finish"]):
                self.engine.apply(Finish(w.id))
                w.admission, w.finished = None, True
        elif "podsReady" in step:
            pods_ready = getattr(engine_api, "PodsReady", None)
            if pods_ready is None:
                raise MissingFeature("phalanx.engine.PodsReady")
            for w in self.names(step["podsReady"]):
                self.engine.apply(pods_ready(w.id, float(step.get("at", 0))))
        elif "submit" in step:
            for w in self.names(step["submit"]):
                self.engine.apply(Submit(w.job))
        elif "apply" in step:
            self.apply_manifests(step["apply"])
        elif "expect" in step:
            self.check(step["expect"], f"at step {self.step_index + 1}")
        else:
            raise ScenarioError(f"{self.name}: unknown step {dict(step)!r}")

    def play(self) -> None:
        steps = self.data.get("steps") or [{"run": self.data.get("now", 1000)}]
        for self.step_index, step in enumerate(steps):
            self.step(step)
        self.check(self.data["expect"], "at the end")

    # ------------------------------------------------------------------ checks

    def actual(self, w: Workload) -> str:
        parts = []
        if w.admission is not None:
            parts.append(f"admitted {_describe_admit(w.admission)}")
        elif w.deactivated is not None:
            parts.append(f"deactivated ({getattr(w.deactivated, 'reason', '')})")
        elif w.finished:
            parts.append("finished")
        else:
            reason = self.engine.explain(w.id)
            if reason is None:
                parts.append("pending (no reason)")
            else:
                parts.append(f"pending ({reason.code}: {reason.message})")
        for e in w.evictions:
            by = getattr(e, "preemptor", None)
            by_name = self.by_id[by].name if by in self.by_id else by
            parts.append(f"evicted {e.reason}/{getattr(e, 'preemption_reason', None)} by {by_name}")
        return "; ".join(parts)

    def check(self, expect: Mapping[str, Any], when: str) -> None:
        missing = set(self.workloads) - set(expect)
        if when == "at the end" and missing:
            raise ScenarioError(f"{self.name}: no expectation for {', '.join(sorted(missing))}")
        problems = []
        for name, want in expect.items():
            if name not in self.workloads:
                raise ScenarioError(f"{self.name}: expect names unknown workload {name!r}")
            w = self.workloads[name]
            problem = self.mismatch(w, want)
            if problem:
                problems.append(
                    f"  workload {name}: expected {want!r}, got {self.actual(w)} ({problem})"
                )
        if problems:
            pytest.fail(
                f"scenario {self.name} ({self.path.name}) {when}:\n" + "\n".join(problems),
                pytrace=False,
            )

    def mismatch(self, w: Workload, want: Any) -> str:
        if want == "untouched":
            if not w.adopted:
                raise ScenarioError(f"{self.name}: {w.name} is untouched but was not admitted")
            if w.evictions:
                return "it was evicted"
            if w.admission is None:
                return "it is no longer admitted"
            return ""
        if not isinstance(want, Mapping) or len(want) != 1:
            raise ScenarioError(f"{self.name}: {w.name}: one outcome per workload, got {want!r}")
        ((kind, body),) = want.items()
        body = body or {}
        if kind == "admitted":
            return self._admitted_mismatch(w, body)
        if kind == "preempted":
            hits = [e for e in w.evictions if e.reason == "Preempted"]
            if not hits:
                return "no Preempted eviction"
            e = hits[0]
            if "reason" in body and getattr(e, "preemption_reason", None) != body["reason"]:
                return f"preemption reason {getattr(e, 'preemption_reason', None)!r}"
            if "by" in body:
                by = getattr(e, "preemptor", None)
                expected = self.workloads[body["by"]].id
                if by != expected:
                    return f"preemptor id {by!r}, expected {expected} ({body['by']})"
            return ""
        if kind == "evicted":
            if not w.evictions:
                return "never evicted"
            if "reason" in body and all(e.reason != body["reason"] for e in w.evictions):
                return f"evicted with {[e.reason for e in w.evictions]}"
            return ""
        if kind == "deactivated":
            if w.deactivated is None:
                return "not deactivated"
            if "reason" in body and getattr(w.deactivated, "reason", None) != body["reason"]:
                return f"deactivation reason {getattr(w.deactivated, 'reason', None)!r}"
            return ""
        if kind == "finished":
            return "" if w.finished else "not finished"
        if kind == "pending":
            if w.admission is not None:
                return "it is admitted"
            if w.finished or w.deactivated is not None:
                return "it is no longer queued"
            if "reason" in body:
                reason = self.engine.explain(w.id)
                if reason is None:
                    return "the engine gives no reason"
                wanted = str(body["reason"])
                if reason.code != wanted and wanted.lower() not in reason.message.lower():
                    return f"reason {reason.code}"
            return ""
        raise ScenarioError(f"{self.name}: {w.name}: unknown outcome {kind!r}")

    def _admitted_mismatch(self, w: Workload, body: Mapping[str, Any]) -> str:
        a = w.admission
        if a is None:
            return "not admitted"
        if "clusterQueue" in body and a.cluster_queue != body["clusterQueue"]:
            return f"in ClusterQueue {a.cluster_queue}"
        wanted_sets: dict[str, dict[str, Any]] = {}
        for ps in w.job.pod_sets:
            own = (body.get("podSets") or {}).get(ps.name) or {}
            count = body.get("count")
            if isinstance(count, Mapping):
                count = count.get(ps.name)
            wanted_sets[ps.name] = {
                "flavors": {**(body.get("flavors") or {}), **(own.get("flavors") or {})},
                "count": own.get("count", count),
            }
        for assigned in a.pod_sets:
            want = wanted_sets.get(assigned.name)
            if want is None:
                return f"unexpected pod set {assigned.name}"
            got = dict(assigned.flavors)
            for resource, flavor in want["flavors"].items():
                if got.get(resource) != flavor:
                    return f"pod set {assigned.name}: {resource} in flavor {got.get(resource)}"
            count = _admitted_count(assigned)
            if want["count"] is not None and count != int(want["count"]):
                return f"pod set {assigned.name}: count {count}"
        return ""


def _admitted_count(ps: PodSetAssignment) -> int:
    count = getattr(ps, "count", None)
    if count is None or count < 0:
        return sum(n.count for n in ps.nodes)
    return int(count)


def _describe_admit(a: Admit) -> str:
    sets = ", ".join(f"{p.name}x{_admitted_count(p)} {dict(p.flavors)}" for p in a.pod_sets)
    return f"in {a.cluster_queue} [{sets}]"


def _adopt_event(job: Job, admit: Admit, spec: Mapping[str, Any]) -> Adopt:
    """``Adopt``, carrying the admission time when the engine's event has a field for it."""
    names = {f.name for f in dataclasses.fields(Adopt)}
    at = float(spec.get("at", job.submit_time))
    extra: dict[str, Any] = {}
    for candidate in ("time", "admitted_at", "admission_time"):
        if candidate in names:
            extra[candidate] = at
            break
    return Adopt(job, admit, **extra)


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("path", _scenario_files(), ids=lambda p: p.stem)
def test_scenario(path: Path) -> None:
    try:
        run = Run(path)
        run.play()
    except MissingFeature as exc:
        pytest.fail(f"scenario {path.stem}: the engine lacks {exc}", pytrace=False)


def test_scenario_files_are_complete() -> None:
    """At least MIN_SCENARIOS cases, each well formed, and every rule covered."""
    files = _scenario_files()
    assert len(files) >= MIN_SCENARIOS, f"only {len(files)} scenarios"
    covered: set[str] = set()
    names: set[str] = set()
    for path in files:
        data = _load(path)
        assert data["name"] not in names, f"{path.name}: duplicate scenario name"
        names.add(data["name"])
        tags = data["covers"]
        assert isinstance(tags, list) and tags, f"{path.name}: covers must be a non-empty list"
        unknown = set(tags) - RULES
        assert not unknown, f"{path.name}: unknown rules {sorted(unknown)}"
        covered.update(tags)
        assert "pkg/" in data["source"] or "test/" in data["source"], (
            f"{path.name}: source must name the Kueue test it comes from"
        )
        # The setup is real Kueue YAML that the manifest loader accepts.
        load_text(data["setup"], source=path.name)
    assert not RULES - covered, f"rules without a scenario: {sorted(RULES - covered)}"

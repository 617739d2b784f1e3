"""Job manifests to submissions: pod sets, requests, queues, run plans, field errors."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from phalanx.dialects.kueue.jobs import (
    JOB_KINDS,
    JobFieldError,
    convert_job,
    expand_vars,
    pod_names,
    pod_plan,
)
from tests.kueue_jobs.conftest import SEED, UPSTREAM, needs_seed, needs_upstream


def _doc(path: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((UPSTREAM / path).read_text()) if d]
    assert len(docs) == 1
    doc: dict[str, Any] = docs[0]
    return doc


def _convert(doc: dict[str, Any]) -> Any:
    return convert_job(JOB_KINDS[(doc["apiVersion"], doc["kind"])], doc)


@needs_upstream
def test_sample_job_generate_name_and_requests() -> None:
    job = _convert(_doc("jobs/sample-job.yaml"))
    assert job.kind == "Job" and job.namespace == "default"
    assert re.fullmatch(r"sample-job-[bcdfghjklmnpqrstvwxz2456789]{5}", job.name)
    assert job.manifest["metadata"]["name"] == job.name
    assert "generateName" not in job.manifest["metadata"]
    [pod_set] = job.submission.pod_sets
    assert (pod_set.name, pod_set.count) == ("main", 3)
    assert pod_set.requests == {"cpu": 1000, "memory": 200 << 20}
    assert job.submission.queue == "user-queue" and job.submission.tenant == "default"
    plan = pod_plan(job.submission.run.kube, {"main": 3})
    assert [t[0]["containers"][0]["command"] for t in plan["main"]] == [
        ["/bin/sh", "-c", "sleep 60"]
    ] * 3
    assert pod_names(job.submission.run.kube, {}) == [f"{job.name}-{i}" for i in range(3)]


@needs_upstream
def test_partial_admission_min_count_and_missing_command() -> None:
    job = _convert(_doc("jobs/sample-job-partial-admission.yaml"))
    [pod_set] = job.submission.pod_sets
    assert (pod_set.count, pod_set.min_count) == (20, 5)
    # Admitted with 5 pods: 5 slots, each runs 4 of the 20 completions.
    plan = pod_plan(job.submission.run.kube, {"main": 5})["main"]
    assert len(plan) == 5 and [len(slot) for slot in plan] == [4] * 5
    container = plan[0][0]["containers"][0]
    assert container["command"] == []  # args only: the image's entrypoint is unknown
    assert container["field"] == "spec.template.spec.containers[0].command"


@needs_upstream
def test_jobset_pod_sets_and_pod_names() -> None:
    doc = _doc("jobs/sample-jobset-tas-combined.yaml")
    doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"].pop("annotations")
    doc["spec"]["replicatedJobs"][0]["replicas"] = 2
    job = _convert(doc)
    assert [(p.name, p.count) for p in job.submission.pod_sets] == [("workers", 16)]
    kube = job.submission.run.kube
    hosts = pod_names(kube, {})
    assert hosts[0] == "jobset-tas-combined-workers-0-0"
    assert hosts[8] == "jobset-tas-combined-workers-1-0"
    ninth = pod_plan(kube, {})["workers"][9][0]
    assert ninth["env"]["JOB_COMPLETION_INDEX"] == "1" and ninth["env"]["JOB_INDEX"] == "1"


@needs_upstream
def test_two_replicated_jobs() -> None:
    job = _convert(_doc("jobs/sample-jobset.yaml"))
    assert [(p.name, p.count, p.requests["cpu"]) for p in job.submission.pod_sets] == [
        ("workers", 1, 1000),
        ("driver", 1, 2000),
    ]


@needs_upstream
def test_pytorchjob_rendezvous_environment() -> None:
    doc = _doc("jobs/sample-pytorchjob.yaml")
    doc["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3
    job = _convert(doc)
    assert [(p.name, p.count) for p in job.submission.pod_sets] == [("master", 1), ("worker", 3)]
    plan = pod_plan(job.submission.run.kube, {})
    envs = [slot[0]["env"] for slot in (*plan["master"], *plan["worker"])]
    assert [e["HOSTNAME"] for e in envs] == [
        "pytorch-simple-master-0",
        *(f"pytorch-simple-worker-{i}" for i in range(3)),
    ]
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert {e["WORLD_SIZE"] for e in envs} == {"4"}
    assert {e["MASTER_ADDR"] for e in envs} == {"pytorch-simple-master-0"}
    assert {e["MASTER_PORT"] for e in envs} == {"23456"}
    assert {e["LOCAL_RANK"] for e in envs} == {"0"}


@needs_upstream
def test_rayjob_head_runs_the_entrypoint() -> None:
    job = _convert(_doc("jobs/ray-job-sample.yaml"))
    assert [(p.name, p.count) for p in job.submission.pod_sets] == [("head", 1), ("small-group", 1)]
    plan = pod_plan(job.submission.run.kube, {})
    assert plan["head"][0][0]["containers"][0]["command"] == [
        "/bin/sh",
        "-c",
        "python /home/ray/samples/sample_code.py",
    ]
    assert plan["small-group"][0][0]["waitForHead"] is True


def test_workload_v1beta2() -> None:
    doc = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "wl", "namespace": "team-a"},
        "spec": {
            "queueName": "lq",
            "priorityClassRef": {
                "group": "kueue.x-k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": "high",
            },
            "podSets": [
                {
                    "name": "driver",
                    "count": 4,
                    "minCount": 2,
                    "template": {
                        "spec": {
                            "nodeSelector": {"zone": "a"},
                            "tolerations": [{"key": "gpu", "operator": "Exists"}],
                            "initContainers": [
                                {
                                    "name": "init",
                                    "command": ["true"],
                                    "resources": {"requests": {"cpu": "3"}},
                                }
                            ],
                            "containers": [
                                {
                                    "name": "a",
                                    "command": ["true"],
                                    "resources": {"requests": {"cpu": "1"}},
                                },
                                {
                                    "name": "b",
                                    "command": ["true"],
                                    "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": 1}},
                                },
                            ],
                        }
                    },
                }
            ],
        },
    }
    job = _convert(doc)
    [pod_set] = job.submission.pod_sets
    assert (pod_set.count, pod_set.min_count) == (4, 2)
    # max(sum of containers, each init container), per resource, as Kubernetes computes it.
    assert pod_set.requests == {"cpu": 3000, "nvidia.com/gpu": 1}
    assert pod_set.node_selector == {"zone": "a"}
    assert pod_set.tolerations[0].key == "gpu"
    assert (job.submission.queue, job.submission.priority_class) == ("lq", "high")
    assert job.submission.tenant == "team-a"


@needs_seed
def test_seed_job_suspend_comment_is_named() -> None:
    text = (SEED / "kueue-job.yaml").read_text()
    text = re.sub(r"^//.*$", "", text, flags=re.M)
    with pytest.raises(JobFieldError) as err:
        convert_job("Job", yaml.safe_load(text))
    assert str(err.value) == (
        "spec.suspend: expected a boolean, got the string "
        '"true // Handled atomically by Kueue admission controller"'
    )
    fixed = yaml.safe_load(text.replace("// Handled", "# Handled"))
    job = convert_job("Job", fixed)
    assert job.submission.run.kube is not None and job.submission.run.kube.suspend is True
    assert job.submission.queue == "nlp-local-queue"
    [pod_set] = job.submission.pod_sets
    assert pod_set.count == 2 and pod_set.requests["nvidia.com/gpu"] == 8


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        ({"parallelism": "2"}, "spec.parallelism", 'expected an integer, got the string "2"'),
        ({"completionMode": "Sparse"}, "spec.completionMode", "expected Indexed or NonIndexed"),
        ({"backoffLimit": -1}, "spec.backoffLimit", "expected an integer >= 0, got -1"),
        (
            {"template": {"spec": {"containers": []}}},
            "spec.template.spec.containers",
            "at least one",
        ),
    ],
)
@needs_upstream
def test_bad_fields_are_named(change: dict[str, Any], path: str, message: str) -> None:
    doc = _doc("getting-started/quick-start-job.yaml")
    doc["spec"].update(change)
    with pytest.raises(JobFieldError) as err:
        convert_job("Job", doc)
    assert _path(err.value.path) == path
    assert message in err.value.message


@needs_upstream
def test_env_value_from_and_expansion() -> None:
    doc = _doc("getting-started/quick-start-job.yaml")
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "GREETING", "value": "hi $(POD)"},
    ]
    container["args"] = ["-c", "echo $(GREETING) $$(POD) $(UNKNOWN)"]
    job = convert_job("Job", doc)
    assert job.submission.run.kube is not None
    pod = pod_plan(job.submission.run.kube, {})["main"][1][0]
    resolved = pod["containers"][0]
    assert resolved["env"]["POD"] == "sample-job-1"
    assert resolved["env"]["GREETING"] == "hi sample-job-1"
    assert resolved["command"] == ["/bin/sh", "-c", "echo hi sample-job-1 $(POD) $(UNKNOWN)"]
    container["env"] = [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    with pytest.raises(JobFieldError) as err:
        convert_job("Job", doc)
    assert _path(err.value.path) == "spec.template.spec.containers[0].env[0].valueFrom"
    assert "secretKeyRef" in err.value.message


def test_expand_vars() -> None:
    assert expand_vars("$(A)-$$(A)-$(B)", {"A": "1"}) == "1-$(A)-$(B)"


def _path(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


@needs_upstream
def test_topology_slices_become_the_pod_sets_slice_request() -> None:
    [pod_set] = _convert(_doc("jobs/sample-jobset-tas-sliced.yaml")).submission.pod_sets
    assert pod_set.topology is not None
    assert (pod_set.topology.slice_required, pod_set.topology.slice_size) == (
        "cloud.provider.com/topology-rack",
        4,
    )
    assert not pod_set.topology.required and not pod_set.topology.unconstrained
    [pod_set] = _convert(_doc("jobs/sample-jobset-tas-combined.yaml")).submission.pod_sets
    assert pod_set.topology is not None
    assert pod_set.topology.required == "cloud.provider.com/topology-block"
    assert pod_set.topology.slice_size == 4


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"kueue.x-k8s.io/podset-slice-size": None}, "podset-slice-size", "must be set"),
        ({"kueue.x-k8s.io/podset-slice-size": "four"}, "podset-slice-size", "whole number"),
        ({"kueue.x-k8s.io/podset-slice-size": "0"}, "podset-slice-size", "whole number"),
        (
            {"kueue.x-k8s.io/podset-slice-required-topology-constraints": "[]"},
            "podset-slice-required-topology-constraints",
            "multi-layer",
        ),
    ],
)
@needs_upstream
def test_bad_slice_annotations_name_the_annotation(
    change: dict[str, str | None], field: str, message: str
) -> None:
    doc = _doc("jobs/sample-jobset-tas-sliced.yaml")
    template = doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    for key, value in change.items():
        if value is None:
            annotations.pop(key)
        else:
            annotations[key] = value
    with pytest.raises(JobFieldError) as caught:
        _convert(doc)
    assert str(caught.value.path[-1]).endswith(field)
    assert message in caught.value.message


@needs_upstream
def test_a_slice_that_does_not_divide_the_pods_is_refused() -> None:
    doc = _doc("jobs/sample-jobset-tas-sliced.yaml")
    template = doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    template["metadata"]["annotations"]["kueue.x-k8s.io/podset-slice-size"] = "3"
    with pytest.raises(JobFieldError) as caught:
        _convert(doc)
    assert "sliceSize (3) must divide count (8)" in caught.value.message


@needs_upstream
def test_topology_annotations_become_the_pod_sets_topology_request() -> None:
    job = _convert(_doc("jobs/sample-jobset-tas-required.yaml")).submission
    [topology] = {p.topology for p in job.pod_sets}
    assert topology is not None and topology.required == "cloud.provider.com/topology-rack"
    doc = _doc("jobs/sample-jobset-tas-required.yaml")
    template = doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    annotations.clear()
    annotations["kueue.x-k8s.io/podset-preferred-topology"] = "cloud.provider.com/topology-block"
    [pod_set] = _convert(doc).submission.pod_sets[:1]
    assert pod_set.topology.preferred == "cloud.provider.com/topology-block"
    annotations["kueue.x-k8s.io/podset-unconstrained-topology"] = "true"
    with pytest.raises(JobFieldError) as caught:
        _convert(doc)
    assert "expected one topology request" in caught.value.message


@needs_upstream
def test_required_node_affinity_becomes_the_pod_sets_affinity() -> None:
    doc = _doc("jobs/sample-job.yaml")
    spec = doc["spec"]["template"]["spec"]
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "nvidia.com/gpu.product",
                                "operator": "In",
                                "values": ["A100", "H100"],
                            }
                        ]
                    }
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": []}}
            ],
        },
        "podAntiAffinity": {},
    }
    [pod_set] = _convert(doc).submission.pod_sets
    assert pod_set.node_affinity is not None
    [term] = pod_set.node_affinity
    assert term.match_expressions[0].values == ("A100", "H100")
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms["nodeSelectorTerms"][0]["matchExpressions"][0]["operator"] = "Near"
    with pytest.raises(JobFieldError) as caught:
        _convert(doc)
    assert "nodeSelectorTerms[0].matchExpressions[0].operator" in _path(caught.value.path)


def _small_job(annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
            "annotations": annotations,
        },
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
                    "restartPolicy": "Never",
                }
            }
        },
    }


def test_requeue_expedite_annotation() -> None:
    job = convert_job("Job", _small_job({"phalanx.io/requeue": "expedite"}))
    assert job.submission.requeue_expedite is True
    assert not convert_job("Job", _small_job({})).submission.requeue_expedite
    with pytest.raises(JobFieldError) as err:
        convert_job("Job", _small_job({"phalanx.io/requeue": "fast"}))
    assert str(err.value) == (
        "metadata.annotations.phalanx.io/requeue: expected expedite, got 'fast'"
    )


def _noticed(value: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "noticed",
            "annotations": {"phalanx.io/preemption-notice": value},
        },
        "spec": {
            "template": {"spec": {"containers": [{"name": "c", "image": "i", "command": ["true"]}]}}
        },
    }


@pytest.mark.parametrize(
    ("value", "expected"), [("USR1@30", (10, 30)), ("SIGTERM@0", (15, 0)), ("12@5", (12, 5))]
)
def test_preemption_notice_annotation(value: str, expected: tuple[int, int]) -> None:
    notice = _convert(_noticed(value)).submission.run.preemption_notice
    assert (notice.signal, notice.seconds) == expected


@pytest.mark.parametrize("value", ["USR1", "USR1@", "NOPE@3", "USR1@70000", "99@1", "@3", ""])
def test_bad_preemption_notice_names_the_annotation(value: str) -> None:
    with pytest.raises(JobFieldError) as err:
        _convert(_noticed(value))
    assert err.value.path == ("metadata", "annotations", "phalanx.io/preemption-notice")
    assert "expected SIG@SECONDS" in str(err.value) and repr(value) in str(err.value)

"""Unknown fields, found and worded as the API server does."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from phalanx.kubeapi.fieldvalidation import (
    prune,
    strict_error_message,
    unknown_fields,
    warn_messages,
    warning_header,
)

CQ = "kueue.x-k8s.io/v1beta2"


def clusterqueue() -> dict[str, Any]:
    return {
        "apiVersion": CQ,
        "kind": "ClusterQueue",
        "metadata": {"name": "cq", "labels": {"a": "b"}, "uid": "u", "resourceVersion": "3"},
        "spec": {
            "cohortName": "all",
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "default",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 8},
                                {"name": "nvidia.com/gpu", "nominalQuota": "4"},
                            ],
                        }
                    ],
                }
            ],
        },
        "status": {"pendingWorkloads": 0},
    }


def test_a_valid_clusterqueue_has_no_unknown_fields() -> None:
    assert unknown_fields("ClusterQueue", CQ, clusterqueue()) == []


def test_unknown_fields_in_nested_lists() -> None:
    cq = clusterqueue()
    cq["spec"]["foo"] = 1
    flavor = cq["spec"]["resourceGroups"][0]["flavors"][0]
    flavor["bogus"] = True
    flavor["resources"][1]["limit"] = 1
    cq["metadata"]["extra"] = "x"
    # In the document's order (keys added last come last).
    assert unknown_fields("ClusterQueue", CQ, cq) == [
        "metadata.extra",
        "spec.resourceGroups[0].flavors[0].resources[1].limit",
        "spec.resourceGroups[0].flavors[0].bogus",
        "spec.foo",
    ]
    original = copy.deepcopy(cq)
    pruned = prune("ClusterQueue", CQ, cq)
    assert cq == original  # not mutated
    assert pruned == clusterqueue()


def test_versions_differ() -> None:
    cq = clusterqueue()
    assert unknown_fields("ClusterQueue", "kueue.x-k8s.io/v1beta1", cq) == ["spec.cohortName"]
    cq["spec"]["cohort"] = cq["spec"].pop("cohortName")
    assert unknown_fields("ClusterQueue", "kueue.x-k8s.io/v1beta1", cq) == []
    assert unknown_fields("ClusterQueue", CQ, cq) == ["spec.cohort"]


def test_kinds_without_status() -> None:
    rf = {
        "apiVersion": CQ,
        "kind": "ResourceFlavor",
        "metadata": {"name": "f"},
        "spec": {"nodeLabels": {"a": "b"}},
        "status": {},
    }
    assert unknown_fields("ResourceFlavor", CQ, rf) == ["status"]
    wpc = {
        "apiVersion": CQ,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": "p"},
        "value": 10,
        "description": "d",
        "spec": {},
    }
    assert unknown_fields("WorkloadPriorityClass", CQ, wpc) == ["spec"]


def test_job_kinds_check_the_modelled_fields_only() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {
            "parallelism": 2,
            "template": {
                "metadata": {"annotations": {"a": "b"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "command": ["sh", "-c", "true"],
                            "env": [{"name": "A", "value": "1", "bad": 2}],
                            "resources": {"requests": {"cpu": "1"}, "limts": {}},
                            "livenessProbe": {"exec": {"command": ["true"]}, "anything": 1},
                            "imagePullPolicy": "IfNotPresent",
                        }
                    ],
                    "volumes": [{"name": "v", "emptyDir": {}}],
                    "affinity": {"nodeAffinity": {}},
                },
            },
            "completionsMode": "Indexed",
        },
    }
    assert unknown_fields("Job", "batch/v1", job) == [
        "spec.template.spec.containers[0].env[0].bad",
        "spec.template.spec.containers[0].resources.limts",
        "spec.completionsMode",
    ]


@pytest.mark.parametrize(
    ("kind", "api_version", "manifest", "unknown"),
    [
        (
            "JobSet",
            "jobset.x-k8s.io/v1alpha2",
            {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "w",
                            "replicas": 2,
                            "template": {
                                "spec": {
                                    "template": {"spec": {"containers": [{"name": "a", "x": 1}]}}
                                }
                            },
                        }
                    ]
                }
            },
            ["spec.replicatedJobs[0].template.spec.template.spec.containers[0].x"],
        ),
        (
            "PyTorchJob",
            "kubeflow.org/v1",
            {
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Master": {
                            "replicas": 1,
                            "bad": 1,
                            "template": {"spec": {"containers": [{"name": "pytorch"}]}},
                        }
                    }
                }
            },
            ["spec.pytorchReplicaSpecs.Master.bad"],
        ),
        (
            "RayJob",
            "ray.io/v1",
            {
                "spec": {
                    "entrypoint": "python x.py",
                    "rayClusterSpec": {
                        "headGroupSpec": {
                            "rayStartParams": {},
                            "template": {"spec": {"containers": [{"name": "h"}]}},
                        },
                        "workerGroupSpecs": [{"groupName": "g", "replicas": 1, "oops": 1}],
                    },
                }
            },
            ["spec.rayClusterSpec.workerGroupSpecs[0].oops"],
        ),
        (
            "Workload",
            "scheduling.k8s.io/v1alpha1",
            {"spec": {"podGroups": [{"name": "g", "policy": {"gang": {"minCount": 2, "x": 1}}}]}},
            ["spec.podGroups[0].policy.gang.x"],
        ),
        (
            "Workload",
            "kueue.x-k8s.io/v1beta2",
            {
                "spec": {
                    "queueName": "lq",
                    "podSets": [
                        {
                            "name": "main",
                            "count": 1,
                            "template": {"spec": {"containers": [{"name": "c"}]}},
                            "cnt": 2,
                        }
                    ],
                }
            },
            ["spec.podSets[0].cnt"],
        ),
    ],
)
def test_other_kinds(
    kind: str, api_version: str, manifest: dict[str, Any], unknown: list[str]
) -> None:
    assert unknown_fields(kind, api_version, manifest) == unknown


def test_unserved_kind() -> None:
    with pytest.raises(KeyError):
        unknown_fields("Deployment", "apps/v1", {})


def test_messages() -> None:
    assert strict_error_message("ClusterQueue", CQ, ["spec.foo"]) == (
        'ClusterQueue in version "v1beta2" cannot be handled as a ClusterQueue: '
        'strict decoding error: unknown field "spec.foo"'
    )
    assert strict_error_message("Job", "batch/v1", ["spec.a", "spec.b"], ["metadata.name"]) == (
        'Job in version "v1" cannot be handled as a Job: strict decoding error: '
        'unknown field "spec.a", unknown field "spec.b", duplicate field "metadata.name"'
    )
    assert warn_messages(["spec.foo"]) == ['unknown field "spec.foo"']
    assert warning_header('unknown field "spec.foo"') == '299 - "unknown field \\"spec.foo\\""'

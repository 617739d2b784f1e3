"""Kueue's webhook and CEL rules, Kueue's Configuration, and immutable fields, one case each."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.dialects.kueue import load_documents, load_text
from phalanx.dialects.kueue.configuration import KueueConfiguration
from phalanx.dialects.kueue.immutable import check_update
from phalanx.dialects.kueue.validation import parse_duration
from phalanx.engine.config import FairSharingConfig, WaitForPodsReadyConfig
from phalanx.errors import Invalid


def errors(text: str) -> list[str]:
    with pytest.raises(Invalid) as caught:
        load_text(text, "t.yaml")
    return str(caught.value.detail).splitlines()


def cq(spec: str, version: str = "v1beta2") -> str:
    head = f"apiVersion: kueue.x-k8s.io/{version}\nkind: ClusterQueue\n"
    return f"{head}metadata: {{name: q}}\nspec:\n{spec}"


GROUP = """\
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: f
      resources:
{resources}
"""


def test_resources_list_the_covered_resources_in_order() -> None:
    swapped = GROUP.format(
        resources="      - {name: memory, nominalQuota: 1Gi}\n      - {name: cpu, nominalQuota: 1}"
    )
    assert errors(cq(swapped)) == [
        "t.yaml:10: ClusterQueue/q (document 1): spec.resourceGroups[0].flavors[0].resources[0]"
        '.name: must be "cpu": resources list the coveredResources in the same order',
        "t.yaml:11: ClusterQueue/q (document 1): spec.resourceGroups[0].flavors[0].resources[1]"
        '.name: must be "memory": resources list the coveredResources in the same order',
    ]
    missing = GROUP.format(resources="      - {name: cpu, nominalQuota: 1}")
    (line,) = errors(cq(missing))
    assert line.endswith(
        "spec.resourceGroups[0].flavors[0].resources: must list exactly the coveredResources "
        "(cpu, memory), got cpu"
    )


def test_negative_quota_and_float_quantity_are_refused() -> None:
    text = GROUP.format(
        resources="      - {name: cpu, nominalQuota: -1}\n      - {name: memory, nominalQuota: 1.5}"
    )
    lines = errors(cq(text))
    assert lines[0].endswith(
        "spec.resourceGroups[0].flavors[0].resources[1].nominalQuota: expected an integer or a "
        'quantity string such as "8", "500m" or "100Gi", got the number 1.5'
    )
    fixed = text.replace("1.5", '"1.5"')
    (line,) = errors(cq(fixed))
    assert line.endswith("resources[0].nominalQuota: must be greater than or equal to 0")


def test_borrowing_limit_needs_a_cohort() -> None:
    text = GROUP.format(
        resources="      - {name: cpu, nominalQuota: 1, borrowingLimit: 1}\n"
        "      - {name: memory, nominalQuota: 1Gi}"
    )
    (line,) = errors(cq(text))
    assert "resources[0].borrowingLimit: only allowed when cohortName is set" in line


def test_enum_and_unknown_field_messages() -> None:
    (line,) = errors(cq("  queueingStrategy: Fifo\n"))
    assert line == (
        't.yaml:5: ClusterQueue/q (document 1): spec.queueingStrategy: unsupported value "Fifo"; '
        "expected one of StrictFIFO, BestEffortFIFO"
    )
    (line,) = errors(cq("  preemption: {withinClusterQueue: Never, reclaim: Any}\n"))
    assert "spec.preemption.reclaim: unknown field; known fields here: borrowWithinCohort," in line


def test_v1beta1_spellings() -> None:
    (m,) = load_text(cq("  cohort: c\n  flavorFungibility: {whenCanPreempt: Preempt}\n", "v1beta1"))
    assert m.obj.cohort_name == "c"  # type: ignore[union-attr]
    (line,) = errors(cq("  admissionChecks: [prov]\n", "v1beta1"))
    assert "spec.admissionChecks: not supported: phalanx does not run Kueue AdmissionChecks" in line
    (line,) = errors(cq("  cohort: c\n"))
    assert "spec.cohort: unknown field" in line


def test_toleration_rules() -> None:
    text = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: f}\nspec:\n"
        "  tolerations:\n  - {operator: Equal}\n  - {key: a, operator: Exists, value: b}\n"
        "  - {key: a, tolerationSeconds: 5, effect: NoSchedule}\n"
    )
    lines = errors(text)
    assert [line.split(": ", 3)[2] for line in lines] == [
        "spec.tolerations[0].operator",
        "spec.tolerations[1].value",
        "spec.tolerations[2].tolerationSeconds",
    ]


def test_string_expected_hint() -> None:
    text = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: f}\n"
        "spec:\n  nodeLabels: {gpu: true}\n"
    )
    (line,) = errors(text)
    assert line.endswith(
        'spec.nodeLabels.gpu: expected a string, got the boolean true (quote it: "true")'
    )


def test_status_and_bookkeeping_metadata_are_ignored() -> None:
    text = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\n"
        "metadata: {name: f, uid: x, resourceVersion: '7', namespace: ignored}\n"
        "spec: {}\nstatus: {anything: 1}\n"
    )
    (m,) = load_text(text)
    assert m.name == "f"


# --------------------------------------------------------------------------- Configuration


def config(body: str, version: str = "v1beta2") -> KueueConfiguration:
    (m,) = load_text(f"apiVersion: config.kueue.x-k8s.io/{version}\nkind: Configuration\n{body}")
    assert isinstance(m.obj, KueueConfiguration) and m.kind == "Configuration"
    return m.obj


def test_configuration_defaults_and_fields() -> None:
    default = config("namespace: kueue-system\n")
    assert default.wait_for_pods_ready == WaitForPodsReadyConfig()
    assert default.fair_sharing is None
    full = config(
        "waitForPodsReady:\n  timeout: 5m\n  recoveryTimeout: 0s\n  blockAdmission: true\n"
        "  requeuingStrategy: {timestamp: Creation, backoffLimitCount: 3, backoffBaseSeconds: 10}\n"
        "fairSharing: {preemptionStrategies: [LessThanInitialShare]}\n"
        "admissionFairSharing: {usageHalfLifeTime: 1h, resourceWeights: {cpu: 0.5}}\n"
    )
    assert full.wait_for_pods_ready == WaitForPodsReadyConfig(
        timeout_s=300,
        recovery_timeout_s=None,
        block_admission=True,
        requeuing_timestamp="Creation",
        backoff_limit_count=3,
        backoff_base_s=10,
    )
    assert full.fair_sharing == FairSharingConfig(("LessThanInitialShare",))
    assert full.admission_fair_sharing is not None
    assert full.admission_fair_sharing.usage_half_life_s == 3600
    assert full.engine_overrides()["fair_sharing"] == full.fair_sharing
    off = config("waitForPodsReady: {enable: false}\nfairSharing: {enable: true}\n", "v1beta1")
    assert off.wait_for_pods_ready is None
    assert off.fair_sharing == FairSharingConfig()


def test_configuration_errors() -> None:
    lines = errors(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
        "waitForPodsReady: {timeout: soon}\nmultiKueue: {gcInterval: 1m}\nwebhooks: {}\n"
    )
    assert [line.split(": ", 3)[2:] for line in lines] == [
        [
            "waitForPodsReady.timeout",
            'expected a duration such as 30m, 1h30m or 90s, got the string "soon"',
        ],
        ["multiKueue", "not supported: phalanx has no MultiKueue (one cluster); remove the field"],
        ["webhooks", lines[2].split(": ", 3)[3]],
    ]
    assert lines[2].split(": ", 3)[3].startswith("unknown field; known fields here:")
    (line,) = errors(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
        "fairSharing: {preemptionStrategies: [LessThanInitialShare, LessThanOrEqualToFinalShare]}\n"
    )
    assert "fairSharing.preemptionStrategies: expected [LessThanOrEqualToFinalShare]" in line


def test_durations() -> None:
    assert parse_duration("1h30m") == 5400
    assert parse_duration("90s") == 90
    assert parse_duration("250ms") == 0.25
    assert parse_duration("0") == 0
    assert parse_duration("5") is None
    assert parse_duration("") is None


# --------------------------------------------------------------------------- immutability


def job(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "spec": spec}


def test_job_and_workload_immutable_fields() -> None:
    template = {"spec": {"containers": [{"name": "c"}]}}
    other = {"spec": {"containers": [{"name": "d"}]}}
    assert check_update("Job", job(template=template), job(template=template)) == []
    assert [p for p, _ in check_update("Job", job(template=template), job(template=other))] == [
        ("spec", "template")
    ]
    indexed = {"completionMode": "Indexed", "template": template}
    elastic = check_update(
        "Job",
        job(completions=2, parallelism=2, **indexed),
        job(completions=4, parallelism=4, **indexed),
    )
    assert elastic == []
    (problem,) = check_update("Job", job(completions=2), job(completions=3))
    assert problem[0] == ("spec", "completions")
    workload = {"spec": {"podSets": [{"name": "main", "count": 1}], "queueName": "a"}}
    moved = {"spec": {"podSets": [{"name": "main", "count": 1}], "queueName": "b"}}
    assert check_update("Workload", workload, moved) == []
    assert check_update("Workload", workload, moved, reserved=True) == [
        (
            ("spec", "queueName"),
            'field is immutable while the workload holds quota (was "a", now "b")',
        )
    ]


def test_updates_of_models() -> None:
    def rf(topology: str | None) -> Any:
        spec: dict[str, Any] = {"nodeLabels": {"rack": "r"}}
        if topology:
            spec["topologyName"] = topology
        doc = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor"}
        (m,) = load_documents([{**doc, "metadata": {"name": "f"}, "spec": spec}], "t")
        return m.obj

    assert check_update("ResourceFlavor", rf(None), rf("t")) == []
    assert check_update("ResourceFlavor", rf("t"), rf(None)) == [
        (("spec", "topologyName"), 'field is immutable once set (was "t", now unset)')
    ]

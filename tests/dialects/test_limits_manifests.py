"""PriorityClass and Tenant limits as manifests: load, validate with field paths, write back."""

from __future__ import annotations

import pytest

from phalanx.dialects.kueue.manifests import load_documents, load_text, to_manifest
from phalanx.errors import Invalid
from phalanx.model import CPU, GPU, MEMORY, PriorityClass, Tenant

QOS = """\
apiVersion: phalanx.io/v1
kind: PriorityClass
metadata: {name: normal}
spec:
  value: 100
  limits:
    maxTRESPerUser: {nvidia.com/gpu: 16, memory: 1Ti}
    maxTRESPerJob: {nvidia.com/gpu: 8}
    maxJobsPerUser: 4
    maxSubmitJobsPerUser: 100
    maxWall: "2-00:00:00"
    grpTRES: {nvidia.com/gpu: 64, cpu: 1024}
"""


def test_priority_class_limits_load_and_round_trip() -> None:
    [manifest] = load_text(QOS, "qos.yaml")
    pc = manifest.obj
    assert isinstance(pc, PriorityClass) and pc.limits is not None
    assert pc.limits.max_tres_per_user == {GPU: 16, MEMORY: 2**40}
    assert pc.limits.grp_tres == {GPU: 64, CPU: 1_024_000}
    assert pc.limits.max_wall == 2 * 86400
    out = to_manifest("PriorityClass", pc)
    assert out["apiVersion"] == "phalanx.io/v1" and out["kind"] == "PriorityClass"
    assert out["spec"]["limits"]["maxTRESPerUser"] == {GPU: "16", MEMORY: "1Ti"}
    assert load_documents([out], "again")[0].obj == pc


def test_kueue_priority_classes_apply_and_export_unchanged() -> None:
    text = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\n"
    text += "metadata: {name: high}\nvalue: 1000\ndescription: Deadlines.\n"
    [manifest] = load_text(text)
    assert manifest.obj == PriorityClass(name="high", value=1000, description="Deadlines.")
    assert to_manifest("PriorityClass", manifest.obj) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": "high"},
        "value": 1000,
        "description": "Deadlines.",
    }


def test_limits_in_a_kueue_document_point_to_the_phalanx_spelling() -> None:
    text = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\n"
    text += "metadata: {name: x}\nvalue: 1\nlimits: {maxJobsPerUser: 1}\n"
    with pytest.raises(Invalid, match=r"x.yaml:5: .*limits: not a Kueue field: .*phalanx.io/v1"):
        load_text(text, "x.yaml")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("maxWall", "soon", "spec.limits.maxWall: 'soon' is not a Slurm time"),
        ("maxWall", "0", "spec.limits.maxWall: expected a positive number of seconds"),
        ("maxJobsPerUser", "-1", "spec.limits.maxJobsPerUser: Input should be greater than"),
        ("grpTRES", "{cpu: lots}", 'spec.limits.grpTRES.cpu: invalid quantity "lots"'),
        ("maxTresPerUser", "{}", "spec.limits.maxTresPerUser: unknown field"),
    ],
)
def test_bad_limits_name_their_field(field: str, value: str, message: str) -> None:
    text = "apiVersion: phalanx.io/v1\nkind: PriorityClass\nmetadata: {name: p}\n"
    text += f"spec:\n  value: 1\n  limits:\n    {field}: {value}\n"
    with pytest.raises(Invalid) as err:
        load_text(text, "p.yaml")
    assert f"p.yaml:7: PriorityClass/p (document 1): {message}" in str(err.value)


def test_max_wall_number_is_seconds_and_string_is_slurm_time() -> None:
    seconds = PriorityClass.model_validate({"name": "a", "value": 0, "limits": {"maxWall": 90}})
    minutes = PriorityClass.model_validate({"name": "b", "value": 0, "limits": {"maxWall": "90"}})
    assert seconds.limits is not None and seconds.limits.max_wall == 90
    assert minutes.limits is not None and minutes.limits.max_wall == 5400


def test_tenant_limits_round_trip() -> None:
    text = "apiVersion: phalanx.io/v1\nkind: Tenant\nmetadata: {name: physics}\n"
    text += "spec:\n  limits: {grpTRES: {nvidia.com/gpu: 32}, maxJobs: 20, maxSubmitJobs: 500}\n"
    [manifest] = load_text(text)
    tenant = manifest.obj
    assert isinstance(tenant, Tenant) and tenant.limits is not None
    assert tenant.limits.max_jobs == 20 and tenant.limits.grp_tres == {GPU: 32}
    out = to_manifest("Tenant", tenant)
    assert out["spec"]["limits"] == {
        "grpTRES": {GPU: "32"},
        "maxJobs": 20,
        "maxSubmitJobs": 500,
    }
    assert load_documents([out], "again")[0].obj == tenant

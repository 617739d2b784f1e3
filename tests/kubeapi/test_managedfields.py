"""Server-side apply and managedFields on plain dicts."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.kubeapi.managedfields import (
    DEFAULT_LIST_TYPES,
    KUEUE_LIST_TYPES,
    ApplyConflict,
    Conflict,
    ListType,
    ListTypes,
    ensure_valid_managed_fields,
    record_update,
    server_side_apply,
    strip_managed,
)
from phalanx.kubeapi.patch import PatchError

JOB_LISTS = DEFAULT_LIST_TYPES["Job"]
V = "batch/v1"


def job(image: str = "trainer:1", **extra: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": image, **extra}
    return {
        "apiVersion": V,
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "default", "labels": {"team": "ml"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }


def apply(
    live: dict[str, Any] | None,
    cfg: dict[str, Any],
    manager: str,
    force: bool = False,
    now: str = "2026-01-01T00:00:00Z",
    lists: ListTypes = JOB_LISTS,
    **kw: Any,
) -> dict[str, Any]:
    return server_side_apply(
        live, cfg, manager, force=force, api_version=V, now=now, lists=lists, **kw
    )


def entries(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["manager"]: e for e in obj["metadata"].get("managedFields", [])}


def container(obj: dict[str, Any], name: str = "main") -> dict[str, Any]:
    cs = obj["spec"]["template"]["spec"]["containers"]
    return next(c for c in cs if c["name"] == name)


MAIN = 'k:{"name":"main"}'


def test_first_apply_sets_fields_and_records_them_as_kubernetes_does() -> None:
    cfg = job(args=["--epochs", "3"], env=[{"name": "A", "value": "1"}])
    out = apply(None, cfg, "A")
    assert strip_managed(out) == cfg
    (entry,) = out["metadata"]["managedFields"]
    assert entry == {
        "manager": "A",
        "operation": "Apply",
        "apiVersion": V,
        "time": "2026-01-01T00:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:labels": {"f:team": {}}},
            "f:spec": {
                "f:template": {
                    "f:spec": {
                        "f:containers": {
                            MAIN: {
                                ".": {},
                                "f:args": {},
                                "f:env": {'k:{"name":"A"}': {".": {}, "f:name": {}, "f:value": {}}},
                                "f:image": {},
                                "f:name": {},
                            }
                        },
                        "f:restartPolicy": {},
                    }
                }
            },
        },
    }
    # apiVersion, kind, name and namespace are never owned.
    assert (
        "f:apiVersion" not in entry["fieldsV1"] and "f:name" not in entry["fieldsV1"]["f:metadata"]
    )


def test_reapply_without_a_field_removes_it() -> None:
    first = apply(None, job(args=["x"]), "A")
    out = apply(first, job(), "A", now="T2")
    assert "args" not in container(out)
    assert (
        "f:args"
        not in entries(out)["A"]["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"][MAIN]
    )


def test_reapply_without_a_list_item_removes_it_and_emptied_list() -> None:
    first = apply(None, job(env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]), "A")
    out = apply(first, job(env=[{"name": "A", "value": "1"}]), "A")
    assert container(out)["env"] == [{"name": "A", "value": "1"}]
    out = apply(out, job(), "A")
    assert "env" not in container(out)


def test_dropped_field_stays_when_another_manager_owns_it() -> None:
    first = apply(None, job(args=["x"]), "A")
    shared = apply(first, job(args=["x"]), "B")
    out = apply(shared, job(), "A")
    assert container(out)["args"] == ["x"]
    assert "f:args" in str(entries(out)["B"]["fieldsV1"])


def test_unowned_fields_are_left_alone() -> None:
    first = apply(None, job(), "A")
    first["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"] = "/dev/t"
    out = apply(first, job(image="trainer:2"), "A")
    assert container(out)["terminationMessagePath"] == "/dev/t"
    assert container(out)["image"] == "trainer:2"


def test_conflict_on_another_managers_field() -> None:
    first = apply(None, job(), "A")
    with pytest.raises(ApplyConflict) as err:
        apply(first, job(image="trainer:2"), "B")
    assert err.value.conflicts == [
        Conflict('"A"', '.spec.template.spec.containers[name="main"].image')
    ]
    assert err.value.message == (
        'Apply failed with 1 conflict: conflict with "A": '
        '.spec.template.spec.containers[name="main"].image'
    )


def test_multiple_conflicts_are_grouped_by_manager() -> None:
    first = apply(None, job(), "A")
    second = record_update(
        first,
        {**first, "metadata": {**first["metadata"], "labels": {"team": "ml", "x": "1"}}},
        "kubectl-label",
        api_version=V,
        now="T2",
        lists=JOB_LISTS,
    )
    cfg = job(image="trainer:2")
    cfg["metadata"]["labels"] = {"team": "infra", "x": "2"}
    with pytest.raises(ApplyConflict) as err:
        apply(second, cfg, "B")
    assert err.value.message == (
        'Apply failed with 3 conflicts: conflicts with "A":\n'
        "- .metadata.labels.team\n"
        '- .spec.template.spec.containers[name="main"].image\n'
        'conflicts with "kubectl-label" using batch/v1:\n'
        "- .metadata.labels.x"
    )


def test_force_moves_ownership() -> None:
    first = apply(None, job(), "A")
    out = apply(first, job(image="trainer:2"), "B", force=True)
    assert container(out)["image"] == "trainer:2"
    a_fields = str(entries(out)["A"]["fieldsV1"])
    assert "f:image" not in a_fields and "f:restartPolicy" in a_fields
    assert "f:image" in str(entries(out)["B"]["fieldsV1"])
    # A, no longer owning image, re-applies its old config: now it conflicts with B.
    with pytest.raises(ApplyConflict) as err:
        apply(out, job(), "A")
    assert err.value.conflicts[0].manager == '"B"'


def test_same_value_is_shared_not_a_conflict() -> None:
    first = apply(None, job(), "A")
    out = apply(first, job(), "B", now="T2")
    assert strip_managed(out) == strip_managed(first)
    assert entries(out)["A"]["fieldsV1"] == entries(out)["B"]["fieldsV1"]
    # A stops applying; B still owns everything, so nothing is removed.
    cfg = {"apiVersion": V, "kind": "Job", "metadata": {"name": "train"}}
    after = apply(out, cfg, "A")
    assert strip_managed(after) == strip_managed(first)
    assert "A" not in entries(after)


def test_record_update_takes_ownership_then_apply_conflicts() -> None:
    first = apply(None, job(), "A")
    edited = copy.deepcopy(first)
    container(edited)["image"] = "trainer:hotfix"
    out = record_update(first, edited, "kubectl-edit", api_version=V, now="T2", lists=JOB_LISTS)
    edit = entries(out)["kubectl-edit"]
    assert edit["operation"] == "Update" and edit["time"] == "T2"
    assert edit["fieldsV1"] == {
        "f:spec": {"f:template": {"f:spec": {"f:containers": {MAIN: {"f:image": {}}}}}}
    }
    assert "f:image" not in str(entries(out)["A"]["fieldsV1"])
    with pytest.raises(ApplyConflict) as err:
        apply(out, job(image="trainer:2"), "A")
    assert err.value.message == (
        'Apply failed with 1 conflict: conflict with "kubectl-edit" using batch/v1: '
        '.spec.template.spec.containers[name="main"].image'
    )


def test_record_update_create_marks_new_nodes() -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": {"a": "b"}},
        "data": {"k": "v"},
    }
    out = record_update(None, obj, "kubectl-create", api_version="v1", now="T", lists=ListTypes())
    (entry,) = out["metadata"]["managedFields"]
    assert entry["fieldsV1"] == {
        "f:data": {".": {}, "f:k": {}},
        "f:metadata": {"f:labels": {".": {}, "f:a": {}}},
    }


def test_record_update_removal_drops_ownership_everywhere() -> None:
    first = apply(None, job(args=["x"]), "A")
    edited = copy.deepcopy(first)
    del container(edited)["args"]
    out = record_update(first, edited, "kubectl-edit", api_version=V, now="T2", lists=JOB_LISTS)
    assert "f:args" not in str(out["metadata"]["managedFields"])
    assert "kubectl-edit" not in entries(out)  # it changed nothing it could own


def test_record_update_subresource_and_ignored_status() -> None:
    first = apply(None, job(), "A", ignore=("status",))
    with_status = {**first, "status": {"active": 1}}
    out = record_update(
        first,
        with_status,
        "job-controller",
        api_version=V,
        now="T",
        lists=JOB_LISTS,
        subresource="status",
    )
    e = entries(out)["job-controller"]
    assert e["subresource"] == "status"
    assert e["fieldsV1"] == {"f:status": {".": {}, "f:active": {}}}
    main = record_update(
        first, with_status, "m", api_version=V, now="T", lists=JOB_LISTS, ignore=("status",)
    )
    assert "m" not in entries(main)


def test_apply_ignores_status_when_told() -> None:
    cfg = {**job(), "status": {"active": 9}}
    out = apply(None, cfg, "A", ignore=("status",))
    assert "status" not in out and "f:status" not in str(out["metadata"]["managedFields"])


def test_apply_to_an_unmanaged_object_conflicts_with_before_first_apply() -> None:
    live = job()
    with pytest.raises(ApplyConflict) as err:
        apply(live, job(image="trainer:2"), "A")
    assert err.value.conflicts[0].manager == '"before-first-apply" using batch/v1'
    out = apply(live, job(), "A")
    assert set(entries(out)) == {"A", "before-first-apply"}


def test_managers_are_sorted_apply_first_then_time() -> None:
    first = apply(None, job(), "Z", now="2026-01-02T00:00:00Z")
    out = record_update(
        first,
        {**first, "spec": {**first["spec"], "x": 1}},
        "B",
        api_version=V,
        now="2026-01-01T00:00:00Z",
        lists=JOB_LISTS,
    )
    out = apply(
        out,
        {"apiVersion": V, "kind": "Job", "metadata": {"name": "train"}, "spec": {"y": 1}},
        "A",
        now="2026-01-03T00:00:00Z",
    )
    assert [e["manager"] for e in out["metadata"]["managedFields"]] == ["Z", "A", "B"]


def test_set_lists_and_ports_keys() -> None:
    lists = DEFAULT_LIST_TYPES["Pod"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "finalizers": ["x/y"]},
        "spec": {
            "containers": [{"name": "c", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]
        },
    }
    out = server_side_apply(None, pod, "A", force=False, api_version="v1", now="T", lists=lists)
    f = out["metadata"]["managedFields"][0]["fieldsV1"]
    assert f["f:metadata"] == {"f:finalizers": {'v:"x/y"': {}}}
    ports = f["f:spec"]["f:containers"]['k:{"name":"c"}']["f:ports"]
    assert ports == {
        'k:{"containerPort":80,"protocol":"TCP"}': {
            ".": {},
            "f:containerPort": {},
            "f:protocol": {},
        }
    }
    pod2 = copy.deepcopy(pod)
    pod2["metadata"]["finalizers"] = ["other"]
    merged = server_side_apply(out, pod2, "B", force=False, api_version="v1", now="T", lists=lists)
    assert merged["metadata"]["finalizers"] == ["x/y", "other"]


def test_kueue_cluster_queue_atomic_resource_groups() -> None:
    lists = KUEUE_LIST_TYPES["ClusterQueue"]
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {
            "cohortName": "all",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 4}]}],
                }
            ],
        },
    }
    created = record_update(
        None,
        cq,
        "kubectl-client-side-apply",
        api_version="kueue.x-k8s.io/v1beta2",
        now="T",
        lists=lists,
    )
    changed = copy.deepcopy(cq)
    changed["spec"]["cohortName"] = "other"
    with pytest.raises(ApplyConflict) as err:
        server_side_apply(
            created,
            changed,
            "kubectl",
            force=False,
            api_version="kueue.x-k8s.io/v1beta2",
            now="T",
            lists=lists,
        )
    assert err.value.message == (
        'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" '
        "using kueue.x-k8s.io/v1beta2: .spec.cohortName"
    )
    assert lists.get(("spec", "resourceGroups")) == ListType()
    assert lists.get(("spec", "resourceGroups", "flavors")) == ListType("map", ("name",))


def test_strip_managed_is_a_copy() -> None:
    out = apply(None, job(), "A")
    stripped = strip_managed(out)
    assert "managedFields" not in stripped["metadata"]
    assert "managedFields" in out["metadata"]


def test_client_can_clear_managed_fields_with_one_empty_entry() -> None:
    first = apply(None, job(), "A")
    cleared = {**first, "metadata": {**first["metadata"], "managedFields": [{}]}}
    out = record_update(first, cleared, "x", api_version=V, now="T", lists=JOB_LISTS)
    assert "managedFields" not in out["metadata"]


def test_invalid_client_managed_fields_are_reset_to_the_live_ones() -> None:
    first = apply(None, job(), "A")
    bad = copy.deepcopy(first)
    bad["metadata"]["managedFields"] = [{"manager": "evil", "operation": "Steal"}]
    out = record_update(first, bad, "x", api_version=V, now="T", lists=JOB_LISTS)
    assert out["metadata"]["managedFields"] == first["metadata"]["managedFields"]


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({}, "must be a list"),
        (["x"], "must be an object"),
        ([{"operation": "Nope", "fieldsType": "FieldsV1"}], "operation must be Apply or Update"),
        ([{"operation": "Apply"}], "fieldsType must be FieldsV1"),
        ([{"operation": "Apply", "fieldsType": "FieldsV1"}], "apiVersion must not be empty"),
        (
            [
                {
                    "operation": "Apply",
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"q:x": {}},
                }
            ],
            "unknown fieldsV1 key",
        ),
        (
            [{"operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"k:{bad": {}}}],
            "fieldsV1",
        ),
        (
            [{"operation": "Apply", "fieldsType": "FieldsV1", "manager": 3}],
            "manager must be a string",
        ),
        ([{"operation": "Apply", "fieldsType": "FieldsV1", "manager": "a"}] * 2, "duplicates"),
    ],
)
def test_ensure_valid_managed_fields(value: Any, fragment: str) -> None:
    problems = ensure_valid_managed_fields(value)
    assert problems and any(fragment in p for p in problems)


def test_valid_managed_fields_have_no_problems() -> None:
    out = apply(None, job(args=["a"]), "A")
    assert ensure_valid_managed_fields(out["metadata"]["managedFields"]) == []
    assert ensure_valid_managed_fields(None) == []


def test_inputs_are_not_mutated() -> None:
    live = apply(None, job(args=["a"]), "A")
    cfg = job(image="trainer:2")
    before = (copy.deepcopy(live), copy.deepcopy(cfg))
    apply(live, cfg, "A")
    record_update(live, cfg, "u", api_version=V, now="T", lists=JOB_LISTS)
    assert (live, cfg) == before


names = st.sampled_from(["main", "side", "init"])
containers = st.lists(
    st.fixed_dictionaries(
        {"name": names},
        optional={
            "image": st.sampled_from(["a", "b"]),
            "args": st.lists(st.sampled_from(["x", "y"]), max_size=2),
            "env": st.lists(
                st.fixed_dictionaries(
                    {"name": st.sampled_from(["A", "B"]), "value": st.text(max_size=2)}
                ),
                max_size=2,
                unique_by=lambda e: e["name"],
            ),
        },
    ),
    min_size=1,
    max_size=3,
    unique_by=lambda c: c["name"],
)
configs = st.builds(
    lambda cs, labels: {
        "apiVersion": V,
        "kind": "Job",
        "metadata": {"name": "j", "labels": labels},
        "spec": {"template": {"spec": {"containers": cs}}},
    },
    containers,
    st.dictionaries(st.sampled_from(["a", "b"]), st.text(max_size=2), max_size=2),
)


@settings(max_examples=60, deadline=None)
@given(configs)
def test_reapplying_the_same_config_is_a_no_op_but_for_time(cfg: dict[str, Any]) -> None:
    once = apply(None, cfg, "A", now="T1")
    assert strip_managed(once) == cfg
    twice = apply(once, cfg, "A", now="T2")
    assert strip_managed(twice) == strip_managed(once)
    for e in (*once["metadata"]["managedFields"], *twice["metadata"]["managedFields"]):
        e.pop("time")
    assert twice["metadata"]["managedFields"] == once["metadata"]["managedFields"]


def _by_name(obj: dict[str, Any]) -> dict[str, Any]:
    return {c["name"]: c for c in obj["spec"]["template"]["spec"]["containers"]}


@settings(max_examples=100, deadline=None)
@given(configs, configs)
def test_a_sole_owners_latest_apply_is_the_whole_object(
    first: dict[str, Any], second: dict[str, Any]
) -> None:
    out = strip_managed(apply(apply(None, first, "A"), second, "A"))
    assert _by_name(out) == _by_name(second)
    assert out["metadata"].get("labels", {}) == second["metadata"]["labels"]


def test_map_list_merge_order_follows_structured_merge_diff() -> None:
    # Shared items take the applied order, live-only items keep their place,
    # new items come where the applied list puts them.
    live = apply(None, job(), "A")
    cs = live["spec"]["template"]["spec"]["containers"]
    cs[:] = [{"name": "a"}, {"name": "s", "image": "server"}, {"name": "b"}]
    cfg = job()
    cfg["spec"]["template"]["spec"]["containers"] = [
        {"name": "b", "image": "1"},
        {"name": "a", "image": "2"},
        {"name": "c"},
    ]
    out = apply(live, cfg, "B", force=True)
    assert out["spec"]["template"]["spec"]["containers"] == [
        {"name": "s", "image": "server"},
        {"name": "b", "image": "1"},
        {"name": "a", "image": "2"},
        {"name": "c"},
    ]


def test_applied_config_must_not_carry_managed_fields() -> None:
    cfg = job()
    cfg["metadata"]["managedFields"] = []
    with pytest.raises(PatchError) as err:
        apply(None, cfg, "A")
    assert (err.value.code, err.value.message) == (400, "metadata.managedFields must be nil")


def test_updates_to_an_unmanaged_existing_object_are_not_tracked() -> None:
    live = job()
    edited = job(image="trainer:2")
    out = record_update(live, edited, "kubectl-edit", api_version=V, now="T", lists=JOB_LISTS)
    assert "managedFields" not in out["metadata"]
    assert strip_managed(out) == edited
    created = record_update(None, edited, "kubectl-create", api_version=V, now="T", lists=JOB_LISTS)
    assert [e["manager"] for e in created["metadata"]["managedFields"]] == ["kubectl-create"]


def test_subresource_managers_are_named_so_in_conflicts() -> None:
    first = apply(None, job(), "A", ignore=("status",))
    status = {**first, "status": {"active": 1}}
    out = record_update(
        first,
        status,
        "job-controller",
        api_version=V,
        now="T",
        lists=JOB_LISTS,
        subresource="status",
    )
    cfg = {"apiVersion": V, "kind": "Job", "metadata": {"name": "train"}, "status": {"active": 2}}
    with pytest.raises(ApplyConflict) as err:
        apply(out, cfg, "B", subresource="status")
    assert err.value.message == (
        'Apply failed with 1 conflict: conflict with "job-controller" with subresource "status" '
        "using batch/v1: .status.active"
    )


def test_fields_v1_orders_numeric_keys_by_value() -> None:
    lists = DEFAULT_LIST_TYPES["Pod"]
    ports = [{"containerPort": p, "protocol": "TCP"} for p in (8080, 443, 80)]
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "ports": ports}]}}
    out = server_side_apply(None, pod, "A", force=False, api_version="v1", now="T", lists=lists)
    f = out["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:containers"]
    keys = [k for k in f['k:{"name":"c"}']["f:ports"] if k != "."]
    assert [int(k.split(":")[2].split(",")[0]) for k in keys] == [80, 443, 8080]
    assert next(iter(f['k:{"name":"c"}'])) == "."


def test_port_protocol_key_defaults_to_tcp() -> None:
    lists = DEFAULT_LIST_TYPES["Pod"]
    pod = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]},
    }
    out = server_side_apply(None, pod, "A", force=False, api_version="v1", now="T", lists=lists)
    c = out["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:containers"]['k:{"name":"c"}']
    assert list(c["f:ports"]) == ['k:{"containerPort":80,"protocol":"TCP"}']


@pytest.mark.parametrize(
    ("containers", "message"),
    [
        (
            [{"image": "x"}],
            ".spec.template.spec.containers: associative list with keys has an element that "
            'omits key field "name" (and doesn\'t have default value)',
        ),
        (
            [{"name": "a"}, {"name": "a"}],
            '.spec.template.spec.containers: duplicate entries for key [name="a"]',
        ),
    ],
)
def test_untypable_applied_lists_are_422(containers: list[Any], message: str) -> None:
    cfg = job()
    cfg["spec"]["template"]["spec"]["containers"] = containers
    with pytest.raises(PatchError) as err:
        apply(None, cfg, "A")
    assert (err.value.code, err.value.message) == (422, message)


@settings(max_examples=60, deadline=None)
@given(configs)
def test_a_second_manager_applying_the_same_config_shares_it(cfg: dict[str, Any]) -> None:
    first = apply(None, cfg, "A")
    both = apply(first, cfg, "B")  # no ApplyConflict
    assert strip_managed(both) == strip_managed(first)
    by = entries(both)
    assert by["A"]["fieldsV1"] == by["B"]["fieldsV1"]

"""The PATCH media types of the Kubernetes API: merge, JSON and strategic merge patch."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.kubeapi.patch import (
    APPLY_YAML,
    JSON_PATCH,
    MERGE,
    PRIMITIVE,
    STRATEGIC,
    STRATEGIC_SCHEMAS,
    PatchError,
    StrategicSchema,
    apply_patch,
    merge_patch,
)

JOB = STRATEGIC_SCHEMAS["Job"]
POD = STRATEGIC_SCHEMAS["Pod"]


def smp(obj: dict[str, Any], patch: Any, schema: StrategicSchema | None = POD) -> dict[str, Any]:
    return apply_patch(obj, json.dumps(patch).encode(), STRATEGIC, strategic=schema)


def mp(obj: dict[str, Any], patch: Any) -> dict[str, Any]:
    return apply_patch(obj, json.dumps(patch).encode(), MERGE, strategic=None)


def jp(obj: dict[str, Any], ops: Any) -> dict[str, Any]:
    return apply_patch(obj, json.dumps(ops).encode(), JSON_PATCH, strategic=None)


# --- RFC 7386 ------------------------------------------------------------------------

# The examples of RFC 7386 appendix A whose target and result are objects.
RFC7386 = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "result"), RFC7386)
def test_rfc7386_examples(target: dict[str, Any], patch: Any, result: Any) -> None:
    before = copy.deepcopy(target)
    assert mp(target, patch) == result
    assert target == before  # pure


def test_rfc7386_non_object_values() -> None:
    assert merge_patch(["a", "b"], ["c", "d"]) == ["c", "d"]
    assert merge_patch({"a": "b"}, ["c"]) == ["c"]
    assert merge_patch({"a": "foo"}, None) is None
    assert merge_patch({"a": "foo"}, "bar") == "bar"


@pytest.mark.parametrize("body", [b"[1]", b'"x"', b"3", b"null"])
def test_merge_patch_body_must_be_an_object(body: bytes) -> None:
    with pytest.raises(PatchError) as err:
        apply_patch({"a": 1}, body, MERGE, strategic=None)
    assert (err.value.code, err.value.message) == (400, "Invalid JSON Patch")


def test_malformed_json_is_400() -> None:
    for media in (MERGE, JSON_PATCH, STRATEGIC):
        with pytest.raises(PatchError) as err:
            apply_patch({}, b"{nope", media, strategic=POD)
        assert err.value.code == 400


def test_content_type_parameters_are_ignored() -> None:
    assert apply_patch({}, b'{"a":1}', MERGE + "; charset=utf-8", strategic=None) == {"a": 1}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=12,
)
json_docs = st.dictionaries(st.text(max_size=4), json_values, max_size=5)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


@given(json_docs)
def test_merge_patch_with_itself_is_identity(doc: dict[str, Any]) -> None:
    # A document without nulls (which would mean "delete") patched by itself is itself.
    clean = _without_nulls(doc)
    assert merge_patch(clean, clean) == clean


@given(json_docs, json_docs)
def test_merge_patch_is_idempotent(doc: dict[str, Any], patch: dict[str, Any]) -> None:
    once = merge_patch(doc, patch)
    assert merge_patch(once, patch) == once


# --- RFC 6902 ----------------------------------------------------------------------


def test_rfc6902_examples() -> None:
    assert jp({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}]) == {
        "baz": "qux",
        "foo": "bar",
    }
    assert jp({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}]) == {
        "foo": ["bar", "qux", "baz"]
    }
    assert jp({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}]) == {"foo": "bar"}
    assert jp({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}]) == {
        "foo": ["bar", "baz"]
    }
    assert jp(
        {"baz": "qux", "foo": "bar"}, [{"op": "replace", "path": "/baz", "value": "boo"}]
    ) == {
        "baz": "boo",
        "foo": "bar",
    }
    moved = jp(
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
    )
    assert moved == {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}
    assert jp(
        {"foo": ["all", "grass", "cows", "eat"]},
        [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
    ) == {"foo": ["all", "cows", "eat", "grass"]}
    ok = {"baz": "qux", "foo": ["a", 2, "c"]}
    assert (
        jp(
            ok,
            [
                {"op": "test", "path": "/baz", "value": "qux"},
                {"op": "test", "path": "/foo/1", "value": 2},
            ],
        )
        == ok
    )
    assert jp({"foo": "bar"}, [{"op": "add", "path": "/child", "value": {"grandchild": {}}}]) == {
        "foo": "bar",
        "child": {"grandchild": {}},
    }
    assert jp({"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}]) == {
        "foo": ["bar", ["abc", "def"]]
    }
    assert jp({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}]) == {
        "/": 9,
        "~1": 10,
    }
    assert jp({"a": 1}, []) == {"a": 1}


def test_rfc6902_failed_test_is_422_naming_op_and_path() -> None:
    with pytest.raises(PatchError) as err:
        jp({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}])
    assert err.value.code == 422
    assert "test operation on path '/baz'" in err.value.message


def test_rfc6902_failure_leaves_the_object_alone() -> None:
    obj = {"a": 1}
    with pytest.raises(PatchError):
        jp(obj, [{"op": "add", "path": "/b", "value": 2}, {"op": "test", "path": "/a", "value": 3}])
    assert obj == {"a": 1}


@pytest.mark.parametrize(
    "op",
    [
        {"op": "add", "path": "/baz/bat", "value": "qux"},
        {"op": "remove", "path": "/missing"},
        {"op": "replace", "path": "/missing", "value": 1},
        {"op": "move", "from": "/missing", "path": "/x"},
        {"op": "copy", "from": "/missing", "path": "/x"},
        {"op": "add", "path": "/list/7", "value": 1},
    ],
)
def test_rfc6902_missing_paths_are_422(op: dict[str, Any]) -> None:
    with pytest.raises(PatchError) as err:
        jp({"foo": "bar", "list": []}, [op])
    assert err.value.code == 422
    assert f"{op['op']} operation on path {op['path']!r}" in err.value.message


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"op": "add"}, "cannot unmarshal object into Go value of type jsonpatch.Patch"),
        ([{"op": "frob", "path": "/a"}], "invalid JSON patch operation"),
        ([{"op": "add", "value": 1}], "has no path"),
        (["add"], "invalid JSON patch operation"),
    ],
)
def test_rfc6902_malformed_bodies_are_400(body: Any, fragment: str) -> None:
    with pytest.raises(PatchError) as err:
        jp({}, body)
    assert err.value.code == 400
    assert fragment in err.value.message


def test_json_patch_cannot_replace_the_root_with_a_non_object() -> None:
    with pytest.raises(PatchError) as err:
        jp({"a": 1}, [{"op": "replace", "path": "", "value": [1]}])
    assert err.value.code == 422


# --- media types -----------------------------------------------------------------------

CRD_415 = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)


def test_strategic_on_a_crd_is_415_with_the_apiservers_words() -> None:
    with pytest.raises(PatchError) as err:
        smp({"spec": {}}, {"spec": {"a": 1}}, schema=None)
    assert (err.value.code, err.value.message) == (415, CRD_415)


@pytest.mark.parametrize("media", [APPLY_YAML, "application/json", "text/plain", ""])
def test_other_media_types_are_415_naming_the_accepted(media: str) -> None:
    with pytest.raises(PatchError) as err:
        apply_patch({}, b"{}", media, strategic=POD)
    assert err.value.code == 415
    for accepted in (JSON_PATCH, MERGE, STRATEGIC, APPLY_YAML):
        assert accepted in err.value.message


def test_strategic_body_must_be_an_object() -> None:
    with pytest.raises(PatchError) as err:
        apply_patch({}, b"[]", STRATEGIC, strategic=POD)
    assert err.value.code == 400
    assert "cannot unmarshal array" in err.value.message


# --- strategic merge patch -------------------------------------------------------------


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"app": "x"}},
        "spec": {"containers": list(containers), **spec},
    }


def test_containers_merge_by_name() -> None:
    live = pod({"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"})
    out = smp(
        live, {"spec": {"containers": [{"name": "b", "image": "b:2"}, {"name": "c", "image": "c"}]}}
    )
    assert out["spec"]["containers"] == [
        {"name": "a", "image": "a:1"},
        {"name": "b", "image": "b:2"},
        {"name": "c", "image": "c"},
    ]
    assert live["spec"]["containers"][1]["image"] == "b:1"  # pure


def test_set_element_order_is_honoured_and_stripped() -> None:
    live = pod({"name": "a", "image": "a"}, {"name": "b", "image": "b"})
    out = smp(
        live,
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "c"}, {"name": "b"}, {"name": "a"}],
                "containers": [{"name": "c", "image": "c"}],
            }
        },
    )
    assert [c["name"] for c in out["spec"]["containers"]] == ["c", "b", "a"]
    assert not any(k.startswith("$") for k in out["spec"])


def test_set_element_order_keeps_unlisted_server_items_in_place() -> None:
    live = pod({"name": "a"}, {"name": "s"}, {"name": "b"})
    out = smp(live, {"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}})
    names = [c["name"] for c in out["spec"]["containers"]]
    assert sorted(names) == ["a", "b", "s"]
    assert names.index("b") < names.index("a")


def test_patch_delete_in_a_list_item() -> None:
    live = pod({"name": "a"}, {"name": "b"})
    out = smp(live, {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}})
    assert out["spec"]["containers"] == [{"name": "b"}]


def test_patch_replace_as_a_list_item_replaces_the_list() -> None:
    live = pod({"name": "a"}, {"name": "b"})
    out = smp(live, {"spec": {"containers": [{"$patch": "replace"}, {"name": "z"}]}})
    assert out["spec"]["containers"] == [{"name": "z"}]


def test_patch_replace_and_delete_in_maps() -> None:
    live = pod({"name": "a"}, nodeSelector={"x": "1", "y": "2"})
    out = smp(live, {"spec": {"nodeSelector": {"$patch": "replace", "z": "3"}}})
    assert out["spec"]["nodeSelector"] == {"z": "3"}
    out = smp(live, {"spec": {"nodeSelector": {"$patch": "delete"}}})
    assert "nodeSelector" not in out["spec"]
    out = smp(live, {"metadata": {"labels": {"$patch": "merge", "b": "2"}}})
    assert out["metadata"]["labels"] == {"app": "x", "b": "2"}


def test_null_deletes_keys() -> None:
    out = smp(
        pod({"name": "a", "image": "i", "args": ["x"]}),
        {
            "metadata": {"labels": {"app": None}},
            "spec": {"containers": [{"name": "a", "args": None}]},
        },
    )
    assert out["metadata"]["labels"] == {}
    assert out["spec"]["containers"] == [{"name": "a", "image": "i"}]


def test_lists_without_a_strategy_are_replaced() -> None:
    live = pod({"name": "a", "args": ["1", "2"]}, tolerations=[{"key": "k"}])
    out = smp(
        live,
        {"spec": {"tolerations": [{"key": "j"}], "containers": [{"name": "a", "args": ["3"]}]}},
    )
    assert out["spec"]["tolerations"] == [{"key": "j"}]
    assert out["spec"]["containers"][0]["args"] == ["3"]


def test_node_taints_are_replaced_not_merged() -> None:
    node = {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}
    out = smp(
        node,
        {"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}},
        STRATEGIC_SCHEMAS["Node"],
    )
    assert out["spec"]["taints"] == [{"key": "b", "effect": "NoSchedule"}]


def test_node_conditions_merge_by_type() -> None:
    node = {
        "status": {
            "conditions": [{"type": "Ready", "status": "False"}, {"type": "X", "status": "True"}]
        }
    }
    out = smp(
        node,
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        STRATEGIC_SCHEMAS["Node"],
    )
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "X", "status": "True"},
    ]


def test_primitive_merge_list_and_delete_from_primitive_list() -> None:
    live = {"metadata": {"finalizers": ["a", "b", "c"]}}
    out = smp(live, {"metadata": {"finalizers": ["d", "a"]}}, STRATEGIC_SCHEMAS["Namespace"])
    assert out["metadata"]["finalizers"] == ["a", "b", "c", "d"]
    out = smp(
        live,
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["b", "zz"]}},
        STRATEGIC_SCHEMAS["Event"],
    )
    assert out["metadata"]["finalizers"] == ["a", "c"]
    out = smp(
        live,
        {"metadata": {"$setElementOrder/finalizers": ["c", "a", "b"]}},
        STRATEGIC_SCHEMAS["Namespace"],
    )
    assert out["metadata"]["finalizers"] == ["c", "a", "b"]


def test_owner_references_merge_by_uid() -> None:
    live = {"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}, {"uid": "2", "name": "b"}]}}
    out = smp(live, {"metadata": {"ownerReferences": [{"uid": "2", "name": "B"}]}}, JOB)
    assert out["metadata"]["ownerReferences"] == [
        {"uid": "1", "name": "a"},
        {"uid": "2", "name": "B"},
    ]


def test_retain_keys_clears_unlisted_keys() -> None:
    live = {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}
    schema = StrategicSchema({})
    out = smp(live, {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}, schema)
    assert out == {"spec": {"strategy": {"type": "Recreate"}}}
    with pytest.raises(PatchError) as err:
        smp(live, {"spec": {"strategy": {"$retainKeys": ["type"], "other": 1}}}, schema)
    assert err.value.code == 422


@pytest.mark.parametrize(
    "patch",
    [
        {"spec": {"$bogus": 1}},
        {"spec": {"nodeSelector": {"$patch": "explode"}}},
        {"spec": {"$setElementOrder/containers": "a"}},
        {"spec": {"$deleteFromPrimitiveList/x": "a"}},
        {"spec": {"$retainKeys": "a"}},
        {"spec": {"containers": [{"image": "no-name"}]}},
        {"spec": {"containers": ["not-a-map"]}},
        {"metadata": {"finalizers": [{"a": 1}]}},
    ],
)
def test_bad_directives_and_items_are_400(patch: dict[str, Any]) -> None:
    with pytest.raises(PatchError) as err:
        smp(pod({"name": "a"}), patch)
    assert err.value.code == 400


def test_custom_schema_primitive_marker() -> None:
    schema = StrategicSchema({("spec", "hosts"): PRIMITIVE})
    assert smp({"spec": {"hosts": ["a"]}}, {"spec": {"hosts": ["b", "a"]}}, schema) == {
        "spec": {"hosts": ["a", "b"]}
    }


def _job(containers: list[dict[str, Any]], last_applied: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "default",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": last_applied},
        },
        "spec": {
            "backoffLimit": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": containers,
                }
            },
        },
    }


def test_kubectl_client_side_apply_three_way_patch_for_a_job() -> None:
    # What `kubectl apply` sends when the image changes, env var B is dropped from
    # the file, a sidecar is added before main, and a server-defaulted field
    # (terminationMessagePath) must survive because the file never set it.
    live = _job(
        [
            {
                "name": "main",
                "image": "trainer:1",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "terminationMessagePath": "/dev/termination-log",
            }
        ],
        '{"old":"config"}\n',
    )
    patch = {
        "metadata": {
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": '{"new":"config"}\n'
            }
        },
        "spec": {
            "template": {
                "spec": {
                    "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "main"}],
                    "containers": [
                        {
                            "$setElementOrder/env": [{"name": "A"}],
                            "env": [{"$patch": "delete", "name": "B"}],
                            "image": "trainer:2",
                            "name": "main",
                        },
                        {"image": "proxy:1", "name": "sidecar"},
                    ],
                }
            }
        },
    }
    out = apply_patch(live, json.dumps(patch).encode(), STRATEGIC, strategic=JOB)
    assert out["spec"]["template"]["spec"]["containers"] == [
        {"image": "proxy:1", "name": "sidecar"},
        {
            "name": "main",
            "image": "trainer:2",
            "env": [{"name": "A", "value": "1"}],
            "terminationMessagePath": "/dev/termination-log",
        },
    ]
    assert out["metadata"]["annotations"] == {
        "kubectl.kubernetes.io/last-applied-configuration": '{"new":"config"}\n'
    }
    assert out["spec"]["backoffLimit"] == 2
    assert "$" not in json.dumps(out)


def test_empty_strategic_patch_is_identity() -> None:
    live = pod({"name": "a", "ports": [{"containerPort": 80}]})
    assert smp(live, {}) == live


@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.text(max_size=3), max_size=3))
def test_strategic_patch_of_labels_matches_merge_patch(labels: dict[str, str]) -> None:
    live = pod({"name": "a"})
    patch = {"metadata": {"labels": labels}}
    assert smp(live, patch) == mp(live, patch)


def test_volume_items_honour_retain_keys_as_kubectl_sends_them() -> None:
    # Switching a volume's source: kubectl sends the item with $retainKeys so
    # the old source (hostPath) is cleared rather than merged alongside.
    live = pod({"name": "a"}, volumes=[{"name": "data", "hostPath": {"path": "/d"}}, {"name": "x"}])
    out = smp(
        live,
        {
            "spec": {
                "$setElementOrder/volumes": [{"name": "data"}, {"name": "x"}],
                "volumes": [{"$retainKeys": ["emptyDir", "name"], "emptyDir": {}, "name": "data"}],
            }
        },
    )
    assert out["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}, {"name": "x"}]


@given(st.permutations(["a", "b", "c", "d"]))
def test_set_element_order_of_existing_items_is_exactly_that_order(order: list[str]) -> None:
    live = pod(*({"name": n, "image": n} for n in "abcd"))
    out = smp(live, {"spec": {"$setElementOrder/containers": [{"name": n} for n in order]}})
    assert [c["name"] for c in out["spec"]["containers"]] == order
    assert all(c["image"] == c["name"] for c in out["spec"]["containers"])

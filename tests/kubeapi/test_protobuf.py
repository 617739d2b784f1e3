"""The protobuf request bodies of kubectl 1.32/1.33 (captured from the real binaries into
``tests/kubeapi/protobuf/``) decode to their JSON form; what the reader does not know is
refused by name, and bad bytes are 400."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phalanx.kubeapi.protobuf import MAGIC, decode
from phalanx.kubeapi.status import KubeError

FIXTURES = Path(__file__).parent / "protobuf"
STAMP = {"creationTimestamp": None}


def _job(name: str, namespace: str | None, command: list[str]) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {}), **STAMP}
    container = {"name": name, "image": "busybox", "command": command, "resources": {}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "template": {
                "metadata": STAMP,
                "spec": {"containers": [container], "restartPolicy": "Never"},
            }
        },
        "status": {},
    }


def _review(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "metadata": STAMP,
        "spec": spec,
        "status": {"allowed": False},
    }


# What each kubectl sends as JSON up to 1.31 (the same objects, minus the zero fields).
EXPECTED = {
    "create-job-1.33.pb": _job("pi-33", None, ["true"]),
    "create-job-namespaced-1.32.pb": _job("pi2-32", "team-x", ["sh", "-c", "echo hi"]),
    "create-namespace-1.32.pb": {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-32", **STAMP},
        "spec": {},
        "status": {},
    },
    "auth-whoami-1.33.pb": {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "SelfSubjectReview",
        "metadata": STAMP,
        "status": {"userInfo": {}},
    },
    "auth-can-i-create-jobs-1.32.pb": _review(
        {
            "resourceAttributes": {
                "namespace": "default",
                "verb": "create",
                "group": "batch",
                "resource": "jobs",
            }
        }
    ),
    "auth-can-i-nonresource-1.33.pb": _review(
        {"nonResourceAttributes": {"path": "/logs", "verb": "get"}}
    ),
    "auth-can-i-subresource-1.33.pb": _review(
        {
            "resourceAttributes": {
                "namespace": "team-x",
                "verb": "get",
                "group": "batch",
                "resource": "jobs",
                "subresource": "status",
                "name": "status",
            }
        }
    ),
}


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_kubectl_bodies_decode_to_their_json_form(fixture: str) -> None:
    assert decode((FIXTURES / fixture).read_bytes()) == EXPECTED[fixture]


# A hand-built writer, for the cases kubectl does not send.
def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _len(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _int(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _len(1, api_version) + _len(2, kind)
    return MAGIC + _len(1, type_meta) + _len(2, raw) + _len(3, "") + _len(4, "")


def _job_with_container(container: bytes, spec: bytes = b"") -> bytes:
    pod = _len(2, container) + _len(3, "Never")
    return _envelope(
        "batch/v1", "Job", _len(1, _len(1, "j")) + _len(2, spec + _len(6, _len(2, pod)))
    )


def test_pointer_zeros_negatives_maps_and_times() -> None:
    resources = _len(1, _len(1, "cpu") + _len(2, _len(1, "2"))) + _len(
        2, _len(1, "memory") + _len(2, _len(1, "1Gi"))
    )
    container = (
        _len(1, "c") + _len(2, "img") + _len(8, resources) + _len(7, _len(1, "A") + _len(2, "1"))
    )
    # parallelism 0 and suspend false are set (pointers); a negative backoffLimit is a
    # 10-byte varint, which decodes (validation is the handlers' business).
    spec = _int(1, 0) + _int(10, 0) + _int(7, -1)
    meta = _len(1, "j") + _len(11, _len(1, "a") + _len(2, "b")) + _len(8, _int(1, 1700000000))
    body = _envelope(
        "batch/v1",
        "Job",
        _len(1, meta) + _len(2, spec + _len(6, _len(2, _len(2, container)))),
    )
    out = decode(body)
    assert out["metadata"] == {
        "name": "j",
        "labels": {"a": "b"},
        "creationTimestamp": "2023-11-14T22:13:20Z",
    }
    assert out["spec"]["parallelism"] == 0 and out["spec"]["suspend"] is False
    assert out["spec"]["backoffLimit"] == -1
    assert out["spec"]["template"]["spec"]["containers"] == [
        {
            "name": "c",
            "image": "img",
            "resources": {"limits": {"cpu": "2"}, "requests": {"memory": "1Gi"}},
            "env": [{"name": "A", "value": "1"}],
        }
    ]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        # Container field 10 is livenessProbe.
        (_job_with_container(_len(1, "c") + _len(10, b"")), "field 10 of a Container"),
        # PodSpec field 1 is volumes.
        (
            _envelope("batch/v1", "Job", _len(2, _len(6, _len(2, _len(1, b""))))),
            "field 1 of a PodSpec",
        ),
        # JobSpec field 11 is podFailurePolicy; an unknown varint field of ObjectMeta.
        (_job_with_container(_len(1, "c"), _len(11, b"")), "field 11 of a JobSpec"),
        (_envelope("v1", "Namespace", _len(1, _int(99, 1))), "field 99 of a ObjectMeta"),
    ],
)
def test_unknown_fields_are_refused_by_number(body: bytes, words: str) -> None:
    with pytest.raises(KubeError) as err:
        decode(body)
    assert err.value.code == 415
    assert f"phalanx cannot read {words} sent as protobuf" in err.value.message
    assert "kubectl apply -f" in err.value.message


@pytest.mark.parametrize(
    ("api_version", "kind"), [("v1", "ConfigMap"), ("batch/v1", "CronJob"), ("", "")]
)
def test_other_kinds_are_refused_naming_the_readable_ones(api_version: str, kind: str) -> None:
    with pytest.raises(KubeError) as err:
        decode(_envelope(api_version, kind, b""))
    assert err.value.code == 415
    assert "Namespace (v1), Job (batch/v1)" in err.value.message
    assert (kind or "no kind") in err.value.message and "JSON or YAML" in err.value.message


def test_only_magic_is_refused() -> None:
    with pytest.raises(KubeError) as err:
        decode(MAGIC)
    assert err.value.code == 415


GOOD = (FIXTURES / "create-job-1.33.pb").read_bytes()


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"kind": "Job"}', "prefix"),
        (GOOD[:-5], "runs past the end"),
        (GOOD[:40], "runs past the end"),
        (MAGIC + b"\x0a\xff", "ends inside a varint"),
        (MAGIC + b"\x0a" + b"\xff" * 11, "longer than 10 bytes"),
        (MAGIC + b"\x08\x01", "wire type 0, expected 2"),
        (MAGIC + b"\x0b", "wire type 3"),
        (MAGIC + b"\x02\x00", "field number 0"),
        (_envelope("v1", "Namespace", _len(1, _len(1, b"\xff\xfe"))), "not UTF-8"),
        (_job_with_container(_len(1, "c"), _int(1, 1 << 40)), "int32 range"),
        (_envelope("v1", "Namespace", _len(1, _len(11, _int(3, 1)))), "map entry"),
    ],
)
def test_bad_bytes_are_400(body: bytes, words: str) -> None:
    with pytest.raises(KubeError) as err:
        decode(body)
    assert err.value.code == 400, err.value.message
    assert err.value.message.startswith("the protobuf body is malformed: ")
    assert words in err.value.message


def test_every_truncation_is_a_clean_error() -> None:
    for end in range(len(GOOD)):
        try:
            decode(GOOD[:end])
        except KubeError as exc:
            assert exc.code in (400, 415)

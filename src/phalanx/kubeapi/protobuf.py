"""Request bodies in Kubernetes' protobuf encoding (``application/vnd.kubernetes.protobuf``).

kubectl 1.32 and later send protobuf, not JSON, for the objects its imperative
commands build: ``kubectl auth can-i`` (SelfSubjectAccessReview), ``kubectl auth
whoami`` (SelfSubjectReview), ``kubectl create namespace`` and ``kubectl create job
--image``. :func:`decode` turns such a body into the dict its JSON form would be, so
the handlers see no difference.

It is a small, strict reader, not a general protobuf library:

- Only the four kinds above (:data:`KINDS`) are read. Any other kind is refused with
  415, asking for JSON or YAML (``kubectl apply -f`` sends JSON).
- Only the fields in :data:`MESSAGES` are read: what kubectl fills, and the plain
  fields of the same messages. A field number the tables do not know is refused with
  415 naming the message and the number, never dropped: protobuf gives no field name,
  and dropping it would silently change the object.
- Malformed bytes are 400 ``the protobuf body is malformed: ...``.

Go's generated code writes every non-pointer scalar, even a zero one (``name: ""``,
``hostNetwork: false``), where JSON omits it (``omitempty``). The tables say which
fields are pointers (:data:`PTR`: a zero value is a value, kept) and which have no
``omitempty`` in JSON (:data:`KEEP`); any other zero scalar is left out, as in JSON.
Field numbers come from k8s.io/api's and k8s.io/apimachinery's ``generated.proto``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from phalanx.kubeapi.status import KubeError

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

# Field flags.
REP = 1  # repeated
PTR = 2  # a pointer in Go: present means set, even to a zero value
KEEP = 4  # no omitempty in JSON: a zero value is written

# Scalar and special kinds; any other kind names a message in MESSAGES. A map is
# "map:" and the kind of its values.
STR, I32, I64, BOOL = "string", "int32", "int64", "bool"
TIME = "Time"  # meta/v1 Time: {seconds, nanos}; JSON is RFC 3339, or null when zero
QTY = "Quantity"  # resource.Quantity: {string}; JSON is the string
STRINGS = "ExtraValue"  # authentication/v1 ExtraValue: {repeated items}; JSON is the list
MAP_STR = "map:" + STR

Field = tuple[str, str, int]  # JSON name, kind, flags

_OBJECT_META: dict[int, Field] = {
    1: ("name", STR, 0),
    2: ("generateName", STR, 0),
    3: ("namespace", STR, 0),
    4: ("selfLink", STR, 0),
    5: ("uid", STR, 0),
    6: ("resourceVersion", STR, 0),
    7: ("generation", I64, 0),
    8: ("creationTimestamp", TIME, 0),
    9: ("deletionTimestamp", TIME, PTR),
    10: ("deletionGracePeriodSeconds", I64, PTR),
    11: ("labels", MAP_STR, 0),
    12: ("annotations", MAP_STR, 0),
    13: ("ownerReferences", "OwnerReference", REP),
    14: ("finalizers", STR, REP),
}

_SELECTOR_REQUIREMENT: dict[int, Field] = {
    1: ("key", STR, KEEP),
    2: ("operator", STR, KEEP),
    3: ("values", STR, REP),
}

MESSAGES: dict[str, dict[int, Field]] = {
    # apimachinery
    "Unknown": {
        1: ("typeMeta", "TypeMeta", 0),
        2: ("raw", "bytes", 0),
        3: ("contentEncoding", STR, 0),
        4: ("contentType", STR, 0),
    },
    "TypeMeta": {1: ("apiVersion", STR, 0), 2: ("kind", STR, 0)},
    "ObjectMeta": _OBJECT_META,
    "OwnerReference": {
        5: ("apiVersion", STR, KEEP),
        1: ("kind", STR, KEEP),
        3: ("name", STR, KEEP),
        4: ("uid", STR, KEEP),
        6: ("controller", BOOL, PTR),
        7: ("blockOwnerDeletion", BOOL, PTR),
    },
    "Time": {1: ("seconds", I64, 0), 2: ("nanos", I32, 0)},
    "Quantity": {1: ("string", STR, 0)},
    "LabelSelector": {
        1: ("matchLabels", MAP_STR, 0),
        2: ("matchExpressions", "LabelSelectorRequirement", REP),
    },
    "LabelSelectorRequirement": _SELECTOR_REQUIREMENT,
    "FieldSelectorRequirement": _SELECTOR_REQUIREMENT,
    # core/v1 Namespace
    "Namespace": {
        1: ("metadata", "ObjectMeta", 0),
        2: ("spec", "NamespaceSpec", 0),
        3: ("status", "NamespaceStatus", 0),
    },
    "NamespaceSpec": {1: ("finalizers", STR, REP)},
    "NamespaceStatus": {
        1: ("phase", STR, 0),
        2: ("conditions", "NamespaceCondition", REP),
    },
    "NamespaceCondition": {
        1: ("type", STR, KEEP),
        2: ("status", STR, KEEP),
        4: ("lastTransitionTime", TIME, 0),
        5: ("reason", STR, 0),
        6: ("message", STR, 0),
    },
    # authentication/v1 SelfSubjectReview (kubectl auth whoami)
    "SelfSubjectReview": {
        1: ("metadata", "ObjectMeta", 0),
        2: ("status", "SelfSubjectReviewStatus", 0),
    },
    "SelfSubjectReviewStatus": {1: ("userInfo", "UserInfo", 0)},
    "UserInfo": {
        1: ("username", STR, 0),
        2: ("uid", STR, 0),
        3: ("groups", STR, REP),
        4: ("extra", "map:" + STRINGS, 0),
    },
    # authorization/v1 SelfSubjectAccessReview (kubectl auth can-i)
    "SelfSubjectAccessReview": {
        1: ("metadata", "ObjectMeta", 0),
        2: ("spec", "SelfSubjectAccessReviewSpec", 0),
        3: ("status", "SubjectAccessReviewStatus", 0),
    },
    "SelfSubjectAccessReviewSpec": {
        1: ("resourceAttributes", "ResourceAttributes", 0),
        2: ("nonResourceAttributes", "NonResourceAttributes", 0),
    },
    "ResourceAttributes": {
        1: ("namespace", STR, 0),
        2: ("verb", STR, 0),
        3: ("group", STR, 0),
        4: ("version", STR, 0),
        5: ("resource", STR, 0),
        6: ("subresource", STR, 0),
        7: ("name", STR, 0),
        8: ("fieldSelector", "FieldSelectorAttributes", 0),
        9: ("labelSelector", "LabelSelectorAttributes", 0),
    },
    "FieldSelectorAttributes": {
        1: ("rawSelector", STR, 0),
        2: ("requirements", "FieldSelectorRequirement", REP),
    },
    "LabelSelectorAttributes": {
        1: ("rawSelector", STR, 0),
        2: ("requirements", "LabelSelectorRequirement", REP),
    },
    "NonResourceAttributes": {1: ("path", STR, 0), 2: ("verb", STR, 0)},
    "SubjectAccessReviewStatus": {
        1: ("allowed", BOOL, KEEP),
        4: ("denied", BOOL, 0),
        2: ("reason", STR, 0),
        3: ("evaluationError", STR, 0),
    },
    # batch/v1 Job (kubectl create job)
    "Job": {
        1: ("metadata", "ObjectMeta", 0),
        2: ("spec", "JobSpec", 0),
        3: ("status", "JobStatus", 0),
    },
    "JobSpec": {
        1: ("parallelism", I32, PTR),
        2: ("completions", I32, PTR),
        3: ("activeDeadlineSeconds", I64, PTR),
        4: ("selector", "LabelSelector", 0),
        5: ("manualSelector", BOOL, PTR),
        6: ("template", "PodTemplateSpec", 0),
        7: ("backoffLimit", I32, PTR),
        8: ("ttlSecondsAfterFinished", I32, PTR),
        9: ("completionMode", STR, PTR),
        10: ("suspend", BOOL, PTR),
        12: ("backoffLimitPerIndex", I32, PTR),
        13: ("maxFailedIndexes", I32, PTR),
        14: ("podReplacementPolicy", STR, PTR),
        15: ("managedBy", STR, PTR),
    },
    "JobStatus": {
        1: ("conditions", "JobCondition", REP),
        2: ("startTime", TIME, PTR),
        3: ("completionTime", TIME, PTR),
        4: ("active", I32, 0),
        5: ("succeeded", I32, 0),
        6: ("failed", I32, 0),
        7: ("completedIndexes", STR, 0),
        8: ("uncountedTerminatedPods", "UncountedTerminatedPods", 0),
        9: ("ready", I32, PTR),
        10: ("failedIndexes", STR, PTR),
        11: ("terminating", I32, PTR),
    },
    "JobCondition": {
        1: ("type", STR, KEEP),
        2: ("status", STR, KEEP),
        3: ("lastProbeTime", TIME, 0),
        4: ("lastTransitionTime", TIME, 0),
        5: ("reason", STR, 0),
        6: ("message", STR, 0),
    },
    "UncountedTerminatedPods": {1: ("succeeded", STR, REP), 2: ("failed", STR, REP)},
    "PodTemplateSpec": {1: ("metadata", "ObjectMeta", 0), 2: ("spec", "PodSpec", 0)},
    "PodSpec": {
        2: ("containers", "Container", REP),
        3: ("restartPolicy", STR, 0),
        4: ("terminationGracePeriodSeconds", I64, PTR),
        5: ("activeDeadlineSeconds", I64, PTR),
        6: ("dnsPolicy", STR, 0),
        7: ("nodeSelector", MAP_STR, 0),
        8: ("serviceAccountName", STR, 0),
        9: ("serviceAccount", STR, 0),
        10: ("nodeName", STR, 0),
        11: ("hostNetwork", BOOL, 0),
        12: ("hostPID", BOOL, 0),
        13: ("hostIPC", BOOL, 0),
        15: ("imagePullSecrets", "LocalObjectReference", REP),
        16: ("hostname", STR, 0),
        17: ("subdomain", STR, 0),
        19: ("schedulerName", STR, 0),
        20: ("initContainers", "Container", REP),
        21: ("automountServiceAccountToken", BOOL, PTR),
        22: ("tolerations", "Toleration", REP),
        24: ("priorityClassName", STR, 0),
        25: ("priority", I32, PTR),
        27: ("shareProcessNamespace", BOOL, PTR),
        29: ("runtimeClassName", STR, PTR),
        30: ("enableServiceLinks", BOOL, PTR),
        31: ("preemptionPolicy", STR, PTR),
        35: ("setHostnameAsFQDN", BOOL, PTR),
        37: ("hostUsers", BOOL, PTR),
    },
    "LocalObjectReference": {1: ("name", STR, 0)},
    "Toleration": {
        1: ("key", STR, 0),
        2: ("operator", STR, 0),
        3: ("value", STR, 0),
        4: ("effect", STR, 0),
        5: ("tolerationSeconds", I64, PTR),
    },
    "Container": {
        1: ("name", STR, KEEP),
        2: ("image", STR, 0),
        3: ("command", STR, REP),
        4: ("args", STR, REP),
        5: ("workingDir", STR, 0),
        6: ("ports", "ContainerPort", REP),
        7: ("env", "EnvVar", REP),
        8: ("resources", "ResourceRequirements", 0),
        13: ("terminationMessagePath", STR, 0),
        14: ("imagePullPolicy", STR, 0),
        16: ("stdin", BOOL, 0),
        17: ("stdinOnce", BOOL, 0),
        18: ("tty", BOOL, 0),
        20: ("terminationMessagePolicy", STR, 0),
        24: ("restartPolicy", STR, PTR),
    },
    "ContainerPort": {
        1: ("name", STR, 0),
        2: ("hostPort", I32, 0),
        3: ("containerPort", I32, KEEP),
        4: ("protocol", STR, 0),
        5: ("hostIP", STR, 0),
    },
    "EnvVar": {1: ("name", STR, KEEP), 2: ("value", STR, 0)},
    "ResourceRequirements": {
        1: ("limits", "map:" + QTY, 0),
        2: ("requests", "map:" + QTY, 0),
        3: ("claims", "ResourceClaim", REP),
    },
    "ResourceClaim": {1: ("name", STR, KEEP), 2: ("request", STR, 0)},
}

# (apiVersion, kind) of the objects read as protobuf -> their message.
KINDS: dict[tuple[str, str], str] = {
    ("authentication.k8s.io/v1", "SelfSubjectReview"): "SelfSubjectReview",
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): "SelfSubjectAccessReview",
    ("v1", "Namespace"): "Namespace",
    ("batch/v1", "Job"): "Job",
}

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_WIRE = {STR: _LEN, "bytes": _LEN, I32: _VARINT, I64: _VARINT, BOOL: _VARINT}
_AS_JSON = "send the object as JSON or YAML (kubectl apply -f)"


class Malformed(Exception):
    """Bytes that are not a well-formed protobuf message."""


def decode(raw: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf request body, or :class:`KubeError` (400, 415)."""
    try:
        return _decode(raw)
    except Malformed as exc:
        raise KubeError.bad_request(f"the protobuf body is malformed: {exc}") from None


def _decode(raw: bytes) -> dict[str, Any]:
    if not raw.startswith(MAGIC):
        raise Malformed("it does not start with Kubernetes' prefix k8s\\x00")
    envelope = _message(memoryview(raw)[len(MAGIC) :], "Unknown")
    type_meta = envelope.get("typeMeta") or {}
    api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
    message = KINDS.get((api_version, kind))
    if message is None:
        readable = ", ".join(f"{k} ({v})" for v, k in KINDS)
        named = f"{kind or 'no kind'} ({api_version or 'no apiVersion'})"
        raise _unsupported(
            f"phalanx reads protobuf request bodies only for {readable}, not {named}; " + _AS_JSON
        )
    encoding, inner = envelope.get("contentEncoding", ""), envelope.get("contentType", "")
    if encoding or inner not in ("", MEDIA_TYPE):
        raise _unsupported(
            f"phalanx cannot read a protobuf envelope whose content is "
            f"{inner or MEDIA_TYPE} with encoding {encoding or 'none'}; {_AS_JSON}"
        )
    body = _message(memoryview(envelope.get("raw", b"")), message)
    return {"apiVersion": api_version, "kind": kind, **body}


def _unsupported(message: str) -> KubeError:
    return KubeError(415, "UnsupportedMediaType", message)


def _message(data: memoryview, name: str) -> dict[str, Any]:
    fields = MESSAGES[name]
    out: dict[str, Any] = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise Malformed(f"field number 0 in a {name}")
        if number not in fields:
            _skip(data, pos, wire, name, number)  # malformed bytes are 400, not 415
            raise _unsupported(
                f"phalanx cannot read field {number} of a {name} sent as protobuf; {_AS_JSON}"
            )
        json_name, kind, flags = fields[number]
        value, pos = _value(data, pos, wire, kind, name, number)
        if flags & REP:
            out.setdefault(json_name, []).append(value)
        elif kind.startswith("map:"):
            out.setdefault(json_name, {}).update(value)
        elif value or flags & (PTR | KEEP) or kind in MESSAGES or kind == TIME:
            out[json_name] = value
        else:
            # A zero scalar Go wrote only because it is not a pointer; a later
            # occurrence of the same field replaces an earlier one.
            out.pop(json_name, None)
    return out


def _value(data: memoryview, pos: int, wire: int, kind: str, name: str, number: int) -> Any:
    want = _WIRE.get(kind, _LEN)
    if wire != want:
        raise Malformed(f"field {number} of a {name} has wire type {wire}, expected {want}")
    if want == _VARINT:
        raw, pos = _varint(data, pos)
        if kind == BOOL:
            return raw != 0, pos
        value = raw - (1 << 64) if raw >= 1 << 63 else raw
        if kind == I32 and not -(1 << 31) <= value < 1 << 31:
            raise Malformed(f"field {number} of a {name} is out of the int32 range")
        return value, pos
    chunk, pos = _bytes(data, pos)
    if kind == "bytes":
        return bytes(chunk), pos
    if kind == STR:
        try:
            return str(chunk, "utf-8"), pos
        except UnicodeDecodeError:
            raise Malformed(f"field {number} of a {name} is not UTF-8") from None
    if kind == TIME:
        return _time(_message(chunk, TIME)), pos
    if kind == QTY:
        return _message(chunk, QTY).get("string", ""), pos
    if kind == STRINGS:
        return _strings(chunk), pos
    if kind.startswith("map:"):
        return _entry(chunk, kind[4:], name, number), pos
    return _message(chunk, kind), pos


def _time(fields: dict[str, Any]) -> str | None:
    # Go writes the zero Time as an empty message (JSON null); nanos are dropped, as
    # the API server does.
    if not fields:
        return None
    seconds = fields.get("seconds", 0)
    try:
        moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
    except (OverflowError, OSError, ValueError):
        raise Malformed(f"a Time of {seconds} seconds is out of range") from None
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _strings(data: memoryview) -> list[str]:
    items: list[str] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        if key >> 3 != 1:
            _skip(data, pos, key & 7, STRINGS, key >> 3)
            raise _unsupported(
                f"phalanx cannot read field {key >> 3} of a {STRINGS} sent as protobuf; " + _AS_JSON
            )
        item, pos = _value(data, pos, key & 7, STR, STRINGS, 1)
        items.append(item)
    return items


def _entry(data: memoryview, kind: str, name: str, number: int) -> dict[str, Any]:
    """One entry of a map field: a message of key (1) and value (2)."""
    entry = f"entry of field {number} of a {name}"
    key, value = "", "" if kind in (STR, QTY) else []
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        if tag >> 3 == 1:
            key, pos = _value(data, pos, tag & 7, STR, entry, 1)
        elif tag >> 3 == 2:
            value, pos = _value(data, pos, tag & 7, kind, entry, 2)
        else:
            raise Malformed(f"field {tag >> 3} in a map {entry}")
    return {key: value}


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise Malformed("it ends inside a varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            # A 10th byte may carry only the top bit of a 64-bit value.
            if shift == 63 and byte > 1:
                raise Malformed("a varint overflows 64 bits")
            return result, pos
        shift += 7
        if shift > 63:
            raise Malformed("a varint is longer than 10 bytes")


def _bytes(data: memoryview, pos: int) -> tuple[memoryview, int]:
    size, pos = _varint(data, pos)
    if size > len(data) - pos:
        raise Malformed(f"a field of {size} bytes runs past the end")
    return data[pos : pos + size], pos + size


def _skip(data: memoryview, pos: int, wire: int, name: str, number: int) -> int:
    if wire == _VARINT:
        return _varint(data, pos)[1]
    if wire == _LEN:
        return _bytes(data, pos)[1]
    width = {_I64: 8, _I32: 4}.get(wire)
    if width is None:  # 3 and 4 are proto2 groups, which Kubernetes never writes
        raise Malformed(f"field {number} of a {name} has wire type {wire}")
    if pos + width > len(data):
        raise Malformed(f"field {number} of a {name} runs past the end")
    return pos + width

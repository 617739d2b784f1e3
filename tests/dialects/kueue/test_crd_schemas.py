"""phalanx's validator checked against Kueue's own CRD schemas, field by field.

The CRDs are read from ``../shared/reference/kueue-crds`` (never copied into
the repository). For each kind and served version the tests walk the
``openAPIV3Schema`` and check: every enum value is accepted and a wrong one is
refused naming the field; every required field, left out, is refused; every
field the CRD defines is either accepted or refused as "not supported" (never
"unknown field"); and the defaults phalanx fills in are the CRD's.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from phalanx.dialects.kueue import load_documents, to_manifest
from phalanx.dialects.kueue.manifests import format_path
from phalanx.dialects.kueue.validation import Field, schema_for
from phalanx.errors import Invalid
from tests.shared import needs_shared, shared_path

CRDS = shared_path("reference", "kueue-crds")
pytestmark = needs_shared("reference", "kueue-crds")

# (CRD file, wire kind, canonical kind)
KINDS = [
    ("kueue.x-k8s.io_resourceflavors.yaml", "ResourceFlavor", "ResourceFlavor"),
    ("kueue.x-k8s.io_topologies.yaml", "Topology", "Topology"),
    ("kueue.x-k8s.io_cohorts.yaml", "Cohort", "Cohort"),
    ("kueue.x-k8s.io_clusterqueues.yaml", "ClusterQueue", "ClusterQueue"),
    ("kueue.x-k8s.io_localqueues.yaml", "LocalQueue", "LocalQueue"),
    ("kueue.x-k8s.io_workloadpriorityclasses.yaml", "WorkloadPriorityClass", "PriorityClass"),
]
VERSIONS = ("v1beta2", "v1beta1")

# A valid object of each kind with every optional part present (one item per list),
# so that each field of the schema has a place to be changed.
BASE: dict[str, dict[str, Any]] = {
    "ResourceFlavor": {
        "metadata": {"name": "h100"},
        "spec": {
            "nodeLabels": {"gpu": "h100"},
            "nodeTaints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}],
            "tolerations": [
                {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
            ],
            "topologyName": "default",
        },
    },
    "Topology": {
        "metadata": {"name": "default"},
        "spec": {"levels": [{"nodeLabel": "rack"}, {"nodeLabel": "kubernetes.io/hostname"}]},
    },
    "Cohort": {
        "metadata": {"name": "research"},
        "spec": {
            "parentName": "org",
            "fairSharing": {"weight": "2"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [
                                {
                                    "name": "cpu",
                                    "nominalQuota": "8",
                                    "borrowingLimit": "2",
                                    "lendingLimit": "1",
                                }
                            ],
                        }
                    ],
                }
            ],
        },
    },
    "ClusterQueue": {
        "metadata": {"name": "team-a"},
        "spec": {
            "cohortName": "research",
            "namespaceSelector": {
                "matchLabels": {"team": "a"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}],
            },
            "queueingStrategy": "StrictFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [
                                {
                                    "name": "cpu",
                                    "nominalQuota": "8",
                                    "borrowingLimit": "2",
                                    "lendingLimit": "1",
                                }
                            ],
                        }
                    ],
                }
            ],
            "flavorFungibility": {
                "whenCanBorrow": "TryNextFlavor",
                "whenCanPreempt": "TryNextFlavor",
            },
            "preemption": {
                "withinClusterQueue": "LowerPriority",
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "Never", "maxPriorityThreshold": 10},
            },
            "stopPolicy": "None",
            "fairSharing": {"weight": "1"},
            "admissionScope": {"admissionMode": "NoAdmissionFairSharing"},
        },
    },
    "LocalQueue": {
        "metadata": {"name": "default", "namespace": "team-a"},
        "spec": {"clusterQueue": "team-a", "stopPolicy": "None", "fairSharing": {"weight": "1"}},
    },
    "WorkloadPriorityClass": {
        "metadata": {"name": "high"},
        "value": 1000,
        "description": "important",
    },
}

# The smallest valid object, with the objects that hold defaults present and empty.
EMPTY: dict[str, dict[str, Any]] = {
    "ResourceFlavor": {"metadata": {"name": "h100"}},
    "Topology": {"metadata": {"name": "t"}, "spec": {"levels": [{"nodeLabel": "rack"}]}},
    "Cohort": {"metadata": {"name": "c"}, "spec": {"fairSharing": {}}},
    "ClusterQueue": {"metadata": {"name": "q"}, "spec": {"fairSharing": {}}},
    "LocalQueue": {
        "metadata": {"name": "default", "namespace": "t"},
        "spec": {"clusterQueue": "q", "fairSharing": {}},
    },
    "WorkloadPriorityClass": {"metadata": {"name": "p"}, "value": 0},
}

V1BETA1_RENAMES = {"ClusterQueue": {"cohortName": "cohort"}}

Elem = str  # a property name, or "[]" for "every item of this list"


def crd_schema(file: str, version: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / file).read_text())
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            return dict(served["schema"]["openAPIV3Schema"])
    raise AssertionError(f"{file} does not serve {version}")


def walk(
    schema: dict[str, Any], path: tuple[Elem, ...] = ()
) -> Iterator[tuple[tuple[Elem, ...], dict[str, Any]]]:
    yield path, schema
    for key, sub in (schema.get("properties") or {}).items():
        if not path and key in ("apiVersion", "kind", "metadata", "status"):
            continue
        yield from walk(sub, (*path, key))
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], (*path, "[]"))


def document(wire: str, version: str, body: dict[str, Any]) -> dict[str, Any]:
    doc = {"apiVersion": f"kueue.x-k8s.io/{version}", "kind": wire, **copy.deepcopy(body)}
    if version == "v1beta1" and isinstance(doc.get("spec"), dict):
        for new, old in V1BETA1_RENAMES.get(wire, {}).items():
            if new in doc["spec"]:
                doc["spec"][old] = doc["spec"].pop(new)
    return doc


def concrete(path: tuple[Elem, ...]) -> tuple[str | int, ...]:
    return tuple(0 if e == "[]" else e for e in path)


def put(doc: dict[str, Any], path: tuple[Elem, ...], value: Any) -> None:
    here: Any = doc
    for elem, nxt in zip(path, (*path[1:], None), strict=True):
        key: str | int = 0 if elem == "[]" else elem
        if nxt is None:
            if isinstance(here, list) and not here:
                here.append(value)
            else:
                here[key] = value
            return
        if isinstance(here, list):
            if not here:
                here.append([] if nxt == "[]" else {})
        elif key not in here or not isinstance(here[key], dict | list):
            here[key] = [] if nxt == "[]" else {}
        here = here[key]


def remove(doc: dict[str, Any], path: tuple[Elem, ...]) -> bool:
    here: Any = doc
    for elem in path[:-1]:
        key: str | int = 0 if elem == "[]" else elem
        try:
            here = here[key]
        except (KeyError, IndexError, TypeError):
            return False
    if isinstance(here, dict) and path[-1] in here:
        del here[path[-1]]
        return True
    return False


def problems(doc: dict[str, Any]) -> list[str]:
    try:
        load_documents([doc], "crd")
    except Invalid as exc:
        return str(exc.detail).splitlines()
    return []


def phalanx_field(kind: str, api_version: str, path: tuple[Elem, ...]) -> Field | None:
    """phalanx's schema node for ``path``, or the nearest one that takes it whole."""
    field = schema_for(kind, api_version)
    for elem in path:
        if field.unsupported or field.ignored or field.type in ("any", "map"):
            return field
        if elem == "[]":
            if field.items is None:
                return None
            field = field.items
            continue
        sub = field.props.get(elem)
        if sub is None:
            return None
        field = sub
    return field


def unsupported_prefix(
    kind: str, api_version: str, path: tuple[Elem, ...]
) -> tuple[Elem, ...] | None:
    field = schema_for(kind, api_version)
    for i, elem in enumerate(path):
        if field.unsupported:
            return path[:i]
        nxt = field.items if elem == "[]" else field.props.get(elem)
        if nxt is None:
            return None
        field = nxt
    return path if field.unsupported else None


CASES = [(file, wire, kind, version) for file, wire, kind in KINDS for version in VERSIONS]
IDS = [f"{wire}-{version}" for _, wire, _, version in CASES]


@pytest.mark.parametrize(("file", "wire", "kind", "version"), CASES, ids=IDS)
def test_base_documents_load(file: str, wire: str, kind: str, version: str) -> None:
    assert problems(document(wire, version, BASE[wire])) == []


@pytest.mark.parametrize(("file", "wire", "kind", "version"), CASES, ids=IDS)
def test_every_crd_field_is_known(file: str, wire: str, kind: str, version: str) -> None:
    api_version = f"kueue.x-k8s.io/{version}"
    checked = 0
    for path, _ in walk(crd_schema(file, version)):
        if not path:
            continue
        assert phalanx_field(kind, api_version, path) is not None, (
            f"{wire} {version}: the CRD field {'.'.join(path)} is unknown to phalanx"
        )
        checked += 1
    assert checked >= 1


def sample(schema: dict[str, Any]) -> Any:
    if schema.get("enum"):
        return schema["enum"][0]
    if schema.get("x-kubernetes-int-or-string"):
        return "1"
    kind = str(schema.get("type"))
    return {"string": "a", "integer": 1, "boolean": True, "array": [], "object": {}}.get(kind, "1")


@pytest.mark.parametrize(("file", "wire", "kind", "version"), CASES, ids=IDS)
def test_no_crd_field_is_an_unknown_field(file: str, wire: str, kind: str, version: str) -> None:
    for path, schema in walk(crd_schema(file, version)):
        if not path:
            continue
        doc = document(wire, version, BASE[wire])
        put(doc, path, sample(schema))
        for line in problems(doc):
            assert "unknown field" not in line, f"{'.'.join(path)}: {line}"


@pytest.mark.parametrize(("file", "wire", "kind", "version"), CASES, ids=IDS)
def test_enums(file: str, wire: str, kind: str, version: str) -> None:
    api_version = f"kueue.x-k8s.io/{version}"
    enums = [(p, s["enum"]) for p, s in walk(crd_schema(file, version)) if s.get("enum")]
    for path, allowed in enums:
        where = format_path(concrete(path))
        refused = unsupported_prefix(kind, api_version, path)
        for value in allowed:
            doc = document(wire, version, BASE[wire])
            put(doc, path, value)
            found = problems(doc)
            if refused is not None:
                assert len(found) == 1 and "not supported" in found[0], found
                assert f": {format_path(concrete(refused))}: not supported" in found[0]
            else:
                assert found == [], f"{where}={value}: {found}"
        doc = document(wire, version, BASE[wire])
        put(doc, path, "NotAKueueValue")
        (line,) = problems(doc)
        if refused is None:
            assert f": {where}: " in line and "NotAKueueValue" in line, line
            assert all(v in line for v in allowed), line


@pytest.mark.parametrize(("file", "wire", "kind", "version"), CASES, ids=IDS)
def test_required_fields(file: str, wire: str, kind: str, version: str) -> None:
    api_version = f"kueue.x-k8s.io/{version}"
    count = 0
    for path, schema in walk(crd_schema(file, version)):
        for key in schema.get("required") or ():
            full = (*path, key)
            if unsupported_prefix(kind, api_version, full) is not None:
                continue
            doc = document(wire, version, BASE[wire])
            if not remove(doc, full):
                continue
            count += 1
            found = problems(doc)
            assert any(f": {format_path(concrete(full))}: required" in line for line in found), (
                f"{'.'.join(full)} left out: {found}"
            )
    if wire in ("ClusterQueue", "Cohort", "Topology"):
        assert count >= 1


def value_at(data: Any, path: tuple[Elem, ...]) -> Any:
    for elem in path:
        key: str | int = 0 if elem == "[]" else elem
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return None
    return data


@pytest.mark.parametrize(("file", "wire", "kind", "version"), CASES, ids=IDS)
def test_defaults_match_the_crd(file: str, wire: str, kind: str, version: str) -> None:
    api_version = f"kueue.x-k8s.io/{version}"
    (m,) = load_documents([document(wire, version, EMPTY[wire])], "crd")
    exported = to_manifest(m.kind, m.obj)
    for path, schema in walk(crd_schema(file, version)):
        if "default" not in schema or unsupported_prefix(kind, api_version, path) is not None:
            continue
        phalanx = phalanx_field(kind, api_version, path)
        assert phalanx is not None and phalanx.default is not None, (
            f"{'.'.join(path)}: phalanx has no default, the CRD says {schema['default']!r}"
        )
        assert phalanx.default == schema["default"] or str(phalanx.default) == str(
            schema["default"]
        ), f"{'.'.join(path)}: {phalanx.default!r} != {schema['default']!r}"
        got = value_at(exported, path)
        if isinstance(schema["default"], dict):
            assert isinstance(got, dict), f"{'.'.join(path)} missing from {exported}"
        else:
            assert str(got) == str(schema["default"]), f"{'.'.join(path)}: {got!r}"

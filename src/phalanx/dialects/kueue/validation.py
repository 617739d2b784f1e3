"""What the Kubernetes API server and Kueue's webhooks check before a Kueue object is stored.

:func:`validate` walks a manifest against phalanx's own description of each
kind's schema (:data:`SCHEMAS`, written after Kueue's CRDs): required fields,
types, enums, quantity syntax, ``maxItems``/``maxLength``/patterns, the CRDs'
CEL rules and the webhook rules (each resource and each flavor in at most one
resource group, a flavor lists exactly the ``coveredResources``, ...). Unknown
fields are refused (strict decoding); a real Kueue field that phalanx does not
implement is refused with "not supported" and the reason. Defaults are filled
in as the API server does, so a stored object spells them out.

Problems are ``(path, message)`` pairs, the path in the manifest's own spelling
(v1beta1 documents are checked against the v1beta1 shape, then normalized).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from phalanx.dialects.kueue.values import describe

__all__ = [
    "LABEL_SELECTOR",
    "SCHEMAS",
    "Field",
    "Problem",
    "check",
    "list_of",
    "object_of",
    "parse_duration",
    "schema_for",
    "string",
    "unsupported",
    "validate",
]

Path_ = tuple[str | int, ...]
Problem = tuple[Path_, str]

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
INT32 = (-(2**31), 2**31 - 1)

_PATTERN_TEXT = {
    DNS_SUBDOMAIN.pattern: "a lower-case DNS name (a-z, 0-9, '-' and '.')",
    DNS_LABEL.pattern: "a lower-case DNS label (a-z, 0-9 and '-', at most 63 characters)",
    LABEL_KEY.pattern: "a label key such as example.com/rack",
}


@dataclass(frozen=True)
class Field:
    """One node of a kind's schema.

    ``type`` is ``object``, ``array``, ``string``, ``integer``, ``boolean``,
    ``number``, ``duration`` (a Go duration string such as ``30m``), ``quantity``
    (an integer or a Kubernetes quantity string), ``map`` (string keys to string
    values) or ``any`` (kept as written, not checked).
    """

    type: str
    props: Mapping[str, Field] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    items: Field | None = None
    enum: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    max_length: int | None = None
    min_items: int | None = None
    max_items: int | None = None
    max_props: int | None = None
    minimum: int | None = None
    maximum: int | None = None
    default: Any = None
    unsupported: str = ""
    """Why phalanx refuses this (real Kueue) field; empty when it is supported."""
    ignored: bool = False
    """Accepted and dropped (Kubernetes bookkeeping such as ``metadata.uid``)."""


def object_of(props: Mapping[str, Field], *required: str, default: Any = None) -> Field:
    return Field("object", props=props, required=required, default=default)


def list_of(items: Field, min_items: int | None = None, max_items: int | None = None) -> Field:
    return Field("array", items=items, min_items=min_items, max_items=max_items)


def string(
    pattern: re.Pattern[str] | None = None,
    max_length: int | None = None,
    enum: tuple[str, ...] = (),
    default: str | None = None,
) -> Field:
    return Field("string", pattern=pattern, max_length=max_length, enum=enum, default=default)


def _name() -> Field:
    return string(DNS_SUBDOMAIN, 253)


def _int32(minimum: int | None = None) -> Field:
    return Field("integer", minimum=INT32[0] if minimum is None else minimum, maximum=INT32[1])


def _qty(default: Any = None) -> Field:
    return Field("quantity", default=default)


def unsupported(why: str) -> Field:
    return Field("any", unsupported=why)


_IGNORED = Field("any", ignored=True)

_ADMISSION_CHECKS = "phalanx does not run Kueue AdmissionChecks; remove the field"

LABEL_SELECTOR = object_of(
    {
        "matchLabels": Field("map"),
        "matchExpressions": list_of(
            object_of(
                {
                    "key": string(),
                    "operator": string(enum=("In", "NotIn", "Exists", "DoesNotExist")),
                    "values": list_of(string()),
                },
                "key",
                "operator",
            )
        ),
    }
)

_FAIR_SHARING = object_of({"weight": _qty(default=1)})

_RESOURCE_GROUPS = list_of(
    object_of(
        {
            "coveredResources": list_of(string(), 1, 64),
            "flavors": list_of(
                object_of(
                    {
                        "name": _name(),
                        "resources": list_of(
                            object_of(
                                {
                                    "name": string(),
                                    "nominalQuota": _qty(),
                                    "borrowingLimit": _qty(),
                                    "lendingLimit": _qty(),
                                },
                                "name",
                                "nominalQuota",
                            ),
                            1,
                            64,
                        ),
                    },
                    "name",
                    "resources",
                ),
                1,
                64,
            ),
        },
        "coveredResources",
        "flavors",
    ),
    max_items=16,
)

_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_METADATA = object_of(
    {
        "name": _name(),
        "namespace": string(DNS_LABEL, 63),
        "labels": Field("map"),
        "annotations": Field("map"),
        **{
            key: _IGNORED
            for key in (
                "uid",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "finalizers",
                "ownerReferences",
                "managedFields",
                "selfLink",
                "generateName",
            )
        },
    }
)


def _kind_schema(spec: Field | None, **top: Field) -> Field:
    props: dict[str, Field] = {
        "apiVersion": string(),
        "kind": string(),
        "metadata": _METADATA,
        # The status subresource: the API server ignores it on create and update.
        "status": _IGNORED,
        **top,
    }
    if spec is not None:
        props["spec"] = spec
    return object_of(props)


SCHEMAS: dict[str, Field] = {
    "ResourceFlavor": _kind_schema(
        object_of(
            {
                "nodeLabels": Field("map", max_props=8),
                "nodeTaints": Field(
                    "array",
                    max_items=8,
                    items=object_of(
                        {
                            "key": string(),
                            "value": string(),
                            "effect": string(enum=_TAINT_EFFECTS),
                            "timeAdded": string(),
                        },
                        "effect",
                        "key",
                    ),
                ),
                "tolerations": Field(
                    "array",
                    max_items=8,
                    items=object_of(
                        {
                            "key": string(),
                            "operator": string(enum=("Equal", "Exists")),
                            "value": string(),
                            "effect": string(enum=_TAINT_EFFECTS),
                            "tolerationSeconds": Field("integer"),
                        }
                    ),
                ),
                "topologyName": _name(),
            },
            default={},
        )
    ),
    "Topology": _kind_schema(
        object_of(
            {
                "levels": list_of(
                    object_of({"nodeLabel": string(LABEL_KEY, 316)}, "nodeLabel"),
                    1,
                    16,
                )
            },
            "levels",
        )
    ),
    "Cohort": _kind_schema(
        object_of(
            {
                "parentName": _name(),
                "resourceGroups": _RESOURCE_GROUPS,
                "fairSharing": _FAIR_SHARING,
            },
            default={},
        )
    ),
    "ClusterQueue": _kind_schema(
        object_of(
            {
                "cohortName": _name(),
                "namespaceSelector": LABEL_SELECTOR,
                "queueingStrategy": string(
                    enum=("StrictFIFO", "BestEffortFIFO"), default="BestEffortFIFO"
                ),
                "resourceGroups": _RESOURCE_GROUPS,
                "flavorFungibility": object_of(
                    {
                        "whenCanBorrow": string(
                            enum=("MayStopSearch", "TryNextFlavor"), default="MayStopSearch"
                        ),
                        "whenCanPreempt": string(
                            enum=("MayStopSearch", "TryNextFlavor"), default="TryNextFlavor"
                        ),
                        "preference": string(
                            enum=("BorrowingOverPreemption", "PreemptionOverBorrowing")
                        ),
                    },
                    default={},
                ),
                "preemption": object_of(
                    {
                        "withinClusterQueue": string(
                            enum=("Never", "LowerPriority", "LowerOrNewerEqualPriority"),
                            default="Never",
                        ),
                        "reclaimWithinCohort": string(
                            enum=("Never", "LowerPriority", "Any"), default="Never"
                        ),
                        "borrowWithinCohort": object_of(
                            {
                                "policy": string(enum=("Never", "LowerPriority"), default="Never"),
                                "maxPriorityThreshold": _int32(),
                            },
                            default={},
                        ),
                    },
                    default={},
                ),
                "admissionChecksStrategy": unsupported(_ADMISSION_CHECKS),
                "stopPolicy": string(enum=("None", "Hold", "HoldAndDrain"), default="None"),
                "fairSharing": _FAIR_SHARING,
                "admissionScope": object_of(
                    {
                        "admissionMode": string(
                            enum=("UsageBasedAdmissionFairSharing", "NoAdmissionFairSharing")
                        )
                    },
                    "admissionMode",
                ),
                "concurrentAdmissionPolicy": unsupported(
                    "Kueue's ConcurrentAdmission (an alpha feature gate, off by default) is "
                    "not implemented; remove the field"
                ),
            },
            default={},
        )
    ),
    "LocalQueue": _kind_schema(
        object_of(
            {
                "clusterQueue": _name(),
                "stopPolicy": string(enum=("None", "Hold", "HoldAndDrain"), default="None"),
                "fairSharing": _FAIR_SHARING,
            },
            default={},
        )
    ),
    "PriorityClass": _kind_schema(
        None,
        value=_int32(),
        description=string(max_length=2048),
    ),
}
"""Each Kueue kind's v1beta2 shape (WorkloadPriorityClass under ``PriorityClass``)."""

_REQUIRED_TOP = {"PriorityClass": ("value",)}


def schema_for(kind: str, api_version: str) -> Field:
    """The schema a document of ``kind`` in ``api_version`` is checked against."""
    schema = SCHEMAS[kind]
    if _REQUIRED_TOP.get(kind):
        schema = replace(schema, required=_REQUIRED_TOP[kind])
    if not api_version.endswith(("/v1beta1", "/v1alpha1")):
        return schema
    spec = schema.props.get("spec")
    if spec is None:
        return schema
    props = dict(spec.props)
    if kind == "ClusterQueue":
        # v1beta1 spellings (reference §1.1): cohort, the deprecated fungibility
        # values, and the old admissionChecks list.
        props["cohort"] = props.pop("cohortName")
        props["admissionChecks"] = unsupported(_ADMISSION_CHECKS)
        fungibility = props["flavorFungibility"]
        fprops = dict(fungibility.props)
        fprops["whenCanBorrow"] = replace(
            fprops["whenCanBorrow"], enum=(*fprops["whenCanBorrow"].enum, "Borrow")
        )
        fprops["whenCanPreempt"] = replace(
            fprops["whenCanPreempt"], enum=(*fprops["whenCanPreempt"].enum, "Preempt")
        )
        props["flavorFungibility"] = replace(fungibility, props=fprops)
    if kind == "Cohort" and api_version.endswith("/v1alpha1"):
        props["parent"] = props.pop("parentName")
    top = dict(schema.props)
    top["spec"] = replace(spec, props=props)
    return replace(schema, props=top)


# --------------------------------------------------------------------------- walking


def _pattern_text(pattern: re.Pattern[str]) -> str:
    return _PATTERN_TEXT.get(pattern.pattern, f"a string matching {pattern.pattern}")


def check(schema: Field, value: Any, path: Path_, out: list[Problem]) -> Any:
    """``value`` with defaults filled in; problems appended to ``out``."""
    if schema.unsupported:
        out.append((path, f"not supported: {schema.unsupported}"))
        return value
    if schema.ignored or schema.type == "any":
        return value
    kind = schema.type
    if kind == "object":
        if not isinstance(value, Mapping):
            out.append((path, f"expected a mapping, got {describe(value)}"))
            return value
        result: dict[str, Any] = {}
        for key, item in value.items():
            sub = schema.props.get(key) if isinstance(key, str) else None
            if sub is None:
                known = ", ".join(sorted(k for k, f in schema.props.items() if not f.ignored))
                out.append(((*path, str(key)), f"unknown field; known fields here: {known}"))
                continue
            if item is None and sub.type != "any":
                # Kubernetes treats an explicit null as an absent field.
                continue
            result[key] = check(sub, item, (*path, key), out)
        for key in schema.required:
            if key not in result and value.get(key) is None:
                out.append(((*path, key), "required"))
        for key, sub in schema.props.items():
            if key not in result and sub.default is not None and key not in schema.required:
                result[key] = check(sub, _copy(sub.default), (*path, key), [])
        return result
    if kind == "array":
        if not isinstance(value, list):
            out.append((path, f"expected a list, got {describe(value)}"))
            return value
        if schema.min_items is not None and len(value) < schema.min_items:
            out.append((path, f"must have at least {schema.min_items} item(s)"))
        if schema.max_items is not None and len(value) > schema.max_items:
            out.append((path, f"must have at most {schema.max_items} items, got {len(value)}"))
        assert schema.items is not None
        return [check(schema.items, item, (*path, i), out) for i, item in enumerate(value)]
    if kind == "map":
        if not isinstance(value, Mapping):
            out.append((path, f"expected a mapping of strings, got {describe(value)}"))
            return value
        if schema.max_props is not None and len(value) > schema.max_props:
            out.append((path, f"must have at most {schema.max_props} entries, got {len(value)}"))
        for key, item in value.items():
            if not isinstance(item, str):
                hint = f' (quote it: "{_scalar(item)}")' if _is_scalar(item) else ""
                out.append(((*path, str(key)), f"expected a string, got {describe(item)}{hint}"))
        return dict(value)
    if kind == "string":
        if not isinstance(value, str):
            hint = f' (quote it: "{_scalar(value)}")' if _is_scalar(value) else ""
            out.append((path, f"expected a string, got {describe(value)}{hint}"))
            return value
        if schema.enum and value not in schema.enum:
            allowed = ", ".join(schema.enum)
            out.append((path, f'unsupported value "{value}"; expected one of {allowed}'))
        if schema.max_length is not None and len(value) > schema.max_length:
            out.append((path, f"must be at most {schema.max_length} characters"))
        if schema.pattern is not None and not schema.pattern.match(value):
            out.append((path, f'invalid value "{value}": expected {_pattern_text(schema.pattern)}'))
        return value
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            out.append((path, f"expected an integer, got {describe(value)}"))
            return value
        if schema.minimum is not None and value < schema.minimum:
            out.append((path, f"must be greater than or equal to {schema.minimum}"))
        if schema.maximum is not None and value > schema.maximum:
            out.append((path, f"must be less than or equal to {schema.maximum}"))
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            out.append((path, f"expected true or false, got {describe(value)}"))
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            out.append((path, f"expected a number, got {describe(value)}"))
        return value
    if kind == "duration":
        if not isinstance(value, str) or parse_duration(value) is None:
            out.append(
                (
                    path,
                    f"expected a duration such as 30m, 1h30m or 90s, got {describe(value)}",
                )
            )
        return value
    if kind == "quantity":
        if isinstance(value, bool) or not isinstance(value, int | str):
            out.append(
                (
                    path,
                    f"expected an integer or a quantity string such as "
                    f'"8", "500m" or "100Gi", got {describe(value)}',
                )
            )
        elif isinstance(value, str) and not QUANTITY.match(value):
            out.append(
                (
                    path,
                    f'invalid quantity "{value}" '
                    "(expected a quantity such as 8, 500m, 16Gi or 1.5Ti)",
                )
            )
        return value
    raise AssertionError(f"unknown schema type {kind}")


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float | None:
    """Seconds in a Go duration (``30m``, ``1h30m``, ``90s``, ``0s``; ``0`` alone), or None."""
    text = text.strip()
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if match is None:
            return None
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    # A number too long for a float is not a duration (Go's overflow error).
    return total if text and math.isfinite(total) else None


def _is_scalar(value: Any) -> bool:
    return isinstance(value, bool | int | float)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


# --------------------------------------------------------------------------- rules


def _quantity_sign(value: Any) -> int:
    if isinstance(value, int):
        return (value > 0) - (value < 0)
    text = str(value).strip()
    if text.startswith("-") and QUANTITY.match(text) and re.search(r"[1-9]", text):
        return -1
    return 1


def _resource_group_rules(spec: Mapping[str, Any], problems: list[Problem]) -> None:
    """The webhook's and CEL's rules on ``resourceGroups`` (reference §1.3)."""
    groups = spec.get("resourceGroups")
    if not isinstance(groups, list):
        return
    total = 0
    for g, group in enumerate(groups):
        if not isinstance(group, Mapping):
            continue
        covered = group.get("coveredResources")
        flavors = group.get("flavors")
        if not isinstance(covered, list) or not isinstance(flavors, list):
            continue
        total += len(flavors)
        for f, flavor in enumerate(flavors):
            if not isinstance(flavor, Mapping) or not isinstance(flavor.get("resources"), list):
                continue
            resources = flavor["resources"]
            where: Path_ = ("spec", "resourceGroups", g, "flavors", f, "resources")
            names = [r.get("name") for r in resources if isinstance(r, Mapping)]
            if len(resources) != len(covered):
                problems.append(
                    (
                        where,
                        f"must list exactly the coveredResources ({', '.join(map(str, covered))}),"
                        f" got {', '.join(map(str, names)) or 'none'}",
                    )
                )
                continue
            for r, resource in enumerate(resources):
                if not isinstance(resource, Mapping):
                    continue
                if resource.get("name") != covered[r]:
                    problems.append(
                        (
                            (*where, r, "name"),
                            f'must be "{covered[r]}": resources list the coveredResources '
                            "in the same order",
                        )
                    )
                for key in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    if key in resource and _quantity_sign(resource[key]) < 0:
                        problems.append(((*where, r, key), "must be greater than or equal to 0"))
    if total > 256:
        problems.append(
            (("spec", "resourceGroups"), f"must have at most 256 flavors in all, got {total}")
        )


def _toleration_rules(spec: Mapping[str, Any], problems: list[Problem]) -> None:
    """The ResourceFlavor CRD's CEL rules on ``tolerations``."""
    tolerations = spec.get("tolerations")
    if not isinstance(tolerations, list):
        return
    for i, tol in enumerate(tolerations):
        if not isinstance(tol, Mapping):
            continue
        where: Path_ = ("spec", "tolerations", i)
        operator = tol.get("operator", "Equal")
        if not tol.get("key") and operator != "Exists":
            problems.append(((*where, "operator"), "must be Exists when key is empty"))
        if tol.get("tolerationSeconds") is not None and tol.get("effect") != "NoExecute":
            problems.append(
                ((*where, "tolerationSeconds"), "only allowed when effect is NoExecute")
            )
        if operator == "Exists" and tol.get("value"):
            problems.append(((*where, "value"), "must be empty when operator is Exists"))


def validate(kind: str, api_version: str, data: Mapping[str, Any]) -> tuple[Any, list[Problem]]:
    """``data`` checked as the API server and Kueue's webhooks would, with defaults filled in.

    ``kind`` is the canonical kind (``PriorityClass`` for a WorkloadPriorityClass).
    """
    problems: list[Problem] = []
    checked = check(schema_for(kind, api_version), data, (), problems)
    if not problems and isinstance(checked, Mapping):
        spec = checked.get("spec")
        if isinstance(spec, Mapping):
            if kind in ("ClusterQueue", "Cohort"):
                _resource_group_rules(spec, problems)
            if kind == "ResourceFlavor":
                _toleration_rules(spec, problems)
    return checked, problems

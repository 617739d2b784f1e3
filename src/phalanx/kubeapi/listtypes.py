"""List types (``x-kubernetes-list-type`` / ``x-kubernetes-list-map-keys``) by field path.

Server-side apply needs to know, for every list, whether it is atomic (owned and
replaced as a whole), a set of scalars, or a map keyed by some of its items'
fields. Built-in kinds take these from the ``+listType``/``+listMapKey`` markers
of k8s.io/api; custom resources from their CRD schemas. Lists not named here
are atomic, which is also the Kubernetes default for a list with no marker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ATOMIC", "DEFAULT_LIST_TYPES", "KUEUE_LIST_TYPES", "ListType", "ListTypes"]


@dataclass(frozen=True)
class ListType:
    """``x-kubernetes-list-type`` of one list, with its ``list-map-keys`` for maps.

    ``defaults`` gives the schema default of a key field an item may omit (a
    container port's ``protocol`` is ``TCP``), as pairs of (key, value).
    """

    type: Literal["atomic", "set", "map"] = "atomic"
    keys: tuple[str, ...] = ()
    defaults: tuple[tuple[str, Any], ...] = ()

    def key_of(self, item: Mapping[str, Any]) -> dict[str, Any] | None:
        """The item's key fields, defaults filled in; None when one is missing."""
        defaults = dict(self.defaults)
        key: dict[str, Any] = {}
        for name in self.keys:
            if name in item:
                key[name] = item[name]
            elif name in defaults:
                key[name] = defaults[name]
            else:
                return None
        return key


ATOMIC = ListType()


@dataclass(frozen=True)
class ListTypes:
    """List types by field path from the root, list items transparent; others atomic."""

    lists: Mapping[tuple[str, ...], ListType] = field(default_factory=dict)

    def get(self, path: tuple[str, ...]) -> ListType:
        return self.lists.get(path, ATOMIC)

    def __or__(self, other: ListTypes) -> ListTypes:
        return ListTypes({**self.lists, **other.lists})


# --- list types of the kinds phalanx serves ---------------------------------------


def _map(*keys: str) -> ListType:
    return ListType("map", keys)


_SET = ListType("set")


def _pod_spec(prefix: tuple[str, ...]) -> dict[tuple[str, ...], ListType]:
    lists = {
        (*prefix, "volumes"): _map("name"),
        (*prefix, "imagePullSecrets"): _map("name"),
        (*prefix, "hostAliases"): _map("ip"),
        (*prefix, "topologySpreadConstraints"): _map("topologyKey", "whenUnsatisfiable"),
        (*prefix, "resourceClaims"): _map("name"),
        (*prefix, "schedulingGates"): _map("name"),
    }
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        c = (*prefix, kind)
        lists[c] = _map("name")
        lists[(*c, "env")] = _map("name")
        lists[(*c, "ports")] = ListType(
            "map", ("containerPort", "protocol"), (("protocol", "TCP"),)
        )
        lists[(*c, "volumeMounts")] = _map("mountPath")
        lists[(*c, "volumeDevices")] = _map("devicePath")
        lists[(*c, "resources", "claims")] = _map("name")
    return lists


_METADATA: dict[tuple[str, ...], ListType] = {
    ("metadata", "ownerReferences"): _map("uid"),
    ("metadata", "finalizers"): _SET,
}
_CONDITIONS: dict[tuple[str, ...], ListType] = {("status", "conditions"): _map("type")}

DEFAULT_LIST_TYPES: dict[str, ListTypes] = {
    "Pod": ListTypes({**_METADATA, **_pod_spec(("spec",)), **_CONDITIONS}),
    "Job": ListTypes(
        {
            **_METADATA,
            **{("spec", "template", *k): v for k, v in _METADATA.items()},
            **_pod_spec(("spec", "template", "spec")),
        }
    ),
    "Node": ListTypes({**_METADATA, ("spec", "podCIDRs"): _SET, **_CONDITIONS}),
    "Namespace": ListTypes({**_METADATA, **_CONDITIONS}),
    "Event": ListTypes(dict(_METADATA)),
}

_FLAVORS: dict[tuple[str, ...], ListType] = {
    ("spec", "resourceGroups", "flavors"): _map("name"),
    ("spec", "resourceGroups", "flavors", "resources"): _map("name"),
}
_USAGE: dict[tuple[str, ...], ListType] = {
    ("status", name, *sub): _map("name")
    for name in ("flavorsReservation", "flavorsUsage")
    for sub in ((), ("resources",))
}

# From the x-kubernetes-list-type / list-map-keys markers of Kueue's v1beta1/v1beta2 CRDs.
KUEUE_LIST_TYPES: dict[str, ListTypes] = {
    "ClusterQueue": ListTypes(
        {
            **_METADATA,
            **_FLAVORS,
            **_USAGE,
            **_CONDITIONS,
            ("spec", "admissionChecksStrategy", "admissionChecks"): _map("name"),
            ("spec", "admissionChecksStrategy", "admissionChecks", "onFlavors"): _SET,
        }
    ),
    "Cohort": ListTypes({**_METADATA, **_FLAVORS}),
    "LocalQueue": ListTypes({**_METADATA, **_USAGE, **_CONDITIONS}),
    "AdmissionCheck": ListTypes({**_METADATA, **_CONDITIONS}),
    "ResourceFlavor": ListTypes(dict(_METADATA)),
    "Workload": ListTypes(
        {
            **_METADATA,
            **_CONDITIONS,
            ("spec", "podSets"): _map("name"),
            **_pod_spec(("spec", "podSets", "template", "spec")),
            ("spec", "preemptionGates"): _map("name"),
            ("status", "admission", "podSetAssignments"): _map("name"),
            ("status", "admissionChecks"): _map("name"),
            ("status", "reclaimablePods"): _map("name"),
            ("status", "resourceRequests"): _map("name"),
            ("status", "preemptionGates"): _map("name"),
        }
    ),
}

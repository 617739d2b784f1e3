"""Served versions of one kind: objects are kept in Kueue's v1beta2 shape and written
out in the version a request names (Kueue's conversion webhooks, reverse direction:
v1beta2's ``cohortName`` is v1beta1's ``cohort``, a v1alpha1 Cohort's ``parent``,
the fungibility value ``MayStopSearch`` is v1beta1's ``Borrow``/``Preempt``)."""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["to_version"]


def to_version(obj: dict[str, Any], api_version: str) -> dict[str, Any]:
    """``obj`` (as phalanx writes it) in ``api_version`` of its group."""
    current = str(obj.get("apiVersion", ""))
    if current == api_version or not api_version:
        return obj
    out = copy.deepcopy(obj)
    out["apiVersion"] = api_version
    if not current.startswith("kueue.x-k8s.io/") or api_version.endswith("/v1beta2"):
        return out
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out
    kind = out.get("kind")
    if kind == "ClusterQueue" and "cohortName" in spec:
        spec["cohort"] = spec.pop("cohortName")
    if kind == "Cohort" and "parentName" in spec and api_version.endswith("/v1alpha1"):
        spec["parent"] = spec.pop("parentName")
    fungibility = spec.get("flavorFungibility")
    if isinstance(fungibility, dict):
        if fungibility.get("whenCanBorrow") == "MayStopSearch":
            fungibility["whenCanBorrow"] = "Borrow"
        if fungibility.get("whenCanPreempt") == "MayStopSearch":
            fungibility["whenCanPreempt"] = "Preempt"
    return out

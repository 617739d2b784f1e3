"""Kubernetes label selectors, for a ClusterQueue's ``namespaceSelector``.

A selector is ``matchLabels`` (every pair must be present) and
``matchExpressions`` (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``), all
ANDed; an empty selector matches every namespace. The engine matches it against
the job's tenant (namespace) labels plus ``kubernetes.io/metadata.name``.

Kueue reads a missing (nil) selector as "no namespace", and so does the engine
under the ``kueue`` preset (``EngineConfig.missing_namespace_selector_matches_all``
is False there). phalanx's own dialects (Slurm partitions, REST submissions)
create ClusterQueues without one and mean "every namespace", so under the other
presets a missing selector matches all.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["selector_matches"]


def _get(selector: Mapping[str, object], *names: str) -> object:
    for name in names:
        if name in selector:
            return selector[name]
    return None


def selector_matches(selector: Mapping[str, object], labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy the label selector ``selector``."""
    match_labels = _get(selector, "matchLabels", "match_labels") or {}
    assert isinstance(match_labels, Mapping)
    for key, value in match_labels.items():
        if labels.get(str(key)) != str(value):
            return False
    expressions = _get(selector, "matchExpressions", "match_expressions") or []
    assert isinstance(expressions, list)
    for expr in expressions:
        assert isinstance(expr, Mapping)
        key = str(expr.get("key", ""))
        operator = str(expr.get("operator", ""))
        values = [str(v) for v in (expr.get("values") or [])]
        present = key in labels
        if operator == "In":
            if not present or labels[key] not in values:
                return False
        elif operator == "NotIn":
            if present and labels[key] in values:
                return False
        elif operator == "Exists":
            if not present:
                return False
        elif operator == "DoesNotExist":
            if present:
                return False
        else:
            # An operator Kubernetes does not define selects nothing.
            return False
    return True

"""Required node affinity: which nodes a pod set may run on, by label expressions.

Kubernetes' ``requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``:
a node qualifies when it matches any one term, and a term matches when every
one of its expressions does. It says what a plain ``nodeSelector`` cannot, such
as "any of these GPU models" (``nvidia.com/gpu.product In [A100, H100]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum

from pydantic import Field, model_validator

from phalanx.model.base import PhalanxModel

__all__ = [
    "NodeSelectorOperator",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "affinity_matches",
]

NODE_NAME_FIELD = "metadata.name"
"""The one field ``matchFields`` may name (as in Kubernetes)."""


class NodeSelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


class NodeSelectorRequirement(PhalanxModel):
    """``key operator values``: ``gpu.product In [A100, H100]``, ``rack Exists``, ..."""

    key: str = Field(min_length=1)
    operator: NodeSelectorOperator
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values_fit_operator(self) -> NodeSelectorRequirement:
        op = self.operator
        if op in (NodeSelectorOperator.IN, NodeSelectorOperator.NOT_IN) and not self.values:
            raise ValueError(f"values: {op.value} needs at least one value")
        no_values = (NodeSelectorOperator.EXISTS, NodeSelectorOperator.DOES_NOT_EXIST)
        if op in no_values and self.values:
            raise ValueError(f"values: {op.value} takes no values")
        compares = (NodeSelectorOperator.GT, NodeSelectorOperator.LT)
        if op in compares and (len(self.values) != 1 or not _is_int(self.values[0])):
            raise ValueError(f"values: {op.value} takes exactly one integer value")
        return self

    def matches(self, value: str | None) -> bool:
        """Whether a node whose label (or field) ``key`` is ``value`` (None: absent) matches."""
        op = self.operator
        if op is NodeSelectorOperator.IN:
            return value is not None and value in self.values
        if op is NodeSelectorOperator.NOT_IN:
            return value is None or value not in self.values
        if op is NodeSelectorOperator.EXISTS:
            return value is not None
        if op is NodeSelectorOperator.DOES_NOT_EXIST:
            return value is None
        if value is None or not _is_int(value):
            return False
        if op is NodeSelectorOperator.GT:
            return int(value) > int(self.values[0])
        return int(value) < int(self.values[0])


class NodeSelectorTerm(PhalanxModel):
    """Every expression must match; a term with none matches no node (as in Kubernetes)."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()

    @model_validator(mode="after")
    def _fields_name_the_node(self) -> NodeSelectorTerm:
        for i, field in enumerate(self.match_fields):
            if field.key != NODE_NAME_FIELD:
                raise ValueError(
                    f"matchFields[{i}].key: only {NODE_NAME_FIELD} is supported, got {field.key!r}"
                )
            if field.operator not in (NodeSelectorOperator.IN, NodeSelectorOperator.NOT_IN):
                raise ValueError(f"matchFields[{i}].operator: expected In or NotIn")
        return self

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not self.match_expressions and not self.match_fields:
            return False
        return all(e.matches(labels.get(e.key)) for e in self.match_expressions) and all(
            f.matches(name) for f in self.match_fields
        )


def affinity_matches(
    terms: Sequence[NodeSelectorTerm] | None, name: str, labels: Mapping[str, str]
) -> bool:
    """Whether node ``name`` with ``labels`` satisfies required affinity ``terms``
    (None or no terms: every node does)."""
    if not terms:
        return True
    return any(term.matches(name, labels) for term in terms)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True

"""Resource requests and quotas: maps of resource name to exact integer amounts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field, PlainSerializer, field_serializer, model_validator

from phalanx.model.base import PhalanxModel
from phalanx.model.quantity import QuantityError, format_quantity, parse_quantity

__all__ = [
    "FlavorQuotas",
    "ResourceGroup",
    "ResourceList",
    "ResourceQuota",
    "format_resources",
    "parse_resources",
]


def parse_resources(value: Any) -> dict[str, int]:
    """Parse ``{resource: quantity}`` into ``{resource: base-unit int}``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError("expected a mapping of resource name to quantity")
    parsed: dict[str, int] = {}
    for name, quantity in value.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"resource names must be non-empty strings, got {name!r}")
        try:
            parsed[name] = parse_quantity(quantity, name)
        except QuantityError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return parsed


def format_resources(value: Mapping[str, int]) -> dict[str, str]:
    """Render a base-unit resource map back into Kubernetes notation."""
    return {name: format_quantity(amount, name) for name, amount in value.items()}


ResourceList = Annotated[
    dict[str, int],
    PlainSerializer(format_resources, return_type=dict[str, str]),
]
"""A resource map whose values are base units in Python and quantities on the wire."""


class ResourceQuota(PhalanxModel):
    """One resource's quota inside a flavor of a ClusterQueue or Cohort."""

    name: str = Field(min_length=1)
    nominal_quota: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _parse_quantities(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        name = data.get("name")
        if not isinstance(name, str):
            return data
        for wire, attr in (
            ("nominalQuota", "nominal_quota"),
            ("borrowingLimit", "borrowing_limit"),
            ("lendingLimit", "lending_limit"),
        ):
            for key in (wire, attr):
                raw = data.get(key)
                if raw is not None:
                    try:
                        data[key] = parse_quantity(raw, name)
                    except QuantityError as exc:
                        raise ValueError(f"{wire}: {exc}") from None
        return data

    @field_serializer("nominal_quota", "borrowing_limit", "lending_limit")
    def _format(self, amount: int | None) -> str | None:
        return None if amount is None else format_quantity(amount, self.name)


class FlavorQuotas(PhalanxModel):
    """The quotas one flavor contributes to a resource group."""

    name: str = Field(min_length=1)
    resources: list[ResourceQuota] = Field(min_length=1, max_length=64)


class ResourceGroup(PhalanxModel):
    """Resources that are always assigned the same flavor, with per-flavor quotas."""

    covered_resources: list[str] = Field(min_length=1, max_length=64)
    flavors: list[FlavorQuotas] = Field(min_length=1, max_length=64)

    @model_validator(mode="after")
    def _flavors_cover_exactly(self) -> ResourceGroup:
        covered = self.covered_resources
        if len(set(covered)) != len(covered):
            raise ValueError("coveredResources lists a resource twice")
        for i, flavor in enumerate(self.flavors):
            names = [r.name for r in flavor.resources]
            if sorted(names) != sorted(covered):
                raise ValueError(
                    f"flavors[{i}] ({flavor.name}): resources must list exactly the "
                    f"coveredResources {covered}, got {names}"
                )
        return self

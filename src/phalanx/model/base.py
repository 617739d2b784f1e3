"""The pydantic base every phalanx object derives from.

Attributes are snake_case in Python and camelCase on the wire (Kueue's v1beta2
spelling: ``nominalQuota``, ``cohortName``, ...); both spellings are accepted
on input, so a manifest's ``spec`` maps onto a model one-to-one.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class PhalanxModel(BaseModel):
    """Frozen, strict-about-unknown-fields base model with camelCase aliases."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
        ser_json_inf_nan="constants",
    )

    def to_dict(self) -> dict[str, object]:
        """The object as JSON-compatible data with wire (camelCase) names."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

"""How a manifest value is named in an error message ("got the string "x"", "got a list")."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["describe"]


def describe(value: Any) -> str:
    """The value as an error message names it after "got"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {json.dumps(value)}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return type(value).__name__

"""How a manifest value is named in an error message ("got the string "x"", "got a list")."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["describe"]


_LONG = 60
"""Longer strings and numbers are cut short in messages."""


def describe(value: Any) -> str:
    """The value as an error message names it after "got"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        if len(value) > _LONG:
            return f"the string {json.dumps(value[:_LONG])}... ({len(value)} characters)"
        return f"the string {json.dumps(value)}"
    if isinstance(value, int) and len(text := str(value)) > _LONG:
        return f"the number {text[:_LONG]}... ({len(text)} digits)"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return type(value).__name__

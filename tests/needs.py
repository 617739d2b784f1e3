"""Skipping a test for a missing system dependency, or failing it where it must be there."""

from __future__ import annotations

import os

import pytest


def require(ok: bool, what: str) -> None:
    """Skip (fail under CI) unless ``ok``: ``what`` is not installed."""
    if ok:
        return
    message = f"{what} is not installed: run `make test-deps`"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)

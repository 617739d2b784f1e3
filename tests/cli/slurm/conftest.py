"""Fixtures: one real server per module (see tests/api/server.py)."""

from __future__ import annotations

from tests.cli.conftest import cluster

__all__ = ["cluster"]

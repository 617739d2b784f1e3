"""Fixtures: one real server (SQLite, local runtime, example cluster) per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.server import Cluster, running_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("state")) as running:
        yield running

"""The API against its own OpenAPI document, fuzzed with schemathesis: for every
operation, requests generated from the schema (valid and not) never get a 5xx, and
every response — errors included — matches the status codes, content types and
bodies the document declares."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.server import Cluster, running_cluster

schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, object]]:
    with running_cluster(Path(tmp_path_factory.mktemp("state"))) as cluster:
        yield cluster, schemathesis.openapi.from_url(cluster.url + "/openapi.json")


def test_every_operation_answers_as_its_schema_says(fuzzed: tuple[Cluster, object]) -> None:
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import (
        content_type_conformance,
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
    )

    cluster, schema = fuzzed
    headers = {"Authorization": f"Bearer {cluster.admin_token}"}
    checks = [
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
        content_type_conformance,
    ]
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[attr-defined]
    assert len(operations) > 50
    for operation in operations:

        @settings(
            max_examples=10,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def check(case: object) -> None:
            case.call_and_validate(headers=headers, checks=checks)  # type: ignore[attr-defined]

        try:
            check()
        except Exception as exc:  # collected, so one run reports every operation
            failures.append(f"{operation.method.upper()} {operation.path}: {str(exc)[:400]}")
    assert not failures, "\n\n".join(failures)

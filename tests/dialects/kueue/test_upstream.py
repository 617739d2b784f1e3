"""Every manifest of Kueue's documentation examples, applied to a live phalanx.

Setup files apply; sample jobs apply after their setup (whether they run is
tested with the job kinds); a feature phalanx does not have is refused with a
message naming the field. Read from ``../shared/examples/kueue-upstream``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from phalanx.client import Client
from phalanx.errors import Invalid
from phalanx.server import RunningServer, start_server
from tests.shared import needs_shared, shared_files, shared_path

UPSTREAM = shared_path("examples", "kueue-upstream")
pytestmark = needs_shared("examples", "kueue-upstream")

SETUP_OF = {
    "getting-started/quick-start-job.yaml": "getting-started/quick-start-setup.yaml",
    "admin/shared-quota-sample-job.yaml": "admin/shared-quota-setup.yaml",
    "admission-fs/lq-a-simple-job.yaml": "admission-fs/admission-fair-sharing-setup.yaml",
    "admission-fs/lq-b-simple-job.yaml": "admission-fs/admission-fair-sharing-setup.yaml",
    **{
        f"jobs/{name}": "getting-started/quick-start-setup.yaml"
        for name in (
            "ray-job-sample.yaml",
            "sample-job-partial-admission.yaml",
            "sample-job.yaml",
            "sample-jobset-tas-combined.yaml",
            "sample-jobset-tas-required.yaml",
            "sample-jobset-tas-sliced.yaml",
            "sample-jobset.yaml",
            "sample-pytorchjob.yaml",
        )
    },
}
"""A sample job -> the setup file that creates its LocalQueue."""

REFUSED = {
    "admin/minimal-cq.yaml": (
        "spec.admissionChecksStrategy: not supported: phalanx does not run Kueue AdmissionChecks"
    ),
}
"""Files phalanx refuses -> the field and reason the refusal names (see docs/kueue.md)."""

JOB_KINDS = {"Job", "JobSet", "PyTorchJob", "RayJob"}


def upstream_files() -> list[str]:
    files = shared_files("examples", "kueue-upstream", pattern="*.yaml")
    return sorted(p.relative_to(UPSTREAM).as_posix() for p in files)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    # No Nodes: nothing is admitted, so the sample jobs stay pending here.
    running = start_server(tmp_path_factory.mktemp("upstream"), port=0, container_runtime="host")
    try:
        yield running
    finally:
        running.stop()


def apply(server: RunningServer, rel: str) -> list[dict[str, str]]:
    with Client(server.url, server.admin_token, state_dir=server.state_dir) as admin:
        return admin.apply((UPSTREAM / rel).read_text(), source=rel)


def test_every_file_is_covered() -> None:
    files = upstream_files()
    assert len(files) >= 20
    jobs = [f for f in files if "job" in f.rsplit("/", 1)[-1] and "setup" not in f]
    assert sorted(jobs) == sorted(SETUP_OF)


@pytest.mark.parametrize("rel", upstream_files())
def test_upstream_manifest_applies_or_is_refused(server: RunningServer, rel: str) -> None:
    if rel in REFUSED:
        setup = SETUP_OF.get(rel)
        if setup is not None:
            apply(server, setup)
        with pytest.raises(Invalid) as caught:
            apply(server, rel)
        (line,) = caught.value.detail.splitlines()
        assert line.startswith(f"{rel}:"), line
        assert REFUSED[rel] in line
        return
    setup = SETUP_OF.get(rel)
    if setup is not None:
        assert {r["outcome"] for r in apply(server, setup)} <= {
            "created",
            "configured",
            "unchanged",
        }
    results = apply(server, rel)
    assert results, rel
    for result in results:
        assert result["outcome"] in ("created", "configured", "unchanged"), result
    kinds = {r["kind"] for r in results}
    if setup is not None:
        assert kinds <= JOB_KINDS and kinds, results
        assert all(r["outcome"] == "created" for r in results)
    else:
        assert not kinds & JOB_KINDS

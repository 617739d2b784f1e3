"""The examples in examples/kueue: each directory loads, and `phalanx up --config DIR`
runs its jobs to completion."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.client import Client
from phalanx.dialects.kueue import load_path
from phalanx.server import start_server

EXAMPLES = Path(__file__).parents[3] / "examples" / "kueue"
DIRS = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())
JOB_KINDS = {"Job", "JobSet", "PyTorchJob", "RayJob"}


def test_the_examples_are_there() -> None:
    assert set(DIRS) >= {
        "spot-on-demand",
        "cohort-borrowing",
        "pytorchjob",
        "indexed-job",
        "rayjob",
    }
    readme = (EXAMPLES / "README.md").read_text()
    assert all(f"`{name}/`" in readme for name in DIRS)


@pytest.mark.parametrize("name", DIRS)
def test_example_runs(name: str, tmp_path: Path) -> None:
    manifests = load_path(EXAMPLES / name)
    kinds = {m.kind for m in manifests}
    assert "Node" in kinds and "ClusterQueue" in kinds and kinds & JOB_KINDS
    expected = sum(1 for m in manifests if m.kind in JOB_KINDS)
    server = start_server(
        tmp_path / "state", port=0, configs=[EXAMPLES / name], container_runtime="host"
    )
    try:
        with Client(server.url, server.admin_token, state_dir=server.state_dir) as admin:
            jobs = list(admin.jobs())
            assert len(jobs) == expected
            done = [admin.wait(job["id"], timeout=60) for job in jobs]
    finally:
        server.stop()
    assert [j["state"] for j in done] == ["COMPLETED"] * expected, done
    if name == "spot-on-demand":
        assert sorted(j["flavor"] for j in done) == ["on-demand", "spot"]
    if name == "cohort-borrowing":
        (job,) = done
        assert job["cluster_queue"] == "team-a"

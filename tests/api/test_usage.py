"""``/api/v1/usage`` and ``/api/v1/usage/jobs`` against a real server."""

from __future__ import annotations

import pytest

from phalanx.errors import PhalanxError
from tests.api.server import Cluster, job


def test_usage_tree_and_job_charges_seen_by_their_tenants_only(cluster: Cluster) -> None:
    with cluster.alice as alice:
        job_id = alice.submit(job(["sleep", "0.5"], requests={"cpu": "3"}))
        alice.wait(job_id, timeout=30)
        [charge] = alice.job_charges([job_id]).values()
        report = alice.usage()
    assert charge["tenant"] == "team-a" and charge["user"] == "alice"
    assert charge["alloc_tres"] == {"cpu": 3, "node": 1} and charge["billing"] == 3.0
    assert charge["charged_until"] is None and charge["billing_seconds"] >= 1.0
    assert report["fair_tree"] is True
    rows = {(r["account"], r["user"]): r for r in report["associations"]}
    assert rows[("root", None)]["raw_shares"] is None
    alice_row = rows[("team-a", "alice")]
    assert alice_row["raw_usage"] >= 1.0 and alice_row["parent"] == "team-a"
    assert rows[("team-a", None)]["raw_usage"] >= alice_row["raw_usage"]
    with cluster.bob as bob:
        assert bob.job_charges([job_id]) == {}
    with cluster.admin as admin:
        assert list(admin.job_charges([job_id])) == [job_id]
        with pytest.raises(PhalanxError, match="not a job id"):
            admin.request("GET", "/api/v1/usage/jobs", params=[("id", "x")])

"""The Kubernetes API of a standby (two servers on one PostgreSQL): it serves what it can
read from the database and forwards the rest, writes included, to the leader, so a
client may talk to either; its watches see the leader's writes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from phalanx.server import start_server
from tests.kubeapi.support import FLAVOR_AND_QUEUE, kube_http

pytestmark = pytest.mark.timeout(120)

CLUSTER = FLAVOR_AND_QUEUE

FLAVORS = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"


def test_a_standby_serves_reads_forwards_writes_and_watches(
    pg_database: str, tmp_path: Path
) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER)
    state = tmp_path / "state"
    with start_server(
        state,
        port=0,
        database=pg_database,
        runtime="noop",
        configs=[config],
        kube_port=0,
        container_runtime="host",
    ) as leader:
        assert leader.leading
        with start_server(
            state,
            port=0,
            database=pg_database,
            runtime="noop",
            kube_port=0,
            container_runtime="host",
        ) as standby:
            assert not standby.leading
            with kube_http(standby, leader.admin_token) as http:
                base = ""
                listed = http.get(base + FLAVORS)
                assert listed.status_code == 200
                assert [f["metadata"]["name"] for f in listed.json()["items"]] == ["any"]
                # Live status is the leader's: the standby forwards the read.
                cq = http.get(base + "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cq")
                assert cq.status_code == 200 and "pendingWorkloads" in cq.json()["status"]
                start = listed.json()["metadata"]["resourceVersion"]
                with http.stream(
                    "GET",
                    base + FLAVORS,
                    params={"watch": "true", "resourceVersion": start, "timeoutSeconds": "15"},
                ) as stream:
                    flavor = {
                        "apiVersion": "kueue.x-k8s.io/v1beta2",
                        "kind": "ResourceFlavor",
                        "metadata": {"name": "via-standby"},
                    }
                    made = http.post(base + FLAVORS, json=flavor)
                    assert made.status_code == 201, made.text
                    assert made.json()["metadata"]["name"] == "via-standby"
                    began = time.monotonic()
                    first = json.loads(next(stream.iter_lines()))
                    assert first["type"] == "ADDED"
                    assert first["object"]["metadata"]["name"] == "via-standby"
                    assert time.monotonic() - began < 5
                # The leader stored it: it is the leader's object too.
                assert leader.plane.store.get_object("ResourceFlavor", "via-standby")
                gone = http.delete(base + FLAVORS + "/via-standby")
                assert gone.status_code == 200 and gone.json()["status"] == "Success"

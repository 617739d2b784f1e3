"""What the Slurm tools ask in one request is what they asked in several, on a real server.

``GET /api/v1/cluster`` against ``GET /api/v1/{plural}`` and the default LocalQueue;
``GET /api/v1/jobs`` with ``mine``, ``steps`` and ``nodes_down`` against ``whoami``,
the job list, ``GET /api/v1/steps`` and the nodes.
"""

from __future__ import annotations

from tests.api.server import Cluster, job


def test_cluster_is_the_lists_and_the_default_partition(cluster: Cluster) -> None:
    for client in (cluster.admin, cluster.alice):
        with client:
            everything = client.cluster()
            assert everything is not None
            assert everything["clusterqueues"] == client.cluster_queues()
            assert everything["resourceflavors"] == client.resource_flavors()
            assert everything["nodes"] == client.nodes()
            tenants = client.whoami()["tenants"]
            expected = None
            if tenants:
                queue = client.get_object("localqueues", f"{tenants[0]}/default")
                expected = queue["spec"]["clusterQueue"]
            assert everything["default_partition"] == expected


def test_mine_steps_and_nodes_down_are_the_separate_answers(cluster: Cluster) -> None:
    with cluster.alice as alice:
        mine = alice.submit(job(["true"], tenant="team-a"))
        alice.wait(mine, timeout=60)
    with cluster.admin as admin:
        theirs = admin.submit(job(["true"], tenant="team-a", user="carol"))
        admin.wait(theirs, timeout=60)
        everyone = admin.job_list(mine=True, steps=True, nodes_down=True)
        assert everyone is not None
        assert everyone["mine"] == {"user": admin.whoami()["user"], "admin": True}
        assert [j["id"] for j in everyone["items"]] == [j["id"] for j in admin.jobs()]
        ids = [j["id"] for j in everyone["items"]]
        assert everyone["steps"] == admin.steps_of(ids)
        down = sorted(
            n["metadata"]["name"]
            for n in admin.nodes()
            if (n.get("status") or {}).get("state") in ("draining", "drain", "down")
        )
        assert everyone["nodes_down"] == down
    with cluster.alice as alice:
        own = alice.job_list(mine=True, steps=True)
        assert own is not None
        assert own["mine"] == {"user": "alice", "admin": False}
        listed = [j["id"] for j in own["items"]]
        assert mine in listed and theirs not in listed
        assert listed == [j["id"] for j in alice.jobs(user="alice")]
        assert own["steps"] == alice.steps_of(listed)

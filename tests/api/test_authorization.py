"""Who may do what, cell by cell, against a real server.

A job of tenant team-a, submitted by alice: bob (team-b) can neither see it nor act
on it, through the API or the dashboard; every refusal is a 404, as for a job that
does not exist, and leaves the job as it was. Bob cannot change any cluster object
(403); the admin can do all of it. The last part covers what a user must not do
even to their own jobs (priority, negative nice, a longer time limit, an admin's
hold) and who else's job ids a user must not see (a node's jobs).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from phalanx.errors import Forbidden
from tests.api.server import Cluster, job, running_cluster

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL"}
MISSING = 987654321
"""A job id no test makes."""


def http(cluster: Cluster, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=cluster.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def wait_state(cluster: Cluster, job_id: int, states: set[str], timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    with cluster.admin as admin:
        while True:
            view = admin.get(job_id)
            if view["state"] in states:
                return view
            assert time.monotonic() < deadline, f"job {job_id} stuck in {view['state']}"
            time.sleep(0.05)


def snapshot(cluster: Cluster, job_id: int) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The job as the admin sees it and its event history."""
    with cluster.admin as admin:
        view = admin.get(job_id)
        events = [(e["kind"], e.get("reason", "")) for e in admin.events(job_id)]
    view.pop("estimated_start", None)
    return view, events


@pytest.fixture(scope="module")
def target(cluster: Cluster) -> Iterator[int]:
    """alice's running job in team-a."""
    with cluster.alice as alice:
        job_id = alice.submit(job(["sleep", "600"], name="alice-secret", timeLimit=3600))
    wait_state(cluster, job_id, {"RUNNING"})
    yield job_id
    with cluster.admin as admin:
        admin.cancel(job_id)


@pytest.fixture
def scratch(cluster: Cluster) -> Iterator[list[int]]:
    """Jobs a test makes for itself; cancelled afterwards."""
    made: list[int] = []
    yield made
    with cluster.admin as admin:
        for job_id in made:
            if admin.get(job_id)["state"] not in FINISHED:
                admin.cancel(job_id)


# --------------------------------------------------------------------------- jobs, API

# (cell, method, path, body, status): bob's requests on alice's job ``{id}``.
BOB_ON_ALICES_JOB = [
    ("get", "GET", "/api/v1/jobs/{id}", None, 404),
    ("events", "GET", "/api/v1/jobs/{id}/events", None, 404),
    ("explain", "GET", "/api/v1/jobs/{id}/explain", None, 404),
    ("log", "GET", "/api/v1/jobs/{id}/log", None, 404),
    ("log-stderr", "GET", "/api/v1/jobs/{id}/log?stream=stderr", None, 404),
    ("cancel", "DELETE", "/api/v1/jobs/{id}", None, 404),
    ("hold", "POST", "/api/v1/jobs/{id}/hold", None, 404),
    ("release", "POST", "/api/v1/jobs/{id}/release", None, 404),
    ("requeue", "POST", "/api/v1/jobs/{id}/requeue", None, 404),
    ("signal", "POST", "/api/v1/jobs/{id}/signal", {"signal": 9}, 404),
    ("signal-batch", "POST", "/api/v1/jobs/{id}/signal", {"signal": 15, "batch_only": True}, 404),
    ("patch-comment", "PATCH", "/api/v1/jobs/{id}", {"comment": "bob was here"}, 404),
    ("patch-time-limit", "PATCH", "/api/v1/jobs/{id}", {"time_limit": 1}, 404),
    ("patch-name", "PATCH", "/api/v1/jobs/{id}", {"name": "pwned"}, 404),
    ("workload", "GET", "/api/v1/workloads/job-{id}", None, 404),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [pytest.param(*cell[1:], id=cell[0]) for cell in BOB_ON_ALICES_JOB],
)
def test_bob_cannot_touch_alices_job(
    cluster: Cluster,
    target: int,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    status: int,
) -> None:
    before = snapshot(cluster, target)
    with http(cluster, cluster.bob_token) as h:
        r = h.request(method, path.format(id=target), json=body)
        missing = h.request(method, path.format(id=MISSING), json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"] == "NotFound"
    # The answer is the one a job that does not exist gets: nothing says it exists.
    assert missing.status_code == status
    assert r.json()["detail"] == missing.json()["detail"].replace(str(MISSING), str(target))
    assert "alice" not in r.text and "team-a" not in r.text
    assert snapshot(cluster, target) == before


@pytest.mark.parametrize(
    "query",
    [
        pytest.param({}, id="all"),
        pytest.param({"id": "{id}"}, id="by-id"),
        pytest.param({"tenant": "team-a"}, id="by-tenant"),
        pytest.param({"user": "alice"}, id="by-user"),
        pytest.param({"name": "alice-secret"}, id="by-name"),
        pytest.param({"state": "RUNNING"}, id="by-state"),
    ],
)
def test_bob_cannot_list_alices_job(cluster: Cluster, target: int, query: dict[str, str]) -> None:
    params = {k: v.format(id=target) for k, v in query.items()}
    with http(cluster, cluster.bob_token) as h:
        r = h.get("/api/v1/jobs", params=params)
    assert r.status_code == 200, r.text
    assert target not in [j["id"] for j in r.json()["items"]]
    with http(cluster, cluster.admin_token) as h:
        assert target in [j["id"] for j in h.get("/api/v1/jobs", params=params).json()["items"]]


@pytest.mark.parametrize(
    ("path", "key"),
    [
        pytest.param("/api/v1/workloads", "items", id="workloads"),
        pytest.param("/api/v1/priority?id={id}", "jobs", id="priority"),
        pytest.param("/api/v1/usage/jobs?id={id}", "items", id="usage-jobs"),
    ],
)
def test_bob_cannot_find_alices_job_elsewhere(
    cluster: Cluster, target: int, path: str, key: str
) -> None:
    with http(cluster, cluster.bob_token) as h:
        r = h.get(path.format(id=target))
    assert r.status_code == 200, r.text
    assert f"job-{target}" not in r.text and "alice" not in r.text
    assert all(item.get("id", item.get("job_id")) != target for item in r.json()[key])


def test_alice_sees_her_job(cluster: Cluster, target: int) -> None:
    with cluster.alice as alice:
        assert alice.get(target)["user"] == "alice"
        assert target in [j["id"] for j in alice.jobs(ids=[target])]


# The admin, on a job of alice's in the state the action needs.
ADMIN_ACTIONS = [
    # (cell, the job's state, method, path, body, status, state afterwards)
    ("get", "RUNNING", "GET", "/api/v1/jobs/{id}", None, 200, "RUNNING"),
    ("events", "RUNNING", "GET", "/api/v1/jobs/{id}/events", None, 200, "RUNNING"),
    ("explain", "RUNNING", "GET", "/api/v1/jobs/{id}/explain", None, 200, "RUNNING"),
    ("log", "RUNNING", "GET", "/api/v1/jobs/{id}/log", None, 200, "RUNNING"),
    ("cancel", "RUNNING", "DELETE", "/api/v1/jobs/{id}", None, 200, "CANCELLED"),
    ("hold", "PENDING", "POST", "/api/v1/jobs/{id}/hold", None, 200, "PENDING"),
    ("release", "HELD", "POST", "/api/v1/jobs/{id}/release", None, 200, "PENDING"),
    ("requeue", "COMPLETED", "POST", "/api/v1/jobs/{id}/requeue", None, 200, None),
    ("signal", "RUNNING", "POST", "/api/v1/jobs/{id}/signal", {"signal": 18}, 200, "RUNNING"),
    ("patch", "RUNNING", "PATCH", "/api/v1/jobs/{id}", {"comment": "by the admin"}, 200, None),
    ("workload", "RUNNING", "GET", "/api/v1/workloads/job-{id}", None, 200, None),
]


def _alices_job(cluster: Cluster, state: str, scratch: list[int]) -> int:
    fields: dict[str, Any] = {}
    command = ["sleep", "600"]
    if state in ("PENDING", "HELD"):
        fields["beginTime"] = time.time() + 3600  # waits at the gate
        fields["hold"] = state == "HELD"
    if state == "COMPLETED":
        command = ["true"]
    with cluster.alice as alice:
        job_id = alice.submit(job(command, **fields))
    scratch.append(job_id)
    wait_state(cluster, job_id, {"PENDING" if state == "HELD" else state})
    return job_id


@pytest.mark.parametrize(
    ("state", "method", "path", "body", "status", "after"),
    [pytest.param(*cell[1:], id=cell[0]) for cell in ADMIN_ACTIONS],
)
def test_the_admin_can_do_all_of_it(
    cluster: Cluster,
    scratch: list[int],
    state: str,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    status: int,
    after: str | None,
) -> None:
    job_id = _alices_job(cluster, state, scratch)
    with http(cluster, cluster.admin_token) as h:
        r = h.request(method, path.format(id=job_id), json=body)
    assert r.status_code == status, r.text
    if after is not None:
        wait_state(cluster, job_id, {after})
    view = snapshot(cluster, job_id)[0]
    if path.endswith("/hold"):
        assert view["reason"] == "JobHeldAdmin"
    if method == "PATCH":
        assert view["comment"] == "by the admin"


# --------------------------------------------------------------------------- cluster objects

OBJECTS = {
    # kind: (a new object's manifest, an existing object bob tries to delete)
    "Node": (
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "matrix-node", "labels": {"phalanx.io/flavor": "spare"}},
            "status": {"capacity": {"cpu": "4", "memory": "8Gi"}},
        },
        "gpu-h100-0",
    ),
    "ResourceFlavor": (
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "matrix-flavor"},
            "spec": {"nodeLabels": {"phalanx.io/flavor": "matrix"}},
        },
        "l40s",
    ),
    "ClusterQueue": (
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "matrix-cq"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": "l40s", "resources": [{"name": "cpu", "nominalQuota": 1}]}
                        ],
                    }
                ],
            },
        },
        "team-b",
    ),
    "Cohort": (
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {"name": "matrix-cohort"},
        },
        "research",
    ),
    "LocalQueue": (
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"namespace": "team-b", "name": "matrix-lq"},
            "spec": {"clusterQueue": "team-b"},
        },
        "team-b/default",
    ),
    "Tenant": (
        {
            "apiVersion": "phalanx.io/v1",
            "kind": "Tenant",
            "metadata": {"name": "matrix-tenant"},
            "spec": {"allocation": 1},
        },
        "team-b",
    ),
    "PriorityClass": (
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": "matrix-pc"},
            "value": 5,
        },
        "low",
    ),
}


def _name(manifest: dict[str, Any]) -> str:
    meta = manifest["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else str(meta["name"])


def _exists(cluster: Cluster, kind: str, name: str) -> bool:
    with http(cluster, cluster.admin_token) as h:
        return h.get(f"/api/v1/{kind.lower()}/{name}").status_code == 200


@pytest.mark.parametrize("kind", list(OBJECTS))
def test_bob_cannot_apply(cluster: Cluster, kind: str) -> None:
    manifest, _ = OBJECTS[kind]
    with http(cluster, cluster.bob_token) as h:
        r = h.post("/api/v1/apply", json={"documents": [manifest]})
    assert r.status_code == 403, r.text
    assert r.json()["error"] == "Forbidden"
    assert not _exists(cluster, kind, _name(manifest))


@pytest.mark.parametrize("kind", list(OBJECTS))
def test_bob_cannot_delete(cluster: Cluster, kind: str) -> None:
    _, existing = OBJECTS[kind]
    with http(cluster, cluster.bob_token) as h:
        r = h.delete(f"/api/v1/{kind.lower()}/{existing}")
    assert r.status_code == 403, r.text
    assert r.json()["error"] == "Forbidden"
    assert _exists(cluster, kind, existing)


@pytest.mark.parametrize("kind", list(OBJECTS))
def test_the_admin_can_apply_and_delete(cluster: Cluster, kind: str) -> None:
    manifest, _ = OBJECTS[kind]
    name = _name(manifest)
    with http(cluster, cluster.admin_token) as h:
        r = h.post("/api/v1/apply", json={"documents": [manifest]})
        assert r.status_code == 200, r.text
        assert r.json()["results"][0]["outcome"] == "created"
        assert _exists(cluster, kind, name)
        r = h.delete(f"/api/v1/{kind.lower()}/{name}")
        assert r.status_code == 200, r.text
    assert not _exists(cluster, kind, name)


# --------------------------------------------------------------------------- the dashboard


@contextmanager
def signed_in(cluster: Cluster, token: str) -> Iterator[httpx.Client]:
    """A browser-like client with a dashboard session (POST /login {token})."""
    with httpx.Client(base_url=cluster.url, timeout=30) as h:
        r = h.post("/login", data={"token": token, "next": "/"})
        assert r.status_code == 303, r.text
        yield h


def csrf_of(h: httpx.Client) -> str:
    """The session's CSRF token, from the sign-out form every page has."""
    page = h.get("/").text
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert match, "no CSRF token on the page"
    return match.group(1)


@pytest.mark.parametrize(
    "path",
    ["/jobs/{id}", "/ui/jobs/{id}/live", "/ui/jobs/{id}/log"],
    ids=["job-page", "job-live", "job-log"],
)
def test_bob_cannot_see_alices_job_in_the_dashboard(
    cluster: Cluster, target: int, path: str
) -> None:
    with signed_in(cluster, cluster.bob_token) as h:
        r = h.get(path.format(id=target))
    assert r.status_code == 404
    assert "alice" not in r.text and "alice-secret" not in r.text


@pytest.mark.parametrize("query", ["", "?tenant=team-a", "?user=alice", "?q=alice-secret"], ids=str)
def test_bob_cannot_list_alices_job_in_the_dashboard(
    cluster: Cluster, target: int, query: str
) -> None:
    with signed_in(cluster, cluster.bob_token) as h:
        for path in ("/jobs", "/ui/jobs/rows"):
            r = h.get(path + query)
            assert r.status_code == 200
            assert f'href="/jobs/{target}"' not in r.text
            if "alice-secret" not in query:  # the search box shows what was searched
                assert "alice-secret" not in r.text
    with signed_in(cluster, cluster.admin_token) as h:
        assert f'href="/jobs/{target}"' in h.get("/jobs" + query).text


def test_bob_cannot_cancel_alices_job_in_the_dashboard(cluster: Cluster, target: int) -> None:
    before = snapshot(cluster, target)
    with signed_in(cluster, cluster.bob_token) as h:
        csrf = csrf_of(h)  # bob's own, valid CSRF token
        r = h.post(f"/jobs/{target}/cancel", data={"csrf": csrf})
    assert r.status_code == 404
    assert snapshot(cluster, target) == before
    assert snapshot(cluster, target)[0]["state"] == "RUNNING"


def test_the_admin_cancels_in_the_dashboard(cluster: Cluster, scratch: list[int]) -> None:
    job_id = _alices_job(cluster, "RUNNING", scratch)
    with signed_in(cluster, cluster.admin_token) as h:
        assert h.get(f"/jobs/{job_id}").status_code == 200
        r = h.post(f"/jobs/{job_id}/cancel", data={"csrf": csrf_of(h)})
    assert (r.status_code, r.headers["location"]) == (303, f"/jobs/{job_id}")
    wait_state(cluster, job_id, {"CANCELLED"})


# --------------------------------------------------------------------------- bugs found


def test_a_nodes_jobs_are_named_only_to_who_may_see_them(cluster: Cluster, target: int) -> None:
    """Node status named every job on the node, other tenants' too."""

    def node_jobs(token: str) -> set[int]:
        with http(cluster, token) as h:
            items = h.get("/api/v1/nodes").json()["items"]
            one = h.get(f"/api/v1/nodes/{alices_node}").json()
        return {j for n in [*items, one] for j in n.get("status", {}).get("jobs", [])}

    with cluster.admin as admin:
        [alices_node] = admin.get(target)["nodes"]
    assert target in node_jobs(cluster.admin_token)
    assert target in node_jobs(cluster.alice_token)
    assert target not in node_jobs(cluster.bob_token)
    with signed_in(cluster, cluster.bob_token) as h:
        page = h.get("/nodes").text
    listed = re.findall(r"jobs ([\d, ]+)\"", page)
    assert str(target) not in {j.strip() for group in listed for j in group.split(",")}


def test_a_tenants_user_list_is_enforced(cluster: Cluster) -> None:
    """A Tenant's ``users`` ("who may submit as it") was not checked at all."""
    with cluster.admin as admin:
        admin.apply(
            [
                {
                    "apiVersion": "phalanx.io/v1",
                    "kind": "Tenant",
                    "metadata": {"name": "lab"},
                    "spec": {"allocation": 1, "users": ["carol"]},
                },
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "LocalQueue",
                    "metadata": {"namespace": "lab", "name": "default"},
                    "spec": {"clusterQueue": "team-a"},
                },
            ]
        )
        carol = admin.create_token("carol", ["lab"])["token"]
        dan = admin.create_token("dan", ["lab"])["token"]
    with cluster.client(dan) as c, pytest.raises(Forbidden) as caught:
        c.submit(job(["true"]))
    assert "'dan' is not one of tenant 'lab''s users (carol)" in caught.value.detail
    with cluster.client(carol) as c:
        assert wait_state(cluster, c.submit(job(["true"])), FINISHED)["user"] == "carol"
    # The admin may still submit on behalf of anyone.
    with cluster.admin as admin:
        admin.submit(job(["true"], tenant="lab", user="dan"))


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"priority": 1_000_000}, "priority: only the admin"),
        ({"nice": -10_000}, "nice: only the admin"),
    ],
    ids=["priority", "negative-nice"],
)
def test_users_cannot_raise_their_own_priority(
    cluster: Cluster, scratch: list[int], fields: dict[str, Any], needle: str
) -> None:
    """A user could put an explicit priority value on a job (jumping every queue and
    preempting others), or a negative nice; Slurm keeps both to administrators."""
    with cluster.alice as alice, pytest.raises(Forbidden) as caught:
        alice.submit(job(["true"], **fields))
    assert needle in caught.value.detail
    with cluster.alice as alice:
        scratch.append(alice.submit(job(["true"], nice=10)))
    with cluster.admin as admin:
        scratch.append(admin.submit(job(["true"], tenant="team-a", **fields)))


def test_users_may_shorten_but_not_extend_their_jobs(cluster: Cluster, scratch: list[int]) -> None:
    """A user could raise its own job's time limit (or make it unlimited) past any
    partition's maximum; in Slurm only an administrator may."""
    with cluster.alice as alice:
        job_id = alice.submit(job(["sleep", "600"], timeLimit=600, beginTime=time.time() + 3600))
    scratch.append(job_id)
    with http(cluster, cluster.alice_token) as h:
        for change in ({"time_limit": 7200}, {"time_limit": None}, {"nice": -1}):
            r = h.patch(f"/api/v1/jobs/{job_id}", json=change)
            assert r.status_code == 403, (change, r.text)
        r = h.patch(f"/api/v1/jobs/{job_id}", json={"time_limit": 300, "nice": 5})
        assert r.status_code == 200, r.text
        assert r.json()["time_limit"] == 300
    with http(cluster, cluster.admin_token) as h:
        r = h.patch(f"/api/v1/jobs/{job_id}", json={"time_limit": 7200, "nice": -5})
        assert r.status_code == 200, r.text
        assert r.json()["time_limit"] == 7200


def test_a_user_cannot_release_the_admins_hold(cluster: Cluster, scratch: list[int]) -> None:
    """Releasing a job held by the admin (JobHeldAdmin) was open to its user."""
    job_id = _alices_job(cluster, "PENDING", scratch)
    with cluster.admin as admin:
        assert admin.hold(job_id)["reason"] == "JobHeldAdmin"
    with cluster.alice as alice, pytest.raises(Forbidden) as caught:
        alice.release(job_id)
    assert "held by the admin" in caught.value.detail
    assert snapshot(cluster, job_id)[0]["reason"] == "JobHeldAdmin"
    # Her own hold she releases; the admin's hold over hers is the admin's to release.
    other = _alices_job(cluster, "PENDING", scratch)
    with cluster.alice as alice:
        assert alice.hold(other)["reason"] == "JobHeldUser"
        with cluster.admin as admin:
            assert admin.hold(other)["reason"] == "JobHeldAdmin"
        with pytest.raises(Forbidden):
            alice.release(other)
    with cluster.admin as admin:
        assert admin.release(job_id)["reason"] != "JobHeldAdmin"


def test_an_admin_hold_survives_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with running_cluster(state) as cluster:
        with cluster.alice as alice:
            job_id = alice.submit(job(["true"], beginTime=time.time() + 3600))
        with cluster.admin as admin:
            admin.hold(job_id)
    with running_cluster(state) as cluster:
        assert snapshot(cluster, job_id)[0]["reason"] == "JobHeldAdmin"
        with cluster.alice as alice, pytest.raises(Forbidden):
            alice.release(job_id)
        with cluster.admin as admin:
            admin.cancel(job_id)

"""The REST API against a real server: auth, visibility, submit to completion, errors."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from phalanx.errors import Conflict, Forbidden, NotFound
from tests.api.server import Cluster, job

FINISHED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "PREEMPTED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
}


def http(cluster: Cluster, token: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=cluster.url, headers=headers, timeout=30)


def wait_state(cluster: Cluster, job_id: int, states: set[str], timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    with cluster.admin as c:
        while True:
            view = c.get(job_id)
            if view["state"] in states:
                return view
            assert time.monotonic() < deadline, f"job {job_id} stuck in {view['state']}"
            time.sleep(0.05)


def assert_error(response: httpx.Response, status: int, error: str, *needles: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "detail"}
    assert body["error"] == error
    for needle in needles:
        assert needle in body["detail"], body["detail"]
    assert "Traceback" not in body["detail"]
    return str(body["detail"])


# --------------------------------------------------------------------------- health, auth


def test_healthz_needs_no_token(cluster: Cluster) -> None:
    with http(cluster) as h:
        r = h.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "role": "leader"}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/jobs"),
        ("POST", "/api/v1/jobs"),
        ("GET", "/api/v1/jobs/1"),
        ("DELETE", "/api/v1/jobs/1"),
        ("GET", "/api/v1/clusterqueues"),
        ("POST", "/api/v1/apply"),
        ("GET", "/api/v1/whoami"),
        ("GET", "/api/v1/tokens"),
    ],
)
def test_everything_else_needs_a_token(cluster: Cluster, method: str, path: str) -> None:
    with http(cluster) as h:
        r = h.request(method, path)
    assert_error(r, 401, "Unauthorized", "Bearer")
    assert r.headers["www-authenticate"] == "Bearer"
    with http(cluster, "phx_not-a-token") as h:
        assert_error(h.request(method, path), 401, "Unauthorized")


def test_whoami(cluster: Cluster) -> None:
    assert cluster.alice.whoami() == {"user": "alice", "tenants": ["team-a"], "admin": False}
    assert cluster.admin.whoami()["admin"] is True


def test_metrics_need_a_token(cluster: Cluster) -> None:
    with http(cluster) as h:
        assert_error(h.get("/metrics"), 401, "Unauthorized", "Bearer")
    with http(cluster, cluster.bob_token) as h:
        r = h.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    assert "kueue_pending_workloads" in r.text


def test_openapi_and_docs(cluster: Cluster) -> None:
    with http(cluster) as h:
        spec = h.get("/openapi.json").json()
        assert h.get("/docs").status_code == 200
    assert "/api/v1/jobs" in spec["paths"]
    assert "/api/v1/jobs/{job_id}/log" in spec["paths"]


# --------------------------------------------------------------------------- jobs


def test_submit_runs_to_completion_with_output(cluster: Cluster) -> None:
    with cluster.alice as alice:
        job_id = alice.submit(
            job(["sh", "-c", "echo hello from $PHALANX_NODE_NAME"], requests={"nvidia.com/gpu": 2})
        )
        view = alice.wait(job_id, timeout=30)
        assert view["state"] == "COMPLETED"
        assert view["exit_code"] == 0
        assert view["tenant"] == "team-a"
        assert view["user"] == "alice"
        assert view["queue"] == "default"
        assert view["cluster_queue"] == "team-a"
        assert view["gpus"] == 2
        assert view["flavor"] == "h100-infiniband"
        assert len(view["nodes"]) == 1
        assert view["submit_time"].endswith("Z")
        assert view["end_time"] >= view["start_time"] >= view["submit_time"]
        text = "".join(alice.logs(job_id))
        assert text == f"hello from {view['nodes'][0]}\n"
        kinds = [e["kind"] for e in alice.events(job_id)]
        assert kinds[0] == "Submitted"
        assert "Finished" in kinds


def test_snake_case_submissions_are_accepted(cluster: Cluster) -> None:
    body = {"pod_sets": [{"count": 1, "tasks_per_node": 1}], "run": {"command": ["true"]}}
    with http(cluster, cluster.alice_token) as h:
        r = h.post("/api/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["ids"] == [r.json()["id"]]


def test_job_view_has_the_design_contract_fields(cluster: Cluster) -> None:
    with cluster.alice as alice:
        view = alice.get(alice.submit(job(["true"], name="contract")))
    for key in (
        "id",
        "name",
        "state",
        "reason",
        "tenant",
        "user",
        "queue",
        "cluster_queue",
        "flavor",
        "priority",
        "nodes",
        "submit_time",
        "start_time",
        "end_time",
        "exit_code",
        "estimated_start",
    ):
        assert key in view
    assert view["name"] == "contract"
    assert isinstance(view["nodes"], list)


def test_tenants_only_see_their_own_jobs(cluster: Cluster) -> None:
    with cluster.alice as alice, cluster.bob as bob, cluster.admin as admin:
        a = alice.submit(job(["sleep", "30"]))
        b = bob.submit(job(["sleep", "30"]))
        try:
            with pytest.raises(NotFound):
                alice.get(b)
            with pytest.raises(NotFound):
                alice.cancel(b)
            with pytest.raises(NotFound):
                alice.events(b)
            with pytest.raises(NotFound):
                alice.read_log(b)
            mine = {j["id"] for j in alice.jobs()}
            assert a in mine and b not in mine
            assert {j["tenant"] for j in alice.jobs()} == {"team-a"}
            assert list(alice.jobs(tenant="team-b")) == []
            everyone = {j["id"] for j in admin.jobs()}
            assert {a, b} <= everyone
            assert {j["id"] for j in admin.jobs(tenant="team-b")} >= {b}
            assert bob.get(b)["state"] in {"PENDING", "ADMITTED", "RUNNING"}
        finally:
            admin.cancel(a)
            admin.cancel(b)


def test_cancel_a_running_job(cluster: Cluster) -> None:
    with cluster.bob as bob:
        job_id = bob.submit(job(["sleep", "60"], timeLimit=120))
        wait_state(cluster, job_id, {"RUNNING"})
        view = bob.cancel(job_id)
        assert view["id"] == job_id
        assert wait_state(cluster, job_id, {"CANCELLED"})["state"] == "CANCELLED"
        with pytest.raises(Conflict, match="already finished"):
            bob.cancel(job_id)


def test_cancel_right_after_submit_is_cancelled(cluster: Cluster) -> None:
    with cluster.bob as bob:
        for _ in range(10):
            job_id = bob.submit(job(["sleep", "60"]))
            bob.cancel(job_id)
            final = wait_state(cluster, job_id, FINISHED)
            assert final["state"] == "CANCELLED", final


def test_batch_submit_is_ordered_and_listable(cluster: Cluster) -> None:
    with cluster.alice as alice:
        ids = alice.submit_many([job(["true"], name=f"batch-{i}") for i in range(40)])
        assert len(ids) == 40
        assert ids == sorted(ids)
        views = {j["id"]: j for j in alice.jobs()}
        assert all(views[i]["name"] == f"batch-{n}" for n, i in enumerate(ids))


def test_batch_errors_name_the_job_and_write_nothing(cluster: Cluster) -> None:
    jobs: list[Any] = [job(["true"]) for _ in range(3)]
    jobs[1]["podSets"][0]["count"] = 0
    with cluster.admin as admin:
        before = sum(1 for _ in admin.jobs())
    with http(cluster, cluster.alice_token) as h:
        r = h.post("/api/v1/jobs/batch", json={"jobs": jobs})
    assert_error(r, 422, "Invalid", "jobs[1].podSets[0].count")
    with cluster.admin as admin:
        assert sum(1 for _ in admin.jobs()) == before


def test_pagination_follows_continue(cluster: Cluster) -> None:
    with cluster.alice as alice:
        alice.submit_many([job(["true"]) for _ in range(25)])
        everything = [j["id"] for j in alice.jobs()]
        paged = [j["id"] for j in alice.jobs(page_size=7)]
        assert paged == everything == sorted(everything)
        newest = [j["id"] for j in alice.jobs(order="desc", page_size=4)]
        assert newest == sorted(everything, reverse=True)
        assert len(list(alice.jobs(limit=10, page_size=3))) == 10
    with http(cluster, cluster.alice_token) as h:
        page = h.get("/api/v1/jobs", params={"limit": 5}).json()
        assert len(page["items"]) == 5
        assert page["continue"] is not None
        nxt = h.get("/api/v1/jobs", params={"limit": 5, "continue": page["continue"]}).json()
        assert nxt["items"][0]["id"] > page["items"][-1]["id"]
        last = h.get("/api/v1/jobs", params={"limit": 10000}).json()
        assert last["continue"] is None


def test_filters(cluster: Cluster) -> None:
    with cluster.alice as alice, cluster.bob as bob, cluster.admin as admin:
        done = alice.submit(job(["true"]))
        failed = bob.submit(job(["false"]))
        alice.wait(done, timeout=30)
        bob.wait(failed, timeout=30)
        completed = {j["id"] for j in admin.jobs(state="COMPLETED")}
        assert done in completed and failed not in completed
        both = {j["id"] for j in admin.jobs(state="completed,FAILED")}
        assert {done, failed} <= both
        assert {j["state"] for j in admin.jobs(state=["FAILED"])} == {"FAILED"}
        assert {j["user"] for j in admin.jobs(user="bob")} == {"bob"}
        assert {j["cluster_queue"] for j in admin.jobs(cluster_queue="team-b")} == {"team-b"}
        assert {j["queue"] for j in admin.jobs(queue="default")} == {"default"}
        assert failed in {j["id"] for j in admin.jobs(tenant="team-a,team-b")}


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("body", "needles"),
    [
        ({"run": {"command": ["true"]}}, ["podSets", "required"]),
        ({"podSets": [{"count": 1}]}, ["run"]),
        ({"podSets": [{"count": -1}], "run": {"command": ["true"]}}, ["podSets[0].count"]),
        ({"podSets": [{"count": 1}], "run": {"command": []}}, ["run.command"]),
        ({"podSets": [{"count": 1}], "run": {"command": ["x"]}, "bogus": 1}, ["bogus"]),
        (
            {"podSets": [{"requests": {"cpu": "lots"}}], "run": {"command": ["x"]}},
            ["podSets[0].requests"],
        ),
        (
            {"podSets": [{"count": 3, "tasksPerNode": 2}], "run": {"command": ["x"]}},
            ["podSets[0]", "multiple of tasksPerNode"],
        ),
        ([1, 2], ["body"]),
    ],
)
def test_bad_submissions_are_422_with_a_field_path(
    cluster: Cluster, body: Any, needles: list[str]
) -> None:
    with http(cluster, cluster.alice_token) as h:
        r = h.post("/api/v1/jobs", json=body)
    assert_error(r, 422, "Invalid", *needles)


def test_unknown_queue_is_refused(cluster: Cluster) -> None:
    with http(cluster, cluster.alice_token) as h:
        r = h.post("/api/v1/jobs", json=job(["true"], queue="nope"))
    assert r.status_code == 422, r.text
    assert "nope" in r.json()["detail"]


def test_other_tenants_submissions_are_forbidden(cluster: Cluster) -> None:
    with http(cluster, cluster.alice_token) as h:
        r = h.post("/api/v1/jobs", json=job(["true"], tenant="team-b"))
    assert r.status_code in (403, 404, 422), r.text
    assert r.json()["error"] in ("Forbidden", "NotFound", "Invalid")


def test_malformed_json_is_a_client_error(cluster: Cluster) -> None:
    with http(cluster, cluster.alice_token) as h:
        r = h.post(
            "/api/v1/jobs", content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert_error(r, 400, "BadRequest", "not valid JSON")
        r = h.post("/api/v1/jobs/batch", content=b"", headers={"Content-Type": "application/json"})
        assert_error(r, 422, "Invalid", "body: a JSON request body is required")
        r = h.post("/api/v1/jobs", content=b"hello", headers={"Content-Type": "text/plain"})
        assert_error(r, 422, "Invalid", "body")
        r = h.post("/api/v1/apply", content=b"[", headers={"Content-Type": "application/json"})
        assert_error(r, 422, "Invalid", "JSON")


@pytest.mark.parametrize(
    ("path", "params", "needle"),
    [
        ("/api/v1/jobs", {"limit": "abc"}, "limit (query)"),
        ("/api/v1/jobs", {"limit": 0}, "limit (query)"),
        ("/api/v1/jobs", {"limit": 10001}, "limit (query)"),
        ("/api/v1/jobs", {"state": "SLEEPING"}, "SLEEPING"),
        ("/api/v1/jobs", {"order": "sideways"}, "order (query)"),
        ("/api/v1/jobs", {"continue": "xyz"}, "continue"),
        ("/api/v1/jobs", {"continue": "-5"}, "continue"),
        ("/api/v1/jobs/abc", {}, "job_id (path)"),
        ("/api/v1/jobs/99999999999999999999999", {}, "job_id (path)"),
        ("/api/v1/jobs/1/log", {"offset": -1}, "offset (query)"),
        ("/api/v1/jobs/1/log", {"stream": "stdin"}, "stream (query)"),
    ],
)
def test_bad_queries_are_422(cluster: Cluster, path: str, params: dict, needle: str) -> None:
    with http(cluster, cluster.admin_token) as h:
        r = h.get(path, params=params)
    assert_error(r, 422, "Invalid", needle)


def test_unknown_paths_and_methods_are_json(cluster: Cluster) -> None:
    with http(cluster, cluster.admin_token) as h:
        assert_error(h.get("/nope"), 404, "NotFound")
        assert_error(h.put("/api/v1/jobs"), 405, "MethodNotAllowed")
        assert_error(h.get("/api/v1/jobs/999999"), 404, "NotFound", "999999")
        assert_error(h.get("/api/v1/gizmos"), 404, "NotFound", "gizmos")


# --------------------------------------------------------------------------- logs


def test_log_chunks_offsets_and_finished(cluster: Cluster, tmp_path: Any) -> None:
    with cluster.alice as alice:
        job_id = alice.submit(
            job(
                ["sh", "-c", "printf 0123456789; printf oops >&2"],
                output=str(tmp_path / "out-%j.txt"),
                error=str(tmp_path / "err-%j.txt"),
            )
        )
        alice.wait(job_id, timeout=30)
        assert (tmp_path / f"out-{job_id}.txt").read_text() == "0123456789"
        data, offset, finished = alice.read_log(job_id, offset=0, limit=4)
        assert (data, offset, finished) == (b"0123", 4, False)
        data, offset, finished = alice.read_log(job_id, offset=4)
        assert (data, offset, finished) == (b"456789", 10, True)
        assert alice.read_log(job_id, offset=10) == (b"", 10, True)
        assert "".join(alice.logs(job_id, stream="stderr")) == "oops"
        assert "".join(alice.logs(job_id, follow=True)) == "0123456789"


def test_merged_stderr_has_no_separate_stream(cluster: Cluster) -> None:
    with cluster.alice as alice:
        job_id = alice.submit(job(["true"]))
        with pytest.raises(NotFound, match="standard error"):
            alice.read_log(job_id, stream="stderr")


def test_follow_streams_until_the_job_ends(cluster: Cluster) -> None:
    with cluster.alice as alice:
        job_id = alice.submit(job(["sh", "-c", "echo one; sleep 0.5; echo two"]))
        assert "".join(alice.logs(job_id, follow=True, interval=0.05)) == "one\ntwo\n"
        states = [v["state"] for v in alice.watch(job_id, interval=0.05)]
        assert states[-1] == "COMPLETED"


# --------------------------------------------------------------------------- objects


def test_objects_as_manifests_with_status(cluster: Cluster) -> None:
    with cluster.alice as alice:
        cqs = alice.get_objects("clusterqueues")
        assert {c["metadata"]["name"] for c in cqs} == {"team-a", "team-b"}
        team_a = alice.get_object("cq", "team-a")
        assert team_a["apiVersion"].startswith("kueue.x-k8s.io/")
        assert team_a["status"]["nominal"]["h100-infiniband"]["nvidia.com/gpu"] == 16
        lq = alice.get_object("localqueues", "team-a/default")
        assert lq["metadata"] == {"name": "default", "namespace": "team-a"}
        nodes = alice.get_objects("nodes")
        assert len(nodes) == 6
        node = alice.get_object("node", "gpu-h100-0")
        assert node["kind"] == "Node"
        assert node["status"]["gpus"] == 8
        assert "capacity" in node["status"]
        with pytest.raises(NotFound):
            alice.get_object("cq", "team-z")
        with pytest.raises(NotFound, match="unknown kind"):
            alice.get_objects("gizmos")


FLAVOR = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: spare
spec:
  nodeLabels:
    phalanx.io/flavor: spare
"""


def test_apply_yaml_and_documents_then_delete(cluster: Cluster) -> None:
    with cluster.admin as admin:
        assert admin.apply(FLAVOR, source="spare.yaml") == [
            {"kind": "ResourceFlavor", "name": "spare", "outcome": "created"}
        ]
        again = admin.apply([admin.get_object("rf", "spare")], source="roundtrip")
        assert again[0]["outcome"] == "unchanged"
        changed = FLAVOR.replace("phalanx.io/flavor: spare", "phalanx.io/flavor: other")
        assert admin.apply(changed)[0]["outcome"] == "configured"
        assert admin.delete_object("resourceflavors", "spare")["outcome"] == "deleted"
        with pytest.raises(NotFound):
            admin.delete_object("rf", "spare")


def test_apply_errors_name_source_and_line(cluster: Cluster) -> None:
    bad = FLAVOR + "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {}\n"
    with http(cluster, cluster.admin_token) as h:
        r = h.post(
            "/api/v1/apply",
            params={"source": "bad.yaml"},
            content=bad.encode(),
            headers={"Content-Type": "application/yaml"},
        )
        assert_error(r, 422, "Invalid", "bad.yaml:11:", "metadata.name")
        r = h.post("/api/v1/apply", json={"documents": "nope"})
        assert_error(r, 422, "Invalid", "documents")
    with cluster.admin as admin, pytest.raises(NotFound):
        admin.get_object("rf", "spare")


def test_configuration_is_admin_only(cluster: Cluster) -> None:
    with cluster.alice as alice:
        with pytest.raises(Forbidden):
            alice.apply(FLAVOR)
        with pytest.raises(Forbidden):
            alice.delete_object("cq", "team-a")
        with pytest.raises(Forbidden):
            alice.create_token("mallory", ["team-a"])
        with pytest.raises(Forbidden):
            alice.tokens()


def test_delete_in_use_is_conflict(cluster: Cluster) -> None:
    with cluster.admin as admin, pytest.raises(Conflict):
        admin.delete_object("cq", "team-a")


def test_tokens(cluster: Cluster) -> None:
    with cluster.admin as admin:
        made = admin.create_token("carol", ["team-a", "team-b"], name="carol-laptop")
        assert made["token"].startswith("phx_")
        assert made["tenants"] == ["team-a", "team-b"]
        listed = {t["name"]: t for t in admin.tokens()}
        assert "token" not in listed["carol-laptop"]
        assert listed["carol-laptop"]["user"] == "carol"
    with cluster.client(made["token"]) as carol:
        assert carol.whoami()["tenants"] == ["team-a", "team-b"]
    with http(cluster, cluster.admin_token) as h:
        assert_error(h.post("/api/v1/tokens", json={"tenants": []}), 422, "Invalid", "user")

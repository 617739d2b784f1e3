"""The ``phalanx`` command against a real server, through ``main([...])``."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from phalanx.cli.main import main
from tests.api.server import CLUSTER, Cluster, job


@pytest.fixture
def as_admin(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("PHALANX_URL", cluster.url)
    monkeypatch.setenv("PHALANX_TOKEN", cluster.admin_token)
    monkeypatch.setenv("NO_COLOR", "1")
    return cluster


@pytest.fixture
def as_alice(as_admin: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("PHALANX_TOKEN", as_admin.alice_token)
    return as_admin


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, needle: str, expected_code: int = 1) -> None:
    assert code == expected_code
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("phalanx: error: ")
    assert needle in lines[0]
    assert "Traceback" not in err


def submit(capsys: pytest.CaptureFixture[str], *args: str) -> int:
    code, out, err = run(capsys, "submit", *args)
    assert code == 0, err
    return int(out.strip())


def wait(cluster: Cluster, job_id: int) -> dict:
    with cluster.admin as client:
        return client.wait(job_id, timeout=30)


def test_version_and_presets(capsys: pytest.CaptureFixture[str]) -> None:
    from phalanx import __version__

    assert run(capsys, "version") == (0, f"phalanx {__version__}\n", "")
    assert run(capsys, "--version")[1] == f"phalanx {__version__}\n"
    code, out, _ = run(capsys, "presets")
    assert code == 0
    assert "phalanx" in out.split()


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for command in ("up", "apply", "get", "describe", "delete", "submit", "cancel", "logs"):
        assert command in out
    assert run(capsys)[0] == 0


def test_submit_get_describe_logs(as_alice: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    job_id = submit(
        capsys, "--gpus", "16", "--nodes", "2", "--name", "pair", "--time", "5",
        "--", "sh", "-c", "echo on $PHALANX_NODE_NAME",
    )  # fmt: skip
    view = wait(as_alice, job_id)
    assert view["state"] == "COMPLETED"
    assert view["gpus"] == 16
    assert len(view["nodes"]) == 2
    assert view["time_limit"] == 300
    assert view["working_dir"] == str(Path.cwd())

    code, out, _ = run(capsys, "get", "jobs")
    assert code == 0
    header = out.splitlines()[0].split()
    assert header[:9] == [
        "ID",
        "NAME",
        "TENANT",
        "USER",
        "QUEUE",
        "STATE",
        "REASON",
        "GPUS",
        "NODES",
    ]
    assert any(line.split()[:2] == [str(job_id), "pair"] for line in out.splitlines())

    code, out, _ = run(capsys, "get", "jobs", "-o", "json")
    jobs = json.loads(out)
    assert isinstance(jobs, list)
    mine = next(j for j in jobs if j["id"] == job_id)
    for key in ("id", "name", "state", "reason", "tenant", "user", "queue", "cluster_queue"):
        assert key in mine
    for key in ("flavor", "priority", "nodes", "submit_time", "start_time", "end_time"):
        assert key in mine
    assert mine["exit_code"] == 0 and mine["estimated_start"] is None
    assert mine["submit_time"].endswith("Z")

    code, out, _ = run(capsys, "get", "job", str(job_id), "-o", "yaml")
    assert code == 0 and f"id: {job_id}" in out

    code, out, _ = run(capsys, "describe", "job", str(job_id))
    assert code == 0
    assert "State:" in out and "COMPLETED" in out
    assert "Events:" in out and "Submitted" in out and "Finished" in out

    code, out, _ = run(capsys, "logs", str(job_id))
    assert code == 0
    assert sorted(out.splitlines()) == sorted(f"on {n}" for n in view["nodes"])


def test_filters_and_wide(as_admin: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    failed = submit(capsys, "--tenant", "team-b", "--", "false")
    wait(as_admin, failed)
    code, out, _ = run(capsys, "get", "jobs", "--state", "FAILED", "-o", "json")
    assert code == 0
    assert {j["state"] for j in json.loads(out)} == {"FAILED"}
    code, out, _ = run(capsys, "get", "jobs", "-n", "team-b", "-o", "json")
    assert {j["tenant"] for j in json.loads(out)} == {"team-b"}
    code, out, _ = run(capsys, "get", "jobs", "-o", "wide")
    assert "CLUSTER_QUEUE" in out.splitlines()[0]


def test_cancel(as_alice: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    job_id = submit(capsys, "--", "sleep", "60")
    deadline = time.monotonic() + 30
    while wait_state(as_alice, job_id) != "RUNNING":  # see the API test of an early cancel
        assert time.monotonic() < deadline
        time.sleep(0.05)
    code, out, _ = run(capsys, "cancel", str(job_id))
    assert (code, out) == (0, f"job/{job_id} cancelled\n")
    deadline = time.monotonic() + 30
    while wait_state(as_alice, job_id) != "CANCELLED":
        if time.monotonic() > deadline:
            with as_alice.admin as client:
                view, events = client.get(job_id), client.events(job_id)
            raise AssertionError(f"not cancelled after 30s: {view} {events}")
        time.sleep(0.05)


def wait_state(cluster: Cluster, job_id: int) -> str:
    with cluster.admin as client:
        return str(client.get(job_id)["state"])


def test_other_tenants_jobs_are_not_found(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = submit(capsys, "--tenant", "team-b", "--", "true")
    monkeypatch.setenv("PHALANX_TOKEN", as_admin.alice_token)
    code, _, err = run(capsys, "describe", "job", str(theirs))
    assert_one_line_error(code, err, f"job {theirs} not found")
    code, _, err = run(capsys, "cancel", str(theirs))
    assert_one_line_error(code, err, "not found")
    code, out, _ = run(capsys, "get", "jobs", "-o", "json")
    assert theirs not in {j["id"] for j in json.loads(out)}


def test_objects(as_admin: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "get", "cq")
    assert code == 0
    assert out.splitlines()[0].split()[:2] == ["NAME", "COHORT"]
    assert {line.split()[0] for line in out.splitlines()[1:]} == {"team-a", "team-b"}
    code, out, _ = run(capsys, "get", "nodes")
    assert len(out.splitlines()) == 7
    code, out, _ = run(capsys, "get", "lq", "team-a/default", "-o", "json")
    assert json.loads(out)["spec"]["clusterQueue"] == "team-a"
    code, out, _ = run(capsys, "get", "clusterqueues", "-o", "yaml")
    assert out.count("kind: ClusterQueue") == 2
    code, out, _ = run(capsys, "describe", "cq", "team-a")
    assert code == 0 and "status:" in out and "nominal:" in out


def test_apply_and_delete(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "apply", "-f", str(CLUSTER))
    assert code == 0, err
    assert "clusterqueue/team-a unchanged" in out.splitlines()
    flavor = tmp_path / "spare.yaml"
    flavor.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata:\n  name: spare\n"
    )
    assert run(capsys, "apply", "-f", str(flavor))[1] == "resourceflavor/spare created\n"
    assert run(capsys, "delete", "rf", "spare")[1] == "resourceflavor/spare deleted\n"


def test_apply_errors_name_file_and_line(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {}\n")
    code, _, err = run(capsys, "apply", "-f", str(bad))
    assert code == 1
    assert err.startswith(f"phalanx: error: {bad}:")
    assert "Traceback" not in err


def test_tokens(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run(
        capsys, "token", "create", "--user", "dave", "--tenant", "team-a", "--name", "dave"
    )
    assert code == 0
    token = out.strip()
    assert token.startswith("phx_")
    code, out, _ = run(capsys, "token", "list")
    assert "dave" in out and token not in out
    monkeypatch.setenv("PHALANX_TOKEN", token)
    code, _, err = run(capsys, "token", "list")
    assert_one_line_error(code, err, "admin")


@pytest.mark.parametrize(
    ("args", "needle", "status"),
    [
        (("get", "job", "999999"), "job 999999 not found", 1),
        (("get", "gizmos"), "unknown kind 'gizmos'", 1),
        (("submit", "--gpus", "3", "--nodes", "2", "--", "true"), "--gpus 3", 1),
        (("submit", "--time", "soon", "--", "true"), "'soon'", 1),
        (("submit", "--queue", "nope", "--", "true"), "nope", 1),
        (("get", "jobs", "--state", "DREAMING"), "DREAMING", 1),
        (("delete", "cq", "team-a"), "team-a", 1),
        (("get",), "Missing argument", 2),
        (("get", "jobs", "-o", "xml"), "xml", 2),
        (("frobnicate",), "frobnicate", 2),
        (("cancel", "abc"), "abc", 2),
        (("get", "job", "abc"), "abc", 2),
        (("submit",), "Missing argument", 2),
    ],
)
def test_errors_are_one_line(
    as_admin: Cluster,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    needle: str,
    status: int,
) -> None:
    code, _, err = run(capsys, *args)
    assert_one_line_error(code, err, needle, status)


def test_no_server(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("PHALANX_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("PHALANX_TOKEN", "phx_x")
    code, _, err = run(capsys, "get", "jobs")
    assert_one_line_error(code, err, "start one with `phalanx up`")


def test_bad_token(
    as_admin: Cluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PHALANX_TOKEN", "phx_wrong")
    code, _, err = run(capsys, "get", "jobs")
    assert_one_line_error(code, err, "token")


def test_cancel_all_and_by_user(as_admin: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    with as_admin.alice as alice, as_admin.bob as bob:
        mine = [alice.submit(job(["sleep", "60"])) for _ in range(2)]
        theirs = bob.submit(job(["sleep", "60"]))
    code, out, err = run(capsys, "cancel", "--all", "--user", "alice")
    assert code == 0, err
    assert sorted(out.splitlines()) == sorted(f"job/{i} cancelled" for i in mine)
    with as_admin.admin as admin:
        assert admin.get(theirs)["state"] in ("PENDING", "ADMITTED", "RUNNING")
        code, out, err = run(capsys, "cancel", "--all")
        assert code == 0 and f"job/{theirs} cancelled" in out, err
        for job_id in [*mine, theirs]:
            assert admin.wait(job_id, timeout=30)["state"] == "CANCELLED"
    code, out, err = run(capsys, "cancel", "--all")
    assert (code, out) == (0, "no unfinished jobs to cancel\n"), err


def test_cancel_needs_ids_or_all(as_admin: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "cancel")
    assert_one_line_error(code, err, "give job ids, or --all", expected_code=2)
    code, _, err = run(capsys, "cancel", "--user", "alice", "1")
    assert_one_line_error(code, err, "--user and --tenant go with --all", expected_code=2)


def test_up_detached_then_down(tmp_path: Path) -> None:
    """`phalanx up -d` returns once the server answers and says where its state and log
    are; `phalanx down` stops it; a second `down` finds none; a bad start says why."""
    import subprocess
    import sys

    phalanx = [sys.executable, "-m", "phalanx.cli.main"]
    state = tmp_path / "state"
    up = subprocess.run(
        [*phalanx, "up", "-d", "--state-dir", str(state), "--port", "0", "--single-user"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert up.returncode == 0, up.stderr
    assert f"state dir: {state}" in up.stderr and f"log: {state / 'server.log'}" in up.stderr
    assert f"phalanx down --state-dir {state}" in up.stderr
    url = json.loads((state / "client.json").read_text())["url"]
    down = subprocess.run(
        [*phalanx, "down", "--state-dir", str(state)], capture_output=True, text=True, timeout=90
    )
    assert down.returncode == 0 and down.stdout.startswith("phalanx stopped (pid "), down
    with pytest.raises(OSError):
        socket.create_connection(tuple(url.removeprefix("http://").rsplit(":", 1)), timeout=2)
    again = subprocess.run(
        [*phalanx, "down", "--state-dir", str(state)], capture_output=True, text=True, timeout=30
    )
    assert again.stdout == f"no phalanx server runs on {state}\n"
    bad = subprocess.run(
        [*phalanx, "up", "-d", "--state-dir", str(state), "--config", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.splitlines() == [
        f"phalanx: error: {tmp_path / 'nope'}: no such file or directory"
    ]


def test_checkpoint_touches_the_jobs_checkpoint_file(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PHALANX_CHECKPOINT_FILE", raising=False)
    code, _, err = run(capsys, "checkpoint")
    assert_one_line_error(
        code, err, "not inside a phalanx job (PHALANX_CHECKPOINT_FILE is not set)"
    )
    path = tmp_path / "checkpoint"
    monkeypatch.setenv("PHALANX_CHECKPOINT_FILE", str(path))
    before = time.time()
    assert run(capsys, "checkpoint") == (0, "", "")
    assert path.stat().st_mtime >= before - 1

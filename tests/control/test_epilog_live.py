"""``phalanx up --epilog`` on a live server: the program runs on every node of a job
after each attempt, with Slurm's epilog environment. Where it fails the node drains
(``Epilog error``); a ``--requeue=expedite`` gang is then requeued expedited, ahead of
the waiting jobs, on its node whose epilog passed plus a replacement. Where it passes
nothing changes.

The cluster is the expedited requeue's (four 8-GPU nodes, one ClusterQueue ``cq``).
The epilog writes its environment to a file per job and node, and fails on the node
named in ``fail-node`` (if that file exists).
"""

from __future__ import annotations

import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.client import Client
from phalanx.control.spawn import spawn_server
from phalanx.server import RunningServer, start_server
from tests.control.test_expedite_live import CLUSTER, _job, _sbatch, _wait


@pytest.fixture()
def out(tmp_path: Path) -> Path:
    path = tmp_path / "epilogs"
    path.mkdir()
    return path


@pytest.fixture()
def server(tmp_path: Path, out: Path) -> Iterator[RunningServer]:
    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER)
    epilog = tmp_path / "epilog.sh"
    epilog.write_text(
        "#!/bin/sh\n"
        f'env > "{out}/$SLURM_JOB_ID-$SLURMD_NODENAME.env"\n'
        f'if [ "$SLURMD_NODENAME" = "$(cat {out}/fail-node 2>/dev/null)" ]; then\n'
        '  echo "GPU memory not cleared on $SLURMD_NODENAME"\n'
        "  exit 1\n"
        "fi\n"
    )
    epilog.chmod(epilog.stat().st_mode | stat.S_IXUSR)
    running = start_server(
        tmp_path / "state", port=0, configs=[config], single_user=True, epilog=str(epilog)
    )
    try:
        yield running
    finally:
        running.stop()


def _env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def _node(client: Client, name: str) -> dict[str, Any]:
    return next(n for n in client.nodes() if n["metadata"]["name"] == name)


def _gang(server: RunningServer, *args: str) -> int:
    return _sbatch(
        server.url,
        server.admin_token,
        *args, "-A", "t", "-p", "cq", "-N", "2", "--ntasks-per-node", "1",
        "--gpus-per-node", "8",
    )  # fmt: skip


def test_a_failed_epilog_drains_its_node_and_requeues_an_expedite_gang_first(
    server: RunningServer, out: Path
) -> None:
    with Client(server.url, server.admin_token) as client:
        # Fails by itself after 3 s, once; its second attempt succeeds.
        marker = out / "failed-once"
        script = f"sleep 3; test -e {marker} || {{ touch {marker}; exit 3; }}"
        gang = _gang(server, "--requeue=expedite", "--wrap", script)
        bad, healthy = sorted(_wait(client, gang, {"RUNNING"})["nodes"])
        fillers = [client.submit(_job(f"filler{i}")) for i in range(2)]
        for job_id in fillers:
            _wait(client, job_id, {"RUNNING"})
        waiting = client.submit_many([_job(f"w{i}", "high") for i in range(10)])
        (out / "fail-node").write_text(bad)
        _wait(client, gang, {"PENDING"}, timeout=30)
        node = _node(client, bad)
        assert node["status"]["state"] == "drain", node
        assert node["metadata"]["annotations"]["phalanx.io/reason"] == "Epilog error"
        assert _node(client, healthy)["status"]["state"] == "idle"  # free, held
        events = client.events(gang)
        [failed] = [e for e in events if e["kind"] == "EpilogFailed"]
        assert failed["data"]["nodes"] == {bad: f"GPU memory not cleared on {bad}"}
        assert failed["data"]["drained"] == [bad]
        [requeued] = [e for e in events if e["kind"] == "Requeued"]
        assert requeued["reason"] == "EpilogError"
        assert requeued["data"]["expedite"] == {"held": [healthy]}
        assert not [e for e in events if e["kind"] == "Finished"]
        # Its end was recorded after the epilogs: both ran with Slurm's environment.
        for name in (bad, healthy):
            env = _env(out / f"{gang}-{name}.env")
            assert env["SLURM_JOB_ID"] == str(gang)
            assert env["SLURMD_NODENAME"] == name
            assert env["SLURM_JOB_PARTITION"] == "cq"
            assert env["SLURM_JOB_USER"] == client.get(gang)["user"]
            assert env["SLURM_JOB_ACCOUNT"] == "t"
            assert env["SLURM_SCRIPT_CONTEXT"] == "epilog_slurmd"
            assert env["SLURM_JOB_EXIT_CODE2"] == "3:0"
            assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
        # The healthy node is held for the gang: none of the 10 starts there.
        time.sleep(1.5)
        assert [j for j in waiting if client.get(j)["state"] != "PENDING"] == []
        replacement = client.get(fillers[0])["nodes"][0]
        client.cancel(fillers[0])
        view = _wait(client, gang, {"RUNNING"}, timeout=10)
        assert sorted(view["nodes"]) == sorted([healthy, replacement]), view["nodes"]
        # Its second attempt's epilogs pass: it completes.
        assert _wait(client, gang, {"COMPLETED"}, timeout=30)["state"] == "COMPLETED"
        for job_id in [fillers[1], *waiting]:
            client.cancel(job_id)


def test_a_failed_epilog_after_an_expedite_job_succeeded_only_drains(
    server: RunningServer, out: Path
) -> None:
    with Client(server.url, server.admin_token) as client:
        gang = _gang(server, "--requeue=expedite", "--wrap", "sleep 1")
        bad = sorted(_wait(client, gang, {"RUNNING"})["nodes"])[0]
        (out / "fail-node").write_text(bad)
        assert _wait(client, gang, {"COMPLETED"}, timeout=30)["state"] == "COMPLETED"
        deadline = time.monotonic() + 10
        while _node(client, bad)["status"]["state"] != "drain":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        kinds = [e["kind"] for e in client.events(gang)]
        assert "EpilogFailed" in kinds and "Requeued" not in kinds


def test_a_passing_epilog_changes_nothing(server: RunningServer, out: Path) -> None:
    with Client(server.url, server.admin_token) as client:
        gang = _gang(server, "--requeue=expedite", "--wrap", "sleep 1")
        view = _wait(client, gang, {"COMPLETED"}, timeout=30)
        assert [e["kind"] for e in client.events(gang)].count("Requeued") == 0
        assert not [e for e in client.events(gang) if e["kind"] == "EpilogFailed"]
        for name in view["nodes"]:
            assert (out / f"{gang}-{name}.env").exists()
        assert all(n["status"]["state"] == "idle" for n in client.nodes())


def test_a_failed_epilog_of_an_ordinary_job_only_drains(server: RunningServer, out: Path) -> None:
    with Client(server.url, server.admin_token) as client:
        job = client.submit(
            {**_job("plain"), "run": {"command": ["sleep", "2"], "workingDir": "/tmp"}}
        )
        [node] = _wait(client, job, {"RUNNING"})["nodes"]
        (out / "fail-node").write_text(node)
        assert _wait(client, job, {"COMPLETED"}, timeout=30)["state"] == "COMPLETED"
        deadline = time.monotonic() + 10
        while _node(client, node)["status"]["state"] != "drain":
            assert time.monotonic() < deadline, _node(client, node)
            time.sleep(0.1)
        assert _node(client, node)["metadata"]["annotations"]["phalanx.io/reason"] == (
            "Epilog error"
        )
        assert [e["kind"] for e in client.events(job)].count("Requeued") == 0


def test_an_end_held_for_its_epilogs_survives_a_kill_9(tmp_path: Path, out: Path) -> None:
    """The server dies while an expedite gang's epilogs run: started again, it runs them
    again (the runtime reports the end again) and requeues the gang as before."""
    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER)
    epilog = tmp_path / "epilog.sh"
    epilog.write_text(
        "#!/bin/sh\n"
        f'if [ "$SLURMD_NODENAME" = "$(cat {out}/fail-node 2>/dev/null)" ]; then\n'
        f'  touch "{out}/started-$SLURM_JOB_ID"\n'
        "  sleep 2\n"
        '  echo "GPU memory not cleared"\n'
        "  exit 1\n"
        "fi\n"
    )
    epilog.chmod(epilog.stat().st_mode | stat.S_IXUSR)
    state = tmp_path / "state"
    args = ["--port", "0", "--single-user", "--epilog", str(epilog)]
    server = spawn_server(state, [*args, "--config", str(config)])
    try:
        with Client(server.url, server.token) as client:
            gang = _sbatch(
                server.url,
                server.token,
                "--requeue=expedite", "-A", "t", "-p", "cq", "-N", "2",
                "--ntasks-per-node", "1", "--gpus-per-node", "8", "--wrap",
                f"sleep 2; test -e {out}/failed-once || {{ touch {out}/failed-once; exit 3; }}",
            )  # fmt: skip
            bad, healthy = sorted(_wait(client, gang, {"RUNNING"})["nodes"])
            (out / "fail-node").write_text(bad)
            deadline = time.monotonic() + 30
            while not (out / f"started-{gang}").exists():
                assert time.monotonic() < deadline
                time.sleep(0.05)
            # Its end waits for the epilogs: the store still says RUNNING.
            assert client.get(gang)["state"] == "RUNNING"
        server.proc.kill()
        server.proc.wait(timeout=30)
        server = spawn_server(state, args)
        with Client(server.url, server.token) as client:
            _wait(client, gang, {"PENDING", "RUNNING"}, timeout=30)
            deadline = time.monotonic() + 30
            while not [e for e in client.events(gang) if e["kind"] == "Requeued"]:
                assert time.monotonic() < deadline, client.events(gang)
                time.sleep(0.1)
            [requeued] = [e for e in client.events(gang) if e["kind"] == "Requeued"]
            assert requeued["reason"] == "EpilogError"
            assert requeued["data"]["expedite"] == {"held": [healthy]}
            node = _node(client, bad)
            assert node["status"]["state"] == "drain", node
            view = _wait(client, gang, {"COMPLETED"}, timeout=30)
            assert healthy in view["nodes"] and bad not in view["nodes"], view
    finally:
        server.stop()

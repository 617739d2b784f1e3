"""Node administration the Slurm way, against a server started with ``phalanx up -d``.

Every command runs as its own process, as an operator types it: ``scontrol update
NodeName=... State=DRAIN Reason=...``, ``sinfo -R``, ``sinfo -N -l``, ``scontrol
show node``, ``sbatch``, ``squeue``. Formats and messages are those of Slurm
22.05 (compared side by side with a real slurmctld; see docs/slurm.md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.client import Client
from tests.api.server import CLUSTER

PHALANX = [sys.executable, "-m", "phalanx.cli.main"]
ALL = "gpu-h100-[0-3],gpu-l40s-[0-1]"
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"


class Live:
    def __init__(self, state: Path) -> None:
        self.state = state
        info = json.loads((state / "client.json").read_text())
        self.url, self.token = info["url"], info["token"]

    def run(self, *args: str, token: str | None = None) -> tuple[int, str, str]:
        env = {**os.environ, "PHALANX_STATE_DIR": str(self.state)}
        env.pop("PHALANX_URL", None)
        env.pop("PHALANX_TOKEN", None)
        if token is not None:
            env["PHALANX_URL"], env["PHALANX_TOKEN"] = self.url, token
        done = subprocess.run(
            [*PHALANX, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=self.state.parent,
        )
        assert "Traceback" not in done.stderr, done.stderr
        return done.returncode, done.stdout, done.stderr

    def ok(self, *args: str) -> str:
        code, out, err = self.run(*args)
        assert code == 0, (args, err)
        return out

    def client(self) -> Client:
        return Client(self.url, self.token, state_dir=self.state)

    def job_state(self, job_id: int) -> dict[str, object]:
        with self.client() as client:
            return client.get(job_id)

    def wait(self, job_id: int, state: str, timeout: float = 30.0) -> dict[str, object]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job_state(job_id)
            if job["state"] == state or time.monotonic() > deadline:
                return job
            time.sleep(0.2)

    def sbatch(self, *args: str) -> int:
        out = self.ok("sbatch", "-p", "team-a", *args)
        match = re.fullmatch(r"Submitted batch job (\d+)\n", out)
        assert match, out
        return int(match.group(1))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    state = tmp_path_factory.mktemp("nodeadmin") / "state"
    args = ["up", "-d", "--state-dir", str(state), "--port", "0", "--single-user"]
    up = subprocess.run(
        [*PHALANX, *args, "--config", str(CLUSTER)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert up.returncode == 0, up.stderr
    try:
        yield Live(state)
    finally:
        subprocess.run(
            [*PHALANX, "cancel", "--all"],
            capture_output=True,
            timeout=60,
            env={**os.environ, "PHALANX_STATE_DIR": str(state)},
        )
        subprocess.run(
            [*PHALANX, "down", "--state-dir", str(state)], capture_output=True, timeout=90
        )


@pytest.fixture()
def resumed(live: Live) -> Iterator[Live]:
    """Every node back in service after the test."""
    yield live
    live.run("scancel", "-u", "root")
    for name in ("gpu-h100-0", "gpu-h100-1", "gpu-h100-2", "gpu-h100-3"):
        live.run("scontrol", "update", f"NodeName={name}", "State=RESUME")
    for name in ("gpu-l40s-0", "gpu-l40s-1"):
        live.run("scontrol", "update", f"NodeName={name}", "State=RESUME")


def test_drain_shows_in_sinfo_keeps_new_jobs_off_and_resume_brings_the_node_back(
    resumed: Live,
) -> None:
    live = resumed
    code, out, err = live.run(
        "scontrol", "update", "NodeName=gpu-h100-[0-3],gpu-l40s-1", "State=DRAIN", "Reason=disk"
    )
    assert (code, out, err) == (0, "", "")
    out = live.ok("sinfo", "-R")
    lines = out.splitlines()
    assert lines[0] == "REASON               USER      TIMESTAMP           NODELIST"
    assert len(lines) == 2
    assert re.fullmatch(rf"disk {{17}}admin {{5}}{STAMP} gpu-h100-\[0-3\],gpu-l40s-1", lines[1]), (
        lines
    )
    node = live.ok("scontrol", "show", "node", "gpu-h100-2")
    assert "   State=IDLE+DRAIN\n" in node
    assert re.search(rf"^   Reason=disk \[admin@{STAMP}\]$", node, re.M), node

    # The one node left takes the job; nothing lands on a drained node.
    first = live.sbatch("--gpus=1", "--wrap", "sleep 60")
    job = live.wait(first, "RUNNING")
    assert job["nodes"] == ["gpu-l40s-0"], job

    # Drained with a job on it: draining (drng), MIXED+DRAIN; drained ones: drain.
    live.ok("scontrol", "update", "nodename=gpu-l40s-0", "state=drain", "reason=nvlink errors")
    sinfo = live.ok("sinfo", "-p", "team-a")
    assert sinfo.splitlines()[1:] == [
        "team-a       up   infinite      5  drain gpu-h100-[0-3],gpu-l40s-1",
        "team-a       up   infinite      1   drng gpu-l40s-0",
    ]
    assert "   State=MIXED+DRAIN\n" in live.ok("scontrol", "show", "node", "gpu-l40s-0")
    long = live.ok("sinfo", "-N", "-l", "-p", "team-a").splitlines()
    assert long[1].split()[-1] == "REASON"
    row = next(line for line in long if line.startswith("gpu-l40s-0 "))
    assert row.split()[3] == "draining" and row.endswith("nvlink errors       "), row
    reasons = live.ok("sinfo", "-R").splitlines()
    # In node order, as Slurm lists them.
    assert reasons[1].startswith("disk                 admin     ")
    assert reasons[2].startswith("nvlink errors        admin     ")
    assert reasons[2].endswith(" gpu-l40s-0")

    # Every node drained: a new job waits.
    second = live.sbatch("--gpus=8", "--wrap", "sleep 30")
    time.sleep(1.5)
    assert live.job_state(second)["state"] == "PENDING"
    # As slurmctld describes it (squeue %R; scontrol with underscores).
    out = live.ok("squeue", "-h", "-j", str(second), "-o", "%R")
    assert out == (
        "(Nodes required for job are DOWN, DRAINED or reserved for jobs in higher "
        "priority partitions)\n"
    ), out
    shown = live.ok("scontrol", "show", "job", str(second))
    assert "Reason=Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in" in shown

    # RESUME returns a node to service: the waiting job starts there.
    code, out, err = live.run("scontrol", "update", "NodeName=gpu-h100-1", "State=RESUME")
    assert (code, out, err) == (0, "", "")
    job = live.wait(second, "RUNNING")
    assert job["nodes"] == ["gpu-h100-1"], job
    assert "gpu-h100-1" not in live.ok("sinfo", "-R")
    assert "   State=ALLOCATED\n" in live.ok("scontrol", "show", "node", "gpu-h100-1") or (
        "   State=MIXED\n" in live.ok("scontrol", "show", "node", "gpu-h100-1")
    )
    # UNDRAIN does the same; a node with no reason has no Reason line.
    live.ok("scontrol", "update", "NodeName=gpu-h100-[2-3]", "State=UNDRAIN")
    node = live.ok("scontrol", "show", "node", "gpu-h100-3")
    assert "   State=IDLE\n" in node and "Reason=" not in node


def test_down_requeues_the_jobs_of_the_node(resumed: Live) -> None:
    live = resumed
    job_id = live.sbatch("-w", "gpu-l40s-1", "--gpus=1", "--wrap", "sleep 60")
    assert live.wait(job_id, "RUNNING")["nodes"] == ["gpu-l40s-1"]
    live.ok("scontrol", "update", "NodeName=gpu-l40s-1", "State=DOWN", "Reason=dead gpu")
    job = live.wait(job_id, "PENDING")
    assert job["state"] == "PENDING", job
    reasons = live.ok("sinfo", "-R", "-l").splitlines()
    assert reasons[1] == "REASON               USER         TIMESTAMP           STATE  NODELIST"
    row = next(line for line in reasons if line.endswith(" gpu-l40s-1"))
    assert row.startswith("dead gpu             admin") and " down   " in row, row
    assert "   State=DOWN\n" in live.ok("scontrol", "show", "node", "gpu-l40s-1")
    # Back in service, the job runs again.
    live.ok("scontrol", "update", "NodeName=gpu-l40s-1", "State=RESUME")
    assert live.wait(job_id, "RUNNING")["nodes"] == ["gpu-l40s-1"]


def test_down_ends_a_no_requeue_job_node_fail(resumed: Live) -> None:
    """Slurm requeues only the jobs that may be requeued: one submitted with
    ``--no-requeue`` ends NODE_FAIL (Reason=NodeDown) when its node is taken DOWN; its
    neighbour without the flag is requeued."""
    live = resumed
    kept = live.sbatch("-w", "gpu-l40s-1", "--gpus=1", "--no-requeue", "--wrap", "sleep 60")
    other = live.sbatch("-w", "gpu-l40s-1", "--gpus=1", "--wrap", "sleep 60")
    assert live.wait(kept, "RUNNING")["nodes"] == ["gpu-l40s-1"]
    assert live.wait(other, "RUNNING")["nodes"] == ["gpu-l40s-1"]
    live.ok("scontrol", "update", "NodeName=gpu-l40s-1", "State=DOWN", "Reason=dead gpu")
    job = live.wait(kept, "NODE_FAIL")
    assert job["state"] == "NODE_FAIL", job
    assert live.wait(other, "PENDING")["state"] == "PENDING"
    shown = live.ok("scontrol", "show", "job", str(kept))
    assert "JobState=NODE_FAIL Reason=NodeDown" in shown, shown
    # Back in service: only the requeued one runs again.
    live.ok("scontrol", "update", "NodeName=gpu-l40s-1", "State=RESUME")
    assert live.wait(other, "RUNNING")["state"] == "RUNNING"
    assert live.job_state(kept)["state"] == "NODE_FAIL"


def test_a_job_that_names_a_drained_node_waits_with_req_node_not_avail(resumed: Live) -> None:
    """As slurmctld: a pending job whose ``--nodelist`` names a drained or down node is
    ``ReqNodeNotAvail, UnavailableNodes:...`` (squeue %R, and scontrol with underscores);
    one that names none is not."""
    live = resumed
    live.ok("scontrol", "update", "NodeName=gpu-h100-[0-1]", "State=DRAIN", "Reason=fan")
    pinned = live.sbatch("-w", "gpu-h100-[1-2]", "-N", "2", "--gpus-per-node=1", "--wrap", "true")
    free = live.sbatch("-w", "gpu-h100-3", "--gpus=1", "--hold", "--wrap", "true")
    time.sleep(1.0)
    assert live.job_state(pinned)["state"] == "PENDING"
    out = live.ok("squeue", "-h", "-o", "%i %R")
    assert f"{pinned} (ReqNodeNotAvail, UnavailableNodes:gpu-h100-1)\n" in out, out
    assert f"{free} (JobHeldUser)\n" in out, out
    shown = live.ok("scontrol", "show", "job", str(pinned))
    assert "Reason=ReqNodeNotAvail,_UnavailableNodes:gpu-h100-1 " in shown, shown
    # Back in service: it runs.
    live.ok("scontrol", "update", "NodeName=gpu-h100-1", "State=RESUME")
    assert live.wait(pinned, "COMPLETED")["state"] == "COMPLETED"


@pytest.mark.parametrize(
    "args",
    [
        ["nodename=gpu-h100-0", "state=drain", "reason=fan"],
        ["NODENAME=gpu-h100-0", "STATE=DRAIN", "REASON=fan"],
        ["nod=gpu-h100-0", "s=dra", "r=fan"],
        ["Node=gpu-h100-0", "St=Drain", "Rea=fan"],
    ],
    ids=["lower", "upper", "shortest", "mixed"],
)
def test_keys_and_states_in_any_case_and_abbreviated(resumed: Live, args: list[str]) -> None:
    """As Slurm 22.05 parses them: NodeName from 3 letters, State and Reason from 1, a
    state from 3 (``State=dra``), all in any case."""
    live = resumed
    code, out, err = live.run("scontrol", "update", *args)
    assert (code, out, err) == (0, "", "")
    lines = live.ok("sinfo", "-R", "-h").splitlines()
    assert len(lines) == 1 and lines[0].startswith("fan ") and lines[0].endswith(" gpu-h100-0")
    live.ok("scontrol", "update", "nodename=gpu-h100-0", "state=res")
    assert live.ok("sinfo", "-R", "-h") == ""


def test_the_reason_user_is_the_requesting_user(resumed: Live) -> None:
    live = resumed
    with live.client() as admin:
        ops = admin.create_token("ops", [], admin=True, name="ops-nodes")["token"]
    code, _, err = live.run(
        "scontrol", "update", "NodeName=gpu-h100-2", "State=DRAIN", "Reason=psu", token=ops
    )
    assert code == 0, err
    lines = live.ok("sinfo", "-R").splitlines()
    assert re.fullmatch(rf"psu {{18}}ops {{7}}{STAMP} gpu-h100-2", lines[1]), lines
    node = live.ok("scontrol", "show", "node", "gpu-h100-2")
    assert re.search(rf"^   Reason=psu \[ops@{STAMP}\]$", node, re.M), node


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["NodeName=gpu-h100-0", "State=DRAIN"],
            "You must specify a reason when DOWNING or DRAINING a node. Request denied\n",
            id="drain-without-reason",
        ),
        pytest.param(
            ["NodeName=gpu-h100-0", "State=DOWN", "Reason="],
            "You must specify a reason when DOWNING or DRAINING a node. Request denied\n",
            id="down-with-empty-reason",
        ),
        pytest.param(
            ["NodeName=gpu-h100-0", "State=BOGUS", "Reason=x"],
            "Invalid input: State=BOGUS\nRequest aborted\n"
            "Valid states are: NoResp DRAIN FAIL FUTURE RESUME POWER_DOWN POWER_UP UNDRAIN\n"
            "Not all states are valid given a node's prior state\n",
            id="bad-state",
        ),
        pytest.param(
            ["NodeName=gpu9", "State=DRAIN", "Reason=x"],
            "slurm_update error: Invalid node name specified\n",
            id="unknown-node",
        ),
        pytest.param(
            ["NodeName=gpu-h100-0,gpu9", "State=DRAIN", "Reason=x"],
            "slurm_update error: Invalid node name specified\n",
            id="one-unknown-node",
        ),
        pytest.param(
            ["NodeName=gpu-h100-[0-1", "State=DRAIN", "Reason=x"],
            "slurm_update error: Invalid node name specified\n",
            id="bad-hostlist",
        ),
        pytest.param(
            ["State=DRAIN", "Reason=x"],
            "No valid entity in update command\n"
            'Input line must include "NodeName", "PartitionName", "Reservation", "JobId", '
            'or "SlurmctldDebug"\n',
            id="no-entity",
        ),
        pytest.param(
            ["no=gpu-h100-0", "State=DRAIN", "Reason=x"],
            "No valid entity in update command\n"
            'Input line must include "NodeName", "PartitionName", "Reservation", "JobId", '
            'or "SlurmctldDebug"\n',
            id="node-name-too-short",
        ),
        pytest.param(
            ["NodeName=gpu-h100-0", "State=dr", "Reason=x"],
            "Invalid input: State=dr\nRequest aborted\n"
            "Valid states are: NoResp DRAIN FAIL FUTURE RESUME POWER_DOWN POWER_UP UNDRAIN\n"
            "Not all states are valid given a node's prior state\n",
            id="state-too-short",
        ),
        pytest.param(
            ["NodeName=gpu-h100-0", "State=RESUME"],
            "slurm_update error: Invalid node state specified\n",
            id="resume-a-node-in-service",
        ),
    ],
)
def test_bad_updates_get_slurms_message_and_change_nothing(
    live: Live, args: list[str], message: str
) -> None:
    code, out, err = live.run("scontrol", "update", *args)
    assert (code, out, err) == (1, "", message)
    assert live.ok("sinfo", "-R", "-h") == ""


def test_only_the_admin_drains(live: Live) -> None:
    with live.client() as admin:
        alice = admin.create_token("alice", ["team-a"], name="alice-nodes")["token"]
    code, out, err = live.run(
        "scontrol", "update", "NodeName=gpu-h100-0", "State=DRAIN", "Reason=x", token=alice
    )
    assert (code, out, err) == (1, "", "slurm_update error: Invalid user id\n")
    # Anyone may read the reasons.
    code, out, _ = live.run("sinfo", "-R", token=alice)
    assert (code, out) == (0, "REASON               USER      TIMESTAMP           NODELIST\n")


def test_a_cordoned_node_manifest_drains_with_a_reason(resumed: Live) -> None:
    live = resumed
    manifest = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "gpu-l40s-1",
            "labels": {
                "phalanx.io/flavor": "l40s",
                "kubernetes.io/hostname": "gpu-l40s-1",
                "topology.phalanx.io/block": "block-b",
                "topology.phalanx.io/rack": "rack-2",
            },
        },
        "spec": {"unschedulable": True},
        "status": {"capacity": {"nvidia.com/gpu": "4", "cpu": "48", "memory": "256Gi"}},
    }
    with live.client() as client:
        assert client.apply([manifest])[0]["outcome"] == "configured"
        # The same manifest again: the reason keeps its user and time.
        before = client.get_object("nodes", "gpu-l40s-1")["metadata"]["annotations"]
        assert client.apply([manifest])[0]["outcome"] == "unchanged"
        after = client.get_object("nodes", "gpu-l40s-1")["metadata"]["annotations"]
    assert before == after
    assert before["phalanx.io/reason"] == "unschedulable"
    assert before["phalanx.io/reason-user"] == "admin"
    lines = live.ok("sinfo", "-R").splitlines()
    assert re.fullmatch(rf"unschedulable {{8}}admin {{5}}{STAMP} gpu-l40s-1", lines[1]), lines


def test_a_drain_outlives_a_restart_with_the_same_configuration(tmp_path: Path) -> None:
    """As slurmctld keeps its nodes' states: ``phalanx up --config`` again does not put a
    drained node back in service (the nodes' manifests say nothing of a drain)."""
    state = tmp_path / "state"
    up = ["up", "-d", "--state-dir", str(state), "--port", "0", "--single-user"]
    for round_ in range(2):
        started = subprocess.run(
            [*PHALANX, *up, "--config", str(CLUSTER)], capture_output=True, text=True, timeout=120
        )
        assert started.returncode == 0, started.stderr
        try:
            live = Live(state)
            if round_ == 0:
                live.ok("scontrol", "update", "NodeName=gpu-h100-3", "State=DRAIN", "Reason=fan")
            before = live.ok("sinfo", "-R")
        finally:
            subprocess.run(
                [*PHALANX, "down", "--state-dir", str(state)], capture_output=True, timeout=90
            )
        if round_ == 0:
            first = before
    assert before == first
    assert re.fullmatch(
        rf"REASON +USER +TIMESTAMP +NODELIST\nfan {{18}}admin {{5}}{STAMP} gpu-h100-3\n", before
    ), before

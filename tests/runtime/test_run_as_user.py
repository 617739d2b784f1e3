"""A server running as root runs every job as its user's Unix account.

Real servers, real supervisors and two throwaway accounts made with ``useradd``
(removed with ``userdel -r`` at the end). Needs root; skipped otherwise.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from phalanx import errors
from phalanx.client import Client
from phalanx.runtime.accounts import SINGLE_USER_ENV
from phalanx.server import RunningServer, start_server

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: jobs change their Unix account"),
    pytest.mark.skipif(
        shutil.which("useradd") is None or shutil.which("userdel") is None,
        reason="needs useradd and userdel to make throwaway accounts",
    ),
]

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "cluster"


@dataclass
class Setup:
    work: Path
    """A folder every account can enter (the state dir and the planted files are in it)."""
    alice: str
    bob: str
    nobody: str
    """A phalanx user with no Unix account."""


@pytest.fixture(scope="module")
def setup() -> Iterator[Setup]:
    tag = secrets.token_hex(3)
    alice, bob = f"phx-{tag}a", f"phx-{tag}b"
    made: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="phx-run-as-", dir="/tmp"))
    work.chmod(0o755)
    try:
        for name in (alice, bob):
            subprocess.run(["useradd", "-m", "-U", name], check=True, capture_output=True)
            made.append(name)
        yield Setup(work, alice, bob, f"phx-{tag}-none")
    finally:
        for name in made:
            subprocess.run(["userdel", "-r", name], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


@contextmanager
def server(state: Path, *, env_single_user: bool = False, flag: bool = False) -> Iterator[Any]:
    """A server with the example cluster; PHALANX_SINGLE_USER as asked while it starts."""
    saved = os.environ.pop(SINGLE_USER_ENV, None)
    if env_single_user:
        os.environ[SINGLE_USER_ENV] = "1"
    try:
        running = start_server(state, port=0, configs=[CLUSTER], single_user=flag)
    finally:
        os.environ.pop(SINGLE_USER_ENV, None)
        if saved is not None:
            os.environ[SINGLE_USER_ENV] = saved
    try:
        yield running
    finally:
        running.stop()


def client_for(running: RunningServer, user: str) -> Client:
    with Client(running.url, running.admin_token, state_dir=running.state_dir) as admin:
        token = admin.create_token(user, ["team-a"], name=user)["token"]
    return Client(running.url, token, state_dir=running.state_dir)


def run(client: Client, command: list[str], **run_fields: Any) -> tuple[dict[str, Any], str]:
    submission = {
        "podSets": [{"name": "main", "count": 1, "requests": {"cpu": "1"}}],
        "run": {"command": command, "workingDir": "/tmp", **run_fields},
    }
    job = client.wait(client.submit(submission), timeout=30)
    try:
        output = "".join(client.logs(job["id"]))
    except errors.PhalanxError:
        output = ""
    return job, output


@pytest.fixture(scope="module")
def multi(setup: Setup) -> Iterator[RunningServer]:
    with server(setup.work / "state") as running:
        yield running


def test_the_server_says_whose_account_jobs_run_as(multi: RunningServer) -> None:
    assert multi.jobs_run_as.startswith("root's and the admin token's as root, every other")


def test_a_job_runs_as_its_users_account(setup: Setup, multi: RunningServer) -> None:
    entry = pwd.getpwnam(setup.alice)
    script = 'id -u; id -g; id -G; echo "$HOME $USER $LOGNAME"'
    with client_for(multi, setup.alice) as alice:
        job, output = run(alice, ["sh", "-c", script])
    assert job["state"] == "COMPLETED", job
    uid, gid, groups, names = output.splitlines()
    assert (int(uid), int(gid)) == (entry.pw_uid, entry.pw_gid)
    assert set(map(int, groups.split())) == set(os.getgrouplist(entry.pw_name, entry.pw_gid))
    assert names == f"{entry.pw_dir} {setup.alice} {setup.alice}"
    # The job's own files are the account's too.
    attempt = multi.plane.runtime.attempt_dir(job["id"], job.get("attempt") or 1)  # type: ignore[attr-defined]
    assert os.stat(attempt / "status.json").st_uid == entry.pw_uid


def test_a_job_cannot_write_through_another_accounts_symlink(
    setup: Setup, multi: RunningServer
) -> None:
    bob = pwd.getpwnam(setup.bob)
    sticky = setup.work / "sticky"
    sticky.mkdir(mode=0o777, exist_ok=True)
    sticky.chmod(0o1777)  # /tmp-like: anyone may plant a link
    precious = setup.work / "precious"
    precious.write_text("root's\n")
    bobs = setup.work / "bobs"
    bobs.write_text("bob's\n")
    os.chown(bobs, bob.pw_uid, bob.pw_gid)
    bobs.chmod(0o600)
    planted = {}
    for name, target in (("to-root", precious), ("to-bob", bobs), ("dir", setup.work)):
        link = sticky / name
        os.symlink(target, link)
        os.chown(link, bob.pw_uid, bob.pw_gid, follow_symlinks=False)
        planted[name] = link
    outputs = [
        str(planted["to-root"]),
        str(planted["to-bob"]),
        str(planted["dir"] / "precious"),  # through a linked folder
    ]
    with client_for(multi, setup.alice) as alice:
        for output in outputs:
            job, _ = run(alice, ["echo", "pwned"], output=output)
            assert job["state"] == "FAILED", (output, job)
            assert "cannot open output file" in job.get("message", ""), job
        # Nor by the job's own hand.
        job, _ = run(alice, ["sh", "-c", f"echo pwned >> {precious}"])
        assert job["state"] == "FAILED", job
    assert precious.read_text() == "root's\n"
    assert bobs.read_text() == "bob's\n"
    assert os.stat(precious).st_uid == 0


def test_the_api_does_not_read_another_file_for_a_jobs_output(
    setup: Setup, multi: RunningServer
) -> None:
    alice = pwd.getpwnam(setup.alice)
    own = setup.work / "alice-own"
    own.mkdir(exist_ok=True)
    os.chown(own, alice.pw_uid, alice.pw_gid)
    precious = setup.work / "precious-2"
    precious.write_text("root's\n")
    precious.chmod(0o600)
    out = own / "out.txt"
    # The job swaps its own output file for a link to a file only root may read.
    with client_for(multi, setup.alice) as client:
        job = client.wait(
            client.submit(
                {
                    "podSets": [{"name": "main", "count": 1, "requests": {"cpu": "1"}}],
                    "run": {
                        "command": ["sh", "-c", f"echo mine; ln -sf {precious} {out}"],
                        "workingDir": "/tmp",
                        "output": str(out),
                    },
                }
            ),
            timeout=30,
        )
        assert job["state"] == "COMPLETED", job
        assert out.is_symlink()
        with pytest.raises(errors.PhalanxError):
            "".join(client.logs(job["id"]))
    # Nor does the dashboard's output tail.
    import httpx

    with Client(multi.url, multi.admin_token, state_dir=multi.state_dir) as admin:
        token = admin.create_token(setup.alice, ["team-a"], name=f"{setup.alice}-web")["token"]
    with httpx.Client(base_url=multi.url) as web:
        assert web.post("/login", data={"token": token}).status_code == 303
        tail = web.get(f"/ui/jobs/{job['id']}/log")
        assert tail.status_code == 403 and "root's" not in tail.text


def test_a_job_of_an_account_is_cancelled(setup: Setup, multi: RunningServer) -> None:
    with client_for(multi, setup.alice) as alice:
        submission = {
            "podSets": [{"name": "main", "count": 1, "requests": {"cpu": "1"}}],
            "run": {"command": ["sleep", "60"], "workingDir": "/tmp", "killWait": 1},
        }
        job_id = alice.submit(submission)
        for job in alice.watch(job_id):
            if job["state"] == "RUNNING":
                break
        alice.cancel(job_id)
        job = alice.wait(job_id, timeout=15)
    assert job["state"] == "CANCELLED", job


def test_a_user_without_an_account_is_refused_at_submit(setup: Setup, multi: RunningServer) -> None:
    with client_for(multi, setup.nobody) as client, pytest.raises(errors.Forbidden) as caught:
        client.submit(
            {
                "podSets": [{"name": "main", "count": 1, "requests": {"cpu": "1"}}],
                "run": {"command": ["true"], "workingDir": "/tmp"},
            }
        )
    assert repr(setup.nobody) in caught.value.detail
    assert "has no Unix account" in caught.value.detail


@pytest.mark.parametrize("who", ["admin", "root"])
def test_roots_own_jobs_run_as_root(multi: RunningServer, who: str) -> None:
    """As under Slurm: the admin token's jobs, and a token for user root, run as root."""
    if who == "admin":
        client = Client(multi.url, multi.admin_token, state_dir=multi.state_dir)
        fields: dict[str, Any] = {"tenant": "team-a"}
    else:
        client = client_for(multi, "root")
        fields = {}
    with client:
        job_id = client.submit(
            {
                **fields,
                "podSets": [{"name": "main", "count": 1, "requests": {"cpu": "1"}}],
                "run": {"command": ["sh", "-c", "id -u; id -g"], "workingDir": "/tmp"},
            }
        )
        job = client.wait(job_id, timeout=30)
        output = "".join(client.logs(job_id))
    assert job["state"] == "COMPLETED", job
    assert output.split() == ["0", "0"]


def test_other_users_are_refused_where_they_cannot_enter_the_state_dir(setup: Setup) -> None:
    """A --state-dir under a folder other accounts cannot enter: the server still starts
    and runs root's jobs; a user's submission is refused naming the folder."""
    closed = Path(tempfile.mkdtemp(prefix="phx-closed-", dir="/tmp"))
    closed.chmod(0o700)
    try:
        with server(closed / "state") as running:
            assert str(closed) in running.jobs_run_as
            with client_for(running, setup.alice) as alice, pytest.raises(errors.Forbidden) as e:
                alice.submit({"podSets": [{"count": 1}], "run": {"command": ["true"]}})
            assert str(closed) in e.value.detail and "o+x" in e.value.detail
            with Client(running.url, running.admin_token) as admin:
                job = admin.wait(
                    admin.submit(
                        {
                            "tenant": "team-a",
                            "podSets": [{"count": 1}],
                            "run": {"command": ["true"]},
                        }
                    ),
                    timeout=30,
                )
            assert job["state"] == "COMPLETED", job
    finally:
        shutil.rmtree(closed, ignore_errors=True)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_single_user_runs_every_job_as_the_servers_user(setup: Setup, how: str) -> None:
    state = setup.work / f"single-{how}"
    with server(state, flag=how == "flag", env_single_user=how == "env") as running:
        assert "the server's own user" in running.jobs_run_as
        with client_for(running, setup.nobody) as nobody:
            job, output = run(nobody, ["id", "-u"])
    assert job["state"] == "COMPLETED", job
    assert output.strip() == str(os.geteuid())

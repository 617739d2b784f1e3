"""A real phalanx server on a free port for API and CLI tests, with the example cluster.

Shared by ``tests/api`` and ``tests/cli``: the admin, a team-a user (alice)
and a team-b user (bob), each with their own token.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from phalanx.client import Client
from phalanx.errors import PhalanxError

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster"


@dataclass
class Cluster:
    """The running server and a client per identity."""

    url: str
    admin_token: str
    alice_token: str
    bob_token: str
    state_dir: Path
    server: object

    def client(self, token: str | None = None) -> Client:
        return Client(self.url, token or self.admin_token, state_dir=self.state_dir)

    @property
    def admin(self) -> Client:
        return self.client(self.admin_token)

    @property
    def alice(self) -> Client:
        return self.client(self.alice_token)

    @property
    def bob(self) -> Client:
        return self.client(self.bob_token)


@contextmanager
def running_cluster(state_dir: Path) -> Iterator[Cluster]:
    from phalanx.server import start_server

    # alice and bob are phalanx users with no Unix accounts: every job runs as the
    # server's own user (tests/readme and tests/runtime/test_run_as_user.py run the
    # default, where each runs as its account).
    server = start_server(state_dir, port=0, configs=[CLUSTER], single_user=True)
    try:
        with Client(server.url, server.admin_token, state_dir=state_dir) as admin:
            alice = admin.create_token("alice", ["team-a"], name="alice")["token"]
            bob = admin.create_token("bob", ["team-b"], name="bob")["token"]
        yield Cluster(server.url, server.admin_token, alice, bob, state_dir, server)
    finally:
        _cancel_running(server.url, server.admin_token)
        server.stop()


def _cancel_running(url: str, token: str) -> None:
    """Cancel what still runs: supervisors outlive the server (as they must), and a
    test's long ticker would otherwise go on for minutes after its module."""
    with suppress(PhalanxError, OSError), Client(url, token) as admin:
        for running in list(admin.jobs(state="RUNNING", page_size=1000)):
            with suppress(PhalanxError):
                admin.cancel(running["id"])


def job(command: list[str], **fields: object) -> dict[str, object]:
    """A one-task submission running ``command`` (one CPU unless ``requests`` says otherwise)."""
    requests = fields.pop("requests", None) or {"cpu": "1"}
    pod_set: dict[str, object] = {"name": "main", "count": 1, "requests": requests}
    run: dict[str, object] = {"command": command, "workingDir": "/tmp"}
    for key in ("output", "error", "timeLimit", "env"):
        if key in fields:
            run[key] = fields.pop(key)
    return {"podSets": [pod_set], "run": run, **fields}

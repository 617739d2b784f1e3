"""Two ``phalanx up`` on one PostgreSQL and one state directory: one leads, the other
stands by, serves reads and forwards writes; when the leader is killed the standby takes
over within seconds and re-adopts the running jobs; a paused leader that wakes up is
fenced off. Real processes, a real PostgreSQL, real jobs: every job runs once."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from phalanx.control.spawn import ServerProcess, spawn_server
from tests.conftest import PgServer
from tests.reliability.server import Server
from tests.reliability.test_reliability import CLUSTER, jobs, nodes_yaml, wait_states

pytestmark = pytest.mark.timeout(300)

TAKEOVER_S = 5.0


def _spawn(state: Path, config: Path, database: str) -> ServerProcess:
    return spawn_server(state, ["--port", "0", "--config", str(config), "--database", database])


def _health(url: str) -> dict[str, Any]:
    try:
        r = httpx.get(f"{url}/healthz", timeout=2)
    except httpx.HTTPError:
        return {}
    return dict(r.json()) if r.status_code == 200 else {}


def _wait_role(url: str, role: str, timeout: float) -> float:
    """Seconds until the server at ``url`` has ``role``."""
    started = time.monotonic()
    while _health(url).get("role") != role:
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{url} is not {role} after {timeout} s: {_health(url)}")
        time.sleep(0.05)
    return time.monotonic() - started


def _job(work: Path, seconds: float) -> dict[str, Any]:
    """A job that appends one line per run to its own file: two runs, two lines."""
    return {
        "tenant": "team-a",
        "queue": "default",
        "podSets": [{"count": 1, "requests": {"nvidia.com/gpu": 1, "cpu": 1}}],
        "run": {
            "command": [
                "sh",
                "-c",
                f'echo "$PHALANX_JOB_ID" >> runs-$PHALANX_JOB_ID; sleep {seconds}',
            ],
            "workingDir": str(work),
            "output": str(work / "out-%j.log"),
            "killWait": 1,
        },
    }


def _submit(server: ServerProcess, body: dict[str, Any]) -> int:
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}, timeout=60
    ) as c:
        r = c.post("/api/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _each_ran_once(handle: Server, work: Path, ids: list[int]) -> None:
    runtime_jobs = handle.state / "runtime" / "jobs"
    with handle.client() as c:
        for job_id in ids:
            kinds = [e["kind"] for e in c.get(f"/api/v1/jobs/{job_id}/events").json()["items"]]
            assert kinds.count("Started") == 1 and kinds.count("Finished") == 1, (job_id, kinds)
            assert (work / f"runs-{job_id}").read_text() == f"{job_id}\n", job_id
            assert os.listdir(runtime_jobs / str(job_id)) == ["1"], job_id


@dataclass
class Pair:
    """Two servers on one PostgreSQL and one state directory: ``a`` leads, ``b`` stands by."""

    a: ServerProcess
    b: ServerProcess
    work: Path
    state: Path

    @property
    def hb(self) -> Server:
        return Server(self.b.proc, self.b.url, self.b.token, self.state)


@pytest.fixture
def pair(postgres_server: PgServer, tmp_path: Path) -> Iterator[Pair]:
    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER + nodes_yaml(5))
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    a = _spawn(state, config, postgres_server.url)
    try:
        b = _spawn(state, config, postgres_server.url)
    except BaseException:
        a.stop()
        raise
    yield Pair(a, b, work, state)
    with contextlib.suppress(ProcessLookupError):
        os.kill(a.proc.pid, signal.SIGCONT)  # if a test left it paused
    for server in (a, b):
        server.stop()


def test_a_standby_takes_over_from_a_killed_leader(pair: Pair) -> None:
    a, b, hb, work = pair.a, pair.b, pair.hb, pair.work
    assert _health(a.url)["role"] == "leader"
    assert _health(b.url) == {"status": "ok", "role": "standby", "leader": a.url}
    # Writes sent to the standby are forwarded to the leader; reads are its own. The
    # jobs run long enough to be seen running all at once on a loaded machine.
    ids = [_submit(b, _job(work, 8)) for _ in range(8)]
    ids += [_submit(a, _job(work, 0.2)) for _ in range(4)]
    wait_states(hb, ids[:8], {"RUNNING"}, timeout=60)
    with hb.client() as c:
        assert c.get("/api/v1/clusterqueues/main").status_code == 200  # forwarded
        listed = {j["id"] for j in jobs(hb)}
    assert set(ids) <= listed

    a.proc.kill()
    a.proc.wait(30)
    took = _wait_role(b.url, "leader", timeout=30)
    assert took < TAKEOVER_S, f"the standby took {took:.1f} s to lead"

    # The running jobs were re-adopted, not run again; new work goes on.
    ids += [_submit(b, _job(work, 0.2)) for _ in range(6)]
    wait_states(hb, ids, {"COMPLETED"}, timeout=120)
    _each_ran_once(hb, work, ids)


def test_a_paused_leader_is_replaced_and_fenced_off_when_it_wakes(pair: Pair) -> None:
    a, b, hb, work = pair.a, pair.b, pair.hb, pair.work
    answers: list[int] = []
    ids = [_submit(a, _job(work, 3)) for _ in range(4)]
    wait_states(hb, ids, {"RUNNING"}, timeout=60)
    os.kill(a.proc.pid, signal.SIGSTOP)

    def submit_to_paused() -> None:
        """A request the paused leader holds until it wakes: it must end either
        committed once (forwarded to the new leader) or refused, never twice."""
        with httpx.Client(
            base_url=a.url, headers={"Authorization": f"Bearer {a.token}"}, timeout=120
        ) as c:
            r = c.post("/api/v1/jobs", json=_job(work, 0.2))
        answers.append(r.status_code)
        if r.status_code == 201:
            ids.append(int(r.json()["id"]))
        else:
            assert r.status_code == 503, r.text

    pending = threading.Thread(target=submit_to_paused)
    pending.start()
    took = _wait_role(b.url, "leader", timeout=30)
    assert took < TAKEOVER_S + 1, f"the standby took {took:.1f} s to lead"
    ids += [_submit(b, _job(work, 0.2)) for _ in range(4)]

    os.kill(a.proc.pid, signal.SIGCONT)
    _wait_role(a.url, "standby", timeout=30)
    assert _health(a.url)["leader"] == b.url
    pending.join(60)
    assert len(answers) == 1
    assert _health(b.url)["role"] == "leader"
    wait_states(hb, ids, {"COMPLETED"}, timeout=120)
    _each_ran_once(hb, work, ids)
    log = (pair.state / "server.log").read_text()
    assert "another server leads now" in log or "lost the leader lease" in log

"""Crash the control plane again and again under load; check that every job ends once.

Starts a real ``phalanx up`` (SQLite store, local runtime, 8 virtual nodes of
4 GPUs), submits ``--jobs`` jobs in batches over the run — each a real
process that appends one line to its own output file, then sleeps a little
and exits with a code set by its index (0, or 3 for every seventh) — cancels
every twentieth a moment after submitting it, and meanwhile ``kill -9``-s the
server ``--kills`` times at random moments (seeded gaps of 1 s to ``jobs/100``
s), restarting it each time at once. When everything has ended it checks, for every job:

- it ended exactly once: one ``Started`` event, and its output file holds one
  line (no run was lost or repeated across the crashes);
- its state and exit code are right: ``COMPLETED`` with 0, ``FAILED`` with 3,
  or ``CANCELLED`` for a cancelled one that had not finished first;
- ``phalanx sacct`` says the same as the store (state and exit code);
- no job is missing and none appeared that was not submitted.

With ``--ha`` the store is a PostgreSQL of the run's own and two servers share it
(and the state directory): the one that leads is the one killed, the other must
take over (the time from the kill until it says it leads is measured), and the
killed one is restarted as the standby. Requests go to either server: a standby
forwards them to the leader. Without PostgreSQL (``make test-deps`` installs it) the
``--ha`` run is skipped, said on stderr, and the JSON says so.

Prints JSON (counts, kills, time, takeover times, problems found); exit status 1 on a
problem. ``tests/reliability/test_faults.py`` runs it small; ``make bench`` runs the
full size (2,000 jobs, 10 kills), and again with ``--ha``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from phalanx.control.spawn import ServerProcess, spawn_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script
from bench.shared import note
from bench.virtual_cluster import cluster_yaml

NODES = 8


def exit_code(index: int) -> int:
    return 3 if index % 7 == 0 else 0


def submission(index: int, work: Path) -> dict[str, Any]:
    script = (
        f"echo run >> {work}/job-$PHALANX_JOB_ID.txt; sleep 0.{index % 8}; exit {exit_code(index)}"
    )
    return {
        "tenant": "team-a",
        "name": f"chaos-{index}",
        "podSets": [{"count": 1, "requests": {"nvidia.com/gpu": 1, "cpu": 1}}],
        "run": {
            "command": ["sh", "-c", script],
            "workingDir": str(work),
            "output": str(work / "out-%j.log"),
            "killWait": 1,
        },
    }


class Chaos:
    """The server under test (with ``database``: the leader of two) and what was asked of it."""

    def __init__(self, state: Path, config: Path, database: str | None = None) -> None:
        self.state = state
        self.config = config
        self.database = database
        self.lock = threading.Lock()
        self.server: ServerProcess = self._start()
        self.standby: ServerProcess | None = self._start() if database else None
        self.index_of: dict[int, int] = {}
        self.cancelled: set[int] = set()
        self.kills = 0
        self.refused = 0
        self.takeovers: list[float] = []
        self.problems: list[str] = []

    def _start(self) -> ServerProcess:
        # --single-user: every job runs as this process's own user, whoever submits it
        # (as root the default runs a non-admin user's jobs as that Unix account).
        args = ["--port", "0", "--config", str(self.config), "--single-user"]
        if self.database:
            args += ["--database", self.database]
        return spawn_server(self.state, args, timeout=120)

    def servers(self) -> list[ServerProcess]:
        with self.lock:
            return [s for s in (self.server, self.standby) if s is not None]

    def client(self) -> httpx.Client:
        with self.lock:
            server = self.server
        return httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}, timeout=30
        )

    def crash_and_restart(self) -> None:
        if self.standby is not None:
            self._crash_leader()
            return
        with self.lock:
            self.server.proc.kill()
            self.server.proc.wait(timeout=30)
            self.kills += 1
            self.server = self._start()

    def _crash_leader(self) -> None:
        """Kill the leader; time the standby's takeover; restart the killed one as standby."""
        assert self.standby is not None
        leader, standby = self.server, self.standby
        if _role(standby.url) == "leader":
            leader, standby = standby, leader
        with self.lock:
            # Requests go to the survivor from now on.
            self.server, self.standby = standby, None
        leader.proc.kill()
        killed = time.monotonic()
        leader.proc.wait(timeout=30)
        self.kills += 1
        while _role(standby.url) != "leader":
            if time.monotonic() - killed > 60:
                self.problems.append(f"kill {self.kills}: no takeover within 60 s")
                break
            time.sleep(0.02)
        else:
            self.takeovers.append(round(time.monotonic() - killed, 3))
        restarted = self._start()
        with self.lock:
            self.standby = restarted

    def stop(self) -> None:
        for server in self.servers():
            server.proc.terminate()
            server.proc.wait(timeout=30)

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        """One request, retried across a crash; None if the server never answered.

        A submission that failed mid-request may or may not have been stored: the
        caller finds out by name afterwards, so nothing is counted twice or lost."""
        for _ in range(60):
            try:
                with self.client() as c:
                    return c.request(method, path, **kwargs)
            except httpx.HTTPError:
                self.refused += 1
                time.sleep(0.5)
        return None


def _role(url: str) -> str | None:
    try:
        return str(httpx.get(f"{url}/healthz", timeout=2).json().get("role"))
    except (httpx.HTTPError, ValueError):
        return None


def run(
    jobs: int,
    kills: int,
    seed: int,
    batch: int = 50,
    settle_s: float = 900,
    database: str | None = None,
) -> dict[str, Any]:
    max_gap = max(4.0, jobs / 100)  # spreads the kills over the run
    rng = random.Random(seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="phalanx-faults-") as tmp:
        root = Path(tmp)
        work = root / "work"
        work.mkdir()
        config = root / "cluster.yaml"
        config.write_text(cluster_yaml(NODES, gpus=4, cpus=48))
        chaos = Chaos(root / "state", config, database)

        def submit(indices: range) -> None:
            """One batch; after a crash mid-request, it is looked up by name before it
            is sent again (a batch is stored whole or not at all)."""
            body = {"jobs": [submission(i, work) for i in indices]}
            names = [f"chaos-{i}" for i in indices]
            for _ in range(20):
                try:
                    with chaos.client() as c:
                        r = c.post("/api/v1/jobs/batch", json=body)
                    if r.status_code == 201:
                        found = dict(zip(names, r.json()["ids"], strict=True))
                        break
                except httpx.HTTPError:
                    chaos.refused += 1
                r2 = chaos.call("GET", "/api/v1/jobs", params={"name": ",".join(names)})
                stored = {j["name"]: j["id"] for j in r2.json()["items"]} if r2 else {}
                if stored and len(stored) != len(names):
                    chaos.problems.append(
                        f"batch {names[0]}..: {len(stored)} of {len(names)} stored"
                    )
                if len(stored) == len(names):
                    found = stored
                    break
                time.sleep(0.5)
            else:
                chaos.problems.append(f"batch {names[0]}..: never stored")
                return
            for name, job_id in found.items():
                index = int(name.split("-", 1)[1])
                chaos.index_of[job_id] = index
                if index % 20 == 10:
                    chaos.call("DELETE", f"/api/v1/jobs/{job_id}")
                    chaos.cancelled.add(job_id)

        def submitter() -> None:
            for first in range(0, jobs, batch):
                submit(range(first, min(jobs, first + batch)))
                time.sleep(0.05)

        def killer() -> None:
            for _ in range(kills):
                time.sleep(rng.uniform(1.0, max_gap))
                chaos.crash_and_restart()

        threads = [threading.Thread(target=submitter), threading.Thread(target=killer)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        problems: list[str] = list(chaos.problems)
        final = _wait_all_ended(chaos, timeout=settle_s)
        problems += [
            f"job {j['id']} still {j['state']} {settle_s:g} s after the last submission"
            for j in final
            if j["state"] not in ("COMPLETED", "FAILED", "CANCELLED")
        ]
        for job in final:
            if job["id"] not in chaos.index_of:
                problems.append(f"job {job['id']} ({job.get('name')}): not one this run submitted")
        by_index: dict[int, list[int]] = {}
        for job_id, index in chaos.index_of.items():
            by_index.setdefault(index, []).append(job_id)
        missing = sorted(set(range(jobs)) - set(by_index))
        problems += [
            f"index {i} stored as jobs {ids}" for i, ids in by_index.items() if len(ids) > 1
        ]
        problems += [f"index {i} never stored" for i in missing]
        problems += _check_jobs(chaos, final, work)
        problems += _check_sacct(chaos, final)
        chaos.stop()
    takeovers = sorted(chaos.takeovers)
    return {
        "ha": database is not None,
        "takeover_s": (
            {
                "each": chaos.takeovers,
                "median": takeovers[len(takeovers) // 2],
                "max": takeovers[-1],
            }
            if takeovers
            else None
        ),
        "jobs_asked": jobs,
        "jobs_stored": len(final),
        "kills": chaos.kills,
        "requests_retried": chaos.refused,
        "cancelled": len(chaos.cancelled),
        "states": _count(j["state"] for j in final),
        "seconds": round(time.monotonic() - started, 1),
        "problems": problems[:50],
        "problem_count": len(problems),
    }


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def _all_jobs(chaos: Chaos) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cont: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 5000}
        if cont:
            params["continue"] = cont
        r = chaos.call("GET", "/api/v1/jobs", params=params)
        if r is None:
            raise RuntimeError("the server does not answer")
        page = r.json()
        out.extend(page["items"])
        cont = page.get("continue")
        if not cont:
            return out


def _wait_all_ended(chaos: Chaos, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        every = _all_jobs(chaos)
        if all(j["state"] in ("COMPLETED", "FAILED", "CANCELLED") for j in every):
            return every
        if time.monotonic() > deadline:
            return every
        time.sleep(1.0)


def _check_jobs(chaos: Chaos, final: list[dict[str, Any]], work: Path) -> list[str]:
    problems: list[str] = []
    for job in final:
        job_id, state = job["id"], job["state"]
        index = chaos.index_of.get(job_id)
        if index is None:
            continue
        r = chaos.call("GET", f"/api/v1/jobs/{job_id}/events")
        kinds = [e["kind"] for e in r.json()["items"]] if r is not None else []
        starts = kinds.count("Started")
        ran = work / f"job-{job_id}.txt"
        lines = ran.read_text().count("run\n") if ran.exists() else 0
        if state == "CANCELLED" and job_id in chaos.cancelled:
            if starts > 1 or lines > 1:
                problems.append(f"job {job_id}: cancelled but started {starts}x, ran {lines}x")
            continue
        if starts != 1 or lines != 1:
            problems.append(f"job {job_id}: {state}, started {starts}x, ran {lines}x: {kinds}")
            continue
        want_state = "FAILED" if exit_code(index) else "COMPLETED"
        if state != want_state or job.get("exit_code") != exit_code(index):
            problems.append(
                f"job {job_id}: {state} exit {job.get('exit_code')}, "
                f"expected {want_state} exit {exit_code(index)}"
            )
    return problems


def _check_sacct(chaos: Chaos, final: list[dict[str, Any]]) -> list[str]:
    with chaos.lock:
        server = chaos.server
    env = {**os.environ, "PHALANX_URL": server.url, "PHALANX_TOKEN": server.token}
    done = subprocess.run(
        [
            *(sys.executable, "-m", "phalanx.cli.main", "sacct", "-a", "-P", "-n"),
            *("-S", "2000-01-01", "-o", "JobID,State,ExitCode"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if done.returncode != 0:
        return [f"sacct failed: {done.stderr.strip()[:300]}"]
    seen: dict[int, tuple[str, str]] = {}
    for line in done.stdout.splitlines():
        job, state, code = line.split("|")
        if job.isdigit():
            seen[int(job)] = (state.split()[0], code)
    problems = []
    for job in final:
        got = seen.get(job["id"])
        code = job.get("exit_code")
        want = (job["state"], f"{code if code is not None else 0}:{job.get('signal') or 0}")
        if got is None:
            problems.append(f"sacct: job {job['id']} missing")
        elif got[0] != want[0] or got[1].split(":")[0] != want[1].split(":")[0]:
            problems.append(f"sacct: job {job['id']} is {got}, the store says {want}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--ha",
        action="store_true",
        help="two servers on a PostgreSQL of the run's own; the leader is the one killed",
    )
    parser.add_argument(
        "--database", help="with --ha: this PostgreSQL URL instead of one started for the run"
    )
    args = parser.parse_args(argv)
    if args.ha and not args.database:
        import pytest
        from tests.conftest import _postgres

        try:
            for server in _postgres(durable=True):
                report = run(args.jobs, args.kills, args.seed, database=server.url)
                break
        except pytest.skip.Exception as exc:  # no PostgreSQL here (make test-deps installs it)
            note(f"skipping the HA run: {exc.msg}")
            print(json.dumps({"benchmark": "faults", "ha": True, "skipped": exc.msg}, indent=2))
            return 0
    else:
        report = run(args.jobs, args.kills, args.seed, database=args.database)
    report.update(python=platform.python_version(), platform=platform.platform())
    print(json.dumps(report, indent=2))
    return 1 if report["problem_count"] else 0


if __name__ == "__main__":
    raise SystemExit(main())

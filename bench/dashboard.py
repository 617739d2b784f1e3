"""Dashboard speed: the Jobs page with 100,000 jobs in the store; prints JSON.

Fills a fresh SQLite store with ``--jobs`` jobs (held, so the engine keeps
them pending; four tenants, a mix of GPU counts and names), starts the server
on it (no-op runtime, the example cluster), signs in and requests the Jobs
page's first page as it opens (newest first), sorted by GPUs, filtered by
state and tenant, and searched by name, ``--runs`` times each. Reports the
server time of each (the ``Server-Timing`` header: routing, queries and
rendering, not the network) as median and p95, and the time to fill and
recover the store. The target: the first page in < 300 ms server time.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from phalanx.model import JobSubmission
from phalanx.store import NewJob, Store

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "examples" / "cluster"
TENANTS = ("team-a", "team-b", "team-c", "team-d")
QUERIES = {
    "first_page": "/jobs",
    "sorted_by_gpus": "/jobs?sort=gpus&desc=1",
    "pending_of_one_tenant": "/jobs?state=PENDING&tenant=team-b",
    "search_by_name": "/jobs?q=train-77",
    "live_refresh_fragment": "/ui/jobs/rows?sort=id&desc=1",
}


def fill(state: Path, count: int) -> float:
    started = time.perf_counter()
    store = Store.open(state_dir=state)
    try:
        batch: list[NewJob] = []
        for i in range(count):
            tenant = TENANTS[i % len(TENANTS)]
            gpus = (1, 2, 4, 8, 16, 64)[i % 6]
            sub = JobSubmission.model_validate(
                {
                    "name": f"train-{i}",
                    "tenant": tenant,
                    "podSets": [
                        {"name": "main", "count": 1, "requests": {"nvidia.com/gpu": str(gpus)}}
                    ],
                    "run": {"command": ["true"], "workingDir": "/tmp"},
                }
            )
            batch.append(
                NewJob(
                    name=f"train-{i}",
                    tenant=tenant,
                    user=f"user{i % 40}",
                    queue="default",
                    cluster_queue=None,
                    priority_class=None,
                    priority=None,
                    gpus=gpus,
                    submission=sub.to_dict(),
                    submit_time=1.7e9 + i,
                    hold=True,
                )
            )
            if len(batch) == 10_000:
                with store.begin() as tx:
                    tx.insert_jobs(batch)
                batch = []
        if batch:
            with store.begin() as tx:
                tx.insert_jobs(batch)
    finally:
        store.close()
    return time.perf_counter() - started


def server_ms(response: httpx.Response) -> float:
    timing = response.headers["server-timing"]
    return float(timing.split("dur=")[1].split(",")[0])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    from phalanx.server import start_server

    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        fill_s = fill(state, args.jobs)
        started = time.perf_counter()
        server = start_server(state, port=0, configs=[CLUSTER], runtime="noop")
        recover_s = time.perf_counter() - started
        results: dict[str, dict[str, float]] = {}
        try:
            with httpx.Client(base_url=server.url, timeout=60) as h:
                login = h.post("/login", data={"token": server.admin_token})
                if login.status_code != 303:
                    sys.stderr.write(f"sign-in failed: {login.status_code}\n")
                    return 1
                for name, path in QUERIES.items():
                    times = []
                    for _ in range(args.runs):
                        r = h.get(path)
                        r.raise_for_status()
                        times.append(server_ms(r))
                    times.sort()
                    results[name] = {
                        "median_ms": round(statistics.median(times), 1),
                        "p95_ms": round(times[min(len(times) - 1, int(0.95 * len(times)))], 1),
                    }
        finally:
            server.stop()
    print(
        json.dumps(
            {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "jobs_in_store": args.jobs,
                "fill_s": round(fill_s, 1),
                "server_start_s": round(recover_s, 1),
                "runs": args.runs,
                "server_time": results,
                "target_first_page_ms": 300,
                "ok": results["first_page"]["p95_ms"] < 300,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

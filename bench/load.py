"""The control plane under load: 100,000 pending jobs, 16 submitters, then a soak; prints JSON.

Starts a real ``phalanx up --runtime noop`` (jobs are timers: the scheduler and
the control plane alone are measured) on 64 virtual nodes of 8 GPUs, then:

1. **Fill**: 16 concurrent submitters send ``--jobs`` jobs (1 or 8 GPUs, 60 s
   runs each, far more than the cluster holds), in batches of 100, while a
   reader pages through ``GET /api/v1/jobs`` (500 per page) and ``GET
   /api/v1/jobs?state=PENDING`` and times every page.
2. **Soak** for ``--soak`` seconds: every second, submit 20 short jobs (they
   complete in 1 s) and cancel 10 pending ones, while reading pages. The
   server's resident memory (``VmRSS``) is sampled every 10 s; the first
   sample is taken once the soak is warm (after a tenth of it).

Reports the submission rate, list-page latency (median, p99) in both phases,
the engine's mean cycle time from ``/metrics``, and
the memory growth over the soak. Targets: list p99 < 100 ms per page, memory
growth < 10 %.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from phalanx.control.spawn import spawn_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script
from bench.virtual_cluster import cluster_yaml

NODES = 64


def job(gpus: int, seconds: float) -> dict[str, Any]:
    return {
        "tenant": "team-a",
        "podSets": [{"count": 1, "requests": {"nvidia.com/gpu": gpus, "cpu": 1}}],
        "run": {"command": ["sleep", f"{seconds:g}"], "workingDir": "/tmp"},
    }


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _stats(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "pages": len(ordered),
        "median_ms": round(statistics.median(ordered), 1),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1),
        "max_ms": round(ordered[-1], 1),
    }


class Reader(threading.Thread):
    """Pages through the job list until stopped, timing each page."""

    def __init__(self, url: str, token: str) -> None:
        super().__init__(daemon=True)
        self.url, self.token = url, token
        self.times: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=60) as c:
            while not self.stop.is_set():
                cont: str | None = None
                for params in ({"limit": 500}, {"limit": 500, "state": "PENDING"}):
                    for _ in range(4):  # a few pages deep
                        query = dict(params, **({"continue": cont} if cont else {}))
                        started = time.perf_counter()
                        r = c.get("/api/v1/jobs", params=query)
                        self.times.append((time.perf_counter() - started) * 1000)
                        cont = r.json().get("continue")
                        if not cont or self.stop.is_set():
                            break
                    cont = None
                time.sleep(0.05)


def cycle_seconds(url: str, token: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {token}"}).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("phalanx_scheduling_cycle_duration_seconds_sum"):
            out["sum"] = float(line.split()[-1])
        elif line.startswith("phalanx_scheduling_cycle_duration_seconds_count"):
            out["count"] = float(line.split()[-1])
    if out.get("count"):
        out["mean_ms"] = round(1000 * out["sum"] / out["count"], 3)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--submitters", type=int, default=16)
    parser.add_argument("--soak", type=float, default=1800.0, help="seconds")
    args = parser.parse_args(argv)
    rng = random.Random(1)
    with tempfile.TemporaryDirectory(prefix="phalanx-load-") as tmp:
        config = Path(tmp) / "cluster.yaml"
        config.write_text(cluster_yaml(NODES, gpus=8, cpus=96))
        server = spawn_server(
            Path(tmp) / "state",
            ["--port", "0", "--config", str(config), "--runtime", "noop"],
            timeout=120,
        )
        headers = {"Authorization": f"Bearer {server.token}"}
        report: dict[str, Any] = {
            "jobs": args.jobs,
            "submitters": args.submitters,
            "nodes": NODES,
            "gpus": NODES * 8,
        }
        try:
            reader = Reader(server.url, server.token)
            reader.start()
            per = args.jobs // args.submitters
            errors: list[str] = []

            def submitter(n: int) -> None:
                with httpx.Client(base_url=server.url, headers=headers, timeout=120) as c:
                    for first in range(0, per, 100):
                        body = {
                            "jobs": [
                                job(8 if (first + i) % 10 == 0 else 1, 60)
                                for i in range(min(100, per - first))
                            ]
                        }
                        r = c.post("/api/v1/jobs/batch", json=body)
                        if r.status_code != 201:
                            errors.append(f"{r.status_code} {r.text[:200]}")
                            return

            started = time.perf_counter()
            threads = [
                threading.Thread(target=submitter, args=(n,)) for n in range(args.submitters)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            fill_s = time.perf_counter() - started
            reader.stop.set()
            reader.join()
            report["fill"] = {
                "seconds": round(fill_s, 1),
                "jobs_per_s": round(per * args.submitters / fill_s),
                "errors": errors[:5],
                "list_pages": _stats(reader.times),
            }
            report["fill"]["rss_mb"] = round(rss_mb(server.proc.pid), 1)
            report["cycle_after_fill"] = cycle_seconds(server.url, server.token)

            # Soak: submit, cancel and complete continuously.
            reader = Reader(server.url, server.token)
            reader.start()
            samples: list[tuple[float, float]] = []
            warm = args.soak / 10
            soak_start = time.monotonic()
            submitted = cancelled = 0
            with httpx.Client(base_url=server.url, headers=headers, timeout=120) as c:
                next_sample = 0.0
                while (elapsed := time.monotonic() - soak_start) < args.soak:
                    r = c.post("/api/v1/jobs/batch", json={"jobs": [job(1, 1)] * 20})
                    if r.status_code == 201:
                        submitted += 20
                    page = c.get("/api/v1/jobs", params={"state": "PENDING", "limit": 50}).json()
                    for item in rng.sample(page["items"], min(10, len(page["items"]))):
                        if c.delete(f"/api/v1/jobs/{item['id']}").status_code == 200:
                            cancelled += 1
                    if elapsed >= next_sample:
                        samples.append((round(elapsed, 1), round(rss_mb(server.proc.pid), 1)))
                        next_sample += 10
                    time.sleep(max(0.0, 1.0 - (time.monotonic() - soak_start - elapsed)))
            reader.stop.set()
            reader.join()
            warm_rss = next((m for t, m in samples if t >= warm), samples[0][1] if samples else 0)
            end_rss = samples[-1][1] if samples else 0
            report["soak"] = {
                "seconds": args.soak,
                "submitted": submitted,
                "cancelled": cancelled,
                "list_pages": _stats(reader.times),
                "rss_warm_mb": warm_rss,
                "rss_end_mb": end_rss,
                "rss_growth": round((end_rss - warm_rss) / warm_rss, 4) if warm_rss else None,
                "rss_samples": samples[:: max(1, len(samples) // 20)],
            }
            report["cycle_after_soak"] = cycle_seconds(server.url, server.token)
        finally:
            server.proc.terminate()
            server.proc.wait(timeout=60)
    report["python"] = platform.python_version()
    report["platform"] = platform.platform()
    report["ok"] = {
        "list_p99_fill": report["fill"]["list_pages"].get("p99_ms", 1e9) < 100,
        "list_p99_soak": report["soak"]["list_pages"].get("p99_ms", 1e9) < 100,
        "rss_growth": (report["soak"]["rss_growth"] or 0) < 0.10,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

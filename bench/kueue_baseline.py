"""Kueue's scheduler-performance baseline (``test/performance/scheduler``, ``configs/baseline``).

The same objects, workload mix and metrics as Kueue's harness, run through a live
``phalanx up --preset kueue --runtime noop`` (SQLite store, HTTP API):

- ResourceFlavor ``rf``; 5 cohorts x 6 ClusterQueues, each with cpu nominalQuota 20,
  borrowingLimit 100, preemption reclaimWithinCohort Any / withinClusterQueue
  LowerPriority, and a LocalQueue in its own namespace; 10 nodes x 1000 cpu, so that
  quota, never node capacity, is what binds.
- Per ClusterQueue 350 small (1 cpu, 200 ms, priority 50, one every 100 ms), 100
  medium (5 cpu, 500 ms, priority 100, every 500 ms) and 50 large workloads (20 cpu,
  1 s, priority 200, every 1.2 s): 15,000 in all. Each tick's workloads go in one
  ``POST /api/v1/jobs/batch``. The noop runtime runs nothing: a job's command is
  ``sleep <runtime>``, and it completes that long after it starts; an evicted job
  ends at once, as in Kueue's harness.

From the API's job records (millisecond timestamps) it reports the wall time (first
creation to last finish), the ClusterQueues' usage (cpu-seconds used x 100 /
(nominal x wall), averaged over the ClusterQueues), the average time to admission per
class (creation to the start of the first attempt: the noop runtime starts an
attempt when the control plane launches it, right after the admission commits), a
lower bound on the wall time from the arrivals and the work, and the ratios to Kueue's
published calibrated means. ``--scale F`` multiplies the workload counts. Prints
one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from phalanx import Client  # noqa: E402
from phalanx.control.spawn import spawn_server  # noqa: E402
from phalanx.errors import PhalanxError  # noqa: E402

COHORTS = 5
QUEUES_PER_COHORT = 6
NOMINAL_CPU = 20
BORROWING_LIMIT_CPU = 100
NODES = 10
NODE_CPU = 1000


@dataclass(frozen=True)
class WorkloadClass:
    name: str
    count: int
    """Per ClusterQueue, at scale 1."""
    cpu: int
    runtime_ms: int
    priority: int
    interval_ms: int


CLASSES = (
    WorkloadClass("small", 350, 1, 200, 50, 100),
    WorkloadClass("medium", 100, 5, 500, 100, 500),
    WorkloadClass("large", 50, 20, 1000, 200, 1200),
)

KUEUE_WALL_S = 351.116
KUEUE_CQ_USAGE_PERCENT = 55.9
KUEUE_ADMISSION_S = {"small": 215.468, "medium": 76.768, "large": 16.501}
"""Kueue's calibrated means for ``configs/baseline`` (wall, ClusterQueue usage, average
time to admission per class), from the comments of its rangespec."""


def cq_name(cohort: int, queue: int) -> str:
    return f"cohort{cohort}-cq{queue}"


def namespace(cohort: int, queue: int) -> str:
    return f"ns-{cohort}-{queue}"


def cluster_manifests() -> str:
    docs = [
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: rf}\n",
    ]
    for c in range(COHORTS):
        for q in range(QUEUES_PER_COHORT):
            docs.append(
                f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {cq_name(c, q)}}}
spec:
  cohortName: cohort{c}
  namespaceSelector: {{}}
  preemption:
    reclaimWithinCohort: Any
    withinClusterQueue: LowerPriority
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: rf
      resources:
      - {{name: cpu, nominalQuota: {NOMINAL_CPU}, borrowingLimit: {BORROWING_LIMIT_CPU}}}
"""
            )
            docs.append(
                f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: lq, namespace: {namespace(c, q)}}}
spec: {{clusterQueue: {cq_name(c, q)}}}
"""
            )
    for n in range(NODES):
        docs.append(
            f"""apiVersion: v1
kind: Node
metadata: {{name: node{n}}}
status:
  capacity: {{cpu: "{NODE_CPU}", memory: 4000Gi}}
"""
        )
    return "---\n".join(docs)


@dataclass(frozen=True)
class Planned:
    """One workload of the schedule."""

    offset_s: float
    cohort: int
    queue: int
    cls: WorkloadClass
    index: int

    def submission(self) -> dict[str, Any]:
        return {
            "name": f"{self.cls.name}-{self.cohort}-{self.queue}-{self.index}",
            "tenant": namespace(self.cohort, self.queue),
            "queue": "lq",
            "priority": self.cls.priority,
            "labels": {"bench.phalanx.io/class": self.cls.name},
            "podSets": [{"count": 1, "requests": {"cpu": self.cls.cpu}}],
            "run": {"command": ["sleep", f"{self.cls.runtime_ms / 1000:g}"]},
        }


def schedule(scale: float) -> list[list[Planned]]:
    """The workloads grouped by creation tick, in time order (Kueue's generator shape)."""
    by_offset: dict[int, list[Planned]] = defaultdict(list)
    for c in range(COHORTS):
        for q in range(QUEUES_PER_COHORT):
            for cls in CLASSES:
                for i in range(max(1, round(cls.count * scale))):
                    offset_ms = i * cls.interval_ms
                    by_offset[offset_ms].append(Planned(offset_ms / 1000, c, q, cls, i))
    return [by_offset[k] for k in sorted(by_offset)]


# ---------------------------------------------------------------------- the server


def start_phalanx(
    state: Path, heads_per_cycle: str | None
) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    config = state / "cluster.yaml"
    config.write_text(cluster_manifests())
    args = ["--port", "0", "--config", str(config), "--preset", "kueue", "--runtime", "noop"]
    if heads_per_cycle is not None:
        args += ["--heads-per-cycle", heads_per_cycle]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    try:
        server = spawn_server(state, args, env=env)
    except PhalanxError as exc:
        raise SystemExit(exc.detail) from None
    return server.proc, {"url": server.url, "token": server.token}


def stop_phalanx(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------------- the run


def submit_on_schedule(
    url: str, token: str, ticks: list[list[Planned]], lags: list[float]
) -> list[int]:
    """Submit each tick's workloads at its offset from the first; the ids in order."""
    ids: list[int] = []
    with Client(url, token) as client:
        start = time.monotonic()
        for tick in ticks:
            delay = start + tick[0].offset_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            lags.append(time.monotonic() - start - tick[0].offset_s)
            ids.extend(client.submit_many([p.submission() for p in tick]))
    return ids


_UNFINISHED = ["PENDING", "ADMITTED", "RUNNING", "COMPLETING"]


def wait_until_finished(client: Client, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not list(client.jobs(state=_UNFINISHED, limit=1)):
            return True
        time.sleep(0.25)
    return False


def _epoch(stamp: str | None) -> float | None:
    if stamp is None:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass
class Record:
    id: int
    cls: str
    cluster_queue: str
    cohort: str
    cpu: int
    runtime_s: float
    created: float
    admitted: float | None
    finished: float | None
    state: str
    attempts: int
    busy_s: float
    """Seconds its attempts held quota (every attempt, evicted ones too)."""
    evictions: int = 0
    evicted_s: float = 0.0
    """Seconds of the attempts that were evicted (work lost to preemption)."""


def _intervals(events: list[dict[str, Any]]) -> Iterator[tuple[float, float]]:
    """(start, end) of each attempt, from a job's events (Started .. Requeued/Finished)."""
    start: float | None = None
    for event in events:
        when = _epoch(event.get("time"))
        if when is None:
            continue
        if event["kind"] == "Started":
            start = when
        elif event["kind"] in ("Requeued", "Finished", "Cancelled") and start is not None:
            yield start, when
            start = None


def collect(client: Client, ids: list[int], cq_cohort: dict[str, str]) -> list[Record]:
    by_class = {c.name: c for c in CLASSES}
    wanted = set(ids)
    records: list[Record] = []
    for job in client.jobs(page_size=5000):
        if job["id"] not in wanted:
            continue
        cls = by_class[job["name"].split("-", 1)[0]]
        created = _epoch(job["submit_time"])
        assert created is not None
        started, ended = _epoch(job["start_time"]), _epoch(job["end_time"])
        attempts = int(job.get("attempt") or 0)
        busy = (ended - started) if started is not None and ended is not None else 0.0
        admitted = started
        evictions, evicted_s = 0, 0.0
        if attempts > 1:
            # Evicted and admitted again: the first admission and every attempt's time.
            spans = list(_intervals(client.events(job["id"])))
            if spans:
                admitted = spans[0][0]
                busy = sum(e - s for s, e in spans)
                evictions = len(spans) - 1
                evicted_s = sum(e - s for s, e in spans[:-1])
        cq = job.get("cluster_queue") or ""
        records.append(
            Record(
                id=job["id"],
                cls=cls.name,
                cluster_queue=cq,
                cohort=cq_cohort.get(cq, ""),
                cpu=cls.cpu,
                runtime_s=cls.runtime_ms / 1000,
                created=created,
                admitted=admitted,
                finished=ended,
                state=job["state"],
                attempts=attempts,
                busy_s=busy,
                evictions=evictions,
                evicted_s=evicted_s,
            )
        )
    return records


def lower_bound(records: list[Record], capacity_by_cohort: dict[str, int]) -> float:
    """The least wall time any scheduler could reach for these arrivals and this work.

    Per cohort (cohorts share nothing, and a cohort never holds more than its
    ClusterQueues' nominal quota), with t0 the first creation overall: the work
    created at or after time t cannot start before t, so the run lasts at least
    t - t0 + (cpu-seconds created from t on) / capacity, for every creation time t;
    and at least until each workload's creation plus its runtime.
    """
    t0 = min(r.created for r in records)
    bound = max(r.created + r.runtime_s for r in records) - t0
    by_cohort: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_cohort[r.cohort].append(r)
    for cohort, rs in by_cohort.items():
        rs.sort(key=lambda r: r.created)
        remaining = sum(r.cpu * r.runtime_s for r in rs)
        for r in rs:
            bound = max(bound, r.created - t0 + remaining / capacity_by_cohort[cohort])
            remaining -= r.cpu * r.runtime_s
    return bound


def ideal_priority_scheduler(
    records: list[Record], capacity_by_cohort: dict[str, int]
) -> dict[str, Any]:
    """A reference: a scheduler with no overhead and no preemption, on the same arrivals.

    Per cohort, the ClusterQueues' quota is one pool (each may borrow up to the whole
    cohort's nominal quota here); whenever a workload arrives or finishes, pending
    workloads are admitted in priority order (then creation order), skipping those that
    do not fit (Kueue's BestEffortFIFO). It shows what the priorities alone cost the
    low-priority classes' time to admission, whatever the scheduler's speed.
    """
    import heapq

    waits: dict[str, list[float]] = defaultdict(list)
    t0 = min(r.created for r in records)
    end = t0
    by_cohort: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_cohort[r.cohort].append(r)
    priority = {c.name: c.priority for c in CLASSES}
    for cohort, rs in by_cohort.items():
        arrivals = sorted(rs, key=lambda r: (r.created, r.id))
        free = capacity_by_cohort[cohort]
        running: list[tuple[float, int]] = []  # (end, cpu)
        pending: list[Record] = []
        i, now = 0, arrivals[0].created
        while i < len(arrivals) or pending or running:
            while i < len(arrivals) and arrivals[i].created <= now:
                pending.append(arrivals[i])
                i += 1
            while running and running[0][0] <= now:
                free += heapq.heappop(running)[1]
            pending.sort(key=lambda r: (-priority[r.cls], r.created, r.id))
            left: list[Record] = []
            for r in pending:
                if r.cpu <= free:
                    free -= r.cpu
                    heapq.heappush(running, (now + r.runtime_s, r.cpu))
                    waits[r.cls].append(now - r.created)
                    end = max(end, now + r.runtime_s)
                else:
                    left.append(r)
            pending = left
            upcoming = [t for t in (running[0][0] if running else None,) if t is not None]
            if i < len(arrivals):
                upcoming.append(arrivals[i].created)
            if not upcoming:
                break
            now = min(upcoming)
    return {
        "wall_s": round(end - t0, 3),
        "avg_time_to_admission_s": {
            c.name: round(sum(waits[c.name]) / len(waits[c.name]), 3) if waits[c.name] else None
            for c in CLASSES
        },
    }


def report(records: list[Record], lags: list[float], submit_s: float) -> dict[str, Any]:
    t0 = min(r.created for r in records)
    finished = [r for r in records if r.finished is not None]
    t_end = max((r.finished for r in finished if r.finished is not None), default=t0)
    wall = t_end - t0
    cq_cohort = {
        cq_name(c, q): f"cohort{c}" for c in range(COHORTS) for q in range(QUEUES_PER_COHORT)
    }
    used: dict[str, float] = {cq: 0.0 for cq in cq_cohort}
    for r in records:
        if r.cluster_queue in used:
            used[r.cluster_queue] += r.cpu * r.busy_s
    usage = {
        cq: 100 * cpu_s / (NOMINAL_CPU * wall) if wall > 0 else 0.0 for cq, cpu_s in used.items()
    }
    capacity = {f"cohort{c}": NOMINAL_CPU * QUEUES_PER_COHORT for c in range(COHORTS)}
    bound = lower_bound(records, capacity)
    capacity_total = sum(capacity.values())
    admission: dict[str, float] = {}
    for cls in CLASSES:
        waits = [r.admitted - r.created for r in records if r.cls == cls.name and r.admitted]
        admission[cls.name] = round(sum(waits) / len(waits), 3) if waits else float("nan")
    states: dict[str, int] = defaultdict(int)
    for r in records:
        states[r.state] += 1
    avg_usage = sum(usage.values()) / len(usage)
    kueue_adm = KUEUE_ADMISSION_S
    result: dict[str, Any] = {
        "workloads": len(records),
        "finished": len(finished),
        "states": dict(states),
        "evicted_workloads": sum(1 for r in records if r.attempts > 1),
        "evictions": sum(r.evictions for r in records),
        "evicted_cpu_percent": round(
            100 * sum(r.cpu * r.evicted_s for r in records) / (capacity_total * wall), 2
        )
        if wall > 0
        else None,
        "wall_s": round(wall, 3),
        "lower_bound_s": round(bound, 3),
        "ideal_priority_scheduler": ideal_priority_scheduler(records, capacity),
        "wall_over_lower_bound": round(wall / bound, 3) if bound > 0 else None,
        "cq_usage_percent": {
            "avg": round(avg_usage, 2),
            "min": round(min(usage.values()), 2),
            "max": round(max(usage.values()), 2),
        },
        "avg_time_to_admission_s": admission,
        "admissions_per_s": round(len(finished) / wall, 1) if wall > 0 else None,
        "submit": {
            "batches": len(lags),
            "span_s": round(submit_s, 3),
            "max_lag_s": round(max(lags), 3) if lags else 0.0,
        },
        "vs_kueue": {
            "wall_speedup": round(KUEUE_WALL_S / wall, 2) if wall > 0 else None,
            "cq_usage_ratio": round(avg_usage / KUEUE_CQ_USAGE_PERCENT, 2),
            "admission_speedup": {
                name: round(kueue_adm[name] / v, 1) if v and v > 0 else None
                for name, v in admission.items()
            },
        },
    }
    result["goal"] = {
        "wall_within_10_percent_of_lower_bound": bool(bound > 0 and wall <= 1.1 * bound),
        "admission_10x_lower_than_kueue": all(
            v == v and v * 10 <= kueue_adm[name] for name, v in admission.items()
        ),
    }
    return result


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def loop_metrics(text: str) -> dict[str, Any]:
    """The control loop's own counters: scheduling cycles and store commits."""
    cycles = _metric(text, "phalanx_scheduling_cycle_duration_seconds_count")
    cycle_s = _metric(text, "phalanx_scheduling_cycle_duration_seconds_sum")
    commits = _metric(text, "phalanx_store_commit_duration_seconds_count")
    commit_s = _metric(text, "phalanx_store_commit_duration_seconds_sum")
    return {
        "cycles": int(cycles) if cycles == cycles else None,
        "cycle_ms_avg": round(1000 * cycle_s / cycles, 2) if cycles else None,
        "cycle_s_total": round(cycle_s, 2),
        "commits": int(commits) if commits == commits else None,
        "commit_ms_avg": round(1000 * commit_s / commits, 2) if commits else None,
    }


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    with contextlib.suppress(OSError):
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in lscpu.splitlines():
            if line.startswith("Model name:"):
                info["cpu"] = line.split(":", 1)[1].strip()
    with contextlib.suppress(OSError):
        info["commit"] = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    return info


def run(
    scale: float, timeout_s: float, keep_state: bool, heads_per_cycle: str | None
) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="phalanx-kueue-bench-"))
    proc, info = start_phalanx(state, heads_per_cycle)
    try:
        url, token = info["url"], info["token"]
        ticks = schedule(scale)
        lags: list[float] = []
        ids: list[int] = []
        errors: list[BaseException] = []

        def submitter() -> None:
            try:
                ids.extend(submit_on_schedule(url, token, ticks, lags))
            except BaseException as exc:  # reported below
                errors.append(exc)

        started = time.monotonic()
        thread = threading.Thread(target=submitter, name="submitter")
        thread.start()
        thread.join()
        submit_s = time.monotonic() - started
        if errors:
            raise errors[0]
        with Client(url, token) as client:
            done = wait_until_finished(client, timeout_s)
            cq_cohort = {
                cq_name(c, q): f"cohort{c}"
                for c in range(COHORTS)
                for q in range(QUEUES_PER_COHORT)
            }
            records = collect(client, ids, cq_cohort)
            metrics = client.metrics()
        result = report(records, lags, submit_s)
        result["control_loop"] = loop_metrics(metrics)
        result["all_finished"] = done and result["finished"] == len(ids)
        return result
    finally:
        stop_phalanx(proc)
        if keep_state:
            sys.stderr.write(f"state directory kept: {state}\n")
        else:
            shutil.rmtree(state, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the workload counts")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the end")
    parser.add_argument("--keep-state", action="store_true", help="keep the state directory")
    parser.add_argument(
        "--heads-per-cycle",
        metavar="N|all",
        help="phalanx up --heads-per-cycle (default: the kueue preset's 1, Kueue's cycle)",
    )
    parser.add_argument("--json", action="store_true", help="(output is always JSON)")
    args = parser.parse_args()
    if not 0 < args.scale <= 1:
        parser.error("--scale: expected a number in (0, 1]")
    out: dict[str, Any] = {
        "benchmark": "kueue-baseline",
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "scale": args.scale,
        "machine": machine(),
        "kueue": {
            "wall_s": KUEUE_WALL_S,
            "cq_usage_percent": KUEUE_CQ_USAGE_PERCENT,
            "avg_time_to_admission_s": KUEUE_ADMISSION_S,
        },
        "heads_per_cycle": args.heads_per_cycle or "1 (the kueue preset)",
        "phalanx": run(args.scale, args.timeout, args.keep_state, args.heads_per_cycle),
    }
    print(json.dumps(out, indent=2))
    return 0 if out["phalanx"]["all_finished"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Control-plane benchmark: durable submissions/s, submit-to-running latency, CLI start-up.

Starts a real ``phalanx up`` (SQLite store, local runtime) in a temporary state
directory and measures, with 16 concurrent clients:

- submissions/s through ``POST /api/v1/jobs`` (one job per request) and
  ``POST /api/v1/jobs/batch`` (100 jobs per request), into a held ClusterQueue
  so the numbers are the write path alone;
- for 1,000 trivial jobs (``true``) that really run: submit-to-RUNNING latency
  p50/p99 (RUNNING: the job's process has started), submit-to-admitted p50/p99 (the
  allocation, which is what Slurm's start time and squeue's ``R`` are) and
  first-submit-to-all-complete time;
- then, on the idle server, 25 jobs submitted one at a time (each waited for):
  submit-to-RUNNING as the submitting client sees it (``one_job_*``), what one user
  submitting one job feels, apart from the backlog a burst of 1,000 builds;
- the cold start of ``phalanx get jobs`` (the console script) and of ``squeue`` (the
  shim ``phalanx shims`` writes), and their ratio to a bare ``python -I -S -c pass``.

With ``--slurm`` the same run starts the real Slurm of ``../shared/peers/slurm``
(4 nodes x 64 CPUs x 8 GPUs, like the phalanx cluster here) and measures
``sbatch --wrap true`` for the same 1,000 jobs (16 concurrent submitters),
their submit-to-start latency (sacct) and time to drain, the same one-at-a-time
latency (``sbatch`` until ``squeue`` no longer shows the job PENDING) and ``squeue`` start-up,
so the ratios come from one run on one machine; without the peer (or when it does
not start) that part is skipped, said on stderr, and the JSON says so. With the peer,
``goals`` gives each end-to-end goal as its value, its target and whether this run
met it: first submit to all complete at most 0.4x Slurm's time, submit-to-RUNNING p50
at most 50 ms, single-job submits/s at least 20x ``sbatch``'s. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # run as a script

from bench.shared import slurm_off, start_slurm, stop_slurm  # noqa: E402

from phalanx import Client  # noqa: E402
from phalanx.control.spawn import spawn_server  # noqa: E402
from phalanx.errors import PhalanxError  # noqa: E402

CLUSTER = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
spec: {nodeLabels: {phalanx.io/flavor: h100}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: gpu}
spec:
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: cpu, nominalQuota: 256}
      - {name: memory, nominalQuota: 2000Gi}
      - {name: nvidia.com/gpu, nominalQuota: 32}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: held}
spec: {stopPolicy: Hold}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: default, namespace: bench}
spec: {clusterQueue: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: held, namespace: bench}
spec: {clusterQueue: held}
""" + "".join(
    f"""---
apiVersion: v1
kind: Node
metadata:
  name: gpu{i}
  labels: {{phalanx.io/flavor: h100}}
status:
  capacity: {{nvidia.com/gpu: "8", cpu: "64", memory: 500Gi}}
"""
    for i in range(1, 5)
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def share(total: int, clients: int, i: int) -> int:
    """Client ``i``'s part of ``total`` jobs (the parts add up to ``total``)."""
    return total // clients + (1 if i < total % clients else 0)


def concurrently(clients: int, work: Callable[[int], None]) -> float:
    """Run ``work(i)`` in ``clients`` threads; the wall time."""
    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started


def submission(queue: str, work: Path) -> dict[str, Any]:
    return {
        "tenant": "bench",
        "queue": queue,
        "podSets": [{"count": 1, "requests": {"cpu": 1, "memory": "1Gi"}}],
        "run": {"command": ["true"], "workingDir": str(work), "output": "/dev/null"},
    }


# ---------------------------------------------------------------------- phalanx


def start_phalanx(state: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    config = state / "cluster.yaml"
    state.mkdir(parents=True, exist_ok=True)
    config.write_text(CLUSTER)
    # --single-user: every job runs as this process's own user, whoever submits it (as
    # root the default runs a non-admin user's jobs as the Unix account of that name).
    try:
        server = spawn_server(state, ["--port", "0", "--config", str(config), "--single-user"])
    except PhalanxError as exc:
        raise SystemExit(exc.detail) from None
    return server.proc, {"url": server.url, "token": server.token}


def bench_phalanx(args: argparse.Namespace) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="phalanx-bench-"))
    work = state / "work"
    work.mkdir()
    proc, info = start_phalanx(state)
    result: dict[str, Any] = {}
    try:
        url, token = info["url"], info["token"]
        clients = args.clients

        # Single-job endpoint.
        def single(i: int) -> None:
            with Client(url, token) as c:
                body = submission("held", work)
                for _ in range(share(args.single, clients, i)):
                    c.submit(body)

        wall = concurrently(clients, single)
        result["single_submit_jobs_per_s"] = round(args.single / wall, 1)

        # Batch endpoint, 100 jobs per request.
        batches = args.batch // (clients * 100)

        def batch(_: int) -> None:
            with Client(url, token) as c:
                body = [submission("held", work)] * 100
                for _ in range(batches):
                    c.submit_many(body)

        wall = concurrently(clients, batch)
        result["batch_submit_jobs_per_s"] = round(batches * clients * 100 / wall, 1)

        # 1,000 trivial jobs that run.
        ids: list[int] = []
        lock = threading.Lock()

        def runner(i: int) -> None:
            mine = []
            with Client(url, token) as c:
                body = submission("default", work)
                for _ in range(share(args.run_jobs, clients, i)):
                    mine.append(c.submit(body))
            with lock:
                ids.extend(mine)

        started = time.time()
        concurrently(clients, runner)
        wanted = set(ids)
        with Client(url, token) as c:
            while True:
                done = [j for j in c.jobs(queue="default", page_size=5000) if j["id"] in wanted]
                if len(done) == len(wanted) and all(j["end_time"] for j in done):
                    break
                if time.time() - started > 600:
                    raise SystemExit("phalanx jobs did not finish in 10 minutes")
                time.sleep(0.1)
        ended = max(_epoch(j["end_time"]) for j in done)
        never = [j for j in done if j["start_time"] is None]
        if never:
            result["run_jobs_never_started"] = {str(j["id"]): j["state"] for j in never[:20]}
            print(f"jobs that ended without starting: {never[:3]}", file=sys.stderr)
        to_running = [
            _epoch(j["start_time"]) - _epoch(j["submit_time"]) for j in done if j["start_time"]
        ]
        result["run_jobs"] = len(done)
        result["run_jobs_completed"] = sum(j["state"] == "COMPLETED" for j in done)
        result["submit_to_running_p50_s"] = round(percentile(to_running, 50), 4)
        result["submit_to_running_p99_s"] = round(percentile(to_running, 99), 4)
        # Slurm's start (squeue's R, sacct's Start) is the allocation; phalanx's RUNNING is
        # its process started. The allocation here is the Admitted event's time.
        with Client(url, token) as c:
            to_admitted = []
            for j in done:
                admitted = [e for e in c.events(j["id"]) if e["kind"] == "Admitted"]
                if admitted:
                    to_admitted.append(_epoch(admitted[0]["time"]) - _epoch(j["submit_time"]))
        result["submit_to_admitted_p50_s"] = round(percentile(to_admitted, 50), 4)
        result["submit_to_admitted_p99_s"] = round(percentile(to_admitted, 99), 4)
        result["first_submit_to_all_complete_s"] = round(ended - started, 2)

        # One job at a time on the now idle server: what one user submitting one job sees.
        with Client(url, token) as c:
            body = submission("default", work)
            walls, stamps = [], []
            for _ in range(args.single_jobs):
                began = time.perf_counter()
                job_id = c.submit(body)
                while (job := c.get(job_id))["start_time"] is None:
                    time.sleep(0.002)
                walls.append(time.perf_counter() - began)
                stamps.append(_epoch(job["start_time"]) - _epoch(job["submit_time"]))
                c.wait(job_id, interval=0.01)
        result["one_job_submit_to_running_p50_s"] = round(percentile(walls, 50), 4)
        result["one_job_submit_to_running_server_p50_s"] = round(percentile(stamps, 50), 4)

        # CLI cold start, as users run it: the phalanx console script, and squeue through
        # the shim `phalanx shims` writes; against the bare interpreter the shims run.
        env = {**os.environ, "PHALANX_URL": url, "PHALANX_TOKEN": token}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as users run it: bytecode caches used
        phalanx = str(Path(sys.executable).parent / "phalanx")
        shims = state / "shims"
        subprocess.run([phalanx, "shims", str(shims)], env=env, check=True, capture_output=True)
        result["cli_get_jobs_ms_median"] = time_command(
            [phalanx, "get", "jobs", "--limit", "20"], env
        )
        result["cli_squeue_ms_median"] = time_command([str(shims / "squeue")], env)
        result["python_floor_ms_median"] = time_command(
            [sys.executable, "-I", "-S", "-c", "pass"], env
        )
        floor = result["python_floor_ms_median"]
        result["cli_get_jobs_over_floor"] = round(result["cli_get_jobs_ms_median"] / floor, 2)
        result["cli_squeue_over_floor"] = round(result["cli_squeue_ms_median"] / floor, 2)
        # squeue lists the whole queue: here the submit phases' held jobs too (bench/cli.py
        # measures it on a queue of 50).
        listed = subprocess.run(
            [str(shims / "squeue"), "-h"], env=env, capture_output=True, check=True, text=True
        )
        result["cli_squeue_jobs_listed"] = len(listed.stdout.splitlines())
        metrics = Client(url, token).metrics()
        result["scheduling_cycles"] = _metric(metrics, "phalanx_scheduling_cycles_total")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(state, ignore_errors=True)
    return result


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def time_command(cmd: list[str], env: dict[str, str], repeats: int = 11) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
        )
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 1)


# ---------------------------------------------------------------------- Slurm


SBATCH_TRUE = ("sbatch", "--parsable", "-c", "1", "--mem=1G", "-o", "/dev/null", "--wrap", "true")


def bench_slurm(args: argparse.Namespace) -> dict[str, Any]:
    not_started = start_slurm()
    if not_started is not None:
        return not_started
    work = Path(tempfile.mkdtemp(prefix="slurm-bench-"))
    result: dict[str, Any] = {}
    try:
        ids: list[str] = []
        lock = threading.Lock()

        def submitter(i: int) -> None:
            mine = []
            for _ in range(share(args.run_jobs, args.clients, i)):
                out = subprocess.run(
                    [
                        "sbatch",
                        "--parsable",
                        "-c",
                        "1",
                        "--mem=1G",
                        "-o",
                        "/dev/null",
                        "-D",
                        str(work),
                        "--wrap",
                        "true",
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                mine.append(out.stdout.strip().split(";")[0])
            with lock:
                ids.extend(mine)

        started = time.time()
        wall = concurrently(args.clients, submitter)
        result["sbatch_jobs_per_s"] = round(args.run_jobs / wall, 1)
        while True:
            out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
            if not out.stdout.strip():
                break
            if time.time() - started > 900:
                raise SystemExit("Slurm jobs did not finish in 15 minutes")
            time.sleep(0.2)
        result["first_submit_to_all_complete_s"] = round(time.time() - started, 2)
        walls = []
        for _ in range(args.single_jobs):
            began = time.perf_counter()
            job_id = subprocess.run(
                [*SBATCH_TRUE, "-D", str(work)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            while True:
                state = subprocess.run(
                    ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True
                ).stdout.strip()
                if state != "PENDING":
                    break
                time.sleep(0.002)
            walls.append(time.perf_counter() - began)
            while subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True).stdout:
                time.sleep(0.05)
        result["one_job_submit_to_running_p50_s"] = round(percentile(walls, 50), 4)
        time.sleep(2)  # let slurmdbd catch up
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-j", ",".join(ids), "-o", "JobID,Submit,Start,End,State"],
            capture_output=True,
            text=True,
        )
        to_start = []
        for line in out.stdout.splitlines():
            _, submit, start, _, _ = line.split("|")
            if submit != "Unknown" and start != "Unknown":
                to_start.append(
                    (datetime.fromisoformat(start) - datetime.fromisoformat(submit)).total_seconds()
                )
        result["run_jobs"] = len(ids)
        result["submit_to_running_p50_s"] = percentile(to_start, 50)
        result["submit_to_running_p99_s"] = percentile(to_start, 99)
        result["note"] = "sacct times have one-second resolution"
        result["cli_squeue_ms_median"] = time_command(["squeue"], dict(os.environ))
        listed = subprocess.run(["squeue", "-h"], capture_output=True, check=True, text=True)
        result["cli_squeue_jobs_listed"] = len(listed.stdout.splitlines())
    finally:
        stop_slurm()
        shutil.rmtree(work, ignore_errors=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--single", type=int, default=4000, help="jobs via the single-job endpoint")
    parser.add_argument("--batch", type=int, default=32000, help="jobs via the batch endpoint")
    parser.add_argument("--run-jobs", type=int, default=1000, help="trivial jobs that really run")
    parser.add_argument(
        "--single-jobs", type=int, default=25, help="jobs submitted one at a time, idle server"
    )
    parser.add_argument("--slurm", action="store_true", help="also measure the real Slurm peer")
    parser.add_argument("--json", action="store_true", help="(output is always JSON)")
    args = parser.parse_args()
    out: dict[str, Any] = {
        "benchmark": "api",
        "date": datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "clients": args.clients,
        # The machine's load when the run began and ended: the two sides run one after
        # the other, so a busy neighbour shows here.
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "phalanx": bench_phalanx(args),
    }
    if not args.slurm:
        out["slurm"] = slurm_off("not asked for (--slurm)")
    else:
        out["slurm"] = bench_slurm(args)
        p, s = out["phalanx"], out["slurm"]
        if "sbatch_jobs_per_s" in s:
            out["goals"] = goals(p, s)
            out["ratios"] = {
                "single_submit_vs_sbatch": round(
                    p["single_submit_jobs_per_s"] / s["sbatch_jobs_per_s"], 2
                ),
                "batch_submit_vs_sbatch": round(
                    p["batch_submit_jobs_per_s"] / s["sbatch_jobs_per_s"], 2
                ),
                "slurm_over_phalanx_time_to_complete": round(
                    s["first_submit_to_all_complete_s"] / p["first_submit_to_all_complete_s"], 2
                ),
            }
    out["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))
    return 0


GOAL_COMPLETE_VS_SLURM = 0.4
"""1,000 trivial jobs, first submit to all complete: at most this fraction of Slurm's time."""
GOAL_SUBMIT_TO_RUNNING_P50_S = 0.05
GOAL_SUBMITS_VS_SLURM = 20.0
"""Single-job submits per second (16 clients): at least this many times ``sbatch``'s."""


def goals(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    """The end-to-end goals, each as its measured value, its target and whether it is met,
    all from this run."""
    complete = p["first_submit_to_all_complete_s"] / s["first_submit_to_all_complete_s"]
    submits = p["single_submit_jobs_per_s"] / s["sbatch_jobs_per_s"]
    p50 = p["submit_to_running_p50_s"]
    one = p["one_job_submit_to_running_p50_s"]
    return {
        "ratio_complete_vs_slurm": round(complete, 3),
        "ratio_complete_vs_slurm_max": GOAL_COMPLETE_VS_SLURM,
        "ratio_complete_vs_slurm_met": complete <= GOAL_COMPLETE_VS_SLURM,
        "submit_to_running_p50_s": p50,
        "submit_to_running_p50_s_max": GOAL_SUBMIT_TO_RUNNING_P50_S,
        "submit_to_running_p50_s_met": p50 <= GOAL_SUBMIT_TO_RUNNING_P50_S,
        "one_job_submit_to_running_p50_s": one,
        "one_job_submit_to_running_p50_s_max": GOAL_SUBMIT_TO_RUNNING_P50_S,
        "one_job_submit_to_running_p50_s_met": one <= GOAL_SUBMIT_TO_RUNNING_P50_S,
        "one_job_vs_slurm": round(one / s["one_job_submit_to_running_p50_s"], 3),
        "submits_ratio_vs_slurm": round(submits, 2),
        "submits_ratio_vs_slurm_min": GOAL_SUBMITS_VS_SLURM,
        "submits_ratio_vs_slurm_met": submits >= GOAL_SUBMITS_VS_SLURM,
    }


if __name__ == "__main__":
    raise SystemExit(main())

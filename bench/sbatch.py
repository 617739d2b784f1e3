"""sbatch benchmark: a 1,000-task job array and 1,000 separate jobs, phalanx and Slurm in one run.

Both sides get the same cluster (4 nodes x 64 CPUs x 8 GPUs, one partition
``gpu``, phalanx's made by ``phalanx import`` of the equivalent slurm.conf) and
the same work, submitted with each system's own ``sbatch``:

- ``sbatch --array=0-999 --wrap true``: the time the one command takes, and
  from it to every task completed;
- 1,000 x ``sbatch --wrap true`` from 16 concurrent submitters: submissions
  per second, and first submit to every job completed.

Slurm is the real one of ``../shared/peers/slurm`` (started and stopped here;
``--no-slurm``, or without the peer or when it does not start, that part is
skipped, said on stderr, and the JSON says so). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
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
BIN = Path(sys.executable).parent

sys.path.insert(0, str(ROOT))  # run as a script
from bench.shared import slurm_off, start_slurm, stop_slurm  # noqa: E402

SLURM_CONF = """\
ClusterName=phalanx
NodeName=gpu[1-4] CPUs=64 RealMemory=512000 Gres=gpu:h100:8 State=UNKNOWN
PartitionName=gpu Nodes=gpu[1-4] Default=YES MaxTime=INFINITE DefaultTime=01:00:00 State=UP
"""


def concurrently(clients: int, total: int, work: Callable[[], None]) -> float:
    """``total`` calls of ``work`` spread over ``clients`` threads; the wall time."""
    counts = [total // clients + (1 if i < total % clients else 0) for i in range(clients)]
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            for _ in range(n):
                work()
        except BaseException as exc:  # surfaced below: a failed submit voids the figures
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in counts]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"{len(errors)} submitter(s) failed: {errors[0]!r}")
    return time.perf_counter() - started


class System:
    """One scheduler's sbatch and a way to tell when its queue is empty."""

    name = ""

    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self.work = work
        self.env = env

    def sbatch(self, *args: str) -> None:
        done = subprocess.run(
            [*self.sbatch_command(), "--parsable", "-o", "/dev/null", "-c", "1", *args],
            cwd=self.work,
            env=self.env,
            check=False,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{self.name} sbatch failed: {done.stderr.strip()[-500:]}")

    def sbatch_command(self) -> list[str]:
        raise NotImplementedError

    def queue_empty(self) -> bool:
        raise NotImplementedError

    def drain(self, started: float, timeout: float = 900) -> float:
        while not self.queue_empty():
            if time.perf_counter() - started > timeout:
                raise SystemExit(f"{self.name}: jobs did not finish in {timeout} s")
            time.sleep(0.1)
        return time.perf_counter() - started


class Phalanx(System):
    name = "phalanx"

    def sbatch_command(self) -> list[str]:
        return [str(BIN / "phalanx"), "sbatch"]

    def queue_empty(self) -> bool:
        out = subprocess.run(
            [str(BIN / "phalanx"), "squeue", "-h", "-o", "%i"],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return not out.stdout.strip()


class Slurm(System):
    name = "slurm"

    def sbatch_command(self) -> list[str]:
        return ["sbatch"]

    def queue_empty(self) -> bool:
        out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
        return not out.stdout.strip()


def measure(system: System, jobs: int, clients: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    started = time.perf_counter()
    system.sbatch(f"--array=0-{jobs - 1}", "--wrap", "true")
    result["array_submit_s"] = round(time.perf_counter() - started, 3)
    result["array_submit_to_all_complete_s"] = round(system.drain(started), 2)
    started = time.perf_counter()
    wall = concurrently(clients, jobs, lambda: system.sbatch("--wrap", "true"))
    result["separate_sbatch_per_s"] = round(jobs / wall, 1)
    result["separate_submit_to_all_complete_s"] = round(system.drain(started), 2)
    return result


def run_phalanx(jobs: int, clients: int) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="phalanx-bench-"))
    (state / "slurm.conf").write_text(SLURM_CONF)
    log = open(state / "server.log", "wb")  # noqa: SIM115 - the child owns it
    # --single-user: every job runs as this process's own user, whoever submits it (as
    # root the default runs a non-admin user's jobs as the Unix account of that name).
    proc = subprocess.Popen(
        [str(BIN / "phalanx"), "up", "--state-dir", str(state), "--port", "0", "--single-user"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not (state / "client.json").exists():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit((state / "server.log").read_text())
            time.sleep(0.05)
        time.sleep(0.5)
        info = json.loads((state / "client.json").read_text())
        env = {**os.environ, "PHALANX_URL": info["url"], "PHALANX_TOKEN": info["token"]}
        subprocess.run(
            [str(BIN / "phalanx"), "import", str(state / "slurm.conf")],
            env=env,
            check=True,
            capture_output=True,
        )
        return measure(Phalanx(state, env), jobs, clients)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(state, ignore_errors=True)


def run_slurm(jobs: int, clients: int) -> dict[str, Any]:
    not_started = start_slurm()
    if not_started is not None:
        return not_started
    work = Path(tempfile.mkdtemp(prefix="slurm-bench-"))
    try:
        return measure(Slurm(work, dict(os.environ)), jobs, clients)
    finally:
        stop_slurm()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--no-slurm", action="store_true")
    args = parser.parse_args()
    out: dict[str, Any] = {
        "benchmark": "sbatch",
        "date": datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs",
        "jobs": args.jobs,
        "clients": args.clients,
        "phalanx": run_phalanx(args.jobs, args.clients),
    }
    if args.no_slurm:
        out["slurm"] = slurm_off("--no-slurm")
    else:
        out["slurm"] = run_slurm(args.jobs, args.clients)
        p, s = out["phalanx"], out["slurm"]
        if "array_submit_s" in s:
            out["slurm_over_phalanx"] = {
                key: round(s[key] / p[key], 2)
                for key in (
                    "array_submit_s",
                    "array_submit_to_all_complete_s",
                    "separate_submit_to_all_complete_s",
                )
            } | {
                "phalanx_over_slurm_sbatch_per_s": round(
                    p["separate_sbatch_per_s"] / s["separate_sbatch_per_s"], 2
                )
            }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""CLI benchmark: how long the commands people type take, against a bare interpreter.

Starts a real ``phalanx up`` (SQLite store, local runtime) in a temporary state
directory with 50 jobs in the queue (25 running ``sleep``, 25 pending in a held
ClusterQueue), writes the Slurm shims with ``phalanx shims`` as a user would,
then alternates rounds of whole-process runs:

- the floor: ``python -I -S -c pass`` with the interpreter the shims use;
- ``squeue``, ``sinfo``, ``sacct``, ``scontrol show job N`` through the shims;
- ``phalanx get jobs`` through the ``phalanx`` console script.

Each command's median wall time and its ratio to the floor's median (same run,
same machine, rounds interleaved so load affects every command alike) are
printed as one JSON object; the goal is a ratio of at most 2.5 for each.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # run as a script

from bench.api import start_phalanx  # noqa: E402

from phalanx import Client  # noqa: E402
from phalanx.errors import PhalanxError  # noqa: E402

GOAL = 2.5
"""Each command's median at most this many times the bare interpreter's."""


def submission(queue: str, work: Path, command: list[str], name: str) -> dict[str, Any]:
    return {
        "tenant": "bench",
        "queue": queue,
        "name": name,
        "podSets": [{"count": 1, "requests": {"cpu": 1, "memory": "1Gi"}}],
        "run": {"command": command, "workingDir": str(work), "output": "/dev/null"},
    }


def _cancel_all(url: str, token: str) -> None:
    """Cancel every job not finished (the running ``sleep``s outlive the server)."""
    with Client(url, token) as client:
        for job in list(client.jobs()):
            if not job.get("end_time"):
                with contextlib.suppress(PhalanxError):
                    client.cancel(int(job["id"]))


def wall_ms(cmd: list[str], env: dict[str, str]) -> float:
    """One whole-process run's wall time; the command must succeed and print."""
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, check=False)
    took = (time.perf_counter() - started) * 1000
    if done.returncode != 0 or not done.stdout:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.decode()}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31, help="runs of each command")
    parser.add_argument("--jobs", type=int, default=50, help="jobs in the queue")
    parser.add_argument("--json", action="store_true", help="(output is always JSON)")
    args = parser.parse_args()

    state = Path(tempfile.mkdtemp(prefix="phalanx-bench-cli-"))
    work = state / "work"
    work.mkdir()
    proc, server = start_phalanx(state)
    url, token = server["url"], server["token"]
    result: dict[str, Any] = {
        "benchmark": "cli",
        "date": datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "jobs_in_queue": args.jobs,
        "rounds": args.rounds,
    }
    try:
        with Client(url, token) as client:
            running = args.jobs // 2
            ids = client.submit_many(
                [submission("default", work, ["sleep", "3600"], f"run{i}") for i in range(running)]
                + [
                    submission("held", work, ["true"], f"wait{i}")
                    for i in range(args.jobs - running)
                ]
            )
            deadline = time.monotonic() + 120
            while sum(j["state"] == "RUNNING" for j in client.jobs()) < running:
                if time.monotonic() > deadline:
                    raise SystemExit("the benchmark's jobs did not start in 2 minutes")
                time.sleep(0.2)

        # As users run them: bytecode caches written and read (a PYTHONDONTWRITEBYTECODE
        # left in the environment would have every console-script run compile its modules).
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "PHALANX_")) and k != "PYTHONDONTWRITEBYTECODE"
        }
        env.update(PHALANX_URL=url, PHALANX_TOKEN=token)
        bindir = Path(sys.executable).parent
        shims = state / "shims"
        subprocess.run(
            [str(bindir / "phalanx"), "shims", str(shims)],
            env=env,
            check=True,
            capture_output=True,
        )
        commands: dict[str, list[str]] = {
            "floor": [sys.executable, "-I", "-S", "-c", "pass"],
            "squeue": [str(shims / "squeue")],
            "sinfo": [str(shims / "sinfo")],
            "sacct": [str(shims / "sacct")],
            "scontrol_show_job": [str(shims / "scontrol"), "show", "job", str(ids[0])],
            "get_jobs": [str(bindir / "phalanx"), "get", "jobs"],
        }
        for cmd in commands.values():  # warm the page cache and the server's paths
            wall_ms(cmd, env) if cmd[0] != sys.executable else None
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, cmd in commands.items():
                if name == "floor":
                    started = time.perf_counter()
                    subprocess.run(cmd, env=env, check=True)
                    times[name].append((time.perf_counter() - started) * 1000)
                else:
                    times[name].append(wall_ms(cmd, env))
        medians = {name: statistics.median(values) for name, values in times.items()}
        floor = medians["floor"]
        result["median_ms"] = {name: round(value, 2) for name, value in medians.items()}
        result["ratio_to_floor"] = {
            name: round(value / floor, 2) for name, value in medians.items() if name != "floor"
        }
        result["goal_ratio"] = GOAL
        result["goal_met"] = {
            name: ratio <= GOAL for name, ratio in result["ratio_to_floor"].items()
        }
    finally:
        _cancel_all(url, token)
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(state, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

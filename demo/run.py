"""``make demo``: a real phalanx on a virtual GPU cluster, two tenants, a gang and small jobs.

It starts ``phalanx up`` in a fresh temporary state directory on a free port
(so it works again and again, and beside another phalanx), applies the example
cluster (4 nodes x 8 GPUs of flavor ``h100-infiniband`` plus 2 smaller L40S
nodes) and queues for tenants ``team-a`` and ``team-b``, submits a 2-node
16-GPU gang and a dozen 1-4 GPU jobs through the Python client with each
tenant's own token, and shows them go from pending to running to completed.
Every job is a real process under its own supervisor, with the GPU indices the
scheduler chose in ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from phalanx import Client
from phalanx.control.spawn import spawn_server
from phalanx.errors import PhalanxError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "cluster"
STATE_STYLE = {
    "PENDING": "yellow",
    "ADMITTED": "cyan",
    "RUNNING": "bold cyan",
    "COMPLETED": "green",
    "FAILED": "red",
    "CANCELLED": "magenta",
    "TIMEOUT": "red",
    "NODE_FAIL": "red",
}

TRAIN = """\
import os, time
rank, size = int(os.environ["PHALANX_TASK_RANK"]), int(os.environ["PHALANX_TASK_COUNT"])
node, gpus = os.environ["PHALANX_NODE_NAME"], os.environ.get("CUDA_VISIBLE_DEVICES", "")
print(f"rank {rank}/{size} on {node} with GPUs {gpus}", flush=True)
for step in range(1, 5):
    time.sleep(0.75)
    print(f"rank {rank} step {step} loss {2.0 / step:.3f}", flush=True)
"""


def start_server(state: Path, console: Console) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    with console.status("starting phalanx (SQLite store, local runtime, virtual nodes)..."):
        try:
            server = spawn_server(
                state, ["--port", "0", "--config", str(EXAMPLES)], new_session=True
            )
        except PhalanxError as exc:
            raise SystemExit(f"phalanx up failed to start:\n{exc.detail}") from None
    return server.proc, {"url": server.url, "token": server.token}


def submissions(work: Path) -> dict[str, list[dict[str, Any]]]:
    def job(name: str, gpus: int, seconds: float, *, nodes: int = 1) -> dict[str, Any]:
        per_node = gpus // nodes
        command = (
            [sys.executable, "-c", TRAIN]
            if nodes > 1
            else [
                "sh",
                "-c",
                f'echo "$PHALANX_NODE_NAME GPUs $CUDA_VISIBLE_DEVICES"; sleep {seconds}',
            ]
        )
        return {
            "name": name,
            "queue": "default",
            "podSets": [
                {
                    "name": "main",
                    "count": nodes,
                    "tasksPerNode": 1,
                    "requests": {"nvidia.com/gpu": per_node, "cpu": 4 * per_node, "memory": "32Gi"},
                }
            ],
            "run": {"command": command, "workingDir": str(work), "output": str(work / "%x-%j.out")},
        }

    team_a = [job("llm-pretrain", 16, 3, nodes=2)]
    team_a += [
        job(f"a-sweep-{i}", g, s)
        for i, (g, s) in enumerate([(1, 3), (2, 4), (4, 3), (1, 5), (2, 3), (4, 4)])
    ]
    team_b = [
        job(f"b-eval-{i}", g, s)
        for i, (g, s) in enumerate([(4, 4), (2, 3), (1, 4), (4, 5), (2, 4), (1, 3)])
    ]
    return {"team-a": team_a, "team-b": team_b}


def table(jobs: list[dict[str, Any]]) -> Table:
    t = Table(title="phalanx get jobs", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1))
    for col in ("ID", "NAME", "TENANT", "STATE", "GPUS", "NODES"):
        t.add_column(col, no_wrap=True, justify="right" if col in ("ID", "GPUS") else "left")
    t.add_column("WHY PENDING", overflow="ellipsis", no_wrap=True, max_width=40)
    for j in jobs:
        style = STATE_STYLE.get(j["state"], "")
        nodes = ",".join(n.removeprefix("gpu-") for n in j["nodes"])
        t.add_row(
            str(j["id"]),
            j["name"],
            j["tenant"],
            f"[{style}]{j['state']}[/]",
            str(j["gpus"]),
            nodes,
            (j["message"] or "") if j["state"] == "PENDING" else "",
        )
    return t


def summary(jobs: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j["state"]] = counts.get(j["state"], 0) + 1
    return "  ".join(
        f"[{STATE_STYLE.get(s, '')}]{s.lower()}[/] {n}" for s, n in sorted(counts.items())
    )


def main() -> int:
    console = Console()
    state = Path(tempfile.mkdtemp(prefix="phalanx-demo-"))
    work = state / "work"
    work.mkdir()
    proc, info = start_server(state, console)
    try:
        admin = Client(info["url"], info["token"])
        console.print(
            f"phalanx is up at [bold]{info['url']}[/] (state in {state}; the demo stops the "
            "server, cancels its jobs and removes the state when it ends, Ctrl-C too)"
        )
        nodes = admin.get_objects("Node")
        gpus = sum(int(n["status"]["capacity"].get("nvidia.com/gpu", 0)) for n in nodes)
        console.print(
            f"virtual cluster: {len(nodes)} nodes, {gpus} GPUs; "
            "ClusterQueues team-a and team-b share the cohort 'research'"
        )
        # Tokens for you, one per tenant: as root your jobs run as root, otherwise as you
        # (a server started by anyone else runs every job as its own user).
        me = getpass.getuser()
        ids: list[int] = []
        for tenant, jobs in submissions(work).items():
            token = admin.create_token(me, [tenant], name=f"demo-{tenant}")["token"]
            with Client(info["url"], token) as user:
                ids += user.submit_many(jobs)
        console.print(f"submitted {len(ids)} jobs as user {me} of tenants team-a and team-b\n")
        started = time.monotonic()
        with Live(console=console, refresh_per_second=8, transient=False) as live:
            while True:
                jobs = [j for j in admin.jobs() if j["id"] in set(ids)]
                live.update(Group(table(jobs), summary(jobs)))
                if all(j["end_time"] for j in jobs) or time.monotonic() - started > 120:
                    break
                time.sleep(0.25)
        console.print()
        gang = next(j for j in jobs if j["name"] == "llm-pretrain")
        out = work / f"llm-pretrain-{gang['id']}.out"
        console.print(
            Panel(
                out.read_text().strip(),
                title=f"output of job {gang['id']} (the 16-GPU gang)",
                expand=False,
            )
        )
        failed = [j for j in jobs if j["state"] != "COMPLETED"]
        console.print(
            f"all {len(jobs)} jobs finished in {time.monotonic() - started:.1f} s"
            + (f"; [red]{len(failed)} did not complete[/]" if failed else "")
        )
        home = "/var/lib/phalanx" if os.geteuid() == 0 else "~/.local/state/phalanx"
        console.print(
            "\n[bold]Next:[/] run a server of your own (README.md, 'Running it')\n"
            "  .venv/bin/phalanx up -d --config examples/cluster   # in the background\n"
            f"      state: {home} (--state-dir DIR elsewhere); its log: server.log there\n"
            "  .venv/bin/phalanx submit --tenant team-a --gpus 16 --nodes 2 -- "
            "python3 examples/train.py\n"
            "  .venv/bin/phalanx get jobs  |  phalanx get clusterqueues  |  phalanx logs -f ID\n"
            "  .venv/bin/phalanx cancel --all     # end every job (--user NAME: one user's)\n"
            "  .venv/bin/phalanx down             # stop it; remove the state to forget all\n"
            "  API docs at http://127.0.0.1:6900/docs; examples in examples/README.md",
            soft_wrap=True,
        )
        return 1 if failed else 0
    finally:
        _cancel_all(info)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(state, ignore_errors=True)


def _cancel_all(info: dict[str, str]) -> None:
    """End the demo's jobs that still run (after Ctrl-C), before the server stops."""
    try:
        with Client(info["url"], info["token"]) as admin:
            live = [j for j in admin.jobs() if not j["end_time"]]
            for job in live:
                admin.cancel(job["id"])
            for job in live:
                admin.wait(job["id"], timeout=30)
    except (PhalanxError, OSError, TimeoutError):
        pass  # the server is going anyway; the supervisors' jobs end with their SIGTERM


if __name__ == "__main__":
    raise SystemExit(main())

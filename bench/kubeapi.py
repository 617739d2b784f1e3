"""Kubernetes API benchmark: ``kubectl get workloads`` at 10,000 jobs, and watch latency.

Starts a real ``phalanx up`` (SQLite store, ``--runtime noop`` so that jobs cost
nothing to run, ``--kube-port 0``) in a temporary state directory, with one
ClusterQueue whose quota admits ``--running`` jobs (1 cpu each, ``sleep 1d``: the
noop runtime keeps them RUNNING for the whole run) and holds the rest pending.
It submits ``--jobs`` jobs through ``POST /api/v1/jobs/batch`` (500 per request)
and waits until the admitted ones run, then measures, with the median wall time of
``--repeats`` runs after one warm-up (each a fresh process, as a user types it):

- ``kubectl get workloads -A`` (a Table, kubectl's default ``--chunk-size=500``),
  ``-o json``, and ``--chunk-size=0`` (one request for the whole list);
- for reference the same jobs through phalanx's own CLI (``phalanx get jobs -A``)
  and through the Slurm shim (``squeue`` of ``phalanx shims``);
- with ``httpx`` on one kept-alive connection (CA file, bearer token): one page of
  ``GET /apis/kueue.x-k8s.io/v1beta2/workloads?limit=500`` (JSON and Table), the
  whole list in one request, and the whole list in pages of 500 as kubectl reads
  it; so kubectl's own cost (start-up, discovery, printing) is the difference;
- watch latency: a watch on workloads from the resourceVersion of a list, then
  ``--watch-jobs`` jobs submitted one at a time (``--spacing`` apart) through the
  REST API: per job the time from the submit call's return (the job is durable
  then) to the arrival of its ADDED event, then the time from a cancel's return to
  the MODIFIED event whose Finished condition is True; p50/p99/max. The same with
  ``kubectl get workloads -A -w --watch-only --output-watch-events``, reading its
  lines as they come (kubectl writes stdout unbuffered).

Without ``kubectl`` on PATH the kubectl parts are skipped (said on stderr and in
the JSON). Prints one JSON object.
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

from bench.shared import note  # noqa: E402

from phalanx import Client  # noqa: E402
from phalanx.control.spawn import ServerProcess, spawn_server  # noqa: E402
from phalanx.errors import PhalanxError  # noqa: E402

WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/workloads"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
NODES = 4


def cluster(running: int) -> str:
    """One flavor, one ClusterQueue with quota for ``running`` 1-cpu jobs, 4 nodes."""
    per_node = -(-running // NODES)
    nodes = "".join(
        f"""---
apiVersion: v1
kind: Node
metadata:
  name: node{i}
  labels: {{phalanx.io/flavor: cpu}}
status:
  capacity: {{cpu: "{per_node}", memory: 100000Gi}}
"""
        for i in range(1, NODES + 1)
    )
    return f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: cpu}}
spec: {{nodeLabels: {{phalanx.io/flavor: cpu}}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: main}}
spec:
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: cpu
      resources:
      - {{name: cpu, nominalQuota: {running}}}
      - {{name: memory, nominalQuota: 100000Gi}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: default, namespace: bench}}
spec: {{clusterQueue: main}}
{nodes}"""


def submission(work: Path) -> dict[str, Any]:
    return {
        "tenant": "bench",
        "queue": "default",
        "podSets": [{"count": 1, "requests": {"cpu": 1, "memory": "1Gi"}}],
        "run": {"command": ["sleep", "1d"], "workingDir": str(work), "output": "/dev/null"},
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary_ms(values: list[float]) -> dict[str, Any]:
    """p50/p99/max of seconds, in milliseconds."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50_ms": round(percentile(values, 50) * 1000, 1),
        "p99_ms": round(percentile(values, 99) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1),
    }


def timed(run: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall seconds of ``repeats`` calls after one warm-up; the warm-up's result."""
    first = run()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times), first


def command(cmd: list[str], env: dict[str, str]) -> Callable[[], str]:
    def run() -> str:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")
        return done.stdout

    return run


def kubectl_version() -> str | None:
    if shutil.which("kubectl") is None:
        return None
    done = subprocess.run(
        ["kubectl", "version", "--client", "-o", "json"], capture_output=True, text=True
    )
    try:
        return str(json.loads(done.stdout)["clientVersion"]["gitVersion"])
    except (ValueError, KeyError):
        return done.stdout.strip() or "unknown"


# ---------------------------------------------------------------------- setup


def start(state: Path, args: argparse.Namespace) -> tuple[ServerProcess, dict[str, Any]]:
    config = state / "cluster.yaml"
    state.mkdir(parents=True, exist_ok=True)
    config.write_text(cluster(args.running))
    flags = ["--port", "0", "--kube-port", "0", "--runtime", "noop", "--config", str(config)]
    try:
        server = spawn_server(state, [*flags, "--single-user"])
    except PhalanxError as exc:
        raise SystemExit(exc.detail) from None
    info = json.loads((state / "client.json").read_text())
    if not info.get("kube_url"):
        server.stop()
        raise SystemExit(f"phalanx up serves no Kubernetes API: {info}")
    return server, info


def fill(url: str, token: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Submit ``--jobs`` jobs in batches of 500; wait until ``--running`` of them run."""
    body = submission(work)
    started = time.perf_counter()
    with Client(url, token) as c:
        left = args.jobs
        while left > 0:
            n = min(500, left)
            c.submit_many([body] * n)
            left -= n
        submit_s = time.perf_counter() - started
        want = min(args.running, args.jobs)
        deadline = time.monotonic() + 300
        while True:
            running = sum(1 for _ in c.jobs(state="RUNNING", page_size=5000))
            if running >= want:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"only {running} of {want} jobs run after 5 minutes")
            time.sleep(0.5)
    return {
        "jobs": args.jobs,
        "running": running,
        "pending": args.jobs - running,
        "submit_s": round(submit_s, 2),
        "submit_jobs_per_s": round(args.jobs / submit_s, 1),
        "submit_to_all_admitted_running_s": round(time.perf_counter() - started, 2),
    }


# ---------------------------------------------------------------------- lists


def bench_lists(
    server: ServerProcess, info: dict[str, Any], kc: Path | None, args: argparse.Namespace
) -> dict[str, Any]:
    import httpx

    out: dict[str, Any] = {}
    r = args.repeats
    env = {**os.environ, "PHALANX_URL": info["url"], "PHALANX_TOKEN": info["token"]}
    phalanx = str(Path(sys.executable).parent / "phalanx")

    # The server alone, through httpx on one kept-alive connection.
    headers = {"Authorization": f"Bearer {info['token']}"}
    with httpx.Client(
        base_url=info["kube_url"], verify=info["kube_ca"], headers=headers, timeout=300
    ) as h:

        def get(params: dict[str, Any], accept: str = "application/json") -> httpx.Response:
            resp = h.get(WORKLOADS, params=params, headers={"Accept": accept})
            resp.raise_for_status()
            return resp

        def chunked(accept: str) -> int:
            rows, token = 0, ""
            while True:
                params: dict[str, Any] = {"limit": 500}
                if token:
                    params["continue"] = token
                body = get(params, accept).json()
                rows += len(body.get("rows", body.get("items", [])))
                token = body["metadata"].get("continue", "")
                if not token:
                    return rows

        s, resp = timed(lambda: get({"limit": 500}), r)
        out["httpx_page500_json_s"] = round(s, 3)
        out["page500_json_bytes"] = len(resp.content)
        s, _ = timed(lambda: get({"limit": 500}, TABLE), r)
        out["httpx_page500_table_s"] = round(s, 3)
        s, resp = timed(lambda: get({}), r)
        out["httpx_full_json_s"] = round(s, 3)
        out["full_json_bytes"] = len(resp.content)
        out["full_json_items"] = len(resp.json()["items"])
        s, resp = timed(lambda: get({}, TABLE), r)
        out["httpx_full_table_s"] = round(s, 3)
        out["full_table_bytes"] = len(resp.content)
        s, rows = timed(lambda: chunked(TABLE), r)
        out["httpx_chunked500_table_s"] = round(s, 3)
        out["chunked500_table_rows"] = rows
        s, _ = timed(lambda: chunked("application/json"), r)
        out["httpx_chunked500_json_s"] = round(s, 3)

    # phalanx's own CLI and the Slurm shim.
    s, text = timed(command([phalanx, "get", "jobs", "-A"], env), r)
    out["phalanx_get_jobs_s"] = round(s, 3)
    out["phalanx_get_jobs_lines"] = len(text.splitlines())
    shims = server.state_dir / "shims"
    done = subprocess.run([phalanx, "shims", str(shims)], env=env, capture_output=True, text=True)
    if done.returncode == 0 and (shims / "squeue").exists():
        s, text = timed(command([str(shims / "squeue")], env), r)
        out["squeue_shim_s"] = round(s, 3)
        out["squeue_shim_lines"] = len(text.splitlines())
    else:
        out["squeue_shim"] = {"skipped": f"phalanx shims failed: {done.stderr.strip()[-300:]}"}

    if kc is None:
        return out
    kenv = {**os.environ, "KUBECONFIG": str(kc)}
    cache = ["--cache-dir", str(server.state_dir / "kube-cache")]
    kubectl = ["kubectl", *cache, "get", "workloads", "-A"]
    s, text = timed(command(kubectl, kenv), r)
    out["kubectl_table_s"] = round(s, 3)
    out["kubectl_table_lines"] = len(text.splitlines())
    s, text = timed(command([*kubectl, "-o", "json"], kenv), r)
    out["kubectl_json_s"] = round(s, 3)
    out["kubectl_json_items"] = len(json.loads(text)["items"])
    s, text = timed(command([*kubectl, "--chunk-size=0"], kenv), r)
    out["kubectl_table_nochunk_s"] = round(s, 3)
    s, _ = timed(command(["kubectl", *cache, "version", "--client"], kenv), r)
    out["kubectl_start_s"] = round(s, 3)
    return out


# ---------------------------------------------------------------------- watch


class Arrivals:
    """When each workload's first event (and its type: ADDED is expected), and its first
    event with the Finished condition True, arrived."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self.first_type: dict[str, str] = {}
        self.finished: dict[str, float] = {}
        self.cond = threading.Condition()

    def saw(self, kind: str, name: str, finished: bool) -> None:
        now = time.perf_counter()
        with self.cond:
            if name not in self.first:
                self.first[name] = now
                self.first_type[name] = kind
            if finished:
                self.finished.setdefault(name, now)
            self.cond.notify_all()

    def wait(self, table: dict[str, float], name: str, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: name in table, timeout)


def httpx_watcher(info: dict[str, Any], rv: str, arrivals: Arrivals, stop: threading.Event) -> None:
    import httpx

    headers = {"Authorization": f"Bearer {info['token']}"}
    params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "600"}
    try:
        with (
            httpx.Client(
                base_url=info["kube_url"], verify=info["kube_ca"], headers=headers, timeout=None
            ) as h,
            h.stream("GET", WORKLOADS, params=params) as resp,
        ):
            for line in resp.iter_lines():
                if stop.is_set():
                    return
                if not line:
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                name = (obj.get("metadata") or {}).get("name", "")
                conds = (obj.get("status") or {}).get("conditions") or []
                done = any(c.get("type") == "Finished" and c.get("status") == "True" for c in conds)
                arrivals.saw(event.get("type", ""), name, done)
    except httpx.HTTPError:
        if not stop.is_set():  # else: the server stopped under the idle watch, as meant
            raise


def kubectl_watcher(
    kc: Path, cache: Path, arrivals: Arrivals, stop: threading.Event, procs: list[Any]
) -> None:
    cmd = ["kubectl", "--cache-dir", str(cache), "get", "workloads", "-A", "-w"]
    cmd += ["--watch-only", "--output-watch-events"]
    proc = subprocess.Popen(
        cmd,
        env={**os.environ, "KUBECONFIG": str(kc)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        bufsize=1,
    )
    procs.append(proc)
    assert proc.stdout is not None
    for line in proc.stdout:
        # EVENT NAMESPACE NAME QUEUE [RESERVED IN] [ADMITTED] [FINISHED] AGE
        fields = line.split()
        if len(fields) < 4 or fields[0] == "EVENT":
            continue
        arrivals.saw(fields[0], fields[2], len(fields) >= 6 and fields[-2] == "True")
        if stop.is_set():
            break


def bench_watch(
    info: dict[str, Any], work: Path, args: argparse.Namespace, how: str, kc: Path | None = None
) -> dict[str, Any]:
    """Submit-to-ADDED and cancel-to-Finished latencies seen by one watch (``how``)."""
    import httpx

    headers = {"Authorization": f"Bearer {info['token']}"}
    with httpx.Client(
        base_url=info["kube_url"], verify=info["kube_ca"], headers=headers, timeout=300
    ) as h:
        resp = h.get(WORKLOADS, params={"limit": 1})
        resp.raise_for_status()
        rv = resp.json()["metadata"]["resourceVersion"]
    arrivals = Arrivals()
    stop = threading.Event()
    procs: list[Any] = []
    if how == "httpx":
        target: Callable[[], None] = lambda: httpx_watcher(info, rv, arrivals, stop)  # noqa: E731
    else:
        assert kc is not None
        cache = kc.parent / "kube-cache"
        target = lambda: kubectl_watcher(kc, cache, arrivals, stop, procs)  # noqa: E731
    opened = time.perf_counter()
    watcher = threading.Thread(target=target, daemon=True)
    watcher.start()
    body = submission(work)
    out: dict[str, Any] = {}
    try:
        with Client(info["url"], info["token"]) as c:
            # A probe: the watch is open (and has read its starting state) once its event
            # arrives. (Its type is not looked at: a job created after the list's
            # resourceVersion but before the watch has read its starting state comes as
            # MODIFIED, not ADDED.)
            # kubectl lists before it watches: a probe made before that is not seen, so
            # a new one every half second until one is.
            probes: list[int] = []
            while not any(f"job-{p}" in arrivals.first for p in probes):
                if time.perf_counter() - opened > 120:
                    return {"skipped": f"{how}: no probe job's event came in 120 s"}
                probes.append(c.submit(body))
                arrivals.wait(arrivals.first, f"job-{probes[-1]}", 0.5)
            seen = min(arrivals.first[f"job-{p}"] for p in probes if f"job-{p}" in arrivals.first)
            out["open_to_probe_event_s"] = round(seen - opened, 3)
            for p in probes:
                c.cancel(p)
            time.sleep(0.5)
            submitted: dict[str, float] = {}
            for _ in range(args.watch_jobs):
                job = c.submit(body)
                submitted[f"job-{job}"] = time.perf_counter()
                time.sleep(args.spacing)
            cancelled: dict[str, float] = {}
            for name in submitted:
                c.cancel(int(name.removeprefix("job-")))
                cancelled[name] = time.perf_counter()
                time.sleep(args.spacing)
            deadline = time.monotonic() + 30
            for name in submitted:
                arrivals.wait(arrivals.finished, name, max(0.0, deadline - time.monotonic()))
    finally:
        stop.set()
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
    added = [arrivals.first[n] - t for n, t in submitted.items() if n in arrivals.first]
    finished = [arrivals.finished[n] - t for n, t in cancelled.items() if n in arrivals.finished]
    out["submit_to_added"] = summary_ms(added)
    out["cancel_to_finished_modified"] = summary_ms(finished)
    out["missing_added"] = len(submitted) - len(added)
    out["first_event_not_added"] = sum(
        arrivals.first_type.get(n, "ADDED") != "ADDED" for n in submitted
    )
    out["missing_finished"] = len(cancelled) - len(finished)
    return out


# ---------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10000, help="jobs in the list")
    parser.add_argument("--running", type=int, default=1000, help="of which admitted (running)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each list")
    parser.add_argument("--watch-jobs", type=int, default=50, help="jobs submitted one by one")
    parser.add_argument("--spacing", type=float, default=0.1, help="seconds between them")
    parser.add_argument(
        "--keep", action="store_true", help="keep the state dir (its path on stderr)"
    )
    parser.add_argument("--json", action="store_true", help="(output is always JSON)")
    args = parser.parse_args()
    version = kubectl_version()
    out: dict[str, Any] = {
        "benchmark": "kubeapi",
        "date": datetime.now().isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "kubectl": version or {"skipped": "kubectl is not on PATH"},
        "repeats": args.repeats,
    }
    if version is None:
        note("skipping the kubectl parts: kubectl is not on PATH")
    state = Path(tempfile.mkdtemp(prefix="phalanx-kube-bench-"))
    work = state / "work"
    work.mkdir()
    server, info = start(state, args)
    try:
        kc: Path | None = None
        if version is not None:
            kc = state / "kubeconfig"
            done = subprocess.run(
                [
                    str(Path(sys.executable).parent / "phalanx"),
                    "kubeconfig",
                    "--state-dir",
                    str(state),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            kc.write_text(done.stdout)
        out["setup"] = fill(info["url"], info["token"], work, args)
        lists = bench_lists(server, info, kc, args)
        out["list"] = lists
        ratios: dict[str, float] = {}
        if "kubectl_table_s" in lists:
            p = lists["phalanx_get_jobs_s"]
            ratios["kubectl_table_over_phalanx_get_jobs"] = round(lists["kubectl_table_s"] / p, 2)
            ratios["kubectl_json_over_phalanx_get_jobs"] = round(lists["kubectl_json_s"] / p, 2)
            ratios["kubectl_nochunk_over_chunked"] = round(
                lists["kubectl_table_nochunk_s"] / lists["kubectl_table_s"], 2
            )
            ratios["server_share_of_kubectl_table"] = round(
                lists["httpx_chunked500_table_s"] / lists["kubectl_table_s"], 2
            )
            ratios["server_share_of_kubectl_json"] = round(
                lists["httpx_chunked500_json_s"] / lists["kubectl_json_s"], 2
            )
            if "squeue_shim_s" in lists:
                ratios["kubectl_table_over_squeue_shim"] = round(
                    lists["kubectl_table_s"] / lists["squeue_shim_s"], 2
                )
        ratios["page500_over_full_json"] = round(
            lists["httpx_page500_json_s"] / lists["httpx_full_json_s"], 2
        )
        out["ratios"] = ratios
        out["watch_httpx"] = bench_watch(info, work, args, "httpx")
        if kc is not None:
            out["watch_kubectl"] = bench_watch(info, work, args, "kubectl", kc)
        else:
            out["watch_kubectl"] = {"skipped": "kubectl is not on PATH"}
    finally:
        server.stop(timeout=60)
        if args.keep:
            note(f"state kept in {state}")
        else:
            shutil.rmtree(state, ignore_errors=True)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The ``phalanx`` commands. Each imports what it needs when it runs.

Built on click directly (with rich for tables) rather than typer: typer 0.29
builds a pydantic adapter for every parameter of every command at start-up,
which alone costs more than the 150 ms ``phalanx get jobs`` may take. Server
commands go through :class:`phalanx.client.Client` (standard-library HTTP),
so ``phalanx get jobs`` loads neither pydantic nor the server; only ``up`` and
``apply`` (which checks manifests locally for file:line errors) load the model.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from phalanx.client import Client
    from phalanx.runtime.containers.images import ImageStore

__all__ = ["app"]

_JOB_KINDS = frozenset({"job", "jobs", "j", "workload", "workloads", "wl"})
_WORKLOAD_KINDS = frozenset({"workload", "workloads", "wl"})
_OUTPUTS = ("table", "wide", "json", "yaml")
_CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(
    name="phalanx",
    context_settings=_CONTEXT,
    help="phalanx: GPU workload orchestrator (Slurm and Kueue dialects, one admission engine).",
)
def app() -> None:
    pass


@app.group(name="token", help="Create, list and revoke API tokens (admin).")
def token_app() -> None:
    pass


def _client() -> Client:
    from phalanx.client import Client

    return Client()


def _out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _split(values: tuple[str, ...] | list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [p.strip() for v in values for p in v.split(",") if p.strip()]


def _job_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a job id (a number)") from None


# --------------------------------------------------------------------------- basics


@app.command()
def version() -> None:
    """Print the phalanx version."""
    from phalanx import __version__

    _out(f"phalanx {__version__}\n")


@app.command()
def presets() -> None:
    """List the scheduling policy presets (phalanx up --preset)."""
    from phalanx.engine.config import PRESETS

    _out("\n".join(PRESETS) + "\n")


@app.command()
@click.option("--state-dir", type=click.Path(path_type=Path), help="state directory")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", default=6900, show_default=True, help="port to listen on")
@click.option(
    "--config",
    "-c",
    "configs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="manifests (FILE or DIR) to apply at start; repeatable",
)
@click.option("--database", help="SQLAlchemy URL (default: SQLite in the state dir)")
@click.option(
    "--preset", default="phalanx", show_default=True, help="policy preset (phalanx presets)"
)
@click.option("--detect", is_flag=True, help="declare this machine's GPUs (NVML) as a node")
@click.option(
    "--container-runtime",
    type=click.Choice(["builtin", "host"]),
    default="builtin",
    show_default=True,
    help="builtin: srun --container-image steps and Kubernetes pods run in their images "
    "(phalanx image import); host: on this machine, images ignored",
)
@click.option(
    "--runtime",
    type=click.Choice(["local", "ray", "noop"]),
    default="local",
    show_default=True,
    help="local: jobs run on this machine; ray: on the Ray cluster at --ray-address; "
    "noop: nothing runs, jobs end after their sleep",
)
@click.option(
    "--ray-address",
    metavar="HOST:PORT",
    default=None,
    help="the Ray head's GCS address, for --runtime ray (default: $RAY_ADDRESS)",
)
@click.option(
    "--ray-workdir",
    metavar="DIR",
    default=None,
    help="where Ray nodes keep job directories (default: /tmp/phalanx)",
)
@click.option(
    "--heads-per-cycle",
    metavar="N|all",
    default=None,
    help="jobs taken per ClusterQueue per cycle (all: until nothing fits); default: the preset's",
)
@click.option(
    "--backfill/--no-backfill",
    default=None,
    help="reserve nodes for blocked jobs and backfill around them; default: the preset's",
)
@click.option(
    "--placement",
    default=None,
    help="node placement: phalanx (default), tight, fgd, best-fit, dot-product, random, "
    "or a comma-separated chain of scorers (docs/placement.md)",
)
@click.option(
    "--topology-policy",
    type=click.Choice(["phalanx", "slurm-tree"]),
    default=None,
    help="gangs in flavors with a Topology: phalanx (default) or slurm-tree (Slurm's "
    "topology/tree: every job on the lowest switch that holds it)",
)
@click.option(
    "--reports",
    "reports_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="folder of 'phalanx sim' results the dashboard shows (default: STATE_DIR/reports)",
)
@click.option(
    "--public-metrics",
    is_flag=True,
    help="serve /metrics without a token (default: it needs one, as the API does)",
)
@click.option(
    "--rate-limit",
    metavar="RATE[:BURST]",
    default=None,
    help="requests per second per token (and how many at once; default 2 x RATE); "
    "more get 429 (default: no limit)",
)
@click.option(
    "--tls-cert",
    metavar="FILE",
    type=click.Path(path_type=Path),
    default=None,
    help="serve HTTPS with this PEM certificate (with --tls-key)",
)
@click.option(
    "--tls-key",
    metavar="FILE",
    type=click.Path(path_type=Path),
    default=None,
    help="the certificate's PEM private key, unencrypted (with --tls-cert)",
)
@click.option(
    "--single-user",
    is_flag=True,
    help="run every job as the server's own user, even as root (also PHALANX_SINGLE_USER=1); "
    "default as root: root's and the admin's jobs as root, every other user's as its "
    "Unix account",
)
@click.option(
    "--health-check",
    metavar="PROGRAM",
    default=None,
    help="run PROGRAM (with arguments) for every node at start and every "
    "--health-check-interval; a non-zero exit drains the node with its first output line "
    "as the reason, exit 0 resumes a node it drained (Slurm's HealthCheckProgram)",
)
@click.option(
    "--health-check-interval",
    metavar="S",
    type=click.FloatRange(min=0),
    default=None,
    help="seconds between health checks, 0: at start only (default: slurm.conf's "
    "HealthCheckInterval, else 300)",
)
@click.option(
    "--drain-after-failures",
    metavar="N/WINDOW",
    default=None,
    help="drain a node on which N job attempts failed for a node-side cause (NODE_FAIL, "
    "tasks killed for a lost node) within WINDOW, e.g. 3/1h (default: off)",
)
@click.option(
    "--epilog",
    metavar="PROGRAM",
    default=None,
    help="run PROGRAM (with arguments) on every node of a job after each attempt, with "
    "Slurm's epilog environment; a non-zero exit drains the node ('Epilog error') and "
    "requeues a --requeue=expedite job expedited (default: slurm.conf's Epilog)",
)
@click.option(
    "--kube-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="serve the Kubernetes API (kubectl: 'phalanx kubeconfig') over HTTPS on this port "
    "(0: a free one) [default: 6443, or a free port if 6443 is taken or --port is 0]",
)
@click.option(
    "--no-kube-api",
    is_flag=True,
    help="do not serve the Kubernetes API",
)
@click.option(
    "--detach",
    "-d",
    is_flag=True,
    help="run in the background (output in STATE_DIR/server.log); stop with 'phalanx down'",
)
def up(
    state_dir: Path | None,
    host: str,
    port: int,
    configs: tuple[Path, ...],
    database: str | None,
    preset: str,
    detect: bool,
    container_runtime: str | None,
    runtime: str,
    ray_address: str | None,
    ray_workdir: str | None,
    heads_per_cycle: str | None,
    backfill: bool | None,
    placement: str | None,
    topology_policy: str | None,
    reports_dir: Path | None,
    public_metrics: bool,
    rate_limit: str | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    single_user: bool,
    health_check: str | None,
    health_check_interval: float | None,
    drain_after_failures: str | None,
    epilog: str | None,
    kube_port: int | None,
    no_kube_api: bool,
    detach: bool,
) -> None:
    """Run the control plane, the API, the dashboard, the Kubernetes API and the local
    runtime (in the foreground, or with --detach in the background).

    The state (store, admin token in client.json, job directories) lives in
    --state-dir, else $PHALANX_STATE_DIR, else /var/lib/phalanx for root and
    ~/.local/state/phalanx for other users.
    """
    from phalanx.server import run_server

    heads: int | str | None = "preset"
    if heads_per_cycle == "all":
        heads = None
    elif heads_per_cycle is not None:
        if not heads_per_cycle.isdigit() or int(heads_per_cycle) < 1:
            raise click.BadParameter(
                f"{heads_per_cycle!r}: expected a number >= 1 or 'all'",
                param_hint="--heads-per-cycle",
            )
        heads = int(heads_per_cycle)

    def serve() -> None:
        run_server(
            state_dir=state,
            host=host,
            port=port,
            configs=list(configs),
            database=database,
            preset=preset,
            detect=detect,
            container_runtime=container_runtime,
            runtime=runtime,
            heads_per_cycle=heads,
            backfill=backfill,
            placement=placement,
            topology_policy=topology_policy,
            ray_address=ray_address,
            ray_workdir=ray_workdir,
            reports_dir=reports_dir,
            public_metrics=public_metrics,
            rate_limit=rate_limit,
            tls_cert=tls_cert,
            tls_key=tls_key,
            single_user=single_user,
            health_check=health_check,
            health_check_interval_s=health_check_interval,
            drain_after_failures=drain_after_failures,
            epilog=epilog,
            kube_port=None if no_kube_api else kube_port_,
            kube_port_given=kube_port is not None,
        )

    if no_kube_api and kube_port is not None:
        raise click.BadParameter("give --kube-port or --no-kube-api, not both")
    from phalanx.server import DEFAULT_KUBE_PORT

    kube_port_ = kube_port if kube_port is not None else (0 if port == 0 else DEFAULT_KUBE_PORT)
    from phalanx.statedir import default_state_dir

    state = state_dir if state_dir is not None else default_state_dir()
    if not detach:
        serve()
        return
    from phalanx.control.daemon import detach as run_detached
    from phalanx.statedir import LOG_FILE

    said = run_detached(state, serve)
    sys.stderr.write(said + f"  log: {state / LOG_FILE}\n")


@app.command()
@click.option("--state-dir", type=click.Path(path_type=Path), help="state directory")
def down(state_dir: Path | None) -> None:
    """Stop the server of the state directory (as Ctrl-C does). Running jobs keep
    running and are re-adopted at the next start; 'phalanx cancel --all' ends them."""
    from phalanx.control.daemon import stop_server
    from phalanx.statedir import default_state_dir

    state = state_dir if state_dir is not None else default_state_dir()
    pid = stop_server(state)
    if pid is None:
        _out(f"no phalanx server runs on {state}\n")
    else:
        _out(f"phalanx stopped (pid {pid}, state dir {state})\n")


def _kind_of(manifest: dict[str, Any]) -> str:
    kind = str(manifest.get("kind", ""))
    return "PriorityClass" if kind == "WorkloadPriorityClass" else kind


@app.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="print the manifests instead of applying them")
def import_(path: Path, dry_run: bool) -> None:
    """Create Nodes, flavors and ClusterQueues from a Slurm slurm.conf (and a Topology
    from the topology.conf beside it, with TopologyPlugin=topology/tree or /block)."""
    import re

    from phalanx.dialects.kueue import KINDS, to_manifest
    from phalanx.dialects.slurm import read_slurm_conf
    from phalanx.dialects.slurm.scheduling import read_scheduling
    from phalanx.dialects.slurm.slurmconf import topology_plugin
    from phalanx.errors import Invalid

    text = path.read_text(encoding="utf-8")
    if re.search(r"^\s*(SwitchName|BlockName)\s*=", text, re.IGNORECASE | re.MULTILINE):
        raise Invalid(
            f"{path}: this is a topology.conf; import the slurm.conf beside it "
            "(with TopologyPlugin=topology/tree or topology/block), which reads it"
        )
    topology = None
    plugin = topology_plugin(text, str(path))
    if plugin is not None:
        conf = path.parent / "topology.conf"
        if not conf.is_file():
            raise Invalid(
                f"{path}:{plugin[0]}: TopologyPlugin=topology/{plugin[1]} reads {conf}, "
                "which does not exist"
            )
        topology = (conf.read_text(encoding="utf-8"), str(conf))
    objects = read_slurm_conf(text, str(path), topology)
    if read_scheduling(text, str(path)):
        sys.stderr.write(
            f"note: {path}'s scheduling keys (Priority*, SchedulerType, SchedulerParameters, "
            f"MaxArraySize) are server settings: they take effect with phalanx up --config "
            f"{path}\n"
        )
    manifests = [to_manifest(type(obj).__name__, obj) for obj in objects]
    manifests.sort(key=lambda m: KINDS.index(_kind_of(m)))
    if dry_run:
        import yaml

        _out(yaml.safe_dump_all(manifests, sort_keys=False))
        return
    with _client() as client:
        results = client.apply(manifests, source=str(path))
    for r in results:
        _out(f"{r['kind'].lower()}/{r['name']} {r['outcome']}\n")


@app.command("sim")
@click.option(
    "--trace",
    "trace",
    required=True,
    help="philly, philly:all, openb[:LIST], accounting:STATE_DIR, or a .csv/.jsonl trace",
)
@click.option(
    "--cluster",
    "cluster",
    required=True,
    help="philly-vc, philly-shared:N, shared:N, openb[:all], or Node manifests (file or folder)",
)
@click.option(
    "--queues",
    type=click.Path(path_type=Path),
    help="ClusterQueues, Cohorts, flavors, LocalQueues, Tenants to run on (file or folder)",
)
@click.option(
    "--policy",
    "policies",
    default="phalanx,slurm,kueue,fifo,sjf",
    show_default=True,
    help="comma-separated: phalanx, slurm, kueue, fifo, sjf",
)
@click.option(
    "--time-limit",
    default="ceil:3600",
    show_default=True,
    help="time limit of jobs that have none: ceil:SECONDS, scale:FACTOR or exact",
)
@click.option("--traces", type=click.Path(path_type=Path), help="where the public traces are")
@click.option(
    "--node-failure-rate",
    type=float,
    help="node failures per node-hour (default: no failures)",
)
@click.option("--node-mtbf", type=float, help="or: mean hours between a node's failures")
@click.option(
    "--node-repair",
    type=float,
    default=4.0,
    show_default=True,
    help="hours a failed node stays down",
)
@click.option("--failure-seed", type=int, default=0, show_default=True, help="failures' seed")
@click.option(
    "--checkpoint-interval",
    type=float,
    help="hours between a job's checkpoints (default: none, a lost job restarts from scratch)",
)
@click.option(
    "--out", type=click.Path(path_type=Path), required=True, help="folder for the results"
)
def sim(
    trace: str,
    cluster: str,
    queues: Path | None,
    policies: str,
    time_limit: str,
    traces: Path | None,
    node_failure_rate: float | None,
    node_mtbf: float | None,
    node_repair: float,
    failure_seed: int,
    checkpoint_interval: float | None,
    out: Path,
) -> None:
    """Replay a trace through the engine under each policy, on a virtual clock."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from phalanx.sim.failures import FailureModel
    from phalanx.sim.run import simulate

    failures = FailureModel.from_options(
        node_failure_rate, node_mtbf, node_repair, failure_seed, checkpoint_interval
    )

    names = [p.strip() for p in policies.split(",") if p.strip()]
    with Progress(
        TextColumn("{task.description:>8}"),
        BarColumn(),
        TextColumn("{task.completed:,.0f}/{task.total:,.0f} jobs"),
        TimeElapsedColumn(),
        transient=True,
    ) as bar:
        tasks: dict[str, Any] = {}

        def progress(policy: str, now: float, done: int, total: int) -> None:
            if policy not in tasks:
                tasks[policy] = bar.add_task(policy, total=total)
            bar.update(tasks[policy], completed=done)

        summary = simulate(
            trace,
            cluster,
            names,
            out,
            time_limit=time_limit,
            traces=traces,
            queues=queues,
            progress=progress,
            failures=failures,
        )
    header = f"{'policy':>8} {'mean JCT (h)':>13} {'p99 wait (h)':>13} {'util':>6} {'Jain':>6}"
    rows = [header + (f" {'goodput':>8}" if failures is not None else "")]
    for name, numbers in summary["policies"].items():
        rows.append(
            f"{name:>8} {numbers['jct_s']['mean'] / 3600:>13.2f} "
            f"{numbers['queueing_delay_s']['p99'] / 3600:>13.2f} "
            f"{numbers['gpu_utilization']:>6.1%} {numbers['jain_fairness']:>6.3f}"
            + (f" {numbers['goodput']:>8.2%}" if failures is not None else "")
        )
    for name, numbers in summary["policies"].items():
        unfinished = numbers["jobs"] - numbers["ended"]
        if unfinished:
            rows.append(
                f"{name}: {unfinished:,} jobs never ended (they fit nowhere in the cluster)"
            )
    _out("\n".join(rows) + f"\nresults in {out}\n")


# --------------------------------------------------------------------------- objects


def _load_manifests(paths: tuple[str, ...]) -> tuple[list[dict[str, Any]], str]:
    from phalanx.dialects import kueue

    manifests = []
    for path in paths:
        if path == "-":
            # Read no further than one byte past the 8 MiB limit, as bytes.
            stdin = getattr(sys.stdin, "buffer", None)
            if stdin is None:  # a text stream stands in for stdin (tests)
                from phalanx.dialects.kueue.manifests import MAX_MANIFEST_BYTES

                manifests += kueue.load_text(sys.stdin.read(MAX_MANIFEST_BYTES + 1), "<stdin>")
            else:
                manifests += kueue.load_stream(stdin, "<stdin>")
        else:
            manifests += kueue.load_path(Path(path))
    docs = [kueue.to_manifest(m.kind, m.obj) for m in manifests]
    return docs, ", ".join(paths)


@app.command()
@click.option(
    "--filename",
    "-f",
    "filenames",
    multiple=True,
    required=True,
    help="manifest FILE or DIR ('-': stdin); repeatable",
)
def apply(filenames: tuple[str, ...]) -> None:
    """Create or update objects from Kueue / Kubernetes manifests (all or none)."""
    docs, source = _load_manifests(filenames)
    if not docs:
        from phalanx.errors import Invalid

        raise Invalid(f"{source}: no manifests found")
    with _client() as client:
        for result in client.apply(docs, source=source):
            _out(f"{result['kind'].lower()}/{result['name']} {result['outcome']}\n")


def _get_jobs(
    client: Client,
    name: str | None,
    output: str,
    *,
    state: list[str] | None,
    tenant: list[str] | None,
    user: list[str] | None,
    queue: str | None,
    limit: int | None,
) -> None:
    from phalanx.cli import render

    if name is not None:
        jobs = [client.get(_job_id(name))]
    else:
        jobs = list(client.jobs(state=state, tenant=tenant, user=user, queue=queue, limit=limit))
    if output in ("json", "yaml"):
        _out(render.dump(jobs, output))
        return
    header, rows = render.job_rows(jobs, wide=output == "wide")
    if not rows:
        sys.stderr.write("No jobs found.\n")
        return
    render.print_table(header, rows, state_col=5)


@app.command()
@click.argument("kind")
@click.argument("name", required=False)
@click.option("--output", "-o", default="table", type=click.Choice(_OUTPUTS), help="output format")
@click.option("--state", "-t", multiple=True, help="job states (repeatable or a,b)")
@click.option("--tenant", "-n", multiple=True, help="tenants")
@click.option("--user", "-u", multiple=True, help="users")
@click.option("--queue", "-q", help="LocalQueue")
@click.option("--all", "-A", "all_tenants", is_flag=True, help="every tenant the token may see")
@click.option("--limit", type=int, help="at most this many jobs")
def get(
    kind: str,
    name: str | None,
    output: str,
    state: tuple[str, ...],
    tenant: tuple[str, ...],
    user: tuple[str, ...],
    queue: str | None,
    all_tenants: bool,
    limit: int | None,
) -> None:
    """List jobs or objects: KIND is jobs, clusterqueues (cq), localqueues (lq), nodes, ..."""
    from phalanx.cli import render

    with _client() as client:
        # Workloads are Kueue objects here (one per job); `get jobs` is phalanx's job list.
        if kind.lower() in _JOB_KINDS and kind.lower() not in _WORKLOAD_KINDS:
            _get_jobs(
                client,
                name,
                output,
                state=_split(state),
                tenant=None if all_tenants else _split(tenant),
                user=_split(user),
                queue=queue,
                limit=limit,
            )
            return
        if name is not None:
            manifest = client.get_object(kind, name)
            if output in ("json", "yaml"):
                _out(render.dump(manifest, output))
                return
            items = [manifest]
        else:
            items = client.get_objects(kind)
            if output in ("json", "yaml"):
                _out(render.dump(items, output))
                return
        if not items:
            sys.stderr.write(f"No {kind} found.\n")
            return
        canonical = items[0]["kind"]
        canonical = "PriorityClass" if canonical == "WorkloadPriorityClass" else canonical
        header, rows = render.object_table(canonical, items)
        render.print_table(header, rows)


@app.command()
@click.option("--output", "-o", default="yaml", type=click.Choice(["yaml", "json"]))
@click.option(
    "--kind", "kinds", multiple=True, help="only this kind (repeatable: cq, lq, flavor, node, ...)"
)
def export(output: str, kinds: tuple[str, ...]) -> None:
    """Write the whole configuration as Kueue v1beta2 manifests that `apply -f` reads back."""
    from phalanx.dialects.kueue import resolve_kind
    from phalanx.dialects.kueue.export import EXPORT_KINDS, dump_documents, export_documents

    wanted = tuple(dict.fromkeys(resolve_kind(k) for k in kinds)) or EXPORT_KINDS
    with _client() as client:
        _out(dump_documents(export_documents(client.get_objects, wanted), output))


@app.command()
@click.argument("kind")
@click.argument("name")
def describe(kind: str, name: str) -> None:
    """Everything about one job (with its events) or one object (with its status)."""
    from phalanx.cli import render

    with _client() as client:
        if kind.lower() in _JOB_KINDS:
            job_id = _job_id(name)
            _out(render.describe_job(client.get(job_id), client.events(job_id)))
        else:
            _out(render.describe_object(client.get_object(kind, name)))


@app.command()
@click.argument("job", metavar="JOB")
@click.option("--output", "-o", default="text", type=click.Choice(["text", "json", "yaml"]))
def explain(job: str, output: str) -> None:
    """Why a job is pending (position, priority, what is short, expected start), or where it
    runs and why."""
    from phalanx.cli import render

    with _client() as client:
        answer = client.explain(_job_id(job))
    if output in ("json", "yaml"):
        _out(render.dump(answer, output))
        return
    render.print_explanation(answer)


@app.command()
@click.argument("kind")
@click.argument("name")
def delete(kind: str, name: str) -> None:
    """Delete an object (admin), or cancel a job."""
    with _client() as client:
        if kind.lower() in _JOB_KINDS:
            job = client.cancel(_job_id(name))
            _out(f"job/{job['id']} cancelled\n")
        else:
            result = client.delete_object(kind, name)
            _out(f"{result['kind'].lower()}/{result['name']} deleted\n")


# --------------------------------------------------------------------------- jobs


@app.command(context_settings={"allow_interspersed_args": False})
@click.argument("command", nargs=-1, required=True)
@click.option(
    "--gpus",
    "-G",
    help="GPUs in total, spread evenly over --nodes; a fraction below 1 (0.5) is a share "
    "of one GPU for a single task",
)
@click.option("--nodes", "-N", type=int, default=1, show_default=True, help="nodes")
@click.option("--ntasks", "-n", type=int, help="tasks in total (default: one per node)")
@click.option("--cpus", "-c", help="CPUs per task")
@click.option("--mem", help="memory per node, e.g. 64Gi")
@click.option("--queue", "-q", help="LocalQueue (default: the tenant's 'default')")
@click.option("--partition", "-p", help="ClusterQueue (Slurm's partition)")
@click.option("--tenant", "-A", help="tenant (Slurm's account)")
@click.option("--priority-class", help="priority class (Slurm's QOS)")
@click.option("--time", "-t", "time_limit", help="time limit, Slurm formats (10 = ten minutes)")
@click.option("--name", "-J", help="job name (default: the program's name)")
@click.option("--output", "-o", help="stdout file (%j: job id)")
@click.option("--error", "-e", help="stderr file (%j: job id; default: with stdout)")
@click.option("--chdir", "-D", help="working directory (default: the current one)")
@click.option("--env", multiple=True, help="KEY=VALUE for the job's environment; repeatable")
def submit(command: tuple[str, ...], **options: Any) -> None:
    """Submit one job and print its id: phalanx submit [OPTIONS] -- COMMAND [ARG]..."""
    from phalanx.cli.submit import build_submission

    options["env"] = list(options["env"])
    submission = build_submission(list(command), **options)
    with _client() as client:
        _out(f"{client.submit(submission)}\n")


@app.command()
@click.argument("ids", nargs=-1, type=int)
@click.option(
    "--all",
    "all_jobs",
    is_flag=True,
    help="every unfinished job you may act on (the admin: the whole cluster's)",
)
@click.option("--user", "-u", "users", multiple=True, help="with --all: only this user's jobs")
@click.option("--tenant", "tenants", multiple=True, help="with --all: only this tenant's jobs")
def cancel(
    ids: tuple[int, ...], all_jobs: bool, users: tuple[str, ...], tenants: tuple[str, ...]
) -> None:
    """Cancel jobs (pending: dequeued; running: SIGTERM, grace, SIGKILL).

    `phalanx cancel --all` cancels every pending and running job the token may act
    on; `--user U` and `--tenant T` narrow it (as `scancel -u U` does).
    """
    from phalanx.errors import Conflict, PhalanxError

    if all_jobs == bool(ids):
        raise click.UsageError("give job ids, or --all (with --user/--tenant to narrow it)")
    if (users or tenants) and not all_jobs:
        raise click.UsageError("--user and --tenant go with --all")
    failed = False
    with _client() as client:
        if all_jobs:
            ids = tuple(
                int(job["id"])
                for job in client.jobs(
                    state=_UNFINISHED, user=list(users) or None, tenant=list(tenants) or None
                )
            )
            if not ids:
                _out("no unfinished jobs to cancel\n")
                return
        for job_id in ids:
            try:
                client.cancel(job_id)
            except PhalanxError as exc:
                if len(ids) == 1 and not all_jobs:
                    raise
                if all_jobs and isinstance(exc, Conflict):
                    continue  # it ended meanwhile
                failed = True
                sys.stderr.write(f"phalanx: error: job {job_id}: {exc.detail}\n")
                continue
            _out(f"job/{job_id} cancelled\n")
    if failed:
        raise click.exceptions.Exit(1)


_UNFINISHED = ("PENDING", "ADMITTED", "RUNNING", "COMPLETING")
"""The states a job can be cancelled in."""


@app.command()
@click.argument("job_id", type=int)
@click.option("--follow", "-f", is_flag=True, help="keep printing until the job ends")
@click.option("--stderr", is_flag=True, help="the job's --error file instead of its output")
def logs(job_id: int, follow: bool, stderr: bool) -> None:
    """Print a job's output."""
    with _client() as client:
        for chunk in client.logs(job_id, stream="stderr" if stderr else "stdout", follow=follow):
            sys.stdout.write(chunk)
            sys.stdout.flush()


@app.command()
def checkpoint() -> None:
    """Inside a job: report that it saved its work now.

    Touches the file named in ``PHALANX_CHECKPOINT_FILE``, which the job's supervisor
    watches; preempting the job then loses only what it did since (the scheduler
    prefers such victims among equal ones).
    """
    import os
    import time

    path = os.environ.get("PHALANX_CHECKPOINT_FILE")
    if not path:
        raise click.ClickException("not inside a phalanx job (PHALANX_CHECKPOINT_FILE is not set)")
    try:
        with open(path, "a", encoding="utf-8"):
            pass
        now = time.time()
        os.utime(path, (now, now))
    except OSError as exc:
        raise click.ClickException(f"cannot touch {path}: {exc.strerror or exc}") from None


# --------------------------------------------------------------------------- kubeconfig


@app.command()
@click.option("--state-dir", type=click.Path(path_type=Path), help="state directory")
@click.option("--token", "token_", default=None, help="the token kubectl sends (default: admin's)")
@click.option("--user", default=None, help="make a new token for this user (admin)")
@click.option(
    "--tenant",
    "-t",
    multiple=True,
    help="with --user: a tenant (namespace) it acts for; repeatable; the first is the "
    "context's namespace",
)
def kubeconfig(
    state_dir: Path | None, token_: str | None, user: str | None, tenant: tuple[str, ...]
) -> None:
    """Print a kubeconfig for this server's Kubernetes API:
    'phalanx kubeconfig > kc && KUBECONFIG=kc kubectl get clusterqueues'."""
    import json

    import yaml

    from phalanx.client import resolve_config
    from phalanx.kubeapi.kubeconfig import kubeconfig as make
    from phalanx.statedir import CLIENT_CONFIG

    config = resolve_config(state_dir=state_dir)
    path = config.state_dir / CLIENT_CONFIG
    try:
        saved = json.loads(path.read_text())
    except PermissionError:
        raise click.ClickException(
            f"cannot read {path} (it holds the admin's token): ask the admin for a kubeconfig "
            "of your own ('phalanx kubeconfig --user YOU --tenant TEAM')"
        ) from None
    except (OSError, ValueError):
        saved = {}
    server = saved.get("kube_url") if isinstance(saved, dict) else None
    ca = saved.get("kube_ca") if isinstance(saved, dict) else None
    if not server or not ca:
        raise click.ClickException(
            f"no Kubernetes API is recorded in {path}: start phalanx with 'phalanx up' "
            "(without --no-kube-api) first"
        )
    if token_ and user:
        raise click.BadParameter("give --token or --user, not both")
    tenants = _split(tenant) or []
    if tenants and not user:
        raise click.BadParameter("--tenant goes with --user")
    who = "admin"
    token = token_ or config.token
    from phalanx.client import Client

    if user:
        with Client(state_dir=state_dir) as client:
            made = client.create_token(user, tenants, name=f"kubeconfig-{user}")
        token, who = made["token"], user
    elif token_:
        with Client(token=token_, state_dir=state_dir) as client:
            who = str(client.whoami().get("user") or "user")
    if not token:
        raise click.ClickException(f"no admin token in {path}: give --token or --user")
    namespace = tenants[0] if tenants else "default"
    document = make(str(server), Path(str(ca)), token, who, namespace)
    _out(yaml.safe_dump(document, sort_keys=False))


# --------------------------------------------------------------------------- tokens


@token_app.command("create")
@click.option("--user", required=True, help="the user the token stands for")
@click.option("--tenant", "-t", multiple=True, help="a tenant it acts for; repeatable")
@click.option("--admin", is_flag=True, help="a cluster-admin token")
@click.option("--name", default="", help="a label to revoke it by (default: the user)")
@click.option(
    "--expires",
    metavar="DURATION",
    default=None,
    help="it stops working after DURATION: 30d, 12h, 90m, or a Slurm time (default: never)",
)
def token_create(
    user: str, tenant: tuple[str, ...], admin: bool, name: str, expires: str | None
) -> None:
    """Create a token and print it (it is shown only this once)."""
    import time

    from phalanx.errors import Invalid
    from phalanx.timefmt import parse_span

    until = None
    if expires is not None:
        try:
            until = time.time() + parse_span(expires)
        except Invalid as exc:
            raise Invalid(f"--expires: {exc.detail}") from None
    with _client() as client:
        result = client.create_token(
            user, _split(tenant) or [], admin=admin, name=name, expires=until
        )
    _out(result["token"] + "\n")


@token_app.command("revoke")
@click.argument("name")
def token_revoke(name: str) -> None:
    """Revoke every token named NAME: they stop working at once (API and dashboard)."""
    with _client() as client:
        revoked = client.revoke_token(name)
    ids = ", ".join(str(t["id"]) for t in revoked)
    _out(f"token/{name} revoked ({len(revoked)} token{'s' if len(revoked) != 1 else ''}: {ids})\n")


@token_app.command("list")
def token_list() -> None:
    """List tokens (never their secrets)."""
    from phalanx.cli import render

    with _client() as client:
        items = client.tokens()
    rows = [
        [
            str(t["id"]),
            t.get("name") or "",
            t["user"],
            ",".join(t.get("tenants") or []),
            "yes" if t.get("admin") else "",
            t.get("created") or "",
            t.get("expires") or "",
            "revoked" if t.get("revoked") else "expired" if t.get("expired") else "active",
        ]
        for t in items
    ]
    render.print_table(
        ["ID", "NAME", "USER", "TENANTS", "ADMIN", "CREATED", "EXPIRES", "STATUS"], rows
    )


# --------------------------------------------------------------------------- images


@app.group(
    name="image",
    help="Import container images (OCI layout or archive, docker save archive, enroot "
    ".sqsh) for srun --container-image and pods; list and remove them. Nothing is pulled "
    "from a registry.",
)
def image_app() -> None:
    pass


def _image_store(state_dir: Path | None) -> ImageStore:
    from phalanx.runtime.containers.images import ImageStore
    from phalanx.statedir import default_state_dir

    return ImageStore.in_state_dir(state_dir if state_dir is not None else default_state_dir())


def _human_size(size: float) -> str:
    """Decimal units, as docker prints them: 950B, 1.2MB, 3.4GB."""
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000:
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1000
    return f"{size:.1f}TB"


@image_app.command("import")
@click.argument("source", type=click.Path(path_type=Path))
@click.option(
    "--name",
    metavar="REF",
    help="the reference to find it by (docker://REF, REGISTRY#IMAGE[:TAG], NAME[:TAG]); "
    "default: the name the image carries; picks one image of a multi-image archive",
)
@click.option("--state-dir", type=click.Path(path_type=Path), help="state directory")
def image_import(source: Path, name: str | None, state_dir: Path | None) -> None:
    """Import the image at SOURCE: an OCI image layout (a directory), an OCI or docker
    save archive (.tar, .tar.gz) or an enroot squashfs image (.sqsh). OCI and docker
    images are unpacked with umoci and squashed with mksquashfs (Debian's umoci and
    squashfs-tools). An image is stored once; importing it again only adds the name."""
    from phalanx.runtime.containers.images import ImageError
    from phalanx.statedir import default_state_dir, make_state_dir

    state = state_dir if state_dir is not None else default_state_dir()
    try:
        make_state_dir(state)
        image = _image_store(state).import_image(source, name)
    except ImageError as exc:
        raise click.ClickException(str(exc)) from None
    shown = image.refs[0] if image.refs else image.digest
    _out(f"imported {shown} ({image.digest}, {_human_size(image.size)})\n")


@image_app.command("ls")
@click.option("--quiet", "-q", is_flag=True, help="print only the images' digests")
@click.option("--state-dir", type=click.Path(path_type=Path), help="state directory")
def image_ls(quiet: bool, state_dir: Path | None) -> None:
    """List the imported images: one line per reference (<none> for an image known only
    by its digest)."""
    import time

    from phalanx.runtime.containers.images import ImageError

    try:
        images = _image_store(state_dir).list()
    except ImageError as exc:
        raise click.ClickException(str(exc)) from None
    if quiet:
        _out("".join(f"{image.digest}\n" for image in images))
        return
    from phalanx.cli import render

    rows = [
        [
            ref,
            image.digest[:19],
            _human_size(image.size),
            time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(image.created)),
        ]
        for image in images
        for ref in image.refs or ("<none>",)
    ]
    render.print_table(["REF", "DIGEST", "SIZE", "IMPORTED"], rows)


@image_app.command("rm")
@click.argument("refs", metavar="REF...", nargs=-1, required=True)
@click.option("--state-dir", type=click.Path(path_type=Path), help="state directory")
def image_rm(refs: tuple[str, ...], state_dir: Path | None) -> None:
    """Remove references (REF) or images (sha256:DIGEST, or 12 or more of its hex
    digits). An image is deleted when its last reference goes. Stops at the first REF
    that names no image."""
    from phalanx.runtime.containers.images import ImageError

    store = _image_store(state_dir)
    for ref in refs:
        try:
            image = store.remove(ref)
            left = store.resolve(image.digest)
        except ImageError as exc:
            raise click.ClickException(str(exc)) from None
        _out("".join(f"untagged {r}\n" for r in image.refs if left is None or r not in left.refs))
        if left is None:
            _out(f"deleted {image.digest}\n")


# --------------------------------------------------------------------------- Slurm commands

from phalanx.cli.slurm.commands import register as _register_slurm  # noqa: E402

_register_slurm(app)

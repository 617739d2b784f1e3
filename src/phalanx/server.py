"""``phalanx up``: the state directory, the store, the runtime, the control plane and the API.

The composition root: the one place that builds the parts (store, runtime,
:class:`~phalanx.control.plane.ControlPlane`, the API app) and wires them
together, above the packages that define them, so none of those imports another
to build it.

:func:`start_server` starts everything in the background and returns a handle
(the tests and the demo use it); :func:`run_server` runs it in the foreground
until SIGINT or SIGTERM. One server per state directory: a lock file keeps a
second one out, so two servers never drive the same supervisors.

On PostgreSQL several servers may share one database (and one state directory,
on storage all of them reach): they elect a leader through the database's leader
lease (:mod:`phalanx.control.leader`); the others stand by, serve reads and
forward the rest to the leader, and one of them takes over when it goes.
"""

from __future__ import annotations

import fcntl
import gc
import importlib.util
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from phalanx.api.server import ApiServer, listen
from phalanx.auth import ADMIN, hash_token, new_token
from phalanx.control.plane import ControlPlane
from phalanx.engine import EngineConfig
from phalanx.engine.config import BackfillConfig
from phalanx.errors import Conflict, Invalid, PhalanxError
from phalanx.statedir import CLIENT_CONFIG, LOCK_FILE, default_state_dir, make_state_dir

if TYPE_CHECKING:
    from phalanx.control.leader import Elector
    from phalanx.model import Node
    from phalanx.runtime.accounts import Accounts
    from phalanx.runtime.ray import RayRuntime

__all__ = ["RunningServer", "default_state_dir", "run_server", "start_server"]

log = logging.getLogger(__name__)

DEFAULT_PORT = 6900
RUNTIMES = ("local", "noop", "ray")
"""``phalanx up --runtime``: run jobs on this machine, on a Ray cluster, or run nothing
(benchmarks)."""


@dataclass
class RunningServer:
    """A started phalanx: its URL, the admin token, and the control plane behind it."""

    url: str
    admin_token: str
    plane: ControlPlane
    state_dir: Path
    _api: ApiServer = field(repr=False)
    _lock: IO[str] = field(repr=False)
    _stopped: bool = field(default=False, repr=False)
    jobs_run_as: str = ""
    """Whose account the jobs run as, in words (said at start-up)."""
    elector: Elector | None = field(default=None, repr=False)
    """With several servers on one PostgreSQL: who leads (``None``: this one, alone)."""
    _stoppers: list[Callable[[], None]] = field(default_factory=list, repr=False)
    """What stops the node health checks."""
    node_health: str = ""
    """What checks the nodes' health, in words (said at start-up; empty: nothing)."""
    containers: str = ""
    """What ``phalanx up`` says of the container runtime."""
    kube_url: str = ""
    """Where the Kubernetes API is served (empty: it is off)."""
    kube_note: str = ""
    """Why the Kubernetes API is not where it was asked for, in words (empty: it is)."""
    _kube: ApiServer | None = field(default=None, repr=False)

    @property
    def leading(self) -> bool:
        """Whether this server schedules (a standby serves reads and forwards the rest)."""
        return self.plane.leading

    def stop(self) -> None:
        """Stop the API and the control loop; running jobs keep running under their supervisors.

        A leader gives its lease up, so that a standby takes over at once.
        """
        if self._stopped:
            return
        self._stopped = True
        if self._kube is not None:
            self._kube.stop(timeout=10)
            close = getattr(self._kube.app, "close", None)
            if close is not None:
                close()  # the Kubernetes API's watch feed
        self._api.stop(timeout=30)
        for stop in self._stoppers:
            stop()
        if self.elector is not None:
            self.elector.stop()
        else:
            self.plane.stop()
        self.plane.runtime.close()
        self.plane.store.close()
        fcntl.flock(self._lock, fcntl.LOCK_UN)
        self._lock.close()

    @property
    def serving(self) -> bool:
        return self._api.alive

    @property
    def app(self) -> Any:
        """The FastAPI app being served (its routes, for checks that walk them)."""
        return self._api.app

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(
    state_dir: Path | str | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    configs: Sequence[Path | str] = (),
    database: str | None = None,
    preset: str = "phalanx",
    detect: bool = False,
    poll_interval_s: float = 0.02,
    container_runtime: str | None = None,
    runtime: str = "local",
    heads_per_cycle: int | str | None = "preset",
    backfill: bool | BackfillConfig | None = None,
    placement: str | None = None,
    topology_policy: str | None = None,
    ray_address: str | None = None,
    ray_workdir: str | None = None,
    reports_dir: Path | str | None = None,
    public_metrics: bool = False,
    tls_cert: Path | str | None = None,
    tls_key: Path | str | None = None,
    rate_limit: str | None = None,
    single_user: bool = False,
    health_check: str | None = None,
    health_check_interval_s: float | None = None,
    drain_after_failures: str | None = None,
    epilog: str | None = None,
    kube_port: int | None = None,
    kube_port_given: bool = True,
) -> RunningServer:
    """Start phalanx in this process (``port=0`` picks a free port).

    ``runtime`` is ``local`` (jobs run on this machine) or ``noop`` (nothing runs:
    timers stand in for jobs, see :mod:`phalanx.runtime.noop`). ``heads_per_cycle``
    overrides the preset's (``None``: rounds until nothing more fits, phalanx's cycle;
    ``1``: Kueue's one head per ClusterQueue per cycle). ``backfill`` turns
    reservations and backfill on or off, or sets them (``None``: as the preset has it).
    ``placement`` and ``topology_policy`` set the engine's (``None``: its defaults).
    ``runtime="ray"`` runs jobs on the Ray cluster at ``ray_address`` (default:
    ``RAY_ADDRESS``), whose nodes become phalanx's; ``ray_workdir`` is where the
    nodes keep job directories (:mod:`phalanx.runtime.ray`). The dashboard shows the
    ``phalanx sim`` results in ``reports_dir`` (default: ``STATE_DIR/reports``).
    ``public_metrics`` serves ``/metrics`` without a token. ``tls_cert`` and ``tls_key``
    (PEM files, both or neither) serve HTTPS; the URL in ``client.json`` is then https.
    ``rate_limit`` (``RATE[:BURST]``) limits each token's requests per second
    (:mod:`phalanx.api.ratelimit`; default: no limit, as Slurm's).
    A server that runs as root runs every job of the local runtime as its user's
    Unix account (:mod:`phalanx.runtime.accounts`), unless ``single_user`` (or
    ``PHALANX_SINGLE_USER=1``) runs them all as the server's own user.
    ``health_check`` (a program and its arguments) checks every node at start and
    every ``health_check_interval_s`` (default 300), draining the nodes it fails on
    and resuming them when it passes again; ``drain_after_failures`` (``N/WINDOW``)
    drains a node on which N job attempts failed for a node-side cause within WINDOW
    (:mod:`phalanx.control.health`). A slurm.conf's ``HealthCheckProgram`` and
    ``HealthCheckInterval`` set the first two when they are not given. ``epilog`` (a
    program and its arguments; else slurm.conf's ``Epilog``) runs on every node of a
    job after each attempt, draining the nodes it fails on
    (:mod:`phalanx.control.epilog`). ``kube_port`` serves the Kubernetes API
    (:mod:`phalanx.kubeapi`) over HTTPS on that port (``0``: a free one; ``None``: off),
    with ``tls_cert``/``tls_key`` or else a CA and certificate made in the state dir;
    a port not ``kube_port_given`` (the default 6443) that is taken gives way to a free one.
    """
    from phalanx.control.configs import keep_drains, read_configs, read_health_check
    from phalanx.runtime.accounts import Accounts, multi_user, single_user_requested
    from phalanx.runtime.base import Runtime
    from phalanx.runtime.local import LocalRuntime
    from phalanx.runtime.noop import NoopRuntime
    from phalanx.store import Store

    state = Path(state_dir) if state_dir is not None else default_state_dir()
    if container_runtime is None:
        container_runtime = "builtin"
    if container_runtime not in CONTAINER_RUNTIMES:
        known = ", ".join(CONTAINER_RUNTIMES)
        raise Invalid(f"--container-runtime: {container_runtime!r} is not known (known: {known})")
    if runtime not in RUNTIMES:
        raise Invalid(f"--runtime: {runtime!r} is not known (known: {', '.join(RUNTIMES)})")
    # Every configuration file is read and checked before anything starts; a
    # slurm.conf's scheduling keys set the engine's configuration.
    tls = _tls_files(tls_cert, tls_key)
    from phalanx.api.ratelimit import RateLimit

    limit = RateLimit.parse(rate_limit) if rate_limit else None
    manifests, settings = read_configs(configs)
    node_programs = read_health_check(configs)
    health = _health_settings(node_programs, health_check, health_check_interval_s)
    epilog_argv = _program(
        "--epilog", epilog if epilog is not None else node_programs.get("epilog")
    )
    failure_policy = None
    if drain_after_failures:
        from phalanx.control.health import FailurePolicy

        failure_policy = FailurePolicy.parse(drain_after_failures)
    try:
        overrides: dict[str, object] = (
            {} if heads_per_cycle == "preset" else {"heads_per_cycle": heads_per_cycle}
        )
        if backfill is not None:
            if isinstance(backfill, BackfillConfig):
                overrides["backfill"] = backfill
            else:
                overrides["backfill"] = BackfillConfig() if backfill else None
        if placement is not None:
            overrides["placement"] = placement
        if topology_policy is not None:
            overrides["topology_policy"] = topology_policy
        config = EngineConfig.for_preset(preset, **{**settings, **overrides})
    except ValueError as exc:
        raise Invalid(f"--preset/--placement/--topology-policy: {exc}") from None
    if runtime == "ray":
        ray_address = ray_address or os.environ.get("RAY_ADDRESS")
        if not ray_address:
            raise Invalid("--runtime ray: give the Ray head's address, --ray-address HOST:PORT")
        if importlib.util.find_spec("ray") is None:
            raise Invalid("--runtime ray: Ray is not installed (pip install 'phalanx[ray]')")
    detected = []
    if detect:
        from phalanx.runtime.detect import detect_gpus

        detected.append(detect_gpus())
    make_state_dir(state)
    accounts = Accounts(state) if runtime == "local" and multi_user(single_user) else None
    jobs_run_as = _jobs_run_as(runtime, accounts, single_user_requested(single_user))
    # Servers on one PostgreSQL may share the state directory (the leader lease keeps
    # all but one from acting); a server on SQLite has it to itself.
    shared = database is not None and database.startswith("postgresql")
    lock = _lock_state_dir(state, shared=shared)
    sock: socket.socket | None = None
    kube_sock: socket.socket | None = None
    kube_api: ApiServer | None = None
    kube_app: Any = None
    kube_note = ""
    plane: ControlPlane | None = None
    elector: Elector | None = None
    stoppers: list[Callable[[], None]] = []
    try:
        sock = listen(host, port)
        if kube_port is not None:
            kube_sock, kube_note = _kube_socket(host, kube_port, kube_port_given)
        scheme = "https" if tls is not None else "http"
        url = f"{scheme}://{_url_host(host)}:{sock.getsockname()[1]}"
        store = Store.open(database, state_dir=state)
        backend: Runtime
        ray_backend: RayRuntime | None = None
        if runtime == "ray":
            from phalanx.runtime.ray.runtime import DEFAULT_WORKDIR, RayRuntime

            assert ray_address is not None
            backend = ray_backend = RayRuntime(state, ray_address, ray_workdir or DEFAULT_WORKDIR)
        else:
            backend = (
                NoopRuntime(state) if runtime == "noop" else LocalRuntime(state, run_as=accounts)
            )
        plane = ControlPlane(
            store, backend, state_dir=state, config=config, poll_interval_s=poll_interval_s
        )
        if epilog_argv:
            stoppers.append(_wire_epilog(plane, epilog_argv, ray_backend))
        plane.accounts = accounts
        plane.url = url
        plane.container_runtime = container_runtime
        plane.site.images = state / "images"
        if store.dialect == "postgresql":
            from phalanx.control.leader import Elector
            from phalanx.store.lease import Lease

            holder = f"{socket.gethostname()}:{os.getpid()}:{url}"
            elector = Elector(plane, Lease(store.engine, holder, url)).start()
        else:
            plane.start()
        kube_url = ""
        kube_files: tuple[str, str, str] | None = None
        if kube_sock is not None:
            kube_files = _kube_tls(state, host, tls)
            kube_url = f"https://{_url_host(host)}:{kube_sock.getsockname()[1]}"
        token = _admin_token(plane, state, url, kube_url, kube_files[2] if kube_files else "")
        if plane.leading:
            if manifests:
                plane.apply(ADMIN, keep_drains(manifests, _stored_node(plane)))
            if detected:
                plane.apply(ADMIN, detected)
        elif manifests or detected:
            log.warning(
                "standing by: the leader's configuration stands; --config and --detect "
                "apply only on a server that leads when it starts"
            )
        if ray_backend is not None:
            _follow_ray(plane, ray_backend, elector)
        stoppers += _watch_health(
            plane,
            health,
            failure_policy,
            detected[0].name if detected else None,
            health_check_interval_s,
            ray_backend,
        )
        from phalanx.api.app import create_app

        reports = Path(reports_dir) if reports_dir is not None else state / "reports"
        if kube_sock is not None and kube_files is not None:
            from phalanx.kubeapi.app import create_kube_app

            kube_app = create_kube_app(plane, own_url=url)
        app = create_app(
            plane,
            reports_dir=reports,
            public_metrics=public_metrics,
            rate_limit=limit,
            own_url=url,
            kube_app=kube_app,
        )
        cert, key = tls if tls is not None else (None, None)
        api = ApiServer(app, host, sock=sock, tls_cert=cert, tls_key=key).start()
        if kube_app is not None and kube_sock is not None and kube_files is not None:
            kube_api = ApiServer(
                kube_app, host, sock=kube_sock, tls_cert=kube_files[0], tls_key=kube_files[1]
            ).start()
    except BaseException:
        if kube_api is not None:
            kube_api.stop()
        if kube_app is not None:
            kube_app.close()
        elif kube_sock is not None:
            kube_sock.close()
        for stop in stoppers:
            stop()
        if elector is not None:
            elector.stop()
        if plane is not None:
            plane.stop()
            plane.store.close()
        if sock is not None:
            sock.close()
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
        raise
    return RunningServer(
        url,
        token,
        plane,
        state,
        api,
        lock,
        jobs_run_as=jobs_run_as,
        elector=elector,
        _stoppers=stoppers,
        node_health=_node_health_said(health, failure_policy, bool(detected), epilog_argv),
        kube_url=kube_url,
        kube_note=kube_note,
        containers=_containers_note(container_runtime, state / "images"),
        _kube=kube_api,
    )


def _jobs_run_as(runtime: str, accounts: Accounts | None, single_user: bool) -> str:
    """Whose account the jobs run as, for the start-up lines."""
    if runtime == "ray":
        return "the Ray workers' user (--runtime ray)"
    if runtime == "noop":
        return "nothing runs (--runtime noop)"
    if accounts is not None:
        said = (
            "root's and the admin token's as root, every other user's as the Unix "
            "account of its name (the server runs as root)"
        )
        if accounts.closed is not None:
            said += (
                f"; other accounts cannot enter {accounts.closed} (it lacks o+x), so only "
                "root's jobs are taken: choose a --state-dir they can enter"
            )
        return said
    import pwd

    uid = os.geteuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    why = "--single-user" if single_user else "the server is not root"
    return f"{name} (uid {uid}), the server's own user, every job ({why})"


def run_server(
    state_dir: Path | str | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    configs: Sequence[Path | str] = (),
    database: str | None = None,
    preset: str = "phalanx",
    detect: bool = False,
    container_runtime: str | None = None,
    runtime: str = "local",
    heads_per_cycle: int | str | None = "preset",
    backfill: bool | None = None,
    placement: str | None = None,
    topology_policy: str | None = None,
    ray_address: str | None = None,
    ray_workdir: str | None = None,
    reports_dir: Path | str | None = None,
    public_metrics: bool = False,
    tls_cert: Path | str | None = None,
    tls_key: Path | str | None = None,
    rate_limit: str | None = None,
    single_user: bool = False,
    health_check: str | None = None,
    health_check_interval_s: float | None = None,
    drain_after_failures: str | None = None,
    epilog: str | None = None,
    kube_port: int | None = None,
    kube_port_given: bool = True,
) -> None:
    """Run phalanx in the foreground until SIGINT or SIGTERM."""
    running = start_server(
        state_dir,
        host=host,
        port=port,
        configs=configs,
        database=database,
        preset=preset,
        detect=detect,
        container_runtime=container_runtime,
        runtime=runtime,
        heads_per_cycle=heads_per_cycle,
        backfill=backfill,
        placement=placement,
        topology_policy=topology_policy,
        ray_address=ray_address,
        ray_workdir=ray_workdir,
        reports_dir=reports_dir,
        public_metrics=public_metrics,
        tls_cert=tls_cert,
        tls_key=tls_key,
        rate_limit=rate_limit,
        single_user=single_user,
        health_check=health_check,
        health_check_interval_s=health_check_interval_s,
        drain_after_failures=drain_after_failures,
        epilog=epilog,
        kube_port=kube_port,
        kube_port_given=kube_port_given,
    )
    # A long-lived process with a large, stable heap: keep the start-up objects out
    # of the collector's way. Young collections every 10,000 allocations keep each
    # full collection short (a 250 ms pause with 50,000 stopped every thread, list
    # pages included, under a 100,000-job fill; measured in bench/load.py).
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 100)
    done = threading.Event()

    def _stop(signum: int, frame: object) -> None:
        done.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    sys.stderr.write(
        f"phalanx is up at {running.url}\n"
        f"  dashboard: {running.url}/ (sign in with a token)\n"
        f"  state dir: {running.state_dir}\n"
        f"  jobs run as: {running.jobs_run_as}\n"
        + (
            f"  role: {'leader' if running.leading else 'standby'} (servers on this "
            "PostgreSQL elect one leader; a standby forwards to it and takes over if it goes)\n"
            if running.elector is not None
            else ""
        )
        + (f"  node health: {running.node_health}\n" if running.node_health else "")
        + f"  containers: {running.containers}\n"
        + (
            f"  kubernetes API: {running.kube_url}{running.kube_note} (kubectl: "
            "'phalanx kubeconfig > kc; KUBECONFIG=kc kubectl get clusterqueues')\n"
            if running.kube_url
            else ""
        )
        + f"  admin token: in {running.state_dir / CLIENT_CONFIG} (the CLI finds it there)\n"
        + (
            "  https: clients check the certificate against PHALANX_CA (a CA or certificate "
            "file) or the system's store\n"
            if running.url.startswith("https:")
            else ""
        )
        + f"  stop: Ctrl-C, or '{_down_command(running.state_dir)}'; running jobs keep "
        "running and are re-adopted at the next start ('phalanx cancel --all' ends them)\n"
    )
    sys.stderr.flush()
    while not done.wait(0.5):
        if not running.serving:
            break
    running.stop()


# ---------------------------------------------------------------------- pieces

CONTAINER_RUNTIMES = ("builtin", "host")
"""``builtin``: jobs run in their images; ``host``: on this machine, images ignored."""


def _containers_note(runtime: str, images: Path) -> str:
    """The ``containers:`` line of ``phalanx up``: the runtime, and what it lacks."""
    if runtime == "host":
        return "host (images are ignored: jobs run on this machine's file system)"
    from phalanx.runtime.containers.check import missing

    lacking = missing(privileged=os.geteuid() == 0)
    note = f"builtin, images in {images} ('phalanx image import FILE|DIR --name REF')"
    if lacking:
        note += f"; cannot run images until {lacking}"
    return note


def _down_command(state: Path) -> str:
    """How to stop the server of ``state`` from another shell."""
    if state == default_state_dir():
        return "phalanx down"
    return f"phalanx down --state-dir {state}"


def _follow_ray(plane: ControlPlane, runtime: RayRuntime, elector: Elector | None) -> None:
    """The Ray cluster's nodes become phalanx's, now and as they come and go (a standby
    leaves that to the leader, and catches up when it starts to lead)."""

    from phalanx.control.configs import keep_node_state
    from phalanx.runtime.ray.inventory import died

    stored = _stored_node(plane)

    def kept(nodes: list[Node]) -> list[Node]:
        # A node an operator (or the health check) drained or took down stays so when
        # Ray reports it again; a node the inventory found dead comes back up.
        return [keep_node_state(node, stored(node.name), died) for node in nodes]

    def apply(changed: list[Node]) -> None:
        if not changed or not plane.leading:
            return
        try:
            plane.apply(ADMIN, kept(changed))
        except PhalanxError as exc:
            log.warning("applying the Ray cluster's nodes failed: %s", exc.detail)

    if plane.leading:
        nodes = runtime.nodes()
        if nodes:
            plane.apply(ADMIN, kept(nodes))
    if elector is not None:
        elector.on_lead = lambda: apply(runtime.nodes())

    runtime.on_nodes = apply
    runtime.watch()


@dataclass(frozen=True)
class _Health:
    program: list[str]
    interval_s: float


def _health_settings(
    conf: dict[str, object], program: str | None, interval_s: float | None
) -> _Health | None:
    """The health check to run: ``--health-check`` or slurm.conf's ``HealthCheckProgram``
    (``conf``, from the slurm.conf files), every ``--health-check-interval`` or
    ``HealthCheckInterval`` seconds."""
    from phalanx.control.health import DEFAULT_INTERVAL_S

    conf_interval = conf.get("interval_s")
    argv = _program("--health-check", program if program is not None else conf.get("program"))
    if argv is None:
        return None
    if interval_s is not None:
        interval: object = interval_s
    elif conf_interval is not None:
        interval = conf_interval
    elif program is None:
        interval = 0.0  # slurm.conf without HealthCheckInterval: Slurm's 0, at start only
    else:
        interval = DEFAULT_INTERVAL_S
    if not isinstance(interval, int | float) or interval < 0:
        raise Invalid(f"--health-check-interval: {interval!r}: expected seconds >= 0")
    return _Health(argv, float(interval))


def _node_health_said(
    health: _Health | None, failures: Any, nvml: bool, epilog: list[str] | None = None
) -> str:
    import shlex

    said = []
    if health is not None:
        when = f"every {health.interval_s:g} s" if health.interval_s else "at start"
        said.append(f"{shlex.join(health.program)} {when}")
    if epilog:
        said.append(f"epilog {shlex.join(epilog)} after each job on its nodes")
    if nvml:
        said.append("NVML (XID, ECC, lost GPUs) on this machine's node")
    if failures is not None:
        said.append(f"drain after {failures.count} job failures in {failures.window}")
    return "; ".join(said)


def _program(flag: str, text: object) -> list[str] | None:
    """A program and its arguments, as a flag or a slurm.conf key gives them."""
    import shlex

    if not text:
        return None
    assert isinstance(text, str)
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise Invalid(f"{flag}: {text!r}: {exc}") from None
    return argv or None


def _wire_epilog(
    plane: ControlPlane, program: list[str], ray: RayRuntime | None
) -> Callable[[], None]:
    """Run ``program`` on each node of a job after each attempt (on the node's machine
    with Ray, else here); what stops it."""
    from phalanx.control.epilog import EPILOG_TIMEOUT_S, Epilogs
    from phalanx.control.health import CheckResult, check_result, run_program

    def on_ray(node: Node, env: dict[str, str]) -> CheckResult | None:
        assert ray is not None
        ran = ray.run_on_node(node.name, program, env, EPILOG_TIMEOUT_S)
        return None if ran is None else check_result(*ran, EPILOG_TIMEOUT_S)

    def here(node: Node, env: dict[str, str]) -> CheckResult:
        return run_program(program, node, EPILOG_TIMEOUT_S, env=env)

    epilogs = Epilogs(program, on_ray if ray is not None else here)
    plane.runtime_events.epilogs = epilogs
    return epilogs.stop


def _watch_health(
    plane: ControlPlane,
    health: _Health | None,
    failures: Any,
    detected: str | None,
    interval_s: float | None,
    ray: RayRuntime | None,
) -> list[Callable[[], None]]:
    """Start the node health checks and the failure counter; what stops them (the
    NVML check of the ``--detect`` node runs every ``interval_s`` without a program)."""
    from phalanx.control.health import (
        DEFAULT_INTERVAL_S,
        DEFAULT_TIMEOUT_S,
        CheckResult,
        HealthChecker,
        NodeFailures,
        check_result,
        drain_if_up,
        node_environment,
        run_program,
    )

    def apply(nodes: list[Node]) -> None:
        plane.apply(ADMIN, nodes)

    stoppers: list[Callable[[], None]] = []
    extra: dict[str, Callable[[], tuple[str, bool] | None]] = {}
    if detected is not None:
        from phalanx.runtime.detect import NvmlHealth

        extra[detected] = NvmlHealth()
    if health is not None or extra:
        program = health.program if health is not None else None

        def on_ray(node: Node) -> CheckResult | None:
            # On the node's machine; a node Ray does not have live gets no verdict.
            assert ray is not None and program is not None
            ran = ray.run_on_node(node.name, program, node_environment(node), DEFAULT_TIMEOUT_S)
            return None if ran is None else check_result(*ran, DEFAULT_TIMEOUT_S)

        def here(node: Node) -> CheckResult:
            assert program is not None
            return run_program(program, node)

        checker = HealthChecker(
            nodes=plane.nodes,
            apply=apply,
            runner=None if not program else on_ray if ray is not None else here,
            interval_s=health.interval_s
            if health is not None
            else interval_s or DEFAULT_INTERVAL_S,
            leading=lambda: plane.leading,
            extra=extra,
        ).start()
        stoppers.append(checker.stop)
    if failures is not None:
        counter = NodeFailures(failures)
        # The counts of the window so far, from the jobs' history (a restart keeps them).
        now = plane.clock()
        counter.recover(
            plane.store.recent_events(("Requeued", "Finished"), now - failures.window_s), now
        )
        counter.start(drain_if_up(plane.nodes, apply))
        plane.runtime_events.on_exit = counter.observe
        stoppers.append(counter.stop)
    return stoppers


def _lock_state_dir(state: Path, *, shared: bool = False) -> IO[str]:
    """Keep other servers out of ``state`` (``shared``: only those not on PostgreSQL)."""
    lock = open(state / LOCK_FILE, "a+")  # noqa: SIM115 - held for the server's lifetime
    try:
        fcntl.flock(lock, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        raise Conflict(
            f"another phalanx server is using the state directory {state} (pid {holder}); "
            "stop it, or start this one with --state-dir DIR"
        ) from None
    if not shared:
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
    return lock


def _tls_files(cert: Path | str | None, key: Path | str | None) -> tuple[str, str] | None:
    """The certificate and key files to serve HTTPS with, checked: both or neither given,
    readable, PEM, and the key unencrypted and the certificate's."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        missing = "--tls-cert" if cert is None else "--tls-key"
        raise Invalid(f"{missing}: HTTPS needs both --tls-cert FILE and --tls-key FILE")
    for flag, path in (("--tls-cert", cert), ("--tls-key", key)):
        try:
            with open(path, "rb") as fh:
                fh.read(1)
        except OSError as exc:
            raise Invalid(f"{flag}: cannot read {path}: {exc.strerror or exc}") from None
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # An encrypted key would make OpenSSL ask for a passphrase on the terminal.
        context.load_cert_chain(str(cert), str(key), password=lambda: b"")
    except (ssl.SSLError, ValueError) as exc:
        if getattr(exc, "reason", None) == "KEY_VALUES_MISMATCH":
            raise Invalid(f"--tls-key: {key} is not the private key of {cert}") from None
        raise Invalid(
            f"--tls-cert/--tls-key: {cert} and {key} are not a PEM certificate and its "
            "unencrypted private key"
        ) from None
    return str(cert), str(key)


DEFAULT_KUBE_PORT = 6443
"""The Kubernetes API's port, a real API server's."""


def _kube_socket(host: str, port: int, given: bool) -> tuple[socket.socket, str]:
    """The Kubernetes API's listening socket; the default port, when taken, gives way to
    a free one (said at start-up), a port the user named does not."""
    try:
        return listen(host, port), ""
    except Conflict as exc:
        if given:
            raise Conflict(exc.detail.replace("--port", "--kube-port (or --no-kube-api)")) from None
        sock = listen(host, 0)
        return sock, f" ({port} was taken)"


def _kube_tls(state: Path, host: str, tls: tuple[str, str] | None) -> tuple[str, str, str]:
    """Certificate, key and CA of the Kubernetes API: ``--tls-cert``/``--tls-key`` (the
    certificate is its own CA for the kubeconfig) or the state dir's own CA."""
    if tls is not None:
        return tls[0], tls[1], tls[0]
    from phalanx.kubeapi.certs import ensure_tls

    made = ensure_tls(state, host)
    return str(made.cert), str(made.key), str(made.ca)


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def _admin_token(
    plane: ControlPlane, state: Path, url: str, kube_url: str = "", kube_ca: str = ""
) -> str:
    """The admin token of ``client.json``; made (and written there, mode 0600) when missing.
    ``client.json`` also says where the Kubernetes API is and its CA (``phalanx kubeconfig``)."""
    path = state / CLIENT_CONFIG
    token: str | None = None
    try:
        token = json.loads(path.read_text()).get("token")
    except (OSError, ValueError, AttributeError):
        token = None
    row = plane.store.find_token(hash_token(token)) if token else None
    if token is None or row is None or not row.admin or row.revoked:
        token = new_token()
        # Any server may add a token, leading or not.
        with plane.store.begin(fenced=False) as tx:
            tx.create_token(
                name="admin",
                user="admin",
                tenants=[],
                admin=True,
                token_hash=hash_token(token),
                created=plane.clock(),
            )
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        saved = {"url": url, "token": token}
        if kube_url:
            saved.update(kube_url=kube_url, kube_ca=kube_ca)
        json.dump(saved, fh)
    os.replace(tmp, path)
    return token


def _stored_node(plane: ControlPlane) -> Callable[[str], dict[str, Any] | None]:
    """The stored Node's fields by name (None: no such node)."""

    def stored(name: str) -> dict[str, Any] | None:
        row = plane.store.get_object("Node", name)
        return None if row is None else dict(row.spec)

    return stored

"""The Ray runtime: admitted jobs run on a Ray cluster, placed exactly where the engine said.

Per Ray node (see :mod:`phalanx.runtime.ray` for the whole picture): one
long-lived :class:`~phalanx.runtime.ray.agent.NodeAgent`, detached, pinned to
the node and named ``phalanx-<id>/node/<ray node id>`` (``<id>`` is kept in the
state directory), created when the inventory first sees the node live (again
when it dies and a new one is needed); it runs the tasks of every attempt
placed there, under the standard supervisor.

Per job attempt:

- one placement group, detached and named ``phalanx-<id>/<job>/<attempt>``, with
  one bundle per (node, pod set) of the engine's placement, each pinned to its
  node by Ray's ``ray.io/node-id`` label, so Ray reserves what the engine
  decided and never decides again: the cluster's resource view (what other Ray
  work, the autoscaler and the dashboard see) counts the job;
- one *part* per bundle, in that node's agent: :meth:`NodeAgent.start
  <phalanx.runtime.ray.agent.NodeAgent.start>` is sent to every node of the gang
  at once, and each agent starts its supervisor as soon as Ray has placed the
  group (the agents wait for it, not the control plane).

:meth:`RayRuntime.poll` keeps one :meth:`NodeAgent.watch
<phalanx.runtime.ray.agent.NodeAgent.watch>` call open per node and turns the
parts' ``status.json`` into Started (every node's tasks running), Checkpointed
(a node's supervisor saw its tasks touch ``PHALANX_CHECKPOINT_FILE``, as on the
local runtime) and Exited (every node's tasks done) events. A node that dies
(its agent is gone, or Ray marks the node dead) ends the attempts there
``NODE_FAIL``, naming it in ``Exited.lost_nodes``, once the control plane has
been told the node is down (at most :data:`LOST_WAIT_S` later). An ended
attempt's parts first end what still runs on their nodes (a NODE_FAIL's other
nodes), then the placement group is removed. After a restart of the control
plane, :meth:`RayRuntime.adopt` finds the placement group by name and each
bundle's part in its node's agent.

Inventory: a watcher thread reads ``ray.nodes()`` every second
(:class:`~phalanx.runtime.ray.inventory.Inventory`) and hands the Nodes that
changed to :attr:`RayRuntime.on_nodes` (the server applies them as the admin).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.model import Node
from phalanx.runtime.batch import slurm_files
from phalanx.runtime.ray.agent import agent_class
from phalanx.runtime.ray.connect import NAMESPACE, connect, is_loopback
from phalanx.runtime.ray.inventory import RAY_NODE_ID_LABEL, Inventory
from phalanx.runtime.spec import (
    AlreadyLaunched,
    Checkpointed,
    Exited,
    LaunchSpec,
    RuntimeEvent,
    Started,
    StepsReported,
)

__all__ = ["RayRuntime"]

log = logging.getLogger(__name__)

STATUS_WAIT_S = 2.0
"""How long one watch call waits in the agent for a change."""
PLACE_TIMEOUT_S = 120.0
"""How long a placement group may stay unplaced before the attempt fails NODE_FAIL."""
INVENTORY_PERIOD_S = 1.0
RELEASE_WAIT_S = 10.0
"""How long the agents get to end what still runs of an ended attempt on their nodes
before its placement group is removed."""
LOST_WAIT_S = 10.0
"""How long a NODE_FAIL waits for the control plane to be told its node is down (by
:attr:`RayRuntime.on_nodes`), so that the requeued job is not placed there again."""
SETTLE_S = 2.0
"""How long after a placement group of a node was removed Ray may not show its
resources free yet: a launch on that node waits until Ray shows them free."""
SETTLE_MAX_S = 1.0
"""How long such a launch waits at most before asking Ray anyway."""
DEFAULT_WORKDIR = "/tmp/phalanx"
GPU = "nvidia.com/gpu"
GPU_MILLI = "phalanx.io/gpu-milli"
STATE_ORDER = ("NODE_FAIL", "PREEMPTED", "CANCELLED", "TIMEOUT", "FAILED", "COMPLETED")
"""How the nodes' ends combine into the job's: the first found in this order."""


def _host_lines(address: str, name: str) -> str:
    """``name``'s lines in a job's hosts file. A loopback node gets ``::1`` too: torch's
    TCPStore asks for IPv6 first and does not fall back for a name the file knows."""
    line = f"{address} {name}\n"
    if is_loopback(address):
        line += f"::1 {name}\n"
    return line


def _installation_id(state_dir: Path) -> str:
    """A random id kept in the state directory: names in a Ray cluster that several
    phalanx installations (or a test's fresh state directories) share stay apart."""
    path = state_dir / "runtime" / "ray-id"
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        text = ""
    if not text:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = secrets.token_hex(4)
        tmp = path.with_name("ray-id.tmp")
        tmp.write_text(text + "\n", encoding="ascii")
        os.replace(tmp, path)
    return text


@dataclass(slots=True)
class _Part:
    """One bundle of an attempt: its part in its node's agent."""

    bundle: int
    node: str
    agent: Any
    runs_tasks: bool
    node_id: str | None = None
    key: str = ""
    """The part's name in the agent: ``<job>/<attempt>/<bundle>``."""
    stat: list[int] | None = None
    """The stat key of the status last read (what the agent compares with)."""
    status: dict[str, Any] = field(default_factory=dict)
    lost: str | None = None
    node_lost: bool = False
    """Whether ``lost`` is the node's own loss (it died, or its agent is gone), which
    :attr:`Exited.lost_nodes <phalanx.runtime.spec.Exited.lost_nodes>` names."""


@dataclass(slots=True)
class _Unplaced:
    """An attempt's placement group still to ask Ray for, and its parts' plans."""

    name: str
    resources: list[dict[str, float]]
    plans: list[dict[str, Any]]
    since: float
    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    """Signals and time limits that came meanwhile, for the parts with tasks."""


@dataclass(slots=True)
class _Attempt:
    job_id: int
    attempt: int
    pg: Any
    parts: list[_Part]
    unplaced: _Unplaced | None = None
    """Set until the placement group is asked for (:meth:`RayRuntime._place`)."""
    started: bool = False
    exited: bool = False
    checkpoint_at: float | None = None
    """The latest checkpoint reported (a Checkpointed event went out for it)."""
    steps: list[Any] | None = None
    """The job steps last reported (a StepsReported event went out for them)."""


def bundle_resources(
    requests: dict[str, int], count: int, offered: Iterable[str]
) -> dict[str, float]:
    """What ``count`` tasks of ``requests`` reserve in Ray terms (only resources the Ray
    node offers; never empty)."""
    offered = set(offered)
    out: dict[str, float] = {}
    for name, amount in requests.items():
        if name == "cpu":
            out["CPU"] = out.get("CPU", 0.0) + amount * count / 1000
        elif name == GPU:
            out["GPU"] = out.get("GPU", 0.0) + amount * count
        elif name == GPU_MILLI:
            out["GPU"] = out.get("GPU", 0.0) + amount * count / 1000
        elif name == "memory":
            out["memory"] = float(amount * count)
        elif name in offered:
            out[name] = float(amount * count)
    out = {k: v for k, v in out.items() if v > 0 and (k in offered or k == "CPU")}
    return out or {"CPU": 0.01}


class RayRuntime:
    """Runs admitted jobs on the Ray cluster at ``address`` (see the module docstring)."""

    def __init__(self, state_dir: Path, address: str, workdir: str = DEFAULT_WORKDIR) -> None:
        connect(address)
        import ray

        self._ray = ray
        self.address = address
        self.state_dir = Path(state_dir)
        self.logs_dir = self.state_dir / "runtime" / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.id = _installation_id(self.state_dir)
        self.prefix = f"phalanx-{self.id}"
        """What every placement group, agent and job directory of this installation
        is named under."""
        self.workdir = workdir.rstrip("/") or "/"
        self.inventory = Inventory()
        self.on_nodes: Callable[[list[Node]], None] | None = None
        """Called (from the watcher thread) with the Nodes that changed."""
        self._lock = threading.Lock()
        self._agents: dict[str, Any] = {}
        """Ray node id -> that node's agent (an actor handle)."""
        self._watches: dict[str, tuple[Any, Any]] = {}
        """Ray node id -> the open watch call of its agent, and that agent."""
        self._attempts: dict[tuple[int, int], _Attempt] = {}
        self._backlog: list[RuntimeEvent] = []
        self._cleanup: list[_Attempt] = []
        self._releasing: list[tuple[_Attempt, list[Any], float]] = []
        """Ended attempts whose parts are ending their tasks: the calls, and until when."""
        self._lost_at: dict[str, float] = {}
        """Ray node id -> when an attempt found it lost."""
        self._freed_at: dict[str, float] = {}
        """Ray node id -> when a placement group with a bundle there was last removed."""
        self._told_down: set[str] = set()
        """The Ray node ids :attr:`on_nodes` has handed over as down (or gone)."""
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self.refresh()

    # -- inventory ------------------------------------------------------------

    def refresh(self) -> list[Node]:
        """Read ``ray.nodes()`` now; the Nodes that changed. A node seen live for the
        first time gets its agent now, so that its first job does not wait for it."""
        entries = self._ray.nodes()  # type: ignore[no-untyped-call]
        with self._lock:
            changed = self.inventory.update(entries)
            live = {n.node_id for n in self.inventory.live.values()}
            new = sorted(live - set(self._agents))
        for node_id in new:
            try:
                self._agent(node_id)
            except Exception as exc:
                log.warning("starting the agent of Ray node %s failed: %s", node_id, exc)
        return changed

    def nodes(self) -> list[Node]:
        """Every Node the Ray cluster has (down ones too)."""
        with self._lock:
            return list(self.inventory.nodes.values())

    def watch(self) -> None:
        """Follow the cluster from a thread: :attr:`on_nodes` gets each change."""
        if self._watcher is not None:
            return

        def run() -> None:
            while not self._stop.is_set():
                self._wake.wait(INVENTORY_PERIOD_S)
                self._wake.clear()
                if self._stop.is_set():
                    break
                try:
                    changed = self.refresh()
                    if changed and self.on_nodes is not None:
                        self.on_nodes(changed)
                    with self._lock:
                        live = {n.node_id for n in self.inventory.live.values()}
                        self._told_down = set(self.inventory.names) - live
                except Exception:
                    if not self._stop.is_set():
                        log.exception("reading the Ray cluster's nodes failed")

        self._watcher = threading.Thread(target=run, name="phalanx-ray-inventory", daemon=True)
        self._watcher.start()

    def run_on_node(
        self, name: str, argv: Sequence[str], env: dict[str, str], timeout_s: float
    ) -> tuple[int | None, bytes] | None:
        """Run a program on the live Ray node ``name`` (the node health check): its
        exit status (``None``: killed after ``timeout_s``) and output, or ``None``
        when the node is not live."""
        from phalanx.runtime.ray.health import run_health_program

        with self._lock:
            node_id = self.inventory.node_id(name)
        if node_id is None:
            return None
        return run_health_program(node_id, argv, env, timeout_s)

    # -- agents ---------------------------------------------------------------

    def agent_name(self, node_id: str) -> str:
        """The name of the agent of the Ray node ``node_id``."""
        return f"{self.prefix}/node/{node_id}"

    def _agent(self, node_id: str) -> Any:
        """The agent of the Ray node ``node_id``: the one this runtime holds, else the
        one running under its name (a restart), else a new one, pinned to the node."""
        with self._lock:
            agent = self._agents.get(node_id)
        if agent is not None:
            return agent
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        agent = (
            agent_class()
            .options(
                name=self.agent_name(node_id),
                namespace=NAMESPACE,
                lifetime="detached",
                get_if_exists=True,
                num_cpus=0,
                max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            )
            .remote(self.workdir)
        )
        with self._lock:
            return self._agents.setdefault(node_id, agent)

    def _agent_gone(self, node_id: str, agent: Any) -> None:
        """Forget a dead agent: the node's next job gets a new one (if the node lives)."""
        with self._lock:
            if self._agents.get(node_id) is agent:
                del self._agents[node_id]
        self._watches.pop(node_id, None)

    def retire_agents(self, timeout: float = 5.0) -> None:
        """End the agents that run nothing (this runtime is going away; a restarted one
        makes them again). Agents that run jobs stay."""
        with self._lock:
            agents = list(self._agents.values())
            self._agents.clear()
        refs = []
        for agent in agents:
            with contextlib.suppress(Exception):
                refs.append(agent.exit_if_idle.remote())
        if refs:
            with contextlib.suppress(Exception):
                self._ray.wait(refs, num_returns=len(refs), timeout=timeout)

    # -- paths ----------------------------------------------------------------

    def default_output(self, job_id: int) -> Path:
        """Where a job's output goes when it names none (a shared filesystem's path
        when the Ray nodes are other machines)."""
        return self.logs_dir / f"{job_id}.out"

    def jobdir(self, job_id: int, attempt: int, bundle: int) -> str:
        return f"{self.workdir}/{self.prefix}/jobs/{job_id}/{attempt}/{bundle}"

    def pg_name(self, job_id: int, attempt: int) -> str:
        return f"{self.prefix}/{job_id}/{attempt}"

    @staticmethod
    def part_key(job_id: int, attempt: int, bundle: int) -> str:
        """A bundle's part in its node's agent."""
        return f"{job_id}/{attempt}/{bundle}"

    # -- launching ------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> None:
        """Reserve the placement group and start the parts on every node at once;
        :class:`AlreadyLaunched` if this attempt's placement group exists."""
        # The jobs that ended before this one was admitted free their reservations
        # first: this one may need them.
        self._flush()
        key = (spec.job_id, spec.attempt)
        name = self.pg_name(spec.job_id, spec.attempt)
        if key in self._attempts or self._find_pg(name) is not None:
            raise AlreadyLaunched(f"job {spec.job_id} attempt {spec.attempt} was launched already")
        # A batch job's tasks are its batch shell alone: its allocation names every node.
        alloc = spec.allocation or spec.tasks
        groups: dict[tuple[str, str], list[int]] = {}
        for index, task in enumerate(alloc):
            groups.setdefault((task.node, task.pod_set), []).append(index)
        bundles = list(groups)
        with self._lock:
            live = dict(self.inventory.live)
        node_ids = {node: (live[node].node_id if node in live else None) for node, _ in bundles}
        missing = sorted(n for n, i in node_ids.items() if i is None)
        if missing:
            message = f"node {missing[0]} is not in the Ray cluster"
            self._backlog.append(self._failed(spec, message, tuple(missing)))
            return
        agents = {node: self.agent_name(str(node_ids[node])) for node, _ in bundles}
        first = alloc[0].node if alloc else ""
        head = (first, alloc[0].pod_set if alloc else "")
        run = spec
        files: list[Any] = []
        if spec.script is not None or spec.slurm is not None:
            run = dataclasses.replace(
                spec,
                env={
                    **spec.env,
                    "PHALANX_RAY_ADDRESS": self.address,
                    "PHALANX_RAY_NAMESPACE": NAMESPACE,
                    "PHALANX_RAY_AGENTS": json.dumps(agents),
                    "PHALANX_RAY_ATTEMPT": f"{spec.job_id}/{spec.attempt}",
                },
            )
            batch_bundle = bundles.index(head)
            run, files = slurm_files(
                run, self.jobdir(spec.job_id, spec.attempt, batch_bundle), f"{self.workdir}/bin"
            )
        hosts = "".join(_host_lines(n.address, node) for node, n in sorted(live.items()))
        if spec.kube is not None:
            for rank, pods in enumerate(spec.kube.get("tasks") or ()):
                node = spec.tasks[rank].node if rank < len(spec.tasks) else first
                address = live[node].address if node in live else "127.0.0.1"
                hosts += "".join(_host_lines(address, pod["name"]) for pod in pods)
        resources = []
        for (node, pod_set), indices in groups.items():
            requests = spec.requests.get(pod_set, {})
            resources.append(bundle_resources(requests, len(indices), live[node].resources))
        parts: list[_Part] = []
        plans: list[dict[str, Any]] = []
        task_list = list(run.tasks)
        for bundle, ((node, pod_set), indices) in enumerate(groups.items()):
            if spec.script is None and not spec.allocation:
                mine = [task_list[i] for i in indices]
            else:
                mine = [task_list[0]] if (node, pod_set) == head else []
            gpus = sorted(g for i in indices for g in alloc[i].gpus)
            plan: dict[str, Any] = {
                "node": node,
                "root": self.workdir,
                "jobdir": self.jobdir(spec.job_id, spec.attempt, bundle),
                "hosts": hosts,
                "gpus": gpus,
                "kube": spec.kube is not None,
                "files": [
                    [f.name, f.text, f.mode] for f in files if mine or f.name == "slurm.json"
                ],
                "spec": None,
                "place_timeout_s": PLACE_TIMEOUT_S,
            }
            if mine:
                own = dataclasses.replace(run, tasks=tuple(mine), allocation=())
                body = dataclasses.asdict(own)
                body["task_count"] = len(spec.tasks)
                plan["spec"] = body
            part = _Part(bundle, node, None, bool(mine), str(node_ids[node]))
            part.key = self.part_key(spec.job_id, spec.attempt, bundle)
            parts.append(part)
            plans.append(plan)
        record = _Attempt(spec.job_id, spec.attempt, None, parts)
        record.unplaced = _Unplaced(name, resources, plans, time.monotonic())
        self._attempts[key] = record
        # Resources freed a moment ago may not be free in Ray's view yet: a placement
        # group asked for then waits for Ray's next retry (up to a second), so it is
        # asked for once Ray shows them free (now, or at a next poll; SETTLE_MAX_S at
        # most).
        now = time.monotonic()
        if any(now - self._freed_at.get(p.node_id or "", -1e9) < SETTLE_S for p in parts):
            self._place_waiting()
        else:
            self._place(record)

    def _place(self, record: _Attempt) -> None:
        """Create the attempt's placement group and start its parts on every node at once."""
        from ray.util.placement_group import placement_group

        unplaced = record.unplaced
        assert unplaced is not None
        record.unplaced = None
        try:
            record.pg = placement_group(
                unplaced.resources,
                strategy="PACK",
                name=unplaced.name,
                lifetime="detached",
                bundle_label_selector=[{RAY_NODE_ID_LABEL: str(p.node_id)} for p in record.parts],
            )
        except Exception as exc:
            # Ray refused it: nothing runs; the attempt ends NODE_FAIL at the next poll.
            for part in record.parts[:1]:
                part.lost = f"Ray refused the job's placement group: {exc}"
            return
        for part, plan in zip(record.parts, unplaced.plans, strict=True):
            try:
                part.agent = self._agent(str(part.node_id))
                part.agent.start.remote(part.key, plan, record.pg)
            except Exception as exc:
                part.lost = f"the agent on node {part.node} failed: {exc}"
        for method, args in unplaced.calls:
            self._call(record, method, *args)

    def _call(self, record: _Attempt, method: str, *args: Any) -> None:
        """``method`` of the agents of the attempt's parts with tasks (kept for them
        while the attempt waits for its placement group)."""
        if record.unplaced is not None:
            record.unplaced.calls.append((method, args))
            return
        for part in record.parts:
            if part.runs_tasks and part.agent is not None:
                with contextlib.suppress(Exception):
                    getattr(part.agent, method).remote(part.key, *args)

    def _place_waiting(self) -> None:
        """Place the attempts that wait for freed resources, in launch order, those that
        fit what Ray shows free (or that waited :data:`SETTLE_MAX_S`)."""
        waiting = [r for r in self._attempts.values() if r.unplaced is not None and not r.exited]
        if not waiting:
            return
        from ray._private.state import available_resources_per_node

        try:
            free = available_resources_per_node()  # type: ignore[no-untyped-call]
        except Exception:
            free = {}
        now = time.monotonic()
        for record in waiting:
            unplaced = record.unplaced
            assert unplaced is not None
            wanted = [
                (p.node_id or "", r) for p, r in zip(record.parts, unplaced.resources, strict=True)
            ]
            fits = all(
                free.get(node_id, {}).get(name, 0.0) >= amount - 1e-9
                for node_id, bundle in wanted
                for name, amount in bundle.items()
            )
            if fits or now - unplaced.since >= SETTLE_MAX_S:
                for node_id, bundle in wanted:
                    there = free.setdefault(node_id, {})
                    for name, amount in bundle.items():
                        there[name] = there.get(name, 0.0) - amount
                self._place(record)

    def _failed(self, spec: LaunchSpec, message: str, lost_nodes: tuple[str, ...] = ()) -> Exited:
        return Exited(
            spec.job_id,
            spec.attempt,
            "NODE_FAIL",
            None,
            None,
            None,
            time.time(),
            message,
            lost_nodes,
        )

    def _find_pg(self, name: str) -> Any:
        from ray.util import get_placement_group

        try:
            return get_placement_group(name)
        except ValueError:
            return None

    # -- commands -------------------------------------------------------------

    def _current(self, job_id: int) -> _Attempt | None:
        tracked = [a for (j, _), a in self._attempts.items() if j == job_id]
        return max(tracked, key=lambda a: a.attempt) if tracked else None

    def set_node_names(self, names: Iterable[str]) -> None:
        """Nothing to do: the hosts files come from the Ray nodes' addresses."""

    def step_usage(self, job_id: int) -> list[dict[str, Any]]:
        """The running steps' usage (``sstat``): the batch shell's node samples its
        tasks, each other node the tasks it runs for them."""
        record = self._current(job_id)
        if record is None or record.exited:
            return []
        head = [p for p in record.parts if p.runs_tasks and p.agent is not None]
        others = [p for p in record.parts if not p.runs_tasks and p.agent is not None]
        if not head:
            return []
        try:
            steps: list[dict[str, Any]] = self._ray.get(
                head[0].agent.step_usage.remote(head[0].key), timeout=10
            )
            remote = self._ray.get([p.agent.remote_usage.remote(p.key) for p in others], timeout=10)
        except Exception as exc:
            log.warning("sstat of job %s: %s", job_id, exc)
            return []
        found = {(u["step"], u["rank"]): u for node in remote for u in node}
        for step in steps:
            step["tasks"] = [
                {**task, **found.get((step["step"], task["rank"]), {})} for task in step["tasks"]
            ]
            for task in step["tasks"]:
                task.pop("step", None)
        return steps

    def step_socket(self, job_id: int) -> str | None:
        """The running job's step socket (:mod:`phalanx.runtime.stepd`), on the node of
        its batch shell (reachable from that machine only)."""
        record = self._current(job_id)
        if record is None or record.exited:
            return None
        for part in record.parts:
            if part.runs_tasks:
                path = f"{self.jobdir(job_id, record.attempt, part.bundle)}/step.sock"
                return path if os.path.exists(path) else None
        return None

    def cancel(self, job_id: int, *, preempt_grace_s: float | None = None) -> None:
        """Cancel on every node (an agent ends a part whose supervisor has not started,
        Ray not having placed the group yet, without starting it)."""
        record = self._current(job_id)
        if record is None or record.exited:
            return
        if record.unplaced is not None:
            # Nothing asked of Ray yet, nothing runs: it ends here.
            record.exited = True
            state = "CANCELLED" if preempt_grace_s is None else "PREEMPTED"
            self._backlog.append(
                Exited(job_id, record.attempt, state, None, None, None, time.time(), "")
            )
            return
        for part in record.parts:
            if part.agent is not None and part.lost is None:
                with contextlib.suppress(Exception):
                    part.agent.cancel.remote(part.key, preempt_grace_s)

    def signal(self, job_id: int, signum: int, *, batch_only: bool = False) -> None:
        record = self._current(job_id)
        if record is not None:
            self._call(record, "signal", int(signum), batch_only)

    def set_time_limit(self, job_id: int, seconds: float | None) -> None:
        record = self._current(job_id)
        if record is not None:
            self._call(record, "set_time_limit", seconds)

    def adopt(self, job_id: int, attempt: int) -> bool:
        """Find an attempt started before a restart: its placement group, and each
        bundle's part in the agent of the node Ray placed the bundle on."""
        from ray.util import placement_group_table

        key = (job_id, attempt)
        if key in self._attempts:
            return True
        pg = self._find_pg(self.pg_name(job_id, attempt))
        if pg is None:
            return False
        ray = self._ray
        try:
            placed = placement_group_table(pg).get("bundles_to_node_id") or {}
        except Exception:
            placed = {}
        parts: list[_Part] = []
        asked: list[tuple[_Part, Any]] = []
        for bundle in range(len(pg.bundle_specs)):
            part = _Part(bundle, "?", None, True, placed.get(bundle))
            part.key = self.part_key(job_id, attempt, bundle)
            parts.append(part)
            try:
                part.agent = ray.get_actor(self.agent_name(str(part.node_id)), namespace=NAMESPACE)
                asked.append((part, part.agent.about.remote(part.key)))
            except Exception as exc:
                part.lost = f"the agent of bundle {bundle} is gone ({type(exc).__name__})"
        for part, ref in asked:
            try:
                about = ray.get(ref, timeout=30)
            except Exception as exc:
                about = None
                part.lost = f"the agent of bundle {part.bundle} is gone ({type(exc).__name__})"
            if about is None:
                part.lost = part.lost or f"the agent of bundle {part.bundle} lost the job"
                part.agent = None
                continue
            part.node, part.runs_tasks = about["node"], about["runs_tasks"]
            with self._lock:
                self._agents.setdefault(str(part.node_id), part.agent)
        self._attempts[key] = _Attempt(job_id, attempt, pg, parts)
        return True

    def forget(self, job_id: int, attempt: int | None = None) -> None:
        """Stop tracking; the attempt's parts and placement group go at the next poll
        (after the control plane has stored the attempt's end)."""
        for key in [k for k in self._attempts if k[0] == job_id and attempt in (None, k[1])]:
            self._cleanup.append(self._attempts.pop(key))
        self._backlog = [
            e for e in self._backlog if not (e.job_id == job_id and attempt in (None, e.attempt))
        ]

    def close(self) -> None:
        """Stop watching and disconnect; jobs keep running in their agents (the agents
        that run none end)."""
        self._stop.set()
        self._wake.set()
        self._release([*self._cleanup, *(record for record, _, _ in self._releasing)])
        self._cleanup, self._releasing = [], []
        self._attempts.clear()
        self.retire_agents()
        with contextlib.suppress(Exception):
            self._ray.shutdown()

    def _shut_down(self, records: Sequence[_Attempt]) -> None:
        """Ask the agents to end what still runs of ended attempts (a NODE_FAIL leaves
        the other nodes' running); the placement groups go when done
        (:meth:`_finish_release`), at once for an attempt that has nothing left to end
        (every node ran tasks, and reported them done)."""
        deadline = time.monotonic() + RELEASE_WAIT_S
        for record in records:
            refs = []
            for part in record.parts:
                if part.agent is not None and not (part.lost and part.node_lost):
                    with contextlib.suppress(Exception):
                        refs.append(part.agent.shutdown.remote(part.key))
            if all(p.runs_tasks and p.status.get("state") == "exited" for p in record.parts):
                self._release([record])
            else:
                self._releasing.append((record, refs, deadline))

    def _flush(self) -> None:
        """Release what the control plane has forgotten (it has stored their ends)."""
        if self._cleanup:
            self._shut_down(self._cleanup)
            self._cleanup = []

    def _finish_release(self) -> None:
        now = time.monotonic()
        done: list[_Attempt] = []
        waiting: list[tuple[_Attempt, list[Any], float]] = []
        for record, refs, deadline in self._releasing:
            ready = refs
            if refs and now < deadline:
                ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
            if len(ready) == len(refs):
                done.append(record)
            else:
                waiting.append((record, refs, deadline))
        self._releasing = waiting
        self._release(done)

    def _release(self, records: Sequence[_Attempt]) -> None:
        from ray.util import remove_placement_group

        now = time.monotonic()
        for record in records:
            if record.pg is None:
                continue
            with contextlib.suppress(Exception):
                remove_placement_group(record.pg)
            for part in record.parts:
                if part.node_id is not None:
                    self._freed_at[part.node_id] = now

    # -- events ---------------------------------------------------------------

    def poll(self) -> list[RuntimeEvent]:
        """Events since the last call: Started once per attempt, Checkpointed once per
        newer checkpoint (the latest of its nodes'), then Exited once."""
        self._flush()
        if self._releasing:
            self._finish_release()
        self._place_waiting()
        self._collect()
        events, self._backlog = self._backlog, []
        return events

    def next_event_time(self) -> float | None:
        return None

    def _open_parts(self) -> dict[str, dict[str, _Part]]:
        """Ray node id -> part key -> the parts whose news is still to come."""
        out: dict[str, dict[str, _Part]] = {}
        for record in self._attempts.values():
            if record.exited:
                continue
            for part in record.parts:
                if part.agent is None or part.lost is not None or part.node_id is None:
                    continue
                if part.status.get("state") == "exited":
                    continue
                out.setdefault(part.node_id, {})[part.key] = part
        return out

    def _collect(self) -> None:
        ray = self._ray
        open_parts = self._open_parts()
        if self._watches:
            refs = {ref: node_id for node_id, (ref, _) in self._watches.items()}
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
            for ref in ready:
                node_id = refs[ref]
                _, agent = self._watches.pop(node_id)
                parts = open_parts.get(node_id, {})
                try:
                    found = ray.get(ref)
                except Exception as exc:
                    mine = [p for p in parts.values() if p.agent is agent]
                    self._agent_error(node_id, agent, mine, exc)
                    continue
                for part_key, (stat, status) in found.items():
                    part = parts.get(part_key)
                    if part is not None and status:
                        part.stat, part.status = stat, status
            open_parts = self._open_parts()
        # One open watch per node, over all of its parts that are still to report.
        for node_id, parts in open_parts.items():
            if node_id in self._watches:
                continue
            agent = next(iter(parts.values())).agent
            known = {k: p.stat for k, p in parts.items()}
            with contextlib.suppress(Exception):
                self._watches[node_id] = (agent.watch.remote(known, STATUS_WAIT_S), agent)
        with self._lock:
            alive = {ray_node.node_id for ray_node in self.inventory.live.values()}
        now = time.monotonic()
        for record in [r for r in self._attempts.values() if not r.exited]:
            for part in record.parts:
                if part.lost is None and part.node_id is not None and part.node_id not in alive:
                    part.lost = f"node {part.node} died"
                    part.node_lost = True
                if part.node_lost and part.node_id and part.node_id not in self._lost_at:
                    self._lost_at = {i: t for i, t in self._lost_at.items() if now - t < 3600}
                    self._lost_at[part.node_id] = now
                    self._wake.set()  # the inventory reads the cluster now
            self._report(record)

    def _agent_error(self, node_id: str, agent: Any, parts: list[_Part], exc: Exception) -> None:
        from ray.exceptions import ActorDiedError, ActorUnavailableError

        if isinstance(exc, ActorUnavailableError):
            # Perhaps a passing network hiccup: the node's liveness decides; ask again.
            return
        if isinstance(exc, ActorDiedError):
            self._agent_gone(node_id, agent)
            for part in parts:
                part.lost = f"the agent on node {part.node} died"
                part.node_lost = True
            return
        for part in parts:
            part.lost = f"the agent on node {part.node} failed: {exc}"

    def _told(self, record: _Attempt) -> bool:
        """Whether the control plane knows the attempt's lost nodes are down (or has
        waited :data:`LOST_WAIT_S` for that: a node whose agent died alone stays up)."""
        now = time.monotonic()
        for part in record.parts:
            if part.node_lost and part.node_id is not None:
                since = self._lost_at.get(part.node_id, now)
                if part.node_id not in self._told_down and now - since < LOST_WAIT_S:
                    return False
        return True

    def _report(self, record: _Attempt) -> None:
        working = [p for p in record.parts if p.runs_tasks]
        lost = [p.lost for p in record.parts if p.lost is not None]
        if lost and self._watcher is not None and not self._told(record):
            return
        starts: list[Any] = [p.status.get("start_time") for p in working]
        if (
            not record.started
            and not lost
            and working
            and all(
                p.status.get("state") in ("running", "exited") and p.status.get("ready", True)
                for p in working
            )
            and all(s is not None for s in starts)
        ):
            record.started = True
            self._backlog.append(
                Started(record.job_id, record.attempt, max(float(s) for s in starts))
            )
        # Each node's supervisor (or agent, for srun's tasks) watches its own
        # PHALANX_CHECKPOINT_FILE: the job's checkpoint is the latest any of them saw.
        checkpoints = [p.status.get("checkpoint_at") for p in record.parts]
        latest = max((float(c) for c in checkpoints if isinstance(c, (int, float))), default=None)
        if latest is not None and (record.checkpoint_at is None or latest > record.checkpoint_at):
            record.checkpoint_at = latest
            self._backlog.append(Checkpointed(record.job_id, record.attempt, latest))
        # The batch shell's node runs srun, which records the steps there.
        for part in working:
            steps = part.status.get("steps")
            if isinstance(steps, list) and steps != record.steps:
                record.steps = steps
                self._backlog.append(StepsReported(record.job_id, record.attempt, tuple(steps)))
        known = [float(s) for s in starts if s is not None]
        if lost:
            record.exited = True
            self._backlog.append(
                Exited(
                    job_id=record.job_id,
                    attempt=record.attempt,
                    state="NODE_FAIL",
                    exit_code=None,
                    signal=None,
                    start_time=min(known) if known and record.started else None,
                    end_time=time.time(),
                    message=lost[0],
                    lost_nodes=tuple(
                        dict.fromkeys(p.node for p in record.parts if p.lost and p.node_lost)
                    ),
                )
            )
            # The other nodes' tasks end with the release (after forget()).
            return
        if not working or not all(p.status.get("state") == "exited" for p in working):
            return
        record.exited = True
        states = {str(p.status.get("job_state") or "FAILED") for p in working}
        state = next((s for s in STATE_ORDER if s in states), "FAILED")
        codes = [p.status.get("exit_code") for p in working]
        exit_code = max((c for c in codes if isinstance(c, int)), default=None)
        sig = next((p.status.get("signal") for p in working if p.status.get("signal")), None)
        messages = [str(p.status.get("message") or "") for p in working]
        self._backlog.append(
            Exited(
                job_id=record.job_id,
                attempt=record.attempt,
                state=state,
                exit_code=exit_code,
                signal=sig,
                start_time=min(known) if known else None,
                end_time=max(float(p.status.get("end_time") or time.time()) for p in working),
                message=next((m for m in messages if m), ""),
            )
        )

"""``slurm.conf`` -> phalanx objects (``phalanx import slurm.conf``).

Reads the ``NodeName`` and ``PartitionName`` lines (slurm.conf.5); every other
key is slurmctld tuning and is ignored. Keys are case-insensitive, ``#`` starts a
comment, a trailing ``\\`` continues a line, ``NodeName=DEFAULT`` /
``PartitionName=DEFAULT`` set defaults for the lines after them, and node names
are hostlist expressions (``gpu[1-4]``).

The result, in order:

* a :class:`~phalanx.model.Node` per node: capacity ``cpu`` (``CPUs``, else
  Boards x Sockets x Cores x Threads), ``memory`` (``RealMemory`` MB) and
  ``nvidia.com/gpu`` (``Gres=gpu[:type]:N``); labels ``kubernetes.io/hostname``,
  ``slurm.phalanx.io/partition-<p>: "true"`` for each partition holding it,
  ``slurm.phalanx.io/feature-<f>: "true"`` per feature and
  ``slurm.phalanx.io/gpu-type`` (the first GPU type); ``State=DOWN``/``DRAIN`` ->
  admin state;
* a :class:`~phalanx.model.ResourceFlavor` per partition selecting its nodes;
* a :class:`~phalanx.model.ClusterQueue` per partition, BestEffortFIFO, with a
  nominal quota of the sum of its nodes; annotations
  ``slurm.phalanx.io/default-partition: "true"`` (``Default=YES``),
  ``slurm.phalanx.io/default-time`` / ``max-time`` (seconds; absent when
  unlimited) and ``slurm.phalanx.io/state`` (``UP``, ``DOWN``, ``DRAIN``,
  ``INACTIVE``); ``DOWN`` and ``INACTIVE`` partitions are ``stopPolicy: Hold``.

Preemption (:func:`_preemption`): ``PreemptType=preempt/qos`` lets a job of a
higher QOS (PriorityClass) priority preempt lower ones in its partition
(``withinClusterQueue: LowerPriority``); ``preempt/none`` (Slurm's default) and
``preempt/partition_prio`` do not (partitions are separate ClusterQueues, and jobs
of one partition share its tier). ``PreemptMode`` (cluster-wide, or per partition)
becomes ``slurm.phalanx.io/preempt-mode`` (``OFF``, ``CANCEL``, ``REQUEUE``;
``GANG`` alone is ``OFF``; ``SUSPEND`` is refused: a suspended job keeps its
GPUs), partition ``GraceTime`` ``slurm.phalanx.io/grace-time`` and
``PreemptExemptTime`` ``phalanx.io/min-runtime`` on every partition.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import ValidationError

from phalanx.dialects.slurm.hostlists import BadHostlist, expand_hostlist
from phalanx.dialects.slurm.memory import MB
from phalanx.dialects.slurm.sbatch import FEATURE_LABEL, GPU_TYPE_LABEL, HOSTNAME_LABEL
from phalanx.errors import Invalid
from phalanx.model.flavor import ResourceFlavor, Topology
from phalanx.model.node import AdminState, Node
from phalanx.model.preemptmode import (
    GRACE_TIME_ANNOTATION,
    MIN_RUNTIME_ANNOTATION,
    PREEMPT_MODE_ANNOTATION,
)
from phalanx.model.priorityannotations import (
    PARTITION_FACTOR_ANNOTATION,
    TRES_BILLING_ANNOTATION,
    check_priority_annotations,
)
from phalanx.model.quantity import CPU, GPU, MEMORY, format_quantity
from phalanx.model.queue import ClusterQueue, ClusterQueuePreemption, QueueingStrategy, StopPolicy
from phalanx.model.resources import FlavorQuotas, ResourceGroup, ResourceQuota
from phalanx.timefmt import parse_duration_seconds, parse_time_limit

__all__ = ["PARTITION_LABEL", "read_slurm_conf"]

PARTITION_LABEL = "slurm.phalanx.io/partition-{}"
DEFAULT_PARTITION = "slurm.phalanx.io/default-partition"
DEFAULT_TIME = "slurm.phalanx.io/default-time"
MAX_TIME = "slurm.phalanx.io/max-time"
DEF_MEM_PER_CPU = "slurm.phalanx.io/def-mem-per-cpu"
"""DefMemPerCPU (MB): the memory of a batch job that asks for none, per CPU."""
STATE = "slurm.phalanx.io/state"


@contextmanager
def _checked(source: str, number: int, what: str) -> Iterator[None]:
    """A model's validation error in the block becomes one :class:`Invalid` naming the line."""
    try:
        yield
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        message = str(err["msg"]).removeprefix("Value error, ")
        raise Invalid(f"{source}:{number}: {what}: {field}: {message}" if field else
                      f"{source}:{number}: {what}: {message}") from None  # fmt: skip


_PAIR = re.compile(r'([A-Za-z][A-Za-z0-9_]*)=("[^"]*"|\'[^\']*\'|\S*)')
_GRES_COUNT = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        if pending.strip():
            out.append((start, pending.strip()))
        pending = ""
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def _pairs(source: str, number: int, line: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    pos = 0
    for m in _PAIR.finditer(line):
        if line[pos : m.start()].strip():
            raise Invalid(f"{source}:{number}: expected Key=Value, got {line[pos : m.start()]!r}")
        value = m.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        pairs.append((m.group(1).lower(), value))
        pos = m.end()
    if line[pos:].strip():
        raise Invalid(f"{source}:{number}: expected Key=Value, got {line[pos:]!r}")
    return pairs


_MAX_INT = 2**32 - 1
"""The largest number a slurm.conf count or size takes (Slurm's are 32 bits)."""


def _int(source: str, number: int, key: str, value: str) -> int:
    if not re.fullmatch(r"[0-9]+", value):
        raise Invalid(f"{source}:{number}: {key}={value}: expected a whole number")
    if len(value.lstrip("0")) > 10 or int(value) > _MAX_INT:
        raise Invalid(f"{source}:{number}: {key}={value[:24]}: too large (at most {_MAX_INT})")
    return int(value)


def _hosts(source: str, number: int, expr: str) -> list[str]:
    try:
        return expand_hostlist(expr)
    except BadHostlist as exc:
        raise Invalid(f"{source}:{number}: invalid hostlist {expr!r}: {exc.detail}") from None


def _gres_gpus(source: str, number: int, value: str) -> tuple[int, str | None]:
    total, gpu_type = 0, None
    for item in value.split(","):
        parts = [p for p in item.split(":") if p != "no_consume"]
        if not parts or parts[0] != "gpu":
            continue
        count = 1
        if len(parts) > 1 and (m := re.fullmatch(r"([0-9]+)([kKmMgG]?)", parts[-1])):
            count = _int(source, number, "Gres", m.group(1)) * _GRES_COUNT[m.group(2).lower()]
            parts = parts[:-1]
        if len(parts) > 2:
            raise Invalid(f"{source}:{number}: Gres={value}: expected gpu[:type][:count]")
        if len(parts) == 2 and gpu_type is None:
            gpu_type = parts[1]
        total += count
    return total, gpu_type


def _time(source: str, number: int, key: str, value: str) -> int | None:
    try:
        return parse_time_limit(value)
    except Invalid as exc:
        raise Invalid(f"{source}:{number}: {key}={value}: {exc.detail}") from None


PREEMPTION_KEYS = ("preempttype", "preemptmode", "preemptexempttime")
"""Cluster-wide preemption keys, read by :func:`_preemption`."""

_PREEMPT_TYPES = ("preempt/none", "preempt/qos", "preempt/partition_prio")


def _preempt_mode(source: str, number: int, value: str) -> str:
    words = [w.strip().upper() for w in value.split(",") if w.strip()]
    if "SUSPEND" in words:
        raise Invalid(
            f"{source}:{number}: PreemptMode={value}: SUSPEND is not supported (a suspended "
            "job keeps its GPUs); use REQUEUE or CANCEL"
        )
    for word in words:
        if word in ("OFF", "CANCEL", "REQUEUE"):
            return word
    if words and all(w in ("GANG", "WITHIN", "PRIORITY") for w in words):
        return "OFF"
    raise Invalid(f"{source}:{number}: PreemptMode={value}: expected OFF, CANCEL or REQUEUE")


def _preemption(
    source: str, cluster: dict[str, tuple[int, str]], number: int, attrs: dict[str, str]
) -> tuple[dict[str, str], ClusterQueuePreemption]:
    """A partition's preemption annotations and policy, from the cluster-wide keys
    (``(line, value)`` each) and its own ``PreemptMode`` and ``GraceTime``."""
    annotations: dict[str, str] = {}
    type_line, preempt_type = cluster.get("preempttype", (0, "preempt/none"))
    if preempt_type.lower() not in _PREEMPT_TYPES:
        raise Invalid(
            f"{source}:{type_line}: PreemptType={preempt_type}: expected one of "
            f"{', '.join(_PREEMPT_TYPES)}"
        )
    mode_at = (
        (number, attrs["preemptmode"]) if "preemptmode" in attrs else cluster.get("preemptmode")
    )
    mode = None
    if mode_at is not None:
        mode = _preempt_mode(source, mode_at[0], mode_at[1])
        annotations[PREEMPT_MODE_ANNOTATION] = mode
    if "gracetime" in attrs:
        annotations[GRACE_TIME_ANNOTATION] = str(
            _int(source, number, "GraceTime", attrs["gracetime"])
        )
    if "preemptexempttime" in cluster:
        exempt_line, exempt = cluster["preemptexempttime"]
        try:
            seconds = parse_duration_seconds(exempt)
        except Invalid as exc:
            raise Invalid(
                f"{source}:{exempt_line}: PreemptExemptTime={exempt}: {exc.detail}"
            ) from None
        if seconds:
            annotations[MIN_RUNTIME_ANNOTATION] = str(seconds)
    within = "LowerPriority" if preempt_type.lower() == "preempt/qos" and mode != "OFF" else "Never"
    return annotations, ClusterQueuePreemption(within_cluster_queue=within)


def _ordering(source: str, number: int, attrs: dict[str, str]) -> dict[str, str]:
    """A partition's ``PriorityJobFactor`` and ``TRESBillingWeights`` as annotations."""
    annotations: dict[str, str] = {}
    if "priorityjobfactor" in attrs:
        annotations[PARTITION_FACTOR_ANNOTATION] = attrs["priorityjobfactor"]
    if "tresbillingweights" in attrs:
        annotations[TRES_BILLING_ANNOTATION] = attrs["tresbillingweights"]
    try:
        check_priority_annotations(annotations)
    except ValueError as exc:
        factor = PARTITION_FACTOR_ANNOTATION in str(exc)
        key = "PriorityJobFactor" if factor else "TRESBillingWeights"
        detail = str(exc).split("]: ", 1)[-1]
        raise Invalid(f"{source}:{number}: {key}: {detail}") from None
    return annotations


def topology_plugin(text: str, source: str = "slurm.conf") -> tuple[int, str] | None:
    """The line and form (``tree``, ``block``) of a ``TopologyPlugin`` that reads
    ``topology.conf``; None when there is none (``topology/flat``, the default)."""
    from phalanx.dialects.slurm.topologyconf import TOPOLOGY_PLUGINS

    found = None
    for number, line in _logical_lines(text):
        for key, value in _pairs(source, number, line)[:1]:
            if key == "topologyplugin":
                plugin = value.lower()
                if plugin in TOPOLOGY_PLUGINS:
                    found = (number, TOPOLOGY_PLUGINS[plugin])
                elif plugin in ("", "topology/flat", "topology/none", "topology/default"):
                    found = None
                else:
                    raise Invalid(
                        f"{source}:{number}: TopologyPlugin={value} is not supported "
                        "(expected topology/tree, topology/block or topology/flat)"
                    )
    return found


def read_slurm_conf(
    text: str,
    source: str = "slurm.conf",
    topology: tuple[str, str] | None = None,
) -> list[Node | ResourceFlavor | ClusterQueue | Topology]:
    """Nodes, then a flavor and a ClusterQueue per partition, from ``slurm.conf`` text;
    with ``topology`` (the text and name of its ``topology.conf``), the Topology too,
    every node labelled with its place in it and every flavor naming it."""
    node_defaults: dict[str, str] = {}
    part_defaults: dict[str, str] = {}
    nodes: dict[str, dict[str, str]] = {}
    node_lines: dict[str, int] = {}
    partitions: dict[str, tuple[int, dict[str, str]]] = {}
    cluster_defaults: dict[str, str] = {}
    preemption: dict[str, tuple[int, str]] = {}
    for number, line in _logical_lines(text):
        first = line.split(None, 1)[0]
        if first.lower() in ("include",) or first.lower().startswith("include "):
            raise Invalid(
                f"{source}:{number}: Include is not supported; concatenate the included "
                "file into this one"
            )
        pairs = _pairs(source, number, line)
        if not pairs:
            continue
        key, value = pairs[0]
        attrs = dict(pairs[1:])
        if key == "defmempercpu" and re.fullmatch(r"[0-9]{1,10}", value):
            cluster_defaults["defmempercpu"] = value
            continue
        if key in PREEMPTION_KEYS:
            preemption[key] = (number, value)
            continue
        if key in ("nodename", "partitionname") and not value:
            raise Invalid(f"{source}:{number}: {line.split('=', 1)[0]}= needs a name")
        if key == "nodename":
            if value.upper() == "DEFAULT":
                node_defaults.update(attrs)
                continue
            for host in _hosts(source, number, value):
                if host in nodes:
                    raise Invalid(
                        f"{source}:{number}: node {host} is already defined on line "
                        f"{node_lines[host]}"
                    )
                nodes[host] = {**node_defaults, **attrs}
                node_lines[host] = number
        elif key == "partitionname":
            if value.upper() == "DEFAULT":
                part_defaults.update(attrs)
                continue
            if value in partitions:
                raise Invalid(f"{source}:{number}: partition {value} is defined twice")
            partitions[value] = (number, {**part_defaults, **attrs})

    members: dict[str, list[str]] = {}
    for name, (number, attrs) in partitions.items():
        expr = attrs.get("nodes", "")
        hosts = (
            list(nodes) if expr.upper() == "ALL" else (_hosts(source, number, expr) if expr else [])
        )
        unknown = [h for h in hosts if h not in nodes]
        if unknown:
            raise Invalid(
                f"{source}:{number}: partition {name}: node {unknown[0]} has no NodeName line"
            )
        members[name] = hosts

    built: dict[str, Node] = {}
    for host, attrs in nodes.items():
        number = node_lines[host]
        if "cpus" in attrs or "procs" in attrs:
            cpus = _int(source, number, "CPUs", attrs.get("cpus", attrs.get("procs", "1")))
        else:
            cpus = 1
            for k in ("boards", "socketsperboard", "corespersocket", "threadspercore"):
                if k in attrs:
                    cpus *= _int(source, number, k, attrs[k])
            if "sockets" in attrs and "socketsperboard" not in attrs:
                cpus *= _int(source, number, "Sockets", attrs["sockets"])
        memory = _int(source, number, "RealMemory", attrs.get("realmemory", "1"))
        gpus, gpu_type = _gres_gpus(source, number, attrs.get("gres", ""))
        labels = {HOSTNAME_LABEL: host}
        for part, hosts in members.items():
            if host in hosts:
                labels[PARTITION_LABEL.format(part)] = "true"
        for feature in re.split(r"[,&]", attrs.get("features", attrs.get("feature", ""))):
            if feature:
                labels[FEATURE_LABEL.format(feature)] = "true"
        if gpu_type:
            labels[GPU_TYPE_LABEL] = gpu_type
        capacity: dict[str, int | str] = {CPU: str(cpus), MEMORY: memory * MB}
        if gpus:
            capacity[GPU] = gpus
        state_text = attrs.get("state", "UNKNOWN").upper()
        state = AdminState.UP
        if state_text.startswith("DOWN") or state_text == "FUTURE":
            state = AdminState.DOWN
        elif state_text.startswith("DRAIN"):
            state = AdminState.DRAIN
        with _checked(source, number, f"node {host}"):
            built[host] = Node(
                name=host,
                labels=labels,
                capacity=capacity,
                state=state,
                reason=attrs.get("reason", "") if state is not AdminState.UP else "",
            )

    topo = None
    if topology is not None:
        from phalanx.dialects.slurm.topologyconf import read_topology_conf

        topo = read_topology_conf(topology[0], list(built), topology[1])
        for host, labels in topo.labels.items():
            node = built[host]
            built[host] = node.model_copy(update={"labels": {**node.labels, **labels}})

    flavors: list[ResourceFlavor] = []
    queues: list[ClusterQueue] = []
    for name, (number, attrs) in partitions.items():
        hosts = members[name]
        label = PARTITION_LABEL.format(name)
        with _checked(source, number, f"partition {name}"):
            flavors.append(
                ResourceFlavor(
                    name=name,
                    node_labels={label: "true"},
                    topology_name=topo.topology.name if topo is not None else None,
                )
            )
        totals = {CPU: 0, MEMORY: 0, GPU: 0}
        for host in hosts:
            for resource in totals:
                totals[resource] += built[host].capacity.get(resource, 0)
        covered = [r for r in (CPU, MEMORY, GPU) if r != GPU or totals[GPU]]
        with _checked(source, number, f"partition {name}"):
            quotas = [
                ResourceQuota.model_validate(
                    {"name": r, "nominalQuota": format_quantity(totals[r], r)}
                )
                for r in covered
            ]
        annotations: dict[str, str] = {}
        if attrs.get("default", "NO").upper() == "YES":
            annotations[DEFAULT_PARTITION] = "true"
        for key, annotation in (("defaulttime", DEFAULT_TIME), ("maxtime", MAX_TIME)):
            if key in attrs:
                seconds = _time(source, number, key, attrs[key])
                if seconds is not None:
                    annotations[annotation] = str(seconds)
        mem_per_cpu = attrs.get("defmempercpu", cluster_defaults.get("defmempercpu"))
        if mem_per_cpu and re.fullmatch(r"[0-9]{1,10}", mem_per_cpu):
            annotations[DEF_MEM_PER_CPU] = mem_per_cpu
        part_state = attrs.get("state", "UP").upper()
        annotations[STATE] = part_state
        preempt_annotations, policy = _preemption(source, preemption, number, attrs)
        annotations.update(preempt_annotations)
        annotations.update(_ordering(source, number, attrs))
        with _checked(source, number, f"partition {name}"):
            queues.append(
                ClusterQueue(
                    name=name,
                    queueing_strategy=QueueingStrategy.BEST_EFFORT_FIFO,
                    resource_groups=[
                        ResourceGroup(
                            covered_resources=covered,
                            flavors=[FlavorQuotas(name=name, resources=quotas)],
                        )
                    ],
                    stop_policy=StopPolicy.HOLD
                    if part_state in ("DOWN", "INACTIVE")
                    else StopPolicy.NONE,
                    preemption=policy,
                    annotations=annotations,
                )
            )
    extra: list[Topology] = [topo.topology] if topo is not None else []
    return [*built.values(), *extra, *flavors, *queues]

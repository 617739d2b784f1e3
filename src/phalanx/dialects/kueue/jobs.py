"""Kubernetes training jobs as phalanx workload sources.

Kueue admits the Workload its job controllers make from a job; phalanx does
the same from the job's manifest. :func:`convert_job` turns one document of a
kind in :data:`JOB_KINDS` into a :class:`KubeJob`: the manifest as given and a
:class:`~phalanx.model.JobSubmission` whose pod sets are the Workload's and
whose ``run.kube`` says how each pod runs (its containers' commands, working
directories and environments).

Pod sets, as Kueue's integrations build them:

* ``batch/v1`` Job: one pod set ``main`` of ``min(parallelism, completions)``
  pods; the annotation ``kueue.x-k8s.io/job-min-parallelism`` is its
  ``minCount`` (partial admission).
* ``jobset.x-k8s.io/v1alpha2`` JobSet: one pod set per replicatedJob, of
  ``replicas x parallelism`` pods.
* ``kubeflow.org/v1`` PyTorchJob: ``master`` and ``worker``, from
  ``pytorchReplicaSpecs``.
* ``ray.io/v1`` RayJob: ``head`` and one pod set per ``workerGroupSpecs`` entry.
* ``kueue.x-k8s.io`` Workload (v1beta1 and v1beta2): ``spec.podSets`` as written.

A pod's requests are its containers' (``requests``, else ``limits``) summed,
and at least each init container's, as Kubernetes computes a pod's effective
request. The job's labels ``kueue.x-k8s.io/queue-name``,
``kueue.x-k8s.io/priority-class`` and ``kueue.x-k8s.io/max-exec-time-seconds``
give the LocalQueue, the WorkloadPriorityClass and a time limit
(``activeDeadlineSeconds`` is one too). Without a queue label the job goes to
its namespace's LocalQueue ``default`` (see
:mod:`phalanx.control.submissions`). Every field read is type-checked; a bad
one raises :class:`JobFieldError` with its path in the manifest's spelling.
Kubernetes fields phalanx does not use (``restartPolicy``, ``subdomain``,
volumes, probes, ...) are accepted and ignored.

:func:`pod_plan` says what each admitted task runs: the pod names
(``<job>-<index>``, ``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>``,
``<name>-master-0`` / ``<name>-worker-<i>``), the completion indices a
parallelism slot works through and every container's resolved command and
environment (``JOB_COMPLETION_INDEX``, ``HOSTNAME``, the PyTorchJob
rendezvous variables).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from phalanx.dialects.kueue.values import describe
from phalanx.model import JobSubmission, NodeSelectorTerm, PodSet, RunSpec
from phalanx.model.node import Toleration
from phalanx.model.preemptmode import PREEMPTION_NOTICE_ANNOTATION, parse_preemption_notice
from phalanx.model.quantity import QuantityError, parse_quantity
from phalanx.model.resources import format_resources
from phalanx.model.submission import (
    Container,
    EnvVar,
    KubePodSet,
    KubeRun,
    SignalSpec,
    VolumeMount,
)

__all__ = [
    "JOB_KINDS",
    "JobFieldError",
    "KubeJob",
    "convert_job",
    "expand_vars",
    "pod_names",
    "pod_plan",
]

JOB_KINDS: dict[tuple[str, str], str] = {
    ("batch/v1", "Job"): "Job",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "JobSet",
    ("kubeflow.org/v1", "PyTorchJob"): "PyTorchJob",
    ("ray.io/v1", "RayJob"): "RayJob",
    ("kueue.x-k8s.io/v1beta1", "Workload"): "Workload",
    ("kueue.x-k8s.io/v1beta2", "Workload"): "Workload",
}
"""``(apiVersion, kind)`` of every job kind phalanx runs -> its canonical kind."""

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
MAX_EXEC_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
REQUEUE_ANNOTATION = "phalanx.io/requeue"
"""``expedite``: Slurm 25.11's ``--requeue=expedite`` for a Kubernetes job (every
Kubernetes job is requeued when its node fails; this one at once, first, on its
healthy nodes plus replacements)."""
DEFAULT_BACKOFF_LIMIT = 6
"""Kubernetes' default ``backoffLimit``; also used for PyTorchJob/RayJob without one."""
PYTORCH_PORT_NAME = "pytorchjob-port"
PYTORCH_DEFAULT_PORT = 23456

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
"""The alphabet of Kubernetes' generateName suffixes."""
_FIELD_PATHS = ("metadata.name", "metadata.namespace")

Path = tuple[str | int, ...]


class JobFieldError(Exception):
    """A field of a job manifest is wrong: ``path`` in the manifest's spelling."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{_format_path(path)}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True, slots=True)
class KubeJob:
    """A job manifest and the submission phalanx schedules and runs for it."""

    kind: str
    namespace: str
    name: str
    manifest: dict[str, Any]
    submission: JobSubmission


# ---------------------------------------------------------------------- field readers


def _format_path(path: Sequence[str | int]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _mapping(
    data: Mapping[str, Any], key: str, path: Path, required: bool = False
) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        if required:
            raise JobFieldError((*path, key), "required")
        return {}
    if not isinstance(value, dict):
        raise JobFieldError((*path, key), f"expected a mapping, got {describe(value)}")
    return value


def _list(data: Mapping[str, Any], key: str, path: Path, required: bool = False) -> list[Any]:
    value = data.get(key)
    if value is None:
        if required:
            raise JobFieldError((*path, key), "required")
        return []
    if not isinstance(value, list):
        raise JobFieldError((*path, key), f"expected a list, got {describe(value)}")
    return value


def _str(data: Mapping[str, Any], key: str, path: Path, default: str | None = None) -> str | None:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise JobFieldError((*path, key), f"expected a string, got {describe(value)}")
    return value


INT32_MAX = 2**31 - 1
"""Kubernetes' counts (parallelism, replicas, backoffLimit, ...) are int32."""


def _int(
    data: Mapping[str, Any],
    key: str,
    path: Path,
    default: int | None = None,
    minimum: int = 0,
    maximum: int = INT32_MAX,
) -> int | None:
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobFieldError((*path, key), f"expected an integer, got {describe(value)}")
    if value < minimum:
        raise JobFieldError((*path, key), f"expected an integer >= {minimum}, got {value}")
    if value > maximum:
        raise JobFieldError((*path, key), f"expected an integer <= {maximum}, got a larger one")
    return value


def _whole_text(text: str, maximum: int = INT32_MAX) -> int | None:
    """A whole number written as text (an annotation or label value), or None when it is
    not one of ASCII digits from 0 to ``maximum``."""
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()) or len(digits.lstrip("0")) > len(str(maximum)):
        return None
    value = int(digits)
    return value if value <= maximum else None


def _bool(data: Mapping[str, Any], key: str, path: Path, default: bool = False) -> bool:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise JobFieldError((*path, key), f"expected a boolean, got {describe(value)}")
    return value


def _string_map(data: Mapping[str, Any], key: str, path: Path) -> dict[str, str]:
    value = _mapping(data, key, path)
    for k, v in value.items():
        if not isinstance(v, str):
            raise JobFieldError((*path, key, str(k)), f"expected a string, got {describe(v)}")
    return {str(k): v for k, v in value.items()}


def _strings(data: Mapping[str, Any], key: str, path: Path) -> list[str]:
    items = _list(data, key, path)
    out: list[str] = []
    for i, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise JobFieldError((*path, key, i), f"expected a string, got {describe(item)}")
        out.append(item if isinstance(item, str) else str(item))
    return out


def _mappings(
    data: Mapping[str, Any], key: str, path: Path, required: bool = False
) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Each item of the list ``data[key]``, with its path; every item must be a mapping."""
    for i, item in enumerate(_list(data, key, path, required=required)):
        where: Path = (*path, key, i)
        if not isinstance(item, dict):
            raise JobFieldError(where, f"expected a mapping, got {describe(item)}")
        yield where, item


# ---------------------------------------------------------------------- pods


_PULL_POLICIES = ("Always", "IfNotPresent", "Never")


def _volumes(spec: Mapping[str, Any], path: Path) -> dict[str, tuple[str, str, str]]:
    """The pod's volumes: name -> (kind, host path for ``hostPath``, manifest path)."""
    out: dict[str, tuple[str, str, str]] = {}
    for where, item in _mappings(spec, "volumes", path):
        name = _str(item, "name", where)
        if not name:
            raise JobFieldError((*where, "name"), "required")
        if name in out:
            raise JobFieldError((*where, "name"), f"Duplicate value: {name!r}")
        kinds = [key for key in item if key != "name"]
        kind = kinds[0] if len(kinds) == 1 else "emptyDir" if not kinds else ""
        if not kind:
            raise JobFieldError(where, f"a volume has one source, got {', '.join(kinds)}")
        source = ""
        if kind == "hostPath":
            host = _mapping(item, "hostPath", where, required=True)
            source = _str(host, "path", (*where, "hostPath")) or ""
            if not source.startswith("/"):
                raise JobFieldError((*where, "hostPath", "path"), "expected an absolute path")
        out[name] = (kind, source, _format_path(where))
    return out


def _security(data: Mapping[str, Any], path: Path) -> tuple[int | None, int | None]:
    context = _mapping(data, "securityContext", path)
    where = (*path, "securityContext")
    user = _int(context, "runAsUser", where, minimum=0)
    return user, _int(context, "runAsGroup", where, minimum=0)


def _container(
    data: Any,
    path: Path,
    volumes: Mapping[str, tuple[str, str, str]] | None = None,
    pod_user: tuple[int | None, int | None] = (None, None),
) -> tuple[Container, dict[str, int]]:
    """A container and its per-pod requests (``requests``, else ``limits``)."""
    if not isinstance(data, dict):
        raise JobFieldError(path, f"expected a mapping (a container), got {describe(data)}")
    name = _str(data, "name", path, "") or ""
    image = _str(data, "image", path, "") or ""
    command = _strings(data, "command", path)
    args = _strings(data, "args", path)
    policy = _str(data, "imagePullPolicy", path)
    if policy is not None and policy not in _PULL_POLICIES:
        raise JobFieldError(
            (*path, "imagePullPolicy"),
            f"Unsupported value: {policy!r}: supported values: "
            + ", ".join(f'"{p}"' for p in _PULL_POLICIES),
        )
    mounts: list[VolumeMount] = []
    for where, item in _mappings(data, "volumeMounts", path):
        volume = _str(item, "name", where)
        target = _str(item, "mountPath", where)
        if not volume:
            raise JobFieldError((*where, "name"), "required")
        if not target:
            raise JobFieldError((*where, "mountPath"), "required")
        if volume not in (volumes or {}):
            raise JobFieldError((*where, "name"), f'Not found: "{volume}"')
        kind, host, vfield = (volumes or {})[volume]
        read_only = item.get("readOnly", False)
        if not isinstance(read_only, bool):
            raise JobFieldError(
                (*where, "readOnly"), f"expected a boolean, got {describe(read_only)}"
            )
        mounts.append(
            VolumeMount(
                name=volume,
                kind=kind,
                mount_path=target,
                read_only=read_only,
                source=host,
                sub_path=_str(item, "subPath", where) or "",
                field=vfield,
            )
        )
    user, group = _security(data, path)
    workdir = _str(data, "workingDir", path)
    env: list[EnvVar] = []
    for where, item in _mappings(data, "env", path):
        var = _str(item, "name", where)
        if not var:
            raise JobFieldError((*where, "name"), "required")
        if "valueFrom" in item:
            source = _mapping(item, "valueFrom", where)
            ref = source.get("fieldRef")
            if not isinstance(ref, dict) or set(source) != {"fieldRef"}:
                kinds = ", ".join(sorted(source)) or "nothing"
                raise JobFieldError(
                    (*where, "valueFrom"),
                    f"only fieldRef ({', '.join(_FIELD_PATHS)}) can be resolved without a "
                    f"Kubernetes API server, got {kinds}",
                )
            field_path = _str(ref, "fieldPath", (*where, "valueFrom", "fieldRef"))
            if field_path not in _FIELD_PATHS:
                raise JobFieldError(
                    (*where, "valueFrom", "fieldRef", "fieldPath"),
                    f"expected one of {', '.join(_FIELD_PATHS)}, got {field_path!r}",
                )
            env.append(EnvVar(name=var, field_path=field_path))
        else:
            raw = item.get("value", "")
            if isinstance(raw, bool) or not isinstance(raw, str | int | float):
                raise JobFieldError((*where, "value"), f"expected a string, got {describe(raw)}")
            env.append(EnvVar(name=var, value=str(raw)))
    ports: dict[str, int] = {}
    for where, item in _mappings(data, "ports", path):
        port = _int(item, "containerPort", where, minimum=1)
        port_name = _str(item, "name", where)
        if port_name and port is not None:
            ports[port_name] = port
    resources = _mapping(data, "resources", path)
    requests = _quantities(resources, "requests", (*path, "resources"))
    for resource, amount in _quantities(resources, "limits", (*path, "resources")).items():
        requests.setdefault(resource, amount)
    _no_nul(path, command, args, workdir, env)
    container = Container(
        name=name,
        image=image,
        command=[*command, *args] if command else [],
        field=_format_path((*path, "command")),
        working_dir=workdir,
        env=env,
        ports=ports,
        entrypoint=command if "command" in data else None,
        args=args if "args" in data else None,
        image_pull_policy=policy,
        volume_mounts=mounts,
        run_as_user=user if user is not None else pod_user[0],
        run_as_group=group if group is not None else pod_user[1],
    )
    return container, requests


def _no_nul(
    path: Path, command: list[str], args: list[str], workdir: str | None, env: list[EnvVar]
) -> None:
    """A NUL character cannot reach a process (its arguments, environment, directory)."""
    found: list[tuple[Path, str | None]] = [((*path, "workingDir"), workdir)]
    found += [((*path, "command", i), word) for i, word in enumerate(command)]
    found += [((*path, "args", i), word) for i, word in enumerate(args)]
    found += [((*path, "env", i), f"{var.name}={var.value}") for i, var in enumerate(env)]
    for where, value in found:
        if value is not None and "\0" in value:
            raise JobFieldError(where, "contains a NUL character")


def _quantities(data: Mapping[str, Any], key: str, path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for resource, raw in _mapping(data, key, path).items():
        where = (*path, key, str(resource))
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise JobFieldError(
                where, f"expected a quantity such as 8, 500m or 16Gi, got {describe(raw)}"
            )
        try:
            out[str(resource)] = parse_quantity(
                raw if isinstance(raw, str | int) else str(raw), str(resource)
            )
        except QuantityError as exc:
            raise JobFieldError(where, str(exc)) from None
    return out


@dataclass(frozen=True, slots=True)
class _Pod:
    containers: list[Container]
    init_containers: list[Container]
    requests: dict[str, int]
    node_selector: dict[str, str]
    tolerations: list[Toleration]
    topology: dict[str, Any] | None = None
    node_affinity: list[dict[str, Any]] | None = None


def _pod_template(template: Any, path: Path) -> _Pod:
    """The pod of a PodTemplateSpec at ``path``."""
    if not isinstance(template, dict):
        raise JobFieldError(path, f"expected a mapping (a pod template), got {describe(template)}")
    topology = _topology_request(template, path)
    spec = _mapping(template, "spec", path, required=True)
    spath = (*path, "spec")
    items = _list(spec, "containers", spath, required=True)
    if not items:
        raise JobFieldError((*spath, "containers"), "a pod needs at least one container")
    containers: list[Container] = []
    total: dict[str, int] = {}
    volumes = _volumes(spec, spath)
    pod_user = _security(spec, spath)
    for i, item in enumerate(items):
        container, requests = _container(item, (*spath, "containers", i), volumes, pod_user)
        containers.append(container)
        for resource, amount in requests.items():
            total[resource] = total.get(resource, 0) + amount
    inits: list[Container] = []
    for i, item in enumerate(_list(spec, "initContainers", spath)):
        container, requests = _container(item, (*spath, "initContainers", i), volumes, pod_user)
        inits.append(container)
        for resource, amount in requests.items():
            total[resource] = max(total.get(resource, 0), amount)
    selector = _string_map(spec, "nodeSelector", spath)
    tolerations: list[Toleration] = []
    for i, item in enumerate(_list(spec, "tolerations", spath)):
        where = (*spath, "tolerations", i)
        try:
            tolerations.append(Toleration.model_validate(item))
        except ValidationError as exc:
            err = exc.errors()[0]
            raise JobFieldError((*where, *(str(p) for p in err["loc"])), str(err["msg"])) from None
    affinity = _node_affinity(spec, spath)
    return _Pod(containers, inits, total, selector, tolerations, topology, affinity)


def _node_affinity(spec: Mapping[str, Any], path: Path) -> list[dict[str, Any]] | None:
    """The required node affinity's terms (``preferred...`` scheduling hints and pod
    (anti-)affinity are accepted and ignored, as other unused fields are)."""
    affinity = _mapping(spec, "affinity", path)
    node = _mapping(affinity, "nodeAffinity", (*path, "affinity"))
    where = (*path, "affinity", "nodeAffinity")
    required = _mapping(node, "requiredDuringSchedulingIgnoredDuringExecution", where)
    where = (*where, "requiredDuringSchedulingIgnoredDuringExecution")
    terms = _list(required, "nodeSelectorTerms", where)
    out: list[dict[str, Any]] = []
    for i, term in enumerate(terms):
        try:
            out.append(NodeSelectorTerm.model_validate(term).to_dict())
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = (p if isinstance(p, int) else str(p) for p in err["loc"])
            at = (*where, "nodeSelectorTerms", i, *loc)
            raise JobFieldError(at, str(err["msg"])) from None
    return out or None


TOPOLOGY_ANNOTATIONS = {
    "kueue.x-k8s.io/podset-required-topology": "required",
    "kueue.x-k8s.io/podset-preferred-topology": "preferred",
    "kueue.x-k8s.io/podset-unconstrained-topology": "unconstrained",
}
"""Kueue's topology requests on a pod template -> :class:`~phalanx.model.TopologyRequest`."""
SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
SLICE_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
"""Kueue's topology slices: every ``podset-slice-size`` pods within one domain of the
slice level (the multi-layer constraints form is Kueue's alpha TASMultiLayerTopology)."""


def _topology_request(template: Mapping[str, Any], path: Path) -> dict[str, Any] | None:
    """The pod template's topology request (one annotation at most, and a slice
    request), or None."""
    metadata = _mapping(template, "metadata", path)
    where = (*path, "metadata", "annotations")
    annotations = _string_map(metadata, "annotations", (*path, "metadata"))
    if SLICE_CONSTRAINTS in annotations:
        raise JobFieldError(
            (*where, SLICE_CONSTRAINTS),
            "not supported: multi-layer slice constraints (Kueue's alpha "
            f"TASMultiLayerTopology); use {SLICE_REQUIRED} with {SLICE_SIZE}",
        )
    found = [(k, v) for k, v in annotations.items() if k in TOPOLOGY_ANNOTATIONS]
    if len(found) > 1:
        raise JobFieldError(
            (*where, found[1][0]),
            f"expected one topology request, got {found[0][0]} and {found[1][0]}",
        )
    request: dict[str, Any] = {}
    if found:
        key, value = found[0]
        kind = TOPOLOGY_ANNOTATIONS[key]
        if kind == "unconstrained":
            if value.lower() != "true":
                raise JobFieldError((*where, key), f'expected "true", got {value!r}')
            request["unconstrained"] = True
        elif not value:
            raise JobFieldError((*where, key), "expected a topology level (a node label)")
        else:
            request[kind] = value
    level, size = annotations.get(SLICE_REQUIRED), annotations.get(SLICE_SIZE)
    if level is not None and size is None:
        raise JobFieldError((*where, SLICE_SIZE), f"must be set when {SLICE_REQUIRED} is")
    if size is not None and level is None:
        raise JobFieldError((*where, SLICE_SIZE), f"may not be set without {SLICE_REQUIRED}")
    if level is not None and size is not None:
        if not level:
            raise JobFieldError(
                (*where, SLICE_REQUIRED), "expected a topology level (a node label)"
            )
        slice_size = _whole_text(size)
        if slice_size is None or slice_size < 1:
            raise JobFieldError(
                (*where, SLICE_SIZE), f"expected a whole number of pods >= 1, got {size[:40]!r}"
            )
        request["sliceRequired"] = level
        request["sliceSize"] = slice_size
    return request or None


def _pod_set(name: str, count: int, pod: _Pod, path: Path, min_count: int | None = None) -> PodSet:
    fields: dict[str, Any] = {
        "name": name,
        "count": count,
        # The model parses quantities: hand it the canonical spelling of the sums.
        "requests": format_resources(pod.requests),
        "node_selector": pod.node_selector,
        "tolerations": pod.tolerations,
        "topology": pod.topology,
        "node_affinity": pod.node_affinity,
    }
    if min_count is not None:
        fields["min_count"] = min_count
    try:
        return PodSet(**fields)
    except ValidationError as exc:
        messages = (str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise JobFieldError(path, "; ".join(messages)) from None


def _kube_pod_set(
    name: str,
    role: str,
    pod: _Pod,
    *,
    jobs: int = 1,
    parallelism: int = 1,
    completions: int = 1,
    indexed: bool = False,
) -> KubePodSet:
    return KubePodSet(
        name=name,
        role=role,
        jobs=jobs,
        parallelism=parallelism,
        completions=completions,
        indexed=indexed,
        containers=pod.containers,
        init_containers=pod.init_containers,
    )


# ---------------------------------------------------------------------- kinds


@dataclass(slots=True)
class _Parts:
    pod_sets: list[PodSet]
    runs: list[KubePodSet]
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    time_limit: int | None = None
    suspend: bool = False
    entrypoint: str | None = None
    queue: str | None = None
    priority_class: str | None = None
    priority: int | None = None
    hold: bool = False


def _batch_job(
    spec: Mapping[str, Any], path: Path, annotations: Mapping[str, str], name: str = "main"
) -> tuple[PodSet, KubePodSet, int, int | None, bool]:
    """A Job spec: its pod set, how it runs, backoffLimit, activeDeadlineSeconds, suspend."""
    parallelism = _int(spec, "parallelism", path, 1)
    completions = _int(spec, "completions", path)
    assert parallelism is not None
    mode = _str(spec, "completionMode", path, "NonIndexed")
    if mode not in ("NonIndexed", "Indexed"):
        raise JobFieldError(
            (*path, "completionMode"), f"expected Indexed or NonIndexed, got {mode!r}"
        )
    if parallelism == 0:
        raise JobFieldError(
            (*path, "parallelism"), "0 pods: a job that runs nothing cannot be admitted"
        )
    if completions == 0:
        raise JobFieldError((*path, "completions"), "expected an integer >= 1, got 0")
    if mode == "Indexed" and completions is None:
        raise JobFieldError((*path, "completions"), "required when completionMode is Indexed")
    backoff = _int(spec, "backoffLimit", path, DEFAULT_BACKOFF_LIMIT)
    deadline = _int(spec, "activeDeadlineSeconds", path, minimum=1, maximum=2**63 - 1)
    suspend = _bool(spec, "suspend", path)
    pod = _pod_template(spec.get("template"), (*path, "template"))
    # Without completions a Job is done when its pods succeed (the work-queue pattern).
    need = completions if completions is not None else parallelism
    count = min(parallelism, need)
    min_count: int | None = None
    raw_min = annotations.get(MIN_PARALLELISM)
    if raw_min is not None and name == "main":
        where: Path = ("metadata", "annotations", MIN_PARALLELISM)
        min_count = _whole_text(raw_min)
        if min_count is None or min_count < 1:
            raise JobFieldError(where, f"expected an integer >= 1, got {raw_min[:40]!r}")
        if min_count > count:
            raise JobFieldError(where, f"{min_count} is more than the job's {count} pods")
        if min_count == count:
            min_count = None
    pod_set = _pod_set(name, count, pod, (*path, "template"), min_count)
    run = _kube_pod_set(
        name,
        name,
        pod,
        parallelism=count,
        completions=need,
        indexed=mode == "Indexed",
    )
    assert backoff is not None
    return pod_set, run, backoff, deadline, suspend


def _job(data: Mapping[str, Any], annotations: Mapping[str, str]) -> _Parts:
    spec = _mapping(data, "spec", (), required=True)
    pod_set, run, backoff, deadline, suspend = _batch_job(spec, ("spec",), annotations)
    return _Parts([pod_set], [run], backoff, deadline, suspend)


def _jobset(data: Mapping[str, Any], annotations: Mapping[str, str]) -> _Parts:
    spec = _mapping(data, "spec", (), required=True)
    items = _list(spec, "replicatedJobs", ("spec",), required=True)
    if not items:
        raise JobFieldError(("spec", "replicatedJobs"), "a JobSet needs at least one replicatedJob")
    pod_sets: list[PodSet] = []
    runs: list[KubePodSet] = []
    backoff = DEFAULT_BACKOFF_LIMIT
    for i, (path, item) in enumerate(_mappings(spec, "replicatedJobs", ("spec",))):
        name = _str(item, "name", path)
        if not name:
            raise JobFieldError((*path, "name"), "required")
        replicas = _int(item, "replicas", path, 1, minimum=1)
        assert replicas is not None
        template = _mapping(item, "template", path, required=True)
        jspec = _mapping(template, "spec", (*path, "template"), required=True)
        pod_set, run, limit, _, _ = _batch_job(jspec, (*path, "template", "spec"), {}, name)
        backoff = min(backoff, limit) if i else limit
        pod_sets.append(pod_set.model_copy(update={"count": pod_set.count * replicas}))
        # JobSet makes its child Jobs Indexed: every pod gets JOB_COMPLETION_INDEX.
        runs.append(run.model_copy(update={"jobs": replicas, "indexed": True}))
    suspend = _bool(spec, "suspend", ("spec",))
    return _Parts(pod_sets, runs, backoff, None, suspend)


def _pytorchjob(data: Mapping[str, Any], annotations: Mapping[str, str]) -> _Parts:
    spec = _mapping(data, "spec", (), required=True)
    replicas = _mapping(spec, "pytorchReplicaSpecs", ("spec",), required=True)
    unknown = sorted(set(replicas) - {"Master", "Worker"})
    if unknown:
        raise JobFieldError(
            ("spec", "pytorchReplicaSpecs", unknown[0]), "expected Master or Worker"
        )
    if not replicas:
        raise JobFieldError(("spec", "pytorchReplicaSpecs"), "expected Master and/or Worker")
    pod_sets: list[PodSet] = []
    runs: list[KubePodSet] = []
    for role in ("Master", "Worker"):
        if role not in replicas:
            continue
        path: Path = ("spec", "pytorchReplicaSpecs", role)
        rspec = _mapping(replicas, role, path[:-1], required=True)
        count = _int(rspec, "replicas", path, 1, minimum=1)
        assert count is not None
        if role == "Master" and count != 1:
            raise JobFieldError((*path, "replicas"), f"a PyTorchJob has one Master, got {count}")
        _str(rspec, "restartPolicy", path)
        pod = _pod_template(rspec.get("template"), (*path, "template"))
        name = role.lower()
        pod_sets.append(_pod_set(name, count, pod, (*path, "template")))
        runs.append(_kube_pod_set(name, role, pod, parallelism=count, completions=count))
    policy = _mapping(spec, "runPolicy", ("spec",))
    backoff = _int(policy, "backoffLimit", ("spec", "runPolicy"), DEFAULT_BACKOFF_LIMIT)
    deadline = _int(
        policy, "activeDeadlineSeconds", ("spec", "runPolicy"), minimum=1, maximum=2**63 - 1
    )
    suspend = _bool(policy, "suspend", ("spec", "runPolicy"))
    assert backoff is not None
    return _Parts(pod_sets, runs, backoff, deadline, suspend)


def _rayjob(data: Mapping[str, Any], annotations: Mapping[str, str]) -> _Parts:
    spec = _mapping(data, "spec", (), required=True)
    entrypoint = _str(spec, "entrypoint", ("spec",))
    if not entrypoint:
        raise JobFieldError(
            ("spec", "entrypoint"), "required: the command the RayJob runs (phalanx runs it)"
        )
    if "\0" in entrypoint:
        raise JobFieldError(("spec", "entrypoint"), "contains a NUL character")
    cluster = _mapping(spec, "rayClusterSpec", ("spec",), required=True)
    cpath: Path = ("spec", "rayClusterSpec")
    head = _mapping(cluster, "headGroupSpec", cpath, required=True)
    head_pod = _pod_template(head.get("template"), (*cpath, "headGroupSpec", "template"))
    pod_sets = [_pod_set("head", 1, head_pod, (*cpath, "headGroupSpec"))]
    runs = [_kube_pod_set("head", "head", head_pod)]
    names = {"head"}
    for path, group in _mappings(cluster, "workerGroupSpecs", cpath):
        name = _str(group, "groupName", path)
        if not name:
            raise JobFieldError((*path, "groupName"), "required")
        if name in names:
            raise JobFieldError((*path, "groupName"), f"{name!r} is used twice")
        names.add(name)
        count = _int(group, "replicas", path, 1)
        assert count is not None
        if count == 0:
            continue
        pod = _pod_template(group.get("template"), (*path, "template"))
        pod_sets.append(_pod_set(name, count, pod, path))
        runs.append(_kube_pod_set(name, "worker", pod, parallelism=count, completions=count))
    deadline = _int(spec, "activeDeadlineSeconds", ("spec",), minimum=1, maximum=2**63 - 1)
    suspend = _bool(spec, "suspend", ("spec",))
    return _Parts(pod_sets, runs, 0, deadline, suspend, entrypoint)


def _workload(data: Mapping[str, Any], annotations: Mapping[str, str]) -> _Parts:
    spec = _mapping(data, "spec", (), required=True)
    items = _list(spec, "podSets", ("spec",), required=True)
    if not items:
        raise JobFieldError(("spec", "podSets"), "a Workload needs at least one pod set")
    pod_sets: list[PodSet] = []
    runs: list[KubePodSet] = []
    for path, item in _mappings(spec, "podSets", ("spec",)):
        name = _str(item, "name", path, "main") or "main"
        count = _int(item, "count", path, 1, minimum=1)
        min_count = _int(item, "minCount", path, minimum=1)
        assert count is not None
        if min_count is not None and min_count > count:
            raise JobFieldError((*path, "minCount"), f"{min_count} is more than count ({count})")
        pod = _pod_template(item.get("template"), (*path, "template"))
        pod_sets.append(_pod_set(name, count, pod, path, min_count if min_count != count else None))
        runs.append(_kube_pod_set(name, name, pod, parallelism=count, completions=count))
    parts = _Parts(pod_sets, runs)
    parts.queue = _str(spec, "queueName", ("spec",))
    ref = _mapping(spec, "priorityClassRef", ("spec",))
    parts.priority_class = _str(ref, "name", ("spec", "priorityClassRef")) or _str(
        spec, "priorityClassName", ("spec",)
    )
    parts.priority = _int(spec, "priority", ("spec",), minimum=-(2**31))
    parts.hold = not _bool(spec, "active", ("spec",), True)
    limit = _int(spec, "maximumExecutionTimeSeconds", ("spec",), minimum=1)
    parts.time_limit = limit
    return parts


_CONVERTERS = {
    "Job": _job,
    "JobSet": _jobset,
    "PyTorchJob": _pytorchjob,
    "RayJob": _rayjob,
    "Workload": _workload,
}

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def convert_job(kind: str, data: Mapping[str, Any]) -> KubeJob:
    """The :class:`KubeJob` of a ``kind`` (canonical, see :data:`JOB_KINDS`) document.

    A ``metadata.generateName`` gets a random five-character suffix, as the API
    server gives it; the returned ``manifest`` has the resulting ``metadata.name``.
    """
    converter = _CONVERTERS.get(kind)
    if converter is None:
        raise JobFieldError(("kind",), f"expected one of {', '.join(_CONVERTERS)}, got {kind!r}")
    metadata = _mapping(data, "metadata", (), required=True)
    name = _str(metadata, "name", ("metadata",))
    generate = _str(metadata, "generateName", ("metadata",))
    if not name:
        if not generate:
            raise JobFieldError(("metadata", "name"), "required (or metadata.generateName)")
        name = generate + "".join(secrets.choice(_NAME_CHARS) for _ in range(5))
    if len(name) > 63 or not _DNS_LABEL.match(name):
        raise JobFieldError(
            ("metadata", "name"),
            f"expected a DNS label (lower-case letters, digits and '-', at most 63), got {name!r}",
        )
    namespace = _str(metadata, "namespace", ("metadata",), "default") or "default"
    labels = _string_map(metadata, "labels", ("metadata",))
    annotations = _string_map(metadata, "annotations", ("metadata",))
    requeue = annotations.get(REQUEUE_ANNOTATION)
    if requeue is not None and requeue != "expedite":
        raise JobFieldError(
            ("metadata", "annotations", REQUEUE_ANNOTATION),
            f"expected expedite, got {requeue[:40]!r}",
        )
    parts = converter(data, annotations)
    queue = labels.get(QUEUE_LABEL) or parts.queue
    priority_class = labels.get(PRIORITY_LABEL) or parts.priority_class
    time_limit = parts.time_limit
    raw_max = labels.get(MAX_EXEC_LABEL)
    if raw_max is not None:
        max_exec = _whole_text(raw_max)
        if max_exec is None or max_exec < 1:
            raise JobFieldError(
                ("metadata", "labels", MAX_EXEC_LABEL),
                f"expected seconds from 1 to {INT32_MAX}, got {raw_max[:40]!r}",
            )
        time_limit = min(time_limit or max_exec, max_exec)
    notice: SignalSpec | None = None
    raw_notice = annotations.get(PREEMPTION_NOTICE_ANNOTATION)
    if raw_notice is not None:
        try:
            signum, seconds = parse_preemption_notice(raw_notice)
        except ValueError as exc:
            raise JobFieldError(
                ("metadata", "annotations", PREEMPTION_NOTICE_ANNOTATION),
                str(exc).partition("]: ")[2],
            ) from None
        notice = SignalSpec(signal=signum, seconds=seconds)
    manifest = dict(data)
    manifest["metadata"] = {**metadata, "name": name, "namespace": namespace}
    manifest["metadata"].pop("generateName", None)
    try:
        kube = KubeRun(
            kind=kind,
            namespace=namespace,
            name=name,
            manifest=manifest,
            pod_sets=parts.runs,
            backoff_limit=parts.backoff_limit,
            entrypoint=parts.entrypoint,
            suspend=parts.suspend,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        where = tuple(p for p in err["loc"][1:] if p != "[key]")
        if err["loc"][-1] == "[key]":  # the last element is the key itself
            at = (*where[:-1], str(where[-1]))
            raise JobFieldError(at, f"keys must be strings, got {describe(err['input'])}") from None
        raise JobFieldError(where, str(err["msg"])) from None
    try:
        submission = JobSubmission(
            name=name,
            tenant=namespace,
            queue=queue,
            priority_class=priority_class,
            priority=parts.priority,
            pod_sets=parts.pod_sets,
            labels=labels,
            hold=parts.hold,
            requeue_expedite=True if requeue == "expedite" else None,
            run=RunSpec(kube=kube, time_limit=time_limit, preemption_notice=notice),
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        raise JobFieldError(("spec",), f"{_format_path(err['loc'])}: {err['msg']}") from None
    return KubeJob(
        kind=kind, namespace=namespace, name=name, manifest=manifest, submission=submission
    )


# ---------------------------------------------------------------------- running pods


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand_vars(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: known names are replaced, ``$$`` is ``$``, others stay."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        var = match.group(1)
        return env[var] if var in env else match.group(0)

    return _VAR.sub(replace, text)


def _pod_name(kube: KubeRun, pod_set: KubePodSet, job_index: int, index: int) -> str:
    if kube.kind == "JobSet":
        return f"{kube.name}-{pod_set.name}-{job_index}-{index}"
    if kube.kind == "PyTorchJob":
        return f"{kube.name}-{pod_set.name}-{index}"
    if kube.kind == "RayJob":
        return (
            f"{kube.name}-head" if pod_set.role == "head" else f"{kube.name}-{pod_set.name}-{index}"
        )
    if kube.kind == "Workload":
        return f"{kube.name}-{pod_set.name}-{index}"
    return f"{kube.name}-{index}"


def pod_names(kube: KubeRun, counts: Mapping[str, int]) -> list[str]:
    """Every pod name (hostname) of the job, given each pod set's admitted pod count."""
    names: list[str] = []
    for slot in _slots(kube, counts):
        names.extend(p["name"] for p in slot[2])
    return names


def _slots(
    kube: KubeRun, counts: Mapping[str, int]
) -> list[tuple[KubePodSet, int, list[dict[str, Any]]]]:
    """Per task, in pod-set order: (pod set, slot in it, the pods it runs one after another)."""
    out: list[tuple[KubePodSet, int, list[dict[str, Any]]]] = []
    world = sum(
        counts.get(p.name, p.jobs * min(p.parallelism, p.completions)) for p in kube.pod_sets
    )
    master = f"{kube.name}-master-0"
    rank_base = 0
    for pod_set in kube.pod_sets:
        full = pod_set.jobs * min(pod_set.parallelism, pod_set.completions)
        count = counts.get(pod_set.name, full)
        # Partial admission lowers parallelism; the completions stay (Kueue's Job integration).
        per_job = max(1, count // pod_set.jobs)
        for slot in range(count):
            job_index, local = divmod(slot, per_job)
            indices = list(range(local, pod_set.completions, per_job))
            pods = []
            for index in indices:
                name = _pod_name(kube, pod_set, job_index, index)
                env: dict[str, str] = {"HOSTNAME": name}
                if pod_set.indexed:
                    env["JOB_COMPLETION_INDEX"] = str(index)
                if kube.kind == "JobSet":
                    env["JOBSET_NAME"] = kube.name
                    env["REPLICATED_JOB_NAME"] = pod_set.name
                    env["JOB_INDEX"] = str(job_index)
                if kube.kind == "PyTorchJob":
                    port = _pytorch_port(kube)
                    rank = (
                        0 if pod_set.role == "Master" else index + (1 if _has_master(kube) else 0)
                    )
                    env.update(
                        {
                            "MASTER_ADDR": master if _has_master(kube) else f"{kube.name}-worker-0",
                            "MASTER_PORT": str(port),
                            "WORLD_SIZE": str(world),
                            "RANK": str(rank),
                            # One process per pod: torchrun sets its own when it runs more.
                            "LOCAL_RANK": "0",
                            "PYTHONUNBUFFERED": "1",
                        }
                    )
                pods.append({"name": name, "index": index, "env": env})
            out.append((pod_set, rank_base + slot, pods))
        rank_base += count
    return out


def _has_master(kube: KubeRun) -> bool:
    return any(p.role == "Master" for p in kube.pod_sets)


def _pytorch_port(kube: KubeRun) -> int:
    for pod_set in kube.pod_sets:
        if pod_set.role == "Master":
            for container in pod_set.containers:
                if PYTORCH_PORT_NAME in container.ports:
                    return container.ports[PYTORCH_PORT_NAME]
    return PYTORCH_DEFAULT_PORT


def _resolved(
    container: Container, pod_env: Mapping[str, str], kube: KubeRun, pod: str
) -> dict[str, Any]:
    env = dict(pod_env)
    for var in container.env:
        if var.field_path == "metadata.name":
            value = pod
        elif var.field_path == "metadata.namespace":
            value = kube.namespace
        else:
            # Kubernetes expands $(VAR) in a value from the variables defined before it.
            value = expand_vars(var.value, env)
        env[var.name] = value
    out: dict[str, Any] = {
        "name": container.name,
        "image": container.image,
        "command": [expand_vars(part, env) for part in container.command],
        "field": container.field,
        "workingDir": container.working_dir,
        "env": env,
    }
    if container.image_pull_policy is not None:
        out["imagePullPolicy"] = container.image_pull_policy
    if container.entrypoint is not None:
        out["entrypoint"] = [expand_vars(part, env) for part in container.entrypoint]
    if container.args is not None:
        out["args"] = [expand_vars(part, env) for part in container.args]
    if container.volume_mounts:
        out["volumeMounts"] = [m.model_dump(by_alias=True) for m in container.volume_mounts]
    if container.run_as_user is not None:
        out["runAsUser"] = container.run_as_user
    if container.run_as_group is not None:
        out["runAsGroup"] = container.run_as_group
    return out


def pod_plan(kube: KubeRun, counts: Mapping[str, int]) -> dict[str, list[list[dict[str, Any]]]]:
    """What each task runs: per pod set, per parallelism slot (task) of it.

    Each task is a list of pods run one after the other (a parallelism slot
    working through its completion indices); each pod is ``{"name", "index",
    "env", "initContainers": [...], "containers": [...]}`` with every
    container's command expanded and environment resolved, or, for a RayJob's
    worker, ``{"name", "waitForHead": true}``.
    """
    tasks: dict[str, list[list[dict[str, Any]]]] = {p.name: [] for p in kube.pod_sets}
    for pod_set, _, pods in _slots(kube, counts):
        task: list[dict[str, Any]] = []
        for pod in pods:
            if kube.kind == "RayJob" and pod_set.role != "head":
                task.append({"name": pod["name"], "index": pod["index"], "waitForHead": True})
                continue
            containers = pod_set.containers
            if kube.kind == "RayJob":
                head = containers[0]
                containers = [
                    head.model_copy(
                        update={
                            "command": ["/bin/sh", "-c", kube.entrypoint or ""],
                            "field": "spec.entrypoint",
                        }
                    )
                ]
            task.append(
                {
                    "name": pod["name"],
                    "index": pod["index"],
                    "env": pod["env"],
                    "initContainers": [
                        _resolved(c, pod["env"], kube, pod["name"]) for c in pod_set.init_containers
                    ],
                    "containers": [_resolved(c, pod["env"], kube, pod["name"]) for c in containers],
                }
            )
        tasks[pod_set.name].append(task)
    return tasks

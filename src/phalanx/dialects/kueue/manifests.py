"""Kubernetes / Kueue manifests to and from phalanx model objects.

This is the loader behind ``phalanx apply -f FILE|DIR`` and ``phalanx up
--config``. It reads YAML (or JSON) documents such as::

    apiVersion: kueue.x-k8s.io/v1beta2
    kind: ClusterQueue
    metadata: {name: team-a}
    spec:
      cohortName: research
      resourceGroups: [...]

and returns one :class:`Manifest` per object, remembering the file and line it
came from. Accepted kinds (``apiVersion`` in brackets):

* ``Node`` (``v1``): ``metadata.labels``, ``spec.taints``, ``spec.unschedulable``
  (a drained node), ``status.capacity`` (``status.allocatable`` when there is no
  capacity). The annotations ``phalanx.io/state`` (``up``/``drain``/``down``) and
  ``phalanx.io/reason`` carry phalanx's admin state; other Node fields are ignored.
* ``ResourceFlavor``, ``Topology``, ``Cohort``, ``ClusterQueue``, ``LocalQueue``
  and ``WorkloadPriorityClass`` (``kueue.x-k8s.io/v1beta2`` and ``v1beta1``; v1beta1
  spellings such as ``spec.cohort`` are normalized): first checked as the API
  server and Kueue's webhooks would (:mod:`~phalanx.dialects.kueue.validation`),
  defaults filled in, then ``spec`` maps onto the model one-to-one;
  ``WorkloadPriorityClass`` becomes a ``PriorityClass``.
* Jobs: ``batch/v1`` Job, JobSet, PyTorchJob, RayJob and Kueue's ``Workload``
  become a :class:`~phalanx.dialects.kueue.jobs.KubeJob` (named ``namespace/name``).
* Kueue's ``Configuration`` (``config.kueue.x-k8s.io``) becomes a
  :class:`~phalanx.dialects.kueue.configuration.KueueConfiguration`.
* ``Tenant`` and every configuration kind above under ``phalanx.io/v1``; there a
  ``PriorityClass`` may also carry ``limits`` (Slurm's QOS limits), and one that
  has limits is written back in that spelling.

Lines starting with ``//`` are each reported ("use # for YAML comments") and
the documents are still checked without them, so one run shows every problem.

Loading is all or nothing: either every document is valid and every manifest
is returned, or one :class:`~phalanx.errors.Invalid` is raised whose detail
lists each problem on its own line as
``FILE:LINE: Kind/name (document N): field.path: message``, the field path in
the manifest's own spelling (``spec.resourceGroups[0].flavors[0].resources[1]
.nominalQuota``).

Limits, each refused with the file and line before anything else is read:
a file or stream of more than :data:`MAX_MANIFEST_BYTES` (read no further than
one byte past it: :func:`load_path`, :func:`load_stream`), nesting deeper than
:data:`MAX_DEPTH`, aliases that would add more than :data:`MAX_ALIAS_NODES`
nodes (a "billion laughs" document), an alias inside the node it names (a
recursive structure), and a key given twice in one mapping.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import yaml
from pydantic import ValidationError

from phalanx.dialects.kueue.configuration import (
    CONFIG_API_VERSIONS,
    KueueConfiguration,
    convert_configuration,
)
from phalanx.dialects.kueue.jobs import JOB_KINDS, JobFieldError, KubeJob, convert_job
from phalanx.dialects.kueue.validation import validate
from phalanx.dialects.kueue.values import describe
from phalanx.errors import Invalid
from phalanx.model import (
    AdminState,
    ClusterQueue,
    Cohort,
    LocalQueue,
    Node,
    PriorityClass,
    ResourceFlavor,
    Tenant,
    Topology,
)
from phalanx.model.kinds import KINDS, MODEL_BY_KIND
from phalanx.model.quantity import QuantityError, format_quantity, parse_quantity
from phalanx.model.resources import format_resources

__all__ = [
    "KINDS",
    "KIND_ALIASES",
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "MAX_MANIFEST_BYTES",
    "Manifest",
    "ManifestObject",
    "load_documents",
    "load_path",
    "load_stream",
    "load_text",
    "resolve_kind",
    "to_manifest",
]

ManifestObject = (
    Node
    | ResourceFlavor
    | Topology
    | Cohort
    | ClusterQueue
    | LocalQueue
    | Tenant
    | PriorityClass
    | KubeJob
    | KueueConfiguration
)
"""Every object a manifest can describe (a job kind's is a :class:`KubeJob`)."""

_MODELS = MODEL_BY_KIND

KIND_ALIASES: dict[str, str] = {
    **{alias: "ClusterQueue" for alias in ("clusterqueue", "clusterqueues", "cq", "cqs")},
    **{alias: "LocalQueue" for alias in ("localqueue", "localqueues", "lq", "lqs", "queue")},
    **{
        alias: "ResourceFlavor"
        for alias in ("resourceflavor", "resourceflavors", "flavor", "flavors", "rf", "rfs")
    },
    **{alias: "Cohort" for alias in ("cohort", "cohorts")},
    **{alias: "Node" for alias in ("node", "nodes", "no")},
    **{alias: "Tenant" for alias in ("tenant", "tenants", "namespace", "namespaces", "ns")},
    **{
        alias: "PriorityClass"
        for alias in (
            "priorityclass",
            "priorityclasses",
            "workloadpriorityclass",
            "workloadpriorityclasses",
            "pc",
            "wpc",
        )
    },
    **{alias: "Topology" for alias in ("topology", "topologies")},
}
"""User-facing kind names, plurals and short names (lower case) to canonical kinds."""

KUEUE_V1BETA2 = "kueue.x-k8s.io/v1beta2"
PHALANX_V1 = "phalanx.io/v1"
STATE_ANNOTATION = "phalanx.io/state"
REASON_ANNOTATION = "phalanx.io/reason"
REASON_USER_ANNOTATION = "phalanx.io/reason-user"
REASON_TIME_ANNOTATION = "phalanx.io/reason-time"
UNSCHEDULABLE_REASON = "unschedulable"
"""A cordoned node's reason (``spec.unschedulable: true``) when no reason annotation gives one."""
ADMISSION_SCOPE_ANNOTATION = "phalanx.io/kueue-admission-scope"

_KUEUE_KINDS = {
    "ResourceFlavor": "ResourceFlavor",
    "Topology": "Topology",
    "Cohort": "Cohort",
    "ClusterQueue": "ClusterQueue",
    "LocalQueue": "LocalQueue",
    "WorkloadPriorityClass": "PriorityClass",
}
_API_KINDS: dict[tuple[str, str], str] = {("v1", "Node"): "Node"}
for _version in ("v1beta2", "v1beta1"):
    for _wire, _canonical in _KUEUE_KINDS.items():
        _API_KINDS[(f"kueue.x-k8s.io/{_version}", _wire)] = _canonical
for _wire in ("Cohort", "Topology"):
    _API_KINDS[("kueue.x-k8s.io/v1alpha1", _wire)] = _wire
for _canonical in KINDS:
    _API_KINDS[(PHALANX_V1, _canonical)] = _canonical
_API_KINDS[(PHALANX_V1, "WorkloadPriorityClass")] = "PriorityClass"

_KNOWN_KINDS_TEXT = (
    "ResourceFlavor, Topology, Cohort, ClusterQueue, LocalQueue, WorkloadPriorityClass, "
    "Workload (kueue.x-k8s.io/v1beta2 or v1beta1), Configuration "
    "(config.kueue.x-k8s.io/v1beta2 or v1beta1), Job (batch/v1), JobSet "
    "(jobset.x-k8s.io/v1alpha2), PyTorchJob (kubeflow.org/v1), RayJob (ray.io/v1), "
    "Tenant (phalanx.io/v1), Node (v1)"
)

_UNSUPPORTED_HINTS = {
    "admissionChecks": "phalanx does not run Kueue AdmissionChecks; remove the field",
    "admissionChecksStrategy": "phalanx does not run Kueue AdmissionChecks; remove the field",
}

_UNSUPPORTED_KINDS = {
    "AdmissionCheck": "phalanx does not run Kueue AdmissionChecks; remove the object",
    "ProvisioningRequestConfig": "phalanx does not run Kueue AdmissionChecks; remove the object",
    "MultiKueueConfig": "phalanx has no MultiKueue (one cluster); remove the object",
    "MultiKueueCluster": "phalanx has no MultiKueue (one cluster); remove the object",
}
"""Kueue kinds phalanx knows and refuses, with the reason."""

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Manifest:
    """One object read from a manifest, with where it came from.

    ``name`` is the object's name; a LocalQueue's is ``namespace/name`` (as
    :class:`phalanx.engine.Delete` expects). ``line`` is the 1-based line where
    the document's content starts (0 for documents that arrived already parsed).
    """

    kind: str
    name: str
    obj: ManifestObject
    source: str
    line: int


# --------------------------------------------------------------------------- kinds


def resolve_kind(s: str) -> str:
    """The canonical kind for a user-facing kind name, plural or short name.

    >>> resolve_kind("cq")
    'ClusterQueue'
    """
    key = s.strip().lower()
    if key in KIND_ALIASES:
        return KIND_ALIASES[key]
    for kind in KINDS:
        if kind.lower() == key:
            return kind
    known = ", ".join(f"{k} ({_short_names(k)})" for k in KINDS)
    raise Invalid(f"unknown kind {s!r}; known kinds: {known}")


def _short_names(kind: str) -> str:
    return ", ".join(sorted((a for a, k in KIND_ALIASES.items() if k == kind), key=len)[:3])


# --------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class _Problem:
    source: str
    line: int
    message: str
    col: int = 0
    subject: str = ""
    document: int = 0
    path: Path_ = ()
    limit: bool = False
    """Over one of the limits (not a syntax error: no point reading it as JSON instead)."""

    def __str__(self) -> str:
        where = self.source
        if self.line:
            where += f":{self.line}"
            if self.col:
                where += f":{self.col}"
        parts = [where]
        if self.subject and self.document:
            parts.append(f"{self.subject} (document {self.document})")
        elif self.document:
            parts.append(f"document {self.document}")
        if self.path:
            parts.append(format_path(self.path))
        parts.append(self.message)
        # One problem, one line: a value quoted in the message may hold line breaks.
        return _LINE_BREAK.sub(
            lambda m: m.group().encode("unicode_escape").decode(), ": ".join(parts)
        )


_LINE_BREAK = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
"""What ``str.splitlines`` splits at."""
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def format_path(path: Iterable[str | int]) -> str:
    """``("spec", "resourceGroups", 0, "flavors")`` as ``spec.resourceGroups[0].flavors``."""
    out = ""
    for elem in path:
        if isinstance(elem, int):
            out += f"[{elem}]"
        elif _IDENT.match(elem):
            out += f".{elem}" if out else elem
        else:
            out += f"[{json.dumps(elem)}]"
    return out


def _raise(problems: list[_Problem]) -> None:
    if problems:
        raise Invalid("\n".join(str(p) for p in problems))


# --------------------------------------------------------------------------- YAML


@dataclass(frozen=True)
class _Doc:
    data: Any
    source: str
    line: int
    index: int
    node: yaml.Node | None


def _line_at(node: yaml.Node | None, path: Path_, default: int) -> int:
    """The 1-based line of the deepest element of ``path`` found under ``node``."""
    if node is None:
        return default
    line = node.start_mark.line + 1
    current = node
    for elem in path:
        if isinstance(current, yaml.MappingNode) and isinstance(elem, str):
            for key, value in current.value:
                if isinstance(key, yaml.ScalarNode) and key.value == elem:
                    line = key.start_mark.line + 1
                    current = value
                    break
            else:
                break
        elif (
            isinstance(current, yaml.SequenceNode)
            and isinstance(elem, int)
            and 0 <= elem < len(current.value)
        ):
            current = current.value[elem]
            line = current.start_mark.line + 1
        else:
            break
    return line


def _quoted_spans(nodes: Iterable[yaml.Node]) -> set[int]:
    """0-based lines inside block or quoted scalars, where ``//`` is ordinary text."""
    lines: set[int] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            if node.style in ("|", ">", '"', "'"):
                lines.update(range(node.start_mark.line, node.end_mark.line + 1))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.extend((key, value))
    return lines


SLASH_COMMENT = "`//` is not a YAML comment: use # for YAML comments"

MAX_MANIFEST_BYTES = 8 << 20
"""The largest manifest file or stream, in bytes (8 MiB)."""
MAX_DEPTH = 100
"""The deepest nesting of mappings and lists (a Kubernetes object needs about 20)."""
MAX_ALIAS_NODES = 100_000
"""The most nodes YAML aliases (``*name``) may add to a stream, counting each alias
as the whole node it repeats."""


class _LimitError(yaml.MarkedYAMLError):
    """A document over one of the limits, or with a key given twice."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses, while composing, what would make the rest of
    the loading slow or deep: too much nesting, aliases that expand too far or into
    themselves, and duplicate keys (the Kubernetes API server's strict decoding
    refuses them too)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._expanded = 0
        """Nodes composed so far, each alias counted as the size of its node."""
        self._aliased = 0
        self._sizes: dict[str, int] = {}
        self._open: set[str] = set()

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        mark: Any = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            name = str(event.anchor)
            if name in self._open:
                raise _LimitError(
                    None,
                    None,
                    f"the alias *{name} is inside the node &{name} it repeats "
                    "(a recursive structure)",
                    mark,
                )
            size = self._sizes.get(name, 1)
            self._aliased += size
            self._expanded += size
            if self._aliased > MAX_ALIAS_NODES:
                raise _LimitError(
                    None,
                    None,
                    f"YAML aliases expand to more than {MAX_ALIAS_NODES} nodes; write the "
                    "repeated parts out or split the file",
                    mark,
                )
            return super().compose_node(parent, index)
        if self._depth >= MAX_DEPTH:
            raise _LimitError(None, None, f"nested more than {MAX_DEPTH} levels deep", mark)
        anchor: str | None = getattr(event, "anchor", None)
        before = self._expanded
        self._expanded += 1
        self._depth += 1
        if anchor is not None:
            self._open.add(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open.discard(anchor)
        if anchor is not None:
            self._sizes[anchor] = self._expanded - before
        return node

    def compose_mapping_node(self, anchor: Any) -> yaml.MappingNode:
        node = super().compose_mapping_node(anchor)
        seen: dict[tuple[str, str], yaml.Node] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                continue
            first = seen.setdefault((key.tag, key.value), key)
            if first is not key:
                raise _LimitError(
                    None,
                    None,
                    f"duplicate key {json.dumps(key.value)} (first on line "
                    f"{first.start_mark.line + 1}); give each key once",
                    key.start_mark,
                )
        return node


def _size_problem(text: str, source: str) -> _Problem | None:
    """A problem when ``text`` is over :data:`MAX_MANIFEST_BYTES`."""
    if len(text) > MAX_MANIFEST_BYTES:
        return _too_large(source, f"{len(text)} characters")
    size = len(text.encode("utf-8", "surrogatepass"))
    return _too_large(source, f"{size} bytes") if size > MAX_MANIFEST_BYTES else None


def _too_large(source: str, size: str) -> _Problem:
    return _Problem(
        source,
        0,
        f"{size}, over the limit of {MAX_MANIFEST_BYTES} bytes (8 MiB) for one manifest "
        "file or stream; split it into several files",
        limit=True,
    )


def _depth_problem(data: Any, source: str, line: int, document: int = 0) -> _Problem | None:
    """A problem when already parsed ``data`` nests deeper than :data:`MAX_DEPTH`."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return _Problem(
                source, line, f"nested more than {MAX_DEPTH} levels deep", document=document,
                limit=True,
            )  # fmt: skip
        if isinstance(value, Mapping):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return None


def _parse_once(text: str, source: str) -> tuple[list[tuple[yaml.Node, Any]], _Problem | None]:
    parsed: list[tuple[yaml.Node, Any]] = []
    syntax: _Problem | None = None
    try:
        loader = _Loader(text)  # it refuses characters YAML does not allow at once
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        char = exc.character
        code = f"U+{char:04X}" if isinstance(char, int) else repr(char)
        return [], _Problem(
            source, line, f"YAML syntax error: unacceptable character {code} ({exc.reason})", column
        )
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            parsed.append((node, loader.construct_document(node)))
    except _LimitError as exc:
        mark = exc.problem_mark
        syntax = _Problem(
            source,
            (mark.line + 1) if mark else 0,
            exc.problem or "over a limit",
            col=(mark.column + 1) if mark else 0,
            limit=True,
        )
    except RecursionError:
        syntax = _Problem(source, 0, f"nested more than {MAX_DEPTH} levels deep", limit=True)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        detail = exc.problem or "invalid YAML"
        if exc.context:
            detail = f"{detail} ({exc.context})"
        syntax = _Problem(
            source,
            (mark.line + 1) if mark else 0,
            f"YAML syntax error: {detail}",
            col=(mark.column + 1) if mark else 0,
        )
    except yaml.YAMLError as exc:
        syntax = _Problem(source, 0, f"YAML syntax error: {exc}")
    finally:
        loader.dispose()
    return parsed, syntax


def _parse_yaml(text: str, source: str) -> tuple[list[_Doc], list[_Problem]]:
    """Every document of ``text`` with its node tree, and the problems found on the way.

    Lines that start with ``//`` (a C-style comment, not YAML) are each reported;
    the text is then read again without them, so that the problems of the
    documents themselves are reported too, in the same run.
    """
    parsed, syntax = _parse_once(text, source)
    if syntax is not None and syntax.limit:
        return [], [syntax]
    exempt = _quoted_spans(node for node, _ in parsed) if syntax is None else set()
    lines = text.splitlines(keepends=True)
    slashed = [
        i for i, line in enumerate(lines) if line.lstrip().startswith("//") and i not in exempt
    ]
    problems = [_Problem(source, i + 1, SLASH_COMMENT) for i in slashed]
    if slashed:
        for i in slashed:
            lines[i] = "\n"
        parsed, syntax = _parse_once("".join(lines), source)
    if syntax is not None:
        return [], [*problems, syntax]
    docs: list[_Doc] = []
    index = 0
    for node, data in parsed:
        if data is None:
            continue
        index += 1
        docs.append(_Doc(data, source, node.start_mark.line + 1, index, node))
    return docs, problems


def _expand_lists(docs: Iterable[_Doc]) -> Iterator[_Doc]:
    """A top-level sequence or a Kubernetes ``List`` is its items, one document each."""
    for doc in docs:
        items: list[Any] | None = None
        items_node: yaml.Node | None = None
        if isinstance(doc.data, list):
            items, items_node = doc.data, doc.node
        elif (
            isinstance(doc.data, Mapping)
            and isinstance(doc.data.get("kind"), str)
            and doc.data["kind"].endswith("List")
            and isinstance(doc.data.get("items"), list)
        ):
            items = doc.data["items"]
            if isinstance(doc.node, yaml.MappingNode):
                for key, value in doc.node.value:
                    if isinstance(key, yaml.ScalarNode) and key.value == "items":
                        items_node = value
        if items is None:
            yield doc
            continue
        for i, item in enumerate(items):
            node = None
            if isinstance(items_node, yaml.SequenceNode) and i < len(items_node.value):
                node = items_node.value[i]
            line = node.start_mark.line + 1 if node is not None else doc.line
            yield _Doc(item, doc.source, line, doc.index, node)


# --------------------------------------------------------------------------- conversion


@dataclass
class _Converted:
    kind: str
    name: str
    data: dict[str, Any]
    fields: dict[str, Path_]
    """Model input key -> the manifest path it came from."""
    base: Path_
    """Where errors of the whole object point (``spec`` for spec-based kinds)."""


class _DocError(Exception):
    def __init__(self, path: Path_, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def _metadata(data: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    metadata = data.get("metadata")
    if metadata is None:
        raise _DocError(("metadata",), "required (with at least a name)")
    if not isinstance(metadata, Mapping):
        raise _DocError(("metadata",), f"expected a mapping, got {describe(metadata)}")
    name = metadata.get("name")
    if name is None:
        hint = " (generateName is only for jobs)" if "generateName" in metadata else ""
        raise _DocError(("metadata", "name"), f"required{hint}")
    if not isinstance(name, str) or not name:
        raise _DocError(("metadata", "name"), f"expected a non-empty string, got {describe(name)}")
    return metadata, name


def _mapping_at(data: Mapping[str, Any], key: str, path: Path_) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _DocError(path, f"expected a mapping, got {describe(value)}")
    return dict(value)


def _convert(kind: str, api_version: str, data: Mapping[str, Any]) -> _Converted:
    metadata, name = _metadata(data)
    if kind == "Node":
        return _convert_node(name, metadata, data)
    if kind == "PriorityClass":
        fields: dict[str, Path_] = {"name": ("metadata", "name")}
        model: dict[str, Any] = {"name": name}
        source = data.get("spec") if api_version == PHALANX_V1 and "spec" in data else data
        prefix: Path_ = ("spec",) if source is not data else ()
        if not isinstance(source, Mapping):
            raise _DocError(("spec",), f"expected a mapping, got {describe(source)}")
        keys = ["value", "description"]
        if api_version == PHALANX_V1:
            keys.append("limits")
        for key in keys:
            if key in source:
                model[key] = source[key]
                fields[key] = (*prefix, key)
        return _Converted(kind, name, model, fields, ())

    spec = _mapping_at(data, "spec", ("spec",))
    v1beta2 = api_version in (KUEUE_V1BETA2, PHALANX_V1)
    fields = {"name": ("metadata", "name")}
    model = {"name": name}
    renames: dict[str, str] = {}
    if not v1beta2 and kind == "ClusterQueue":
        renames["cohort"] = "cohortName"
    if api_version.endswith("/v1alpha1") and kind == "Cohort":
        renames["parent"] = "parentName"
    reserved = {"name"}
    if kind == "LocalQueue":
        reserved.add("namespace")
        namespace = metadata.get("namespace", "default")
        if not isinstance(namespace, str):
            raise _DocError(
                ("metadata", "namespace"), f"expected a string, got {describe(namespace)}"
            )
        model["namespace"] = namespace
        fields["namespace"] = ("metadata", "namespace")
        name = f"{namespace}/{name}"
    if kind == "ClusterQueue":
        reserved.add("annotations")
        annotations = _mapping_at(metadata, "annotations", ("metadata", "annotations"))
        scope = spec.pop("admissionScope", None)
        if scope is not None:
            # Kueue's admission fair sharing: kept as an annotation (it round-trips);
            # the engine reads its admissionMode (phalanx.engine.admissionfairsharing.usage).
            try:
                annotations[ADMISSION_SCOPE_ANNOTATION] = json.dumps(scope, sort_keys=True)
            except (TypeError, ValueError):
                raise _DocError(
                    ("spec", "admissionScope"),
                    "expected a mapping such as {admissionMode: UsageBasedAdmissionFairSharing} "
                    "(strings, numbers, booleans, lists and mappings with string keys)",
                ) from None
        if annotations:
            model["annotations"] = annotations
            fields["annotations"] = ("metadata", "annotations")
    weight = (
        spec.get("fairSharing", {}).get("weight")
        if isinstance(spec.get("fairSharing"), Mapping)
        else None
    )
    if isinstance(weight, str):
        try:
            spec["fairSharing"] = {
                **spec["fairSharing"],
                "weight": parse_quantity(weight, "cpu") / 1000,
            }
        except QuantityError as exc:
            raise _DocError(("spec", "fairSharing", "weight"), str(exc)) from None
    if kind == "ResourceFlavor" and isinstance(spec.get("nodeTaints"), list):
        # A taint's timeAdded is bookkeeping of the node controller.
        spec["nodeTaints"] = [
            {k: v for k, v in t.items() if k != "timeAdded"} if isinstance(t, Mapping) else t
            for t in spec["nodeTaints"]
        ]
    for key, value in spec.items():
        if key in reserved or not isinstance(key, str):
            raise _DocError(("spec", str(key)), "unknown field")
        if key in _UNSUPPORTED_HINTS:
            raise _DocError(("spec", key), f"not supported: {_UNSUPPORTED_HINTS[key]}")
        target = renames.get(key, key)
        if not v1beta2 and kind == "ClusterQueue" and key == "flavorFungibility":
            value = _v1beta1_fungibility(value)
        model[target] = value
        fields[target] = ("spec", key)
    return _Converted(kind, name, model, fields, ("spec",))


def _v1beta1_fungibility(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    value = dict(value)
    if value.get("whenCanBorrow") == "Borrow":
        value["whenCanBorrow"] = "MayStopSearch"
    if value.get("whenCanPreempt") == "Preempt":
        value["whenCanPreempt"] = "MayStopSearch"
    return value


def _convert_node(name: str, metadata: Mapping[str, Any], data: Mapping[str, Any]) -> _Converted:
    spec = _mapping_at(data, "spec", ("spec",))
    status = _mapping_at(data, "status", ("status",))
    annotations = _mapping_at(metadata, "annotations", ("metadata", "annotations"))
    model: dict[str, Any] = {"name": name}
    fields: dict[str, Path_] = {"name": ("metadata", "name")}
    if "labels" in metadata:
        model["labels"] = metadata["labels"] if metadata["labels"] is not None else {}
        fields["labels"] = ("metadata", "labels")
    taints = spec.get("taints")
    if taints is not None:
        if isinstance(taints, list):
            taints = [
                {k: v for k, v in t.items() if k != "timeAdded"} if isinstance(t, Mapping) else t
                for t in taints
            ]
        model["taints"] = taints
        fields["taints"] = ("spec", "taints")
    capacity_key = "capacity" if status.get("capacity") is not None else "allocatable"
    if status.get(capacity_key) is not None:
        model["capacity"] = status[capacity_key]
        fields["capacity"] = ("status", capacity_key)
    unschedulable = spec.get("unschedulable", False)
    if not isinstance(unschedulable, bool):
        raise _DocError(
            ("spec", "unschedulable"), f"expected true or false, got {describe(unschedulable)}"
        )
    state = annotations.get(STATE_ANNOTATION)
    if state is not None:
        model["state"] = state
        fields["state"] = ("metadata", "annotations", STATE_ANNOTATION)
        if unschedulable and state == AdminState.UP.value:
            model["state"] = AdminState.DRAIN.value
    elif unschedulable:
        model["state"] = AdminState.DRAIN.value
        fields["state"] = ("spec", "unschedulable")
    reason = annotations.get(REASON_ANNOTATION)
    if reason is not None:
        model["reason"] = reason
        fields["reason"] = ("metadata", "annotations", REASON_ANNOTATION)
    elif unschedulable and model.get("state") == AdminState.DRAIN.value:
        model["reason"] = UNSCHEDULABLE_REASON
        fields["reason"] = ("spec", "unschedulable")
    user = annotations.get(REASON_USER_ANNOTATION)
    if user is not None:
        model["reason_user"] = user
        fields["reason_user"] = ("metadata", "annotations", REASON_USER_ANNOTATION)
    when = annotations.get(REASON_TIME_ANNOTATION)
    if when is not None:
        path = ("metadata", "annotations", REASON_TIME_ANNOTATION)
        model["reason_time"] = _reason_time(path, when)
        fields["reason_time"] = path
    return _Converted("Node", name, model, fields, ())


def _reason_time(path: Path_, value: Any) -> float:
    """An ISO 8601 time (``2026-12-06T10:00:00Z``) as epoch seconds; UTC when no offset."""
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        raise _DocError(
            path, f"expected a time such as 2026-12-06T10:00:00Z, got {describe(value)}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _iso_time(when: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(when, UTC).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------- pydantic errors

_MESSAGE_PATH = re.compile(r"^(?P<path>[^\s:]+(?:\[\d+\])*): (?P<rest>.+)$", re.DOTALL)
_PATH_ELEM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)|\[([0-9]{1,9})\]|\.")
_QUANTITY = re.compile(r"^expected a quantity such as (?P<ex>.+), got (?P<got>.+)$", re.DOTALL)


def _split_path(text: str) -> Path_ | None:
    out: list[str | int] = []
    pos = 0
    while pos < len(text):
        match = _PATH_ELEM.match(text, pos)
        if match is None:
            return None
        if match.group(1):
            out.append(match.group(1))
        elif match.group(2):
            out.append(int(match.group(2)))
        pos = match.end()
    return tuple(out)


def _walk(data: Any, loc: Iterable[str | int]) -> Any:
    for elem in loc:
        in_mapping = isinstance(data, Mapping) and elem in data
        in_list = isinstance(data, list) and isinstance(elem, int) and 0 <= elem < len(data)
        if in_mapping or in_list:
            data = data[elem]
        else:
            return None
    return data


def _pydantic_problems(conv: _Converted, exc: ValidationError) -> list[tuple[Path_, str]]:
    out: list[tuple[Path_, str]] = []
    for error in exc.errors(include_url=False):
        loc: Path_ = tuple(e for e in error["loc"] if e != "[key]")
        kind = error["type"]
        message = str(error["msg"])
        if kind == "missing":
            message = "required"
        elif kind == "extra_forbidden":
            message = "unknown field"
            if len(loc) == 1:
                model = _MODELS[conv.kind]
                known = sorted(
                    (info.alias or name)
                    for name, info in model.model_fields.items()
                    if name not in ("name", "namespace", "annotations")
                )
                if conv.kind != "Node":
                    message += f"; {conv.kind} fields are: {', '.join(known)}"
        elif kind in ("value_error", "assertion_error"):
            message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
            match = _MESSAGE_PATH.match(message)
            here = _walk(conv.data, loc)
            if match is not None and isinstance(here, Mapping):
                head = match["path"]
                extra = (head,) if head in here else _split_path(head)
                if extra and extra[0] in here:
                    loc = (*loc, *extra)
                    message = match["rest"]
            quantity = _QUANTITY.match(message)
            if quantity is not None:
                got = quantity["got"]
                if len(got) >= 2 and got[0] == got[-1] == "'":
                    got = json.dumps(got[1:-1])
                message = f"invalid quantity {got} (expected a quantity such as {quantity['ex']})"
        elif kind == "string_type" and isinstance(error.get("input"), bool | int | float):
            raw = json.dumps(error["input"])
            message = f'expected a string, got {raw} (quote it: "{raw}")'
        else:
            value = error.get("input")
            if isinstance(value, str | int | float | bool) or value is None:
                message = f"{message}, got {describe(value)}"
        out.append((_manifest_path(conv, loc), message))
    return out


def _manifest_path(conv: _Converted, loc: Path_) -> Path_:
    if not loc:
        return conv.base
    head = loc[0]
    if isinstance(head, str) and head in conv.fields:
        return (*conv.fields[head], *loc[1:])
    return (*conv.base, *loc)


# --------------------------------------------------------------------------- loading


def _load_docs(docs: Iterable[_Doc]) -> tuple[list[Manifest], list[_Problem]]:
    manifests: list[Manifest] = []
    problems: list[_Problem] = []
    for doc in _expand_lists(docs):

        def problem(path: Path_, message: str, subject: str = "", doc: _Doc = doc) -> _Problem:
            line = _line_at(doc.node, path, doc.line)
            return _Problem(
                doc.source, line, message, subject=subject, document=doc.index, path=path
            )

        data = doc.data
        if not isinstance(data, Mapping):
            problems.append(
                problem(
                    (),
                    "expected a mapping (a Kubernetes object with apiVersion, kind, metadata"
                    f" and spec), got {describe(data)}",
                )
            )
            continue
        api_version, wire_kind = data.get("apiVersion"), data.get("kind")
        raw_name = (
            data.get("metadata", {}).get("name")
            if isinstance(data.get("metadata"), Mapping)
            else None
        )
        subject_name = raw_name if isinstance(raw_name, str) and raw_name else "<unnamed>"
        if not isinstance(wire_kind, str) or not wire_kind:
            problems.append(problem(("kind",), f"required; known kinds: {_KNOWN_KINDS_TEXT}"))
            continue
        subject = f"{wire_kind}/{subject_name}"
        if not isinstance(api_version, str) or not api_version:
            problems.append(problem(("apiVersion",), "required", subject))
            continue
        if wire_kind == "Configuration" and api_version in CONFIG_API_VERSIONS:
            config, invalid = convert_configuration(api_version, data)
            if config is None:
                problems.extend(problem(path, message, subject) for path, message in invalid)
                continue
            manifests.append(Manifest("Configuration", config.name, config, doc.source, doc.line))
            continue
        job_kind = JOB_KINDS.get((api_version, wire_kind))
        if job_kind is not None:
            try:
                kube = convert_job(job_kind, data)
            except JobFieldError as exc:
                problems.append(problem(exc.path, _hinted(data, exc.path, exc.message), subject))
                continue
            name = f"{kube.namespace}/{kube.name}"
            manifests.append(Manifest(job_kind, name, kube, doc.source, doc.line))
            continue
        kind = _API_KINDS.get((api_version, wire_kind))
        if (
            kind is None
            and api_version.startswith("kueue.x-k8s.io/")
            and wire_kind in (_UNSUPPORTED_KINDS)
        ):
            message = f"not supported: {_UNSUPPORTED_KINDS[wire_kind]}"
            problems.append(problem(("kind",), message, subject))
            continue
        if kind is None:
            versions = sorted(
                {v for (v, k) in _API_KINDS if k == wire_kind}
                | {v for (v, k) in JOB_KINDS if k == wire_kind}
                | (set(CONFIG_API_VERSIONS) if wire_kind == "Configuration" else set())
            )
            if versions:
                message = (
                    f"{wire_kind} needs apiVersion {' or '.join(versions)}, got {api_version!r}"
                )
                problems.append(problem(("apiVersion",), message, subject))
            else:
                message = (
                    f"unsupported kind {api_version} {wire_kind}; known kinds: {_KNOWN_KINDS_TEXT}"
                )
                problems.append(problem(("kind",), message, subject))
            continue
        if kind == "PriorityClass" and api_version != PHALANX_V1 and "limits" in data:
            message = (
                "not a Kueue field: QOS limits need apiVersion phalanx.io/v1, "
                "kind PriorityClass, with spec.value and spec.limits"
            )
            problems.append(problem(("limits",), message, subject))
            continue
        if api_version.startswith("kueue.x-k8s.io/"):
            data, invalid = validate(kind, api_version, data)
            if invalid:
                problems.extend(
                    problem(path, _hinted(data, path, message), subject)
                    for path, message in invalid
                )
                continue
        try:
            conv = _convert(kind, api_version, data)
        except _DocError as exc:
            problems.append(problem(exc.path, exc.message, subject))
            continue
        try:
            obj = cast(ManifestObject, _MODELS[kind].model_validate(conv.data))
        except ValidationError as exc:
            for path, message in _pydantic_problems(conv, exc):
                problems.append(problem(path, _hinted(data, path, message), subject))
            continue
        manifests.append(Manifest(kind, conv.name, obj, doc.source, doc.line))
    return manifests, problems


def _hinted(data: Any, path: Path_, message: str) -> str:
    """``message``, plus the fix when the bad value is a ``//`` comment YAML kept as text."""
    value = _walk(data, path)
    if isinstance(value, str) and re.search(r"\s//", value):
        return f"{message} ({SLASH_COMMENT})"
    return message


def load_text(text: str, source: str = "<stdin>") -> list[Manifest]:
    """Every manifest in a YAML (or JSON) stream.

    Raises one :class:`Invalid` listing each problem; ``source`` names the stream in it.
    """
    manifests, problems = _load_text(text, source)
    _raise(problems)
    return manifests


def load_stream(stream: IO[bytes], source: str = "<stdin>") -> list[Manifest]:
    """Every manifest in a YAML (or JSON) byte stream (``phalanx apply -f -``), read no
    further than one byte past :data:`MAX_MANIFEST_BYTES`.

    Raises one :class:`Invalid` listing each problem; ``source`` names the stream in it.
    """
    text, problem = _read_bounded(stream, source, "stream")
    if problem is not None:
        _raise([problem])
    assert text is not None
    return load_text(text, source)


def _read_bounded(stream: IO[bytes], source: str, what: str) -> tuple[str | None, _Problem | None]:
    """At most :data:`MAX_MANIFEST_BYTES` of ``stream`` as text (UTF-8, newlines as a
    text file's), or the problem: larger (read no further), or not UTF-8."""
    data = stream.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        return None, _too_large(source, f"{MAX_MANIFEST_BYTES + 1} bytes or more")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, _Problem(source, 0, f"not a UTF-8 text {what} ({exc.reason})")
    # As a text-mode read gives it (universal newlines).
    return text.replace("\r\n", "\n").replace("\r", "\n"), None


def _load_text(text: str, source: str) -> tuple[list[Manifest], list[_Problem]]:
    too_large = _size_problem(text, source)
    if too_large is not None:
        return [], [too_large]
    docs, problems = _parse_yaml(text, source)
    if problems and source.endswith(".json") and not any(p.limit for p in problems):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            return [], [_Problem(source, exc.lineno, f"JSON syntax error: {exc.msg}", exc.colno)]
        except RecursionError:
            return [], [_Problem(source, 0, f"nested more than {MAX_DEPTH} levels deep")]
        deep = _depth_problem(data, source, 1)
        if deep is not None:
            return [], [deep]
        docs, problems = [_Doc(data, source, 1, 1, None)], []
    manifests, more = _load_docs(docs)
    return manifests, [*problems, *more]


def load_documents(docs: list[dict[str, Any]], source: str) -> list[Manifest]:
    """Manifests from documents that arrived already parsed (JSON request bodies).

    Problems name ``source`` and the 1-based document index; ``line`` is 0.
    """
    deep = [
        problem
        for i, data in enumerate(docs, start=1)
        if (problem := _depth_problem(data, source, 0, i)) is not None
    ]
    _raise(deep)
    manifests, problems = _load_docs(
        _Doc(data, source, 0, i, None) for i, data in enumerate(docs, start=1)
    )
    _raise(problems)
    return manifests


_SUFFIXES = (".yaml", ".yml", ".json")


def load_path(path: Path) -> list[Manifest]:
    """Every manifest in a file, or in every ``*.yaml``/``*.yml``/``*.json`` under a directory.

    Directory files are read recursively in sorted order of their relative
    paths. Problems in every file are reported together.
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(
            (p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in _SUFFIXES),
            key=lambda p: p.relative_to(path).parts,
        )
    elif path.is_file():
        files = [path]
    else:
        raise Invalid(f"{path}: no such file or directory")
    manifests: list[Manifest] = []
    problems: list[_Problem] = []
    for file in files:
        source = str(file)
        try:
            size = file.stat().st_size
            if size > MAX_MANIFEST_BYTES:
                problems.append(_too_large(source, f"{size} bytes"))
                continue
            # Bounded too: the file may have grown since, or not say its size (/proc).
            with file.open("rb") as fh:
                text, problem = _read_bounded(fh, source, "file")
        except OSError as exc:
            problems.append(_Problem(source, 0, f"cannot read: {exc.strerror or exc}"))
            continue
        if problem is not None or text is None:
            problems.extend([problem] if problem is not None else [])
            continue
        found, bad = _load_text(text, source)
        manifests.extend(found)
        problems.extend(bad)
    _raise(problems)
    return manifests


# --------------------------------------------------------------------------- export


def to_manifest(kind: str, obj: ManifestObject) -> dict[str, Any]:
    """A model object as a manifest dict that :func:`load_documents` reads back unchanged.

    Kueue kinds are written as ``kueue.x-k8s.io/v1beta2``, a PriorityClass as a
    ``WorkloadPriorityClass``, a Tenant as ``phalanx.io/v1``, a Node as a
    Kubernetes ``v1 Node`` (quantities as strings in ``status.capacity``).
    """
    if isinstance(obj, KubeJob | KueueConfiguration):
        return dict(obj.manifest)
    kind = resolve_kind(kind)
    expected = _MODELS[kind]
    if not isinstance(obj, expected):
        raise Invalid(f"to_manifest: expected a {kind}, got {type(obj).__name__}")
    body = obj.to_dict()
    name = body.pop("name")
    metadata: dict[str, Any] = {"name": name}
    if isinstance(obj, Node):
        if obj.labels:
            metadata["labels"] = dict(obj.labels)
        annotations: dict[str, str] = {}
        if obj.state is not AdminState.UP:
            annotations[STATE_ANNOTATION] = obj.state.value
        if obj.reason:
            annotations[REASON_ANNOTATION] = obj.reason
        if obj.reason_user:
            annotations[REASON_USER_ANNOTATION] = obj.reason_user
        if obj.reason_time is not None:
            annotations[REASON_TIME_ANNOTATION] = _iso_time(obj.reason_time)
        if annotations:
            metadata["annotations"] = annotations
        spec: dict[str, Any] = {}
        if obj.taints:
            spec["taints"] = [t.to_dict() for t in obj.taints]
        if obj.state is not AdminState.UP:
            spec["unschedulable"] = True
        out: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": metadata}
        if spec:
            out["spec"] = spec
        out["status"] = {"capacity": format_resources(obj.capacity)}
        return out
    if isinstance(obj, PriorityClass) and obj.limits is not None:
        # Limits are phalanx's (Slurm's QOS), not Kueue's: the phalanx.io/v1 spelling.
        if not obj.description:
            body.pop("description", None)
        return {"apiVersion": PHALANX_V1, "kind": kind, "metadata": metadata, "spec": body}
    if isinstance(obj, PriorityClass):
        out = {
            "apiVersion": KUEUE_V1BETA2,
            "kind": "WorkloadPriorityClass",
            "metadata": metadata,
            "value": obj.value,
        }
        if obj.description:
            out["description"] = obj.description
        return out
    if isinstance(obj, LocalQueue):
        metadata["namespace"] = body.pop("namespace")
    if isinstance(obj, ClusterQueue):
        body.pop("annotations", None)
        annotations = dict(obj.annotations)
        scope = annotations.pop(ADMISSION_SCOPE_ANNOTATION, None)
        if scope is not None:
            try:
                body["admissionScope"] = json.loads(scope)
            except ValueError:
                annotations[ADMISSION_SCOPE_ANNOTATION] = scope
        if annotations:
            metadata["annotations"] = annotations
    if isinstance(obj, Tenant):
        return {"apiVersion": PHALANX_V1, "kind": kind, "metadata": metadata, "spec": body}
    _kueue_spelling(body)
    return {"apiVersion": KUEUE_V1BETA2, "kind": kind, "metadata": metadata, "spec": body}


def _kueue_spelling(spec: dict[str, Any]) -> None:
    """Model defaults that Kueue's schema spells differently: no empty toleration fields
    (the CRD refuses ``effect: ""``), fair-sharing weights as quantities."""
    fair = spec.get("fairSharing")
    if isinstance(fair, dict) and isinstance(fair.get("weight"), int | float):
        fair["weight"] = format_quantity(round(fair["weight"] * 1000), "cpu")
    tolerations = spec.get("tolerations")
    if isinstance(tolerations, list):
        spec["tolerations"] = [
            {k: v for k, v in t.items() if v != ""} if isinstance(t, dict) else t
            for t in tolerations
        ]

"""Fields Kueue (or Kubernetes) does not let an update change.

:func:`check_update` compares the stored object with the one an apply brings
and names every immutable field that changed; the control plane refuses the
whole apply when there is any (as the API server answers ``field is
immutable``). The rules (reference/kueue.md §1.2-1.8):

* LocalQueue ``spec.clusterQueue`` (CEL ``self == oldSelf``);
* ResourceFlavor ``spec.topologyName`` once set (it may not change or go away);
* Topology ``spec.levels``: only when the lowest level is
  ``kubernetes.io/hostname`` both before and after the change;
* Workload ``spec.podSets``, and ``spec.queueName`` while the workload holds quota;
* batch/v1 Job ``spec.template``, ``spec.completionMode``, ``spec.podFailurePolicy``
  and ``spec.completions`` (Kubernetes lets completions change only together with
  parallelism, for elastic Indexed Jobs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.model.flavor import HOSTNAME_LABEL

__all__ = ["check_update", "format_problems"]

Path_ = tuple[str | int, ...]
Problem = tuple[Path_, str]


def _as_dict(obj: Any) -> dict[str, Any]:
    """The object's manifest-shaped fields (``spec`` for models, the manifest for jobs)."""
    manifest = getattr(obj, "manifest", None)
    if isinstance(manifest, Mapping):
        return dict(manifest)
    if isinstance(obj, Mapping):
        return dict(obj)
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return {"spec": to_dict()}
    raise TypeError(f"check_update: not an object: {type(obj).__name__}")


def _get(data: Mapping[str, Any], *path: str) -> Any:
    value: Any = data
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, str):
        return f'"{value}"'
    return "a different value"


def check_update(kind: str, old: Any, new: Any, *, reserved: bool = False) -> list[Problem]:
    """Immutable fields of ``kind`` that differ between ``old`` and ``new``.

    ``kind`` is the canonical kind (``LocalQueue``, ``ResourceFlavor``, ``Topology``,
    ``Workload``, ``Job``, ...); ``old`` and ``new`` are model objects, jobs
    (:class:`~phalanx.dialects.kueue.jobs.KubeJob`) or manifest dicts. ``reserved``
    says the job holds quota now (a Workload's queueName is then fixed).
    """
    before, after = _as_dict(old), _as_dict(new)
    problems: list[Problem] = []

    def immutable(*path: str, why: str = "field is immutable") -> None:
        was, now = _get(before, *path), _get(after, *path)
        if was != now:
            problems.append((path, f"{why} (was {_show(was)}, now {_show(now)})"))

    if kind == "LocalQueue":
        immutable("spec", "clusterQueue")
    elif kind == "ResourceFlavor":
        if _get(before, "spec", "topologyName") is not None:
            immutable("spec", "topologyName", why="field is immutable once set")
    elif kind == "Topology":
        was, now = _get(before, "spec", "levels"), _get(after, "spec", "levels")
        if was != now and not (_lowest_is_hostname(was) and _lowest_is_hostname(now)):
            problems.append(
                (
                    ("spec", "levels"),
                    f"field is immutable unless the lowest level is {HOSTNAME_LABEL} "
                    "both before and after the change",
                )
            )
    elif kind == "Workload":
        immutable("spec", "podSets")
        if reserved:
            immutable("spec", "queueName", why="field is immutable while the workload holds quota")
    elif kind == "Job":
        for key in ("template", "completionMode", "podFailurePolicy"):
            immutable("spec", key)
        if _get(before, "spec", "completions") != _get(after, "spec", "completions"):
            elastic = _get(after, "spec", "completionMode") == "Indexed" and _get(
                after, "spec", "completions"
            ) == _get(after, "spec", "parallelism")
            if not elastic:
                immutable(
                    "spec",
                    "completions",
                    why="field is immutable (except for an Indexed Job with "
                    "completions equal to parallelism)",
                )
    return problems


def _lowest_is_hostname(levels: Any) -> bool:
    if not isinstance(levels, list) or not levels:
        return False
    last = levels[-1]
    node_label = last.get("nodeLabel") if isinstance(last, Mapping) else None
    return bool(node_label == HOSTNAME_LABEL)


def format_problems(kind: str, name: str, problems: list[Problem]) -> list[str]:
    """``Kind/name: spec.field: message`` lines for an error's detail."""
    return [f"{kind}/{name}: {'.'.join(str(p) for p in path)}: {msg}" for path, msg in problems]

"""``phalanx up --config``: the files read before the control plane starts.

A ``*.conf`` file is a Slurm ``slurm.conf``: its nodes and partitions become
objects (:func:`phalanx.dialects.slurm.read_slurm_conf`) and its scheduling keys
engine settings (:func:`phalanx.dialects.slurm.scheduling.read_scheduling`);
anything else is Kubernetes/Kueue manifests (a file or a directory). A slurm.conf's
``HealthCheckProgram`` and ``HealthCheckInterval`` set the node health check
(:func:`read_health_check`, :mod:`phalanx.control.health`), and ``Epilog`` the
node epilog (:mod:`phalanx.control.epilog`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from phalanx.errors import Invalid

__all__ = ["read_configs", "read_health_check"]


def read_configs(paths: Sequence[Path | str]) -> tuple[list[Any], dict[str, object]]:
    """The objects to apply and the ``EngineConfig.for_preset`` overrides the files set
    (a later file's settings win)."""
    from phalanx.dialects.kueue import load_path
    from phalanx.dialects.slurm import read_slurm_conf
    from phalanx.dialects.slurm.scheduling import is_slurm_conf, read_scheduling

    manifests: list[Any] = []
    settings: dict[str, object] = {}
    for path in map(Path, paths):
        if not is_slurm_conf(path):
            manifests.extend(load_path(path))
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise Invalid(f"{path}: cannot read: {exc}") from None
        manifests.extend(read_slurm_conf(text, str(path)))
        settings.update(read_scheduling(text, str(path)))
    return manifests, settings


_KEPT_KEYS = ("state", "reason", "reasonUser", "reasonTime", "healthCheckReason")


def keep_drains(manifests: Sequence[Any], stored: Any) -> list[Any]:
    """The configuration applied at start, with each node an operator drained or took
    down (``scontrol update``) kept so, as slurmctld keeps its nodes' states across a
    restart: a Node manifest that says nothing of the state (up) takes the stored
    state, reason, user and time. A manifest that drains or downs a node still does.
    ``stored(name)`` is the stored Node's fields, or None."""
    from dataclasses import replace

    from phalanx.model import Node

    out = []
    for manifest in manifests:
        obj = getattr(manifest, "obj", None)
        if isinstance(obj, Node):
            kept = keep_node_state(obj, stored(obj.name))
            if kept is not obj:
                manifest = replace(manifest, obj=kept)
        out.append(manifest)
    return out


def keep_node_state(
    node: Any, spec: dict[str, Any] | None, released: Callable[[dict[str, Any]], bool] | None = None
) -> Any:
    """``node`` (a :class:`~phalanx.model.Node` that says it is up), with the state,
    reason, user and time of its stored fields ``spec`` when those drain or down it,
    unless ``released(spec)`` says that state was the sender's own (a Ray node that died
    and is back); any other ``node`` unchanged."""
    from phalanx.model import AdminState, Node

    if node.state is not AdminState.UP or spec is None:
        return node
    if spec.get("state", "up") == AdminState.UP.value:
        return node
    if released is not None and released(spec):
        return node
    keep = {key: spec[key] for key in _KEPT_KEYS if key in spec}
    return Node.model_validate({**node.to_dict(), **keep})


def read_health_check(paths: Sequence[Path | str]) -> dict[str, object]:
    """The node programs the slurm.conf files set: the health check's ``program`` and
    ``interval_s``, and the ``epilog`` (a later file's keys win)."""
    from phalanx.dialects.slurm.scheduling import is_slurm_conf
    from phalanx.dialects.slurm.scheduling import read_health_check as read_conf

    out: dict[str, object] = {}
    for path in map(Path, paths):
        if is_slurm_conf(path):
            try:
                out.update(read_conf(path.read_text(encoding="utf-8"), str(path)))
            except (OSError, UnicodeDecodeError) as exc:
                raise Invalid(f"{path}: cannot read: {exc}") from None
    return out

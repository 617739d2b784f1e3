"""A Kubernetes container in its image: the container spec and command line of one
container of a pod, by Kubernetes' rules.

- the image comes from the imported images (``phalanx image import``): phalanx
  never pulls. Missing, the pod fails at start with kubelet's reasons:
  ``ErrImageNeverPull`` (``imagePullPolicy: Never``) or ``ErrImagePull`` (the
  others: there is no registry to pull from);
- ``command`` replaces the image's ENTRYPOINT and ``args`` its CMD; with neither
  the container runs ENTRYPOINT + CMD; with ``command`` alone the CMD is dropped;
- the working directory is ``workingDir``, else the image's ``WorkingDir``, else
  ``/``, made when it is missing; the environment is the image's ``Env`` with the
  container's variables over it (and the task's: ``CUDA_VISIBLE_DEVICES``,
  ``PHALANX_*``, ``HOSTNAME``), not the host's;
- the user is ``securityContext.runAsUser``/``runAsGroup`` (the container's, else
  the pod's), else the image's ``User``;
- ``volumeMounts`` of ``hostPath`` volumes bind the host path (``readOnly``,
  ``subPath``); ``emptyDir`` volumes are a folder of the pod, shared by its
  containers; other volume kinds cannot be had without a Kubernetes cluster and
  fail the pod, naming the volume;
- the hostname is the pod's name, and ``/etc/hosts`` names the job's pods and
  nodes.

Standard library only: the pod runner imports it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from phalanx.runtime.containers import DEFAULT_PATH
from phalanx.runtime.containers.devices import gpu_devices

__all__ = ["KubeContainerError", "container_spec", "pull_policy"]

_TASK_VARIABLES = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


class KubeContainerError(Exception):
    """The container cannot start: ``reason`` (kubelet's) and a message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


def pull_policy(image: str, given: str | None) -> str:
    """Kubernetes' default: ``Always`` for ``:latest`` or no tag, else ``IfNotPresent``."""
    if given:
        return given
    name = image.rsplit("/", 1)[-1]
    if "@" in name:
        return "IfNotPresent"
    tag = name.partition(":")[2]
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _image(container: Mapping[str, Any], images: str | None) -> tuple[str, dict[str, Any]]:
    ref = str(container.get("image") or "")
    where = str(container.get("field") or "").removesuffix(".command")
    if not ref:
        raise KubeContainerError("InvalidImageName", f"{where}.image: required")
    if ref.startswith("/"):
        if not os.path.isfile(ref):
            raise KubeContainerError("ErrImageNeverPull", f"image file {ref} does not exist")
        return ref, {}
    from pathlib import Path

    from phalanx.runtime.containers.images import ImageError, ImageStore

    try:
        found = ImageStore(Path(images)).resolve(ref) if images else None
    except ImageError as exc:
        raise KubeContainerError("InvalidImageName", f"{where}.image: {exc}") from None
    if found is None:
        policy = pull_policy(ref, container.get("imagePullPolicy"))
        hint = f"import it on this machine with 'phalanx image import FILE|DIR --name {ref}'"
        if policy == "Never":
            raise KubeContainerError(
                "ErrImageNeverPull",
                f'Container image "{ref}" is not present with pull policy of Never; {hint}',
            )
        raise KubeContainerError(
            "ErrImagePull",
            f'Container image "{ref}" is not present and phalanx pulls from no registry '
            f"(imagePullPolicy {policy}); {hint}",
        )
    return found.path, dict(found.config)


def _argv(container: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    entrypoint = container.get("entrypoint")
    args = container.get("args")
    image_entry = [str(p) for p in config.get("Entrypoint") or ()]
    image_cmd = [str(p) for p in config.get("Cmd") or ()]
    if entrypoint is not None:
        argv = [*entrypoint, *(args if args is not None else [])]
    elif args is not None:
        argv = [*image_entry, *args]
    else:
        argv = [*image_entry, *image_cmd]
    if not argv:
        where = str(container.get("field") or "command")
        raise KubeContainerError(
            "CreateContainerError",
            f"{where}: no command specified: the image {container.get('image')!r} has no "
            "ENTRYPOINT or CMD and the container gives no command",
        )
    return [str(part) for part in argv]


def _mounts(container: Mapping[str, Any], volumes_dir: str, pod: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for mount in container.get("volumeMounts") or ():
        kind = mount.get("kind")
        if kind == "hostPath":
            source = str(mount.get("source") or "")
        elif kind == "emptyDir":
            source = os.path.join(volumes_dir, pod, str(mount.get("name")))
            os.makedirs(source, exist_ok=True)
            os.chmod(source, 0o777)  # kubelet's emptyDir: any user of the pod writes
        else:
            raise KubeContainerError(
                "CreateContainerConfigError",
                f"{mount.get('field') or 'spec.volumes'}: a {kind} volume cannot be mounted "
                "without a Kubernetes cluster (phalanx mounts hostPath and emptyDir volumes)",
            )
        sub = str(mount.get("subPath") or "")
        if sub:
            if sub.startswith("/") or ".." in sub.split("/"):
                raise KubeContainerError(
                    "CreateContainerConfigError", f"subPath {sub!r}: must be a relative path"
                )
            source = os.path.join(source, sub)
            if kind == "emptyDir":
                os.makedirs(source, exist_ok=True)
        if kind == "hostPath" and not os.path.exists(source):
            # kubelet's default type ("") mounts what is there; a missing path fails.
            raise KubeContainerError(
                "CreateContainerError",
                f"{mount.get('field')}: hostPath {source} does not exist on this node",
            )
        out.append(
            {
                "source": source,
                "target": str(mount.get("mountPath")),
                "readOnly": bool(mount.get("readOnly")),
            }
        )
    return out


def container_spec(
    container: Mapping[str, Any],
    *,
    pod: str,
    containers: Mapping[str, Any],
    jobdir: str,
    environ: Mapping[str, str],
) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    """The container spec, the command, and the process environment of ``container``
    (one entry of a pod plan) of pod ``pod``; raises :class:`KubeContainerError`."""
    image, config = _image(container, containers.get("images"))
    argv = _argv(container, config)
    env = {k: v for k, v in environ.items() if k.startswith("PHALANX_") or k in _TASK_VARIABLES}
    env["HOSTNAME"] = pod
    env.update({str(k): str(v) for k, v in (container.get("env") or {}).items()})
    image_env = [str(item) for item in config.get("Env") or ()]
    if not any(item.startswith("PATH=") for item in image_env) and "PATH" not in env:
        env["PATH"] = DEFAULT_PATH
    spec: dict[str, Any] = {
        "image": image,
        "scratch": os.path.join(jobdir, "container"),
        "writable": True,
        "hosts": os.path.join(jobdir, "hosts"),
        "hostname": pod,
        "devices": gpu_devices(env.get("CUDA_VISIBLE_DEVICES")),
        "mode": "kube",
        "imageEnv": image_env,
        "workdir": container.get("workingDir") or config.get("WorkingDir") or "/",
        "createWorkdir": True,
        "mounts": _mounts(container, os.path.join(jobdir, "kube", "volumes"), pod),
        "errorPrefix": "phalanx: container:",
    }
    uid, gid = container.get("runAsUser"), container.get("runAsGroup")
    if os.geteuid() == 0:
        if uid is not None:
            spec["account"] = {"uid": int(uid), "gid": int(gid if gid is not None else uid)}
        elif config.get("User"):
            spec["imageUser"] = str(config["User"])
    elif uid is not None and int(uid) != os.getuid():
        if int(uid) == 0:
            spec["remapRoot"] = True
        else:
            raise KubeContainerError(
                "CreateContainerConfigError",
                f"securityContext.runAsUser {uid}: this job runs as uid {os.getuid()}, "
                "and only root can run containers as another user",
            )
    return spec, argv, env

"""pyxis' ``srun --container-*`` options, as NVIDIA's SPANK plugin reads them, made into
a container spec for :mod:`phalanx.runtime.containers.exec`.

The semantics are pyxis' with enroot's default configuration:

- ``--container-image``: a path (it starts with ``/`` or ``.``) to a squashfs
  file, else an image reference (``docker://REF``, ``[USER@][REGISTRY#]IMAGE[:TAG]``)
  looked up among the imported images (``phalanx image import``): phalanx never
  pulls from a registry;
- ``--container-mounts=SRC[:DST[:FLAGS]][,...]``: bind mounts (``FLAGS`` joined
  with ``+``: ``ro``, ``rw`` and mount(8)'s propagation and ``x-create`` flags);
  ``SRC`` ``tmpfs`` mounts a tmpfs, ``umount`` hides ``DST``; a missing target is
  created;
- ``--container-workdir``: the working directory (default: the image's
  ``WorkingDir``, else ``/``; never srun's own); a missing one fails the task;
- ``--container-name``: a named container: its root file system is unpacked
  once per job and node and kept across the job's steps (``NAME:create``,
  ``:exec``, ``:no_exec``, ``:auto``);
- the root file system is read-only unless ``--container-writable``; the home
  directory is not mounted unless ``--container-mount-home``; the user is not
  remapped to root unless ``--container-remap-root``; ``--container-entrypoint``
  is refused (the image's entrypoint is not run, as pyxis' default);
- environment: the task's, overlaid by the image's (its ``Env`` and
  ``/etc/environment``): the image's values win, except for the variables named
  in ``--container-env``; ``LANG``, ``LANGUAGE`` and ``LC_ALL`` are dropped.

Each option may also come from ``PYXIS_CONTAINER_<OPTION>`` in the environment
(pyxis 0.21); the command line wins. Standard library only: ``srun`` imports it.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.runtime.containers import DEFAULT_PATH, FLAGS, OPTIONS
from phalanx.runtime.containers.devices import gpu_devices

__all__ = [
    "FLAGS",
    "OPTIONS",
    "PyxisError",
    "PyxisOptions",
    "command",
    "error_lines",
    "parse",
    "step_spec",
    "task_spec",
]

EXEC_MODULE = "phalanx.runtime.containers.exec"
ERROR_PREFIX = "slurmstepd: error: pyxis:"

_ENV_DROPPED = ("LANG", "LANGUAGE", "LC_ALL")
_MOUNT_FLAGS = frozenset(
    {
        "ro",
        "rw",
        "bind",
        "rbind",
        "private",
        "rprivate",
        "slave",
        "rslave",
        "shared",
        "rshared",
        "unbindable",
        "runbindable",
        "suid",
        "nosuid",
        "dev",
        "nodev",
        "exec",
        "noexec",
        "noatime",
        "relatime",
        "nofail",
        "silent",
    }
)


class PyxisError(Exception):
    """A pyxis option that cannot be honoured: pyxis' message."""


@dataclass
class PyxisOptions:
    image: str | None = None
    mounts: str | None = None
    workdir: str | None = None
    name: str | None = None
    save: str | None = None
    env: str | None = None
    unshare: str | None = None
    mount_home: bool | None = None
    remap_root: bool | None = None
    entrypoint: bool | None = None
    entrypoint_log: bool = False
    writable: bool | None = None
    given: set[str] = field(default_factory=set)

    @property
    def wanted(self) -> bool:
        """pyxis acts only with ``--container-image`` or ``--container-name``."""
        return bool(self.image or self.name)


def parse(values: list[tuple[str, str | None]], environ: Mapping[str, str]) -> PyxisOptions:
    """``(option, value)`` pairs from the command line (flags with ``None``), over the
    ``PYXIS_CONTAINER_*`` variables of ``environ``."""
    opts = PyxisOptions()
    seen: dict[str, str | None] = {}
    for option, value in values:
        if option in seen and seen[option] != value and option in OPTIONS:
            raise PyxisError(f"{option} specified multiple times")
        seen[option] = value
        if option in OPTIONS:
            if value is None or value == "":
                raise PyxisError(f"{option}: a value is required")
            setattr(opts, option[len("--container-") :], value)
        elif option in FLAGS:
            attr, flag = FLAGS[option]
            other = [o for o, (a, f) in FLAGS.items() if a == attr and f != flag]
            if any(o in seen for o in other) and attr != "entrypoint_log":
                raise PyxisError(f"both {option} and {other[0]} were specified")
            setattr(opts, attr, flag)
        opts.given.add(option)
    for option in OPTIONS:
        attr = option[len("--container-") :]
        if getattr(opts, attr) is None:
            value = environ.get(f"PYXIS_CONTAINER_{attr.upper()}")
            if value:
                setattr(opts, attr, value)
    for name, attr in (
        ("MOUNT_HOME", "mount_home"),
        ("REMAP_ROOT", "remap_root"),
        ("ENTRYPOINT", "entrypoint"),
        ("WRITABLE", "writable"),
    ):
        raw = environ.get(f"PYXIS_CONTAINER_{name}")
        if raw is not None and getattr(opts, attr) is None:
            setattr(opts, attr, _bool(f"PYXIS_CONTAINER_{name}", raw))
    raw = environ.get("PYXIS_CONTAINER_READONLY")
    if raw is not None and opts.writable is None and _bool("PYXIS_CONTAINER_READONLY", raw):
        opts.writable = False
    return opts


def _bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "y"):
        return True
    if value in ("0", "false", "no", "n"):
        return False
    raise PyxisError(f"{name}: invalid value {raw!r} (expected 1/true/yes/y or 0/false/no/n)")


def ignored(opts: PyxisOptions) -> list[str]:
    """pyxis' notes for options given without ``--container-image`` or ``--container-name``."""
    if opts.wanted:
        return []
    return [
        f"pyxis: ignoring {option} because neither --container-image nor --container-name is set"
        for option in sorted(opts.given)
    ]


# -- mounts -------------------------------------------------------------------------


def parse_mounts(text: str, cwd: str) -> list[dict[str, Any]]:
    """``--container-mounts``: ``SRC[:DST[:FLAGS]]`` entries, comma-separated."""
    out: list[dict[str, Any]] = []
    for entry in text.split(","):
        parts = entry.split(":")
        if not entry or len(parts) > 3 or any(p == "" for p in parts):
            raise PyxisError(f"--container-mounts: invalid format: {entry!r}")
        source = parts[0]
        target = parts[1] if len(parts) > 1 else source
        flags = parts[2].split("+") if len(parts) > 2 else []
        if not (source.startswith((".", "/")) or source in ("tmpfs", "umount")):
            raise PyxisError(
                "--container-mounts: mount source must be a relative path, an absolute path, "
                f'"tmpfs" or "umount": {source!r}'
            )
        if not target.startswith((".", "/")):
            raise PyxisError(
                f"--container-mounts: mount target must be a relative path or an absolute path: "
                f"{target!r}"
            )
        for flag in flags:
            if flag not in _MOUNT_FLAGS and not flag.startswith(("x-create=", "size=", "mode=")):
                raise PyxisError(f"--container-mounts: unknown mount flag {flag!r} in {entry!r}")
        if source.startswith("."):
            source = os.path.normpath(os.path.join(cwd, source))
        elif source.startswith("/") and not os.path.exists(source):
            raise PyxisError(f"--container-mounts: source path does not exist: {source}")
        target = "/" + os.path.normpath(target.lstrip(".")).lstrip("/")
        mount: dict[str, Any] = {"source": source, "target": target, "readOnly": "ro" in flags}
        if source == "tmpfs":
            mount["kind"] = "tmpfs"
        elif source == "umount":
            mount["kind"] = "umount"
        out.append(mount)
    return out


# -- the spec -----------------------------------------------------------------------


def _image(opts: PyxisOptions, images: str | None, cwd: str) -> tuple[str, dict[str, Any]]:
    """The squashfs file of ``--container-image`` and the image's config."""
    ref = opts.image or ""
    if ref.startswith((".", "/")):
        path = os.path.normpath(os.path.join(cwd, ref))
        if not os.path.isfile(path):
            raise PyxisError(
                f"failed to create container filesystem for image: {ref}\n"
                f"pyxis: printing enroot log file:\n"
                f"pyxis:     [ERROR] No such file or directory: {path}"
            )
        return path, {}
    from pathlib import Path

    from phalanx.runtime.containers.images import ImageError, ImageStore

    shown = ref if ref.startswith(("docker://", "dockerd://")) else f"docker://{ref}"
    found = None
    if images:
        try:
            found = ImageStore(Path(images)).resolve(ref)
        except ImageError as exc:
            raise PyxisError(f"failed to import docker image: {shown}: {exc}") from None
    if found is None:
        raise PyxisError(
            f"failed to import docker image: {shown}\n"
            "pyxis: printing enroot log file:\n"
            f"pyxis:     [ERROR] {ref}: no such image here: phalanx never pulls from a registry; "
            f"import it on this machine with: phalanx image import FILE|DIR --name {ref}"
        )
    return found.path, dict(found.config)


def step_spec(
    opts: PyxisOptions,
    *,
    ctx: Mapping[str, Any],
    jobdir: str,
    node: str,
    env: Mapping[str, str],
    cwd: str,
    hosts: str | None,
    devices: list[str],
) -> dict[str, Any]:
    """The container spec of one task of a step (see :func:`..enter.enter`)."""
    if opts.entrypoint:
        raise PyxisError(
            "--container-entrypoint: phalanx does not run the image's entrypoint "
            "(pyxis' default, --no-container-entrypoint)"
        )
    if opts.save:
        raise PyxisError("--container-save: phalanx cannot save a container's state (yet)")
    if opts.unshare:
        raise PyxisError("--container-unshare: not supported")
    containers = ctx.get("containers") or {}
    images = containers.get("images")
    name = opts.name
    name_mode = "auto"
    if name and ":" in name:
        name, _, name_mode = name.rpartition(":")
        if name_mode not in ("auto", "create", "exec", "no_exec"):
            raise PyxisError(f"--container-name: invalid flag {name_mode!r}")
    keep = [n for n in (opts.env or "").split(",") if n] if opts.env else []
    if opts.env is not None and any(n == "" for n in opts.env.split(",")):
        raise PyxisError("--container-env: invalid format: empty variable name")
    unset = sorted(_NOT_INSIDE | {var for var in _ENV_DROPPED if var not in keep})
    spec: dict[str, Any] = {
        "scratch": os.path.join(jobdir, "container"),
        "writable": bool(opts.writable),
        "hosts": hosts,
        "hostname": node,
        "devices": devices,
        "mode": "pyxis",
        "unsetEnv": unset,
        "defaultEnv": {"PATH": DEFAULT_PATH},
        "keepEnv": keep,
        "etcEnvironment": True,
        "remapRoot": bool(opts.remap_root),
        "errorPrefix": ERROR_PREFIX,
        "createWorkdir": False,
        "tmp": True,
    }
    config: dict[str, Any] = {}
    if name:
        folder = os.path.join(jobdir, "containers", _safe(node), _safe(name))
        rootfs = os.path.join(folder, "rootfs")
        exists = os.path.isdir(rootfs) and os.path.exists(os.path.join(folder, "ready"))
        if name_mode == "create" and exists:
            raise PyxisError(f'a container with name "{name}" already exists')
        if name_mode == "exec":
            raise PyxisError(f"--container-name={name}:exec: no running container to join")
        if not exists:
            if not opts.image:
                raise PyxisError(
                    f'a container with name "{name}" does not exist, and --container-image '
                    "is not set"
                )
            image, config = _image(opts, images, cwd)
            _unpack_named(image, folder, config)
        else:
            config = _read_json(os.path.join(folder, "config.json"))
        spec["rootfs"] = rootfs
        spec["named"] = True
    else:
        spec["image"], config = _image(opts, images, cwd)
    spec["imageEnv"] = list(config.get("Env") or ())
    workdir = opts.workdir
    if workdir is None:
        workdir = config.get("WorkingDir") or "/"
    elif not workdir.startswith("/"):
        workdir = "/" + os.path.normpath(workdir).lstrip("./")
    spec["workdir"] = workdir
    spec["setEnv"] = {"PWD": workdir}
    mounts = parse_mounts(opts.mounts, cwd) if opts.mounts else []
    home = env.get("HOME")
    if opts.mount_home and home:
        mounts.insert(0, {"source": home, "target": home, "readOnly": False})
        spec["mountHome"] = True
    spec["mounts"] = mounts
    spec["account"] = {
        "name": env.get("USER") or env.get("LOGNAME") or "",
        "uid": os.getuid(),
        "gid": os.getgid(),
        "home": home or "/",
    }
    return spec


_NOT_INSIDE = frozenset(
    {"LD_PRELOAD", "NSS_WRAPPER_HOSTS", "NSS_WRAPPER_HOSTNAME", "PWD", "OLDPWD"}
)
"""The host side's own variables: nss_wrapper's (inside, /etc/hosts names the nodes)."""


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name) or "_"


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _unpack_named(image: str, folder: str, config: Mapping[str, Any]) -> None:
    """A named container's root file system: the image unpacked once (under a lock)."""
    import subprocess

    os.makedirs(folder, exist_ok=True)
    fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(folder, "ready")):
            return
        rootfs = os.path.join(folder, "rootfs")
        if os.path.isdir(rootfs):
            subprocess.run(["rm", "-rf", rootfs], check=False)
        try:
            done = subprocess.run(
                ["unsquashfs", "-no-progress", "-quiet", "-d", rootfs, image],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                check=False,
            )
        except FileNotFoundError:
            raise PyxisError(
                "--container-name needs unsquashfs (Debian package squashfs-tools)"
            ) from None
        if done.returncode != 0:
            last = done.stderr.strip().splitlines()[-1:] or ["unsquashfs failed"]
            raise PyxisError(f"failed to create container filesystem for image: {image}: {last[0]}")
        with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as fh:
            json.dump(dict(config), fh)
        with open(os.path.join(folder, "ready"), "w", encoding="ascii") as fh:
            fh.write("ready\n")
    finally:
        os.close(fd)


def task_spec(
    opts: PyxisOptions,
    *,
    ctx: Mapping[str, Any],
    jobdir: str,
    node: str,
    env: Mapping[str, str],
    cwd: str,
) -> dict[str, Any]:
    """:func:`step_spec` for a task of the job in ``jobdir`` on ``node`` with ``env``: its
    ``/etc/hosts`` (nss_wrapper's file, else the runtime's ``STATE/runtime/hosts``) and
    its GPUs' device nodes."""
    hosts = env.get("NSS_WRAPPER_HOSTS") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(jobdir))), "hosts"
    )
    return step_spec(
        opts,
        ctx=ctx,
        jobdir=jobdir,
        node=node,
        env=env,
        cwd=cwd,
        hosts=hosts if os.path.exists(hosts) else None,
        devices=gpu_devices(env.get("CUDA_VISIBLE_DEVICES")),
    )


def error_lines(error: PyxisError) -> list[str]:
    """``error`` as slurmstepd prints pyxis' errors, a line each."""
    lines = str(error).splitlines()
    return [f"slurmstepd: error: {'' if x.startswith('pyxis:') else 'pyxis: '}{x}" for x in lines]


def command(spec: Mapping[str, Any], argv: list[str]) -> list[str]:
    """The command line that runs ``argv`` in the container ``spec``."""
    return [sys.executable, "-I", "-m", EXEC_MODULE, json.dumps(spec), "--", *argv]

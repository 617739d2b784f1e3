"""Enter a container: a private mount namespace whose root is an image's file system.

:func:`enter` turns the calling process into a container's first process, then
the caller execs the command (:mod:`phalanx.runtime.containers.exec`): the
command keeps the caller's pid, process group and parent, so signals, exit
status, time limits and cancel reach it exactly as on the host.

Nothing it mounts is visible outside, and nothing outlives the command: the
mounts live in a mount namespace of their own (private propagation), which the
kernel tears down when its last process exits, on every exit path (``kill -9``
included); the image's loop device is set to clear itself then. No daemon runs.

The root file system, as root:

1. a tmpfs on ``scratch`` (an empty directory on the host) holds the overlay's
   upper layer and this container's ``/etc/hosts``;
2. the image (a squashfs file) is mounted read-only from a loop device, or, for
   ``rootfs``, a directory is used (a named container's, or an unpacked image
   where loop devices cannot be had);
3. an overlay of a tmpfs upper layer on it is the root (``writable`` false:
   remounted read-only once the mount points exist);
4. ``/proc`` and ``/sys`` are the host's, ``/dev`` is a minimal tmpfs with the
   standard nodes, the host's ``/dev/pts`` and ``/dev/shm`` (ranks on one node
   share memory through it) and the requested device nodes (GPUs);
   ``/etc/hosts`` names the job's nodes, ``/etc/resolv.conf`` is the host's;
5. the requested bind mounts (targets resolved inside the root: a symlink in
   the image cannot point a mount at the host), read-only where asked;
6. ``pivot_root`` into it; the host's root is detached;
7. the hostname (a UTS namespace), the working directory, then the user: the
   account's uid, gid and groups, or, with ``remapRoot``, uid 0 of a user
   namespace that maps to that account (it grants nothing on the host).

Not as root, a user namespace comes first (the caller's uid mapped to itself,
or to 0 with ``remapRoot``) and the image must be an unpacked directory
(``rootfs``): an unprivileged process may not use loop devices.

Standard library only (``ctypes`` for the system calls Python lacks): it runs
in every containerised task's start.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import platform
import socket
import stat
import struct
from collections.abc import Mapping
from fcntl import ioctl
from typing import Any

__all__ = ["ContainerError", "enter", "image_env", "resolve_inside"]

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWUSER = 0x10000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MNT_DETACH = 2
PR_SET_DUMPABLE = 4

# statvfs f_flag bits that a bind remount must keep (the kernel refuses to clear
# locked ones in a user namespace).
_ST_FLAGS = {
    os.ST_RDONLY: MS_RDONLY,
    os.ST_NOSUID: MS_NOSUID,
    os.ST_NODEV: MS_NODEV,
    os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: MS_NOATIME,
    os.ST_NODIRATIME: MS_NODIRATIME,
    os.ST_RELATIME: MS_RELATIME,
}

LOOP_SET_FD = 0x4C00
LOOP_CLR_FD = 0x4C01
LOOP_SET_STATUS64 = 0x4C04
LOOP_CONFIGURE = 0x4C0A
LOOP_CTL_GET_FREE = 0x4C82
LO_FLAGS_READ_ONLY = 1
LO_FLAGS_AUTOCLEAR = 4

_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217, "riscv64": 41}

DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
    "ptmx": "pts/ptmx",
    "core": "/proc/kcore",
}
LOCALHOST = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"

_libc = ctypes.CDLL(None, use_errno=True)


class ContainerError(Exception):
    """The container cannot be set up: one line naming what and why."""


def _fail(what: str) -> ContainerError:
    code = ctypes.get_errno()
    return ContainerError(f"{what}: {os.strerror(code)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    def enc(text: str | None) -> bytes | None:
        return None if text is None else os.fsencode(text)

    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        kind = fstype or ("bind" if flags & MS_BIND else "remount")
        raise _fail(f"cannot mount {source or kind} on {target} ({kind})")


def _umount(target: str, flags: int) -> None:
    if _libc.umount2(os.fsencode(target), flags) != 0:
        raise _fail(f"cannot unmount {target}")


def _unshare(flags: int) -> None:
    if _libc.unshare(flags) != 0:
        raise _fail("cannot create the container's namespaces (unshare)")


def _pivot_root(new: str, old: str) -> None:
    number = _PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise ContainerError(f"pivot_root: unknown system call number on {platform.machine()}")
    if _libc.syscall(number, os.fsencode(new), os.fsencode(old)) != 0:
        raise _fail("cannot change into the container's root (pivot_root)")


# -- paths inside the root ---------------------------------------------------------


def resolve_inside(root: str, path: str) -> str:
    """``path`` (absolute, as the container sees it) as a host path under ``root``,
    following symlinks as the container would: never out of ``root``."""
    parts = [p for p in path.split("/") if p and p != "."]
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        here = os.path.join(root, *done, part)
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            done.append(part)
            continue
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > 40:
                raise ContainerError(f"{path}: too many levels of symbolic links in the image")
            link = os.readlink(here)
            if link.startswith("/"):
                done = []
            parts = [p for p in link.split("/") if p and p != "."] + parts
            continue
        done.append(part)
    return os.path.join(root, *done)


def _make_target(target: str, directory: bool) -> None:
    if os.path.lexists(target):
        return
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if directory:
        os.mkdir(target, 0o755)
    else:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))


def _bind(source: str, target: str, *, read_only: bool, recursive: bool = True) -> None:
    _mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    if read_only:
        keep = 0
        try:
            flag = os.statvfs(target).f_flag
            keep = sum(ms for st, ms in _ST_FLAGS.items() if flag & st)
        except OSError:
            pass
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)


# -- the image -----------------------------------------------------------------------


def _loop_device(image: str) -> int:
    """A loop device reading ``image``, cleared when its last user goes: the open fd."""
    backing = os.open(image, os.O_RDONLY | os.O_CLOEXEC)
    try:
        control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        os.close(backing)
        raise ContainerError(f"no loop devices (/dev/loop-control): {exc.strerror}") from None
    name = os.fsencode(os.path.abspath(image))[:63]
    # struct loop_info64: flags at 52, file name at 56; 232 bytes.
    info = bytearray(232)
    struct.pack_into("<I", info, 52, LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR)
    info[56 : 56 + len(name)] = name
    try:
        for _ in range(64):
            number = ioctl(control, LOOP_CTL_GET_FREE)
            path = f"/dev/loop{number}"
            if not os.path.exists(path):
                os.mknod(path, 0o660 | stat.S_IFBLK, os.makedev(7, number))
            loop = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                config = struct.pack("<II", backing, 0) + bytes(info) + bytes(64)
                try:
                    ioctl(loop, LOOP_CONFIGURE, config)
                except OSError as exc:
                    if exc.errno == errno.EBUSY:
                        os.close(loop)
                        continue
                    if exc.errno not in (errno.EINVAL, errno.ENOTTY):
                        raise
                    ioctl(loop, LOOP_SET_FD, backing)
                    ioctl(loop, LOOP_SET_STATUS64, bytes(info))
                return loop
            except OSError as exc:
                os.close(loop)
                if exc.errno == errno.EBUSY:
                    continue
                raise ContainerError(
                    f"cannot set up a loop device for {image}: {exc.strerror}"
                ) from None
        raise ContainerError(f"cannot set up a loop device for {image}: every one is busy")
    finally:
        os.close(control)
        os.close(backing)


def _mount_image(image: str, target: str) -> None:
    loop = _loop_device(image)
    try:
        _mount(f"/dev/loop{_loop_number(loop)}", target, "squashfs", MS_RDONLY | MS_NODEV)
    except ContainerError as exc:
        raise ContainerError(f"{image}: not a squashfs image the kernel mounts ({exc})") from None
    finally:
        os.close(loop)


class _FuseServer:
    """The image through squashfuse, where loop devices are root's: the daemon is forked
    before the namespaces (it stays outside them, so it keeps none alive) and gets the
    ``/dev/fuse`` descriptor the mount was made with; when the container's namespace
    goes, the mount goes, and the daemon ends."""

    def __init__(self, image: str) -> None:
        self.image = image
        path = os.environ.get("PATH") or "/usr/bin:/bin"
        found = any(os.access(os.path.join(d, "squashfuse"), os.X_OK) for d in path.split(":"))
        if not found and not os.access("/usr/bin/squashfuse", os.X_OK):
            raise ContainerError(
                "an image needs squashfuse (Debian packages squashfuse and fuse3) when "
                "the job does not run as root"
            )
        self.parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the daemon's side
            self.parent.close()
            code = 1
            try:
                _, fds, _, _ = socket.recv_fds(child, 16, 1)
                if fds:
                    fd = fds[0]
                    os.set_inheritable(fd, True)
                    os.execvp("squashfuse", ["squashfuse", "-f", image, f"/dev/fd/{fd}"])
            except OSError as exc:
                os.write(2, f"squashfuse: {exc.strerror}\n".encode())
            finally:
                os._exit(code)
        child.close()

    def mount(self, target: str) -> None:
        try:
            fuse = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            raise ContainerError(f"cannot open /dev/fuse (FUSE): {exc.strerror}") from None
        try:
            mode = stat.S_IFMT(os.stat(target).st_mode)
            data = f"fd={fuse},rootmode={mode:o},user_id={os.getuid()},group_id={os.getgid()},ro"
            _mount(self.image, target, "fuse.squashfuse", MS_RDONLY | MS_NODEV | MS_NOSUID, data)
            socket.send_fds(self.parent, [b"f"], [fuse])
        finally:
            os.close(fuse)
            self.parent.close()
        try:
            os.stat(os.path.join(target, "."))
        except OSError as exc:
            raise ContainerError(
                f"{self.image}: squashfuse cannot read the image: {exc.strerror}"
            ) from None


def _loop_number(fd: int) -> int:
    return os.minor(os.fstat(fd).st_rdev)


# -- /dev, /etc -----------------------------------------------------------------------


def _populate_dev(root: str, devices: list[str]) -> None:
    dev = os.path.join(root, "dev")
    _make_target(dev, True)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=65536k")
    for name in DEV_NODES:
        host = f"/dev/{name}"
        if os.path.exists(host):
            _make_target(os.path.join(dev, name), False)
            _bind(host, os.path.join(dev, name), read_only=False, recursive=False)
    for name, link in DEV_LINKS.items():
        if name == "core" and not os.path.exists("/proc/kcore"):
            continue
        os.symlink(link, os.path.join(dev, name))
    for name in ("pts", "shm"):
        os.mkdir(os.path.join(dev, name), 0o755)
        if os.path.isdir(f"/dev/{name}"):
            _bind(f"/dev/{name}", os.path.join(dev, name), read_only=False)
    for host in devices:
        if not host.startswith("/dev/") or not os.path.exists(host):
            continue
        inside = os.path.join(dev, os.path.relpath(host, "/dev"))
        _make_target(inside, os.path.isdir(host))
        _bind(host, inside, read_only=False)


def _etc_files(root: str, scratch: str, hosts: str | None) -> None:
    text = LOCALHOST
    if hosts:
        try:
            with open(hosts, encoding="utf-8") as fh:
                text += fh.read()
        except OSError:
            pass
    made = os.path.join(scratch, "hosts")
    with open(made, "w", encoding="utf-8") as fh:
        fh.write(text)
    files = {"/etc/hosts": made}
    if os.path.exists("/etc/resolv.conf"):
        files["/etc/resolv.conf"] = os.path.realpath("/etc/resolv.conf")
    for inside, source in files.items():
        target = resolve_inside(root, inside)
        try:
            _make_target(target, False)
        except OSError:
            continue  # a read-only named root without /etc: nothing to name hosts in
        _bind(source, target, read_only=True, recursive=False)


# -- users ----------------------------------------------------------------------------


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _map_user(inside_uid: int, inside_gid: int, uid: int, gid: int) -> None:
    """The current (new) user namespace maps ``inside`` to the host's ``uid``/``gid``."""
    with contextlib.suppress(FileNotFoundError):
        _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{inside_uid} {uid} 1\n")
    _write("/proc/self/gid_map", f"{inside_gid} {gid} 1\n")


def _lookup_user(spec_user: str) -> tuple[int, int | None]:
    """An image's ``User`` (``uid``, ``uid:gid``, ``name``, ``name:group``), read from
    the container's ``/etc/passwd`` and ``/etc/group``."""
    name, _, group = spec_user.partition(":")

    def entry(path: str, key: str) -> list[str] | None:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    parts = line.rstrip("\n").split(":")
                    if len(parts) > 3 and parts[0] == key and parts[2].isdigit():
                        return parts
        except OSError:
            return None
        return None

    gid: int | None = None
    if name.isdigit():
        uid = int(name)
    else:
        user = entry("/etc/passwd", name)
        if user is None:
            raise ContainerError(f"user {name!r} of the image is not in its /etc/passwd")
        uid = int(user[2])
        gid = int(user[3]) if user[3].isdigit() else None
    if group:
        found = entry("/etc/group", group) if not group.isdigit() else None
        if not group.isdigit() and found is None:
            raise ContainerError(f"group {group!r} of the image is not in its /etc/group")
        gid = int(group) if found is None else int(found[2])
    return uid, gid


# -- environment ----------------------------------------------------------------------


def _parse_env_lines(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[7:].lstrip()
        name, eq, value = line.partition("=")
        if not eq or not name:
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[name] = value
    return out


def image_env(spec: Mapping[str, Any]) -> dict[str, str]:
    """The image's environment: its config's ``Env``, then (Slurm, pyxis) the lines of
    its ``/etc/environment``, read from inside the container."""
    env = _parse_env_lines([str(item) for item in spec.get("imageEnv") or ()])
    if spec.get("etcEnvironment"):
        try:
            with open("/etc/environment", encoding="utf-8", errors="replace") as fh:
                env.update(_parse_env_lines(fh.read().splitlines()))
        except OSError:
            pass
    return env


def _initial_environ() -> dict[str, str]:
    """The environment this process was started with, before the interpreter changed it
    (its locale coercion sets ``LC_CTYPE``)."""
    try:
        with open("/proc/self/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return dict(os.environ)
    out: dict[str, str] = {}
    for item in raw.split(b"\0"):
        name, eq, value = item.partition(b"=")
        if eq and name:
            out[os.fsdecode(name)] = os.fsdecode(value)
    return out


def _final_env(spec: Mapping[str, Any]) -> dict[str, str]:
    given = spec.get("env")
    source = _initial_environ() if given is None else given
    base = {str(k): str(v) for k, v in source.items()}
    for name in spec.get("unsetEnv") or ():
        base.pop(str(name), None)
    for name, value in (spec.get("defaultEnv") or {}).items():
        base.setdefault(str(name), str(value))
    out = _merged_env(spec, base)
    out.update({str(k): str(v) for k, v in (spec.get("setEnv") or {}).items()})
    return out


def _merged_env(spec: Mapping[str, Any], base: dict[str, str]) -> dict[str, str]:
    image = image_env(spec)
    if spec.get("mode") == "kube":
        # Kubernetes: the image's Env, then the container's (and the task's) over it.
        return {**image, **base}
    # pyxis: the host's variables, except those the image sets (its values win),
    # except those named in --container-env (the host's win).
    keep = set(spec.get("keepEnv") or ())
    out = dict(base)
    for name, value in image.items():
        if name not in keep or name not in base:
            out[name] = value
    account = spec.get("account")
    if account and not spec.get("mountHome"):
        out["HOME"] = str(account.get("home") or "/")
    if "PYTORCH_VERSION" in image:
        # enroot's PyTorch hook: torch.distributed's variables from Slurm's.
        for name, source in (("RANK", "SLURM_PROCID"), ("LOCAL_RANK", "SLURM_LOCALID")):
            if source in out:
                out[name] = out[source]
    return out


def _add_account(root: str, account: Mapping[str, Any]) -> None:
    """enroot's: the container's ``/etc/passwd`` and ``/etc/group`` know root, nobody and
    the account the command runs as (added where missing)."""
    name = str(account.get("name") or "")
    uid, gid = int(account.get("uid", 0)), int(account.get("gid", 0))
    home = str(account.get("home") or "/")
    users = [("root", 0, 0, "/root"), ("nobody", 65534, 65534, "/nonexistent")]
    if name and uid != 0:
        users.append((name, uid, gid, home))
    for path, lines in (
        ("/etc/passwd", [f"{n}:x:{u}:{g}:{n}:{h}:/bin/sh\n" for n, u, g, h in users]),
        ("/etc/group", [f"{n}:x:{g}:\n" for n, _, g, _ in users]),
    ):
        target = resolve_inside(root, path)
        try:
            with open(target, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except FileNotFoundError:
            text = ""
        except OSError:
            continue
        known = {line.split(":", 1)[0] for line in text.splitlines()}
        ids = {line.split(":")[2] for line in text.splitlines() if line.count(":") >= 2}
        missing = [
            line
            for line in lines
            if line.split(":", 1)[0] not in known and line.split(":")[2] not in ids
        ]
        if missing:
            with contextlib.suppress(OSError):
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "a", encoding="utf-8") as fh:
                    if text and not text.endswith("\n"):
                        fh.write("\n")
                    fh.writelines(missing)


# -- the whole ------------------------------------------------------------------------


def enter(spec: Mapping[str, Any]) -> dict[str, str]:
    """Make this process the container's; returns the command's environment.

    ``spec`` (JSON-able): ``image`` (a squashfs file) or ``rootfs`` (a directory),
    ``scratch`` (an empty host directory), ``writable``, ``mounts`` (``source``,
    ``target``, ``readOnly``), ``devices``, ``hosts``, ``hostname``, ``workdir``,
    ``env``, ``imageEnv``, ``etcEnvironment``, ``keepEnv``, ``mode`` (``pyxis`` or
    ``kube``), ``uid``/``gid``/``groups`` (the account), ``imageUser`` (``kube``: the
    image's ``User`` when no ``uid`` is given), ``remapRoot``.
    """
    privileged = os.geteuid() == 0
    account = spec.get("account") or {}
    uid = account.get("uid")
    gid = account.get("gid")
    remap = bool(spec.get("remapRoot"))
    server: _FuseServer | None = None
    if privileged:
        _unshare(CLONE_NEWNS | CLONE_NEWUTS)
    else:
        if not spec.get("rootfs"):
            server = _FuseServer(str(spec["image"]))
        real_uid, real_gid = os.getuid(), os.getgid()
        _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWUTS)
        inside = 0 if remap else real_uid
        _map_user(inside, 0 if remap else real_gid, real_uid, real_gid)
        uid, gid = None, None  # already who the command will be
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    scratch = str(spec["scratch"])
    os.makedirs(scratch, exist_ok=True)
    _mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    root = os.path.join(scratch, "root")
    os.mkdir(root, 0o755)
    rootfs = spec.get("rootfs")
    if rootfs:
        if spec.get("named"):
            _bind(str(rootfs), root, read_only=False)
        else:
            _overlay(str(rootfs), scratch, root)
    else:
        lower = os.path.join(scratch, "lower")
        os.mkdir(lower, 0o755)
        if server is not None:
            server.mount(lower)
        else:
            _mount_image(str(spec["image"]), lower)
        _overlay(lower, scratch, root)
    for name in ("proc", "sys"):
        target = resolve_inside(root, f"/{name}")
        _make_target(target, True)
        _bind(f"/{name}", target, read_only=False)
    _populate_dev(root, [str(d) for d in spec.get("devices") or ()])
    _etc_files(root, scratch, spec.get("hosts"))
    if spec.get("tmp"):
        # enroot's: a fresh /tmp per container, not the image's nor the host's.
        target = resolve_inside(root, "/tmp")
        _make_target(target, True)
        _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    if spec.get("account"):
        _add_account(root, spec["account"])
    for mount in spec.get("mounts") or ():
        _user_mount(root, mount)
    workdir = spec.get("workdir")
    if workdir:
        target = resolve_inside(root, str(workdir))
        if not os.path.isdir(target) and spec.get("createWorkdir", True):
            os.makedirs(target, 0o755, exist_ok=True)
    os.chdir(root)
    _pivot_root(".", ".")
    _umount(".", MNT_DETACH)
    os.chdir("/")
    if not spec.get("writable", True):
        _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    hostname = spec.get("hostname")
    if hostname:
        data = os.fsencode(str(hostname))
        if _libc.sethostname(data, len(data)) != 0:
            raise _fail(f"cannot set the hostname {hostname}")
    env = _final_env(spec)
    if privileged:
        if uid is None and spec.get("imageUser"):
            uid, image_gid = _lookup_user(str(spec["imageUser"]))
            gid = image_gid if gid is None else gid
        _become(uid, gid, [int(g) for g in account.get("groups") or ()], remap)
    if workdir:
        try:
            os.chdir(str(workdir))
        except OSError as exc:
            raise ContainerError(f"couldn't chdir to {workdir}: {exc.strerror}") from None
    return env


def _overlay(lower: str, scratch: str, root: str) -> None:
    upper = os.path.join(scratch, "upper")
    work = os.path.join(scratch, "work")
    os.mkdir(upper, 0o755)
    os.mkdir(work, 0o755)
    for path in (lower, upper, work):
        if any(ch in path for ch in ",:\\"):
            raise ContainerError(f"{path}: the overlay's paths may not contain ',', ':' or '\\'")
    _mount("overlay", root, "overlay", 0, f"lowerdir={lower},upperdir={upper},workdir={work}")


def _user_mount(root: str, mount: Mapping[str, Any]) -> None:
    source = str(mount["source"])
    inside = str(mount["target"])
    kind = mount.get("kind")
    if kind == "umount":
        target = resolve_inside(root, inside)
        if os.path.ismount(target):
            _umount(target, MNT_DETACH)
        return
    if kind == "tmpfs":
        target = resolve_inside(root, inside)
        _make_target(target, True)
        _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
        return
    if not os.path.exists(source):
        raise ContainerError(f"mount source {source} does not exist")
    target = resolve_inside(root, inside)
    try:
        _make_target(target, os.path.isdir(source))
    except OSError as exc:
        raise ContainerError(f"cannot create the mount point {inside}: {exc.strerror}") from None
    _bind(source, target, read_only=bool(mount.get("readOnly")))


def _become(uid: Any, gid: Any, groups: list[int], remap: bool) -> None:
    """Drop from root to the account (``uid`` None: stay root); with ``remap``, be
    uid 0 of a user namespace mapped onto it."""
    if uid is None or int(uid) == 0:
        if gid is not None and int(gid) != 0:
            os.setgroups([int(gid)])
            os.setresgid(int(gid), int(gid), int(gid))
        return
    uid, gid = int(uid), int(gid if gid is not None else uid)
    os.setgroups(groups or [gid])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if remap:
        # Changing uid made the process non-dumpable: its /proc files are root's, and
        # it could not write its own user namespace's maps.
        _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        _unshare(CLONE_NEWUSER)
        _map_user(0, 0, uid, gid)


def load_spec(text: str) -> dict[str, Any]:
    """A spec given inline (JSON) or as ``@FILE``."""
    if text.startswith("@"):
        with open(text[1:], encoding="utf-8") as fh:
            text = fh.read()
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ContainerError("the container spec is not a JSON object")
    return data

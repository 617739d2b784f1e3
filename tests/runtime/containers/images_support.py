"""Test images built offline: a busybox root file system, as an OCI layout (umoci), an
OCI archive, a ``docker save`` archive (by hand) and a squashfs file (mksquashfs).

Each builder skips the calling test, naming the Debian package, when a tool it needs
is missing (``require_tools``); the busybox must be statically linked (Debian's
busybox-static) so that it runs inside any image.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

__all__ = [
    "busybox_rootfs",
    "docker_archive",
    "manifest_digest",
    "oci_archive",
    "oci_layout",
    "require_tools",
    "squashfs",
    "static_busybox",
]

_PACKAGES = {
    "umoci": "umoci",
    "mksquashfs": "squashfs-tools",
    "unsquashfs": "squashfs-tools",
    "busybox": "busybox-static",
    "zstd": "zstd",
}
_PT_INTERP = 3


def _is_static(path: str) -> bool:
    """True for an ELF executable without a program interpreter (statically linked)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit ELF only
                return False
            endian = "<" if head[5] == 1 else ">"
            (phoff,) = struct.unpack_from(endian + "Q", head, 32)
            phentsize, phnum = struct.unpack_from(endian + "HH", head, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    return all(
        struct.unpack_from(endian + "I", table, i * phentsize)[0] != _PT_INTERP
        for i in range(phnum)
    )


def static_busybox() -> str | None:
    """The path of a statically linked busybox, if this machine has one."""
    for path in ("/bin/busybox", "/usr/bin/busybox", shutil.which("busybox")):
        if path and os.path.isfile(path) and _is_static(path):
            return path
    return None


def require_tools(*tools: str) -> None:
    """Skip the test unless every tool is installed (``busybox``: a static one)."""
    missing = [
        tool
        for tool in tools
        if (static_busybox() is None if tool == "busybox" else shutil.which(tool) is None)
    ]
    if missing:
        packages = sorted({_PACKAGES.get(t, t) for t in missing})
        pytest.skip(
            f"needs Debian's {', '.join(packages)} ({', '.join(missing)} not found): "
            f"apt-get install {' '.join(packages)}"
        )


def busybox_rootfs(directory: Path) -> Path:
    """A root file system of a static busybox: ``bin/busybox``, its applets as symbolic
    links in ``bin``, and ``etc/passwd``, ``etc/group`` (root, nobody)."""
    require_tools("busybox")
    busybox = static_busybox()
    assert busybox is not None
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True)
    shutil.copy2(busybox, bin_dir / "busybox")
    os.chmod(bin_dir / "busybox", 0o755)
    applets = subprocess.run(
        [busybox, "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    for applet in applets:
        if applet != "busybox" and "/" not in applet:
            (bin_dir / applet).symlink_to("busybox")
    etc = directory / "etc"
    etc.mkdir()
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
    )
    (etc / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    for name in ("root", "tmp", "work"):
        (directory / name).mkdir()
    os.chmod(directory / "tmp", 0o1777)
    return directory


def _umoci(*args: str) -> None:
    subprocess.run(["umoci", *args], check=True, capture_output=True, text=True)


def oci_layout(
    directory: Path,
    rootfs: Path,
    *,
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
    env: Sequence[str] = (),
    workdir: str | None = None,
    user: str | None = None,
    tag: str = "t",
) -> Path:
    """An OCI image layout at ``directory`` holding ``rootfs`` as one layer, tagged
    ``tag`` (the ``org.opencontainers.image.ref.name`` annotation), with this config."""
    require_tools("umoci")
    rootless = ["--rootless"] if os.geteuid() != 0 else []
    _umoci("init", "--layout", str(directory))
    _umoci("new", "--image", f"{directory}:{tag}")
    with tempfile.TemporaryDirectory(dir=directory.parent) as scratch:
        bundle = Path(scratch) / "bundle"
        _umoci("unpack", *rootless, "--image", f"{directory}:{tag}", str(bundle))
        shutil.copytree(rootfs, bundle / "rootfs", symlinks=True, dirs_exist_ok=True)
        _umoci("repack", "--image", f"{directory}:{tag}", str(bundle))
    config = [f"--config.entrypoint={a}" for a in entrypoint]
    config += [f"--config.cmd={a}" for a in cmd]
    config += [f"--config.env={e}" for e in env]
    if workdir is not None:
        config.append(f"--config.workingdir={workdir}")
    if user is not None:
        config.append(f"--config.user={user}")
    if config:
        _umoci("config", "--image", f"{directory}:{tag}", *config)
    _umoci("gc", "--layout", str(directory))
    return directory


def manifest_digest(layout: Path, tag: str = "t") -> str:
    """The digest of the manifest tagged ``tag`` in an OCI layout."""
    index = json.loads((layout / "index.json").read_text())
    for desc in index["manifests"]:
        if desc.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
            return str(desc["digest"])
    raise KeyError(tag)


def oci_archive(layout: Path, out: Path, *, compress: bool = False) -> Path:
    """An OCI archive: the layout's files in a tar (gzipped when ``compress``)."""
    with tarfile.open(out, "w:gz" if compress else "w") as tar:
        for path in sorted(layout.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(layout)), recursive=False)
    return out


def _layer(files: dict[str, bytes] | Path) -> bytes:
    """An uncompressed layer tar, reproducible: of a directory or of {path: contents}."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if isinstance(files, Path):
            for path in sorted(files.rglob("*")):
                info = tar.gettarinfo(str(path), arcname=str(path.relative_to(files)))
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                if info.isfile():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
        else:
            for name, data in sorted(files.items()):
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def docker_archive(
    out: Path,
    rootfs: Path,
    *,
    repo_tags: Sequence[str] = ("example.com/tools/busybox:1.0",),
    entrypoint: Sequence[str] | None = None,
    cmd: Sequence[str] | None = None,
    env: Sequence[str] | None = None,
    workdir: str | None = None,
    user: str | None = None,
    extra: dict[str, bytes] | None = None,
    extra_compression: str = "gzip",
) -> Path:
    """A ``docker save`` archive, written by hand as Docker before 25 wrote one:
    ``manifest.json`` (Config, RepoTags, Layers), the config as ``<hex>.json``, layers
    as ``<id>/layer.tar``. ``rootfs`` is the first layer (plain tar); ``extra`` files
    make a second one, compressed with ``extra_compression`` (gzip, zstd or none)."""
    layers = [_layer(rootfs)]
    diff_ids = [hashlib.sha256(layers[0]).hexdigest()]
    if extra is not None:
        plain = _layer(extra)
        diff_ids.append(hashlib.sha256(plain).hexdigest())
        if extra_compression == "gzip":
            plain = gzip.compress(plain, mtime=0)
        elif extra_compression == "zstd":
            require_tools("zstd")
            plain = subprocess.run(
                ["zstd", "-q", "-c"], input=plain, capture_output=True, check=True
            ).stdout
        layers.append(plain)
    conf: dict[str, object] = {}
    for key, value in (
        ("Entrypoint", entrypoint),
        ("Cmd", cmd),
        ("Env", env),
        ("WorkingDir", workdir),
        ("User", user),
    ):
        if value is not None:
            conf[key] = list(value) if not isinstance(value, str) else value
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": conf,
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in diff_ids]},
            "history": [{"created_by": "images_support.docker_archive"}],
        }
    ).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    members: dict[str, bytes] = {config_name: config}
    layer_names = []
    for n, data in enumerate(layers):
        name = f"{hashlib.sha256(data + bytes([n])).hexdigest()}/layer.tar"
        members[name] = data
        layer_names.append(name)
    manifest = [{"Config": config_name, "RepoTags": list(repo_tags), "Layers": layer_names}]
    members["manifest.json"] = json.dumps(manifest).encode()
    with tarfile.open(out, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def squashfs(rootfs: Path, out: Path) -> Path:
    """An enroot-style image: ``rootfs`` squashed, every file owned by root."""
    require_tools("mksquashfs")
    subprocess.run(
        ["mksquashfs", str(rootfs), str(out), "-noappend", "-quiet", "-no-progress", "-all-root"],
        check=True,
        capture_output=True,
    )
    return out

"""The container helper itself (``python -m phalanx.runtime.containers.exec``): users
(an account, ``remapRoot``), an unprivileged caller (user namespace + squashfuse),
exec's exit statuses, nothing left mounted; and pyxis' option parsing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from phalanx.runtime.containers import pyxis
from phalanx.runtime.containers.enter import resolve_inside
from tests.runtime.containers.images_support import busybox_rootfs, require_tools, squashfs

SRC = Path(__file__).resolve().parents[3] / "src"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="runs as root")


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_tools("mksquashfs")
    work = tmp_path_factory.mktemp("exec")
    rootfs = busybox_rootfs(work / "rootfs")
    (rootfs / "etc").mkdir(exist_ok=True)
    (rootfs / "etc" / "os-release").write_text("ID=phxbox\n")
    return squashfs(rootfs, work / "img.sqsh")


def run(spec: dict[str, object], *argv: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-I",
            "-m",
            "phalanx.runtime.containers.exec",
            json.dumps(spec),
            "--",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        **kwargs,  # type: ignore[arg-type]
    )


def base(image: Path, tmp_path: Path, **more: object) -> dict[str, object]:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    return {"image": str(image), "scratch": str(scratch), "writable": True, **more}


@as_root
def test_an_account_and_remap_root(image: Path, tmp_path: Path) -> None:
    owned = tmp_path / "owned"
    owned.mkdir()
    owned.chmod(0o755)
    account = {"uid": 65534, "gid": 65534, "name": "nobody", "home": "/nonexistent"}
    mounts = [{"source": str(owned), "target": "/owned"}]
    plain = run(
        base(image, tmp_path, account=account, mounts=mounts), "sh", "-c", "id -u; touch /owned/f"
    )
    assert plain.stdout.splitlines()[0] == "65534"
    assert "Permission denied" in plain.stderr
    remapped = run(
        base(image, tmp_path, account=account, mounts=mounts, remapRoot=True),
        "sh",
        "-c",
        "id -u; touch /owned/f",
    )
    # root inside, and still nobody outside: the root-owned folder stays closed.
    assert remapped.stdout.splitlines()[0] == "0"
    assert "Permission denied" in remapped.stderr and not (owned / "f").exists()


@as_root
def test_exit_statuses(image: Path, tmp_path: Path) -> None:
    assert run(base(image, tmp_path), "sh", "-c", "exit 9").returncode == 9
    assert run(base(image, tmp_path), "nope").returncode == 127
    broken = run({**base(image, tmp_path), "image": str(tmp_path / "none.sqsh")}, "true")
    assert broken.returncode == 125 and "none.sqsh" in broken.stderr
    not_squashfs = tmp_path / "bad.sqsh"
    not_squashfs.write_text("not an image")
    bad = run({**base(image, tmp_path), "image": str(not_squashfs)}, "true")
    assert bad.returncode == 125 and "not a squashfs image" in bad.stderr


@as_root
def test_an_unprivileged_caller_runs_the_image_through_squashfuse(
    image: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    require_tools("squashfuse", "setpriv")
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("needs a python3 every user can run (/usr/bin/python3)")
    work = Path(tempfile_dir())
    try:
        shutil.copytree(SRC / "phalanx", work / "src" / "phalanx")
        img = work / "img.sqsh"
        shutil.copy(image, img)
        scratch = work / "scratch"
        scratch.mkdir()
        os.chown(scratch, 65534, 65534)
        subprocess.run(["chmod", "-R", "a+rX", str(work)], check=True)
        spec = {"image": str(img), "scratch": str(scratch), "writable": True, "remapRoot": True}
        done = subprocess.run(
            [
                "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                python, "-m", "phalanx.runtime.containers.exec", json.dumps(spec), "--",
                "sh", "-c", "cat /etc/os-release; id -u; echo w > /f && cat /f",
            ],
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(work / "src")},
            capture_output=True,
            text=True,
            timeout=30,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["ID=phxbox", "0", "w"]
        leftover = subprocess.run(["pgrep", "-f", f"squashfuse -f {img}"], capture_output=True)
        for _ in range(50):
            if leftover.returncode != 0:
                break
            subprocess.run(["sleep", "0.1"])
            leftover = subprocess.run(["pgrep", "-f", f"squashfuse -f {img}"], capture_output=True)
        assert leftover.returncode != 0, "the FUSE daemon outlived the container"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def tempfile_dir() -> str:
    import tempfile

    path = tempfile.mkdtemp(prefix="phx-exec-", dir="/tmp")
    os.chmod(path, 0o755)
    return path


def test_a_symlink_in_the_image_cannot_point_a_mount_out_of_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "data").symlink_to("/etc")
    (root / "up").symlink_to("../../../..")
    assert resolve_inside(str(root), "/data/x") == str(root / "etc" / "x")
    assert resolve_inside(str(root), "/up/etc") == str(root / "etc")


def test_pyxis_options() -> None:
    opts = pyxis.parse(
        [("--container-image", "nvcr.io#nvidia/pytorch:24.01-py3"), ("--container-writable", None)],
        {"PYXIS_CONTAINER_MOUNTS": "/a:/b"},
    )
    assert (opts.image, opts.writable, opts.mounts) == (
        "nvcr.io#nvidia/pytorch:24.01-py3",
        True,
        "/a:/b",
    )
    with pytest.raises(pyxis.PyxisError, match="both --container-readonly and"):
        pyxis.parse([("--container-writable", None), ("--container-readonly", None)], {})
    with pytest.raises(pyxis.PyxisError, match="specified multiple times"):
        pyxis.parse([("--container-image", "a"), ("--container-image", "b")], {})
    only = pyxis.parse([("--container-mounts", "/a:/b")], {})
    assert pyxis.ignored(only) == [
        "pyxis: ignoring --container-mounts because neither --container-image nor "
        "--container-name is set"
    ]


def test_pyxis_mounts(tmp_path: Path) -> None:
    got = pyxis.parse_mounts(f"{tmp_path},{tmp_path}:/in:ro+rprivate,tmpfs:/scratch,umount:/x", "/")
    assert got == [
        {"source": str(tmp_path), "target": str(tmp_path), "readOnly": False},
        {"source": str(tmp_path), "target": "/in", "readOnly": True},
        {"source": "tmpfs", "target": "/scratch", "readOnly": False, "kind": "tmpfs"},
        {"source": "umount", "target": "/x", "readOnly": False, "kind": "umount"},
    ]
    for bad, message in [
        ("/tmp:", "invalid format"),
        ("/tmp:mnt", "mount target must be a relative path or an absolute path"),
        ("tmp:/x", "mount source must be"),
        ("/no/such/path:/x", "source path does not exist: /no/such/path"),
        ("/tmp:/x:bogus", "unknown mount flag"),
    ]:
        with pytest.raises(pyxis.PyxisError, match=message):
            pyxis.parse_mounts(bad, "/")

"""The image store: every accepted format imports (umoci + mksquashfs), once per digest,
under normalized references; ``phalanx image import/ls/rm``."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from phalanx.cli.app import app
from phalanx.cli.main import main
from phalanx.runtime.containers.images import (
    ImageError,
    ImageStore,
    normalize,
    tools_missing,
)
from tests.runtime.containers.images_support import (
    busybox_rootfs,
    docker_archive,
    manifest_digest,
    oci_archive,
    oci_layout,
    require_tools,
    squashfs,
)

ENTRYPOINT = ["/bin/sh", "-c"]
CMD = ["echo hello from $GREETING"]
ENV = ["PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=hello world"]
CONFIG = {
    "Entrypoint": ENTRYPOINT,
    "Cmd": CMD,
    "Env": ENV,
    "WorkingDir": "/work",
    "User": "1000:1000",
}
BUSYBOX = "docker.io/library/busybox:latest"


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return busybox_rootfs(tmp_path_factory.mktemp("busybox") / "rootfs")


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory, rootfs: Path) -> Path:
    require_tools("umoci", "mksquashfs", "unsquashfs")
    return oci_layout(
        tmp_path_factory.mktemp("oci") / "layout",
        rootfs,
        entrypoint=ENTRYPOINT,
        cmd=CMD,
        env=ENV,
        workdir="/work",
        user="1000:1000",
    )


@pytest.fixture(scope="module")
def sqsh(tmp_path_factory: pytest.TempPathFactory, rootfs: Path) -> Path:
    return squashfs(rootfs, tmp_path_factory.mktemp("sqsh") / "busybox.sqsh")


@pytest.fixture
def store(tmp_path: Path) -> ImageStore:
    return ImageStore(tmp_path / "state" / "images")


def listing(image_path: str) -> list[str]:
    """The paths in a squashfs file (unsquashfs -l)."""
    out = subprocess.run(
        ["unsquashfs", "-l", "-d", "", image_path], capture_output=True, text=True, check=True
    ).stdout
    return [line.strip().lstrip("/") for line in out.splitlines() if line.strip()]


def cat(image_path: str, path: str) -> str:
    return subprocess.run(
        ["unsquashfs", "-cat", image_path, path], capture_output=True, text=True, check=True
    ).stdout


def blobs(store: ImageStore) -> list[str]:
    return sorted(p.name for p in (store.root / "sha256").iterdir())


def assert_clean(store: ImageStore) -> None:
    """No import left anything behind in the store's tmp folder."""
    tmp = store.root / "tmp"
    assert not tmp.exists() or not list(tmp.iterdir())


# --------------------------------------------------------------------------- references


@pytest.mark.parametrize(
    ("ref", "canonical"),
    [
        ("busybox", BUSYBOX),
        ("docker://busybox", BUSYBOX),
        ("busybox:latest", BUSYBOX),
        ("library/busybox", BUSYBOX),
        ("docker.io/library/busybox:latest", BUSYBOX),
        ("index.docker.io/library/busybox", BUSYBOX),
        ("ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
        ("nvidia/cuda:12.4.1-base", "docker.io/nvidia/cuda:12.4.1-base"),
        ("nvcr.io#nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch:24.01-py3"),
        ("docker://nvcr.io#nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch:24.01-py3"),
        ("alice@nvcr.io#nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch:24.01-py3"),
        ("docker://alice@busybox", BUSYBOX),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch:24.01-py3"),
        ("localhost:5000/x", "localhost:5000/x:latest"),
        ("localhost/x:1", "localhost/x:1"),
        ("registry#team/app", "registry/team/app:latest"),
        ("ghcr.io/a/b/c:v1.2_3", "ghcr.io/a/b/c:v1.2_3"),
        ("busybox@sha256:" + "a" * 64, "docker.io/library/busybox@sha256:" + "a" * 64),
        ("busybox:1.36@sha256:" + "b" * 64, "docker.io/library/busybox:1.36@sha256:" + "b" * 64),
    ],
)
def test_normalize(ref: str, canonical: str) -> None:
    assert normalize(ref) == canonical


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "  ",
        "Busybox",
        "http://busybox",
        "busybox:",
        "busybox:bad/tag",
        "busybox@sha256:abc",
        "busybox@md5:" + "a" * 32,
        "a//b",
        "/busybox",
        "bad_host!#image",
        "a#b#c",
        "busybox:" + "x" * 200,
    ],
)
def test_normalize_rejects_malformed_references(ref: str) -> None:
    with pytest.raises(ImageError, match="invalid image reference"):
        normalize(ref)


def test_tools_missing_names_debian_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert tools_missing() == ["umoci", "squashfs-tools"]


# --------------------------------------------------------------------------- each format


def test_oci_layout_imports(store: ImageStore, layout: Path) -> None:
    image = store.import_image(layout, name="busybox")
    assert image.digest == manifest_digest(layout)
    assert image.refs == (BUSYBOX,)
    assert image.config == CONFIG
    assert image.source == str(layout)
    assert image.path == str(store.root / "sha256" / f"{image.digest[7:]}.sqsh")
    assert image.size == os.path.getsize(image.path) > 0
    with open(image.path, "rb") as f:
        assert f.read(4) == b"hsqs"
    files = listing(image.path)
    assert "bin/busybox" in files
    assert "bin/sh" in files
    assert cat(image.path, "etc/environment").splitlines() == ENV
    # Its / can be entered by any user of the container.
    root = subprocess.run(
        ["unsquashfs", "-lls", "-d", "", image.path, "bin"], capture_output=True, text=True
    ).stdout.splitlines()[0]
    assert root.split()[:2] == ["drwxr-xr-x", "root/root"], root
    assert store.resolve("busybox") == image
    assert store.list() == [image]
    index = json.loads((store.root / "index.json").read_text())
    assert index["refs"] == {BUSYBOX: image.digest}
    assert list(index["images"]) == [image.digest]
    assert_clean(store)


def test_oci_layout_without_name_is_known_by_digest(store: ImageStore, layout: Path) -> None:
    # umoci's layout tags the manifest "t", a bare tag: it names no image by itself.
    image = store.import_image(layout)
    assert image.refs == ()
    assert store.resolve(image.digest) == image
    assert store.resolve(image.digest[:19]) == image
    assert store.resolve(image.digest[7:19]) == image
    assert store.resolve("sha256:" + "0" * 64) is None
    assert store.list() == [image]


@pytest.mark.parametrize("compress", [False, True], ids=["tar", "tar.gz"])
def test_oci_archive_imports(
    store: ImageStore, layout: Path, tmp_path: Path, compress: bool
) -> None:
    archive = oci_archive(
        layout, tmp_path / ("oci.tar.gz" if compress else "oci.tar"), compress=compress
    )
    image = store.import_image(archive, name="example.com/busybox:oci")
    assert image.digest == manifest_digest(layout)
    assert image.refs == ("example.com/busybox:oci",)
    assert image.config == CONFIG
    assert image.source == str(archive)
    assert "bin/busybox" in listing(image.path)
    assert_clean(store)


def test_oci_archive_names_itself(store: ImageStore, layout: Path, tmp_path: Path) -> None:
    """A full reference in org.opencontainers.image.ref.name (skopeo's oci-archive:F:REF)
    or io.containerd.image.name names the image."""
    copy = tmp_path / "layout"
    shutil.copytree(layout, copy)
    index = json.loads((copy / "index.json").read_text())
    index["manifests"][0]["annotations"] = {
        "org.opencontainers.image.ref.name": "latest",
        "io.containerd.image.name": "ghcr.io/acme/busybox:2",
    }
    (copy / "index.json").write_text(json.dumps(index))
    image = store.import_image(oci_archive(copy, tmp_path / "named.tar"))
    assert image.refs == ("ghcr.io/acme/busybox:2",)
    index["manifests"][0]["annotations"] = {"org.opencontainers.image.ref.name": "busybox:1"}
    (copy / "index.json").write_text(json.dumps(index))
    image = store.import_image(copy)
    assert image.refs[0] == "docker.io/library/busybox:1"
    assert set(image.refs) == {"docker.io/library/busybox:1", "ghcr.io/acme/busybox:2"}


@pytest.mark.parametrize("compression", ["gzip", "zstd", "none"])
def test_docker_archive_imports(
    store: ImageStore, rootfs: Path, tmp_path: Path, compression: str
) -> None:
    require_tools("umoci", "mksquashfs", "unsquashfs")
    archive = docker_archive(
        tmp_path / "saved.tar",
        rootfs,
        entrypoint=ENTRYPOINT,
        cmd=CMD,
        env=ENV,
        workdir="/work",
        user="1000:1000",
        extra={"etc/motd": b"second layer\n", "etc/environment": b"FROM_IMAGE=1"},
        extra_compression=compression,
    )
    image = store.import_image(archive)
    assert image.refs == ("example.com/tools/busybox:1.0",)
    assert image.config == CONFIG
    files = listing(image.path)
    assert {"bin/busybox", "etc/motd", "etc/passwd"} <= set(files)
    assert cat(image.path, "etc/motd") == "second layer\n"
    # The Env is appended to the image's own /etc/environment, as enroot import does.
    assert cat(image.path, "etc/environment").splitlines() == ["FROM_IMAGE=1", *ENV]
    # The digest is the generated manifest's: the same archive always gives the same one.
    other = ImageStore(tmp_path / "other")
    assert other.import_image(archive, name="again").digest == image.digest
    assert_clean(store)


def test_docker_archive_with_an_oci_layout_is_read_as_oci(
    store: ImageStore, layout: Path, tmp_path: Path
) -> None:
    """Docker 25 and later write both: the OCI layout is preferred."""
    copy = tmp_path / "saved"
    shutil.copytree(layout, copy)
    (copy / "manifest.json").write_text(
        json.dumps([{"Config": "missing.json", "RepoTags": ["x:1"], "Layers": []}])
    )
    image = store.import_image(oci_archive(copy, tmp_path / "saved.tar"), name="busybox")
    assert image.digest == manifest_digest(layout)


def test_squashfs_imports_as_it_is(store: ImageStore, sqsh: Path) -> None:
    image = store.import_image(sqsh, name="nvcr.io#tools/busybox:1")
    data = sqsh.read_bytes()
    assert image.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert image.refs == ("nvcr.io/tools/busybox:1",)
    assert image.config == {}
    assert Path(image.path).read_bytes() == data
    assert image.size == len(data)
    assert store.resolve("docker://nvcr.io/tools/busybox:1") == image
    assert_clean(store)


def test_an_image_index_is_followed_to_this_machines_platform(
    store: ImageStore, layout: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "multi"
    shutil.copytree(layout, copy)
    leaf = manifest_digest(layout)
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    size = (copy / "blobs" / "sha256" / leaf[7:]).stat().st_size
    other = "s390x" if arch != "s390x" else "amd64"
    image_index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": "sha256:" + "f" * 64,  # never read: not this platform
                    "size": 1,
                    "platform": {"os": "linux", "architecture": other},
                },
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": leaf,
                    "size": size,
                    "platform": {"os": "linux", "architecture": arch},
                },
            ],
        }
    ).encode()
    index_hex = hashlib.sha256(image_index).hexdigest()
    (copy / "blobs" / "sha256" / index_hex).write_bytes(image_index)
    (copy / "index.json").write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "manifests": [
                    {
                        "mediaType": "application/vnd.oci.image.index.v1+json",
                        "digest": f"sha256:{index_hex}",
                        "size": len(image_index),
                        "annotations": {
                            "io.containerd.image.name": "docker.io/library/busybox:multi"
                        },
                    }
                ],
            }
        )
    )
    image = store.import_image(copy)
    assert image.digest == leaf
    assert image.refs == ("docker.io/library/busybox:multi",)
    # An index without this machine's platform says which ones it has.
    listed = json.loads(image_index)
    listed["manifests"] = listed["manifests"][:1]
    image_index = json.dumps(listed).encode()
    index_hex = hashlib.sha256(image_index).hexdigest()
    (copy / "blobs" / "sha256" / index_hex).write_bytes(image_index)
    top = json.loads((copy / "index.json").read_text())
    top["manifests"][0]["digest"] = f"sha256:{index_hex}"
    top["manifests"][0]["size"] = len(image_index)
    (copy / "index.json").write_text(json.dumps(top))
    with pytest.raises(
        ImageError, match=rf"{re.escape(str(copy))}: .*no linux/{arch} image.*linux/{other}"
    ):
        ImageStore(tmp_path / "other").import_image(copy)


# --------------------------------------------------------------------------- once per digest


def test_the_same_image_is_stored_once(
    store: ImageStore, layout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = store.import_image(layout, name="a")
    archive = oci_archive(layout, tmp_path / "oci.tar")
    # Without umoci and mksquashfs: a second import of a stored image unpacks nothing.
    monkeypatch.setenv("PATH", "/nonexistent")
    second = store.import_image(archive, name="b")
    third = store.import_image(layout, name="a")
    assert first.digest == second.digest == third.digest
    assert second.refs == ("docker.io/library/b:latest", "docker.io/library/a:latest")
    assert third.refs == ("docker.io/library/a:latest", "docker.io/library/b:latest")
    assert blobs(store) == [f"{first.digest[7:]}.sqsh"]
    assert len(store.list()) == 1
    assert_clean(store)


def test_references_normalize(store: ImageStore, sqsh: Path) -> None:
    image = store.import_image(sqsh, name="docker://busybox")
    for ref in (
        "busybox",
        "busybox:latest",
        "docker://busybox",
        "docker.io/library/busybox:latest",
        "alice@busybox",
        f"busybox@{image.digest}",
        f"ghcr.io/any/name@{image.digest}",
        image.digest,
    ):
        assert store.resolve(ref) == image, ref
    assert store.resolve("busybox:1") is None
    assert store.resolve("ghcr.io/busybox") is None
    with pytest.raises(ImageError, match="invalid image reference"):
        store.resolve("Not An Image")


def test_rm_keeps_the_blob_while_a_reference_is_left(store: ImageStore, sqsh: Path) -> None:
    image = store.import_image(sqsh, name="a")
    store.import_image(sqsh, name="b")
    removed = store.remove("docker://a")
    assert removed.refs == ("docker.io/library/a:latest", "docker.io/library/b:latest")
    assert Path(image.path).is_file()
    assert store.resolve("a") is None
    left = store.resolve("b")
    assert left is not None and left.refs == ("docker.io/library/b:latest",)
    store.remove("b")
    assert not Path(image.path).exists()
    assert store.list() == []
    with pytest.raises(ImageError, match="b: no such image"):
        store.remove("b")


def test_rm_by_digest_drops_every_reference(store: ImageStore, sqsh: Path) -> None:
    store.import_image(sqsh, name="a")
    image = store.import_image(sqsh, name="b")
    assert store.remove(image.digest[:20]).digest == image.digest
    assert store.list() == []
    assert blobs(store) == []
    assert json.loads((store.root / "index.json").read_text()) == {"images": {}, "refs": {}}


def test_a_reference_moves_to_the_image_imported_last(
    store: ImageStore, sqsh: Path, rootfs: Path, tmp_path: Path
) -> None:
    one = store.import_image(sqsh, name="app")
    changed = shutil.copytree(rootfs, tmp_path / "rootfs", symlinks=True)
    (changed / "version").write_text("2\n")
    two = store.import_image(squashfs(changed, tmp_path / "2.sqsh"), name="app")
    assert one.digest != two.digest
    assert store.resolve("app") == two
    # The first is kept, known by its digest only (docker's dangling image).
    assert [i.refs for i in store.list()] == [("docker.io/library/app:latest",), ()]


# --------------------------------------------------------------------------- bad inputs


def test_a_missing_path(store: ImageStore, tmp_path: Path) -> None:
    missing = tmp_path / "nope.tar"
    with pytest.raises(ImageError, match=f"{re.escape(str(missing))}: no such file"):
        store.import_image(missing)


def test_a_file_that_is_no_image(store: ImageStore, tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n" * 100)
    with pytest.raises(ImageError, match=f"{re.escape(str(text))}: not an image"):
        store.import_image(text)
    assert_clean(store)


def test_a_tar_without_a_manifest(store: ImageStore, tmp_path: Path) -> None:
    (tmp_path / "readme").write_text("hi\n")
    archive = tmp_path / "plain.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tmp_path / "readme", arcname="readme")
    with pytest.raises(
        ImageError, match=f"{re.escape(str(archive))}: not an image: .*manifest.json"
    ):
        store.import_image(archive)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ImageError, match=f"{re.escape(str(empty))}: not an image"):
        store.import_image(empty)
    assert_clean(store)


def test_a_tar_with_a_member_outside_it(store: ImageStore, tmp_path: Path) -> None:
    (tmp_path / "evil").write_text("x\n")
    archive = tmp_path / "evil.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tmp_path / "evil", arcname="../evil")
    with pytest.raises(ImageError, match="lies outside the archive"):
        store.import_image(archive)
    assert_clean(store)


def test_docker_archive_errors_name_the_file(store: ImageStore, tmp_path: Path) -> None:
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "manifest.json").write_text(
        json.dumps([{"Config": "c.json", "RepoTags": ["x:1"], "Layers": ["l/layer.tar"]}])
    )
    with pytest.raises(
        ImageError, match=f"{re.escape(str(saved))}: manifest.json: Config: c.json is missing"
    ):
        store.import_image(saved)
    (saved / "manifest.json").write_text("{not json")
    with pytest.raises(ImageError, match=f"{re.escape(str(saved))}: manifest.json: not JSON"):
        store.import_image(saved)
    (saved / "c.json").write_text(json.dumps({"config": {"Env": "A=1"}}))
    (saved / "manifest.json").write_text(json.dumps([{"Config": "c.json", "Layers": []}]))
    with pytest.raises(ImageError, match=r"c.json: config.Env: expected a list of strings"):
        store.import_image(saved)


def test_an_index_of_two_images_needs_a_name(
    store: ImageStore, layout: Path, tmp_path: Path
) -> None:
    two = tmp_path / "two"
    shutil.copytree(layout, two)
    subprocess.run(
        ["umoci", "config", "--image", f"{two}:t", "--tag", "t2", "--config.cmd=echo two"],
        check=True,
        capture_output=True,
    )
    with pytest.raises(
        ImageError,
        match=f"{re.escape(str(two))}: index.json lists 2 images; choose one with --name: t, t2",
    ):
        store.import_image(two)
    with pytest.raises(
        ImageError,
        match=f"{re.escape(str(two))}: index.json has no image named other; it has: t, t2",
    ):
        store.import_image(two, name="other")
    picked = store.import_image(two, name="t2")
    assert picked.digest == manifest_digest(two, "t2")
    assert picked.config["Cmd"] == ["echo two"]
    assert picked.refs == ("docker.io/library/t2:latest",)
    # A full reference whose tag is the layout's tag picks it too.
    assert store.import_image(two, name="busybox:t").digest == manifest_digest(two, "t")


def test_a_corrupt_index(store: ImageStore, layout: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(layout, copy)
    (copy / "index.json").write_text('{"manifests": [{"digest": "sha256:12"}]}')
    with pytest.raises(
        ImageError, match=f"{re.escape(str(copy))}: index.json: expected a descriptor"
    ):
        store.import_image(copy)
    (copy / "index.json").write_text(json.dumps({"manifests": [{"digest": "sha256:" + "0" * 64}]}))
    with pytest.raises(ImageError, match=r"blob sha256:0{64} is missing \(no blobs/sha256/0{64}\)"):
        store.import_image(copy)
    (copy / "index.json").unlink()
    with pytest.raises(ImageError, match=f"{re.escape(str(copy))}: index.json is missing"):
        store.import_image(copy)


def test_missing_tools_name_their_debian_packages(
    store: ImageStore, layout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ImageError, match=r"needs Debian's umoci and squashfs-tools"):
        store.import_image(layout)
    assert_clean(store)


def test_a_corrupt_index_json_of_the_store(store: ImageStore) -> None:
    store.root.mkdir(parents=True)
    (store.root / "index.json").write_text("[]")
    with pytest.raises(ImageError, match=f"{re.escape(str(store.root))}/index.json: expected"):
        store.list()


# --------------------------------------------------------------------------- the CLI


def test_cli_import_ls_rm(layout: Path, sqsh: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    state = str(tmp_path / "state")

    def phalanx(*args: str) -> tuple[int, str]:
        result = runner.invoke(app, [*args, "--state-dir", state])
        return result.exit_code, result.output

    code, out = phalanx("image", "import", str(layout), "--name", "docker://busybox")
    assert code == 0, out
    digest = manifest_digest(layout)
    assert re.fullmatch(rf"imported {BUSYBOX} \({digest}, \d+(\.\d)?[kM]?B\)\n", out), out
    code, out = phalanx("image", "import", str(sqsh))
    sqsh_digest = "sha256:" + hashlib.sha256(sqsh.read_bytes()).hexdigest()
    assert code == 0 and out.startswith(f"imported {sqsh_digest} ({sqsh_digest}, "), out
    code, out = phalanx("image", "import", str(layout), "--name", "nvcr.io#x/y:1")
    assert code == 0 and out.startswith("imported nvcr.io/x/y:1 ("), out

    code, out = phalanx("image", "ls")
    assert code == 0, out
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == ["REF", "DIGEST", "SIZE", "IMPORTED"]
    assert [row[:2] for row in lines[1:]] == [
        [BUSYBOX, digest[:19]],
        ["nvcr.io/x/y:1", digest[:19]],
        ["<none>", sqsh_digest[:19]],
    ]
    for row in lines[1:]:
        assert re.fullmatch(r"\d+(\.\d)?[kMG]?B", row[2]), row
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", row[3]), row
    assert phalanx("image", "ls", "-q") == (0, f"{digest}\n{sqsh_digest}\n")

    assert phalanx("image", "rm", "busybox") == (0, f"untagged {BUSYBOX}\n")
    assert phalanx("image", "rm", "nvcr.io/x/y:1", sqsh_digest[:20]) == (
        0,
        f"untagged nvcr.io/x/y:1\ndeleted {digest}\ndeleted {sqsh_digest}\n",
    )
    assert phalanx("image", "ls", "-q") == (0, "")
    code, out = phalanx("image", "rm", "busybox")
    assert code == 1 and "busybox: no such image" in out


def test_cli_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    state = str(tmp_path / "state")
    missing = tmp_path / "missing.tar"
    assert main(["image", "import", str(missing), "--state-dir", state]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"phalanx: error: {missing}: no such file or directory\n"
    assert main(["image", "import", str(missing), "--name", "Bad!", "--state-dir", state]) == 1
    err = capsys.readouterr().err
    assert err.startswith("phalanx: error: invalid image reference 'Bad!'") and err.count("\n") == 1
    assert main(["image", "rm", "nothing", "--state-dir", state]) == 1
    assert capsys.readouterr().err.startswith("phalanx: error: nothing: no such image")


def test_cli_uses_the_state_dir_of_phalanx_up(
    tmp_path: Path, sqsh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHALANX_STATE_DIR", str(tmp_path / "env-state"))
    result = CliRunner().invoke(app, ["image", "import", str(sqsh), "--name", "b"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "env-state" / "images" / "index.json").is_file()

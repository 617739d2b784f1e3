"""The image store: container images imported once per digest, as squashfs files.

``phalanx image import`` takes an OCI image layout (a directory), an OCI archive
(a tar of one, optionally gzipped), a ``docker save`` archive or an enroot
squashfs image (``.sqsh``). OCI and docker images are unpacked into a root file
system with ``umoci`` and squashed with ``mksquashfs``, as ``enroot import``
does; a squashfs image is stored as it is. Each image is stored once, under its
digest (the OCI manifest's), however often and under however many names it is
imported; jobs' tasks then find it by reference (``docker://busybox``,
``nvcr.io#nvidia/pytorch:24.01-py3``, ``busybox@sha256:...``): phalanx never
pulls from a registry.

The layout under ``STATE_DIR/images``::

    index.json            {"images": {DIGEST: {...}}, "refs": {REF: DIGEST}}
    sha256/HEX.sqsh       each image's root file system
    tmp/                  imports in progress (removed when they end)
    .lock                 flock(2)-ed by every writer

Standard library only: ``srun`` imports it to find an image and must start fast
(``hashlib``, ``tarfile``, ``shutil``, ``subprocess`` and ``tempfile`` load when an
import runs).
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "IMAGES_DIR",
    "Image",
    "ImageError",
    "ImageStore",
    "normalize",
    "tools_missing",
]

IMAGES_DIR = "images"
"""The store's folder in the state directory."""

SQUASHFS_MAGIC = b"hsqs"

_REF_NAME = "org.opencontainers.image.ref.name"
_CONTAINERD_NAME = "io.containerd.image.name"
_STAGE_TAG = "phalanx-import"
_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
_INDEX_TYPES = frozenset(
    {
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    }
)
_MANIFEST_TYPES = frozenset({_OCI_MANIFEST, "application/vnd.docker.distribution.manifest.v2+json"})
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_CONFIG_LISTS = ("Entrypoint", "Cmd", "Env")
_CONFIG_STRINGS = ("WorkingDir", "User")
# Debian's names for os.uname().machine: (GOARCH, variant) as OCI platforms spell them.
_ARCHES = {
    "x86_64": ("amd64", ""),
    "amd64": ("amd64", ""),
    "aarch64": ("arm64", "v8"),
    "arm64": ("arm64", "v8"),
    "armv7l": ("arm", "v7"),
    "armv6l": ("arm", "v6"),
    "i386": ("386", ""),
    "i686": ("386", ""),
    "ppc64le": ("ppc64le", ""),
    "s390x": ("s390x", ""),
    "riscv64": ("riscv64", ""),
}
_TOOLS = {"umoci": "umoci", "mksquashfs": "squashfs-tools"}

_DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
_ANY_DIGEST_RE = re.compile(r"sha256:|[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,}$")
_HEX_RE = re.compile(r"[0-9a-f]{12,64}")
_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_COMPONENT_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_HOST_RE = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:.]+\])(?::[0-9]+)?"
)
_USER_RE = re.compile(r"[^@/:#]+@")
_SCHEMES = ("docker", "dockerd", "podman")
_EXPECTED_REF = (
    "expected [docker://][REGISTRY/]NAME[:TAG][@sha256:DIGEST] or [USER@][REGISTRY#]NAME[:TAG]"
)


class ImageError(Exception):
    """An image cannot be imported, found or removed; the message says which file or
    field, and what was expected."""


@dataclass(frozen=True)
class Image:
    """One stored image."""

    digest: str
    """``sha256:<hex>``: the OCI manifest's digest (a squashfs image's own digest)."""
    refs: tuple[str, ...]
    """Its normalized references (``docker.io/library/busybox:latest``); may be empty."""
    path: str
    """The absolute path of its root file system, a squashfs file."""
    config: dict[str, Any] = field(hash=False)
    """Of the OCI image config's ``config``: Entrypoint, Cmd, Env (``K=V``), WorkingDir,
    User, those it sets; empty for a squashfs image."""
    source: str
    """The absolute path it was first imported from."""
    size: int
    """Bytes of its squashfs file."""
    created: float
    """When it was imported (epoch seconds)."""


# --------------------------------------------------------------------------- references


def normalize(ref: str) -> str:
    """The canonical docker form of an image reference.

    Accepts ``docker://REF`` (also ``dockerd://`` and ``podman://``, enroot's local
    sources), enroot/pyxis URIs ``[USER@][REGISTRY#]IMAGE[:TAG]`` (the user is
    dropped) and plain docker references: ``busybox`` is
    ``docker.io/library/busybox:latest``, ``nvcr.io#nvidia/pytorch:24.01-py3`` is
    ``nvcr.io/nvidia/pytorch:24.01-py3``; a digest is kept and no tag is added to it.
    """

    def bad(why: str) -> ImageError:
        return ImageError(f"invalid image reference {ref!r}: {why}; {_EXPECTED_REF}")

    text = ref.strip()
    if not text:
        raise bad("it is empty")
    if "://" in text:
        scheme, _, text = text.partition("://")
        if scheme not in _SCHEMES:
            raise bad(f"unsupported scheme {scheme}://")
    user = _USER_RE.match(text)
    # NAME@ALGORITHM:HEX is a digest, not enroot's USER@IMAGE:TAG.
    if user and not _ANY_DIGEST_RE.match(text[user.end() :]):
        text = text[user.end() :]
    registry = None
    if "#" in text:
        registry, _, text = text.partition("#")
        if not _HOST_RE.fullmatch(registry):
            raise bad(f"{registry!r} is not a registry (HOST[:PORT])")
        if "#" in text:
            raise bad("more than one '#'")
    digest = None
    if "@" in text:
        text, _, digest = text.partition("@")
        if not _DIGEST_RE.fullmatch(digest):
            raise bad(f"{digest!r} is not a digest (sha256: and 64 lowercase hex digits)")
    tag = None
    colon = text.rfind(":")
    if colon > text.rfind("/"):
        text, tag = text[:colon], text[colon + 1 :]
        if not _TAG_RE.fullmatch(tag):
            raise bad(f"{tag!r} is not a tag (letters, digits, '_', '.', '-'; at most 128)")
    parts = text.split("/")
    if registry is None:
        first = parts[0]
        if len(parts) > 1 and ("." in first or ":" in first or first == "localhost"):
            registry, parts = first, parts[1:]
        else:
            registry = "docker.io"
        if not _HOST_RE.fullmatch(registry):
            raise bad(f"{registry!r} is not a registry (HOST[:PORT])")
    if registry == "index.docker.io":
        registry = "docker.io"
    for part in parts:
        if not part:
            raise bad("an empty name component")
        if not _COMPONENT_RE.fullmatch(part):
            raise bad(
                f"{part!r} is not a name component (lowercase letters and digits, "
                "separated by '.', '_', '__' or '-')"
            )
    if registry == "docker.io" and len(parts) == 1:
        parts = ["library", *parts]
    name = f"{registry}/{'/'.join(parts)}"
    if len(name) > 255:
        raise bad("the name is longer than 255 characters")
    if digest is not None:
        return f"{name}:{tag}@{digest}" if tag else f"{name}@{digest}"
    return f"{name}:{tag or 'latest'}"


def _full_ref(text: str) -> str | None:
    """``text`` normalized when it names an image by itself (not a bare tag), else None."""
    if not any(c in text for c in "/:@"):
        return None
    try:
        return normalize(text)
    except ImageError:
        return None


def _tag_of(ref: str) -> str:
    """The tag of a normalized reference ('' when it has none)."""
    name = ref.partition("@")[0]
    colon = name.rfind(":")
    return name[colon + 1 :] if colon > name.rfind("/") else ""


def tools_missing() -> list[str]:
    """The Debian packages that importing an OCI or docker image needs and that are not
    installed (a squashfs image needs none)."""
    import shutil

    return [package for tool, package in _TOOLS.items() if shutil.which(tool) is None]


# --------------------------------------------------------------------------- the store


@dataclass
class _Plan:
    """What an import will store: found by reading the source, before any unpacking."""

    digest: str
    ref: str | None
    config: dict[str, Any]
    squashfs: Path | None = None
    config_blob: tuple[Path, str] | None = None
    layers: builtins.list[tuple[Path, str]] = field(default_factory=builtins.list)


class ImageStore:
    """The images under ``root`` (``STATE_DIR/images``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.abspath(root))

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> ImageStore:
        """The store of a phalanx state directory."""
        return cls(Path(state_dir) / IMAGES_DIR)

    # ----------------------------------------------------------------------- reading

    def list(self) -> builtins.list[Image]:
        """Every image, sorted by reference (images without one last, by digest)."""
        data = self._read()
        images = [self._image(data, digest) for digest in data["images"]]
        return sorted(images, key=lambda i: (not i.refs, i.refs[0] if i.refs else i.digest))

    def resolve(self, ref: str) -> Image | None:
        """The image ``ref`` names: a reference (normalized first), ``sha256:<hex>``, a hex
        prefix of at least 12 digits naming one image, or ``NAME@sha256:<hex>``; None when
        there is none. A malformed reference raises :class:`ImageError`."""
        data = self._read()
        digest = self._find(data, ref)
        return None if digest is None else self._image(data, digest)

    def _find(self, data: dict[str, Any], ref: str) -> str | None:
        text = ref.strip()
        if text.startswith("sha256:") or _HEX_RE.fullmatch(text):
            hexpart = text.removeprefix("sha256:")
            if not _HEX_RE.fullmatch(hexpart):
                raise ImageError(
                    f"invalid image digest {ref!r}: expected sha256: and at least 12 of its "
                    "64 lowercase hex digits"
                )
            found = [d for d in data["images"] if d.removeprefix("sha256:").startswith(hexpart)]
            if len(found) > 1:
                raise ImageError(f"{ref!r} names {len(found)} images: give more digits")
            if found or text.startswith("sha256:"):
                return found[0] if found else None
        canonical = normalize(text)
        if canonical in data["refs"]:
            return str(data["refs"][canonical])
        digest = canonical.partition("@")[2]
        if digest and digest in data["images"]:
            return digest
        return None

    def _image(self, data: dict[str, Any], digest: str, first: str | None = None) -> Image:
        record = data["images"][digest]
        refs = sorted(r for r, d in data["refs"].items() if d == digest and r != first)
        if first is not None and data["refs"].get(first) == digest:
            refs.insert(0, first)
        return Image(
            digest=digest,
            refs=tuple(refs),
            path=str(self.root / record["path"]),
            config=dict(record.get("config") or {}),
            source=str(record.get("source", "")),
            size=int(record.get("size", 0)),
            created=float(record.get("created", 0.0)),
        )

    @property
    def _index(self) -> Path:
        return self.root / "index.json"

    def _blob(self, digest: str) -> Path:
        return self.root / "sha256" / f"{digest.removeprefix('sha256:')}.sqsh"

    def _read(self) -> dict[str, Any]:
        try:
            text = self._index.read_text()
        except FileNotFoundError:
            return {"images": {}, "refs": {}}
        except OSError as exc:
            raise ImageError(f"{self._index}: cannot read: {exc.strerror or exc}") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ImageError(f"{self._index}: not JSON: {exc}") from None
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("images"), dict)
            or not isinstance(data.get("refs"), dict)
        ):
            raise ImageError(f'{self._index}: expected {{"images": {{...}}, "refs": {{...}}}}')
        return data

    # ----------------------------------------------------------------------- writing

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """The index, read under the store's lock (held until the block ends)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ImageError(f"{self.root}: cannot lock: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self._read()
        finally:
            os.close(fd)

    def _write(self, data: dict[str, Any]) -> None:
        tmp = self.root / f".index.json.{os.getpid()}"
        try:
            with open(tmp, "w") as out:
                json.dump(data, out, indent=1, sort_keys=True)
                out.write("\n")
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, self._index)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise ImageError(f"{self._index}: cannot write: {exc.strerror or exc}") from None

    def remove(self, ref: str) -> Image:
        """Drop a reference; the image goes when no reference is left. By digest (or
        digest prefix), drop the image and all its references. Returns the image as it
        was; :class:`ImageError` when ``ref`` names none."""
        with self._locked() as data:
            digest = self._find(data, ref)
            if digest is None:
                raise ImageError(f"{ref}: no such image (phalanx image ls lists them)")
            image = self._image(data, digest)
            canonical = None
            with contextlib.suppress(ImageError):
                canonical = normalize(ref)
            if canonical is not None and data["refs"].get(canonical) == digest:
                del data["refs"][canonical]
            else:
                for name in image.refs:
                    del data["refs"][name]
            if digest not in data["refs"].values():
                del data["images"][digest]
            self._write(data)
            if digest not in data["images"]:
                with contextlib.suppress(FileNotFoundError):
                    self._blob(digest).unlink()
            return image

    def import_image(self, source: Path, name: str | None = None) -> Image:
        """Import the image at ``source`` under ``name`` (a reference; default: the name
        the image carries, if any). An image already stored (same digest) only gains the
        reference. The returned image lists this import's reference first."""
        ref = normalize(name) if name is not None else None
        src = Path(os.path.abspath(source))
        if not src.exists():
            raise ImageError(f"{src}: no such file or directory")
        tmp = self.root / "tmp"
        try:
            (self.root / "sha256").mkdir(parents=True, exist_ok=True)
            tmp.mkdir(exist_ok=True)
        except OSError as exc:
            raise ImageError(f"{self.root}: cannot create: {exc.strerror or exc}") from None
        _clean_stale(tmp)
        import tempfile

        work = Path(tempfile.mkdtemp(prefix=f"import-{os.getpid()}-", dir=tmp))
        try:
            plan = _plan(src, name, ref, work)
            ref = ref or plan.ref
            with self._locked() as data:
                if plan.digest in data["images"] and self._blob(plan.digest).is_file():
                    if ref is not None:
                        data["refs"][ref] = plan.digest
                        self._write(data)
                    return self._image(data, plan.digest, ref)
            out = work / "image.sqsh"
            linked = False
            if plan.squashfs is not None:
                linked = _copy(src, out)
            else:
                _build(src, plan, work, out)
            if not linked:
                os.chmod(out, 0o644)
            with self._locked() as data:
                blob = self._blob(plan.digest)
                # Another import of the same image may have ended first: keep its file.
                if not blob.is_file() or plan.digest not in data["images"]:
                    os.replace(out, blob)
                    data["images"][plan.digest] = {
                        "path": str(blob.relative_to(self.root)),
                        "config": plan.config,
                        "source": str(src),
                        "size": blob.stat().st_size,
                        "created": time.time(),
                    }
                if ref is not None:
                    data["refs"][ref] = plan.digest
                self._write(data)
                return self._image(data, plan.digest, ref)
        finally:
            _rmtree(work)


# --------------------------------------------------------------------------- reading sources


def _plan(src: Path, name: str | None, ref: str | None, work: Path) -> _Plan:
    """Read ``src`` (any accepted format) far enough to know its digest, name and config."""
    layout = src
    if not src.is_dir():
        try:
            with open(src, "rb") as f:
                head = f.read(4)
        except OSError as exc:
            raise ImageError(f"{src}: cannot read: {exc.strerror or exc}") from None
        if head == SQUASHFS_MAGIC:
            return _Plan(digest=_sha256_file(src), ref=None, config={}, squashfs=src)
        layout = work / "source"
        _extract(src, layout)
    if (layout / "oci-layout").is_file():
        return _oci_plan(src, layout, name, ref)
    if (layout / "manifest.json").is_file():
        return _docker_plan(src, layout, name, ref)
    what = "directory" if src.is_dir() else "archive"
    raise ImageError(
        f"{src}: not an image: the {what} has neither oci-layout (an OCI image) "
        "nor manifest.json (a docker save archive)"
    )


def _extract(archive: Path, dest: Path) -> None:
    """Unpack the regular files of a tar (optionally compressed) into ``dest``; links
    between its members become hard links, other links and special files are skipped."""
    import shutil
    import tarfile

    try:
        if not tarfile.is_tarfile(archive):
            raise ImageError(
                f"{archive}: not an image: expected an OCI image layout (a directory), "
                "an OCI or docker save archive (.tar, .tar.gz) or a squashfs file (.sqsh)"
            )
        links: list[tuple[str, str]] = []
        dest.mkdir()
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                path = _member_path(member.name)
                if path is None:
                    raise ImageError(f"{archive}: member {member.name!r} lies outside the archive")
                if not path:
                    continue
                target = dest / path
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif member.isfile():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    reader = tar.extractfile(member)
                    if reader is None:
                        continue
                    with reader, open(target, "wb") as out:
                        shutil.copyfileobj(reader, out, 1 << 20)
                elif member.issym() and not member.linkname.startswith("/"):
                    resolved = os.path.normpath(
                        os.path.join(os.path.dirname(path), member.linkname)
                    )
                    if resolved != ".." and not resolved.startswith("../"):
                        links.append((path, resolved))
                elif member.islnk() and (hard := _member_path(member.linkname)):
                    links.append((path, hard))
    except ImageError:
        raise
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
        raise ImageError(f"{archive}: cannot unpack: {exc}") from None
    # A link may point at another link: resolve until nothing more can be.
    while links:
        pending = []
        for link, linked in links:
            if (dest / linked).is_file():
                (dest / link).parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileExistsError):
                    os.link(dest / linked, dest / link)
            else:
                pending.append((link, linked))
        if len(pending) == len(links):
            break
        links = pending


def _member_path(name: str) -> str | None:
    """A tar member's path, relative and normalized ('' for the top); None outside it."""
    if name.startswith("/") or ".." in name.split("/"):
        return None
    path = os.path.normpath(name)
    return "" if path == "." else path


def _read_json(path: Path, src: Path, what: str) -> Any:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        raise ImageError(f"{src}: {what} is missing") from None
    except OSError as exc:
        raise ImageError(f"{src}: {what}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ImageError(f"{src}: {what}: not JSON: {exc}") from None


def _descriptor_blob(layout: Path, desc: Any, src: Path, what: str) -> tuple[Path, str]:
    """The file of a descriptor's blob in an OCI layout, and its digest."""
    digest = desc.get("digest") if isinstance(desc, dict) else None
    if not isinstance(digest, str) or not _DIGEST_RE.fullmatch(digest):
        raise ImageError(f"{src}: {what}: expected a descriptor with a sha256 digest, not {desc!r}")
    path = layout / "blobs" / "sha256" / digest.removeprefix("sha256:")
    if not path.is_file():
        rel = path.relative_to(layout)
        raise ImageError(f"{src}: {what}: blob {digest} is missing (no {rel})")
    return path, digest


def _oci_plan(src: Path, layout: Path, name: str | None, ref: str | None) -> _Plan:
    import hashlib

    index = _read_json(layout / "index.json", src, "index.json")
    manifests = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(manifests, builtins.list) or not all(isinstance(m, dict) for m in manifests):
        raise ImageError(f"{src}: index.json: expected a 'manifests' list of descriptors")
    if not manifests:
        raise ImageError(f"{src}: index.json lists no image")
    chosen = _choose(manifests, name, ref, src)
    desc = chosen
    for _ in range(4):
        path, digest = _descriptor_blob(layout, desc, src, "index.json")
        raw = path.read_bytes()
        if f"sha256:{hashlib.sha256(raw).hexdigest()}" != digest:
            raise ImageError(f"{src}: blob {digest} does not match its digest")
        try:
            manifest = json.loads(raw)
        except ValueError as exc:
            raise ImageError(f"{src}: manifest {digest}: not JSON: {exc}") from None
        if not isinstance(manifest, dict):
            raise ImageError(f"{src}: manifest {digest}: expected a JSON object")
        media = desc.get("mediaType") or manifest.get("mediaType")
        if media in _INDEX_TYPES or (media not in _MANIFEST_TYPES and "manifests" in manifest):
            entries = manifest.get("manifests")
            if not isinstance(entries, builtins.list) or not entries:
                raise ImageError(f"{src}: image index {digest}: expected a 'manifests' list")
            desc = _pick_platform(entries, src, f"image index {digest}")
            continue
        break
    else:
        raise ImageError(f"{src}: image indexes nest more than 4 deep")
    config_blob = _descriptor_blob(layout, manifest.get("config"), src, f"manifest {digest} config")
    layers_raw = manifest.get("layers")
    if not isinstance(layers_raw, builtins.list):
        raise ImageError(f"{src}: manifest {digest}: expected a 'layers' list")
    layers = [
        _descriptor_blob(layout, layer, src, f"manifest {digest} layer {n}")
        for n, layer in enumerate(layers_raw, 1)
    ]
    config = _config_subset(
        _read_json(config_blob[0], src, f"config {config_blob[1]}"), src, config_blob[1]
    )
    annotations = chosen.get("annotations") or {}
    own = None
    if isinstance(annotations, dict):
        for key in (_REF_NAME, _CONTAINERD_NAME):
            value = annotations.get(key)
            if isinstance(value, str) and (own := _full_ref(value)):
                break
    return _Plan(digest=digest, ref=own, config=config, config_blob=config_blob, layers=layers)


def _names(desc: dict[str, Any]) -> builtins.list[str]:
    annotations = desc.get("annotations") or {}
    if not isinstance(annotations, dict):
        return []
    return [v for k in (_REF_NAME, _CONTAINERD_NAME) if isinstance(v := annotations.get(k), str)]


def _choose(
    manifests: builtins.list[dict[str, Any]], name: str | None, ref: str | None, src: Path
) -> dict[str, Any]:
    """The descriptor of index.json that ``--name`` picks, or its only image."""
    candidates = manifests
    if name is not None and ref is not None and len(manifests) > 1:
        tag = _tag_of(ref)
        matched = [
            m
            for m in manifests
            if any(
                n == name or _full_ref(n) == ref or (_full_ref(n) is None and n == tag)
                for n in _names(m)
            )
        ]
        if not matched:
            raise ImageError(
                f"{src}: index.json has no image named {name}; it has: {_choices(manifests)}"
            )
        candidates = matched
    if len({m.get("digest") for m in candidates}) == 1:
        return candidates[0]
    if all(isinstance(m.get("platform"), dict) for m in candidates):
        return _pick_platform(candidates, src, "index.json")
    raise ImageError(
        f"{src}: index.json lists {len(candidates)} images; choose one with --name: "
        f"{_choices(candidates)}"
    )


def _choices(manifests: builtins.list[dict[str, Any]]) -> str:
    return ", ".join(
        (_names(m) or [str(m.get("digest", "?"))[:19]])[0]
        + (f" ({_platform_text(m)})" if isinstance(m.get("platform"), dict) else "")
        for m in manifests
    )


def _platform_text(desc: dict[str, Any]) -> str:
    p = desc.get("platform") or {}
    text = f"{p.get('os', '?')}/{p.get('architecture', '?')}"
    return f"{text}/{p['variant']}" if p.get("variant") else text


def _pick_platform(entries: builtins.list[Any], src: Path, where: str) -> dict[str, Any]:
    """The entry of an image index for this machine (linux, its architecture)."""
    machine = os.uname().machine
    arch, variant = _ARCHES.get(machine, (machine, ""))
    fitting = [
        e
        for e in entries
        if isinstance(e, dict)
        and isinstance(p := e.get("platform"), dict)
        and p.get("os") == "linux"
        and p.get("architecture") == arch
    ]
    exact = [e for e in fitting if e["platform"].get("variant", variant) == variant]
    if exact or fitting:
        return (exact or fitting)[0]
    found = sorted({_platform_text(e) for e in entries if isinstance(e, dict)})
    raise ImageError(f"{src}: {where} has no linux/{arch} image; it has: {', '.join(found)}")


def _docker_plan(src: Path, layout: Path, name: str | None, ref: str | None) -> _Plan:
    import hashlib

    entries = _read_json(layout / "manifest.json", src, "manifest.json")
    if (
        not isinstance(entries, builtins.list)
        or not entries
        or not all(isinstance(e, dict) for e in entries)
    ):
        raise ImageError(f"{src}: manifest.json: expected a list of images (Config, Layers)")
    chosen = entries
    if ref is not None and len(entries) > 1:
        chosen = [e for e in entries if ref in _repo_tags(e)]
        if not chosen:
            raise ImageError(
                f"{src}: manifest.json has no image named {name}; it has: "
                + ", ".join((_repo_tags(e) or ["<untagged>"])[0] for e in entries)
            )
    if len(chosen) > 1:
        raise ImageError(
            f"{src}: manifest.json lists {len(chosen)} images; choose one with --name: "
            + ", ".join((_repo_tags(e) or ["<untagged>"])[0] for e in chosen)
        )
    entry = chosen[0]
    config_name = entry.get("Config")
    layer_names = entry.get("Layers")
    if not isinstance(config_name, str):
        raise ImageError(f"{src}: manifest.json: Config: expected the config file's path")
    if not isinstance(layer_names, builtins.list) or not all(
        isinstance(n, str) for n in layer_names
    ):
        raise ImageError(f"{src}: manifest.json: Layers: expected a list of layer paths")
    config_path = _inside(layout, config_name, src, "Config")
    config = _config_subset(_read_json(config_path, src, config_name), src, config_name)
    config_blob = (config_path, _sha256_file(config_path))
    layers = []
    for layer_name in layer_names:
        path = _inside(layout, layer_name, src, "Layers")
        layers.append((path, _sha256_file(path)))
    # The digest is that of the OCI manifest made of the same blobs: it depends on
    # nothing but the archive's contents, so the same archive imports to the same image.
    digest = "sha256:" + hashlib.sha256(_manifest_bytes(config_blob, layers)).hexdigest()
    tags = _repo_tags(entry)
    return _Plan(
        digest=digest,
        ref=tags[0] if tags else None,
        config=config,
        config_blob=config_blob,
        layers=layers,
    )


def _repo_tags(entry: dict[str, Any]) -> builtins.list[str]:
    tags = entry.get("RepoTags") or []
    if not isinstance(tags, builtins.list):
        return []
    refs = []
    for tag in tags:
        if isinstance(tag, str):
            with contextlib.suppress(ImageError):
                refs.append(normalize(tag))
    return refs


def _inside(layout: Path, name: str, src: Path, what: str) -> Path:
    rel = _member_path(name)
    if not rel:
        raise ImageError(f"{src}: manifest.json: {what}: {name!r} lies outside the archive")
    path = layout / rel
    if not path.is_file():
        raise ImageError(f"{src}: manifest.json: {what}: {name} is missing")
    return path


def _config_subset(raw: Any, src: Path, what: str) -> dict[str, Any]:
    """Entrypoint, Cmd, Env, WorkingDir and User of an image config, checked."""
    if not isinstance(raw, dict):
        raise ImageError(f"{src}: {what}: expected an image config (a JSON object)")
    conf = raw.get("config") or {}
    if not isinstance(conf, dict):
        raise ImageError(f"{src}: {what}: config: expected a JSON object")
    out: dict[str, Any] = {}
    for key in _CONFIG_LISTS:
        value = conf.get(key)
        if value is None:
            continue
        if not isinstance(value, builtins.list) or not all(isinstance(v, str) for v in value):
            raise ImageError(f"{src}: {what}: config.{key}: expected a list of strings")
        out[key] = value
    for key in _CONFIG_STRINGS:
        value = conf.get(key)
        if value in (None, ""):
            continue
        if not isinstance(value, str):
            raise ImageError(f"{src}: {what}: config.{key}: expected a string")
        out[key] = value
    return out


def _sha256_file(path: Path) -> str:
    import hashlib

    try:
        with open(path, "rb") as f:
            return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as exc:
        raise ImageError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _layer_type(path: Path) -> str:
    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith(_GZIP_MAGIC):
        return _LAYER_TAR + "+gzip"
    if head == _ZSTD_MAGIC:
        return _LAYER_TAR + "+zstd"
    return _LAYER_TAR


def _manifest_bytes(config: tuple[Path, str], layers: builtins.list[tuple[Path, str]]) -> bytes:
    """An OCI manifest of these blobs (media types from their magic bytes), canonical JSON."""
    manifest = {
        "schemaVersion": 2,
        "mediaType": _OCI_MANIFEST,
        "config": {
            "mediaType": _OCI_CONFIG,
            "digest": config[1],
            "size": config[0].stat().st_size,
        },
        "layers": [
            {"mediaType": _layer_type(path), "digest": digest, "size": path.stat().st_size}
            for path, digest in layers
        ],
    }
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


# --------------------------------------------------------------------------- building


def _build(src: Path, plan: _Plan, work: Path, out: Path) -> None:
    """Unpack the plan's layers with umoci and squash the root file system into ``out``."""
    import hashlib

    missing = tools_missing()
    if missing:
        raise ImageError(
            f"{src}: importing an OCI or docker image needs Debian's {' and '.join(missing)} "
            f"(apt-get install {' '.join(missing)})"
        )
    assert plan.config_blob is not None
    # umoci addresses an image by a tag of a layout: a staging layout holds the one
    # manifest to unpack (OCI media types, whatever the source's), linking the blobs.
    stage = work / "layout"
    blobs = stage / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (stage / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}\n')
    _link(plan.config_blob[0], blobs / plan.config_blob[1].removeprefix("sha256:"))
    layers = []
    for n, (path, digest) in enumerate(plan.layers, 1):
        if _layer_type(path).endswith("+zstd"):
            # umoci before 0.5 cannot read zstd layers: give it the plain tar.
            path, digest = _unzstd(path, work / f"layer-{n}.tar", src)
        _link(path, blobs / digest.removeprefix("sha256:"))
        layers.append((blobs / digest.removeprefix("sha256:"), digest))
    manifest = _manifest_bytes(
        (blobs / plan.config_blob[1].removeprefix("sha256:"), plan.config_blob[1]), layers
    )
    manifest_hex = hashlib.sha256(manifest).hexdigest()
    (blobs / manifest_hex).write_bytes(manifest)
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": _OCI_MANIFEST,
                "digest": f"sha256:{manifest_hex}",
                "size": len(manifest),
                "annotations": {_REF_NAME: _STAGE_TAG},
            }
        ],
    }
    (stage / "index.json").write_text(json.dumps(index))
    rootless = os.geteuid() != 0
    bundle = work / "bundle"
    _tool(
        src,
        [
            "umoci",
            "unpack",
            *(["--rootless"] if rootless else []),
            "--image",
            f"{stage}:{_STAGE_TAG}",
            str(bundle),
        ],
    )
    rootfs = bundle / "rootfs"
    _write_environment(rootfs, plan.config.get("Env") or [], src)
    squash = ["mksquashfs", str(rootfs), str(out), "-noappend", "-quiet", "-no-progress"]
    if rootless:
        # Unpacked rootless, every file is the importer's: own them by root, as enroot does.
        squash.append("-all-root")
    try:
        _tool(src, [*squash, "-comp", "lz4"])
    except ImageError as exc:
        if "lz4" not in str(exc):
            raise
        _tool(src, squash)


def _tool(src: Path, argv: builtins.list[str]) -> None:
    import subprocess

    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    except OSError as exc:
        raise ImageError(f"{src}: cannot run {argv[0]}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = [
            line.strip().lstrip("\u2a2f").strip()  # umoci's error mark
            for line in (done.stderr + done.stdout).splitlines()
            if line.strip()
        ]
        detail = "; ".join(said[-3:]) or f"exit status {done.returncode}"
        raise ImageError(f"{src}: {argv[0]} {argv[1]} failed: {detail}")


def _unzstd(path: Path, out: Path, src: Path) -> tuple[Path, str]:
    import shutil
    import subprocess

    if shutil.which("zstd") is None:
        raise ImageError(
            f"{src}: a zstd-compressed layer needs Debian's zstd (apt-get install zstd)"
        )
    with open(out, "wb") as f:
        done = subprocess.run(
            ["zstd", "-d", "-q", "-c", str(path)], stdout=f, stderr=subprocess.PIPE, text=True
        )
    if done.returncode != 0:
        raise ImageError(f"{src}: layer {path.name}: zstd failed: {done.stderr.strip()}")
    return out, _sha256_file(out)


def _link(src: Path, dst: Path) -> None:
    if dst.exists():
        return
    try:
        os.link(src, dst)
    except OSError:
        os.symlink(os.path.abspath(src), dst)


def _write_environment(rootfs: Path, env: builtins.list[str], src: Path) -> None:
    """Append the image's Env to its /etc/environment, as enroot import does.

    The file is written without following symbolic links: they are the image's,
    and would point into the host's file system here.
    """
    lines = [e for e in env if "\n" not in e]
    if not lines:
        return
    etc = rootfs / "etc"
    if not etc.exists() and not etc.is_symlink():
        etc.mkdir(mode=0o755)
    if etc.is_symlink() or not etc.is_dir():
        raise ImageError(f"{src}: /etc of the image is not a directory: cannot write its Env")
    path = etc / "environment"
    before = b""
    if path.is_symlink():
        path.unlink()
    elif path.is_file():
        before = path.read_bytes()
    if before and not before.endswith(b"\n"):
        before += b"\n"
    text = before + "".join(f"{line}\n" for line in lines).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(text)


def _copy(src: Path, out: Path) -> bool:
    """A squashfs image into the store: always a copy (a hard link would let a change
    of the source file in place change the stored image under the same digest).
    False: never a link."""
    import shutil

    try:
        shutil.copyfile(src, out)
    except OSError as exc:
        raise ImageError(f"{src}: cannot copy into the store: {exc.strerror or exc}") from None
    return False


def _rmtree(path: Path) -> None:
    import shutil

    if os.geteuid() != 0:
        # A rootless unpack keeps the image's read-only directories read-only.
        for dirpath, dirnames, _ in os.walk(path):
            for name in dirnames:
                sub = os.path.join(dirpath, name)
                if not os.path.islink(sub):
                    with contextlib.suppress(OSError):
                        os.chmod(sub, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def _clean_stale(tmp: Path) -> None:
    """Remove what imports killed before they could clean up left in ``tmp``."""
    try:
        entries = builtins.list(tmp.iterdir())
    except OSError:
        return
    for entry in entries:
        match = re.fullmatch(r"import-(\d+)-.*", entry.name)
        if match is None:
            continue
        try:
            os.kill(int(match[1]), 0)
        except ProcessLookupError:
            _rmtree(entry)
        except OSError:
            pass

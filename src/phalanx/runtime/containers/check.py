"""What this machine lacks to run images: the Debian packages to install, in one line."""

from __future__ import annotations

import os
import shutil

__all__ = ["missing"]


def _kernel_has(fs: str) -> bool:
    try:
        with open("/proc/filesystems", encoding="ascii") as fh:
            return any(line.split()[-1] == fs for line in fh if line.strip())
    except OSError:
        return True  # cannot tell: the mount will say


def missing(*, privileged: bool) -> str:
    """Empty when images can run (as root: loop devices, squashfs and overlayfs; as
    another user: squashfuse, FUSE and user namespaces too); else what to install or
    enable."""
    packages: list[str] = []
    if shutil.which("unsquashfs") is None or shutil.which("mksquashfs") is None:
        packages.append("squashfs-tools")
    if shutil.which("umoci") is None:
        packages.append("umoci")
    if not privileged:
        if shutil.which("squashfuse") is None:
            packages.append("squashfuse")
        if shutil.which("fusermount3") is None:
            packages.append("fuse3")
    problems: list[str] = []
    if packages:
        problems.append(f"'apt-get install {' '.join(packages)}'")
    if privileged and not os.path.exists("/dev/loop-control"):
        problems.append("loop devices (/dev/loop-control) are available")
    if not _kernel_has("overlay"):
        problems.append("the kernel has overlayfs ('modprobe overlay')")
    return " and ".join(problems)

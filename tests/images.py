"""The examples' PyTorch image for the tests that train in it, built once per machine.

``examples/containers/build-images.sh --python`` takes half a minute (Debian's
python3 from the archive, the venv's torch copied in); the image is kept under
``/var/tmp/phalanx-test-images/<key>``, where the key hashes what goes into it
(the script, ``train_distributed.py``, the torch version), so a change to any
of them builds a new one.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.needs import require

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "containers" / "build-images.sh"
CACHE = Path(os.environ.get("PHALANX_TEST_IMAGES", "/var/tmp/phalanx-test-images"))


def pytorch_image() -> Path:
    """``pytorch.sqsh``: Debian bookworm, python3, the venv's torch and
    ``/workspace/train_distributed.py``."""
    require(shutil.which("mmdebstrap") is not None, "mmdebstrap (Debian package mmdebstrap)")
    require(shutil.which("mksquashfs") is not None, "mksquashfs (Debian package squashfs-tools)")
    require(shutil.which("umoci") is not None, "umoci (Debian package umoci)")
    try:
        torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("needs torch in the venv (pip install torch==2.13.0) to copy into the image")
    key = hashlib.sha256()
    for path in (SCRIPT, REPO / "examples" / "slurm" / "train_distributed.py"):
        key.update(path.read_bytes())
    key.update(torch.encode())
    folder = CACHE / key.hexdigest()[:16]
    image = folder / "pytorch.sqsh"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not image.exists():
            done = subprocess.run(
                ["bash", str(SCRIPT), "--python", "-o", str(folder)],
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert done.returncode == 0, f"build-images.sh --python: {done.stdout}{done.stderr}"
    return image

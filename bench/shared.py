"""Where the benchmarks find ``../shared``, and how they say what they skip without it.

``../shared`` lies beside the checkout (``$PHALANX_SHARED`` names another folder, as
for the tests): the public traces under ``traces/`` (``$PHALANX_TRACES`` names another
folder, as for ``phalanx sim``) and the real Slurm peer under ``peers/slurm/``. A
user's clone has none: a benchmark checks for what it reads before it starts, and
where that is absent writes one line on stderr naming the missing path, skips that
part (``{"skipped": ...}`` in its JSON) and still exits 0 with the JSON of the rest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The tests' finder of ../shared, so that both read $PHALANX_SHARED the same way.
from tests.shared import SHARED_ENV, shared_path, shared_root

__all__ = [
    "SHARED_ENV",
    "TRACES_ENV",
    "absent",
    "note",
    "shared_path",
    "shared_root",
    "skipped",
    "slurm_off",
    "slurm_peer",
    "start_slurm",
    "stop_slurm",
    "traces",
]

TRACES_ENV = "PHALANX_TRACES"
"""Names the traces folder (``phalanx sim`` reads it too)."""


def traces() -> Path:
    """The traces folder: ``$PHALANX_TRACES``, else ``traces`` of the shared folder.

    Given to ``phalanx.sim`` explicitly: its own default is found from where the
    package is installed, not from this checkout."""
    env = os.environ.get(TRACES_ENV)
    return Path(env).expanduser() if env else shared_path("traces")


def slurm_peer() -> Path:
    """The real Slurm peer's folder (``start-slurm.sh``, ``stop-slurm.sh``)."""
    return shared_path("peers", "slurm")


def absent(path: Path) -> str | None:
    """Why ``path`` cannot be read (naming it), or None when it is there."""
    if path.exists():
        return None
    root = shared_root()
    if not path.is_relative_to(root) or root.is_dir():
        return f"{path} is absent"
    env = os.environ.get(SHARED_ENV)
    where = f"{SHARED_ENV}={env} is not a folder" if env else "no ../shared beside the checkout"
    return f"{path} is absent ({where})"


def note(message: str) -> None:
    """One line on stderr, prefixed with the benchmark's name."""
    sys.stderr.write(f"{Path(sys.argv[0]).name}: {message}\n")
    sys.stderr.flush()


def skipped(what: str, *paths: Path) -> dict[str, str] | None:
    """None when every path is there. Else the line on stderr that ``what`` is skipped
    and which path is missing, and ``{"skipped": ...}`` for the JSON."""
    for path in paths:
        reason = absent(path)
        if reason is not None:
            note(f"skipping {what}: {reason}")
            return {"skipped": f"{what}: {reason}"}
    return None


def start_slurm() -> dict[str, str] | None:
    """Start the real Slurm peer; ``{"skipped": ...}`` (said on stderr) when it is
    absent or does not start, None when it runs (stop it with :func:`stop_slurm`)."""
    peer = slurm_peer()
    missing = skipped("the real Slurm peer", peer / "start-slurm.sh")
    if missing is not None:
        return missing
    done = subprocess.run(
        ["bash", str(peer / "start-slurm.sh")], capture_output=True, text=True, check=False
    )
    if done.returncode == 0:
        return None
    stop_slurm()  # whatever it started before it failed
    lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
    reason = f"{peer / 'start-slurm.sh'} failed (exit {done.returncode})" + (
        f": {lines[-1][:300]}" if lines else ""
    )
    note(f"skipping the real Slurm peer: {reason}")
    return {"skipped": f"the real Slurm peer: {reason}"}


def slurm_off(why: str) -> dict[str, str]:
    """``{"skipped": ...}`` for the Slurm part not asked for (``why``: the option); said
    on stderr, naming the missing script, when the peer is absent (as ``make bench``
    leaves it out then)."""
    missing = skipped("the real Slurm peer", slurm_peer() / "start-slurm.sh")
    return missing or {"skipped": f"the real Slurm peer: {why}"}


def stop_slurm() -> None:
    """Stop the daemons :func:`start_slurm` started."""
    script = slurm_peer() / "stop-slurm.sh"
    if script.exists():
        subprocess.run(["bash", str(script)], capture_output=True, check=False)

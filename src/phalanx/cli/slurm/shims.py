"""``phalanx shims DIR``: executable ``sbatch``, ``squeue``, ... wrappers for tools that call them.

Each wrapper execs this Python with ``-m phalanx.cli.main TOOL "$@"``. Inside a
job the runtime's own ``srun`` comes first on ``PATH``; the ``srun`` written here
is the login shell's: it allocates and runs a step, or runs one in a job
(``--jobid``, ``salloc``'s shell).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

__all__ = ["TOOLS", "write_shims"]

TOOLS = (
    "sbatch",
    "srun",
    "salloc",
    "sattach",
    "squeue",
    "scancel",
    "sinfo",
    "sacct",
    "sstat",
    "scontrol",
    "sprio",
    "sshare",
)


def write_shims(directory: Path, python: str | None = None) -> list[Path]:
    """Write the wrappers into ``directory`` (created if missing); the paths written."""
    python = python or sys.executable
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for tool in TOOLS:
        path = directory / tool
        path.write_text(
            f"#!/bin/sh\n# phalanx shim for {tool}\n"
            f'exec {shlex.quote(python)} -m phalanx.cli.main {tool} "$@"\n'
        )
        written.append(path)
    for path in written:
        path.chmod(0o755)
    return written


def run(directory: str) -> int:
    target = Path(directory).expanduser()
    for path in write_shims(target):
        sys.stdout.write(f"wrote {path}\n")
    absolute = os.path.abspath(target)
    sys.stdout.write(f'Put them on PATH: export PATH="{absolute}:$PATH"\n')
    return 0

"""``phalanx shims DIR``: executable ``sbatch``, ``squeue``, ... wrappers for tools that call them.

Each wrapper execs this Python with ``-m phalanx.cli.main TOOL "$@"``. ``srun``
is provided inside jobs by the runtime; the ``srun`` written here only says,
as Slurm's does outside an allocation, that it needs one.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

__all__ = ["TOOLS", "write_shims"]

TOOLS = ("sbatch", "squeue", "scancel", "sinfo", "sacct", "scontrol", "sprio", "sshare")

_SRUN = """#!/bin/sh
# phalanx shim: srun runs inside a phalanx job (the runtime puts its own srun on PATH).
echo "srun: error: Unable to allocate resources: No allocation found (phalanx: srun works inside \
a job; submit with sbatch)" >&2
exit 1
"""


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
    srun = directory / "srun"
    srun.write_text(_SRUN)
    written.append(srun)
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

"""``phalanx shims DIR``: executable ``sbatch``, ``squeue``, ... wrappers for tools that call them.

The read-only tools (``squeue``, ``sinfo``, ``sacct``, ``scontrol``, ``sprio``,
``sshare``, ``scancel``) are typed many times a day, so their wrappers are the
fastest form: this Python started with ``-I -S`` (no ``site``, so none of the
venv's ``site-packages`` and ``.pth`` work, and no ``runpy``), with this package's
parent directory, as it is when the shims are written, put first on
``sys.path``, running :func:`phalanx.cli.fast.shim`, which loads ``site`` itself
only when the command needs click. The other wrappers exec this Python with
``-m phalanx.cli.main TOOL "$@"``. Inside a job the runtime's own ``srun`` comes
first on ``PATH``; the ``srun`` written here is the login shell's: it allocates
and runs a step, or runs one in a job (``--jobid``, ``salloc``'s shell).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import phalanx

__all__ = ["FAST_TOOLS", "TOOLS", "write_shims"]

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
FAST_TOOLS = frozenset({"squeue", "scancel", "sinfo", "sacct", "scontrol", "sprio", "sshare"})
"""The tools whose wrappers start Python with ``-I -S`` (:mod:`phalanx.cli.fast`)."""


def write_shims(directory: Path, python: str | None = None) -> list[Path]:
    """Write the wrappers into ``directory`` (created if missing); the paths written."""
    python = python or sys.executable
    source = os.path.dirname(os.path.dirname(os.path.abspath(phalanx.__file__)))
    entry = (
        f"import sys; sys.path.insert(0, {source!r}); "
        "from phalanx.cli.fast import shim; sys.exit(shim())"
    )
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for tool in TOOLS:
        path = directory / tool
        if tool in FAST_TOOLS:
            command = f"{shlex.quote(python)} -I -S -c {shlex.quote(entry)} {tool}"
        else:
            command = f"{shlex.quote(python)} -m phalanx.cli.main {tool}"
        path.write_text(f'#!/bin/sh\n# phalanx shim for {tool}\nexec {command} "$@"\n')
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

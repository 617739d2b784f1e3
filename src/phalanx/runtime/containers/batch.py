"""``sbatch --container-image``: the batch script in its image, as pyxis runs it.

``python -I -m phalanx.runtime.containers.batch -- /bin/sh -c WRAPPER SCRIPT ARGS``
is the batch task's command when sbatch was given pyxis' options
(``slurm.json``'s ``container``). The script, bind-mounted read-only at its own
path, runs in the image with the options' semantics (see
:mod:`phalanx.runtime.containers.pyxis`); this process enters the container and
execs the shell in place, so the batch shell keeps its pid, group and signals.
``srun`` does not work inside (the image has no phalanx), as under pyxis.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

from phalanx.runtime.containers import pyxis
from phalanx.runtime.containers.enter import ContainerError, enter


def _say(line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode(errors="replace"))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] != "--":
        _say("usage: python -I -m phalanx.runtime.containers.batch -- COMMAND...")
        return 2
    command = args[1:]
    context = os.environ.get("PHALANX_SLURM_CONTEXT", "")
    try:
        with open(context, encoding="utf-8") as fh:
            ctx = json.load(fh)
    except (OSError, ValueError) as exc:
        _say(f"slurmstepd: error: pyxis: cannot read the job's context {context}: {exc}")
        return 1
    jobdir = os.path.dirname(os.path.abspath(context))
    node = os.environ.get("SLURMD_NODENAME") or (ctx.get("nodes") or [{}])[0].get("name", "")
    pairs = [(str(option), value) for option, value in ctx.get("container") or ()]
    try:
        opts = pyxis.parse(pairs, os.environ)
        spec = pyxis.task_spec(
            opts, ctx=ctx, jobdir=jobdir, node=node, env=os.environ, cwd=os.getcwd()
        )
    except pyxis.PyxisError as exc:
        for line in pyxis.error_lines(exc):
            _say(line)
        return 1
    script = os.path.join(jobdir, "script")
    spec["mounts"] = [*spec["mounts"], {"source": script, "target": script, "readOnly": True}]
    try:
        env = enter(spec)
    except (ContainerError, OSError) as exc:
        _say(f"slurmstepd: error: pyxis: {exc}")
        return 1
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        _say(f"slurmstepd: error: pyxis: {command[0]}: {exc.strerror}")
        return 127 if isinstance(exc, FileNotFoundError) else 126
    return 126  # pragma: no cover - execvpe does not return


if __name__ == "__main__":
    sys.exit(main())

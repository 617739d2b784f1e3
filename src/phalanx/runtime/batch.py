"""A Slurm job's launch, made runnable: the files its job directory needs and its tasks.

Shared by the local and the Ray runtime. :func:`slurm_files` computes the
batch environment (:func:`phalanx.dialects.slurm.environment.batch_env`) in the
control plane, so that the supervisor stays standard library only, and turns a
batch script into ``tasks[0]``; the runtime writes the files where the job
directory is (this machine, or the node that runs the batch script).
:func:`write_bin` writes the ``srun`` and ``scontrol`` wrappers batch scripts
find first on their ``PATH``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from phalanx.runtime.spec import LaunchSpec

__all__ = ["JobFile", "slurm_files", "write_bin", "write_files"]

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
BATCH_CONTAINER = "phalanx.runtime.containers.batch"
"""The module that puts a batch script in its image (``sbatch --container-image``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class JobFile:
    """A file of a job directory: its name there, its text and its mode."""

    name: str
    text: str
    mode: int


def slurm_files(
    spec: LaunchSpec, jobdir: str, bindir: str, path: str | None = None
) -> tuple[LaunchSpec, list[JobFile]]:
    """``slurm.json`` and ``script`` for ``jobdir``, and the spec whose ``tasks[0]`` runs
    the batch script (every task, for a job without one, gets the Slurm environment).

    ``SLURM_TASK_PID`` comes from the shell's ``$$`` (a ``sh -c`` that ``exec``-s the
    script, so the pid is the script's). ``path`` is the ``PATH`` the tasks start
    from (default: the job's, else this process's).
    """
    env_path = spec.env.get("PATH") or path or os.environ.get("PATH") or DEFAULT_PATH
    extra: dict[str, str] = {"PATH": f"{bindir}:{env_path}"}
    files: list[JobFile] = []
    if spec.slurm is not None:
        from phalanx.dialects.slurm.environment import batch_env

        files.append(JobFile("slurm.json", json.dumps(spec.slurm), 0o600))
        extra.update(batch_env(spec.slurm))
        extra["PHALANX_SLURM_CONTEXT"] = os.path.join(jobdir, "slurm.json")
    if spec.script is None:
        tasks = tuple(dataclasses.replace(t, env={**extra, **t.env}) for t in spec.tasks)
        return dataclasses.replace(spec, tasks=tasks), files
    files.append(JobFile("script", spec.script, 0o755))
    script = os.path.join(jobdir, "script")
    first = spec.tasks[0]
    task = dataclasses.replace(first, env={**extra, **first.env})
    command: tuple[str, ...] = (script, *spec.command)
    if spec.slurm is not None:
        wrapper = 'SLURM_TASK_PID=$$; export SLURM_TASK_PID; exec "$0" "$@"'
        command = ("/bin/sh", "-c", wrapper, *command)
        runtime = (spec.slurm.get("containers") or {}).get("runtime")
        if spec.slurm.get("container") and runtime == "builtin":
            # sbatch --container-image: the batch script runs in the image (pyxis).
            command = (sys.executable, "-I", "-m", BATCH_CONTAINER, "--", *command)
    return dataclasses.replace(spec, command=command, tasks=(task,)), files


def write_files(jobdir: Path, files: list[JobFile]) -> None:
    """Create each file in ``jobdir``; an existing one is an error (never overwritten)."""
    for item in files:
        fd = os.open(jobdir / item.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, item.mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(item.text)


def write_bin(bindir: Path, python: str) -> Path:
    """``srun`` and ``scontrol`` in ``bindir``, run by ``python`` (rewritten only when
    they differ)."""
    for name, module in (
        ("srun", "phalanx.runtime.srun"),
        ("scontrol", "phalanx.runtime.scontrol"),
    ):
        text = f'#!/bin/sh\nexec "{python}" -I -m {module} "$@"\n'
        target = bindir / name
        try:
            if target.read_text(encoding="utf-8") == text:
                continue
        except OSError:
            pass
        bindir.mkdir(parents=True, exist_ok=True)
        tmp = bindir / f".{name}.tmp.{os.getpid()}"
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o755)
        os.replace(tmp, target)
    return bindir

"""Warnings about batch scripts that Slurm would run, but not as their authors meant.

The one checked today is common in AI training scripts: ``srun torchrun ...``
in a job with several tasks per node. srun starts one copy of its command per
task, so each node gets several torchrun agents, each starting
``--nproc_per_node`` workers; the agents beyond one per node cannot join the
``--nnodes`` rendezvous and fail the step, under Slurm as under phalanx.
"""

from __future__ import annotations

import os
import shlex

from phalanx.dialects.slurm.options import SbatchOptions

__all__ = ["script_warnings"]

_TASK_OPTIONS = ("--ntasks", "--ntasks-per-node")
_SRUN_VALUE_OPTIONS = frozenset(
    [
        "-N",
        "-n",
        "-c",
        "-o",
        "-e",
        "-J",
        "-D",
        "-p",
        "-A",
        "-q",
        "-t",
        "-w",
        "-x",
        "-C",
        "-G",
        "-m",
        "--nodes",
        "--ntasks",
        "--ntasks-per-node",
        "--cpus-per-task",
        "--output",
        "--error",
        "--job-name",
        "--chdir",
        "--partition",
        "--account",
        "--qos",
        "--time",
        "--nodelist",
        "--exclude",
        "--constraint",
        "--gpus",
        "--distribution",
        "--export",
        "--mpi",
        "--cpu-bind",
        "--mem",
        "--mem-per-cpu",
        "--mem-per-gpu",
        "--gpus-per-task",
        "--gpus-per-node",
        "--container-image",
        "--container-mounts",
        "--container-name",
        "--container-workdir",
    ]
)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with ``\\`` continuations joined, each with its first line's number."""
    out: list[tuple[int, str]] = []
    buffer: list[str] = []
    start = 0
    for number, line in enumerate(text.split("\n"), start=1):
        if not buffer:
            start = number
        if line.endswith("\\") and not line.endswith("\\\\"):
            buffer.append(line[:-1])
            continue
        buffer.append(line)
        out.append((start, " ".join(buffer)))
        buffer = []
    if buffer:
        out.append((start, " ".join(buffer)))
    return out


def _tasks_per_node(options: SbatchOptions) -> int:
    if options.ntasks_per_node:
        return int(options.ntasks_per_node)
    nodes = options.nodes[0] if isinstance(options.nodes, tuple) else options.nodes
    if options.ntasks and nodes:
        return -(-int(options.ntasks) // int(nodes))
    return 1


def script_warnings(text: str, options: SbatchOptions, source: str) -> list[str]:
    """Warnings for ``text`` run with ``options`` (already merged from every layer)."""
    per_node = _tasks_per_node(options)
    if per_node <= 1:
        return []
    warnings = []
    for number, line in _logical_lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            words = shlex.split(stripped, comments=True)
        except ValueError:
            continue
        if words[:1] == ["exec"]:
            words = words[1:]
        if not words or os.path.basename(words[0]) != "srun":
            continue
        i, limits_tasks = 1, False
        while i < len(words) and words[i].startswith("-"):
            word = words[i]
            if word.startswith("--"):
                name = word.split("=", 1)[0]
                limits_tasks = limits_tasks or name in _TASK_OPTIONS
                if "=" not in word and name in _SRUN_VALUE_OPTIONS:
                    i += 1
            else:
                limits_tasks = limits_tasks or word[:2] == "-n"
                if len(word) == 2 and word in _SRUN_VALUE_OPTIONS:
                    i += 1
            i += 1
        program = os.path.basename(words[i]) if i < len(words) else ""
        torch_module = program.startswith("python") and words[i + 1 : i + 3] == [
            "-m",
            "torch.distributed.run",
        ]
        if limits_tasks or not (program == "torchrun" or torch_module):
            continue
        warnings.append(
            f"{source}: line {number}: srun starts one torchrun per task, {per_node} per node, "
            "and each torchrun starts its own --nproc_per_node workers: the agents beyond one "
            "per node cannot join the --nnodes rendezvous and the step fails. "
            "Fix: srun --ntasks-per-node=1 torchrun ..."
        )
    return warnings

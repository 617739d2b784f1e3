"""``srun`` on the components of a Slurm heterogeneous job: ``--het-group`` and ``a : b``.

In a heterogeneous job a step runs on component 0 unless ``--het-group=EXPR``
(``1``, ``0,2``, ``1-3``, ``[0-1]``; ``--pack-group`` is its old name) names
others, or the command line is split into several components by ``:``
(``srun -n1 server : -n4 client``: part N runs on component N unless it gives its
own ``--het-group``; a part without a command runs the next part's). Each
component's tasks are laid out on its own allocation and numbered after the
previous ones' (:func:`phalanx.dialects.slurm.environment.het_step_env`); the step
has one id. The refusals are srun 22.05's, word for word.

In a job that is not heterogeneous, ``--het-group=0`` and ``:`` are refused
(srun 22.05 refuses the first; the second, a heterogeneous step over one
allocation, phalanx does not support yet).

Standard library and :mod:`phalanx.dialects.slurm.environment` only: :mod:`srun
<phalanx.runtime.srun>` imports it in every step.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from phalanx.dialects.slurm.environment import StepRequest, TaskEnv, het_step_env

__all__ = ["HetError", "HetStep", "parse_groups", "plan"]

SEPARATOR = ":"


class HetError(Exception):
    """A step srun refuses: its message lines (with their ``srun: ...`` prefix) and exit
    status."""

    def __init__(self, *lines: str, code: int = 1) -> None:
        super().__init__(lines[0])
        self.lines = lines
        self.code = code


def parse_groups(text: str) -> list[int]:
    """The component indices of a ``--het-group`` expression, in order."""
    body = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    out: list[int] = []
    for item in body.split(","):
        m = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", item)
        if m is None or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise HetError(
                f"srun: error: _parse_single_range: Invalid range: `{item}'",
                f"srun: error: Invalid --het-group value: {text}",
            )
        low = int(m.group(1))
        high = int(m.group(2)) if m.group(2) is not None else low
        if high - low > 1024:
            raise HetError(f"srun: error: Invalid --het-group value: {text}")
        out.extend(range(low, high + 1))
    return sorted(set(out))


@dataclass
class HetStep:
    """The components one srun runs on, each with its options and command."""

    groups: list[tuple[int, Any]]
    """``(component, options)``, in the step's order (options: an ``SrunOptions``)."""
    commands: dict[int, list[str]] = field(default_factory=dict)
    """Each component's command, once :meth:`tasks` laid the step out."""

    def tasks(self, ctx: Mapping[str, Any], request: StepRequest) -> list[TaskEnv]:
        """The step's tasks: ``request`` (its id, ports, umask) with each component's own
        sizes (``-N``, ``-n``, ``--ntasks-per-node``, ``-c``, ``--gpus-per-task``)."""
        requests = [
            (
                index,
                replace(
                    request,
                    nodes=opts.nodes,
                    ntasks=opts.ntasks,
                    ntasks_per_node=opts.ntasks_per_node,
                    cpus_per_task=opts.cpus_per_task or _env_cpus_per_task(),
                    gpus_per_task=opts.gpus_per_task,
                ),
            )
            for index, opts in self.groups
        ]
        self.commands = {index: list(opts.command) for index, opts in self.groups}
        return het_step_env(ctx, requests)

    def record(self, tasks: list[TaskEnv]) -> dict[str, Any]:
        """What the step's record (``steps/S.json``) adds for sacct: each task's
        component and each component's command name (``N+1.S`` rows)."""
        return {
            "taskComponents": [t.component for t in tasks],
            "componentNames": {
                str(index): os.path.basename(command[0]) if command else ""
                for index, command in self.commands.items()
            },
        }

    def command(self, task: TaskEnv, default: list[str]) -> list[str]:
        """The command of ``task`` (its component's; ``default`` when it has none)."""
        return self.commands.get(task.component) or default


def plan(opts: Any, ctx: Mapping[str, Any], parse: Callable[[list[str]], Any]) -> HetStep | None:
    """How the srun ``opts`` (``SrunOptions``, parsed by ``parse``) runs in the job of
    ``ctx``: on components of a heterogeneous job (a :class:`HetStep`), or ``None`` for
    an ordinary step. Raises :class:`HetError` as srun would refuse it."""
    components = list(ctx.get("components") or [])
    parts = _split(opts, parse)
    if not components:
        if len(parts) > 1:
            raise HetError(
                "srun: error: heterogeneous steps (srun ... : ...) in a job that is not "
                "heterogeneous are not supported by phalanx yet"
            )
        if opts.het_group is None:
            return None
        groups = parse_groups(opts.het_group)
        if max(groups) > 0:
            raise HetError(
                "srun: error: Requested het-group offset exceeds highest hetjob index "
                f"({max(groups)} > 0)"
            )
        raise HetError(
            "srun: error: No directives to start application on any available hetjob components"
        )
    highest = len(components) - 1
    chosen: list[tuple[int, Any]] = []
    for position, part in enumerate(parts):
        if part.het_group is not None:
            indices = parse_groups(part.het_group)
            if max(indices) > highest:
                raise HetError(
                    "srun: error: Requested het-group offset exceeds highest hetjob index "
                    f"({max(indices)} > {highest})"
                )
        else:
            if position > highest:
                raise HetError(
                    "srun: error: Attempt to run a job step with het group value of "
                    f"{position}, but the job allocation has maximum value of {highest}"
                )
            indices = [position]
        chosen += [(index, part) for index in indices]
    seen = [index for index, _ in chosen]
    if len(set(seen)) != len(seen):
        raise HetError("srun: fatal: Duplicate het groups in single srun not supported")
    # A part without a command runs the next one's (srun -n2 : -n1 hostname).
    command: list[str] = []
    for part in reversed(parts):
        if part.command:
            command = list(part.command)
        else:
            part.command = list(command)
    for part in parts[1:]:
        opts.label = opts.label or part.label
        opts.kill_on_bad_exit = opts.kill_on_bad_exit or part.kill_on_bad_exit
    return HetStep(groups=chosen)


def _env_cpus_per_task() -> int | None:
    """``SRUN_CPUS_PER_TASK`` (sbatch's ``-c`` for srun), as srun reads it."""
    value = os.environ.get("SRUN_CPUS_PER_TASK", "")
    return int(value) if value.isascii() and value.isdigit() and int(value) > 0 else None


def _split(opts: Any, parse: Callable[[list[str]], Any]) -> list[Any]:
    """The components of an srun command line: ``opts`` (its command cut at the first
    ``:``) and each part after a ``:``, parsed with ``parse``."""
    words = list(opts.command)
    if SEPARATOR not in words:
        return [opts]
    cut = words.index(SEPARATOR)
    opts.command = words[:cut]
    parts = [opts]
    rest = words[cut + 1 :]
    while True:
        if SEPARATOR in rest:
            cut = rest.index(SEPARATOR)
            chunk, rest = rest[:cut], rest[cut + 1 :]
        else:
            chunk, rest = rest, []
        parts.append(parse(chunk))
        if not rest and SEPARATOR not in chunk:
            break
    return parts

"""The Slurm dialect: sbatch scripts and options, unchanged, as phalanx submissions.

* :func:`build_request` / :func:`to_submission` (``sbatch``): command line, ``#SBATCH``
  directives and ``SBATCH_*`` variables -> :class:`SbatchRequest` -> ``JobSubmission``;
* :func:`parse_sbatch_args` (``options``), :func:`read_directives` (``script``);
* :func:`parse_array`, :func:`parse_dependency` / :func:`evaluate`,
  :func:`expand_pattern`, :func:`parse_memory_mb`: the pieces the server reuses;
* :func:`read_slurm_conf`: ``slurm.conf`` -> Nodes, ResourceFlavors, ClusterQueues.

Every error is a :class:`phalanx.errors.Invalid` worded as sbatch words it.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_LAZY: dict[str, str] = {
    "DepTerm": "phalanx.dialects.slurm.dependency",
    "Dependee": "phalanx.dialects.slurm.dependency",
    "Dependency": "phalanx.dialects.slurm.dependency",
    "Directive": "phalanx.dialects.slurm.script",
    "ExportSpec": "phalanx.dialects.slurm.options",
    "FEATURE_LABEL": "phalanx.dialects.slurm.sbatch",
    "GPU_TYPE_LABEL": "phalanx.dialects.slurm.sbatch",
    "GpuCount": "phalanx.dialects.slurm.options",
    "GresSpec": "phalanx.dialects.slurm.options",
    "MAX_ARRAY_SIZE": "phalanx.dialects.slurm.arrays",
    "NO_VAL": "phalanx.dialects.slurm.patterns",
    "PARTITION_LABEL": "phalanx.dialects.slurm.slurmconf",
    "PatternFields": "phalanx.dialects.slurm.patterns",
    "SbatchOptions": "phalanx.dialects.slurm.options",
    "SbatchRequest": "phalanx.dialects.slurm.sbatch",
    "ScriptDirectives": "phalanx.dialects.slurm.script",
    "WRAP_HEADER": "phalanx.dialects.slurm.sbatch",
    "array_step": "phalanx.dialects.slurm.arrays",
    "build_request": "phalanx.dialects.slurm.sbatch",
    "evaluate": "phalanx.dialects.slurm.dependency",
    "expand_pattern": "phalanx.dialects.slurm.patterns",
    "format_memory_mb": "phalanx.dialects.slurm.memory",
    "options_from_env": "phalanx.dialects.slurm.options",
    "parse_array": "phalanx.dialects.slurm.arrays",
    "parse_begin": "phalanx.dialects.slurm.options",
    "parse_dependency": "phalanx.dialects.slurm.dependency",
    "parse_memory_mb": "phalanx.dialects.slurm.memory",
    "parse_sbatch_args": "phalanx.dialects.slurm.options",
    "parse_signal": "phalanx.dialects.slurm.options",
    "read_directives": "phalanx.dialects.slurm.script",
    "read_slurm_conf": "phalanx.dialects.slurm.slurmconf",
    "submission_dict": "phalanx.dialects.slurm.sbatch",
    "to_submission": "phalanx.dialects.slurm.sbatch",
}
"""Where each public name lives. Nothing is imported until it is used: ``srun``
(every job step) and ``sbatch`` import pieces of this package and must not pay
for the rest, least of all for the pydantic models ``slurmconf`` needs."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


if TYPE_CHECKING:
    from phalanx.dialects.slurm.arrays import MAX_ARRAY_SIZE, array_step, parse_array
    from phalanx.dialects.slurm.dependency import (
        Dependee,
        Dependency,
        DepTerm,
        evaluate,
        parse_dependency,
    )
    from phalanx.dialects.slurm.memory import format_memory_mb, parse_memory_mb
    from phalanx.dialects.slurm.options import (
        ExportSpec,
        GpuCount,
        GresSpec,
        SbatchOptions,
        options_from_env,
        parse_begin,
        parse_sbatch_args,
        parse_signal,
    )
    from phalanx.dialects.slurm.patterns import NO_VAL, PatternFields, expand_pattern
    from phalanx.dialects.slurm.sbatch import (
        FEATURE_LABEL,
        GPU_TYPE_LABEL,
        WRAP_HEADER,
        SbatchRequest,
        build_request,
        submission_dict,
        to_submission,
    )
    from phalanx.dialects.slurm.script import Directive, ScriptDirectives, read_directives
    from phalanx.dialects.slurm.slurmconf import PARTITION_LABEL, read_slurm_conf

__all__ = [
    "FEATURE_LABEL",
    "GPU_TYPE_LABEL",
    "MAX_ARRAY_SIZE",
    "NO_VAL",
    "PARTITION_LABEL",
    "WRAP_HEADER",
    "DepTerm",
    "Dependee",
    "Dependency",
    "Directive",
    "ExportSpec",
    "GpuCount",
    "GresSpec",
    "PatternFields",
    "SbatchOptions",
    "SbatchRequest",
    "ScriptDirectives",
    "array_step",
    "build_request",
    "evaluate",
    "expand_pattern",
    "format_memory_mb",
    "options_from_env",
    "parse_array",
    "parse_begin",
    "parse_dependency",
    "parse_memory_mb",
    "parse_sbatch_args",
    "parse_signal",
    "read_directives",
    "read_slurm_conf",
    "submission_dict",
    "to_submission",
]

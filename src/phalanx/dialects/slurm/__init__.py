"""The Slurm dialect: sbatch scripts and options, unchanged, as phalanx submissions.

* :func:`build_request` / :func:`to_submission` (``sbatch``): command line, ``#SBATCH``
  directives and ``SBATCH_*`` variables -> :class:`SbatchRequest` -> ``JobSubmission``;
* :func:`parse_sbatch_args` (``options``), :func:`read_directives` (``script``);
* :func:`parse_array`, :func:`parse_dependency` / :func:`evaluate`,
  :func:`expand_pattern`, :func:`parse_memory_mb`: the pieces the server reuses;
* :func:`read_slurm_conf`: ``slurm.conf`` -> Nodes, ResourceFlavors, ClusterQueues.

Every error is a :class:`phalanx.errors.Invalid` worded as sbatch words it.
"""

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
    "to_submission",
]

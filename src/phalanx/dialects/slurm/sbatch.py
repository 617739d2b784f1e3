"""sbatch end to end: options + script + ``SBATCH_*`` -> :class:`SbatchRequest` -> JobSubmission.

:func:`build_request` merges, as sbatch does, ``#SBATCH`` directives < ``SBATCH_*``
input environment variables < the command line, reads the script (a path, stdin
text, or ``--wrap``) and checks the combinations sbatch refuses.
:func:`to_submission` maps the request onto phalanx's model:

* ``--account`` -> ``tenant``, ``--partition`` -> ``clusterQueue`` (None: the
  server picks the default partition), ``--qos`` -> ``priorityClass``;
* one pod set ``main``. With ``--nodes N`` (or a per-node option: ``--ntasks-per-node``,
  ``--gpus-per-node``, ``--gres``) it is ``N`` node-sized pods (``tasksPerNode=1``)
  each asking for the node's share: GPUs ``--gpus-per-node`` (or ``--gres=gpu:N``,
  ``--gpus/N``, ``--gpus-per-task`` x tasks per node), CPUs ``--cpus-per-task`` x
  tasks per node, memory ``--mem`` (or ``--mem-per-cpu`` x CPUs, ``--mem-per-gpu`` x
  GPUs). Without, it is one pod per task (``--ntasks``, default 1);
* ``--constraint=a&b`` -> node selector ``slurm.phalanx.io/feature-<f>: "true"`` per
  feature; a GPU type (``--gpus-per-node=h100:8``) -> ``slurm.phalanx.io/gpu-type``;
  ``--nodelist`` -> the pod set's ``nodeNames``, ``--exclude`` -> ``excludeNodes``;
* output patterns stay unexpanded (the server expands ``%j``); the default is
  ``slurm-%j.out`` (``slurm-%A_%a.out`` for arrays);
* ``JobSubmission.slurm`` records what the user asked, for the ``SLURM_*`` environment:
  a :class:`~phalanx.model.SlurmRequest`, whose wire form :func:`_slurm_record` writes.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from phalanx.dialects.slurm.hostlists import BadHostlist, expand_hostlist
from phalanx.dialects.slurm.lint import script_warnings as lint_script
from phalanx.dialects.slurm.memory import MB
from phalanx.dialects.slurm.options import (
    SbatchOptions,
    options_from_env,
    parse_begin,
    parse_sbatch_groups,
)
from phalanx.dialects.slurm.script import MAX_SCRIPT_BYTES, check_script, read_directives
from phalanx.errors import Invalid

if TYPE_CHECKING:
    from phalanx.model.submission import JobSubmission

# The resource names (phalanx.model.quantity's), spelled here: importing the
# model package costs sbatch more than everything else it does.
CPU = "cpu"
GPU = "nvidia.com/gpu"
MEMORY = "memory"

__all__ = [
    "FEATURE_LABEL",
    "GPU_TYPE_LABEL",
    "WRAP_HEADER",
    "SbatchRequest",
    "build_request",
    "to_submission",
]

WRAP_HEADER = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n"
FEATURE_LABEL = "slurm.phalanx.io/feature-{}"
"""Node label (value ``"true"``) of a Slurm feature; ``--constraint`` selects on it."""
GPU_TYPE_LABEL = "slurm.phalanx.io/gpu-type"
"""Node label holding the node's GPU type (``gpu:h100:8`` -> ``h100``)."""
HOSTNAME_LABEL = "kubernetes.io/hostname"
_MEM_OPTIONS = ("mem", "mem_per_cpu", "mem_per_gpu")
MAX_HET_COMPONENTS = 18
"""The most components of a heterogeneous job (the model's, spelled here: importing the
model package costs sbatch more than everything else it does)."""
HET_POD_SET = "het-group-{}"
"""The name of a heterogeneous job component's pod set."""


@dataclass(frozen=True)
class SbatchRequest:
    """A parsed sbatch invocation: merged options, the script and its arguments."""

    options: SbatchOptions
    script: str | None
    """The batch script text (None only for ``--help`` / ``--usage`` / ``--version``)."""
    script_args: tuple[str, ...] = ()
    script_path: str | None = None
    """The script's path as given; None for stdin and ``--wrap``."""
    cwd: str = "/"
    user: str = ""
    submit_host: str = ""
    begin_time: float | None = None
    warnings: tuple[str, ...] = field(default=())
    components: tuple[SbatchOptions, ...] = ()
    """A heterogeneous job's components, each with its options as sbatch reads them
    (``options`` is the job's: the first component's); empty for an ordinary job."""


def _err(message: str) -> Invalid:
    return Invalid(f"sbatch: error: {message}")


def _read_script(path: str, cwd: str, env: Mapping[str, str]) -> tuple[str, str]:
    """The text of the script ``path`` (sbatch.1 SCRIPT PATH RESOLUTION) and its full path."""
    candidates = [posixpath.join(cwd, path)]
    if "/" not in path:
        candidates += [posixpath.join(d, path) for d in env.get("PATH", "").split(":") if d]
    for candidate in candidates:
        if os.path.isfile(candidate):
            try:
                # One byte more than the limit is enough to refuse it (check_script).
                with open(candidate, "rb") as f:
                    data = f.read(MAX_SCRIPT_BYTES + 1)
            except OSError as exc:
                raise _err(f"Unable to open file {path}: {exc.strerror}") from None
            return data.decode("utf-8", "surrogateescape"), candidate
    raise _err(f"Unable to open file {path}")


def _script_options(text: str, source: str, lenient: bool) -> tuple[list[SbatchOptions], list[str]]:
    """The ``#SBATCH`` options of each heterogeneous job component (one for an ordinary
    job) and the script's warnings."""
    from phalanx.dialects.slurm.options import OptionError, parse_words

    found = read_directives(text, source, lenient=lenient)
    parts: list[SbatchOptions] = []
    for component in range(found.components):
        pairs = found.words(component)
        words = [w for _, w in pairs]
        try:
            opts, rest = parse_words(words)
        except OptionError as exc:
            line = pairs[exc.index][0] if exc.index < len(pairs) else 0
            message = exc.message.removeprefix("error: ")
            raise _err(f"{source}: line {line}: {message}") from None
        if rest:
            line = pairs[len(words) - len(rest)][0]
            raise _err(f"{source}: line {line}: Invalid directive found in batch script: {rest[0]}")
        parts.append(opts)
    return parts, list(found.warnings)


def _layer_memory(layers: list[SbatchOptions]) -> list[SbatchOptions]:
    """``--mem``, ``--mem-per-cpu``, ``--mem-per-gpu``: exclusive within a layer; the
    highest layer that sets one of them wins and clears the others below."""
    from dataclasses import replace

    out: list[SbatchOptions] = []
    for layer in layers:
        given = [name for name in _MEM_OPTIONS if getattr(layer, name) is not None]
        if len(given) > 1:
            raise _err("--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.")
        out.append(layer)
        if given:
            out = [replace(lo, mem=None, mem_per_cpu=None, mem_per_gpu=None) for lo in out[:-1]]
            out.append(layer)
    return out


def build_request(
    argv: list[str],
    *,
    script_text: str | None,
    script_path: str | None,
    env: Mapping[str, str],
    cwd: str,
    now: float,
    user: str,
    lenient: bool = False,
    submit_host: str = "",
) -> SbatchRequest:
    """Parse an sbatch invocation.

    ``argv``: sbatch's arguments (no program name). Its first non-option word is the
    script path (read relative to ``cwd``, then ``$PATH``, unless ``script_text``
    already holds its text) and the rest are the script's arguments. When the caller
    has split the path off already it passes ``script_path`` and every non-option
    word of ``argv`` is a script argument. Without a path, ``script_text`` is the
    script read from standard input. ``env`` is the submitting environment (for
    ``SBATCH_*`` and ``--export``).
    """
    groups, rest = parse_sbatch_groups(argv)
    if any(g.help or g.usage or g.version for g in groups):
        first = next(g for g in groups if g.help or g.usage or g.version)
        return SbatchRequest(
            options=first, script=None, cwd=cwd, user=user, submit_host=submit_host
        )
    warnings: list[str] = []
    path = script_path
    args = list(rest)
    wrap = next((g.wrap for g in groups if g.wrap is not None), None)
    if path is None and args and wrap is None:
        path = args.pop(0)
    elif path is not None and args and args[0] == path and wrap is None:
        args.pop(0)  # the caller read the script but left its path among the words

    if wrap is not None:
        if args or path is not None:
            raise _err("Script arguments not permitted with --wrap option")
        text = f"{WRAP_HEADER}{wrap}\n"
        check_script(text, "--wrap")
        script_parts = [SbatchOptions()]
        source = "--wrap"
    else:
        if script_text is None:
            if path is None:
                raise _err("no batch script: give a script path, --wrap, or the script on stdin")
            script_text, _ = _read_script(path, cwd, env)
        text = script_text
        source = path if path is not None else "<stdin>"
        script_parts, script_warnings = _script_options(text, source, lenient)
        warnings += script_warnings

    env_opts = options_from_env(env)
    count = max(len(groups), len(script_parts))
    if count > MAX_HET_COMPONENTS:
        raise _err(
            f"a heterogeneous job of {count} components: phalanx runs at most "
            f"{MAX_HET_COMPONENTS} (one pod set each)"
        )
    components: list[SbatchOptions] = []
    for index in range(count):
        # sbatch reads each component from its part of the script, the SBATCH_*
        # variables and its group of the command line (the last group again when the
        # script has more components than the command line), over the options the
        # component before it propagates.
        base = _propagated(components[-1]) if components else SbatchOptions()
        script_opts = script_parts[index] if index < len(script_parts) else SbatchOptions()
        group = groups[min(index, len(groups) - 1)]
        own = [o for o in (script_opts, group) if o.mem_per_cpu or o.mem_per_gpu]
        if base.mem is not None and env_opts.mem is None and own:
            # sbatch counts the --mem a component inherits as given to it.
            raise _err(
                "--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive. "
                f"(heterogeneous job component {index} gives "
                f"--mem-per-{'cpu' if own[0].mem_per_cpu else 'gpu'} and inherits --mem from "
                f"component {index - 1}: give each component its own --mem instead)"
            )
        layers = _layer_memory([base, script_opts, env_opts, group])
        merged = SbatchOptions()
        for layer in layers:
            merged = layer.over(merged)
        where = f"component {index}: " if count > 1 else ""
        for name in merged.ignored:
            warnings.append(f"{where}{name}: accepted, but phalanx does not act on it")
        merged, more = _validate(merged)
        warnings += [f"{where}{w}" for w in more]
        components.append(merged)
    merged = components[0]
    if count > 1:
        merged = _het_leader(components)
        if merged.wrap is None and wrap is not None:
            # `sbatch -N1 : -N1 --wrap CMD`: the job is `wrap` all the same (Slurm 22.05).
            from dataclasses import replace

            merged = replace(merged, wrap=wrap)
    warnings += lint_script(text, merged, source)
    begin = parse_begin(merged.begin, now) if merged.begin is not None else None
    return SbatchRequest(
        options=merged,
        script=text,
        script_args=tuple(args),
        script_path=path,
        cwd=cwd,
        user=user,
        submit_host=submit_host,
        begin_time=begin,
        warnings=tuple(warnings),
        components=tuple(components) if count > 1 else (),
    )


# ---------------------------------------------------------------- heterogeneous jobs

_OWN_OPTIONS = (
    "nodes",
    "ntasks",
    "ntasks_per_node",
    "cpus_per_task",
    "gpus",
    "gpus_per_node",
    "gpus_per_task",
    "gres",
    "mem_per_gpu",
    "mem_per_cpu",
    "partition",
    "exclusive",
    "constraint",
    "nodelist",
    "switches",
    "mail_type",
    "mail_user",
)
"""The options sbatch resets for each heterogeneous job component (``reset_each_pass``
in Slurm's option table): a component has its own or none. The others propagate to the
components after the one that gives them (``--mem`` and ``--exclude`` among them)."""

_ONE_PER_JOB = (
    ("job_name", "--job-name"),
    ("account", "--account"),
    ("qos", "--qos"),
    ("time", "--time"),
    ("dependency", "--dependency"),
    ("begin", "--begin"),
    ("hold", "--hold"),
    ("requeue", "--requeue"),
    ("signal", "--signal"),
    ("nice", "--nice"),
    ("comment", "--comment"),
    ("export", "--export"),
    ("chdir", "--chdir"),
    ("kill_on_invalid_dep", "--kill-on-invalid-dep"),
    ("container", "--container-*"),
)
"""Options a Slurm component has of its own but a phalanx job has once (one job, one
time limit, one tenant, ...): the components after the first may repeat them (they
propagate) but not change them. ``--output``, ``--error``, ``--open-mode`` and mail are
the first component's, where the batch script runs, as in Slurm."""

_CLIENT_FLAGS = ("wait", "test_only", "parsable", "quiet", "verbose")


def _propagated(options: SbatchOptions) -> SbatchOptions:
    """What a heterogeneous job component passes on to the next one."""
    from dataclasses import replace

    cleared: dict[str, Any] = {**dict.fromkeys(_OWN_OPTIONS), "ignored": ()}
    return replace(options, **cleared)


def _het_leader(components: list[SbatchOptions]) -> SbatchOptions:
    """The job's options for a heterogeneous job: the first component's, with sbatch's own
    flags (``--parsable``, ``--wait``, ...) from any component; refuses an array and job
    options that differ between components."""
    from dataclasses import replace

    if any(c.array is not None for c in components):
        raise _err(
            "Batch job submission failed: Invalid job array specification "
            "(--array: a heterogeneous job cannot be a job array, as in Slurm)"
        )
    first = components[0]
    for index, other in enumerate(components[1:], start=1):
        for name, option in _ONE_PER_JOB:
            if getattr(other, name) != getattr(first, name):
                raise _err(
                    f"{option} differs between heterogeneous job components 0 and {index}: "
                    f"phalanx schedules the components as one job, with one {option}; give "
                    "it once, in the first component (it propagates to the others)"
                )
    partitions = sorted({c.partition for c in components if c.partition is not None})
    if len(partitions) > 1:
        raise _err(
            f"--partition: heterogeneous job components in different partitions "
            f"({', '.join(partitions)}) are not supported by phalanx yet; give every "
            "component the same --partition"
        )
    flags: dict[str, Any] = {
        name: next((getattr(c, name) for c in reversed(components) if getattr(c, name)), None)
        for name in _CLIENT_FLAGS
    }
    return replace(first, **flags)


def _gres_gpus(o: SbatchOptions) -> tuple[int, str | None] | None:
    for g in o.gres or ():
        if g.name == "gpu":
            return g.count, g.type
    return None


def _validate(o: SbatchOptions) -> tuple[SbatchOptions, list[str]]:
    from dataclasses import replace

    warnings: list[str] = []
    other = [g.name for g in o.gres or () if g.name != "gpu"]
    if other:
        raise _err(f"--gres={','.join(other)}: only gpu generic resources are supported yet")
    if o.gpus_per_node is not None and _gres_gpus(o) is not None:
        raise _err("--gpus-per-node is mutually exclusive with --gres=gpu")
    if o.gpus_per_task is not None and o.ntasks is None and o.ntasks_per_node is None:
        raise _err(
            "--gpus-per-task requires an explicit task count: --ntasks, or --nodes with "
            "--ntasks-per-node"
        )
    if o.nodes is not None and o.ntasks is not None and o.nodes[0] > o.ntasks:
        warnings.append(
            f"Warning: can't run {o.ntasks} processes on {o.nodes[0]} nodes, setting nnodes "
            f"to {o.ntasks}"
        )
        o = replace(o, nodes=(o.ntasks, max(o.ntasks, min(o.nodes[1], o.ntasks))))
    if o.nodes is not None and o.nodes[0] != o.nodes[1]:
        warnings.append(
            f"--nodes={o.nodes[0]}-{o.nodes[1]}: phalanx allocates the minimum, {o.nodes[0]} nodes"
        )
    if o.mem == 0:
        warnings.append(
            "--mem=0 (all of each node's memory): the job requests no memory; use --exclusive "
            "to get whole nodes"
        )
    for name, value in (("--partition", o.partition), ("--qos", o.qos)):
        if value is not None and "," in value:
            raise _err(f"{name}={value}: a list is not supported yet; give one")
    return o, warnings


# ---------------------------------------------------------------- to_submission


def _node_selector(o: SbatchOptions, gpu_type: str | None) -> dict[str, str]:
    selector: dict[str, str] = {}
    if o.constraint is not None:
        features = o.constraint.split("&")
        for feature in features:
            if not re.fullmatch(r"[A-Za-z0-9_.\-]+", feature):
                raise _err(
                    f"--constraint={o.constraint}: only single features and a&b are supported; "
                    "OR (|), counts (*N), brackets and parentheses are not supported"
                )
            selector[FEATURE_LABEL.format(feature)] = "true"
    if gpu_type is not None:
        selector[GPU_TYPE_LABEL] = gpu_type
    return selector


def _hosts(option: str, value: str) -> list[str]:
    if "/" in value:
        raise _err(f"--{option}={value}: a node list file is not supported yet")
    try:
        return sorted(set(expand_hostlist(value)))
    except BadHostlist as exc:
        raise _err(f"--{option}={value}: invalid hostlist ({exc.detail})") from None


def _node_lists(o: SbatchOptions, units: int, per_node: bool) -> dict[str, Any]:
    """``--nodelist`` (the job gets exactly these nodes) and ``--exclude`` as pod set fields.

    Slurm's ``--nodelist`` means the allocation contains every listed node (and
    maybe more); phalanx places on exactly the listed ones, so the list must
    name as many nodes as the job has (one per node-sized unit).
    """
    fields: dict[str, Any] = {}
    if o.exclude is not None:
        fields["exclude_nodes"] = _hosts("exclude", o.exclude)
    if o.nodelist is not None:
        nodes = _hosts("nodelist", o.nodelist)
        if per_node and len(nodes) != units:
            raise _err(
                f"--nodelist={o.nodelist}: names {len(nodes)} node(s) for a {units}-node job; "
                "phalanx places a job on exactly the listed nodes (give --nodes to match, "
                "or use --constraint)"
            )
        both = sorted(set(nodes) & set(fields.get("exclude_nodes", ())))
        if both:
            raise _err(
                "Batch job submission failed: Requested node configuration is not available "
                f"(--nodelist and --exclude both name {both[0]})"
            )
        fields["node_names"] = nodes
    return fields


MAX_SWITCH_WAIT_S = 300
"""How long ``--switches=N`` without ``@max-time`` waits (Slurm's ``max_switch_wait``)."""


def _pod_set(o: SbatchOptions) -> tuple[dict[str, Any], str | None]:
    cpt = o.cpus_per_task or 1
    gres = _gres_gpus(o)
    gpu_type = next(
        (g.type for g in (o.gpus_per_node, o.gpus, o.gpus_per_task) if g is not None and g.type),
        gres[1] if gres else None,
    )
    per_node = (
        o.nodes is not None
        or o.ntasks_per_node is not None
        or o.gpus_per_node is not None
        or gres is not None
    )
    requests: dict[str, Any] = {}
    if per_node:
        if o.nodes is not None:
            n = o.nodes[0]
        elif o.ntasks is not None and o.ntasks_per_node is not None:
            n = -(-o.ntasks // o.ntasks_per_node)
        else:
            n = 1
        if o.ntasks is not None:
            tpn = -(-o.ntasks // n)
            if o.ntasks_per_node is not None and tpn > o.ntasks_per_node:
                raise _err(
                    "Batch job submission failed: Requested node configuration is not available "
                    f"({o.ntasks} tasks do not fit {n} nodes x {o.ntasks_per_node} tasks per node)"
                )
        else:
            tpn = o.ntasks_per_node or 1
        gpus = 0
        if o.gpus_per_node is not None:
            gpus = o.gpus_per_node.count
        elif gres is not None:
            gpus = gres[0]
        elif o.gpus is not None:
            if o.gpus.count % n:
                raise _err(
                    f"--gpus={o.gpus.count} cannot be divided evenly over {n} nodes; use "
                    "--gpus-per-node"
                )
            gpus = o.gpus.count // n
        elif o.gpus_per_task is not None:
            gpus = o.gpus_per_task.count * tpn
        cpus = cpt * tpn
        count, tasks_per_node = n, 1
    else:
        count = o.ntasks or 1
        tasks_per_node = None
        gpus = 0
        if o.gpus_per_task is not None:
            gpus = o.gpus_per_task.count
        elif o.gpus is not None:
            if o.gpus.count % count:
                raise _err(
                    f"--gpus={o.gpus.count} cannot be divided evenly over {count} tasks; use "
                    "--gpus-per-task"
                )
            gpus = o.gpus.count // count
        cpus = cpt
    if gpus:
        requests[GPU] = gpus
    requests[CPU] = str(cpus)
    memory_mb: int | None = None
    if o.mem:
        memory_mb = o.mem if per_node else -(-o.mem // count)
    elif o.mem_per_cpu is not None:
        memory_mb = o.mem_per_cpu * cpus
    elif o.mem_per_gpu is not None:
        if not gpus:
            raise _err("--mem-per-gpu needs GPUs (--gpus, --gpus-per-node, --gpus-per-task)")
        memory_mb = o.mem_per_gpu * gpus
    if memory_mb:
        requests[MEMORY] = memory_mb * MB
    pod_set: dict[str, Any] = {
        "name": "main",
        "count": count,
        "requests": requests,
        "nodeSelector": _node_selector(o, gpu_type),
        "exclusive": o.exclusive is not None,
    }
    if tasks_per_node is not None:
        pod_set["tasksPerNode"] = tasks_per_node
    lists = _node_lists(o, count, per_node)
    if "node_names" in lists:
        pod_set["nodeNames"] = lists["node_names"]
    if "exclude_nodes" in lists:
        pod_set["excludeNodes"] = lists["exclude_nodes"]
    if o.switches is not None and o.switches[0] > 0:
        switches, wait = o.switches
        pod_set["topology"] = {
            "switches": switches,
            "waitS": MAX_SWITCH_WAIT_S if wait is None else wait,
        }
    return pod_set, gpu_type


def _exported_env(o: SbatchOptions, env: Mapping[str, str]) -> dict[str, str]:
    spec = o.export
    if spec is None:
        return dict(env)
    out = dict(env) if spec.all else {}
    for name, value in spec.variables:
        if value is not None:
            out[name] = value
        elif name in env:
            out[name] = env[name]
    return out


def _component_record(o: SbatchOptions, gpu_type: str | None) -> dict[str, Any]:
    """The options of :class:`~phalanx.model.SlurmComponent` (a component's own) in their
    wire form, unset ones as None, in :class:`~phalanx.model.SlurmRequest`'s order."""
    return {
        "nodes": o.nodes[0] if o.nodes else None,
        "nodesMax": o.nodes[1] if o.nodes and o.nodes[1] != o.nodes[0] else None,
        "ntasks": o.ntasks,
        "ntasksPerNode": o.ntasks_per_node,
        "cpusPerTask": o.cpus_per_task,
        "gpus": o.gpus.count if o.gpus else None,
        "gpusPerNode": (
            o.gpus_per_node.count
            if o.gpus_per_node
            else (g[0] if (g := _gres_gpus(o)) is not None else None)
        ),
        "gpusPerTask": o.gpus_per_task.count if o.gpus_per_task else None,
        "gpuType": gpu_type,
        "gres": ",".join(
            ":".join([g.name, *([g.type] if g.type else []), str(g.count)]) for g in o.gres
        )
        if o.gres
        else None,
        "memPerNodeMb": o.mem,
        "memPerCpuMb": o.mem_per_cpu,
        "memPerGpuMb": o.mem_per_gpu,
        "exclusive": o.exclusive,
        "partition": o.partition,
        "switches": (
            {"count": o.switches[0], "waitSeconds": o.switches[1]} if o.switches else None
        ),
        "constraint": o.constraint,
        "nodelist": o.nodelist,
    }


def _slurm_record(req: SbatchRequest, name: str, gpu_types: list[str | None]) -> dict[str, Any]:
    """The wire form of :class:`~phalanx.model.SlurmRequest` (camelCase keys in its field
    order, unset options left out): the stored form, which ``to_dict()`` gives back.

    ``gpu_types``: each component's GPU type (one for an ordinary job)."""
    o = req.options
    record: dict[str, Any] = {
        "jobName": name,
        "submitDir": req.cwd,
        "submitHost": req.submit_host,
    }
    own = _component_record(req.components[0] if req.components else o, gpu_types[0])
    values: dict[str, Any] = {
        **{k: own[k] for k in list(own)[: list(own).index("partition") + 1]},
        "account": o.account,
        "qos": o.qos,
        "export": o.export.text if o.export else None,
        "switches": own["switches"],
        "killOnInvalidDep": o.kill_on_invalid_dep,
        "constraint": own["constraint"],
        "container": [list(pair) for pair in o.container] if o.container else None,
        "nodelist": own["nodelist"],
        "arrayStep": None,
    }
    if o.array is not None:
        from phalanx.dialects.slurm.arrays import array_step

        values["arrayStep"] = array_step(o.array.text)
    record.update({k: v for k, v in values.items() if v is not None})
    if req.components:
        record["components"] = [
            {k: v for k, v in _component_record(c, t).items() if v is not None}
            for c, t in zip(req.components, gpu_types, strict=True)
        ]
    return record


def _het_pod_sets(req: SbatchRequest) -> tuple[list[dict[str, Any]], list[str | None]]:
    """A heterogeneous job's pod sets, one per component (``het-group-N``), and their GPU
    types. As slurmctld does, the nodes a component's ``--nodelist`` names are excluded
    from every other component (each node it requires is its own)."""
    pod_sets: list[dict[str, Any]] = []
    gpu_types: list[str | None] = []
    for index, component in enumerate(req.components):
        pod_set, gpu_type = _pod_set(component)
        pod_set["name"] = HET_POD_SET.format(index)
        pod_sets.append(pod_set)
        gpu_types.append(gpu_type)
    for index, pod_set in enumerate(pod_sets):
        required = pod_set.get("nodeNames") or []
        for other, target in enumerate(pod_sets):
            if other == index or not required:
                continue
            clash = sorted(set(required) & set(target.get("nodeNames") or []))
            if clash:
                raise _err(
                    "Batch job submission failed: Requested node configuration is not "
                    f"available (--nodelist of heterogeneous job components {index} and "
                    f"{other} both name {clash[0]}; each component's nodes are its own)"
                )
            excluded = set(target.get("excludeNodes") or []) | set(required)
            target["excludeNodes"] = sorted(excluded)
    return pod_sets, gpu_types


def submission_dict(req: SbatchRequest, *, env: Mapping[str, str]) -> dict[str, Any]:
    """The job submission for ``req`` in its wire form (what the API takes).

    Built without the pydantic models, so that ``phalanx sbatch`` starts fast;
    :func:`to_submission` validates it into a :class:`~phalanx.model.JobSubmission`.
    """
    o = req.options
    if req.script is None:
        raise _err("nothing to submit (--help, --usage or --version)")
    if o.job_name:
        name = o.job_name
    elif o.wrap is not None:
        name = "wrap"
    elif req.script_path is not None:
        name = posixpath.basename(req.script_path)
    else:
        name = "sbatch"
    if req.components:
        pod_sets, gpu_types = _het_pod_sets(req)
    else:
        pod_set, gpu_type = _pod_set(o)
        pod_sets, gpu_types = [pod_set], [gpu_type]
    partition = next((c.partition for c in req.components if c.partition), o.partition)
    workdir = posixpath.normpath(posixpath.join(req.cwd, o.chdir)) if o.chdir else req.cwd
    output = o.output or ("slurm-%A_%a.out" if o.array is not None else "slurm-%j.out")
    run: dict[str, Any] = {
        "script": req.script,
        "command": list(req.script_args),
        "workingDir": workdir,
        "env": _exported_env(o, env),
        "timeLimit": o.time or None,
        "output": output,
        "error": o.error,
        "openMode": o.open_mode or "truncate",
        "signal": o.signal.to_dict() if o.signal is not None else None,
    }
    mail = {k: v for k, v in (("type", o.mail_type), ("user", o.mail_user)) if v}
    data: dict[str, Any] = {
        "name": name,
        "tenant": o.account,
        "user": req.user or None,
        "clusterQueue": partition,
        "priorityClass": o.qos,
        "podSets": pod_sets,
        "run": {k: v for k, v in run.items() if v is not None},
        "array": o.array.to_dict() if o.array is not None else None,
        "dependency": o.dependency.format() if o.dependency else None,
        "beginTime": req.begin_time,
        "hold": bool(o.hold),
        "requeue": bool(o.requeue),
        "requeueExpedite": True if o.requeue == "expedite" else None,
        "noRequeue": True if o.requeue is False else None,
        "nice": o.nice or 0,
        "comment": o.comment or "",
        "mail": mail,
        "slurm": _slurm_record(req, name, gpu_types),
    }
    return {k: v for k, v in data.items() if v is not None}


def to_submission(req: SbatchRequest, *, env: Mapping[str, str]) -> JobSubmission:
    """The validated :class:`~phalanx.model.JobSubmission` for ``req``."""
    from pydantic import ValidationError

    from phalanx.model.submission import JobSubmission

    data = submission_dict(req, env=env)
    try:
        return JobSubmission.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(str(part) for part in first["loc"])
        where = _OPTION_OF.get(loc) or ".".join(loc)
        if loc == ("name",) and not req.options.job_name:
            where = "job name (the script's file name; set one with --job-name)"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise _err(f"Batch job submission failed: {where}: {message}") from None


_OPTION_OF: dict[tuple[str, ...], str] = {
    ("name",): "--job-name",
    ("tenant",): "--account",
    ("clusterQueue",): "--partition",
    ("priorityClass",): "--qos",
    ("comment",): "--comment",
    ("nice",): "--nice",
    ("beginTime",): "--begin",
    ("mail", "type"): "--mail-type",
    ("mail", "user"): "--mail-user",
    ("run", "workingDir"): "--chdir",
    ("run", "output"): "--output",
    ("run", "error"): "--error",
    ("run", "timeLimit"): "--time",
    ("run", "openMode"): "--open-mode",
}
"""The sbatch option behind a submission field, for errors that name what to change."""

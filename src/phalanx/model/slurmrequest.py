"""What an sbatch user asked for, kept with the job: :class:`SlurmRequest`.

``JobSubmission.slurm`` is a :class:`SlurmRequest` for a job that came in as a
batch script, ``None`` for any other. The scheduling part of the request has
already been turned into pod sets; this record keeps the options as given
(``--ntasks``, ``--cpus-per-task``, ``--gpus-per-node``, ...), from which the
control plane makes the job's Slurm context (and so its ``SLURM_*`` environment)
and the API shows the job's requested sizes.

Where it lives: here, in ``model``, next to :class:`~phalanx.model.JobSubmission`
that holds it, because ``model`` imports no other phalanx package (``dialects``
imports ``model``, never the reverse). ``dialects/slurm/sbatch.py`` produces it:
it writes the wire form (camelCase keys, without the unset options) and
:func:`~phalanx.dialects.slurm.sbatch.to_submission` validates it into this
model. Everything outside the dialects reads its attributes.

The wire form is what the store and the API have always kept under ``slurm``:
``to_dict()`` (``by_alias=True, exclude_none=True``) gives back the same keys in
the same order as the dict ``sbatch`` writes; as there, ``switches`` keeps its
``waitSeconds`` key when it is ``null`` (``--switches`` without a wait time).

A heterogeneous job (``#SBATCH hetjob``, ``sbatch ... : ...``) has one pod set per
component and a :class:`SlurmComponent` per component in ``components`` (component 0
first). Its top-level options are the leader's, component 0's: what Slurm sets in the
plain ``SLURM_*`` names of the batch script, so everything that reads them reads the
component the script runs in. Records without ``components`` (every job before
heterogeneous jobs, and every ordinary job) are one component: :meth:`SlurmRequest.parts`
gives both the same shape.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializationInfo, SerializerFunctionWrapHandler, model_serializer

from phalanx.model.base import PhalanxModel

__all__ = ["MAX_HET_COMPONENTS", "SlurmComponent", "SlurmRequest", "SlurmSwitches"]

MAX_HET_COMPONENTS = 18
"""The most components a heterogeneous job has in phalanx: one pod set each, and a job has
at most 18 pod sets (Slurm allows 128)."""


class SlurmSwitches(PhalanxModel):
    """``--switches=count[@max-time]``: at most ``count`` leaf switches, waiting up to
    ``wait_seconds`` for them (``None``: the option gave no wait time)."""

    count: int
    wait_seconds: int | None = None

    @model_serializer(mode="wrap")
    def _keep_wait(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        # ``waitSeconds: null`` is part of the stored form: exclude_none must not drop it.
        out: dict[str, Any] = handler(self)
        out.setdefault("waitSeconds" if info.by_alias else "wait_seconds", self.wait_seconds)
        return out


class SlurmComponent(PhalanxModel):
    """The options of one component of a heterogeneous job: what it asks for and where.

    The options that are a component's own in Slurm (the ones sbatch resets for each
    component: sizes, GPUs, memory, ``--partition``, ``--exclusive``, ``--constraint``,
    ``--nodelist``, ``--switches``); the fields mean what :class:`SlurmRequest`'s of the
    same names mean. The options of the whole job (account, QOS, time limit,
    dependency, output, ...) are :class:`SlurmRequest`'s.
    """

    nodes: int | None = None
    nodes_max: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gpus: int | None = None
    gpus_per_node: int | None = None
    gpus_per_task: int | None = None
    gpu_type: str | None = None
    gres: str | None = None
    mem_per_node_mb: int | None = None
    mem_per_cpu_mb: int | None = None
    mem_per_gpu_mb: int | None = None
    exclusive: str | None = None
    partition: str | None = None
    switches: SlurmSwitches | None = None
    constraint: str | None = None
    nodelist: str | None = None


COMPONENT_FIELDS = tuple(SlurmComponent.model_fields)
"""The options each component of a heterogeneous job has of its own."""


class SlurmRequest(PhalanxModel):
    """The sbatch options of a batch job, as the user gave them (``None``: not given).

    The fields are in the order ``sbatch`` writes them (which is the order of the
    stored JSON).
    """

    job_name: str | None = None
    """The job's name (``--job-name``, else the script's file name, ``wrap`` or ``sbatch``)."""
    submit_dir: str | None = None
    """The directory sbatch ran in (``SLURM_SUBMIT_DIR``)."""
    submit_host: str | None = None
    """The host sbatch ran on (``SLURM_SUBMIT_HOST``)."""
    nodes: int | None = None
    """``--nodes``: the minimum node count."""
    nodes_max: int | None = None
    """``--nodes=min-max``: the maximum, when it differs from the minimum."""
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gpus: int | None = None
    """``--gpus``: GPUs for the whole job."""
    gpus_per_node: int | None = None
    """``--gpus-per-node``, or the count of ``--gres=gpu[:type]:N``."""
    gpus_per_task: int | None = None
    gpu_type: str | None = None
    """The GPU type of the GPU option (``h100`` in ``--gpus-per-node=h100:8``)."""
    gres: str | None = None
    """``--gres`` as ``name[:type]:count`` items joined by commas."""
    mem_per_node_mb: int | None = None
    """``--mem`` in MB; ``mem_per_cpu_mb`` may also come from the partition's DefMemPerCPU."""
    mem_per_cpu_mb: int | None = None
    mem_per_gpu_mb: int | None = None
    exclusive: str | None = None
    """``node`` for a plain ``--exclusive``, else ``user``, ``mcs`` or ``topo``."""
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    export: str | None = None
    """``--export`` as written."""
    switches: SlurmSwitches | None = None
    kill_on_invalid_dep: bool | None = None
    """``--kill-on-invalid-dep=yes|no``."""
    constraint: str | None = None
    container: list[tuple[str, str | None]] | None = None
    """pyxis' options given to sbatch (``--container-image``, ...): the batch script
    runs in the image."""
    nodelist: str | None = None
    array_step: int | None = None
    """For a job array: ``SLURM_ARRAY_TASK_STEP`` (the step of ``--array``, else 1)."""
    allocation: str | None = None
    """A job without a batch script: ``srun`` (made by srun for its step), ``salloc``
    (a salloc shell's), ``noshell`` (``salloc --no-shell``)."""
    components: list[SlurmComponent] | None = Field(
        default=None, min_length=2, max_length=MAX_HET_COMPONENTS
    )
    """A heterogeneous job's components, in order (component 0 repeats the top-level
    options); ``None`` for an ordinary job."""

    @property
    def heterogeneous(self) -> bool:
        """Whether the job is a heterogeneous job (several components)."""
        return self.components is not None

    def parts(self) -> list[SlurmComponent]:
        """Every component's options: ``components``, or the job's own options as its
        one component."""
        if self.components is not None:
            return list(self.components)
        return [SlurmComponent(**{name: getattr(self, name) for name in COMPONENT_FIELDS})]

    def with_part(self, index: int, **changes: Any) -> SlurmRequest:
        """This request with ``changes`` to component ``index`` (and to the top-level
        options too when it is component 0, the leader)."""
        update: dict[str, Any] = dict(changes) if index == 0 else {}
        if self.components is not None:
            parts = list(self.components)
            parts[index] = parts[index].model_copy(update=changes)
            update["components"] = parts
        return self.model_copy(update=update)
